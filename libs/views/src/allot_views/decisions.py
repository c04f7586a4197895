"""Scheduling decisions as a user reads them: one JSON object per decision, derived from the log.

The same function reads a simulator log and a live log, so ``allot sim run -o`` and ``allot decisions`` can be
diffed: identical scenarios give identical lines (the test suite checks it on the examples).

Fields: ``pod`` ("ns/name"; ``Reservation/<name>`` and ``PodMigrationJob/<name>`` for those objects;
``ElasticQuota/<ns>/<name>`` and ``ElasticQuotaProfile/<ns>/<name>`` for a quota or profile quota-manager refused), ``outcome``
(Scheduled | Unschedulable | Rejected | Waiting | Evicted; Reserved, Expired, Succeeded, Failed, Aborted), ``node``,
``annotations`` (output annotations, values as JSON objects), ``message``, ``codes``, ``attempt``, ``stage``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, NotRequired, TypedDict

from allot_contracts.envelope import RecordedEvent
from allot_contracts.jsonvalue import JsonObject, JsonValue

RESERVATION_DECISIONS = frozenset(
    {
        "reservation.placed",
        "reservation.unschedulable",
        "reservation.rejected",
        "reservation.failed",
        "migration.evicted",
        "migration.succeeded",
        "migration.failed",
        "migration.aborted",
        "migration.rejected",
        "pod.evicted",
    }
)

# Objects whose validation needs the state of the quota forest: quota-manager refuses them (upstream's webhook does)
# with the tree's rules (a name taken in another namespace, a parent that is not one): event type -> kind, field
QUOTA_REFUSALS = {
    "quota.rejected": ("ElasticQuota", "quota"),
    "quotaprofile.rejected": ("ElasticQuotaProfile", "profile"),
}

DECISION_TYPES = frozenset(
    {
        "pod.placed",
        "pod.unschedulable",
        "pod.rejected",
        "quota.waiting",
        "gang.member_waiting",
        "gang.group_placed",
        "gang.group_unschedulable",
        "quota.group_waiting",
        "quota.evicted",
        *RESERVATION_DECISIONS,
        *QUOTA_REFUSALS,
    }
)


class Decision(TypedDict):
    """One decision as ``allot decisions`` prints it (the fields of this module's docstring)."""

    pod: str
    outcome: str
    node: str | None
    annotations: dict[str, Any]
    message: str
    codes: list[str]
    attempt: int | None
    stage: str
    group: NotRequired[str]  # a gang group's decisions: the group


def _annotations(raw: Mapping[str, JsonValue]) -> JsonObject:
    out: JsonObject = {}
    for key, value in sorted(raw.items()):
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        out[key] = value
    return out


def decisions_of(record: RecordedEvent, groups: dict[str, list[str]]) -> list[Decision]:
    """One record may hold several decisions (a gang group: one per member)."""
    if record.type not in DECISION_TYPES and record.type != "gang.group_ready":
        return []
    p = record.payload_dict()
    if record.type == "gang.group_ready":
        groups[p["group"]] = list(p["members"])
        return []
    if record.type == "gang.group_placed":
        return [
            _decision(
                m,
                "Scheduled",
                d.get("node"),
                _annotations(d.get("annotations") or {}),
                "",
                [],
                p["attempt"],
                record.producer,
                group=p["group"],
            )
            for m, d in sorted(p["decisions"].items())
        ]
    if record.type in ("gang.group_unschedulable", "quota.group_waiting"):
        outcome = "Unschedulable" if record.type == "gang.group_unschedulable" else "Waiting"
        return [
            _decision(
                m,
                outcome,
                None,
                {},
                p["message"],
                list(p.get("codes") or (["QuotaExceeded"] if outcome == "Waiting" else [])),
                p["attempt"],
                record.producer,
                group=p["group"],
            )
            for m in groups.get(p["group"], [])
        ]
    if record.type in RESERVATION_DECISIONS:
        return [reservation_decision(record, p)]
    if record.type in QUOTA_REFUSALS:
        kind, field = QUOTA_REFUSALS[record.type]
        errors = [e for e in p["errors"] if isinstance(e, dict)]
        message = "; ".join(
            f"{e['path']}: {e['message']}" if e.get("path") else str(e["message"]) for e in errors
        )
        codes = sorted({str(e.get("code", "")) for e in errors})
        ref = p[field]
        name = f"{kind}/{ref.get('namespace', '')}/{ref['name']}"
        return [_decision(name, "Rejected", None, {}, message, codes, None, record.producer)]
    single = decision_of(record, p)
    return [single] if single is not None else []


def _decision(
    pod: str,
    outcome: str,
    node: str | None,
    annotations: JsonObject,
    message: str,
    codes: list[str],
    attempt: int | None,
    stage: str,
    *,
    group: str | None = None,
) -> Decision:
    """A decision's line, its fields in the order they are read (a gang group's decisions name the group)."""
    line: Decision = {
        "pod": pod,
        "outcome": outcome,
        "node": node,
        "annotations": annotations,
        "message": message,
        "codes": codes,
        "attempt": attempt,
        "stage": stage,
    }
    if group is not None:
        line["group"] = group
    return line


def decision_of(record: RecordedEvent, p: dict[str, Any]) -> Decision | None:
    pod = f"{p['pod'].get('namespace', '')}/{p['pod']['name']}"
    stage = record.producer
    if record.type == "pod.placed":
        d = p["decision"]
        return _decision(
            pod,
            "Scheduled",
            p["node"],
            _annotations(d.get("annotations") or {}),
            d.get("message", ""),
            list(d.get("codes") or []),
            p["attempt"],
            stage,
        )
    if record.type == "pod.unschedulable":
        return _decision(pod, "Unschedulable", None, {}, p["message"], list(p["codes"]), p["attempt"], stage)
    if record.type == "pod.rejected":
        return _decision(
            pod,
            "Rejected",
            None,
            {},
            p["message"],
            list(p.get("codes") or []),
            None,
            p.get("stage", record.producer),
        )
    if record.type == "gang.member_waiting":
        message = f"gang {p['gang']}: {p['present']}/{p['min_available']} members present ({p['reason']})"
        return _decision(pod, "Waiting", None, {}, message, ["GangIncomplete"], None, stage)
    if record.type == "quota.evicted":
        return _decision(pod, "Evicted", None, {}, p["message"], [p["cause"]], None, stage)
    return _decision(pod, "Waiting", None, {}, p["message"], ["QuotaExceeded"], p["attempt"], stage)


def reservation_decision(record: RecordedEvent, p: dict[str, Any]) -> Decision:
    """A Reservation's placement (``Reservation/<name>``: Reserved, Unschedulable, Rejected, Expired), a pod evicted
    by a PodMigrationJob or preempted (Evicted), or a job's end (``PodMigrationJob/<name>``: Succeeded, Failed, Aborted,
    Rejected)."""
    kind, _, action = record.type.partition(".")
    line: Decision = {
        "node": None,
        "annotations": {},
        "message": p.get("message", ""),
        "codes": list(p.get("codes") or []),
        "attempt": None,
        "stage": record.producer,
        "pod": "",  # each kind below names the object and the outcome
        "outcome": "",
    }
    if kind == "reservation":
        outcome = {"placed": "Reserved", "unschedulable": "Unschedulable", "rejected": "Rejected"}.get(action)
        line["pod"], line["outcome"] = f"Reservation/{p['reservation']['name']}", outcome or "Expired"
        if action == "placed":
            line["node"] = p["node"]
        if action == "failed":
            line["codes"] = [p.get("reason", "")]
        return line
    if kind == "pod":  # pod.evicted: preempted for a reservation, or by qos-enforcer under memory pressure
        pod = f"{p['pod'].get('namespace', '')}/{p['pod']['name']}"
        line["pod"], line["outcome"], line["codes"] = pod, "Evicted", [p.get("cause", "")]
        return line
    if action == "evicted":
        pod = f"{p['pod'].get('namespace', '')}/{p['pod']['name']}"
        job = p["job"]["name"]
        line["pod"], line["outcome"] = pod, "Evicted"
        line["message"], line["codes"] = f"migrated by PodMigrationJob {job}", ["Migration"]
        return line
    line["pod"], line["outcome"] = f"PodMigrationJob/{p['job']['name']}", action.capitalize()
    line["node"] = p.get("node") or None
    if p.get("reason"):
        line["codes"] = [p["reason"]]
    return line


def decisions(records: Iterable[RecordedEvent]) -> list[Decision]:
    groups: dict[str, list[str]] = {}
    return [d for r in records for d in decisions_of(r, groups)]
