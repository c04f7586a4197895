"""resctrl (Intel RDT / AMD QoS): LLC ways and memory bandwidth per control group, at ``/sys/fs/resctrl``.

Pure part: :func:`l3_mask` turns a percentage range of the cache into a contiguous capacity bitmask the hardware
accepts (at least ``min_cbm_bits`` ways, within ``cbm_mask``), :func:`mb_value` a bandwidth percentage into a value on
the hardware's granularity (at least ``min_bandwidth``), :func:`schemata` a group into the lines of its ``schemata``
file for the node's cache ids.

IO part (:class:`ResctrlFs`): reads ``info/L3`` and ``info/MB`` and the root's ``schemata`` (cache ids), creates the
agent's groups (only ``allot-*`` directories directly under the root), writes and reads back ``schemata``, and adds
pids to a group's ``tasks``. A missing root or feature is reported, never worked around.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from collections.abc import Iterable
from typing import Final

import msgspec

from allot_contracts.events.qos import ResctrlGroup, WriteOutcome

DEFAULT_ROOT: Final = "/sys/fs/resctrl"
_GROUP: Final = re.compile(r"allot-[A-Za-z0-9_-]+")


class ResctrlError(Exception):
    """A resctrl value or group this module refuses; the message says why."""


class ResctrlInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the hardware offers: the full L3 capacity mask, the fewest ways a mask may have, MB limits, cache ids."""

    cbm_mask: int = 0
    min_cbm_bits: int = 1
    l3_ids: tuple[int, ...] = ()
    min_bandwidth: int = 10
    bandwidth_gran: int = 10
    mb_ids: tuple[int, ...] = ()


