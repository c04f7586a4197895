"""Elastic quota input: ``ElasticQuota`` and ``ElasticQuotaProfile`` objects, read once with field paths.

Responsibility: the label and annotation keys of Koordinator's elastic quota, the typed ``QuotaSpec`` an
``ElasticQuota`` means and the ``ProfileSpec`` an ``ElasticQuotaProfile`` means, and their parsers, which check
each object on its own (apiVersion/kind, name, quantities, negative values, ``min > max``, min keys missing from
max, label values, the JSON annotations). Checks against the quota forest (parents, trees, sums) need state and
live in the quota engine.

Messages use the upstream webhook wording where users already search for it (``resourceKey cpu of quota q min
10 > max 5``...). Label booleans must be exactly ``"true"`` or ``"false"``: upstream silently reads anything else
as the default, which is how ``allow-lent-resource`` "has no effect" for people who wrote ``"False"``.
Pure; nothing here raises for bad input.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any, Final

import msgspec

from allot_contracts.fnv import fnv1a64
from allot_contracts.issues import FieldIssue
from allot_contracts.objects.meta import is_dns_subdomain, is_label_value, is_qualified_name, read_meta
from allot_contracts.objects.reservation_pod import unknown_field_issues
from allot_contracts.objects.selectors import parse_label_selector
from allot_contracts.quantity import QuantityError, format_quantity, parse_quantity, to_canonical
from allot_contracts.quantity_limits import range_issue
from allot_contracts.resources import ResourceList, format_resource_list, negatives

PREFIX: Final = "quota.scheduling.koordinator.sh/"
LABEL_IS_PARENT: Final = PREFIX + "is-parent"
LABEL_PARENT: Final = PREFIX + "parent"
LABEL_ALLOW_LENT: Final = PREFIX + "allow-lent-resource"
LABEL_TREE_ID: Final = PREFIX + "tree-id"
LABEL_IS_ROOT: Final = PREFIX + "is-root"
LABEL_PROFILE: Final = PREFIX + "profile"
LABEL_IGNORE_DEFAULT_TREE: Final = PREFIX + "ignore-default-tree"
LABEL_ALLOW_FORCE_UPDATE: Final = PREFIX + "allow-force-update"
LABEL_POD_QUOTA: Final = PREFIX + "name"
LABEL_POD_PREEMPTIBLE: Final = PREFIX + "preemptible"

ANNO_SHARED_WEIGHT: Final = PREFIX + "shared-weight"
ANNO_NAMESPACES: Final = PREFIX + "namespaces"
ANNO_RESOURCE_KEYS: Final = PREFIX + "resource-keys"
ANNO_TOTAL_RESOURCE: Final = PREFIX + "total-resource"
ANNO_UNSCHEDULABLE_RESOURCE: Final = PREFIX + "unschedulable-resource"
ANNO_MAX_STRICT_KEYS: Final = PREFIX + "max-strict-check-resource-keys"
ANNO_RUNTIME: Final = PREFIX + "runtime"
ANNO_REQUEST: Final = PREFIX + "request"
ANNO_CHILD_REQUEST: Final = PREFIX + "child-request"
ANNO_GUARANTEED: Final = PREFIX + "guaranteed"
ANNO_ALLOCATED: Final = PREFIX + "allocated"
ANNO_NP_REQUEST: Final = PREFIX + "non-preemptible-request"
ANNO_NP_USED: Final = PREFIX + "non-preemptible-used"
# the status Allot writes back on an ElasticQuota (quota.status_published): outputs, never inputs
STATUS_ANNOTATIONS: Final = frozenset(
    {
        ANNO_RUNTIME,
        ANNO_REQUEST,
        ANNO_CHILD_REQUEST,
        ANNO_NP_REQUEST,
        ANNO_NP_USED,
        ANNO_GUARANTEED,
        ANNO_ALLOCATED,
    }
)

ROOT_QUOTA: Final = "koordinator-root-quota"
SYSTEM_QUOTA: Final = "koordinator-system-quota"
DEFAULT_QUOTA: Final = "koordinator-default-quota"
BUILTIN: Final = frozenset({ROOT_QUOTA, SYSTEM_QUOTA, DEFAULT_QUOTA})


def parent_quota_message(quota: str, pod: str) -> str:
    """Koordinator's pod webhook refusal of a pod naming a parent quota (pkg/webhook/elasticquota/pod_check.go)."""
    return f"pod can not be linked to a parentQuotaGroup,quota:{quota}, pod:{pod}"


class QuotaSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one ElasticQuota means to the engine (canonical integers; ``parent`` normalised to the root)."""

    name: str
    namespace: str
    parent: str = ROOT_QUOTA
    is_parent: bool = False
    allow_lent: bool = True
    tree_id: str = ""
    is_root: bool = False
    ignore_default_tree: bool = False
    allow_force_update: bool = False
    min: ResourceList = msgspec.field(default_factory=dict)
    max: ResourceList = msgspec.field(default_factory=dict)
    shared_weight: ResourceList | None = None  # None: weight = max
    namespaces: tuple[str, ...] = ()
    total_resource: ResourceList | None = None  # tree roots only
    profile: str = ""  # "<ns>/<name>" of the ElasticQuotaProfile that manages it, if any
    unlimited: bool = False  # the built-in root: no max, pods never land here
    strict_keys: tuple[str, ...] = ()  # max-strict-check-resource-keys: max may not drop below used

    @property
    def weight(self) -> ResourceList:
        """Effective shared weight, as Koordinator's quota webhook completes the annotation and its scheduler reads
        it: each resource of max weighs what the annotation says, or its max when the annotation does not list it
        (resources max does not list are dropped); no annotation, or one whose weights are all zero, means max."""
        if not self.shared_weight:
            return self.max
        weight = {k: self.shared_weight.get(k, v) for k, v in self.max.items()}
        return weight if any(weight.values()) else self.max

    def to_state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "parent": self.parent,
            "is_parent": self.is_parent,
            "allow_lent": self.allow_lent,
            "tree_id": self.tree_id,
            "is_root": self.is_root,
            "ignore_default_tree": self.ignore_default_tree,
            "allow_force_update": self.allow_force_update,
            "min": format_resource_list(self.min),
            "max": format_resource_list(self.max),
            "shared_weight": None if self.shared_weight is None else format_resource_list(self.shared_weight),
            "namespaces": list(self.namespaces),
            "total_resource": None
            if self.total_resource is None
            else format_resource_list(self.total_resource),
            "profile": self.profile,
            "strict_keys": list(self.strict_keys),
        }


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


def _resource_list(raw: Any, field: str, errors: list[FieldIssue]) -> ResourceList:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(
            FieldIssue(path=field, code="Invalid", message="must be a map of resource name to quantity")
        )
        return {}
    out: ResourceList = {}
    for k, v in raw.items():
        try:
            amount = to_canonical(str(k), v)
        except QuantityError as exc:
            errors.append(FieldIssue(path=f"{field}[{k}]", code="Invalid", value=str(v), message=str(exc)))
            continue
        # a negative amount is refused for the whole list below, with upstream's message
        problem = range_issue(str(k), amount, f"{field}[{k}]", v, "cluster") if amount > 0 else None
        if problem is not None:
            errors.append(problem)
            continue
        out[str(k)] = amount
    return out


def _json_annotation(annotations: dict[str, Any], key: str, errors: list[FieldIssue]) -> Any:
    raw = annotations.get(key)
    if raw in (None, ""):
        return None
    # text, as the API server has it: str() of a YAML list is no JSON, or JSON by chance
    if not isinstance(raw, str):
        msg = "must be a string: an annotation's value is text (write the JSON in quotes)"
        errors.append(FieldIssue(path=_anno(key), code="Invalid", value=str(raw)[:100], message=msg))
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        errors.append(
            FieldIssue(path=_anno(key), code="Invalid", value=str(raw), message=f"invalid JSON: {exc}")
        )
        return None
    except RecursionError:
        errors.append(
            FieldIssue(
                path=_anno(key),
                code="Invalid",
                value=str(raw)[:40],
                message="invalid JSON: nested too deeply",
            )
        )
        return None


def _unexpected_json(key: str, raw: object, expected: str) -> FieldIssue:
    """An annotation (``raw``, as written) that is JSON but not the ``expected`` value."""
    return FieldIssue(
        path=_anno(key), code="Invalid", value=str(raw), message=f"invalid JSON: expected {expected}"
    )


def _flags(labels: dict[str, str], errors: list[FieldIssue]) -> dict[str, bool]:
    """The boolean labels, each with its default when absent or empty."""
    flags: dict[str, bool] = {}
    for key, default in _BOOL_LABELS.items():
        raw = labels.get(key)
        if raw is None or raw == "":
            flags[key] = default
        elif raw in ("true", "false"):
            flags[key] = raw == "true"
        else:
            errors.append(
                FieldIssue(path=_label(key), code="Invalid", value=raw, message='must be "true" or "false"')
            )
            flags[key] = default
    return flags


def _shared_weight(annotations: dict[str, Any], name: str, errors: list[FieldIssue]) -> ResourceList | None:
    """The ``shared-weight`` annotation: a ResourceList of non-negative quantities."""
    weight: ResourceList | None = None
    raw_weight = _json_annotation(annotations, ANNO_SHARED_WEIGHT, errors)
    if raw_weight is not None:
        if not isinstance(raw_weight, dict):
            errors.append(
                _unexpected_json(
                    ANNO_SHARED_WEIGHT,
                    annotations[ANNO_SHARED_WEIGHT],
                    "an object of resource name to quantity",
                )
            )
        else:
            weight = _resource_list(raw_weight, _anno(ANNO_SHARED_WEIGHT), errors)
            neg = negatives(weight)
            if neg:
                msg = f"{name} quota.Annotation[{ANNO_SHARED_WEIGHT}]'s value < 0, in dimension :{_dims(neg)}"
                errors.append(FieldIssue(path=_anno(ANNO_SHARED_WEIGHT), code="Invalid", message=msg))
    return weight


def _name_lists(
    annotations: dict[str, Any], name: str, errors: list[FieldIssue]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ``namespaces`` and ``max-strict-keys`` annotations (sorted, without duplicates)."""
    namespaces: tuple[str, ...] = ()
    raw_ns = _json_annotation(annotations, ANNO_NAMESPACES, errors)
    if raw_ns is not None:
        if not isinstance(raw_ns, list) or not all(isinstance(n, str) and n for n in raw_ns):
            errors.append(
                _unexpected_json(ANNO_NAMESPACES, annotations[ANNO_NAMESPACES], "a list of namespace names")
            )
        else:
            namespaces = tuple(sorted(set(raw_ns)))
    strict: tuple[str, ...] = ()
    raw_strict = _json_annotation(annotations, ANNO_MAX_STRICT_KEYS, errors)
    if raw_strict is not None:
        if not isinstance(raw_strict, list) or not all(isinstance(k, str) for k in raw_strict):
            msg = f"{name} quota.Annotation[{ANNO_MAX_STRICT_KEYS}]'s value is invalid: expected a list of resource names"
            errors.append(FieldIssue(path=_anno(ANNO_MAX_STRICT_KEYS), code="Invalid", message=msg))
        else:
            strict = tuple(sorted(set(raw_strict)))
    return namespaces, strict


