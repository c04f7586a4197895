"""``allot sim run SCENARIO.yaml [-o decisions.jsonl] [--state state.json] [--config FILE]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from allot_cli.decisions import decisions
from allot_cli.documents import load_documents
from allot_cli.errors import InputError
from allot_cli.manifests import Door, to_input
from allot_cli.pipeline import SERVICES
from allot_cli.simulator import Simulation
from allot_cli.views import ClusterView


def load_config(path: str | None) -> dict[str, dict[str, Any]]:
    """``--config FILE``: either a mapping of service name to its decision config (``device-allocator: {…}``,
    ``quota-manager: {…}``, ``gang-coordinator: {…}``), a placement config alone (the device-allocator's), Koordinator's
    KubeSchedulerConfiguration, or its DeschedulerConfiguration (reservation-manager's ``descheduler:``)."""
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping")
    from allot_runtime.schedconfig import SchedulerConfigError, is_scheduler_config, translate

    if is_scheduler_config(
        data
    ):  # Koordinator's KubeSchedulerConfiguration, mapped onto the services' configs
        try:
            translated = translate(data)
        except SchedulerConfigError as exc:
            lines = "\n  ".join(f"{i.path}: {i.message}" for i in exc.issues)
            raise InputError(f"{path}: invalid KubeSchedulerConfiguration:\n  {lines}") from exc
        for warning in translated.warnings:
            print(f"warning: {path}: {warning.path}: {warning.message}", file=sys.stderr)
        return {name: config for name, config in translated.services.items() if config}
    if (
        data.get("kind") == "DeschedulerConfiguration"
    ):  # Koordinator's descheduler config: reservation-manager's
        from reservation_manager.processor import ReservationManager

        try:
            ReservationManager({"descheduler": data})
        except ValueError as exc:
            issues = getattr(exc, "issues", None) or [exc]
            lines = "\n  ".join(str(i) for i in issues)
            raise InputError(f"{path}: invalid DeschedulerConfiguration:\n  {lines}") from exc
        return {"reservation-manager": {"descheduler": data}}
    if data and all(str(k) in SERVICES for k in data):
        return {str(k): dict(v or {}) for k, v in data.items()}
    if any(str(k) in SERVICES for k in data):
        raise InputError(f"{path}: mixes service names and placement settings; use one form")
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


def run(
    scenario: str, *, config: dict[str, dict[str, Any]], atomic: bool = False
) -> tuple[Simulation, ClusterView, int]:
    """Run the scenario's valid documents (each refused one is reported on stderr); the number refused. With
    ``atomic``, a scenario with any refused document is not run at all."""
    docs = load_documents(scenario)
    door = Door(quotas=set())
    verdicts = door.check_all(docs)
    refused = 0
    for verdict in verdicts:
        for line in verdict.lines("warning", verdict.warnings):
            print(line, file=sys.stderr)
        if verdict.issues:
            refused += 1
            for line in verdict.lines("error", verdict.issues):
                print(line, file=sys.stderr)
    if refused and atomic:
        raise InputError(f"invalid scenario: {refused} document(s) refused; nothing was run")
    sim = Simulation(config)
    for verdict in verdicts:
        if not verdict.issues:
            sim.apply(to_input(verdict.document))
    view = ClusterView()
    for record in sim.store.events:
        view.apply(record)
    return sim, view, refused


def cmd_run(args: argparse.Namespace) -> int:
    sim, view, refused = run(args.scenario, config=load_config(args.config), atomic=args.atomic)
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
    if refused:
        print(f"# {refused} document(s) refused (not run)", file=sys.stderr)
        return 1
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run a scenario file through the scheduler's decision code")
    p.add_argument(
        "scenario", help="multi-document YAML (Node, Device, NodeResourceTopology, Pod, ElasticQuota, …)"
    )
    p.add_argument("-o", "--output", help="write decisions as JSON lines")
    p.add_argument("--state", help="write the final state as JSON")
    p.add_argument("--config", help="YAML mapping of service name to decision config")
    p.add_argument(
        "--atomic", action="store_true", help="run nothing unless every document of the scenario is valid"
    )
    p.set_defaults(func=cmd_run)
