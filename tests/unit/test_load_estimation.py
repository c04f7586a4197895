"""Forced load estimation through the seven services' decision code (the simulator): a bound pod whose NodeMetric
already reports it is still estimated until its deadline — counted from its PodScheduled or Initialized condition,
by the plugin's arguments or, when allowed, the pod's own annotations — and replay re-derives every decision."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from allot_eventstore.clock import ManualClock, from_datetime
from allot_intake.documents import load_documents
from allot_intake.manifests import Door, to_input
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_sim.simulator import Simulation
from allot_stack.pipeline import build
from allot_views.decisions import decisions

# The clock is 2026-01-01T00:00:00Z; node-a's NodeMetric is taken then and reports `old` at 0.1 CPU. `old` asks for 4
# CPUs (estimate 3.4). Trusted: 30 % + 8.5 % for a new 1-CPU pod. Forced: 30 % - 1 % + 34 % + 8.5 % = 72 % > 65 %.
SCENARIO = """
apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  allocatable: {cpu: "10", memory: 64Gi, pods: "110"}
---
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: node-a}
status:
  nodeMetric:
    nodeUsage: {resources: {cpu: "3", memory: 8Gi}}
  podsMetric:
  - {namespace: apps, name: old, podUsage: {resources: {cpu: 100m, memory: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: old
  namespace: apps
  annotations: ANNOTATIONS
spec:
  nodeName: node-a
  containers:
  - {name: main, image: busybox, resources: {requests: {cpu: "4", memory: 1Gi}}}
status:
  phase: Running
  conditions:
  - {type: PodScheduled, status: "True", lastTransitionTime: "2025-12-31T00:00:00Z"}
  - {type: Initialized, status: "True", lastTransitionTime: "2025-12-31T23:00:00Z"}
---
apiVersion: v1
kind: Pod
metadata: {name: new, namespace: apps}
spec:
  containers:
  - {name: main, image: busybox, resources: {requests: {cpu: "1", memory: 1Gi}}}
"""
AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"


def run(tmp_path: Path, load_aware: dict[str, Any], annotations: dict[str, str]) -> Simulation:
    path = tmp_path / f"scenario-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(SCENARIO.replace("ANNOTATIONS", repr(annotations).replace("'", '"')))
    clock = ManualClock(from_datetime(datetime(2026, 1, 1, tzinfo=UTC)))
    sim = Simulation({"device-allocator": {"loadAware": load_aware}}, clock=clock)
    for verdict in Door(quotas=set()).check_all(load_documents(str(path))):
        assert not verdict.issues, verdict.issues
        sim.apply(to_input(verdict.document))
    return sim


def outcome(sim: Simulation) -> str:
    return str({d["pod"]: d for d in decisions(sim.store.events)}["apps/new"]["outcome"])


@pytest.mark.parametrize(
    ("load_aware", "annotations", "expected"),
    [
        ({}, {}, "Scheduled"),  # no forced estimation: the metric is trusted
        ({"estimatedSecondsAfterPodScheduled": 172_800}, {}, "Unschedulable"),  # 2 days after scheduling
        ({"estimatedSecondsAfterPodScheduled": 3_600}, {}, "Scheduled"),  # deadline before the metric
        # initialized 1 h before the metric: its deadline wins over the (long past) scheduled one
        (
            {"estimatedSecondsAfterPodScheduled": 60, "estimatedSecondsAfterInitialized": 7_200},
            {},
            "Unschedulable",
        ),
        ({}, {AFTER_SCHEDULED: "172800"}, "Scheduled"),  # the pod's own: not read unless allowed
        ({"allowCustomizeEstimation": True}, {AFTER_SCHEDULED: "172800"}, "Unschedulable"),
        # the pod's own 0 turns the plugin's initialized deadline off for it
        (
            {"allowCustomizeEstimation": True, "estimatedSecondsAfterInitialized": 7_200},
            {AFTER_INITIALIZED: "0"},
            "Scheduled",
        ),
    ],
)
def test_a_bound_pod_is_estimated_until_its_deadline(
    tmp_path: Path, load_aware: dict[str, Any], annotations: dict[str, str], expected: str
) -> None:
    sim = run(tmp_path, load_aware, annotations)
    assert outcome(sim) == expected


def test_replay_re_derives_forced_estimation(tmp_path: Path) -> None:
    sim = run(tmp_path, {"estimatedSecondsAfterPodScheduled": 172_800}, {})
    assert outcome(sim) == "Unschedulable"
    host = Host(build("device-allocator", {"loadAware": {"estimatedSecondsAfterPodScheduled": 172_800}}))
    checked, mismatches = asyncio.run(verify_decisions(host, sim.store))
    assert checked and mismatches == []
    # replayed under a configuration without forced estimation, the decision differs: the deadline was acted on
    host = Host(build("device-allocator", {}))
    _, mismatches = asyncio.run(verify_decisions(host, sim.store))
    assert mismatches
