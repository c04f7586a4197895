"""Hardware discovery over captured machine trees (tests/fixtures/machines) and over this machine's own /sys, /proc.

For each machine: the Device and NodeResourceTopology carry the expected counts, minors, NUMA/socket/PCIe grouping,
VFs, CPU topology and zones; both objects are read without errors by the repo's own parsers
(``allot_contracts.objects.inventory``) and accepted by node-reporter's validation; the output is stable and sorted
whatever the input order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import parse_cpuset
from allot_contracts.objects.inventory import parse_device_cr, parse_nrt
from allot_contracts.objects.nodes import validate_device, validate_topology
from node_reporter.discovery import Discovery, NvmlAnswer, decode_answer, discover, read_machine
from node_reporter.discovery.build import build_device
from node_reporter.discovery.cpus import cpu_topology
from node_reporter.discovery.nvml import query

MACHINES = Path(__file__).parent / "fixtures" / "machines"
GiB = 1024**3


def nvml_of(machine: str) -> NvmlAnswer:
    return decode_answer((MACHINES / machine / "nvml.json").read_bytes())


def run(machine: str) -> Discovery:
    root = str(MACHINES / machine)
    return discover(machine, sys_root=root, proc_root=root, nvml=nvml_of(machine))


def annotation(nrt: dict[str, Any], key: str) -> Any:
    return json.loads(nrt["metadata"]["annotations"][key])


def devices(d: Discovery, dtype: str) -> list[dict[str, Any]]:
    return [x for x in d.device["spec"]["devices"] if x["type"] == dtype]


def assert_readable(d: Discovery) -> None:
    """Both objects parse without field errors and pass node-reporter's validation."""
    name, inventory, errors = parse_device_cr(d.device)
    assert (name, errors) == (d.device["metadata"]["name"], [])
    assert inventory is not None
    name, topology, errors = parse_nrt(d.topology)
    assert (name, errors) == (d.topology["metadata"]["name"], [])
    assert topology is not None and topology.valid
    assert validate_device(d.device) == []
    assert validate_topology(d.topology) == []


@pytest.mark.parametrize("machine", ["dgx-like", "workstation", "cpu-vm"])
def test_every_machine_yields_objects_the_engine_reads(machine: str) -> None:
    d = run(machine)
    assert_readable(d)
    assert d.device["apiVersion"] == "scheduling.koordinator.sh/v1alpha1" and d.device["kind"] == "Device"
    assert d.topology["apiVersion"] == "topology.node.k8s.io/v1alpha1"
    assert d.topology["kind"] == "NodeResourceTopology"
    assert d.device["metadata"]["name"] == d.topology["metadata"]["name"] == machine


# --- dgx-like --------------------------------------------------------------------------------------------------------
SWITCHES = {  # root port -> (NUMA node, NIC addresses, GPU addresses), from the machine's layout (README.md)
    "0000:15:01.0": (0, {"0000:18:00.0", "0000:1a:00.0"}, {"0000:19:00.0", "0000:1b:00.0"}),
    "0000:37:01.0": (0, {"0000:3a:00.0", "0000:3c:00.0"}, {"0000:3b:00.0", "0000:3d:00.0"}),
    "0000:97:01.0": (1, {"0000:9a:00.0", "0000:9c:00.0"}, {"0000:9b:00.0", "0000:9d:00.0"}),
    "0000:b7:01.0": (1, {"0000:ba:00.0", "0000:bc:00.0"}, {"0000:bb:00.0", "0000:bd:00.0"}),
}


