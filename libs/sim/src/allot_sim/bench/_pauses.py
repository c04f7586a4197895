"""Snapshot pauses of the stack's services, for ``allot bench e2e``: a service starts its projection's snapshot on its
event loop (``allot_runtime.snapshots``), so nothing else runs in that service meanwhile: the fork of the child that
encodes it (Linux), or the whole export where it runs in process. This module reads those exports from the services'
logs (with the forked child's time and peak resident set) and says which phase of the benchmark each pause overlapped,
and lets a phase start only once a snapshot that the quiet before it made due has been started.

Pure but for reading log files and asking each service's ``/healthz`` (answered by the same event loop, so the answer
comes once an export is over)."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, TypedDict

__all__ = ["Export", "PauseSummary", "after_quiet", "exports", "overlapping", "summary"]

_EXPORT = re.compile(
    r"snapshot at position (\d+) \((\d+) bytes, export (\d+) ms\)"
    r"(?: encoded(?: and written)? by a forked process in (\d+) ms, peak RSS (\d+) MiB)?"
)


class Export(NamedTuple):
    """One snapshot export: the service, when it was logged (epoch seconds), how long it held the service (``ms``)
    and the bytes it made; for a snapshot encoded by a forked process, how long the child took after the fork and
    its peak resident set (the service logs the snapshot once the child is done)."""

    service: str
    ended: float
    ms: int
    bytes: int
    forked_ms: int = 0
    forked_rss_mib: int = 0

    @property
    def started(self) -> float:
        return self.ended - (self.ms + self.forked_ms) / 1000

    @property
    def resumed(self) -> float:
        """When the service went on deciding (at the fork for a forked export)."""
        return self.started + self.ms / 1000


class PauseSummary(TypedDict):
    """A service's snapshot exports during the run: how many, the longest pause and the sum, and the largest state;
    of the forked ones, the longest encoding in the child and the child's largest peak resident set (0: none)."""

    count: int
    max_ms: int
    total_ms: int
    max_bytes: int
    forked_max_ms: int
    forked_peak_rss_mib: int


def parse(service: str, lines: Iterable[str]) -> list[Export]:
    """The exports a service logged (its JSON log lines; other lines are skipped)."""
    out = []
    for line in lines:
        if "snapshot at position" not in line:
            continue
        try:
            entry = json.loads(line)
            found = _EXPORT.search(str(entry.get("msg", "")))
            ended = datetime.fromisoformat(str(entry["ts"]).replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        if found:
            forked = (int(found.group(4)), int(found.group(5))) if found.group(4) else (0, 0)
            out.append(Export(service, ended, int(found.group(3)), int(found.group(2)), *forked))
    return out


def exports(logs: Mapping[str, str]) -> list[Export]:
    """Every export logged by the services whose log files ``logs`` names (service → path)."""
    out: list[Export] = []
    for service, path in sorted(logs.items()):
        try:
            out.extend(parse(service, Path(path).read_text(errors="replace").splitlines()))
        except OSError:
            continue
    return out


def overlapping(found: Iterable[Export], start: float, end: float) -> dict[str, int]:
    """Milliseconds of export per service that fell within ``[start, end]`` (epoch seconds)."""
    out: dict[str, int] = {}
    for export in found:
        overlap = min(end, export.resumed) - max(start, export.started)
        if overlap > 0:
            out[export.service] = out.get(export.service, 0) + round(overlap * 1000)
    return out


def summary(found: Iterable[Export]) -> dict[str, PauseSummary]:
    out: dict[str, PauseSummary] = {}
    for export in found:
        entry = out.setdefault(
            export.service,
            {
                "count": 0,
                "max_ms": 0,
                "total_ms": 0,
                "max_bytes": 0,
                "forked_max_ms": 0,
                "forked_peak_rss_mib": 0,
            },
        )
        entry["count"] += 1
        entry["max_ms"] = max(entry["max_ms"], export.ms)
        entry["total_ms"] += export.ms
        entry["max_bytes"] = max(entry["max_bytes"], export.bytes)
        entry["forked_max_ms"] = max(entry["forked_max_ms"], export.forked_ms)
        entry["forked_peak_rss_mib"] = max(entry["forked_peak_rss_mib"], export.forked_rss_mib)
    return dict(sorted(out.items()))


def _answers(port: int, timeout: float) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


async def after_quiet(ports: Iterable[int], *, timeout: float) -> None:
    """Once the pipeline is idle: wait until a service whose snapshot is due has begun it (its loop looks every
    ``IDLE_S`` for ``IDLE_S`` of idleness), then until every service answers ``/healthz`` (after its export)."""
    from allot_runtime.snapshots import IDLE_S  # here: `allot bench e2e --help` imports this module

    await asyncio.sleep(3 * IDLE_S)
    await asyncio.gather(*(asyncio.to_thread(_answers, port, timeout) for port in ports))
