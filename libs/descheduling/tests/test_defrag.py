"""GPUDefrag's planner: the fewest migrations that let a waiting GPU pod fit, gangs whole or not at all, within the
PodDisruptionBudgets, the evictor filter and the limits; FGD fragmentation before and after."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from allot_descheduling import DeschedulerConfigError, gang_moves_whole, parse_config
from allot_descheduling.defrag import (
    DefragInput,
    DefragLimits,
    GpuNode,
    GpuPod,
    PendingGpuPod,
    plan_round,
)
from allot_placement.config import TypicalPod
from allot_placement.fragmentation import FragModel

# the typical pods FGD measures against: whole GPUs and half GPUs, equally popular
MEASURE = FragModel(
    [
        TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=1),
        TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=500, weight=1),
    ]
).frag
TWO_GPUS = PendingGpuPod(key="ns/train", cpu=1000, gpu_count=2, gpu_milli=1000)


def node(name: str, *free: int) -> GpuNode:
    return GpuNode(name=name, model="V100", cpu_free=32_000, free=free)


def pod(name: str, on: str, *gpus: int, milli: int = 500, **kw: Any) -> GpuPod:
    return GpuPod(
        key=f"ns/{name}", uid=f"uid-{name}", node=on, cpu=1000, gpus=tuple((g, milli) for g in gpus), **kw
    )


def halves() -> tuple[tuple[GpuNode, ...], tuple[GpuPod, ...]]:
    """Two 2-GPU nodes, each with half a GPU taken: 3 GPUs free in all, 2 whole GPUs on no node."""
    return (node("a", 500, 1000), node("b", 500, 1000)), (pod("x", "a", 0), pod("y", "b", 0))


def test_one_migration_makes_the_waiting_pod_fit_and_lowers_fragmentation() -> None:
    nodes, pods = halves()
    out = plan_round(DefragInput(nodes=nodes, pods=pods, pending=(TWO_GPUS,)), MEASURE)
    [plan] = out.plans
    assert (plan.pending, plan.target, plan.gpus) == ("ns/train", "a", [0, 1])
    assert [(m.pod, m.source, m.target, m.gpus) for m in plan.moves] == [("ns/x", "a", "b", [0])]
    assert plan.frag_before == out.frag_before > 0
    assert plan.frag_after == out.frag_after == 0  # every GPU is used once the plan is done
    assert out.waiting == []


def test_the_plan_is_a_function_of_its_input() -> None:
    nodes, pods = halves()
    data = DefragInput(nodes=nodes, pods=pods[::-1], pending=(TWO_GPUS,))
    assert plan_round(data, MEASURE) == plan_round(
        DefragInput(nodes=nodes[::-1], pods=pods, pending=(TWO_GPUS,)), MEASURE
    )


def test_no_plan_when_the_free_gpu_in_fragments_is_too_little() -> None:
    nodes = (node("a", 500, 0), node("b", 500, 0))
    pods = (pod("x", "a", 0), pod("y", "b", 0), pod("x1", "a", 1, milli=1000), pod("y1", "b", 1, milli=1000))
    out = plan_round(DefragInput(nodes=nodes, pods=pods, pending=(TWO_GPUS,)), MEASURE)
    assert out.plans == []
    assert [(w.pod, w.code) for w in out.waiting] == [("ns/train", "InsufficientFree")]
    assert "1000 free" in out.waiting[0].reason


def test_a_pod_that_fits_already_gets_no_plan() -> None:
    nodes, pods = halves()
    one = PendingGpuPod(key="ns/one", gpu_count=1, gpu_milli=1000)
    out = plan_round(DefragInput(nodes=nodes, pods=pods, pending=(one,)), MEASURE)
    assert out.plans == [] and [w.code for w in out.waiting] == ["Fits"]


def test_disruption_budgets_are_respected() -> None:
    nodes, (x, y) = halves()
    guarded = (msgspec_replace(x, pdb="web"), msgspec_replace(y, pdb="web"))
    blocked = plan_round(
        DefragInput(nodes=nodes, pods=guarded, pending=(TWO_GPUS,), budgets={"web": 0}), MEASURE
    )
    assert blocked.plans == [] and [w.code for w in blocked.waiting] == ["NoPlan"]
    allowed = plan_round(
        DefragInput(nodes=nodes, pods=guarded, pending=(TWO_GPUS,), budgets={"web": 1}), MEASURE
    )
    assert [len(p.moves) for p in allowed.plans] == [1]


def test_the_evictor_filter_is_respected() -> None:
    nodes, (x, y) = halves()
    pods = (msgspec_replace(x, refused="DaemonSet"), y)
    [plan] = plan_round(DefragInput(nodes=nodes, pods=pods, pending=(TWO_GPUS,)), MEASURE).plans
    assert [m.pod for m in plan.moves] == ["ns/y"] and plan.target == "b"


def quarters() -> DefragInput:
    """Each node has both GPUs half taken: two migrations are the fewest that free two whole GPUs."""
    nodes = (node("a", 500, 500), node("b", 500, 500))
    pods = (pod("x", "a", 0), pod("z", "a", 1), pod("y", "b", 0), pod("w", "b", 1))
    return DefragInput(nodes=nodes, pods=pods, pending=(TWO_GPUS,))


def test_the_migration_limit_is_respected() -> None:
    data = quarters()
    limited = plan_round(msgspec_replace(data, limits=DefragLimits(max_per_plan=1)), MEASURE)
    assert limited.plans == [] and [w.code for w in limited.waiting] == ["NoPlan"]
    total = plan_round(msgspec_replace(data, limits=DefragLimits(total=1)), MEASURE)
    assert total.plans == []
    [plan] = plan_round(data, MEASURE).plans
    assert sorted(m.pod for m in plan.moves) == ["ns/x", "ns/z"] and plan.target == "a"


def gang_cluster(*, whole: bool, y_refused: str = "") -> DefragInput:
    """Gang g has x on a and x2 on c; y on b may be refused by the evictor filter."""
    nodes = (node("a", 500, 1000), node("b", 500, 1000), node("c", 500))
    pods = (
        pod("x", "a", 0, gang="ns/g", gang_whole=whole),
        pod("x2", "c", 0, gang="ns/g", gang_whole=whole),
        pod("y", "b", 0, refused=y_refused),
    )
    return DefragInput(nodes=nodes, pods=pods, pending=(TWO_GPUS,))


def test_a_gang_whose_policy_forbids_moving_it_is_skipped() -> None:
    [plan] = plan_round(gang_cluster(whole=False), MEASURE).plans
    assert [m.pod for m in plan.moves] == ["ns/y"]
    out = plan_round(gang_cluster(whole=False, y_refused="EvictionDisabled"), MEASURE)
    assert out.plans == [] and [w.code for w in out.waiting] == ["NoPlan"]


def test_a_gang_moves_whole_when_its_policy_allows() -> None:
    [plan] = plan_round(gang_cluster(whole=True, y_refused="EvictionDisabled"), MEASURE).plans
    assert sorted((m.pod, m.gang) for m in plan.moves) == [("ns/x", "ns/g"), ("ns/x2", "ns/g")]
    assert plan.target == "a"
    assert all(m.target not in ("a",) for m in plan.moves)


def test_a_gang_member_refused_by_the_evictor_keeps_the_whole_gang() -> None:
    data = gang_cluster(whole=True, y_refused="EvictionDisabled")
    pods = tuple(msgspec_replace(p, refused="LocalStorage") if p.key == "ns/x2" else p for p in data.pods)
    out = plan_round(msgspec_replace(data, pods=pods), MEASURE)
    assert out.plans == [] and [w.code for w in out.waiting] == ["NoPlan"]


def test_later_waiting_pods_see_the_earlier_plans() -> None:
    nodes, pods = halves()
    second = PendingGpuPod(key="ns/train2", cpu=1000, gpu_count=2, gpu_milli=1000)
    out = plan_round(DefragInput(nodes=nodes, pods=pods, pending=(TWO_GPUS, second)), MEASURE)
    assert [p.pending for p in out.plans] == ["ns/train"]
    assert [(w.pod, w.code) for w in out.waiting] == [("ns/train2", "InsufficientFree")]


def msgspec_replace(obj: Any, **changes: Any) -> Any:
    return msgspec.structs.replace(obj, **changes)


def defrag_profile(args: dict[str, Any] | None, plugins: dict[str, Any] | None = None) -> Any:
    profile: dict[str, Any] = {"name": "gpu"}
    if args is not None:
        profile["pluginConfig"] = [{"name": "GPUDefrag", "args": args}]
    if plugins is not None:
        profile["plugins"] = plugins
    return parse_config({"profiles": [profile]})


def test_gpudefrag_is_a_dry_run_unless_told_otherwise() -> None:
    config = defrag_profile({})
    [profile] = config.profiles
    assert config.enabled and profile.low_node_load is None
    assert profile.defrag is not None and profile.defrag.dry_run and not profile.defrag.gang_whole
    enabled = defrag_profile(None, {"balance": {"enabled": [{"name": "GPUDefrag"}]}}).profiles[0].defrag
    assert enabled is not None and enabled.dry_run and enabled.max_per_plan == 4
    told = defrag_profile({"dryRun": False, "maxMigrationsPerPlan": 2, "gangMigration": "Whole"}).profiles[0]
    assert told.defrag is not None and (
        told.defrag.dry_run,
        told.defrag.max_per_plan,
        told.defrag.gang_whole,
    ) == (
        False,
        2,
        True,
    )
    off = defrag_profile({}, {"balance": {"disabled": [{"name": "GPUDefrag"}]}})
    assert off.profiles[0].defrag is None and not off.enabled


def test_bad_gpudefrag_args_name_their_field() -> None:
    with pytest.raises(DeschedulerConfigError) as err:
        defrag_profile({"gangMigration": "Some", "maxMigrationsPerPlan": 0, "maxPlan": 1})
    paths = {i.path for i in err.value.issues}
    assert paths == {
        "descheduler.profiles[0].pluginConfig[0].args.gangMigration",
        "descheduler.profiles[0].pluginConfig[0].args.maxMigrationsPerPlan",
        "descheduler.profiles[0].pluginConfig[0].args.maxPlan",
    }


def test_a_gang_states_its_own_policy() -> None:
    assert gang_moves_whole({"descheduler.allot.dev/gang-migration": "Whole"}, False)
    assert not gang_moves_whole({"descheduler.allot.dev/gang-migration": "Skip"}, True)
    assert gang_moves_whole({}, True) and not gang_moves_whole({}, False)
