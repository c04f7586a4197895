"""Gang input: what a pod's annotations/labels and a PodGroup declare, parsed once with field paths.

Responsibility: the keys of Koordinator's coscheduling protocol, the typed declaration they make
(``GangDecl`` on a pod, ``PodGroupInfo`` for a ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup) and the parsers that
report every malformed field (``FieldIssue``) or read-but-ignored one (a warning).

Rules (decision 13 of docs/placement.md: malformed gang input is refused, never silently defaulted):
- Gang name: annotation ``gang.scheduling.koordinator.sh/name``, else label ``pod-group.scheduling.sigs.k8s.io``,
  else label ``pod-group.scheduling.sigs.k8s.io/name``; each must be a lowercase RFC 1123 subdomain, and when
  several are given they must agree.
- ``min-available`` (annotation, or label ``pod-group.scheduling.sigs.k8s.io/min-available``): a whole number >= 1.
  A pod with min-available declares a lightweight gang; a gang pod without it joins a gang declared elsewhere
  (a PodGroup, or another pod) and must then carry no other gang setting.
- ``total-number`` >= min-available; ``waiting-time`` is a Go duration > 0 with no upper cap; ``groups`` is a
  non-empty JSON list of distinct ``"namespace/name"`` ids that includes the pod's own gang; ``match-policy`` (or
  its alias ``pod-group.scheduling.sigs.k8s.io/match-policy``, as annotation or label) is ``once-satisfied``,
  ``only-waiting`` or ``waiting-and-running``.
- ``mode``: ``Strict`` or ``NonStrict``; any other value is treated as ``Strict`` with a warning, as Koordinator does
  (it falls back to Strict and logs it).
- ``network-topology-spec`` / ``network-topology-index`` are accepted and reported as not acted on (Allot does not
  do network-topology-aware gang placement).
- Other unknown keys under ``gang.scheduling.koordinator.sh/`` are refused; the legacy ``.../timeout`` key is
  refused with a pointer to ``waiting-time``.
- Sub-priority label ``koordinator.sh/priority`` must be a 32-bit integer.
Pure; nothing here raises for bad input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, label_path
from allot_contracts.objects._reader import SUBDOMAIN_REASON, Reader, is_name, is_namespace
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.quantity import QuantityError, parse_quantity, to_canonical
from allot_contracts.quantity_limits import range_issue

__all__ = [
    "GROUPS",
    "MATCH_POLICY",
    "MIN_AVAILABLE",
    "MODE",
    "TOTAL_NUMBER",
    "WAITING_TIME",
    "Explicit",
    "GangDecl",
    "PodGroupInfo",
    "SettingValue",
    "parse_pod_group",
    "read_pod_gang",
    "read_sub_priority",
]

GANG_PREFIX: Final = "gang.scheduling.koordinator.sh/"
ANN_NAME: Final = GANG_PREFIX + "name"
ANN_MIN_AVAILABLE: Final = GANG_PREFIX + "min-available"
ANN_TOTAL_NUMBER: Final = GANG_PREFIX + "total-number"
ANN_MODE: Final = GANG_PREFIX + "mode"
ANN_WAITING_TIME: Final = GANG_PREFIX + "waiting-time"
ANN_GROUPS: Final = GANG_PREFIX + "groups"
ANN_MATCH_POLICY: Final = GANG_PREFIX + "match-policy"
ANN_TIMEOUT: Final = GANG_PREFIX + "timeout"
ANN_NETWORK_TOPOLOGY_SPEC: Final = GANG_PREFIX + "network-topology-spec"
ANN_NETWORK_TOPOLOGY_INDEX: Final = GANG_PREFIX + "network-topology-index"

PG_PREFIX: Final = "pod-group.scheduling.sigs.k8s.io"
LABEL_POD_GROUP: Final = PG_PREFIX
LABEL_POD_GROUP_NAME: Final = PG_PREFIX + "/name"
LABEL_MIN_AVAILABLE: Final = PG_PREFIX + "/min-available"
MATCH_POLICY_ALIAS: Final = PG_PREFIX + "/match-policy"

LABEL_SUB_PRIORITY: Final = "koordinator.sh/priority"

POD_GROUP_API_VERSION: Final = "scheduling.sigs.k8s.io/v1alpha1"
POD_GROUP_KIND: Final = "PodGroup"

STRICT: Final = "Strict"
NON_STRICT: Final = "NonStrict"
MODES: Final = (STRICT, NON_STRICT)

ONCE_SATISFIED: Final = "once-satisfied"
ONLY_WAITING: Final = "only-waiting"
WAITING_AND_RUNNING: Final = "waiting-and-running"
MATCH_POLICIES: Final = (ONCE_SATISFIED, ONLY_WAITING, WAITING_AND_RUNNING)

MICROS_PER_SECOND: Final = 1_000_000

# Setting names used in ``Explicit.field``.
MIN_AVAILABLE: Final = "min-available"
TOTAL_NUMBER: Final = "total-number"
MODE: Final = "mode"
WAITING_TIME: Final = "waiting-time"
GROUPS: Final = "groups"
MATCH_POLICY: Final = "match-policy"

SettingValue = int | str | tuple[str, ...]

_INT: Final = re.compile(r"^[+-]?[0-9]+\Z")
_INT32: Final = 2**31
_POD_KNOWN: Final = {
    ANN_NAME,
    ANN_MIN_AVAILABLE,
    ANN_TOTAL_NUMBER,
    ANN_MODE,
    ANN_WAITING_TIME,
    ANN_GROUPS,
    ANN_MATCH_POLICY,
}
_NOT_ACTED_ON: Final = {
    ANN_NETWORK_TOPOLOGY_SPEC: "read but not acted on: network-topology-aware gang placement is not supported; "
    "members are placed without regard to network topology layers",
    ANN_NETWORK_TOPOLOGY_INDEX: "read but not acted on: network-topology-aware gang placement is not supported",
}


class Explicit(msgspec.Struct, frozen=True, kw_only=True):
    """One explicitly given setting: its name, where it came from, and its parsed value."""

    field: str
    path: str
    value: SettingValue


class GangDecl(msgspec.Struct, frozen=True, kw_only=True):
    """A pod's gang membership: its gang id ``"namespace/name"`` and the settings it states explicitly.

    A declaration with ``min-available`` declares a lightweight gang; without it the pod only references its gang.
    """

    gang_id: str
    explicit: tuple[Explicit, ...] = ()

    @property
    def declares(self) -> bool:
        return any(e.field == MIN_AVAILABLE for e in self.explicit)


class PodGroupInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a PodGroup manifest declares: the gang id, explicit settings and minResources (canonical units)."""

    gang_id: str
    namespace: str
    name: str
    explicit: tuple[Explicit, ...]
    min_resources: dict[str, int] = msgspec.field(default_factory=dict)


