"""``allot replay --verify`` split over processes: each service's decisions in a task of its own, beside the chain,
give the same report as one process, on a clean log and on a tampered one (real PostgreSQL).

``allot replay --verify --since P`` on the same log with snapshots: each service's decisions are re-derived from its
newest snapshot at or before P, which is itself checked by re-deriving its interval and a sampled earlier one; the
chain is still checked in full. A decision edited after the snapshot is caught, one before it is not re-derived (the
chain catches the edit), a forged snapshot is caught, and bad ``--since`` values are refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from allot_audit import verify_jobs
from allot_audit.replay_configs import plan
from allot_audit.verify_jobs import Service, Since, verify_all
from allot_contracts.errors import Unavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_eventstore.verify import ChainCheck
from allot_runtime import forked
from allot_runtime.recorded_config import recorded_configs
from allot_runtime.replay import rebuild
from allot_runtime.snapshots import take
from allot_sim.bench._history import build_history
from allot_stack.pipeline import PROCESSORS, instances
from allot_testing.tampering import rewrite_with_recomputed_hashes

pytestmark = pytest.mark.integration

SERVICE = "device-allocator"

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


async def _verify(
    url: str, jobs: int, since: int | None = None, *, to_head: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The chain and decisions verified in ``jobs`` processes; with ``to_head`` up to the head the chain ends at (the
    calling process checks the chain on the pages its decisions read), else to wherever the log ends (the chain is
    read on its own)."""
    store = PostgresEventStore.connect(url)
    try:
        head = await store.head()
        producers = await store.producers()
        checkpoints = await store.checkpoints()
        groups = [Service(name, tuple(instances(name, producers))) for name, _ in PROCESSORS]
        through = {name: checkpoints.get(name, 0) for group in groups for name in group.instances}
        chain, verified = await verify_all(
            url,
            ChainCheck(head=head),
            groups,
            files={},
            until=head[0] if to_head else None,
            through=through,
            jobs=jobs,
            since=Since(since, head[1]) if since else None,
        )
    finally:
        await store.close()
    return msgspec.to_builtins(chain), msgspec.to_builtins(verified)


