"""The sharded-decider throughput model (docs/adr/0013-sharded-deciders.md)."""

from __future__ import annotations

import pytest

from allot_placement.shardsim import Inputs, cost, main, model


def test_cost_interpolates_and_extrapolates_on_a_log_log_scale() -> None:
    pts = [(1000, 100.0), (4000, 200.0)]  # cost doubles per fourfold nodes: slope 0.5
    assert cost(pts, 1000) == pytest.approx(100.0)
    assert cost(pts, 2000) == pytest.approx(141.42, rel=1e-3)
    assert cost(pts, 16000) == pytest.approx(400.0)
    assert cost(pts, 250) == pytest.approx(50.0)
    assert cost([(1000, 70.0)], 50_000) == 70.0


def test_shards_divide_the_engine_cost_until_the_log_binds() -> None:
    inp = Inputs(
        [(1000, 1000.0), (10_000, 1000.0)], router_us=10, append_per_s=10_000, events_per_pod=2, cross=0
    )
    one, two = model(inp, 10_000, 1), model(inp, 10_000, 2)
    assert one["pods_per_s"] == pytest.approx(1000.0) and one["bound_by"] == "engines"
    assert two["pods_per_s"] == pytest.approx(2000.0)
    many = model(inp, 10_000, 16)
    assert many["bound_by"] == "log" and many["pods_per_s"] == pytest.approx(5000.0)


def test_cores_cap_the_shards_that_run_and_spanning_gangs_cost_extra() -> None:
    flat = [(1000, 500.0)]
    capped = model(Inputs(flat, cores=2, cross=0), 10_000, 8)
    assert capped["engines"] == pytest.approx(4000.0)
    spanning = model(Inputs(flat, cross=0.25), 10_000, 2)
    assert spanning["us_per_pod"] == pytest.approx(625.0)


def test_bad_costs_are_refused() -> None:
    with pytest.raises(ValueError, match="costs"):
        Inputs([])
    with pytest.raises(SystemExit):
        main(["--cost", "many"])


def test_command_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--cost", "1000:400", "--cost", "12000:600", "--nodes", "10000", "--shards", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "| nodes | 1 shard | 2 shards |"
    assert "| 10,000 |" in out