def parse_quota(manifest: dict[str, Any]) -> tuple[QuotaSpec | None, list[FieldIssue]]:
    """Read and self-check one ElasticQuota manifest."""
    errors: list[FieldIssue] = []
    if manifest.get("apiVersion") != QUOTA_API or manifest.get("kind") != "ElasticQuota":
        got = f"{manifest.get('apiVersion')}/{manifest.get('kind')}"
        msg = f"expected apiVersion {QUOTA_API} and kind ElasticQuota"
        return None, [FieldIssue(path="kind", code="NotSupported", value=got, message=msg)]
    meta = read_meta(
        manifest, errors, namespaced=True
    )  # label values must be strings, as the API server says
    spec = manifest.get("spec") or {}
    name, namespace = meta.name, meta.namespace
    labels: dict[str, str] = dict(meta.labels)
    annotations = dict(meta.annotations)
    flags = _flags(labels, errors)
    mins = _resource_list(spec.get("min"), "spec.min", errors)
    maxs = _resource_list(spec.get("max"), "spec.max", errors)
    for field_name, values, what in (("spec.max", maxs, "Max"), ("spec.min", mins, "Min")):
        neg = negatives(values)
        if neg:
            msg = f"{name} quota.Spec.{what}'s value < 0, in dimensions :{_dims(neg)}"
            errors.append(FieldIssue(path=field_name, code="Invalid", message=msg))
    weight = _shared_weight(annotations, name, errors)
    namespaces, strict = _name_lists(annotations, name, errors)
    total: ResourceList | None = None
    raw_total = _json_annotation(annotations, ANNO_TOTAL_RESOURCE, errors)
    if raw_total is not None:
        total = _resource_list(raw_total, _anno(ANNO_TOTAL_RESOURCE), errors)
    for key in sorted(mins):
        if key not in maxs:
            msg = f"resourceKey {key} of quota {name} is included in min, which is not included in max"
            errors.append(FieldIssue(path=f"spec.min[{key}]", code="Invalid", message=msg))
        elif maxs[key] < mins[key]:
            lo, hi = format_quantity(key, mins[key]), format_quantity(key, maxs[key])
            msg = f"resourceKey {key} of quota {name} min {lo} > max {hi}"
            errors.append(FieldIssue(path=f"spec.min[{key}]", code="Invalid", value=lo, message=msg))
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


PROFILE_API: Final = "quota.koordinator.sh/v1alpha1"


