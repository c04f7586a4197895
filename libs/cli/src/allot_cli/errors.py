"""Errors the CLI reports as one clear line (no traceback)."""


class UsageError(Exception):
    """Something the user can fix: a bad flag, a missing file, a stack that is not running."""
