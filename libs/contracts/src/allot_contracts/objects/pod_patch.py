"""A strategic merge patch on a Pod, as the API machinery applies one (``strategicpatch.StrategicMergePatch`` with the
``corev1.Pod`` schema): what a ClusterColocationProfile's ``patch`` does to the pods it selects.

Responsibility: merge ``patch`` into a pod manifest and say, with the field path, why a patch cannot be applied.

- Maps merge key by key; ``null`` removes the key; ``$patch: replace`` replaces the map with the rest of the patch's
  map, ``$patch: delete`` removes it.
- Lists that Kubernetes merges (``patchStrategy: merge``) merge by their key: ``containers``, ``initContainers``,
  ``ephemeralContainers``, ``volumes``, ``imagePullSecrets``, ``resourceClaims``, ``schedulingGates`` by ``name``,
  ``hostAliases`` by ``ip``, ``topologySpreadConstraints`` by ``topologyKey``, ``metadata.ownerReferences`` by
  ``uid``, and in a container ``env`` by ``name``, ``ports`` by ``containerPort``, ``volumeMounts`` by ``mountPath``,
  ``volumeDevices`` by ``devicePath``. An element with the key of an existing one merges into it, one with a new key
  is appended, ``$patch: delete`` removes the element with its key, an element ``{$patch: replace}`` makes the list
  the patch's other elements. ``metadata.finalizers`` is a set (union). Every other list is replaced.
- Not supported (refused with the path where :func:`patch_issues` finds them): ``$retainKeys``,
  ``$setElementOrder/…``, ``$deleteFromPrimitiveList/…`` and other ``$`` directives.
Pure; the pod and the patch are not modified.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from allot_contracts.issues import FieldIssue, not_supported

__all__ = ["PatchError", "merge_pod_patch", "patch_issues"]

# field -> (list merge key, or "" for a set of primitives; the schema of the list's elements)
Schema = Mapping[str, tuple[str, "Schema | None"]]
_CONTAINER: Final[Schema] = {
    "env": ("name", None),
    "ports": ("containerPort", None),
    "volumeMounts": ("mountPath", None),
    "volumeDevices": ("devicePath", None),
}
_POD_SPEC: Final[Schema] = {
    "containers": ("name", _CONTAINER),
    "initContainers": ("name", _CONTAINER),
    "ephemeralContainers": ("name", _CONTAINER),
    "volumes": ("name", None),
    "imagePullSecrets": ("name", None),
    "resourceClaims": ("name", None),
    "schedulingGates": ("name", None),
    "hostAliases": ("ip", None),
    "topologySpreadConstraints": ("topologyKey", None),
}
_META: Final[Schema] = {"ownerReferences": ("uid", None), "finalizers": ("", None)}
_MAPS: Final = {"metadata": _META, "spec": _POD_SPEC}  # the maps whose fields have a strategy
_DIRECTIVE: Final = "$patch"
_DIRECTIVES: Final = ("replace", "delete", "merge")


class PatchError(ValueError):
    """A patch that cannot be applied: ``path`` is where, in the patch."""

    def __init__(self, path: str, message: str, *, code: str = "InvalidPatch") -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.code = code


def patch_issues(patch: Any, path: str) -> list[FieldIssue]:
    """What makes ``patch`` (a profile's ``spec.patch``) one Allot cannot apply: not an object, or a directive other
    than ``$patch: replace|delete|merge``."""
    if not isinstance(patch, Mapping):
        return [FieldIssue(path=path, message="must be an object (a pod template patch)")]
    issues: list[FieldIssue] = []
    stack: list[tuple[Any, str]] = [(patch, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, Mapping):
            for key, child in value.items():
                if str(key) == _DIRECTIVE and child not in _DIRECTIVES:
                    issues.append(not_supported(f"{where}.{key}", _DIRECTIVES, child))
                elif str(key).startswith("$") and str(key) != _DIRECTIVE:
                    issues.append(
                        FieldIssue(
                            path=f"{where}.{key}",
                            code="NotSupported",
                            message="this strategic merge patch directive is not supported (only $patch)",
                        )
                    )
                else:
                    stack.append((child, f"{where}.{key}"))
        elif isinstance(value, list):
            stack += [(child, f"{where}[{i}]") for i, child in enumerate(value)]
    return sorted(issues, key=lambda i: i.path)


_DELETE: Final = object()


def _clean(value: Any) -> Any:
    """A patch value as it lands in the object: without ``$patch`` keys."""
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items() if k != _DIRECTIVE}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return copy.deepcopy(value)


def _merge_map(original: Any, patch: Mapping[str, Any], schema: Schema | None, path: str) -> Any:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return _DELETE
    if directive == "replace" or not isinstance(original, Mapping):
        return _clean(patch)
    out = dict(original)
    for key, value in patch.items():
        if key == _DIRECTIVE:
            continue
        where = f"{path}.{key}" if path else str(key)
        if value is None:
            out.pop(key, None)
            continue
        strategy = schema.get(key) if schema is not None else None
        child_schema = _MAPS.get(key) if not path else None
        if isinstance(value, Mapping):
            merged = _merge_map(out.get(key), value, child_schema, where)
            if merged is _DELETE:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list) and strategy is not None:
            merge_key, element_schema = strategy
            found = out.get(key)
            existing: list[Any] = found if isinstance(found, list) else []
            if merge_key:
                out[key] = _merge_list(existing, value, merge_key, element_schema, where)
            else:
                out[key] = [*existing, *(_clean(v) for v in value if v not in existing)]
        else:
            out[key] = _clean(value)
    return out


def _merge_list(
    original: list[Any], patch: list[Any], merge_key: str, schema: Schema | None, path: str
) -> list[Any]:
    if any(isinstance(e, Mapping) and e.get(_DIRECTIVE) == "replace" for e in patch):
        return [_clean(e) for e in patch if not (isinstance(e, Mapping) and e.get(_DIRECTIVE) == "replace")]
    out = [copy.deepcopy(e) for e in original]
    for i, element in enumerate(patch):
        where = f"{path}[{i}]"
        if not isinstance(element, Mapping) or merge_key not in element:
            raise PatchError(where, f"does not contain declared merge key: {merge_key}")
        index = next(
            (
                j
                for j, e in enumerate(out)
                if isinstance(e, Mapping) and e.get(merge_key) == element[merge_key]
            ),
            None,
        )
        if element.get(_DIRECTIVE) == "delete":
            if index is not None:
                del out[index]
            continue
        if index is None:
            out.append(_clean(element))
        else:
            out[index] = _merge_map(out[index], element, schema, where)
    return out


def merge_pod_patch(
    pod: Mapping[str, Any], patch: Mapping[str, Any], path: str = "spec.patch"
) -> dict[str, Any]:
    """``pod`` with ``patch`` merged in (a new dict); :class:`PatchError` when a merge-keyed list's element lacks its
    key."""
    try:
        merged = _merge_map(pod, patch, None, "")
    except PatchError as exc:
        raise PatchError(f"{path}.{exc.path}", exc.message) from None
    if merged is _DELETE or not isinstance(merged, dict):
        raise PatchError(path, "a patch may not delete the whole pod")
    return merged
