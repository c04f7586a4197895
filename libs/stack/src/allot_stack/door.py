"""What the door of ``allot apply`` and ``allot what-if`` knows from the log: the elastic quotas and quota profiles,
PriorityClasses, ClusterColocationProfiles and Namespaces recorded so far (:class:`allot_intake.manifests.Door`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from allot_stack.connect import retrying

if TYPE_CHECKING:
    from allot_contracts.events import Event
    from allot_intake.manifests import Door

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


def learn_quotas(door: Door, applied: dict[str, Event], stream: str, event: Event) -> None:
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


def learn(door: Door, kind: str, payload: dict[str, Any]) -> None:
    """What a recorded PriorityClass deletion, ClusterColocationProfile or Namespace tells the door."""
    from allot_contracts.objects.colocation_profile import parse_colocation_profile

    assert door.profiles is not None
    if kind == "priorityclass.deleted":
        door.priority_classes.pop(str(payload["name"]), None)
    elif kind == "colocationprofile.applied":
        profile = parse_colocation_profile(payload["manifest"], [], [])
        if profile is not None:
            door.profiles[profile.name] = profile
    elif kind == "colocationprofile.deleted":
        door.profiles.pop(str(payload["name"]), None)
    elif kind == "object.ignored" and payload.get("kind") == "Namespace":
        labels = (payload.get("manifest") or {}).get("metadata", {}).get("labels")
        door.namespaces[str(payload["ref"]["name"])] = {str(k): str(v) for k, v in (labels or {}).items()}


async def door_for(url: str, until: int | None = None) -> Door:
    """A door that knows the elastic quotas and quota profiles, PriorityClasses, ClusterColocationProfiles and
    Namespaces recorded so far (up to position ``until`` when given)."""
    from allot_contracts.events import PriorityClassApplied
    from allot_eventstore.postgres import PostgresEventStore
    from allot_intake.manifests import Door

    store = PostgresEventStore.connect(url)
    door = Door(quotas=set())
    applied: dict[str, Event] = {}  # quota or profile stream -> its last applied object, until registered
    try:

        async def scan() -> None:
            async for record in store.iterate(types=DOOR_TYPES, until=until):
                if record.type.startswith(("quota.", "quotaprofile.")):
                    learn_quotas(door, applied, record.stream_id, record.decode())
                elif record.type == "priorityclass.applied":
                    event = record.decode()
                    assert isinstance(event, PriorityClassApplied)
                    door.priority_classes[event.name] = event.spec
                else:
                    learn(door, record.type, record.payload_dict())

        await retrying(
            scan,
            what="reading recorded quotas, quota profiles, priority classes, colocation profiles and namespaces",
        )
    finally:
        await store.close()
    return door
