"""One sampling pass over the node: procfs for the node, cgroups for its pods (IO; the clock values come in).

``Sampler.sample(at, mono_ns)`` reads the node's cpu counters and memory and every pod cgroup's cumulative cpu and
memory, and returns a ``Sample`` of usage since the previous pass (None for the very first pass, which only sets
the baseline). ``at`` is the wall time stamped on the sample (µs), ``mono_ns`` a monotonic clock for the pods' cpu
rates. Pods are listed again on every pass (a few directory listings), so pods that start or end are followed;
their requests and limits are read when first seen and on ``refresh``.
"""

from __future__ import annotations

from node_reporter.metrics.cgroups import CgroupLayout, PodCgroup, detect, list_pods, read_limits, read_pod
from node_reporter.metrics.procfs import CpuCounters, cpu_milli, read_node
from node_reporter.metrics.window import PodInfo, Sample

__all__ = ["Sampler"]


class Sampler:
    def __init__(self, *, proc_root: str = "/", cgroup_root: str = "/sys/fs/cgroup") -> None:
        self.proc_root = proc_root
        self.layout: CgroupLayout = detect(cgroup_root)
        self.previous_node: CpuCounters | None = None
        self.previous_pods: dict[str, tuple[int, int]] = {}  # uid -> (cpu ns, monotonic ns)
        self.pods: dict[str, PodInfo] = {}
        self._rel: dict[str, str] = {}  # uid -> cgroup path below the controllers

    def refresh(self) -> None:
        """Read every known pod's requests and limits again (they change when a pod is resized)."""
        for uid, info in list(self.pods.items()):
            limits = read_limits(self.layout, PodCgroup(uid=uid, qos=info.qos, rel=self._rel.get(uid, "")))
            if limits is not None:
                self.pods[uid] = PodInfo(uid=uid, qos=info.qos, limits=limits)

    def sample(self, at: int, mono_ns: int) -> Sample | None:
        node = read_node(self.proc_root)
        first = self.previous_node is None
        cpu = 0 if self.previous_node is None else cpu_milli(self.previous_node, node.cpu)
        self.previous_node = node.cpu
        pods: dict[str, tuple[int, int]] = {}
        seen: set[str] = set()
        rel: dict[str, str] = {}
        for pod in list_pods(self.layout):
            reading = read_pod(self.layout, pod)
            if reading is None:
                continue
            seen.add(pod.uid)
            rel[pod.uid] = pod.rel
            if pod.uid not in self.pods:
                limits = read_limits(self.layout, pod)
                self.pods[pod.uid] = (
                    PodInfo(uid=pod.uid, qos=pod.qos)
                    if limits is None
                    else PodInfo(uid=pod.uid, qos=pod.qos, limits=limits)
                )
            previous = self.previous_pods.get(pod.uid)
            self.previous_pods[pod.uid] = (reading.cpu_ns, mono_ns)
            if previous is None:
                continue
            elapsed = mono_ns - previous[1]
            used = reading.cpu_ns - previous[0]
            pods[pod.uid] = (used * 1000 // elapsed if elapsed > 0 and used >= 0 else 0, reading.memory)
        self._rel = rel
        for uid in set(self.previous_pods) - seen:
            del self.previous_pods[uid]
            self.pods.pop(uid, None)
        if first:
            return None
        return Sample(at=at, cpu=cpu, memory=node.memory_used, pods=pods)
