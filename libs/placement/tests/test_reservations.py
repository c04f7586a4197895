"""Reservation holds on a node: remaining part, Restricted fit, ReservationScore, nomination, policy conflict,
restore and restrict (pure)."""

from __future__ import annotations

import pytest

from allot_contracts.objects.inventory import Device, Inventory
from allot_placement.reservations import (
    Hold,
    fits_reservation,
    nominate,
    policy_conflict,
    reservation_score,
    restore,
    restrict,
    subtract,
)
from allot_placement.state import Allocation, DeviceAlloc, NodeState, NumaAlloc

GPU = {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100}


def alloc(
    cpu: int = 0, memory: int = 0, gpus: tuple[int, ...] = (), cpuset: tuple[int, ...] = (), **extra: int
) -> Allocation:
    requests = {k: v for k, v in {"cpu": cpu, "memory": memory, **extra}.items() if v}
    devices = {"gpu": tuple(DeviceAlloc(minor=m, resources=dict(GPU)) for m in gpus)} if gpus else {}
    return Allocation(node="n1", requests=requests, devices=devices, cpuset=cpuset)


def hold(name: str = "r1", full: Allocation | None = None, **kw: object) -> Hold:
    return Hold(name=name, node="n1", allocation=full or alloc(cpu=4000, memory=8), **kw)  # type: ignore[arg-type]


def test_subtract_per_resource_device_cpu_and_numa() -> None:
    full = Allocation(
        node="n1",
        requests={"cpu": 4000, "memory": 8},
        devices={
            "gpu": (DeviceAlloc(minor=0, resources=dict(GPU)), DeviceAlloc(minor=1, resources=dict(GPU)))
        },
        cpuset=(0, 1, 2, 3),
        numa=(NumaAlloc(node=0, resources={"cpu": 4000}),),
    )
    used = Allocation(
        node="n1",
        requests={"cpu": 1000, "memory": 10},
        devices={
            "gpu": (
                DeviceAlloc(
                    minor=0, resources={"koordinator.sh/gpu-core": 50, "koordinator.sh/gpu-memory-ratio": 50}
                ),
            )
        },
        cpuset=(0,),
        numa=(NumaAlloc(node=0, resources={"cpu": 1000}),),
    )
    rest = subtract(full, [used])
    assert rest.requests == {"cpu": 3000}  # memory clamps at 0 and disappears
    assert [d.minor for d in rest.devices["gpu"]] == [0, 1]
    assert rest.devices["gpu"][0].resources == {
        "koordinator.sh/gpu-core": 50,
        "koordinator.sh/gpu-memory-ratio": 50,
    }
    assert rest.cpuset == (1, 2, 3) and rest.numa == (NumaAlloc(node=0, resources={"cpu": 3000}),)
    assert subtract(full, []) is full


@pytest.mark.parametrize(
    ("restricted", "owners", "request_", "reasons"),
    [
        ((), {}, {"cpu": 4000}, []),
        ((), {}, {"cpu": 5000}, ["Reservation(s) Insufficient cpu"]),
        ((), {"a/p": alloc(cpu=3000)}, {"cpu": 2000}, ["Reservation(s) Insufficient cpu"]),
        (("memory",), {}, {"cpu": 9000, "memory": 8}, []),  # only memory is restricted
        (
            ("nvidia.com/gpu",),
            {},
            {"cpu": 9000},
            ["Reservation(s) Insufficient cpu"],
        ),  # none listed is reserved → all
    ],
)
def test_fits_reservation(
    restricted: tuple[str, ...], owners: dict[str, Allocation], request_: dict[str, int], reasons: list[str]
) -> None:
    assert (
        fits_reservation(request_, hold(restricted=restricted, owners=owners, allocate_once=False)) == reasons
    )


def test_pod_count_limit_and_detailed_reasons() -> None:
    h = hold(full=alloc(cpu=4000, pods=1), owners={"a/p": alloc(cpu=1000)}, allocate_once=False)
    assert fits_reservation({"cpu": 1000}, h) == ["Reservation(s) Too many pods"]
    assert fits_reservation({"cpu": 9000}, h, detailed=True) == [
        "Reservation(s) Too many pods, requested: 1, used: 1, capacity: 1",
        "Reservation(s) Insufficient cpu, requested: 9000, used: 1000, capacity: 4000",
    ]


def test_score_and_nominate() -> None:
    small = hold("small", alloc(cpu=2000, memory=8))
    big = hold("big", alloc(cpu=8000, memory=8))
    assert reservation_score({"cpu": 2000, "memory": 8}, small) == 100
    assert reservation_score({"cpu": 2000, "memory": 8}, big) == (25 + 100) // 2
    assert reservation_score({"cpu": 4000}, small) == 0  # over capacity scores 0 for that resource
    assert nominate([big, small], {"cpu": 2000, "memory": 8}) is small  # most allocated wins
    ordered = hold("ordered", alloc(cpu=8000, memory=8), order=3)
    assert nominate([big, small, ordered], {"cpu": 2000}) is ordered  # smallest non-zero order first
    assert nominate([big, small], {"cpu": 1}, name="big") is big
    assert nominate([], {}) is None
    tie_a, tie_b = hold("a"), hold("b")
    assert nominate([tie_b, tie_a], {"cpu": 1000}) is tie_a  # ties by name


def test_policy_conflict() -> None:
    default, aligned, restricted = hold(policy=""), hold(policy="Aligned"), hold(policy="Restricted")
    assert policy_conflict("", [aligned]) and policy_conflict("Aligned", [default])
    assert not policy_conflict("Aligned", [restricted]) and not policy_conflict("", [default])
    consumed = hold(policy="", owners={"a/p": alloc(cpu=1)})  # allocateOnce and used: not matchable
    assert not policy_conflict("Aligned", [consumed])


def a_node() -> NodeState:
    state = NodeState("n1")
    state.inventory = Inventory(
        devices={
            "gpu": tuple(
                Device(
                    type="gpu",
                    minor=m,
                    id=f"g{m}",
                    healthy=True,
                    resources=dict(GPU),
                    socket=0,
                    numa=0,
                    pcie="",
                    bus_id="",
                    labels={},
                )
                for m in range(4)
            )
        },
        labels={},
        partitions=None,
        content_key=b"k",
    )
    return state


def test_restore_gives_the_hold_back_without_touching_the_node() -> None:
    state = a_node()
    h = hold(full=alloc(cpu=4000, gpus=(2,)))
    state.apply(h.key, h.remaining())
    state.apply("a/other", alloc(cpu=1000, gpus=(0,)))
    restored = restore(state, [h])
    assert restored.requested == {"cpu": 1000} and sorted(restored.dev_used["gpu"]) == [0]
    assert state.requested == {"cpu": 5000} and sorted(state.dev_used["gpu"]) == [0, 2]  # unchanged


def test_restrict_leaves_only_the_reserved_devices_free() -> None:
    state = a_node()
    state.apply(
        "a/other",
        Allocation(
            node="n1",
            requests={},
            devices={"gpu": (DeviceAlloc(minor=0, resources={"koordinator.sh/gpu-core": 50}),)},
        ),
    )
    h = hold(full=alloc(cpu=4000, gpus=(2, 3)))
    only = restrict(restore(state, [h]), h)
    free = {
        m: GPU["koordinator.sh/gpu-core"] - only.dev_used["gpu"].get(m, {}).get("koordinator.sh/gpu-core", 0)
        for m in range(4)
    }
    assert free == {0: 0, 1: 0, 2: 100, 3: 100}
