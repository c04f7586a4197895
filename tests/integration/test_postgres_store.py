"""The event-store contract on real PostgreSQL, plus what only a real database can show."""

import asyncio

import asyncpg
import pytest

from allot_contracts.errors import ConcurrencyConflict
from allot_eventstore import verify_chain
from allot_eventstore.migrate import current_revision, head_revision, migrate
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_testing.builders import an_event
from allot_testing.contracts.store import EventStoreContract

pytestmark = pytest.mark.integration


class TestPostgresStore(EventStoreContract):
    @pytest.fixture
    async def store(self, database_url):
        store = PostgresEventStore.connect(database_url)
        yield store
        await store.close()


@pytest.fixture
async def pg_store(database_url):
    store = PostgresEventStore.connect(database_url, pool_size=10)
    yield store
    await store.close()


async def test_concurrent_appenders_get_dense_positions_and_a_valid_chain(pg_store):
    async def writer(w: int) -> None:
        for i in range(20):
            await pg_store.append([an_event(stream=f"w{w}:{i % 3}") for _ in range(4)], producer=f"w{w}")

    await asyncio.gather(*(writer(w) for w in range(8)))
    events = [e async for e in pg_store.iterate()]
    assert [e.position for e in events] == list(range(1, 8 * 20 * 4 + 1))
    for w in range(8):
        for s in range(3):
            versions = [e.stream_version for e in events if e.stream_id == f"w{w}:{s}"]
            assert versions == list(range(1, len(versions) + 1))
    report = await verify_chain(pg_store.iterate(), head=await pg_store.head())
    assert report.ok, report.problem


async def test_concurrent_writers_to_the_same_streams_all_land_with_dense_versions(pg_store):
    """Appends read the stream versions before taking the head lock (optimistically); a writer that moved one of
    the streams in between makes the append start again under the lock, never fail."""

    async def writer(w: int) -> None:
        for i in range(15):
            await pg_store.append(
                [an_event(stream=f"shared:{(w + i) % 2}") for _ in range(3)], producer=f"w{w}"
            )

    await asyncio.gather(*(writer(w) for w in range(8)))
    events = [e async for e in pg_store.iterate()]
    assert len(events) == 8 * 15 * 3
    for stream in ("shared:0", "shared:1"):
        versions = [e.stream_version for e in events if e.stream_id == stream]
        assert versions == list(range(1, len(versions) + 1))
    assert (await verify_chain(pg_store.iterate(), head=await pg_store.head())).ok


async def test_only_one_of_concurrent_writers_with_the_same_expected_version_wins(pg_store):
    results = await asyncio.gather(
        *(pg_store.append([an_event(stream="s:race", expected_version=0)], producer="t") for _ in range(6)),
        return_exceptions=True,
    )
    wins = [r for r in results if not isinstance(r, Exception)]
    assert len(wins) == 1
    assert all(isinstance(r, ConcurrencyConflict) for r in results if isinstance(r, Exception))
    assert [e.stream_version for e in await pg_store.read_stream("s:race")] == [1]


async def test_a_tailing_reader_never_sees_a_later_position_before_a_late_commit(pg_store):
    """Writer A takes position 1 and commits late; writer B must wait, so nobody can observe 2 without 1."""
    a_holds = asyncio.Event()
    seen: list[list[int]] = []

    async def slow_writer() -> None:
        pool = await pg_store._connections()
        async with pool.acquire() as conn, conn.transaction():
            await pg_store._append(conn, [an_event()], producer="slow", checkpoint=None, careful=True)
            a_holds.set()
            await asyncio.sleep(0.8)  # the delayed commit

    async def fast_writer() -> float:
        await a_holds.wait()
        result = await pg_store.append([an_event()], producer="fast")
        assert result.positions == [2]
        return asyncio.get_running_loop().time()

    async def reader() -> None:
        await a_holds.wait()
        for _ in range(40):
            seen.append([e.position for e in await pg_store.read()])
            await asyncio.sleep(0.03)

    start = asyncio.get_running_loop().time()
    _, fast_done, _ = await asyncio.gather(slow_writer(), fast_writer(), reader())
    assert fast_done - start >= 0.7, "the second append should have waited for the first to commit"
    assert all(positions in ([], [1], [1, 2]) for positions in seen), seen
    assert [] in seen and [1, 2] in seen


