"""Numeric flag values (``type=`` of an argparse option), for the CLI and every process's own command line; and
that command line itself, for a server process that is an ``allot`` subcommand too (:func:`process_parser`).

Each takes the text as typed and returns the number, or refuses it with argparse's usage error naming the flag, the
value and what it must be ("argument --port: must be a port from 1 to 65535, not '99999'"): a bad value never
reaches the code as a negative count, an empty benchmark or a socket error. Whole numbers take ASCII digits only (no
sign, no spaces, no other scripts' digits), so ``-5`` and ``+5`` are refused like ``abc``. Numbers of seconds and
factors take a decimal number, finite and above zero. A string default is converted (and checked) the same way.

Every whole number has a largest value too, so that nothing past it reaches PostgreSQL's ``bigint`` (log positions)
or a list sized by it: :data:`INT64_MAX` unless the flag says less (:func:`processes`). The text of a refused value
is repeated cut (:func:`allot_contracts.clipping.clipped`), so a 5,000-digit number is not echoed whole.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# the largest log position PostgreSQL stores (bigint), and the largest count a flag takes
INT64_MAX = 2**63 - 1
MAX_PROCESSES = 1024  # processes a command starts at once (--jobs)
# objects or events a benchmark or simulation builds (each held in memory), or runs it makes
MAX_SIZE = 10_000_000
MAX_FACTOR = 100.0  # a multiple (--tune: the arrived load as a multiple of capacity)


def clipped(text: str) -> str:
    """``text`` as a refusal repeats it (cut when long), imported when a value is refused: a command line that is
    read without a mistake loads none of the contracts (``allot status`` starts in a moment)."""
    from allot_contracts.clipping import clipped as cut

    return cut(text)


def _whole(text: str, *, least: int, most: int | None = None, what: str) -> int:
    """``text`` as an int from ``least`` to ``most`` (``what`` says both), or to :data:`INT64_MAX` when ``most`` is
    None; else the usage error "must be ``what``, not 'text'"."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be {what}, not {clipped(text)}")
    bound = INT64_MAX if most is None else most
    digits = text.lstrip("0") or "0"
    value = int(digits) if len(digits) <= len(str(bound)) else bound + 1  # no int() of thousands of digits
    if value > bound and most is None:
        raise argparse.ArgumentTypeError(f"must be {what} and at most {INT64_MAX}, not {clipped(text)}")
    if not least <= value <= bound:
        raise argparse.ArgumentTypeError(f"must be {what}, not {clipped(text)}")
    return value


def log_position(text: str) -> int:
    """A position in the event log: 1 or more."""
    return _whole(text, least=1, what="a log position ≥ 1")


def after_position(text: str) -> int:
    """A position to read after: 0 (the start of the log) or more."""
    return _whole(text, least=0, what="a log position ≥ 0")


def event_count(text: str) -> int:
    """A number of events: 0 or more."""
    return _whole(text, least=0, what="a number of events ≥ 0")


def positive(text: str) -> int:
    """A whole number ≥ 1 (a count of runs, pods or processes, a last position, a segment's size)."""
    return _whole(text, least=1, what="a positive whole number")


def whole_number(text: str) -> int:
    """A whole number ≥ 0 (a seed; a limit where 0 means none)."""
    return _whole(text, least=0, what="a whole number ≥ 0")


def percent(text: str) -> int:
    """A whole percentage from 1 to 100."""
    return _whole(text, least=1, most=100, what="a whole percentage from 1 to 100")


def size(text: str) -> int:
    """How many objects or events a benchmark builds, or runs it makes: 1 to :data:`MAX_SIZE`."""
    return _whole(text, least=1, most=MAX_SIZE, what=f"a whole number from 1 to {MAX_SIZE}")


def replicas(text: str) -> int:
    """How many objects to replicate a list to: 0 (the list as read) to :data:`MAX_SIZE`."""
    return _whole(text, least=0, most=MAX_SIZE, what=f"a whole number from 0 to {MAX_SIZE}")


def sizes(text: str) -> list[int]:
    """A comma-separated list of :func:`size` values (``300000,1000000``), none empty."""
    out = []
    for part in text.split(","):
        try:
            out.append(size(part))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{clipped(text)}: each comma-separated size {exc}") from None
    return out


def processes(text: str) -> int:
    """A number of processes to run at once: 1 to :data:`MAX_PROCESSES`."""
    return _whole(text, least=1, most=MAX_PROCESSES, what=f"a number of processes from 1 to {MAX_PROCESSES}")


def port(text: str) -> int:
    """A TCP port to listen on: 1 to 65535."""
    return _whole(text, least=1, most=65535, what="a port from 1 to 65535")


def _above_zero(text: str, what: str, most: float = math.inf) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= most):
        raise argparse.ArgumentTypeError(f"must be {what}, not {clipped(text)}")
    return value


def seconds(text: str) -> float:
    """A number of seconds above zero (a timeout, an interval, a duration)."""
    return _above_zero(text, "a number of seconds above 0")


def factor(text: str) -> float:
    """A multiple above zero, at most :data:`MAX_FACTOR` (``1.3``: 130 %)."""
    return _above_zero(text, f"a number above 0 and at most {MAX_FACTOR:g}", MAX_FACTOR)


def process_parser(
    prog: str, description: str, add_arguments: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """The command line of a server process (``allot-webhook``): ``prog`` with the flags ``add_arguments`` gives it
    and its ``allot`` subcommand alike."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    return parser
