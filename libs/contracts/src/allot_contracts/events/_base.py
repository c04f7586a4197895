"""The base of every event payload, the fields several events begin with, and the small value types events share."""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.pod import Pod

__all__ = [
    "Event",
    "FieldIssue",
    "GroupAttempt",
    "GroupMembers",
    "JobEnactment",
    "JobEnactmentFailed",
    "JobObjectEnacted",
    "MigrationEvent",
    "NameRefused",
    "Named",
    "NamedManifest",
    "ObjectRef",
    "PodArrived",
    "PodAttempt",
    "PodEvent",
    "PodOnNode",
    "ReservationEnactment",
    "ReservationEnactmentFailed",
    "ReservationEvent",
]


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event payload. Subclasses set ``tag``; ``stream_kind`` is the tag's first token."""

    STREAM_KIND: ClassVar[str] = ""


class Named(Event, frozen=True, kw_only=True):
    """The first field of an event about a cluster-scoped object (a node and what is named after it, a priority
    class, a co-location profile): its ``name``. Alone, an event that the object was deleted or removed."""

    name: str


class NamedManifest(Named, frozen=True, kw_only=True):
    """The first fields of an event about a cluster-scoped object: its ``name`` and its ``manifest`` as it came."""

    manifest: dict[str, Any]


class NameRefused(Named, frozen=True, kw_only=True):
    """The fields of a refusal of a cluster-scoped object: its ``name`` and the ``errors`` (with field paths)."""

    errors: list[FieldIssue]


# ``key`` is computed once per reference and kept in the instance ``__dict__`` (``dict=True``), which msgspec neither
# encodes nor compares nor hashes: only the two fields are the reference's value. (The docstring is the JSON Schema's
# description of every event that holds a reference.)
class ObjectRef(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """A namespaced or cluster-scoped object reference; ``namespace`` is "" for cluster-scoped objects."""

    namespace: str = ""
    name: str

    @cached_property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class PodEvent(Event, frozen=True, kw_only=True):
    """The first fields of an event about one pod: the ``pod`` and its life (``uid``, ``""`` = the current life)."""

    pod: ObjectRef
    uid: str = ""


class PodAttempt(PodEvent, frozen=True, kw_only=True):
    """The first fields of a decision on one scheduling ``attempt`` of a pod."""

    attempt: int


class PodOnNode(PodEvent, frozen=True, kw_only=True):
    """The first fields of an event about a pod on its ``node``."""

    node: str


class ReservationEvent(Event, frozen=True, kw_only=True):
    """The first fields of an event about one Reservation: the ``reservation`` and its life (``uid``)."""

    reservation: ObjectRef
    uid: str = ""


class MigrationEvent(Event, frozen=True, kw_only=True):
    """The first fields of an event about one PodMigrationJob: the ``job`` and its life (``uid``)."""

    job: ObjectRef
    uid: str = ""


class GroupAttempt(Event, frozen=True, kw_only=True):
    """The first fields of a decision on one ``attempt`` of a gang ``group``."""

    group: str
    attempt: int


class GroupMembers(GroupAttempt, frozen=True, kw_only=True):
    """The first fields of a decision on the ``members`` of one attempt of a gang group."""

    members: list[str]


class JobEnactment(Event, frozen=True, kw_only=True):
    """The first fields of an outcome of carrying out a ``decision`` (its event id) on a PodMigrationJob ``job``."""

    job: ObjectRef
    decision: str


class JobObjectEnacted(JobEnactment, frozen=True, kw_only=True):
    """The fields of a PodMigrationJob object written (created, deleted) in the API server: its ``uid`` there, what
    the API server said (``message``) and the ``attempts`` it took."""

    uid: str = ""
    message: str = ""
    attempts: int = 1


class JobEnactmentFailed(JobEnactment, frozen=True, kw_only=True):
    """The fields of a write on a PodMigrationJob the API server refused for good: its ``reason`` and ``message``."""

    reason: str
    message: str
    attempts: int = 1


class ReservationEnactment(Event, frozen=True, kw_only=True):
    """The first fields of an outcome of carrying out a ``decision`` (its event id) on a Reservation."""

    reservation: ObjectRef
    decision: str


class ReservationEnactmentFailed(ReservationEnactment, frozen=True, kw_only=True):
    """The fields of a write on a Reservation the API server refused for good: its ``reason`` and ``message``."""

    reason: str
    message: str
    attempts: int = 1


class PodArrived(Event, frozen=True, kw_only=True):
    """The fields of a pod that entered (``pod.submitted``, ``pod.observed``): its life (``uid``), its manifest as
    it came, and the pod read at the door (``spec``; ``None`` when the door refused it, ``issues`` say why)."""

    pod: ObjectRef
    uid: str
    manifest: dict[str, Any]
    spec: Pod | None = None
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
