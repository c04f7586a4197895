"""Rows of the kinds ``allot get`` lists, read from an event log (a live one or a simulator's).

Pods and nodes come from :class:`allot_views.cluster.ClusterView`;
gangs, quotas, reservations and migrations from the projections of gang-coordinator, quota-manager and
reservation-manager, rebuilt from the log by their own decision code (the engines are imported only when one of those
kinds is asked for); devices and nodemetrics from the Device and NodeMetric objects the log records. Labels of every
kind come from the manifests the log records (:class:`Recorded`), so ``-l`` selects on what was applied.

Events are the Kubernetes Events the binder writes for the recorded decisions (:mod:`binder.notices`), rendered here
from the log in either mode. Every loader is ``async (store, now_us) -> rows`` (see :mod:`allot_views.kinds` for the row contract).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from allot_contracts.envelope import RecordedEvent
from allot_eventstore.clock import iso
from allot_eventstore.protocol import EventStore
from allot_views.cluster import ClusterView, NodeView, gpu_rows, plan_summary
from allot_views.kinds import Kind
from allot_views.units import age, human, human_list, percent

Rows = list[dict[str, Any]]

_MANIFEST = b'"manifest"'


@dataclass
class Recorded:
    """What the log records about objects beyond the cluster view: the labels of every applied object (by kind and
    ``ns/name`` or name), each node's latest Device inventory and NodeMetric."""

    labels: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> device.reported payload
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> nodemetric.reported payload

    def apply(self, record: RecordedEvent) -> None:
        if record.type == "device.removed":
            self.devices.pop(str(record.payload_dict().get("name")), None)
        elif record.type == "nodemetric.removed":
            self.metrics.pop(str(record.payload_dict().get("name")), None)
        if _MANIFEST not in record.payload:
            return
        payload = record.payload_dict()
        manifest = payload.get("manifest")
        if not isinstance(manifest, dict):
            return
        meta = manifest.get("metadata") or {}
        name = str(meta.get("name") or "")
        key = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
        if manifest.get("kind") == "Pod" and "/" not in key:
            key = f"default/{name}"
        labels = meta.get("labels") or {}
        if name and isinstance(labels, dict):
            self.labels[(str(manifest.get("kind")), key)] = {str(k): str(v) for k, v in labels.items()}
        if record.type == "device.reported":
            self.devices[name] = payload
        elif record.type == "nodemetric.reported":
            self.metrics[name] = payload

    def of(self, kind: str, key: str) -> dict[str, str]:
        return dict(self.labels.get((kind, key), {}))


async def fold(store: EventStore) -> tuple[ClusterView, Recorded]:
    view, recorded = ClusterView(), Recorded()
    async for record in store.iterate():
        view.apply(record)
        recorded.apply(record)
    return view, recorded


async def recorded_only(store: EventStore) -> Recorded:
    recorded = Recorded()
    async for record in store.iterate():
        recorded.apply(record)
    return recorded


def split(key: str) -> tuple[str, str]:
    namespace, _, name = key.rpartition("/")
    return namespace, name


# --- pods and nodes: the cluster view ---------------------------------------------------------------------------------


async def load_view() -> ClusterView:
    """The cluster view of the log the CLI finds (:func:`allot_stack.connect.endpoints`)."""
    from allot_stack.connect import on_log
    from allot_stack.logtools import cluster_view

    return await on_log(cluster_view)


def _devices(devices: dict[str, list[int]]) -> str:
    return " ".join(f"{kind}:{','.join(map(str, minors))}" for kind, minors in devices.items()) or "-"


def pods_rows(view: ClusterView, namespace: str | None = None) -> Rows:
    """One row per pod (of ``namespace`` when given): phase, node, devices, cpuset, quota, QoS and what qos-enforcer
    enforces for it."""

    rows = []
    for key, pod in sorted(view.pods.items()):
        if namespace and not key.startswith(f"{namespace}/"):
            continue
        rows.append(
            {
                "pod": key,
                "phase": pod.phase,
                "node": pod.node or "-",
                "devices": _devices(pod.devices),
                "cpuset": pod.cpuset or "-",
                "quota": pod.quota or "-",
                "qos": pod.qos or "-",
                "enforced": plan_summary(pod.enforcement.plan) if pod.enforcement else "-",
                "enforcement": pod.enforcement.status() if pod.enforcement else "-",
                "message": pod.message,
                "minors": pod.devices,  # as recorded, for -o json|yaml
            }
        )
    return rows


