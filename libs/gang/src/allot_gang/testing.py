"""Builders for tests (here and in the services that use this library): pods, PodGroups, times.

``a_pod_manifest("w-0", gang="train", min_available=4)`` gives a pod manifest with the lightweight gang
annotations; ``a_pod_group_manifest("train", min_member=4)`` a ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup;
``a_pod`` and ``a_pod_group`` give the same objects read as the door reads them (what the engine takes); ``at(90)`` the time 90 s
after a fixed origin in microseconds. Every keyword maps to one annotation or field; ``None`` leaves it out, and
``annotations=`` / ``labels=`` add or override raw entries (for malformed-input tables).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.gang import PodGroupInfo, parse_pod_group
from allot_contracts.objects.pod import Pod, parse_pod

from . import _keys as k

__all__ = ["T0", "a_pod", "a_pod_group", "a_pod_group_manifest", "a_pod_manifest", "at", "pod_key"]

_T = TypeVar("_T")

T0 = 1_700_000_000 * k.MICROS_PER_SECOND  # 2023-11-14T22:13:20Z, a fixed origin for test timelines


def at(seconds: float | int = 0) -> int:
    """``T0`` plus ``seconds`` (whole or with up to microsecond precision), in microseconds."""
    return T0 + round(seconds * k.MICROS_PER_SECOND)


def pod_key(name: str, namespace: str = "default") -> str:
    return k.object_key(namespace, name)


def a_pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    gang: str | None = None,
    min_available: int | str | None = None,
    total_number: int | str | None = None,
    mode: str | None = None,
    waiting_time: str | None = None,
    groups: list[str] | str | None = None,
    match_policy: str | None = None,
    pod_group: str | None = None,
    priority: int | None = None,
    sub_priority: int | str | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    annotations: Mapping[str, JsonValue] | None = None,
    labels: Mapping[str, JsonValue] | None = None,
) -> JsonObject:
    """A pod manifest. ``gang=`` sets the name annotation, ``pod_group=`` the PodGroup label instead."""
    ann: JsonObject = {}
    lab: JsonObject = {}
    if gang is not None:
        ann[k.ANN_NAME] = gang
    if pod_group is not None:
        lab[k.LABEL_POD_GROUP] = pod_group
    for key, value in (
        (k.ANN_MIN_AVAILABLE, min_available),
        (k.ANN_TOTAL_NUMBER, total_number),
        (k.ANN_MODE, mode),
        (k.ANN_WAITING_TIME, waiting_time),
        (k.ANN_MATCH_POLICY, match_policy),
    ):
        if value is not None:
            ann[key] = str(value)
    if groups is not None:
        ann[k.ANN_GROUPS] = groups if isinstance(groups, str) else json.dumps(groups)
    if sub_priority is not None:
        lab[k.LABEL_SUB_PRIORITY] = str(sub_priority)
    ann.update(annotations or {})
    lab.update(labels or {})
    spec: JsonObject = {"containers": [{"name": "main", "image": "busybox"}]}
    if priority is not None:
        spec["priority"] = priority
    if node_name is not None:
        spec["nodeName"] = node_name
    pod: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": ann, "labels": lab},
        "spec": spec,
    }
    if phase is not None:
        pod["status"] = {"phase": phase}
    return pod


def a_pod_group_manifest(
    name: str,
    *,
    namespace: str = "default",
    min_member: int | None = 1,
    schedule_timeout_seconds: int | None = None,
    min_resources: Mapping[str, JsonValue] | None = None,
    mode: str | None = None,
    total_number: int | None = None,
    groups: list[str] | None = None,
    match_policy: str | None = None,
    annotations: Mapping[str, JsonValue] | None = None,
) -> JsonObject:
    """A ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup manifest."""
    ann: JsonObject = {}
    if mode is not None:
        ann[k.ANN_MODE] = mode
    if total_number is not None:
        ann[k.ANN_TOTAL_NUMBER] = str(total_number)
    if groups is not None:
        ann[k.ANN_GROUPS] = json.dumps(groups)
    if match_policy is not None:
        ann[k.ANN_MATCH_POLICY] = match_policy
    ann.update(annotations or {})
    spec: JsonObject = {}
    if min_member is not None:
        spec["minMember"] = min_member
    if schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = schedule_timeout_seconds
    if min_resources is not None:
        spec["minResources"] = dict(min_resources)
    return {
        "apiVersion": k.POD_GROUP_API_VERSION,
        "kind": k.POD_GROUP_KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": ann},
        "spec": spec,
    }


def _at_door(
    parse: Callable[[JsonObject, list[FieldIssue], list[FieldIssue]], _T | None],
    manifest: JsonObject,
    what: str,
) -> _T:
    """``manifest`` read at the door by ``parse``; raises when the door refuses it (``what``: the object named)."""
    issues: list[FieldIssue] = []
    obj = parse(manifest, issues, [])
    if obj is None:
        raise AssertionError(f"{what} refused: {[str(i) for i in issues]}")
    return obj


def a_pod(name: str, **kw: Any) -> Pod:
    """``a_pod_manifest`` read at the door; raises when the door refuses it."""
    return _at_door(parse_pod, a_pod_manifest(name, **kw), f"pod {name}")


def a_pod_group(name: str, **kw: Any) -> PodGroupInfo:
    """``a_pod_group_manifest`` read at the door; raises when the door refuses it."""
    return _at_door(parse_pod_group, a_pod_group_manifest(name, **kw), f"PodGroup {name}")
