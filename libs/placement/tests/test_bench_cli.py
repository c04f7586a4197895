"""``allot bench placement`` runs end to end on a slice of the openb trace and reports its figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

bench = pytest.importorskip("allot_cli.bench.placement")


def _args(**kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    ns = parser.parse_args(["placement", "--json", "--skip-rss", "--repeat", "1", "--limit", "300"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


@pytest.mark.skipif(not bench.DEFAULT_NODES.is_file(), reason="openb trace not present beside the checkout")
def test_bench_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.run(_args()) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pods"] == 300 and out["nodes"] == 1213 and 0 < out["scheduled"] <= 300
    assert out["placements_per_s"] > 0


def test_missing_trace_is_a_clear_usage_error(tmp_path: Path) -> None:
    from allot_cli.errors import UsageError

    with pytest.raises(UsageError, match="nodes CSV not found"):
        bench.run(_args(nodes=tmp_path / "missing.csv"))
