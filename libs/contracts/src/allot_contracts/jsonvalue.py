"""The type of a decoded JSON document, for data that really is arbitrary JSON (an old event payload before it is
upcast, an exported JSON Schema): a reader narrows it with ``isinstance`` before using a part of it.

``JsonValue`` is what ``json.loads`` / ``msgspec.json.decode`` return without a type: a string, a number, a bool,
``null``, a list of values or an object (string keys). ``JsonObject`` is an object at the top.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JsonObject", "JsonValue"]

JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
