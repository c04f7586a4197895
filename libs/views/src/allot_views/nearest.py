"""Nearest miss and queue place of a pending pod, computed at explain time from what the log recorded.

Nothing here is a decision: no decision payload or digest changes. The inputs are the latest recorded refusal
(``pod.unschedulable``'s per-node reasons, ``quota.waiting``'s numbers), the pod's spec as read at the door, and a
fold of the log (:class:`allot_views.cluster.ClusterView`) for what each node holds now.

**Closest node.** Among the nodes whose reasons the decision recorded (the first ``maxNodeReasons`` by name), the
closest is the one with, in order: the fewest failing reasons (filters); then the fewest reasons that freeing
capacity cannot fix (a taint, an affinity, a cordon: every reason that is not an ``Insufficient …`` / ``Too many
pods`` shortage); then the smallest shortfall in the dominant dimension (the largest ``missing / allocatable`` over
the resources the node lacks, 1 when unknown); then the node name.

**Smallest change.** For that node, one change per failing reason: free the missing amount of a resource (the
request minus what the node has free now), free N GPUs of the size the pod asks for (naming the pods that hold the
cards with the fewest holders), remove a taint, uncordon the node, or relabel it. For quota, the amount to raise the
quota by in each exceeded dimension: ``used + request - limit``.

**Queue place.** Waiting pods (every pod whose latest state is a waiting one) in device-allocator's queue order:
priority descending, then arrival (the position of ``pod.submitted``), then name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_views.units import human

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent
    from allot_views.cluster import ClusterView, GpuRow

__all__ = [
    "Cluster",
    "gang_spec",
    "group_quota_change",
    "nearest_lines",
    "note_submitted",
    "queue_lines",
    "quota_change",
]

GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
GPU_RATIO = "koordinator.sh/gpu-memory-ratio"
_TAINT = re.compile(r"untolerated taint \{(?P<key>[^:}]*): ?(?P<value>[^}]*)\}")
_INSUFFICIENT = re.compile(r"^Insufficient (?P<resource>\S+)$")
# the phases of a pod still in the queue (views.HELD without BindFailed: a failed bind is the binder's to retry)
WAITING = ("Pending", "Queued", "Waiting", "Admitted", "Scheduling", "Unschedulable")
PREEMPTING = "PreemptionInProgress"  # device_allocator.nominations: its victims are being evicted
HELD_FOR_PREEMPTOR = "HeldForPreemptor"
HELD_FOR_GANG = "HeldForGang"


@dataclass
class Cluster:
    """The fold of the whole log explain reads: the cluster view, and each pod's priority and arrival."""

    view: ClusterView
    priority: dict[str, int] = field(default_factory=dict)
    arrival: dict[str, int] = field(default_factory=dict)
    specs: dict[str, JsonObject] = field(default_factory=dict)  # pod -> its spec as the door read it
    _gpus: dict[str, list[GpuRow]] | None = None

    def gpus(self, node: str) -> list[GpuRow]:
        """The node's GPUs with their holders (computed once for the whole cluster)."""
        if self._gpus is None:
            from allot_views.cluster import gpu_rows

            self._gpus = gpu_rows(self.view)
        return self._gpus.get(node, [])


def note_submitted(
    priority: dict[str, int], arrival: dict[str, int], specs: dict[str, JsonObject], record: RecordedEvent
) -> None:
    """A ``pod.submitted`` record's priority, arrival (its log position) and spec, into the three maps."""
    p = record.payload_dict()
    key = f"{p['pod']['namespace']}/{p['pod']['name']}"
    spec = dict(p.get("spec") or {})
    priority[key] = int(spec.get("priority") or 0)
    specs[key] = spec
    arrival[key] = record.position


def _obj(value: JsonValue) -> Mapping[str, JsonValue]:
    """A part of a spec or record that should be an object (``{}`` when it is missing or is not one)."""
    return value if isinstance(value, dict) else {}


