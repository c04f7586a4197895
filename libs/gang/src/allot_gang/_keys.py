"""Annotation and label keys, field paths, ids and time helpers shared by the gang modules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from allot_contracts.objects.gang import (
    ANN_GROUPS,
    ANN_MATCH_POLICY,
    ANN_MIN_AVAILABLE,
    ANN_MODE,
    ANN_NAME,
    ANN_TIMEOUT,
    ANN_TOTAL_NUMBER,
    ANN_WAITING_TIME,
    GANG_PREFIX,
    LABEL_MIN_AVAILABLE,
    LABEL_POD_GROUP,
    LABEL_POD_GROUP_NAME,
    LABEL_SUB_PRIORITY,
    MATCH_POLICIES,
    MATCH_POLICY_ALIAS,
    MODES,
    NON_STRICT,
    ONCE_SATISFIED,
    ONLY_WAITING,
    PG_PREFIX,
    POD_GROUP_API_VERSION,
    POD_GROUP_KIND,
    STRICT,
    WAITING_AND_RUNNING,
    seconds,
)

__all__ = [
    "ANN_GROUPS",
    "ANN_MATCH_POLICY",
    "ANN_MIN_AVAILABLE",
    "ANN_MODE",
    "ANN_NAME",
    "ANN_TIMEOUT",
    "ANN_TOTAL_NUMBER",
    "ANN_WAITING_TIME",
    "GANG_PREFIX",
    "LABEL_MIN_AVAILABLE",
    "LABEL_POD_GROUP",
    "LABEL_POD_GROUP_NAME",
    "LABEL_SUB_PRIORITY",
    "MATCH_POLICIES",
    "MATCH_POLICY_ALIAS",
    "MICROS_PER_SECOND",
    "MODES",
    "NON_STRICT",
    "ONCE_SATISFIED",
    "ONLY_WAITING",
    "PG_PREFIX",
    "POD_GROUP_API_VERSION",
    "POD_GROUP_KIND",
    "STRICT",
    "WAITING_AND_RUNNING",
    "ann_path",
    "format_duration",
    "format_time",
    "group_id_of",
    "label_path",
    "object_key",
    "seconds",
]

MICROS_PER_SECOND: Final = 1_000_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def ann_path(key: str) -> str:
    return f'metadata.annotations["{key}"]'


def label_path(key: str) -> str:
    return f'metadata.labels["{key}"]'


def object_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def group_id_of(gang_ids: tuple[str, ...]) -> str:
    """Gang group id: the sorted gang ids joined by ``,`` (a lone gang's group id is its own id)."""
    return ",".join(sorted(gang_ids))


def format_time(us: int | None) -> str | None:
    """RFC 3339 UTC text for a time in microseconds since the Unix epoch (exact; no clock read)."""
    if us is None:
        return None
    text = (_EPOCH + timedelta(microseconds=us)).isoformat()
    return text.replace("+00:00", "Z")


def format_duration(us: int) -> str:
    """Short human text for a duration in microseconds: ``"10m"``, ``"1h30m"``, ``"2.5s"``."""
    if us < 0:
        return "-" + format_duration(-us)
    if us % MICROS_PER_SECOND:
        return f"{us / MICROS_PER_SECOND:g}s"
    total = us // MICROS_PER_SECOND
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{h}h" if h else "", f"{m}m" if m else "", f"{s}s" if s or total == 0 else ""]
    return "".join(parts)
