"""``allot what-if`` over a log in real PostgreSQL (the simulator's log of the elastic-quota example, copied into a
migrated database): answers for pods that fit (borrowing), preempt, wait for quota or do not fit (nearest miss), at
the head and at an earlier position, from a snapshot or not; a configuration replayed over a window; bad input
refused with exit code 2; and the log left exactly as it was."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from allot_audit.replay_configs import plan
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_intake.errors import UsageError
from allot_runtime.processor import Host
from allot_runtime.recorded_config import AppliedConfig, config_hash, record_config
from allot_runtime.replay import rebuild
from allot_runtime.snapshots import take
from allot_sim.whatif import render, run
from allot_sim.whatif.facts import NodeLabels
from allot_testing.scenario import Scenario
from allot_testing.snapshots import copy_log
from device_allocator.processor import DeviceAllocator

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).with_name("allot"))
EXAMPLE = ROOT / "examples" / "quota" / "01-borrow-and-wait.yaml"
GANGS = ROOT / "examples" / "gangs" / "01-gang-of-four.yaml"
PARTITIONS = ROOT / "examples" / "placement" / "04-partition-restricted.yaml"
PREFER = "node.koordinator.sh/gpu-model=H800:node.koordinator.sh/gpu-partition-policy=Prefer"


def pod(namespace: str, name: str, cpu: str, priority: int = 0, extra: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  priority: {priority}
  containers:
  - name: main
    image: trainer
    resources:
      requests: {{cpu: '{cpu}', memory: 1Gi}}
      limits: {{cpu: '{cpu}', memory: 1Gi}}
{extra}"""


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return Scenario().apply_yaml(EXAMPLE.read_text())


def _copy(url: str, scenario: Scenario) -> str:
    async def copy() -> None:
        store = PostgresEventStore.connect(url)
        try:
            await copy_log(store, scenario.events)
        finally:
            await store.close()

    asyncio.run(copy())
    return url


@pytest.fixture
def log_url(database_url: str, scenario: Scenario) -> str:
    return _copy(database_url, scenario)


