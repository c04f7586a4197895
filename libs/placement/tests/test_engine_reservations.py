"""The placement engine with reservations: holds taken from the node, owners placed in them (Default, Aligned,
Restricted), devices and cpusets honoured, nomination, reservation-ignored, required affinity, allocate-policy
conflicts, assume / release / unreserve exactness."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_placement import PlacementEngine
from allot_placement.reservations import Hold
from allot_placement.reserved import ReservationContext
from allot_placement.testing import a_device, a_node, a_pod, admit, engine_with, minors


def reserve(eng: PlacementEngine, name: str, pod: dict[str, Any], **kw: Any) -> Hold:
    """Place ``pod`` as reservation ``name``'s reserve pod and hold the result (as the device-allocator does)."""
    policy = kw.get("policy", "")
    decision = eng.schedule(admit(pod), reserve_policy=policy)
    assert decision.outcome == n.SCHEDULED, decision.message
    assert decision.allocation is not None and decision.node is not None
    hold = Hold(name=name, uid=f"u-{name}", node=decision.node, allocation=decision.allocation, **kw)
    eng.reserve(hold)
    return hold


def ctx(*names: str, required: bool = False, ignored: bool = False, name: str = "") -> ReservationContext:
    return ReservationContext(candidates=names, required=required, ignored=ignored, name=name)


def two_nodes() -> PlacementEngine:
    return engine_with(a_node("n1", cpu="4", memory="8Gi"), a_node("n2", cpu="4", memory="8Gi"))


def test_a_hold_is_used_capacity_for_others_and_free_for_its_owners() -> None:
    eng = two_nodes()
    hold = reserve(eng, "r1", a_pod("r1", cpu="3"))
    assert hold.node == "n1"
    other = eng.schedule(admit(a_pod("filler", cpu="3")))
    assert other.node == "n2"  # n1's reserved CPUs are not free for a pod that did not match
    owner = eng.schedule(admit(a_pod("web", cpu="3")), reservations=ctx("r1"))
    assert owner.node == "n1" and owner.reservation == {"name": "r1", "uid": "u-r1"}
    assert owner.annotations["scheduling.koordinator.sh/reservation-allocated"] == {
        "name": "r1",
        "uid": "u-r1",
    }
    eng.assume(owner)
    state = eng.node_state("n1")
    assert (
        state is not None and state.requested["cpu"] == 3000
    )  # the owner took the hold's part: not counted twice
    assert eng.holds["r1"].remaining().requests.get("cpu", 0) == 0
    eng.release("default", "web")
    assert eng.holds["r1"].remaining().requests["cpu"] == 3000 and state.requested["cpu"] == 3000
    freed = eng.unreserve("r1")
    assert freed is not None and freed["node"] == "n1" and state.requested == {}


def test_owner_may_use_the_hold_plus_free_node_resources_default_policy() -> None:
    eng = engine_with(a_node("n1", cpu="8", memory="16Gi"))
    reserve(eng, "r1", a_pod("r1", cpu="2"))
    big = eng.schedule(admit(a_pod("web", cpu="6")), reservations=ctx("r1"))
    assert big.node == "n1" and big.reservation is not None


def test_restricted_keeps_the_owner_within_the_reservation() -> None:
    eng = engine_with(a_node("n1", cpu="8", memory="16Gi"))
    reserve(eng, "r1", a_pod("r1", cpu="2"), policy="Restricted", allocate_once=False)
    over = eng.schedule(admit(a_pod("web", cpu="3")), reservations=ctx("r1", required=True, name="r1"))
    assert over.outcome == n.UNSCHEDULABLE
    assert over.message == (
        "0/1 nodes are available: 1 Reservation(s) Insufficient cpu, requested: 3000, used: 0, capacity: 2000."
    )
    # not required: the node alone can still take it, as a pod that uses no reservation
    alone = eng.schedule(admit(a_pod("web", cpu="3")), reservations=ctx("r1"))
    assert alone.node == "n1" and alone.reservation is None


def test_pod_count_limit() -> None:
    eng = engine_with(a_node("n1", cpu="8", memory="16Gi"))
    reserve(
        eng,
        "r1",
        a_pod("r1", cpu="4", memory="4Gi", resources={"pods": "1"}),
        policy="Restricted",
        allocate_once=False,
    )
    first = eng.schedule(admit(a_pod("a", cpu="1")), reservations=ctx("r1", required=True))
    eng.assume(first)
    second = eng.schedule(admit(a_pod("b", cpu="1")), reservations=ctx("r1", required=True))
    assert second.outcome == n.UNSCHEDULABLE and "Reservation(s) Too many pods" in second.message
    assert second.codes == ["ReservationTooManyPods"]


