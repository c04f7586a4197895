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

Pure: typed nodes and profiles in, value objects out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypedDict

from allot_contracts.jsonvalue import JsonValue
from allot_contracts.objects.inventory import NodeInfo as Node
from allot_contracts.objects.quota import ProfileSpec, QuotaSpec, parse_profile, tree_id_for
from allot_contracts.quantity import is_milli_resource
from allot_contracts.resources import ResourceList, format_resource_list

__all__ = ["NodeInfo", "ProfileSpec", "node_info", "parse_profile", "profile_root", "selects", "tree_id_for"]

PROFILE_API: Final = "quota.koordinator.sh/v1alpha1"
_MAX_INT64: Final = 2**63 - 1


class NodeState(TypedDict):
    name: str
    labels: dict[str, str]
    allocatable: dict[str, str]
    schedulable: bool


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: dict[str, str]
    allocatable: ResourceList
    schedulable: bool = True

    def to_state(self) -> NodeState:
        return {
            "name": self.name,
            "labels": dict(sorted(self.labels.items())),
            "allocatable": format_resource_list(self.allocatable),
            "schedulable": self.schedulable,
        }


def node_info(node: Node) -> NodeInfo:
    """What a Node (read at the door) means to quota profiles: labels, allocatable, schedulable (Ready and not
    cordoned)."""
    return NodeInfo(
        name=node.name,
        labels=dict(node.labels),
        allocatable=dict(node.allocatable),
        schedulable=node.ready and not node.unschedulable,
    )


def selects(selector: Mapping[str, JsonValue], labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics; an empty selector selects every node (the door checked its shape)."""
    match_labels = selector.get("matchLabels")
    for k, v in (match_labels if isinstance(match_labels, dict) else {}).items():
        if labels.get(k) != str(v):
            return False
    exprs = selector.get("matchExpressions")
    for expr in exprs if isinstance(exprs, list) else []:
        if not isinstance(expr, dict):
            continue
        key, op, raw = expr.get("key"), expr.get("operator"), expr.get("values")
        values = [str(v) for v in raw] if isinstance(raw, list) else []
        value = labels.get(key) if isinstance(key, str) else None
        if (
            (op == "In" and (value is None or value not in values))
            or (op == "NotIn" and value is not None and value in values)
            or (op == "Exists" and value is None)
            or (op == "DoesNotExist" and value is not None)
        ):
            return False
    return True


def profile_totals(profile: ProfileSpec, nodes: dict[str, NodeInfo]) -> tuple[ResourceList, ResourceList]:
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


def profile_root(profile: ProfileSpec, total: ResourceList) -> QuotaSpec:
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
