"""Applying plans on a node: against temporary trees (v1 and v2 layouts), against this machine's real cgroups in a
dedicated subtree (created for the test, removed after), drift found and corrected, CDI spec files checked against
the CDI schema, resctrl against a resctrl-shaped tree (and the real one when the machine has it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allot_contracts.events.qos import CgroupTarget, GpuIsolation, GpuShare, QosPlan, ResctrlGroup
from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout, CgroupMode, detect
from qos_enforcer.cgroups.paths import pod_cgroup
from qos_enforcer.config import HamiPaths
from qos_enforcer.enforce import Enforcer, all_ok
from qos_enforcer.resctrl import ResctrlFs, ResctrlInfo, l3_mask, mb_value, parse_schemata, schemata

UID = "0f1e2d3c-1111-2222-3333-444455556666"
POD = pod_cgroup(UID, "BestEffort", "cgroupfs")


def files(root: Path, values: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (root / name).write_text(value)


def v1_tree(root: Path) -> CgroupLayout:
    for controller, values in {
        "cpu": {"cpu.shares": "2", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000", "cpu.idle": "0"},
        "cpuset": {"cpuset.cpus": "0-7"},
        "memory": {
            "memory.limit_in_bytes": "9223372036854771712",
            "memory.soft_limit_in_bytes": "9223372036854771712",
        },
    }.items():
        files(root / controller, {"cgroup.procs": ""})
        files(root / controller / POD, {"cgroup.procs": "", **values})
    return CgroupLayout(
        mode=CgroupMode.LEGACY,
        root=str(root),
        v1={"cpu": str(root / "cpu"), "cpuset": str(root / "cpuset"), "memory": str(root / "memory")},
    )


def v2_tree(root: Path) -> CgroupLayout:
    files(root, {"cgroup.controllers": "cpu memory cpuset"})
    files(
        root / POD,
        {
            "cpu.max": "max 100000",
            "cpu.weight": "100",
            "cpu.idle": "0",
            "memory.high": "max",
            "memory.min": "0",
            "memory.max": "max",
            "cpuset.cpus": "",
        },
    )
    return CgroupLayout(mode=CgroupMode.UNIFIED, root=str(root), unified=str(root))


def enforcer(layout: CgroupLayout | None, tmp: Path, **kw: Any) -> Enforcer:
    return Enforcer(layout=layout, base="kubepods", cdi_dir=str(tmp / "cdi"), hami=hami(tmp), **kw)


def hami(tmp: Path) -> HamiPaths:
    return HamiPaths(
        libvgpu_host_path=str(tmp / "vgpu" / "libvgpu.so"),
        cache_host_dir=str(tmp / "vgpu" / "containers"),
        lock_host_dir=str(tmp / "vgpulock"),
        container_dir="/usr/local/vgpu",
    )


BE_PLAN = QosPlan(
    revision=1,
    cgroups=[
        CgroupTarget(
            scope="pod",
            path=POD,
            settings={
                "cpu_idle": True,
                "cpu_quota": {"quota_us": 50_000, "period_us": 100_000},
                "cpu_bvt_warp_ns": -1,
                "cpuset_cpus": "2-3",
                "memory_max": 1 << 30,
                "memory_min": 1 << 20,
            },
        )
    ],
)


def key(target: str) -> str:
    """A file's name, or the knob of a refusal ("<path> <knob>")."""
    return target.split()[-1] if " " in target else target.rsplit("/", 1)[-1]


def outcomes(results: list[Any]) -> dict[str, str]:
    return {key(r.target) if r.kind == "cgroup" else r.target: r.outcome for r in results}


