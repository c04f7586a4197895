"""The pod side of Koordinator reservations: what a pod says about them, in its annotations, labels and owners.

``parse_pod_reservation``: the pod's ``reservation-affinity`` and ``exact-match-reservation`` annotations, the
``reservation-ignored`` and ``disable-preemptible`` labels and (for bound pods) ``reservation-allocated``;
``parse_owner_references``: the pod's ``metadata.ownerReferences`` as a Reservation's owners match them. The
Reservation object itself is read by :mod:`allot_contracts.objects.reservation`, which shares the small readers
below. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, checked_object, invalid_annotation
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import decode_annotation
from allot_contracts.objects.selectors import (
    NodeSelectorTerm,
    Toleration,
    parse_node_selector_terms,
    parse_tolerations,
)

__all__ = [
    "ANN_EXACT_MATCH",
    "ANN_RESERVATION_AFFINITY",
    "ANN_RESERVATION_ALLOCATED",
    "LABEL_DISABLE_PREEMPTIBLE",
    "LABEL_RESERVATION_IGNORED",
    "RESERVATION_PREFIX",
    "OwnerRef",
    "PodReservation",
    "ReservationAffinity",
    "parse_owner_references",
    "parse_pod_reservation",
    "read_resource_names",
    "read_string_map",
    "resource_names_annotation",
    "unknown_field_issues",
]

RESERVATION_PREFIX: Final = "scheduling.koordinator.sh"
ANN_RESERVATION_ALLOCATED: Final = f"{RESERVATION_PREFIX}/reservation-allocated"
ANN_RESERVATION_AFFINITY: Final = f"{RESERVATION_PREFIX}/reservation-affinity"
ANN_EXACT_MATCH: Final = f"{RESERVATION_PREFIX}/exact-match-reservation"
LABEL_RESERVATION_IGNORED: Final = f"{RESERVATION_PREFIX}/reservation-ignored"
LABEL_DISABLE_PREEMPTIBLE: Final = f"{RESERVATION_PREFIX}/disable-preemptible"


class OwnerRef(msgspec.Struct, frozen=True, kw_only=True):
    """One ``metadata.ownerReferences`` entry of a pod."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ReservationAffinity(msgspec.Struct, frozen=True, kw_only=True):
    """The pod's ``reservation-affinity``: its presence makes using a reservation required."""

    name: str = ""
    selector: tuple[tuple[str, str], ...] = ()  # reservationSelector (labels, ANDed)
    terms: tuple[NodeSelectorTerm, ...] | None = None  # requiredDuring…reservationSelectorTerms (ORed)
    tolerations: tuple[Toleration, ...] = ()


class PodReservation(msgspec.Struct, frozen=True, kw_only=True):
    """What a pod says about reservations."""

    affinity: ReservationAffinity | None = None
    exact_match: tuple[str, ...] = ()
    ignored: bool = False
    preemptible: bool = True  # label disable-preemptible != "true"
    allocated: tuple[str, str] | None = None  # (name, uid) from reservation-allocated (bound pods)


# --- readers shared with the Reservation object ---------------------------------------------------------------------


def read_string_map(raw: Any, path: str, issues: list[FieldIssue]) -> dict[str, str]:
    out: dict[str, str] = {}
    given = checked_object(raw, path, issues, message="must be a map of strings")
    for k in sorted(given):
        v = given[k]
        if isinstance(v, str):
            out[str(k)] = v
        elif isinstance(v, int | float | bool) and not isinstance(v, bool):
            out[str(k)] = str(v)
        else:
            issues.append(FieldIssue(path=f"{path}.{k}", message="must be a string"))
    return out


def unknown_field_issues(
    value: dict[str, Any], allowed: frozenset[str], path: str, issues: list[FieldIssue]
) -> None:
    for f in sorted(set(value) - allowed):
        issues.append(
            FieldIssue(
                path=f"{path}.{f}",
                code="FieldValueNotSupported",
                message=f"unknown field; supported: {', '.join(sorted(allowed))}",
            )
        )


