"""Kubelet-shaped cgroup trees written to a directory: for tests and for the sampling benchmark.

``write_cgroups(root, pods, version=1|2)`` lays out the files a kubelet's pod cgroups expose (v1 with the cgroupfs
driver, v2 with the systemd driver), with the usage given per pod: ``uid -> (qos, cpu ns, memory usage, inactive
file)``. Guaranteed pods get a 2-cpu request, a 4-cpu limit and a 4 GiB memory limit; Burstable pods a 2-cpu request;
BestEffort pods nothing.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_cgroups", "write_proc"]

GiB = 1024**3


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_cgroups(root: Path, pods: dict[str, tuple[str, int, int, int]], version: int = 1) -> None:
    if version == 1:
        _write(root, "cpuacct/cpuacct.usage", "0\n")
        _write(root, "memory/memory.usage_in_bytes", "0\n")
    else:
        _write(root, "cgroup.controllers", "cpuset cpu io memory pids\n")
    for uid, (qos, cpu_ns, usage, inactive) in pods.items():
        if version == 1:
            rel = "kubepods" if qos == "guaranteed" else f"kubepods/{qos}"
            _write(root, f"cpuacct/{rel}/pod{uid}/cpuacct.usage", f"{cpu_ns}\n")
            _write(root, f"cpu/{rel}/pod{uid}/cpu.shares", "2048\n" if qos != "besteffort" else "2\n")
            _write(
                root, f"cpu/{rel}/pod{uid}/cpu.cfs_quota_us", "400000\n" if qos == "guaranteed" else "-1\n"
            )
            _write(root, f"cpu/{rel}/pod{uid}/cpu.cfs_period_us", "100000\n")
            _write(root, f"memory/{rel}/pod{uid}/memory.usage_in_bytes", f"{usage}\n")
            limit = f"{4 * GiB}\n" if qos == "guaranteed" else "9223372036854771712\n"
            _write(root, f"memory/{rel}/pod{uid}/memory.limit_in_bytes", limit)
            _write(
                root,
                f"memory/{rel}/pod{uid}/memory.stat",
                f"cache 5\nrss 7\ntotal_cache 9\ntotal_rss 11\ntotal_inactive_file {inactive}\ntotal_active_file 3\n",
            )
            continue
        slice_uid = uid.replace("-", "_")
        rel = (
            f"kubepods.slice/kubepods-pod{slice_uid}.slice"
            if qos == "guaranteed"
            else f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slice_uid}.slice"
        )
        _write(root, f"{rel}/cpu.stat", f"usage_usec {cpu_ns // 1000}\nuser_usec 1\nsystem_usec 2\n")
        _write(root, f"{rel}/cpu.weight", "79\n" if qos != "besteffort" else "1\n")  # 2048 shares
        _write(root, f"{rel}/cpu.max", "400000 100000\n" if qos == "guaranteed" else "max 100000\n")
        _write(root, f"{rel}/memory.current", f"{usage}\n")
        _write(root, f"{rel}/memory.max", f"{4 * GiB}\n" if qos == "guaranteed" else "max\n")
        _write(root, f"{rel}/memory.stat", f"anon 4\nfile 8\nactive_file 1\ninactive_file {inactive}\n")


def write_proc(
    root: Path,
    busy: int,
    idle: int,
    cpus: int = 1,
    mem_total_kb: int = 8388608,
    mem_available_kb: int = 4194304,
) -> None:
    lines = [f"cpu  {busy} 0 0 {idle} 0 0 0 0"] + [f"cpu{i} 0 0 0 0 0 0 0 0" for i in range(cpus)]
    _write(root, "proc/stat", "\n".join(lines) + "\n")
    _write(root, "proc/meminfo", f"MemTotal: {mem_total_kb} kB\nMemAvailable: {mem_available_kb} kB\n")
