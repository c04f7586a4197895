"""``allot bench`` subcommands: one module each, exporting ``register(subparsers)``."""