def read_resource_names(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        issues.append(invalid_annotation(path, "must be a list of resource names"))
        return ()
    names = [str(v) for v in raw]
    return tuple(dict.fromkeys(n.DEPRECATED_ALIASES.get(v, v) for v in names))


def resource_names_annotation(
    annotations: Mapping[str, object], key: str, field: str, issues: list[FieldIssue]
) -> tuple[str, ...] | None:
    """The resource names the JSON object annotation ``key`` lists under ``field`` (its only field); ``None`` when
    the annotation is absent or not JSON, ``()`` when it is not such an object (with the issue)."""
    value = decode_annotation(annotations, key, issues, decode=msgspec.json.decode)
    if value is None:
        return None
    if not isinstance(value, dict):
        issues.append(invalid_annotation(annotation_path(key), "must be an object"))
        return ()
    unknown_field_issues(value, frozenset({field}), annotation_path(key), issues)
    return read_resource_names(value.get(field), annotation_path(key, f".{field}"), issues)


# --- the pod side --------------------------------------------------------------------------------------------------


def parse_owner_references(meta: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
    """``metadata.ownerReferences`` of a pod (malformed entries are skipped: the API server validates them)."""
    raw = meta.get("ownerReferences")
    out: list[OwnerRef] = []
    for ref in raw if isinstance(raw, list) else []:
        if not isinstance(ref, dict):
            continue
        out.append(
            OwnerRef(
                api_version=str(ref.get("apiVersion") or ""),
                kind=str(ref.get("kind") or ""),
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
                controller=ref.get("controller") is True,
            )
        )
    return tuple(out)


_AFFINITY_FIELDS: Final = frozenset(
    {"name", "reservationSelector", "requiredDuringSchedulingIgnoredDuringExecution", "tolerations"}
)


def _affinity(value: Any, issues: list[FieldIssue]) -> ReservationAffinity | None:
    key = ANN_RESERVATION_AFFINITY
    if not isinstance(value, dict):
        issues.append(invalid_annotation(annotation_path(key), "must be an object"))
        return None
    unknown_field_issues(value, _AFFINITY_FIELDS, annotation_path(key), issues)
    before = len(issues)
    name = value.get("name") or ""
    if not isinstance(name, str):
        issues.append(invalid_annotation(annotation_path(key, ".name"), "must be a string"))
        name = ""
    selector = read_string_map(
        value.get("reservationSelector"), annotation_path(key, ".reservationSelector"), issues
    )
    terms = None
    required = value.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        rpath = annotation_path(key, ".requiredDuringSchedulingIgnoredDuringExecution")
        if not isinstance(required, dict):
            issues.append(invalid_annotation(rpath, "must be an object"))
        else:
            unknown_field_issues(required, frozenset({"reservationSelectorTerms"}), rpath, issues)
            terms = parse_node_selector_terms(
                required.get("reservationSelectorTerms") or [], f"{rpath}.reservationSelectorTerms", issues
            )
    tolerations = parse_tolerations(value.get("tolerations"), annotation_path(key, ".tolerations"), issues)
    if len(issues) > before:
        return None
    return ReservationAffinity(
        name=name, selector=tuple(sorted(selector.items())), terms=terms, tolerations=tolerations
    )


def parse_pod_reservation(
    annotations: Mapping[str, Any], labels: Mapping[str, str], issues: list[FieldIssue]
) -> PodReservation:
    """The reservation-related annotations and labels of a pod (``issues`` gets what is malformed)."""
    if not any(k.startswith(RESERVATION_PREFIX) for k in annotations) and not any(
        k.startswith(RESERVATION_PREFIX) for k in labels
    ):
        return _NONE
    affinity = None
    if ANN_RESERVATION_AFFINITY in annotations:
        value = decode_annotation(annotations, ANN_RESERVATION_AFFINITY, issues, decode=msgspec.json.decode)
        # present but empty: upstream treats it as an affinity with no constraint (a reservation is required)
        affinity = ReservationAffinity() if value is None else _affinity(value, issues)
    exact = resource_names_annotation(annotations, ANN_EXACT_MATCH, "resourceNames", issues) or ()
    allocated = None
    got = decode_annotation(annotations, ANN_RESERVATION_ALLOCATED, issues, decode=msgspec.json.decode)
    if got is not None:
        if isinstance(got, dict) and isinstance(got.get("name"), str):
            allocated = (got["name"], str(got.get("uid") or ""))
        else:
            issues.append(
                invalid_annotation(
                    annotation_path(ANN_RESERVATION_ALLOCATED), 'must be {"name": …, "uid": …}'
                )
            )
    return PodReservation(
        affinity=affinity,
        exact_match=exact,
        ignored=labels.get(LABEL_RESERVATION_IGNORED) == "true",
        preemptible=labels.get(LABEL_DISABLE_PREEMPTIBLE) != "true",
        allocated=allocated,
    )


_NONE: Final = PodReservation()
