"""The hypothetical records, run through the folded deciders in memory: the simulator's pump over a live log's state.

The given documents become the events ``allot apply`` would record (through the same door), placed after the
folded position at the time of the event there; every decider interested in a record steps it (the live services'
decision code, :meth:`allot_runtime.processor.Host.step`), and what they emit is chained on, in log order, until
nothing new is emitted. Event ids derive from the position and the document's index, so the same question against
the same log gives the same answer to the byte. Timers are not fired: time does not pass in a what-if.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from allot_contracts.envelope import NewEvent, RecordedEvent, prepare

if TYPE_CHECKING:
    from allot_intake.manifests import Input
    from allot_runtime.processor import Host

WHATIF_NS = uuid.UUID("5b0f6c52-8f7e-4d3c-9a41-2e6f1d0b7c39")
MAX_RECORDS = 100_000  # a chain of decisions longer than this is a loop, not an answer


class Trial:
    """Records appended in memory after ``position``; ``records``: every one of them, in order."""

    def __init__(self, hosts: list[Host], *, position: int, at: int, prev_hash: bytes) -> None:
        self.hosts = hosts
        self.position = position
        self.at = at
        self.prev_hash = prev_hash
        self.records: list[RecordedEvent] = []
        self.cursor = 0
        self.versions: dict[str, int] = {}

    def append(self, news: list[NewEvent], producer: str) -> None:
        for new in news:
            version = self.versions.get(new.stream_id, 0) + 1
            self.versions[new.stream_id] = version
            record = prepare(
                new,
                position=self.position + len(self.records) + 1,
                stream_version=version,
                producer=producer,
                recorded_at=self.at,
                prev_hash=self.prev_hash,
            )
            self.prev_hash = record.hash
            self.records.append(record)

    def apply(self, item: Input, index: int) -> None:
        """Record one document's events (as ``api``) and run the deciders until nothing new is emitted."""
        news = [
            NewEvent(
                stream_id=stream,
                event=event,
                event_id=str(uuid.uuid5(WHATIF_NS, f"{self.position}/{index}/{number}")),
            )
            for number, (stream, event) in enumerate(item.events)
        ]
        self.append(news, "api")
        self.pump()

    def pump(self) -> None:
        while self.cursor < len(self.records):
            if self.cursor >= MAX_RECORDS:
                raise RuntimeError(f"what-if: more than {MAX_RECORDS} records decided; stopped")
            record = self.records[self.cursor]
            self.cursor += 1
            for host in self.hosts:
                if host.wants(record):
                    news = host.step(record)
                    if news:
                        self.append(news, host.name)
