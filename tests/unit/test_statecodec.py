"""The data-only state codec: order, aliasing, cycles, every container kind, refused names, malformed bytes."""

from __future__ import annotations

import collections
import dataclasses
import enum
import fractions
import threading
from typing import Any, ClassVar

import msgspec
import pytest

from allot_runtime.statecodec import (
    FORMAT,
    StateCodecError,
    code_fingerprint,
    dumps,
    export_state,
    loads,
    restore_state,
)

HERE = (__name__.split(".", 1)[0],)  # this test module's classes may be stored


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(msgspec.Struct, frozen=True):
    x: int
    y: int = 0


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    tags: tuple[str, ...]


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any) -> None:
        self.a = a


class Plain:
    def __init__(self) -> None:
        self.items: list[Any] = []

    def hook(self) -> int:
        return len(self.items)


def module_function(value: int) -> int:
    return value + 1


class Tagged(dict[str, int]):
    def __setitem__(self, key: str, value: int) -> None:  # never called on decode
        raise AssertionError("the decoder must not call overridden methods")


def roundtrip(value: Any) -> Any:
    data = dumps(value, allowed=HERE)
    again = loads(data, allowed=HERE)
    assert dumps(again, allowed=HERE) == data
    return again


def test_every_container_kind_comes_back_equal_with_its_order() -> None:
    value = {
        "dict": {"z": 1, "a": 2, 3: "three", (1, "x"): None},
        "list": [1, 2.5, "s", b"b", None, True, 2**70, -(2**70)],
        "tuple": (1, (2, 3)),
        "set": {3, 1, 2},
        "frozenset": frozenset({"b", "a"}),
        "deque": collections.deque([1, 2, 3], maxlen=5),
        "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
        "counter": collections.Counter({"x": 3, "y": 1}),
        "default": collections.defaultdict(list, {"k": [1]}),
        "enum": Colour.BLUE,
        "struct": Point(1, 2),
        "frozen": Frozen("f", ("t",)),
        "fraction": fractions.Fraction(1, 3),
        "type": Point,
        "function": module_function,
    }
    again = roundtrip(value)
    assert again == value
    assert list(again["dict"]) == ["z", "a", 3, (1, "x")]
    assert list(again["ordered"]) == ["b", "a"]
    assert again["deque"].maxlen == 5
    assert again["default"]["new"] == [] and again["default"].default_factory is list
    assert again["enum"] is Colour.BLUE
    assert again["function"] is module_function
    assert type(again["counter"]) is collections.Counter


def test_shared_references_and_cycles_are_restored_exactly() -> None:
    shared = [1, 2]
    node = Plain()
    node.items.append(node)  # a cycle through an object
    loop: list[Any] = []
    loop.append(loop)  # a cycle through a list
    slotted = Slotted(shared)
    slotted.b = node
    value = {"a": shared, "b": shared, "node": node, "loop": loop, "slotted": slotted, "method": node.hook}
    again = roundtrip(value)
    assert again["a"] is again["b"]
    assert again["slotted"].a is again["a"]
    assert again["node"].items[0] is again["node"]
    assert again["slotted"].b is again["node"]
    assert again["loop"][0] is again["loop"]
    assert again["method"].__self__ is again["node"] and again["method"]() == 1


def test_a_dict_subclass_is_rebuilt_without_running_its_methods() -> None:
    tagged = Tagged()
    dict.__setitem__(tagged, "a", 1)
    tagged.extra = "x"  # type: ignore[attr-defined]
    again = roundtrip(tagged)
    assert type(again) is Tagged and dict(again) == {"a": 1} and again.extra == "x"


def test_what_cannot_be_encoded_is_named_by_its_path() -> None:
    holder = Plain()
    holder.items.append({"lock": threading.Lock()})
    with pytest.raises(StateCodecError, match=r"\.items\[0\]\['lock'\]: _thread\.lock"):
        dumps(holder, allowed=HERE)
    with pytest.raises(StateCodecError, match=r"\[0\]: .*not a module-level function"):
        dumps([lambda: 1])
    with pytest.raises(StateCodecError, match="not from an allowed module"):
        dumps(Plain())  # this test module is not allowed unless named


def _frame(names: list[str], root: object, *, code: str | None = None) -> bytes:
    """A state's bytes written by hand: format, class names, code fingerprint, anchors, overlays, root."""
    fingerprint = code_fingerprint(names) if code is None else code
    return msgspec.msgpack.encode([FORMAT, names, fingerprint, [], [], root])


