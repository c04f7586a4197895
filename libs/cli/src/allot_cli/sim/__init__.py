"""``allot sim`` subcommands: one module each, exporting ``register(subparsers)``."""
