"""Gangs survive crashes: kill the gang-coordinator, the device-allocator, quota-manager or binder at several points
of a gang's placement (real processes, SIGKILL-equivalent failpoints plus a real SIGKILL); after restart every gang
is either fully placed and bound or fully released — never partially."""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from allot_testing.builders import a_gpu_device, a_node, a_pod

pytestmark = pytest.mark.e2e

KILL_POINTS = ",".join(
    [
        "device-allocator:before-append:gang.group_placed:1",  # decided, nothing written
        "gang-coordinator:after-append:gang.group_ready:2",  # attempt recorded, not acknowledged
        "quota-manager:after-append:quota.group_admitted:3",  # charges recorded, not acknowledged
        "device-allocator:after-append:gang.group_placed:4",  # placements recorded, not acknowledged
        "gang-coordinator:before-append:gang.group_admitted:4",  # satisfied, admission not written
        "binder:before-append:pod.bound:5",  # bindings decided, not written
    ]
)


def gang(name: str, size: int, gpus: int) -> list[dict]:
    return [
        a_pod(
            f"{name}-{i}",
            namespace="ml",
            gpus=gpus,
            annotations={
                "gang.scheduling.koordinator.sh/name": name,
                "gang.scheduling.koordinator.sh/min-available": str(size),
            },
        )
        for i in range(size)
    ]


def test_every_gang_is_fully_placed_or_fully_released_after_crashes(running_stack, tmp_path: Path):
    stack = running_stack
    stack.env["ALLOT_FAILPOINTS"] = KILL_POINTS
    stack.run("up", "--timeout", "120")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump_all(
            [d for i in range(4) for d in (a_node(f"n{i}", gpus=8), a_gpu_device(f"n{i}", gpus=8))]
        )
    )
    stack.run("apply", "-f", str(cluster))
    gangs = {f"job{i}": (4, 2) for i in range(6)}  # 6 gangs x 4 x 2 GPUs = 48 GPUs; the cluster has 32
    gangs["toolarge"] = (3, 12)  # a member needs more GPUs than any node has: never placed
    for name, (size, gpus) in gangs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(gang(name, size, gpus)))
        stack.run("apply", "--no-wait", "-f", str(path))
        if name == "job3":  # and once more, at a random moment (unless a kill point just stopped it)
            with contextlib.suppress(ProcessLookupError):
                os.kill(stack.pid("gang-coordinator"), signal.SIGKILL)

    def settled() -> bool:
        bound = Counter(e.payload_dict()["pod"]["name"].rsplit("-", 1)[0] for e in stack.events("pod.bound"))
        return sum(1 for name, (size, _) in gangs.items() if bound.get(name) == size) >= 4

    stack.wait_for(settled, timeout=150, what="four 8-GPU gangs bound")
    stack.run("apply", "-f", str(cluster))  # re-apply: returns once the pipeline is idle
    fired = (tmp_path / "failpoints.fired").read_text().split()
    assert len(fired) >= 4, f"the kill points were reached: {fired}"

    bound = Counter(e.payload_dict()["pod"]["name"].rsplit("-", 1)[0] for e in stack.events("pod.bound"))
    for name, (size, _) in gangs.items():
        assert bound.get(name, 0) in (0, size), f"gang {name} partially bound: {bound.get(name)}/{size}"
    assert bound.get("toolarge", 0) == 0
    assert sum(1 for name, (size, _) in gangs.items() if bound.get(name) == size) == 4, "32 GPUs hold 4 gangs"

    # Every attempt that placed a group was either bound whole or released whole: no held placement or quota
    # charge is left behind for a member that is not bound.
    placed = {
        (e.payload_dict()["group"], e.payload_dict()["attempt"]): set(e.payload_dict()["members"])
        for e in stack.events("gang.group_placed")
    }
    released = defaultdict(set)
    for e in stack.events("gang.holds_released"):
        released[(e.payload_dict()["group"], e.payload_dict()["attempt"])] |= set(e.payload_dict()["members"])
    bound_pods = {f"ml/{e.payload_dict()['pod']['name']}" for e in stack.events("pod.bound")}
    for attempt, members in placed.items():
        assert members <= bound_pods or members <= released[attempt], (attempt, members)
    gpu_owners: Counter = Counter()
    for e in stack.events("gang.group_placed"):
        p = e.payload_dict()
        if set(p["members"]) <= bound_pods:
            for decision in p["decisions"].values():
                for gpu in decision["annotations"]["scheduling.koordinator.sh/device-allocated"]["gpu"]:
                    gpu_owners[(decision["node"], gpu["minor"])] += 1
    assert gpu_owners and max(gpu_owners.values()) == 1, "no GPU is held by two bound pods"
    verify = stack.run("replay", "--verify")
    assert "all reproduce" in verify.stdout and "DIFFERS" not in verify.stdout
