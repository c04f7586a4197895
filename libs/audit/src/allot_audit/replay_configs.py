"""The configurations ``allot replay`` re-derives each decider's decisions under, and how it reports them.

Every decider records the configuration it decides under (``config.applied``, :mod:`allot_runtime.recorded_config`);
replay uses those, never the files on disk, so editing a file after the fact changes nothing. A log (or the start of
one) recorded before deciders recorded their configuration is re-derived with the file on disk instead —
``<config dir>/<service>.yaml``, read as the service reads ``ALLOT_CONFIG_FILE`` — and the report says so.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TypedDict

import msgspec

from allot_contracts.errors import InvalidInput
from allot_intake.errors import InputError
from allot_runtime.processor import Host
from allot_runtime.recorded_config import ConfigTimeline, RecordedConfig
from allot_runtime.replay import Governed, Switch
from allot_runtime.settings import read_config
from allot_stack.pipeline import PROCESSORS, build_instance


class FileConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A service's configuration from the file on disk ("" path: no file, the defaults)."""

    config: dict[str, object]
    path: str = ""


def load_configs(config_dir: Path | None) -> dict[str, FileConfig]:
    """The files on disk: ``<config_dir>/<service>.yaml`` for each service that has one."""
    configs: dict[str, FileConfig] = {}
    if config_dir is None or not config_dir.is_dir():
        return configs
    for name, _ in PROCESSORS:
        path = config_dir / f"{name}.yaml"
        if path.exists():
            try:
                configs[name] = FileConfig(config=dict[str, object](read_config(path, name)), path=str(path))
            except InvalidInput as exc:  # read as the service reads it: refused with each field's path
                raise InputError(f"invalid {name} config: {exc}") from exc
    return configs


class ConfigUse(TypedDict):
    """A configuration a decider ran under and the triggers it governed, in ``allot replay --verify --json``."""

    hash: str
    recorded: bool
    position: int
    file: str
    after: int
    triggers: int
    first: int
    last: int


class DeciderConfigs:
    """The configurations one decider (``service`` or ``service@instance``) ran under."""

    def __init__(self, name: str, recorded: list[RecordedConfig], file: FileConfig) -> None:
        self.name = name
        self.service = name.split("@", 1)[0]
        fallback = RecordedConfig.from_file(name, file.config, file.path)
        self.timeline = ConfigTimeline(recorded, fallback)

    def host(self, config: RecordedConfig) -> Host:
        return Host(build_instance(self.service, self.name, config.config), name=self.name)

    def first(self) -> Host:
        """The host that re-derives the decider's first triggers."""
        return self.host(self.timeline.segments()[0])

    def switches(self) -> list[Switch]:
        """Where the decider went on under another configuration."""
        return [
            Switch(config.after, functools.partial(self.host, config))
            for config in self.timeline.segments()[1:]
        ]

    def report(self, governed: Iterable[Governed]) -> list[ConfigUse]:
        """Per configuration: its hash, whether it was recorded (and where) or read from a file, and the triggers
        it governed (``after``: they follow that position; ``first``..``last``: the ones re-derived)."""
        return [
            {
                "hash": config.hash,
                "recorded": config.recorded,
                "position": config.position,
                "file": "" if config.recorded else config.source,
                "after": part.after,
                "triggers": part.checked,
                "first": part.first,
                "last": part.last,
            }
            for config, part in zip(self.timeline.segments(), governed, strict=True)
        ]


def describe(name: str, entry: ConfigUse) -> str:
    """One line of ``allot replay --verify`` about a configuration a decider ran under."""
    span = f"{entry['triggers']} trigger(s)" + (
        f" at positions {entry['first']}–{entry['last']}" if entry["triggers"] else ""
    )
    if entry["recorded"]:
        return (
            f"config       {name:<20} recorded config {entry['hash'][:12]} (config.applied at position "
            f"{entry['position']}, for triggers after {entry['after']}): {span}"
        )
    where = f"the file on disk ({entry['file']})" if entry["file"] else "the defaults (no file on disk)"
    return f"config       {name:<20} no recorded config: verified with {where}: {span}"


def plan(
    names: Iterable[str], recorded: dict[str, list[RecordedConfig]], files: dict[str, FileConfig]
) -> dict[str, DeciderConfigs]:
    return {
        name: DeciderConfigs(
            name, recorded.get(name, []), files.get(name.split("@", 1)[0], FileConfig(config={}))
        )
        for name in names
    }
