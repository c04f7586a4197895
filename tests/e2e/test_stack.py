"""End to end with real processes: apply → Bound through all seven services; a service killed mid-flow."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from urllib.request import urlopen

import pytest
import yaml

from allot_testing.builders import a_gpu_device, a_node, a_pod

pytestmark = pytest.mark.e2e


def write(path: Path, docs: list[dict]) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_pods_are_bound_exactly_once_when_the_device_allocator_is_killed_mid_flow(running_stack, tmp_path):
    stack = running_stack
    # The device-allocator crashes right after committing its 3rd placement, before acknowledging it, and is
    # SIGKILLed again later by the test: each pod must still be bound exactly once.
    stack.env["ALLOT_FAILPOINTS"] = "device-allocator:after-append:pod.placed:3"
    stack.run("up", "--timeout", "120")
    cluster = write(
        tmp_path / "cluster.yaml",
        [d for i in range(3) for d in (a_node(f"n{i}", gpus=8), a_gpu_device(f"n{i}", gpus=8))],
    )
    stack.run("apply", "-f", cluster)
    pods = [a_pod(f"p{i:02d}", gpus=1 + i % 2) for i in range(16)]
    stack.run("apply", "--no-wait", "-f", write(tmp_path / "pods.yaml", pods[:8]))
    fired = tmp_path / "failpoints.fired"

    def restarted_after_the_crash() -> bool:
        info = stack.stack()["processes"]["device-allocator"]
        return (
            fired.exists()
            and info["restarts"] >= 1
            and info["alive"]
            and len(stack.events("pod.placed")) >= 5
        )

    stack.wait_for(
        restarted_after_the_crash, what="placements after the crash, and the device-allocator back"
    )
    os.kill(stack.pid("device-allocator"), signal.SIGKILL)
    stack.run("apply", "--no-wait", "-f", write(tmp_path / "more.yaml", pods[8:]))

    def all_bound() -> bool:
        table = stack.pods()
        return len(table) == 16 and all(row["phase"] == "Bound" for row in table.values())

    stack.wait_for(all_bound, what="every pod Bound")
    stack.run(
        "apply", "-f", write(tmp_path / "noop.yaml", [a_node("n-extra")])
    )  # waits until the pipeline is idle
    bound = Counter(e.payload_dict()["pod"]["name"] for e in stack.events("pod.bound"))
    placed = Counter(e.payload_dict()["pod"]["name"] for e in stack.events("pod.placed"))
    assert bound == Counter({p["metadata"]["name"]: 1 for p in pods})
    assert placed == bound, "no pod was placed twice"
    gpus: Counter = Counter()
    for e in stack.events("pod.placed"):
        d = e.payload_dict()
        for gpu in d["decision"]["annotations"]["scheduling.koordinator.sh/device-allocated"]["gpu"]:
            gpus[(d["node"], gpu["minor"])] += 1
    assert max(gpus.values()) == 1, "no GPU was handed out twice"
    assert stack.stack()["processes"]["device-allocator"]["restarts"] >= 2
    assert (tmp_path / "failpoints.fired").read_text().strip() == "after-append:pod.placed:3"
    metrics = urlopen(
        f"http://127.0.0.1:{stack.stack()['processes']['device-allocator']['port']}/metrics"
    ).read()
    scheduled = [
        line
        for line in metrics.decode().splitlines()
        if line.startswith('allot_scheduler_schedule_attempts_total{profile="default",result="scheduled"}')
    ]
    assert scheduled and float(scheduled[0].split()[-1]) >= 1, (
        "kube-scheduler's metric families, allot_-prefixed"
    )
    assert b"allot_scheduler_scheduling_attempt_duration_seconds_bucket" in metrics
    verify = stack.run("replay", "--verify")
    assert "replay verification FAILED" not in verify.stderr
    assert "all reproduce" in verify.stdout and "matches the log" in verify.stdout
    assert "anchor       ok:" in verify.stdout, "the relay sealed the log with the key the stack generated"
