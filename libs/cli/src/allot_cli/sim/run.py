"""``allot sim run SCENARIO.yaml [-o decisions.jsonl] [--state state.json] [--out-dir DIR] [--config FILE]``: the
decisions on stdout; files only where asked."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from allot_intake.errors import InputError

if TYPE_CHECKING:  # imported when a scenario runs: ``allot sim run --help`` loads no engine
    from allot_cli.simulator import Simulation
    from allot_views.cluster import ClusterView

T = TypeVar("T")


def load_config(path: str | None) -> dict[str, dict[str, Any]]:
    """``--config FILE``: either a mapping of service name to its decision config (``device-allocator: {…}``,
    ``quota-manager: {…}``, ``gang-coordinator: {…}``), a placement config alone (the device-allocator's), Koordinator's
    KubeSchedulerConfiguration, or its DeschedulerConfiguration (reservation-manager's ``descheduler:``). Every
    service's part is loaded here, so a bad one is an :class:`InputError` naming the file and each refused field."""
    if not path:
        return {}
    from allot_contracts.errors import InvalidInput
    from allot_runtime.settings import read_config_file
    from allot_stack.pipeline import SERVICES, build

    try:
        data = read_config_file(Path(path), "--config")
    except InvalidInput as exc:
        raise InputError(f"cannot read config: {'; '.join(m for _, m in exc.issues)}") from exc
    from allot_descheduling import is_descheduler_config
    from allot_runtime.schedconfig import is_scheduler_config, translate

    # Koordinator's KubeSchedulerConfiguration, mapped onto the services' configs
    if is_scheduler_config(data):
        translated = _checked(path, "KubeSchedulerConfiguration", lambda: translate(data))
        for warning in translated.warnings:
            print(f"warning: {path}: {warning.path}: {warning.message}", file=sys.stderr)
        configs = {name: config for name, config in translated.services.items() if config}
    elif is_descheduler_config(data):  # Koordinator's descheduler config: reservation-manager's
        configs = {"reservation-manager": {"descheduler": data}}
    elif all(str(k) in SERVICES for k in data):
        bad = [str(k) for k, v in data.items() if v is not None and not isinstance(v, dict)]
        if bad:
            raise InputError(f"{path}: {bad[0]}: must be a mapping (that service's decision config)")
        configs = {str(k): dict(v or {}) for k, v in data.items()}
    elif any(str(k) in SERVICES for k in data):
        raise InputError(f"{path}: mixes service names and placement settings; use one form")
    elif "descheduler" in data:
        raise InputError(
            f"{path}: descheduler: belongs to reservation-manager's config: write reservation-manager: "
            "{descheduler: …}, or give the DeschedulerConfiguration alone"
        )
    else:
        configs = {"device-allocator": dict(data)}
    for name, config in configs.items():
        what = "DeschedulerConfiguration" if is_descheduler_config(data) else f"{name} config"
        _checked(path, what, functools.partial(build, name, config))
    return configs


def _checked(path: str, what: str, load: Callable[[], T]) -> T:
    """``load()``, or an :class:`InputError` naming the file and every refused field (one line each)."""
    from allot_contracts.errors import InvalidConfig, InvalidInput

    try:
        return load()
    except InvalidConfig as exc:
        issues = [str(i) for i in exc.issues] or [str(exc)]
    except InvalidInput as exc:
        issues = [f"{p}: {m}" if p else m for p, m in exc.issues] or [str(exc)]
    if len(issues) == 1:
        raise InputError(f"{path}: invalid {what}: {issues[0]}")
    raise InputError(f"{path}: invalid {what}:\n  " + "\n  ".join(issues))


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
    from allot_cli.simulator import Simulation
    from allot_intake.documents import load_documents
    from allot_intake.manifests import Door, to_input
    from allot_views.cluster import ClusterView

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


def _outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """Where the decisions and the final state go: only where asked (``-o``, ``--state``, or both in ``--out-dir``);
    nothing is written to the current directory unless a path there is given."""
    output = Path(args.output) if args.output else None
    state = Path(args.state) if args.state else None
    if args.out_dir:
        directory = Path(args.out_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--out-dir {directory}: cannot create it: {exc.strerror}") from exc
        output = output or directory / "decisions.jsonl"
        state = state or directory / "state.json"
    return output, state


def cmd_run(args: argparse.Namespace) -> int:
    from allot_views.decisions import decisions

    sim, view, refused = run(args.scenario, config=load_config(args.config), atomic=args.atomic)
    lines = decisions(sim.store.events)
    output, state = _outputs(args)
    if output:
        with open(output, "w") as out:
            for line in lines:
                out.write(json.dumps(line, sort_keys=True) + "\n")
    if state:
        state.write_text(json.dumps(final_state(sim, view), indent=2, sort_keys=True) + "\n")
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
        "scenario", help="multi-document YAML (Node, Device, NodeResourceTopology, Pod, ElasticQuota, …)"
    )
    p.add_argument("-o", "--output", help="write decisions as JSON lines")
    p.add_argument("--state", help="write the final state as JSON")
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write decisions.jsonl and state.json in DIR (created if needed), unless -o/--state say otherwise",
    )
    p.add_argument("--config", help="YAML mapping of service name to decision config")
    p.add_argument(
        "--atomic", action="store_true", help="run nothing unless every document of the scenario is valid"
    )
    p.set_defaults(func=cmd_run)