def l3_mask(cbm_mask: int, start: int, end: int, min_bits: int = 1) -> int:
    """The contiguous mask covering ``start``..``end`` percent of the cache's ways (``cbm_mask`` = all ways)."""
    ways = cbm_mask.bit_length()
    if ways == 0 or cbm_mask != (1 << ways) - 1:
        raise ResctrlError(f"cbm_mask {cbm_mask:x} is not a contiguous mask of ways")
    if not 0 <= start < end <= 100:
        raise ResctrlError(f"LLC range {start}..{end}% is not 0 <= start < end <= 100")
    first = ways * start // 100
    last = max(-(-ways * end // 100), first + max(min_bits, 1))
    if last > ways:
        first, last = max(ways - max(min_bits, 1), 0), ways
    return ((1 << last) - 1) ^ ((1 << first) - 1)


def mb_value(percent: int, min_bandwidth: int = 10, granularity: int = 10) -> int:
    """A bandwidth percentage rounded up to the granularity, at least the minimum, at most 100."""
    if not 1 <= percent <= 100:
        raise ResctrlError(f"MB {percent}% is not in 1..100")
    gran = max(granularity, 1)
    value = -(-percent // gran) * gran
    return min(max(value, min_bandwidth), 100)


def schemata(group: ResctrlGroup, info: ResctrlInfo) -> list[str]:
    """The ``schemata`` lines for ``group`` on a node with ``info`` (L3 only when the node has CAT, MB only with MBA)."""
    lines: list[str] = []
    if info.cbm_mask and info.l3_ids:
        parts = []
        for cache in info.l3_ids:
            start, end = group.per_cache.get(str(cache), {}).get("llc") or (group.llc_start, group.llc_end)
            parts.append(f"{cache}={l3_mask(info.cbm_mask, start, end, info.min_cbm_bits):x}")
        lines.append("L3:" + ";".join(parts))
    if info.mb_ids:
        parts = []
        for cache in info.mb_ids:
            percent = group.per_cache.get(str(cache), {}).get("mb") or group.mb_percent
            parts.append(f"{cache}={mb_value(int(percent), info.min_bandwidth, info.bandwidth_gran)}")
        lines.append("MB:" + ";".join(parts))
    return lines


def parse_schemata(text: str) -> dict[str, dict[int, str]]:
    """``"L3:0=fff;1=fff\\nMB:0=100"`` -> {"L3": {0: "fff", 1: "fff"}, "MB": {0: "100"}} (values lower-case,
    leading zeros dropped, so that a read-back compares with what was written)."""
    out: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        resource, _, rest = line.strip().partition(":")
        if not rest:
            continue
        values: dict[int, str] = {}
        for item in rest.split(";"):
            cache, _, value = item.strip().partition("=")
            if cache.strip().isdigit():
                value = value.strip().lower()
                values[int(cache)] = value.lstrip("0") or "0"
        out[resource.strip()] = values
    return out


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class ResctrlFs:
    """The resctrl filesystem below ``root`` (``/sys/fs/resctrl``)."""

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        self.root = posixpath.normpath(root)

    def unavailable(self) -> str:
        """Why resctrl cannot be used here ("" when it can)."""
        if not os.path.isfile(posixpath.join(self.root, "schemata")):
            return f"{self.root}: resctrl is not mounted (no schemata file; the CPU or kernel lacks RDT, or it is not mounted)"
        return ""

    def info(self) -> ResctrlInfo:
        ids = parse_schemata(_read(posixpath.join(self.root, "schemata")))

        def number(path: str, default: int, base: int = 10) -> int:
            try:
                return int(_read(posixpath.join(self.root, "info", path)).strip(), base)
            except (OSError, ValueError):
                return default

        return ResctrlInfo(
            cbm_mask=number("L3/cbm_mask", 0, 16),
            min_cbm_bits=number("L3/min_cbm_bits", 1),
            l3_ids=tuple(sorted(ids.get("L3", {}))),
            min_bandwidth=number("MB/min_bandwidth", 10),
            bandwidth_gran=number("MB/bandwidth_gran", 10),
            mb_ids=tuple(sorted(ids.get("MB", {}))),
        )

    def group_dir(self, group: str) -> str:
        if not _GROUP.fullmatch(group):
            raise ResctrlError(f"group {group!r} is not one of the agent's (allot-<name>); refused")
        return posixpath.join(self.root, group)

    def apply(self, group: ResctrlGroup, *, check_only: bool = False) -> list[WriteOutcome]:
        """Create ``group`` if needed and make its schemata hold; one outcome per resource line. With
        ``check_only``, lines already holding are not reported (a drift check)."""
        target = posixpath.join(self.root, group.group, "schemata")
        if reason := self.unavailable():
            return [WriteOutcome(kind="resctrl", target=target, outcome="unsupported", error=reason)]
        try:
            directory = self.group_dir(group.group)
            lines = schemata(group, self.info())
        except (ResctrlError, OSError) as error:
            return [WriteOutcome(kind="resctrl", target=target, outcome="refused", error=str(error))]
        if not lines:
            return [
                WriteOutcome(
                    kind="resctrl", target=target, outcome="unsupported", error="no L3 CAT or MBA here"
                )
            ]
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as error:
            return [
                WriteOutcome(
                    kind="resctrl", target=target, outcome="failed", error=f"mkdir: {error.strerror}"
                )
            ]
        value = "\n".join(lines)
        want = parse_schemata(value)

        def holds(found: dict[str, dict[int, str]]) -> bool:
            return all(found.get(r, {}).get(k) == v for r, values in want.items() for k, v in values.items())

        def shown(found: dict[str, dict[int, str]]) -> str:
            return "\n".join(
                f"{r}:" + ";".join(f"{k}={v}" for k, v in sorted(found.get(r, {}).items()))
                for r in sorted(want)
            )

        try:
            found = parse_schemata(_read(target))
            if holds(found):
                return (
                    []
                    if check_only
                    else [WriteOutcome(kind="resctrl", target=target, outcome="unchanged", value=value)]
                )
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(value + "\n")
            back = parse_schemata(_read(target))
        except OSError as error:
            return [
                WriteOutcome(
                    kind="resctrl",
                    target=target,
                    outcome="rejected" if error.errno == errno.EINVAL else "failed",
                    value=value,
                    error=str(error.strerror),
                )
            ]
        if holds(back):
            return [
                WriteOutcome(
                    kind="resctrl", target=target, outcome="applied", value=value, found=shown(found)
                )
            ]
        return [
            WriteOutcome(
                kind="resctrl",
                target=target,
                outcome="mismatch",
                value=value,
                found=shown(found),
                readback=shown(back),
                error=f"{target}: read-back mismatch",
            )
        ]

    def assign(self, group: str, pids: Iterable[int]) -> list[WriteOutcome]:
        """Add ``pids`` to the group's ``tasks`` (those already in it are skipped)."""
        tasks = posixpath.join(self.root, group, "tasks")
        try:
            self.group_dir(group)
            present = {int(p) for p in _read(tasks).split()}
        except (ResctrlError, OSError, ValueError) as error:
            return [WriteOutcome(kind="resctrl", target=tasks, outcome="missing", error=str(error))]
        out = []
        for pid in sorted(set(pids) - present):
            try:
                with open(tasks, "w", encoding="utf-8") as handle:
                    handle.write(f"{pid}\n")
                out.append(WriteOutcome(kind="resctrl", target=tasks, outcome="applied", value=str(pid)))
            except OSError as error:  # the process may have exited
                out.append(
                    WriteOutcome(
                        kind="resctrl",
                        target=tasks,
                        outcome="failed",
                        value=str(pid),
                        error=str(error.strerror),
                    )
                )
        return out

    def remove(self, group: str) -> bool:
        """Remove one of the agent's groups (its tasks return to the root group)."""
        try:
            os.rmdir(self.group_dir(group))
        except (ResctrlError, FileNotFoundError):
            return False
        return True