async def _tamper(url: str, sql: str) -> None:
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute(sql)
        await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("sql", "position", "words"),
    [
        (
            "UPDATE events SET payload = jsonb_set(payload::jsonb, '{uid}', '\"evil\"')::json WHERE position = 5",
            5,
            "does not match",
        ),
        ("UPDATE events SET producer = 'someone-else' WHERE position = 2", 2, "does not match"),
        ("DELETE FROM events WHERE position = 3", 3, "missing"),
        ("DELETE FROM events WHERE position = 10", 10, "deleted from the end"),
    ],
    ids=["edited-payload", "edited-metadata", "deleted-middle", "deleted-tail"],
)
async def test_tampering_is_detected(pg_store, database_url, sql, position, words):
    await pg_store.append([an_event() for _ in range(10)], producer="t")
    assert (await verify_chain(pg_store.iterate(), head=await pg_store.head())).ok
    await _tamper(database_url, sql)
    report = await verify_chain(pg_store.iterate(), head=await pg_store.head())
    assert not report.ok
    assert report.position == position
    assert words in report.problem


async def test_the_log_refuses_updates_and_deletes(pg_store, database_url):
    await pg_store.append([an_event()], producer="t")
    conn = await asyncpg.connect(plain_url(database_url))
    try:
        with pytest.raises(asyncpg.RaiseError, match="append-only"):
            await conn.execute("DELETE FROM events")
    finally:
        await conn.close()


async def test_concurrent_migrations_serialise_on_the_advisory_lock(empty_database_url):
    results = await asyncio.gather(*(migrate(empty_database_url) for _ in range(4)))
    assert sorted(after for _, after in results) == [head_revision()] * 4
    assert sum(1 for before, _ in results if before is None) == 1, "exactly one run did the work"
    assert await current_revision(empty_database_url) == head_revision()


async def test_a_service_start_checks_the_schema_without_alembic(empty_database_url):
    import subprocess
    import sys

    from allot_contracts.errors import SchemaMismatch
    from allot_eventstore.migrate import ensure_current

    assert await current_revision(empty_database_url) is None
    with pytest.raises(SchemaMismatch, match=f"at revision none but this version needs {head_revision()}"):
        await ensure_current(empty_database_url)
    await migrate(empty_database_url)
    await ensure_current(empty_database_url)
    probe = (
        "import asyncio, sys; from allot_eventstore.migrate import ensure_current; "
        f"asyncio.run(ensure_current({empty_database_url!r})); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'sqlalchemy')))"
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    out = done.stdout
    assert out.strip() == "[]", "a service's start imports neither Alembic nor SQLAlchemy"


def test_the_head_read_from_the_scripts_is_alembics(tmp_path):
    from alembic.script import ScriptDirectory

    from allot_eventstore.migrate import _config, _single_head, migrations_dir

    assert head_revision() == ScriptDirectory.from_config(_config()).get_current_head()
    (tmp_path / "a.py").write_text('revision = "a"\ndown_revision = None\n')
    (tmp_path / "b.py").write_text('revision: str = "b"\ndown_revision = "a"\n')
    assert _single_head(tmp_path) == "b"
    (tmp_path / "c.py").write_text('revision = "c"\ndown_revision = "a"\n')  # two heads: Alembic decides
    assert _single_head(tmp_path) is None
    (tmp_path / "c.py").write_text('revision = "c"\ndown_revision = ("a", "b")\n')  # a merge: Alembic decides
    assert _single_head(tmp_path) is None
    assert _single_head(migrations_dir() / "versions") == head_revision()


async def test_apply_refuses_a_pod_that_already_exists(database_url):
    from allot_intake.documents import Document
    from allot_intake.errors import UsageError
    from allot_intake.manifests import to_input
    from allot_stack.apply import existing_pods, record
    from allot_testing.builders import a_pod

    def inputs(*bodies):
        return [to_input(Document(source="f", index=i, body=b)) for i, b in enumerate(bodies)]

    await record(database_url, inputs(a_pod("web")), wait=False, wait_each=False, timeout=5)
    with pytest.raises(UsageError, match="pod default/web already exists"):
        await record(database_url, inputs(a_pod("web")), wait=False, wait_each=False, timeout=5)
    delete = {"apiVersion": "allot.dev/v1", "kind": "Delete", "spec": {"kind": "Pod", "name": "web"}}
    store = PostgresEventStore.connect(database_url)
    try:
        assert await existing_pods(store, inputs(delete, a_pod("web"))) == []
        assert len(await existing_pods(store, inputs(a_pod("new"), a_pod("new")))) == 1
    finally:
        await store.close()


async def test_the_store_plans_its_reads_without_parallel_workers(pg_store):
    """Every read is a page, a lookup or an append: parallel workers cost more to start than they save (a verify pass
    on a long log spent 45 % of its PostgreSQL CPU on them for pages of outputs), so the store's sessions
    have none, whatever the server's default."""
    pool = await pg_store._connections()
    async with pool.acquire() as conn:
        assert await conn.fetchval("SHOW max_parallel_workers_per_gather") == "0"
