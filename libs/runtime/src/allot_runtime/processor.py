"""Processors: the pure heart of every service, and the host that runs one over the log.

A processor owns a projection (its state) and two pure methods (docs/adr/0003-replayable-decisions.md):

- ``evolve(event, at=…, own=…)`` applies an event to the state: an input from another producer, or one of the
  processor's own decisions;
- ``decide(event, at=…)`` returns the events to emit in answer to an input, without touching the state. ``at`` is the
  time recorded on the triggering event (microseconds), the only notion of "now" a decision may use.

The host applies a trigger, asks for the decision, and applies the processor's own outputs *immediately*, at the
trigger's place in the log (not at the later position where the outputs land). Rebuilding does the same with the
recorded outputs, so a rebuilt projection equals the live one, and replay can re-run ``decide`` at each trigger and
compare with what was recorded. The basis of a decision is therefore exact: every event of interest at or before the
trigger, plus the processor's own earlier decisions.

Output ids are ``uuid5(producer / trigger id / index)``: deciding again yields the same ids, so re-appending is a no-op.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import msgspec

from allot_contracts.envelope import NewEvent, RecordedEvent, canonical, derived_event_id, stream_id
from allot_contracts.errors import InvalidConfig
from allot_contracts.events import Event, TimerFired
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.lives import PodLives
from allot_runtime import statecodec


class Emit(msgspec.Struct, frozen=True, kw_only=True):
    """One event a decision emits, on a stream."""

    stream_id: str
    event: Event
    expected_version: int | None = None


@runtime_checkable
class Processor(Protocol):
    """The one contract every decider implements (docs/adr/0012-processor-contract.md).

    A processor is a projection (its state) and two pure methods, with nothing passed between them but the state:

    - ``evolve`` folds one event into the state: an input (``own=False``, a type in ``interests``) or one of the
      processor's own decisions (``own=True``). It is the only method that changes the state. An event it does not
      know (neither of interest nor its own) changes nothing.
    - ``decide`` answers an input from the state and the trigger alone, after the host has evolved the trigger. It
      changes nothing (the state digest is the same before and after) and gives the same events for the same state
      and trigger. What an input leaves to be recorded (an allocation freed, an engine's answer) is *owed output*:
      part of the state, in ``snapshot()``, and settled by evolving the own output that records it, never by the
      next input.
    - ``snapshot`` is the whole projection that decisions read, as JSON builtins: its digest is what rebuild,
      replay and the shared test suite (``allot_testing.processor_contract``) compare.

    A processor is built from its decision config (a mapping, see :data:`ProcessorFactory`); a bad config raises
    :class:`~allot_contracts.errors.InvalidConfig` naming each refused field by its path.
    """

    name: ClassVar[str]
    interests: ClassVar[frozenset[str]]

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        """Fold ``event``, recorded at ``at`` (µs), into the state; ``own``: one of this processor's decisions."""
        ...

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        """The events answering the input ``event`` (already evolved), read from the state; changes nothing."""
        ...

    def snapshot(self) -> Mapping[str, object]:
        """The projection as JSON builtins, owed output included."""
        ...


@runtime_checkable
class TimedProcessor(Processor, Protocol):
    """A processor that needs time to pass (timeouts, delays). ``next_deadline`` is when (µs since the epoch) it
    wants a ``timer.fired`` event; the shell records one at that time and the processor decides on it. Only the
    recorded event's time is used, so replay reproduces timed decisions exactly. Like ``decide``, it reads the
    state only."""

    def next_deadline(self) -> int | None: ...


ProcessorFactory = Callable[["JsonObject | None"], Processor]
"""How a processor is built: from its decision config (``None`` or ``{}``: the defaults)."""


def instance_name(service: str, instance: str = "") -> str:
    """The consumer and producer name of one instance of a service: ``qos-enforcer`` for the single instance,
    ``qos-enforcer@node-7`` for a per-node instance (a DaemonSet pod), which decides only for its node."""
    return f"{service}@{instance}" if instance else service


def config_keys(config: JsonValue, allowed: Iterable[str], service: str) -> JsonObject:
    """A decision config that is a mapping of known keys only (else :class:`InvalidConfig` naming them)."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InvalidConfig([FieldIssue(path="", message=f"the {service} config must be a mapping")])
    known = sorted(allowed)
    issues = [
        FieldIssue(
            path=str(k), code="FieldValueNotSupported", message=f"unknown key; supported: {', '.join(known)}"
        )
        for k in sorted(map(str, config))
        if k not in known
    ]
    if issues:
        raise InvalidConfig(issues, subject=f"{service} config")
    return config


def scoped_node(config: JsonObject) -> str:
    """The node a per-node instance decides for (``scope.node``, set from ``ALLOT_INSTANCE``); "" for all nodes."""
    scope = config.get("scope")
    if scope is None:
        return ""
    node = scope.get("node") if isinstance(scope, dict) else None
    if not isinstance(scope, dict) or not isinstance(node, str | None):
        raise InvalidConfig([FieldIssue(path="scope.node", message="must be a node name")])
    return node or ""


def timer_producer(service: str) -> str:
    """Timer events are recorded by ``<service>.timer``, so the service consumes them as input, not as its own."""
    return f"{service}.timer"


def timer_event_id(service: str, deadline: int, consumed: int) -> str:
    """The id of the ``timer.fired`` event for a deadline of a service that has consumed ``consumed`` timer events so
    far: until the service has seen it, asking again (a tick, a restart, a second instance) records nothing new."""
    return derived_event_id(timer_producer(service), f"{deadline}/{consumed}", 0)


def timer_fired(name: str, deadline: int, consumed: int, *, service: str | None = None) -> NewEvent:
    """The ``timer.fired`` event recorded (under :func:`timer_producer`) when decider ``name``'s ``deadline`` has
    passed and it has consumed ``consumed`` timer events: on its timer stream, with :func:`timer_event_id`.
    ``service``: the service the event names when ``name`` is one instance's (default: ``name``)."""
    return NewEvent(
        stream_id=stream_id("timer", name),
        event=TimerFired(service=name if service is None else service, due=deadline),
        event_id=timer_event_id(name, deadline, consumed),
    )


# What a decider's shell records under ``<decider>.<suffix>``: timers, its configuration, leadership, fencing, the
# Kubernetes API's answers and a node agent's findings. None of them is a decider of its own.
SHELL_SUFFIXES = frozenset({"timer", "config", "lease", "fence", "kube", "agent"})


def is_shell_producer(producer: str) -> bool:
    """Whether ``producer`` is a decider's shell (``qos-enforcer@node-7.timer``), not a decider."""
    return "." in producer and producer.rsplit(".", 1)[1] in SHELL_SUFFIXES


DEAD_LETTERED = "consumer.dead_lettered"


def dead_lettered(outputs: Iterable[RecordedEvent]) -> bool:
    """Whether the outputs recorded for a trigger say its consumer gave up on it."""
    return any(output.type == DEAD_LETTERED for output in outputs)


def digest_of(snapshot: Mapping[str, object]) -> str:
    """A stable hash of a processor's snapshot (canonical JSON)."""
    return hashlib.sha256(canonical(snapshot)).hexdigest()


class Host:
    """Runs one processor over events, live or from the log. Not thread-safe; one host per processor instance."""

    def __init__(self, processor: Processor, name: str | None = None) -> None:
        self.processor = processor
        self.name = name or processor.name
        self.interests = processor.interests
        self.position = 0
        self.timers = 0  # timer.fired events of this host consumed so far
        self.lives = PodLives()  # the current life of every pod; events about another life are ignored

    def wants(self, record: RecordedEvent) -> bool:
        return record.type in self.interests and record.producer != self.name

    def accept(self, record: RecordedEvent, outputs: Iterable[RecordedEvent] = ()) -> Event | None:
        """The trigger's event, or None when it is to be skipped: it is about another life of its pod, or its
        recorded ``outputs`` say the consumer dead-lettered it (the live service rebuilt without it)."""
        if record.producer == timer_producer(self.name):
            self.timers += 1
        if outputs and dead_lettered(outputs):  # most triggers have no outputs to look through
            return None
        event = record.decode()
        if self.lives.stale(event):
            return None
        self.lives.observe(event)
        return event

    def step(self, record: RecordedEvent) -> list[NewEvent]:
        """Handle a live trigger: evolve, decide, evolve the outputs. Returns the events to append. The processor's
        own decisions coming back from the bus are passed over, as replay and rebuild pass them over (``wants``):
        the processor already evolved them when it made them."""
        if record.producer == self.name:
            self.position = record.position
            return []
        event = self.accept(record)
        if event is None:
            self.position = record.position
            return []
        self.processor.evolve(event, at=record.recorded_at, own=False)
        emits = self.processor.decide(event, at=record.recorded_at)
        news = self.to_new_events(record, emits, trigger=event)
        for new in news:
            self.evolve_own(new.event, at=record.recorded_at)
        self.position = record.position
        return news

    def evolve_own(self, event: Event, *, at: int) -> None:
        """Apply one of the processor's own decisions. A decision may end a pod's life and begin another (a
        standalone eviction deletes the pod and submits it again): the host follows those lives too."""
        self.processor.evolve(event, at=at, own=True)
        self.lives.observe(event)

    def to_new_events(
        self, record: RecordedEvent, emits: Iterable[Emit], *, trigger: Event | None = None
    ) -> list[NewEvent]:
        correlation = record.correlation_id or record.event_id
        return [
            NewEvent(
                stream_id=emit.stream_id,
                event=self.lives.stamp(emit.event, trigger),
                event_id=derived_event_id(self.name, record.event_id, index),
                causation_id=record.event_id,
                correlation_id=correlation,
                expected_version=emit.expected_version,
            )
            for index, emit in enumerate(emits)
        ]

    def apply_recorded(self, record: RecordedEvent, outputs: Iterable[RecordedEvent]) -> None:
        """Rebuild path: apply a trigger and the outputs recorded for it, without deciding. A trigger this processor
        dead-lettered is skipped: the live service rebuilt without it too."""
        outputs = list(outputs)
        if (event := self.accept(record, outputs)) is not None:
            self.processor.evolve(event, at=record.recorded_at, own=False)
            for output in outputs:
                self.evolve_own(output.decode(), at=record.recorded_at)
        self.position = record.position

    def digest(self) -> str:
        return digest_of(self.processor.snapshot())

    def kept(self) -> list[str]:
        """What a snapshot does not store but takes from a host built afresh from the configuration: the host's
        name and interests, and the processor's ``snapshot_fresh`` attribute paths (what cannot be encoded, or is
        derived from the configuration alone)."""
        fresh: frozenset[str] = getattr(self.processor, "snapshot_fresh", frozenset())
        return ["name", "interests", *(f"processor.{path}" for path in sorted(fresh))]

    def export_state(self) -> bytes:
        """The host's state (position, timers consumed, the pods' lives) and its processor's projection, as bytes
        (:mod:`allot_runtime.statecodec`); :class:`~allot_runtime.statecodec.StateCodecError` names what cannot be
        encoded."""
        return statecodec.export_state(self, self.kept(), overlay=("processor",))

    def export_state_parts(self) -> list[Any]:
        """:meth:`export_state` as consecutive buffers (joined, the same bytes)."""
        return statecodec.export_state_parts(self, self.kept(), overlay=("processor",))

    def restore_state(self, data: bytes) -> None:
        """Overlay a state :meth:`export_state` made onto this host, freshly built from the same configuration."""
        statecodec.restore_state(data, self, self.kept(), overlay=("processor",))

    def deadline(self) -> int | None:
        next_deadline = getattr(self.processor, "next_deadline", None)
        return next_deadline() if next_deadline is not None else None