def test_a_plan_on_cgroup_v1_writes_each_controllers_files_and_reports_what_v1_lacks(tmp_path: Path):
    results = enforcer(v1_tree(tmp_path), tmp_path).apply_pod(UID, BE_PLAN)
    got = outcomes(results)
    assert (
        got["cpu.idle"]
        == got["cpu.cfs_quota_us"]
        == got["cpuset.cpus"]
        == got["memory.limit_in_bytes"]
        == "applied"
    )
    assert got["cpu.cfs_period_us"] == "unchanged"
    assert got["memory_min"] == "unsupported"  # v1 has no memory.min
    assert got["cpu.bvt_warp_ns"] == "unsupported"  # no group identity in this kernel's files
    assert (tmp_path / "cpu" / POD / "cpu.cfs_quota_us").read_text() == "50000"
    assert (tmp_path / "cpuset" / POD / "cpuset.cpus").read_text() == "2-3"
    assert all_ok(results)


def test_a_plan_on_cgroup_v2_and_applying_it_again_changes_nothing(tmp_path: Path):
    layout = v2_tree(tmp_path)
    first = enforcer(layout, tmp_path).apply_pod(UID, BE_PLAN)
    assert outcomes(first)["cpu.max"] == "applied" and outcomes(first)["memory.min"] == "applied"
    assert (tmp_path / POD / "cpu.max").read_text() == "50000 100000"
    again = enforcer(layout, tmp_path).apply_pod(UID, BE_PLAN)
    assert {o for k, o in outcomes(again).items() if "bvt" not in k} == {"unchanged"}


def test_drift_is_found_restored_and_reported_with_the_value_found(tmp_path: Path):
    layout = v2_tree(tmp_path)
    agent = enforcer(layout, tmp_path)
    agent.apply_pod(UID, BE_PLAN)
    assert agent.apply_pod(UID, BE_PLAN, check_only=True) == []  # nothing drifted, nothing reported
    (tmp_path / POD / "cpu.max").write_text("max 100000")
    [corrected] = agent.apply_pod(UID, BE_PLAN, check_only=True)
    assert (corrected.outcome, corrected.found, corrected.value) == ("applied", "max 100000", "50000 100000")
    assert (tmp_path / POD / "cpu.max").read_text() == "50000 100000"


def test_missing_pod_cgroup_and_no_hierarchy_are_reported_not_created(tmp_path: Path):
    layout = v2_tree(tmp_path)
    other = QosPlan(
        revision=1,
        cgroups=[
            CgroupTarget(
                scope="pod", path=pod_cgroup("abc", "Burstable", "cgroupfs"), settings={"cpu_idle": True}
            )
        ],
    )
    [result] = enforcer(layout, tmp_path).apply_pod("abc", other)
    assert result.outcome == "missing" and not all_ok([result])
    assert not (tmp_path / "kubepods" / "burstable").exists()
    [result] = enforcer(None, tmp_path, layout_error="no cgroup hierarchy at /x").apply_pod("abc", other)
    assert result.outcome == "missing" and "no cgroup hierarchy" in result.error


def test_targets_outside_the_kubelet_pods_cgroup_are_refused(tmp_path: Path):
    layout = v2_tree(tmp_path)
    files(tmp_path / "system.slice", {"cpu.weight": "100"})
    plan = QosPlan(
        revision=1, cgroups=[CgroupTarget(scope="pod", path="system.slice", settings={"cpu_shares": 2})]
    )
    [result] = enforcer(layout, tmp_path).apply_pod(UID, plan)
    assert result.outcome == "refused" and (tmp_path / "system.slice" / "cpu.weight").read_text() == "100"


def test_dry_run_reports_the_writes_and_touches_nothing(tmp_path: Path):
    layout = v2_tree(tmp_path)
    results = enforcer(layout, tmp_path, dry_run=True).apply_pod(UID, BE_PLAN)
    assert {r.outcome for r in results if r.kind == "cgroup"} == {"planned"}
    assert (tmp_path / POD / "cpu.max").read_text() == "max 100000"


# --- CDI spec files ----------------------------------------------------------------------------------------------


