"""JSON Schema export of the event catalogue (``allot schema``) for subscribers in other languages.

One schema per event tag (``pod.placed.v1``) plus ``envelope``: the wire object published on NATS, whose
``payload`` is one of the event schemas, selected by ``type`` + ``schema_version``. A committed copy lives in
``libs/contracts/schemas/``; a test fails when the code and the committed schemas disagree, so a contract change is
always a reviewed diff.

Every schema has an ``$id`` (``https://allot.dev/schemas/<name>.json``, the file's name under that base), so a
validator can load the directory as a registry and resolve references by id. ``asyncapi.yaml`` (from
:func:`export_asyncapi`) describes the subjects: one channel per event type, one message per versioned tag, the
CloudEvents headers every message carries, and the payload as the envelope with its ``payload`` typed by the tag.
"""

from __future__ import annotations

from typing import Any

import msgspec

from allot_contracts.envelope import EnvelopeHeader
from allot_contracts.events import AnyEvent, split_tag
from allot_contracts.jsonvalue import JsonObject, JsonValue

SCHEMA_BASE = "https://allot.dev/schemas/"
ENVELOPE_SCHEMA_ID = f"{SCHEMA_BASE}envelope.json"
CLOUDEVENT_TYPE_PREFIX = "dev.allot."
JSON_SCHEMA = "https://json-schema.org/draft/2020-12/schema"
# the CloudEvents attributes every message carries as headers (binary content mode)
CE_HEADERS = ("ce-specversion", "ce-id", "ce-source", "ce-type", "ce-time", "ce-subject")


def schema_id(name: str) -> str:
    """The ``$id`` of an exported schema (``pod.placed.v2`` → ``https://allot.dev/schemas/pod.placed.v2.json``)."""
    return f"{SCHEMA_BASE}{name}.json"


def cloudevent_type(event_type: str, schema_version: int) -> str:
    """The CloudEvents ``type`` of an event: reverse-DNS prefixed tag (``dev.allot.pod.placed.v2``)."""
    return f"{CLOUDEVENT_TYPE_PREFIX}{event_type}.v{schema_version}"


class Envelope(EnvelopeHeader, frozen=True, kw_only=True):
    """An event as published on ``<prefix>.events.<kind>.<action>`` (NATS headers: Nats-Msg-Id = event_id,
    Allot-Position = position, Allot-Type = ``<type>.v<schema_version>``)."""

    hash: str
    payload: dict[str, Any]
    metadata: dict[str, str] = {}


def export_schemas() -> dict[str, JsonObject]:
    members = AnyEvent.__args__  # type: ignore[attr-defined]
    (schemas, components) = msgspec.json.schema_components(members, ref_template="#/$defs/{name}")
    out: dict[str, JsonObject] = {}
    for cls, schema in zip(members, schemas, strict=True):
        tag = cls.__struct_config__.tag
        name = schema["$ref"].rsplit("/", 1)[-1]
        body = dict(components[name])
        refs = _collect_refs(body, components)
        doc: JsonObject = {
            "$schema": JSON_SCHEMA,
            "$id": schema_id(tag),
            "title": tag,
            **body,
        }
        if refs:
            doc["$defs"] = {r: components[r] for r in sorted(refs)}
        out[tag] = doc
    env = msgspec.json.schema(Envelope)
    out["envelope"] = {"$schema": JSON_SCHEMA, "$id": ENVELOPE_SCHEMA_ID, "title": "envelope", **env}
    return out


