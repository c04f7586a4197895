"""Node, Device and NodeResourceTopology objects at the door: validated with field paths, read into typed values.

Two layers: structural checks here (names, mappings, quantities and their range, device entries), then the
parsers of :mod:`allot_contracts.objects.inventory` that build the typed values every engine reads. An object is
accepted only when both accept it, so nothing a consumer cannot read becomes scheduling input.

``admit_node`` / ``admit_device`` / ``admit_topology`` return the typed value or ``None`` with the issues;
``validate_*`` return the issues alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import (
    Inventory,
    NodeInfo,
    Topology,
    parse_device_cr,
    parse_node,
    parse_nrt,
)
from allot_contracts.objects.meta import is_dns_subdomain
from allot_contracts.quantity import QuantityError, format_quantity, to_canonical
from allot_contracts.quantity_limits import checked_amount


def _quantities(values: Any, path: str, issues: list[FieldIssue]) -> dict[str, int]:
    out: dict[str, int] = {}
    if values is None:
        return out
    if not isinstance(values, Mapping):
        issues.append(FieldIssue(path=path, message="must be a mapping of resource name to quantity"))
        return out
    for name, value in values.items():
        amount = checked_amount(str(name), value, f"{path}[{name}]", issues, code="InvalidField")
        if amount is not None:
            out[str(name)] = amount
    return out


def _name(manifest: Mapping[str, Any], issues: list[FieldIssue]) -> None:
    meta = manifest.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        issues.append(FieldIssue(path="metadata.name", message="is required"))
        return
    if not isinstance(meta["name"], str):
        issues.append(FieldIssue(path="metadata.name", message="must be a string"))
    elif not is_dns_subdomain(meta["name"]):
        issues.append(
            FieldIssue(
                path="metadata.name",
                message="must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'; at most 253 characters)",
                value=meta["name"][:300],
            )
        )
    for field in ("labels", "annotations"):
        _string_map(meta.get(field), f"metadata.{field}", issues)
    for field in ("spec", "status"):
        if manifest.get(field) is not None and not isinstance(manifest[field], Mapping):
            issues.append(FieldIssue(path=field, message="must be a mapping"))


def _string_map(values: Any, path: str, issues: list[FieldIssue]) -> None:
    if values is None:
        return
    if not isinstance(values, Mapping):
        issues.append(FieldIssue(path=path, message="must be a mapping of string keys to string values"))
        return
    for key, value in values.items():
        if not isinstance(value, str):
            issues.append(
                FieldIssue(path=f'{path}["{key}"]', message=f"must be a string (got {type(value).__name__})")
            )


def _engine_parse(
    parse: Any, manifest: Mapping[str, Any], issues: list[FieldIssue]
) -> tuple[Any, list[FieldIssue]]:
    """Run an engine parser on a structurally sound object: (its result, or None; its field errors as ours)."""
    if issues:
        return None, issues
    try:
        result = parse(dict(manifest))
    except (
        Exception
    ) as exc:  # a parser that cannot read the object at all: still a clear rejection, never a crash
        return None, [FieldIssue(path="", message=f"cannot be read: {type(exc).__name__}: {exc}")]
    return result, list(result[-1])


def _structural_node(manifest: Mapping[str, Any]) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    _name(manifest, issues)
    status = manifest.get("status") or {}
    if not isinstance(status, Mapping):
        return [*issues, FieldIssue(path="status", message="must be a mapping")]
    allocatable = (
        status.get("allocatable") if status.get("allocatable") is not None else status.get("capacity")
    )
    if allocatable is None:
        issues.append(
            FieldIssue(path="status.allocatable", message="is required (the node's schedulable resources)")
        )
    _quantities(allocatable, "status.allocatable", issues)
    _quantities(status.get("capacity"), "status.capacity", issues)
    spec = manifest.get("spec") or {}
    if not isinstance(spec, Mapping):
        return issues
    if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
        issues.append(FieldIssue(path="spec.unschedulable", message="must be true or false"))
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        issues.append(FieldIssue(path="spec.taints", message="must be a list"))
    else:
        for i, taint in enumerate(taints):
            if not isinstance(taint, Mapping) or not taint.get("key"):
                issues.append(FieldIssue(path=f"spec.taints[{i}].key", message="is required"))
            elif taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                issues.append(
                    FieldIssue(
                        path=f"spec.taints[{i}].effect",
                        message="must be NoSchedule, PreferNoSchedule or NoExecute",
                    )
                )
    return issues


def validate_node(manifest: Mapping[str, Any]) -> list[FieldIssue]:
    return _engine_parse(parse_node, manifest, _structural_node(manifest))[1]


def capacity_summary(manifest: Mapping[str, Any]) -> dict[str, str]:
    status = manifest.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    out: dict[str, str] = {}
    for name, value in sorted(allocatable.items()):
        try:
            out[str(name)] = format_quantity(str(name), to_canonical(str(name), value))
        except QuantityError:
            continue
    return out


def _structural_device(manifest: Mapping[str, Any]) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    _name(manifest, issues)
    spec = manifest.get("spec") or {}
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    if devices is None:
        devices = []
    if not isinstance(devices, list):
        return [*issues, FieldIssue(path="spec.devices", message="must be a list")]
    seen: set[tuple[str, int]] = set()
    for i, device in enumerate(devices):
        path = f"spec.devices[{i}]"
        if not isinstance(device, Mapping):
            issues.append(FieldIssue(path=path, message="must be a mapping"))
            continue
        kind = device.get("type")
        if kind not in n.RECORDED_DEVICE_TYPES:
            issues.append(
                FieldIssue(
                    path=f"{path}.type", message=f"must be one of {', '.join(n.RECORDED_DEVICE_TYPES)}"
                )
            )
            continue
        minor = device.get("minor")
        if not isinstance(minor, int) or isinstance(minor, bool) or minor < 0:
            issues.append(FieldIssue(path=f"{path}.minor", message="must be a non-negative integer"))
        elif (kind, minor) in seen:
            issues.append(FieldIssue(path=f"{path}.minor", message=f"duplicate {kind} minor {minor}"))
        else:
            seen.add((kind, minor))
        if "health" in device and not isinstance(device["health"], bool):
            issues.append(FieldIssue(path=f"{path}.health", message="must be true or false"))
        _quantities(device.get("resources"), f"{path}.resources", issues)
        _string_map(device.get("labels"), f"{path}.labels", issues)
        topology = device.get("topology")
        if topology is not None and not isinstance(topology, Mapping):
            issues.append(FieldIssue(path=f"{path}.topology", message="must be a mapping"))
        elif topology is not None:
            for key in ("socketID", "nodeID"):
                if key in topology and (
                    not isinstance(topology[key], int) or isinstance(topology[key], bool)
                ):
                    issues.append(FieldIssue(path=f"{path}.topology.{key}", message="must be an integer"))
        groups = device.get("vfGroups")
        if groups is not None and not isinstance(groups, list):
            issues.append(FieldIssue(path=f"{path}.vfGroups", message="must be a list"))
        for gi, group in enumerate(groups if isinstance(groups, list) else []):
            if not isinstance(group, Mapping) or not isinstance(group.get("vfs") or [], list):
                issues.append(
                    FieldIssue(path=f"{path}.vfGroups[{gi}]", message="must be a mapping with a list of vfs")
                )
    return issues


def validate_device(manifest: Mapping[str, Any]) -> list[FieldIssue]:
    return _engine_parse(parse_device_cr, manifest, _structural_device(manifest))[1]


def device_summary(manifest: Mapping[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for device in (manifest.get("spec") or {}).get("devices") or []:
        counts[str(device.get("type"))] = counts.get(str(device.get("type")), 0) + 1
    return dict(sorted(counts.items()))


def _structural_topology(manifest: Mapping[str, Any]) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    _name(manifest, issues)
    zones = manifest.get("zones")
    if zones is not None and not isinstance(zones, list):
        issues.append(FieldIssue(path="zones", message="must be a list"))
    return issues


def validate_topology(manifest: Mapping[str, Any]) -> list[FieldIssue]:
    return _engine_parse(parse_nrt, manifest, _structural_topology(manifest))[1]


def _admitted(
    parse: Any, structural: Any, index: int, manifest: Mapping[str, Any], issues: list[FieldIssue]
) -> Any:
    """The engine's reading of a sound object (``parse(manifest)[index]``), parsed once; None with ``issues`` filled
    when it is not sound."""
    result, found = _engine_parse(parse, manifest, structural(manifest))
    issues.extend(found)
    return None if found else result[index]


def admit_node(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> NodeInfo | None:
    """The Node as engines read it; a ``usage-thresholds`` annotation that cannot be read is a warning (the node
    is then held to the plugin's thresholds, as upstream), never a refusal."""
    read: list[FieldIssue] = []
    node: NodeInfo | None = _admitted(lambda m: parse_node(m, read), _structural_node, 0, manifest, issues)
    if node is not None:
        warnings.extend(read)
    return node


def admit_device(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> Inventory | None:
    inventory: Inventory | None = _admitted(parse_device_cr, _structural_device, 1, manifest, issues)
    return inventory


def admit_topology(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> Topology | None:
    topology: Topology | None = _admitted(parse_nrt, _structural_topology, 1, manifest, issues)
    return topology
