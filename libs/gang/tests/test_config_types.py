"""The gang engine's configuration as types with defaults and one validation function."""

from __future__ import annotations

import msgspec
import pytest

from allot_gang import ConfigError, GangConfig, QueueConfig
from allot_gang.config import validate

SETTINGS = {
    "version": "2",
    "defaultTimeoutSeconds": 60,
    "defaultMatchPolicy": "waiting-and-running",
    "defaultMode": "NonStrict",
    "retryInitialBackoffSeconds": 5,
    "retryMaxBackoffSeconds": 50,
    "queue": {"maxBypasses": 2, "maxBlockedSeconds": 0, "maxReserveSeconds": 30, "maxReserveRounds": 3},
}


def test_the_types_are_the_configuration_keys() -> None:
    """The settings decode straight into the types (camelCase keys), as ``from_dict`` reads them."""
    typed = msgspec.convert(SETTINGS, GangConfig)
    assert typed == GangConfig.from_dict(SETTINGS)
    assert typed.queue == QueueConfig(
        max_bypasses=2, max_blocked_seconds=0, max_reserve_seconds=30, max_reserve_rounds=3
    )
    assert msgspec.to_builtins(typed) == SETTINGS


def test_a_choice_is_a_type() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"defaultMode": "strict"}, GangConfig)


@pytest.mark.parametrize(
    ("config", "paths"),
    [
        (GangConfig(default_timeout_seconds=0), ["defaultTimeoutSeconds"]),
        (GangConfig(version="", queue=QueueConfig(max_bypasses=0)), ["version", "queue.maxBypasses"]),
        (
            GangConfig(retry_initial_backoff_seconds=30, retry_max_backoff_seconds=10),
            ["retryMaxBackoffSeconds"],
        ),
        (GangConfig(queue=QueueConfig(max_reserve_seconds=0, max_reserve_rounds=0)), ["queue"]),
        (GangConfig(), []),
    ],
)
def test_validate_names_every_problem(config: GangConfig, paths: list[str]) -> None:
    assert [issue.path for issue in validate(config)] == paths


def test_relations_are_checked_once_the_fields_are_valid() -> None:
    config = GangConfig(
        default_timeout_seconds=0, retry_initial_backoff_seconds=30, retry_max_backoff_seconds=10
    )
    assert [issue.path for issue in validate(config)] == ["defaultTimeoutSeconds"]
    assert validate(config, relations=False) == validate(config)


def test_keys_of_any_type_are_refused_by_name() -> None:
    """A YAML mapping may have integer keys: each is refused by name, never a TypeError."""
    with pytest.raises(ConfigError) as refused:
        GangConfig.from_dict({1: 2, "timeoutCap": 3})  # type: ignore[dict-item]
    assert [issue.path for issue in refused.value.issues] == ["1", "timeoutCap"]
