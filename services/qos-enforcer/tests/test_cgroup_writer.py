"""The verified cgroup writer.

It runs against temporary directory trees with fake controller files (and fake "kernels" that normalise, clamp or
reject values); one test runs against the machine's real cgroup hierarchy in a dedicated subtree when the process is
root and a writable hierarchy with the needed controllers exists, and is skipped with the reason otherwise.
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

import pytest

from qos_enforcer.cgroups.knobs import (
    CpuQuota,
    Settings,
    Write,
    cpulist,
    format_cpulist,
    plan,
)
from qos_enforcer.cgroups.mode import (
    CgroupError,
    CgroupLayout,
    CgroupMode,
    detect,
)
from qos_enforcer.cgroups.paths import absolute_dir
from qos_enforcer.cgroups.writer import CgroupWriter, OsCgroupFiles

UID = "0f1e2d3c-1111-2222-3333-444455556666"
PAGE = 4096


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


# --- the writer against a temporary tree --------------------------------------------------------------------------

POD = f"kubepods/burstable/pod{UID}"
V2_FILES = {"cpu.max": "max 100000", "cpu.weight": "100", "memory.high": "max", "cpuset.cpus": ""}


def v2_tree(root: Path) -> CgroupLayout:
    _tree(root, {"cgroup.controllers": "cpu memory cpuset"})
    _tree(root / POD, V2_FILES)
    _tree(root / "system.slice", V2_FILES)
    return CgroupLayout(mode=CgroupMode.UNIFIED, root=str(root), unified=str(root))


class Recording(OsCgroupFiles):
    """The real file access, counting writes."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def write(self, path: str, value: str) -> None:
        self.writes.append((path, value))
        super().write(path, value)


def test_apply_writes_and_verifies_each_value(tmp_path: Path):
    layout = v2_tree(tmp_path)
    writes = plan(POD, Settings(cpu_shares=512, cpu_quota=CpuQuota(quota_us=50_000), memory_high=1 << 30), 2)
    applied = CgroupWriter(layout, "kubepods").apply(writes)
    assert [(a.write, a.ok, a.error) for a in applied] == [(w, True, "") for w in writes]
    assert (tmp_path / POD / "cpu.weight").read_text() == "50"
    assert (tmp_path / POD / "cpu.max").read_text() == "50000 100000"
    assert [a.readback for a in applied] == ["50000 100000", "50", str(1 << 30)]


def test_applying_the_same_plan_again_writes_nothing(tmp_path: Path):
    layout = v2_tree(tmp_path)
    files = Recording()
    writer = CgroupWriter(layout, "kubepods", files=files)
    writes = plan(POD, Settings(cpu_shares=512, memory_high=1 << 30), 2)
    assert all(a.ok for a in writer.apply(writes)) and len(files.writes) == 2
    assert all(a.ok for a in writer.apply(writes)) and len(files.writes) == 2


@pytest.mark.parametrize(
    "path",
    [
        "system.slice",
        "/kubepods/burstable",
        "kubepods/../system.slice",
        "kubepods-evil",
        "",
        ".",
        "../kubepods",
    ],
)
def test_paths_outside_the_allowed_base_are_refused_and_untouched(tmp_path: Path, path: str):
    layout = v2_tree(tmp_path)
    _tree(tmp_path / "kubepods-evil", V2_FILES)
    [result] = CgroupWriter(layout, "kubepods").apply([Write(path=path, file="cpu.weight", value="1")])
    assert not result.ok and result.error
    assert (tmp_path / "system.slice" / "cpu.weight").read_text() == "100"
    assert (tmp_path / "kubepods-evil" / "cpu.weight").read_text() == "100"


def test_the_base_is_checked_before_anything_is_looked_up(tmp_path: Path):
    layout = v2_tree(tmp_path)
    [result] = CgroupWriter(layout, "kubepods").apply(
        [Write(path="other/absent", file="cpu.weight", value="1")]
    )
    assert result.error == "'other/absent' is outside the allowed base 'kubepods'; refused"


def test_a_symlink_leading_out_of_the_base_is_refused(tmp_path: Path):
    layout = v2_tree(tmp_path)
    (tmp_path / "kubepods" / "escape").symlink_to(tmp_path / "system.slice")
    [result] = CgroupWriter(layout, "kubepods").apply(
        [Write(path="kubepods/escape", file="cpu.weight", value="1")]
    )
    assert not result.ok and "outside the allowed base" in result.error
    assert (tmp_path / "system.slice" / "cpu.weight").read_text() == "100"