def gpu_plan(container: str = "main") -> QosPlan:
    return QosPlan(
        revision=1,
        gpu=[
            GpuIsolation(
                container=container,
                device=f"allot.dev/gpu={UID}-{container}",
                gpus=[GpuShare(uuid="GPU-aaaa-0001", minor=0, memory_mib=8192, cores=50)],
            )
        ],
    )


@pytest.fixture(scope="module")
def cdi_schema() -> Any:
    # jsonschema and referencing come with the dev group (kubernetes-validate): imported, never skipped, so the
    # specs are always checked against the CDI schema
    import jsonschema
    import referencing
    from referencing.jsonschema import DRAFT7

    fixtures = Path(__file__).parent / "fixtures"
    registry = referencing.Registry().with_resource(
        "defs.json",
        referencing.Resource.from_contents(
            json.loads((fixtures / "cdi-defs.json").read_text()), default_specification=DRAFT7
        ),
    )
    return jsonschema.Draft7Validator(
        json.loads((fixtures / "cdi-schema.json").read_text()), registry=registry
    )


def test_cdi_specs_are_written_valid_restored_after_drift_and_pruned(tmp_path: Path, cdi_schema: Any):
    agent = enforcer(None, tmp_path)
    [written] = agent.apply_pod(UID, gpu_plan())
    assert written.kind == "cdi" and written.outcome == "applied"
    spec = json.loads(Path(written.target).read_text())
    assert [e.message for e in cdi_schema.iter_errors(spec)] == []
    env = dict(v.split("=", 1) for v in spec["devices"][0]["containerEdits"]["env"])
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m" and env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa-0001"
    assert (tmp_path / "vgpulock").is_dir() and (tmp_path / "vgpu" / "containers" / f"{UID}_main").is_dir()
    assert agent.apply_pod(UID, gpu_plan(), check_only=True) == []
    Path(written.target).write_text("{}")
    [restored] = agent.apply_pod(UID, gpu_plan(), check_only=True)
    assert restored.outcome == "applied" and json.loads(Path(written.target).read_text()) == spec
    assert agent.prune([]) == (Path(written.target).name,) and not Path(written.target).exists()


# --- resctrl ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cbm", "start", "end", "min_bits", "mask"),
    [
        (0xFFF, 0, 100, 1, 0xFFF),
        (0xFFF, 0, 30, 1, 0xF),
        (0xFFF, 50, 100, 1, 0xFC0),
        (0x7FF, 0, 10, 2, 0x3),
        (0xFFF, 95, 100, 4, 0xF00),
    ],
)
def test_l3_masks_are_contiguous_ways_of_the_range(cbm, start, end, min_bits, mask):
    assert l3_mask(cbm, start, end, min_bits) == mask


@pytest.mark.parametrize(
    ("percent", "minimum", "gran", "value"), [(100, 10, 10, 100), (25, 10, 10, 30), (5, 10, 10, 10)]
)
def test_mb_values_follow_the_granularity(percent, minimum, gran, value):
    assert mb_value(percent, minimum, gran) == value


def resctrl_tree(root: Path) -> ResctrlFs:
    files(root, {"schemata": "L3:0=fff;1=fff\nMB:0=100;1=100\n", "tasks": "1\n"})
    files(root / "info" / "L3", {"cbm_mask": "fff", "min_cbm_bits": "1"})
    files(root / "info" / "MB", {"min_bandwidth": "10", "bandwidth_gran": "10"})
    return ResctrlFs(str(root))


