"""``allot sim run SCENARIO.yaml [-o decisions.jsonl] [--state state.json] [--config FILE]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from allot_cli.decisions import decisions
from allot_cli.errors import UsageError
from allot_cli.manifests import admit_all, load_documents, to_input
from allot_cli.pipeline import SERVICES
from allot_cli.simulator import Simulation
from allot_cli.views import ClusterView


def load_config(path: str | None) -> dict[str, dict[str, Any]]:
    """``--config FILE``: either a mapping of service name to its decision config (``device-allocator: {…}``,
    ``quota-manager: {…}``, ``gang-coordinator: {…}``), or a placement config alone (the device-allocator's)."""
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping")
    if data and all(str(k) in SERVICES for k in data):
        return {str(k): dict(v or {}) for k, v in data.items()}
    if any(str(k) in SERVICES for k in data):
        raise UsageError(f"{path}: mixes service names and placement settings; use one form")
    return {"device-allocator": dict(data)}


def final_state(sim: Simulation, view: ClusterView) -> dict[str, Any]:
    allocator: Any = sim.host("device-allocator").processor
    quota: Any = sim.host("quota-manager").processor
    nodes = allocator.engine.snapshot()
    quotas = quota.engine.snapshot()["quotas"]
    return {
        "pods": {k: {"phase": p.phase, "node": p.node} for k, p in sorted(view.pods.items())},
        "nodes": nodes,
        "quotas": quotas,
        "ignored": view.ignored,
    }


def run(scenario: str, *, config: dict[str, dict[str, Any]]) -> tuple[Simulation, ClusterView]:
    docs = load_documents(scenario)
    problems = list(admit_all(docs))
    if problems:
        raise UsageError("invalid scenario:\n  " + "\n  ".join(problems))
    sim = Simulation(config)
    for doc in docs:
        sim.apply(to_input(doc))
    view = ClusterView()
    for record in sim.store.events:
        view.apply(record)
    return sim, view


def cmd_run(args: argparse.Namespace) -> int:
    sim, view = run(args.scenario, config=load_config(args.config))
    lines = decisions(sim.store.events)
    if args.output:
        with open(args.output, "w") as out:
            for line in lines:
                out.write(json.dumps(line, sort_keys=True) + "\n")
    if args.state:
        Path(args.state).write_text(json.dumps(final_state(sim, view), indent=2, sort_keys=True) + "\n")
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
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run a scenario file through the scheduler's decision code")
    p.add_argument("scenario", help="multi-document YAML (Node, Device, NodeResourceTopology, Pod, ElasticQuota, …)")
    p.add_argument("-o", "--output", help="write decisions as JSON lines")
    p.add_argument("--state", help="write the final state as JSON")
    p.add_argument("--config", help="YAML mapping of service name to decision config")
    p.set_defaults(func=cmd_run)
