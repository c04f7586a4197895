"""The two questions of ``allot what-if``, asked of the log in the database (read only: nothing is written)."""

from __future__ import annotations

import functools
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NotRequired, TypedDict

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import InputError, UsageError

if TYPE_CHECKING:
    from allot_eventstore.protocol import EventStore
    from allot_runtime.processor import Host
    from allot_views.nearest import Cluster

    from .answer import Answer, Nearest
    from .facts import NodeLabels
    from .fold import Plan
    from .pump import Trial
    from .window import Difference


class ConfigRef(TypedDict):
    """The service whose settings were changed, and the file they came from."""

    service: str
    file: str


class PodsReport(TypedDict):
    """``allot what-if -f``: where it was asked and each pod's answer (``-o json`` prints it)."""

    position: int
    head: int
    time: str
    snapshots: dict[str, int]
    pods: list[Answer]
    warnings: list[str]
    config: NotRequired[ConfigRef]
    node_labels: NotRequired[str]


WindowReport = TypedDict(
    "WindowReport",
    {
        "service": str,
        "config": str,
        "node_labels": str,
        "from": int,
        "to": int,
        "head": int,
        "triggers": int,
        "count": int,
        "differences": "list[Difference]",
        "configs": int,
    },
)
"""``allot what-if --config --window``: the window, the triggers decided again and every differing decision."""


def changed_config(path: str) -> tuple[str, JsonObject]:
    """``--config FILE``: one service's settings (``device-allocator: {…}``, or a placement config alone), each
    field checked as the service checks it."""
    from allot_sim.scenario import load_config

    try:
        configs = load_config(path)
    except InputError as exc:
        raise UsageError(str(exc)) from exc
    if len(configs) != 1:
        names = ", ".join(sorted(configs)) or "none"
        raise UsageError(f"--config {path}: give the settings of one service (found: {names})")
    return next(iter(configs.items()))


def _time(at: int) -> str:
    return datetime.fromtimestamp(at / 1_000_000, UTC).isoformat(timespec="seconds")


async def _cluster(store: EventStore, until: int) -> Cluster:
    """The cluster as the log holds it at ``until`` (for the nearest miss, once the trial is applied to it)."""
    from allot_stack.explain import cluster

    return await cluster(store, until=until)


async def _existing(store: EventStore, keys: list[str], until: int) -> list[str]:
    """The pods of ``keys`` alive in the log at ``until`` (their stream's last birth is not followed by a deletion)."""
    from allot_contracts.envelope import stream_id
    from allot_contracts.events.inputs import POD_LIFE_TYPES

    alive: list[str] = []
    for key in keys:
        kinds = [r.type for r in await store.read_stream(stream_id("pod", key)) if r.position <= until]
        lives = [k for k in kinds if k in POD_LIFE_TYPES]
        if lives and lives[-1] != "pod.deleted":
            alive.append(key)
    return alive


def _nearest(folded: Cluster, trial: Trial) -> Nearest:
    """The nearest-miss function over the cluster as the trial leaves it (the log folded, then the trial)."""
    from allot_views.nearest import nearest_lines

    for record in trial.records:
        folded.view.apply(record)

    def nearest(reasons: dict[str, list[str]], spec: JsonObject) -> list[str]:
        return nearest_lines(reasons, spec, folded)

    return nearest


async def pods(
    url: str,
    paths: list[str],
    *,
    at: int | None,
    plan: Plan,
    config: tuple[str, JsonObject] | None,
    config_path: str = "",
    facts: NodeLabels | None = None,
) -> PodsReport:
    """``allot what-if -f``: the answer for every pod of ``paths`` at position ``at`` (default: the head)."""
    from allot_stack.apply import door_for
    from allot_stack.connect import bounded_store

    from . import inputs
    from .answer import answers
    from .facts import relabelled
    from .fold import fold, position_of
    from .pump import Trial

    docs = inputs.read(paths)
    store = bounded_store(url)
    try:
        where = (await position_of(store, at))[0]
        items, keys, warnings = inputs.admitted(docs, await door_for(url, until=where))
        for line in warnings:
            print(line, file=sys.stderr)
        override = None
        if config is not None:
            override = await _override(store, where, plan, config)
        folded = await fold(store, position=where, plan=plan, override=override, facts=facts)
        for key in await _existing(store, keys, folded.position):
            warnings.append(
                f"warning: pod {key} is already in the log: the what-if submits it again, as a new life of that pod"
            )
            print(warnings[-1], file=sys.stderr)
        trial = Trial(folded.hosts, position=folded.position, at=folded.at, prev_hash=folded.prev_hash)
        for index, item in enumerate(items):
            trial.apply(item, index)
        found = answers(trial.records, keys)
        if not all(
            answer["fits"] for answer in found
        ):  # the nearest miss reads the cluster: folded only then
            cluster = await _cluster(relabelled(store, facts), folded.position)
            found = answers(trial.records, keys, _nearest(cluster, trial))
        report: PodsReport = {
            "position": folded.position,
            "head": folded.head,
            "time": _time(folded.at),
            "snapshots": {name: p for name, p in folded.snapshots.items() if p},
            "pods": found,
            "warnings": warnings,
        }
        if config is not None:
            report["config"] = {"service": config[0], "file": config_path}
        if facts is not None:
            report["node_labels"] = facts.describe()
        return report
    finally:
        await store.close()


async def _override(
    store: EventStore, position: int, plan: Plan, config: tuple[str, JsonObject]
) -> tuple[str, JsonObject]:
    """The service's configuration in force at ``position`` with the changed settings merged over it."""
    from allot_runtime.recorded_config import recorded_configs

    from .fold import deciders
    from .window import merged

    service, change = config
    decider = deciders(await recorded_configs(store, until=position), plan)[service]
    return service, merged(dict(decider.timeline.applied_by(position).config), change)


async def window(
    url: str,
    span: str,
    *,
    plan: Plan,
    config: tuple[str, JsonObject],
    config_path: str,
    facts: NodeLabels | None = None,
) -> WindowReport:
    """``allot what-if --config --window``: every decision of the window that would differ (``config``: the
    service and its changed settings; ``facts``: a change of node labels it decides over)."""
    from allot_runtime.recorded_config import RecordedConfig, recorded_configs
    from allot_runtime.replay import Switch
    from allot_stack.connect import bounded_store

    from .facts import relabelled
    from .fold import deciders
    from .window import compare, merged
    from .window import window as parse_window

    store = bounded_store(url)
    try:
        head = (await store.head())[0]
        if head == 0:
            raise UsageError("the event log is empty: nothing to replay")
        first, last = parse_window(span, head)
        service, change = config
        decider = deciders(await recorded_configs(store, until=last), plan)[service]

        def build(recorded: RecordedConfig) -> Host:
            return decider.host(
                RecordedConfig.from_file(service, merged(recorded.config, change), config_path)
            )

        segments = decider.timeline.segments()
        start = [c for c in segments if c.after < first][-1:] or segments[:1]
        later = [Switch(c.after, functools.partial(build, c)) for c in segments if first <= c.after < last]
        host = build(start[0])
        changed = relabelled(store, facts)
        triggers, found = await compare(host, changed, first=first, last=last, switches=later)
        return {
            "service": service,
            "config": config_path,
            "node_labels": facts.describe() if facts is not None else "",
            "from": first,
            "to": last,
            "head": head,
            "triggers": triggers,
            "count": len(found),
            "differences": found,
            "configs": len(later) + 1,
        }
    finally:
        await store.close()
