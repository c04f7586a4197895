"""``allot bench defrag``'s cluster model: a GPU pod that fits nowhere is placed once GPUDefrag's plan is carried
out, and the moved pod holds the GPUs the plan gave it."""

from __future__ import annotations

from allot_placement.config import TypicalPod
from allot_placement.fragmentation import FragModel
from allot_placement.openb import TraceNode
from allot_sim.bench.defrag import Cluster, _defrag


def test_a_plan_is_carried_out_and_places_the_waiting_pod() -> None:
    frag = FragModel([TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=1)]).frag
    cluster = Cluster(
        [TraceNode("a", 32_000, 65_536, 2, "V100"), TraceNode("b", 32_000, 65_536, 2, "V100")], frag
    )
    half = (1000, 1, 500, ())
    cluster.bind("openb/x", "a", half, (0,))
    cluster.bind("openb/y", "b", half, (0,))
    train = (1000, 2, 1000, ())
    assert cluster.place(train) is None
    assert _defrag(cluster, "openb/train", train, max_per_plan=1) == 1
    assert sorted(cluster.free.values()) == [[0, 0], [0, 1000]]  # both halves share one GPU; train holds two
    assert cluster.pods["openb/train"][2] == ((0, 1000), (1, 1000))
    assert _defrag(cluster, "openb/more", train, max_per_plan=1) is None  # 1000 milli free: no plan