def _pair(node: Any, prefix: str) -> str:
    cpu, memory = node.allocatable.get(f"{prefix}-cpu"), node.allocatable.get(f"{prefix}-memory")
    if cpu is None and memory is None:
        return "-"
    degraded = " (degraded)" if node.degraded and prefix.endswith("batch") else ""
    return f"cpu {cpu or 0} mem {memory or 0}{degraded}"


def _devices_in_use(view: ClusterView, name: str, devices: dict[str, int]) -> str:
    """Per device type, allocated / reported: ``gpu:6/8`` (a GPU counts as allocated when any pod holds a share)."""
    if not devices:
        return "-"
    gpus = gpu_rows(view).get(name, [])
    in_use = {"gpu": sum(1 for g in gpus if g.holders)}
    return " ".join(f"{k}:{in_use[k]}/{v}" if k in in_use else f"{k}:{v}" for k, v in sorted(devices.items()))


def nodes_rows(view: ClusterView, now: int) -> Rows:
    """One row per node: capacity, devices, pods, and the node side — usage from its latest NodeMetric (with the
    metric's age), the batch and mid allocatable computed from it, and how long ago its agent's heartbeat came."""
    rows = []
    for name, node in sorted(view.nodes.items()):
        usage = "-"
        if node.usage:
            parts = [
                f"{res} {percent(node.usage[res], node.capacity.get(res, ''), res) or node.usage[res]}"
                for res in ("cpu", "memory")
                if res in node.usage
            ]
            usage = f"{' '.join(parts)} ({age(now - node.metric_time, days=False)} ago)"

        heartbeat = "-"
        if node.heartbeat_lost:
            heartbeat = f"LOST {age(now - node.heartbeat, days=False)} ago"
        elif node.heartbeat:
            heartbeat = f"{age(now - node.heartbeat, days=False)} ago"
        rows.append(
            {
                "node": name,
                "cpu": node.capacity.get("cpu", "-"),
                "memory": node.capacity.get("memory", "-"),
                "devices": _devices_in_use(view, name, node.devices),
                "pods": len(node.pods),
                "usage": usage,
                "batch": _pair(node, "kubernetes.io/batch"),
                "mid": _pair(node, "kubernetes.io/mid"),
                "heartbeat": heartbeat,
                "raw": _node_status(node),  # as recorded, for -o json|yaml
            }
        )
    return rows


class NodeStatus(TypedDict):
    """A node's side as recorded (``allot get nodes -o json|yaml``); ``None`` where nothing was reported."""

    capacity: dict[str, str]
    allocatable: dict[str, str]
    devices: dict[str, int]
    usage: dict[str, str]
    usageTime: str | None
    heartbeatTime: str | None
    heartbeatLost: bool | None
    degraded: bool | None


def _node_status(node: NodeView) -> NodeStatus:
    return {
        "capacity": node.capacity,
        "allocatable": node.allocatable,
        "devices": node.devices,
        "usage": node.usage,
        "usageTime": iso(node.metric_time) if node.usage else None,
        "heartbeatTime": iso(node.heartbeat) if node.heartbeat else None,
        "heartbeatLost": bool(node.heartbeat_lost) or None,
        "degraded": node.degraded or None,
    }


async def pod_records(store: EventStore, now: int) -> Rows:
    view, recorded = await fold(store)
    rows = pods_rows(view)
    for row in rows:
        namespace, name = split(row["pod"])
        row.update(name=name, namespace=namespace, labels=recorded.of("Pod", row["pod"]))
    return rows


async def node_records(store: EventStore, now: int) -> Rows:
    view, recorded = await fold(store)
    rows = nodes_rows(view, now)
    for row in rows:
        row.update(name=row["node"], labels=recorded.of("Node", row["node"]))
    return rows


# --- gangs, quotas, reservations, migrations: the services' projections ------------------------------------------


async def _service_view(store: EventStore, service: str) -> tuple[Any, Recorded]:
    """The engine of ``service``'s projection of the log, and the objects the log records (for their labels)."""
    from allot_stack.logtools import projection

    return (await projection(store, service)).engine, await recorded_only(store)