def seconds(n: int) -> int:
    """``n`` seconds in microseconds, the unit of time of decisions."""
    return n * MICROS_PER_SECOND


def read_sub_priority(labels: dict[str, Any], issues: list[FieldIssue]) -> int:
    """The ``koordinator.sh/priority`` label (a 32-bit integer; 0 when absent)."""
    raw = labels.get(LABEL_SUB_PRIORITY)
    if raw is None:
        return 0
    text = str(raw)
    if not _INT.match(text) or not -_INT32 <= int(text) < _INT32:
        issues.append(
            FieldIssue(path=label_path(LABEL_SUB_PRIORITY), message="must be a 32-bit integer", value=text)
        )
        return 0
    return int(text)


def read_pod_gang(
    namespace: str,
    annotations: dict[str, Any],
    labels: dict[str, Any],
    issues: list[FieldIssue],
    warnings: list[FieldIssue],
) -> GangDecl | None:
    """The gang a pod belongs to (``None`` for a plain pod); problems are appended to ``issues``."""
    r = Reader(annotations, labels)
    gang = r.first_of(
        [("ann", ANN_NAME), ("label", LABEL_POD_GROUP), ("label", LABEL_POD_GROUP_NAME)], "gang name"
    )
    gang_id: str | None = None
    if gang is not None:
        if is_name(gang[0]):
            gang_id = f"{namespace}/{gang[0]}"
        else:
            r.error(gang[1], SUBDOMAIN_REASON, gang[0])
    min_found = r.first_of([("ann", ANN_MIN_AVAILABLE), ("label", LABEL_MIN_AVAILABLE)], "min-available")
    total_found = r.first_of([("ann", ANN_TOTAL_NUMBER)], "total-number")
    mode_found = r.first_of([("ann", ANN_MODE)], "mode")
    wait_found = r.first_of([("ann", ANN_WAITING_TIME)], "waiting-time")
    groups_found = r.first_of([("ann", ANN_GROUPS)], "groups")
    policy_found = r.first_of(
        [("ann", ANN_MATCH_POLICY), ("ann", MATCH_POLICY_ALIAS), ("label", MATCH_POLICY_ALIAS)],
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
    r.unknown_keys(
        GANG_PREFIX, _POD_KNOWN, {ANN_TIMEOUT: f"is not supported; use {ANN_WAITING_TIME}"}, _NOT_ACTED_ON
    )
    if gang is None:
        for _, found in settings:
            if found is not None:
                r.error(found[1], f"is a gang setting but the pod names no gang (set {ANN_NAME})", found[0])
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
    issues.extend(r.errors)
    warnings.extend(r.warnings)
    if r.errors or gang_id is None:
        return None
    return GangDecl(gang_id=gang_id, explicit=explicit)


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
    if mode_found is not None:
        mode = mode_found[0]
        if mode not in MODES:
            r.warnings.append(
                FieldIssue(
                    path=mode_found[1],
                    code="Defaulted",
                    message=f"is not Strict or NonStrict (case-sensitive): treated as {STRICT}, as Koordinator does",
                    value=mode,
                )
            )
            mode = STRICT
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
    policy = r.choice(policy_found, MATCH_POLICIES)
    if policy is not None and policy_found is not None:
        out.append(Explicit(field=MATCH_POLICY, path=policy_found[1], value=policy))
    return tuple(out)


def _maps(
    manifest: Mapping[str, Any], errors: list[FieldIssue]
) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    meta = manifest.get("metadata") or {}
    if not isinstance(meta, dict):
        errors.append(FieldIssue(path="metadata", message="must be a mapping"))
        return "", "default", {}, {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldIssue(path="metadata.name", message="is required", value=str(name or "")))
        name = ""
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str) or not is_namespace(namespace):
        errors.append(
            FieldIssue(
                path="metadata.namespace", message="must be a lowercase RFC 1123 label", value=str(namespace)
            )
        )
        namespace = "default"
    maps: list[dict[str, Any]] = []
    for field in ("annotations", "labels"):
        value = meta.get(field) or {}
        if not isinstance(value, dict):
            errors.append(FieldIssue(path=f"metadata.{field}", message="must be a mapping of strings"))
            value = {}
        maps.append(value)
    return name, namespace, maps[0], maps[1]