def test_the_base_must_name_a_subtree():
    layout = CgroupLayout(mode=CgroupMode.UNIFIED, root="/x", unified="/x")
    for base in ("", "/", ".", "/kubepods", "a/../.."):
        with pytest.raises(CgroupError):
            CgroupWriter(layout, base)


def test_missing_directory_and_missing_controller_file_are_reported_not_created(tmp_path: Path):
    layout = v2_tree(tmp_path)
    gone = f"kubepods/burstable/pod{UID[:-1]}7"
    results = CgroupWriter(layout, "kubepods").apply(
        [
            Write(path=gone, file="cpu.weight", value="50"),
            Write(path=POD, file="cpu.idle", value="1"),
            Write(path=POD, file="cgroup.procs", value="1"),
            Write(path=POD, file="cpu.weight", value="50"),
        ]
    )
    assert [r.ok for r in results] == [False, False, False, True]  # later writes are still attempted
    assert "cgroup directory missing" in results[0].error and gone in results[0].error
    assert "controller file missing" in results[1].error and results[1].error.startswith(str(tmp_path / POD))
    assert "not a controller knob file" in results[2].error
    assert not (tmp_path / gone).exists() and not (tmp_path / POD / "cpu.idle").exists()


class Kernel(OsCgroupFiles):
    """A fake kernel: normalises cpusets, rounds memory to pages, clamps weights, rejects a value."""

    def write(self, path: str, value: str) -> None:
        name = os.path.basename(path)
        if value == "reject":
            raise OSError(errno.EINVAL, "Invalid argument", path)
        if name == "cpuset.cpus":
            value = format_cpulist(cpulist(value))
        elif name.startswith("memory.") and value.isdigit():
            value = str(int(value) // PAGE * PAGE)
        elif name == "cpu.weight":
            value = str(min(int(value), 100))
        super().write(path, value)


def test_kernel_normalisation_is_accepted_and_real_mismatches_are_reported(tmp_path: Path):
    layout = v2_tree(tmp_path)
    writer = CgroupWriter(layout, "kubepods", files=Kernel(), page_size=PAGE)
    cpuset, memory, weight, rejected = writer.apply(
        [
            Write(path=POD, file="cpuset.cpus", value="0,1,2,3"),
            Write(path=POD, file="memory.high", value="268435579"),
            Write(path=POD, file="cpu.weight", value="500"),
            Write(path=POD, file="cpu.max", value="reject"),
        ]
    )
    assert cpuset.ok and cpuset.readback == "0-3"
    assert memory.ok and memory.readback == "268435456"
    assert not weight.ok and weight.readback == "100"
    assert "read-back mismatch" in weight.error and "'500'" in weight.error and "'100'" in weight.error
    assert not rejected.ok and "kernel rejected the value (EINVAL)" in rejected.error
    assert (tmp_path / POD / "cpu.max").read_text() == "max 100000"


def test_drift_lists_only_writes_whose_value_changed(tmp_path: Path):
    layout = v2_tree(tmp_path)
    writer = CgroupWriter(layout, "kubepods")
    writes = plan(POD, Settings(cpu_shares=512, cpu_quota=CpuQuota(quota_us=50_000), memory_high=1 << 30), 2)
    assert writer.drift(writes) == writes  # nothing applied yet
    assert all(a.ok for a in writer.apply(writes))
    assert writer.drift(writes) == []
    (tmp_path / POD / "cpu.weight").write_text("100\n")
    assert writer.drift(writes) == [w for w in writes if w.file == "cpu.weight"]
    (tmp_path / POD / "memory.high").unlink()
    assert [w.file for w in writer.drift(writes)] == ["cpu.weight", "memory.high"]
    results = writer.apply(writer.drift(writes))
    assert [r.ok for r in results] == [True, False]
    assert writer.drift(writes) == [w for w in writes if w.file == "memory.high"]


def test_v1_writes_go_to_each_controllers_mount(tmp_path: Path):
    cpu, memory = tmp_path / "cpu,cpuacct", tmp_path / "memory"
    _tree(cpu / POD, {"cpu.shares": "1024", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    _tree(memory / POD, {"memory.soft_limit_in_bytes": "9223372036854771712"})
    layout = CgroupLayout(
        mode=CgroupMode.HYBRID, root=str(tmp_path), v1={"cpu": str(cpu), "memory": str(memory)}, unified=None
    )
    writes = plan(POD, Settings(cpu_shares=256, cpu_quota=CpuQuota(quota_us=20_000), memory_low=64 << 20), 1)
    assert all(a.ok for a in CgroupWriter(layout, "kubepods").apply(writes))
    assert (cpu / POD / "cpu.shares").read_text() == "256"
    assert (cpu / POD / "cpu.cfs_quota_us").read_text() == "20000"
    assert (memory / POD / "memory.soft_limit_in_bytes").read_text() == str(64 << 20)


# --- the real hierarchy -----------------------------------------------------------------------------------------


def _real_layout() -> CgroupLayout:
    if os.geteuid() != 0:
        pytest.skip("real cgroup test needs root (creating cgroups)")
    try:
        return detect()
    except CgroupError as error:
        pytest.skip(f"no cgroup hierarchy detected: {error}")


def _mkdir_or_skip(path: str, created: list[str]) -> None:
    try:
        os.mkdir(path)
    except OSError as error:
        pytest.skip(f"cannot create a test cgroup at {path}: {error.strerror}")
    created.append(path)


def test_real_hierarchy_in_a_dedicated_subtree():
    """Writes, verifies, detects drift and reports a kernel rejection in /sys/fs/cgroup/.../allot-test-<random>,
    removed afterwards."""
    layout = _real_layout()
    name = f"allot-test-{uuid.uuid4().hex[:12]}"
    created: list[str] = []
    try:
        if layout.version == 2:
            root = layout.controller_root("cpu")
            enabled = Path(root, "cgroup.subtree_control").read_text().split()
            if not {"cpu", "memory"} <= set(enabled):
                pytest.skip(f"cgroup v2 at {root} does not delegate cpu and memory to children ({enabled})")
            _mkdir_or_skip(os.path.join(root, name), created)
            settings = Settings(
                cpu_shares=512, cpu_quota=CpuQuota(quota_us=50_000), memory_high=(256 << 20) + 123
            )
            shares_file, quota_file = "cpu.weight", "cpu.max"
        else:
            for controller in ("cpu", "memory"):
                if controller not in layout.v1:
                    pytest.skip(f"cgroup v1 controller {controller!r} is not mounted")
                _mkdir_or_skip(os.path.join(layout.v1[controller], name), created)
            settings = Settings(
                cpu_shares=512,
                cpu_quota=CpuQuota(quota_us=50_000),
                memory_low=64 << 20,
                memory_max=(256 << 20) + 123,  # not page-aligned: the kernel rounds it down
            )
            shares_file, quota_file = "cpu.shares", "cpu.cfs_quota_us"
        writes = plan(name, settings, layout.version)
        parent: frozenset[int] = frozenset()
        if layout.version == 1 and "cpuset" in layout.v1:
            _mkdir_or_skip(os.path.join(layout.v1["cpuset"], name), created)
            parent = cpulist(Path(layout.v1["cpuset"], "cpuset.cpus").read_text())
            writes.append(Write(path=name, file="cpuset.cpus", value=",".join(map(str, sorted(parent)))))
        writer = CgroupWriter(layout, name)

        applied = writer.apply(writes)
        assert [(a.write.file, a.ok, a.error) for a in applied] == [(w.file, True, "") for w in writes]
        memory = next(a for a in applied if a.write.file in ("memory.limit_in_bytes", "memory.high"))
        assert (
            int(memory.readback) % os.sysconf("SC_PAGE_SIZE") == 0 and memory.readback != memory.write.value
        )
        cpusets = [a for a in applied if a.write.file == "cpuset.cpus"]
        if cpusets and len(parent) > 1:  # the kernel answers "0-1" for "0,1": compared as sets
            assert cpusets[0].readback != cpusets[0].write.value
        assert writer.drift(writes) == []

        shares_path = os.path.join(absolute_dir(layout, name, "cpu"), shares_file)
        Path(shares_path).write_text("1024" if layout.version == 1 else "100")
        assert [w.file for w in writer.drift(writes)] == [shares_file]
        assert all(a.ok for a in writer.apply(writer.drift(writes)))
        assert writer.drift(writes) == []

        too_small = "500" if layout.version == 1 else "500 100000"  # below the kernel's 1 ms minimum quota
        [rejected] = writer.apply([Write(path=name, file=quota_file, value=too_small)])
        assert not rejected.ok and "EINVAL" in rejected.error
        [missing] = writer.apply([Write(path=name, file="cpu.no_such_knob", value="1")])
        assert not missing.ok and "controller file missing" in missing.error
    finally:
        for path in reversed(created):
            os.rmdir(path)
    assert not any(os.path.exists(path) for path in created)
