"""cgroup hierarchy detection (mountinfo and directory trees) and the kubelet's cgroup names.

The knob mapping is in test_cgroup_knobs.py, the verified writer in test_cgroup_writer.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qos_enforcer.cgroups.mode import (
    CgroupError,
    CgroupMode,
    detect,
    layout_from_mounts,
    layout_from_tree,
    parse_mountinfo,
)
from qos_enforcer.cgroups.paths import absolute_dir, container_cgroup, controller_of, pod_cgroup, qos_cgroup

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
