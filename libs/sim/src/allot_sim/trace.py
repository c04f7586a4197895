"""``allot sim trace``: the FGD paper's trace experiment on the placement engine.

Reads the openb node and pod CSVs, builds ordinary Node/Device/Pod objects and drives the same
``PlacementEngine`` the device-allocator runs (``allot_placement.trace`` has the protocol), for one or more
policies and seeds. Prints a comparison table (with the paper's published figure for known traces), and optionally
writes per-pod rows and curves (``--out``), a summary (``--summary-json``) and an allocation-vs-arrival plot
(``--plot``, like the paper's Figure 9a).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import InputError, UsageError

REPO_ROOT = Path(__file__).resolve().parents[4]
OPENB_DIR = (REPO_ROOT / ".." / "shared" / "traces" / "openb").resolve()
DEFAULT_NODES = OPENB_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = OPENB_DIR / "openb_pod_list_default.csv"
PAPER_POLICIES = ["random", "dotproduct", "gpuclustering", "gpupacking", "bestfit", "fgd"]
ALL_POLICIES = [*PAPER_POLICIES, "binpack"]
LABELS = {
    "random": "Random",
    "dotproduct": "DotProduct",
    "gpuclustering": "GpuClustering",
    "gpupacking": "GpuPacking",
    "bestfit": "BestFit",
    "fgd": "FGD",
    "binpack": "Koord. binpack",
    "koordinator": "Koordinator default",
    "spread": "Spread",
}
# Published allocation % at 130 % arrival (mean of seeds 42-51), Weng et al. ATC'23 artifact.
PAPER_130 = {
    "default": {
        "random": 87.47,
        "dotproduct": 90.85,
        "gpuclustering": 91.88,
        "gpupacking": 92.00,
        "bestfit": 93.08,
        "fgd": 95.39,
    },
    "cpu050": {
        "random": 91.24,
        "dotproduct": 93.27,
        "gpuclustering": 93.79,
        "gpupacking": 93.72,
        "bestfit": 93.79,
        "fgd": 95.21,
    },
    "gpushare40": {
        "random": 86.00,
        "dotproduct": 89.56,
        "gpuclustering": 90.02,
        "gpupacking": 90.03,
        "bestfit": 91.69,
        "fgd": 94.15,
    },
    "gpushare100": {
        "random": 79.44,
        "dotproduct": 82.42,
        "gpuclustering": 82.65,
        "gpupacking": 82.57,
        "bestfit": 85.01,
        "fgd": 86.90,
    },
    "gpuspec33": {
        "random": 86.46,
        "dotproduct": 89.14,
        "gpuclustering": 92.12,
        "gpupacking": 93.22,
        "bestfit": 93.09,
        "fgd": 94.55,
    },
    "multigpu50": {
        "random": 90.27,
        "dotproduct": 94.85,
        "gpuclustering": 95.81,
        "gpupacking": 96.18,
        "bestfit": 95.74,
        "fgd": 97.18,
    },
}


def trace_name(pods: Path) -> str:
    return pods.stem.replace("openb_pod_list_", "")


def check_files(nodes: Path, pods: Path) -> None:
    for path, flag in ((nodes, "--nodes"), (pods, "--pods")):
        if not Path(path).is_file():
            raise InputError(
                f"{flag} file not found: {path} (the openb trace lives in ../shared/traces/openb beside "
                "the checkout)"
            )


def run_one(
    nodes: list[Any],
    pods: list[Any],
    policy: str,
    seed: int,
    tune: float,
    progress: Callable[[int, int], None],
) -> tuple[Any, float]:
    """One policy and seed over the trace: the run and its wall seconds."""
    from allot_placement.trace import run_trace

    t0 = time.perf_counter()
    r = run_trace(nodes, pods, policy, seed, random.Random(seed), tune, progress)
    return r, time.perf_counter() - t0


def policies(text: str) -> list[str]:
    """``--policy``: a policy, a comma list, or ``all``; each one a placement preset."""
    from allot_placement.config import PRESETS

    names = ALL_POLICIES if text == "all" else [t.strip() for t in text.split(",")]
    if "" in names:
        raise UsageError(f"--policy {text!r}: a policy name is empty; give a policy, a comma list or all")
    bad = [p for p in names if p not in PRESETS]
    if bad:
        raise UsageError(
            f"unknown policy {', '.join(bad)}; choose from {', '.join(ALL_POLICIES)}, koordinator, spread "
            "or all"
        )
    return names


def compare(
    nodes: list[Any],
    pods: list[Any],
    policies: list[str],
    seeds: list[int],
    tune: float,
    *,
    progress: Callable[[str, int], Callable[[int, int], None]],
    ran: Callable[[str, int, Any, float], None],
    out: Path | None,
) -> tuple[dict[str, JsonObject], dict[str, dict[int, float]]]:
    """Every policy over every seed: each policy's summary and mean allocation curve (``progress``: the progress
    callback of one run; ``ran``: told of each run and its wall seconds; ``out``: where each run's rows go)."""
    results: dict[str, JsonObject] = {}
    curves: dict[str, dict[int, float]] = {}
    for policy in policies:
        runs, walls = [], []
        for seed in seeds:
            r, wall = run_one(nodes, pods, policy, seed, tune, progress(policy, seed))
            walls.append(wall)
            runs.append(r)
            ran(policy, seed, r, wall)
            if out:
                write_rows(out, policy, r)
        results[policy], curves[policy] = summarize(runs, walls)
    return results, curves


