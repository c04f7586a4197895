"""The external-servers case: the machine's own PostgreSQL and NATS (ALLOT_EXTERNAL_DATABASE_URL /
ALLOT_EXTERNAL_NATS_URL, defaults 127.0.0.1:5432 and :4222). Skipped with the reason when they do not answer.

Runs the event-store contract and a whole pipeline scenario through the services' runtimes against them, which also
covers older servers (e.g. nats-server 2.9, without multi-subject consumer filters).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from allot_bus.names import BusNames
from allot_cli.commands.decisions import live_decisions
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import load_documents
from allot_intake.manifests import to_input
from allot_sim.scenario import run
from allot_stack.apply import record
from allot_testing.contracts.store import EventStoreContract
from allot_testing.stack import InProcessStack
from allot_views.decisions import decisions

pytestmark = [pytest.mark.integration, pytest.mark.external]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class TestExternalPostgresStore(EventStoreContract):
    @pytest.fixture
    async def store(self, external_database_url):
        store = PostgresEventStore.connect(external_database_url)
        yield store
        await store.close()


async def test_a_scenario_through_external_postgres_and_nats(external_database_url, external_nats_url):
    scenario = str(EXAMPLES / "gangs" / "01-gang-of-four.yaml")
    sim, _, _ = run(scenario, config={})
    suffix = uuid.uuid4().hex[:10]
    names = BusNames(prefix=f"ext{suffix}", stream=f"ALLOT_EXT{suffix.upper()}")
    async with InProcessStack(external_database_url, external_nats_url, names, delete_stream=True):
        await record(
            external_database_url,
            [to_input(d) for d in load_documents(scenario)],
            wait=False,
            wait_each=True,
            timeout=60,
        )
    assert await live_decisions(external_database_url) == decisions(sim.store.events)
