"""``allot get`` and ``allot describe`` as a user runs them: the ``allot`` command over a log in real PostgreSQL (the
demo's log, as the simulator recorded it, copied into a migrated database)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from allot_eventstore.postgres import PostgresEventStore
from allot_testing.scenario import Scenario
from allot_testing.snapshots import copy_log

ROOT = Path(__file__).resolve().parents[2]


async def _copy(s: Scenario, url: str, start: int = 0) -> None:
    store = PostgresEventStore.connect(url)
    try:
        await copy_log(store, s.events[start:])
    finally:
        await store.close()


@pytest.fixture
def demo(database_url: str) -> tuple[Scenario, str]:
    s = Scenario()
    for example in ("demo/cluster.yaml", "demo/pods.yaml"):
        s.apply_yaml((ROOT / "examples" / example).read_text())
    asyncio.run(_copy(s, database_url))
    return s, database_url


@pytest.fixture
def log_url(demo: tuple[Scenario, str]) -> str:
    return demo[1]


def _env(url: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {"ALLOT_DATABASE_URL": url}


EXE = str(Path(sys.executable).with_name("allot"))


def allot(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *argv], capture_output=True, text=True, env=_env(url), timeout=120)


def test_watch_follows_the_log_as_it_grows(demo: tuple[Scenario, str]) -> None:
    import queue
    import threading

    from allot_testing.builders import a_pod

    s, url = demo
    lines: queue.Queue[str] = queue.Queue()

    def next_line() -> str:
        return lines.get(timeout=30)

    with subprocess.Popen(
        [EXE, "get", "pods", "-n", "research", "-w", "-o", "name"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(url),
    ) as watch:
        out = watch.stdout
        assert out is not None
        reader = threading.Thread(target=lambda: [lines.put(line.strip()) for line in out], daemon=True)
        reader.start()
        try:
            listed = {next_line() for _ in range(4)}
            assert listed == {"pod/notebook-alice", "pod/train-big", "pod/train-llama-0", "pod/train-llama-1"}
            recorded = len(s.events)
            s.apply(a_pod("late", namespace="research"), a_pod("elsewhere", namespace="other"))
            asyncio.run(_copy(s, url, start=recorded))
            assert next_line() == "pod/late"
            time.sleep(2.5)  # two more polls: the copy may land in several appends, each a change of "late"
            rest = set()
            while not lines.empty():
                rest.add(lines.get())
            assert rest <= {"pod/late"}  # the pod of another namespace is never printed
        finally:
            watch.terminate()
            reader.join(timeout=30)


def test_get_and_describe_over_a_real_log(log_url: str) -> None:
    pods = allot(log_url, "get", "pods", "-l", "koordinator.sh/qosClass=LS", "-o", "json")
    assert pods.returncode == 0, pods.stderr
    assert {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in json.loads(pods.stdout)["items"]
    } == {
        "research/train-llama-0",
        "serving/inference-bert",
    }

    one = allot(log_url, "get", "pods", "-n", "research", "train-big", "-o", "yaml")
    assert one.returncode == 0 and yaml.safe_load(one.stdout)["status"]["phase"] == "Waiting"

    quotas = allot(
        log_url, "get", "quotas", "-o", "wide"
    )  # the default table cuts quantity lists to fit 80 columns
    assert quotas.returncode == 0 and "cpu=unlimited memory=unlimited" in quotas.stdout
    assert "1844674407370955161" not in quotas.stdout
    tree = allot(log_url, "quota", "tree", "--all")
    assert (
        "max      cpu=unlimited memory=unlimited" in tree.stdout and "1844674407370955161" not in tree.stdout
    )

    described = allot(log_url, "describe", "pod", "research/train-big")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert "Conditions:" in lines and "Events:" in lines and "Explain:" in lines
    assert any(line.split()[:2] == ["Warning", "FailedScheduling"] for line in lines)

    missing = allot(log_url, "get", "pods", "-n", "research", "nope")
    assert missing.returncode == 1 and 'pods "nope" not found' in missing.stderr
    absent = allot(log_url, "describe", "node", "nope")
    assert absent.returncode == 1 and "Traceback" not in absent.stderr


QUOTAS_AND_PROFILE = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {pool: gpu}}
status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
---
apiVersion: quota.koordinator.sh/v1alpha1
kind: ElasticQuotaProfile
metadata: {name: gpu-pool, namespace: default}
spec: {quotaName: gpu-root, nodeSelector: {matchLabels: {pool: gpu}}}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: team, namespace: default, labels: {quota.scheduling.koordinator.sh/parent: gpu-root}}
spec: {max: {cpu: 4}}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: dept, namespace: default, labels: {quota.scheduling.koordinator.sh/is-parent: "true"}}
spec: {max: {cpu: 4}}
"""


def test_apply_learns_the_quotas_and_profiles_recorded_before(database_url: str) -> None:
    from allot_intake.documents import Document
    from allot_stack.apply import door_for

    s = Scenario()
    s.apply_yaml(QUOTAS_AND_PROFILE)
    asyncio.run(_copy(s, database_url))
    door = asyncio.run(door_for(database_url))

    def pod(quota: str) -> Document:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "default",
                "labels": {"quota.scheduling.koordinator.sh/name": quota},
            },
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        return Document(source="f.yaml", index=0, body=body)

    parent = door.check(pod("dept"))
    assert [i.message for i in parent.issues] == [
        "pod can not be linked to a parentQuotaGroup,quota:dept, pod:p"
    ]
    in_tree = pod("team")
    assert door.check(in_tree).issues == []
    affinity = in_tree.body["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert affinity == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]
    }
    assert [i.message for i in door.check(pod("gpu-root")).issues] == [
        "pod can not be linked to a parentQuotaGroup,quota:gpu-root, pod:p"
    ]
