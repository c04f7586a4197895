"""ReservationFirst migrations survive crashes: kill reservation-manager, the device-allocator and the binder at every
step of a migration (real processes, SIGKILL-equivalent failpoints plus a real SIGKILL); after restart every pod is
bound exactly once in its last life, on another node, inside its job's reservation — none lost, none bound twice —
every job Succeeded, and replay re-derives every decision. A reservation's ttl runs out meanwhile, on a timer event
the live service records."""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
import yaml

from allot_testing.builders import a_node, a_pod

pytestmark = pytest.mark.e2e

PODS = [f"web-{i}" for i in range(4)]
KILL_POINTS = ",".join(
    [
        "reservation-manager:after-append:reservation.accepted:1",  # the job's reservation recorded, not acked
        "device-allocator:before-append:reservation.placed:2",  # placed, nothing written
        "reservation-manager:before-append:migration.evicted:1",  # eviction decided, nothing written
        "reservation-manager:after-append:migration.evicted:2",  # evicted + deleted + re-submitted, not acked
        "device-allocator:after-append:reservation.released:1",  # a used reservation's hold freed, not acked
        "binder:before-append:pod.bound:3",  # a re-created pod's binding decided, not written
    ]
)


def bound_pod(name: str) -> dict:
    pod = a_pod(name, namespace="default", cpu="2", memory="2Gi")
    pod["spec"]["nodeName"] = "n1"
    return pod


def short_lived_reservation() -> dict:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "short"},
        "spec": {
            "template": {
                "metadata": {"namespace": "default"},
                "spec": {
                    "nodeName": "n3",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "nobody"}}}],
            "ttl": "5s",
        },
    }


def job(name: str) -> dict:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {"name": f"move-{name}"},
        "spec": {"podRef": {"namespace": "default", "name": name}, "mode": "ReservationFirst"},
    }


def test_a_crash_in_a_migration_never_loses_the_pod_nor_binds_it_twice(running_stack, tmp_path: Path):
    stack = running_stack
    stack.env["ALLOT_FAILPOINTS"] = KILL_POINTS
    stack.run("up", "--timeout", "120")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([a_node(f"n{i}", cpu="16", memory="32Gi") for i in (1, 2, 3)]))
    stack.run("apply", "-f", str(cluster))
    short = tmp_path / "short.yaml"  # a reservation whose ttl runs out during the migrations: a live timer
    short.write_text(yaml.safe_dump(short_lived_reservation()))
    stack.run("apply", "-f", str(short))
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump_all([bound_pod(name) for name in PODS]))
    stack.run("apply", "-f", str(pods))
    for name in PODS:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(job(name)))
        stack.run("apply", "--no-wait", "-f", str(path))
        if name == "web-2":  # and once at a moment no failpoint chose
            with contextlib.suppress(ProcessLookupError):
                os.kill(stack.pid("reservation-manager"), signal.SIGKILL)

    def done() -> bool:
        return len(stack.events("migration.succeeded")) == len(PODS)

    stack.wait_for(done, timeout=150, what="every migration succeeded")
    stack.wait_for(
        lambda: bool(stack.events("reservation.failed")), timeout=30, what="the short reservation expired"
    )
    (expired,) = [e.payload_dict() for e in stack.events("reservation.failed")]
    assert expired["reservation"]["name"] == "short" and expired["reason"] == "Expired"
    assert any(e.payload_dict()["service"] == "reservation-manager" for e in stack.events("timer.fired")), (
        "the expiry came from a recorded timer event"
    )
    stack.run("apply", "-f", str(cluster))  # returns once the pipeline is idle
    fired = (tmp_path / "failpoints.fired").read_text().split()
    assert len(fired) >= 4, f"the kill points were reached: {fired}"

    lives: dict[str, list[str]] = {name: [] for name in PODS}  # pod -> uids of its lives, in order
    for e in sorted(stack.events("pod.submitted") + stack.events("pod.observed"), key=lambda e: e.position):
        p = e.payload_dict()
        lives[p["pod"]["name"]].append(p["uid"])
    deleted = Counter(
        (e.payload_dict()["pod"]["name"], e.payload_dict()["uid"]) for e in stack.events("pod.deleted")
    )
    bindings = Counter(
        (e.payload_dict()["pod"]["name"], e.payload_dict()["uid"]) for e in stack.events("pod.bound")
    )
    placed = {
        (e.payload_dict()["pod"]["name"], e.payload_dict()["uid"]): e.payload_dict()
        for e in stack.events("pod.placed")
    }
    for name in PODS:
        assert len(lives[name]) == 2, (
            f"{name}: one observed life and one re-submitted life, got {lives[name]}"
        )
        first, last = lives[name]
        assert deleted[(name, first)] == 1 and deleted[(name, last)] == 0, (
            f"{name}: the old life deleted once"
        )
        assert bindings[(name, last)] == 1, f"{name}: its new life bound exactly once"
        decision = placed[(name, last)]["decision"]
        assert placed[(name, last)]["node"] != "n1"
        assert decision["reservation"]["name"] == f"pmj-move-{name}"
    evictions = Counter(e.payload_dict()["job"]["name"] for e in stack.events("migration.evicted"))
    assert set(evictions.values()) == {1}, f"each job evicted once: {evictions}"
    verify = stack.run("replay", "--verify")
    assert "all reproduce" in verify.stdout and "DIFFERS" not in verify.stdout
