"""Which snapshots are checked, and where two encoded states first differ (the path a mismatch reports)."""

from __future__ import annotations

from typing import Any

from allot_runtime import statecodec
from allot_runtime.snapshot_check import first_difference, sample


class _Engine:
    def __init__(self, nodes: dict[str, Any]) -> None:
        self.nodes = nodes
        self.count = len(nodes)


class _Root:
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.position = 7


def _state(nodes: dict[str, Any]) -> bytes:
    return statecodec.export_state(
        _Root(_Engine(nodes)), overlay=("engine",), allowed=(__name__.split(".")[0],)
    )


def test_the_newest_count_are_sampled_oldest_first() -> None:
    assert sample([30, 10, 20], 2) == [20, 30]
    assert sample([30, 10, 20], 5) == [10, 20, 30]
    assert sample([30, 10, 20], 0) == []


def test_the_first_differing_path_is_named() -> None:
    same = _state({"n1": [1, 2], "n2": {"gpus": 4}})
    assert first_difference(same, same) == "$"
    assert first_difference(same, _state({"n1": [1, 3], "n2": {"gpus": 4}})) == "engine.nodes['n1'][1]"
    assert first_difference(same, _state({"n1": [1, 2], "n2": {"gpus": 2}})) == "engine.nodes['n2']['gpus']"
    assert first_difference(same, _state({"n1": [1, 2]})) == "engine.nodes['n2']"
    assert first_difference(same, b"not a state") == "$"


def test_a_snapshot_made_by_other_code_is_told_apart_from_a_forged_one() -> None:
    import msgspec

    from allot_runtime.snapshot_check import made_by_other_code
    from allot_runtime.statecodec import dumps

    state = dumps({"engine": {"nodes": {"n1": [1, 2]}}})
    assert not made_by_other_code(state)
    frame = msgspec.msgpack.decode(state)
    frame[2] = "f" * 64  # what another release's modules hash to
    assert made_by_other_code(msgspec.msgpack.encode(frame))
    assert not made_by_other_code(b"not a state")  # unreadable bytes are checked and reported, not skipped
    assert not made_by_other_code(msgspec.msgpack.encode([0, [], "x", [], [], None]))  # another format
