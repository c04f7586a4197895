"""Paths given on the command line: names checked as argparse types, outputs readied and written with one error line
on failure.

:func:`file_name`, :func:`path` and :func:`directory` are ``type=`` of an option: an empty name, a NUL byte or a
directory that is not one is a usage error naming the option before any work starts. :func:`prepare_output` readies
an output path before any work and :func:`write_lines` writes an output file; both turn any OS error (no such
directory, a directory given as the file, a full disk, no permission) into an
:class:`~allot_intake.errors.InputError` naming the option and the path, never a traceback; :func:`check_output`
checks an output its command creates itself later (``allot up --state-dir``). No directory above an
output is ever created: a missing one is refused (``--out /tmp/nope/x/file``), so a mistyped path makes nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from allot_intake.errors import InputError

__all__ = ["check_output", "directory", "file_name", "path", "prepare_output", "write_lines"]


def file_name(text: str) -> str:
    """A path to read or write: not empty, no NUL byte."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"must be a file name, not {text!r}")
    return text


def path(text: str) -> Path:
    """A :func:`file_name` as a :class:`~pathlib.Path` (``Path("")`` would be the current directory)."""
    return Path(file_name(text))


def directory(text: str) -> str:
    """An existing directory to read from."""
    path = Path(file_name(text))
    if not path.is_dir():
        reason = "is not a directory" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {reason} (a directory to read)")
    return text


def prepare_output(path: Path, *, flag: str, directory: bool = False) -> None:
    """Ready ``path`` (given as ``flag``) to be written before any work starts: the directory it goes in must exist
    (it is never created, nor any above it: a mistyped path is refused, not made); with ``directory``, ``path`` is
    that directory and is created when missing, in a parent that exists. An error naming the flag when the directory
    is missing or cannot be created, or ``path`` is a directory where a file is to be written."""
    check_output(path, flag=flag, directory=directory)
    where = path.parent
    try:
        (path if directory else where).mkdir(exist_ok=True)
    except OSError as exc:
        what = "it" if directory else f"its directory {where}"
        raise InputError(f"{flag} {path}: cannot create {what}: {exc.strerror or exc}") from exc
    if not directory and path.is_dir():
        raise InputError(f"{flag} {path}: is a directory; give the file to write")


def check_output(path: Path, *, flag: str, directory: bool = False) -> None:
    """:func:`prepare_output`'s checks alone, for an output that its command creates itself later (the dev stack's
    state directory, made readable by its owner only): the directory ``path`` goes in exists and is one; with
    ``directory``, ``path`` (that directory) is not a file."""
    where = path.parent
    above = f"its parent directory {where}" if directory else f"its directory {where}"
    if not where.exists():
        raise InputError(f"{flag} {path}: {above} does not exist (create it first)")
    if not where.is_dir():
        raise InputError(f"{flag} {path}: {above} is a file, not a directory")
    if directory and path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: is a file; give a directory to write in")


def write_lines(path: Path | str, lines: Iterable[str], *, flag: str) -> None:
    """Write ``lines`` (each ending in a newline) to ``path``, given as ``flag``."""
    try:
        with open(path, "w") as out:
            out.writelines(lines)
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot write it: {exc.strerror or exc}") from exc