def _int(value: JsonValue) -> int:
    """A count or canonical amount of a spec or record (a number, or its text)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"{value!r} is not a number")
    return int(value)


def _quantity(value: JsonValue) -> str | int | float:
    """A quantity of a record, for the quantity parsers (``""`` for what is no quantity: they refuse it)."""
    return value if isinstance(value, str | int | float) else ""


def _capacity(message: str) -> bool:
    return message.startswith(("Insufficient ", "Too many pods")) or "not enough" in message


@dataclass(frozen=True)
class _Node:
    name: str
    reasons: tuple[str, ...]
    changes: tuple[str, ...]
    dominant: float

    @property
    def rank(self) -> tuple[int, int, float, str]:
        hard = sum(not _capacity(r) for r in self.reasons)
        return (len(self.reasons), hard, self.dominant, self.name)


def _free(cluster: Cluster | None, node: str) -> tuple[dict[str, int], dict[str, int]] | None:
    """(allocatable, free) of a node now, canonical units; None when the log has no allocatable for it."""
    if cluster is None or node not in cluster.view.nodes or not cluster.view.nodes[node].kube_allocatable:
        return None
    from allot_views.cluster import node_allocated

    allocatable = cluster.view.nodes[node].kube_allocatable
    used, _, count = node_allocated(cluster.view, node)
    used = {**used, "pods": count}
    return allocatable, {r: v - used.get(r, 0) for r, v in allocatable.items()}


_SCOPES = {"PCIe": ("pcie", "PCIe switch"), "NUMANode": ("numa", "NUMA node")}


def _scopes(spec: Mapping[str, JsonValue], cluster: Cluster | None, node: str) -> tuple[dict[int, str], str]:
    """GPU minor -> the PCIe switch or NUMA node it sits on when the pod requires one (else all ""), and its name."""
    scope = _obj(_obj(spec.get("hints")).get("gpu")).get("required_scope", "")
    if (
        not isinstance(scope, str)
        or scope not in _SCOPES
        or cluster is None
        or node not in cluster.view.nodes
    ):
        return {}, ""
    attribute, name = _SCOPES[scope]
    devices = cluster.view.nodes[node].inventory.get("gpu", ())
    return {d.minor: str(getattr(d, attribute)) for d in devices}, name


def _gpu_change(
    spec: Mapping[str, JsonValue],
    rows: list[GpuRow],
    node: str,
    scopes: tuple[dict[int, str], str] = ({}, ""),
) -> tuple[str, int] | None:
    """ "free N GPU(s) of SIZE on node X (held by …)" and N, from the node's cards (within the one PCIe switch or
    NUMA node that needs the fewest freed when the pod requires one); None without a GPU request."""
    request = _obj(_obj(spec.get("devices")).get("gpu"))
    if not request or not rows:
        return None
    where, scope_name = scopes
    if where:
        groups = {g: [r for r in rows if where.get(r.index, "") == g] for g in sorted(set(where.values()))}
        best: tuple[int, str, tuple[str, int]] | None = None
        for group, members in groups.items():
            found = _gpu_change(spec, members, node)
            if (
                found is not None
                and found[1] <= len(members)
                and (best is None or (found[1], group) < best[:2])
            ):
                best = (found[1], group, found)
        if best is None:
            largest = max((len(m) for m in groups.values()), default=0)
            need = _int(request.get("count") or 0)
            text = f"none: no {scope_name} of node {node} holds {need} GPU(s) (the largest holds {largest})"
            return text, len(rows) + 1
        text, missing = best[2]
        return text.replace(f"on node {node}", f"on {scope_name} {best[1]} of node {node}", 1), missing
    per = _obj(request.get("per_instance"))
    need = _int(request.get("count") or len(rows))

    def wanted(row: GpuRow) -> tuple[int, int]:
        memory = per.get(GPU_MEMORY) or row.memory * _int(per.get(GPU_RATIO, 100)) // 100
        return _int(per.get(GPU_CORE, 100)), _int(memory)

    def fits(row: GpuRow) -> bool:
        cores, memory = wanted(row)
        held_cores = sum(h[1] for h in row.holders)
        held_memory = sum(h[2] for h in row.holders)
        return row.healthy and row.cores - held_cores >= cores and row.memory - held_memory >= memory

    missing = need - sum(fits(row) for row in rows)
    if missing <= 0:
        return None
    healthy = sum(r.healthy for r in rows)
    if need > healthy:
        return f"none: node {node} has {healthy} healthy GPU(s), the pod needs {need}", need
    busy = sorted((r for r in rows if r.healthy and not fits(r)), key=lambda r: (len(r.holders), r.index))
    holders = sorted({h[0] for r in busy[:missing] for h in r.holders})
    cores, memory = wanted(rows[0])
    size = "whole " if cores >= 100 else f"{cores}% of "
    what = f"free {missing} GPU(s) ({size}{human(GPU_MEMORY, memory)} each) on node {node}"
    return (f"{what} (held by {', '.join(holders)})" if holders else what), missing


def _change(
    reason: str, node: str, spec: Mapping[str, JsonValue], cluster: Cluster | None
) -> tuple[str, float]:
    """The change that clears one reason on one node, and its shortfall share (0 for non-capacity reasons)."""
    if m := _TAINT.search(reason):
        return f"remove taint {{{m['key']}: {m['value']}}} from node {node} (or tolerate it)", 0.0
    if "were unschedulable" in reason:
        return f"uncordon node {node}", 0.0
    if "no reservations match reservation affinity" in reason:
        return (
            f"create a Reservation on node {node} that matches the pod's reservation affinity (or change it)",
            0.0,
        )
    if "no reservation(s) to meet the requirements" in reason:
        return f"free room in a Reservation the pod may use on node {node} (or reserve more there)", 0.0
    if "node affinity/selector" in reason:
        return f"label node {node} to match the pod's node affinity/selector (or relax them)", 0.0
    resource = (
        m["resource"] if (m := _INSUFFICIENT.match(reason)) else ("pods" if "Too many pods" in reason else "")
    )
    rows = _gpu_rows(cluster, node)
    scopes = _scopes(spec, cluster, node) if "Topology Scoped" in reason else ({}, "")
    if "gpu" in reason.lower() and (gpu := _gpu_change(spec, rows, node, scopes)) is not None:
        return gpu[0], gpu[1] / max(len(rows), 1)
    facts = _free(cluster, node)
    if resource and facts is not None:
        allocatable, free = facts
        request = 1 if resource == "pods" else _int(_obj(spec.get("requests")).get(resource, 0))
        missing = request - free.get(resource, 0)
        if missing > 0:
            share = missing / allocatable[resource] if allocatable.get(resource) else 1.0
            return f"free {human(resource, _display(resource, missing))} {resource} on node {node}", share
        return (
            f"none for {resource}: node {node} has enough free now (pods left or were evicted since the decision)",
            0.0,
        )
    if resource:
        asks = _obj(spec.get("requests")).get(resource)
        asked = f" (the pod requests {human(resource, _display(resource, _int(asks)))})" if asks else ""
        return f"free {resource} on node {node}{asked}", 1.0
    return f"on node {node}: {reason}", 0.0


def _display(resource: str, canonical: int) -> Any:
    """A canonical amount in the units ``human`` reads (cpu is kept in millicores)."""
    return f"{canonical}m" if resource == "cpu" else canonical


def _gpu_rows(cluster: Cluster | None, node: str) -> list[GpuRow]:
    return [] if cluster is None else cluster.gpus(node)


def gang_spec(specs: list[JsonObject]) -> JsonObject:
    """The failing gang member's spec (the last of ``specs``, members in attempt order) with the requests of the
    members placed before it added, as if they had all gone to the same node (the engine does not record where the
    attempt put them): GPU counts add up when every member asks for GPUs of the same size."""
    *before, failed = specs
    requests: JsonObject = dict(_obj(failed.get("requests")))
    for other in before:
        for resource, value in _obj(other.get("requests")).items():
            requests[resource] = _int(requests.get(resource, 0)) + _int(value)
    devices: JsonObject = dict(_obj(failed.get("devices")))
    gpu = _obj(devices.get("gpu"))
    others = [_obj(_obj(o.get("devices")).get("gpu")) for o in before]
    if gpu and all(g and g.get("per_instance") == gpu.get("per_instance") and g.get("count") for g in others):
        devices["gpu"] = {
            **gpu,
            "count": _int(gpu.get("count") or 0) + sum(_int(g["count"]) for g in others if g),
        }
    return {**failed, "requests": requests, "devices": devices}


def nearest_lines(
    reasons: dict[str, list[str]],
    spec: Mapping[str, JsonValue],
    cluster: Cluster | None = None,
    note: str = "",
) -> list[str]:
    """``nearest:`` the closest node and the smallest change that would let the pod fit there (module docstring)."""
    nodes: list[_Node] = []
    for name, node_reasons in sorted(reasons.items()):
        if not node_reasons:
            continue
        changes = [_change(r, name, spec, cluster) for r in node_reasons]
        nodes.append(
            _Node(
                name=name,
                reasons=tuple(node_reasons),
                changes=tuple(dict.fromkeys(c for c, _ in changes)),
                dominant=max((s for _, s in changes), default=0.0),
            )
        )
    if not nodes:
        return []
    best = min(nodes, key=lambda node: node.rank)
    failing = f"{len(best.reasons)} failing check(s): {'; '.join(best.reasons)}"
    return [f"nearest:   node {best.name} ({failing}){note}", *(f"  change: {c}" for c in best.changes)]


def quota_change(detail: Mapping[str, JsonValue] | None, quota: str) -> list[str]:
    """``change: raise quota Q by N <dim>`` for every exceeded dimension of a ``quota.waiting`` decision."""
    if not detail:
        return []
    from allot_contracts.quantity import QuantityError, parse_quantity

    lines: list[str] = []
    dims = detail.get("exceed_dimensions")
    for dim in (str(d) for d in dims) if isinstance(dims, list) else ():
        try:
            limit = parse_quantity(_quantity(_obj(detail.get("limit", {})).get(dim, "0")))
            used = parse_quantity(_quantity(_obj(detail.get("used", {})).get(dim, "0")))
            request = parse_quantity(_quantity(_obj(detail.get("request", {})).get(dim, "0")))
        except QuantityError:
            continue
        missing = used + request - limit
        if missing > 0:
            amount = human(dim, f"{float(missing * 1000):g}m" if dim == "cpu" else str(missing))
            lines.append(
                f"  change: raise quota {detail.get('quota') or quota} by {amount} {dim} (limit "
                f"{human(dim, str(limit))}, used {human(dim, str(used))}, the pod requests {human(dim, str(request))})"
                f", or free that much of its use"
            )
    return lines


def group_quota_change(
    first: Mapping[str, JsonValue], specs: list[JsonObject], used_before: Mapping[str, str] | None = None
) -> list[str]:
    """``change: raise quota Q by N <dim>`` for a gang group that does not fit its quota as a whole: the quota's used
    before any member is counted (``used_before``; records without it kept that in ``first``) plus every member's
    request, over its limit (``first``: the admission record quota-manager kept)."""
    from allot_contracts.quantity import QuantityError, to_canonical

    lines: list[str] = []
    limits = _obj(first.get("limit"))
    used_then: Mapping[str, JsonValue] = _obj(first.get("used")) if used_before is None else used_before
    for dim in sorted(limits):
        try:
            limit = to_canonical(dim, _quantity(limits[dim]))
            used = to_canonical(dim, _quantity(used_then.get(dim, "0")))
        except QuantityError:
            continue
        asked = sum(_int(_obj(spec.get("requests")).get(dim, 0)) for spec in specs)
        if used + asked > limit:
            shown = [human(dim, _display(dim, v)) for v in (used + asked - limit, limit, used, asked)]
            lines.append(
                f"  change: raise quota {first.get('quota', '')} by {shown[0]} {dim} (limit {shown[1]}, used "
                f"{shown[2]}, the {len(specs)} members request {shown[3]}), or free that much of its use"
            )
    return lines


def _stage(phase: str, codes: list[str], nominated: bool) -> tuple[str, str]:
    """(queue stage, what the pod waits for) from its latest state in the cluster view; ``nominated``: a preemption
    decided for it after its latest refusal."""
    if nominated and phase == "Unschedulable":
        return "preemption-nominated", "its preemption victims to leave the nominated node(s)"
    if phase == "Waiting" and "GangWaiting" in codes:
        return "gang", "the rest of its gang to arrive"
    if phase == "Waiting":
        return "quota", "its quota to have room (pods of the quota finishing, or a larger quota)"
    if PREEMPTING in codes:
        return "preemption-nominated", "its preemption victims to leave the nominated node(s)"
    if HELD_FOR_PREEMPTOR in codes:
        return "placement", "a preemptor nominated on the node(s) it fits to be placed"
    if HELD_FOR_GANG in codes:
        return "gang", "a reserving gang to be placed (capacity is held back for it)"
    if any("Reservation" in c for c in codes):
        return "reservation", "a reservation it may use to fit or be placed"
    if phase == "Unschedulable":
        return "placement", "capacity on a node that fits (a capacity change sends it back)"
    return "placement", "its attempt under way"


def queue_lines(key: str, cluster: Cluster | None, *, nominated: bool = False) -> list[str]:
    """``queue:`` the stage, attempts, position among the waiting pods (queue order), and what the pod waits for;
    ``nominated``: a preemption was decided for the pod after its latest refusal."""
    if cluster is None or key not in cluster.view.pods or cluster.view.pods[key].phase not in WAITING:
        return []
    waiting = sorted(
        (k for k, p in cluster.view.pods.items() if p.phase in WAITING),
        key=lambda k: (-cluster.priority.get(k, 0), cluster.arrival.get(k, 0), k),
    )
    pod = cluster.view.pods[key]
    stage, waits_for = _stage(pod.phase, pod.codes, nominated)
    place = waiting.index(key) + 1
    ahead = ", ".join(f"{k} (priority {cluster.priority.get(k, 0)})" for k in waiting[: place - 1][:5])
    more = f" and {place - 6} more" if place > 6 else ""
    lines = [
        f"queue:     stage {stage}, attempt {max(pod.attempts, 1)}, position {place} of {len(waiting)} "
        f"(priority {cluster.priority.get(key, 0)}, then arrival)",
        f"  waits for: {waits_for}",
    ]
    return lines + ([f"  ahead: {ahead}{more}"] if ahead else [])
