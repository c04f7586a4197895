"""Fuzzing the bus door: what a service reads off NATS, broken.

Seeds are the events the simulator records for a few examples (every type it writes); a case is one of them with
its payload mutated (allot_testing.manifest_fuzz.mutated), replaced by any JSON, by random bytes or by the payload
of another type, sometimes as an older schema version (the upcasters' path), or its wire envelope broken.

Properties:
- the wire envelope decodes or fails with one of the errors the consumer catches (it then terminates the message and
  catches up from PostgreSQL);
- a payload decodes to an event of the record's own type, or fails with ``msgspec.ValidationError`` /
  ``DecodeError``: never another kind of event, never another exception;
- every service interested in the type, fed the event after the example's log, decides without crashing: a payload
  it cannot read fails with an error the consumer dead-letters (``ValidationError``, ``DecodeError``,
  ``PermanentError``), never with an unexpected exception (which would be retried as a poison message);
- end to end through the consumer: an undecodable payload the log holds is dead-lettered with an error log naming it, and no
  decision is recorded.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from allot_bus import wire
from allot_bus.names import BusNames
from allot_contracts.envelope import GENESIS_HASH, RecordedEvent, canonical
from allot_contracts.errors import PermanentError
from allot_contracts.events import split_tag, tag_of
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.processor import Host
from allot_runtime.service import ProcessorRuntime
from allot_sim.scenario import run
from allot_stack.pipeline import PROCESSORS
from allot_testing import fuzz
from allot_testing.manifest_fuzz import JUNK, mutated

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = (
    "examples/demo/cluster.yaml",
    "examples/colocation/01-load-aware.yaml",
    "examples/reservation/02-migrate-reservation-first.yaml",
    "examples/gangs/02-gang-preemption.yaml",
    "examples/quota/02-reclaim.yaml",
    "examples/descheduling/01-hot-and-idle.yaml",
)
DEAD_LETTERED = (
    msgspec.ValidationError,
    msgspec.DecodeError,
    PermanentError,
)  # what the consumer gives up on
WIRE_ERRORS = (
    msgspec.DecodeError,
    msgspec.ValidationError,
    ValueError,
)  # what the consumer catches on decode
PREFIX = 60  # events of the example's log a service has seen before the broken one


@functools.cache
def recorded() -> tuple[RecordedEvent, ...]:
    records: list[RecordedEvent] = []
    with contextlib.redirect_stderr(io.StringIO()):
        for example in EXAMPLES:
            sim, _, _ = run(str(ROOT / example), config={})
            records += sim.store.events
    return tuple(records)


@functools.cache
def seeds() -> tuple[RecordedEvent, ...]:
    """One recorded event of every type the examples write."""
    by_type: dict[str, RecordedEvent] = {}
    for record in recorded():
        by_type.setdefault(record.type, record)
    return tuple(by_type[t] for t in sorted(by_type))


@functools.cache
def fed_hosts() -> dict[str, Host]:
    """Every service's host after the start of the example's log."""
    hosts = {name: Host(factory({}), name=name) for name, factory in PROCESSORS}
    for record in recorded()[:PREFIX]:
        for host in hosts.values():
            if host.wants(record):
                host.step(record)
    return hosts


@st.composite
def broken_records(draw: st.DrawFn) -> tuple[RecordedEvent, str]:
    record = draw(st.sampled_from(seeds()))
    payload = msgspec.json.decode(record.payload)
    if record.schema_version > 1 and draw(st.booleans()):
        record = msgspec.structs.replace(record, schema_version=record.schema_version - 1)
        payload["type"] = record.tag
    how = draw(st.sampled_from(("mutated", "any JSON", "bytes", "another type")))
    if how == "mutated":
        raw = canonical(draw(mutated(payload))[0])
    elif how == "any JSON":
        raw = msgspec.json.encode(draw(JUNK))
    elif how == "bytes":
        raw = draw(st.binary(max_size=64))
    else:
        raw = draw(st.sampled_from(seeds())).payload
    return msgspec.structs.replace(record, payload=raw), how


def _decides_or_dead_letters(record: RecordedEvent, tally: fuzz.Tally) -> None:
    try:
        event = record.decode()
    except (msgspec.ValidationError, msgspec.DecodeError):
        tally.count("undecodable: dead-lettered")
        return
    assert split_tag(tag_of(event))[0] == record.type, "decoded as another kind of event"
    for name, host in fed_hosts().items():
        if record.type not in host.interests:
            continue
        try:
            news = copy.deepcopy(host).step(record)
        except DEAD_LETTERED:
            tally.count(f"{name}: refused, dead-lettered")
            continue
        for new in news:
            canonical(new.event)
        tally.count(f"{name}: decided")


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_broken_payload_decodes_to_its_own_type_or_is_dead_lettered_and_no_service_crashes(
    examples: int,
) -> None:
    tally = fuzz.Tally("bus payloads (decode, evolve, decide)")

    @fuzz.settings_for(examples)
    @given(broken_records())
    def check(case: tuple[RecordedEvent, str]) -> None:
        _decides_or_dead_letters(case[0], tally)

    check()


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_broken_wire_envelope_fails_only_with_what_the_consumer_catches(examples: int) -> None:
    tally = fuzz.Tally("bus wire envelopes")

    @fuzz.settings_for(examples)
    @given(st.sampled_from(seeds()), st.data())
    def check(record: RecordedEvent, data: st.DataObject) -> None:
        envelope = msgspec.json.decode(wire.encode(record))
        raw = data.draw(
            st.one_of(
                st.binary(max_size=200),
                st.builds(msgspec.json.encode, JUNK),
                mutated(envelope).map(lambda case: msgspec.json.encode(case[0])),
            )
        )
        try:
            decoded = wire.decode(raw)
        except WIRE_ERRORS:
            tally.count("refused")
            return
        assert isinstance(decoded, RecordedEvent)
        tally.count("decoded")

    check()


def test_a_payload_of_another_type_is_not_decoded_as_that_type() -> None:
    by_type = {r.type: r for r in seeds()}
    placed, submitted = by_type["pod.placed"], by_type["pod.submitted"]
    forged = msgspec.structs.replace(placed, payload=submitted.payload)
    with pytest.raises(
        msgspec.ValidationError, match="the payload is a pod.submitted.v2 event, the record says"
    ):
        forged.decode()


def test_a_payload_that_is_not_utf8_is_undecodable() -> None:
    device = next(r for r in seeds() if r.type == "device.applied")
    with pytest.raises(msgspec.DecodeError, match="not valid UTF-8"):
        msgspec.structs.replace(device, schema_version=1, payload=b'"\x80"').decode()


def test_an_old_payload_that_cannot_be_upcast_is_undecodable() -> None:
    node = next(r for r in seeds() if r.type == "node.registered")
    old = msgspec.structs.replace(
        node,
        schema_version=1,
        payload=msgspec.json.encode({"type": "node.registered.v1", "name": "n", "manifest": "x"}),
    )
    with pytest.raises(msgspec.ValidationError, match="cannot be upcast"):
        old.decode()


def test_a_status_sync_naming_no_quota_is_refused_by_the_binder() -> None:
    synced = next(r for r in seeds() if r.type == "quota.status_synced")
    broken = msgspec.structs.replace(
        synced, payload=msgspec.json.encode({"type": "quota.status_synced.v1", "patches": {"no-slash": {}}})
    )
    with pytest.raises(PermanentError, match=r"patches\[no-slash\]: must be a namespace/name quota key"):
        copy.deepcopy(fed_hosts()["binder"]).step(broken)


class _Message:
    """A JetStream message as the consumer sees it (what it acks, terminates or naks)."""

    def __init__(self, data: bytes, sequence: int) -> None:
        self.data = data
        self.subject = "allot.events.test"
        seq = type("Seq", (), {"stream": sequence})()
        self.metadata = type("Meta", (), {"sequence": seq, "num_delivered": 1})()
        self.calls: list[str] = []

    async def ack(self) -> None:
        self.calls.append("ack")

    async def term(self) -> None:
        self.calls.append("term")

    async def nak(self, delay: float | None = None) -> None:
        self.calls.append("nak")


class _NoNats:
    def jetstream(self) -> Any:
        return None


async def test_the_consumer_dead_letters_an_undecodable_payload_logs_it_and_decides_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryEventStore()
    name, factory = next((n, f) for n, f in PROCESSORS if n == "quota-manager")
    runtime = ProcessorRuntime(
        name=name, factory=lambda: factory({}), store=store, nc=_NoNats(), names=BusNames()
    )
    submitted = next(r for r in seeds() if r.type == "pod.submitted")
    broken = msgspec.structs.replace(submitted, position=1, payload=b'{"type": "pod.submitted.v2", "pod": 7}')
    # the log itself holds it (the consumer acts only on what the log vouches for): written by a broken writer
    broken = msgspec.structs.replace(broken, hash=broken.expected_hash(GENESIS_HASH))
    store.events.append(broken)
    message = _Message(wire.encode(broken), sequence=1)
    with caplog.at_level(logging.ERROR, logger="allot.consumer"):
        await runtime.consumer._handle_messages([message])
    assert [e.type for e in store.events[1:]] == ["consumer.dead_lettered"], (
        "no decision, only the dead letter"
    )
    assert message.calls == ["term"]
    assert any(
        "dead-lettered event" in r.getMessage() and "pod.submitted.v2" in r.getMessage()
        for r in caplog.records
    )


def _with_payload(kind: str, change: Any) -> RecordedEvent:
    record = next(r for r in seeds() if r.type == kind)
    payload = msgspec.json.decode(record.payload)
    change(payload)
    return msgspec.structs.replace(record, payload=canonical(payload))


def _set_resources(payload: dict[str, Any]) -> None:
    payload["spec"] = None  # an event recorded before the door read pods: services read the manifest
    payload["manifest"]["spec"]["containers"][0]["resources"] = [-4.9e16]


def _metadata_a_string(payload: dict[str, Any]) -> None:
    payload["spec"] = None
    payload["manifest"]["metadata"] = "1000001"


def _spec_a_string(payload: dict[str, Any]) -> None:
    payload["spec"] = None  # as the upcaster of a v1 event leaves a pod today's door refuses
    payload["manifest"]["spec"] = "1e30"


# Found by the fuzzer: each made a service raise while reading the event (retried as a poison message) before.
@pytest.mark.parametrize(
    "record",
    [
        pytest.param(
            lambda: _with_payload("pod.observed", _set_resources), id="pod manifest resources a list"
        ),
        pytest.param(
            lambda: _with_payload(
                "node.registered", lambda p: p["manifest"]["metadata"].update(labels="Inf")
            ),
            id="node manifest labels a string",
        ),
        pytest.param(
            lambda: _with_payload("pod.observed", _metadata_a_string),
            id="pod manifest metadata a string",
        ),
        pytest.param(
            lambda: _with_payload("pod.observed", _spec_a_string), id="old pod manifest spec a string"
        ),
        pytest.param(
            lambda: _with_payload("reservation.group_resolved", lambda p: p.update(members=[])),
            id="gang group resolved without members",
        ),
        pytest.param(
            lambda: _with_payload("quota.applied", lambda p: p["quota"].update(name="-1")),
            id="quota event about another quota than its spec",
        ),
    ],
)
def test_what_the_fuzzer_found_does_not_crash_a_service(record: Any) -> None:
    _decides_or_dead_letters(record(), fuzz.Tally("bus payloads (found)"))