def test_required_affinity_without_a_match_fails_every_node() -> None:
    eng = two_nodes()
    d = eng.schedule(admit(a_pod("web")), reservations=ctx(required=True))
    assert d.message == "0/2 nodes are available: 2 node(s) no reservations match reservation affinity."
    assert d.codes == ["ReservationAffinityMismatch"]


def test_reservation_ignored_uses_every_hold_but_is_bound_to_none() -> None:
    eng = engine_with(a_node("n1", cpu="4", memory="8Gi"))
    reserve(eng, "r1", a_pod("r1", cpu="2"))
    reserve(eng, "r2", a_pod("r2", cpu="2"))
    plain = eng.schedule(admit(a_pod("x", cpu="4")))
    assert plain.outcome == n.UNSCHEDULABLE
    ignoring = eng.schedule(admit(a_pod("x", cpu="4")), reservations=ctx("r1", "r2", ignored=True))
    assert ignoring.node == "n1" and ignoring.reservation is None


@pytest.mark.parametrize(
    ("orders", "expected"),
    [((0, 0), "small"), ((5, 2), "big"), ((0, 3), "big")],
)
def test_nomination_on_a_node(orders: tuple[int, int], expected: str) -> None:
    eng = engine_with(a_node("n1", cpu="16", memory="32Gi"))
    reserve(eng, "small", a_pod("small", cpu="2"), order=orders[0])
    reserve(eng, "big", a_pod("big", cpu="8"), order=orders[1])
    d = eng.schedule(admit(a_pod("web", cpu="2")), reservations=ctx("small", "big"))
    assert d.reservation is not None and d.reservation["name"] == expected


def test_nodes_with_a_usable_reservation_rank_first() -> None:
    eng = two_nodes()
    reserve(eng, "r1", a_pod("r1", cpu="1", node_name="n2"))
    d = eng.schedule(admit(a_pod("web", cpu="1")), reservations=ctx("r1"))
    assert d.node == "n2" and d.reservation is not None


def test_reserved_gpus_are_preferred_and_restricted() -> None:
    eng = engine_with(
        a_node("n1", cpu="32", memory="64Gi", extra={n.NVIDIA_GPU: "4"}), a_device("n1", gpus=4)
    )
    hold = reserve(eng, "r1", a_pod("r1", gpu=1), policy="Restricted", allocate_once=False)
    reserved_minor = hold.allocation.devices["gpu"][0].minor
    other = eng.schedule(admit(a_pod("other", gpu=1)))
    assert minors(other) != [reserved_minor]  # held for the owners
    owner = eng.schedule(admit(a_pod("web", gpu=1)), reservations=ctx("r1"))
    assert minors(owner) == [reserved_minor] and owner.reservation is not None
    two = eng.schedule(admit(a_pod("two", gpu=2)), reservations=ctx("r1", required=True))
    assert two.outcome == n.UNSCHEDULABLE  # Restricted: only the reserved GPU may be used
    aligned = engine_with(
        a_node("n1", cpu="32", memory="64Gi", extra={n.NVIDIA_GPU: "4"}), a_device("n1", gpus=4)
    )
    hold = reserve(aligned, "r1", a_pod("r1", gpu=1), policy="Aligned")
    two = aligned.schedule(admit(a_pod("two", gpu=2)), reservations=ctx("r1"))
    assert (
        reserved_minor in minors(two) and two.reservation is not None
    )  # Aligned: reserved GPU plus a free one


def test_allocate_policy_conflict_for_reserve_pods() -> None:
    eng = engine_with(a_node("n1", cpu="8", memory="16Gi"))
    reserve(eng, "default", a_pod("default", cpu="1"), policy="")
    d = eng.schedule(admit(a_pod("aligned", cpu="1")), reserve_policy="Aligned")
    assert d.outcome == n.UNSCHEDULABLE
    assert d.message == "0/1 nodes are available: 1 node(s) reservation allocate policy conflict."
    assert eng.schedule(admit(a_pod("another", cpu="1")), reserve_policy="").outcome == n.SCHEDULED


def test_a_reserve_pod_naming_a_node_is_refused_by_the_others_with_upstreams_reason() -> None:
    eng = two_nodes()
    pod = a_pod("pinned", cpu="1")
    pod["spec"]["nodeName"] = "n3"
    d = eng.schedule(admit(pod), reserve_policy="")
    assert d.outcome == n.UNSCHEDULABLE
    assert (
        d.message == "0/2 nodes are available: 2 node(s) didn't match the nodeName specified by reservation."
    )
    assert d.codes == ["ReservationNodeNameMismatch"]
    default = a_pod("default", cpu="1")
    default["spec"]["nodeName"] = "n2"
    reserve(eng, "default", default, policy="")
    pod["spec"]["nodeName"] = "n2"
    conflict = eng.schedule(admit(pod), reserve_policy="Aligned")
    assert conflict.message == (
        "0/2 nodes are available: 1 node(s) didn't match the nodeName specified by reservation,"
        " 1 node(s) reservation allocate policy conflict."
    )