async def _tamper(url: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def test_several_processes_report_what_one_does(history: str) -> None:
    one = await _verify(history, 1)
    three = await _verify(history, 3)
    assert one == three
    assert one == await _verify(history, 9)  # one service a process: the calling one checks the chain alone
    assert one == await _verify(history, 1, to_head=False)  # the chain in a read of its own
    chain, verified = one
    assert chain["ok"] and chain["events"] >= 300
    assert verified["device-allocator"]["checked"] > 0  # type: ignore[index]
    assert all(not v["mismatches"] for v in verified.values())  # type: ignore[union-attr]


async def test_spawned_interpreters_report_what_forked_children_do(
    history: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked_report = await _verify(history, 3)
    monkeypatch.setattr(
        forked, "AVAILABLE", False
    )  # as on a system without fork: each share in a new interpreter
    assert await _verify(history, 3) == forked_report


async def test_a_share_that_fails_in_its_child_fails_the_verification_with_its_error(
    history: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(job: verify_jobs.Job, group: Service) -> None:
        raise Unavailable(f"the log went away while {group.service} was verified")

    monkeypatch.setattr(
        verify_jobs, "decisions_task", unavailable
    )  # the forked child has it too; this process not
    with pytest.raises(Unavailable, match="the log went away while device-allocator"):
        await _verify(history, 2)


async def test_an_error_that_pickle_cannot_bring_back_is_reported_with_its_traceback(
    history: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Unpicklable(Exception):
        def __init__(
            self, what: str, why: str
        ) -> None:  # two arguments: pickle cannot build it from its args
            super().__init__(f"{what}: {why}")

    def broken(job: verify_jobs.Job, group: Service) -> None:
        raise Unpicklable(group.service, "a projection that cannot be built")

    monkeypatch.setattr(verify_jobs, "decisions_task", broken)
    with pytest.raises(
        forked.ChildFailed, match=r"(?s)Traceback.*Unpicklable: device-allocator.*cannot be built"
    ):
        await _verify(history, 2)


async def test_a_system_that_will_not_fork_gets_interpreters_instead(
    history: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = await _verify(history, 3)
    started: list[forked.Child] = []
    real_start = forked.start

    def start_once(work: Any, **kwargs: Any) -> forked.Child:
        if started:
            raise BlockingIOError(11, "Resource temporarily unavailable")  # fork's EAGAIN
        started.append(real_start(work, **kwargs))
        return started[0]

    monkeypatch.setattr(forked, "start", start_once)
    assert await _verify(history, 3) == expected
    assert started and started[0].exit is not None  # the one forked was ended and reaped, not left running


async def test_an_edited_decision_is_found_by_every_split(history: str) -> None:
    await _tamper(
        history,
        "UPDATE events SET payload = jsonb_set(payload::jsonb, '{node}', '\"node-elsewhere\"')::json "
        "WHERE position = (SELECT min(position) FROM events WHERE type = 'pod.placed' AND position > 150)",
    )
    one = await _verify(history, 1)
    two = await _verify(history, 2)
    assert one == two
    assert one == await _verify(history, 2, to_head=False)
    chain, verified = one
    assert not chain["ok"] and "does not match its hash" in chain["problem"]
    mismatch = verified["device-allocator"]["mismatches"][0]  # type: ignore[index]
    assert mismatch["path"] == "outputs[0].payload.node" and mismatch["recorded"] == "node-elsewhere"


async def _decision(url: str) -> tuple[int, str, str]:
    """A device-allocator placement after position 150: its position, and the event id of the allocator's previous
    decision, recorded before the placement's trigger (an event the allocator does not decide on)."""
    conn = await asyncpg.connect(plain_url(url))
    try:
        row = await conn.fetchrow(
            "SELECT o.position, t.position AS cause FROM events o JOIN events t ON t.event_id = o.causation_id "
            "WHERE o.type = 'pod.placed' AND o.producer = $1 AND o.position > 150 ORDER BY o.position LIMIT 1",
            SERVICE,
        )
        earlier = await conn.fetchval(
            "SELECT event_id::text FROM events WHERE producer = $1 AND position < $2 ORDER BY position DESC LIMIT 1",
            SERVICE,
            row["cause"],
        )
    finally:
        await conn.close()
    return row["position"], earlier, str(row["cause"])


async def test_a_decision_whose_causation_points_elsewhere_is_caught(history: str) -> None:
    position, elsewhere, _ = await _decision(history)
    await _tamper(
        history, "UPDATE events SET causation_id = $1::uuid WHERE position = $2", elsewhere, position
    )
    one = await _verify(history, 1)
    assert one == await _verify(history, 2)
    mismatch = one[1][SERVICE]["mismatches"][0]  # type: ignore[index]
    assert mismatch["path"] == "causation" and mismatch["recorded"] == elsewhere
    assert mismatch["decision_position"] == position and mismatch["decision_type"] == "pod.placed"


async def test_a_decision_whose_causation_names_no_event_in_the_log_is_caught(history: str) -> None:
    position, _, _ = await _decision(history)
    nowhere = "00000000-0000-4000-8000-000000000002"
    await _tamper(history, "UPDATE events SET causation_id = $1::uuid WHERE position = $2", nowhere, position)
    _, verified = await _verify(history, 1)
    unclaimed = [m for m in verified[SERVICE]["mismatches"] if m["path"] == "causation"]  # type: ignore[index]
    assert [(m["decision_position"], m["trigger_position"], m["recorded"]) for m in unclaimed] == [
        (position, 0, nowhere)
    ]


async def test_a_decision_with_another_event_id_is_caught(history: str) -> None:
    position, _, cause = await _decision(history)
    await _tamper(
        history,
        "UPDATE events SET event_id = '00000000-0000-4000-8000-000000000001' WHERE position = $1",
        position,
    )
    _, verified = await _verify(history, 1)
    mismatch = verified[SERVICE]["mismatches"][0]  # type: ignore[index]
    assert mismatch["trigger_position"] == int(cause)
    assert mismatch["path"].endswith(".event_id")
    assert mismatch["recorded"] == "00000000-0000-4000-8000-000000000001"


async def test_replay_verify_reports_a_rewired_decision_under_an_intact_chain(history: str) -> None:
    position, elsewhere, _ = await _decision(history)
    await rewrite_with_recomputed_hashes(history, position, "causation_id = $2::uuid", elsewhere)
    done = _allot(history, "--verify", "--no-live", "--jobs", "1", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = msgspec.json.decode(done.stdout)
    assert report["chain"]["ok"], "the chain alone cannot tell (no signed checkpoint)"
    assert report["first_mismatch"]["path"] == "causation"
    done = _allot(history, "--verify", "--no-live", "--jobs", "1")
    assert (
        f"MISMATCH: {SERVICE}: decision pod.placed at position {position} does not reproduce: causation:"
        in done.stdout
    )


async def test_a_deleted_event_is_found_whatever_the_split(history: str) -> None:
    await _tamper(history, "DELETE FROM events WHERE position = 200")
    for jobs in (1, 4):
        chain, _ = await _verify(history, jobs)
        assert not chain["ok"] and chain["position"] == 200 and "missing" in chain["problem"]


async def _host_at(store: PostgresEventStore, position: int, *, stated: int | None = None):  # type: ignore[no-untyped-def]
    """The device-allocator's projection folded to ``position`` (claiming to be at ``stated``), and its config."""
    decider = plan([SERVICE], await recorded_configs(store), {})[SERVICE]
    host = decider.first()
    await rebuild(host, store, until=position)
    host.position = stated or position
    return host, decider.timeline.segments()[0].hash


@pytest.fixture
async def snapshotted(history: str) -> tuple[str, list[int]]:
    """The log with three snapshots of the device-allocator."""
    store = PostgresEventStore.connect(history)
    try:
        head, _ = await store.head()
        positions = [head // 4, head // 2, head * 3 // 4]
        for position in positions:
            host, config = await _host_at(store, position)
            await store.write_snapshot(take(host, config)[0], keep=10)
    finally:
        await store.close()
    return history, positions


def _allot(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ALLOT_DATABASE_URL": url}
    env.pop("ALLOT_STATE_DIR", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "allot"), "replay", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def test_since_starts_each_service_at_its_checked_snapshot(snapshotted: tuple[str, list[int]]) -> None:
    url, (first, second, third) = snapshotted
    one = await _verify(url, 1, third + 3)
    assert one == await _verify(url, 2, third + 3)  # the same report for any number of processes
    chain, verified = one
    assert chain["ok"]
    allocator = verified[SERVICE]
    assert allocator["start"] == third and not allocator["mismatches"] and allocator["checked"] > 0
    assert allocator["since"]["refold"] == {"start": second, "end": third, "checked": True, "reason": ""}
    assert allocator["since"]["sample"] == {"start": first, "end": second, "checked": True, "reason": ""}
    full = (await _verify(url, 1, None))[1]
    assert allocator["checked"] < full[SERVICE]["checked"]  # the triggers before the snapshot are skipped
    assert verified["quota-manager"]["start"] == 0  # no snapshot: from the start
    assert verified["quota-manager"]["checked"] == full["quota-manager"]["checked"]

    done = _allot(url, "--verify", "--no-live", "--jobs", "1", "--since", str(third + 3))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"{SERVICE:<20} from the snapshot at position {third} (state and digest ok; interval {second}–{third} "
        f"re-derived from the snapshot at {second}: reproduces; sampled earlier interval {first}–{second} "
        f"re-derived from the snapshot at {first}: reproduces): decisions at or before position {third} "
        "not re-derived" in done.stdout
    )
    assert (
        f"{'quota-manager':<20} no snapshot at or before position {third + 3}: verified from position 0"
        in (done.stdout)
    )
    earliest = _allot(url, "--verify", "--no-live", "--jobs", "2", "--since", str(first))
    assert earliest.returncode == 0, earliest.stdout + earliest.stderr
    assert (
        f"from the snapshot at position {first} (state and digest ok; interval 0–{first} re-derived from "
        "position 0: reproduces; no earlier interval to sample)" in earliest.stdout
    )


async def test_an_edited_decision_after_the_snapshot_is_caught(snapshotted: tuple[str, list[int]]) -> None:
    url, (_, _, third) = snapshotted
    await _tamper(
        url,
        "UPDATE events SET payload = jsonb_set(payload::jsonb, '{node}', '\"node-elsewhere\"')::json "
        "WHERE position = (SELECT min(position) FROM events WHERE type = 'pod.placed' AND position > $1)",
        third,
    )
    for jobs in (1, 2):
        chain, verified = await _verify(url, jobs, third)
        assert not chain["ok"]
        mismatch = verified[SERVICE]["mismatches"][0]
        assert mismatch["trigger_position"] > third and mismatch["recorded"] == "node-elsewhere"


async def test_an_edited_decision_before_the_snapshots_is_not_rederived_but_breaks_the_chain(
    snapshotted: tuple[str, list[int]],
) -> None:
    url, (first, _, third) = snapshotted
    await _tamper(
        url,
        "UPDATE events SET payload = jsonb_set(payload::jsonb, '{node}', '\"node-elsewhere\"')::json "
        "WHERE position = (SELECT max(position) FROM events WHERE type = 'pod.placed' AND position < $1)",
        first,
    )
    chain, verified = await _verify(url, 1, third)
    assert not chain["ok"] and "does not match its hash" in chain["problem"]
    assert not verified[SERVICE]["mismatches"]  # not re-derived: before every snapshot used
    assert (await _verify(url, 1, None))[1][SERVICE]["mismatches"]  # a full verify re-derives it
    done = _allot(url, "--verify", "--no-live", "--since", str(third))
    assert done.returncode == 1
    assert "hash chain   BROKEN" in done.stdout
    assert f"decisions at or before position {third} not re-derived" in done.stdout


@pytest.mark.parametrize(
    ("forged", "named"), [(2, 2), (0, 1)]
)  # the snapshot used (its interval), the start of the sampled earlier interval (named: the interval's end)
async def test_a_forged_snapshot_is_caught(
    snapshotted: tuple[str, list[int]], forged: int, named: int
) -> None:
    """A row with a valid encoding, a matching hash and digest and the right position, but the state of an earlier
    position: restoring it succeeds; re-deriving the interval it bounds does not reach the digest at its end."""
    url, positions = snapshotted
    target, reported = positions[forged], positions[named]
    store = PostgresEventStore.connect(url)
    try:
        host, config = await _host_at(store, target - 40, stated=target)
    finally:
        await store.close()
    snapshot, _ = take(host, config)
    await _tamper(
        url,
        "UPDATE snapshots SET state = $1, state_hash = $2, digest = $3 WHERE consumer = $4 AND position = $5",
        snapshot.state,
        snapshot.state_hash,
        snapshot.digest,
        SERVICE,
        target,
    )
    for jobs in (1, 2):
        chain, verified = await _verify(url, jobs, positions[2])
        assert chain["ok"]
        assert tuple(verified[SERVICE]["since"]["snapshot"]) == (SERVICE, reported)
    done = _allot(url, "--verify", "--no-live", "--since", str(positions[2]), "--json")
    assert done.returncode == 1
    report = msgspec.json.decode(done.stdout)
    assert report["snapshot_mismatch"] == {"consumer": SERVICE, "position": reported}
    assert f"snapshot of {SERVICE} at position {reported}" in report["since"][SERVICE]["problem"]
    assert "is not the fold of the log" in report["since"][SERVICE]["problem"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--verify", "--since", "abc"], "argument --since: must be a log position ≥ 1, not 'abc'"),
        (["--verify", "--since", "0"], "argument --since: must be a log position ≥ 1, not '0'"),
        (["--verify", "--since", "-5"], "argument --since: must be a log position ≥ 1, not '-5'"),
        (["--since", "10"], "--since: only with --verify"),
        (
            ["--verify", "--since", "99999999"],
            "--since: position 99999999 is after the last position verified",
        ),
        (
            ["--verify", "--until", "20", "--since", "30"],
            "position 30 is after the last position verified (20: --until)",
        ),
    ],
)
async def test_bad_since_values_are_refused(
    snapshotted: tuple[str, list[int]], args: list[str], message: str
) -> None:
    done = _allot(snapshotted[0], "--no-live", *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
