"""The configuration each decider runs under, recorded in the log (``config.applied``) and read back by replay.

A decision is a function of the log *and* of the decider's configuration, so the configuration is recorded too. When
a decider starts (or rebuilds) with an effective configuration different from the last one it recorded, its shell
appends ``config.applied`` — the configuration as canonical JSON, its SHA-256, and ``after``: the decider's checkpoint
at that moment — and only then rebuilds its projection under it. Every trigger after ``after`` is decided under that
configuration until the next ``config.applied`` of the same decider. The effective configuration is the decision
config after the defaults a service adds (the binder's ``mode``), before the per-instance ``scope`` (replay adds it
from the instance name, as the service does); the service itself runs the canonical form it records, so what
replay reads back is byte for byte what was decided under.

Replay follows the same rule (:class:`ConfigTimeline`): the processor that re-derives a decider's first triggers is
built under the first configuration, and at each later ``config.applied`` a fresh one is built under the new
configuration and rebuilt from the log up to ``after`` — exactly what the restarted service did. A log recorded
before deciders recorded their configuration (or the part of it before a decider's first ``config.applied``) is
verified with the configuration file on disk, and the report says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import msgspec

from allot_contracts.envelope import NewEvent, canonical, derived_event_id, stream_id
from allot_contracts.events import ConfigApplied
from allot_contracts.jsonvalue import JsonObject
from allot_eventstore.protocol import EventStore

CONFIG_APPLIED = "config.applied"


def canonical_config(config: Mapping[str, object]) -> str:
    """The canonical JSON text of a configuration (sorted keys, no whitespace): what is recorded and hashed."""
    return canonical(dict(config)).decode()


def config_hash(config: Mapping[str, object]) -> str:
    return hashlib.sha256(canonical_config(config).encode()).hexdigest()


def normalised(config: Mapping[str, object]) -> JsonObject:
    """The configuration as it reads back from the log (YAML dates become strings, integer keys strings): the form
    a service decides under, so that replay builds exactly the same processor."""
    value = msgspec.json.decode(canonical_config(config))
    assert isinstance(value, dict)
    return value


def config_producer(decider: str) -> str:
    """``config.applied`` events of a decider are recorded by ``<decider>.config`` (none of its decisions)."""
    return f"{decider}.config"


class AppliedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The effective configuration a decider runs under, and where it was read from ("" = the defaults)."""

    config: JsonObject
    source: str = ""


class RecordedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One configuration a decider ran under. ``position`` is that of its ``config.applied`` (0: nothing was
    recorded, the configuration came from the file on disk, ``source``); it governs the triggers after ``after``."""

    decider: str
    config: JsonObject
    hash: str
    after: int = 0
    position: int = 0
    source: str = ""

    @property
    def recorded(self) -> bool:
        return self.position > 0

    @classmethod
    def from_file(cls, decider: str, config: Mapping[str, object], source: str = "") -> RecordedConfig:
        return cls(decider=decider, config=normalised(config), hash=config_hash(config), source=source)


async def record_config(store: EventStore, decider: str, applied: AppliedConfig, *, after: int) -> int | None:
    """Append ``config.applied`` for ``decider`` unless the last one it recorded has the same hash. Returns the
    position appended at, or None when nothing was recorded. The event id and the expected stream version make two
    instances that race with the same configuration record it once (the loser's append is a no-op or a conflict)."""
    stream = stream_id("config", decider)
    previous = await store.read_stream(stream)
    text = canonical_config(applied.config)
    digest = hashlib.sha256(text.encode()).hexdigest()
    if previous:
        last = previous[-1].decode()
        if isinstance(last, ConfigApplied) and last.hash == digest:
            return None
    event = ConfigApplied(decider=decider, config=text, hash=digest, after=after, source=applied.source)
    new = NewEvent(
        stream_id=stream,
        event=event,
        event_id=derived_event_id(config_producer(decider), f"{len(previous) + 1}/{digest}", 0),
        expected_version=len(previous),
    )
    result = await store.append([new], producer=config_producer(decider))
    return result.positions[0] if result.positions else None


async def recorded_configs(store: EventStore, *, until: int | None = None) -> dict[str, list[RecordedConfig]]:
    """Every decider's recorded configurations, in log order."""
    out: dict[str, list[RecordedConfig]] = {}
    async for record in store.iterate(types=[CONFIG_APPLIED], until=until):
        event = record.decode()
        if not isinstance(event, ConfigApplied):
            continue
        config = msgspec.json.decode(event.config)
        out.setdefault(event.decider, []).append(
            RecordedConfig(
                decider=event.decider,
                config=config if isinstance(config, dict) else {},
                hash=event.hash,
                after=event.after,
                position=record.position,
                source=event.source,
            )
        )
    return out


class ConfigTimeline:
    """Which configuration governed each trigger of one decider: its recorded configurations, preceded by
    ``fallback`` (the file on disk) for the triggers before the first one recorded, if any."""

    def __init__(self, recorded: list[RecordedConfig], fallback: RecordedConfig) -> None:
        self.recorded = recorded
        self.fallback = fallback

    def segments(self) -> list[RecordedConfig]:
        """The configurations that governed, in order, each from the trigger after its ``after``. Of several
        recorded at the same checkpoint (restarts that decided nothing in between) only the last governed."""
        kept: list[RecordedConfig] = []
        for config in self.recorded:
            if kept and kept[-1].after >= config.after:
                kept.pop()
            kept.append(config)
        if not kept or kept[0].after > 0:
            kept.insert(0, self.fallback)
        return kept

    def latest(self) -> RecordedConfig:
        """The configuration the decider runs under now (its last recorded one)."""
        return self.recorded[-1] if self.recorded else self.fallback

    def applied_by(self, position: int) -> RecordedConfig:
        """The configuration the decider had applied by the time the log reached ``position``."""
        applied = [c for c in self.recorded if c.position <= position]
        return applied[-1] if applied else self.fallback
