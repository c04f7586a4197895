"""Upcasters: pure functions that turn an old event payload into the current schema, applied on read.

One table maps an old tag to ``(new_tag, function)``; chains are followed until the tag is current. Every step is
unit-tested (tests/unit/test_upcasters.py).

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
from typing import Any

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.gang import parse_pod_group
from allot_contracts.objects.inventory import parse_device_cr, parse_node, parse_nrt
from allot_contracts.objects.nodemetric import POD_UID_EXTENSION
from allot_contracts.objects.pod import parse_pod
from allot_contracts.objects.quota import parse_profile, parse_quota

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


def _admitted(
    payload: dict[str, Any], obj: Any, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> dict[str, Any]:
    payload["spec"] = None if obj is None else _builtins(obj)
    payload["issues"] = [_builtins(i) for i in issues]
    payload["warnings"] = [_builtins(w) for w in warnings]
    return payload


def _pod_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    manifest = payload.get("manifest") or {}
    pod = parse_pod(manifest, issues, warnings) if isinstance(manifest, dict) else None
    return _admitted(payload, pod, issues, warnings)


def _quota_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    spec, issues = parse_quota(payload.get("manifest") or {})
    return _admitted(payload, spec, issues, [])


def _profile_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    spec, issues = parse_profile(payload.get("manifest") or {})
    return _admitted(payload, spec, issues, [])


def _podgroup_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    group = parse_pod_group(payload.get("manifest") or {}, issues, warnings)
    return _admitted(payload, group, issues, warnings)


def _node_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    payload["node"] = _builtins(parse_node(payload.get("manifest") or {})[0])
    return payload


def _device_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    payload["inventory"] = _builtins(parse_device_cr(payload.get("manifest") or {})[1])
    return payload


def _topology_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    payload["topology"] = _builtins(parse_nrt(payload.get("manifest") or {})[1])
    return payload


def _nested(usage: Any) -> Any:
    """A v1 flat usage map (resource name -> quantity, plus ``devices``) as upstream's ResourceMap."""
    if not isinstance(usage, dict) or "resources" in usage:
        return usage
    devices = usage.get("devices")
    out: dict[str, Any] = {"resources": {k: v for k, v in usage.items() if k != "devices"}}
    if devices is not None:
        out["devices"] = devices
    return out


def _nodemetric_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    manifest = payload.get("manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("status"), dict):
        return payload
    status = manifest["status"]
    status = dict(status)
    node = status.get("nodeMetric")
    if isinstance(node, dict):
        node = {
            **node,
            "nodeUsage": _nested(node.get("nodeUsage")),
            "systemUsage": _nested(node.get("systemUsage")),
        }
        for key in ("aggregatedNodeUsages", "aggregatedSystemUsages"):
            if isinstance(node.get(key), list):
                node[key] = [
                    {**a, "usage": {t: _nested(u) for t, u in a["usage"].items()}}
                    if isinstance(a, dict) and isinstance(a.get("usage"), dict)
                    else a
                    for a in node[key]
                ]
        status["nodeMetric"] = {k: v for k, v in node.items() if v is not None}
    pods = status.get("podsMetric")
    if isinstance(pods, list):
        status["podsMetric"] = [_pod_metric_v2(p) for p in pods]
    apps = status.get("hostApplicationMetric")
    if isinstance(apps, list):
        status["hostApplicationMetric"] = [
            {**a, "usage": _nested(a.get("usage"))} if isinstance(a, dict) and "usage" in a else a
            for a in apps
        ]
    reclaim = status.get("prodReclaimableMetric")
    if isinstance(reclaim, dict) and "resource" in reclaim:
        status["prodReclaimableMetric"] = {**reclaim, "resource": _nested(reclaim["resource"])}
    payload["manifest"] = {**manifest, "status": status}
    return payload


def _pod_metric_v2(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    out = dict(entry)
    if "podUsage" in out:
        out["podUsage"] = _nested(out["podUsage"])
    uid = out.pop("uid", None)
    if uid:
        out["extensions"] = {**(out.get("extensions") or {}), POD_UID_EXTENSION: uid}
    return out


def _same(payload: dict[str, Any]) -> dict[str, Any]:
    """v1 → v2 where only the field's declared type changed (a dict became the typed record it always held)."""
    return payload


def _empty_to_none(*fields: str) -> Upcaster:
    def step(payload: dict[str, Any]) -> dict[str, Any]:
        for name in fields:
            if payload.get(name) == {}:
                payload[name] = None
        return payload

    return step


def _evicted_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    detail = payload.get("detail")
    if not detail:
        payload["detail"] = None
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


def upcast(
    tag: str, payload: dict[str, Any], table: dict[str, tuple[str, Upcaster]] | None = None
) -> dict[str, Any]:
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
