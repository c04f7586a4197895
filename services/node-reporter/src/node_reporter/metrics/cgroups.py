"""Pod usage from cgroups: the kubelet's pod cgroups found and read, on cgroup v1 and v2, cgroupfs and systemd drivers.

Rules:
- Version: v2 when ``<root>/cgroup.controllers`` lists ``cpu`` and ``memory`` (the unified hierarchy); otherwise v1
  with the ``cpuacct`` (or ``cpu,cpuacct``), ``cpu`` and ``memory`` controllers mounted under ``<root>`` — which is
  also what a hybrid machine uses (its ``unified`` mount holds no controllers). Neither: no pod usage (warned once).
- Pods: the kubelet's pod cgroups below ``kubepods`` (cgroupfs: ``kubepods[/burstable|/besteffort]/pod<uid>``;
  systemd: ``kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _>.slice``). The QoS class is the
  directory the pod is in (``guaranteed`` when it is directly under ``kubepods``).
- Usage: cpu as cumulative nanoseconds (v1 ``cpuacct.usage``; v2 ``cpu.stat`` ``usage_usec``); memory without page
  cache (v1 ``memory.usage_in_bytes`` − ``total_inactive_file``; v2 ``memory.current`` − ``inactive_file``).
- Request and limits, read when a pod is first seen and at every report: cpu request from ``cpu.shares`` (v2
  ``cpu.weight`` converted back as the kubelet converts it; 2 shares = none), cpu limit from the CFS quota
  (``cpu.cfs_quota_us``/``cpu.cfs_period_us``; v2 ``cpu.max``), memory limit (``memory.limit_in_bytes``; v2
  ``memory.max``; "no limit" values are None).
- A pod whose files vanish between listing and reading (it ended) is skipped; any other unreadable file is a
  ``CgroupError`` naming it.
"""

from __future__ import annotations

import os
from typing import Final

import msgspec

__all__ = [
    "CgroupError",
    "CgroupLayout",
    "PodCgroup",
    "PodLimits",
    "PodReading",
    "detect",
    "list_pods",
    "read_limits",
    "read_pod",
]

_NO_LIMIT_V1: Final = 1 << 62  # memory.limit_in_bytes of an unlimited cgroup is near 2^63 (page-aligned)


