"""Usage sampling, the input of BE suppression and memory-pressure eviction: against a temporary tree, and on this
machine's real kernel with a busy process in a pod cgroup created for the test (dedicated subtree, removed after)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from allot_contracts.events.qos import CgroupTarget, QosPlan
from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout, CgroupMode, detect
from qos_enforcer.config import HamiPaths
from qos_enforcer.enforce import Enforcer
from qos_enforcer.sampler import Sampler

MIB = 1 << 20
POD = "kubepods/besteffort/pod1"


def proc_files(proc: Path, busy: int, idle: int, available_kib: int) -> None:
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0\n")
    (proc / "meminfo").write_text(f"MemTotal: 8388608 kB\nMemFree: 1 kB\nMemAvailable: {available_kib} kB\n")


def test_v1_pod_usage_comes_from_cpuacct_and_memory_less_inactive_file(tmp_path: Path):
    for controller in ("cpuacct", "memory"):
        (tmp_path / controller / POD).mkdir(parents=True)
    layout = CgroupLayout(
        mode=CgroupMode.LEGACY,
        root=str(tmp_path),
        v1={"cpuacct": str(tmp_path / "cpuacct"), "memory": str(tmp_path / "memory")},
    )
    pod = {"default/be": POD}
    (tmp_path / "cpuacct" / POD / "cpuacct.usage").write_text("1000000000\n")
    (tmp_path / "memory" / POD / "memory.usage_in_bytes").write_text(str(300 * MIB))
    (tmp_path / "memory" / POD / "memory.stat").write_text(f"cache 1\ntotal_inactive_file {100 * MIB}\n")
    proc_files(tmp_path / "proc", busy=100, idle=300, available_kib=4194304)
    sampler = Sampler(layout, str(tmp_path / "proc"), cpus=4)
    assert sampler.sample(pod, 10.0) is None  # a window needs two readings
    (tmp_path / "cpuacct" / POD / "cpuacct.usage").write_text("3000000000\n")  # 2 s of CPU in 2 s
    proc_files(tmp_path / "proc", busy=300, idle=500, available_kib=2097152)
    sample = sampler.sample(pod, 12.0)
    assert sample is not None
    assert (sample.cpu_capacity_milli, sample.cpu_used_milli) == (4000, 2000)  # half of 4 CPUs busy
    assert (sample.memory_capacity_bytes, sample.memory_used_bytes) == (8 << 30, 6 << 30)
    assert sample.pods["default/be"].cpu_milli == 1000 and sample.pods["default/be"].memory_bytes == 200 * MIB
    assert sample.window_ms == 2000
    # a pod whose cgroup went away is left out; the node is still sampled
    proc_files(tmp_path / "proc", busy=400, idle=600, available_kib=2097152)
    later = sampler.sample({"default/gone": "kubepods/besteffort/pod2"}, 13.0)
    assert later is not None and later.pods == {} and later.cpu_used_milli == 2000


# --- the real kernel ----------------------------------------------------------------------------------------------


@pytest.fixture
def real_v1_busy_pod() -> Iterator[tuple[CgroupLayout, str, int]]:
    """A pod cgroup ``allot-test-<random>/kubepods/besteffort/pod1`` in the cpu, cpuacct and memory v1 hierarchies,
    holding a process that touched 64 MiB and spins; the process is killed and the cgroups removed after."""
    if os.geteuid() != 0:
        pytest.skip("the real sampler test needs root (it creates cgroups)")
    try:
        layout = detect()
    except CgroupError as error:
        pytest.skip(f"no cgroup hierarchy detected: {error}")
    if layout.version != 1 or not {"cpu", "cpuacct", "memory"} <= set(layout.v1):
        pytest.skip(f"needs cgroup v1 cpu, cpuacct and memory controllers (this machine: {layout.mode})")
    path = f"allot-test-{uuid.uuid4().hex[:10]}/{POD}"
    created: list[Path] = []
    child = None
    try:
        for controller in ("cpu", "cpuacct", "memory"):
            base = Path(layout.v1[controller])
            for part in Path(path).parts:
                base = base / part
                if not base.exists():
                    base.mkdir()
                    created.append(base)
        code = (
            "import sys\nsys.stdin.readline()\nb = bytearray(b'x' * (64 << 20))\n"
            "print('ready', flush=True)\nwhile True: pass\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for controller in ("cpu", "cpuacct", "memory"):  # moved in before it allocates: charged to the pod
            Path(layout.v1[controller], path, "cgroup.procs").write_text(str(child.pid))
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ready"
        yield layout, path, child.pid
    finally:
        if child is not None:
            child.kill()
            child.communicate()  # reaps it and closes its pipes
        for directory in reversed(created):
            for _ in range(50):  # the killed process leaves its cgroup asynchronously
                try:
                    directory.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    assert not any(p.exists() for p in created)


def test_real_kernel_sample_sees_the_pods_cpu_and_memory(real_v1_busy_pod: tuple[CgroupLayout, str, int]):
    layout, path, pid = real_v1_busy_pod
    sampler = Sampler(layout)
    assert sampler.sample({"default/be": path}, time.monotonic()) is None
    time.sleep(1.0)
    sample = sampler.sample({"default/be": path}, time.monotonic())
    assert sample is not None
    usage = sample.pods["default/be"]
    # one spinning thread: up to one CPU as cpuacct counts it (less when the machine is shared and busy)
    assert 100 <= usage.cpu_milli <= 1200
    assert usage.memory_bytes >= 64 * MIB  # what it touched is charged to the pod cgroup
    assert sample.cpu_capacity_milli == (os.cpu_count() or 1) * 1000
    assert sample.cpu_used_milli >= usage.cpu_milli * 0.8  # the node is at least as busy as the pod
    meminfo = Path("/proc/meminfo").read_text().split()
    assert sample.memory_capacity_bytes == int(meminfo[meminfo.index("MemTotal:") + 1]) * 1024
    # the pod's processes, found from its cgroup: what a resctrl group's ``tasks`` receives
    plan = QosPlan(revision=1, cgroups=[CgroupTarget(scope="pod", path=path)])
    enforcer = Enforcer(layout=layout, base=path.split("/", 1)[0], cdi_dir="/nonexistent", hami=HamiPaths())
    assert enforcer.pod_pids(plan) == [pid]
