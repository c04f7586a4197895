"""Go durations for waiting-time, and the engine configuration."""

from __future__ import annotations

import pytest

from allot_gang import ConfigError, GangConfig, parse_go_duration

S = 1_000_000


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("600s", 600 * S),
        ("10m", 600 * S),
        ("1h30m", 5400 * S),
        ("1.5h", 5400 * S),
        (".5s", S // 2),
        ("5.s", 5 * S),
        ("250ms", 250_000),
        ("15us", 15),
        ("15µs", 15),
        ("15μs", 15),
        ("1ns", 1),
        ("1500ns", 2),
        ("0", 0),
        ("-5s", -5 * S),
        ("+2m", 120 * S),
        ("72h", 72 * 3600 * S),
        ("2562047h", 2562047 * 3600 * S),
    ],
    ids=lambda v: str(v),
)
def test_go_durations(text: str, micros: int) -> None:
    assert parse_go_duration(text) == (micros, "")


@pytest.mark.parametrize(
    "text", ["", "s", "5", "10d", "1h-3m", "1.5.5s", ".s", "5 s", "\u0663s", "2562048h", "ten seconds"]
)
def test_invalid_go_durations(text: str) -> None:
    value, reason = parse_go_duration(text)
    assert value is None and reason


def test_default_config() -> None:
    cfg = GangConfig.from_dict({})
    assert cfg == GangConfig()
    assert cfg.default_timeout_us == 600 * S
    assert (cfg.default_match_policy, cfg.default_mode) == ("once-satisfied", "Strict")
    assert GangConfig.from_dict(cfg.to_dict()) == cfg


def test_config_round_trip_with_every_field() -> None:
    d = {
        "version": "7",
        "defaultTimeoutSeconds": 86400,
        "defaultMatchPolicy": "only-waiting",
        "defaultMode": "NonStrict",
        "retryInitialBackoffSeconds": 1,
        "retryMaxBackoffSeconds": 60,
        "queue": {"maxBypasses": 3, "maxBlockedSeconds": 0, "maxReserveSeconds": 0, "maxReserveRounds": 5},
    }
    assert GangConfig.from_dict(d).to_dict() == d


@pytest.mark.parametrize(
    ("d", "path"),
    [
        ({"defaultTimeoutSeconds": 0}, "defaultTimeoutSeconds"),
        ({"defaultTimeoutSeconds": "600"}, "defaultTimeoutSeconds"),
        ({"defaultTimeoutSeconds": True}, "defaultTimeoutSeconds"),
        ({"defaultMatchPolicy": "Once-Satisfied"}, "defaultMatchPolicy"),
        ({"defaultMode": "strict"}, "defaultMode"),
        ({"retryInitialBackoffSeconds": 30, "retryMaxBackoffSeconds": 10}, "retryMaxBackoffSeconds"),
        ({"queue": {"maxBypasses": 0}}, "queue.maxBypasses"),
        ({"queue": {"maxReserveSeconds": 0, "maxReserveRounds": 0}}, "queue"),
        ({"queue": {"bypasses": 3}}, "queue.bypasses"),
        ({"timeoutCap": 900}, "timeoutCap"),
        ({"version": ""}, "version"),
    ],
    ids=lambda v: str(v),
)
def test_config_errors_name_the_key(d: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        GangConfig.from_dict(d)
    assert path in [e.path for e in info.value.errors]


def test_backoff_doubles_up_to_the_maximum() -> None:
    cfg = GangConfig.from_dict({"retryInitialBackoffSeconds": 10, "retryMaxBackoffSeconds": 300})
    assert [cfg.backoff_us(n) // S for n in range(1, 9)] == [10, 20, 40, 80, 160, 300, 300, 300]
    assert cfg.backoff_us(10_000) == 300 * S
