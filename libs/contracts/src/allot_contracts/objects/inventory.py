"""Static node inventory: v1 Node, Koordinator Device, NodeResourceTopology — parsed into immutable values.

Responsibility: parse the three node-side objects into ``NodeInfo``, ``Inventory`` (devices by type and minor, VF
groups, topology, GPU partition table) and ``Topology`` (CPU topology, NUMA zones, kubelet policy, reserved CPUs),
reporting malformed fields as ``FieldIssue`` while keeping every valid part.

Invariants:
- Devices of a type are ordered by minor; VFs by busID; partitions keep table order.
- Upstream semantics kept: a device's ``health`` defaults to false, and an unhealthy device has no capacity.
- ``content_key`` of each value captures everything decisions read **except** per-node identities (names, device
  UUIDs), so identical machines share caches; a cache whose result reads an identity (HAMi's UUID selectors read
  device ids) adds that identity to its key itself.
Pure; no IO.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from allot_contracts.issues import FieldIssue, checked_int, checked_text
from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import CpusetError, parse_cpuset
from allot_contracts.objects.load_aware import CustomUsageThresholds, read_usage_thresholds
from allot_contracts.objects.reservation_pod import unknown_field_issues
from allot_contracts.objects.selectors import Taint, parse_taints
from allot_contracts.quantity import QuantityError, to_canonical
from allot_contracts.quantity_limits import checked_amount
from allot_contracts.resources import parse_resource_list

__all__ = [
    "Device",
    "Inventory",
    "NodeInfo",
    "Partition",
    "Topology",
    "parse_device_cr",
    "parse_node",
    "parse_nrt",
]

_ENC = msgspec.json.Encoder(order="sorted")


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: dict[str, int]
    reserved_cpus: tuple[int, ...] = ()
    ready: bool = True  # the Ready condition (a node without conditions counts as ready)
    # the node's own load-aware thresholds (annotation scheduling.koordinator.sh/usage-thresholds)
    usage_thresholds: CustomUsageThresholds | None = None


class Device(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    minor: int
    id: str
    healthy: bool
    resources: dict[str, int]  # capacity ({} when unhealthy)
    socket: int
    numa: int  # -1 = unknown
    pcie: str  # "" = unknown
    bus_id: str
    labels: dict[str, str]
    vf_groups: tuple[tuple[dict[str, str], tuple[tuple[int | None, str], ...]], ...] = ()


class Partition(msgspec.Struct, frozen=True, kw_only=True):
    minors: tuple[int, ...]
    score: int
    ring_bus_bandwidth: int | None = None


class Inventory(msgspec.Struct, frozen=True, kw_only=True):
    devices: dict[str, tuple[Device, ...]]
    labels: dict[str, str]
    partitions: dict[int, tuple[Partition, ...]] | None
    content_key: bytes

    def device(self, dtype: str, minor: int) -> Device | None:
        for d in self.devices.get(dtype, ()):
            if d.minor == minor:
                return d
        return None


class Topology(msgspec.Struct, frozen=True, kw_only=True):
    cpus: dict[int, tuple[int, int, int]]  # cpu -> (core id, socket, numa); core ids are unique per node
    cpus_per_core: int
    numa_ids: tuple[int, ...]
    numa_allocatable: dict[int, dict[str, int]]
    kubelet_policy: str
    reserved: frozenset[int]
    full_pcpus_only: bool
    content_key: bytes
    # millicores of ``reserved`` CPUs inside each zone whose cpu the object reports: the scheduler takes them out
    # of that zone (zones whose cpu is derived from the CPU topology leave reserved CPUs out already)
    numa_reserved: dict[int, int] = msgspec.field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return bool(self.cpus) and self.cpus_per_core > 0


def _labels(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in sorted((raw or {}).items())} if isinstance(raw, dict) else {}


def _renamed_deprecated(raw: Any, path: str, errors: list[FieldIssue]) -> dict[str, Any]:
    """Koordinator's node and device transformers: a deprecated ``kubernetes.io/`` device resource name becomes its
    ``koordinator.sh/`` name, unless that name is listed too (then the deprecated entry is left as it is)."""
    if raw is not None and not isinstance(raw, dict):
        errors.append(FieldIssue(path=path, message="must be a map of quantities"))
    out = {str(k): v for k, v in raw.items()} if isinstance(raw, dict) else {}
    for old, new in n.DEPRECATED_ALIASES.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    return out


def _ready(status: dict[str, Any]) -> bool:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True


def parse_node(
    manifest: dict[str, Any], warnings: list[FieldIssue] | None = None
) -> tuple[NodeInfo | None, list[FieldIssue]]:
    """(the node, or None; what refuses it). ``warnings`` receives what is read but not acted on."""
    errors: list[FieldIssue] = []
    meta = manifest.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None, [FieldIssue(path="metadata.name", message="is required")]
    status = manifest.get("status") or {}
    where = "allocatable" if status.get("allocatable") else "capacity"
    raw_alloc = _renamed_deprecated(status.get(where), f"status.{where}", errors)
    alloc: dict[str, int] = {}
    for k in sorted(raw_alloc):
        try:
            alloc.update(parse_resource_list({k: raw_alloc[k]}))
        except QuantityError as exc:
            errors.append(FieldIssue(path=f"status.{where}[{k}]", message=str(exc)))
    reserved: list[int] = []
    ann = meta.get("annotations") or {}
    if not isinstance(ann, dict):
        errors.append(FieldIssue(path="metadata.annotations", message="must be a mapping"))
        ann = {}
    if ann.get(n.ANN_NODE_RESERVATION):
        try:
            rv = ann[n.ANN_NODE_RESERVATION]
            rv = json.loads(rv) if isinstance(rv, str) else rv
            reserved = parse_cpuset(str((rv or {}).get("reservedCPUs") or ""))
        except (ValueError, AttributeError) as exc:
            errors.append(
                FieldIssue(path=f'metadata.annotations["{n.ANN_NODE_RESERVATION}"]', message=str(exc))
            )
    spec = manifest.get("spec") or {}
    return NodeInfo(
        name=name,
        labels=_labels(meta.get("labels")),
        taints=parse_taints(spec.get("taints")),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=alloc,
        reserved_cpus=tuple(reserved),
        ready=_ready(status),
        usage_thresholds=read_usage_thresholds(ann, warnings if warnings is not None else []),
    ), errors


# The fields of a Device's ``spec``, of one of its devices and of the parts of one, as Koordinator's Device CRD has
# them (``DeviceInfo``): any other is refused with its path, as the API server's strict field validation refuses it
_SPEC_FIELDS = frozenset({"devices"})
_DEVICE_FIELDS = frozenset(
    {"type", "labels", "id", "minor", "moduleID", "health", "resources", "topology", "vfGroups", "conditions"}
)
_TOPOLOGY_FIELDS = frozenset({"socketID", "nodeID", "pcieID", "busID"})
_VF_GROUP_FIELDS = frozenset({"labels", "vfs"})
_VF_FIELDS = frozenset({"minor", "busID"})


def _device(raw: Any, path: str, errors: list[FieldIssue]) -> Device | None:
    if not isinstance(raw, dict):
        errors.append(FieldIssue(path=path, message="must be an object"))
        return None
    unknown_field_issues(raw, _DEVICE_FIELDS, path, errors)
    dtype, minor = raw.get("type"), raw.get("minor")
    if not isinstance(dtype, str) or not dtype:
        errors.append(FieldIssue(path=f"{path}.type", message="is required"))
        return None
    if not isinstance(minor, int) or isinstance(minor, bool) or minor < 0:
        errors.append(FieldIssue(path=f"{path}.minor", message="must be a non-negative integer"))
        return None
    healthy = raw.get("health") is True
    try:
        res = parse_resource_list(_renamed_deprecated(raw.get("resources"), f"{path}.resources", errors))
    except QuantityError as exc:
        errors.append(FieldIssue(path=f"{path}.resources", message=str(exc)))
        res = {}
    topo = raw.get("topology") or {}
    if not isinstance(topo, dict):
        errors.append(FieldIssue(path=f"{path}.topology", message="must be an object"))
        topo = {}
    unknown_field_issues(topo, _TOPOLOGY_FIELDS, f"{path}.topology", errors)
    numa = checked_int(topo.get("nodeID"), f"{path}.topology.nodeID", errors, low=-1)
    socket = checked_int(topo.get("socketID"), f"{path}.topology.socketID", errors, low=-1)
    texts = {
        f: checked_text(where.get(f), f"{path}{sub}.{f}", errors) or ""
        for where, sub, f in ((raw, "", "id"), (topo, ".topology", "pcieID"), (topo, ".topology", "busID"))
    }
    groups = []
    raw_groups = raw.get("vfGroups") or []
    if not isinstance(raw_groups, list) or not all(isinstance(g, dict | None) for g in raw_groups):
        errors.append(FieldIssue(path=f"{path}.vfGroups", message="must be a list of objects"))
        raw_groups = []
    for gi, g in enumerate(raw_groups):
        unknown_field_issues(g or {}, _VF_GROUP_FIELDS, f"{path}.vfGroups[{gi}]", errors)
        raw_vfs = (g or {}).get("vfs") or []
        if not isinstance(raw_vfs, list):
            errors.append(FieldIssue(path=f"{path}.vfGroups[{gi}].vfs", message="must be a list"))
            raw_vfs = []
        vfs = []
        for vi, vf in enumerate(raw_vfs):
            if not isinstance(vf, dict) or not vf.get("busID") or not isinstance(vf["busID"], str):
                errors.append(
                    FieldIssue(
                        path=f"{path}.vfGroups[{gi}].vfs[{vi}].busID", message="is required (a string)"
                    )
                )
                continue
            unknown_field_issues(vf, _VF_FIELDS, f"{path}.vfGroups[{gi}].vfs[{vi}]", errors)
            m = vf.get("minor")
            vfs.append((m if isinstance(m, int) and not isinstance(m, bool) else None, vf["busID"]))
        groups.append((_labels((g or {}).get("labels")), tuple(sorted(vfs, key=lambda v: v[1]))))
    return Device(
        type=dtype,
        minor=minor,
        id=texts["id"],
        healthy=healthy,
        resources=res if healthy else {},
        socket=-1 if socket is None else socket,
        numa=-1 if numa is None else numa,
        pcie=texts["pcieID"],
        bus_id=texts["busID"],
        labels=_labels(raw.get("labels")),
        vf_groups=tuple(groups),
    )


def _partitions(raw: Any, errors: list[FieldIssue]) -> dict[int, tuple[Partition, ...]] | None:
    """The ``gpu-partitions`` table: ``{"<gpu count>": [{"minors": [...], "allocationScore": n,
    "ringBusBandwidth": q}, ...]}``; every malformed entry is reported with its path."""
    path = f'metadata.annotations["{n.ANN_GPU_PARTITIONS}"]'
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            errors.append(FieldIssue(path=path, message=f"invalid GPU partition table: invalid JSON: {exc}"))
            return None
    if not isinstance(raw, dict):
        errors.append(
            FieldIssue(path=path, message="invalid GPU partition table: must be an object keyed by GPU count")
        )
        return None
    before = len(errors)
    out: dict[int, tuple[Partition, ...]] = {}
    for key in sorted(raw, key=str):
        where = f"{path}.{key}"
        if not str(key).isdigit():
            errors.append(FieldIssue(path=where, message="the key must be a GPU count (a whole number)"))
            continue
        entries = raw[key]
        if not isinstance(entries, list):
            errors.append(FieldIssue(path=where, message="must be a list of partitions"))
            continue
        parts = []
        for i, p in enumerate(entries):
            at = f"{where}[{i}]"
            minors = p.get("minors") if isinstance(p, dict) else None
            if not isinstance(p, dict):
                errors.append(FieldIssue(path=at, message="must be an object with minors"))
                continue
            if not isinstance(minors, list) or not all(
                isinstance(m, int) and not isinstance(m, bool) for m in minors
            ):
                errors.append(
                    FieldIssue(
                        path=f"{at}.minors", code="Required", message="is required: a list of GPU minors"
                    )
                )
                continue
            score = p.get("allocationScore", 0)
            if isinstance(score, bool) or not isinstance(score, int):
                errors.append(FieldIssue(path=f"{at}.allocationScore", message="must be an integer"))
                continue
            bw = p.get("ringBusBandwidth")
            try:
                ring = to_canonical("bw", bw) if bw not in (None, "") else None
            except QuantityError as exc:
                errors.append(FieldIssue(path=f"{at}.ringBusBandwidth", message=str(exc)))
                continue
            parts.append(Partition(minors=tuple(sorted(minors)), score=score, ring_bus_bandwidth=ring))
        out[int(key)] = tuple(parts)
    return out if len(errors) == before else None


def _node_named(manifest: dict[str, Any]) -> tuple[dict[str, Any], str, FieldIssue | None]:
    """The metadata and name of an object named after its node (a Device, a NodeResourceTopology); the issue
    instead of a name when ``metadata.name`` is missing, empty or not a string."""
    meta = manifest.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return meta, "", FieldIssue(path="metadata.name", message="is required (the node name)")
    return meta, name, None


def parse_device_cr(manifest: dict[str, Any]) -> tuple[str, Inventory | None, list[FieldIssue]]:
    errors: list[FieldIssue] = []
    meta, name, missing = _node_named(manifest)
    if missing is not None:
        return "", None, [missing]
    by_type: dict[str, list[Device]] = {}
    spec = manifest.get("spec") or {}
    if isinstance(spec, dict):
        unknown_field_issues(spec, _SPEC_FIELDS, "spec", errors)
    for i, raw in enumerate(spec.get("devices") or [] if isinstance(spec, dict) else []):
        d = _device(raw, f"spec.devices[{i}]", errors)
        if d is not None:
            if any(x.minor == d.minor for x in by_type.get(d.type, [])):
                errors.append(
                    FieldIssue(path=f"spec.devices[{i}].minor", message=f"duplicate {d.type} minor {d.minor}")
                )
                continue
            by_type.setdefault(d.type, []).append(d)
    devices = {t: tuple(sorted(ds, key=lambda d: d.minor)) for t, ds in sorted(by_type.items())}
    labels = _labels(meta.get("labels"))
    partitions = _partitions((meta.get("annotations") or {}).get(n.ANN_GPU_PARTITIONS), errors)
    key_src = (
        {
            t: [
                (
                    d.minor,
                    d.healthy,
                    d.resources,
                    d.socket,
                    d.numa,
                    d.pcie,
                    d.bus_id,
                    d.labels,
                    [(g, list(v)) for g, v in d.vf_groups],
                )
                for d in ds
            ]
            for t, ds in devices.items()
        },
        labels,
        [(k, [(p.minors, p.score, p.ring_bus_bandwidth) for p in v]) for k, v in (partitions or {}).items()],
        partitions is None,
    )
    return (
        name,
        Inventory(devices=devices, labels=labels, partitions=partitions, content_key=_ENC.encode(key_src)),
        errors,
    )


MAX_NUMA_NODES = 1024  # Linux's largest NUMA node count (CONFIG_NODES_SHIFT=10)


def _zone_allocatable(zones: Any, errors: list[FieldIssue]) -> dict[int, dict[str, int]]:
    """The allocatable resources of each NUMA zone (``type: Node``), by NUMA node id."""
    out: dict[int, dict[str, int]] = {}
    if zones is not None and not isinstance(zones, list):
        errors.append(FieldIssue(path="zones", message=f"must be a list of zones, not {_json_type(zones)}"))
        return out
    for i, z in enumerate(zones or []):
        if not isinstance(z, dict):
            errors.append(FieldIssue(path=f"zones[{i}]", message=f"must be an object, not {_json_type(z)}"))
            continue
        if z.get("type") != "Node":
            continue
        zname = z.get("name")
        digits = zname[5:] if isinstance(zname, str) and zname.startswith("node-") else ""
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 4 and int(digits) < MAX_NUMA_NODES):
            message = f"NUMA zones are named node-<id>, an id below {MAX_NUMA_NODES}"
            errors.append(FieldIssue(path=f"zones[{i}].name", message=message, value=str(zname)[:64]))
            continue
        resources = _zone_resources(z.get("resources"), f"zones[{i}].resources", errors)
        out[int(digits)] = dict(sorted(resources.items()))
    return out


def _zone_resources(resources: Any, path: str, errors: list[FieldIssue]) -> dict[str, int]:
    """A zone's ``resources``: a list of ``{name, capacity, allocatable}`` (allocatable read, else capacity)."""
    if resources is not None and not isinstance(resources, list):
        errors.append(
            FieldIssue(path=path, message=f"must be a list of resources, not {_json_type(resources)}")
        )
        return {}
    out: dict[str, int] = {}
    for j, r in enumerate(resources or []):
        where = f"{path}[{j}]"
        if not isinstance(r, dict):
            errors.append(FieldIssue(path=where, message=f"must be an object, not {_json_type(r)}"))
            continue
        name = r.get("name")
        if not isinstance(name, str) or not name:
            errors.append(FieldIssue(path=f"{where}.name", message="is required: a resource name"))
            continue
        field = "allocatable" if "allocatable" in r else "capacity"
        amount = checked_amount(name, r.get(field, 0), f"{where}.{field}", errors, code="InvalidField")
        if amount is not None:
            out[name] = amount
    return out


