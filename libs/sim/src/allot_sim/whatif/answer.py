"""The answer to ``allot what-if -f``, per pod, read from the records the trial decided (pure: no log, no IO).

For each pod asked about: its final outcome (the last decision about it: Scheduled, Unschedulable, Waiting,
Rejected), the node, devices (GPU minors and the share of each), CPU set and NUMA nodes it would get, the quota that
admits it (or makes it wait) and every borrow (from which parent, lent by which sibling and how), the pods it would
preempt, what it would wait for, and the nearest miss when it does not fit (:mod:`allot_views.nearest`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from allot_views.decisions import decisions_of

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent

GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
Nearest = Callable[[dict[str, list[str]], dict[str, Any]], list[str]]


def _key(p: dict[str, Any]) -> str:
    ref = p.get("pod") or {}
    return f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else str(ref)


def _devices(allocation: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per device kind, each device given: its minor and its share (GPU core percent and memory bytes)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind, devices in sorted((allocation.get("devices") or {}).items()):
        out[kind] = [
            {"minor": d.get("minor"), **{k: v for k, v in (d.get("resources") or {}).items()}}
            for d in devices or []
        ]
    return out


def quota_of(p: dict[str, Any], admitted: bool) -> dict[str, Any]:
    """A ``quota.admitted`` / ``quota.waiting`` decision (or a gang member's admission record, ``detail`` alone)
    as the answer shows it."""
    detail = p.get("detail") or {}
    borrows = [
        {
            "dimension": b.get("dimension"),
            "amount": b.get("amount"),
            "parent": b.get("parent"),
            "lenders": [dict(lender) for lender in b.get("lenders") or []],
        }
        for b in detail.get("borrow") or []
        if b.get("direction", "borrow") == "borrow"
    ]
    return {
        "quota": p.get("quota") or detail.get("quota", ""),
        "admitted": admitted,
        "message": detail.get("message") or p.get("message", ""),
        "borrows": borrows,
        "exceeds": list(detail.get("exceed_dimensions") or []),
        "detail": detail,
    }


class _Pod:
    """What the trial's records say about one pod, gathered in one pass."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.decision: dict[str, Any] | None = None
        self.allocation: dict[str, Any] | None = None
        self.reasons: dict[str, list[str]] = {}
        self.quota: dict[str, Any] | None = None
        self.spec: dict[str, Any] = {}
        self.preempts: list[dict[str, str]] = []
        self.preemption = ""
        self.evicted = False


def _note(pods: dict[str, _Pod], record: RecordedEvent, groups: dict[str, list[str]]) -> None:
    p = record.payload_dict()
    key = _key(p) if record.type.startswith(("pod.", "quota.")) else ""
    if record.type == "pod.submitted" and key in pods:
        pods[key].spec = dict(p.get("spec") or {})
    elif record.type in ("quota.admitted", "quota.waiting") and key in pods:
        pods[key].quota = quota_of(p, record.type == "quota.admitted")
    elif record.type == "quota.group_admitted":
        for member, detail in ((p.get("detail") or {}).get("members") or {}).items():
            if member in pods:
                pods[member].quota = quota_of({"detail": detail}, True)
    elif record.type == "quota.group_waiting":
        first = (p.get("detail") or {}).get("first") or {}
        for member in groups.get(str(p.get("group")), []):
            if member in pods:
                pods[member].quota = quota_of({"detail": first, "message": p.get("message", "")}, False)
    elif record.type == "preemption.decided":
        for member in p.get("members") or []:
            if member in pods:
                pods[member].preemption = str(p.get("message", ""))
    elif record.type == "pod.evicted":
        preemptor = str((p.get("detail") or {}).get("preemptor", ""))
        if preemptor in pods:
            pods[preemptor].preempts.append({"pod": key, "node": str(p.get("node", ""))})
        if key in pods:
            pods[key].evicted = True
    for line in decisions_of(record, groups):
        if line["pod"] in pods:
            pod = pods[line["pod"]]
            pod.decision = dict(line)
            pod.allocation, pod.reasons = _placement(record, p, line["pod"])


def _placement(
    record: RecordedEvent, p: dict[str, Any], key: str
) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """(allocation, per-node reasons) of a decision record for one pod."""
    if record.type == "pod.placed":
        decision = p.get("decision") or {}
        return {**(decision.get("allocation") or {}), "reservation": decision.get("reservation")}, {}
    if record.type == "gang.group_placed":
        decision = (p.get("decisions") or {}).get(key) or {}
        return {**(decision.get("allocation") or {}), "reservation": decision.get("reservation")}, {}
    if record.type == "pod.unschedulable":
        return None, dict((p.get("decision") or {}).get("node_reasons") or {})
    if record.type == "gang.group_unschedulable":
        members = (p.get("decision") or {}).get("members") or []
        reasons = next((m.get("node_reasons") for m in members if m.get("node_reasons")), None)
        return None, dict(reasons or {})
    return None, {}


def _waits_for(pod: _Pod) -> str:
    outcome = (pod.decision or {}).get("outcome", "")
    codes = (pod.decision or {}).get("codes") or []
    if outcome == "Scheduled" or outcome == "Rejected":
        return ""
    if "GangIncomplete" in codes:
        return f"the rest of its gang ({(pod.decision or {}).get('message', '')})"
    if outcome == "Waiting":
        quota = (pod.quota or {}).get("quota", "its quota")
        return f"room in quota {quota} (pods of the quota finishing, or a larger quota)"
    if pod.preemption:
        return "its preemption victims to leave the nominated node(s)"
    if outcome == "Unschedulable":
        return "capacity on a node that fits (pods leaving, or a node added)"
    return "a decision: no service decided on it (is the pod's scheduler Allot's?)"


def _nearest(pod: _Pod, nearest: Nearest | None) -> list[str]:
    """The closest node and the smallest change there, or the quota raise that makes room."""
    from allot_views.nearest import quota_change

    if pod.quota is not None and not pod.quota["admitted"]:
        return quota_change(pod.quota["detail"], pod.quota["quota"])
    return nearest(pod.reasons, pod.spec) if nearest is not None and pod.reasons else []


def answers(
    records: Iterable[RecordedEvent], keys: list[str], nearest: Nearest | None = None
) -> list[dict[str, Any]]:
    """One answer per pod of ``keys`` (in that order) from the trial's ``records``."""
    pods = {key: _Pod(key) for key in keys}
    groups: dict[str, list[str]] = {}
    for record in records:
        _note(pods, record, groups)
    out: list[dict[str, Any]] = []
    for key in keys:
        pod = pods[key]
        decision = pod.decision or {}
        allocation = pod.allocation or {}
        fits = decision.get("outcome") == "Scheduled" and not pod.evicted
        out.append(
            {
                "pod": key,
                "fits": fits,
                "outcome": decision.get("outcome", "Undecided"),
                "message": decision.get("message", ""),
                "codes": list(decision.get("codes") or []),
                "node": decision.get("node"),
                "devices": _devices(allocation),
                "cpuset": list(allocation.get("cpuset") or []),
                "numa": list(allocation.get("numa") or []),
                "reservation": allocation.get("reservation"),
                "quota": {k: v for k, v in (pod.quota or {}).items() if k != "detail"} or None,
                "preempts": pod.preempts,
                "preemption": pod.preemption,
                "waits_for": _waits_for(pod),
                "nearest": [] if fits else _nearest(pod, nearest),
            }
        )
    return out
