"""The base of every event payload, and the small value types events share."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from allot_contracts.issues import FieldIssue

__all__ = ["Event", "FieldIssue", "ObjectRef"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event payload. Subclasses set ``tag``; ``stream_kind`` is the tag's first token."""

    STREAM_KIND: ClassVar[str] = ""


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """A namespaced or cluster-scoped object reference; ``namespace`` is "" for cluster-scoped objects."""

    namespace: str = ""
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name
