"""ElasticQuota validation: what the admission webhook would refuse, with the field and the reason.

Design
------
Two passes, both pure:

1. :func:`allot_contracts.objects.quota.parse_quota` reads one manifest on its own (at the door): apiVersion/kind,
   name, quantities, negative values, ``min > max``, min keys missing from max, label values, and the JSON
   annotations (shared-weight, namespaces, total-resource). Every problem is reported, not just the first.
2. :func:`check_topology` checks the parsed quota against the current forest: built-in quotas, name collisions
   across namespaces, is-parent changes, the parent (exists, is a parent, holds no pods, no cycle), tree ids,
   max/min keys against parent and children, the min sums (siblings ≤ parent's min, children ≤ own min; skipped
   with ``allow-force-update`` and for tree roots), and namespaces bound twice.

Messages use the upstream webhook wording where users already search for it (``resourceKey cpu of quota q min
10 > max 5``, ``checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: p``, ``delete quota failed,
quota q has 2 child quotas``...). Label booleans must be exactly ``"true"`` or ``"false"``: upstream silently
reads anything else as the default, which is how ``allow-lent-resource`` "has no effect" for people who wrote
``"False"``.
"""

from __future__ import annotations

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.quantity import format_quantity
from allot_contracts.resources import ResourceList, le_completely
from allot_quota.config import QuotaConfig
from allot_quota.model import (
    ANNO_NAMESPACES,
    BUILTIN,
    DEFAULT_QUOTA,
    LABEL_IS_PARENT,
    LABEL_PARENT,
    LABEL_TREE_ID,
    ROOT_QUOTA,
    QuotaSpec,
)
from allot_quota.tree import Hierarchy

__all__ = ["check_delete", "check_topology", "inherit_tree_id"]


def _label(key: str) -> str:
    return f"metadata.labels[{key}]"


def _anno(key: str) -> str:
    return f"metadata.annotations[{key}]"


def inherit_tree_id(h: Hierarchy, new: QuotaSpec) -> QuotaSpec:
    """A child quota without a tree-id label takes its parent's tree id, as Koordinator's quota webhook sets it
    on create: a child of a multi-tree (profile or is-root) quota belongs to that tree."""
    if new.tree_id or new.is_root or new.parent == ROOT_QUOTA:
        return new
    parent = h.nodes.get(new.parent)
    if parent is None or not parent.spec.tree_id:
        return new
    return msgspec.structs.replace(new, tree_id=parent.spec.tree_id)


def _keys_msg(child: str, parent: str, what: str, same: bool) -> str:
    if same:
        return (
            f"checkSubAndParentGroupQuotaKey failed: {parent}'s {what} keys are not the same with {child}'s"
        )
    return f"checkSubAndParentGroupQuotaKey failed: {child}'s {what} keys are not all included in {parent}'s"


def _check_keys(child: QuotaSpec, parent: QuotaSpec, config: QuotaConfig, field_of: str) -> list[FieldIssue]:
    out: list[FieldIssue] = []
    subset = config.update_resource_key
    ok = set(child.max) <= set(parent.max) if subset else set(child.max) == set(parent.max)
    if not ok:
        msg = _keys_msg(child.name, parent.name, "max", not subset)
        out.append(FieldIssue(path=f"{field_of}.max", code="Invalid", message=msg))
    if not set(child.min) <= set(parent.min):
        msg = _keys_msg(child.name, parent.name, "min", False)
        out.append(FieldIssue(path=f"{field_of}.min", code="Invalid", message=msg))
    return out


def _sum_mins(h: Hierarchy, names: list[str], skip: str = "") -> ResourceList:
    total: ResourceList = {}
    for n in names:
        if n != skip:
            for k, v in h.nodes[n].spec.min.items():
                total[k] = total.get(k, 0) + v
    return total


