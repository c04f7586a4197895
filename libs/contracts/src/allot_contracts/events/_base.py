"""The base of every event payload, the fields several events begin with, and the small value types events share."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.pod import Pod

__all__ = ["Event", "FieldIssue", "NameRefused", "NamedManifest", "ObjectRef", "PodArrived"]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event payload. Subclasses set ``tag``; ``stream_kind`` is the tag's first token."""

    STREAM_KIND: ClassVar[str] = ""


class NamedManifest(Event, frozen=True, kw_only=True):
    """The first fields of an event about a cluster-scoped object: its ``name`` and its ``manifest`` as it came."""

    name: str
    manifest: dict[str, Any]


class NameRefused(Event, frozen=True, kw_only=True):
    """The fields of a refusal of a cluster-scoped object: its ``name`` and the ``errors`` (with field paths)."""

    name: str
    errors: list[FieldIssue]


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """A namespaced or cluster-scoped object reference; ``namespace`` is "" for cluster-scoped objects."""

    namespace: str = ""
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class PodArrived(Event, frozen=True, kw_only=True):
    """The fields of a pod that entered (``pod.submitted``, ``pod.observed``): its life (``uid``), its manifest as
    it came, and the pod read at the door (``spec``; ``None`` when the door refused it, ``issues`` say why)."""

    pod: ObjectRef
    uid: str
    manifest: dict[str, Any]
    spec: Pod | None = None
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
