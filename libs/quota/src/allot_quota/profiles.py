"""Nodes and ElasticQuotaProfiles: where each quota tree's total comes from.

Design
------
The default tree shares the cluster total: Σ ``status.allocatable`` of every known node, minus the totals of the
profile trees (unless their root says ``ignore-default-tree: "true"``), minus what the system and default quotas
use. An ``ElasticQuotaProfile`` (``quota.koordinator.sh/v1alpha1``) carves a separate tree out of the nodes its
``nodeSelector`` selects: its total is ``floor(Σ allocatable × resourceRatio)`` per resource, and the engine keeps
the profile's root quota (``spec.quotaName``) in step with it: ``min`` = total and ``max`` = 2^63/2000 (in the
resource's quantity unit) for the profile's resource keys (annotation ``resource-keys``, default cpu and memory),
labels ``is-root``, ``is-parent``, ``tree-id``, ``profile`` plus ``spec.quotaLabels``, annotation
``total-resource``. The tree id is the profile's ``tree-id`` label, else FNV-1a 64 of ``"<namespace>/<name>"`` in
decimal. Cordoned (``spec.unschedulable``) and NotReady nodes still count in totals, as upstream
(``profile_totals`` also returns their share, which is not surfaced yet).

Pure: node and profile manifests in, value objects out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from allot_contracts.quantity import QuantityError, is_milli_resource, parse_quantity
from allot_quota._resources import RL, parse_list, quantities
from allot_quota.errors import FieldError
from allot_quota.model import LABEL_TREE_ID, QuotaSpec

__all__ = ["NodeInfo", "ProfileSpec", "node_info", "parse_profile", "profile_root", "selects", "tree_id_for"]

PROFILE_API: Final = "quota.koordinator.sh/v1alpha1"
_MAX_INT64: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: dict[str, str]
    allocatable: RL
    schedulable: bool = True

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "labels": dict(sorted(self.labels.items())),
            "allocatable": quantities(self.allocatable),
            "schedulable": self.schedulable,
        }


def node_info(manifest: dict[str, Any]) -> NodeInfo:
    """Read a Node manifest (``metadata.name/labels``, ``status.allocatable``, ``spec.unschedulable``, Ready)."""
    meta = manifest.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise ValueError("metadata.name: Required: node name is required")
    status = manifest.get("status") or {}
    try:
        allocatable = parse_list(status.get("allocatable") or {})
    except QuantityError as exc:
        raise ValueError(f"status.allocatable: Invalid: {exc}") from exc
    ready = True
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    cordoned = bool((manifest.get("spec") or {}).get("unschedulable"))
    raw_labels = meta.get("labels") or {}
    if not isinstance(raw_labels, dict):
        raise ValueError("metadata.labels: Invalid: must be a mapping")
    labels = {str(k): str(v) for k, v in raw_labels.items()}
    return NodeInfo(name=name, labels=labels, allocatable=allocatable, schedulable=ready and not cordoned)


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    namespace: str
    name: str
    quota_name: str
    quota_labels: dict[str, str]
    ratio: Fraction
    node_selector: dict[str, Any]
    tree_id: str
    resource_keys: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_state(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "quota_name": self.quota_name,
            "quota_labels": dict(sorted(self.quota_labels.items())),
            "ratio": f"{self.ratio.numerator}/{self.ratio.denominator}",
            "node_selector": json.loads(json.dumps(self.node_selector, sort_keys=True)),
            "tree_id": self.tree_id,
            "resource_keys": list(self.resource_keys),
        }


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def tree_id_for(namespace: str, name: str) -> str:
    """FNV-1a 64-bit hash of ``"<namespace>/<name>"``, in decimal."""
    return str(fnv1a64(f"{namespace}/{name}".encode()))


def parse_profile(manifest: dict[str, Any]) -> tuple[ProfileSpec | None, list[FieldError]]:
    errors: list[FieldError] = []
    if manifest.get("apiVersion") != PROFILE_API or manifest.get("kind") != "ElasticQuotaProfile":
        errors.append(
            FieldError(
                field="kind",
                type="NotSupported",
                value=f"{manifest.get('apiVersion')}/{manifest.get('kind')}",
                message=f"expected apiVersion {PROFILE_API} and kind ElasticQuotaProfile",
            )
        )
        return None, errors
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "default")
    if not name:
        errors.append(FieldError(field="metadata.name", type="Required", message="profile name is required"))
    quota_name = str(spec.get("quotaName") or "")
    if not quota_name:
        errors.append(FieldError(field="spec.quotaName", type="Required", message="quotaName is required"))
    raw_ratio = spec.get("resourceRatio")
    ratio = Fraction(1)
    if raw_ratio not in (None, ""):
        try:
            ratio = parse_quantity(str(raw_ratio))
        except QuantityError:
            ratio = Fraction(-1)
        if not (0 < ratio <= 1):
            errors.append(
                FieldError(
                    field="spec.resourceRatio",
                    type="Invalid",
                    value=str(raw_ratio),
                    message="resourceRatio must be a decimal number in (0, 1]",
                )
            )
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        errors.append(
            FieldError(field="spec.nodeSelector", type="Invalid", message="must be a label selector")
        )
        selector = {}
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        op = expr.get("operator") if isinstance(expr, dict) else None
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errors.append(
                FieldError(
                    field=f"spec.nodeSelector.matchExpressions[{i}].operator",
                    type="NotSupported",
                    value=str(op),
                    message='operator must be one of "In", "NotIn", "Exists", "DoesNotExist"',
                )
            )
    keys: tuple[str, ...] = ("cpu", "memory")
    raw_keys = (meta.get("annotations") or {}).get("quota.scheduling.koordinator.sh/resource-keys")
    if raw_keys:
        try:
            parsed = json.loads(raw_keys)
            if not isinstance(parsed, list) or not all(isinstance(k, str) for k in parsed):
                raise ValueError("expected a JSON list of resource names")
            keys = tuple(sorted(set(parsed)))
        except ValueError as exc:
            errors.append(
                FieldError(
                    field="metadata.annotations[quota.scheduling.koordinator.sh/resource-keys]",
                    type="Invalid",
                    value=str(raw_keys),
                    message=f"invalid resource-keys: {exc}",
                )
            )
    labels = {str(k): str(v) for k, v in (spec.get("quotaLabels") or {}).items()}
    if errors:
        return None, errors
    tree_id = str((meta.get("labels") or {}).get(LABEL_TREE_ID) or tree_id_for(namespace, name))
    return (
        ProfileSpec(
            namespace=namespace,
            name=name,
            quota_name=quota_name,
            quota_labels=labels,
            ratio=ratio,
            node_selector=selector,
            tree_id=tree_id,
            resource_keys=keys,
        ),
        errors,
    )


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics; an empty selector selects every node."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != str(v):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        present = key in labels
        if (
            (op == "In" and (not present or labels[key] not in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def profile_totals(profile: ProfileSpec, nodes: dict[str, NodeInfo]) -> tuple[RL, RL]:
    """(total, unschedulable) of the nodes the profile selects, × resourceRatio, rounded down."""
    total: dict[str, int] = {}
    unsched: dict[str, int] = {}
    for name in sorted(nodes):
        node = nodes[name]
        if not selects(profile.node_selector, node.labels):
            continue
        for k, v in node.allocatable.items():
            total[k] = total.get(k, 0) + v
            if not node.schedulable:
                unsched[k] = unsched.get(k, 0) + v
    r = profile.ratio
    return ({k: int(v * r) for k, v in total.items()}, {k: int(v * r) for k, v in unsched.items()})


def _huge(key: str) -> int:
    base = _MAX_INT64 // 2000
    return base * 1000 if is_milli_resource(key) else base


def profile_root(profile: ProfileSpec, total: RL) -> QuotaSpec:
    """The root quota a profile manages, for the given total."""
    keys = profile.resource_keys
    return QuotaSpec(
        name=profile.quota_name,
        namespace=profile.namespace,
        is_parent=True,
        allow_lent=True,
        tree_id=profile.tree_id,
        is_root=True,
        ignore_default_tree=profile.quota_labels.get("quota.scheduling.koordinator.sh/ignore-default-tree")
        == "true",
        min={k: total.get(k, 0) for k in keys},
        max={k: _huge(k) for k in keys},
        total_resource=dict(total),
        profile=profile.key,
    )
