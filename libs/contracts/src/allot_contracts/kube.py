"""Reading Kubernetes manifests (plain dicts from YAML or the API): sections, labels, QoS, priority, storability.

Pure helpers shared by every service, so that "what QoS class a pod has" means the same thing in the quota-manager,
the device-allocator and the qos-enforcer. What a pod requests is read by
:func:`allot_contracts.objects.requests.pod_requests`; the priority bands are :data:`names.PRIORITY_BANDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.jsonvalue import JsonValue
from allot_contracts.objects.meta import annotations_of
from allot_contracts.objects.meta import labels_of as labels
from allot_contracts.objects.meta import metadata_of as meta
from allot_contracts.objects.qos_rules import koord_priority_of, koord_qos_of
from allot_contracts.quantity import QuantityError, to_canonical

# ``meta``, ``labels`` and ``annotations_of`` are the lenient readers of allot_contracts.objects.meta, under the names
# the services call them by.
__all__ = [
    "MAX_INT64",
    "annotations_of",
    "koord_priority_class",
    "koord_qos_class",
    "kube_qos_class",
    "labels",
    "meta",
    "priority_value",
    "spec_of",
    "status_of",
    "storage_issues",
]

MAX_INT64 = 2**63 - 1


def _map(value: JsonValue) -> Mapping[str, JsonValue]:
    return value if isinstance(value, Mapping) else {}


def _list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def spec_of(manifest: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    """The manifest's ``spec`` (``{}`` when it is missing or not a map: a damaged event must not crash a reader)."""
    return _map(manifest.get("spec"))


def status_of(manifest: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    """The manifest's ``status`` (``{}`` when it is missing or not a map)."""
    return _map(manifest.get("status"))


def kube_qos_class(manifest: Mapping[str, JsonValue]) -> str:
    """Kubernetes QoS: Guaranteed (every container: cpu and memory limits == requests), BestEffort (no cpu/memory
    requests or limits anywhere), else Burstable."""
    spec = _map(manifest.get("spec"))
    containers = [
        c
        for field in ("containers", "initContainers")
        for c in _list(spec.get(field))
        if isinstance(c, Mapping)
    ]
    if not containers:
        return "BestEffort"
    any_set = False
    guaranteed = True
    for container in containers:
        resources = _map(container.get("resources"))
        requests, limits = _map(resources.get("requests")), _map(resources.get("limits"))
        for res in ("cpu", "memory"):
            req, lim = requests.get(res, limits.get(res)), limits.get(res)
            if req is not None or lim is not None:
                any_set = True
            if req is None or lim is None or isinstance(req, list | dict) or isinstance(lim, list | dict):
                guaranteed = False  # missing, or not a quantity
                continue
            try:
                if to_canonical(res, req) != to_canonical(res, lim):
                    guaranteed = False
            except QuantityError:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def priority_value(manifest: Mapping[str, JsonValue]) -> int:
    value = _map(manifest.get("spec")).get("priority")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def koord_priority_class(manifest: Mapping[str, JsonValue]) -> str:
    """Koordinator priority class with default (:func:`allot_contracts.objects.qos_rules.koord_priority_of`: the
    label, else the ``spec.priority`` band, else from the QoS class), else ``"none"``."""
    priority = _map(manifest.get("spec")).get("priority")
    given = priority if isinstance(priority, int) and not isinstance(priority, bool) else None
    return koord_priority_of(labels(manifest), given, koord_qos_class(manifest)) or "none"


def koord_qos_class(manifest: Mapping[str, JsonValue]) -> str:
    """Koordinator QoS from the ``koordinator.sh/qosClass`` label; without it, derived like koordlet does:
    Guaranteed/Burstable → LS, BestEffort → BE."""
    return koord_qos_of(labels(manifest), kube_qos_class(manifest))


def storage_issues(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Values the log cannot store faithfully, as ``(field path, reason)``: NUL characters (PostgreSQL's JSON refuses
    them), integers beyond 64 bits, non-finite numbers, non-string keys."""
    issues: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                issues.append((f"{path}.{key}" if path else str(key), "keys must be strings"))
                continue
            issues += storage_issues(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            issues += storage_issues(item, f"{path}[{index}]")
    elif isinstance(value, str):
        if "\x00" in value:
            issues.append((path, "must not contain NUL characters"))
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if abs(value) > MAX_INT64:
            issues.append((path, "integer out of range (must fit in 64 bits)"))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            issues.append((path, "must be a finite number"))
    else:
        issues.append((path, f"unsupported value type {type(value).__name__}"))
    return issues
