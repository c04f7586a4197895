"""The rules of hardware discovery, one at a time: PCIe placement, CPU topology, GPU health and labels, the NVML
adapter (against a stand-in for ``pynvml``), kubelet policies, and errors that name the file at fault."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import parse_device_cr, parse_nrt
from node_reporter.discovery import DiscoveryError, discover, read_machine
from node_reporter.discovery.build import KubeletSettings, build_device, build_nrt, gpu_model, topology_policy
from node_reporter.discovery.cpus import CpuReadings, cpu_basic_info, cpu_topology
from node_reporter.discovery.nvml import (
    GpuRecord,
    NvmlAnswer,
    decode_answer,
    encode_answer,
    gpu_health,
    query,
)
from node_reporter.discovery.pci import PciFunction, RdmaLink, normalize_bus_id, parse_pci_path, pcie_id

MACHINES = Path(__file__).parent / "fixtures" / "machines"


# --- PCIe placement --------------------------------------------------------------------------------------------------
def test_pci_path_splits_host_bridge_and_bridges() -> None:
    rel = "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    assert parse_pci_path(rel, "x") == (
        "pci0000:15",
        ("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"),
    )
    # Hyper-V guests: ACPI and VMBus parents before the host bridge are not part of the PCIe tree.
    vmbus = "LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/47505500-0001-0000-3130-444531303244/pci0001:00/0001:00:00.0"
    assert parse_pci_path(vmbus, "x") == ("pci0001:00", ("0001:00:00.0",))


@pytest.mark.parametrize("rel", ["platform/serial8250", "pci0000:00", "pci0000:00/0000:00:01.0/net"])
def test_pci_path_that_is_not_a_pci_function_is_an_error_naming_the_link(rel: str) -> None:
    with pytest.raises(DiscoveryError, match=r"^/sys/bus/pci/devices/0000:00:01\.0: resolves to devices/"):
        parse_pci_path(rel, "/sys/bus/pci/devices/0000:00:01.0")


def fn(address: str, bridges: tuple[str, ...] = (), **kw: Any) -> PciFunction:
    fields: dict[str, Any] = {"vendor": 0x10DE, "device": 0x2324, "class_code": 0x030200, "numa_node": 0}
    fields.update(kw)
    return PciFunction(address=address, host_bridge="pci0000:" + address[5:7], bridges=bridges, **fields)


def test_pcie_id_is_the_root_port_or_the_host_bridge_on_the_root_bus() -> None:
    behind_switch = fn("0000:19:00.0", ("0000:15:01.0", "0000:16:00.0", "0000:17:01.0"))
    direct = fn("0000:16:00.0", ("0000:15:01.0",))
    assert pcie_id(behind_switch) == pcie_id(direct) == "0000:15:01.0"
    assert pcie_id(fn("0000:00:04.0")) == "pci0000:00"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000001:02:00.0", "0001:02:00.0"),
    ],
)
def test_bus_ids_are_normalized_to_sysfs_spelling(given: str, expected: str) -> None:
    assert normalize_bus_id(given) == expected


# --- CPU topology ----------------------------------------------------------------------------------------------------
def readings(**kw: Any) -> CpuReadings:
    fields: dict[str, Any] = {
        "online": (0, 1, 2, 3),
        "package": {0: 0, 1: 1, 2: 0, 3: 1},
        "core_id": {0: 0, 1: 0, 2: 0, 3: 0},
        "node_cpus": {0: (0, 2), 1: (1, 3)},
        "node_memory": {0: 8 << 30, 1: 8 << 30},
        "node_hugepages": {},
    }
    fields.update(kw)
    return CpuReadings(**fields)


def test_logical_cores_are_unique_per_node_even_when_core_ids_repeat_across_sockets() -> None:
    topo = cpu_topology(readings())
    assert [(c.id, c.core, c.socket, c.node) for c in topo.cpus] == [
        (0, 0, 0, 0),
        (1, 1, 1, 1),
        (2, 0, 0, 0),
        (3, 1, 1, 1),
    ]
    assert topo.node_socket() == {0: 0, 1: 1}


def test_core_id_gaps_and_unknown_package_are_normalized() -> None:
    r = readings(
        online=(0, 1, 2),
        package={0: -1, 1: -1, 2: -1},
        core_id={0: 0, 1: 8, 2: 8},
        node_cpus={},
        node_memory={0: 1 << 30},
    )
    topo = cpu_topology(r)
    assert [(c.core, c.socket, c.node) for c in topo.cpus] == [(0, 0, 0), (1, 0, 0), (1, 0, 0)]
    assert topo.numa_nodes == (0,)


def test_a_cpu_no_node_lists_belongs_to_the_lowest_node() -> None:
    topo = cpu_topology(readings(node_cpus={1: (1, 3), 2: (0,)}, node_memory={1: 1, 2: 1}))
    assert {c.id: c.node for c in topo.cpus} == {0: 2, 1: 1, 2: 1, 3: 1}


def test_hyperthreading_and_turbo_sources() -> None:
    siblings = readings(core_id={0: 0, 1: 0, 2: 0, 3: 0}, package={0: 0, 1: 0, 2: 0, 3: 0})
    topo = cpu_topology(siblings)
    assert cpu_basic_info(siblings, topo) == {
        "hyperThreadEnabled": True
    }  # 4 threads on one core, no smt file
    off = readings(smt_active=False, package={0: 0, 1: 0, 2: 0, 3: 0})
    assert "hyperThreadEnabled" not in cpu_basic_info(off, cpu_topology(off))
    no_turbo = readings(smt_active=False, no_turbo=True, boost=True)
    assert cpu_basic_info(no_turbo, topo) == {}  # intel_pstate wins over cpufreq
    boost = readings(smt_active=False, boost=True)
    assert cpu_basic_info(boost, topo) == {"turboEnabled": True}
    assert cpu_basic_info(readings(smt_active=False, no_turbo=False), topo) == {"turboEnabled": True}


def test_huge_pages_are_taken_out_of_zone_memory() -> None:
    r = readings(node_hugepages={0: {"hugepages-1Gi": 2 << 30, "hugepages-2Mi": 0}})
    _, topo, errors = parse_nrt(build_nrt("n", r))
    assert errors == [] and topo is not None
    assert (
        topo.numa_allocatable[0][n.MEMORY] == 6 << 30 and topo.numa_allocatable[0]["hugepages-1Gi"] == 2 << 30
    )


# --- kubelet ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "scope", "expected"),
    [
        ("none", "container", "None"),
        ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
        ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
        ("restricted", "pod", "RestrictedPodLevel"),
        ("best-effort", "container", "BestEffortContainerLevel"),
        ("something-new", "pod", "None"),
    ],
)
def test_topology_policy_follows_koordlet(policy: str, scope: str, expected: str) -> None:
    assert (
        topology_policy(KubeletSettings(topology_manager_policy=policy, topology_manager_scope=scope))
        == expected
    )


def test_static_cpu_manager_reserved_cpus_reach_the_engine() -> None:
    kubelet = KubeletSettings(
        cpu_manager_policy="static",
        cpu_manager_policy_options={"full-pcpus-only": "true"},
        reserved_cpus="0-1",
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
    )
    nrt = build_nrt("n", readings(), kubelet)
    assert json.loads(nrt["metadata"]["annotations"][n.ANN_KUBELET_CPU_MANAGER_POLICY]) == {
        "policy": "static",
        "options": {"full-pcpus-only": "true"},
        "reservedCPUs": "0-1",
    }
    _, topo, errors = parse_nrt(nrt)
    assert errors == [] and topo is not None
    assert topo.reserved == frozenset({0, 1}) and topo.full_pcpus_only
    assert topo.kubelet_policy == "SingleNUMANode"


# --- GPUs ------------------------------------------------------------------------------------------------------------
def gpu(index: int, bus: str, **kw: Any) -> GpuRecord:
    fields: dict[str, Any] = {
        "minor": index,
        "uuid": f"GPU-{index}",
        "name": "NVIDIA H800",
        "memory_total": 80 << 30,
        "pci_bus_id": f"0000{bus.upper()}",
    }
    fields.update(kw)
    return GpuRecord(index=index, **fields)


@pytest.mark.parametrize(
    ("record", "healthy"),
    [
        (gpu(0, "0000:01:00.0"), True),
        (gpu(0, "0000:01:00.0", retired_pages_pending=False, remapped_rows_pending=False), True),
        (gpu(0, "0000:01:00.0", lost=True), False),
        (gpu(0, "0000:01:00.0", retired_pages_pending=True), False),
        (gpu(0, "0000:01:00.0", remapped_rows_failure=True), False),
        (gpu(0, "0000:01:00.0", remapped_rows_pending=True), False),
    ],
)
def test_gpu_health(record: GpuRecord, healthy: bool) -> None:
    ok, why = gpu_health(record)
    assert ok is healthy and bool(why) is not healthy


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H800", "H800"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB"),
        ("NVIDIA GeForce RTX 4090 (Laptop)", "GeForce-RTX-4090-Laptop"),
    ],
)
def test_gpu_model_label_is_koordlets_and_a_valid_label_value(name: str, model: str) -> None:
    assert gpu_model(name) == model


def two_numa_machine() -> CpuReadings:
    return readings()


def test_gpu_placement_when_the_kernel_or_pci_does_not_know() -> None:
    topo = cpu_topology(two_numa_machine())
    pci = {
        "0000:19:00.0": fn("0000:19:00.0", ("0000:15:01.0",), numa_node=-1),
        "0000:9b:00.0": fn("0000:9b:00.0", ("0000:97:01.0",), numa_node=1),
        "0000:bb:00.0": fn("0000:bb:00.0", ("0000:b7:01.0",)),  # NVIDIA GPU that NVML does not see
    }
    answer = NvmlAnswer(
        devices=(
            gpu(0, "0000:19:00.0"),
            gpu(1, "0000:9b:00.0", minor=None),
            gpu(2, "0000:db:00.0"),
            gpu(3, "0000:9b:00.0", minor=1, name="NVIDIA H20"),
        ),
        driver_version="550.1",
    )
    device, warnings = build_device("n", topo, pci, (), answer)
    gpus = {d["minor"]: d for d in device["spec"]["devices"]}
    # numa_node -1 on a two-node machine stays unknown; minor None falls back to the NVML index.
    assert gpus[0]["topology"] == {
        "socketID": -1,
        "nodeID": -1,
        "pcieID": "0000:15:01.0",
        "busID": "0000:19:00.0",
    }
    assert gpus[1]["topology"] == {
        "socketID": 1,
        "nodeID": 1,
        "pcieID": "0000:97:01.0",
        "busID": "0000:9b:00.0",
    }
    assert "topology" not in gpus[2]  # its bus id is not on PCI
    assert sorted(gpus) == [0, 1, 2]  # GPU index 3 claimed minor 1 twice
    assert n.LABEL_GPU_MODEL not in device["metadata"]["labels"]  # H800 and H20: no single model
    assert device["metadata"]["labels"][n.LABEL_GPU_VENDOR] == "nvidia"
    text = "\n".join(warnings)
    for expected in (
        "minor 1 is already taken",
        "0000:db:00.0 is not a PCI function",
        "0000:bb:00.0 is an NVIDIA GPU",
    ):
        assert expected in text
    assert "GPU models differ" in text
    assert parse_device_cr(device)[2] == []


def test_rdma_minors_vfs_and_labels() -> None:
    topo = cpu_topology(two_numa_machine())
    nic = {"vendor": 0x15B3, "device": 0x1021, "class_code": 0x020700}
    pci = {
        "0000:1a:00.0": fn(
            "0000:1a:00.0", ("0000:15:01.0",), **nic, vfs=((1, "0000:1a:00.2"), (0, "0000:1a:00.1"))
        ),
        "0000:1a:00.1": fn("0000:1a:00.1", ("0000:15:01.0",), **nic, physfn="0000:1a:00.0"),
        "0000:18:00.0": fn("0000:18:00.0", ("0000:15:01.0",), **nic, sriov_numvfs=2),
    }
    links = (
        RdmaLink(name="mlx5_1", address="0000:1a:00.0"),
        RdmaLink(name="mlx5_0", address="0000:18:00.0"),
        RdmaLink(name="mlx5_2", address="0000:1a:00.1"),  # a VF: part of its PF
        RdmaLink(name="rxe0", address=None),
    )
    device, warnings = build_device("n", topo, pci, links, NvmlAnswer(), vf_group_labels={"type": "general"})
    nics = device["spec"]["devices"]
    assert [(x["id"], x["minor"]) for x in nics] == [("0000:18:00.0", 0), ("0000:1a:00.0", 1)]
    assert "vfGroups" not in nics[0]
    assert nics[1]["vfGroups"] == [
        {
            "labels": {"type": "general"},
            "vfs": [{"minor": 0, "busID": "0000:1a:00.1"}, {"minor": 1, "busID": "0000:1a:00.2"}],
        }
    ]
    assert "labels" not in device["metadata"]  # no GPU, no GPU labels
    assert any("rxe0 is not a PCI function" in w for w in warnings)
    assert any("sriov_numvfs is 2 but 0 VFs" in w for w in warnings)
    _, inventory, errors = parse_device_cr(device)
    assert errors == [] and inventory is not None
    assert inventory.devices["rdma"][1].vf_groups == (
        ({"type": "general"}, ((0, "0000:1a:00.1"), (1, "0000:1a:00.2"))),
    )


# --- the NVML adapter ------------------------------------------------------------------------------------------------
class FakeNvml:
    """The part of pynvml's surface the adapter uses, answering from a list of GPUs."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # pynvml's names
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    NVML_FEATURE_ENABLED = 1

    def __init__(self, gpus: list[dict[str, Any]], *, init_error: str = "") -> None:
        self.gpus, self.init_error, self.shut = gpus, init_error, False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.161.08"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.gpus[i]

    def _get(self, h: dict[str, Any], key: str) -> Any:
        value = h[key]
        if isinstance(value, type) and issubclass(value, Exception):
            raise value()
        return value

    def nvmlDeviceGetMinorNumber(self, h: dict[str, Any]) -> int:
        return int(self._get(h, "minor"))

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:
        return str(self._get(h, "uuid"))

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:
        return str(self._get(h, "name"))

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=self._get(h, "total"), free=0, used=0)

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(busId=self._get(h, "bus"))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: dict[str, Any]) -> int:
        return int(self._get(h, "pending"))

    def nvmlDeviceGetRemappedRows(self, h: dict[str, Any]) -> tuple[int, int, int, int]:
        result: tuple[int, int, int, int] = self._get(h, "rows")
        return result