def parse_pod_group(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> PodGroupInfo | None:
    """Read a ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup; its annotations may set total-number, mode, groups
    and match-policy; minMember and scheduleTimeoutSeconds come from ``spec``."""
    head: list[FieldIssue] = []
    name, namespace, ann, labels = _maps(manifest, head)
    r = Reader(ann, labels)
    r.errors.extend(head)
    if manifest.get("apiVersion") != POD_GROUP_API_VERSION:
        r.error("apiVersion", f"must be {POD_GROUP_API_VERSION}", manifest.get("apiVersion"))
    if manifest.get("kind") != POD_GROUP_KIND:
        r.error("kind", f"must be {POD_GROUP_KIND}", manifest.get("kind"))
    if name and not is_name(name):
        r.error("metadata.name", SUBDOMAIN_REASON, name)
    gang_id = f"{namespace}/{name}"
    spec = manifest.get("spec")
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
                Explicit(field=WAITING_TIME, path="spec.scheduleTimeoutSeconds", value=seconds(timeout))
            )
    min_resources = _min_resources(spec.get("minResources"), r)
    refused = {
        ANN_NAME: "is not used on a PodGroup (its name is metadata.name)",
        ANN_MIN_AVAILABLE: "is not used on a PodGroup; set spec.minMember",
        ANN_WAITING_TIME: "is not used on a PodGroup; set spec.scheduleTimeoutSeconds",
        ANN_TIMEOUT: "is not supported; set spec.scheduleTimeoutSeconds",
    }
    r.unknown_keys(
        GANG_PREFIX, {ANN_TOTAL_NUMBER, ANN_MODE, ANN_GROUPS, ANN_MATCH_POLICY}, refused, _NOT_ACTED_ON
    )
    found_min = (str(mm), "spec.minMember") if mm is not None else None
    rest = _settings(
        r,
        gang_id,
        found_min,
        r.first_of([("ann", ANN_TOTAL_NUMBER)], "total-number"),
        r.first_of([("ann", ANN_MODE)], "mode"),
        None,
        r.first_of([("ann", ANN_GROUPS)], "groups"),
        r.first_of(
            [("ann", ANN_MATCH_POLICY), ("ann", MATCH_POLICY_ALIAS), ("label", MATCH_POLICY_ALIAS)],
            "match-policy",
        ),
    )
    explicit.extend(e for e in rest if e.field != MIN_AVAILABLE)
    issues.extend(r.errors)
    warnings.extend(r.warnings)
    if r.errors:
        return None
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
        amount = to_canonical(str(name), q)
        problem = range_issue(str(name), amount, path, value[name], "cluster")  # a sum over the members
        if problem is not None:
            r.errors.append(problem)
            continue
        out[str(name)] = amount
    return out


def ann_path(key: str) -> str:
    return annotation_path(key)