def test_dgx_like_gpus_carry_nvml_identity_and_switch_placement() -> None:
    d = run("dgx-like")
    gpus = devices(d, "gpu")
    assert [g["minor"] for g in gpus] == list(range(8))
    assert all(g["health"] is True for g in gpus)
    by_minor = {g["minor"]: g for g in gpus}
    for rec in nvml_of("dgx-like").devices:  # minor and UUID come from NVML, the bus id matched on PCI
        g = by_minor[rec.minor or 0]
        assert g["id"] == rec.uuid
        assert g["topology"]["busID"] == rec.pci_bus_id[4:].lower()
    assert by_minor[0]["topology"]["busID"] == "0000:3b:00.0"  # index 2 on the bus has minor 0
    for g in gpus:
        assert g["resources"] == {
            n.GPU_CORE: "100",
            n.GPU_MEMORY: "83201216Ki",  # 85198045184 bytes
            n.GPU_MEMORY_RATIO: "100",
        }
        numa, _, addresses = SWITCHES[g["topology"]["pcieID"]]
        assert g["topology"]["busID"] in addresses
        assert (g["topology"]["nodeID"], g["topology"]["socketID"]) == (numa, numa)
    assert d.device["metadata"]["labels"] == {
        n.LABEL_GPU_MODEL: "H800",
        n.LABEL_GPU_VENDOR: "nvidia",
        "node.koordinator.sh/gpu-driver-version": "535.161.08",
    }
    assert d.warnings == ()


def test_dgx_like_rdma_nics_are_physical_functions_with_their_vfs() -> None:
    d = run("dgx-like")
    nics = devices(d, "rdma")
    # 12 RDMA devices in /sys/class/infiniband, 4 of them the first NIC's VFs: 8 NICs, numbered in address order.
    assert [x["id"] for x in nics] == sorted(a for _, addrs, _ in SWITCHES.values() for a in addrs)
    assert [x["minor"] for x in nics] == list(range(8))
    for x in nics:
        assert x["health"] is True and x["resources"] == {n.RDMA: "100"}
        numa, addresses, _ = SWITCHES[x["topology"]["pcieID"]]
        assert x["id"] in addresses and x["topology"]["busID"] == x["id"]
        assert (x["topology"]["nodeID"], x["topology"]["socketID"]) == (numa, numa)
    assert [len(x["vfGroups"][0]["vfs"]) for x in nics] == [4, 4, 4, 4, 4, 4, 2, 2]
    assert nics[0]["vfGroups"] == [
        {"vfs": [{"minor": i, "busID": f"0000:18:00.{i + 1}"} for i in range(4)]}  # minor = virtfn index
    ]
    assert nics[7]["vfGroups"][0]["vfs"] == [
        {"minor": 0, "busID": "0000:bc:00.1"},
        {"minor": 1, "busID": "0000:bc:00.2"},
    ]


def test_dgx_like_each_switch_pairs_two_gpus_with_two_nics_as_the_engine_sees_it() -> None:
    _, inventory, _ = parse_device_cr(run("dgx-like").device)
    assert inventory is not None
    grouped: dict[str, dict[str, set[str]]] = {}
    for dtype in ("gpu", "rdma"):
        for dev in inventory.devices[dtype]:
            grouped.setdefault(dev.pcie, {}).setdefault(dtype, set()).add(dev.bus_id)
            assert dev.healthy and dev.numa == SWITCHES[dev.pcie][0]
    assert grouped == {p: {"rdma": nics, "gpu": gpus} for p, (_, nics, gpus) in SWITCHES.items()}
    assert [len(d.vf_groups[0][1]) for d in inventory.devices["rdma"]] == [4, 4, 4, 4, 4, 4, 2, 2]
    assert inventory.labels[n.LABEL_GPU_MODEL] in n.HOPPER_MODELS


