"""The batch arithmetic shared by a node and its NUMA zones, at the roundings upstream uses."""

from __future__ import annotations

from allot_contracts.objects import names as n
from allot_contracts.objects.colocation import ColocationStrategy
from allot_placement.batchcalc import HPPod, margin, zone_batch


def test_margin_truncates_toward_zero_like_go() -> None:
    over = ColocationStrategy(cpu_reclaim_threshold_percent=150, memory_reclaim_threshold_percent=65)
    # 3 × (100 − 150) % = −1.5 → −1; 7 × 35 % = 2.45 → 2
    assert margin(over, {n.CPU: 3, n.MEMORY: 7}) == {n.CPU: -1, n.MEMORY: 2}


def test_zone_shares_round_up_at_the_milli_unit_and_results_to_whole_bytes() -> None:
    everything = ColocationStrategy(cpu_reclaim_threshold_percent=100, memory_reclaim_threshold_percent=100)
    zones = {0: {n.CPU: 1_000, n.MEMORY: 100}, 1: {n.CPU: 1_000, n.MEMORY: 100}}
    # 3 bytes of system memory: 1.5 per zone; 1 millicore: 1 per zone (rounded up); a pod bound to zone 1 counts
    # there only, an unbound one half in each
    pods = [
        HPPod(request={n.CPU: 100, n.MEMORY: 10}, usage=None, lse=False, numa=(1,)),
        HPPod(request={n.CPU: 300, n.MEMORY: 30}, usage={n.CPU: 201, n.MEMORY: 21}, lse=False, numa=()),
    ]
    got = zone_batch(everything, zones, {n.CPU: 1, n.MEMORY: 3}, {}, pods, [])
    # zone 0: 1000 − 1 − 101 (201 / 2 rounded up); 100 − 1.5 − 10.5 = 88
    assert got[0] == {n.BATCH_CPU: 898, n.BATCH_MEMORY: 88}
    # zone 1: 1000 − 1 − 101 − 100; 100 − 1.5 − 10.5 − 10 = 78
    assert got[1] == {n.BATCH_CPU: 798, n.BATCH_MEMORY: 78}
    odd = zone_batch(everything, zones, {n.CPU: 0, n.MEMORY: 3}, {}, [], [{n.MEMORY: 2}])
    assert odd[0][n.BATCH_MEMORY] == 98  # 100 − 1.5 − 1 = 97.5, rounded up
