"""The answer to ``allot what-if -f``, per pod, read from the records the trial decided (pure: no log, no IO).

For each pod asked about: its final outcome (the last decision about it: Scheduled, Unschedulable, Waiting,
Rejected), the node, devices (GPU minors and the share of each), CPU set and NUMA nodes it would get, the quota that
admits it (or makes it wait) and every borrow (from which parent, lent by which sibling and how), the pods it would
preempt, what it would wait for, and the nearest miss when it does not fit (:mod:`allot_views.nearest`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypedDict

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_views.decisions import Decision, decisions_of

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent

GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
Nearest = Callable[[dict[str, list[str]], JsonObject], list[str]]


class Borrow(TypedDict):
    """One borrow of an admission: ``amount`` of ``dimension`` under ``parent``, and who lends it and how."""

    dimension: JsonValue
    amount: JsonValue
    parent: JsonValue
    lenders: list[JsonObject]


class QuotaAnswer(TypedDict):
    """The quota that admits the pod (or makes it wait), its borrows and the dimensions it exceeds."""

    quota: str
    admitted: bool
    message: str
    borrows: list[Borrow]
    exceeds: list[JsonValue]


class QuotaDecision(QuotaAnswer):
    """:class:`QuotaAnswer` with the decision's ``detail`` (the numbers the nearest miss reads)."""

    detail: JsonObject


class Preempt(TypedDict):
    pod: str
    node: str


class Answer(TypedDict):
    """One pod's answer, as ``allot what-if -f -o json`` prints it."""

    pod: str
    fits: bool
    outcome: str
    message: str
    codes: list[str]
    node: str | None
    devices: dict[str, list[JsonObject]]
    cpuset: list[JsonValue]
    numa: list[JsonValue]
    reservation: JsonValue
    quota: QuotaAnswer | None
    preempts: list[Preempt]
    preemption: str
    waits_for: str
    nearest: list[str]


def _obj(value: JsonValue) -> JsonObject:
    """``value`` when it is a JSON object; an empty one for an absent (or other) value."""
    return value if isinstance(value, dict) else {}


def _list(value: JsonValue) -> list[JsonValue]:
    """``value`` when it is a JSON array; an empty one for an absent (or other) value."""
    return value if isinstance(value, list) else []


def _key(p: JsonObject) -> str:
    ref = p.get("pod") or {}
    return f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else str(ref)


def _devices(allocation: JsonObject) -> dict[str, list[JsonObject]]:
    """Per device kind, each device given: its minor and its share (GPU core percent and memory bytes)."""
    out: dict[str, list[JsonObject]] = {}
    for kind, devices in sorted(_obj(allocation.get("devices")).items()):
        out[kind] = [
            {"minor": _obj(d).get("minor"), **_obj(_obj(d).get("resources"))} for d in _list(devices)
        ]
    return out


def quota_of(p: JsonObject, admitted: bool) -> QuotaDecision:
    """A ``quota.admitted`` / ``quota.waiting`` decision (or a gang member's admission record, ``detail`` alone)
    as the answer shows it."""
    detail = _obj(p.get("detail"))
    borrows: list[Borrow] = [
        {
            "dimension": b.get("dimension"),
            "amount": b.get("amount"),
            "parent": b.get("parent"),
            "lenders": [dict(_obj(lender)) for lender in _list(b.get("lenders"))],
        }
        for b in map(_obj, _list(detail.get("borrow")))
        if b.get("direction", "borrow") == "borrow"
    ]
    return {
        "quota": str(p.get("quota") or detail.get("quota", "")),
        "admitted": admitted,
        "message": str(detail.get("message") or p.get("message", "")),
        "borrows": borrows,
        "exceeds": list(_list(detail.get("exceed_dimensions"))),
        "detail": detail,
    }


def _shown(quota: QuotaDecision | None) -> QuotaAnswer | None:
    """The quota part of an answer: the decision without its ``detail``."""
    if quota is None:
        return None
    return {
        "quota": quota["quota"],
        "admitted": quota["admitted"],
        "message": quota["message"],
        "borrows": quota["borrows"],
        "exceeds": quota["exceeds"],
    }


