"""Koordinator pod annotations: strict parsing with field paths.

Inputs parsed here: ``device-allocate-hint``, ``device-joint-allocate``, ``gpu-partition-spec``, ``resource-spec``,
``numa-topology-spec`` (scheduling inputs; any error rejects the pod — our decisions 13/14: malformed input is
rejected at admission with its field path, never retried) and the allocation results ``device-allocated`` /
``resource-status`` carried by bound pods.

Annotation values may be JSON text (as in a real object) or an already-decoded object (as in a YAML scenario).
Unknown fields are rejected: a typo such as ``preferredTopologyScope`` (a field Koordinator does not have) would
otherwise be silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, invalid_annotation
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import CpusetError, parse_cpuset
from allot_contracts.objects.selectors import LabelSelector, parse_label_selector
from allot_contracts.quantity import QuantityError, to_canonical

__all__ = [
    "BoundAllocation",
    "DeviceHint",
    "JointSpec",
    "NUMASpec",
    "PartitionSpec",
    "ResourceSpec",
    "annotation_object",
    "decode_annotation",
    "decoded_object",
    "parse_device_allocated",
    "parse_hints",
    "parse_joint",
    "parse_numa_spec",
    "parse_partition_spec",
    "parse_resource_spec",
    "parse_resource_status",
]


class DeviceHint(msgspec.Struct, frozen=True, kw_only=True):
    selector: LabelSelector = ()
    vf_selector: LabelSelector | None = None
    allocate_strategy: str = ""
    required_scope: str = ""
    exclusive_policy: str = ""


class JointSpec(msgspec.Struct, frozen=True, kw_only=True):
    device_types: tuple[str, ...]
    required_scope: str = ""


class PartitionSpec(msgspec.Struct, frozen=True, kw_only=True):
    allocate_policy: str = "BestEffort"
    ring_bus_bandwidth: int | None = None


class ResourceSpec(msgspec.Struct, frozen=True, kw_only=True):
    required_bind: str = ""
    preferred_bind: str = ""
    exclusive: str = ""


class NUMASpec(msgspec.Struct, frozen=True, kw_only=True):
    policy: str = ""
    exclusive: str = ""


class BoundAllocation(msgspec.Struct, kw_only=True):
    """What a bound pod holds according to its annotations."""

    devices: dict[str, list[tuple[int, dict[str, int], tuple[str, ...]]]] = msgspec.field(
        default_factory=dict
    )
    cpuset: tuple[int, ...] = ()
    numa: dict[int, dict[str, int]] = msgspec.field(default_factory=dict)


def decode_annotation(
    annotations: Mapping[str, Any],
    key: str,
    errors: list[FieldIssue],
    note: str = "",
    *,
    decode: Callable[[str], Any] = json.loads,
) -> Any:
    """The decoded value of an annotation (``None`` when absent): JSON text read by ``decode``, or an object already
    decoded (a YAML scenario). Malformed JSON becomes a FieldIssue (the decoder's message followed by ``note``)."""
    raw = annotations.get(key)
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            return decode(raw)
        except ValueError as exc:  # msgspec's DecodeError is one too
            errors.append(invalid_annotation(annotation_path(key), f"invalid JSON: {exc}{note}"))
            return None
        except RecursionError:
            errors.append(invalid_annotation(annotation_path(key), f"invalid JSON: nested too deeply{note}"))
            return None
    return raw


def annotation_object(annotations: Mapping[str, object], key: str) -> JsonObject:
    """The object an annotation holds (JSON text or already decoded); ``{}`` when it holds none, holds something
    else or is not JSON. The lenient reader, for what reads a pod's annotations without admitting it (a projection,
    a view); admission reads with :func:`decode_annotation` and reports the issue."""
    value = annotations.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _obj(
    value: Any, key: str, suffix: str, allowed: set[str], errors: list[FieldIssue]
) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        errors.append(invalid_annotation(annotation_path(key, suffix), "must be an object"))
        return None
    for f in sorted(set(value) - allowed):
        errors.append(
            invalid_annotation(
                annotation_path(key, f"{suffix}.{f}"),
                f"unknown field; supported: {', '.join(sorted(allowed))}",
            )
        )
    return value


def _value_obj(value: Any, key: str, allowed: set[str], errors: list[FieldIssue]) -> dict[str, Any] | None:
    """The object an annotation's value is, unknown fields reported (None when absent, or not an object: an issue)."""
    return None if value is None else _obj(value, key, "", allowed, errors)


def _enum(v: Any, allowed: set[str] | frozenset[str], key: str, suffix: str, errors: list[FieldIssue]) -> str:
    if v is None or v == "":
        return ""
    # a list or an object is no value of the enum (nor hashable)
    if not isinstance(v, str) or v not in allowed:
        errors.append(
            invalid_annotation(
                annotation_path(key, suffix), f"unsupported value {v!r}; one of {', '.join(sorted(allowed))}"
            )
        )
        return ""
    return v


_HINT_FIELDS = {"selector", "vfSelector", "allocateStrategy", "requiredTopologyScope", "exclusivePolicy"}


def parse_hints(value: Any, errors: list[FieldIssue]) -> dict[str, DeviceHint]:
    key = n.ANN_DEVICE_ALLOCATE_HINT
    obj = _value_obj(value, key, set(n.DEVICE_TYPES), errors)
    out: dict[str, DeviceHint] = {}
    for dtype in sorted(obj or {}):
        if dtype not in n.DEVICE_TYPES:
            continue
        h = _obj(obj[dtype], key, f".{dtype}", _HINT_FIELDS, errors) if obj else None
        if h is None:
            continue
        sel_errors: list[FieldIssue] = []
        sel = parse_label_selector(h.get("selector"), annotation_path(key, f".{dtype}.selector"), sel_errors)
        vf = None
        if h.get("vfSelector") is not None:
            vf = parse_label_selector(
                h["vfSelector"], annotation_path(key, f".{dtype}.vfSelector"), sel_errors
            )
        errors.extend(msgspec.structs.replace(e, code="InvalidAnnotation") for e in sel_errors)
        out[dtype] = DeviceHint(
            selector=sel,
            vf_selector=vf,
            allocate_strategy=_enum(
                h.get("allocateStrategy"), n.ALLOCATE_STRATEGIES, key, f".{dtype}.allocateStrategy", errors
            ),
            required_scope=_enum(
                h.get("requiredTopologyScope"),
                set(n.TOPOLOGY_SCOPES),
                key,
                f".{dtype}.requiredTopologyScope",
                errors,
            ),
            exclusive_policy=_enum(
                h.get("exclusivePolicy"),
                n.DEVICE_EXCLUSIVE_POLICIES,
                key,
                f".{dtype}.exclusivePolicy",
                errors,
            ),
        )
    return out


def parse_joint(value: Any, errors: list[FieldIssue]) -> JointSpec | None:
    key = n.ANN_DEVICE_JOINT_ALLOCATE
    obj = _value_obj(value, key, {"deviceTypes", "requiredScope"}, errors)
    if obj is None:
        return None
    types = obj.get("deviceTypes")
    if (
        not isinstance(types, list)
        or not types
        or not all(t in n.DEVICE_TYPES for t in types)
        or len(set(types)) != len(types)
    ):
        errors.append(
            invalid_annotation(
                annotation_path(key, ".deviceTypes"),
                f"must be a non-empty list of distinct device types ({', '.join(n.DEVICE_TYPES)})",
            )
        )
        return None
    scope = _enum(obj.get("requiredScope"), n.JOINT_SCOPES, key, ".requiredScope", errors)
    return JointSpec(device_types=tuple(types), required_scope=scope)


def parse_partition_spec(value: Any, errors: list[FieldIssue]) -> PartitionSpec | None:
    key = n.ANN_GPU_PARTITION_SPEC
    obj = _value_obj(value, key, {"allocatePolicy", "ringBusBandwidth"}, errors)
    if obj is None:
        return None
    policy = (
        _enum(obj.get("allocatePolicy"), n.PARTITION_POLICIES, key, ".allocatePolicy", errors) or "BestEffort"
    )
    bw = None
    if obj.get("ringBusBandwidth") not in (None, ""):
        try:
            bw = to_canonical("ringBusBandwidth", obj["ringBusBandwidth"])
        except QuantityError as exc:
            errors.append(invalid_annotation(annotation_path(key, ".ringBusBandwidth"), str(exc)))
    return PartitionSpec(allocate_policy=policy, ring_bus_bandwidth=bw)


def parse_resource_spec(value: Any, errors: list[FieldIssue]) -> ResourceSpec:
    key = n.ANN_RESOURCE_SPEC
    obj = _value_obj(
        value, key, {"requiredCPUBindPolicy", "preferredCPUBindPolicy", "preferredCPUExclusivePolicy"}, errors
    )
    if obj is None:
        return ResourceSpec()
    return ResourceSpec(
        required_bind=_enum(
            obj.get("requiredCPUBindPolicy"), n.CPU_BIND_POLICIES, key, ".requiredCPUBindPolicy", errors
        ),
        preferred_bind=_enum(
            obj.get("preferredCPUBindPolicy"), n.CPU_BIND_POLICIES, key, ".preferredCPUBindPolicy", errors
        ),
        exclusive=_enum(
            obj.get("preferredCPUExclusivePolicy"),
            n.CPU_EXCLUSIVE_POLICIES,
            key,
            ".preferredCPUExclusivePolicy",
            errors,
        ),
    )


def parse_numa_spec(value: Any, errors: list[FieldIssue]) -> NUMASpec:
    key = n.ANN_NUMA_TOPOLOGY_SPEC
    obj = _value_obj(value, key, {"numaTopologyPolicy", "singleNUMANodeExclusive"}, errors)
    if obj is None:
        return NUMASpec()
    policy = _enum(obj.get("numaTopologyPolicy"), n.NUMA_POLICIES, key, ".numaTopologyPolicy", errors)
    return NUMASpec(
        policy="" if policy == "None" else policy,
        exclusive=_enum(
            obj.get("singleNUMANodeExclusive"), n.NUMA_EXCLUSIVE, key, ".singleNUMANodeExclusive", errors
        ),
    )


def _resources(raw: Any, path: str, errors: list[FieldIssue]) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(raw, dict):
        errors.append(invalid_annotation(path, "must be a map of quantities"))
        return out
    for k in sorted(raw):
        name = n.DEPRECATED_ALIASES.get(k, k)
        try:
            out[name] = out.get(name, 0) + to_canonical(name, raw[k])
        except QuantityError as exc:
            errors.append(invalid_annotation(f"{path}[{k}]", str(exc)))
    return out


def decoded_object(
    value: Any, key: str, errors: list[FieldIssue], message: str = "must be an object"
) -> dict[str, Any] | None:
    """An annotation's decoded ``value`` when it is an object to read: ``None`` when absent (nothing to read) or
    anything else (an issue on ``key`` saying ``message``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        errors.append(invalid_annotation(annotation_path(key), message))
        return None
    return value


def parse_device_allocated(value: Any, errors: list[FieldIssue], into: BoundAllocation) -> None:
    """Fill ``into.devices`` from a ``device-allocated`` value: ``{type: [{minor, resources, id, extension}]}``."""
    key = n.ANN_DEVICE_ALLOCATED
    value = decoded_object(value, key, errors)
    if value is None:
        return
    for dtype in sorted(value):
        entries = value[dtype]
        if not isinstance(entries, list):
            errors.append(invalid_annotation(annotation_path(key, f".{dtype}"), "must be a list"))
            continue
        for i, e in enumerate(entries):
            p = annotation_path(key, f".{dtype}[{i}]")
            if (
                not isinstance(e, dict)
                or not isinstance(e.get("minor"), int)
                or isinstance(e.get("minor"), bool)
            ):
                errors.append(invalid_annotation(p, "needs an integer minor"))
                continue
            res = _resources(e.get("resources") or {}, f"{p}.resources", errors)
            vfs = (
                ((e.get("extension") or {}).get("vfs") or []) if isinstance(e.get("extension"), dict) else []
            )
            if not isinstance(vfs, list):
                errors.append(invalid_annotation(f"{p}.extension.vfs", "must be a list"))
                vfs = []
            bus = tuple(sorted(str(v.get("busID")) for v in vfs if isinstance(v, dict) and v.get("busID")))
            into.devices.setdefault(str(dtype), []).append((e["minor"], res, bus))


def parse_resource_status(value: Any, errors: list[FieldIssue], into: BoundAllocation) -> None:
    """Fill ``into.cpuset`` and ``into.numa`` from a ``resource-status`` value."""
    key = n.ANN_RESOURCE_STATUS
    value = decoded_object(value, key, errors)
    if value is None:
        return
    if value.get("cpuset"):
        try:
            into.cpuset = tuple(parse_cpuset(str(value["cpuset"])))
        except CpusetError as exc:
            errors.append(invalid_annotation(annotation_path(key, ".cpuset"), str(exc)))
    for i, z in enumerate(value.get("numaNodeResources") or []):
        p = annotation_path(key, f".numaNodeResources[{i}]")
        if not isinstance(z, dict) or not isinstance(z.get("node"), int):
            errors.append(invalid_annotation(p, "needs an integer node"))
            continue
        into.numa[z["node"]] = _resources(z.get("resources") or {}, f"{p}.resources", errors)