def _check_parent(h: Hierarchy, new: QuotaSpec, config: QuotaConfig) -> list[FieldIssue]:
    name, p = new.name, new.parent
    field = _label(LABEL_PARENT)
    if p == ROOT_QUOTA:
        return []
    if p == name:
        return [FieldIssue(path=field, code="Invalid", value=p, message=f"{name} cannot be its own parent")]
    node = h.nodes.get(p)
    if node is None:
        msg = f"{name} has parentName {p} but the parent quota {p} does not exist"
        return [FieldIssue(path=field, code="NotFound", value=p, message=msg)]
    if not node.spec.is_parent or p in BUILTIN:
        msg = f"{name} has parentName {p} but the parentQuotaInfo's IsParent is false"
        return [FieldIssue(path=field, code="Invalid", value=p, message=msg)]
    if name in h.nodes and name in h.path(p):
        msg = f"{name} has parentName {p} but {p} is a descendant of {name}: the parent chain would form a cycle"
        return [FieldIssue(path=field, code="Invalid", value=p, message=msg)]
    out: list[FieldIssue] = []
    if node.pods:
        msg = f"{name} has parentName {p} but {p} holds {len(node.pods)} pods; a quota with pods cannot have children"
        out.append(FieldIssue(path=field, code="Forbidden", value=p, message=msg))
    if node.spec.tree_id != new.tree_id:
        msg = f"{name} tree id is different from parent {p}, [{new.tree_id}] vs [{node.spec.tree_id}]"
        out.append(FieldIssue(path=_label(LABEL_TREE_ID), code="Invalid", value=new.tree_id, message=msg))
    out += _check_keys(new, node.spec, config, "spec")
    if not out and not new.allow_force_update:
        total = _sum_mins(h, node.children, skip=name)
        for k, v in new.min.items():
            total[k] = total.get(k, 0) + v
        if not le_completely(total, node.spec.min):
            msg = f"checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: {p}"
            out.append(FieldIssue(path="spec.min", code="Invalid", message=msg))
    return out


def _check_children(h: Hierarchy, new: QuotaSpec, config: QuotaConfig) -> list[FieldIssue]:
    node = h.nodes.get(new.name)
    if node is None or not node.children:
        return []
    out: list[FieldIssue] = []
    for c in node.children:
        child = h.nodes[c].spec
        if child.tree_id != new.tree_id:
            msg = f"{new.name} tree id is different from child {c}, [{new.tree_id}] vs [{child.tree_id}]"
            out.append(FieldIssue(path=_label(LABEL_TREE_ID), code="Invalid", value=new.tree_id, message=msg))
        out += _check_keys(child, new, config, "spec")
    allowed = out or new.allow_force_update or new.is_root
    if not allowed and not le_completely(_sum_mins(h, node.children), new.min):
        msg = f"checkMinQuotaSum all children's MinQuota > current MinQuota, current: {new.name}"
        out.append(FieldIssue(path="spec.min", code="Invalid", message=msg))
    return out


