"""``verify --since``: a service whose configuration changed before the snapshot it starts from is re-derived under
the configuration in force after the snapshot, and the report still names every configuration it ran under."""

from __future__ import annotations

from allot_audit.verify_since import _governing
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.processor import Host
from allot_runtime.recorded_config import RecordedConfig
from allot_runtime.replay import Outputs, Switch, _Verifying


def _never() -> Host:
    raise AssertionError("a switch before the start is never built")


def _verifying(switches: list[Switch], start: int = 0) -> _Verifying:
    host = Host.__new__(Host)
    host.name = "d"
    return _Verifying(host, switches, Outputs(InMemoryEventStore(), "d", start), start=start)


def test_switches_before_the_start_are_in_force_and_still_reported() -> None:
    switches = [Switch(10, _never), Switch(50, _never)]
    run = _verifying(switches, start=30)
    assert run.pending == [switches[1]] and run.after == 10
    assert [part.after for part in run.result().governed] == [0, 10, 50]
    assert run.result().start == 30
    fresh = _verifying(switches)
    assert fresh.pending == switches and [part.after for part in fresh.result().governed] == [0, 10, 50]


def test_the_configuration_of_a_snapshot_is_the_one_governing_after_it() -> None:
    segments = [
        RecordedConfig(decider="d", config={}, hash=name, after=after)
        for name, after in (("first", 0), ("second", 10), ("third", 50))
    ]
    assert [_governing(segments, p).hash for p in (0, 9, 10, 49, 50, 99)] == [
        "first",
        "first",
        "second",
        "second",
        "third",
        "third",
    ]
