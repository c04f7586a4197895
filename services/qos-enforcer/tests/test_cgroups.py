"""cgroup hierarchy detection, kubelet cgroup names, the v1/v2 knob mapping and the verified writer.

The writer runs against temporary directory trees with fake controller files (and fake "kernels" that normalise,
clamp or reject values); one test runs against the machine's real cgroup hierarchy in a dedicated subtree when the
process is root and a writable hierarchy with the needed controllers exists, and is skipped with the reason
otherwise.
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

import pytest

from qos_enforcer.cgroups.knobs import (
    KNOBS,
    CpuQuota,
    Settings,
    UnsupportedKnob,
    Write,
    canonical,
    cpulist,
    format_cpulist,
    plan,
    same,
    shares_to_weight,
    supported,
)
from qos_enforcer.cgroups.mode import (
    CgroupError,
    CgroupLayout,
    CgroupMode,
    detect,
    layout_from_mounts,
    layout_from_tree,
    parse_mountinfo,
)
from qos_enforcer.cgroups.paths import absolute_dir, container_cgroup, controller_of, pod_cgroup, qos_cgroup
from qos_enforcer.cgroups.writer import CgroupWriter, OsCgroupFiles

FIXTURES = Path(__file__).parent / "fixtures" / "mountinfo"
UID = "0f1e2d3c-1111-2222-3333-444455556666"
CID = "4a5b6c7d8e9f" * 5 + "0123"
PAGE = 4096


def mountinfo(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- hierarchy detection ---------------------------------------------------------------------------------------


def test_recorded_hybrid_vm_with_each_v1_controller_on_its_own_mount():
    layout = layout_from_mounts(parse_mountinfo(mountinfo("hybrid-separate-v1-this-vm.txt")))
    assert layout is not None
    assert layout.mode is CgroupMode.HYBRID and layout.version == 1
    assert layout.unified == "/sys/fs/cgroup/unified"
    assert layout.controller_root("cpu") == "/sys/fs/cgroup/cpu"
    assert layout.controller_root("cpuacct") == "/sys/fs/cgroup/cpuacct"
    assert layout.controller_root("memory") == "/sys/fs/cgroup/memory"
    assert layout.v1["name=systemd"] == "/sys/fs/cgroup/systemd"


def test_unified_hierarchy_puts_every_controller_at_the_root():
    layout = layout_from_mounts(parse_mountinfo(mountinfo("unified-systemd.txt")))
    assert layout is not None
    assert layout.mode is CgroupMode.UNIFIED and layout.version == 2
    assert layout.controller_root("cpu") == layout.controller_root("memory") == "/sys/fs/cgroup"


def test_legacy_co_mounted_controllers_share_one_mount_and_options_are_not_controllers():
    layout = layout_from_mounts(parse_mountinfo(mountinfo("legacy-comounted.txt")))
    assert layout is not None
    assert layout.mode is CgroupMode.LEGACY and layout.unified is None
    assert layout.v1["cpu"] == layout.v1["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct"
    assert layout.v1["net_cls"] == "/sys/fs/cgroup/net_cls,net_prio"
    assert "xattr" not in layout.v1 and not any(c.startswith("release_agent") for c in layout.v1)
    assert layout.v1["name=systemd"] == "/sys/fs/cgroup/systemd"
    with pytest.raises(CgroupError, match="'io' is not mounted"):
        layout.controller_root("io")


def test_hybrid_systemd_distribution_layout():
    layout = layout_from_mounts(parse_mountinfo(mountinfo("hybrid-systemd.txt")))
    assert layout is not None
    assert layout.mode is CgroupMode.HYBRID
    assert layout.unified == "/sys/fs/cgroup/unified" and layout.v1["cpu"] == "/sys/fs/cgroup/cpu,cpuacct"


def test_mount_root_and_escaped_mount_points_are_parsed():
    mounts = parse_mountinfo(mountinfo("container-v1-nested-root.txt"))
    assert [m.version for m in mounts] == [1, 1, 1]
    assert mounts[0].root == "/kubepods/besteffort/pod0f1e2d3c/abc123"
    assert mounts[0].controllers == ("cpu", "cpuacct")
    assert (
        mounts[2].mount_point == "/sys/fs/cgroup/weird dir"
        and mounts[2].root == "/var/lib/kubelet/pods/with space"
    )


def test_the_root_is_configurable_and_mounts_elsewhere_do_not_count():
    mounts = parse_mountinfo(mountinfo("legacy-comounted.txt"))
    assert layout_from_mounts(mounts, "/run/other-cgroup") is None
    assert layout_from_mounts(mounts, "/sys/fs/cgroup/") is not None


def test_a_later_mount_over_the_root_wins():
    text = mountinfo("legacy-comounted.txt") + "90 18 0:90 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    layout = layout_from_mounts(parse_mountinfo(text))
    assert layout is not None and layout.mode is CgroupMode.UNIFIED


def test_a_malformed_mountinfo_line_is_refused_with_its_number():
    with pytest.raises(CgroupError, match="line 2"):
        parse_mountinfo("22 1 0:1 / / rw - ext4 /dev/x rw\n23 1 0:2 / /sys rw sysfs\n")


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def test_layout_from_tree_recognises_v2_v1_and_hybrid(tmp_path: Path):
    v2 = tmp_path / "v2"
    _tree(v2, {"cgroup.controllers": "cpu memory\n"})
    assert layout_from_tree(str(v2)).mode is CgroupMode.UNIFIED

    v1 = tmp_path / "v1"
    _tree(v1, {"cpu,cpuacct/cgroup.procs": "", "memory/cgroup.procs": "", "systemd/cgroup.procs": ""})
    (v1 / "cpu").symlink_to("cpu,cpuacct")
    layout = layout_from_tree(str(v1))
    assert layout.mode is CgroupMode.LEGACY
    assert layout.v1["cpu"] == layout.v1["cpuacct"] == str(v1 / "cpu,cpuacct")
    assert layout.v1["name=systemd"] == str(v1 / "systemd")

    _tree(v1, {"unified/cgroup.controllers": ""})
    assert layout_from_tree(str(v1)).mode is CgroupMode.HYBRID

    with pytest.raises(CgroupError, match="no cgroup"):
        layout_from_tree(str(tmp_path / "v1" / "memory"))


def test_detect_falls_back_to_the_tree_when_mountinfo_lists_nothing_there(tmp_path: Path):
    info = tmp_path / "mountinfo"
    info.write_text(mountinfo("unified-systemd.txt"))
    _tree(tmp_path / "fake", {"cgroup.controllers": ""})
    layout = detect(str(tmp_path / "fake"), str(info))
    assert layout.mode is CgroupMode.UNIFIED and layout.root == str(tmp_path / "fake")
    assert detect("/sys/fs/cgroup", str(info)).unified == "/sys/fs/cgroup"
    with pytest.raises(CgroupError, match="cannot read mountinfo"):
        detect(str(tmp_path), str(tmp_path / "missing"))


# --- kubelet cgroup names ----------------------------------------------------------------------------------------

SYSTEMD_UID = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("qos", "driver", "expected"),
    [
        ("Guaranteed", "cgroupfs", f"kubepods/pod{UID}"),
        ("Burstable", "cgroupfs", f"kubepods/burstable/pod{UID}"),
        ("BestEffort", "cgroupfs", f"kubepods/besteffort/pod{UID}"),
        ("Guaranteed", "systemd", f"kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice"),
        (
            "Burstable",
            "systemd",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice",
        ),
        (
            "BestEffort",
            "systemd",
            f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice",
        ),
    ],
)
def test_pod_cgroup_names_match_the_kubelet(qos, driver, expected):
    assert pod_cgroup(UID, qos, driver) == expected


@pytest.mark.parametrize(
    ("qos", "driver", "expected"),
    [
        ("Guaranteed", "cgroupfs", "kubepods"),
        ("BestEffort", "cgroupfs", "kubepods/besteffort"),
        ("Guaranteed", "systemd", "kubepods.slice"),
        ("Burstable", "systemd", "kubepods.slice/kubepods-burstable.slice"),
    ],
)
def test_qos_level_cgroups(qos, driver, expected):
    assert qos_cgroup(qos, driver) == expected


@pytest.mark.parametrize(
    ("driver", "runtime", "leaf"),
    [
        ("systemd", "containerd", f"cri-containerd-{CID}.scope"),
        ("systemd", "cri-o", f"crio-{CID}.scope"),
        ("systemd", "docker", f"docker-{CID}.scope"),
        ("cgroupfs", "containerd", CID),
        ("cgroupfs", "cri-o", f"crio-{CID}"),
    ],
)
def test_container_cgroup_below_its_pod(driver, runtime, leaf):
    pod = pod_cgroup(UID, "Burstable", driver)
    assert container_cgroup(pod, CID, driver, runtime) == f"{pod}/{leaf}"


@pytest.mark.parametrize(
    "call",
    [
        lambda: pod_cgroup("../../etc", "Burstable", "cgroupfs"),
        lambda: pod_cgroup(UID.upper(), "Burstable", "cgroupfs"),
        lambda: pod_cgroup(UID, "Platinum", "cgroupfs"),
        lambda: pod_cgroup(UID, "Burstable", "openrc"),
        lambda: container_cgroup("kubepods", f"containerd://{CID}", "cgroupfs"),
        lambda: container_cgroup("kubepods", "../x", "systemd"),
        lambda: container_cgroup("kubepods", CID, "systemd", "podman"),
    ],
)
def test_names_that_could_escape_or_are_unknown_are_refused(call):
    with pytest.raises(CgroupError):
        call()


def test_v1_paths_use_each_controllers_mount_and_v2_the_single_tree():
    legacy = layout_from_mounts(parse_mountinfo(mountinfo("legacy-comounted.txt")))
    unified = layout_from_mounts(parse_mountinfo(mountinfo("unified-systemd.txt")))
    assert legacy is not None and unified is not None
    pod = pod_cgroup(UID, "Burstable", "cgroupfs")
    assert absolute_dir(legacy, pod, controller_of("cpu.cfs_quota_us")) == f"/sys/fs/cgroup/cpu,cpuacct/{pod}"
    assert absolute_dir(legacy, pod, controller_of("cpuset.cpus")) == f"/sys/fs/cgroup/cpuset/{pod}"
    assert absolute_dir(legacy, pod, controller_of("memory.limit_in_bytes")) == f"/sys/fs/cgroup/memory/{pod}"
    assert absolute_dir(unified, pod, controller_of("memory.high")) == f"/sys/fs/cgroup/{pod}"
    for bad in ("cgroup.procs", "tasks", "cpu.max/../../x"):
        with pytest.raises(CgroupError):
            controller_of(bad)


# --- the knob mapping ---------------------------------------------------------------------------------------------


def test_every_setting_has_exactly_one_row_in_the_table():
    assert set(KNOBS) == set(Settings.__struct_fields__)


@pytest.mark.parametrize(("shares", "weight"), [(1024, 100), (2, 1), (512, 50), (100, 10), (262_144, 10_000)])
def test_shares_to_weight_is_the_kernels_conversion(shares, weight):
    assert shares_to_weight(shares) == weight


def test_v1_plan_files_and_formats():
    settings = Settings(
        cpuset_cpus="3,0,1,2,8",
        cpu_quota=CpuQuota(quota_us=50_000, period_us=100_000),
        cpu_shares=512,
        cpu_burst_us=10_000,
        memory_low=64 << 20,
        memory_max="max",
    )
    assert [(w.file, w.value) for w in plan("kubepods/podx", settings, 1)] == [
        ("cpuset.cpus", "0-3,8"),
        ("cpu.cfs_period_us", "100000"),
        ("cpu.cfs_quota_us", "50000"),
        ("cpu.shares", "512"),
        ("cpu.cfs_burst_us", "10000"),
        ("memory.soft_limit_in_bytes", str(64 << 20)),
        ("memory.limit_in_bytes", "-1"),
    ]


def test_v2_plan_files_and_formats():
    settings = Settings(
        cpu_quota=CpuQuota(quota_us=None),
        cpu_shares=2048,
        cpu_burst_us=0,
        cpu_idle=False,
        memory_min=1 << 20,
        memory_low="max",
        memory_high=256 << 20,
        memory_max=512 << 20,
    )
    assert [(w.file, w.value) for w in plan("p", settings, 2)] == [
        ("cpu.max", "max 100000"),
        ("cpu.idle", "0"),  # idle off goes before the weight, which the kernel refuses while idle
        ("cpu.weight", "200"),
        ("cpu.max.burst", "0"),
        ("memory.min", str(1 << 20)),
        ("memory.low", "max"),
        ("memory.high", str(256 << 20)),
        ("memory.max", str(512 << 20)),
    ]
    assert [w.file for w in plan("p", Settings(cpu_idle=True, cpuset_cpus="0"), 2)] == [
        "cpuset.cpus",
        "cpu.idle",
    ]


@pytest.mark.parametrize("setting", ["memory_min", "memory_high"])
def test_v1_refuses_memory_knobs_it_has_no_file_for(setting):
    assert supported(setting, 1) is not None and supported(setting, 2) is None
    with pytest.raises(UnsupportedKnob, match=f"{setting} on cgroup v1"):
        plan("kubepods/podx", Settings(**{setting: 1 << 20}), 1)


@pytest.mark.parametrize(
    "settings",
    [
        Settings(cpu_shares=1),
        Settings(cpu_shares=300_000),
        Settings(cpu_quota=CpuQuota(quota_us=500)),
        Settings(cpu_quota=CpuQuota(quota_us=50_000, period_us=999)),
        Settings(cpu_quota=CpuQuota(quota_us=50_000), cpu_burst_us=60_000),
        Settings(memory_max=-1),
        Settings(cpuset_cpus=""),
        Settings(cpuset_cpus="3-1"),
        Settings(cpuset_cpus="0-3,x"),
        Settings(cpu_shares=512, cpu_idle=True),
    ],
)
def test_values_the_kernel_would_reject_are_refused_when_planning(settings):
    with pytest.raises(CgroupError, match="kubepods/podx"):
        plan("kubepods/podx", settings, 2)


def test_cpulists_compare_as_sets_and_format_compactly():
    assert cpulist("0-3") == cpulist("0,1,2,3") == cpulist("3,2,1,0")
    assert format_cpulist(frozenset({0, 1, 2, 3, 8, 10, 11})) == "0-3,8,10-11"
    assert same("cpuset.cpus", "0,1,2,3", "0-3\n", PAGE)
    assert not same("cpuset.cpus", "0-3", "0-2", PAGE)


def test_memory_values_compare_after_page_rounding_and_v1_unlimited_reads_as_max():
    assert same("memory.limit_in_bytes", "268435579", "268435456", PAGE)
    assert not same("memory.limit_in_bytes", "268435579", "268431360", PAGE)
    assert canonical("memory.soft_limit_in_bytes", "9223372036854771712", PAGE) == "max"
    assert same("memory.limit_in_bytes", "-1", "9223372036854771712", PAGE)
    assert same("memory.high", "max", "max\n", PAGE)


def test_cpu_max_compares_only_the_written_tokens():
    assert same("cpu.max", "max 100000", "max 100000\n", PAGE)
    assert same("cpu.max", "max", "max 100000", PAGE)
    assert not same("cpu.max", "50000 100000", "max 100000", PAGE)
    assert not same("cpu.max", "50000 100000", "50000 50000", PAGE)


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
