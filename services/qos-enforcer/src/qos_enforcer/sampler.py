"""Node and pod usage, measured on the node: the input of BE suppression and memory-pressure eviction.

- Node CPU: ``/proc/stat`` (busy = total - idle - iowait jiffies) over the window between two samples, times the
  number of CPUs; node memory: ``MemTotal - MemAvailable`` from ``/proc/meminfo``.
- Pod CPU: the pod cgroup's cumulative CPU time (v1 ``cpuacct.usage`` in ns, v2 ``cpu.stat`` ``usage_usec``) over
  the window; pod memory: v1 ``memory.usage_in_bytes``, v2 ``memory.current``, minus ``inactive_file`` (reclaimable
  page cache), as koordlet counts it.

:meth:`Sampler.sample` returns None on the first call (a window needs two readings) and when the node's counters
cannot be read; a pod whose cgroup cannot be read is left out of that sample.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping

import msgspec

from allot_contracts.events.qos import PodUsage
from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout
from qos_enforcer.cgroups.paths import absolute_dir


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    cpu_capacity_milli: int
    cpu_used_milli: int
    memory_capacity_bytes: int
    memory_used_bytes: int
    pods: dict[str, PodUsage]
    window_ms: int


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _stat_field(text: str, name: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value.split()[0])
    raise ValueError(f"no {name}")


class Sampler:
    def __init__(
        self, layout: CgroupLayout | None, proc_root: str = "/proc", cpus: int | None = None
    ) -> None:
        self.layout = layout
        self.proc = proc_root
        self.cpus = cpus or os.cpu_count() or 1
        self._node: tuple[int, int] | None = None  # (busy, total) jiffies
        self._pods: dict[str, int] = {}  # pod -> cumulative cpu ns
        self._at: float | None = None

    def _node_cpu(self) -> tuple[int, int]:
        fields = [int(v) for v in _read(posixpath.join(self.proc, "stat")).splitlines()[0].split()[1:]]
        total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return total - idle, total

    def _memory(self) -> tuple[int, int]:
        info: dict[str, int] = {}
        for line in _read(posixpath.join(self.proc, "meminfo")).splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                info[key] = int(parts[0]) * 1024
        total = info["MemTotal"]
        return total, total - info.get("MemAvailable", info.get("MemFree", 0))

    def _pod_cpu_ns(self, path: str) -> int:
        assert self.layout is not None
        if self.layout.version == 2:
            return (
                _stat_field(
                    _read(posixpath.join(absolute_dir(self.layout, path, "cpu"), "cpu.stat")), "usage_usec"
                )
                * 1000
            )
        return int(_read(posixpath.join(absolute_dir(self.layout, path, "cpuacct"), "cpuacct.usage")).strip())

    def _pod_memory(self, path: str) -> int:
        assert self.layout is not None
        directory = absolute_dir(self.layout, path, "memory")
        stat = _read(posixpath.join(directory, "memory.stat"))
        if self.layout.version == 2:
            usage = int(_read(posixpath.join(directory, "memory.current")).strip())
            inactive = _stat_field(stat, "inactive_file")
        else:
            usage = int(_read(posixpath.join(directory, "memory.usage_in_bytes")).strip())
            inactive = _stat_field(stat, "total_inactive_file")
        return max(usage - inactive, 0)

    def sample(self, pods: Mapping[str, str], now: float) -> Sample | None:
        """Usage since the previous call; ``pods`` maps "ns/name" to the pod cgroup path, ``now`` is a monotonic
        time in seconds."""
        try:
            busy, total = self._node_cpu()
            mem_total, mem_used = self._memory()
        except (OSError, ValueError, KeyError, IndexError):
            return None
        cpu_ns: dict[str, int] = {}
        memory: dict[str, int] = {}
        if self.layout is not None:
            for key, path in pods.items():
                try:
                    cpu_ns[key] = self._pod_cpu_ns(path)
                    memory[key] = self._pod_memory(path)
                except (OSError, ValueError, CgroupError):
                    continue
        previous, previous_pods, previous_at = self._node, self._pods, self._at
        self._node, self._pods, self._at = (busy, total), cpu_ns, now
        if previous is None or previous_at is None or now <= previous_at or total <= previous[1]:
            return None
        window = now - previous_at
        used = (busy - previous[0]) * self.cpus * 1000 // (total - previous[1])
        usage = {
            key: PodUsage(
                cpu_milli=max(int((cpu_ns[key] - previous_pods[key]) / window / 1_000_000), 0),
                memory_bytes=memory[key],
            )
            for key in sorted(cpu_ns)
            if key in previous_pods
        }
        return Sample(
            cpu_capacity_milli=self.cpus * 1000,
            cpu_used_milli=max(used, 0),
            memory_capacity_bytes=mem_total,
            memory_used_bytes=mem_used,
            pods=usage,
            window_ms=int(window * 1000),
        )
