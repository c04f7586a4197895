"""``allot sim run SCENARIO.yaml [-o decisions.jsonl] [--state state.json] [--out-dir DIR] [--config FILE]``: the
decisions on stdout; files only where asked."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from allot_cli.files import file_name, prepare_output, write_lines


def _outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """Where the decisions and the final state go: only where asked (``-o``, ``--state``, or both in ``--out-dir``);
    nothing is written to the current directory unless a path there is given."""
    output = Path(args.output) if args.output else None
    state = Path(args.state) if args.state else None
    if args.out_dir:
        directory = Path(args.out_dir)
        prepare_output(directory, flag="--out-dir", directory=True)
        output = output or directory / "decisions.jsonl"
        state = state or directory / "state.json"
    for path, flag in ((output, "-o/--output"), (state, "--state")):
        if path is not None:
            prepare_output(path, flag=flag)
    return output, state


def cmd_run(args: argparse.Namespace) -> int:
    from allot_sim.scenario import final_state, load_config, run
    from allot_views.decisions import decisions

    output, state = _outputs(args)  # before the run: a path that cannot be written costs none
    sim, view, refused = run(args.scenario, config=load_config(args.config), atomic=args.atomic)
    lines = decisions(sim.store.events)
    if output:
        write_lines(output, (json.dumps(line, sort_keys=True) + "\n" for line in lines), flag="-o/--output")
    if state:
        state_json = json.dumps(final_state(sim, view), indent=2, sort_keys=True) + "\n"
        write_lines(state, [state_json], flag="--state")
    for written in (p for p in (output, state) if p):
        print(f"# wrote {written}", file=sys.stderr)
    for line in lines:
        where = line["node"] or "-"
        print(f"{line['outcome']:<14} {line['pod']:<32} {where:<20} {line['message']}")
    for ignored in view.ignored:
        print(f"{'Ignored':<14} {ignored}")
    counts: dict[str, int] = {}
    for pod in view.pods.values():
        counts[pod.phase] = counts.get(pod.phase, 0) + 1
    summary = ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items())) or "no pods"
    print(f"# {len(sim.store.events)} events, {len(lines)} decisions; final: {summary}", file=sys.stderr)
    if refused:
        print(f"# {refused} document(s) refused (not run)", file=sys.stderr)
        return 1
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run a scenario file through the scheduler's decision code")
    p.add_argument(
        "scenario",
        type=file_name,
        help="multi-document YAML (Node, Device, NodeResourceTopology, Pod, ElasticQuota, …)",
    )
    p.add_argument("-o", "--output", type=file_name, help="write decisions as JSON lines")
    p.add_argument("--state", type=file_name, help="write the final state as JSON")
    p.add_argument(
        "--out-dir",
        type=file_name,
        metavar="DIR",
        help="write decisions.jsonl and state.json in DIR (created if needed), unless -o/--state say otherwise",
    )
    p.add_argument("--config", type=file_name, help="YAML mapping of service name to decision config")
    p.add_argument(
        "--atomic", action="store_true", help="run nothing unless every document of the scenario is valid"
    )
    p.set_defaults(func=cmd_run)
