"""The descheduler's GPUDefrag rounds: the projected state the planner reads, and the decision it records.

Projection (kept by :class:`GpuHoldings`): the GPUs each bound pod holds, from its placement decision's
``scheduling.koordinator.sh/device-allocated`` (``pod.placed``, ``gang.group_placed``) or the same annotation of an
observed pod; a node's GPUs are its allocatable ``koordinator.sh/gpu-core`` / 100, its model its
``node.koordinator.sh/gpu-model`` label. Waiting pods: the GPU pods the scheduler refused, by name: those whose
latest placement outcome in the log is ``pod.unschedulable`` (or their gang group's ``gang.group_unschedulable``)
and that were not placed, bound or deleted since; a pod merely submitted, not yet tried, is not waiting. The FGD
measure is taken against the typical pods (shapes covering 95 % of the pods, weighted by count) of the pods the
engine knows. Pure: the round's time and number come in as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from allot_contracts.events import (
    DefragPlanned,
    Event,
    GangGroupPlaced,
    GangGroupUnschedulable,
    PodBound,
    PodDeleted,
    PodObserved,
    PodPlaced,
    PodUnschedulable,
)
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import annotation_object
from allot_contracts.objects.inventory import NodeInfo
from allot_descheduling import (
    DefragInput,
    DefragLimits,
    GpuNode,
    GpuPod,
    PendingGpuPod,
    PodInput,
    Profile,
    gang_moves_whole,
    plan_round,
)
from allot_descheduling.evictor import refusal
from allot_placement.fragmentation import FragModel, pod_shape, typical_pods
from allot_reservation.world import PodRecord

__all__ = ["GpuHoldings", "defrag_round"]

Held = tuple[tuple[int, int], ...]


def _held(annotations: Mapping[str, object]) -> Held:
    """``(minor, milli)`` of each GPU in a device-allocated annotation (a dict, or its JSON text)."""
    gpus: Any = annotation_object(annotations, n.ANN_DEVICE_ALLOCATED).get(n.GPU, [])
    out: list[tuple[int, int]] = []
    for entry in gpus:
        res = entry.get("resources") or {}
        share = res.get(n.GPU_CORE, res.get(n.GPU_MEMORY_RATIO, 100))
        try:
            out.append((int(entry["minor"]), int(share) * 10))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(sorted(out))


class GpuHoldings:
    """The GPUs each placed pod holds, and the pods the scheduler refused and that wait still (its projection;
    the rest the engine's world has)."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}
        self.refused: set[str] = set()

    def apply(self, event: Event) -> None:
        match event:
            case PodPlaced(pod=pod, decision=decision):
                self.held[pod.key] = _held(decision.annotations)
                self.refused.discard(pod.key)
            case GangGroupPlaced(decisions=decisions, members=members):
                for member, decision in decisions.items():
                    annotations = decision.get("annotations") if isinstance(decision, dict) else None
                    self.held[member] = _held(annotations or {})
                self.refused.difference_update([*members, *decisions])
            case PodUnschedulable(pod=pod):
                self.refused.add(pod.key)
            case GangGroupUnschedulable(members=members, failed_pod=failed):
                self.refused.update(members or ([failed] if failed else []))
            case PodBound(pod=pod):
                self.refused.discard(pod.key)
            case PodObserved(pod=pod, manifest=manifest):
                annotations = (manifest.get("metadata") or {}).get("annotations") or {}
                self.held[pod.key] = _held(annotations)
                if (manifest.get("spec") or {}).get("nodeName"):
                    self.refused.discard(pod.key)
            case PodDeleted(pod=pod):
                self.held.pop(pod.key, None)
                self.refused.discard(pod.key)
            case _:
                pass


def _nodes(nodes: Mapping[str, NodeInfo], pods: Iterable[tuple[PodRecord, Held]]) -> tuple[GpuNode, ...]:
    used_cpu: dict[str, int] = {}
    used_gpu: dict[str, dict[int, int]] = {}
    for rec, held in pods:
        requests = rec.pod.requests if rec.pod is not None else {}
        used_cpu[rec.node] = used_cpu.get(rec.node, 0) + requests.get(n.CPU, 0)
        for minor, milli in held:
            per = used_gpu.setdefault(rec.node, {})
            per[minor] = per.get(minor, 0) + milli
    out = []
    for name, info in sorted(nodes.items()):
        gpus = info.allocatable.get(n.GPU_CORE, 0) // 100
        if not gpus:
            continue
        per = used_gpu.get(name, {})
        out.append(
            GpuNode(
                name=name,
                model=info.labels.get(n.LABEL_GPU_MODEL, ""),
                cpu_free=info.allocatable.get(n.CPU, 0) - used_cpu.get(name, 0),
                free=tuple(max(1000 - per.get(i, 0), 0) for i in range(gpus)),
                schedulable=not info.unschedulable,
            )
        )
    return tuple(out)


def defrag_round(
    profile: Profile,
    *,
    number: int,
    nodes: Mapping[str, NodeInfo],
    records: Mapping[str, PodRecord],
    held: Mapping[str, Held],
    refused: Iterable[str],
    inputs: Mapping[str, PodInput],
    caps: tuple[int, int, int],
    dry: bool,
) -> DefragPlanned:
    """One GPUDefrag round of ``profile`` over the projected state (``refused``: the pods the scheduler refused
    that wait still; ``inputs``: the bound pods as the evictor
    filter reads them, with the migration controller's evictor args in ``profile``)."""
    args = profile.defrag
    assert args is not None
    shapes = {k: pod_shape(r.pod) for k, r in sorted(records.items()) if r.pod is not None}
    typical = typical_pods(shapes.values())
    model = FragModel(typical)
    bound = [(r, held.get(k, ())) for k, r in sorted(records.items()) if r.node]
    evictor = profile.evictor_args()
    pods = []
    for rec, gpus in bound:
        pod = inputs.get(rec.key)
        if not gpus or pod is None:
            continue
        code, _ = refusal(pod, evictor)
        ns = pod.namespace
        if (args.include_namespaces and ns not in args.include_namespaces) or ns in args.exclude_namespaces:
            code = code or "NamespaceExcluded"
        if pod.reservation or pod.migrating:
            code = code or ("Reserved" if pod.reservation else "Migrating")
        pods.append(
            GpuPod(
                key=rec.key,
                uid=rec.uid,
                node=rec.node,
                cpu=pod.requests.get(n.CPU, 0),
                gpus=gpus,
                models=shapes[rec.key][3] if rec.key in shapes else (),
                gang=pod.gang,
                gang_whole=gang_moves_whole(pod.annotations, args.gang_whole),
                refused=code,
            )
        )
    waiting = frozenset(refused)
    pending = tuple(
        PendingGpuPod(key=k, cpu=s[0], gpu_count=s[1], gpu_milli=s[2], models=s[3])
        for k, s in shapes.items()
        if s[1] and k in waiting and not records[k].node
    )
    data = DefragInput(
        nodes=_nodes(nodes, bound),
        pods=tuple(pods),
        pending=pending,
        limits=DefragLimits(
            max_per_plan=args.max_per_plan,
            max_plans=args.max_plans,
            per_node=caps[0],
            per_namespace=caps[1],
            total=caps[2],
        ),
    )
    out = plan_round(data, model.frag)
    return DefragPlanned(
        profile=profile.name,
        round=number,
        dry_run=dry,
        message=out.message + (" (dry run: no job asked for)" if dry and out.plans else ""),
        frag_weight=model.total_weight,
        frag_before=out.frag_before,
        frag_after=out.frag_after,
        free_milli=out.free_milli,
        plans=out.plans,
        waiting=out.waiting,
    )
