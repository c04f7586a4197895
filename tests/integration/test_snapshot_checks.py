"""``allot replay --verify --check-snapshots N`` on real PostgreSQL: each of a service's newest N snapshots is
re-derived from the log (from the previous checked snapshot, or from position 0) and compared byte for byte with the
stored state; the verdict is recorded as ``snapshot.verified`` and summed up in a ``snapshots`` line. An intact
snapshot checks ok; a forged row (its state bytes replaced by another valid state, hash and digest made to match) is
reported mismatched with the first differing path, recorded, and a service restarting refuses it and restores the
snapshot before it."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import msgspec
import pytest

from allot_audit.replay_configs import plan
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_runtime.recorded_config import recorded_configs
from allot_runtime.replay import rebuild
from allot_runtime.snapshot_check import MISMATCH, OK, verdicts
from allot_runtime.snapshots import restore, take
from allot_sim.bench._history import build_history

pytestmark = pytest.mark.integration

SERVICE = "device-allocator"
HEADERS = {
    "nodes": "sn,cpu_milli,memory_mib,gpu,model",
    "pods": "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time",
}
ROWS = {
    "nodes": [f"openb-node-{i:04d},32000,131072,4,V100M16" for i in range(2)],
    "pods": [
        f"openb-pod-{100 + i:04d},{cpu},{cpu * 2},{gpus},{milli},,{qos},Running,{i * 1000},9500000,{i * 1000}"
        for i, (cpu, gpus, milli, qos) in enumerate(
            [(8000, 1, 1000, "LS"), (4000, 1, 500, "LS"), (2000, 0, 0, "BE")]
        )
    ],
}


async def _snapshot(store: PostgresEventStore, position: int) -> None:
    """Store the device-allocator's projection folded to ``position`` as its snapshot there."""
    decider = plan([SERVICE], await recorded_configs(store), {})[SERVICE]
    host = decider.first()
    await rebuild(host, store, until=position)
    await store.write_snapshot(take(host, decider.timeline.segments()[0].hash)[0], keep=10)