def test_resctrl_groups_get_their_schemata_and_the_pods_tasks(tmp_path: Path):
    fs = resctrl_tree(tmp_path / "resctrl")
    info = fs.info()
    assert info == ResctrlInfo(
        cbm_mask=0xFFF, min_cbm_bits=1, l3_ids=(0, 1), min_bandwidth=10, bandwidth_gran=10, mb_ids=(0, 1)
    )
    group = ResctrlGroup(
        group="allot-BE", llc_start=0, llc_end=30, mb_percent=50, per_cache={"1": {"mb": 20}}
    )
    assert schemata(group, info) == ["L3:0=f;1=f", "MB:0=50;1=20"]
    # the kernel creates a group's files on mkdir; the tree stands in for it
    files(tmp_path / "resctrl" / "allot-BE", {"schemata": "L3:0=fff;1=fff\nMB:0=100;1=100\n", "tasks": ""})
    [result] = fs.apply(group)
    assert result.outcome == "applied" and parse_schemata(
        (tmp_path / "resctrl" / "allot-BE" / "schemata").read_text()
    ) == {"L3": {0: "f", 1: "f"}, "MB": {0: "50", 1: "20"}}
    assert fs.apply(group, check_only=True) == []
    assert [r.value for r in fs.assign("allot-BE", [42, 7])] == ["7", "42"]
    with pytest.raises(Exception, match="refused"):
        fs.group_dir("../etc")


def test_resctrl_on_this_machine_or_the_reason_it_is_not_here():
    fs = ResctrlFs()
    reason = fs.unavailable()
    if reason:
        [result] = fs.apply(ResctrlGroup(group="allot-test"))
        assert result.outcome == "unsupported" and "resctrl is not mounted" in result.error
        pytest.skip(f"no resctrl here: {reason}")
    info = fs.info()
    assert info.l3_ids or info.mb_ids  # a mounted resctrl offers CAT or MBA
    name = f"allot-test-{uuid.uuid4().hex[:8]}"
    try:
        results = fs.apply(ResctrlGroup(group=name, llc_start=0, llc_end=50, mb_percent=50))
        assert all(r.outcome == "applied" for r in results), results
    finally:
        fs.remove(name)


# --- the real cgroup hierarchy ---------------------------------------------------------------------------------


def _real_layout() -> CgroupLayout:
    if os.geteuid() != 0:
        pytest.skip("real cgroup tests need root (they create cgroups)")
    try:
        return detect()
    except CgroupError as error:
        pytest.skip(f"no cgroup hierarchy detected: {error}")


@pytest.fixture
def real_v1_pod() -> Iterator[tuple[CgroupLayout, str, str]]:
    """A pod cgroup under a dedicated root ``allot-test-<random>/kubepods/besteffort/pod<uid>`` in the cpu, cpuset
    and memory v1 hierarchies (cpuset initialised from the root, as the kubelet does), removed after."""
    layout = _real_layout()
    if layout.version != 1 or not {"cpu", "cpuset", "memory"} <= set(layout.v1):
        pytest.skip(f"needs cgroup v1 cpu, cpuset and memory controllers (this machine: {layout.mode})")
    root = f"allot-test-{uuid.uuid4().hex[:10]}"
    pod = f"{root}/{POD}"
    created: list[Path] = []
    try:
        for controller in ("cpu", "cpuset", "memory"):
            base = Path(layout.v1[controller])
            for part in Path(pod).parts:
                base = base / part
                base.mkdir()
                created.append(base)
                if controller == "cpuset":
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (base / knob).write_text((base.parent / knob).read_text().strip() or "0")
        yield layout, root, pod
    finally:
        for path in reversed(created):
            path.rmdir()
    assert not any(p.exists() for p in created)


