"""Errors the CLI reports as one clear line (no traceback).

Exit codes follow kubectl: 1 when input is refused (a file that cannot be read, invalid YAML, a document admission
refuses) or an operation fails; 2 for a command line that cannot be understood (argparse's own code).
"""


class UsageError(Exception):
    """Something the user can fix: a bad flag, a missing file, a stack that is not running. Exit code 2."""

    exit_code = 2


class InputError(UsageError):
    """Input that is refused: unreadable files, invalid YAML, documents admission refuses. Exit code 1."""

    exit_code = 1
