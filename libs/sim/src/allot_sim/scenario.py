"""A scenario file through the seven services' decision code (``allot sim run``): its documents checked at the door,
the valid ones run in a :class:`~allot_sim.simulator.Simulation`, the final state as ``--state`` writes it, and the
``--config`` file read into each service's decision config."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_intake.errors import InputError

if TYPE_CHECKING:  # imported when a scenario runs: ``allot sim run --help`` loads no engine
    from allot_sim.simulator import Simulation
    from allot_views.cluster import ClusterView

T = TypeVar("T")


def load_config(path: str | None) -> dict[str, JsonObject]:
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
        configs = {str(k): dict(v) if isinstance(v, dict) else {} for k, v in data.items()}
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


class PodState(TypedDict):
    phase: str
    node: str | None


class FinalState(TypedDict):
    """``allot sim run --state``: each pod's phase and node, the device-allocator's nodes and the quota-manager's
    quotas as their engines snapshot them, and the documents the view ignored."""

    pods: dict[str, PodState]
    nodes: JsonObject
    quotas: JsonValue
    ignored: list[str]


def final_state(sim: Simulation, view: ClusterView) -> FinalState:
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
    scenario: str, *, config: dict[str, JsonObject], atomic: bool = False
) -> tuple[Simulation, ClusterView, int]:
    """Run the scenario's valid documents (each refused one is reported on stderr); the number refused. With
    ``atomic``, a scenario with any refused document is not run at all."""
    from allot_intake.documents import load_documents
    from allot_intake.manifests import Door, tell, to_input
    from allot_sim.simulator import Simulation
    from allot_views.cluster import ClusterView

    docs = load_documents(scenario)
    door = Door(quotas=set())
    verdicts = door.check_all(docs)
    _, refused = tell(verdicts, lambda line: print(line, file=sys.stderr))
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
