"""node-reporter in Kubernetes mode: Nodes, Koordinator ``Device``, ``NodeResourceTopology`` and ``NodeMetric`` objects
from the API server, recorded as ``node.applied``/``node.deleted``, ``device.applied``/``device.deleted``,
``topology.applied``/``topology.deleted`` and ``nodemetric.applied``/``nodemetric.deleted`` — the same input events
``allot apply`` records — which this service's processor then validates and registers. koordlet's NodeMetrics are
recorded at every report (their ``updateTime`` moves), so load-aware scheduling and overcommit see them fresh.

A per-node instance (``ALLOT_INSTANCE`` = its node, from ``spec.nodeName`` in the DaemonSet) watches only its own
node's objects (field selector ``metadata.name=<node>``; Devices and NodeResourceTopologies are named after their
node) and records as ``node-reporter@<node>.kube``; without an instance it watches every node as
``node-reporter.kube``. The producer differs from the processor's own name, so the processor consumes these events
as inputs.

Only real changes are recorded (see :mod:`allot_runtime.kube.mirror`): for Nodes, labels, annotations, taints,
``unschedulable``, allocatable and capacity (not conditions, heartbeats or images, nor what the binder wrote); for ``Device``, labels,
annotations and spec; for ``NodeResourceTopology``, labels, annotations, policies and zones (without the
``available`` amounts, which follow every pod). Event ids are derived from (kind, uid, resourceVersion), and what was
recorded is read back from the log at start and at every relist.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    DeviceApplied,
    DeviceDeleted,
    Event,
    NodeApplied,
    NodeDeleted,
    NodeMetricApplied,
    NodeMetricDeleted,
    TopologyApplied,
    TopologyDeleted,
)
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_runtime.kube import (
    BINDER_FIELD_MANAGER,
    DEVICES,
    NODES,
    TOPOLOGIES,
    Kind,
    Mirror,
    Resource,
    WatchMetrics,
    api_client,
    list_watches,
    meta,
    part,
    run_in_order,
    strip_server_fields,
    without_owned,
)
from allot_runtime.processor import instance_name

log = logging.getLogger("allot.node-reporter.kube")

COMPONENT = "node-reporter"


def producer_for(instance: str = "") -> str:
    """``node-reporter@n1.kube`` for a per-node instance, ``node-reporter.kube`` otherwise."""
    return f"{instance_name(COMPONENT, instance)}.kube"


def _body(manifest: JsonObject, drop: tuple[str, ...] = ("status",)) -> JsonObject:
    return {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind", "metadata", *drop)}


def _identity(manifest: JsonObject) -> JsonObject:
    m = meta(manifest)
    return {
        "uid": m.get("uid", ""),
        "labels": m.get("labels") or {},
        "annotations": m.get("annotations") or {},
    }


_Applied = NodeApplied | DeviceApplied | TopologyApplied | NodeMetricApplied
_Deleted = NodeDeleted | DeviceDeleted | TopologyDeleted | NodeMetricDeleted


def _named_kind(
    resource: Resource,
    stream: str,
    applied: type[_Applied],
    deleted: type[_Deleted],
    normalize: Callable[[JsonObject], JsonObject],
    fingerprint: Callable[[JsonObject], Any],
) -> Kind:
    """A kind whose objects are named after their node, recorded on ``<stream>:<name>`` as ``<stream>.applied`` and
    ``<stream>.deleted``."""

    def fold(event: Event) -> tuple[str, JsonObject | None] | None:
        if not isinstance(event, (applied, deleted)):
            return None
        return event.name, event.manifest if isinstance(event, applied) else None

    return Kind(
        resource=resource,
        types=frozenset({f"{stream}.applied", f"{stream}.deleted"}),
        normalize=normalize,
        fingerprint=fingerprint,
        applied=lambda m: [(stream_id(stream, _name(m)), applied(name=_name(m), manifest=m))],
        deleted=lambda key, uid: [(stream_id(stream, key), deleted(name=key))],
        fold=fold,
    )


# -- Node ---------------------------------------------------------------------------------------------------------


def _name(manifest: JsonObject) -> str:
    return str(meta(manifest)["name"])


def normalize_node(obj: JsonObject) -> JsonObject:
    """What a Node means to scheduling: metadata, spec, and allocatable/capacity (no conditions, images, …), without
    the annotations and resources the binder wrote (owned by its field manager in ``managedFields``): those are
    Allot's own decisions on the way back, and recording them would cost a round of every decider per write. A value
    someone else set (a field they changed since) is theirs and recorded."""
    owned = (("metadata", "annotations"), ("status", "allocatable"), ("status", "capacity"))
    obj = strip_server_fields(without_owned(obj, BINDER_FIELD_MANAGER, owned))
    status = part(obj, "status")
    kept: JsonObject = {k: status[k] for k in ("capacity", "allocatable") if k in status}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": obj["metadata"],
        "spec": obj.get("spec") or {},
        "status": kept,
    }


def node_fingerprint(manifest: JsonObject) -> Any:
    spec, status = part(manifest, "spec"), part(manifest, "status")
    return {
        **_identity(manifest),
        "taints": spec.get("taints") or [],
        "unschedulable": bool(spec.get("unschedulable")),
        "allocatable": status.get("allocatable") or {},
        "capacity": status.get("capacity") or {},
    }


NODE_KIND = _named_kind(NODES, "node", NodeApplied, NodeDeleted, normalize_node, node_fingerprint)

# -- Device -------------------------------------------------------------------------------------------------------


def normalize_custom(obj: JsonObject) -> JsonObject:
    """A custom resource without server bookkeeping and without status (an output, never an input)."""
    return {k: v for k, v in strip_server_fields(obj).items() if k != "status"}


def custom_fingerprint(manifest: JsonObject) -> Any:
    return {**_identity(manifest), "body": _body(manifest)}


DEVICE_KIND = _named_kind(
    DEVICES, "device", DeviceApplied, DeviceDeleted, normalize_custom, custom_fingerprint
)

# -- NodeResourceTopology -----------------------------------------------------------------------------------------


def normalize_topology(obj: JsonObject) -> JsonObject:
    """Without ``zones[].resources[].available``: it moves with every pod, and scheduling reads capacity and
    allocatable only."""
    manifest = normalize_custom(obj)
    zones = manifest.get("zones")
    if isinstance(zones, list):
        manifest["zones"] = [_without_available(zone) for zone in zones]
    return manifest


def _without_available(zone: JsonValue) -> JsonValue:
    resources = zone.get("resources") if isinstance(zone, dict) else None
    if not isinstance(zone, dict) or not isinstance(resources, list):
        return zone
    return {
        **zone,
        "resources": [
            {k: v for k, v in r.items() if k != "available"} if isinstance(r, dict) else r for r in resources
        ],
    }


TOPOLOGY_KIND = _named_kind(
    TOPOLOGIES, "topology", TopologyApplied, TopologyDeleted, normalize_topology, custom_fingerprint
)

# -- NodeMetric (koordlet's) ---------------------------------------------------------------------------------------

NODEMETRICS = Resource("slo.koordinator.sh/v1alpha1", "NodeMetric", "nodemetrics", False)


def normalize_nodemetric(obj: JsonObject) -> JsonObject:
    """A NodeMetric is all status (koordlet reports into it): kept whole, without server bookkeeping."""
    return strip_server_fields(obj)


def nodemetric_fingerprint(manifest: JsonObject) -> Any:
    """Every report is a change (its ``updateTime`` moves), so that a NodeMetric never looks older than it is."""
    return {**_identity(manifest), "spec": manifest.get("spec") or {}, "status": manifest.get("status") or {}}


NODEMETRIC_KIND = _named_kind(
    NODEMETRICS,
    "nodemetric",
    NodeMetricApplied,
    NodeMetricDeleted,
    normalize_nodemetric,
    nodemetric_fingerprint,
)

KINDS = (NODE_KIND, DEVICE_KIND, TOPOLOGY_KIND, NODEMETRIC_KIND)


class NodeWatch:
    """The three list-watches of one node-reporter instance."""

    def __init__(
        self,
        *,
        store: Any,
        client: Any,
        instance: str = "",
        registry: Any = None,
        watch_timeout: int = 300,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.instance = instance
        self.producer = producer_for(instance)
        self.metrics = WatchMetrics.of(registry if registry is not None else CollectorRegistry())
        in_scope: Callable[[str], bool] = (lambda key: key == instance) if instance else (lambda _: True)
        selector = f"metadata.name={instance}" if instance else ""
        self.mirrors = [
            Mirror(
                store=store,
                producer=self.producer,
                kind=kind,
                component=COMPONENT,
                metrics=self.metrics,
                in_scope=in_scope,
            )
            for kind in KINDS
        ]
        self.reflectors = list_watches(
            client,
            [(mirror.resource, mirror, selector) for mirror in self.mirrors],
            component=COMPONENT,
            metrics=self.metrics,
            watch_timeout=watch_timeout,
            backoff=backoff,
        )

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    async def run(self, stop: asyncio.Event) -> None:
        for mirror in self.mirrors:
            await mirror.refresh()
        log.info(
            "%s: watching %s from the API server",
            self.producer,
            f"node {self.instance}" if self.instance else "every node",
        )
        await run_in_order(self.reflectors, stop)


async def kube_watch(ctx: Any, stop: asyncio.Event) -> None:
    """The node-reporter ``Extra`` of Kubernetes mode (added by ``main`` when ``ALLOT_KUBE_MODE=kubernetes``)."""
    client = await api_client()
    try:
        watch = NodeWatch(
            store=ctx.store, client=client, instance=ctx.settings.instance, registry=ctx.metrics.registry
        )
        await watch.run(stop)
    finally:
        await client.close()
