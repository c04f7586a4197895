"""Queue order and anti-starvation between plain pods and gang groups, for the device-allocator's decisions.

The pure model is ``allot_gang.queue`` (docs/gang.md): a gang group whose placement failed is *blocked*; pods placed
past it count as *bypasses*; after ``maxBypasses`` bypasses (or ``maxBlockedSeconds``) it *reserves*: pods of its
priority band or lower are held back so freed capacity gathers for it; after ``maxReserveSeconds`` without fitting
it yields. Each placement decision here is one round of that model with the item being decided plus every blocked
group: ``verdict`` before deciding (pure), ``recorded`` after the decision is applied (in ``evolve``, so a rebuilt
projection walks the same states).
"""

from __future__ import annotations

from collections.abc import Sequence

from allot_contracts.objects.pod import Pod
from allot_gang.config import QueueConfig
from allot_gang.queue import QueueItem, QueueState, Step, order, plan, record

HELD = "HeldForGang"  # the code of a pod held back so a waiting gang can gather capacity


def pod_item(key: str, pod: Pod | None, arrival: int, last_attempt_at: int) -> QueueItem:
    """``last_attempt_at``: the time of the pod's last attempt, or of its arrival if never attempted (µs)."""
    return QueueItem(
        key=key,
        priority=pod.priority if pod is not None else 0,
        sub_priority=pod.sub_priority if pod is not None else 0,
        arrival=arrival,
        last_attempt_at=last_attempt_at,
        size=1,
    )


def group_item(group: str, pods: Sequence[Pod], arrival: int, last_attempt_at: int) -> QueueItem:
    """``last_attempt_at``: the group's last attempt, or its first member's arrival (µs)."""
    return QueueItem(
        key=group,
        priority=max((p.priority for p in pods), default=0),
        sub_priority=max((p.sub_priority for p in pods), default=0),
        arrival=arrival,
        last_attempt_at=last_attempt_at,
        size=len(pods),
        is_gang=True,
    )


class GangQueue:
    def __init__(self, config: QueueConfig) -> None:
        self.config = config
        self.state = QueueState()
        self.blocked: dict[str, tuple[QueueItem, tuple[str, ...]]] = {}  # group -> (item, members)
        self.held: set[str] = set()  # pods held back for a reserving gang

    def _items(self, item: QueueItem) -> list[QueueItem]:
        return [item, *(i for key, (i, _) in sorted(self.blocked.items()) if key != item.key)]

    def verdict(self, item: QueueItem, now: int) -> Step:
        steps = plan(self.state, self._items(item), now, self.config)
        return next(s for s in steps if s.key == item.key)

    def recorded(self, item: QueueItem, placed: bool | None, now: int) -> None:
        outcome = {} if placed is None else {item.key: placed}
        self.state = record(self.state, self._items(item), outcome, now, self.config)

    def would_still_reserve(self, item: QueueItem, now: int) -> bool:
        """Would a reservation still be in force after recording that ``item`` did not fit?"""
        after = record(self.state, self._items(item), {item.key: False}, now, self.config)
        return after.reserving is not None

    def block(self, item: QueueItem, members: tuple[str, ...]) -> None:
        self.blocked[item.key] = (item, members)

    def unblock(self, group: str) -> None:
        self.blocked.pop(group, None)

    def forget_member(self, pod: str) -> None:
        for group, (item, members) in list(self.blocked.items()):
            if pod in members:
                rest = tuple(m for m in members if m != pod)
                if rest:
                    self.blocked[group] = (item, rest)
                else:
                    del self.blocked[group]

    def reserving_band(self) -> tuple[int, int] | None:
        reserving = self.state.reserving
        if reserving is None or reserving.key not in self.blocked:
            return None
        return self.blocked[reserving.key][0].band

    def blocked_in_order(self) -> list[tuple[str, tuple[str, ...]]]:
        items = [item for item, _ in self.blocked.values()]
        return [(item.key, self.blocked[item.key][1]) for item in order(items)]

    def snapshot(self) -> dict[str, object]:
        return {
            "state": self.state.to_dict(),
            "blocked": {k: list(m) for k, (_, m) in sorted(self.blocked.items())},
            "held": sorted(self.held),
        }
