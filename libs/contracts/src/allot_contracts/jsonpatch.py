"""The difference between two JSON documents as an RFC 6902 JSON patch, and its paths in field-path notation.

Responsibility: what a mutating admission webhook answers (the operations that turn the object it was sent into the
object it wants), and the field paths a change touched, for messages (``metadata.labels["koordinator.sh/qosClass"]``,
``spec.containers[0].resources.requests[cpu]``).

Maps are compared key by key (``add`` / ``remove`` / recursion); lists of the same length element by element, lists
of different lengths are replaced whole; any other difference (a value, or a type: ``1`` and ``"1"``, ``1`` and
``true``) is a ``replace``. Keys are escaped as RFC 6901 says (``~`` → ``~0``, ``/`` → ``~1``).
Pure; no IO.
"""

from __future__ import annotations

import re
from typing import Final, Literal, NotRequired, TypedDict

from allot_contracts.jsonvalue import JsonValue

__all__ = ["PatchOp", "diff", "field_path"]

_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY_MAPS: Final = frozenset({"requests", "limits", "overhead", "capacity", "allocatable"})


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class PatchOp(TypedDict):
    """One RFC 6902 operation: ``value`` with ``add`` and ``replace``, none with ``remove``."""

    op: Literal["add", "remove", "replace"]
    path: str
    value: NotRequired[JsonValue]


def _same(a: JsonValue, b: JsonValue) -> bool:
    return type(a) is type(b) and a == b


def diff(before: JsonValue, after: JsonValue, pointer: str = "") -> list[PatchOp]:
    """The operations that turn ``before`` into ``after`` (empty when they are equal)."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[PatchOp] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{pointer}/{_escape(str(key))}"})
        for key, value in after.items():
            where = f"{pointer}/{_escape(str(key))}"
            if key not in before:
                ops.append({"op": "add", "path": where, "value": value})
            else:
                ops += diff(before[key], value, where)
        return ops
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            op
            for i, (a, b) in enumerate(zip(before, after, strict=True))
            for op in diff(a, b, f"{pointer}/{i}")
        ]
    if _same(before, after):
        return []
    return [{"op": "replace", "path": pointer, "value": after}]


def field_path(pointer: str) -> str:
    """A JSON pointer in Allot's field-path notation: ``/metadata/labels/a~1b`` → ``metadata.labels["a/b"]``,
    ``/spec/containers/0/resources/requests/cpu`` → ``spec.containers[0].resources.requests[cpu]``."""
    out = ""
    parent = ""
    for raw in pointer.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if key.isdigit() or parent in _QUANTITY_MAPS:
            out += f"[{key}]"
        elif _IDENTIFIER.match(key) and parent not in ("labels", "annotations"):
            out += f".{key}" if out else key
        else:
            out += f'["{key}"]'
        parent = key
    return out
