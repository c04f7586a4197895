"""Field ownership of the fake API server (:mod:`allot_testing.fake_kube`): ``metadata.managedFields`` kept the way
the API server keeps it for ``Update`` operations (create, replace and the non-apply patches).

Rules (Kubernetes documentation, "Server-Side Apply", "Field management" and "Using Update operations"):

- a write names its manager with the ``fieldManager`` query parameter, else the first part of its ``User-Agent``
  (``allot-binder/r1`` → ``allot-binder``);
- every field the write changed (set, or given another value) becomes that manager's, in one entry per (manager,
  operation, subresource) with the fields in the ``FieldsV1`` form (``{"f:status": {"f:allocatable": {"f:cpu":
  {}}}}``), and leaves every other entry; a field removed leaves every entry; an entry left without fields is removed.

Simplified: lists are owned whole (no ``k:``/``v:`` keys), the operation is always ``Update`` (apply patches are
applied as merges, without ownership of their own).
"""

from __future__ import annotations

import time as _time
from typing import Any

from allot_runtime.kube.mirror import field_paths

Obj = dict[str, Any]
Path = tuple[str, ...]

# bookkeeping the API server sets itself: never owned by a writer
_SERVER_SET = {
    ("metadata", k) for k in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation")
}


def manager_of(query: dict[str, str], user_agent: str) -> str:
    """The manager of a write: ``fieldManager``, else the User-Agent's first part."""
    return query.get("fieldManager") or user_agent.split("/")[0].strip() or "unknown"


def leaves(value: Any, prefix: Path = ()) -> dict[Path, Any]:
    """The leaf fields of an object as paths (a dict's keys recursively; lists and scalars are leaves)."""
    if isinstance(value, dict) and (value or not prefix):
        out: dict[Path, Any] = {}
        for key, item in value.items():
            out.update(leaves(item, (*prefix, str(key))))
        return out
    return {prefix: value}


def _fields(paths: set[Path]) -> Obj:
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def track(before: Obj | None, after: Obj, *, manager: str, subresource: str = "", time: str = "") -> None:
    """Set ``after``'s ``metadata.managedFields`` for a write by ``manager`` that turned ``before`` (None: a create)
    into ``after``."""
    old = leaves({k: v for k, v in (before or {}).items() if k not in ("apiVersion", "kind")})
    new = leaves({k: v for k, v in after.items() if k not in ("apiVersion", "kind")})
    changed = {p for p, v in new.items() if (p not in old or old[p] != v) and p[:2] not in _SERVER_SET}
    gone = {p for p in old if p not in new}
    time = time or _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime())
    entries = []
    mine: set[Path] = set()
    for entry in ((before or {}).get("metadata") or {}).get("managedFields") or []:
        owned = field_paths(entry.get("fieldsV1"))
        kept = {
            p
            for p in owned
            if p not in gone and not any(p[: len(c)] == c or c[: len(p)] == p for c in changed)
        }
        same = (entry.get("manager"), entry.get("operation"), entry.get("subresource", "")) == (
            manager,
            "Update",
            subresource,
        )
        if same:
            mine = kept
        elif kept:
            entries.append({**entry, "fieldsV1": _fields(kept)})
    mine |= changed
    if mine:
        entry = {
            "manager": manager,
            "operation": "Update",
            "apiVersion": after.get("apiVersion", ""),
            "time": time,
        }
        if subresource:
            entry["subresource"] = subresource
        entries.append({**entry, "fieldsType": "FieldsV1", "fieldsV1": _fields(mine)})
    after.setdefault("metadata", {})["managedFields"] = entries
