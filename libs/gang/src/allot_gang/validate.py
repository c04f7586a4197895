"""Parse and validate gang input: pod annotations/labels and PodGroup objects.

Responsibility: turn a pod manifest into ``PodInfo`` and a ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup into
``PodGroupInfo``, or into a list of ``FieldError`` naming each malformed field by path and saying why.

Invariants (decision 13: malformed gang input is rejected, never silently defaulted):
- Gang name: annotation ``gang.scheduling.koordinator.sh/name``, else label ``pod-group.scheduling.sigs.k8s.io``,
  else label ``pod-group.scheduling.sigs.k8s.io/name``; each must be a lowercase RFC 1123 subdomain, and when
  several are given they must agree.
- ``min-available`` (annotation, or label ``pod-group.scheduling.sigs.k8s.io/min-available``): a whole number >= 1.
  A pod with min-available declares a lightweight gang; a gang pod without it joins a gang declared elsewhere
  (a PodGroup, or another pod) and must then carry no other gang setting.
- ``total-number`` >= min-available; ``mode`` is exactly ``Strict`` or ``NonStrict``; ``waiting-time`` is a Go
  duration > 0 with no upper cap; ``groups`` is a non-empty JSON list of distinct ``"namespace/name"`` ids that
  includes the pod's own gang; ``match-policy`` (or its alias ``pod-group.scheduling.sigs.k8s.io/match-policy``,
  as annotation or label) is ``once-satisfied``, ``only-waiting`` or ``waiting-and-running``.
- Unknown keys under ``gang.scheduling.koordinator.sh/`` are refused (a typo must not silently drop a setting);
  the legacy ``.../timeout`` key is refused with a pointer to ``waiting-time``.
- Sub-priority label ``koordinator.sh/priority`` and ``spec.priority`` must be integers.
Pure; nothing here raises for bad input.
"""

from __future__ import annotations

import re
from typing import Any, Final

from allot_contracts.quantity import QuantityError, parse_quantity, to_canonical

from . import _keys as k
from ._reader import SUBDOMAIN_REASON, Reader, is_name, is_namespace
from .duration import parse_go_duration
from .errors import FieldError
from .spec import (
    GROUPS,
    MATCH_POLICY,
    MIN_AVAILABLE,
    MODE,
    TOTAL_NUMBER,
    WAITING_TIME,
    Explicit,
    PodGroupInfo,
    PodInfo,
)

__all__ = ["parse_pod", "parse_pod_group"]

_INT: Final = re.compile(r"^[+-]?[0-9]+\Z")
_POD_KNOWN: Final = {
    k.ANN_NAME,
    k.ANN_MIN_AVAILABLE,
    k.ANN_TOTAL_NUMBER,
    k.ANN_MODE,
    k.ANN_WAITING_TIME,
    k.ANN_GROUPS,
    k.ANN_MATCH_POLICY,
}
_INT32: Final = 2**31


def _metadata(manifest: object, errors: list[FieldError]) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    if not isinstance(manifest, dict):
        errors.append(FieldError(path="$", reason="manifest must be a mapping"))
        return "", "default", {}, {}
    meta = manifest.get("metadata") or {}
    if not isinstance(meta, dict):
        errors.append(FieldError(path="metadata", reason="must be a mapping"))
        return "", "default", {}, {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(path="metadata.name", reason="is required", value=str(name or "")))
        name = ""
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str) or not is_namespace(namespace):
        errors.append(
            FieldError(
                path="metadata.namespace", reason="must be a lowercase RFC 1123 label", value=str(namespace)
            )
        )
        namespace = "default"
    maps: list[dict[str, Any]] = []
    for field in ("annotations", "labels"):
        value = meta.get(field) or {}
        if not isinstance(value, dict):
            errors.append(FieldError(path=f"metadata.{field}", reason="must be a mapping of strings"))
            value = {}
        maps.append(value)
    return name, namespace, maps[0], maps[1]


def _int_field(value: object, path: str, r: Reader) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT32 <= value < _INT32:
        r.error(path, "must be a 32-bit integer", value)
        return 0
    return value


