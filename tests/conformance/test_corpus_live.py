"""Every conformance case on the live stack — real PostgreSQL and NATS, the relay and the seven services, the
cluster recorded first and then the workload at once, as ``allot apply -f`` records it — reaches the outcome it
reaches in the simulator, and the expected one.

The cases of a feature run side by side (each on its own database and bus prefix, ``CONCURRENT`` at a time): a live
case spends its time waiting for the services, not computing. ``ALLOT_CONFORMANCE_CASES=<part of a case name>``
runs only the matching cases.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from allot_bus.names import BusNames
from allot_testing.conformance import Case, Outcome, cases, check_expected, live, simulate
from allot_testing.plugin import scratch_database, unique_bus_names

pytestmark = pytest.mark.integration

CONCURRENT = 4
ONLY = os.environ.get("ALLOT_CONFORMANCE_CASES", "")
CASES = [c for c in cases(Path(__file__).resolve().parent) if ONLY in c.name]
FEATURES = sorted({c.path.parent.name for c in CASES})


def differences(case: Case, simulated: Outcome, outcome: Outcome) -> list[str]:
    problems = check_expected(case, outcome)
    for what, sim, got in (
        ("decisions", simulated.pods, outcome.pods),
        ("node side", simulated.nodes, outcome.nodes),
        ("refusals", simulated.refused, outcome.refused),
        ("recorded pods", simulated.submitted, outcome.submitted),
    ):
        for key in sorted(set(sim) | set(got)):
            if sim.get(key) != got.get(key):
                problems.append(f"{what}: {key}: simulated {sim.get(key)!r}, live {got.get(key)!r}")
    return problems


@pytest.mark.parametrize("feature", FEATURES)
async def test_every_case_of_the_feature_live_equals_simulated(
    feature: str, pg_server, pg_template, nats_server_url
) -> None:
    chosen = [c for c in CASES if c.path.parent.name == feature]
    simulated = {c.name: simulate(c)[1] for c in chosen}  # before the stacks start: they share this loop
    room = asyncio.Semaphore(CONCURRENT)

    async def run(case: Case) -> list[str]:
        async with room, scratch_database(pg_server.url, pg_template) as url:
            names = BusNames(**unique_bus_names())
            try:
                outcome = await live(case, url, nats_server_url, names)
            except Exception as exc:  # one case's failure must not hide the others'
                return [f"the live run failed: {type(exc).__name__}: {exc}"]
            return differences(case, simulated[case.name], outcome)

    results = await asyncio.gather(*(run(c) for c in chosen))
    failed = {c.name: problems for c, problems in zip(chosen, results, strict=True) if problems}
    assert not failed, "\n".join(
        f"{name} ({next(c for c in chosen if c.name == name).expected['source']}):\n  "
        + "\n  ".join(problems)
        for name, problems in failed.items()
    )
