"""What ``allot get -o json|yaml`` prints: each row as the Kubernetes object it stands for, a list as a ``List``.

Responsibility
--------------
- :func:`to_object`: one row of a kind (:mod:`allot_views.kinds`) as an object with ``apiVersion``, ``kind``,
  ``metadata`` (name, namespace, labels) and, as the kind's own API has them, ``spec`` and ``status``: a pod is a
  ``v1 Pod`` (``spec.nodeName``, ``status.phase``), a quota a ``scheduling.sigs.k8s.io/v1alpha1 ElasticQuota``
  (``spec.min/max``, ``status.used``), an event a ``v1 Event`` (``involvedObject``, ``reason``, ``message``), and so
  on (:data:`API`). What Allot adds to an object (the GPU minors a pod holds, its cpuset, its enforcement) is in its
  ``status`` under the names the tables use; Allot's own views (``allot status -o json``) are kinds of
  ``allot.dev/v1alpha1`` (:data:`ALLOT_API`).
- :func:`as_list`: objects as a ``v1 List`` with ``items`` (``items: []`` when there is none).
- :func:`tree_object`: the rows of ``allot quota tree`` as an ``allot.dev/v1alpha1`` ``QuotaTree``.

Invariants: values are the recorded ones (exact quantities, no human units); a field with no value is left out, as
the API server omits empty fields: never ``"-"``, ``""`` or ``null``. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ALLOT_API", "API", "as_list", "clean", "to_object", "tree_object"]

Obj = dict[str, Any]

ALLOT_API = "allot.dev/v1alpha1"
_SIGS = "scheduling.sigs.k8s.io/v1alpha1"
_KOORD = "scheduling.koordinator.sh/v1alpha1"

# kind (its plural in ``allot get``) -> (apiVersion, kind)
API: dict[str, tuple[str, str]] = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "gangs": (_SIGS, "PodGroup"),
    "quotas": (_SIGS, "ElasticQuota"),
    "reservations": (_KOORD, "Reservation"),
    "migrations": (_KOORD, "PodMigrationJob"),
    "devices": (_KOORD, "Device"),
    "nodemetrics": ("slo.koordinator.sh/v1alpha1", "NodeMetric"),
    "events": ("v1", "Event"),
}

_EMPTY: tuple[Any, ...] = (None, "", "-")


def clean(value: Any) -> Any:
    """``value`` without the fields that hold nothing (``None``, ``""``, ``"-"``, empty mappings and lists)."""
    if isinstance(value, dict):
        out = {k: c for k, v in value.items() if (c := clean(v)) not in _EMPTY and c != {} and c != []}
        return out
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def _metadata(row: Obj, namespaced: bool) -> Obj:
    meta: Obj = {"name": row["name"]}
    if namespaced:
        meta["namespace"] = row.get("namespace") or "default"
    meta["labels"] = row.get("labels") or {}
    meta["deletionTimestamp"] = row.get("deletionTimestamp")  # a watch saw it go
    return meta


def to_object(plural: str, row: Obj, *, namespaced: bool) -> Obj:
    """One row of ``allot get PLURAL`` as its Kubernetes object (see the module docstring)."""
    api_version, kind = API.get(plural, (ALLOT_API, plural[:1].upper() + plural[1:]))
    obj: Obj = {"apiVersion": api_version, "kind": kind, "metadata": _metadata(row, namespaced)}
    obj.update(_SHAPES.get(plural, _generic)(row))
    return dict(clean(obj))


def as_list(items: list[Obj]) -> Obj:
    """A ``v1 List`` of the objects, as ``kubectl get -o json`` prints a list (``items: []`` when empty)."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


# --- one shape per kind ---------------------------------------------------------------------------------------------

_SHOWN = {"name", "namespace", "labels"}


def _generic(row: Obj) -> Obj:
    return {"status": {k: v for k, v in row.items() if k not in _SHOWN}}


def _pod(row: Obj) -> Obj:
    enforcement = {"plan": row.get("enforced"), "status": row.get("enforcement")}
    return {
        "spec": {"nodeName": row.get("node")},
        "status": {
            "phase": row.get("phase"),
            "message": row.get("message"),
            "qosClass": row.get("qos"),
            "quota": row.get("quota"),
            "devices": row.get("minors"),
            "cpuset": row.get("cpuset"),
            "enforcement": enforcement if row.get("enforced") else None,
        },
    }


