"""ElasticQuota validation: what the admission webhook would refuse, with the field and the reason.

Design
------
Two passes, both pure:

1. :func:`parse_quota` reads one manifest on its own: apiVersion/kind, name, quantities, negative values,
   ``min > max``, min keys missing from max, label values, and the JSON annotations (shared-weight, namespaces,
   total-resource). Every problem is reported, not just the first.
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

import json
from typing import Any, Final

from allot_contracts.quantity import QuantityError, format_quantity
from allot_quota._resources import RL, le_completely, negatives, parse_list
from allot_quota.config import QuotaConfig
from allot_quota.errors import FieldError
from allot_quota.model import (
    ANNO_MAX_STRICT_KEYS,
    ANNO_NAMESPACES,
    ANNO_SHARED_WEIGHT,
    ANNO_TOTAL_RESOURCE,
    BUILTIN,
    DEFAULT_QUOTA,
    LABEL_ALLOW_FORCE_UPDATE,
    LABEL_ALLOW_LENT,
    LABEL_IGNORE_DEFAULT_TREE,
    LABEL_IS_PARENT,
    LABEL_IS_ROOT,
    LABEL_PARENT,
    LABEL_TREE_ID,
    ROOT_QUOTA,
    QuotaSpec,
)
from allot_quota.tree import Hierarchy

__all__ = ["QUOTA_API", "check_delete", "check_topology", "parse_quota"]

QUOTA_API: Final = "scheduling.sigs.k8s.io/v1alpha1"
_BOOL_LABELS: Final = {
    LABEL_IS_PARENT: False,
    LABEL_ALLOW_LENT: True,
    LABEL_IS_ROOT: False,
    LABEL_IGNORE_DEFAULT_TREE: False,
    LABEL_ALLOW_FORCE_UPDATE: False,
}


def _label(key: str) -> str:
    return f"metadata.labels[{key}]"


def _anno(key: str) -> str:
    return f"metadata.annotations[{key}]"


def _dims(keys: list[str]) -> str:
    return "[" + " ".join(keys) + "]"


def _resource_list(raw: Any, field: str, errors: list[FieldError]) -> RL:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(
            FieldError(field=field, type="Invalid", message="must be a map of resource name to quantity")
        )
        return {}
    out: RL = {}
    for k, v in raw.items():
        try:
            out.update(parse_list({k: v}))
        except QuantityError as exc:
            errors.append(FieldError(field=f"{field}[{k}]", type="Invalid", value=str(v), message=str(exc)))
    return out


def _json_annotation(annotations: dict[str, Any], key: str, errors: list[FieldError]) -> Any:
    raw = annotations.get(key)
    if raw in (None, ""):
        return None
    try:
        return json.loads(str(raw))
    except json.JSONDecodeError as exc:
        errors.append(
            FieldError(field=_anno(key), type="Invalid", value=str(raw), message=f"invalid JSON: {exc}")
        )
        return None


def parse_quota(manifest: dict[str, Any]) -> tuple[QuotaSpec | None, list[FieldError]]:
    """Read and self-check one ElasticQuota manifest."""
    errors: list[FieldError] = []
    if manifest.get("apiVersion") != QUOTA_API or manifest.get("kind") != "ElasticQuota":
        got = f"{manifest.get('apiVersion')}/{manifest.get('kind')}"
        msg = f"expected apiVersion {QUOTA_API} and kind ElasticQuota"
        return None, [FieldError(field="kind", type="NotSupported", value=got, message=msg)]
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    name = str(meta.get("name") or "")
    if not name:
        errors.append(FieldError(field="metadata.name", type="Required", message="quota name is required"))
    namespace = str(meta.get("namespace") or "default")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): v for k, v in (meta.get("annotations") or {}).items()}
    flags: dict[str, bool] = {}
    for key, default in _BOOL_LABELS.items():
        raw = labels.get(key)
        if raw is None or raw == "":
            flags[key] = default
        elif raw in ("true", "false"):
            flags[key] = raw == "true"
        else:
            errors.append(
                FieldError(field=_label(key), type="Invalid", value=raw, message='must be "true" or "false"')
            )
            flags[key] = default
    mins = _resource_list(spec.get("min"), "spec.min", errors)
    maxs = _resource_list(spec.get("max"), "spec.max", errors)
    for field_name, values, what in (("spec.max", maxs, "Max"), ("spec.min", mins, "Min")):
        neg = negatives(values)
        if neg:
            msg = f"{name} quota.Spec.{what}'s value < 0, in dimensions :{_dims(neg)}"
            errors.append(FieldError(field=field_name, type="Invalid", message=msg))
    weight: RL | None = None
    raw_weight = _json_annotation(annotations, ANNO_SHARED_WEIGHT, errors)
    if raw_weight is not None:
        if not isinstance(raw_weight, dict):
            errors.append(
                FieldError(
                    field=_anno(ANNO_SHARED_WEIGHT),
                    type="Invalid",
                    value=str(annotations[ANNO_SHARED_WEIGHT]),
                    message="invalid JSON: expected an object of resource name to quantity",
                )
            )
        else:
            weight = _resource_list(raw_weight, _anno(ANNO_SHARED_WEIGHT), errors)
            neg = negatives(weight)
            if neg:
                msg = f"{name} quota.Annotation[{ANNO_SHARED_WEIGHT}]'s value < 0, in dimension :{_dims(neg)}"
                errors.append(FieldError(field=_anno(ANNO_SHARED_WEIGHT), type="Invalid", message=msg))
    namespaces: tuple[str, ...] = ()
    raw_ns = _json_annotation(annotations, ANNO_NAMESPACES, errors)
    if raw_ns is not None:
        if not isinstance(raw_ns, list) or not all(isinstance(n, str) and n for n in raw_ns):
            errors.append(
                FieldError(
                    field=_anno(ANNO_NAMESPACES),
                    type="Invalid",
                    value=str(annotations[ANNO_NAMESPACES]),
                    message="invalid JSON: expected a list of namespace names",
                )
            )
        else:
            namespaces = tuple(sorted(set(raw_ns)))
    strict: tuple[str, ...] = ()
    raw_strict = _json_annotation(annotations, ANNO_MAX_STRICT_KEYS, errors)
    if raw_strict is not None:
        if not isinstance(raw_strict, list) or not all(isinstance(k, str) for k in raw_strict):
            msg = f"{name} quota.Annotation[{ANNO_MAX_STRICT_KEYS}]'s value is invalid: expected a list of resource names"
            errors.append(FieldError(field=_anno(ANNO_MAX_STRICT_KEYS), type="Invalid", message=msg))
        else:
            strict = tuple(sorted(set(raw_strict)))
    total: RL | None = None
    raw_total = _json_annotation(annotations, ANNO_TOTAL_RESOURCE, errors)
    if raw_total is not None:
        total = _resource_list(raw_total, _anno(ANNO_TOTAL_RESOURCE), errors)
    for key in sorted(mins):
        if key not in maxs:
            msg = f"resourceKey {key} of quota {name} is included in min, which is not included in max"
            errors.append(FieldError(field=f"spec.min[{key}]", type="Invalid", message=msg))
        elif maxs[key] < mins[key]:
            lo, hi = format_quantity(key, mins[key]), format_quantity(key, maxs[key])
            msg = f"resourceKey {key} of quota {name} min {lo} > max {hi}"
            errors.append(FieldError(field=f"spec.min[{key}]", type="Invalid", value=lo, message=msg))
    if errors:
        return None, errors
    return (
        QuotaSpec(
            name=name,
            namespace=namespace,
            parent=labels.get(LABEL_PARENT) or ROOT_QUOTA,
            is_parent=flags[LABEL_IS_PARENT],
            allow_lent=flags[LABEL_ALLOW_LENT],
            tree_id=labels.get(LABEL_TREE_ID, ""),
            is_root=flags[LABEL_IS_ROOT],
            ignore_default_tree=flags[LABEL_IGNORE_DEFAULT_TREE],
            allow_force_update=flags[LABEL_ALLOW_FORCE_UPDATE],
            min=mins,
            max=maxs,
            shared_weight=weight,
            namespaces=namespaces,
            total_resource=total,
            strict_keys=strict,
        ),
        [],
    )


def _keys_msg(child: str, parent: str, what: str, same: bool) -> str:
    if same:
        return (
            f"checkSubAndParentGroupQuotaKey failed: {parent}'s {what} keys are not the same with {child}'s"
        )
    return f"checkSubAndParentGroupQuotaKey failed: {child}'s {what} keys are not all included in {parent}'s"


def _check_keys(child: QuotaSpec, parent: QuotaSpec, config: QuotaConfig, field_of: str) -> list[FieldError]:
    out: list[FieldError] = []
    subset = config.update_resource_key
    ok = set(child.max) <= set(parent.max) if subset else set(child.max) == set(parent.max)
    if not ok:
        msg = _keys_msg(child.name, parent.name, "max", not subset)
        out.append(FieldError(field=f"{field_of}.max", type="Invalid", message=msg))
    if not set(child.min) <= set(parent.min):
        msg = _keys_msg(child.name, parent.name, "min", False)
        out.append(FieldError(field=f"{field_of}.min", type="Invalid", message=msg))
    return out


def _sum_mins(h: Hierarchy, names: list[str], skip: str = "") -> RL:
    total: RL = {}
    for n in names:
        if n != skip:
            for k, v in h.nodes[n].spec.min.items():
                total[k] = total.get(k, 0) + v
    return total


def _check_parent(h: Hierarchy, new: QuotaSpec, config: QuotaConfig) -> list[FieldError]:
    name, p = new.name, new.parent
    field = _label(LABEL_PARENT)
    if p == ROOT_QUOTA:
        return []
    if p == name:
        return [FieldError(field=field, type="Invalid", value=p, message=f"{name} cannot be its own parent")]
    node = h.nodes.get(p)
    if node is None:
        msg = f"{name} has parentName {p} but the parent quota {p} does not exist"
        return [FieldError(field=field, type="NotFound", value=p, message=msg)]
    if not node.spec.is_parent or p in BUILTIN:
        msg = f"{name} has parentName {p} but the parentQuotaInfo's IsParent is false"
        return [FieldError(field=field, type="Invalid", value=p, message=msg)]
    if name in h.nodes and name in h.path(p):
        msg = f"{name} has parentName {p} but {p} is a descendant of {name}: the parent chain would form a cycle"
        return [FieldError(field=field, type="Invalid", value=p, message=msg)]
    out: list[FieldError] = []
    if node.pods:
        msg = f"{name} has parentName {p} but {p} holds {len(node.pods)} pods; a quota with pods cannot have children"
        out.append(FieldError(field=field, type="Forbidden", value=p, message=msg))
    if node.spec.tree_id != new.tree_id:
        msg = f"{name} tree id is different from parent {p}, [{new.tree_id}] vs [{node.spec.tree_id}]"
        out.append(FieldError(field=_label(LABEL_TREE_ID), type="Invalid", value=new.tree_id, message=msg))
    out += _check_keys(new, node.spec, config, "spec")
    if not out and not new.allow_force_update:
        total = _sum_mins(h, node.children, skip=name)
        for k, v in new.min.items():
            total[k] = total.get(k, 0) + v
        if not le_completely(total, node.spec.min):
            msg = f"checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: {p}"
            out.append(FieldError(field="spec.min", type="Invalid", message=msg))
    return out


def _check_children(h: Hierarchy, new: QuotaSpec, config: QuotaConfig) -> list[FieldError]:
    node = h.nodes.get(new.name)
    if node is None or not node.children:
        return []
    out: list[FieldError] = []
    for c in node.children:
        child = h.nodes[c].spec
        if child.tree_id != new.tree_id:
            msg = f"{new.name} tree id is different from child {c}, [{new.tree_id}] vs [{child.tree_id}]"
            out.append(
                FieldError(field=_label(LABEL_TREE_ID), type="Invalid", value=new.tree_id, message=msg)
            )
        out += _check_keys(child, new, config, "spec")
    allowed = out or new.allow_force_update or new.is_root
    if not allowed and not le_completely(_sum_mins(h, node.children), new.min):
        msg = f"checkMinQuotaSum all children's MinQuota > current MinQuota, current: {new.name}"
        out.append(FieldError(field="spec.min", type="Invalid", message=msg))
    return out


def check_topology(h: Hierarchy, new: QuotaSpec, config: QuotaConfig) -> list[FieldError]:
    """Check a parsed quota against the current forest (create when absent, update otherwise)."""
    name = new.name
    if name in BUILTIN and name != DEFAULT_QUOTA:
        msg = f"quota {name} is built in and cannot be created or modified"
        return [FieldError(field="metadata.name", type="Forbidden", value=name, message=msg)]
    existing = h.nodes.get(name)
    if existing is not None and existing.spec.namespace != new.namespace:
        return [
            FieldError(
                field="metadata.name",
                type="Duplicate",
                value=name,
                message=f"AddQuota quota already exist:{name}",
            )
        ]
    if name == DEFAULT_QUOTA:
        if new.namespace != config.quota_group_namespace:
            msg = f"quota {name} lives in namespace {config.quota_group_namespace}"
            return [FieldError(field="metadata.namespace", type="Invalid", value=new.namespace, message=msg)]
        if new.parent != ROOT_QUOTA or new.is_parent or new.is_root:
            msg = f"quota {name} is outside the quota trees: it cannot have a parent or children"
            return [FieldError(field=_label(LABEL_PARENT), type="Forbidden", value=new.parent, message=msg)]
        return []
    if existing is not None and existing.spec.profile and existing.spec.profile != new.profile:
        msg = f"quota {name} is managed by ElasticQuotaProfile {existing.spec.profile}; change the profile instead"
        return [FieldError(field="metadata.name", type="Forbidden", value=name, message=msg)]
    out: list[FieldError] = []
    if existing is not None:
        old = existing.spec
        if old.is_parent and not new.is_parent and existing.children:
            msg = f"quota has children, isParent is forbidden to modify as false, quotaName:{name}"
            out.append(
                FieldError(field=_label(LABEL_IS_PARENT), type="Forbidden", value="false", message=msg)
            )
        if new.is_parent and not old.is_parent and existing.pods:
            msg = f"quota has bound pods, isParent is forbidden to modify as true, quotaName: {name}"
            out.append(FieldError(field=_label(LABEL_IS_PARENT), type="Forbidden", value="true", message=msg))
        for key in new.strict_keys:
            used = existing.used.get(key, 0)
            if key not in new.max and used:
                msg = (
                    f"resourceKey {key} of quota {name} is included in used, which is not included in max but "
                    "should check max >= used"
                )
                out.append(FieldError(field="spec.max", type="Invalid", message=msg))
            elif key in new.max and new.max[key] < used:
                hi, lo = format_quantity(key, new.max[key]), format_quantity(key, used)
                msg = f"resourceKey {key} of quota {name} max {hi} < used {lo}"
                out.append(FieldError(field=f"spec.max[{key}]", type="Invalid", value=hi, message=msg))
        if old.tree_id != new.tree_id:
            msg = f"{name} tree id changed [{old.tree_id}] vs [{new.tree_id}]"
            out.append(
                FieldError(field=_label(LABEL_TREE_ID), type="Forbidden", value=new.tree_id, message=msg)
            )
    if new.is_root and not new.tree_id:
        msg = 'a tree root (is-root: "true") needs a tree-id label'
        out.append(FieldError(field=_label(LABEL_TREE_ID), type="Required", message=msg))
    if not new.is_root:
        out += _check_parent(h, new, config)
    out += _check_children(h, new, config)
    for ns in new.namespaces:
        for other in sorted(h.nodes):
            if other != name and ns in h.nodes[other].spec.namespaces:
                msg = f"namespace {ns} is already bound to quota {other}"
                out.append(FieldError(field=_anno(ANNO_NAMESPACES), type="Duplicate", value=ns, message=msg))
    return out


def check_delete(h: Hierarchy, namespace: str, name: str) -> list[FieldError]:
    if name in BUILTIN:
        msg = f"quota {name} is built in and cannot be deleted"
        return [FieldError(field="metadata.name", type="Forbidden", value=name, message=msg)]
    node = h.nodes.get(name)
    if node is None or node.spec.namespace != namespace:
        msg = f"elastic quota {namespace}/{name} not found"
        return [FieldError(field="metadata.name", type="NotFound", value=name, message=msg)]
    if node.spec.profile:
        msg = (
            f"quota {name} is managed by ElasticQuotaProfile {node.spec.profile}; delete the profile instead"
        )
        return [FieldError(field="metadata.name", type="Forbidden", value=name, message=msg)]
    return check_removable(node.spec.name, len(node.children), len(node.pods))


def check_removable(name: str, children: int, pods: int) -> list[FieldError]:
    if children:
        msg = f"delete quota failed, quota {name} has {children} child quotas"
        return [FieldError(field="metadata.name", type="Forbidden", value=name, message=msg)]
    if pods:
        msg = f"delete quota failed, quota {name} has {pods} child pods"
        return [FieldError(field="metadata.name", type="Forbidden", value=name, message=msg)]
    return []
