"""Subcommands of ``allot``.

Every module in this package exports ``register(subparsers)``, which adds one top-level subcommand (or several)
to the parser and sets ``func`` on it: ``func(args) -> int`` returns the process exit code. Modules are discovered
in name order, so adding a command means adding a module; nothing else needs editing.
"""