def test_dgx_like_topology_has_two_sockets_two_numa_nodes_and_hyperthreads() -> None:
    nrt = run("dgx-like").topology
    detail = annotation(nrt, n.ANN_CPU_TOPOLOGY)["detail"]
    assert [c["id"] for c in detail] == list(range(128))
    cpu = {c["id"]: c for c in detail}
    assert cpu[0]["core"] == cpu[64]["core"] and cpu[0]["core"] != cpu[32]["core"]  # siblings share a core
    assert cpu[31]["core"] == cpu[95]["core"]
    assert len({c["core"] for c in detail}) == 64  # logical core ids are unique on the node
    assert {c["socket"] for c in detail if c["node"] == 0} == {0}
    assert {c["id"] for c in detail if c["node"] == 1} == set(range(32, 64)) | set(range(96, 128))
    assert annotation(nrt, "node.koordinator.sh/cpu-basic-info") == {
        "cpuModel": "Intel(R) Xeon(R) Platinum 8462Y+",
        "hyperThreadEnabled": True,
        "turboEnabled": True,
        "vendorID": "GenuineIntel",
    }
    assert annotation(nrt, "node.koordinator.sh/cpu-shared-pools") == [
        {"socket": 0, "node": 0, "cpuset": "0-31,64-95"},
        {"socket": 1, "node": 1, "cpuset": "32-63,96-127"},
    ]
    assert annotation(nrt, n.ANN_KUBELET_CPU_MANAGER_POLICY) == {"policy": "none"}
    assert nrt["topologyPolicies"] == ["None"]
    _, topo, _ = parse_nrt(nrt)
    assert topo is not None
    assert topo.numa_ids == (0, 1) and topo.cpus_per_core == 2 and len(topo.cpus) == 128
    assert topo.numa_allocatable == {
        0: {
            n.CPU: 64_000,
            "hugepages-1Gi": 0,
            "hugepages-2Mi": 2 * GiB,
            n.MEMORY: 1056311232 * 1024 - 2 * GiB,
        },
        1: {n.CPU: 64_000, "hugepages-1Gi": 0, "hugepages-2Mi": 0, n.MEMORY: 1056943640 * 1024},
    }


# --- workstation -----------------------------------------------------------------------------------------------------
def test_workstation_gpus_sit_on_separate_root_ports_of_the_single_numa_node() -> None:
    d = run("workstation")
    gpus = devices(d, "gpu")
    assert [g["minor"] for g in gpus] == [0, 1, 2, 3]
    assert [g["topology"]["pcieID"] for g in gpus] == [
        "0000:00:01.1",
        "0000:20:03.1",
        "0000:40:01.1",
        "0000:60:03.1",
    ]
    assert [g["topology"]["busID"] for g in gpus] == [
        "0000:01:00.0",
        "0000:21:00.0",
        "0000:41:00.0",
        "0000:61:00.0",
    ]
    # numa_node is -1 on this machine; with a single NUMA node that node is the answer.
    assert {(g["topology"]["nodeID"], g["topology"]["socketID"]) for g in gpus} == {(0, 0)}
    assert {g["resources"][n.GPU_MEMORY] for g in gpus} == {"49140Mi"}
    assert [g["health"] for g in gpus] == [True, True, False, True]
    assert devices(d, "rdma") == [] and len(d.device["spec"]["devices"]) == 4  # no audio function, no NIC
    assert d.device["metadata"]["labels"][n.LABEL_GPU_MODEL] == "RTX-A6000"
    assert any("GPU 2" in w and "remapped rows" in w for w in d.warnings)
    _, inventory, _ = parse_device_cr(d.device)
    assert inventory is not None
    assert [g.healthy for g in inventory.devices["gpu"]] == [True, True, False, True]
    assert inventory.devices["gpu"][2].resources == {}  # the engine gives an unhealthy GPU no capacity


def test_workstation_topology_is_one_socket_with_smt_and_boost() -> None:
    nrt = run("workstation").topology
    detail = annotation(nrt, n.ANN_CPU_TOPOLOGY)["detail"]
    assert len(detail) == 64 and {(c["socket"], c["node"]) for c in detail} == {(0, 0)}
    assert len({c["core"] for c in detail}) == 32
    info = annotation(nrt, "node.koordinator.sh/cpu-basic-info")
    assert info["hyperThreadEnabled"] is True and info["turboEnabled"] is True
    assert info["cpuModel"] == "AMD Ryzen Threadripper PRO 5975WX 32-Cores"
    assert [z["name"] for z in nrt["zones"]] == ["node-0"]
    _, topo, _ = parse_nrt(nrt)
    assert topo is not None
    assert (
        topo.numa_allocatable[0][n.CPU] == 64_000 and topo.numa_allocatable[0][n.MEMORY] == 263596868 * 1024
    )
    assert topo.numa_allocatable[0]["hugepages-2Mi"] == 0  # no huge-page directory: none


