"""The outcomes quota-manager owes for quota and profile objects: ``quota.registered``/``rejected``/``removed`` and
``quotaprofile.registered``/``rejected``/``removed`` (pure, from the projection)."""

from __future__ import annotations

from typing import Any

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    ObjectRef,
    QuotaProfileApplied,
    QuotaProfileRegistered,
    QuotaProfileRejected,
    QuotaProfileRemoved,
    QuotaRegistered,
    QuotaRejected,
    QuotaRemoved,
)
from allot_quota import QuotaEngine
from allot_runtime.processor import Emit


def quota_outcome(
    owed_outcomes: dict[str, tuple[str, list[Any]]], engine: QuotaEngine, ref: ObjectRef
) -> list[Emit]:
    """The recorded outcome owed for a quota object (registered, rejected or removed), or nothing."""
    if ref.key not in owed_outcomes:
        return []
    what, errors = owed_outcomes[ref.key]
    stream = stream_id("quota", ref.key)
    if errors:
        return [Emit(stream_id=stream, event=QuotaRejected(quota=ref, errors=list(errors)))]
    if what == "removed":
        return [Emit(stream_id=stream, event=QuotaRemoved(quota=ref))]
    row = next((r for r in engine.tree_view() if r["name"] == ref.name), None)
    return [
        Emit(
            stream_id=stream,
            event=QuotaRegistered(
                quota=ref,
                max=dict(row["max"]) if row is not None else {},
                min=dict(row["min"]) if row is not None else {},
                runtime=engine.runtime(ref.name),
            ),
        )
    ]


def profile_outcome(
    owed_outcomes: dict[str, tuple[str, list[Any]]], engine: QuotaEngine, ref: ObjectRef, event: Event
) -> list[Emit]:
    """The recorded outcome owed for an ElasticQuotaProfile, or nothing."""
    key = f"profile:{ref.key}"
    if key not in owed_outcomes:
        return []
    what, errors = owed_outcomes[key]
    stream = stream_id("quotaprofile", ref.key)
    if errors:
        return [Emit(stream_id=stream, event=QuotaProfileRejected(profile=ref, errors=list(errors)))]
    if what == "removed":
        return [Emit(stream_id=stream, event=QuotaProfileRemoved(profile=ref))]
    assert isinstance(event, QuotaProfileApplied)
    quota = event.spec.quota_name if event.spec is not None else ref.name
    return [
        Emit(
            stream_id=stream,
            event=QuotaProfileRegistered(profile=ref, quota=quota, runtime=engine.runtime(quota)),
        )
    ]