async def gang_records(store: EventStore, now: int) -> Rows:
    engine, recorded = await _service_view(store, "gang-coordinator")
    rows = []
    for s in engine.statuses():
        namespace, name = split(s["gang"])
        rows.append(
            {
                "name": name,
                "namespace": namespace,
                "labels": recorded.of("PodGroup", s["gang"]),
                "gang": s["gang"],
                "phase": s["phase"],
                "present": f"{s['members']['present']}/{s['minMember']}",
                "bound": s["members"]["bound"],
                "mode": s["mode"],
                "policy": s["matchPolicy"],
                "attempts": (s.get("group") or {}).get("attempts", 0),
                "explain": engine.explain(s["gang"]),
                "status": s,
            }
        )
    return rows


async def quota_records(store: EventStore, now: int) -> Rows:
    engine, recorded = await _service_view(store, "quota-manager")
    rows = []
    for row in engine.tree_view():
        rows.append(
            {
                "name": row["name"],
                "namespace": row["namespace"],
                "labels": recorded.of("ElasticQuota", f"{row['namespace']}/{row['name']}"),
                "parent": row["parent"] or "-",
                "tree": row["tree"],
                "depth": row["depth"],
                "pods": row["pods"],
                "children": row["children"],
                "isParent": row["is_parent"],
                "allowLent": row["allow_lent"],
                # an unlimited max is recorded as no limit at all: shown as "unlimited" rather than "-"
                "min": human_list(row["min"]),
                "max": human_list(row["max"]) if row["max"] else "unlimited",
                "runtime": human_list(row["runtime"]),
                "used": human_list(row["used"]),
                "request": human_list(row["request"]),
                "quantities": {k: row[k] for k in ("min", "max", "runtime", "used", "request")},
            }
        )
    return rows


async def reservation_records(store: EventStore, now: int) -> Rows:
    from allot_stack.reservation_views import reservation_rows

    return await _reservation_manager_records(
        store, reservation_rows, "Reservation", key="reservation", detail="status"
    )


async def migration_records(store: EventStore, now: int) -> Rows:
    from allot_stack.reservation_views import migration_rows

    return await _reservation_manager_records(
        store, migration_rows, "PodMigrationJob", key="job", detail="detail"
    )


async def _reservation_manager_records(
    store: EventStore, rows_of: Callable[[Any], Rows], kind: str, *, key: str, detail: str
) -> Rows:
    """The rows ``rows_of`` makes of the reservation-manager's projection, each named by its ``key`` column, with the
    labels recorded for that ``kind`` and the conditions of its ``detail`` column."""
    engine, recorded = await _service_view(store, "reservation-manager")
    rows = rows_of(engine)
    for row in rows:
        row.update(name=row[key], labels=recorded.of(kind, row[key]))
        row["conditions"] = (row.get(detail) or {}).get("conditions") or []
    return rows


# --- devices and nodemetrics: the objects the log records -----------------------------------------------------------

_HOLDING = frozenset({"Placed", "Binding", "Bound"})


def device_rows(view: ClusterView, recorded: Recorded) -> Rows:
    """One row per Device object (one per node): its devices by type, how many are healthy, which minors the pods
    placed on the node hold, and (wide) the models and memory of its GPUs."""
    rows = []
    for node, payload in sorted(recorded.devices.items()):
        inventory = (payload.get("inventory") or {}).get("devices") or {}
        held: dict[str, set[int]] = {}
        holders = 0
        for pod in view.pods.values():
            if pod.node == node and pod.phase in _HOLDING and pod.devices:
                holders += 1
                for kind, minors in pod.devices.items():
                    held.setdefault(kind, set()).update(minors)
        memory = sum(
            int(d.get("resources", {}).get("koordinator.sh/gpu-memory", 0)) for d in inventory.get("gpu", [])
        )
        models = sorted(
            {m for d in (x for ds in inventory.values() for x in ds) if (m := _model(d.get("labels")))}
        )
        if not models:  # upstream labels the Node (or the Device object) with the model of its GPUs
            model = _model(recorded.of("Device", node)) or _model(recorded.of("Node", node))
            models = [model] if model else []
        rows.append(
            {
                "name": node,
                "labels": recorded.of("Device", node),
                "devices": " ".join(f"{t}:{len(d)}" for t, d in sorted(inventory.items())) or "-",
                "healthy": " ".join(
                    f"{t}:{sum(bool(x.get('healthy')) for x in d)}/{len(d)}"
                    for t, d in sorted(inventory.items())
                )
                or "-",
                "allocated": " ".join(
                    f"{t}:{','.join(map(str, sorted(m)))}" for t, m in sorted(held.items()) if m
                )
                or "-",
                "holders": holders,
                "models": ",".join(models) or "-",
                "memory": human("koordinator.sh/gpu-memory", memory) if memory else "-",
                "inventory": inventory,
            }
        )
    return rows


