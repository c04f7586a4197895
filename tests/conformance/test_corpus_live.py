"""Every conformance case on the live stack — real PostgreSQL and NATS, the relay and the seven services, the
documents recorded at once as ``allot apply -f`` records them — reaches the same outcome as in the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from allot_bus.names import BusNames
from allot_testing.conformance import cases, check_expected, live, simulate

pytestmark = pytest.mark.integration

CASES = cases(Path(__file__).resolve().parent)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_case_live_equals_simulated(case, database_url, nats_server_url, bus_names) -> None:
    _, simulated = simulate(case)
    outcome = await live(case, database_url, nats_server_url, BusNames(**bus_names))
    problems = check_expected(case, outcome)
    assert not problems, f"{case.name} live:\n  " + "\n  ".join(problems)
    assert outcome.pods == simulated.pods
    assert outcome.nodes == simulated.nodes
    assert outcome.refused == simulated.refused
    # quota status is synced at most once a second: which documents an early sync covers depends on how many the
    # services had handled by then, so only the status a case expects (after its last clock move) is compared
