"""Event contracts: tags, schema snapshot, canonical hashing, derived ids, upcasters."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

import msgspec
import pytest

from allot_contracts.envelope import GENESIS_HASH, NewEvent, canonical, derived_event_id, prepare
from allot_contracts.events import AnyEvent, Event, ObjectRef, PodDeleted, event_class
from allot_contracts.schema import export_schemas
from allot_contracts.upcasters import upcast

SCHEMAS = Path(__file__).resolve().parents[2] / "libs" / "contracts" / "schemas"
TAG = re.compile(r"^[a-z_]+\.[a-z_]+\.v\d+$")


def test_every_event_has_a_unique_versioned_tag():
    tags = [cls.__struct_config__.tag for cls in AnyEvent.__args__]
    assert len(tags) == len(set(tags))
    assert all(TAG.match(t) for t in tags), [t for t in tags if not TAG.match(t)]


def test_an_event_is_registered_once_in_the_module_that_defines_it():
    """Every tagged Event class of the catalogue is named in its own module's ``__all__`` (its one registration),
    and from there alone it is decodable (AnyEvent), indexed by tag and importable from the package."""
    package = importlib.import_module("allot_contracts.events")
    defined: dict[str, type] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"allot_contracts.events.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, Event) and value.__module__ == module.__name__:
                assert name in module.__all__, f"{module.__name__}.{name} is not registered in __all__"
                defined[value.__struct_config__.tag] = value
    assert set(AnyEvent.__args__) == set(defined.values())
    for tag, cls in defined.items():
        assert event_class(tag) is cls
        assert getattr(package, cls.__name__) is cls
    assert len(re.findall(r"\bPodBound\b", Path(package.__file__).read_text())) == 0


def test_events_are_frozen_keyword_only_and_never_array_like():
    for cls in AnyEvent.__args__:
        config = cls.__struct_config__
        assert config.frozen and not config.array_like and not config.forbid_unknown_fields, cls
        with pytest.raises(TypeError):
            cls(*range(len(cls.__struct_fields__)))  # keyword-only: positional construction is refused


def test_committed_schemas_match_the_code():
    """A contract change must come with its schema diff: run `allot schema --out libs/contracts/schemas`."""
    exported = export_schemas()
    committed = {p.stem: json.loads(p.read_text()) for p in SCHEMAS.glob("*.json")}
    assert sorted(committed) == sorted(exported)
    for name, schema in exported.items():
        assert json.loads(json.dumps(schema, sort_keys=True)) == committed[name], name


def test_canonical_bytes_ignore_key_order_and_whitespace():
    assert canonical({"b": 1, "a": [2, {"d": 3, "c": 4}]}) == b'{"a":[2,{"c":4,"d":3}],"b":1}'
    assert canonical(json.loads('{ "b" : 1 , "a" : [2, {"d":3,"c":4}] }')) == canonical(
        {"a": [2, {"c": 4, "d": 3}], "b": 1}
    )


def test_the_hash_covers_content_and_the_previous_hash():
    new = NewEvent(
        stream_id="pod:default/x",
        event=PodDeleted(pod=ObjectRef(namespace="default", name="x")),
        event_id="00000000-0000-0000-0000-000000000001",
    )
    a = prepare(new, position=1, stream_version=1, producer="api", recorded_at=5, prev_hash=GENESIS_HASH)
    assert a.expected_hash(GENESIS_HASH) == a.hash
    assert (
        prepare(new, position=1, stream_version=1, producer="api", recorded_at=6, prev_hash=GENESIS_HASH).hash
        != a.hash
    )
    assert (
        prepare(new, position=1, stream_version=1, producer="api", recorded_at=5, prev_hash=a.hash).hash
        != a.hash
    )
    # the stored JSON may be re-formatted by the database (jsonb); the hash is over canonical bytes
    spaced = msgspec.structs.replace(a, payload=json.dumps(json.loads(a.payload), indent=2).encode())
    assert spaced.expected_hash(GENESIS_HASH) == a.hash


def test_derived_event_ids_are_stable_and_distinct():
    assert derived_event_id("svc", "t1", 0) == derived_event_id("svc", "t1", 0)
    assert (
        len({derived_event_id("svc", "t1", i) for i in range(5)} | {derived_event_id("other", "t1", 0)}) == 6
    )


@pytest.mark.parametrize("producer", ["device-allocator", "qos-enforcer@node-7", "séance"])
def test_derived_event_ids_are_the_uuid5_of_producer_trigger_and_index(producer):
    import uuid

    from allot_contracts.envelope import ALLOT_NS

    for trigger, index in [("6f1c3d1e-5b7a-4f43-9c1b-2a8e7d0c4b11", 0), ("t", 7), ("", 123)]:
        expected = str(uuid.uuid5(ALLOT_NS, f"{producer}/{trigger}/{index}"))
        assert derived_event_id(producer, trigger, index) == expected


def test_upcasters_follow_the_chain_and_refuse_cycles():
    table = {
        "x.thing.v1": ("x.thing.v2", lambda p: {**p, "added": p.get("old", 0) + 1}),
        "x.thing.v2": ("x.thing.v3", lambda p: {k: v for k, v in p.items() if k != "old"}),
    }
    out = upcast("x.thing.v1", {"type": "x.thing.v1", "old": 4}, table)
    assert out == {"type": "x.thing.v3", "added": 5}
    assert upcast("x.other.v1", {"a": 1}, table) == {"a": 1}
    with pytest.raises(ValueError, match="cycle"):
        upcast("c.v1", {}, {"c.v1": ("c.v2", dict), "c.v2": ("c.v1", dict)})
