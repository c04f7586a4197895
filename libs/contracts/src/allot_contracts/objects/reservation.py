"""Koordinator ``Reservation`` (scheduling.koordinator.sh/v1alpha1, cluster-scoped) and the pod side of reservations.

Responsibility:
- ``parse_reservation``: a Reservation manifest → :class:`Reservation` (template requests, owners, ttl / expires,
  allocateOnce, allocatePolicy with ``reservation-restricted-options``, unschedulable, taints, the
  ``reservation-order`` label), every problem a ``FieldIssue`` with its path; what is read but not acted on
  (``preAllocation``) is a warning.
- the pod side (``parse_pod_reservation``: a pod's reservation annotations and labels) is
  :mod:`allot_contracts.objects.reservation_pod`.
- ``reserve_pod``: the pod a Reservation is scheduled as (upstream's "reserve pod"): the template with the
  Reservation's labels and annotations laid over it.

Upstream semantics (reference: docs/reservation.md): ``ttl`` defaults to 24h, ``0`` never expires; with ``expires``
the earlier of the two applies; ``allocateOnce`` defaults to true; ``allocatePolicy`` is ``""`` (Default), ``Aligned`` or ``Restricted``;
owners are ORed, the sub-matchers of one owner ANDed. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import (
    FieldIssue,
    annotation_path,
    checked_bool,
    checked_list,
    checked_text,
    label_path,
    not_acted_on,
)
from allot_contracts.objects.meta import metadata_of, read_labels, required_name
from allot_contracts.objects.requests import pod_requests
from allot_contracts.objects.reservation_pod import (
    RESERVATION_PREFIX,
    read_string_map,
    resource_names_annotation,
    unknown_field_issues,
)
from allot_contracts.objects.selectors import (
    LabelSelector,
    Taint,
    int64_text,
    parse_label_selector,
)
from allot_contracts.objects.times import checked_duration_us, checked_timestamp_us

__all__ = [
    "ANN_RESERVE_POD",
    "ANN_RESTRICTED_OPTIONS",
    "API_VERSION",
    "DEFAULT_TTL_US",
    "KIND",
    "LABEL_RESERVATION_ORDER",
    "POLICIES",
    "OwnerController",
    "OwnerObject",
    "Reservation",
    "ReservationOwner",
    "parse_reservation",
    "reserve_pod",
]

API_VERSION: Final = "scheduling.koordinator.sh/v1alpha1"
KIND: Final = "Reservation"
ANN_RESTRICTED_OPTIONS: Final = f"{RESERVATION_PREFIX}/reservation-restricted-options"
ANN_RESERVE_POD: Final = f"{RESERVATION_PREFIX}/reserve-pod"
ANN_RESERVATION_NAME: Final = f"{RESERVATION_PREFIX}/reservation-name"
LABEL_RESERVATION_ORDER: Final = f"{RESERVATION_PREFIX}/reservation-order"
LABEL_POD_PRIORITY: Final = "koordinator.sh/priority"
DEFAULT_TTL_US: Final = 24 * 3600 * 1_000_000
POLICIES: Final = ("", "Aligned", "Restricted")
_MAX_PRIORITY: Final = 2**31 - 1
_SPEC_FIELDS: Final = frozenset(
    {
        "template",
        "owners",
        "ttl",
        "expires",
        "preAllocation",
        "allocateOnce",
        "allocatePolicy",
        "unschedulable",
        "taints",
        "preAllocationPolicy",
    }
)


class OwnerObject(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``owners[].object``: every non-empty field must equal the pod's."""

    uid: str = ""
    name: str = ""
    namespace: str = ""
    api_version: str = ""


