"""``allot sim trace``: its arguments and the printing of what :mod:`allot_sim.trace` returns."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from allot_cli.bench import benchmark_parser, trace_arguments
from allot_cli.files import path, prepare_output
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.flags import MAX_SIZE, clipped, factor, whole_number
from allot_sim import trace as benchmark
from allot_sim.trace import ALL_POLICIES, DEFAULT_NODES, DEFAULT_PODS, LABELS, PAPER_130


def register(subparsers: Any) -> None:
    p = benchmark_parser(
        subparsers,
        benchmark,
        help="replay an openb GPU trace through the engine and measure GPU allocation and fragmentation",
        with_json=False,
    )
    trace_arguments(p, nodes=DEFAULT_NODES, pods=DEFAULT_PODS, label="")
    p.add_argument(
        "--policy",
        default="fgd",
        help=f"a policy, a comma list, or 'all' ({', '.join(ALL_POLICIES)}; also koordinator, spread)",
    )
    p.add_argument(
        "--tune", type=factor, default=1.3, help="arrived GPU request as a multiple of capacity (1.3)"
    )
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=whole_number, help="one seed (default 42)")
    seeds.add_argument("--seeds", type=seed_list, help="a range A-B or a comma list, e.g. 42-51")
    p.add_argument("--out", type=path, help="directory for per-pod rows, curves and the summary")
    p.add_argument("--summary-json", type=path, help="write the summary object to this file")
    p.add_argument("--plot", type=path, help="write allocation vs arrival (PNG) to this file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def seed_list(text: str) -> list[int]:
    """``--seeds``: a range ``A-B`` (A ≤ B) or a comma list of seeds, each a whole number (:func:`whole_number`), at
    most :data:`MAX_SIZE` of them."""
    first, dash, last = text.partition("-")
    try:
        if dash:
            a, b = whole_number(first), whole_number(last)
            if a > b or b - a >= MAX_SIZE:
                raise argparse.ArgumentTypeError(f"A-B needs A ≤ B and at most {MAX_SIZE} seeds")
            return list(range(a, b + 1))
        seeds = [whole_number(part) for part in text.split(",")]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(
            f"{clipped(text)} is not a range A-B or a comma list of seeds: {exc}"
        ) from None
    if len(seeds) > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{clipped(text)}: at most {MAX_SIZE} seeds")
    return seeds


def _seeds(args: argparse.Namespace) -> list[int]:
    if args.seeds is not None:
        return list(args.seeds)
    return [args.seed if args.seed is not None else 42]


class _Progress:
    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled, self.label, self.t0, self.last = enabled, label, time.perf_counter(), -1

    def __call__(self, done: int, total: int) -> None:
        pct = done * 100 // total
        if not self.enabled or (pct == self.last and done != total):
            return
        self.last = pct
        bar = "#" * (pct // 4) + "." * (25 - pct // 4)
        sys.stderr.write(
            f"\r{self.label:28} [{bar}] {pct:3d}% {done}/{total} {time.perf_counter() - self.t0:6.1f}s"
        )
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from allot_placement.openb import read_nodes, read_pods
    from allot_sim import trace as experiment

    experiment.check_files(args.nodes, args.pods)
    if args.out:  # outputs are readied before the runs, so that a path that cannot be written costs no run
        prepare_output(args.out, flag="--out", directory=True)
    for output, flag in ((args.summary_json, "--summary-json"), (args.plot, "--plot")):
        if output:
            prepare_output(output, flag=flag)
    policies, seeds = experiment.policies(args.policy), _seeds(args)
    nodes, pods = read_nodes(args.nodes), read_pods(args.pods)
    trace = experiment.trace_name(args.pods)
    show = not args.no_progress and sys.stderr.isatty()

    def ran(policy: str, seed: int, r: Any, wall: float) -> None:
        if not show and not args.no_progress:
            print(
                f"# {policy} seed {seed}: alloc@130 {experiment.alloc_at(r, 130)}  {wall:.1f}s",
                file=sys.stderr,
            )

    results, curves = experiment.compare(
        nodes,
        pods,
        policies,
        seeds,
        args.tune,
        progress=lambda policy, seed: _Progress(show, f"{policy} seed {seed}"),
        ran=ran,
        out=args.out,
    )
    _print_table(trace, args.tune, seeds, results)
    out = experiment.summary_object(trace, args.tune, seeds, policies, results)
    experiment.write_outputs(out, policies, curves, summary_json=args.summary_json, out_dir=args.out)
    if args.plot:
        experiment.plot(args.plot, trace, args.tune, seeds, curves)
    return 0


def _print_table(trace: str, tune: float, seeds: list[int], results: dict[str, JsonObject]) -> None:
    paper = PAPER_130.get(trace, {})
    seed_text = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    print(
        f"trace {trace}, tune {tune}, seeds {seed_text} (allocation % of GPU capacity, shares count fractionally)"
    )
    print(
        f"{'policy':24} {'alloc@100':>9} {'alloc@130':>9} {'paper@130':>9} {'unalloc@130':>11} {'frag@100':>8} "
        f"{'scheduled':>9} {'pods':>6} {'wall s':>7}"
    )
    for policy, s in results.items():
        p = paper.get(policy)
        print(
            f"{LABELS.get(policy, policy):24} {s['alloc_pct_at_100']!s:>9} {s['alloc_pct_at_130']!s:>9} "
            f"{(f'{p:.2f}' if p is not None else '-'):>9} {s['unallocated_pct_at_130']!s:>11} "
            f"{s['frag_pct_at_100']!s:>8} {s['pods_scheduled']!s:>9} {s['pods_total']!s:>6} {s['wall_s']!s:>7}"
        )
