"""Upcasters: each step turns a payload as an older version recorded it into the current schema."""

from __future__ import annotations

import pytest

from allot_contracts.jsonvalue import JsonObject
from allot_contracts.upcasters import Upcaster, upcast

POD: JsonObject = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
}


def test_a_current_tag_is_returned_as_it_is() -> None:
    payload: JsonObject = {"type": "pod.placed", "decision": {}}
    assert upcast("pod.placed.v2", payload) is payload


def test_a_v1_pod_is_read_at_the_door() -> None:
    ref: JsonObject = {"namespace": "ns", "name": "p"}
    out = upcast("pod.submitted.v1", {"pod": ref, "uid": "u-1", "manifest": POD})
    assert out["type"] == "pod.submitted.v2"
    spec = out["spec"]
    assert isinstance(spec, dict) and out["issues"] == [] and out["warnings"] == []
    # a manifest that is not an object gives no pod and no issues (replay then rejects it)
    odd = upcast("pod.observed.v1", {"pod": ref, "uid": "u-1", "manifest": ["not", "a", "pod"]})
    assert (odd["type"], odd["spec"], odd["issues"]) == ("pod.observed.v2", None, [])


def test_a_v1_quota_whose_manifest_is_not_an_object_cannot_be_upcast() -> None:
    with pytest.raises(TypeError, match="the manifest is a list"):
        upcast("quota.applied.v1", {"quota": {"name": "q"}, "manifest": ["q"]})
    refused = upcast("quota.applied.v1", {"quota": {"name": "q"}})  # no manifest: read as empty, refused
    assert refused["spec"] is None and refused["issues"] != []


def test_an_empty_v1_decision_map_becomes_null() -> None:
    assert upcast("quota.admitted.v1", {"detail": {}})["detail"] is None
    assert upcast("pod.released.v1", {"freed": {}})["freed"] is None
    kept: JsonObject = {"pod": "ns/p", "node": "n1"}
    assert upcast("pod.released.v1", {"freed": kept})["freed"] == kept


@pytest.mark.parametrize(
    ("cause", "detail", "expected"),
    [
        ("Preempted", {"preemptor": "ns/a"}, {"preemptor": "ns/a", "type": "victims"}),
        ("OverUseRevoke", {"pod": "ns/b"}, {"pod": "ns/b", "type": "overuse"}),
        ("Preempted", {"type": "overuse"}, {"type": "overuse"}),
        ("Preempted", {}, None),
        ("Preempted", None, None),
    ],
)
def test_a_v1_eviction_detail_gains_its_type(cause: str, detail: JsonObject | None, expected: object) -> None:
    out = upcast("quota.evicted.v1", {"cause": cause, "detail": detail})
    assert (out["type"], out["detail"]) == ("quota.evicted.v2", expected)


def test_a_v1_eviction_detail_that_is_not_an_object_cannot_be_upcast() -> None:
    with pytest.raises(TypeError, match="the detail is a str"):
        upcast("quota.evicted.v1", {"cause": "Preempted", "detail": "victims"})


def test_chains_are_followed_and_cycles_refused() -> None:
    def mark(payload: JsonObject) -> JsonObject:
        steps = payload.get("steps") or []
        assert isinstance(steps, list)
        payload["steps"] = [*steps, payload["type"]]
        return payload

    chain: dict[str, tuple[str, Upcaster]] = {"a.v1": ("a.v2", mark), "a.v2": ("a.v3", mark)}
    assert upcast("a.v1", {"type": "a.v1"}, chain) == {"type": "a.v3", "steps": ["a.v1", "a.v2"]}
    cycle: dict[str, tuple[str, Upcaster]] = {"b.v1": ("b.v2", mark), "b.v2": ("b.v1", mark)}
    with pytest.raises(ValueError, match="cycle"):
        upcast("b.v1", {"type": "b.v1"}, cycle)
