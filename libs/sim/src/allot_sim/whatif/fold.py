"""The deciders' projections at one log position, folded in memory from the log (or a snapshot): nothing is written.

Each service that decides on a pod's path gets a host built from the configuration it had applied by then
(``config.applied``; a log recorded before services recorded theirs uses the files on disk, as ``allot replay``
does), restored from its newest stored snapshot at or before the position under that configuration when one is
usable (checked as a restarting service checks it), then folded from there with the outputs it recorded
(:func:`allot_runtime.replay.rebuild`). A service's configuration can be replaced by another one
(``allot what-if --config``): its projection is folded the same way, with the recorded outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import UsageError

if TYPE_CHECKING:
    from allot_eventstore.protocol import EventStore
    from allot_runtime.processor import Host
    from allot_runtime.recorded_config import ConfigTimeline, RecordedConfig

    from .facts import NodeLabels


class Decider(Protocol):
    """The configurations one decider ran under (``allot replay``'s, with the files on disk as the fallback)."""

    @property
    def name(self) -> str: ...

    @property
    def timeline(self) -> ConfigTimeline: ...

    def host(self, config: RecordedConfig) -> Host: ...


class Plan(Protocol):
    """The deciders of the services ``names`` from their recorded configurations (``allot replay``'s plan, with
    the files on disk it read)."""

    def __call__(
        self, names: list[str], recorded: dict[str, list[RecordedConfig]], /
    ) -> Mapping[str, Decider]: ...


@dataclass
class Folded:
    """What the log held at ``position``: the deciders' hosts, the time of the event there (µs, the clock of the
    answer) and its hash (the chain the hypothetical records follow)."""

    hosts: list[Host]
    position: int
    head: int
    at: int
    prev_hash: bytes
    snapshots: dict[str, int] = field(
        default_factory=dict
    )  # decider -> the snapshot position it started from
    configs: dict[str, str] = field(default_factory=dict)  # decider -> the hash of the configuration it runs


async def position_of(store: EventStore, position: int | None) -> tuple[int, int, int, bytes]:
    """(position, head, time of the event there, its hash): ``position`` checked against the log (None: the head)."""
    head, head_hash = await store.head()
    if head == 0:
        raise UsageError("the event log is empty: nothing to answer against")
    wanted = head if position is None else position
    if wanted < 1 or wanted > head:
        raise UsageError(f"--at: position {wanted} is past the log's head ({head})")
    found = await store.read(after=wanted - 1, until=wanted, limit=1)
    if not found:
        raise UsageError(f"--at: no event at position {wanted}")
    return wanted, head, found[0].recorded_at, found[0].hash if wanted != head else head_hash


def deciders(recorded: dict[str, list[RecordedConfig]], plan: Plan) -> Mapping[str, Decider]:
    """One decider per service: the service itself (per-node instances decide on their node alone and are not on a
    new pod's path)."""
    from allot_stack.pipeline import SERVICES

    return plan(list(SERVICES), recorded)


async def fold(
    store: EventStore,
    *,
    position: int | None,
    plan: Plan,
    override: tuple[str, JsonObject] | None = None,
    facts: NodeLabels | None = None,
) -> Folded:
    """Every decider's host at ``position`` (default: the head); ``override``: (service, configuration) to run
    that service under instead of its recorded one; ``facts``: a change of node labels every decider folds (from
    position 0: a snapshot holds the nodes as they were recorded)."""
    from allot_runtime.recorded_config import recorded_configs
    from allot_runtime.snapshots import restore

    from .facts import relabelled

    where, head, at, prev = await position_of(store, position)
    plans = deciders(await recorded_configs(store, until=where), plan)
    folded = Folded(hosts=[], position=where, head=head, at=at, prev_hash=prev)
    for name, decider in plans.items():
        config = decider.timeline.applied_by(where)
        if override is not None and override[0] == name:
            host, start = _built(decider, override[1]), 0
        elif facts is not None:
            host, start = _built(decider, config.config), 0
        else:
            host, start, _ = await restore(
                functools.partial(decider.host, config), store, config_hash=config.hash, until=where
            )
            folded.configs[name] = config.hash
        folded.snapshots[name] = start
        folded.hosts.append(host)
    await rebuild_all(folded.hosts, relabelled(store, facts), folded.snapshots, until=where)
    return folded


def _built(decider: Decider, config: JsonObject) -> Host:
    """The decider's host under another configuration (or over changed facts), to fold from position 0 (its
    snapshots are of the recorded configuration's projection over the recorded facts)."""
    from allot_runtime.recorded_config import RecordedConfig

    return decider.host(RecordedConfig.from_file(decider.name, config, "--config"))


async def rebuild_all(hosts: list[Host], store: EventStore, starts: dict[str, int], *, until: int) -> None:
    """:func:`allot_runtime.replay.rebuild` for every host in one pass over the log: each record is applied, with
    the outputs its host recorded for it, to every host that consumes it and does not hold it yet (``starts``: the
    position each host was restored at)."""
    from allot_runtime.replay import Outputs

    outputs = {host.name: Outputs(store, host.name, after=starts[host.name]) for host in hosts}
    by_type: dict[str, list[Host]] = {}
    for host in hosts:
        for event_type in host.interests:
            by_type.setdefault(event_type, []).append(host)
    try:
        after = min(starts.values(), default=0)
        async for record in store.iterate(after=after, until=until, types=by_type.keys()):
            for host in by_type[record.type]:
                if record.producer != host.name and record.position > starts[host.name]:
                    host.apply_recorded(record, await outputs[host.name].of(record.position))
    finally:
        for stream in outputs.values():
            await stream.close()
    for host in hosts:
        host.position = until
