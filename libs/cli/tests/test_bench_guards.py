"""Benchmark guards (slow suite): the placement engine keeps its machine-normalised rate, and the end-to-end
benchmark runs the real stack and reports every figure it promises."""

from __future__ import annotations

import json
import subprocess

import pytest

from allot_sim.bench.placement import DEFAULT_NODES, DEFAULT_PODS
from allot_stack.processes import bin_path

pytestmark = pytest.mark.slow

needs_trace = pytest.mark.skipif(
    not (DEFAULT_NODES.exists() and DEFAULT_PODS.exists()),
    reason="the openb trace is not beside the checkout (../shared/traces/openb)",
)


@needs_trace
def test_the_placement_engine_has_not_regressed() -> None:
    result = subprocess.run(
        [bin_path("allot"), "bench", "placement", "--json", "--check", "--skip-rss", "--repeat", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    figures = json.loads(result.stdout)
    assert result.returncode == 0, figures["guard"]
    assert figures["scheduled"] > 0 and figures["placements_per_s"] > 0


@needs_trace
def test_the_end_to_end_benchmark_reports_its_figures() -> None:
    result = subprocess.run(
        [
            bin_path("allot"),
            "bench",
            "e2e",
            "--json",
            "--pods",
            "1000",
            "--rates",
            "50,200",
            "--duration",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    for key in (
        "e2e_pods_per_s",
        "p50_ms",
        "p99_ms",
        "inprocess_pods_per_s",
        "distribution_penalty",
        "cluster_objects_per_s",
        "hops_burst",
        "cpu_s_per_1000_pods",
    ):
        assert key in figures, key
    assert figures["policy"] == "koordinator"  # the device-allocator's default, in the stack and alone
    assert set(figures["p99_ms"]) == {"50", "200"}
    assert figures["burst_outcomes"]["pending"] == 0
    assert sum(figures["burst_outcomes"].values()) == 1000
    assert all(hop["n"] > 0 for hop in figures["hops_burst"].values())
