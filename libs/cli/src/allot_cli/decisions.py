"""Scheduling decisions as a user reads them: one JSON object per decision, derived from the log.

The same function reads a simulator log and a live log, so ``allot sim run -o`` and ``allot decisions`` can be
diffed: identical scenarios give identical lines (the test suite checks it on the examples).

Fields: ``pod`` ("ns/name"), ``outcome`` (Scheduled | Unschedulable | Rejected | Waiting), ``node``,
``annotations`` (output annotations, values as JSON objects), ``message``, ``codes``, ``attempt``, ``stage``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from allot_contracts.envelope import RecordedEvent

DECISION_TYPES = frozenset({"pod.placed", "pod.unschedulable", "pod.rejected", "quota.waiting"})


def _annotations(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in sorted(raw.items()):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        out[key] = value
    return out


def decision_of(record: RecordedEvent) -> dict[str, Any] | None:
    if record.type not in DECISION_TYPES:
        return None
    p = record.payload_dict()
    pod = f"{p['pod'].get('namespace', '')}/{p['pod']['name']}"
    if record.type == "pod.placed":
        d = p["decision"]
        return {"pod": pod, "outcome": "Scheduled", "node": p["node"], "annotations": _annotations(d.get("annotations") or {}),
                "message": d.get("message", ""), "codes": list(d.get("codes") or []), "attempt": p["attempt"],
                "stage": record.producer}
    if record.type == "pod.unschedulable":
        return {"pod": pod, "outcome": "Unschedulable", "node": None, "annotations": {}, "message": p["message"],
                "codes": list(p["codes"]), "attempt": p["attempt"], "stage": record.producer}
    if record.type == "pod.rejected":
        return {"pod": pod, "outcome": "Rejected", "node": None, "annotations": {}, "message": p["message"],
                "codes": list(p.get("codes") or []), "attempt": None, "stage": p.get("stage", record.producer)}
    return {"pod": pod, "outcome": "Waiting", "node": None, "annotations": {}, "message": p["message"],
            "codes": ["QuotaExceeded"], "attempt": p["attempt"], "stage": record.producer}


def decisions(records: Iterable[RecordedEvent]) -> list[dict[str, Any]]:
    return [d for d in (decision_of(r) for r in records) if d is not None]