def _node(row: Obj) -> Obj:
    raw = row.get("raw") or {}
    return {
        "spec": {},
        "status": {
            "capacity": raw.get("capacity"),
            "allocatable": raw.get("allocatable"),
            "devices": raw.get("devices"),
            "pods": row.get("pods"),
            "usage": raw.get("usage"),
            "usageTime": raw.get("usageTime"),
            "heartbeatTime": raw.get("heartbeatTime"),
            "heartbeatLost": raw.get("heartbeatLost"),
            "degraded": raw.get("degraded"),
        },
    }


_GANG_SPEC = ("minMember", "totalNumber", "mode", "matchPolicy", "waitingTimeUs", "minResources")


def _gang(row: Obj) -> Obj:
    status = dict(row.get("status") or {})
    spec = {k: status.pop(k, None) for k in _GANG_SPEC}
    status.pop("gang", None)
    return {"spec": spec, "status": status | {"message": row.get("explain")}}


def _quota(row: Obj) -> Obj:
    q = row.get("quantities") or {}
    return {
        "spec": {"min": q.get("min"), "max": q.get("max")},
        "status": {
            "parent": row.get("parent"),
            "isParent": row.get("isParent"),
            "allowLentResource": row.get("allowLent"),
            "pods": row.get("pods"),
            "runtime": q.get("runtime"),
            "used": q.get("used"),
            "request": q.get("request"),
        },
    }


def _reservation(row: Obj) -> Obj:
    return {
        "spec": {"allocatePolicy": row.get("policy"), "expires": row.get("expires")},
        "status": dict(row.get("status") or {}) | {"message": row.get("message")},
    }


def _migration(row: Obj) -> Obj:
    namespace, _, name = str(row.get("pod") or "").rpartition("/")
    return {
        "spec": {
            "mode": row.get("mode"),
            "podRef": {"namespace": namespace, "name": name},
            "reservationOptions": {"reservationRef": {"name": row.get("reservation")}},
        },
        "status": dict(row.get("detail") or {})
        | {"reason": row.get("reason"), "sourceNode": row.get("from")},
    }


def _device(row: Obj) -> Obj:
    devices = []
    for kind, entries in sorted((row.get("inventory") or {}).items()):
        for d in entries:
            topology = {"busID": d.get("bus_id"), "nodeID": d.get("numa"), "pcieID": d.get("pcie")}
            devices.append(
                {
                    "type": kind,
                    "minor": d.get("minor"),
                    "uuid": d.get("id"),
                    "health": bool(d.get("healthy")),
                    "resources": d.get("resources"),
                    "topology": topology | {"socketID": d.get("socket")},
                    "labels": d.get("labels"),
                }
            )
    return {"spec": {"devices": devices}, "status": {"allocated": row.get("allocated")}}


def _nodemetric(row: Obj) -> Obj:
    return {
        "spec": {},
        "status": {
            "updateTime": row.get("updateTime"),
            "nodeMetric": {"nodeUsage": {"resources": row.get("usage")}},
        },
    }


def _event(row: Obj) -> Obj:
    # a v1 Event has no spec or status: its fields are at the top, as the API server returns them
    return {
        "involvedObject": row.get("regarding"),
        "type": row.get("type"),
        "reason": row.get("reason"),
        "message": row.get("message"),
        "action": row.get("action"),
        "lastTimestamp": row.get("time"),
        "source": {"component": "allot-scheduler"},
        "reportingComponent": "allot-scheduler",
    }


_SHAPES: dict[str, Callable[[Obj], Obj]] = {
    "pods": _pod,
    "nodes": _node,
    "gangs": _gang,
    "quotas": _quota,
    "reservations": _reservation,
    "migrations": _migration,
    "devices": _device,
    "nodemetrics": _nodemetric,
    "events": _event,
}


def tree_object(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``-o json|yaml``: the tree as an ``allot.dev/v1alpha1`` ``QuotaTree`` (docs/cli.md): ``status.quotas`` in tree
    order, each with its exact quantities (every quota, the empty built-in ones included)."""
    quotas = [clean(row) for row in rows]
    return {
        "apiVersion": ALLOT_API,
        "kind": "QuotaTree",
        "metadata": {"name": "elastic-quotas"},
        "status": {"quotas": quotas},
    }
