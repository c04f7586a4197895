"""Upcasters: pure functions that turn an old event payload into the current schema, applied on read.

One table maps an old tag to ``(new_tag, function)``; chains are followed until the tag is current. The steps are
unit-tested in libs/contracts/tests/test_upcasters.py (the NodeMetric step in test_objects_nodemetric.py).
A payload is decoded JSON (:data:`allot_contracts.jsonvalue.JsonObject`): a step narrows what it reads, and one
whose payload does not have its schema's shape raises (the log then refuses it as undecodable).

v1 → v2 of the decision events (``pod.placed``, ``pod.unschedulable``, ``pod.released``, ``gang.group_placed``,
``gang.group_unschedulable``, ``quota.admitted``, ``quota.waiting``, ``quota.released``, ``quota.evicted``,
``quota.group_admitted``, ``quota.group_waiting``): their ``decision``/``detail``/``freed`` fields were declared as
free-form maps and are now the typed records of :mod:`allot_contracts.decisions`; the JSON is the same (an empty map
becomes ``null``; an eviction's detail gains its ``type``).

v1 → v2 of the input events (``pod.submitted``, ``pod.observed``, ``quota.applied``, ``quotaprofile.applied``,
``podgroup.applied``) and of node-reporter's ``node.registered``, ``device.reported``, ``topology.reported``: a v1
payload carries the manifest only; v2 adds the object as the door reads it (:mod:`allot_contracts.objects`). The
upcaster reads the manifest exactly as the door does now, so a log written before the typed model replays through
the same code as a new one. (A v1 pod that today's door refuses comes out with ``spec: null`` and its ``issues``:
it is then rejected on replay, where the version that recorded it had admitted it.)

v1 → v2 of ``nodemetric.applied``: v1 manifests wrote every usage map flat (``nodeUsage: {cpu: ...}``) and a pod
metric's uid as a field of its own; v2 is upstream's shape, the quantities under ``resources`` and the uid under
``extensions["allot.dev/pod-uid"]``, so a log recorded before reads as it did.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.gang import parse_pod_group
from allot_contracts.objects.inventory import parse_device_cr, parse_node, parse_nrt
from allot_contracts.objects.nodemetric import POD_UID_EXTENSION
from allot_contracts.objects.pod import parse_pod
from allot_contracts.objects.quota import parse_profile, parse_quota

Upcaster = Callable[[JsonObject], JsonObject]


def _builtins(value: object) -> JsonValue:
    out: JsonValue = msgspec.to_builtins(value)
    return out


def _manifest(payload: JsonObject) -> JsonObject:
    """The v1 payload's manifest (``{}`` when it has none); a manifest that is not an object cannot be upcast."""
    manifest = payload.get("manifest") or {}
    if not isinstance(manifest, dict):
        raise TypeError(f"the manifest is a {type(manifest).__name__}, not an object")
    return manifest


