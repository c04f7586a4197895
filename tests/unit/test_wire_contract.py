"""The published contract for subscribers: schema ``$id``s, the AsyncAPI document, the CloudEvents headers."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from allot_bus import wire
from allot_bus.names import BusNames
from allot_cli.commands.schema import asyncapi_yaml
from allot_contracts.envelope import GENESIS_HASH, NewEvent, prepare, stream_id
from allot_contracts.events import AnyEvent, ObjectRef, PodBound
from allot_contracts.schema import SCHEMA_BASE, export_asyncapi

SCHEMAS = Path(__file__).resolve().parents[2] / "libs" / "contracts" / "schemas"


def committed_asyncapi() -> dict[str, Any]:
    return yaml.safe_load((SCHEMAS / "asyncapi.yaml").read_text())


def registry() -> Registry:
    resources = []
    for path in SCHEMAS.glob("*.json"):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


def message_validators(doc: dict[str, Any], tag: str) -> tuple[jsonschema.Draft202012Validator, ...]:
    """Validators for the headers and the payload of the message ``tag`` (references resolved as a tool would:
    ``#/components/...`` in the document, file names next to it)."""
    message = doc["components"]["messages"][tag]
    headers = json.loads(
        json.dumps(message["headers"]).replace(
            json.dumps({"$ref": "#/components/schemas/headers"}),
            json.dumps(doc["components"]["schemas"]["headers"]),
        )
    )
    payload = {"$id": f"{SCHEMA_BASE}asyncapi/{tag}", **message["payload"]}
    payload = json.loads(json.dumps(payload).replace('"$ref": "', f'"$ref": "{SCHEMA_BASE}'))
    checker = jsonschema.FormatChecker()
    return (
        jsonschema.Draft202012Validator(headers, format_checker=checker),
        jsonschema.Draft202012Validator(payload, registry=registry(), format_checker=checker),
    )


def a_record(event, *, stream: str, position: int = 7, recorded_at: int = 1_700_000_000_123_456):
    new = NewEvent(stream_id=stream, event=event, event_id="6f1c3d1e-5b7a-4f43-9c1b-2a8e7d0c4b11")
    return prepare(
        new,
        position=position,
        stream_version=1,
        producer="binder",
        recorded_at=recorded_at,
        prev_hash=GENESIS_HASH,
    )


def test_the_committed_asyncapi_document_matches_the_code():
    """Regenerate with `allot schema --out libs/contracts/schemas`."""
    assert yaml.safe_load(asyncapi_yaml()) == export_asyncapi()
    assert committed_asyncapi() == export_asyncapi()


def test_every_schema_has_an_id_named_after_its_file_and_every_reference_resolves():
    ids = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text())
        assert schema["$id"] == f"{SCHEMA_BASE}{path.name}", path.name
        ids[schema["$id"]] = path.name
        jsonschema.Draft202012Validator.check_schema(schema)
    assert len(ids) == len(list(SCHEMAS.glob("*.json")))
    doc = committed_asyncapi()
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        if ref.startswith("#/"):
            node: Any = doc
            for key in ref[2:].split("/"):
                node = node[key]
        else:
            assert (SCHEMAS / ref).is_file(), ref


def test_every_event_type_has_a_channel_and_a_message_per_version():
    doc = committed_asyncapi()
    tags = sorted(cls.__struct_config__.tag for cls in AnyEvent.__args__)
    assert sorted(doc["components"]["messages"]) == tags
    names = BusNames(prefix="allot")
    for tag in tags:
        event_type = tag.rsplit(".v", 1)[0]
        channel = doc["channels"][event_type]
        assert channel["address"].replace("{prefix}", "allot") == names.subject(event_type)
        assert tag in channel["messages"]
        assert doc["operations"][f"receive.{event_type}"]["action"] == "receive"


def test_cloudevents_headers_describe_the_event_and_validate_against_the_document():
    record = a_record(
        PodBound(pod=ObjectRef(namespace="team-a", name="web-0"), attempt=1, node="gpu-1"),
        stream=stream_id("pod", "team-a/web-0"),
    )
    headers = {
        "Nats-Msg-Id": record.event_id,
        "Allot-Position": str(record.position),
        "Allot-Type": record.tag,
        "Allot-Stream": record.stream_id,
        **wire.cloudevent_headers(record, "allot"),
    }
    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-id"] == record.event_id
    assert headers["ce-source"] == "/allot/binder"
    assert headers["ce-type"] == "dev.allot.pod.bound.v1"
    assert headers["ce-subject"] == "pod:team-a/web-0"
    assert "ce-dataschema" not in headers and "content-type" not in headers, (
        "constants, stated in the document"
    )
    assert dt.datetime.fromisoformat(headers["ce-time"].replace("Z", "+00:00")) == dt.datetime(
        2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC
    )
    header_check, payload_check = message_validators(committed_asyncapi(), "pod.bound.v1")
    header_check.validate(headers)
    payload_check.validate(json.loads(wire.encode(record)))
    wrong = {**headers, "ce-type": "dev.allot.pod.placed.v2"}
    assert list(header_check.iter_errors(wrong)), "a message's headers name its own type"
    body = json.loads(wire.encode(record))
    body["payload"]["attempt"] = "one"
    assert list(payload_check.iter_errors(body)), "the payload is checked against the tag's schema"


def test_ce_time_is_rfc3339_in_utc_across_seconds():
    assert wire.rfc3339(0) == "1970-01-01T00:00:00.000000Z"
    assert wire.rfc3339(1_700_000_000_999_999) == "2023-11-14T22:13:20.999999Z"
    assert wire.rfc3339(1_700_000_001_000_000) == "2023-11-14T22:13:21.000000Z"
    assert wire.rfc3339(1_700_000_000_000_001) == "2023-11-14T22:13:20.000001Z"


def test_the_relay_header_block_is_what_the_nats_client_would_write():
    from allot_bus.adapters.publish import header_block

    headers = {"Nats-Msg-Id": "abc", "Allot-Position": "7", "ce-time": "2023-11-14T22:13:20.000001Z"}
    assert header_block(headers) == (
        b"NATS/1.0\r\nNats-Msg-Id: abc\r\nAllot-Position: 7\r\nce-time: 2023-11-14T22:13:20.000001Z\r\n\r\n"
    )
    assert header_block({"ce-subject": "pod:a/b\r\nInjected: 1"}) is None, (
        "the client's own encoding sanitises it"
    )
    assert header_block({"ce-subject": "pod:a/b\n"}) is None
