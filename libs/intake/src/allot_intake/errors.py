"""Errors a user can fix, which every Allot command reports as one clear line (no traceback).

Exit codes follow kubectl: 1 when input is refused (a file that cannot be read, invalid YAML or config, a document
admission refuses, an unknown kind, an invalid label selector, a name that is not in the log) or an operation fails;
2 for a command line that cannot be understood (argparse's own code, and flags that contradict each other).
"""


class UsageError(Exception):
    """Something the user can fix: a bad flag, a missing file, a stack that is not running. Exit code 2."""

    exit_code = 2


class InputError(UsageError):
    """Input that is refused: unreadable files, invalid YAML or config, documents admission refuses, unknown kinds,
    invalid label selectors, names not found. Exit code 1."""

    exit_code = 1