def _admitted(
    payload: JsonObject, obj: object, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> JsonObject:
    payload["spec"] = None if obj is None else _builtins(obj)
    payload["issues"] = [_builtins(i) for i in issues]
    payload["warnings"] = [_builtins(w) for w in warnings]
    return payload


def _pod_v1_to_v2(payload: JsonObject) -> JsonObject:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    manifest = payload.get("manifest") or {}
    pod = parse_pod(manifest, issues, warnings) if isinstance(manifest, dict) else None
    return _admitted(payload, pod, issues, warnings)


def _quota_v1_to_v2(payload: JsonObject) -> JsonObject:
    spec, issues = parse_quota(_manifest(payload))
    return _admitted(payload, spec, issues, [])


def _profile_v1_to_v2(payload: JsonObject) -> JsonObject:
    spec, issues = parse_profile(_manifest(payload))
    return _admitted(payload, spec, issues, [])


def _podgroup_v1_to_v2(payload: JsonObject) -> JsonObject:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    group = parse_pod_group(_manifest(payload), issues, warnings)
    return _admitted(payload, group, issues, warnings)


def _node_v1_to_v2(payload: JsonObject) -> JsonObject:
    payload["node"] = _builtins(parse_node(_manifest(payload))[0])
    return payload


def _device_v1_to_v2(payload: JsonObject) -> JsonObject:
    payload["inventory"] = _builtins(parse_device_cr(_manifest(payload))[1])
    return payload


def _topology_v1_to_v2(payload: JsonObject) -> JsonObject:
    payload["topology"] = _builtins(parse_nrt(_manifest(payload))[1])
    return payload


def _nested(usage: JsonValue) -> JsonValue:
    """A v1 flat usage map (resource name -> quantity, plus ``devices``) as upstream's ResourceMap."""
    if not isinstance(usage, dict) or "resources" in usage:
        return usage
    devices = usage.get("devices")
    out: JsonObject = {"resources": {k: v for k, v in usage.items() if k != "devices"}}
    if devices is not None:
        out["devices"] = devices
    return out


def _with_nested(entry: JsonValue, field: str) -> JsonValue:
    """``entry`` with its ``field`` usage map nested (:func:`_nested`), when it is an object holding that field."""
    if isinstance(entry, dict) and field in entry:
        return {**entry, field: _nested(entry[field])}
    return entry


def _aggregated_v2(entry: JsonValue) -> JsonValue:
    """An aggregated usage entry with each of its ``usage`` maps (by aggregation type) nested."""
    usage = entry.get("usage") if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or not isinstance(usage, dict):
        return entry
    return {**entry, "usage": {t: _nested(u) for t, u in usage.items()}}


def _nodemetric_v1_to_v2(payload: JsonObject) -> JsonObject:
    manifest = payload.get("manifest")
    old_status = manifest.get("status") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or not isinstance(old_status, dict):
        return payload
    status = dict(old_status)
    node = status.get("nodeMetric")
    if isinstance(node, dict):
        node = {
            **node,
            "nodeUsage": _nested(node.get("nodeUsage")),
            "systemUsage": _nested(node.get("systemUsage")),
        }
        for key in ("aggregatedNodeUsages", "aggregatedSystemUsages"):
            entries = node.get(key)
            if isinstance(entries, list):
                node[key] = [_aggregated_v2(a) for a in entries]
        status["nodeMetric"] = {k: v for k, v in node.items() if v is not None}
    pods = status.get("podsMetric")
    if isinstance(pods, list):
        status["podsMetric"] = [_pod_metric_v2(p) for p in pods]
    apps = status.get("hostApplicationMetric")
    if isinstance(apps, list):
        status["hostApplicationMetric"] = [_with_nested(a, "usage") for a in apps]
    reclaim = status.get("prodReclaimableMetric")
    if isinstance(reclaim, dict) and "resource" in reclaim:
        status["prodReclaimableMetric"] = _with_nested(reclaim, "resource")
    payload["manifest"] = {**manifest, "status": status}
    return payload


def _pod_metric_v2(entry: JsonValue) -> JsonValue:
    if not isinstance(entry, dict):
        return entry
    out = dict(entry)
    if "podUsage" in out:
        out["podUsage"] = _nested(out["podUsage"])
    uid = out.pop("uid", None)
    if uid:
        extensions = out.get("extensions") or {}
        if not isinstance(extensions, dict):
            raise TypeError(f"a pod metric's extensions are a {type(extensions).__name__}, not an object")
        out["extensions"] = {**extensions, POD_UID_EXTENSION: uid}
    return out


def _same(payload: JsonObject) -> JsonObject:
    """v1 → v2 where only the field's declared type changed (a dict became the typed record it always held)."""
    return payload


def _empty_to_none(*fields: str) -> Upcaster:
    def step(payload: JsonObject) -> JsonObject:
        for name in fields:
            if payload.get(name) == {}:
                payload[name] = None
        return payload

    return step


def _evicted_v1_to_v2(payload: JsonObject) -> JsonObject:
    detail = payload.get("detail")
    if not detail:
        payload["detail"] = None
    elif not isinstance(detail, dict):
        raise TypeError(f"the detail is a {type(detail).__name__}, not an object")
    elif "type" not in detail:
        payload["detail"] = {
            **detail,
            "type": "victims" if payload.get("cause") == "Preempted" else "overuse",
        }
    return payload


UPCASTERS: dict[str, tuple[str, Upcaster]] = {
    "pod.submitted.v1": ("pod.submitted.v2", _pod_v1_to_v2),
    "pod.observed.v1": ("pod.observed.v2", _pod_v1_to_v2),
    "quota.applied.v1": ("quota.applied.v2", _quota_v1_to_v2),
    "quotaprofile.applied.v1": ("quotaprofile.applied.v2", _profile_v1_to_v2),
    "podgroup.applied.v1": ("podgroup.applied.v2", _podgroup_v1_to_v2),
    "node.registered.v1": ("node.registered.v2", _node_v1_to_v2),
    "device.reported.v1": ("device.reported.v2", _device_v1_to_v2),
    "topology.reported.v1": ("topology.reported.v2", _topology_v1_to_v2),
    "nodemetric.applied.v1": ("nodemetric.applied.v2", _nodemetric_v1_to_v2),
    # decision events: dict payloads became typed records (same JSON)
    "pod.placed.v1": ("pod.placed.v2", _same),
    "pod.unschedulable.v1": ("pod.unschedulable.v2", _same),
    "pod.released.v1": ("pod.released.v2", _empty_to_none("freed")),
    "gang.group_placed.v1": ("gang.group_placed.v2", _same),
    "gang.group_unschedulable.v1": ("gang.group_unschedulable.v2", _empty_to_none("decision")),
    "quota.admitted.v1": ("quota.admitted.v2", _empty_to_none("detail")),
    "quota.waiting.v1": ("quota.waiting.v2", _empty_to_none("detail")),
    "quota.released.v1": ("quota.released.v2", _empty_to_none("detail")),
    "quota.evicted.v1": ("quota.evicted.v2", _evicted_v1_to_v2),
    "quota.group_admitted.v1": ("quota.group_admitted.v2", _empty_to_none("detail")),
    "quota.group_waiting.v1": ("quota.group_waiting.v2", _empty_to_none("detail")),
}


def upcast(tag: str, payload: JsonObject, table: dict[str, tuple[str, Upcaster]] | None = None) -> JsonObject:
    """Follow the chain of upcasters from ``tag``; returns ``payload`` itself when there is nothing to do."""
    steps = UPCASTERS if table is None else table
    current, out = tag, payload
    seen: set[str] = set()
    while current in steps:
        if current in seen:
            raise ValueError(f"upcaster cycle at {current}")
        seen.add(current)
        current, fn = steps[current]
        out = fn(dict(out))
        out["type"] = current
    return out
