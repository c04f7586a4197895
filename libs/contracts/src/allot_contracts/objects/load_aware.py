"""Koordinator's load-aware annotations, read at the door: a Node's own usage thresholds, a pod's own estimation.

Responsibility: read, with field paths, the annotations Koordinator's ``LoadAwareScheduling`` plugin takes from the
objects themselves (``apis/extension/load_aware.go`` upstream):

- Node ``scheduling.koordinator.sh/usage-thresholds`` (``CustomUsageThresholds``), JSON::

      {"usageThresholds": {"cpu": 50}, "prodUsageThresholds": {"cpu": 40},
       "aggregatedUsage": {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p95",
                           "usageAggregatedDuration": "5m"}}

  Each non-empty part replaces the plugin's for that node (the placement engine applies it). ``aggregatedUsage``
  counts only with both its thresholds and its aggregation type, as upstream.
- Pod ``scheduling.koordinator.sh/load-estimated-scaling-factors`` (JSON ``{"cpu": 90}``),
  ``.../load-estimated-seconds-after-pod-scheduled`` and ``.../load-estimated-seconds-after-initialized``
  (integers as text). They count only when the plugin's ``allowCustomizeEstimation`` is set.

Bad input: upstream ignores an annotation it cannot decode and uses the plugin's arguments. Allot does the same, but
never silently: every problem is a warning with its field path, saying that the annotation is ignored. An unknown
key inside the thresholds annotation is a warning too (the rest is used, as Go's JSON decoding does).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, invalid_annotation, not_acted_on
from allot_contracts.objects.annotations import decode_annotation
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.objects.nodemetric import AGGREGATION_TYPES

__all__ = [
    "ANN_ESTIMATED_SCALING_FACTORS",
    "ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED",
    "ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED",
    "ANN_USAGE_THRESHOLDS",
    "CustomAggregatedUsage",
    "CustomUsageThresholds",
    "LoadEstimation",
    "read_load_estimation",
    "read_usage_thresholds",
]

ANN_USAGE_THRESHOLDS: Final = "scheduling.koordinator.sh/usage-thresholds"
ANN_ESTIMATED_SCALING_FACTORS: Final = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: Final = (
    "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
)
ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED: Final = (
    "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
)

Amounts = tuple[tuple[str, int], ...]
_IGNORED: Final = "; the annotation is ignored (the plugin's arguments apply)"


class CustomAggregatedUsage(msgspec.Struct, frozen=True, kw_only=True):
    usage_thresholds: Amounts
    aggregation_type: str
    duration_s: int = 0  # 0: the longest window the NodeMetric has


class CustomUsageThresholds(msgspec.Struct, frozen=True, kw_only=True):
    """A node's own thresholds (percent, per resource); an empty part means "the plugin's"."""

    usage_thresholds: Amounts = ()
    prod_usage_thresholds: Amounts = ()
    aggregated: CustomAggregatedUsage | None = None


class LoadEstimation(msgspec.Struct, frozen=True, kw_only=True):
    """A pod's own estimation settings; a negative number of seconds means "the plugin's"."""

    scaling_factors: Amounts = ()
    seconds_after_pod_scheduled: int = -1
    seconds_after_initialized: int = -1


def _ignored(key: str, suffix: str, message: str, value: str = "") -> FieldIssue:
    """An annotation (or a part of it at ``suffix``) that is ignored: the plugin's arguments apply."""
    return invalid_annotation(annotation_path(key, suffix), f"{message}{_IGNORED}", value=value)


def _amounts(raw: Any, key: str, suffix: str, high: int | None, problems: list[FieldIssue]) -> Amounts:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        problems.append(_ignored(key, suffix, "must map resource names to integers"))
        return ()
    out: list[tuple[str, int]] = []
    bounds = f"between 0 and {high}" if high is not None else ">= 0"
    for name in sorted(raw, key=str):
        value = raw[name]
        if (
            not isinstance(name, str)
            or not name
            or isinstance(value, bool)
            or not isinstance(value, int)
            or value < 0
            or (high is not None and value > high)
        ):
            problems.append(
                _ignored(
                    key,
                    f"{suffix}[{name}]",
                    f"must be an integer {bounds}",
                    str(value),
                )
            )
            continue
        out.append((name, value))
    return tuple(out)


def _unknown(
    value: Mapping[str, Any], allowed: tuple[str, ...], key: str, suffix: str, warnings: list[FieldIssue]
) -> None:
    for extra in sorted(set(value) - set(allowed), key=str):
        warnings.append(
            not_acted_on(
                annotation_path(key, f"{suffix}.{extra}"),
                f"unknown key, not read; supported: {', '.join(allowed)}",
            )
        )


