"""device-allocator's node-side decisions: heartbeat loss, batch/mid overcommit, and the load the engine sees.

The device-allocator is where the whole cluster's nodes, their NodeMetrics and the pods placed on them meet, so it
records the cluster-level node decisions (docs/adr/0008-node-side-decisions.md):

- ``node.heartbeat_lost`` when a node's agent has sent no ``node.heartbeat`` for longer than the grace (default 40 s;
  a timer event at the deadline), after which pods requesting devices are not placed there; ``node.heartbeat_resumed``
  with the next heartbeat. Nodes that never sent a heartbeat (objects applied by hand) are not watched.
- ``node.allocatable_updated`` when a node's batch/mid resources, CPU normalization ratio or amplified allocatable
  change (``allot_placement.overcommit``): on a new NodeMetric, a Node or topology change, a configuration change, and
  at the degrade deadline of a NodeMetric that stopped coming; results within the suppression thresholds are not
  recorded.
- The engine's load-aware view: every NodeMetric, and every pod assigned with the time of its assignment.

Pattern (as the gang-coordinator's): ``evolve`` of a trigger computes the decisions and applies their effect,
``decide`` returns them; a decision's own event changes nothing more when it is applied. The basis is exact and
replay re-derives every decision.

Configuration (``nodeSide`` in the device-allocator's config)::

    nodeSide:
      heartbeatGraceSeconds: 40
      colocation: {colocation-config: {...}, cpu-normalization-config: {...}, resource-amplification-config: {...}}

``colocation`` takes the ``data`` of Koordinator's ``slo-controller-config`` ConfigMap (each key a JSON document or
an object); a ConfigMap applied to the log (``colocation.applied``) replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

import msgspec

from allot_contracts.envelope import stream_id
from allot_contracts.errors import InvalidConfig
from allot_contracts.events import (
    ColocationConfigApplied,
    ColocationConfigDeleted,
    ColocationConfigRejected,
    Event,
    FieldIssue,
    NodeAllocatableUpdated,
    NodeHeartbeat,
    NodeHeartbeatLost,
    NodeHeartbeatResumed,
    NodeMetricRemoved,
    NodeMetricReported,
    NodeRegistered,
    NodeRemoved,
    TimerFired,
    TopologyRemoved,
    TopologyReported,
    tag_of,
)
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.kube import koord_priority_class, koord_qos_class
from allot_contracts.objects.colocation import ColocationConfig, is_slo_config, parse_colocation_configmap
from allot_contracts.objects.load_aware import read_load_estimation
from allot_contracts.objects.names import CPU
from allot_contracts.objects.nodemetric import NodeMetric, parse_nodemetric, parse_time
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.sharing import Parts
from allot_contracts.quantity import QuantityError, to_canonical
from allot_placement import PlacementEngine
from allot_placement.loadaware import AssignedPod, PodLoad
from allot_placement.nodeside import NodeOverrides
from allot_placement.overcommit import (
    Overcommit,
    PodFacts,
    compute,
    node_facts,
    node_read,
    node_strategy,
    should_record,
)
from allot_placement.pod import pod_load
from allot_runtime.processor import Emit
from device_allocator.folding import folds_any

__all__ = ["ConfigError", "NodeSide", "assigned_pod", "pod_facts", "scheduled_at"]

DEFAULT_GRACE_S = 40
TYPES = frozenset(
    {
        "nodemetric.reported",
        "nodemetric.removed",
        "node.heartbeat",
        "colocation.applied",
        "colocation.deleted",
        "timer.fired",
    }
)


# the event types ``evolve`` folds (its patterns' classes)
_FOLDED = folds_any(
    NodeRegistered,
    NodeRemoved,
    TopologyReported,
    TopologyRemoved,
    NodeMetricReported,
    NodeMetricRemoved,
    NodeHeartbeat,
    ColocationConfigApplied,
    ColocationConfigDeleted,
    TimerFired,
)


class ConfigError(InvalidConfig):
    def __init__(self, errors: list[FieldIssue]) -> None:
        super().__init__(errors)
        self.errors = errors


def _config(raw: Any) -> tuple[int, ColocationConfig]:
    errors: list[FieldIssue] = []
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([FieldIssue(path="nodeSide", message="must be a mapping")])
    for key in sorted(set(raw) - {"heartbeatGraceSeconds", "colocation"}):
        errors.append(
            FieldIssue(
                path=f"nodeSide.{key}", message="unknown key; supported: colocation, heartbeatGraceSeconds"
            )
        )
    grace = raw.get("heartbeatGraceSeconds", DEFAULT_GRACE_S)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 1:
        errors.append(FieldIssue(path="nodeSide.heartbeatGraceSeconds", message="must be an integer >= 1"))
        grace = DEFAULT_GRACE_S
    config = ColocationConfig()
    if raw.get("colocation") is not None:
        parsed = parse_colocation_configmap({"data": raw["colocation"]}, errors, [])
        config = parsed or config
    if errors:
        raise ConfigError(
            [
                FieldIssue(
                    path=f"nodeSide.{e.path}" if e.path.startswith("data") else e.path, message=e.message
                )
                for e in errors
            ]
        )
    return grace, config


def _limit_map(resources: Any) -> dict[str, int]:
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    out: dict[str, int] = {}
    if not isinstance(limits, Mapping):
        return out
    for name, value in limits.items():
        try:
            out[str(name)] = to_canonical(str(name), value)
        except (QuantityError, TypeError):
            continue  # the requests parser reports malformed quantities; a limit it refused is not estimated
    return out


def pod_limits(spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """Pod limits as Kubernetes sums them: containers added, each init container's as a floor, plus overhead."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        if isinstance(c, Mapping):
            for k, v in _limit_map(c.get("resources")).items():
                total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        if isinstance(c, Mapping):
            for k, v in _limit_map(c.get("resources")).items():
                total[k] = max(total.get(k, 0), v)
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping) and total:
        for k, v in _limit_map({"limits": overhead}).items():
            if k in total:
                total[k] += v
    return tuple(sorted(total.items()))


