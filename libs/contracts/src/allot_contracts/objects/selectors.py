"""Label selectors, node selector terms and taint tolerations: parsing with field paths, and matching.

Responsibility: turn the selector-shaped parts of manifests (device-hint ``selector``/``vfSelector``, pod
``nodeSelector``, required node affinity, tolerations, node taints) into small immutable tuples that hash (so a pod's
filter inputs can key caches) and match them against label maps.

Semantics follow Kubernetes:
- Label selector requirements are ANDed; ``In``/``NotIn``/``Exists``/``DoesNotExist``. An empty selector matches
  everything.
- Node selector terms are ORed; within a term, expressions and fields are ANDed; ``Gt``/``Lt`` compare integers; a
  term with no requirements matches nothing, and an empty term list matches nothing.
- Taints with effect ``NoSchedule`` or ``NoExecute`` must be tolerated; ``PreferNoSchedule`` never filters.
Pure functions; no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.issues import FieldIssue, checked_list, checked_objects

_INT64 = 2**63


def int64_text(text: str) -> int | None:
    """The integer ``text`` writes in ASCII digits (a leading ``-`` allowed) when it fits in 64 bits, as Kubernetes
    reads one; None otherwise (``"²"`` is a digit to ``isdigit()`` but not to ``int()``, and ``int()`` refuses more
    than 4,300 digits)."""
    digits = text[1:] if text[:1] == "-" else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


__all__ = [
    "LabelSelector",
    "NodeSelectorTerm",
    "Taint",
    "Toleration",
    "first_untolerated_taint",
    "int64_text",
    "match_label_selector",
    "match_node_selector_terms",
    "parse_label_selector",
    "parse_node_selector_terms",
    "parse_taints",
    "parse_tolerations",
]

# (key, operator, values) — values sorted for hashing and deterministic messages.
Requirement = tuple[str, str, tuple[str, ...]]
LabelSelector = tuple[Requirement, ...]
# (expressions, fields)
NodeSelectorTerm = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]
Taint = tuple[str, str, str]  # key, value, effect
Toleration = tuple[str, str, str, str]  # key, operator, value, effect

_LABEL_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NODE_OPS = _LABEL_OPS | {"Gt", "Lt"}
_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def _requirement(raw: Any, path: str, ops: frozenset[str], errors: list[FieldIssue]) -> Requirement | None:
    if not isinstance(raw, dict):
        errors.append(FieldIssue(path=path, message="must be an object with key, operator and values"))
        return None
    key, op, values = raw.get("key"), raw.get("operator"), raw.get("values") or []
    if not isinstance(key, str) or not key:
        errors.append(FieldIssue(path=f"{path}.key", message="must be a non-empty string"))
        return None
    if not isinstance(op, str) or op not in ops:
        errors.append(
            FieldIssue(path=f"{path}.operator", message=f"unsupported operator {op!r}; one of {sorted(ops)}")
        )
        return None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        errors.append(FieldIssue(path=f"{path}.values", message="must be a list of strings"))
        return None
    if op in ("In", "NotIn") and not values:
        errors.append(FieldIssue(path=f"{path}.values", message=f"must be non-empty for operator {op}"))
        return None
    if op in ("Exists", "DoesNotExist") and values:
        errors.append(FieldIssue(path=f"{path}.values", message=f"must be empty for operator {op}"))
        return None
    if op in ("Gt", "Lt") and (len(values) != 1 or int64_text(values[0]) is None):
        errors.append(
            FieldIssue(path=f"{path}.values", message=f"operator {op} needs exactly one 64-bit integer value")
        )
        return None
    return (key, str(op), tuple(sorted(values)))


def parse_label_selector(raw: Any, path: str, errors: list[FieldIssue]) -> LabelSelector:
    """Parse a ``metav1.LabelSelector``; ``None`` is the empty selector (matches everything)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        errors.append(FieldIssue(path=path, message="must be a label selector object"))
        return ()
    reqs: list[Requirement] = []
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict):
        errors.append(FieldIssue(path=f"{path}.matchLabels", message="must be a map of strings"))
    else:
        for k in sorted(labels):
            v = labels[k]
            if not isinstance(v, str):
                errors.append(FieldIssue(path=f"{path}.matchLabels.{k}", message="must be a string"))
                continue
            reqs.append((str(k), "In", (v,)))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        errors.append(FieldIssue(path=f"{path}.matchExpressions", message="must be a list"))
        exprs = []
    for i, e in enumerate(exprs):
        r = _requirement(e, f"{path}.matchExpressions[{i}]", _LABEL_OPS, errors)
        if r is not None:
            reqs.append(r)
    return tuple(reqs)


