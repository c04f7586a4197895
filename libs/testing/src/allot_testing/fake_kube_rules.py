"""What the fake API server (:mod:`allot_testing.fake_kube`) enforces the way the real one does, as pure functions:
``Status`` bodies, the patch types and their content types, field limits, and discovery documents.

Each rule is pinned against the Kubernetes documentation by ``tests/kube/contract`` (one test per rule, citing the
page), so the fake cannot drift from the real API server unnoticed.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

Obj = dict[str, Any]

# Content types of PATCH (https://kubernetes.io/docs/reference/using-api/api-concepts/#patch-and-apply).
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)

# Field limits (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/,
# .../labels/#syntax-and-character-set, .../annotations/, and the events.k8s.io/v1 Event reference).
NAME_MAX = 253  # a DNS subdomain
LABEL_VALUE_MAX = 63
LABEL_NAME_MAX = 63  # the name part of a label key; its prefix is a DNS subdomain
ANNOTATIONS_MAX = 256 * 1024  # keys and values together, in bytes
EVENT_NOTE_MAX = 1024  # bytes
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def status(code: int, reason: str, message: str, **details: Any) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 300 else "Success",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


def merge_patch(target: Any, patch: Any, *, strategic: bool = False) -> Any:
    """RFC 7386 JSON merge patch; ``strategic``: a strategic merge patch as far as Allot uses one, a merge patch in
    which ``conditions`` lists are merged by their ``type`` (the patch's entry replaces the target's of the same
    type; others stay)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif strategic and key == "conditions" and isinstance(value, list) and isinstance(out.get(key), list):
            merged = {c.get("type"): c for c in out[key] if isinstance(c, dict)}
            for condition in value:
                merged[condition.get("type")] = {**merged.get(condition.get("type"), {}), **condition}
            out[key] = list(merged.values())
        else:
            out[key] = merge_patch(out.get(key), value, strategic=strategic)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    return merge_patch(target, patch, strategic=True)


class PatchError(ValueError):
    """A JSON patch that cannot be applied (the API server answers 422)."""


def _pointer(path: str) -> list[str]:
    if path and not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]] if path else []


def _step(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"missing value at {path!r}")
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise PatchError(f"missing value at {path!r}")


def json_patch(target: Obj, operations: Any) -> Obj:
    """RFC 6902 JSON patch (add, remove, replace, test; the operations Allot could send)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), str(op.get("path", ""))
        *parents, last = _pointer(path) or [""]
        node: Any = doc
        for token in parents:
            node = _step(node, token, path)
        if kind == "test":
            if _step(node, last, path) != op.get("value"):
                raise PatchError(f"test failed at {path!r}")
        elif kind in ("add", "replace"):
            if kind == "replace":
                _step(node, last, path)
            if isinstance(node, list):
                index = len(node) if last == "-" else int(last)
                node.insert(index, op.get("value")) if kind == "add" else node.__setitem__(index, op["value"])
            elif isinstance(node, dict):
                node[last] = copy.deepcopy(op.get("value"))
            else:
                raise PatchError(f"cannot {kind} at {path!r}")
        elif kind == "remove":
            _step(node, last, path)
            node.pop(int(last) if isinstance(node, list) else last)
        else:
            raise PatchError(f"unsupported operation {kind!r}")
    return doc


def field_errors(kind: str, obj: Obj) -> list[tuple[str, str]]:
    """``(field path, reason)`` of every limit ``obj`` breaks, as the API server's validation reports them."""
    meta = obj.get("metadata") or {}
    errors: list[tuple[str, str]] = []
    name = str(meta.get("name") or "")
    if name and (len(name) > NAME_MAX or not _DNS_SUBDOMAIN.match(name)):
        errors.append(
            (
                "metadata.name",
                f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                f"characters, '-' or '.', and must start and end with an alphanumeric character; must be no more "
                f"than {NAME_MAX} characters",
            )
        )
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = str(key).rpartition("/")
        if not label or len(label) > LABEL_NAME_MAX or len(prefix) > NAME_MAX:
            errors.append(
                (
                    "metadata.labels",
                    f"Invalid value: {key!r}: name part must be no more than {LABEL_NAME_MAX} characters",
                )
            )
        if len(str(value)) > LABEL_VALUE_MAX or not _LABEL_VALUE.match(str(value)):
            errors.append(
                (
                    "metadata.labels",
                    f"Invalid value: {value!r}: must be no more than {LABEL_VALUE_MAX} characters",
                )
            )
    annotations = meta.get("annotations") or {}
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX:
        errors.append(("metadata.annotations", f"Too long: must have at most {ANNOTATIONS_MAX} bytes"))
    if kind == "Event" and len(str(obj.get("note") or "").encode()) > EVENT_NOTE_MAX:
        errors.append(("note", f"Too long: may not be more than {EVENT_NOTE_MAX} bytes"))
    return errors


def invalid(kind: str, name: str, errors: list[tuple[str, str]]) -> Obj:
    """The 422 ``Invalid`` Status of a refused object, with one cause per field."""
    message = "; ".join(f"{path}: {reason}" for path, reason in errors)
    return status(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {message}',
        name=name,
        kind=kind,
        causes=[{"reason": "FieldValueInvalid", "field": path, "message": reason} for path, reason in errors],
    )


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def matches(obj: Obj, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            path, _, want = term.partition("!=")
            if _field(obj, path) == want:
                return False
        else:
            path, _, want = term.partition("==") if "==" in term else term.partition("=")
            if _field(obj, path) != want:
                return False
    return True


def resource_list(group_version: str, resources: list[Any]) -> Obj:
    """The discovery document of one group/version (``GET /api/v1``, ``GET /apis/<group>/<version>``)."""
    out = []
    for r in resources:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        out.append({"name": r.plural, "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs})
        if r.status_subresource:
            out.append(
                {
                    "name": f"{r.plural}/status",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


def group_list(versions: list[str]) -> Obj:
    """``GET /apis``: every group and its versions."""
    groups: dict[str, list[str]] = {}
    for gv in versions:
        group, _, version = gv.partition("/")
        groups.setdefault(group, []).append(version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in sorted(vs)],
                "preferredVersion": {"groupVersion": f"{group}/{sorted(vs)[0]}", "version": sorted(vs)[0]},
            }
            for group, vs in sorted(groups.items())
        ],
    }


# the reason the API server gives with a status code (an injected fault answers as it would)
FAULT_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    422: "Invalid",
    429: "TooManyRequests",
}


def kubeconfig_text(url: str, token: str) -> str:
    """A kubeconfig for a server at ``url`` with a bearer ``token``."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }
    )
