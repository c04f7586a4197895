"""The processor contract, as one test suite every service runs in its own ``tests/``
(docs/adr/0012-processor-contract.md).

Subclass :class:`ProcessorContract` (as eventsourcing's recorder test cases are subclassed per backend) with the
processor class, its config, a recorded workload (example documents run through the simulator, which records every
service's decisions in one log) and a config the processor must refuse::

    class TestContract(ProcessorContract):
        processor = GangCoordinator
        workload = ("examples/gangs/01-gang-of-four.yaml",)
        bad_config = {"queue": {"strategy": "nope"}}
        bad_field = "queue.strategy"

Each test walks the recorded log trigger by trigger, as replay does, and holds the processor to the contract:
``decide`` changes nothing and answers the same twice, with the ids and events that were recorded; evolving the
outputs gives the projection a rebuild from the log gives (owed output included); a rebuild equals the live
projection; a host restored from a snapshot taken halfway goes on deciding what was recorded; events it does not know change nothing and decide nothing; a bad config is an ``InvalidConfig`` naming
the field.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from allot_contracts.envelope import RecordedEvent, canonical
from allot_contracts.errors import InvalidConfig
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.processor import Host, Processor, ProcessorFactory, TimedProcessor, digest_of
from allot_runtime.replay import follow_recorded, rebuild, rederive
from allot_testing.scenario import Scenario

ROOT = Path(__file__).resolve().parents[4]


@dataclass(frozen=True)
class Recorded:
    """A workload run through the simulator: its log, and the live digest and position of one processor."""

    path: str
    store: InMemoryEventStore
    live_digest: str
    live_position: int


@functools.cache
def _run(name: str, path: str, config_json: str) -> Recorded:
    scenario = Scenario({name: json.loads(config_json)})
    scenario.apply(*[body for body in yaml.safe_load_all((ROOT / path).read_text()) if body])
    live = scenario.sim.host(name)
    return Recorded(
        path=path, store=scenario.sim.store, live_digest=live.digest(), live_position=live.position
    )


def _state(processor: Processor) -> str:
    return digest_of(processor.snapshot())


def _owed(snapshot: object) -> dict[str, object]:
    """The owed output in a snapshot: every non-empty entry whose key starts with ``owed``, at any depth."""
    if not isinstance(snapshot, dict):
        return {}
    found = {k: v for k, v in snapshot.items() if str(k).startswith("owed") and v}
    for key, value in snapshot.items():
        found.update({f"{key}.{k}": v for k, v in _owed(value).items()})
    return found


def _emitted(host: Host, record: RecordedEvent, emits: list[Any], event: Any) -> list[tuple[str, str, bytes]]:
    return [
        (n.event_id, n.stream_id, canonical(n.event))
        for n in host.to_new_events(record, emits, trigger=event)
    ]


class ProcessorContract:
    """The contract suite; a subclass names the processor, its config, its workload and a config to refuse."""

    processor: ClassVar[ProcessorFactory]
    config: ClassVar[JsonObject] = {}
    workload: ClassVar[
        tuple[str, ...]
    ] = ()  # document files (each run on its own), relative to the repository root
    bad_config: ClassVar[JsonObject] = {}
    bad_field: ClassVar[str] = ""  # the path the refusal of ``bad_config`` names

    # -- the recorded workload -----------------------------------------------------------------------------------
    def make(self) -> Processor:
        return type(self).processor(dict(self.config))

    @property
    def name(self) -> str:
        return self.make().name

    def recorded(self) -> list[Recorded]:
        config = json.dumps(self.config, sort_keys=True)
        return [_run(self.name, path, config) for path in self.workload]

    def triggers(self, recorded: Recorded) -> Iterator[tuple[RecordedEvent, list[RecordedEvent]]]:
        """Every input of the processor in log order, with the outputs recorded for it."""
        events = recorded.store.events
        name = self.name
        outputs: dict[str, list[RecordedEvent]] = {}
        for record in events:
            if record.producer == name and record.causation_id is not None:
                outputs.setdefault(record.causation_id, []).append(record)
        probe = Host(self.make())
        for record in events:
            if probe.wants(record):
                yield record, outputs.get(record.event_id, [])

    # -- the contract --------------------------------------------------------------------------------------------
    def test_is_a_processor(self) -> None:
        processor = self.make()
        assert isinstance(processor, Processor)
        assert isinstance(processor.name, str) and processor.name
        assert processor.interests and all(isinstance(t, str) for t in processor.interests)
        assert "timer.fired" not in processor.interests or isinstance(processor, TimedProcessor), (
            f"{processor.name} consumes timer.fired but asks for no deadline"
        )

    def test_workload_has_decisions(self) -> None:
        """The workload makes the processor decide something, else it proves nothing."""
        assert self.workload, "a contract suite needs a workload"
        for recorded in self.recorded():
            assert any(outputs for _, outputs in self.triggers(recorded)), (
                f"{self.name} decides nothing in {recorded.path}"
            )

    def test_decide_reads_the_state_only(self) -> None:
        """Per trigger: decide leaves the state as it was, answers the same twice (same ids, same events), and
        answers what was recorded; evolving its outputs settles what the input left owed (snapshot entries named
        ``owed…``) and gives the projection a rebuild from the log gives."""
        for recorded in self.recorded():
            self._walk(recorded)

    def _walk(self, recorded: Recorded) -> None:
        live, rebuilt = Host(self.make()), Host(self.make())
        for record, outputs in self.triggers(recorded):
            rebuilt.apply_recorded(record, outputs)
            event = live.accept(record, outputs)
            if event is None:
                live.position = record.position
                assert _state(live.processor) == _state(rebuilt.processor)
                continue
            live.processor.evolve(event, at=record.recorded_at, own=False)
            before = _state(live.processor)
            first = live.processor.decide(event, at=record.recorded_at)
            where = f"{self.name} at {recorded.path}:{record.position} ({record.type})"
            assert _state(live.processor) == before, f"{where}: decide changed the state"
            second = live.processor.decide(event, at=record.recorded_at)
            news = _emitted(live, record, first, event)
            assert news == _emitted(live, record, second, event), (
                f"{where}: decide answered differently twice"
            )
            answered = [(r.event_id, r.stream_id, r.payload) for r in outputs]
            assert news == answered, f"{where}: decide answered other than what was recorded"
            for new in live.to_new_events(record, first, trigger=event):
                live.evolve_own(new.event, at=record.recorded_at)
            live.position = record.position
            owed = _owed(live.processor.snapshot())
            assert not owed, f"{where}: output still owed after the decision was recorded: {owed}"
            assert _state(live.processor) == _state(rebuilt.processor), (
                f"{where}: the projection after deciding differs from the one rebuilt from the log"
            )

    def test_a_snapshot_taken_halfway_decides_on_as_recorded(self) -> None:
        """A host restored from a snapshot of the live one halfway through the workload (after deciding, so that
        whatever the processor caches is filled) has the live projection, decides the rest as was recorded, and
        ends with the live one's state byte for byte (what a snapshot check compares, sharing of values included)."""
        for recorded in self.recorded():
            triggers = list(self.triggers(recorded))
            live = Host(self.make())
            for record, outputs in triggers[: len(triggers) // 2]:
                self.decides_as_recorded(live, recorded, record, outputs)
            restored = Host(self.make())
            restored.restore_state(live.export_state())
            assert restored.digest() == live.digest(), f"{self.name}: the restored projection differs"
            for record, outputs in triggers[len(triggers) // 2 :]:
                self.decides_as_recorded(restored, recorded, record, outputs)
                self.decides_as_recorded(live, recorded, record, outputs)
            assert restored.export_state() == live.export_state(), (
                f"{self.name}: the restored host's state is not the live one's (a snapshot check would refuse it)"
            )

    def decides_as_recorded(
        self, host: Host, recorded: Recorded, record: RecordedEvent, outputs: list[RecordedEvent]
    ) -> None:
        """``host`` takes ``record`` and decides on it what was recorded (``outputs``), then folds them."""
        news = rederive(host, record, outputs)
        assert news is not None, f"{self.name} at {recorded.path}:{record.position}: skipped"
        assert [(n.event_id, n.stream_id, canonical(n.event)) for n in news] == [
            (r.event_id, r.stream_id, r.payload) for r in outputs
        ], f"{self.name} at {recorded.path}:{record.position} ({record.type}): decided other than recorded"
        follow_recorded(host, record, outputs)

    def rebuilt(self, recorded: Recorded) -> Host:
        host = Host(self.make())
        asyncio.run(rebuild(host, recorded.store, until=recorded.live_position))
        return host

    def test_rebuild_equals_the_live_projection(self) -> None:
        for recorded in self.recorded():
            assert self.rebuilt(recorded).digest() == recorded.live_digest, (
                f"{self.name}: the projection rebuilt from {recorded.path} differs from the live one"
            )

    def test_unknown_events_change_nothing(self) -> None:
        """Events of a type the processor neither consumes nor emits are not folded and decide nothing."""
        for recorded in self.recorded():
            self._ignores_unknown(recorded)

    def _ignores_unknown(self, recorded: Recorded) -> None:
        host = self.rebuilt(recorded)
        own = {r.type for r in recorded.store.events if r.producer == self.name}
        unknown = [r for r in recorded.store.events if r.type not in host.interests and r.type not in own]
        assert unknown, f"{recorded.path} has no event {self.name} ignores"
        before = host.digest()
        for record in unknown:
            event = record.decode()
            host.processor.evolve(event, at=record.recorded_at, own=False)
            assert host.digest() == before, f"{self.name}: an unknown {record.type} changed the state"
            assert host.processor.decide(event, at=record.recorded_at) == [], (
                f"{self.name}: an unknown {record.type} was answered"
            )

    def test_bad_config_names_the_field(self) -> None:
        with pytest.raises(InvalidConfig) as refused:
            type(self).processor(dict(self.bad_config))
        paths = [issue.path for issue in refused.value.issues]
        assert self.bad_field in paths, f"{self.name}: refusal names {paths}, not {self.bad_field!r}"