class OwnerController(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``owners[].controller``: some ``ownerReference`` of the pod must match every non-empty field."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    namespace: str = ""


class ReservationOwner(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One entry of ``spec.owners``: all given sub-matchers must match (``None`` = not given)."""

    object: OwnerObject | None = None
    controller: OwnerController | None = None
    selector: LabelSelector | None = None


class Reservation(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    template: dict[str, Any]
    requests: dict[str, int]
    owners: tuple[ReservationOwner, ...]
    ttl_us: int | None = None  # None = not given (24h unless ``expires`` is given); 0 = never expires
    expires_us: int | None = None
    allocate_once: bool = True
    allocate_policy: str = ""
    restricted_resources: tuple[
        str, ...
    ] = ()  # from reservation-restricted-options; () = every reserved resource
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    order: int = 0  # reservation-order label; 0 = none
    node_name: str = ""  # template.spec.nodeName: reserve on that node only
    created_us: int | None = None  # metadata.creationTimestamp when given

    def expiry(self, created_us: int) -> int | None:
        """When the reservation expires (µs), given when it was created; ``None`` = never. As upstream's controller:
        ``ttl: 0`` disables expiry; otherwise whichever of ``expires`` and creation + ``ttl`` comes first (``ttl``
        defaults to 24h only when ``expires`` is not given)."""
        if self.ttl_us == 0:
            return None
        times = [] if self.expires_us is None else [self.expires_us]
        if self.ttl_us is not None:
            times.append(created_us + self.ttl_us)
        elif self.expires_us is None:
            times.append(created_us + DEFAULT_TTL_US)
        return min(times)


# --- helpers -------------------------------------------------------------------------------------------------------


def _bool(raw: Any, path: str, default: bool, issues: list[FieldIssue]) -> bool:
    value = checked_bool(raw, path, issues)
    return default if value is None else value


def _reference(
    raw: object, fields: tuple[tuple[str, str], ...], path: str, message: str, issues: list[FieldIssue]
) -> dict[str, str] | None:
    """The string ``fields`` of an owner reference, renamed ``(field, attribute)``; None when it is not an object
    (an issue saying ``message``)."""
    if not isinstance(raw, dict):
        issues.append(FieldIssue(path=path, message=message))
        return None
    out: dict[str, str] = {}
    for src, dst in fields:
        v = raw.get(src)
        if v is None:
            continue
        if not isinstance(v, str):
            issues.append(FieldIssue(path=f"{path}.{src}", message="must be a string"))
            continue
        out[dst] = v
    return out


def _owner(raw: Any, path: str, issues: list[FieldIssue]) -> ReservationOwner | None:
    if not isinstance(raw, dict):
        issues.append(
            FieldIssue(path=path, message="must be an object with object, controller or labelSelector")
        )
        return None
    unknown_field_issues(raw, frozenset({"object", "controller", "labelSelector"}), path, issues)
    if not any(raw.get(k) is not None for k in ("object", "controller", "labelSelector")):
        issues.append(
            FieldIssue(
                path=path, code="Required", message="needs at least one of object, controller, labelSelector"
            )
        )
        return None
    before = len(issues)
    obj = ctl = None
    selector: LabelSelector | None = None
    if raw.get("object") is not None:
        f = _reference(
            raw["object"],
            (("uid", "uid"), ("name", "name"), ("namespace", "namespace"), ("apiVersion", "api_version")),
            f"{path}.object",
            "must be an object reference",
            issues,
        )
        if f is not None:
            obj = OwnerObject(**f)
    if raw.get("controller") is not None:
        c = raw["controller"]
        f = _reference(
            c,
            (
                ("apiVersion", "api_version"),
                ("kind", "kind"),
                ("name", "name"),
                ("uid", "uid"),
                ("namespace", "namespace"),
            ),
            f"{path}.controller",
            "must be an owner reference",
            issues,
        )
        if f is not None:
            flag = c.get("controller")
            if flag is not None and not isinstance(flag, bool):
                issues.append(
                    FieldIssue(path=f"{path}.controller.controller", message="must be true or false")
                )
                flag = None
            ctl = OwnerController(**f, controller=flag)
    if raw.get("labelSelector") is not None:
        selector = parse_label_selector(raw["labelSelector"], f"{path}.labelSelector", issues)
    if len(issues) > before:
        return None
    return ReservationOwner(object=obj, controller=ctl, selector=selector)


def _taints(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[Taint, ...]:
    out: list[Taint] = []
    for i, t in enumerate(checked_list(raw, path, issues, message="must be a list of taints")):
        p = f"{path}[{i}]"
        if not isinstance(t, dict) or not isinstance(key := t.get("key"), str) or not key:
            issues.append(
                FieldIssue(path=f"{p}.key", code="Required", message="a taint needs a non-empty key")
            )
            continue
        effect = t.get("effect")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            issues.append(
                FieldIssue(
                    path=f"{p}.effect",
                    code="NotSupported",
                    message="must be one of NoSchedule, PreferNoSchedule, NoExecute",
                    value=str(effect or ""),
                )
            )
            continue
        value = t.get("value")
        if value is not None and not isinstance(value, str):
            issues.append(FieldIssue(path=f"{p}.value", message="must be a string"))
            continue
        out.append((key, value or "", str(effect)))
    return tuple(sorted(out))


def _template(raw: Any, issues: list[FieldIssue]) -> tuple[dict[str, Any], dict[str, int]]:
    path = "spec.template"
    if not isinstance(raw, dict):
        issues.append(FieldIssue(path=path, code="Required", message="a pod template is required"))
        return {}, {}
    meta = raw.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        issues.append(FieldIssue(path=f"{path}.metadata", message="must be an object"))
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        issues.append(
            FieldIssue(path=f"{path}.spec", code="Required", message="the template needs a pod spec")
        )
        return raw, {}
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        issues.append(
            FieldIssue(
                path=f"{path}.spec.containers", code="Required", message="at least one container is required"
            )
        )
        return raw, {}
    errors: list[FieldIssue] = []
    requests = pod_requests(spec, errors)
    issues.extend(
        msgspec.structs.replace(e, path=f"{path}.{e.path}" if e.path.startswith("spec.") else e.path)
        for e in errors
    )
    node_name = spec.get("nodeName")
    if node_name is not None and not isinstance(node_name, str):
        issues.append(FieldIssue(path=f"{path}.spec.nodeName", message="must be a string"))
    return raw, requests


# --- Reservation ---------------------------------------------------------------------------------------------------


def _owners(spec: Mapping[str, Any], issues: list[FieldIssue]) -> tuple[ReservationOwner, ...]:
    owners_raw = spec.get("owners")
    owners: list[ReservationOwner] = []
    if not isinstance(owners_raw, list) or not owners_raw:
        issues.append(
            FieldIssue(
                path="spec.owners", code="Required", message="at least one owner is required (minItems 1)"
            )
        )
    else:
        for i, o in enumerate(owners_raw):
            owner = _owner(o, f"spec.owners[{i}]", issues)
            if owner is not None:
                owners.append(owner)
    return tuple(owners)


def _expiry(
    spec: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[int | None, int | None]:
    """``(ttl_us, expires_us)``, each ``None`` when not given."""
    ttl_us = checked_duration_us(spec.get("ttl"), "spec.ttl", issues)
    expires = checked_timestamp_us(spec.get("expires"), "spec.expires", issues)
    if expires is not None and spec.get("ttl") is not None:
        warnings.append(
            not_acted_on(
                "spec.ttl",
                "ttl and expires are mutually exclusive; the reservation expires at whichever comes first"
                " (ttl: 0 disables expiry)",
            )
        )
    return ttl_us, expires


def _policy(spec: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]) -> str:
    """``allocatePolicy`` (refused unless known); the pre-allocation fields Allot does not act on are warnings."""
    policy = checked_text(spec.get("allocatePolicy"), "spec.allocatePolicy", issues)
    if policy is None:
        policy = ""
    elif policy not in POLICIES:
        issues.append(
            FieldIssue(
                path="spec.allocatePolicy",
                code="NotSupported",
                message="must be Aligned or Restricted (or empty for the default policy)",
                value=str(policy),
            )
        )
        policy = ""
    if spec.get("preAllocation"):
        warnings.append(
            not_acted_on(
                "spec.preAllocation",
                "pre-allocation from running pods is not supported; scheduled as an ordinary reservation",
            )
        )
    if spec.get("preAllocationPolicy") is not None:
        warnings.append(not_acted_on("spec.preAllocationPolicy", "pre-allocation is not supported"))
    return str(policy)


def _restricted(
    annotations: Mapping[str, Any], policy: str, issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[str, ...]:
    """The resources of ``reservation-restricted-options`` (a warning unless the policy is Restricted)."""
    restricted = resource_names_annotation(annotations, ANN_RESTRICTED_OPTIONS, "resources", issues)
    if restricted is not None and policy != "Restricted":
        warnings.append(
            not_acted_on(annotation_path(ANN_RESTRICTED_OPTIONS), "applies only to allocatePolicy Restricted")
        )
    return restricted or ()


def _order(labels: Mapping[str, str], issues: list[FieldIssue]) -> int:
    """The ``reservation-order`` label (0 = none)."""
    if LABEL_RESERVATION_ORDER not in labels:
        return 0
    text = labels[LABEL_RESERVATION_ORDER]
    if (order := int64_text(text)) is not None:
        return order
    issues.append(
        FieldIssue(path=label_path(LABEL_RESERVATION_ORDER), message="must be an integer", value=text)
    )
    return 0


def parse_reservation(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> Reservation | None:
    """Admit a Reservation manifest; ``None`` when ``issues`` grew (the reservation is refused)."""
    before = len(issues)
    meta = metadata_of(manifest)
    name = required_name(meta, issues)
    uid = meta.get("uid")
    labels = read_labels(meta.get("labels"), issues)
    annotations = read_string_map(meta.get("annotations"), "metadata.annotations", issues)
    created = checked_timestamp_us(meta.get("creationTimestamp"), "metadata.creationTimestamp", issues)
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        issues.append(FieldIssue(path="spec", code="Required", message="a Reservation needs a spec"))
        return None
    unknown_field_issues(spec, _SPEC_FIELDS, "spec", issues)
    template, requests = _template(spec.get("template"), issues)
    owners = _owners(spec, issues)
    ttl_us, expires = _expiry(spec, issues, warnings)
    policy = _policy(spec, issues, warnings)
    restricted = _restricted(annotations, policy, issues, warnings)
    order = _order(labels, issues)
    node_name = ""
    tspec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(tspec, dict) and isinstance(tspec.get("nodeName"), str):
        node_name = tspec["nodeName"]
    allocate_once = _bool(spec.get("allocateOnce"), "spec.allocateOnce", True, issues)
    unschedulable = _bool(spec.get("unschedulable"), "spec.unschedulable", False, issues)
    taints = _taints(spec.get("taints"), "spec.taints", issues)
    if len(issues) > before:
        return None
    return Reservation(
        name=name,
        uid=str(uid or ""),
        labels=labels,
        annotations=annotations,
        template=template,
        requests=requests,
        owners=owners,
        ttl_us=ttl_us,
        expires_us=expires,
        allocate_once=allocate_once,
        allocate_policy=policy,
        restricted_resources=restricted,
        unschedulable=unschedulable,
        taints=taints,
        order=order,
        node_name=node_name,
        created_us=created,
    )


def reserve_pod(r: Reservation) -> dict[str, Any]:
    """The pod a Reservation is scheduled as: its template, named after the Reservation in the template's namespace
    (``default`` when none), with the Reservation's labels and annotations over the template's and the
    ``reservation-name`` annotation; priority from the template, else the ``koordinator.sh/priority`` label, else the highest (so a
    reserve pod is never a preemption victim unless asked)."""
    template = r.template
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    assert isinstance(tmeta, dict)
    spec = dict(template.get("spec") or {})
    spec.pop("nodeName", None)
    if r.node_name:
        spec["nodeName"] = r.node_name
    if not isinstance(spec.get("priority"), int):
        label = r.labels.get(LABEL_POD_PRIORITY, "")
        priority = int64_text(label)
        spec["priority"] = (
            priority if priority is not None and -(2**31) <= priority < 2**31 else _MAX_PRIORITY
        )
    labels = {**read_string_map(tmeta.get("labels"), "", []), **r.labels}
    annotations = {
        **read_string_map(tmeta.get("annotations"), "", []),
        **r.annotations,
        ANN_RESERVATION_NAME: r.name,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": r.name,
            "namespace": str(tmeta.get("namespace") or "default"),
            "uid": r.uid,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