def fake_gpu(i: int, **kw: Any) -> dict[str, Any]:
    g: dict[str, Any] = {
        "minor": i,
        "uuid": f"GPU-{i}",
        "name": "NVIDIA H800",
        "total": 85198045184,
        "bus": f"00000000:{0x19 + i:02X}:00.0".encode(),
        "pending": 0,
        "rows": (0, 0, 0, 0),
    }
    g.update(kw)
    return g


def test_nvml_adapter_records_each_gpu_and_shuts_down() -> None:
    nvml = FakeNvml(
        [
            fake_gpu(0),
            fake_gpu(1, minor=FakeNvml.NVMLError_NotSupported, pending=FakeNvml.NVMLError_NotSupported),
            fake_gpu(2, rows=(0, 1, 1, 0)),
            fake_gpu(3, pending=FakeNvml.NVMLError_GpuIsLost),
            fake_gpu(4, uuid=FakeNvml.NVMLError),
        ]
    )
    answer = query(nvml)
    assert nvml.shut
    assert answer.driver_version == "535.161.08"
    assert [r.index for r in answer.devices] == [0, 1, 2, 3]
    assert answer.reason == "GPU 4: "  # the failing GPU is named; the stand-in's error has no text
    first, second, third, fourth = answer.devices
    assert first.pci_bus_id == "00000000:19:00.0" and first.memory_total == 85198045184
    assert (first.retired_pages_pending, first.remapped_rows_pending, first.lost) == (False, False, False)
    assert second.minor is None and second.retired_pages_pending is None
    assert third.remapped_rows_pending is True and not gpu_health(third)[0]
    assert fourth.lost and not gpu_health(fourth)[0]
    assert decode_answer(encode_answer(answer)) == answer


