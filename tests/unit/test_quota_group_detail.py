"""A gang that quota cannot admit whole: the recorded reason for the first member that does not fit is that member's
check with the members before it counted, as the group admission checks it, never an admission of the member alone."""

from __future__ import annotations

from typing import Any

from allot_testing.builders import a_node, a_pod, a_quota
from allot_testing.scenario import Scenario

GANG = "gang.scheduling.koordinator.sh/"


def member(name: str) -> dict[str, Any]:
    body = a_pod(name, cpu="16", memory="1Gi", namespace="team")
    body["metadata"]["annotations"].update({f"{GANG}name": "train", f"{GANG}min-available": "2"})
    return body


def test_the_first_member_that_does_not_fit_is_reported_with_the_earlier_members_counted() -> None:
    s = Scenario().apply(
        a_node("node-1", cpu="64"), a_quota("team", namespace="team", max={"cpu": "24", "memory": "1Ti"})
    )
    s.apply(member("train-0"), member("train-1"))
    [waiting, *_] = s.of_type("quota.group_waiting")
    first = waiting["detail"]["first"]
    assert first["admitted"] is False and first["reason"] != "Admitted"
    assert first["pod"] == "team/train-1"
    assert first["used"].get("cpu") == "16", "the member admitted before it is counted"
    assert waiting["detail"]["used_before"].get("cpu", "0") == "0", (
        "a raise is measured from the use before the group"
    )
    assert "team/train-1" in waiting["message"] and "1/2 members fit" in waiting["message"]
    s.assert_replays()