def allot(url: str, *argv: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {"ALLOT_DATABASE_URL": url}
    done = subprocess.run([EXE, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done


def whatif(url: str, tmp_path: Path, text: str, *, at: int | None = None, labels: str = "") -> dict[str, Any]:
    """The report of ``allot what-if -f … -o json``, asked in this process (the CLI's own path is run once below)."""
    path = tmp_path / "pods.yaml"
    path.write_text(text)
    facts = NodeLabels.parse(labels) if labels else None
    report = asyncio.run(
        run.pods(url, [str(path)], at=at, plan=functools.partial(plan, files={}), config=None, facts=facts)
    )
    return json.loads(json.dumps(report))  # type: ignore[no-any-return]


def window(url: str, span: str, *, config: str = "", labels: str = "") -> dict[str, Any]:
    changed = run.changed_config(config) if config else ("device-allocator", {})
    facts = NodeLabels.parse(labels) if labels else None
    report = run.window(
        url, span, plan=functools.partial(plan, files={}), config=changed, config_path=config, facts=facts
    )
    return json.loads(json.dumps(asyncio.run(report)))  # type: ignore[no-any-return]


async def _state(url: str) -> tuple[Any, ...]:
    conn = await asyncpg.connect(plain_url(url))
    try:
        return (
            await conn.fetchval("SELECT count(*) FROM events"),
            await conn.fetchrow("SELECT position, hash FROM log_head"),
            await conn.fetch("SELECT * FROM checkpoints ORDER BY consumer"),
            await conn.fetchval("SELECT count(*) FROM snapshots"),
        )
    finally:
        await conn.close()


def test_pods_that_preempt_wait_for_quota_or_do_not_fit_and_nothing_is_written(
    log_url: str, tmp_path: Path
) -> None:
    before = asyncio.run(_state(log_url))
    text = "---\n".join(
        [
            pod("product", "api-3", "8", priority=100),
            pod("research", "extra", "8"),
            pod("default", "huge", "40"),
        ]
    )
    report = whatif(log_url, tmp_path, text)
    assert asyncio.run(_state(log_url)) == before
    assert report["position"] == report["head"] == before[1]["position"]
    assert report["warnings"] == []
    api3, extra, huge = report["pods"]
    assert api3["fits"] and api3["node"] in ("node-1", "node-2")
    assert api3["quota"]["quota"] == "product" and api3["quota"]["admitted"]
    assert [v["pod"] for v in api3["preempts"]] and all(
        v["pod"].startswith("research/") for v in api3["preempts"]
    )
    assert not extra["fits"] and extra["outcome"] == "Waiting"
    assert extra["quota"]["quota"] == "research" and not extra["quota"]["admitted"]
    assert any("raise quota research by 8 cpu" in line for line in extra["nearest"]), extra
    assert not huge["fits"] and huge["outcome"] == "Unschedulable"
    assert huge["nearest"][0].startswith("nearest:   node node-"), huge
    assert huge["waits_for"].startswith("capacity on a node")
    # the same question gives the same answer to the byte
    assert whatif(log_url, tmp_path, text) == report
    text_out = allot(log_url, "what-if", "-f", str(tmp_path / "pods.yaml")).stdout
    assert text_out == "\n".join(render.report_lines(report)) + "\n"
    assert "pod product/api-3: fits on node" in text_out
    assert "preempts:  research/" in text_out
    assert "once 1 pod(s) are preempted" in text_out


def test_at_an_earlier_position_a_pod_fits_by_borrowing_from_a_sibling(
    log_url: str, tmp_path: Path, scenario: Scenario
) -> None:
    # before sweep-5 arrived: research uses 40 of its 32 min (borrowing 8 of product's idle min)
    at = (
        next(r.position for r in scenario.events if r.type == "pod.submitted" and "sweep-5" in r.stream_id)
        - 1
    )
    report = whatif(log_url, tmp_path, pod("research", "extra", "8"), at=at)
    assert report["position"] == at
    (extra,) = report["pods"]
    assert extra["fits"], extra
    assert extra["quota"]["borrows"] == [
        {
            "dimension": "cpu",
            "amount": "8",
            "parent": "org",
            "lenders": [{"amount": "8", "kind": "idle-min", "quota": "product"}],
        }
    ]
    out = "\n".join(render.report_lines(report))
    assert "borrows:   8 cpu under parent org, lent by product (idle-min, 8)" in out


def test_a_snapshot_gives_the_same_answer(log_url: str, tmp_path: Path) -> None:
    text = pod("default", "huge", "40") + "---\n" + pod("product", "api-3", "8", priority=100)
    cold = whatif(log_url, tmp_path, text)
    assert cold["snapshots"] == {}

    async def snapshot() -> int:
        store = PostgresEventStore.connect(log_url)
        try:
            host = Host(DeviceAllocator({}), name="device-allocator")
            middle = (await store.head())[0] // 2
            await rebuild(host, store, until=middle)
            await store.write_snapshot(take(host, config_hash({}))[0], keep=2)
            return middle
        finally:
            await store.close()

    middle = asyncio.run(snapshot())
    warm = whatif(log_url, tmp_path, text)
    assert warm["snapshots"] == {"device-allocator": middle}
    assert warm["pods"] == cold["pods"]


def test_a_changed_placement_policy_over_the_recorded_window(log_url: str, tmp_path: Path) -> None:
    before = asyncio.run(_state(log_url))
    binpack = tmp_path / "binpack.yaml"
    binpack.write_text("device-allocator:\n  policy: binpack\n")
    report = json.loads(
        allot(log_url, "what-if", "--config", str(binpack), "--window", ":", "-o", "json").stdout
    )
    assert asyncio.run(_state(log_url)) == before
    assert report["service"] == "device-allocator" and report["triggers"] > 0
    assert report["count"] == len(report["differences"]) > 0
    first = report["differences"][0]
    assert first["recorded"]["node"] != first["would_be"]["node"], first
    assert f"{report['count']} decision(s) would differ" in render.window_lines(report)[-1]
    later = window(log_url, f"{first['position'] + 1}:", config=str(binpack))
    assert later["count"] == report["count"] - 1
    same = tmp_path / "same.yaml"
    same.write_text("policy: koordinator\n")
    unchanged = window(log_url, ":", config=str(same))
    assert unchanged["count"] == 0 and unchanged["triggers"] == report["triggers"]


def test_bad_input_is_refused_with_its_path_and_exit_code_2(log_url: str, tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        pod("default", "p", "1").replace("    image: trainer", "    image: trainer\n    resourcez: {}")
    )
    out = allot(log_url, "what-if", "-f", str(unknown), code=2)
    assert "spec.containers[0].resourcez: unknown field" in out.stderr
    config = tmp_path / "config.yaml"
    config.write_text("device-allocator:\n  scoring:\n    nodeResourcesFit: {strategee: MostAllocated}\n")
    with pytest.raises(UsageError, match=r"scoring\.nodeResourcesFit\.strategee: unknown key") as caught:
        window(log_url, ":", config=str(config))
    assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match="past the log's head") as caught:
        whatif(log_url, tmp_path, pod("default", "p", "1"), at=999_999)
    assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match="past the log's head"):
        window(log_url, "1:999999", labels="*:a=b")
    deleted = whatif(log_url, tmp_path, pod("research", "sweep-0", "8"))  # preempted and deleted
    assert deleted["warnings"] == []
    again = whatif(log_url, tmp_path, pod("research", "sweep-1", "8"))
    assert again["warnings"] == [
        "warning: pod research/sweep-1 is already in the log: the what-if submits it again, as a new life of that pod"
    ]


def test_a_node_pool_with_the_prefer_partition_policy(database_url: str, tmp_path: Path) -> None:
    """The H800 node honors its GPU partition table (Honor): a 3-GPU pod has no partition of its size. With the pool
    relabelled Prefer, the same pod falls through to the topology allocator and fits; over the recorded window the
    3-GPU pod's decision changes reason (by then only 2 GPUs are free)."""
    s = Scenario().apply_yaml(PARTITIONS.read_text())
    url = _copy(database_url, s)
    before = asyncio.run(_state(url))
    at = next(r.position for r in s.events if r.type == "pod.submitted" and "strict" in r.stream_id) - 1
    probe = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: probe, namespace: ml}\nspec:\n  containers:\n  - name: main\n"
        "    image: x\n    resources:\n      requests: {cpu: '1', memory: 1Gi, nvidia.com/gpu: '3'}\n"
        "      limits: {cpu: '1', memory: 1Gi, nvidia.com/gpu: '3'}\n"
    )
    (honor,) = whatif(url, tmp_path, probe, at=at)["pods"]
    assert not honor["fits"] and "Unsupported number of GPU requests" in honor["message"]
    prefer = whatif(url, tmp_path, probe, at=at, labels=PREFER)
    (fits,) = prefer["pods"]
    assert fits["fits"] and [d["minor"] for d in fits["devices"]["gpu"]] == [1, 2, 5]
    assert (
        prefer["node_labels"] == "nodes node.koordinator.sh/gpu-model=H800 labelled " + PREFER.split(":")[1]
    )
    report = window(url, ":", labels=PREFER)
    assert report["service"] == "device-allocator"
    assert [
        (d["pod"], d["recorded"]["outcome"], d["would_be"]["outcome"]) for d in report["differences"]
    ] == [("ml/three", "Unschedulable", "Unschedulable")]
    assert "Insufficient GPU Devices" in report["differences"][0]["would_be"]["message"]
    none = window(url, ":", labels="pool=other:a=b")
    assert none["count"] == 0
    assert asyncio.run(_state(url)) == before


def test_the_configuration_a_service_recorded_is_the_one_asked_under(
    database_url: str, tmp_path: Path
) -> None:
    """device-allocator recorded ``policy: binpack`` (``config.applied``): a small pod goes to the fuller node, where
    the defaults (LeastAllocated) would send it to the emptier one; a question asked before the record uses the
    defaults."""
    url = _copy(database_url, Scenario().apply_yaml(GANGS.read_text()))
    small = pod("default", "small", "1")
    before = whatif(url, tmp_path, small)

    async def record() -> None:
        store = PostgresEventStore.connect(url)
        try:
            head = (await store.head())[0]
            await record_config(
                store, "device-allocator", AppliedConfig(config={"policy": "binpack"}), after=head
            )
        finally:
            await store.close()

    asyncio.run(record())
    after = whatif(url, tmp_path, small)
    assert after["pods"][0]["node"] != before["pods"][0]["node"], (before, after)
    assert whatif(url, tmp_path, small, at=before["position"])["pods"] == before["pods"]