def _match(req: Requirement, labels: Mapping[str, str]) -> bool:
    key, op, values = req
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    actual, bound = int64_text(labels[key]), int64_text(values[0])
    if actual is None or bound is None:  # a label that is no 64-bit integer does not match (ParseInt fails)
        return False
    return actual > bound if op == "Gt" else actual < bound


def match_label_selector(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when every requirement holds (the empty selector matches everything)."""
    return all(_match(r, labels) for r in selector)


def parse_node_selector_terms(raw: Any, path: str, errors: list[FieldIssue]) -> tuple[NodeSelectorTerm, ...]:
    """Parse ``nodeSelectorTerms`` of a required node affinity."""
    if not isinstance(raw, list):
        errors.append(FieldIssue(path=path, message="must be a list of node selector terms"))
        return ()
    terms: list[NodeSelectorTerm] = []
    for i, term in enumerate(raw):
        tpath = f"{path}[{i}]"
        if not isinstance(term, dict):
            errors.append(FieldIssue(path=tpath, message="must be an object"))
            continue
        exprs: list[Requirement] = []
        for j, e in enumerate(
            checked_list(term.get("matchExpressions"), f"{tpath}.matchExpressions", errors)
        ):
            r = _requirement(e, f"{tpath}.matchExpressions[{j}]", frozenset(_NODE_OPS), errors)
            if r is not None:
                exprs.append(r)
        fields: list[Requirement] = []
        for j, e in enumerate(checked_list(term.get("matchFields"), f"{tpath}.matchFields", errors)):
            r = _requirement(e, f"{tpath}.matchFields[{j}]", frozenset({"In", "NotIn"}), errors)
            if r is not None:
                if r[0] != "metadata.name":
                    errors.append(
                        FieldIssue(
                            path=f"{tpath}.matchFields[{j}].key", message="only metadata.name is supported"
                        )
                    )
                    continue
                fields.append(r)
        terms.append((tuple(exprs), tuple(fields)))
    return tuple(terms)


def match_node_selector_terms(
    terms: tuple[NodeSelectorTerm, ...], labels: Mapping[str, str], name: str
) -> bool:
    """ORed terms; a term without requirements matches nothing."""
    for exprs, fields in terms:
        if not exprs and not fields:
            continue
        if all(_match(r, labels) for r in exprs) and all(_match(r, {"metadata.name": name}) for r in fields):
            return True
    return False


def parse_taints(raw: Any) -> tuple[Taint, ...]:
    """Node ``spec.taints``; malformed entries are skipped (nodes are reported by agents, not users)."""
    out: list[Taint] = []
    for t in raw or []:
        if isinstance(t, dict) and isinstance(t.get("key"), str) and t.get("effect") in _EFFECTS:
            out.append((t["key"], str(t.get("value") or ""), t["effect"]))
    return tuple(sorted(out))


def parse_tolerations(raw: Any, path: str, errors: list[FieldIssue]) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for where, t in checked_objects(raw, path, errors):
        raw_fields = {f: "" if t.get(f) is None else t.get(f) for f in ("key", "operator", "value", "effect")}
        texts = {f: v for f, v in raw_fields.items() if isinstance(v, str)}
        for f in sorted(raw_fields.keys() - texts.keys()):
            errors.append(
                FieldIssue(path=f"{where}.{f}", message="must be a string", value=str(raw_fields[f])[:100])
            )
        if len(texts) < len(raw_fields):
            continue
        op = texts["operator"] or "Equal"
        if op not in ("Equal", "Exists"):
            errors.append(FieldIssue(path=f"{where}.operator", message=f"unsupported operator {op!r}"))
            continue
        effect = texts["effect"]
        if effect and effect not in _EFFECTS:
            errors.append(FieldIssue(path=f"{where}.effect", message=f"unsupported effect {effect!r}"))
            continue
        out.append((texts["key"], op, texts["value"], effect))
    return tuple(sorted(out))


def _tolerates(tol: Toleration, taint: Taint) -> bool:
    key, op, value, effect = tol
    if effect and effect != taint[2]:
        return False
    if key and key != taint[0]:
        return False
    if op == "Exists":
        return True
    return bool(key) and value == taint[1]


def first_untolerated_taint(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first (sorted) NoSchedule/NoExecute taint no toleration covers, or ``None``."""
    for taint in taints:
        if taint[2] == "PreferNoSchedule":
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None
