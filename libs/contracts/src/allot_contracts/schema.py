"""JSON Schema export of the event catalogue (``allot schema``) for subscribers in other languages.

One schema per event tag (``pod.placed.v1``) plus ``envelope``: the wire object published on NATS, whose
``payload`` is one of the event schemas, selected by ``type`` + ``schema_version``. A committed copy lives in
``libs/contracts/schemas/``; a test fails when the code and the committed schemas disagree, so a contract change is
always a reviewed diff.
"""

from __future__ import annotations

from typing import Any

import msgspec

from allot_contracts.events import AnyEvent


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """An event as published on ``<prefix>.events.<kind>.<action>`` (NATS headers: Nats-Msg-Id = event_id,
    Allot-Position = position, Allot-Type = ``<type>.v<schema_version>``)."""

    position: int
    event_id: str
    stream_id: str
    stream_version: int
    type: str
    schema_version: int
    causation_id: str | None
    correlation_id: str | None
    producer: str
    recorded_at: int
    hash: str
    payload: dict[str, Any]
    metadata: dict[str, str] = {}


def export_schemas() -> dict[str, Any]:
    members = AnyEvent.__args__  # type: ignore[attr-defined]
    (schemas, components) = msgspec.json.schema_components(members, ref_template="#/$defs/{name}")
    out: dict[str, Any] = {}
    for cls, schema in zip(members, schemas, strict=True):
        tag = cls.__struct_config__.tag
        name = schema["$ref"].rsplit("/", 1)[-1]
        body = dict(components[name])
        refs = _collect_refs(body, components)
        doc: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": tag,
            **body,
        }
        if refs:
            doc["$defs"] = {r: components[r] for r in sorted(refs)}
        out[tag] = doc
    env = msgspec.json.schema(Envelope)
    out["envelope"] = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "envelope", **env}
    return out


def _collect_refs(node: Any, components: dict[str, Any], seen: set[str] | None = None) -> set[str]:
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
