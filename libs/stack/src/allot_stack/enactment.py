"""The enactment ledger, read back: which recorded decisions that change the cluster have their outcome in the log.

In Kubernetes mode a decision that changes the cluster is carried out by the worker that performs it, which records
the API server's answer as the decision's outcome (caused by it: ``causation_id`` is the decision's event id). This
module pairs them, as a pure function over the recorded events (the time it judges "old" by comes in as data), for
``allot replay --verify`` (one report line, like the bus line: a warning about the cluster, not a fault of the log)
and ``allot explain pod``.

A decision is

- **enacted** or **refused** by its outcome (``pod.bind_failed``, ``*.enactment_failed``, an eviction answered not
  evicted are refusals);
- **withdrawn** when what it was about went away first (the pod's life ended, the job or quota was deleted) or
  **superseded** by a newer decision of the same kind on the same object (quota status: only the latest patch is
  written);
- otherwise **open**: an open decision older than the bound is reported (the worker is down, lagging, or lost it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypedDict

from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.events.migration_enactment import STATUS_DECISIONS
from allot_contracts.events.reservation_enactment import RESERVATION_STATUS_DECISIONS

ENACTED, REFUSED, WITHDRAWN, SUPERSEDED, OPEN = "enacted", "refused", "withdrawn", "superseded", "open"


class Record(Protocol):
    """What the ledger reads of a recorded event (``allot_contracts.envelope.RecordedEvent`` has it)."""

    @property
    def position(self) -> int: ...
    @property
    def stream_id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def event_id(self) -> str: ...
    @property
    def causation_id(self) -> str | None: ...
    @property
    def recorded_at(self) -> int: ...
    def payload_dict(self) -> Mapping[str, object]: ...


def _producer(record: Record) -> str:
    return str(getattr(record, "producer", "") or "")


def _always(payload: Mapping[str, object]) -> bool:
    return True


@dataclass(frozen=True)
class Rule:
    """How one kind of decision is enacted: its outcomes, which of them are refusals, what withdraws it."""

    outcomes: frozenset[str]
    refusals: frozenset[str] = frozenset()
    withdrawn_by: frozenset[str] = frozenset()
    superseded_by: frozenset[str] = (
        frozenset()
    )  # a newer decision of these kinds on the same stream replaces it
    applies: Callable[[Mapping[str, object]], bool] = _always
    producer: str = ""  # when set: only this producer's decisions of the kind
    own_job: bool = False  # only on the stream of a PodMigrationJob Allot's descheduler created
    user_reservation: bool = (
        False  # not on a PodMigrationJob's own reservation (never written to the cluster)
    )


RULES: dict[str, Rule] = {
    "pod.bind_requested": Rule(
        outcomes=frozenset({"pod.bound", "pod.bind_failed"}),
        refusals=frozenset({"pod.bind_failed"}),
        withdrawn_by=POD_LIFE_TYPES,
    ),
    "pod.evicted": Rule(
        outcomes=frozenset({"pod.eviction_enacted"}),
        withdrawn_by=POD_LIFE_TYPES | {"quota.evicted"},
    ),
    "quota.evicted": Rule(
        outcomes=frozenset({"quota.eviction_enacted", "quota.eviction_enactment_failed"}),
        refusals=frozenset({"quota.eviction_enactment_failed"}),
        withdrawn_by=POD_LIFE_TYPES,
    ),
    "migration.eviction_requested": Rule(
        outcomes=frozenset({"migration.evicted", "migration.eviction_failed"}),
        refusals=frozenset({"migration.eviction_failed"}),
        withdrawn_by=frozenset({"migration.removed", "migration.deleted"}),
    ),
    "quota.status_published": Rule(
        outcomes=frozenset({"quota.status_enacted", "quota.status_enactment_failed"}),
        refusals=frozenset({"quota.status_enactment_failed"}),
        withdrawn_by=frozenset({"quota.deleted"}),
        superseded_by=frozenset({"quota.status_published"}),
        applies=lambda payload: payload.get("mode") == "kubernetes",
    ),
}
# The descheduler's PodMigrationJobs (Kubernetes mode): created in the API server, their status written back.
DESCHEDULER = "reservation-manager"
JOB_GONE = frozenset({"migration.removed", "migration.deleted"})
RULES["migration.applied"] = Rule(
    outcomes=frozenset({"migration.job_enacted", "migration.job_enactment_failed"}),
    refusals=frozenset({"migration.job_enactment_failed"}),
    withdrawn_by=JOB_GONE,
    producer=DESCHEDULER,
)
JOB_STATUS = STATUS_DECISIONS
for _kind in JOB_STATUS:
    RULES[_kind] = Rule(
        outcomes=frozenset({"migration.status_enacted", "migration.status_enactment_failed"}),
        refusals=frozenset({"migration.status_enactment_failed"}),
        withdrawn_by=JOB_GONE,
        superseded_by=JOB_STATUS,
        producer=DESCHEDULER,
        own_job=True,
    )
NODE_OUTCOMES = Rule(
    outcomes=frozenset({"node.status_enacted", "node.status_enactment_failed"}),
    refusals=frozenset({"node.status_enactment_failed"}),
    withdrawn_by=frozenset({"node.removed"}),
)
RULES["node.allocatable_updated"] = replace(
    NODE_OUTCOMES, superseded_by=frozenset({"node.allocatable_updated"})
)
for _kind in ("device.reported", "device.removed"):
    RULES[_kind] = replace(NODE_OUTCOMES, superseded_by=frozenset({"device.reported", "device.removed"}))
# Reservation status (reservation-manager's worker writes the latest decision's status on reservations/{name}/status)
for _kind in RESERVATION_STATUS_DECISIONS:
    RULES[_kind] = Rule(
        outcomes=frozenset({"reservation.status_enacted", "reservation.status_enactment_failed"}),
        refusals=frozenset({"reservation.status_enactment_failed"}),
        withdrawn_by=frozenset({"reservation.deleted", "reservation.removed"}),
        superseded_by=RESERVATION_STATUS_DECISIONS,
        user_reservation=True,
    )


def _collected(payload: Mapping[str, object]) -> bool:
    return payload.get("reason") == "GarbageCollected"


# Garbage collection (reservation-manager's worker deletes the object a removal dropped; a job's own reservations are
# not in the cluster)
RULES["reservation.removed"] = Rule(
    outcomes=frozenset({"reservation.deletion_enacted", "reservation.deletion_enactment_failed"}),
    refusals=frozenset({"reservation.deletion_enactment_failed"}),
    applies=_collected,
    user_reservation=True,
)
RULES["migration.removed"] = Rule(
    outcomes=frozenset({"migration.deletion_enacted", "migration.deletion_enactment_failed"}),
    refusals=frozenset({"migration.deletion_enactment_failed"}),
    applies=_collected,
)
OUTCOMES = frozenset(t for rule in RULES.values() for t in rule.outcomes)
WITHDRAWALS = frozenset(t for rule in RULES.values() for t in rule.withdrawn_by)
TYPES = frozenset(RULES) | OUTCOMES | WITHDRAWALS
KUBERNETES_ONLY = (OUTCOMES - {"pod.bound"}) | {"pod.bind_requested"}  # recorded in Kubernetes mode only
_STATUS_PUBLISHED = "quota.status_published"


def _published_to_cluster(kind: str, payload: Mapping[str, object]) -> bool:
    """A quota status patched onto its ElasticQuota in the cluster (Kubernetes mode; standalone records it only)."""
    return kind == _STATUS_PUBLISHED and payload.get("mode") == "kubernetes"


@dataclass
class Entry:
    """One decision and where it stands."""

    position: int
    type: str
    stream: str
    recorded_at: int
    state: str = OPEN
    outcome: str = ""  # the outcome's type
    message: str = ""  # the outcome's message (a refusal's reason and message)


@dataclass
class Ledger:
    kubernetes: bool = (
        False  # the log holds Kubernetes-mode decisions (binding requests, published quota status)
    )
    entries: dict[str, Entry] = field(default_factory=dict)  # decision event id -> entry
    # decisions settled by their outcome and no longer held in ``entries`` (folded with ``keep_settled=False``)
    settled: dict[str, int] = field(default_factory=dict)  # state -> count

    def decisions(self) -> int:
        return len(self.entries) + sum(self.settled.values())

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = dict(self.settled)
        for entry in self.entries.values():
            out[entry.state] = out.get(entry.state, 0) + 1
        return dict(sorted(out.items()))

    def overdue(self, *, now: int, bound: int) -> list[Entry]:
        """Open decisions recorded more than ``bound`` µs before ``now`` (µs since the epoch), in log order."""
        return sorted(
            (e for e in self.entries.values() if e.state == OPEN and now - e.recorded_at > bound),
            key=lambda e: e.position,
        )


def _refused(rule: Rule, kind: str, payload: Mapping[str, object]) -> bool:
    return kind in rule.refusals or payload.get("evicted") is False


def _judged(
    rule: Rule, record: Record, payload: Mapping[str, object], own_jobs: set[str], job_reservations: set[str]
) -> bool:
    """Whether ``record`` is a decision the ledger waits an outcome for."""
    if rule.producer and _producer(record) != rule.producer:
        return False
    if rule.own_job and record.stream_id not in own_jobs:
        return False
    if rule.user_reservation and record.stream_id in job_reservations:
        return False
    return rule.applies(payload)


def fold(records: Iterable[Record]) -> Ledger:
    """Pair every decision of :data:`RULES` with its outcome, in log order."""
    folding = Folding()
    for record in records:
        folding.add(record)
    return folding.ledger


class Folding:
    """:func:`fold`, one record at a time. With ``keep_settled=False`` a decision is let go once its outcome is
    recorded (only its state is counted, :attr:`Ledger.settled`), so what is held is the decisions still waiting:
    memory stays bounded on a log of any length (``allot replay --verify``)."""

    def __init__(self, *, keep_settled: bool = True) -> None:
        self.ledger = Ledger()
        self.keep_settled = keep_settled
        self.open_on: dict[str, list[str]] = {}  # stream -> ids of its decisions not settled yet
        self.own_jobs: set[str] = set()  # streams of the PodMigrationJobs the descheduler created
        self.job_reservations: set[str] = set()  # streams of PodMigrationJobs' own reservations

    def add(self, record: Record) -> None:
        ledger = self.ledger
        kind, payload = record.type, record.payload_dict()
        if kind in KUBERNETES_ONLY or _published_to_cluster(kind, payload):
            ledger.kubernetes = True
        entry = ledger.entries.get(record.causation_id or "")
        if entry is not None and kind in RULES[entry.type].outcomes:
            refused = _refused(RULES[entry.type], kind, payload)
            entry.state, entry.outcome = (REFUSED if refused else ENACTED), kind
            entry.message = " ".join(str(payload.get(k) or "") for k in ("reason", "message")).strip()
            if not self.keep_settled:
                self._let_go(record.causation_id or "", entry)
            return
        if kind in WITHDRAWALS or kind in RULES:
            self._withdraw(record.stream_id, kind)
        rule = RULES.get(kind)
        if kind == "migration.applied" and _producer(record) == DESCHEDULER:
            self.own_jobs.add(record.stream_id)
        if kind == "reservation.accepted":
            (self.job_reservations.add if payload.get("job") else self.job_reservations.discard)(
                record.stream_id
            )
        if rule is not None and _judged(rule, record, payload, self.own_jobs, self.job_reservations):
            ledger.entries[record.event_id] = Entry(
                position=record.position, type=kind, stream=record.stream_id, recorded_at=record.recorded_at
            )
            self.open_on.setdefault(record.stream_id, []).append(record.event_id)

    def _withdraw(self, stream: str, kind: str) -> None:
        """The decisions pending on ``stream`` that a ``kind`` event withdraws or supersedes."""
        pending = self.open_on.get(stream)
        if not pending:
            return
        for decision in list(pending):
            held = self.ledger.entries.get(decision)
            if held is None:  # let go once settled
                pending.remove(decision)
                continue
            held_rule = RULES[held.type]
            if kind in held_rule.withdrawn_by or kind in held_rule.superseded_by:
                if held.state == OPEN:
                    held.state = WITHDRAWN if kind in held_rule.withdrawn_by else SUPERSEDED
                pending.remove(decision)
        if not pending:
            del self.open_on[stream]

    def _let_go(self, decision: str, entry: Entry) -> None:
        del self.ledger.entries[decision]
        self.ledger.settled[entry.state] = self.ledger.settled.get(entry.state, 0) + 1
        pending = self.open_on.get(entry.stream)
        if pending is not None and decision in pending:
            pending.remove(decision)
            if not pending:
                del self.open_on[entry.stream]


class Overdue(TypedDict):
    """A decision older than the bound with no outcome."""

    position: int
    type: str
    stream: str
    recorded_at: str


class Report(TypedDict):
    """The JSON form of the enactment line of ``allot replay --verify``."""

    decisions: int
    states: dict[str, int]
    bound_seconds: float
    without_outcome: list[Overdue]


def verify_line(ledger: Ledger, *, now: int, bound: int) -> tuple[str, Report]:
    """The ``allot replay --verify`` report line about enactment, and its JSON form."""
    from allot_eventstore.clock import iso

    counts = ledger.counts()
    overdue = ledger.overdue(now=now, bound=bound)
    report: Report = {
        "decisions": ledger.decisions(),
        "states": counts,
        "bound_seconds": bound / 1_000_000,
        "without_outcome": [
            {"position": e.position, "type": e.type, "stream": e.stream, "recorded_at": iso(e.recorded_at)}
            for e in overdue
        ],
    }
    summary = ", ".join(f"{n} {state}" for state, n in counts.items()) or "none"
    head = f"enactment    {ledger.decisions()} decision(s) that change the cluster ({summary})"
    if not overdue:
        return f"{head}; every one older than {bound / 1_000_000:g}s has its outcome", report
    first = ", ".join(f"#{e.position} {e.type} {e.stream}" for e in overdue[:5])
    more = f" and {len(overdue) - 5} more" if len(overdue) > 5 else ""
    return (
        f"{head}; {len(overdue)} older than {bound / 1_000_000:g}s have NO outcome (not carried out in the cluster, "
        f"or not recorded): {first}{more}",
        report,
    )


async def verify_report(store: Any, *, until: int, now: int, bound: int) -> tuple[str, Report] | None:
    """Read the ledger from the log and judge it (None when the log holds no Kubernetes-mode decision: found by
    :func:`kubernetes_mode` without folding the ledger's events, a long log's worth for a stack that never ran in
    Kubernetes mode)."""
    if not await kubernetes_mode(store, until=until):
        return None
    records: AsyncIterator[Record] = store.iterate(until=until, types=TYPES)
    folding = Folding(keep_settled=False)
    async for record in records:
        folding.add(record)
    ledger = folding.ledger
    if not ledger.kubernetes:
        return None
    return verify_line(ledger, now=now, bound=bound)


async def kubernetes_mode(store: Any, *, until: int) -> bool:
    """Whether the log up to ``until`` holds a Kubernetes-mode decision, what sets ``Ledger.kubernetes`` when the
    ledger is folded (:meth:`Folding.add`): an event of a type recorded in that mode only, or a quota status
    published to the cluster. An index lookup per Kubernetes-only type, else the quota statuses published."""
    if await store.holds_any(KUBERNETES_ONLY, until=until):
        return True
    async for record in store.iterate(until=until, types=(_STATUS_PUBLISHED,)):
        if _published_to_cluster(record.type, record.payload_dict()):
            return True
    return False


def explain_lines(records: Iterable[Record]) -> list[str]:
    """``allot explain pod``: how each of the pod's cluster-changing decisions was carried out."""
    ledger = fold(records)
    if not ledger.kubernetes and not any(e.state in (ENACTED, REFUSED) for e in ledger.entries.values()):
        return []
    lines = []
    for entry in sorted(ledger.entries.values(), key=lambda e: e.position):
        said = f" by {entry.outcome}" if entry.outcome else ""
        why = f": {entry.message}" if entry.message else ""
        state = "NO OUTCOME yet" if entry.state == OPEN else entry.state
        lines.append(f"  #{entry.position} {entry.type}: {state}{said}{why}")
    return ["enacted:   in the cluster (Kubernetes mode)", *lines] if lines else []


def outcome_summary(kind: str, payload: Mapping[str, object]) -> str:
    """A timeline line's summary of an outcome (``allot explain pod``); "" for other types."""
    if kind not in OUTCOMES or kind == "pod.bound":
        return ""
    failed = kind.endswith("_failed") or payload.get("evicted") is False
    why = " ".join(str(payload.get(k) or "") for k in ("reason", "message")).strip()
    attempts = payload.get("attempts")
    tries = f" after {attempts} attempts" if isinstance(attempts, int) and attempts > 1 else ""
    return f"{'REFUSED' if failed else 'done'} by the API server{tries}{': ' + why if why else ''}"