class _Pod:
    """What the trial's records say about one pod, gathered in one pass."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.decision: Decision | None = None
        self.allocation: JsonObject | None = None
        self.reasons: dict[str, list[str]] = {}
        self.quota: QuotaDecision | None = None
        self.spec: JsonObject = {}
        self.preempts: list[Preempt] = []
        self.preemption = ""
        self.evicted = False


def _note(pods: dict[str, _Pod], record: RecordedEvent, groups: dict[str, list[str]]) -> None:
    p: JsonObject = record.payload_dict()
    key = _key(p) if record.type.startswith(("pod.", "quota.")) else ""
    if record.type == "pod.submitted" and key in pods:
        pods[key].spec = dict(_obj(p.get("spec")))
    elif record.type in ("quota.admitted", "quota.waiting") and key in pods:
        pods[key].quota = quota_of(p, record.type == "quota.admitted")
    elif record.type == "quota.group_admitted":
        for member, detail in _obj(_obj(p.get("detail")).get("members")).items():
            if member in pods:
                pods[member].quota = quota_of({"detail": detail}, True)
    elif record.type == "quota.group_waiting":
        first = _obj(_obj(p.get("detail")).get("first"))
        for member in groups.get(str(p.get("group")), []):
            if member in pods:
                pods[member].quota = quota_of({"detail": first, "message": p.get("message", "")}, False)
    elif record.type == "preemption.decided":
        for job_member in _list(p.get("members")):
            if isinstance(job_member, str) and job_member in pods:
                pods[job_member].preemption = str(p.get("message", ""))
    elif record.type == "pod.evicted":
        preemptor = str(_obj(p.get("detail")).get("preemptor", ""))
        if preemptor in pods:
            pods[preemptor].preempts.append({"pod": key, "node": str(p.get("node", ""))})
        if key in pods:
            pods[key].evicted = True
    for line in decisions_of(record, groups):
        if line["pod"] in pods:
            pod = pods[line["pod"]]
            pod.decision = line.copy()
            pod.allocation, pod.reasons = _placement(record, p, line["pod"])


def _reasons(value: JsonValue) -> dict[str, list[str]]:
    return {node: [str(reason) for reason in _list(reasons)] for node, reasons in _obj(value).items()}


def _placement(
    record: RecordedEvent, p: JsonObject, key: str
) -> tuple[JsonObject | None, dict[str, list[str]]]:
    """(allocation, per-node reasons) of a decision record for one pod."""
    if record.type == "pod.placed":
        decision = _obj(p.get("decision"))
        return {**_obj(decision.get("allocation")), "reservation": decision.get("reservation")}, {}
    if record.type == "gang.group_placed":
        decision = _obj(_obj(p.get("decisions")).get(key))
        return {**_obj(decision.get("allocation")), "reservation": decision.get("reservation")}, {}
    if record.type == "pod.unschedulable":
        return None, _reasons(_obj(p.get("decision")).get("node_reasons"))
    if record.type == "gang.group_unschedulable":
        members = map(_obj, _list(_obj(p.get("decision")).get("members")))
        reasons = next((m.get("node_reasons") for m in members if m.get("node_reasons")), None)
        return None, _reasons(reasons)
    return None, {}


def _waits_for(pod: _Pod) -> str:
    decision = pod.decision
    outcome = decision["outcome"] if decision is not None else ""
    if outcome == "Scheduled" or outcome == "Rejected":
        return ""
    if decision is not None and "GangIncomplete" in decision["codes"]:
        return f"the rest of its gang ({decision['message']})"
    if outcome == "Waiting":
        quota = pod.quota["quota"] if pod.quota is not None else "its quota"
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
) -> list[Answer]:
    """One answer per pod of ``keys`` (in that order) from the trial's ``records``."""
    pods = {key: _Pod(key) for key in keys}
    groups: dict[str, list[str]] = {}
    for record in records:
        _note(pods, record, groups)
    out: list[Answer] = []
    for key in keys:
        pod = pods[key]
        decision = pod.decision
        allocation = pod.allocation or {}
        fits = decision is not None and decision["outcome"] == "Scheduled" and not pod.evicted
        out.append(
            {
                "pod": key,
                "fits": fits,
                "outcome": decision["outcome"] if decision is not None else "Undecided",
                "message": decision["message"] if decision is not None else "",
                "codes": list(decision["codes"]) if decision is not None else [],
                "node": decision["node"] if decision is not None else None,
                "devices": _devices(allocation),
                "cpuset": list(_list(allocation.get("cpuset"))),
                "numa": list(_list(allocation.get("numa"))),
                "reservation": allocation.get("reservation"),
                "quota": _shown(pod.quota),
                "preempts": pod.preempts,
                "preemption": pod.preemption,
                "waits_for": _waits_for(pod),
                "nearest": [] if fits else _nearest(pod, nearest),
            }
        )
    return out