def test_real_v1_cgroups_apply_verify_drift_and_kernel_refusals(
    real_v1_pod: tuple[CgroupLayout, str, str], tmp_path: Path
):
    layout, root, pod = real_v1_pod
    cpus = Path(layout.v1["cpuset"], "cpuset.cpus").read_text().strip()
    plan = QosPlan(
        revision=1,
        cgroups=[
            CgroupTarget(
                scope="pod",
                path=pod,
                settings={
                    "cpu_idle": True,
                    "cpu_quota": {"quota_us": 50_000, "period_us": 100_000},
                    "cpu_burst_us": 20_000,
                    "cpuset_cpus": cpus,
                    "memory_max": (256 << 20) + 123,  # not page-aligned: the kernel rounds it down
                },
            )
        ],
    )
    agent = Enforcer(
        layout=layout, base=f"{root}/kubepods", cdi_dir=str(tmp_path / "cdi"), hami=hami(tmp_path)
    )
    results = agent.apply_pod(UID, plan)
    got = {r.target.rsplit("/", 1)[-1]: r for r in results}
    assert {k: r.outcome for k, r in got.items()} == {
        "cpu.cfs_period_us": "unchanged",
        "cpu.cfs_quota_us": "applied",
        "cpu.cfs_burst_us": "applied",
        "cpu.idle": "applied",
        "cpuset.cpus": "unchanged"
        if Path(layout.v1["cpuset"], pod, "cpuset.cpus").read_text().strip() == cpus
        else "applied",
        "memory.limit_in_bytes": "applied",
    }
    memory = got["memory.limit_in_bytes"]
    assert int(memory.readback) % os.sysconf("SC_PAGE_SIZE") == 0 and memory.readback != memory.value
    assert Path(layout.v1["cpu"], pod, "cpu.idle").read_text().strip() == "1"
    assert agent.apply_pod(UID, plan, check_only=True) == []

    # drift: the quota is changed behind the agent's back; the reconcile writes it again and says what it found
    Path(layout.v1["cpu"], pod, "cpu.cfs_burst_us").write_text("0")
    Path(layout.v1["cpu"], pod, "cpu.cfs_quota_us").write_text("-1")
    corrected = agent.apply_pod(UID, plan, check_only=True)
    assert {(r.target.rsplit("/", 1)[-1], r.outcome, r.found) for r in corrected} == {
        ("cpu.cfs_quota_us", "applied", "-1"),
        ("cpu.cfs_burst_us", "applied", "0"),
    }
    assert Path(layout.v1["cpu"], pod, "cpu.cfs_quota_us").read_text().strip() == "50000"

    # the kernel's own refusals are reported as such: a burst above the quota
    too_much = QosPlan(
        revision=2, cgroups=[CgroupTarget(scope="pod", path=pod, settings={"cpu_burst_us": 80_000})]
    )
    [refused] = agent.apply_pod(UID, too_much)
    assert refused.outcome == "rejected" and "EINVAL" in refused.error


def test_real_unified_v2_mount_reports_the_controllers_it_does_not_have():
    """The cgroup2 mount next to the v1 controllers holds none of cpu/memory here: a plan for it is refused knob by
    knob as unsupported (and written where the controllers are delegated)."""
    layout = _real_layout()
    if layout.unified is None:
        pytest.skip("no cgroup2 mount on this machine")
    unified = CgroupLayout(mode=CgroupMode.UNIFIED, root=layout.unified, unified=layout.unified)
    controllers = set(Path(layout.unified, "cgroup.controllers").read_text().split())
    root = f"allot-test-{uuid.uuid4().hex[:10]}"
    created = [
        Path(layout.unified, root),
        Path(layout.unified, root, "kubepods"),
        Path(layout.unified, root, "kubepods", "pod1"),
    ]
    try:
        for path in created:
            path.mkdir()
        plan = QosPlan(
            revision=1,
            cgroups=[
                CgroupTarget(
                    scope="pod",
                    path=f"{root}/kubepods/pod1",
                    settings={"cpu_shares": 512, "memory_high": 1 << 30},
                )
            ],
        )
        agent = Enforcer(layout=unified, base=f"{root}/kubepods", cdi_dir="/nonexistent", hami=HamiPaths())
        results = agent.apply_pod(UID, plan)
        expected = {
            "cpu.weight": "applied" if "cpu" in controllers else "unsupported",
            "memory.high": "applied" if "memory" in controllers else "unsupported",
        }
        assert {r.target.rsplit("/", 1)[-1]: r.outcome for r in results} == expected
        assert all(r.error for r in results if r.outcome == "unsupported")
    finally:
        for path in reversed(created):
            if path.exists():
                path.rmdir()
    assert not created[0].exists()


