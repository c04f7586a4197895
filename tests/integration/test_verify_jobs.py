"""``allot replay --verify`` split over processes: each service's decisions in a task of its own, beside the chain,
give the same report as one process, on a clean log and on a tampered one (real PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import msgspec
import pytest

from allot_cli.bench._history import build_history
from allot_cli.pipeline import PROCESSORS, instances
from allot_cli.verify_jobs import Service, verify_all
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_eventstore.verify import verify_chain

pytestmark = pytest.mark.integration

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"openb-node-{i:04d},64000,262144,2,P100\n" for i in range(3)
)
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
    "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n"
    "openb-pod-0002,4000,8192,0,0,,BE,Running,427062,12902960,427062\n"
)


@pytest.fixture
async def history(database_url: str, tmp_path: Path) -> str:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    await build_history(
        database_url, 300, nodes_csv=tmp_path / "nodes.csv", pods_csv=tmp_path / "pods.csv", window=6
    )
    return database_url


async def _verify(url: str, jobs: int) -> tuple[dict[str, object], dict[str, object]]:
    store = PostgresEventStore.connect(url)
    try:
        head = await store.head()
        producers = await store.producers()
        checkpoints = await store.checkpoints()
        groups = [Service(name, tuple(instances(name, producers))) for name, _ in PROCESSORS]
        through = {name: checkpoints.get(name, 0) for group in groups for name in group.instances}
        chain, verified = await verify_all(
            url,
            verify_chain(store.iterate(until=head[0]), head=head),
            groups,
            files={},
            until=None,
            through=through,
            jobs=jobs,
        )
    finally:
        await store.close()
    return msgspec.to_builtins(chain), msgspec.to_builtins(verified)


async def _tamper(url: str, sql: str) -> None:
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute(sql)
    finally:
        await conn.close()


async def test_several_processes_report_what_one_does(history: str) -> None:
    one = await _verify(history, 1)
    three = await _verify(history, 3)
    assert one == three
    chain, verified = one
    assert chain["ok"] and chain["events"] >= 300
    assert verified["device-allocator"]["checked"] > 0  # type: ignore[index]
    assert all(not v["mismatches"] for v in verified.values())  # type: ignore[union-attr]


async def test_an_edited_decision_is_found_by_every_split(history: str) -> None:
    await _tamper(
        history,
        "UPDATE events SET payload = jsonb_set(payload::jsonb, '{node}', '\"node-elsewhere\"')::json "
        "WHERE position = (SELECT min(position) FROM events WHERE type = 'pod.placed' AND position > 150)",
    )
    one = await _verify(history, 1)
    two = await _verify(history, 2)
    assert one == two
    chain, verified = one
    assert not chain["ok"] and "does not match its hash" in chain["problem"]
    mismatch = verified["device-allocator"]["mismatches"][0]  # type: ignore[index]
    assert mismatch["path"] == "outputs[0].payload.node" and mismatch["recorded"] == "node-elsewhere"


async def test_a_deleted_event_is_found_whatever_the_split(history: str) -> None:
    await _tamper(history, "DELETE FROM events WHERE position = 200")
    for jobs in (1, 4):
        chain, _ = await _verify(history, jobs)
        assert not chain["ok"] and chain["position"] == 200 and "missing" in chain["problem"]
