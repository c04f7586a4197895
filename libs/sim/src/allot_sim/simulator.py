"""The simulator: the seven services' processors chained in one process over an in-memory log.

It runs exactly the decision code of the live services (the same processor classes, the same Host), so what it
answers is what the scheduler would do. Documents are applied in order; after each one, every event is delivered in
log order to every processor interested in it, until nothing new is emitted. Time is a manual clock: it only moves
with ``AdvanceClock`` documents, so runs are reproducible to the byte.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from allot_contracts.envelope import NewEvent, RecordedEvent
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.clock import ManualClock
from allot_eventstore.memory import InMemoryEventStore
from allot_eventstore.protocol import Checkpoint
from allot_intake.manifests import Input
from allot_runtime.processor import Host, timer_fired, timer_producer
from allot_stack.pipeline import PROCESSORS

SIM_NS = uuid.UUID("0d5a3f4e-9a43-4e0e-8f3a-6b0e3c1d2a77")


class Simulation:
    def __init__(
        self, configs: dict[str, JsonObject] | None = None, *, clock: ManualClock | None = None
    ) -> None:
        self.clock = clock or ManualClock()
        self.store = InMemoryEventStore(clock=self.clock)
        self.hosts = [Host(factory((configs or {}).get(name, {}))) for name, factory in PROCESSORS]
        self.cursor = 0
        self.applied = 0
        self.fired: set[tuple[str, int, int]] = set()
        # inputs to record as soon as the pump reaches a matching record: a concurrent input landing in the log
        # between two services' steps
        self.interleaved: list[tuple[Callable[[RecordedEvent], bool], Input]] = []

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def apply(self, item: Input) -> None:
        if item.advance_seconds is not None:
            self.applied += 1
            self.advance(item.advance_seconds)
        else:
            self._record(item)
        self.pump()
        self.advance(0)

    def interleave(self, when: Callable[[RecordedEvent], bool], item: Input) -> None:
        """Record ``item`` right after the first record (from now on) for which ``when`` is true."""
        self.interleaved.append((when, item))

    def _record(self, item: Input) -> None:
        self.applied += 1
        news = [
            NewEvent(
                stream_id=stream, event=event, event_id=str(uuid.uuid5(SIM_NS, f"{self.applied}/{index}"))
            )
            for index, (stream, event) in enumerate(item.events)
        ]
        if news:
            self.store.append_sync(news, producer="api")

    def advance(self, seconds: float) -> None:
        """Move the clock, firing every timer that falls due on the way, at its own time, in order."""
        target = self.clock.now_us + round(seconds * 1_000_000)
        while True:
            due = [
                (d, h.name, h.timers)
                for h in self.hosts
                if (d := h.deadline()) is not None and d <= target and (h.name, d, h.timers) not in self.fired
            ]
            if not due:
                break
            deadline, name, consumed = min(due)
            self.fired.add((name, deadline, consumed))
            self.clock.now_us = max(self.clock.now_us, deadline)
            self.store.append_sync([timer_fired(name, deadline, consumed)], producer=timer_producer(name))
            self.pump()
        self.clock.now_us = target

    def pump(self) -> None:
        events = self.store.events
        while self.cursor < len(events):
            record = events[self.cursor]
            self.cursor += 1
            for hook in [h for h in self.interleaved if h[0](record)]:
                self.interleaved.remove(hook)
                self._record(hook[1])
            for host in self.hosts:
                if host.wants(record):
                    news = host.step(record)
                    if news:
                        self.store.append_sync(
                            news, producer=host.name, checkpoint=Checkpoint(host.name, record.position)
                        )
