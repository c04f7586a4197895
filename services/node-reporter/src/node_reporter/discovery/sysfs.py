"""File access for hardware discovery: sysfs and procfs read under configurable roots.

Responsibility: the one place discovery touches the file system. ``Root`` maps a kernel path (``/sys/...``,
``/proc/...``) to a file under ``sys_root`` or ``proc_root`` (both ``/`` on a real machine; a captured tree in tests)
and reads text, integers, directory listings and symbolic links.

Rules:
- Every problem becomes a ``DiscoveryError`` whose message names the file and says what is wrong with it (missing,
  unreadable, not the expected format); no ``OSError`` or ``ValueError`` escapes.
- ``text`` reads a required file; ``optional_text`` returns ``None`` for a file or directory that does not exist (the
  caller then applies its documented default) but still fails on a file that exists and cannot be read.
- Listings are sorted, so everything built from them is in a stable order.
- Links are resolved with ``os.path.realpath``; a link whose target lies outside the tree it belongs to is an error,
  never silently followed elsewhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = ["DiscoveryError", "Root", "parse_int"]


class DiscoveryError(Exception):
    """A file discovery needs that is missing, unreadable or malformed; the message starts with its path."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def parse_int(text: str, path: str, *, base: int = 10) -> int:
    """An integer from a one-value sysfs file (``"0x10de\\n"`` with ``base=16``), or a ``DiscoveryError``."""
    value = text.strip()
    try:
        return int(value, base)
    except ValueError:
        kind = "a hexadecimal number" if base == 16 else "an integer"
        raise DiscoveryError(path, f"expected {kind}, found {value!r}") from None


_NATURAL = re.compile(r"(\d+)")


def _natural(name: str) -> tuple[tuple[int, str], ...]:
    """Sort key putting ``cpu2`` before ``cpu10`` (names are compared part by part, numbers as numbers)."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in _NATURAL.split(name) if p)


@dataclass(frozen=True)
class Root:
    """Where a machine's ``/sys`` and ``/proc`` are: ``sys_root``/sys and ``proc_root``/proc."""

    sys_root: str = "/"
    proc_root: str = "/"

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sys_root, "sys", *parts)

    def proc(self, *parts: str) -> str:
        return os.path.join(self.proc_root, "proc", *parts)

    # --- files ---------------------------------------------------------------------------------------------------
    def text(self, path: str) -> str:
        """The content of a required file."""
        found = self.optional_text(path)
        if found is None:
            raise DiscoveryError(path, "no such file")
        return found

    def optional_text(self, path: str) -> str | None:
        """The content of a file, or ``None`` when it (or its directory) does not exist."""
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            raise DiscoveryError(path, "is a directory, expected a file") from None
        except UnicodeDecodeError:
            raise DiscoveryError(path, "is not UTF-8 text") from None
        except OSError as exc:
            raise DiscoveryError(path, f"cannot be read: {exc.strerror or exc}") from None

    def integer(self, path: str, *, base: int = 10) -> int:
        return parse_int(self.text(path), path, base=base)

    def optional_integer(self, path: str, *, base: int = 10) -> int | None:
        found = self.optional_text(path)
        return None if found is None else parse_int(found, path, base=base)

    # --- directories and links -------------------------------------------------------------------------------------
    def entries(self, path: str, prefix: str = "") -> list[str]:
        """Names in a directory starting with ``prefix``, naturally sorted; ``[]`` when the directory is absent."""
        try:
            names = os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise DiscoveryError(path, f"cannot be listed: {exc.strerror or exc}") from None
        return sorted((n for n in names if n.startswith(prefix)), key=_natural)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def resolve(self, path: str, *, inside: str) -> str:
        """The real path of ``path`` relative to the real path of ``inside`` (``/``-separated)."""
        if not os.path.lexists(path):
            raise DiscoveryError(path, "no such file or link")
        try:
            real = os.path.realpath(path, strict=True)
        except OSError as exc:
            raise DiscoveryError(path, f"link cannot be resolved: {exc.strerror or exc}") from None
        base = os.path.realpath(inside)
        if os.path.commonpath([real, base]) != base:
            raise DiscoveryError(path, f"resolves to {real}, outside {base}")
        return os.path.relpath(real, base).replace(os.sep, "/")

    def link_name(self, path: str) -> str | None:
        """The last component of the resolved target of a link, ``None`` when the link does not exist."""
        if not os.path.lexists(path):
            return None
        try:
            return os.path.basename(os.path.realpath(path, strict=True))
        except OSError as exc:
            raise DiscoveryError(path, f"link cannot be resolved: {exc.strerror or exc}") from None
