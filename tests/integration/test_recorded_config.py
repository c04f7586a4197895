"""Each service records the configuration it decides under (``config.applied``), and ``allot replay --verify``
re-derives every decision under the configuration recorded for it, not under whatever file is on disk now.

On real PostgreSQL and NATS: a stack packs pods with ``MostAllocated``; the config file is then edited (or changed
between two runs of the stack), and verification must still reproduce every decision and name the configuration
each one ran under. A log recorded before services recorded their configuration still verifies with the file on
disk, and says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_bus.names import BusNames
from allot_cli.commands import replay
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_runtime.recorded_config import config_hash
from allot_stack.apply import record
from allot_testing.builders import a_node, a_pod
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration

PACK: dict[str, Any] = {"scoring": {"nodeResourcesFit": {"strategy": "MostAllocated"}}}
SPREAD: dict[str, Any] = {"scoring": {"nodeResourcesFit": {"strategy": "LeastAllocated"}}}


def _inputs(*docs: dict[str, Any]) -> list[Any]:
    return [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate(docs)]


async def _run(
    database_url: str, nats_url: str, names: BusNames, config: dict[str, Any], docs: list, **kw: Any
):
    async with InProcessStack(database_url, nats_url, names, {"device-allocator": config}, **kw):
        await record(database_url, _inputs(*docs), wait=True, wait_each=False, timeout=60)


async def _placements(url: str) -> dict[str, str]:
    store = PostgresEventStore.connect(url)
    try:
        placed = await store.read(types=["pod.placed"], limit=10_000)
        return {e.payload_dict()["pod"]["name"]: e.payload_dict()["node"] for e in placed}
    finally:
        await store.close()


async def _applied(url: str) -> list[dict[str, Any]]:
    store = PostgresEventStore.connect(url)
    try:
        return [e.payload_dict() for e in await store.read(types=["config.applied"], limit=10_000)]
    finally:
        await store.close()


def _write(config_dir: Path, config: dict[str, Any]) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "device-allocator.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _verify(capsys: pytest.CaptureFixture[str], config_dir: Path | None, *, as_json: bool = True):
    parser = argparse.ArgumentParser()
    replay.register(parser.add_subparsers())
    argv = ["replay", "--verify", "--no-live", *(["--json"] if as_json else [])]
    if config_dir is not None:
        argv += ["--config-dir", str(config_dir)]
    capsys.readouterr()
    code = await replay.run(parser.parse_args(argv))
    out = capsys.readouterr().out
    return code, (json.loads(out) if as_json else out)


@pytest.fixture
def env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.delenv("ALLOT_STATE_DIR", raising=False)
    return database_url


NODES = [a_node("n1", cpu="32"), a_node("n2", cpu="32")]


async def test_editing_the_config_file_afterwards_is_not_a_mismatch(
    env, nats_server_url, bus_names, capsys, tmp_path
):
    names = BusNames(**bus_names)
    await _run(env, nats_server_url, names, PACK, [*NODES, *(a_pod(f"p{i}", cpu="4") for i in range(4))])
    placed = await _placements(env)
    assert len(placed) == 4 and len(set(placed.values())) == 1, f"MostAllocated packs: {placed}"

    _write(tmp_path / "config", SPREAD)  # the file now says the opposite of what the service ran with
    code, report = await _verify(capsys, tmp_path / "config")
    assert code == 0 and report["ok"], report.get("first_mismatch")
    allocator = report["decisions"]["device-allocator"]
    assert allocator["mismatches"] == 0 and allocator["triggers"] > 0
    [used] = allocator["configs"]
    assert used["recorded"] is True and used["hash"] == config_hash(PACK)
    assert used["triggers"] == allocator["triggers"] and used["first"] > used["after"] == 0

    code, text = await _verify(
        capsys, None, as_json=False
    )  # no file at all: the recorded config still governs
    assert code == 0, text
    assert f"device-allocator     recorded config {config_hash(PACK)[:12]}" in text


async def test_a_config_change_mid_log_verifies_each_decision_under_its_own_config(
    env, nats_server_url, bus_names, capsys, tmp_path
):
    names = BusNames(**bus_names)
    await _run(env, nats_server_url, names, PACK, [*NODES, *(a_pod(f"a{i}", cpu="4") for i in range(3))])
    await _run(env, nats_server_url, names, SPREAD, [a_pod(f"b{i}", cpu="4") for i in range(3)])
    placed = await _placements(env)
    first = {placed[f"a{i}"] for i in range(3)}
    assert len(first) == 1, placed
    assert {placed[f"b{i}"] for i in range(3)}.isdisjoint(first), (
        f"LeastAllocated spreads to the other node: {placed}"
    )

    applied = [a for a in await _applied(env) if a["decider"] == "device-allocator"]
    assert [a["hash"] for a in applied] == [config_hash(PACK), config_hash(SPREAD)]
    for file_config in (PACK, SPREAD, None):  # whatever the file says now
        config_dir = tmp_path / "config" if file_config is not None else None
        if config_dir is not None:
            _write(config_dir, file_config)
        code, report = await _verify(capsys, config_dir)
        assert code == 0 and report["ok"], report.get("first_mismatch")
        allocator = report["decisions"]["device-allocator"]
        pack, spread = allocator["configs"]
        assert (pack["hash"], spread["hash"]) == (config_hash(PACK), config_hash(SPREAD))
        assert pack["triggers"] > 0 and spread["triggers"] > 0
        assert pack["triggers"] + spread["triggers"] == allocator["triggers"]
        assert pack["last"] <= spread["after"] < spread["first"], (pack, spread)


async def test_a_restart_with_the_same_config_records_nothing_new(env, nats_server_url, bus_names):
    names = BusNames(**bus_names)
    await _run(env, nats_server_url, names, PACK, [*NODES, a_pod("a0", cpu="4")])
    await _run(env, nats_server_url, names, PACK, [a_pod("a1", cpu="4")])
    applied = await _applied(env)
    deciders = [a["decider"] for a in applied]
    assert sorted(deciders) == sorted(set(deciders)), "one config.applied per decider"
    assert {"device-allocator", "quota-manager", "binder"} <= set(deciders)
    [allocator] = [a for a in applied if a["decider"] == "device-allocator"]
    assert json.loads(allocator["config"]) == PACK and allocator["after"] == 0


async def test_a_log_without_recorded_config_verifies_with_the_file_and_says_so(
    env, nats_server_url, bus_names, capsys, tmp_path
):
    names = BusNames(**bus_names)
    docs = [*NODES, *(a_pod(f"p{i}", cpu="4") for i in range(3))]
    await _run(env, nats_server_url, names, PACK, docs, record_configs=False)
    assert await _applied(env) == []

    path = _write(tmp_path / "config", PACK)
    code, report = await _verify(capsys, tmp_path / "config")
    assert code == 0 and report["ok"], report.get("first_mismatch")
    [used] = report["decisions"]["device-allocator"]["configs"]
    assert used["recorded"] is False and used["file"] == str(path) and used["hash"] == config_hash(PACK)
    code, text = await _verify(capsys, tmp_path / "config", as_json=False)
    assert code == 0 and f"no recorded config: verified with the file on disk ({path})" in text

    _write(tmp_path / "config", SPREAD)  # with nothing recorded, the file is all there is: it must be right
    code, report = await _verify(capsys, tmp_path / "config")
    assert code == 1 and report["first_mismatch"]["processor"] == "device-allocator"


async def test_two_instances_racing_with_the_same_config_record_it_once(env):
    """A standby that takes over (or two instances started at once) with the same configuration: one event."""
    import asyncio

    from allot_runtime.recorded_config import AppliedConfig, record_config

    stores = [PostgresEventStore.connect(env) for _ in range(4)]
    try:
        applied = AppliedConfig(config=PACK, source="/etc/allot/device-allocator.yaml")
        results = await asyncio.gather(
            *(record_config(store, "device-allocator", applied, after=0) for store in stores),
            return_exceptions=True,
        )
        positions = [r for r in results if isinstance(r, int)]
        assert len(positions) == 1, results
        assert all(r is None or isinstance(r, Exception) for r in results if not isinstance(r, int))
        assert await record_config(stores[0], "device-allocator", applied, after=5) is None, "unchanged"
        changed = AppliedConfig(config=SPREAD)
        assert await record_config(stores[0], "device-allocator", changed, after=5) is not None
        assert await record_config(stores[0], "device-allocator", applied, after=5) is not None, (
            "changed back"
        )
        assert [a["hash"] for a in await _applied(env)] == [config_hash(c) for c in (PACK, SPREAD, PACK)]
    finally:
        for store in stores:
            await store.close()