def check_topology(h: Hierarchy, new: QuotaSpec, config: QuotaConfig) -> list[FieldIssue]:
    """Check a parsed quota against the current forest (create when absent, update otherwise)."""
    name = new.name
    if name in BUILTIN and name != DEFAULT_QUOTA:
        msg = f"quota {name} is built in and cannot be created or modified"
        return [FieldIssue(path="metadata.name", code="Forbidden", value=name, message=msg)]
    existing = h.nodes.get(name)
    if existing is not None and existing.spec.namespace != new.namespace:
        return [
            FieldIssue(
                path="metadata.name",
                code="Duplicate",
                value=name,
                message=f"AddQuota quota already exist:{name}",
            )
        ]
    if name == DEFAULT_QUOTA:
        if new.namespace != config.quota_group_namespace:
            msg = f"quota {name} lives in namespace {config.quota_group_namespace}"
            return [FieldIssue(path="metadata.namespace", code="Invalid", value=new.namespace, message=msg)]
        if new.parent != ROOT_QUOTA or new.is_parent or new.is_root:
            msg = f"quota {name} is outside the quota trees: it cannot have a parent or children"
            return [FieldIssue(path=_label(LABEL_PARENT), code="Forbidden", value=new.parent, message=msg)]
        return []
    if existing is not None and existing.spec.profile and existing.spec.profile != new.profile:
        msg = f"quota {name} is managed by ElasticQuotaProfile {existing.spec.profile}; change the profile instead"
        return [FieldIssue(path="metadata.name", code="Forbidden", value=name, message=msg)]
    out: list[FieldIssue] = []
    if existing is not None:
        old = existing.spec
        if old.is_parent and not new.is_parent and existing.children:
            msg = f"quota has children, isParent is forbidden to modify as false, quotaName:{name}"
            out.append(FieldIssue(path=_label(LABEL_IS_PARENT), code="Forbidden", value="false", message=msg))
        if new.is_parent and not old.is_parent and existing.pods:
            msg = f"quota has bound pods, isParent is forbidden to modify as true, quotaName: {name}"
            out.append(FieldIssue(path=_label(LABEL_IS_PARENT), code="Forbidden", value="true", message=msg))
        for key in new.strict_keys:
            used = existing.used.get(key, 0)
            if key not in new.max and used:
                msg = (
                    f"resourceKey {key} of quota {name} is included in used, which is not included in max but "
                    "should check max >= used"
                )
                out.append(FieldIssue(path="spec.max", code="Invalid", message=msg))
            elif key in new.max and new.max[key] < used:
                hi, lo = format_quantity(key, new.max[key]), format_quantity(key, used)
                msg = f"resourceKey {key} of quota {name} max {hi} < used {lo}"
                out.append(FieldIssue(path=f"spec.max[{key}]", code="Invalid", value=hi, message=msg))
        if old.tree_id != new.tree_id:
            msg = f"{name} tree id changed [{old.tree_id}] vs [{new.tree_id}]"
            out.append(
                FieldIssue(path=_label(LABEL_TREE_ID), code="Forbidden", value=new.tree_id, message=msg)
            )
    if new.is_root and not new.tree_id:
        msg = 'a tree root (is-root: "true") needs a tree-id label'
        out.append(FieldIssue(path=_label(LABEL_TREE_ID), code="Required", message=msg))
    if not new.is_root:
        out += _check_parent(h, new, config)
    out += _check_children(h, new, config)
    for ns in new.namespaces:
        for other in sorted(h.nodes):
            if other != name and ns in h.nodes[other].spec.namespaces:
                msg = f"namespace {ns} is already bound to quota {other}"
                out.append(FieldIssue(path=_anno(ANNO_NAMESPACES), code="Duplicate", value=ns, message=msg))
    return out


def check_delete(h: Hierarchy, namespace: str, name: str) -> list[FieldIssue]:
    if name in BUILTIN:
        msg = f"quota {name} is built in and cannot be deleted"
        return [FieldIssue(path="metadata.name", code="Forbidden", value=name, message=msg)]
    node = h.nodes.get(name)
    if node is None or node.spec.namespace != namespace:
        msg = f"elastic quota {namespace}/{name} not found"
        return [FieldIssue(path="metadata.name", code="NotFound", value=name, message=msg)]
    if node.spec.profile:
        msg = (
            f"quota {name} is managed by ElasticQuotaProfile {node.spec.profile}; delete the profile instead"
        )
        return [FieldIssue(path="metadata.name", code="Forbidden", value=name, message=msg)]
    return check_removable(node.spec.name, len(node.children), len(node.pods))


def check_removable(name: str, children: int, pods: int) -> list[FieldIssue]:
    if children:
        msg = f"delete quota failed, quota {name} has {children} child quotas"
        return [FieldIssue(path="metadata.name", code="Forbidden", value=name, message=msg)]
    if pods:
        msg = f"delete quota failed, quota {name} has {pods} child pods"
        return [FieldIssue(path="metadata.name", code="Forbidden", value=name, message=msg)]
    return []
