"""The node's cpu and memory from procfs: ``/proc/stat`` counters and ``/proc/meminfo``.

Rules:
- cpu: the aggregate ``cpu`` line of ``/proc/stat``; busy = user + nice + system + irq + softirq + steal, total =
  busy + idle + iowait (guest time is already inside user and nice). Usage between two readings, in millicores, is
  ``Δbusy / Δtotal × online CPUs × 1000`` — a ratio of counters, so no clock is needed.
- memory: ``MemTotal − MemAvailable`` (what koordlet reports as usage without page cache), in bytes.
- A missing or malformed file is a ``ProcError`` naming the file.
``parse_stat``/``parse_meminfo``/``cpu_milli`` are pure; ``read_node`` does the IO.
"""

from __future__ import annotations

import os

import msgspec

__all__ = ["CpuCounters", "NodeReading", "ProcError", "cpu_milli", "parse_meminfo", "parse_stat", "read_node"]


class ProcError(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


class CpuCounters(msgspec.Struct, frozen=True):
    busy: int  # jiffies
    total: int
    cpus: int  # online CPUs (cpuN lines)


class NodeReading(msgspec.Struct, frozen=True):
    cpu: CpuCounters
    memory_used: int  # bytes
    memory_total: int


def parse_stat(text: str, path: str = "/proc/stat") -> CpuCounters:
    busy = total = cpus = 0
    found = False
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = line.split()[1:]
            try:
                values = [int(v) for v in fields[:8]] + [0] * (8 - len(fields[:8]))
            except ValueError:
                raise ProcError(path, f"malformed cpu line {line!r}") from None
            user, nice, system, idle, iowait, irq, softirq, steal = values
            busy = user + nice + system + irq + softirq + steal
            total = busy + idle + iowait
            found = True
        elif line.startswith("cpu") and line[3:4].isdigit():
            cpus += 1
    if not found:
        raise ProcError(path, "has no aggregate cpu line")
    return CpuCounters(busy=busy, total=total, cpus=max(cpus, 1))


def parse_meminfo(text: str, path: str = "/proc/meminfo") -> tuple[int, int]:
    """(used, total) in bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached"):
            parts = rest.split()
            try:
                values[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
            except (ValueError, IndexError):
                raise ProcError(path, f"malformed line {line!r}") from None
    if "MemTotal" not in values:
        raise ProcError(path, "has no MemTotal")
    available = values.get("MemAvailable")
    if available is None:  # kernels before 3.14
        available = values.get("MemFree", 0) + values.get("Buffers", 0) + values.get("Cached", 0)
    return max(values["MemTotal"] - available, 0), values["MemTotal"]


def cpu_milli(before: CpuCounters, after: CpuCounters) -> int:
    """Millicores used between two readings (0 when the counters did not move or went back)."""
    total = after.total - before.total
    busy = after.busy - before.busy
    if total <= 0 or busy < 0:
        return 0
    return busy * after.cpus * 1000 // total


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError as exc:
        raise ProcError(path, exc.strerror or str(exc)) from None


def read_node(proc_root: str = "/") -> NodeReading:
    stat = os.path.join(proc_root, "proc", "stat")
    meminfo = os.path.join(proc_root, "proc", "meminfo")
    used, total = parse_meminfo(_read(meminfo), meminfo)
    return NodeReading(cpu=parse_stat(_read(stat), stat), memory_used=used, memory_total=total)
