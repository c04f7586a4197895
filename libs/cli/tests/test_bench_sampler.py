"""``allot bench sampler`` runs the agent's metrics loop over a pod cgroup tree and reports its CPU cost."""

from __future__ import annotations

import argparse
import json

import pytest

from allot_cli.bench.sampler import run


@pytest.mark.parametrize("cgroups", ["v1", "v2"])
def test_the_sampler_benchmark_sees_every_pod_and_reports(
    cgroups: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(pods=6, interval=0.05, report=0.2, seconds=0.7, cgroups=cgroups, json=True)
    assert run(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pods_seen"] == 6 and result["reports"] >= 2
    assert 0 < result["cpu_percent"] < 100 * 2  # at most the machine's cores
    assert 2 <= result["samples"] <= 15  # the passes the loop made: at most one per 50 ms in 0.7 s
    assert result["cpu_ms_per_sample"] == pytest.approx(
        1000 * result["cpu_s"] / result["samples"], abs=0.3
    )  # both rounded