def test_nvml_adapter_without_nvml_or_gpus_says_why() -> None:
    missing = query(FakeNvml([], init_error="NVML Shared Library Not Found"))
    assert missing.devices == () and missing.reason == "NVML is not available: NVML Shared Library Not Found"
    empty = query(FakeNvml([]))
    assert empty.devices == () and empty.reason == "NVML reports no GPU"


def test_recorded_answers_decode() -> None:
    for machine, count in (("dgx-like", 8), ("workstation", 4), ("cpu-vm", 0)):
        answer = decode_answer((MACHINES / machine / "nvml.json").read_bytes())
        assert len(answer.devices) == count and (bool(answer.reason) is (count == 0))


# --- errors and defaults in the file tree ----------------------------------------------------------------------------
@pytest.fixture
def vm(tmp_path: Path) -> Path:
    root = tmp_path / "vm"
    shutil.copytree(MACHINES / "cpu-vm", root, symlinks=True)
    return root


def discover_at(root: Path) -> Any:
    return discover("n", sys_root=str(root), proc_root=str(root), nvml=NvmlAnswer(reason="none"))


def test_a_missing_required_file_is_named(vm: Path) -> None:
    (vm / "sys/devices/system/cpu/cpu2/topology/core_id").unlink()
    with pytest.raises(DiscoveryError) as err:
        discover_at(vm)
    assert str(err.value) == f"{vm}/sys/devices/system/cpu/cpu2/topology/core_id: no such file"