class CgroupError(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


class CgroupLayout(msgspec.Struct, frozen=True):
    version: int  # 1 or 2; 0 = no usable hierarchy
    cpuacct: str = ""  # v1 controller directories (absolute); v2: all equal to the root
    cpu: str = ""
    memory: str = ""
    reason: str = ""  # why there is none


class PodCgroup(msgspec.Struct, frozen=True):
    uid: str
    qos: str  # guaranteed | burstable | besteffort
    rel: str  # path below each controller directory


class PodReading(msgspec.Struct, frozen=True):
    cpu_ns: int
    memory: int


class PodLimits(msgspec.Struct, frozen=True):
    cpu_request: int = 0  # millicores
    cpu_limit: int | None = None
    memory_limit: int | None = None


def _text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise CgroupError(path, exc.strerror or str(exc)) from None


def _int(path: str) -> int | None:
    text = _text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise CgroupError(path, f"expected an integer, found {text.strip()[:40]!r}") from None


def _stat_field(path: str, key: str) -> int | None:
    text = _text(path)
    if text is None:
        return None
    at = text.find(key + " ")
    while at > 0 and text[at - 1] != "\n":
        at = text.find(key + " ", at + 1)
    if at < 0:
        return 0
    end = text.find("\n", at)
    try:
        return int(text[at + len(key) + 1 : end if end >= 0 else None])
    except ValueError:
        raise CgroupError(path, f"malformed {key} line") from None


def detect(root: str = "/sys/fs/cgroup") -> CgroupLayout:
    controllers = _text(os.path.join(root, "cgroup.controllers"))
    if controllers is not None and {"cpu", "memory"} <= set(controllers.split()):
        return CgroupLayout(version=2, cpuacct=root, cpu=root, memory=root)
    cpuacct = next(
        (
            os.path.join(root, d)
            for d in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
            if os.path.isfile(os.path.join(root, d, "cpuacct.usage"))
        ),
        "",
    )
    cpu = next(
        (
            os.path.join(root, d)
            for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu")
            if os.path.isdir(os.path.join(root, d))
        ),
        "",
    )
    memory = os.path.join(root, "memory")
    if cpuacct and os.path.isfile(os.path.join(memory, "memory.usage_in_bytes")):
        return CgroupLayout(version=1, cpuacct=cpuacct, cpu=cpu or cpuacct, memory=memory)
    return CgroupLayout(
        version=0, reason=f"no cgroup v2 cpu and memory controllers or v1 cpuacct and memory under {root}"
    )


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise CgroupError(path, exc.strerror or str(exc)) from None


def list_pods(layout: CgroupLayout) -> list[PodCgroup]:
    """Every pod cgroup of the kubelet, by uid (sorted), with its QoS class."""
    if layout.version == 0:
        return []
    base = layout.memory
    out: dict[str, PodCgroup] = {}
    # cgroupfs driver
    for qos, rel in (
        ("guaranteed", "kubepods"),
        ("burstable", "kubepods/burstable"),
        ("besteffort", "kubepods/besteffort"),
    ):
        for name in _listdir(os.path.join(base, rel)):
            if name.startswith("pod") and len(name) > 3:
                out.setdefault(name[3:], PodCgroup(uid=name[3:], qos=qos, rel=f"{rel}/{name}"))
    # systemd driver
    for qos, rel, prefix in (
        ("guaranteed", "kubepods.slice", "kubepods-pod"),
        ("burstable", "kubepods.slice/kubepods-burstable.slice", "kubepods-burstable-pod"),
        ("besteffort", "kubepods.slice/kubepods-besteffort.slice", "kubepods-besteffort-pod"),
    ):
        for name in _listdir(os.path.join(base, rel)):
            if name.startswith(prefix) and name.endswith(".slice"):
                uid = name[len(prefix) : -len(".slice")].replace("_", "-")
                out.setdefault(uid, PodCgroup(uid=uid, qos=qos, rel=f"{rel}/{name}"))
    return [out[k] for k in sorted(out)]


def read_pod(layout: CgroupLayout, pod: PodCgroup) -> PodReading | None:
    """The pod's cumulative cpu time and memory without page cache, or None when it is gone."""
    if layout.version == 2:
        d = os.path.join(layout.memory, pod.rel)
        usec = _stat_field(os.path.join(d, "cpu.stat"), "usage_usec")
        current = _int(os.path.join(d, "memory.current"))
        inactive = _stat_field(os.path.join(d, "memory.stat"), "inactive_file")
        if usec is None or current is None or inactive is None:
            return None
        return PodReading(cpu_ns=usec * 1000, memory=max(current - inactive, 0))
    cpu_ns = _int(os.path.join(layout.cpuacct, pod.rel, "cpuacct.usage"))
    d = os.path.join(layout.memory, pod.rel)
    usage = _int(os.path.join(d, "memory.usage_in_bytes"))
    inactive = _stat_field(os.path.join(d, "memory.stat"), "total_inactive_file")
    if cpu_ns is None or usage is None or inactive is None:
        return None
    return PodReading(cpu_ns=cpu_ns, memory=max(usage - inactive, 0))


def _shares_to_milli(shares: int) -> int:
    return 0 if shares <= 2 else shares * 1000 // 1024


def read_limits(layout: CgroupLayout, pod: PodCgroup) -> PodLimits | None:
    if layout.version == 2:
        d = os.path.join(layout.cpu, pod.rel)
        weight = _int(os.path.join(d, "cpu.weight"))
        cpu_max = _text(os.path.join(d, "cpu.max"))
        mem_max = _text(os.path.join(layout.memory, pod.rel, "memory.max"))
        if weight is None or cpu_max is None or mem_max is None:
            return None
        shares = 2 + (weight - 1) * 262142 // 9999  # the kubelet's weight formula, inverted
        quota, _, period = cpu_max.strip().partition(" ")
        cpu_limit = None if quota == "max" or not period else int(quota) * 1000 // max(int(period), 1)
        mem = mem_max.strip()
        return PodLimits(
            cpu_request=_shares_to_milli(shares),
            cpu_limit=cpu_limit,
            memory_limit=None if mem == "max" else int(mem),
        )
    d = os.path.join(layout.cpu, pod.rel)
    v1_shares = _int(os.path.join(d, "cpu.shares"))
    v1_quota = _int(os.path.join(d, "cpu.cfs_quota_us"))
    v1_period = _int(os.path.join(d, "cpu.cfs_period_us"))
    v1_mem = _int(os.path.join(layout.memory, pod.rel, "memory.limit_in_bytes"))
    if v1_shares is None or v1_mem is None:
        return None
    return PodLimits(
        cpu_request=_shares_to_milli(v1_shares),
        cpu_limit=None if v1_quota is None or v1_quota < 0 or not v1_period else v1_quota * 1000 // v1_period,
        memory_limit=None if v1_mem >= _NO_LIMIT_V1 else v1_mem,
    )
