"""``allot sim trace`` end to end on a tiny trace: table, summary JSON, per-pod rows, curves and the PNG plot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

trace_cli = pytest.importorskip("allot_cli.sim.trace")

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},32000,131072,{2 if i % 2 else 4},{'T4' if i % 2 else 'V100M16'}\n" for i in range(6)
)
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    + "".join(
        f"pod-{i:03d},{2000 + 500 * (i % 3)},4096,{1 if i % 4 else 0},{[0, 500, 250, 1000][i % 4]},"
        f"{'T4' if i % 7 == 0 else ''},LS,Running,0,0,0\n"
        for i in range(40)
    )
)


def _run(tmp_path: Path, *extra: str) -> argparse.Namespace:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_tiny.csv").write_text(PODS)
    parser = argparse.ArgumentParser()
    trace_cli.register(parser.add_subparsers())
    return parser.parse_args(
        [
            "trace",
            "--nodes",
            str(tmp_path / "nodes.csv"),
            "--pods",
            str(tmp_path / "openb_pod_list_tiny.csv"),
            "--no-progress",
            *extra,
        ]
    )


def test_all_policies_summary_plot_and_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _run(
        tmp_path,
        "--policy",
        "all",
        "--seeds",
        "1-2",
        "--summary-json",
        str(tmp_path / "s.json"),
        "--plot",
        str(tmp_path / "p.png"),
        "--out",
        str(tmp_path / "out"),
    )
    assert trace_cli.run(args) == 0
    table = capsys.readouterr().out
    assert "trace tiny, tune 1.3, seeds 1-2" in table and "FGD" in table and "Koord. binpack" in table
    summary = json.loads((tmp_path / "s.json").read_text())
    assert set(summary["policies"]) == set(trace_cli.ALL_POLICIES)
    fgd = summary["policies"]["fgd"]
    assert fgd["seeds"] == [1, 2] and len(fgd["per_seed"]) == 2 and fgd["alloc_pct_at_130"] is not None
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "fgd-seed1.csv").read_text().startswith("pod,arrived_pct,alloc_pct")
    assert (tmp_path / "out" / "curves.csv").exists()


def test_single_policy_summary_is_flat(tmp_path: Path) -> None:
    args = _run(tmp_path, "--policy", "bestfit", "--seed", "3", "--summary-json", str(tmp_path / "s.json"))
    trace_cli.run(args)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["policy"] == "bestfit" and summary["seeds"] == [3] and summary["trace"] == "tiny"


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from allot_intake.errors import UsageError

    with pytest.raises(UsageError, match="unknown policy"):
        trace_cli.run(_run(tmp_path, "--policy", "magic"))
    with pytest.raises(SystemExit):  # refused while the command line is read
        _run(tmp_path, "--seeds", "a-b")
    assert "argument --seeds: 'a-b' is not a range A-B or a comma list of seeds" in capsys.readouterr().err


def test_missing_csv(tmp_path: Path) -> None:
    from allot_intake.errors import UsageError

    args = _run(tmp_path)
    args.pods = tmp_path / "nope.csv"
    with pytest.raises(UsageError, match="file not found"):
        trace_cli.run(args)