@pytest.mark.parametrize(
    ("rel", "content", "message"),
    [
        ("sys/devices/system/cpu/online", "0-x\n", "is not a cpuset list"),
        (
            "sys/devices/system/cpu/cpu1/topology/physical_package_id",
            "zero\n",
            "expected an integer, found 'zero'",
        ),
        ("proc/meminfo", "MemFree: 1 kB\n", "has no 'MemTotal: <n> kB' line"),
    ],
)
def test_a_malformed_file_is_named_with_what_is_wrong(vm: Path, rel: str, content: str, message: str) -> None:
    target = vm / rel
    target.resolve().write_text(content)
    with pytest.raises(DiscoveryError) as err:
        discover_at(vm)
    assert str(err.value).startswith(f"{vm}/{rel}: ") and message in str(err.value)


def test_a_directory_where_a_file_belongs_is_named(vm: Path) -> None:
    (vm / "proc/cpuinfo").unlink()
    (vm / "proc/cpuinfo").mkdir()
    with pytest.raises(DiscoveryError, match=r"proc/cpuinfo: is a directory, expected a file"):
        discover_at(vm)


def test_an_unreadable_pci_function_is_left_out_and_named(vm: Path, tmp_path: Path) -> None:
    link = vm / "sys/bus/pci/devices/0000:00:04.0"
    link.unlink()
    os.symlink("../../../devices/pci0000:00/0000:00:09.0", link)
    broken = discover_at(vm)
    assert (
        broken.warnings[0]
        == f"PCI function left out: {link}: link cannot be resolved: No such file or directory"
    )
    link.unlink()
    outside = tmp_path / "elsewhere" / "0000:00:04.0"
    outside.mkdir(parents=True)
    os.symlink(outside, link)
    escaping = discover_at(vm)
    assert escaping.warnings[0].startswith(f"PCI function left out: {link}: resolves to {outside}, outside ")
    (vm / "sys/devices/pci0000:00/0000:00:03.0/class").unlink()
    (vm / "sys/devices/pci0000:00/0000:00:02.0/vendor").write_text("qemu\n")
    machine = read_machine(str(vm), str(vm))
    assert sorted(machine.pci) == ["0000:00:00.0", "0000:00:01.0"]  # the rest is still read
    assert machine.problems == (
        f"PCI function left out: {vm}/sys/bus/pci/devices/0000:00:02.0/vendor: "
        "expected a hexadecimal number, found 'qemu'",
        f"PCI function left out: {vm}/sys/bus/pci/devices/0000:00:03.0/class: no such file",
        f"PCI function left out: {link}: resolves to {outside}, outside {os.path.realpath(vm / 'sys/devices')}",
    )
    assert parse_nrt(escaping.topology)[2] == []  # the CPU topology does not depend on PCI


def test_an_rdma_device_whose_link_is_broken_is_left_out_and_named(tmp_path: Path) -> None:
    root = tmp_path / "dgx"
    shutil.copytree(MACHINES / "dgx-like", root, symlinks=True)
    device = root / "sys/class/infiniband/mlx5_3/device"
    device.unlink()
    os.symlink("../../../0000:3c:00.7", device)
    machine = read_machine(str(root), str(root))
    assert [r.name for r in machine.rdma if r.name == "mlx5_3"] == []
    assert machine.problems == (
        f"RDMA device left out: {device}: link cannot be resolved: No such file or directory",
    )


def test_optional_files_fall_back_to_documented_defaults(vm: Path) -> None:
    for rel in ("sys/devices/system/cpu/smt/active", "sys/devices/pci0000:00/0000:00:03.0/numa_node"):
        (vm / rel).unlink()
    shutil.rmtree(vm / "sys/bus")  # no PCI at all
    machine = read_machine(str(vm), str(vm))
    assert machine.pci == {} and machine.rdma == () and machine.problems == ()
    assert machine.cpus.smt_active is None
    d = discover_at(vm)
    assert parse_nrt(d.topology)[2] == [] and d.device["spec"]["devices"] == []
