"""Queue order and anti-starvation, shown both ways with a small deterministic capacity simulation."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from allot_gang import (
    Blocked,
    GangEngine,
    QueueConfig,
    QueueItem,
    QueueState,
    Step,
    less,
    order,
    plan,
    record,
)
from allot_gang.testing import a_pod, at

S = 1_000_000


def item(key: str, **kw: object) -> QueueItem:
    return QueueItem(key=key, **kw)  # type: ignore[arg-type]


LESS = [
    ("higher priority first", item("b", priority=10), item("a", priority=1)),
    ("higher sub-priority first", item("b", sub_priority=5), item("a", sub_priority=1)),
    ("priority before sub-priority", item("b", priority=2), item("a", priority=1, sub_priority=99)),
    ("older last attempt first", item("b", last_attempt_at=1), item("a", last_attempt_at=2)),
    ("earlier arrival first", item("b", arrival=1), item("a", arrival=2)),
    ("then by name", item("a"), item("b")),
]


@pytest.mark.parametrize(("first", "second"), [c[1:] for c in LESS], ids=[c[0] for c in LESS])
def test_less(first: QueueItem, second: QueueItem) -> None:
    assert less(first, second) and not less(second, first)
    assert order([second, first]) == [first, second]


def test_order_is_a_total_order_independent_of_input_order() -> None:
    items = [item(f"k{i}", priority=i % 3, sub_priority=i % 2, last_attempt_at=i % 4) for i in range(12)]
    assert order(items) == order(list(reversed(items))) == order(items[5:] + items[:5])


CFG = QueueConfig(max_bypasses=3, max_blocked_seconds=0, max_reserve_seconds=10, max_reserve_rounds=0)


def test_plan_holds_same_or_lower_band_items_for_a_reserving_gang() -> None:
    state = QueueState(blocked=(Blocked(key="gang", since=0, bypasses=3, reserving_since=5 * S),))
    items = [
        item("urgent", priority=100, last_attempt_at=9),
        item("small-old", priority=10, last_attempt_at=0),
        item("gang", priority=10, last_attempt_at=4, size=8, is_gang=True),
        item("low", priority=1),
        item("backing-off", priority=100, last_attempt_at=10, not_before=20 * S),
    ]
    assert plan(state, items, 6 * S, CFG) == [
        Step(key="urgent", verdict="attempt"),
        Step(key="backing-off", verdict="wait", reason=f"backing off until {20 * S}"),
        Step(key="gang", verdict="attempt"),
        Step(key="small-old", verdict="hold", reason="capacity held for gang"),
        Step(key="low", verdict="hold", reason="capacity held for gang"),
    ]


def test_record_counts_bypasses_then_reserves_then_yields() -> None:
    gang = item("gang", last_attempt_at=0, size=8, is_gang=True)
    smalls = [item(f"s{i}", last_attempt_at=1) for i in range(2)]
    state = QueueState()
    state = record(state, [gang, *smalls], {"gang": False, "s0": True, "s1": True}, 1 * S, CFG)
    assert state.get("gang") == Blocked(key="gang", since=1 * S, bypasses=2)
    state = record(state, [gang, smalls[0]], {"gang": False, "s0": True}, 2 * S, CFG)
    assert state.reserving == Blocked(key="gang", since=1 * S, bypasses=3, reserving_since=2 * S)
    state = record(state, [gang], {"gang": False}, 12 * S, CFG)  # reserve time is up: it yields
    # it held for 10 s, so it may not reserve again for 10 s (doubling with each further yield)
    assert state.get("gang") == Blocked(key="gang", since=12 * S, yields=1, not_before=22 * S)
    assert state.cooldown == 3
    for t in range(13, 22):
        state = record(state, [gang, smalls[0]], {"gang": False, "s0": True}, t * S, CFG)
        assert state.reserving is None
    state = record(state, [gang, smalls[0]], {"gang": False, "s0": True}, 22 * S, CFG)
    assert state.reserving is not None and state.reserving.reserving_since == 22 * S
    assert QueueState.from_dict(state.to_dict()) == state
    assert record(state, [], {}, 23 * S, CFG) == QueueState(
        cooldown=state.cooldown
    )  # items that left are forgotten


@dataclass
class Job:
    key: str
    size: int
    duration: int
    priority: int = 0
    is_gang: bool = False


@dataclass
class Sim:
    """A cluster of ``capacity`` units, one scheduling round per tick (1 s), driven by ``plan``/``record``."""

    cfg: QueueConfig
    capacity: int
    waiting: dict[str, tuple[Job, int, int]] = field(
        default_factory=dict
    )  # key -> job, last attempt, arrival
    running: list[tuple[int, int]] = field(default_factory=list)  # (end tick, size)
    placed_at: dict[str, int] = field(default_factory=dict)
    state: QueueState = field(default_factory=QueueState)
    seq: int = 0

    def add(self, job: Job, t: int) -> None:
        self.seq += 1
        self.waiting[job.key] = (job, t * S, self.seq)

    def tick(self, t: int) -> None:
        self.running = [(end, size) for end, size in self.running if end > t]
        free = self.capacity - sum(size for _, size in self.running)
        items = [
            QueueItem(
                key=key,
                priority=job.priority,
                last_attempt_at=last,
                arrival=arrival,
                size=job.size,
                is_gang=job.is_gang,
            )
            for key, (job, last, arrival) in self.waiting.items()
        ]
        results: dict[str, bool] = {}
        for step in plan(self.state, items, t * S, self.cfg):
            if step.verdict != "attempt":
                continue
            job = self.waiting[step.key][0]
            results[step.key] = job.size <= free
            if job.size <= free:
                free -= job.size
                self.running.append((t + job.duration, job.size))
                self.placed_at[job.key] = t
        self.state = record(self.state, items, results, t * S, self.cfg)
        for key, ok in results.items():
            job, _, arrival = self.waiting.pop(key)
            if not ok:
                self.waiting[key] = (job, t * S, arrival)

    def run(
        self,
        ticks: int,
        arrivals: dict[int, list[Job]] | None = None,
        stream: int = 0,
        small_duration: int = 4,
        small_priority: int = 0,
    ) -> None:
        for t in range(ticks):
            for job in (arrivals or {}).get(t, []):
                self.add(job, t)
            for j in range(stream):
                self.add(
                    Job(key=f"small-{t}-{j}", size=1, duration=small_duration, priority=small_priority), t
                )
            self.tick(t)

    def smalls_placed_between(self, start: int, end: int) -> int:
        return sum(1 for key, t in self.placed_at.items() if key.startswith("small") and start <= t < end)


NO_PROTECTION = QueueConfig(max_bypasses=10**9, max_blocked_seconds=0, max_reserve_seconds=10**6)
DEFAULTS = QueueConfig()
NEVER_YIELDS = QueueConfig(max_bypasses=8, max_blocked_seconds=120, max_reserve_seconds=10**9)


def test_small_pods_starve_a_gang_when_nothing_protects_it() -> None:
    sim = Sim(cfg=NO_PROTECTION, capacity=8)
    sim.run(600, {5: [Job(key="gang", size=8, duration=20, is_gang=True)]}, stream=2)
    assert "gang" not in sim.placed_at


@pytest.mark.parametrize("small_priority", [0, 5], ids=["same priority", "small pods have higher priority"])
def test_small_pods_cannot_starve_a_gang_forever(small_priority: int) -> None:
    sim = Sim(cfg=DEFAULTS, capacity=8)
    sim.run(
        600,
        {5: [Job(key="gang", size=8, duration=20, is_gang=True, priority=small_priority)]},
        stream=2,
        small_priority=small_priority,
    )
    assert "gang" in sim.placed_at
    assert sim.placed_at["gang"] <= 5 + 8  # bypassed max_bypasses times, then capacity is held for it
    assert sim.smalls_placed_between(0, 600) > 1000  # and the small pods keep flowing


def test_a_gang_that_never_fits_would_starve_small_pods_if_it_never_yielded() -> None:
    sim = Sim(cfg=NEVER_YIELDS, capacity=8)
    sim.run(600, {0: [Job(key="huge", size=16, duration=10, is_gang=True, priority=10)]}, stream=1)
    assert sim.smalls_placed_between(100, 600) == 0


SHORT_RESERVE = QueueConfig(max_bypasses=8, max_blocked_seconds=120, max_reserve_seconds=60)


@pytest.mark.parametrize("gang_priority", [0, 10], ids=["same priority", "gang has higher priority"])
def test_a_large_gang_cannot_starve_small_pods_forever(gang_priority: int) -> None:
    sim = Sim(cfg=SHORT_RESERVE, capacity=8)
    sim.run(
        3600, {0: [Job(key="huge", size=16, duration=10, is_gang=True, priority=gang_priority)]}, stream=1
    )
    assert "huge" not in sim.placed_at
    # it reserves (60 s), yields, waits 60 s, reserves, waits 120 s, ... so its share of time shrinks
    for start in range(0, 3600, 600):  # every 10-minute window places at least half of the arrivals
        assert sim.smalls_placed_between(start, start + 600) >= 300
    assert len(sim.waiting) <= 1 + 60  # the backlog stays bounded by one reservation window
    reserving = sim.state.get("huge")
    assert reserving is not None and reserving.yields >= 5


def test_the_engine_gives_a_queue_item_for_a_group() -> None:
    g = GangEngine()
    g.submit(a_pod("w-0", gang="train", min_available=2, priority=50, sub_priority=3), at(1))
    g.submit(a_pod("w-1", gang="train", min_available=2, priority=70), at(2))
    g.group_unschedulable("default/train", 1, "no capacity", at(3))
    assert g.queue_item("default/train") == QueueItem(
        key="group:default/train",
        priority=70,
        sub_priority=3,
        last_attempt_at=at(3),
        arrival=1,
        size=2,
        is_gang=True,
        not_before=at(13),
    )
