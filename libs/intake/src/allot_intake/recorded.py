"""What the door learns from the log: the quotas, quota profiles, PriorityClasses, ClusterColocationProfiles and
Namespaces recorded before the documents it admits.

:data:`DOOR_TYPES` are the event types to read; :func:`learn` folds one recorded event into a :class:`Door`, in log
order (``allot apply`` and ``allot whatif`` read them with :func:`allot_stack.apply.door_for`). Pure: no IO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent
    from allot_contracts.events import Event
    from allot_intake.manifests import Door

__all__ = ["DOOR_TYPES", "learn"]

DOOR_TYPES = (
    "quota.applied",
    "quota.registered",
    "quota.removed",
    "quotaprofile.applied",
    "quotaprofile.registered",
    "priorityclass.applied",
    "priorityclass.deleted",
    "colocationprofile.applied",
    "colocationprofile.deleted",
    "object.ignored",  # Namespaces: their labels select profiles
)


def _learn_quotas(door: Door, applied: dict[str, Event], stream: str, event: Event) -> None:
    """Quotas and quota profiles: what the door knows of a tree once quota-manager registered what was applied."""
    from allot_contracts.events import (
        QuotaApplied,
        QuotaProfileApplied,
        QuotaProfileRegistered,
        QuotaRegistered,
        QuotaRemoved,
    )

    assert door.quotas is not None
    if isinstance(event, QuotaApplied | QuotaProfileApplied):
        applied[stream] = event
    elif isinstance(event, QuotaRegistered):
        door.quotas.add(event.quota.name)
        last = applied.pop(stream, None)
        if isinstance(last, QuotaApplied) and last.spec is not None:
            door.quota_view.note_quota(last.spec)
    elif isinstance(event, QuotaProfileRegistered):
        door.quotas.add(event.quota)
        last = applied.pop(stream, None)
        if isinstance(last, QuotaProfileApplied) and last.spec is not None:
            door.quota_view.note_profile(last.spec)
    elif isinstance(event, QuotaRemoved):
        door.quotas.discard(event.quota.name)
        door.quota_view.forget_quota(event.quota.name)


def _learn(door: Door, event: Event) -> None:
    """What a recorded PriorityClass deletion, ClusterColocationProfile or Namespace tells the door."""
    from allot_contracts import kube
    from allot_contracts.events import (
        ColocationProfileApplied,
        ColocationProfileDeleted,
        ObjectIgnored,
        PriorityClassDeleted,
    )
    from allot_contracts.objects.colocation_profile import parse_colocation_profile

    assert door.profiles is not None
    if isinstance(event, PriorityClassDeleted):
        door.priority_classes.pop(event.name, None)
    elif isinstance(event, ColocationProfileApplied):
        profile = parse_colocation_profile(event.manifest, [], [])
        if profile is not None:
            door.profiles[profile.name] = profile
    elif isinstance(event, ColocationProfileDeleted):
        door.profiles.pop(event.name, None)
    elif isinstance(event, ObjectIgnored) and event.kind == "Namespace":
        door.namespaces[event.ref.name] = kube.labels(event.manifest)


def learn(door: Door, applied: dict[str, Event], record: RecordedEvent) -> None:
    """Fold one recorded event of :data:`DOOR_TYPES` into ``door``; ``applied`` holds each quota or profile stream's
    last applied object until quota-manager registers it."""
    from allot_contracts.events import PriorityClassApplied

    if record.type.startswith(("quota.", "quotaprofile.")):
        _learn_quotas(door, applied, record.stream_id, record.decode())
    elif record.type == "priorityclass.applied":
        event = record.decode()
        assert isinstance(event, PriorityClassApplied)
        door.priority_classes[event.name] = event.spec
    else:
        _learn(door, record.decode())