def alloc_at(r: Any, arrival_pct: int) -> float | None:
    from allot_placement.trace import discretize

    value: float | None = discretize(r, "alloc").get(arrival_pct)
    return value


def summarize(runs: list[Any], walls: list[float]) -> tuple[JsonObject, dict[int, float]]:
    """A policy's summary over its seeds, and its mean allocation curve (allocation % by arrival %)."""
    from allot_placement.trace import discretize, summary

    per = [discretize(r, "alloc") for r in runs]
    curve = {
        x: round(sum(c[x] for c in per if x in c) / sum(1 for c in per if x in c), 2)
        for x in range(131)
        if any(x in c for c in per)
    }
    return summary(runs, walls), curve


class Summaries(TypedDict):
    """Every policy's summary (``allot_placement.trace.summary``) by name, with the run's trace, tune and seeds."""

    trace: str
    tune: float
    seeds: list[int]
    policies: dict[str, JsonObject]


def summary_object(
    trace: str, tune: float, seeds: list[int], policies: list[str], results: dict[str, JsonObject]
) -> JsonObject | Summaries:
    """What ``--summary-json`` and ``--out`` write: one policy's summary, or every policy's by name."""
    if len(policies) == 1:
        return {**results[policies[0]], "trace": trace, "tune": tune}
    return {"trace": trace, "tune": tune, "seeds": seeds, "policies": results}


def write_outputs(
    out: JsonObject | Summaries,
    policies: list[str],
    curves: dict[str, dict[int, float]],
    *,
    summary_json: Path | None,
    out_dir: Path | None,
) -> None:
    if summary_json:
        summary_json.parent.mkdir(parents=True, exist_ok=True)
        summary_json.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    if out_dir:
        (out_dir / "summary.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
        with (out_dir / "curves.csv").open("w") as f:
            f.write("arrival_pct," + ",".join(policies) + "\n")
            for x in range(131):
                f.write(f"{x}," + ",".join(str(curves[p].get(x, "")) for p in policies) + "\n")


def write_rows(out: Path, policy: str, r: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cap = r.total_gpus * 1000
    with (out / f"{policy}-seed{r.seed}.csv").open("w") as f:
        f.write("pod,arrived_pct,alloc_pct,frag_pct,frag_ratio_pct\n")
        for i, (arrived, used, frag, idle) in enumerate(r.rows):
            ratio = frag * 100 / (r.frag_weight * idle) if idle else 0.0
            f.write(
                f"{i + 1},{arrived * 100 / cap:.3f},{used * 100 / cap:.3f},"
                f"{frag * 100 / (r.frag_weight * cap):.3f},{ratio:.3f}\n"
            )


def plot(path: Path, trace: str, tune: float, seeds: list[int], curves: dict[str, dict[int, float]]) -> None:
    from allot_placement.png import line_chart

    series = [(LABELS.get(p, p), sorted(c.items())) for p, c in curves.items()]
    lows = [v for c in curves.values() for x, v in c.items() if x >= 80]
    y0 = max(0, min(int(min(lows)) // 5 * 5, 80)) if lows else 0
    seed_text = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    png = line_chart(
        series,
        title=f"OPENB {trace.upper()}: GPU ALLOCATION VS ARRIVAL (MEAN OF SEEDS {seed_text})",
        x_label="ARRIVED GPU REQUEST (% OF CAPACITY)",
        y_label="ALLOCATED GPU %",
        x_range=(0, max(130, round(tune * 100))),
        y_range=(y0, 100),
        x_step=10,
        y_step=5,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
