"""What users read about Reservations and PodMigrationJobs: `allot get reservations|migrations` rows and the decision
lines of `allot sim run` / `allot decisions`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from allot_cli.output import render
from allot_contracts.envelope import NewEvent, derived_event_id
from allot_eventstore.memory import InMemoryEventStore
from allot_reservation.testing import Driver, a_job_manifest, a_pod_manifest, a_reservation_manifest
from allot_stack.reservation_views import migration_rows, reservation_rows
from allot_views.decisions import decisions
from allot_views.kinds import kind_named


def scenario() -> Driver:
    d = Driver()
    d.node("n1")
    d.node("n2")
    d.reservation(a_reservation_manifest("r1", ttl="1h"))
    d.placed_reservation("r1", "n2")
    d.reservation(a_reservation_manifest("bad", owners=[{}]))
    d.pod(a_pod_manifest("web-0", labels={"app": "web"}, node="n1"))
    d.job(a_job_manifest("j1", pod="default/web-0", mode="EvictDirectly"))
    d.job(a_job_manifest("j2", pod="default/web-0", mode="Teleport"))
    return d


def test_rows() -> None:
    engine = scenario().engine
    rows = {r["reservation"]: r for r in reservation_rows(engine)}
    assert rows["r1"]["phase"] == "Available" and rows["r1"]["node"] == "n2"
    assert rows["r1"]["allocatable"] == "cpu=2 memory=4Gi" and rows["r1"]["expires"].endswith("Z")
    assert rows["bad"]["phase"] == "Rejected" and "spec.owners[0]" in rows["bad"]["message"]
    jobs = {r["job"]: r for r in migration_rows(engine)}
    assert jobs["j1"]["phase"] == "Succeeded" and jobs["j1"]["from"] == "n1"
    assert jobs["j2"]["reason"] == "Invalid" and "spec.mode" in jobs["j2"]["message"]


def test_tables_print(capsys: Any) -> None:
    engine = scenario().engine
    reservations = [{**r, "name": r["reservation"], "labels": {}} for r in reservation_rows(engine)]
    jobs = [{**r, "name": r["job"], "labels": {}} for r in migration_rows(engine)]
    out = render(kind_named("reservations"), reservations, "table") + render(kind_named("pmj"), jobs, "table")
    assert out.startswith("NAME  PHASE") and "\nr1  " in out and "spec.mode" in out
    for kind, rows in (("reservations", reservations), ("pmj", jobs)):  # a default table fits 80 columns
        assert max(len(line) for line in render(kind_named(kind), rows, "table").splitlines()) <= 80
    wide = render(kind_named("pmj"), jobs, "wide")
    assert "EvictDirectly" in wide and max(len(line) for line in wide.splitlines()) > 80


def test_decision_lines() -> None:
    d = scenario()
    store = InMemoryEventStore()
    store.append_sync(
        [
            NewEvent(stream_id=stream, event=event, event_id=derived_event_id("t", str(i), 0))
            for i, (stream, event) in enumerate(d.decided)
        ],
        producer="reservation-manager",
    )
    lines = {(x["pod"], x["outcome"]) for x in decisions(store.events)}
    assert ("Reservation/bad", "Rejected") in lines
    assert ("default/web-0", "Evicted") in lines
    assert ("PodMigrationJob/j1", "Succeeded") in lines
    assert ("PodMigrationJob/j2", "Rejected") in lines


EXAMPLE = str(
    Path(__file__).resolve().parents[2] / "examples" / "reservation" / "03-affinity-taints-exact-match.yaml"
)


async def test_explain_says_which_reservation_and_why_not() -> None:
    from allot_sim.scenario import run
    from allot_stack.explain import explain, history

    sim, _, _ = run(EXAMPLE, config={})
    placed = "\n".join(explain("ml/tolerant", *await history(sim.store, "ml/tolerant")))
    assert "reservation: placed in pool-a" in placed
    assert "reservation.resolved" in placed and "1 reservation(s) match: pool-a" in placed
    refused = "\n".join(explain("ml/intolerant", *await history(sim.store, "ml/intolerant")))
    assert "a reservation is required: the pod has a reservation affinity" in refused
    assert "not usable: pool-a: reservation(s) had untolerated taint {dedicated: ml}" in refused
    assert "node(s) no reservations match reservation affinity" in refused
