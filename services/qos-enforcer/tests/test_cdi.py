"""CDI specs for HAMi-core GPU isolation: content, validity against the official CDI JSON schema, annotation
naming, and the spec files (atomic, idempotent, stale ones removed).

The schema fixtures ``fixtures/cdi-schema.json`` and ``fixtures/cdi-defs.json`` are ``schema/schema.json`` and
``schema/defs.json`` of https://github.com/cncf-tags/container-device-interface at tag v1.1.0 (commit
98a7d735d9592c1ccca0130e06b0709f4b65ecbf), verbatim; ``schema.json`` refers to ``defs.json`` by that relative name.
The ``cdi-good-*``/``cdi-bad-*`` fixtures are that repository's ``schema/testdata`` files at the same tag.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from qos_enforcer.cdi import (
    KIND,
    CdiError,
    GpuShare,
    HamiCorePaths,
    annotation_key,
    encode,
    ensure_host_dirs,
    gpu_device,
    minimum_version,
    prune_pods,
    sync_specs,
    validate,
    write_spec,
)

FIXTURES = Path(__file__).parent / "fixtures"
UID = "0f1e2d3c-1111-2222-3333-444455556666"
OTHER_UID = "9a8b7c6d-0000-1111-2222-333344445555"
GPUS = [
    GpuShare(uuid="GPU-0b1c2d3e-aaaa-bbbb-cccc-000000000001", memory_mib=11520, cores=50),
    GpuShare(uuid="GPU-0b1c2d3e-aaaa-bbbb-cccc-000000000002", memory_mib=4096, cores=50),
]


@pytest.fixture(scope="module")
def cdi_schema() -> Any:
    # jsonschema and referencing come with the dev group (kubernetes-validate): imported, never skipped, so the
    # specs are always checked against the CDI schema
    import jsonschema
    import referencing
    from referencing.jsonschema import DRAFT7

    schema = json.loads((FIXTURES / "cdi-schema.json").read_text())
    defs = json.loads((FIXTURES / "cdi-defs.json").read_text())
    registry = referencing.Registry().with_resource(
        "defs.json", referencing.Resource.from_contents(defs, default_specification=DRAFT7)
    )
    return jsonschema.Draft7Validator(schema, registry=registry)


def schema_errors(validator: Any, document: Any) -> list[str]:
    return [error.message for error in validator.iter_errors(document)]


def edits(spec: dict[str, Any]) -> dict[str, Any]:
    [device] = spec["devices"]
    result: dict[str, Any] = device["containerEdits"]
    return result


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in edits(spec)["env"])


# --- the schema fixture itself --------------------------------------------------------------------------------


def test_the_schema_fixture_accepts_upstream_good_examples_and_rejects_the_bad_one(cdi_schema):
    for name in ("cdi-good-minimal.json", "cdi-good-spec-example.json"):
        assert schema_errors(cdi_schema, json.loads((FIXTURES / name).read_text())) == []
    assert schema_errors(cdi_schema, json.loads((FIXTURES / "cdi-bad-explicit-empty.json").read_text()))


def test_the_schema_resolves_definitions_from_defs_json(cdi_schema):
    spec = {"cdiVersion": "0.6.0", "kind": "a.com/b", "devices": [{"name": "x", "containerEdits": {}}]}
    assert schema_errors(cdi_schema, spec) == []
    spec["devices"][0]["containerEdits"] = {"mounts": [{"hostPath": "/a"}]}
    assert any("containerPath" in message for message in schema_errors(cdi_schema, spec))


# --- the spec content -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "disable_control"),
    [
        (None, False),
        (HamiCorePaths(ld_so_preload_host_path="/usr/local/vgpu/ld.so.preload"), False),
        (None, True),
        (HamiCorePaths(libvgpu_host_path="/opt/hami/libvgpu.so", container_dir="/opt/vgpu"), False),
    ],
)
def test_built_specs_are_valid_against_the_official_schema(cdi_schema, paths, disable_control):
    for gpus in (GPUS[:1], GPUS):
        device = gpu_device(UID, "main", gpus, paths, disable_control=disable_control)
        assert schema_errors(cdi_schema, device.spec) == []
        assert validate(device.spec) == []
        # the device name starts with the uid's first digit: 0.5.0 is the lowest version that allows it
        assert device.spec["cdiVersion"] == minimum_version(device.spec) == "0.5.0"
    assert gpu_device("a" + UID[1:], "main", GPUS).spec["cdiVersion"] == "0.3.0"


def test_env_carries_hami_core_limits_per_visible_gpu():
    device = gpu_device(UID, "main", GPUS)
    assert edits(device.spec)["env"] == [
        f"NVIDIA_VISIBLE_DEVICES={GPUS[0].uuid},{GPUS[1].uuid}",
        "CUDA_DEVICE_MEMORY_LIMIT_0=11520m",
        "CUDA_DEVICE_MEMORY_LIMIT_1=4096m",
        "CUDA_DEVICE_SM_LIMIT=50",
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/{UID}_main.cache",
        "LD_PRELOAD=/usr/local/vgpu/libvgpu.so",
    ]


def test_mounts_bring_the_library_the_lock_dir_and_a_per_container_cache_dir(tmp_path: Path):
    paths = HamiCorePaths(
        libvgpu_host_path="/opt/hami/libvgpu.so",
        cache_host_dir=str(tmp_path / "containers"),
        container_dir="/vgpu",
    )
    device = gpu_device(UID, "worker-1", GPUS[:1], paths)
    mounts = {m["containerPath"]: m for m in edits(device.spec)["mounts"]}
    assert mounts["/vgpu"]["hostPath"] == str(tmp_path / "containers" / f"{UID}_worker-1")
    assert mounts["/vgpu/libvgpu.so"]["hostPath"] == "/opt/hami/libvgpu.so"
    assert mounts["/tmp/vgpulock"]["hostPath"] == "/tmp/vgpulock"
    assert "ro" in mounts["/vgpu/libvgpu.so"]["options"] and "rw" in mounts["/tmp/vgpulock"]["options"]
    assert all("bind" in m["options"] for m in mounts.values())
    order = [m["containerPath"] for m in edits(device.spec)["mounts"]]
    assert order.index("/vgpu") < order.index("/vgpu/libvgpu.so")  # parent before the file mounted inside it
    assert env_of(device.spec)["LD_PRELOAD"] == "/vgpu/libvgpu.so"
    assert set(device.host_dirs) == {mounts["/vgpu"]["hostPath"], "/tmp/vgpulock"}


def test_ld_so_preload_file_replaces_the_env_and_opting_out_drops_both():
    preload = gpu_device(UID, "main", GPUS, HamiCorePaths(ld_so_preload_host_path="/etc/vgpu/ld.so.preload"))
    assert "LD_PRELOAD" not in env_of(preload.spec)
    [mount] = [m for m in edits(preload.spec)["mounts"] if m["containerPath"] == "/etc/ld.so.preload"]
    assert mount["hostPath"] == "/etc/vgpu/ld.so.preload" and "ro" in mount["options"]

    opted_out = gpu_device(
        UID,
        "main",
        GPUS,
        HamiCorePaths(ld_so_preload_host_path="/etc/vgpu/ld.so.preload"),
        disable_control=True,
    )
    assert "LD_PRELOAD" not in env_of(opted_out.spec)
    assert "/etc/ld.so.preload" not in [m["containerPath"] for m in edits(opted_out.spec)["mounts"]]
    assert env_of(opted_out.spec)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "11520m"


def test_names_kind_and_annotation_follow_the_cdi_conventions():
    device = gpu_device(UID, "main", GPUS)
    assert device.spec["kind"] == KIND == "allot.dev/gpu"
    assert device.qualified_name == f"allot.dev/gpu={UID}-main"
    assert device.spec["devices"][0]["name"] == f"{UID}-main"
    assert device.annotation == {"cdi.k8s.io/allot.gpu_main": f"allot.dev/gpu={UID}-main"}
    assert device.file_name == f"allot.dev-gpu_{UID}_main.json"


def test_long_container_names_get_a_short_unique_annotation_key():
    long_a, long_b = "a" * 62 + "x", "a" * 62 + "y"
    keys = {annotation_key(long_a), annotation_key(long_b)}
    assert len(keys) == 2
    for key in keys:
        name = key.removeprefix("cdi.k8s.io/")
        assert len(name) <= 63 and name[0].isalnum() and name[-1].isalnum()
        assert name.startswith("allot.gpu_aaaa")
    assert annotation_key(long_a) == annotation_key(long_a)


def test_the_same_inputs_give_the_same_bytes():
    assert encode(gpu_device(UID, "main", GPUS).spec) == encode(gpu_device(UID, "main", list(GPUS)).spec)


@pytest.mark.parametrize(
    ("uid", "container", "gpus", "paths", "message"),
    [
        ("../etc", "main", GPUS, None, "pod uid"),
        (UID, "Main", GPUS, None, "DNS-1123"),
        (UID, "a_b", GPUS, None, "DNS-1123"),
        (UID, "main", [], None, "no GPUs"),
        (UID, "main", [GPUS[0], GPUS[0]], None, "listed twice"),
        (UID, "main", [GpuShare(uuid="GPU-1,GPU-2", memory_mib=1, cores=1)], None, "malformed"),
        (UID, "main", [GpuShare(uuid="GPU-1", memory_mib=0, cores=50)], None, "unlimited"),
        (UID, "main", [GpuShare(uuid="GPU-1", memory_mib=10, cores=0)], None, "1..100"),
        (UID, "main", [GpuShare(uuid="GPU-1", memory_mib=10, cores=101)], None, "1..100"),
        (UID, "main", [GPUS[0], msgspec.structs.replace(GPUS[1], cores=30)], None, "differ"),
        (UID, "main", GPUS, HamiCorePaths(libvgpu_host_path="libvgpu.so"), "libvgpu_host_path"),
        (UID, "main", GPUS, HamiCorePaths(cache_host_dir="/a/../b"), "cache_host_dir"),
    ],
)
def test_bad_inputs_are_refused_naming_the_reason(uid, container, gpus, paths, message):
    with pytest.raises(CdiError, match=message):
        gpu_device(uid, container, gpus, paths)


def test_validate_reports_what_the_cdi_library_would_refuse():
    spec = gpu_device(UID, "main", GPUS).spec
    assert any("below 0.6.0" in p for p in validate({**spec, "annotations": {"a.b/c": "d"}}))
    assert any("below 0.5.0" in p for p in validate({**spec, "cdiVersion": "0.4.0"}))
    assert any("not a released" in p for p in validate({**spec, "cdiVersion": "2.0"}))
    assert any("kind" in p for p in validate({**spec, "kind": "allot.dev"}))
    assert any("listed twice" in p for p in validate({**spec, "devices": spec["devices"] * 2}))
    broken = json.loads(json.dumps(spec))
    broken["devices"][0]["containerEdits"]["env"].append("=oops")
    broken["devices"][0]["name"] = "-bad"
    assert len(validate(broken)) == 2
    assert minimum_version(json.loads((FIXTURES / "cdi-good-minimal.json").read_text())) == "0.3.0"
    assert minimum_version(json.loads((FIXTURES / "cdi-good-spec-example.json").read_text())) == "0.5.0"


# --- spec files -------------------------------------------------------------------------------------------------


def device_for(uid: str, container: str, tmp_path: Path, memory_mib: int = 11520) -> Any:
    paths = HamiCorePaths(cache_host_dir=str(tmp_path / "cache"), lock_host_dir=str(tmp_path / "vgpulock"))
    return gpu_device(uid, container, [msgspec.structs.replace(GPUS[0], memory_mib=memory_mib)], paths)


def test_write_spec_is_atomic_and_idempotent(tmp_path: Path):
    specs = tmp_path / "cdi"
    device = device_for(UID, "main", tmp_path)
    assert write_spec(str(specs), device) is True
    target = specs / device.file_name
    assert json.loads(target.read_text()) == device.spec
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    inode = target.stat().st_ino
    assert write_spec(str(specs), device) is False
    assert target.stat().st_ino == inode
    changed = device_for(UID, "main", tmp_path, memory_mib=2048)
    assert write_spec(str(specs), changed) is True
    assert target.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert env_of(json.loads(target.read_text()))["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
    assert sorted(p.name for p in specs.iterdir()) == [device.file_name]


def test_a_failed_write_leaves_the_previous_spec_and_no_temporary_file(tmp_path: Path, monkeypatch):
    specs = tmp_path / "cdi"
    device = device_for(UID, "main", tmp_path)
    write_spec(str(specs), device)
    before = (specs / device.file_name).read_bytes()

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device", dst)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(CdiError, match=f"{device.file_name}: cannot write spec: No space left"):
        write_spec(str(specs), device_for(UID, "main", tmp_path, memory_mib=1))
    assert (specs / device.file_name).read_bytes() == before
    assert sorted(p.name for p in specs.iterdir()) == [device.file_name]


def test_an_invalid_spec_is_never_written(tmp_path: Path):
    device = device_for(UID, "main", tmp_path)
    broken = msgspec.structs.replace(device, spec={**device.spec, "cdiVersion": "0.3.0"})
    with pytest.raises(CdiError, match="invalid spec"):
        write_spec(str(tmp_path), broken)
    assert not (tmp_path / device.file_name).exists()


def test_sync_writes_the_desired_specs_and_removes_stale_ones_of_this_kind_only(tmp_path: Path):
    specs = tmp_path / "cdi"
    specs.mkdir()
    (specs / "nvidia.com-gpu.json").write_text("{}")
    (specs / f"allot.dev-gpu_{OTHER_UID}_old.json").write_text("{}")
    (specs / ".allot-gpu-tmp-crashed.tmp").write_text("partial")
    main, side = device_for(UID, "main", tmp_path), device_for(UID, "side", tmp_path)

    report = sync_specs(str(specs), [main, side])
    assert set(report.written) == {main.file_name, side.file_name} and report.unchanged == ()
    assert set(report.removed) == {f"allot.dev-gpu_{OTHER_UID}_old.json", ".allot-gpu-tmp-crashed.tmp"}
    assert sorted(p.name for p in specs.iterdir()) == sorted(
        ["nvidia.com-gpu.json", main.file_name, side.file_name]
    )
    for directory in main.host_dirs + side.host_dirs:
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o777

    again = sync_specs(str(specs), [main])
    assert again.written == () and again.unchanged == (main.file_name,) and again.removed == (side.file_name,)


def test_prune_removes_the_specs_of_pods_that_are_gone(tmp_path: Path):
    specs = tmp_path / "cdi"
    for device in (device_for(UID, "main", tmp_path), device_for(OTHER_UID, "main", tmp_path)):
        write_spec(str(specs), device)
    (specs / "vendor.com-other.json").write_text("{}")
    assert prune_pods(str(specs), [UID]) == (f"allot.dev-gpu_{OTHER_UID}_main.json",)
    assert sorted(p.name for p in specs.iterdir()) == sorted(
        [f"allot.dev-gpu_{UID}_main.json", "vendor.com-other.json"]
    )
    assert prune_pods(str(specs), [UID]) == ()
    assert prune_pods(str(tmp_path / "absent"), []) == ()


def test_host_directory_errors_name_the_path(tmp_path: Path):
    (tmp_path / "file").write_text("")
    device = gpu_device(UID, "main", GPUS, HamiCorePaths(cache_host_dir=str(tmp_path / "file")))
    with pytest.raises(CdiError, match=str(tmp_path / "file")):
        ensure_host_dirs(device)
