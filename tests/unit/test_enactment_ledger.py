"""The enactment ledger read back (allot_stack.enactment): each cluster-changing decision paired with its outcome,
withdrawn or superseded ones told apart, and open ones older than the bound reported."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import pytest

from allot_cli.enactment_bound import bound_seconds
from allot_stack.enactment import (
    Folding,
    explain_lines,
    fold,
    kubernetes_mode,
    outcome_summary,
    verify_line,
    verify_report,
)

S = 1_000_000  # µs


@dataclass(frozen=True)
class Rec:
    position: int
    type: str
    stream_id: str
    event_id: str
    causation_id: str | None = None
    recorded_at: int = 0
    payload: dict[str, Any] = field(default_factory=dict)

    def payload_dict(self) -> dict[str, Any]:
        return self.payload


def log(*rows: tuple[str, str, str, str | None, dict[str, Any]]) -> list[Rec]:
    return [
        Rec(
            position=i + 1,
            type=t,
            stream_id=s,
            event_id=e,
            causation_id=c,
            recorded_at=(i + 1) * S,
            payload=p,
        )
        for i, (t, s, e, c, p) in enumerate(rows)
    ]


POD = "pod:default/p"
QUOTA = "quota:team/q"
KUBE = {"mode": "kubernetes"}

CASES = [
    ("bound", [("pod.bind_requested", POD, "d", None, {}), ("pod.bound", POD, "o", "d", {})], "enacted"),
    (
        "bind refused",
        [("pod.bind_requested", POD, "d", None, {}), ("pod.bind_failed", POD, "o", "d", {"message": "404"})],
        "refused",
    ),
    (
        "bind withdrawn",
        [("pod.bind_requested", POD, "d", None, {}), ("pod.deleted", POD, "x", None, {})],
        "withdrawn",
    ),
    ("bind open", [("pod.bind_requested", POD, "d", None, {})], "open"),
    (
        "eviction not evicted",
        [("pod.evicted", POD, "d", None, {}), ("pod.eviction_enacted", POD, "o", "d", {"evicted": False})],
        "refused",
    ),
    (
        "quota eviction refused by a budget",
        [
            ("quota.evicted", POD, "d", None, {}),
            ("quota.eviction_enactment_failed", POD, "o", "d", {"reason": "TooManyRequests"}),
        ],
        "refused",
    ),
    (
        "quota eviction enacted after the pod's deletion was seen",
        [
            ("quota.evicted", POD, "d", None, {}),
            ("pod.deleted", POD, "x", None, {}),
            ("quota.eviction_enacted", POD, "o", "d", {}),
        ],
        "enacted",
    ),
    (
        "status superseded",
        [
            ("quota.status_published", QUOTA, "d", None, KUBE),
            ("quota.status_published", QUOTA, "n", None, KUBE),
        ],
        "superseded",
    ),
    (
        "status enacted",
        [("quota.status_published", QUOTA, "d", None, KUBE), ("quota.status_enacted", QUOTA, "o", "d", {})],
        "enacted",
    ),
    (
        "migration eviction withdrawn",
        [
            ("pod.bind_requested", POD, "b", None, {}),
            ("migration.eviction_requested", "migration:j", "d", None, {}),
            ("migration.removed", "migration:j", "x", None, {}),
        ],
        "withdrawn",
    ),
    (
        "an outcome of another decision does not count",
        [("pod.bind_requested", POD, "d", None, {}), ("pod.bound", POD, "o", "other", {})],
        "open",
    ),
]


@pytest.mark.parametrize(("records", "state"), [(r, s) for _, r, s in CASES], ids=[c[0] for c in CASES])
def test_each_decision_is_paired_with_its_outcome(records: list[Any], state: str) -> None:
    ledger = fold(log(*records))
    assert ledger.kubernetes
    assert ledger.entries["d"].state == state


def test_letting_settled_decisions_go_reports_the_same_and_holds_only_the_waiting() -> None:
    """``allot replay --verify`` folds a long log keeping only the decisions still waiting: same report, and what is
    held does not grow with the decisions already settled."""
    records = log(  # every case one after the other, each with its own ids
        *[
            (t, f"{stream}-{n}", f"{e}{n}", c and f"{c}{n}", p)
            for n, (_, rows, _) in enumerate(CASES)
            for t, stream, e, c, p in rows
        ]
    )
    many = [  # a thousand bindings enacted, then one still open
        *log(
            *[
                row
                for i in range(1000)
                for row in (
                    ("pod.bind_requested", f"pod:default/p{i}", f"d{i}", None, {}),
                    ("pod.bound", f"pod:default/p{i}", f"o{i}", f"d{i}", {}),
                )
            ]
        ),
        *log(("pod.bind_requested", "pod:default/last", "waiting", None, {})),
    ]
    for rows in (records, many):
        kept, let_go = fold(rows), Folding(keep_settled=False)
        for record in rows:
            let_go.add(record)
        assert verify_line(let_go.ledger, now=10**9 * S, bound=S) == verify_line(kept, now=10**9 * S, bound=S)
        assert all(entry.state not in ("enacted", "refused") for entry in let_go.ledger.entries.values())
    assert list(let_go.ledger.entries) == ["waiting"] and let_go.ledger.settled == {"enacted": 1000}
    assert let_go.open_on == {"pod:default/last": ["waiting"]}


def test_standalone_decisions_are_not_a_kubernetes_ledger() -> None:
    ledger = fold(log(("quota.status_published", QUOTA, "d", None, {"mode": "standalone"})))
    assert not ledger.kubernetes and ledger.entries == {}


class Log:
    """The reads ``verify_report`` makes of the log (``holds_any`` and ``iterate``), over records in position order."""

    def __init__(self, records: list[Rec]) -> None:
        self.records = records

    def _select(self, until: int | None, types: Any) -> list[Rec]:
        return [r for r in self.records if (until is None or r.position <= until) and r.type in types]

    async def holds_any(self, types: Any, *, until: int | None = None) -> bool:
        return bool(self._select(until, types))

    async def iterate(self, *, until: int | None = None, types: Any) -> Any:
        for record in self._select(until, types):
            yield record


@pytest.mark.parametrize(
    "rows",
    [
        [("pod.bound", POD, "o", None, {}), ("pod.deleted", POD, "x", None, {})],
        [("quota.status_published", QUOTA, "d", None, {"mode": "standalone"})],
        [
            ("quota.status_published", QUOTA, "d", None, {"mode": "standalone"}),
            ("quota.status_published", QUOTA, "e", None, KUBE),
        ],
        *[rows for _, rows, _ in CASES],
        [],
    ],
)
async def test_kubernetes_mode_is_read_without_folding_as_the_ledger_says(rows: Any) -> None:
    records = log(*rows)
    ledger = fold(records)
    assert await kubernetes_mode(Log(records), until=len(records)) is ledger.kubernetes
    report = await verify_report(Log(records), until=len(records), now=10**9 * S, bound=S)
    assert report == (verify_line(ledger, now=10**9 * S, bound=S) if ledger.kubernetes else None)
    if records:  # up to a position before the Kubernetes-mode event, the log is not in that mode
        assert await kubernetes_mode(Log(records), until=0) is False


def test_only_open_decisions_older_than_the_bound_are_reported() -> None:
    records = log(
        ("pod.bind_requested", POD, "old", None, {}),
        ("pod.bind_requested", "pod:default/q", "done", None, {}),
        ("pod.bound", "pod:default/q", "o", "done", {}),
        ("pod.bind_requested", "pod:default/r", "young", None, {}),
    )
    ledger = fold(records)
    line, report = verify_line(ledger, now=10 * S, bound=7 * S)  # "old" was recorded 9 s ago, "young" 6 s ago
    assert [e["stream"] for e in report["without_outcome"]] == [POD]
    assert report["states"] == {"enacted": 1, "open": 2}
    assert "1 older than 7s have NO outcome" in line and "#1 pod.bind_requested pod:default/p" in line
    line, report = verify_line(ledger, now=10 * S, bound=60 * S)
    assert report["without_outcome"] == [] and "every one older than 60s has its outcome" in line


def test_explain_shows_how_each_decision_was_carried_out() -> None:
    records = log(
        ("pod.bind_requested", POD, "b", None, {}),
        ("pod.bound", POD, "o", "b", {}),
        ("quota.evicted", POD, "d", None, {}),
        (
            "quota.eviction_enactment_failed",
            POD,
            "f",
            "d",
            {"reason": "TooManyRequests", "message": "budget"},
        ),
    )
    assert explain_lines(records) == [
        "enacted:   in the cluster (Kubernetes mode)",
        "  #1 pod.bind_requested: enacted by pod.bound",
        "  #3 quota.evicted: refused by quota.eviction_enactment_failed: TooManyRequests budget",
    ]
    assert (
        outcome_summary("quota.status_enacted", {"attempts": 3}) == "done by the API server after 3 attempts"
    )
    assert outcome_summary("pod.placed", {}) == ""


@pytest.mark.parametrize("text", ["-1", "abc", "nan", "inf"])
def test_a_bad_bound_is_refused_with_the_reason(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="number of seconds"):
        bound_seconds(text)


def test_only_garbage_collection_of_objects_in_the_cluster_waits_for_a_delete() -> None:
    gc = {"reason": "GarbageCollected"}
    ledger = fold(
        log(
            ("reservation.accepted", "reservation:r1", "a1", None, {}),
            ("reservation.removed", "reservation:r1", "d1", None, gc),
            ("reservation.deletion_enacted", "reservation:r1", "o1", "d1", {}),
            ("reservation.accepted", "reservation:mine", "a2", None, {"job": "j1"}),
            ("reservation.removed", "reservation:mine", "d2", None, {"reason": "MigrationEnded"}),
            ("migration.removed", "migration:j1", "d3", None, {"reason": "Deleted"}),
            ("migration.removed", "migration:j2", "d4", None, gc),
            ("migration.deletion_enactment_failed", "migration:j2", "o4", "d4", {"reason": "Conflict"}),
            ("migration.removed", "migration:j3", "d5", None, gc),
        )
    )
    removals = {k: e.state for k, e in ledger.entries.items() if e.type.endswith(".removed")}
    assert removals == {"d1": "enacted", "d4": "refused", "d5": "open"}
