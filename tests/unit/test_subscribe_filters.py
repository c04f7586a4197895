"""The subscribe client's filters: what an event is about (namespace, node, quota) and which types match."""

from __future__ import annotations

import pytest

from allot_client import Filter, FilterError, scope_of
from allot_contracts.envelope import GENESIS_HASH, NewEvent, prepare, stream_id
from allot_contracts.events import (
    GangGroupReady,
    NodeDeleted,
    ObjectRef,
    PodBound,
    PodDeleted,
    QuotaDeleted,
    QuotaReleased,
)


def recorded(stream: str, event, position: int = 1):
    new = NewEvent(stream_id=stream, event=event, event_id=f"00000000-0000-0000-0000-{position:012d}")
    return prepare(
        new, position=position, stream_version=1, producer="t", recorded_at=0, prev_hash=GENESIS_HASH
    )


BOUND = recorded(
    stream_id("pod", "team-a/web-0"),
    PodBound(pod=ObjectRef(namespace="team-a", name="web-0"), attempt=1, node="gpu-1"),
)
RELEASED = recorded(
    stream_id("pod", "team-b/job-1"),
    QuotaReleased(
        pod=ObjectRef(namespace="team-b", name="job-1"),
        quota="research",
        request={},
        used={},
        reason="deleted",
    ),
)
NODE = recorded(stream_id("node", "gpu-2"), NodeDeleted(name="gpu-2"))
QUOTA = recorded(
    stream_id("quota", "team-c/research"), QuotaDeleted(quota=ObjectRef(namespace="team-c", name="research"))
)
GANG = recorded(
    stream_id("gang", "g1"),
    GangGroupReady(group="g1", gangs=["team-d/g1"], members=["team-d/w-0", "team-e/w-1"], attempt=1),
)


def test_scope_reads_object_references_node_and_quota_fields_and_stream_keys():
    assert scope_of(BOUND).namespaces == {"team-a"} and scope_of(BOUND).nodes == {"gpu-1"}
    assert scope_of(RELEASED).quotas == {"research"} and scope_of(RELEASED).namespaces == {"team-b"}
    assert scope_of(NODE).nodes == {"gpu-2"} and not scope_of(NODE).namespaces
    assert scope_of(QUOTA).quotas == {"research"} and scope_of(QUOTA).namespaces == {"team-c"}
    assert scope_of(GANG).namespaces == {"team-d", "team-e"}


def test_criteria_combine_with_and_values_with_or():
    events = [BOUND, RELEASED, NODE, QUOTA, GANG]
    assert [e for e in events if Filter(namespaces=["team-a", "team-c"]).matches(e)] == [BOUND, QUOTA]
    assert [e for e in events if Filter(nodes=["gpu-1", "gpu-2"]).matches(e)] == [BOUND, NODE]
    assert [e for e in events if Filter(quotas=["research"]).matches(e)] == [RELEASED, QUOTA]
    assert [e for e in events if Filter(quotas=["research"], namespaces=["team-b"]).matches(e)] == [RELEASED]
    assert [e for e in events if Filter(types=["quota.*"], quotas=["research"]).matches(e)] == [
        RELEASED,
        QUOTA,
    ]
    assert all(Filter().matches(e) for e in events)


def test_types_match_by_name_tag_or_kind_and_tell_the_log_what_to_read():
    by_name = Filter(types=["pod.bound"])
    assert by_name.matches(BOUND) and not by_name.matches(RELEASED)
    assert Filter(types=["pod.bound.v1"]).matches(BOUND) and not Filter(types=["pod.bound.v2"]).matches(BOUND)
    assert Filter(types=["pod.*"]).matches(BOUND) and not Filter(types=["pod.*"]).matches(NODE)
    assert Filter(types=["pod.bound", "node.deleted.v1"]).store_types() == ["node.deleted", "pod.bound"]
    assert Filter(types=["pod.*", "node.deleted"]).store_types() is None, "a kind: every type is read"
    assert Filter().store_types() is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"types": ["pod"]}, "types[0]: 'pod' is not an event type"),
        ({"types": ["pod.bound", "pod.bound.x"]}, "types[1]: 'pod.bound.x' is not"),
        ({"namespaces": "team-a"}, "namespaces: expected a list of names"),
        ({"nodes": ["gpu-1", ""]}, "nodes[1]: expected a non-empty name"),
        ({"quotas": [3]}, "quotas[0]: expected a non-empty name, got 3"),
    ],
)
def test_a_malformed_filter_is_refused_naming_the_field(kwargs, message):
    with pytest.raises(FilterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Filter(**kwargs)


def test_an_event_about_no_namespace_never_matches_a_namespace_filter():
    deleted = recorded(stream_id("pod", "x"), PodDeleted(pod=ObjectRef(name="x")))
    assert not scope_of(deleted).namespaces
    assert not Filter(namespaces=["default"]).matches(deleted)
