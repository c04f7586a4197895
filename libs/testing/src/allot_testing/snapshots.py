"""Checking that a service's snapshot restores its projection exactly (docs/adr/0011-bounded-verification.md).

``check_restores(service)`` runs rich workloads through the simulator (the examples, the conformance corpus of the
service's features, and a sample of the openb trace with pods coming and going), then for several cut points of each
log: folds a host to the cut, exports its state to bytes, restores the bytes into a host built afresh from the same
configuration, and continues both over the rest of the log. Every decision of the restored host must equal the
original's, the final digests must be equal, and re-encoding the restored state must give the same bytes.
"""

from __future__ import annotations

import contextlib
import io
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from allot_contracts.envelope import NewEvent, RecordedEvent
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.protocol import EventStore
from allot_intake.documents import Document, load_documents
from allot_intake.manifests import Door, to_input
from allot_runtime.processor import Host
from allot_sim.simulator import Simulation
from allot_stack.pipeline import build
from allot_testing.conformance import cases, simulate

REPO = Path(__file__).resolve().parents[4]
OPENB = next(
    (p / "shared" / "traces" / "openb" for p in REPO.parents if (p / "shared" / "traces" / "openb").is_dir()),
    REPO.parent / "shared" / "traces" / "openb",
)
CUTS = 4  # cut points per log (besides the start)


@dataclass
class Log:
    """A simulated log and the configuration the service ran under."""

    name: str
    events: list[RecordedEvent]
    configs: dict[str, JsonObject]


def example_logs(corpus: bool = False) -> Iterator[Log]:
    """Every example scenario (and with ``corpus`` every conformance case) run in the simulator."""
    for root in (REPO / "examples", *([REPO / "tests" / "conformance"] if corpus else [])):
        for case in cases(root):
            sim, _ = simulate(case)
            yield Log(case.name, list(sim.store.events), case.configs)
    for path in (REPO / "examples" / "quota").glob("*.yaml"):
        yield documents_log(path)
    yield documents_log(REPO / "examples" / "gangs" / "01-gang-of-four.yaml")


def openb_log(nodes: int = 60, pods: int = 240, window: int = 80) -> Log:
    """A sample of the openb trace: ``nodes`` GPU nodes, then ``pods`` pods in rounds of ``window``, each round deleted
    when the next arrives (submissions, placements, deletions, releases)."""
    from allot_sim.bench.openb_docs import cluster_docs, deletion, name_of, pod_docs

    sim = Simulation()
    door = Door()
    cluster = cluster_docs(OPENB / "openb_node_list_gpu_node.csv")
    keep = set(sorted(name_of(doc) for doc in cluster if doc.get("kind") == "Node")[:nodes])
    cluster = [doc for doc in cluster if name_of(doc) in keep]
    trace = pod_docs(OPENB / "openb_pod_list_default.csv", pods)

    def apply(bodies: list[JsonObject]) -> None:
        with contextlib.redirect_stderr(io.StringIO()):
            for index, body in enumerate(bodies):
                sim.apply(to_input(Document(source="openb", index=index, body=body), door=door))

    apply(cluster)
    previous: list[JsonObject] = []
    for start in range(0, pods, window):
        apply([deletion(pod) for pod in previous])
        previous = trace[start : start + window]
        apply(previous)
    return Log("openb", list(sim.store.events), {})


async def copy_log(store: EventStore, records: Iterable[RecordedEvent]) -> None:
    """Append already-recorded events (a simulated log) to ``store`` in order, with the same ids, causes and
    producers: positions and times are the store's own."""
    for producer, run in groupby(records, key=lambda r: r.producer):
        news = [
            NewEvent(
                stream_id=r.stream_id,
                event=r.decode(),
                event_id=r.event_id,
                causation_id=r.causation_id,
                correlation_id=r.correlation_id,
            )
            for r in run
        ]
        await store.append(news, producer=producer)


def _outputs(events: list[RecordedEvent], producer: str) -> dict[str, list[RecordedEvent]]:
    found: dict[str, list[RecordedEvent]] = defaultdict(list)
    for record in events:
        if record.producer == producer and record.causation_id:
            found[record.causation_id].append(record)
    return found


def _decide(host: Host, record: RecordedEvent, recorded: list[RecordedEvent]) -> list[Any]:
    """Re-derive the decision for ``record`` (as replay does), then follow the log with what was recorded."""
    event = host.accept(record, recorded)
    news: list[Any] = []
    if event is not None:
        host.processor.evolve(event, at=record.recorded_at, own=False)
        emits = host.processor.decide(event, at=record.recorded_at)
        news = [(n.stream_id, n.event_id, n.event) for n in host.to_new_events(record, emits, trigger=event)]
        for output in recorded:
            host.evolve_own(output.decode(), at=record.recorded_at)
    host.position = record.position
    return news


def check_log(service: str, log: Log, cuts: int = CUTS) -> int:
    """Check the snapshot round trip of ``service`` at ``cuts`` points of ``log``; returns the number of snapshots
    checked (an AssertionError names the log, the cut and what differs)."""
    config = log.configs.get(service, {})
    probe = Host(build(service, config))
    triggers = [r for r in log.events if probe.wants(r)]
    if not triggers:
        return 0
    outputs = _outputs(log.events, probe.name)
    points = sorted({triggers[(len(triggers) * k) // (cuts + 1)].position for k in range(1, cuts + 1)})
    checked = 0
    for cut in points:
        original = Host(build(service, config))
        for record in triggers:
            if record.position > cut:
                break
            original.apply_recorded(record, outputs.get(record.event_id, []))
        data = original.export_state()
        restored = Host(build(service, config))
        restored.restore_state(data)
        where = f"{service} on {log.name} at position {cut}"
        assert restored.digest() == original.digest(), f"{where}: the restored digest differs"
        assert restored.export_state() == data, f"{where}: the restored state encodes to other bytes"
        for record in triggers:
            if record.position <= cut:
                continue
            recorded = outputs.get(record.event_id, [])
            mine, theirs = _decide(original, record, recorded), _decide(restored, record, recorded)
            assert theirs == mine, f"{where}: the decision for position {record.position} differs"
        assert restored.digest() == original.digest(), f"{where}: the final digests differ"
        checked += 1
    return checked


def check_restores(service: str, *, corpus: bool = False) -> int:
    """Check ``service``'s snapshots on every workload (the examples, an openb sample, and with ``corpus`` the
    conformance corpus); returns the number of snapshots checked."""
    checked = 0
    for log in [openb_log(), *example_logs(corpus)]:
        checked += check_log(service, log)
    assert checked, f"{service}: no workload exercised it"
    return checked


def documents_log(path: Path) -> Log:
    """One scenario file of documents run in the simulator (for a workload that is not a case)."""
    sim = Simulation()
    door = Door()
    with contextlib.redirect_stderr(io.StringIO()):
        for document in load_documents(str(path)):
            sim.apply(to_input(document, door=door))
    return Log(path.name, list(sim.store.events), {})