# --- cpu-vm ----------------------------------------------------------------------------------------------------------
def test_cpu_vm_has_no_devices_and_one_numa_node_from_proc_meminfo() -> None:
    d = run("cpu-vm")
    assert d.device["spec"]["devices"] == [] and "labels" not in d.device["metadata"]
    assert d.warnings == ("no GPU reported: NVML is not available: NVML Shared Library Not Found",)
    detail = annotation(d.topology, n.ANN_CPU_TOPOLOGY)["detail"]
    assert detail == [{"id": i, "core": i, "socket": 0, "node": 0} for i in range(4)]
    assert annotation(d.topology, "node.koordinator.sh/cpu-basic-info") == {
        "cpuModel": "Intel Xeon Processor (Icelake)",
        "vendorID": "GenuineIntel",
    }  # smt/active 0 and no turbo control: both false, omitted as Koordinator omits them
    [zone] = d.topology["zones"]
    memory = next(r for r in zone["resources"] if r["name"] == "memory")
    assert memory == {
        "name": "memory",
        "capacity": "16393232Ki",
        "allocatable": "16393232Ki",
        "available": "16393232Ki",
    }


# --- determinism -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("machine", ["dgx-like", "workstation", "cpu-vm"])
def test_output_is_stable_and_independent_of_input_order(machine: str) -> None:
    first, second = run(machine), run(machine)
    assert json.dumps(first.device) == json.dumps(second.device)
    assert json.dumps(first.topology) == json.dumps(second.topology)
    root = str(MACHINES / machine)
    m = read_machine(root, root)
    answer = nvml_of(machine)
    reversed_answer = NvmlAnswer(
        devices=tuple(reversed(answer.devices)), driver_version=answer.driver_version, reason=answer.reason
    )
    device, warnings = build_device(
        machine,
        cpu_topology(m.cpus),
        dict(reversed(list(m.pci.items()))),
        tuple(reversed(m.rdma)),
        reversed_answer,
    )
    assert json.dumps(device) == json.dumps(first.device)
    assert warnings == build_device(machine, cpu_topology(m.cpus), m.pci, m.rdma, answer)[1]
    listed = first.device["spec"]["devices"]
    assert listed == sorted(listed, key=lambda x: (n.DEVICE_TYPES.index(x["type"]), x["minor"]))
    for dev in listed:
        for group in dev.get("vfGroups", []):
            assert group["vfs"] == sorted(group["vfs"], key=lambda v: v["busID"])
    zones = [z["name"] for z in first.topology["zones"]]
    assert zones == sorted(zones, key=lambda z: int(z[5:]))


# --- this machine ----------------------------------------------------------------------------------------------------
def test_this_machine_yields_a_valid_topology() -> None:
    d = discover("this-node")  # real /sys and /proc, NVML queried for real (no GPU here)
    name, topo, errors = parse_nrt(d.topology)
    assert errors == [] and topo is not None and topo.valid
    online = parse_cpuset(Path("/sys/devices/system/cpu/online").read_text().strip())
    assert sorted(topo.cpus) == online
    assert topo.numa_ids and all(topo.numa_allocatable[i][n.MEMORY] > 0 for i in topo.numa_ids)
    assert sum(topo.numa_allocatable[i][n.CPU] for i in topo.numa_ids) == 1000 * len(online)
    assert parse_device_cr(d.device)[2] == []
    assert validate_topology(d.topology) == [] and validate_device(d.device) == []


def test_real_nvml_answer_maps_to_a_readable_device() -> None:
    answer = query()
    if not answer.devices:
        assert answer.reason, "an empty NVML answer must say why"
        pytest.skip(f"no GPU on this machine: {answer.reason}")
    d = discover("this-node", nvml=answer)
    gpus = devices(d, "gpu")
    assert len(gpus) == len(answer.devices)
    assert parse_device_cr(d.device)[2] == []