def _facts_of(pod: Any) -> tuple[str, str, str, list[str], Mapping[str, int]]:
    """(uid, Koordinator priority class, Koordinator QoS, owner kinds, limits) of a typed Pod or a pod manifest."""
    if isinstance(pod, Mapping):
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        priority = koord_priority_class(pod)
        return (
            str(meta.get("uid") or ""),
            "" if priority == "none" else priority,
            koord_qos_class(pod),
            [str(o.get("kind")) for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)],
            dict(pod_limits(spec)),
        )
    return (
        str(pod.uid),
        str(pod.koord_priority),
        str(pod.koord_qos),
        [str(o.kind) for o in pod.owners],
        dict(pod.limits),
    )


def scheduled_at(manifest: Mapping[str, object], default: int) -> int:
    """When an already-bound pod was assigned to its node, as upstream's load-aware cache takes it: the
    ``PodScheduled`` condition's ``lastTransitionTime``, else ``default`` (the time it was recorded)."""
    at = _condition_at(manifest, "PodScheduled")
    return default if at is None else at


def _condition_at(manifest: Mapping[str, object], kind: str) -> int | None:
    """When the pod condition ``kind`` became True (µs), if the manifest says so readably."""
    status = manifest.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == kind
            and condition.get("status") == "True"
            and condition.get("lastTransitionTime")
        ):
            return parse_time(condition["lastTransitionTime"], "", [])
    return None


def pod_facts(key: str, pod: Any, requests: Mapping[str, int], numa: tuple[int, ...] = ()) -> PodFacts:
    """What the overcommit calculation reads of a pod placed on a node (``pod``: a typed Pod or a manifest;
    ``numa``: the NUMA nodes its allocation is bound to)."""
    uid, priority, qos, _, _ = _facts_of(pod) if pod is not None else ("", "", "", [], {})
    return PodFacts(key=key, uid=uid, priority_class=priority, qos=qos, requests=dict(requests), numa=numa)


def assigned_pod(key: str, pod: Any, requests: Mapping[str, int], at: int) -> AssignedPod:
    """What load-aware scheduling keeps of a pod assigned at ``at`` (``pod``: a typed Pod or a manifest): what its
    estimate reads, and when it was initialized (the estimation deadline may count from then)."""
    if isinstance(pod, Pod):
        return AssignedPod(
            key=key,
            uid=pod.uid,
            requests=tuple(sorted(requests.items())),
            load=pod_load(pod),
            at=at,
            initialized_at=pod.initialized_at,
        )
    uid, priority, _, owners, limits = _facts_of(pod)
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return AssignedPod(
        key=key,
        uid=uid,
        requests=tuple(sorted(requests.items())),
        load=PodLoad(
            priority_class=priority,
            daemonset="DaemonSet" in owners,
            limits=tuple(sorted(limits.items())),
            # the door reported what cannot be read of these when the pod came in
            estimation=read_load_estimation(annotations, []) if isinstance(annotations, Mapping) else None,
        ),
        at=at,
        initialized_at=_condition_at(pod, "Initialized"),
    )


