"""Koordinator's ``ResourceMap`` (``slo.koordinator.sh/v1alpha1``): read into exact integers and written back.

Upstream's type (``apis/slo/v1alpha1/resources.go``) embeds a ``ResourceList`` under ``resources`` next to a list of
``DeviceInfo`` under ``devices``; every usage in a NodeMetric (``nodeUsage``, ``systemUsage``, each aggregated
percentile, ``podUsage``, a host application's ``usage``, ``prodReclaimableMetric.resource``,
``prodPeakMetric.resource``, each NUMA node's usages) has that shape::

    nodeUsage:
      resources: {cpu: 11500m, memory: 40Gi}
      devices: [{type: gpu, minor: 0, resources: {...}}]

Rules:
- Quantities are Kubernetes quantities, read as canonical integers (cpu in millicores, memory in bytes); a negative
  one, or one beyond what any node has (:mod:`allot_contracts.quantity_limits`), is refused.
- Any other key is refused with its path: a flat map (``nodeUsage: {cpu: "2"}``) is not a ResourceMap, and reading
  it as empty would hide the node's whole load.
- ``devices`` must be a list of objects; a non-empty one is a warning (device usage is not acted on).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from allot_contracts.issues import FieldIssue, not_acted_on
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.quantity import format_quantity
from allot_contracts.quantity_limits import checked_amount

__all__ = ["RESOURCE_MAP_FIELDS", "Usage", "read_resource_map", "resource_map"]

Usage = dict[str, int]

RESOURCE_MAP_FIELDS: Final = ("resources", "devices")
_SHAPE: Final = "must be a ResourceMap: {resources: {<resource>: <quantity>}, devices: [...]}"


def read_resource_map(raw: Any, path: str, issues: list[FieldIssue], warnings: list[FieldIssue]) -> Usage:
    """The quantities of the ResourceMap at ``path`` as canonical integers (``{}`` when absent)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message=_SHAPE))
        return {}
    unknown = [str(key) for key in raw if key not in RESOURCE_MAP_FIELDS]
    for key in sorted(unknown):
        issues.append(
            FieldIssue(
                path=f"{path}.{key}",
                code="FieldValueNotSupported",
                message='unknown field; a ResourceMap holds quantities under "resources" '
                '(and device usage under "devices")',
            )
        )
    devices = raw.get("devices")
    if devices is not None:
        if not isinstance(devices, list) or not all(isinstance(d, Mapping) for d in devices):
            issues.append(FieldIssue(path=f"{path}.devices", message="must be a list of devices (objects)"))
        elif devices:
            warnings.append(not_acted_on(f"{path}.devices", "device usage is not acted on"))
    return _quantities(raw.get("resources"), f"{path}.resources", issues)


def _quantities(raw: Any, path: str, issues: list[FieldIssue]) -> Usage:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message="must be a map of resource name to quantity"))
        return {}
    out: Usage = {}
    for name in sorted(raw, key=str):
        value = raw[name]
        amount = checked_amount(str(name), value, f"{path}[{name}]", issues)
        if amount is not None:
            out[str(name)] = amount
    return out


def resource_map(usage: Mapping[str, int]) -> JsonObject:
    """The ResourceMap of canonical amounts, as koordlet writes it (``{}`` for no quantities: ``resources`` is
    omitted when empty)."""
    if not usage:
        return {}
    return {"resources": {name: format_quantity(name, amount) for name, amount in sorted(usage.items())}}
