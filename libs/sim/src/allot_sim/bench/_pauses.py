"""Snapshot pauses of the stack's services, for ``allot bench e2e``: a service exports its projection's snapshot on its
event loop (``allot_runtime.snapshots``), so nothing else runs in that service meanwhile. This module reads those
exports from the services' logs and says which phase of the benchmark each one overlapped, and lets a phase start only
once a snapshot that the quiet before it made due has been taken.

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

_EXPORT = re.compile(r"snapshot at position (\d+) \((\d+) bytes, export (\d+) ms\)")


class Export(NamedTuple):
    """One snapshot export: the service, when it ended (epoch seconds), how long it took and the bytes it made."""

    service: str
    ended: float
    ms: int
    bytes: int

    @property
    def started(self) -> float:
        return self.ended - self.ms / 1000


class PauseSummary(TypedDict):
    """A service's snapshot exports during the run: how many, the longest and the sum, and the largest state."""

    count: int
    max_ms: int
    total_ms: int
    max_bytes: int


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
            out.append(Export(service, ended, int(found.group(3)), int(found.group(2))))
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
        overlap = min(end, export.ended) - max(start, export.started)
        if overlap > 0:
            out[export.service] = out.get(export.service, 0) + round(overlap * 1000)
    return out


def summary(found: Iterable[Export]) -> dict[str, PauseSummary]:
    out: dict[str, PauseSummary] = {}
    for export in found:
        entry = out.setdefault(export.service, {"count": 0, "max_ms": 0, "total_ms": 0, "max_bytes": 0})
        entry["count"] += 1
        entry["max_ms"] = max(entry["max_ms"], export.ms)
        entry["total_ms"] += export.ms
        entry["max_bytes"] = max(entry["max_bytes"], export.bytes)
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