@pytest.fixture
async def snapshotted(database_url: str, tmp_path: Path) -> tuple[str, list[int]]:
    for kind, header in HEADERS.items():
        (tmp_path / f"{kind}.csv").write_text("\n".join([header, *ROWS[kind]]) + "\n")
    await build_history(
        database_url, 240, nodes_csv=tmp_path / "nodes.csv", pods_csv=tmp_path / "pods.csv", window=6
    )
    store = PostgresEventStore.connect(database_url)
    try:
        head, _ = await store.head()
        positions = [head // 4, head // 2, head * 3 // 4]
        for position in positions:
            await _snapshot(store, position)
    finally:
        await store.close()
    return database_url, positions


def _replay(url: str, *args: str, verify: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ALLOT_DATABASE_URL": url}
    env.pop("ALLOT_STATE_DIR", None)
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "allot"),
            "replay",
            *(["--verify", "--no-live", "--jobs", "1"] if verify else []),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def _forge(url: str, position: int) -> None:
    """Replace the snapshot at ``position`` by the state of 40 positions earlier, claiming ``position``, with its
    SHA-256 and digest: a valid row that restoring alone accepts."""
    store = PostgresEventStore.connect(url)
    try:
        decider = plan([SERVICE], await recorded_configs(store), {})[SERVICE]
        host = decider.first()
        await rebuild(host, store, until=position - 40)
        host.position = position
        forged, _ = take(host, decider.timeline.segments()[0].hash)
    finally:
        await store.close()
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute(
            "UPDATE snapshots SET state = $1, state_hash = $2, digest = $3 WHERE consumer = $4 AND position = $5",
            forged.state,
            forged.state_hash,
            forged.digest,
            SERVICE,
            position,
        )
    finally:
        await conn.close()


async def _restart(url: str, caplog: pytest.LogCaptureFixture) -> int:
    """The position a restarting device-allocator restores its projection from."""
    store = PostgresEventStore.connect(url)
    try:
        decider = plan([SERVICE], await recorded_configs(store), {})[SERVICE]
        config = decider.timeline.segments()[0]
        head, _ = await store.head()
        caplog.set_level(logging.INFO, logger="allot.snapshots")
        _, start, _ = await restore(
            functools.partial(decider.host, config), store, config_hash=config.hash, until=head
        )
        return start
    finally:
        await store.close()


async def test_intact_snapshots_check_ok_and_a_forged_one_is_recorded_and_refused(
    snapshotted: tuple[str, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    url, (first, second, third) = snapshotted
    done = _replay(url, "--check-snapshots", "3", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = msgspec.json.decode(done.stdout)
    summary = report["snapshots"][SERVICE]
    assert (summary["checked"], summary["ok"], summary["mismatched"]) == (3, 3, [])
    assert summary["newest"] == third
    store = PostgresEventStore.connect(url)
    try:
        found = await verdicts(store, SERVICE)
    finally:
        await store.close()
    assert {p: (v.result, v.start) for p, v in found.items()} == {
        first: (OK, 0),
        second: (OK, first),
        third: (OK, second),
    }
    assert await _restart(url, caplog) == third

    await _forge(url, third)
    assert await _restart(url, caplog) == third, "restoring alone does not see the forgery"
    done = _replay(url, "--check-snapshots", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("snapshots") and SERVICE in x)
    assert "3 checked, 2 ok, 1 mismatched; newest checked at position" in line
    assert f"MISMATCH: snapshot of {SERVICE} at position {third}" in done.stdout
    store = PostgresEventStore.connect(url)
    try:
        verdict = (await verdicts(store, SERVICE))[third]
    finally:
        await store.close()
    assert verdict.result == MISMATCH and verdict.start == second
    assert verdict.path not in ("", "$") and "[" in verdict.path, verdict.path  # a path into the state
    assert verdict.path in done.stdout

    caplog.clear()
    assert await _restart(url, caplog) == second, "the refuted snapshot is not used; the one before it is"
    assert f"snapshot at position {third} not used: its latest check did not reproduce it" in caplog.text
    done = _replay(url, "--since", str(third), "--json")
    report = msgspec.json.decode(done.stdout)
    assert report["since"][SERVICE]["position"] == second, "nor by --since"
    assert done.returncode == 1, "the recorded mismatch is a failure of every later verify until resolved"
    assert report["snapshot_mismatch"] == {"consumer": SERVICE, "position": third}


async def _delete(url: str, position: int) -> None:
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute("DELETE FROM snapshots WHERE consumer = $1 AND position = $2", SERVICE, position)
    finally:
        await conn.close()


@pytest.fixture
async def refuted(snapshotted: tuple[str, list[int]]) -> tuple[str, int, int]:
    """The newest snapshot forged and its mismatch recorded: the URL, the snapshot before it and its position."""
    url, (_, second, third) = snapshotted
    await _forge(url, third)
    assert _replay(url, "--check-snapshots", "1").returncode == 1
    return url, second, third


async def test_a_recorded_mismatch_fails_later_verifies_until_the_snapshot_checks_ok(
    refuted: tuple[str, int, int],
) -> None:
    url, second, third = refuted
    for args in [(), ("--since", str(second))]:  # a later verify, not checking snapshots itself
        done = _replay(url, *args)
        assert done.returncode == 1, done.stdout + done.stderr
        assert (
            f"MISMATCH: snapshot of {SERVICE} at position {third} was recorded as not the fold of the log"
            in done.stdout
        )
        line = next(x for x in done.stdout.splitlines() if x.startswith("snapshots") and SERVICE in x)
        assert f"MISMATCH at position {third}" in line
        assert "verification FAILED" in done.stderr

    await _delete(url, third)  # replaced by the true fold of the log there
    store = PostgresEventStore.connect(url)
    try:
        await _snapshot(store, third)
    finally:
        await store.close()
    assert _replay(url).returncode == 1, "a sound row alone resolves nothing: it has to be checked"
    done = _replay(url, "--check-snapshots", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _replay(url, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = msgspec.json.decode(done.stdout)["snapshots"][SERVICE]
    assert (summary["mismatched"], summary["unresolved"]) == ([], [])


async def test_a_mismatched_snapshot_no_longer_stored_is_resolved_by_a_newer_one_checked_ok(
    refuted: tuple[str, int, int],
) -> None:
    url, _, third = refuted
    await _delete(url, third)
    done = _replay(url)
    assert done.returncode == 1, "gone is not resolved: nothing was checked after it"
    assert f"snapshot of {SERVICE} at position {third} was recorded" in done.stdout
    store = PostgresEventStore.connect(url)
    try:
        newer = (await store.head())[0] - 1
        await _snapshot(store, newer)
    finally:
        await store.close()
    assert _replay(url, "--check-snapshots", "1").returncode == 0  # the newer one checks ok
    done = _replay(url, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = msgspec.json.decode(done.stdout)["snapshots"][SERVICE]
    assert [v["position"] for v in summary["mismatched"]] == [third] and summary["unresolved"] == []


async def test_check_snapshots_needs_verify(database_url: str) -> None:
    done = _replay(database_url, "--check-snapshots", "2", verify=False)
    assert done.returncode == 2 and "--check-snapshots: only with --verify" in done.stderr, done.stderr