def read_usage_thresholds(
    annotations: Mapping[str, Any], warnings: list[FieldIssue]
) -> CustomUsageThresholds | None:
    """A Node's ``usage-thresholds`` annotation; ``None`` when absent, empty or ignored (with warnings saying why)."""
    key = ANN_USAGE_THRESHOLDS
    raw = annotations.get(key)
    if raw is None or raw == "":
        return None
    value = decode_annotation(annotations, key, warnings, _IGNORED)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        warnings.append(_ignored(key, "", "must be an object"))
        return None
    _unknown(value, ("usageThresholds", "prodUsageThresholds", "aggregatedUsage"), key, "", warnings)
    problems: list[FieldIssue] = []
    usage = _amounts(value.get("usageThresholds"), key, ".usageThresholds", 100, problems)
    prod = _amounts(value.get("prodUsageThresholds"), key, ".prodUsageThresholds", 100, problems)
    aggregated = _aggregated(value.get("aggregatedUsage"), key, problems, warnings)
    if problems:
        warnings.extend(problems)
        return None
    if not usage and not prod and aggregated is None:
        return None
    return CustomUsageThresholds(usage_thresholds=usage, prod_usage_thresholds=prod, aggregated=aggregated)


def _aggregated(
    raw: Any, key: str, problems: list[FieldIssue], warnings: list[FieldIssue]
) -> CustomAggregatedUsage | None:
    if raw is None:
        return None
    suffix = ".aggregatedUsage"
    if not isinstance(raw, Mapping):
        problems.append(_ignored(key, suffix, "must be an object"))
        return None
    _unknown(
        raw, ("usageThresholds", "usageAggregationType", "usageAggregatedDuration"), key, suffix, warnings
    )
    before = len(problems)
    thresholds = _amounts(raw.get("usageThresholds"), key, f"{suffix}.usageThresholds", 100, problems)
    kind = raw.get("usageAggregationType")
    if kind not in (None, "") and kind not in AGGREGATION_TYPES:
        problems.append(
            _ignored(
                key,
                f"{suffix}.usageAggregationType",
                f"must be one of {', '.join(AGGREGATION_TYPES)}",
                str(kind),
            )
        )
        kind = ""
    duration_s = 0
    duration = raw.get("usageAggregatedDuration")
    if duration not in (None, "", 0):
        us, error = (
            parse_go_duration(duration)
            if isinstance(duration, str)
            else (None, "must be a duration such as 5m")
        )
        if us is None or us < 0 or us % 1_000_000:
            problems.append(
                _ignored(
                    key,
                    f"{suffix}.usageAggregatedDuration",
                    f"{error or 'must be whole seconds'}",
                    str(duration),
                )
            )
        else:
            duration_s = us // 1_000_000
    if len(problems) > before:
        return None
    if not thresholds or not kind:
        warnings.append(
            not_acted_on(
                annotation_path(key, suffix),
                "counts only with both usageThresholds and usageAggregationType: the plugin's aggregated "
                "thresholds apply",
            )
        )
        return None
    return CustomAggregatedUsage(
        usage_thresholds=thresholds, aggregation_type=str(kind), duration_s=duration_s
    )


def _seconds(annotations: Mapping[str, Any], key: str, warnings: list[FieldIssue]) -> int:
    raw = annotations.get(key)
    if raw is None or raw == "":
        return -1
    text = str(raw).strip() if isinstance(raw, (str, int)) and not isinstance(raw, bool) else None
    try:
        value = int(text, 10) if text is not None else None
    except ValueError:
        value = None
    if value is None:
        warnings.append(
            _ignored(
                key,
                "",
                "must be a whole number of seconds",
                str(raw),
            )
        )
        return -1
    if value < 0:
        warnings.append(
            not_acted_on(annotation_path(key), "negative: the plugin's argument applies", value=str(raw))
        )
        return -1
    return value


def read_load_estimation(annotations: Mapping[str, Any], warnings: list[FieldIssue]) -> LoadEstimation | None:
    """A pod's own estimation annotations; ``None`` when it sets none (or none that can be read)."""
    factors: Amounts = ()
    raw = annotations.get(ANN_ESTIMATED_SCALING_FACTORS)
    if raw is not None and raw != "":
        value = decode_annotation(annotations, ANN_ESTIMATED_SCALING_FACTORS, warnings, _IGNORED)
        if value is not None:
            problems: list[FieldIssue] = []
            factors = _amounts(value, ANN_ESTIMATED_SCALING_FACTORS, "", None, problems)
            if problems:
                warnings.extend(problems)
                factors = ()
    after_scheduled = _seconds(annotations, ANN_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED, warnings)
    after_initialized = _seconds(annotations, ANN_ESTIMATED_SECONDS_AFTER_INITIALIZED, warnings)
    if not factors and after_scheduled < 0 and after_initialized < 0:
        return None
    return LoadEstimation(
        scaling_factors=factors,
        seconds_after_pod_scheduled=after_scheduled,
        seconds_after_initialized=after_initialized,
    )