class ProfileSpec(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    quota_name: str
    quota_labels: dict[str, str]
    ratio_num: int
    ratio_den: int
    node_selector: dict[str, Any]
    tree_id: str
    resource_keys: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ratio(self) -> Fraction:
        """``spec.resourceRatio`` exactly."""
        return Fraction(self.ratio_num, self.ratio_den)

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


def tree_id_for(namespace: str, name: str) -> str:
    """FNV-1a 64-bit hash of ``"<namespace>/<name>"``, in decimal."""
    return str(fnv1a64(f"{namespace}/{name}".encode()))


def _profile_labels(raw: Any, errors: list[FieldIssue]) -> dict[str, str]:
    """``spec.quotaLabels``: labels the profile's root quota gets, so label keys and values as the API server has
    them (a number or a list turned into text made a label no quota could carry)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(FieldIssue(path="spec.quotaLabels", code="Invalid", message="must be a map of strings"))
        return {}
    for key, value in raw.items():
        path = f"spec.quotaLabels[{key}]"
        if not isinstance(key, str) or not is_qualified_name(key):
            errors.append(
                FieldIssue(path=path, code="Invalid", message="must be a label key", value=str(key))
            )
        elif not isinstance(value, str) or not is_label_value(value):
            msg = "must be a label value: a string of at most 63 alphanumerics, '-', '_' or '.'"
            errors.append(FieldIssue(path=path, code="Invalid", message=msg, value=str(value)[:100]))
    return dict(raw)


def parse_profile(manifest: dict[str, Any]) -> tuple[ProfileSpec | None, list[FieldIssue]]:
    errors: list[FieldIssue] = []
    if manifest.get("apiVersion") != PROFILE_API or manifest.get("kind") != "ElasticQuotaProfile":
        errors.append(
            FieldIssue(
                path="kind",
                code="NotSupported",
                value=f"{manifest.get('apiVersion')}/{manifest.get('kind')}",
                message=f"expected apiVersion {PROFILE_API} and kind ElasticQuotaProfile",
            )
        )
        return None, errors
    meta = read_meta(manifest, errors, namespaced=True)
    spec = manifest.get("spec") or {}
    name, namespace = meta.name, meta.namespace
    raw_quota_name = spec.get("quotaName")
    quota_name = raw_quota_name if isinstance(raw_quota_name, str) else ""
    if raw_quota_name in (None, ""):
        errors.append(
            FieldIssue(path="spec.quotaName", code="Required", message="quotaName is required (a string)")
        )
    elif not is_dns_subdomain(quota_name):  # the name of the ElasticQuota the profile makes
        msg = "must be a quota's name: a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'; at most 253 characters)"
        errors.append(
            FieldIssue(path="spec.quotaName", code="Invalid", message=msg, value=str(raw_quota_name))
        )
    raw_ratio = spec.get("resourceRatio")
    ratio = Fraction(1)
    if raw_ratio not in (None, ""):
        try:
            ratio = parse_quantity(str(raw_ratio))
        except QuantityError:
            ratio = Fraction(-1)
        if not (0 < ratio <= 1):
            errors.append(
                FieldIssue(
                    path="spec.resourceRatio",
                    code="Invalid",
                    value=str(raw_ratio),
                    message="resourceRatio must be a decimal number in (0, 1]",
                )
            )
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        errors.append(
            FieldIssue(path="spec.nodeSelector", code="Invalid", message="must be a label selector")
        )
        selector = {}
    unknown_field_issues(
        selector, frozenset({"matchLabels", "matchExpressions"}), "spec.nodeSelector", errors
    )
    parse_label_selector(selector, "spec.nodeSelector", errors)
    keys: tuple[str, ...] = ("cpu", "memory")
    annotations, meta_labels = dict(meta.annotations), dict(meta.labels)
    raw_keys = _json_annotation(annotations, ANNO_RESOURCE_KEYS, errors)
    if raw_keys is not None:
        if not isinstance(raw_keys, list) or not all(isinstance(k, str) and k for k in raw_keys):
            errors.append(
                _unexpected_json(
                    ANNO_RESOURCE_KEYS, annotations[ANNO_RESOURCE_KEYS], "a list of resource names"
                )
            )
        else:
            keys = tuple(sorted(set(raw_keys)))
    labels = _profile_labels(spec.get("quotaLabels"), errors)
    if errors:
        return None, errors
    tree_id = str(meta_labels.get(LABEL_TREE_ID) or tree_id_for(namespace, name))
    return (
        ProfileSpec(
            namespace=namespace,
            name=name,
            quota_name=quota_name,
            quota_labels=labels,
            ratio_num=ratio.numerator,
            ratio_den=ratio.denominator,
            node_selector=selector,
            tree_id=tree_id,
            resource_keys=keys,
        ),
        errors,
    )