def _json_type(value: object) -> str:
    """How a YAML/JSON value of the wrong kind is named in a message."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


_KUBELET_POLICIES = {
    "SingleNUMANodeContainerLevel": "SingleNUMANode",
    "SingleNUMANodePodLevel": "SingleNUMANode",
    "RestrictedContainerLevel": "Restricted",
    "RestrictedPodLevel": "Restricted",
    "BestEffortContainerLevel": "BestEffort",
    "BestEffortPodLevel": "BestEffort",
    "SingleNUMANode": "SingleNUMANode",
    "Restricted": "Restricted",
    "BestEffort": "BestEffort",
}


def parse_nrt(manifest: dict[str, Any]) -> tuple[str, Topology | None, list[FieldIssue]]:
    errors: list[FieldIssue] = []
    meta, name, missing = _node_named(manifest)
    if missing is not None:
        return "", None, [missing]
    ann = meta.get("annotations") or {}
    cpus: dict[int, tuple[int, int, int]] = {}
    raw_topo = ann.get(n.ANN_CPU_TOPOLOGY)
    if raw_topo:
        try:
            topo = json.loads(raw_topo) if isinstance(raw_topo, str) else raw_topo
            for c in topo.get("detail") or []:
                # Core ids repeat across sockets on Linux: make them unique per node as (socket, core).
                cpus[int(c["id"])] = (
                    (int(c["socket"]) << 16) | int(c["core"]),
                    int(c["socket"]),
                    int(c["node"]),
                )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            errors.append(
                FieldIssue(
                    path=f'metadata.annotations["{n.ANN_CPU_TOPOLOGY}"]',
                    message=f"invalid CPU topology: {exc}",
                )
            )
            cpus = {}
    reserved: set[int] = set()
    full_only = False
    raw_pol = ann.get(n.ANN_KUBELET_CPU_MANAGER_POLICY)
    try:
        if raw_pol:
            pol = json.loads(raw_pol) if isinstance(raw_pol, str) else raw_pol
            reserved.update(parse_cpuset(str(pol.get("reservedCPUs") or "")))
            full_only = (
                pol.get("policy") == "static"
                and str((pol.get("options") or {}).get("full-pcpus-only")) == "true"
            )
        raw_allocs = ann.get(n.ANN_POD_CPU_ALLOCS)
        if raw_allocs:
            allocs = json.loads(raw_allocs) if isinstance(raw_allocs, str) else raw_allocs
            for a in allocs:
                if a.get("managedByKubelet"):
                    reserved.update(parse_cpuset(str(a.get("cpuset") or "")))
    except (ValueError, TypeError, AttributeError, CpusetError) as exc:
        errors.append(
            FieldIssue(path="metadata.annotations", message=f"invalid kubelet CPU annotations: {exc}")
        )
    cores: dict[int, int] = {}
    for core, _, _ in cpus.values():
        cores[core] = cores.get(core, 0) + 1
    numa_alloc = _zone_allocatable(manifest.get("zones"), errors)
    numa_ids = sorted(set(numa_alloc) | {c[2] for c in cpus.values()})
    numa_reserved: dict[int, int] = {}
    for nid in numa_ids:
        zone = numa_alloc.setdefault(nid, {})
        in_zone = [cpu for cpu, c in cpus.items() if c[2] == nid]
        if n.CPU not in zone and cpus:
            zone[n.CPU] = 1000 * sum(1 for cpu in in_zone if cpu not in reserved)
        elif any(cpu in reserved for cpu in in_zone):
            numa_reserved[nid] = 1000 * sum(1 for cpu in in_zone if cpu in reserved)
        numa_alloc[nid] = dict(sorted(zone.items()))
    policies = manifest.get("topologyPolicies") or []
    if not isinstance(policies, list) or not all(isinstance(p, str) for p in policies):
        errors.append(FieldIssue(path="topologyPolicies", message="must be a list of strings"))
        policies = []
    kubelet_policy = _KUBELET_POLICIES.get(policies[0], "") if policies else ""
    topo_val = Topology(
        cpus=dict(sorted(cpus.items())),
        cpus_per_core=max(cores.values()) if cores else 0,
        numa_ids=tuple(numa_ids),
        numa_allocatable=dict(sorted(numa_alloc.items())),
        kubelet_policy=kubelet_policy,
        reserved=frozenset(reserved),
        full_pcpus_only=full_only,
        content_key=b"",
        numa_reserved=numa_reserved,
    )
    key = _ENC.encode(
        (
            sorted(topo_val.cpus.items()),
            numa_ids,
            sorted(topo_val.numa_allocatable.items()),
            kubelet_policy,
            sorted(reserved),
            full_only,
            sorted(numa_reserved.items()),
        )
    )
    return name, msgspec.structs.replace(topo_val, content_key=key), errors
