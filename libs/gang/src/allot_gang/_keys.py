"""Annotation and label keys, field paths, ids and time helpers shared by the gang modules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

GANG_PREFIX: Final = "gang.scheduling.koordinator.sh/"
ANN_NAME: Final = GANG_PREFIX + "name"
ANN_MIN_AVAILABLE: Final = GANG_PREFIX + "min-available"
ANN_TOTAL_NUMBER: Final = GANG_PREFIX + "total-number"
ANN_MODE: Final = GANG_PREFIX + "mode"
ANN_WAITING_TIME: Final = GANG_PREFIX + "waiting-time"
ANN_GROUPS: Final = GANG_PREFIX + "groups"
ANN_MATCH_POLICY: Final = GANG_PREFIX + "match-policy"
ANN_TIMEOUT: Final = GANG_PREFIX + "timeout"

PG_PREFIX: Final = "pod-group.scheduling.sigs.k8s.io"
LABEL_POD_GROUP: Final = PG_PREFIX
LABEL_POD_GROUP_NAME: Final = PG_PREFIX + "/name"
LABEL_MIN_AVAILABLE: Final = PG_PREFIX + "/min-available"
MATCH_POLICY_ALIAS: Final = PG_PREFIX + "/match-policy"

LABEL_SUB_PRIORITY: Final = "koordinator.sh/priority"

POD_GROUP_API_VERSION: Final = "scheduling.sigs.k8s.io/v1alpha1"
POD_GROUP_KIND: Final = "PodGroup"

STRICT: Final = "Strict"
NON_STRICT: Final = "NonStrict"
MODES: Final = (STRICT, NON_STRICT)

ONCE_SATISFIED: Final = "once-satisfied"
ONLY_WAITING: Final = "only-waiting"
WAITING_AND_RUNNING: Final = "waiting-and-running"
MATCH_POLICIES: Final = (ONCE_SATISFIED, ONLY_WAITING, WAITING_AND_RUNNING)

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


def seconds(n: int) -> int:
    """``n`` seconds in microseconds, the engine's unit of time."""
    return n * MICROS_PER_SECOND


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
