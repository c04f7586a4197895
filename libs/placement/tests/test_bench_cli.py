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
    from allot_intake.errors import UsageError

    with pytest.raises(UsageError, match="nodes CSV not found"):
        bench.run(_args(nodes=tmp_path / "missing.csv"))


def _tiny_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,131072,{(i % 3) * 2},{'T4' if i % 3 else ''}\n" for i in range(12))
    )
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        + "".join(f"p{i},2000,4096,{i % 2},{500 if i % 4 == 1 else 1000},\n" for i in range(40))
    )
    return nodes, pods


def test_node_count_replicates_cluster_and_pods_and_the_index_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = _tiny_trace(tmp_path)
    outs = []
    for off in (False, True):
        assert bench.run(_args(nodes=nodes, pods=pods, limit=0, node_count=30, no_free_index=off)) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["nodes"] == 30 and outs[0]["pods"] == 100  # 40 pods × 30 / 12 nodes
    assert outs[0]["free_index"] and not outs[1]["free_index"]
    assert outs[0]["digest"] == outs[1]["digest"]
    assert outs[0]["evaluations_per_pod"] < outs[1]["evaluations_per_pod"]


def test_shards_prototype_places_every_pod_it_can(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = _tiny_trace(tmp_path)
    assert bench.run(_args(nodes=nodes, pods=pods, limit=0, node_count=24, shards=2)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "placement-shards" and out["shards"] == 2
    assert sum(out["shard_nodes"]) == 24 and out["pods"] == 80
    assert 0 < out["scheduled"] <= 80 and len(out["shard_digests"]) == 2