class NodeSide:
    """The node-side state of the device-allocator (see the module docstring)."""

    def __init__(self, engine: PlacementEngine, raw_config: Any, service: str, parts: Parts) -> None:
        self.engine = engine
        self.parts = parts  # the capacity and allocatable nodes of a pool repeat, held once
        self.service = service
        self.grace_s, self.default_config = _config(raw_config)
        self.config = self.default_config
        # what the overcommit calculation reads of each Node (``node_read``)
        self.nodes: dict[str, JsonObject] = {}
        self.topologies: dict[str, JsonObject] = {}
        self.metrics: dict[str, NodeMetric] = {}
        self.beats: dict[str, int] = {}  # node -> time of its last heartbeat (µs)
        self.lost: dict[str, int] = {}  # node -> when its heartbeat was declared lost
        self.recorded: dict[str, tuple[Overcommit, int]] = {}  # last recorded result and its time
        # owed output (docs/adr/0012-processor-contract.md): the node-side decisions an input led to, in order, each
        # settled when it is evolved as our own decision; and why capacity may have come back with them (the
        # processor requeues), owed until the last of them is settled
        self.owed: list[Emit] = []
        self.requeue = ""

    # -- evolve ---------------------------------------------------------------------------------------------------
    def evolve(self, event: Event, at: int, pods_of: Callable[[str], list[PodFacts]]) -> None:
        """Apply an input; the decisions it leads to are owed (``owed``, ``decide`` returns them)."""
        if not _FOLDED(event):  # most events: one test instead of a failed pattern per type
            return
        match event:
            case NodeRegistered(name=name, manifest=manifest):
                self.nodes[name] = node_read(manifest, self.parts.one)
                self._overcommit([name], at, pods_of, "node updated")
            case NodeRemoved(name=name):
                self.nodes.pop(name, None)
                self.recorded.pop(name, None)  # a node that comes back is computed afresh
            case TopologyReported(name=name, manifest=manifest):
                self.topologies[name] = manifest
                self._overcommit([name], at, pods_of, "topology updated")
            case TopologyRemoved(name=name):
                self.topologies.pop(name, None)
            case NodeMetricReported(name=name, manifest=manifest, update_time=update_time, metric=typed):
                metric = typed if typed is not None else parse_nodemetric(manifest, [], [])
                if metric is None:  # node-reporter validated it: this does not happen
                    return
                if metric.update_time is None:
                    metric = msgspec.structs.replace(metric, update_time=update_time)
                self.metrics[name] = metric
                self.engine.upsert_metric(metric)
                self._overcommit([name], at, pods_of, "node metric updated")
            case NodeMetricRemoved(name=name):
                self.metrics.pop(name, None)
                self.engine.delete_metric(name)
                self._overcommit([name], at, pods_of, "node metric removed")
            case NodeHeartbeat(name=name):
                self.beats[name] = at
                since = self.lost.pop(name, None)
                if since is not None:
                    self.owed.append(
                        Emit(
                            stream_id=stream_id("node", name),
                            event=NodeHeartbeatResumed(name=name, lost_since=since),
                        )
                    )
                    self._push(name)
                    self.requeue = f"node {name} heartbeat resumed"
            case ColocationConfigApplied(ref=ref, manifest=manifest) if is_slo_config(
                ref.namespace, ref.name
            ):
                errors: list[FieldIssue] = []
                config = parse_colocation_configmap(manifest, errors, [])
                if config is None:
                    self.owed.append(
                        Emit(
                            stream_id=stream_id("colocation", ref.key),
                            event=ColocationConfigRejected(ref=ref, errors=errors),
                        )
                    )
                    return
                self.config = config
                self._overcommit(sorted(self.nodes), at, pods_of, "co-location configuration updated")
            case ColocationConfigDeleted(ref=ref) if is_slo_config(ref.namespace, ref.name):
                self.config = self.default_config
                self._overcommit(sorted(self.nodes), at, pods_of, "co-location configuration deleted")
            case TimerFired(service=service) if service == self.service:
                for name in sorted(self.beats):
                    last = self.beats[name]
                    if name not in self.lost and last + self.grace_s * 1_000_000 <= at:
                        self.lost[name] = at
                        self.owed.append(
                            Emit(
                                stream_id=stream_id("node", name),
                                event=NodeHeartbeatLost(name=name, last_heartbeat=last, grace_s=self.grace_s),
                            )
                        )
                        self._push(name)
                due = [name for name, deadline in self._degrade_deadlines().items() if deadline <= at]
                self._overcommit(sorted(due), at, pods_of, "node metric stale")
            case _:
                pass

    def apply_own(self, event: Event) -> None:
        """A decision of ours being applied (live: already applied by ``evolve``; rebuild: the same, idempotent). It
        settles the owed decision it records."""
        self._settle(event)
        match event:
            case (
                NodeAllocatableUpdated(name=name)
                | NodeHeartbeatLost(name=name)
                | NodeHeartbeatResumed(name=name)
            ):
                self._push(name)
            case _:
                pass

    def _settle(self, event: Event) -> None:
        tag = tag_of(event)
        for index, emit in enumerate(self.owed):
            if tag_of(emit.event) == tag:
                del self.owed[index]
                if not self.owed:
                    self.requeue = ""
                return

    # -- overcommit ---------------------------------------------------------------------------------------------------
    def _overcommit(
        self, names: Iterable[str], at: int, pods_of: Callable[[str], list[PodFacts]], reason: str
    ) -> None:
        for name in names:
            manifest = self.nodes.get(name)
            if manifest is None:
                continue
            state = self.engine.node_state(name)
            topology = state.base_topology if state is not None else None
            zones = topology.numa_allocatable if topology is not None else {}
            facts = node_facts(manifest, self.topologies.get(name), zones)
            result = compute(self.config, facts, self.metrics.get(name), pods_of(name), at)
            previous = self.recorded.get(name)
            if result is None:
                if (
                    previous is None
                    or not previous[0].allocatable
                    or all(v is None for v in previous[0].allocatable.values())
                ):
                    continue
                result = Overcommit(
                    allocatable={k: None for k in previous[0].allocatable},
                    inputs={"strategy": "none applies"},
                )
            strategy = node_strategy(self.config, facts)[0]
            if previous is not None and not should_record(previous[0], previous[1], result, at, strategy):
                continue
            self.recorded[name] = (result, at)
            self.owed.append(
                Emit(
                    stream_id=stream_id("node", name),
                    event=NodeAllocatableUpdated(
                        name=name,
                        allocatable={k: v for k, v in result.quantities().items() if v},
                        numa={
                            str(z): {k: _q(k, v) for k, v in sorted(res.items())}
                            for z, res in result.numa.items()
                        },
                        cpu_normalization_ratio=result.cpu_normalization_ratio,
                        amplification=dict(result.amplification),
                        degraded=result.degraded,
                        reason=reason,
                        inputs=result.inputs,
                    ),
                )
            )
            self._push(name)
            self.requeue = self.requeue or f"node {name} allocatable updated"

    def _degrade_deadlines(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, (result, _) in self.recorded.items():
            metric = self.metrics.get(name)
            if name not in self.nodes or not result.enabled or result.degraded or metric is None:
                continue
            if metric.update_time is None:
                continue
            out[name] = metric.update_time + result.degrade_time_minutes * 60_000_000 + 1
        return out

    def _push(self, name: str) -> None:
        """Tell the engine what the node side adds to the node."""
        result = self.recorded[name][0] if name in self.recorded else None
        allocatable = tuple(
            (k, v) for k, v in sorted((result.allocatable if result else {}).items()) if v is not None
        )
        numa = tuple((z, tuple(sorted(r.items()))) for z, r in sorted(result.numa.items())) if result else ()
        ratio = result.amplification.get(CPU, "") if result else ""
        stale = name in self.lost
        overrides = (
            NodeOverrides(
                allocatable=allocatable,
                numa=numa,
                cpu_amplification=ratio if ratio and Decimal(ratio) > 1 else "",
                devices_stale=stale,
            )
            if allocatable or numa or stale
            else None
        )
        state = self.engine.node_state(name)
        if (state.overrides if state is not None else None) != overrides:
            self.engine.set_overrides(name, overrides)

    # -- time -------------------------------------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        deadlines = [
            last + self.grace_s * 1_000_000 for name, last in self.beats.items() if name not in self.lost
        ]
        deadlines += self._degrade_deadlines().values()
        return min(deadlines) if deadlines else None

    def snapshot(self) -> dict[str, object]:
        return {
            "heartbeats": dict(sorted(self.beats.items())),
            "lost": dict(sorted(self.lost.items())),
            "metrics": {k: m.update_time for k, m in sorted(self.metrics.items())},
            "allocatable": {k: r.quantities() for k, (r, _) in sorted(self.recorded.items())},
            "owed": msgspec.to_builtins(self.owed),
            "owed_requeue": self.requeue,
        }


def _q(name: str, value: int) -> str:
    from allot_contracts.quantity import format_quantity

    return format_quantity(name, value)
