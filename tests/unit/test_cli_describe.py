"""``allot describe``: fields, conditions, the explain summary and the Kubernetes Events of one object, against a
recorded log (the demo, a reservation-first migration and gangs run through the simulator)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from allot_cli.commands.describe import run_describe
from allot_intake.errors import InputError
from allot_testing.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_767_225_600_000_000 + 90 * 1_000_000


@pytest.fixture(scope="module")
def log() -> Scenario:
    s = Scenario()
    for example in (
        "demo/cluster.yaml",
        "demo/pods.yaml",
        "reservation/02-migrate-reservation-first.yaml",
        "gangs/01-gang-of-four.yaml",
    ):
        s.apply_yaml((ROOT / "examples" / example).read_text())
    return s


def describe(log: Scenario, what: str, name: str, namespace: str | None = None) -> list[str]:
    args = argparse.Namespace(what=what, name=name, namespace=namespace)
    return asyncio.run(run_describe(args, log.sim.store, now=NOW))


def section(lines: list[str], title: str) -> list[str]:
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def field(lines: list[str], name: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in lines if line.startswith(f"{name}:"))


def test_a_waiting_pod_shows_why_in_conditions_explain_and_events(log: Scenario) -> None:
    lines = describe(log, "pod", "research/train-big")
    assert (field(lines, "Name"), field(lines, "Namespace"), field(lines, "Kind")) == (
        "train-big",
        "research",
        "Pod",
    )
    assert field(lines, "Phase") == "Waiting" and field(lines, "Quota") == "research"
    conditions = section(lines, "Conditions")
    assert conditions[1].split()[:3] == ["PodScheduled", "False", "Unschedulable"]
    assert conditions[1].endswith("(the Message above)")
    assert section(lines, "Explain")[0] == "  quota:     (the Message above)"
    events = section(lines, "Events")
    assert events[2].split()[:4] == ["Warning", "FailedScheduling", "90s", "allot-scheduler"]
    message = field(lines, "Message")
    assert message.startswith("Insufficient quotas, quotaName: research") and len(message) > 100
    assert sum(line.count(message) for line in lines) == 1, "the long message is said once"


def test_a_bound_gang_member_shows_its_placement_and_its_events_in_order(log: Scenario) -> None:
    lines = describe(log, "po", "llm-0", namespace="training")
    assert field(lines, "Node") == "gpu-1" and field(lines, "Devices") == "gpu:0,1"
    assert section(lines, "Conditions")[1].split()[:2] == ["PodScheduled", "True"]
    assert any(line.startswith("  placement: node gpu-1") for line in section(lines, "Explain"))
    reasons = [line.split()[1] for line in section(lines, "Events")[2:]]
    assert reasons == ["FailedScheduling", "Scheduled"]  # waited for its gang, then bound
    assert section(lines, "Events")[-1].endswith("Successfully assigned training/llm-0 to gpu-1")


def test_a_gang_that_cannot_be_placed(log: Scenario) -> None:
    member = describe(log, "pods", "training/huge-0")
    assert field(member, "Message").startswith("gang member training/huge-2 cannot be placed")
    assert "  why not:   (the Message above)" in section(member, "Explain")
    assert section(member, "Conditions")[1].endswith('with reason "(the Message above)"')
    assert sum(line.count(field(member, "Message")) for line in member) == 1
    assert any(line.startswith("    codes: ") for line in section(member, "Explain"))
    gang = describe(log, "podgroup", "training/huge")
    assert field(gang, "Kind") == "PodGroup" and field(gang, "Phase") == "Scheduling"
    assert (
        section(gang, "Explain")[0]
        == "  gang training/huge [Scheduling]: 4 members present (min-available 4)"
    )


def test_node_quota_reservation_migration_device(log: Scenario) -> None:
    node = describe(log, "node", "gpu-node-a")
    assert "node.koordinator.sh/gpu-model=A100" in field(node, "Labels")
    assert section(node, "Conditions")[1].split()[:3] == ["AgentHeartbeat", "Unknown", "NoAgent"]
    assert section(node, "Explain")[0].startswith("  node:       registered")
    quota = describe(log, "eq", "research")  # a name in one namespace only: no -n needed
    assert field(quota, "Max") == "cpu=40 memory=200Gi nvidia.com/gpu=6"
    default = describe(log, "quota", "koordinator-default-quota")
    assert field(default, "Max") == "cpu=unlimited memory=unlimited"
    reservation = describe(log, "reservation", "pmj-migrate-web-0")
    assert [line.split()[:2] for line in section(reservation, "Conditions")[1:]] == [
        ["Scheduled", "True"],
        ["Ready", "False"],
    ]
    migration = describe(log, "pmj", "migrate-web-0")
    types = [line.split()[0] for line in section(migration, "Conditions")[1:]]
    assert (
        types[0] == "ReservationCreated" and "Eviction" in types and field(migration, "Phase") == "Succeeded"
    )
    device = describe(log, "devices", "gpu-1")
    assert field(device, "Allocated") == "gpu:0,1,2,3,4,5,6,7" and section(device, "Events") == ["  <none>"]


def test_an_absent_or_ambiguous_name_is_refused_input(log: Scenario) -> None:
    with pytest.raises(InputError, match='pods "nope" not found in namespace research') as refused:
        describe(log, "pods", "research/nope")
    assert refused.value.exit_code == 1
    with pytest.raises(InputError, match='gangs "eval" is in namespaces eval, training: give -n NS'):
        describe(log, "gangs", "eval")
    assert field(describe(log, "gangs", "eval", namespace="eval"), "Namespace") == "eval"


def test_a_reservation_shows_the_events_the_binder_writes_for_it() -> None:
    s = Scenario()
    for example in ("demo/cluster.yaml", "reservation/01-reserve-for-owner.yaml"):
        s.apply_yaml((ROOT / "examples" / example).read_text())
    lines = describe(s, "reservations", "reserve-web")
    assert field(lines, "Kind") == "Reservation"
    assert section(lines, "Events")[2].split()[:2] == ["Normal", "Scheduled"]
    assert section(lines, "Events")[2].endswith("Successfully assigned reserve-web to gpu-node-a")
