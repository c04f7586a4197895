"""The sampler benchmark (``allot bench sampler``) runs the agent's metrics loop over a pod cgroup tree and reports
its CPU cost."""

from __future__ import annotations

import pytest

from allot_sim.bench.sampler import measure


@pytest.mark.parametrize("cgroups", ["v1", "v2"])
def test_the_sampler_benchmark_sees_every_pod_and_reports(cgroups: str) -> None:
    result = measure(pods=6, interval=0.05, report=0.2, seconds=0.7, cgroups=cgroups)
    assert result["pods_seen"] == 6 and result["reports"] >= 2
    assert 0 < result["cpu_percent"] < 100 * 2  # at most the machine's cores
    assert 2 <= result["samples"] <= 15  # the passes the loop made: at most one per 50 ms in 0.7 s
    assert result["cpu_ms_per_sample"] == pytest.approx(
        1000 * result["cpu_s"] / result["samples"], abs=0.3
    )  # both rounded