def test_without_affinity_a_reservation_of_other_resources_is_not_used() -> None:
    eng = engine_with(a_node("n1", cpu="8", memory="32Gi"))
    reserve(eng, "memory-pool", a_pod("memory-pool", cpu=None, memory="8Gi"), allocate_once=False)
    cpu_only = admit(a_pod("cpu-only", cpu="1", memory=None))
    assert eng.schedule(cpu_only, reservations=ctx("memory-pool")).reservation is None
    named = eng.schedule(cpu_only, reservations=ctx("memory-pool", required=True, name="memory-pool"))
    assert named.reservation is not None and named.reservation["name"] == "memory-pool"
    both = admit(a_pod("both", cpu="1", memory="1Gi"))
    got = eng.schedule(both, reservations=ctx("memory-pool"))
    assert got.reservation is not None and got.reservation["name"] == "memory-pool"


def test_digest_covers_holds_and_schedule_changes_nothing() -> None:
    eng = two_nodes()
    before = eng.digest()
    reserve(eng, "r1", a_pod("r1", cpu="3"))
    held = eng.digest()
    assert held != before
    eng.schedule(admit(a_pod("web", cpu="3")), reservations=ctx("r1"))
    assert eng.digest() == held


def test_preemption_victims_reprieve_and_exact_restore() -> None:
    from allot_placement.reserved import victims_on

    eng = engine_with(a_node("n1", cpu="6", memory="16Gi"))
    reserve(eng, "r1", a_pod("r1", cpu="2"), allocate_once=False)
    for name, cpu in (("small", "1"), ("mid", "2"), ("big", "1")):
        d = eng.schedule(admit(a_pod(name, cpu=cpu)))
        assert d.node == "n1"
        eng.assume(d)
    owner = eng.schedule(admit(a_pod("owner", cpu="2")), reservations=ctx("r1"))
    eng.assume(owner)  # an owner inside the reservation: 2 + 1 + 2 + 1 = 6 CPUs used
    before = eng.digest()
    spec, _ = eng._spec(admit(a_pod("vip", cpu="3")))
    assert spec is not None
    candidates = [(1, "default/small"), (2, "default/mid"), (3, "default/owner"), (4, "default/big")]
    victims = victims_on(eng, spec, ctx("r1"), "n1", candidates)
    # everything lifted gives room; then the most important come back while the vip still fits: big (1 CPU) and
    # the owner (its 2 CPUs were inside the reservation the vip restores) are reprieved only if room is left
    assert victims == ["default/mid", "default/small"]
    assert eng.digest() == before  # the engine is exactly as it was
    assert victims_on(eng, spec, ctx("r1"), "n1", [(1, "default/small")]) is None  # not enough to evict


def _cpus(d: Any) -> set[int]:
    from allot_contracts.objects.cpuset import parse_cpuset

    return set(parse_cpuset(d.annotations.get(n.ANN_RESOURCE_STATUS, {}).get("cpuset", "")))


@pytest.mark.parametrize("policy", ["Restricted", "Aligned", ""])
def test_reserved_cpusets_are_held_preferred_and_restricted(policy: str) -> None:
    from allot_placement.testing import an_nrt

    lsr = {n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}
    eng = engine_with(a_node("n1", cpu="32", memory="128Gi"), an_nrt("n1"))
    hold = reserve(eng, "r1", a_pod("r1", cpu="4", labels=lsr), policy=policy, allocate_once=False)
    reserved = set(hold.allocation.cpuset)
    assert len(reserved) == 4
    other = eng.schedule(admit(a_pod("other", cpu="4", labels=lsr)))
    assert other.outcome == n.SCHEDULED and not _cpus(other) & reserved  # held for the owners
    owner = eng.schedule(admit(a_pod("web", cpu="2", labels=lsr)), reservations=ctx("r1"))
    assert owner.reservation is not None and _cpus(owner) <= reserved  # the reservation's CPUs first
    eng.assume(owner)
    big = eng.schedule(admit(a_pod("big", cpu="4", labels=lsr)), reservations=ctx("r1", required=True))
    if policy == "Restricted":
        # only 2 of the reserved CPUs remain and a Restricted reservation offers nothing else
        assert big.outcome == n.UNSCHEDULABLE
        assert "Reservation(s) Insufficient cpu" in big.message
    else:
        # Default / Aligned: what remains of the reservation plus free CPUs of the node
        assert big.outcome == n.SCHEDULED and big.reservation is not None
        assert reserved - _cpus(owner) <= _cpus(big)
