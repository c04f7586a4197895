"""Editing pod manifests (decoded JSON) for the objects migration creates: reading a part as an object or a list
(``{}`` / ``[]`` when it is missing or of another type) and restricting a pod spec's required node affinity.
Pure.
"""

from __future__ import annotations

from allot_contracts.jsonvalue import JsonObject, JsonValue

__all__ = ["child", "items", "obj", "with_node_field"]

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def obj(value: JsonValue) -> JsonObject:
    """A shallow copy of ``value`` when it is an object, else an empty object."""
    return dict(value) if isinstance(value, dict) else {}


def items(value: JsonValue) -> list[JsonValue]:
    """``value`` when it is a list, else an empty list."""
    return value if isinstance(value, list) else []


def child(parent: JsonObject, key: str) -> JsonObject:
    """``parent[key]`` as an object, edited in place: set to an empty object when missing or not an object."""
    value = parent.get(key)
    if isinstance(value, dict):
        return value
    out: JsonObject = {}
    parent[key] = out
    return out


def with_node_field(spec: JsonObject, requirement: JsonObject) -> JsonObject:
    """A copy of the pod ``spec`` whose every required node selector term also needs ``requirement`` (a
    ``matchFields`` entry), or with one term of it when there is none. Terms that are not objects are dropped."""
    out = dict(spec)
    affinity = obj(out.get("affinity"))
    node_affinity = obj(affinity.get("nodeAffinity"))
    required = obj(node_affinity.get(_REQUIRED))
    terms: list[JsonValue] = [
        {**term, "matchFields": [*items(term.get("matchFields")), requirement]}
        for term in items(required.get("nodeSelectorTerms"))
        if isinstance(term, dict)
    ]
    required["nodeSelectorTerms"] = terms or [{"matchFields": [requirement]}]
    node_affinity[_REQUIRED] = required
    affinity["nodeAffinity"] = node_affinity
    out["affinity"] = affinity
    return out