def _model(labels: Any) -> str:
    labels = labels or {}
    return str(labels.get("node.koordinator.sh/gpu-model") or labels.get("model") or "")


async def device_records(store: EventStore, now: int) -> Rows:
    return device_rows(*await fold(store))


def nodemetric_rows(view: ClusterView, recorded: Recorded, now: int) -> Rows:
    rows = []
    for node, payload in sorted(recorded.metrics.items()):
        usage = payload.get("usage") or {}
        status = (payload.get("manifest") or {}).get("status") or {}
        capacity = view.nodes[node].capacity if node in view.nodes else {}
        rows.append(
            {
                "name": node,
                "labels": recorded.of("NodeMetric", node),
                "cpu": _share("cpu", usage.get("cpu"), capacity.get("cpu")),
                "memory": _share("memory", usage.get("memory"), capacity.get("memory")),
                "updated": f"{age(now - int(payload.get('update_time') or 0))} ago",
                "updateTime": iso(int(payload.get("update_time") or 0)),
                "pods": len(status.get("podsMetric") or []),
                "usage": usage,
            }
        )
    return rows


def _share(resource: str, used: Any, capacity: Any) -> str:
    if used is None:
        return "-"
    from allot_contracts.quantity import QuantityError, to_canonical

    try:
        total = to_canonical(resource, capacity) if capacity else 0
        percent = f" ({to_canonical(resource, used) * 100 // total}%)" if total else ""
    except QuantityError:
        percent = ""
    return f"{human(resource, used)}{percent}"


async def nodemetric_records(store: EventStore, now: int) -> Rows:
    view, recorded = await fold(store)
    return nodemetric_rows(view, recorded, now)


# --- events: what the binder writes to Kubernetes for the recorded decisions ---------------------------------------


async def rendered(store: EventStore) -> AsyncIterator[tuple[int, Any]]:
    """``(recorded_at, Rendered)`` for every recorded event the binder renders, in log order. A binding the dev
    stack recorded itself renders as kube-scheduler's ``Scheduled``, as it does in Kubernetes mode."""
    import msgspec

    from allot_contracts.events import PodBound
    from binder.notices import Renderer

    renderer = Renderer()
    async for record in store.iterate(types=Renderer.interests):
        try:
            event = record.decode()
        except Exception:  # an event of a newer version: nothing rendered for it here
            continue
        if isinstance(event, PodBound) and event.mode != "kubernetes":
            event = msgspec.structs.replace(event, mode="kubernetes")
        yield record.recorded_at, renderer.render(event)


async def event_records(store: EventStore, now: int) -> Rows:
    rows: Rows = []
    async for at, out in rendered(store):
        for notice in out.notices:
            r = notice.regarding
            rows.append(
                {
                    "name": f"{r.name}.{len(rows) + 1}",
                    "namespace": r.namespace,
                    "labels": {},
                    "lastSeen": f"{age(now - at)} ago",
                    "type": notice.type,
                    "reason": notice.reason,
                    "object": f"{r.kind.lower()}/{r.name}",
                    "message": notice.note,
                    "action": notice.action,
                    "time": iso(at),
                    "regarding": {"kind": r.kind, "namespace": r.namespace or None, "name": r.name},
                }
            )
    return rows


def loader(kind: Kind) -> Callable[[EventStore, int], Awaitable[Rows]]:
    """The loader of ``kind``'s rows, as :attr:`allot_views.kinds.Kind.loader` names it."""
    loaded: Callable[[EventStore, int], Awaitable[Rows]] = globals()[kind.loader]
    return loaded