def _collect_refs(node: JsonValue, components: JsonObject, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                _collect_refs(components[name], components, seen)
        for value in node.values():
            _collect_refs(value, components, seen)
    elif isinstance(node, list):
        for value in node:
            _collect_refs(value, components, seen)
    return seen


def _tags() -> list[str]:
    return sorted(cls.__struct_config__.tag for cls in AnyEvent.__args__)  # type: ignore[attr-defined]


def _header_schema() -> JsonObject:
    """The NATS headers of every event message: Allot's own and the CloudEvents attributes (binary mode)."""
    text: JsonObject = {"type": "string"}
    return {
        "type": "object",
        "description": (
            "CloudEvents 1.0 in binary content mode: the attributes are ce-* headers and the body (the envelope) "
            f"is the event's data. Two attributes are the same for every message and not sent: datacontenttype "
            f"application/json and dataschema {ENVELOPE_SCHEMA_ID}."
        ),
        "required": [
            "Nats-Msg-Id",
            "Allot-Position",
            "Allot-Type",
            "Allot-Stream",
            *CE_HEADERS,
        ],
        "properties": {
            "Nats-Msg-Id": {
                **text,
                "description": "the event id (JetStream drops a duplicate within its window)",
            },
            "Allot-Position": {
                "type": "string",
                "pattern": "^[1-9][0-9]*$",
                "description": "the event's position in the log: dense, 1, 2, 3, ... (resume and dedupe by it)",
            },
            "Allot-Type": {**text, "description": "the versioned tag, <type>.v<schema_version>"},
            "Allot-Stream": {**text, "description": "the stream the event belongs to (<kind>:<key>)"},
            "ce-specversion": {"const": "1.0"},
            "ce-id": {**text, "description": "CloudEvents id: the event id"},
            "ce-source": {**text, "description": "CloudEvents source: /<bus prefix>/<producer>"},
            "ce-type": {
                **text,
                "description": f"CloudEvents type: {CLOUDEVENT_TYPE_PREFIX}<type>.v<version>",
            },
            "ce-time": {
                "type": "string",
                "format": "date-time",
                "description": "when the event was recorded",
            },
            "ce-subject": {**text, "description": "CloudEvents subject: the stream id"},
            "traceparent": {**text, "description": "W3C trace context of the decision, when traced"},
            "tracestate": text,
        },
    }


def export_asyncapi(prefix: str = "allot") -> JsonObject:
    """The AsyncAPI 3.0 document of the event subjects: ``<prefix>.events.<type>`` carries every version of
    ``<type>``; each message's payload is the envelope with ``payload`` typed by its tag (schemas referenced by file
    name, next to this document)."""
    messages: JsonObject = {}
    by_channel: dict[str, JsonObject] = {}  # event type -> its messages' references, one per versioned tag
    for tag in _tags():
        name, version = split_tag(tag)
        messages[tag] = {
            "name": tag,
            "title": tag,
            "contentType": "application/json",
            "headers": {
                "allOf": [
                    {"$ref": "#/components/schemas/headers"},
                    {
                        "properties": {
                            "Allot-Type": {"const": tag},
                            "ce-type": {"const": cloudevent_type(name, version)},
                        }
                    },
                ]
            },
            "payload": {
                "allOf": [
                    {"$ref": "envelope.json"},
                    {
                        "properties": {
                            "type": {"const": name},
                            "schema_version": {"const": version},
                            "payload": {"$ref": f"{tag}.json"},
                        }
                    },
                ]
            },
        }
        by_channel.setdefault(name, {})[tag] = {"$ref": f"#/components/messages/{tag}"}
    channels: JsonObject = {
        name: {
            "address": f"{{prefix}}.events.{name}",
            "parameters": {"prefix": {"$ref": "#/components/parameters/prefix"}},
            "messages": refs,
        }
        for name, refs in by_channel.items()
    }
    operations: JsonObject = {
        f"receive.{name}": {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{name}"},
            "messages": [{"$ref": f"#/channels/{name}/messages/{tag}"} for tag in refs],
        }
        for name, refs in by_channel.items()
    }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Allot event log",
            "version": "1",
            "description": (
                "Every committed event of the log, published by the relay in position order to the JetStream "
                "stream ALLOT_EVENTS (ALLOT_NATS_STREAM) on <prefix>.events.<type>. PostgreSQL is the source of truth: "
                "a subscriber catches up from it by position and follows NATS for what comes next "
                "(docs/subscribe.md)."
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "nats": {
                "host": "localhost:4222",
                "protocol": "nats",
                "description": "the installation's NATS server (JetStream enabled)",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "parameters": {
                "prefix": {
                    "default": prefix,
                    "description": "the installation's subject prefix (ALLOT_NATS_PREFIX)",
                }
            },
            "messages": messages,
            "schemas": {"headers": _header_schema()},
        },
    }
