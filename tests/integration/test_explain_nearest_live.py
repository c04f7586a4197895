"""``allot explain pod`` and ``allot describe pod`` as a user runs them over a log in real PostgreSQL: the nearest
miss and the queue place of a pod that stays unschedulable (the simulator's log of an example, copied into a migrated
database)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from allot_eventstore.postgres import PostgresEventStore
from allot_testing.scenario import Scenario
from allot_testing.snapshots import copy_log

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("allot"))


async def _copy(s: Scenario, url: str) -> None:
    store = PostgresEventStore.connect(url)
    try:
        await copy_log(store, s.events)
    finally:
        await store.close()


def allot(url: str, *argv: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {"ALLOT_DATABASE_URL": url}
    done = subprocess.run([EXE, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_explain_and_describe_show_the_nearest_miss_and_the_queue_place(database_url: str) -> None:
    s = Scenario()
    s.apply_yaml((ROOT / "examples" / "placement" / "06-hami-shared-gpu.yaml").read_text())
    assert s.phase("ai/sixty") == "Unschedulable"
    asyncio.run(_copy(s, database_url))
    for out in (
        allot(database_url, "explain", "pod", "ai/sixty"),
        allot(database_url, "describe", "pod", "ai/sixty"),
    ):
        assert "nearest:   node n-hami (1 failing check(s): Insufficient koordinator.sh/gpu-core)" in out, out
        assert "change: free 1 GPU(s) (60% of 14.4Gi each) on node n-hami (held by ai/half-c)" in out
        assert "queue:     stage placement, attempt 1, position 1 of 1" in out