def parse_pod(manifest: object) -> PodInfo | list[FieldError]:
    """Read the gang-related fields of a pod manifest; a list of errors when any is malformed."""
    head: list[FieldError] = []
    name, namespace, ann, labels = _metadata(manifest, head)
    r = Reader(ann, labels)
    r.errors.extend(head)
    spec = manifest.get("spec") if isinstance(manifest, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    status = manifest.get("status") if isinstance(manifest, dict) else None
    status = status if isinstance(status, dict) else {}

    priority = _int_field(spec.get("priority"), "spec.priority", r)
    sub_text = r.text(labels, k.LABEL_SUB_PRIORITY, k.label_path(k.LABEL_SUB_PRIORITY))
    sub_priority = 0
    if sub_text is not None:
        if not _INT.match(sub_text) or not -_INT32 <= int(sub_text) < _INT32:
            r.error(k.label_path(k.LABEL_SUB_PRIORITY), "must be a 32-bit integer", sub_text)
        else:
            sub_priority = int(sub_text)

    gang = r.first_of(
        [("ann", k.ANN_NAME), ("label", k.LABEL_POD_GROUP), ("label", k.LABEL_POD_GROUP_NAME)], "gang name"
    )
    gang_id: str | None = None
    if gang is not None:
        if is_name(gang[0]):
            gang_id = k.object_key(namespace, gang[0])
        else:
            r.error(gang[1], SUBDOMAIN_REASON, gang[0])

    min_found = r.first_of([("ann", k.ANN_MIN_AVAILABLE), ("label", k.LABEL_MIN_AVAILABLE)], "min-available")
    total_found = r.first_of([("ann", k.ANN_TOTAL_NUMBER)], "total-number")
    mode_found = r.first_of([("ann", k.ANN_MODE)], "mode")
    wait_found = r.first_of([("ann", k.ANN_WAITING_TIME)], "waiting-time")
    groups_found = r.first_of([("ann", k.ANN_GROUPS)], "groups")
    policy_found = r.first_of(
        [("ann", k.ANN_MATCH_POLICY), ("ann", k.MATCH_POLICY_ALIAS), ("label", k.MATCH_POLICY_ALIAS)],
        "match-policy",
    )
    settings = [
        ("min", min_found),
        ("total", total_found),
        ("mode", mode_found),
        ("wait", wait_found),
        ("groups", groups_found),
        ("policy", policy_found),
    ]
    r.unknown_keys(_POD_KNOWN, {k.ANN_TIMEOUT: f"is not supported; use {k.ANN_WAITING_TIME}"})

    if gang is None:
        for _, found in settings:
            if found is not None:
                r.error(found[1], f"is a gang setting but the pod names no gang (set {k.ANN_NAME})", found[0])
    elif min_found is None:
        for what, found in settings:
            if found is not None and what != "min":
                r.error(
                    found[1],
                    "gang settings on a pod need min-available; a pod that joins a PodGroup "
                    "takes its settings from the PodGroup",
                    found[0],
                )

    explicit = _settings(
        r, gang_id, min_found, total_found, mode_found, wait_found, groups_found, policy_found
    )
    if r.errors:
        return r.errors
    node_name = spec.get("nodeName")
    phase = status.get("phase")
    return PodInfo(
        key=k.object_key(namespace, name),
        namespace=namespace,
        name=name,
        gang_id=gang_id,
        explicit=explicit if gang_id is not None else (),
        priority=priority,
        sub_priority=sub_priority,
        node_name=node_name if isinstance(node_name, str) else "",
        phase=phase if phase in ("Running", "Succeeded", "Failed") else "",
    )


def _settings(
    r: Reader,
    gang_id: str | None,
    min_found: tuple[str, str] | None,
    total_found: tuple[str, str] | None,
    mode_found: tuple[str, str] | None,
    wait_found: tuple[str, str] | None,
    groups_found: tuple[str, str] | None,
    policy_found: tuple[str, str] | None,
) -> tuple[Explicit, ...]:
    out: list[Explicit] = []
    min_available = r.count(min_found)
    if min_available is not None and min_found is not None:
        out.append(Explicit(field=MIN_AVAILABLE, path=min_found[1], value=min_available))
    total = r.count(total_found)
    if total is not None and total_found is not None:
        if min_available is not None and total < min_available:
            r.error(total_found[1], f"must be >= min-available ({min_available})", total_found[0])
        else:
            out.append(Explicit(field=TOTAL_NUMBER, path=total_found[1], value=total))
    mode = r.choice(mode_found, k.MODES)
    if mode is not None and mode_found is not None:
        out.append(Explicit(field=MODE, path=mode_found[1], value=mode))
    if wait_found is not None:
        wait, reason = parse_go_duration(wait_found[0])
        if wait is None:
            r.error(wait_found[1], reason, wait_found[0])
        elif wait <= 0:
            r.error(wait_found[1], "must be greater than 0 (there is no upper limit)", wait_found[0])
        else:
            out.append(Explicit(field=WAITING_TIME, path=wait_found[1], value=wait))
    groups = r.groups(groups_found, gang_id)
    if groups is not None and groups_found is not None:
        out.append(Explicit(field=GROUPS, path=groups_found[1], value=groups))
    policy = r.choice(policy_found, k.MATCH_POLICIES)
    if policy is not None and policy_found is not None:
        out.append(Explicit(field=MATCH_POLICY, path=policy_found[1], value=policy))
    return tuple(out)


def parse_pod_group(manifest: object) -> PodGroupInfo | list[FieldError]:
    """Read a ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup; its annotations may set total-number, mode, groups
    and match-policy; minMember and scheduleTimeoutSeconds come from ``spec``."""
    head: list[FieldError] = []
    name, namespace, ann, labels = _metadata(manifest, head)
    r = Reader(ann, labels)
    r.errors.extend(head)
    body = manifest if isinstance(manifest, dict) else {}
    if body.get("apiVersion") != k.POD_GROUP_API_VERSION:
        r.error("apiVersion", f"must be {k.POD_GROUP_API_VERSION}", body.get("apiVersion"))
    if body.get("kind") != k.POD_GROUP_KIND:
        r.error("kind", f"must be {k.POD_GROUP_KIND}", body.get("kind"))
    if name and not is_name(name):
        r.error("metadata.name", SUBDOMAIN_REASON, name)
    gang_id = k.object_key(namespace, name)
    spec = body.get("spec")
    if not isinstance(spec, dict):
        r.error("spec", "is required (with spec.minMember)")
        spec = {}
    explicit: list[Explicit] = []
    mm = spec.get("minMember")
    if isinstance(mm, bool) or not isinstance(mm, int) or mm < 1:
        r.error("spec.minMember", "is required and must be an integer >= 1", mm)
        mm = None
    else:
        explicit.append(Explicit(field=MIN_AVAILABLE, path="spec.minMember", value=mm))
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
            r.error(
                "spec.scheduleTimeoutSeconds",
                "must be an integer >= 1 (there is no upper limit); leave it out for the default",
                timeout,
            )
        else:
            explicit.append(
                Explicit(field=WAITING_TIME, path="spec.scheduleTimeoutSeconds", value=k.seconds(timeout))
            )
    min_resources = _min_resources(spec.get("minResources"), r)
    refused = {
        k.ANN_NAME: "is not used on a PodGroup (its name is metadata.name)",
        k.ANN_MIN_AVAILABLE: "is not used on a PodGroup; set spec.minMember",
        k.ANN_WAITING_TIME: "is not used on a PodGroup; set spec.scheduleTimeoutSeconds",
        k.ANN_TIMEOUT: "is not supported; set spec.scheduleTimeoutSeconds",
    }
    r.unknown_keys({k.ANN_TOTAL_NUMBER, k.ANN_MODE, k.ANN_GROUPS, k.ANN_MATCH_POLICY}, refused)
    found_min = (str(mm), "spec.minMember") if mm is not None else None
    rest = _settings(
        r,
        gang_id,
        found_min,
        r.first_of([("ann", k.ANN_TOTAL_NUMBER)], "total-number"),
        r.first_of([("ann", k.ANN_MODE)], "mode"),
        None,
        r.first_of([("ann", k.ANN_GROUPS)], "groups"),
        r.first_of(
            [("ann", k.ANN_MATCH_POLICY), ("ann", k.MATCH_POLICY_ALIAS), ("label", k.MATCH_POLICY_ALIAS)],
            "match-policy",
        ),
    )
    explicit.extend(e for e in rest if e.field != MIN_AVAILABLE)
    if r.errors:
        return r.errors
    return PodGroupInfo(
        gang_id=gang_id,
        namespace=namespace,
        name=name,
        explicit=tuple(sorted(explicit, key=lambda e: e.field)),
        min_resources=min_resources,
    )


def _min_resources(value: object, r: Reader) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        r.error("spec.minResources", "must be a mapping of resource name to quantity")
        return {}
    out: dict[str, int] = {}
    for name in sorted(value, key=str):
        path = f'spec.minResources["{name}"]'
        try:
            q = parse_quantity(value[name])
        except QuantityError as exc:
            r.error(path, str(exc), value[name])
            continue
        if q < 0:
            r.error(path, "must not be negative", value[name])
            continue
        out[str(name)] = to_canonical(str(name), q)
    return out