def test_a_class_outside_the_allowlist_is_refused_on_decode() -> None:
    data = dumps(Plain(), allowed=HERE)
    with pytest.raises(StateCodecError, match="not from an allowed module"):
        loads(data)
    with pytest.raises(StateCodecError, match="os:system is not from an allowed module"):
        loads(_frame(["os:system"], [12, 0]))
    with pytest.raises(StateCodecError, match="is not loaded"):
        loads(_frame(["allot_nothing_here:Thing"], [12, 0]))


def test_a_state_made_by_other_code_is_refused() -> None:
    data = dumps(Point(3), allowed=HERE)
    assert loads(data, allowed=HERE) == Point(3)
    frame = msgspec.msgpack.decode(data)
    assert frame[2] == code_fingerprint(frame[1])
    frame[2] = "0" * 64  # the fingerprint of the modules as another release had them
    with pytest.raises(StateCodecError, match="made by other code"):
        loads(msgspec.msgpack.encode(frame), allowed=HERE)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x93\x01",
        msgspec.msgpack.encode([FORMAT - 1, [], [], [], None]),
        _frame([], [0, 99]),
        _frame([], [3, "odd"]),
        _frame([], [77]),
        _frame(["builtins:int"], [12, 0, "__class__", 1]),
        _frame([], None)[:-1],
    ],
    ids=[
        "empty",
        "truncated",
        "other-format",
        "dangling-ref",
        "odd-mapping",
        "unknown-tag",
        "dunder",
        "cut-frame",
    ],
)
def test_malformed_bytes_are_a_clear_error(data: bytes) -> None:
    with pytest.raises(StateCodecError):
        loads(data)


def test_truncated_state_of_a_real_graph_is_refused() -> None:
    data = dumps({"a": [1, 2, 3], "b": Point(1)}, allowed=HERE)
    for cut in range(len(data)):
        with pytest.raises(StateCodecError):
            loads(data[:cut], allowed=HERE)


class Service:
    snapshot_fresh: ClassVar[frozenset[str]] = frozenset({"engine.lock"})

    def __init__(self, seed: int) -> None:
        self.engine = Plain()
        self.engine.lock = threading.Lock()  # type: ignore[attr-defined]
        self.seen: dict[str, int] = {"seed": seed}


def test_export_keeps_the_declared_paths_from_the_fresh_instance() -> None:
    live = Service(1)
    live.seen["pod"] = 2
    live.engine.items.append(live.seen)
    with pytest.raises(StateCodecError, match=r"engine\.lock"):
        export_state(live, allowed=HERE)
    data = export_state(live, Service.snapshot_fresh, allowed=HERE)
    fresh = Service(1)
    engine, lock = fresh.engine, fresh.engine.lock  # type: ignore[attr-defined]
    restore_state(data, fresh, Service.snapshot_fresh, allowed=HERE)
    assert fresh.engine is engine and fresh.engine.lock is lock  # type: ignore[attr-defined]
    assert fresh.seen == {"seed": 1, "pod": 2} and fresh.engine.items[0] is fresh.seen
    assert export_state(fresh, Service.snapshot_fresh, allowed=HERE) == data
    with pytest.raises(StateCodecError, match="other kept paths"):
        restore_state(data, Service(1), (), allowed=HERE)


@pytest.mark.parametrize("width", [15, 16, 2_000, 65_535, 65_536])
def test_a_wide_container_encoded_in_parts_is_the_same_bytes_and_comes_back_whole(width: int) -> None:
    """A container whose items hold many objects is encoded part by part while it is walked; the bytes are those of
    the whole graph encoded at once (MessagePack re-encodes them unchanged), and references reach across parts."""
    shared = Plain()
    value = {
        "list": [[i] for i in range(width)] + [shared],
        "dict": {i: {"at": i, "shared": shared} for i in range(width)},
        "set": set(range(width)),
        "tagged": Tagged(),
    }
    dict.update(value["tagged"], {f"k{i}": i for i in range(width)})
    data = dumps(value, allowed=HERE)
    assert msgspec.msgpack.encode(msgspec.msgpack.decode(data)) == data
    again = roundtrip(value)
    assert again["list"][:3] == [[0], [1], [2]] and len(again["list"]) == width + 1
    assert again["dict"][width - 1]["shared"] is again["dict"][0]["shared"] is again["list"][-1]
    assert again["set"] == set(range(width)) and dict(again["tagged"]) == dict(value["tagged"])


def test_what_cannot_be_encoded_far_into_a_wide_container_is_named_by_its_index() -> None:
    items: list[Any] = [[i] for i in range(5_000)]
    items.append(threading.Lock())
    with pytest.raises(StateCodecError, match=r"^\[5000\]: _thread\.lock"):
        dumps(items)