# --- a real container runtime -------------------------------------------------------------------------------------


def _podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", "--runtime", "runc", *args], capture_output=True, text=True, timeout=timeout
    )


RUN = ("run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


@pytest.fixture(scope="module")
def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-binary image (a static busybox) imported into podman, removed after."""
    if os.geteuid() != 0:
        pytest.skip("the runtime test runs containers as root")
    missing = [tool for tool in ("podman", "runc", "busybox") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no container runtime to run the CDI spec with here (missing: {', '.join(missing)})")
    root = tmp_path_factory.mktemp("rootfs")
    for part in ("bin", "tmp", "proc", "sys", "dev", "etc", "usr/local"):
        (root / part).mkdir(parents=True, exist_ok=True)
    shutil.copy(shutil.which("busybox") or "", root / "bin" / "busybox")
    for applet in ("sh", "env", "cat", "ls"):
        (root / "bin" / applet).symlink_to("busybox")
    archive = root.parent / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    image = f"localhost/allot-cdi-test:{uuid.uuid4().hex[:8]}"
    imported = _podman("import", str(archive), image)
    if imported.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {imported.stderr.strip()[-300:]}")
    probe = _podman(*RUN, image, "/bin/env")
    if probe.returncode != 0:
        _podman("rmi", "-f", image)
        pytest.skip(f"podman cannot run containers here: {probe.stderr.strip()[-300:]}")
    yield image
    _podman("rmi", "-f", image)


def test_a_real_runtime_gives_the_container_hami_core_env_and_mounts_from_the_spec(
    busybox_image: str, tmp_path: Path
):
    """podman resolves ``--device allot.dev/gpu=<uid>-<container>`` from the spec the agent wrote in /var/run/cdi
    (the directory every runtime reads) and applies its edits; containerd and CRI-O do the same for the NRI device
    injector's request."""
    uid = str(uuid.uuid4())
    (tmp_path / "vgpu").mkdir()
    (tmp_path / "vgpu" / "libvgpu.so").write_bytes(b"")
    agent = Enforcer(layout=None, base="kubepods", cdi_dir="/var/run/cdi", hami=hami(tmp_path))
    plan = QosPlan(
        revision=1,
        gpu=[
            GpuIsolation(
                container="main",
                device=f"allot.dev/gpu={uid}-main",
                gpus=[GpuShare(uuid="GPU-aaaa-0001", minor=0, memory_mib=8192, cores=50)],
            )
        ],
    )
    try:
        [written] = agent.apply_pod(uid, plan)
        assert written.outcome == "applied"
        ran = _podman(
            *RUN,
            "--device",
            f"allot.dev/gpu={uid}-main",
            busybox_image,
            "/bin/sh",
            "-c",
            "env; ls /usr/local/vgpu; cat /proc/mounts",
        )
        assert ran.returncode == 0, ran.stderr
        env = dict(line.split("=", 1) for line in ran.stdout.splitlines() if "=" in line and " " not in line)
        assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa-0001"
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m" and env["CUDA_DEVICE_SM_LIMIT"] == "50"
        assert env["LD_PRELOAD"] == "/usr/local/vgpu/libvgpu.so"
        assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == f"/usr/local/vgpu/{uid}_main.cache"
        assert "libvgpu.so" in ran.stdout.split() and " /tmp/vgpulock " in ran.stdout
        # without its spec the device is unresolvable: the container is not started without its limits
        agent.prune([])
        refused = _podman(*RUN, "--device", f"allot.dev/gpu={uid}-main", busybox_image, "/bin/env")
        assert refused.returncode != 0 and "unresolvable CDI devices" in refused.stderr
    finally:
        agent.prune([])
