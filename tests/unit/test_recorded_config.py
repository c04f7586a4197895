"""Which recorded configuration governs which triggers of a decider, and what a service records as its effective
configuration (docs/security.md, "Recorded configuration")."""

from __future__ import annotations

import json
from pathlib import Path

from allot_runtime import settings as settings_mod
from allot_runtime.entry import effective_config
from allot_runtime.recorded_config import (
    ConfigTimeline,
    RecordedConfig,
    canonical_config,
    config_hash,
    normalised,
)


def _recorded(hash_: str, *, after: int, position: int) -> RecordedConfig:
    return RecordedConfig(decider="d", config={"v": hash_}, hash=hash_, after=after, position=position)


FILE = RecordedConfig.from_file("d", {"v": "file"}, "/etc/allot/d.yaml")


def test_without_recorded_config_the_file_governs_everything():
    timeline = ConfigTimeline([], FILE)
    assert timeline.segments() == [FILE] and timeline.latest() == FILE and timeline.applied_by(100) == FILE
    assert not FILE.recorded and FILE.hash == config_hash({"v": "file"})


def test_a_config_recorded_from_the_start_governs_from_the_first_trigger():
    first, second = _recorded("a", after=0, position=3), _recorded("b", after=40, position=52)
    timeline = ConfigTimeline([first, second], FILE)
    assert timeline.segments() == [first, second]
    assert timeline.latest() == second
    assert [timeline.applied_by(p).config["v"] for p in (2, 3, 51, 52, 99)] == ["file", "a", "a", "b", "b"]


def test_triggers_before_the_first_recorded_config_fall_back_to_the_file():
    late = _recorded("a", after=120, position=130)
    assert ConfigTimeline([late], FILE).segments() == [FILE, late]


def test_of_configs_recorded_at_the_same_checkpoint_only_the_last_governed():
    """Two restarts that decided nothing in between: the first configuration governed no trigger."""
    a, b, c = (
        _recorded("a", after=0, position=3),
        _recorded("b", after=40, position=50),
        _recorded("c", after=40, position=61),
    )
    assert ConfigTimeline([a, b, c], FILE).segments() == [a, c]
    assert ConfigTimeline([_recorded("x", after=0, position=2), a], FILE).segments() == [a]


def test_the_canonical_form_is_what_is_recorded_hashed_and_decided_under():
    config = {"b": 1, "a": {"z": [1, 2], "y": "s"}, 3: "int key"}
    assert canonical_config(config) == '{"3":"int key","a":{"y":"s","z":[1,2]},"b":1}'
    assert normalised(config) == json.loads(canonical_config(config))
    assert config_hash(config) == config_hash(normalised(config)), "reading it back changes nothing"


def test_the_effective_config_adds_what_the_service_adds_in_canonical_form(tmp_path: Path):
    path = tmp_path / "binder.yaml"
    path.write_text("since: 2024-01-02\nretries: 3\n")
    settings = settings_mod.load(
        "binder", {"ALLOT_DATABASE_URL": "postgresql://x/y", "ALLOT_CONFIG_FILE": str(path)}
    )
    applied = effective_config(settings, lambda config: {**config, "mode": "kubernetes"})
    assert applied.config == {"since": "2024-01-02", "retries": 3, "mode": "kubernetes"}, (
        "a YAML date reads back"
    )
    assert applied.source == str(path)
    defaults = effective_config(settings_mod.load("binder", {"ALLOT_DATABASE_URL": "postgresql://x/y"}))
    assert defaults.config == {} and defaults.source == ""


def test_views_rebuild_a_projection_under_the_configuration_its_service_recorded():
    import asyncio

    from allot_eventstore.memory import InMemoryEventStore
    from allot_runtime.recorded_config import AppliedConfig, record_config
    from allot_stack.logtools import projection

    async def timeouts() -> tuple[int, int]:
        store = InMemoryEventStore()
        before = (await projection(store, "gang-coordinator")).engine.config.default_timeout_seconds
        await record_config(
            store, "gang-coordinator", AppliedConfig(config={"defaultTimeoutSeconds": 42}), after=0
        )
        return before, (await projection(store, "gang-coordinator")).engine.config.default_timeout_seconds

    assert asyncio.run(timeouts()) == (600, 42)


def test_a_per_node_decider_is_found_in_the_log_but_not_its_shells():
    from allot_stack.pipeline import instances

    producers = [
        "api",
        "node-reporter@ip-10-0-0-1.ec2.internal",
        "node-reporter@n2",
        "node-reporter@n2.config",
    ]
    producers += [
        "node-reporter@n2.timer",
        "node-reporter@n2.kube",
        "node-reporter@n2.agent",
        "node-reporter@n2.lease",
    ]
    assert instances("node-reporter", producers) == [
        "node-reporter@ip-10-0-0-1.ec2.internal",
        "node-reporter@n2",
    ]
    assert instances("binder", ["binder", "binder.config", "binder.kube"]) == ["binder"]
