"""qos-enforcer's decisions: the QoS of every bound pod and what must hold for it on its node (the PostBind stage).

Consumes pods (``pod.submitted``/``pod.observed`` manifests, ``pod.bound``, ``pod.deleted``, ``quota.evicted``,
``pod.evicted``), its node (``node.registered``, ``device.reported``, ``topology.reported`` and their removals, and
``node.allocatable_updated``: the newest one's batch-cpu is the batch budget, over the Node object's own), the node
agent's usage samples (``qos.usage_sampled``) and applications (``qos.applied``). Emits:

- ``qos.recorded`` per binding: Kubernetes QoS, Koordinator QoS, priority class and the pod's enforcement plan
  (:mod:`qos_enforcer.plan`), revision 1;
- ``qos.plan_recorded`` when a pod's plan changes (containers observed, node labels, devices or CPUs, the CPU share
  pools) or a pod is first seen already bound (observed); ``qos.plan_removed`` when it leaves the node;
- ``qos.node_plan_recorded`` when the node-level targets change (BE suppression from a usage sample, the classes'
  resctrl groups);
- ``pod.evicted`` for BE pods chosen under memory pressure (the binder enacts it; a pod whose eviction the API
  server refused for good, ``pod.eviction_enacted`` not evicted, can be chosen again).

A per-node instance (``ALLOT_INSTANCE``) decides for its node only; without one, for every node. Pure: the only
inputs are events and the config (:mod:`qos_enforcer.config`); the node agent (``adapters/agent.py``) applies the
plans and records what it did.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from allot_contracts import kube
from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    DevicesRemoved,
    DevicesReported,
    Event,
    NodeAllocatableUpdated,
    NodeRegistered,
    NodeRemoved,
    ObjectRef,
    PodBound,
    PodDeleted,
    PodEvicted,
    PodEvictionEnacted,
    PodObserved,
    PodSubmitted,
    QosApplied,
    QosNodePlanRecorded,
    QosPlanRecorded,
    QosPlanRemoved,
    QosRecorded,
    QosUsageSampled,
    QuotaEvicted,
    TopologyRemoved,
    TopologyReported,
)
from allot_contracts.events.cluster import INVENTORY_TYPES
from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.events.qos import CgroupTarget, QosPlan, ResctrlGroup
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.pod import Pod
from allot_runtime.processor import Emit, scoped_node
from qos_enforcer.config import QosConfig, agent_settings, parse_config
from qos_enforcer.plan import SharePools, plan_pod, same_plan, share_pools
from qos_enforcer.plan_node import NodePlan, choose_evictions, plan_node
from qos_enforcer.podfacts import (
    NodeFacts,
    PendingFacts,
    PodFacts,
    bound_facts,
    node_facts,
    pending_facts,
    pod_facts,
)


class BoundPod(msgspec.Struct, kw_only=True):
    """A pod bound to a node this instance enforces: its facts, its current plan, and what the agent last applied."""

    ref: ObjectRef
    node: str
    facts: PodFacts
    annotations: dict[str, str] = {}
    plan: QosPlan | None = None
    leaving: str = ""  # why it is leaving (set by the deletion, until its plan_removed is recorded)
    applied: int = 0  # the last revision the agent applied
    applied_ok: bool = False


class NodeState(msgspec.Struct, kw_only=True):
    facts: NodeFacts
    usage: QosUsageSampled | None = None
    plan: NodePlan | None = None
    revision: int = 0
    applied: int = 0
    applied_ok: bool = False


class QosEnforcer:
    name: ClassVar[str] = "qos-enforcer"
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            *POD_LIFE_TYPES,
            "pod.bound",
            "quota.evicted",
            "pod.evicted",
            "pod.eviction_enacted",
            *INVENTORY_TYPES,
            "node.allocatable_updated",
            "qos.usage_sampled",
            "qos.applied",
        }
    )
    SCOPED: ClassVar[bool] = True  # one instance per node (a DaemonSet pod) decides for its own node

    def __init__(self, config: JsonObject | None = None) -> None:
        self.node = scoped_node(config or {})
        self.config: QosConfig = parse_config(config)
        agent_settings(config, {})  # the node agent's block is checked with the rest, before anything starts
        # pod -> its facts as far as the pod alone says them, from its submission until it is bound (read once on
        # arrival: neither the manifest nor the door's pod is kept, a burst of pending pods stays small)
        self.pending: dict[str, PendingFacts] = {}
        self.pods: dict[str, BoundPod] = {}
        self.on_node: dict[str, set[str]] = {}  # node -> its pods (an index of ``pods``)
        self.nodes: dict[str, NodeState] = {}
        self.evicting: set[str] = set()

    # -- state ---------------------------------------------------------------------------------------------------

    def _mine(self, node: str) -> bool:
        return not self.node or node == self.node

    def _refresh_facts(self, name: str, **source: Any) -> None:
        """Fold one source (the Node, its computed allocatable, its devices or its topology) into a node's facts."""
        state = self._node(name)
        state.facts = node_facts(state.facts, name, **source)

    def _node(self, name: str) -> NodeState:
        state = self.nodes.get(name)
        if state is None:
            state = self.nodes[name] = NodeState(facts=NodeFacts(name=name))
        return state

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case PodSubmitted(pod=pod, uid=uid, manifest=manifest):
                self.pending[pod.key] = pending_facts(manifest, uid, getattr(event, "spec", None))
            case PodObserved(pod=pod, uid=uid, manifest=manifest):
                typed: Pod | None = getattr(event, "spec", None)
                node = str(kube.spec_of(manifest).get("nodeName") or "")
                if not node:
                    self.pending[pod.key] = pending_facts(manifest, uid, typed)
                    return
                self.pending.pop(pod.key, None)
                bound = self.pods.get(pod.key)
                if bound is not None and bound.facts.uid == uid:
                    bound.facts = pod_facts(manifest, uid, bound.annotations or None, typed)
                elif node and self._mine(node):
                    self._add(BoundPod(ref=pod, node=node, facts=pod_facts(manifest, uid, spec=typed)))
            case PodBound(pod=pod, node=node, annotations=annotations):
                pending = self.pending.pop(pod.key, None)
                if pending is not None and self._mine(node):
                    self._add(
                        BoundPod(
                            ref=pod,
                            node=node,
                            facts=bound_facts(pending, annotations),
                            annotations=annotations,
                        )
                    )
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod) | PodEvicted(pod=pod):
                self.pending.pop(pod.key, None)
                bound = self.pods.get(pod.key)
                if bound is not None:
                    if isinstance(event, PodEvicted) and own:
                        self.evicting.add(pod.key)
                        return
                    evicted = pod.key in self.evicting
                    bound.leaving = "PodEvicted" if evicted else type(event).__name__
                    self.evicting.discard(pod.key)
            case PodEvictionEnacted(pod=pod, uid=uid, evicted=False) if pod.key in self.evicting:
                bound = self.pods.get(pod.key)
                if bound is not None and (not uid or bound.facts.uid == uid):
                    # Kubernetes refused the eviction for good: the pod stays, and pressure may choose it again
                    self.evicting.discard(pod.key)
            case QosRecorded(pod=pod, plan=plan) if own and plan is not None:
                if pod.key in self.pods:
                    self.pods[pod.key].plan = plan
            case QosPlanRecorded(pod=pod, plan=plan) if own:
                if pod.key in self.pods:
                    self.pods[pod.key].plan = plan
            case QosPlanRemoved(pod=pod) if own:
                self._drop(pod.key)
                self.evicting.discard(pod.key)
            case QosNodePlanRecorded(
                node=node, revision=revision, cgroups=cgroups, resctrl=resctrl, basis=basis
            ) if own:
                state = self._node(node)
                state.revision = revision
                quota = basis.get("be_quota_milli") if isinstance(basis, dict) else None
                state.plan = NodePlan(
                    cgroups=list(cgroups), resctrl=list(resctrl), basis=dict(basis), be_quota_milli=quota
                )
            case NodeRegistered(name=name, manifest=manifest) if self._mine(name):
                self._refresh_facts(name, node=manifest)
            case NodeAllocatableUpdated(name=name, allocatable=allocatable) if self._mine(name):
                self._refresh_facts(name, computed=allocatable)
            case DevicesReported(name=name, inventory=inventory) if self._mine(name):
                self._refresh_facts(name, inventory=inventory)
            case TopologyReported(name=name, manifest=manifest) if self._mine(name):
                self._refresh_facts(name, topology=manifest)
            case NodeRemoved(name=name) if name in self.nodes:
                self.nodes[name].facts = NodeFacts(name=name, gpus=self.nodes[name].facts.gpus)
            case DevicesRemoved(name=name) if name in self.nodes:
                self.nodes[name].facts = msgspec.structs.replace(self.nodes[name].facts, gpus={})
            case TopologyRemoved(name=name) if name in self.nodes:
                self.nodes[name].facts = msgspec.structs.replace(self.nodes[name].facts, cpus=())
            case QosUsageSampled(node=node) if self._mine(node):
                self._node(node).usage = event
            case QosApplied(node=node, pod=pod, revision=revision, ok=ok) if self._mine(node):
                if pod is None:
                    state = self._node(node)
                    state.applied, state.applied_ok = revision, ok
                elif pod.key in self.pods:
                    self.pods[pod.key].applied, self.pods[pod.key].applied_ok = revision, ok
            case _:
                pass

    # -- decisions -----------------------------------------------------------------------------------------------

    def _add(self, pod: BoundPod) -> None:
        self._drop(pod.ref.key)
        self.pods[pod.ref.key] = pod
        self.on_node.setdefault(pod.node, set()).add(pod.ref.key)

    def _drop(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            self.on_node.get(pod.node, set()).discard(key)

    def _on(self, node: str) -> dict[str, BoundPod]:
        pods = (self.pods[key] for key in sorted(self.on_node.get(node, ())))
        return {pod.ref.key: pod for pod in pods if not pod.leaving}

    def _pools(self, node: str) -> SharePools | None:
        state = self._node(node)
        if not self.config.share_pools or not state.facts.cpus:
            return None
        holders = [self.pods[k].facts for k in self.on_node.get(node, ()) if self.pods[k].facts.cpuset]
        return share_pools(state.facts.cpus, [p for p in holders if not self.pods[p.key].leaving])

    def _replan(self, node: str, reason: str, *, skip: str = "") -> list[Emit]:
        """New revisions for the pods on ``node`` whose plan changed (``skip``: the pod being decided right now)."""
        state = self._node(node)
        on = self._on(node)
        pools = self._pools(node)
        out = []
        for key, pod in on.items():
            if key == skip or pod.plan is None:
                continue
            plan = plan_pod(pod.facts, state.facts, self.config, revision=pod.plan.revision + 1, pools=pools)
            if not same_plan(plan, pod.plan):
                out.append(
                    Emit(
                        stream_id=stream_id("pod", key),
                        event=QosPlanRecorded(
                            pod=pod.ref, uid=pod.facts.uid, node=node, plan=plan, reason=reason
                        ),
                    )
                )
        return out

    def _node_plan(self, node: str) -> list[Emit]:
        state = self._node(node)
        previous = state.plan
        facts = {key: pod.facts for key, pod in self._on(node).items()}
        plan = plan_node(
            state.facts,
            self.config,
            pods=facts,
            usage=state.usage,
            previous_quota=previous.be_quota_milli if previous is not None else None,
        )
        if previous is not None and _values(previous) == _values(plan):
            return []  # the same values (the numbers behind them may have moved within the update threshold)
        if previous is None and not plan.cgroups and not plan.resctrl:
            return []
        return [
            Emit(
                stream_id=stream_id("qos", node),
                event=QosNodePlanRecorded(
                    node=node,
                    revision=state.revision + 1,
                    cgroups=plan.cgroups,
                    resctrl=plan.resctrl,
                    basis=plan.basis,
                    warnings=plan.warnings,
                ),
            )
        ]

    def _first_plan(self, pod: BoundPod) -> QosPlan:
        pools = (
            self._pools(pod.node) if not pod.facts.cpuset and pod.facts.koord_qos in ("LS", "BE") else None
        )
        return plan_pod(pod.facts, self._node(pod.node).facts, self.config, revision=1, pools=pools)

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case PodBound(pod=ref, node=node):
                pod = self.pods.get(ref.key)
                if pod is None or pod.node != node:
                    return []
                plan = self._first_plan(pod)
                out = [
                    Emit(
                        stream_id=stream_id("pod", ref.key),
                        event=QosRecorded(
                            pod=ref,
                            node=node,
                            kube_qos=pod.facts.kube_qos,
                            koord_qos=pod.facts.koord_qos,
                            priority_class=pod.facts.priority_class,
                            plan=plan,
                        ),
                    )
                ]
                if pod.facts.cpuset:
                    out += self._replan(node, f"{ref.key} holds CPUs {len(pod.facts.cpuset)}", skip=ref.key)
                return out
            case PodObserved(pod=ref):
                pod = self.pods.get(ref.key)
                if pod is None or pod.leaving:
                    return []
                if pod.plan is None:
                    plan = self._first_plan(pod)
                    return [
                        Emit(
                            stream_id=stream_id("pod", ref.key),
                            event=QosPlanRecorded(
                                pod=ref, uid=pod.facts.uid, node=pod.node, plan=plan, reason="observed bound"
                            ),
                        ),
                        *(
                            self._replan(pod.node, "observed pod holds CPUs", skip=ref.key)
                            if pod.facts.cpuset
                            else []
                        ),
                    ]
                return self._replan(pod.node, "pod observed")
            case PodDeleted(pod=ref) | QuotaEvicted(pod=ref) | PodEvicted(pod=ref):
                pod = self.pods.get(ref.key)
                if pod is None or not pod.leaving:
                    return []
                out = [
                    Emit(
                        stream_id=stream_id("pod", ref.key),
                        event=QosPlanRemoved(
                            pod=ref,
                            uid=pod.facts.uid,
                            node=pod.node,
                            reason=_LEAVING.get(pod.leaving, "deleted"),
                        ),
                    )
                ]
                if pod.facts.cpuset:
                    out += self._replan(pod.node, f"{ref.key} freed its CPUs")
                return out
            case NodeRegistered(name=name) | DevicesReported(name=name) | TopologyReported(name=name) if (
                self._mine(name)
            ):
                what = {
                    "NodeRegistered": "node",
                    "DevicesReported": "devices",
                    "TopologyReported": "CPU topology",
                }
                return self._replan(name, f"{what[type(event).__name__]} changed") + self._node_plan(name)
            case NodeAllocatableUpdated(name=name) if self._mine(name):
                return self._node_plan(name)  # the batch budget BE suppression stays within
            case QosUsageSampled(node=node) if self._mine(node):
                return self._node_plan(node) + self._evictions(node, event)
            case _:
                return []

    def _evictions(self, node: str, usage: QosUsageSampled) -> list[Emit]:
        on = self._on(node)
        victims, detail = choose_evictions(
            usage, {k: p.facts for k, p in on.items()}, self.config, exclude=self.evicting
        )
        out = []
        for key in victims:
            pod = on[key]
            used = usage.pods[key].memory_bytes if key in usage.pods else 0
            message = (
                f"node memory {usage.memory_used_bytes * 100 // max(usage.memory_capacity_bytes, 1)}% >= "
                f"memoryEvictThresholdPercent {self.config.thresholds.memory_evict_percent}%: evicting BE pod "
                f"(priority {pod.facts.priority}, using {used} bytes)"
            )
            out.append(
                Emit(
                    stream_id=stream_id("pod", key),
                    event=PodEvicted(
                        pod=pod.ref,
                        uid=pod.facts.uid,
                        node=node,
                        cause="MemoryPressure",
                        message=message,
                        detail={**detail, "pod_memory_bytes": used},
                    ),
                )
            )
        return out

    # -- what the node agent reads (under the runtime's lock) ----------------------------------------------------

    def desired(self, node: str) -> dict[str, tuple[ObjectRef, str, QosPlan, int, bool]]:
        """The current plan of every pod on ``node``: key -> (pod, uid, plan, revision the agent last applied,
        whether that application held)."""
        return {
            key: (pod.ref, pod.facts.uid, pod.plan, pod.applied, pod.applied_ok)
            for key, pod in self._on(node).items()
            if pod.plan is not None
        }

    def node_desired(self, node: str) -> tuple[int, list[CgroupTarget], list[ResctrlGroup], int, bool] | None:
        """The node plan: (revision, cgroup targets, resctrl groups, revision last applied, whether it held)."""
        state = self.nodes.get(node)
        if state is None or state.plan is None:
            return None
        return state.revision, state.plan.cgroups, state.plan.resctrl, state.applied, state.applied_ok

    def snapshot(self) -> dict[str, object]:
        return {
            "scope": self.node,
            "pods": {
                key: {
                    "node": pod.node,
                    "revision": pod.plan.revision if pod.plan else 0,
                    "applied": pod.applied,
                    "qos": f"{pod.facts.kube_qos}/{pod.facts.koord_qos}",
                }
                for key, pod in sorted(self.pods.items())
            },
            "nodes": {
                name: {"revision": state.revision, "applied": state.applied}
                for name, state in sorted(self.nodes.items())
            },
            "evicting": sorted(self.evicting),
        }


def _values(plan: NodePlan) -> tuple[list[tuple[str, str, JsonObject]], list[ResctrlGroup]]:
    return [(t.scope, t.path, t.settings) for t in plan.cgroups], plan.resctrl


_LEAVING = {"PodDeleted": "deleted", "QuotaEvicted": "evicted by quota", "PodEvicted": "evicted"}
