"""``LoadAwareSchedulingArgs``: the load-aware plugin's arguments in upstream's shape, read with field paths.

Responsibility: ``parse_args(raw, path, errors)`` reads the ``loadAware`` part of the placement configuration (camelCase
keys as in Koordinator's ``LoadAwareSchedulingArgs``; every key optional, upstream's defaults) into a frozen
``LoadAwareArgs``; every bad value is a ``FieldIssue`` with its path, an unknown key included.

Arguments read (upstream's meaning, see :mod:`allot_placement.loadaware` for how they act):
``filterExpiredNodeMetrics``, ``nodeMetricExpirationSeconds``, ``enableScheduleWhenNodeMetricsExpired``,
``resourceWeights``, ``dominantResourceWeight`` (0–100), ``usageThresholds``, ``prodUsageThresholds``,
``prodUsageIncludeSys``, ``scoreAccordingProdUsage``, ``estimator`` (the default one only),
``estimatedScalingFactors``, ``estimatedSecondsAfterPodScheduled``, ``estimatedSecondsAfterInitialized``,
``allowCustomizeEstimation``, ``aggregated`` and ``supportedResources``; plus Allot's ``enabled`` and ``weight`` (the
plugin's switch and its score weight in the profile).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, checked_bool, checked_int
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects import names as n
from allot_contracts.objects.duration import parse_go_duration
from allot_contracts.objects.nodemetric import AGGREGATION_TYPES

__all__ = ["ARGS_KEYS", "Aggregated", "Amounts", "LoadAwareArgs", "parse_args"]

Amounts = tuple[tuple[str, int], ...]


class Aggregated(msgspec.Struct, frozen=True, kw_only=True):
    usage_thresholds: Amounts = ()
    usage_aggregation_type: str = ""
    usage_aggregated_duration_s: int = 0
    score_aggregation_type: str = ""
    score_aggregated_duration_s: int = 0

    @property
    def filters(self) -> bool:
        return bool(self.usage_thresholds) and bool(self.usage_aggregation_type)

    @property
    def scores(self) -> bool:
        return bool(self.score_aggregation_type)


class LoadAwareArgs(msgspec.Struct, frozen=True, kw_only=True):
    """``LoadAwareSchedulingArgs`` with upstream's defaults; ``enabled`` and ``weight`` are the plugin's switch and
    score weight in the scheduler profile."""

    enabled: bool = True
    weight: int = 1
    filter_expired_node_metrics: bool = True
    node_metric_expiration_s: int = 180
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: Amounts = ((n.CPU, 1), (n.MEMORY, 1))
    dominant_resource_weight: int = 0
    usage_thresholds: Amounts = ((n.CPU, 65), (n.MEMORY, 95))
    prod_usage_thresholds: Amounts = ()
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimated_scaling_factors: Amounts = ((n.CPU, 85), (n.MEMORY, 70))
    estimated_seconds_after_pod_scheduled: int | None = None
    estimated_seconds_after_initialized: int | None = None
    allow_customize_estimation: bool = False
    aggregated: Aggregated = Aggregated()
    supported_resources: tuple[str, ...] = ()

    @property
    def resources(self) -> frozenset[str]:
        """The resources the plugin reads (upstream's resource vector): cpu, memory, every resource the arguments
        name, and ``supportedResources``. A node's own threshold for any other resource is skipped, as upstream."""
        names = {n.CPU, n.MEMORY, *self.supported_resources}
        for amounts in (
            self.usage_thresholds,
            self.prod_usage_thresholds,
            self.aggregated.usage_thresholds,
            self.resource_weights,
            self.estimated_scaling_factors,
        ):
            names.update(name for name, _ in amounts)
        return frozenset(names)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {
            "enabled": self.enabled,
            "weight": self.weight,
            "filterExpiredNodeMetrics": self.filter_expired_node_metrics,
            "nodeMetricExpirationSeconds": self.node_metric_expiration_s,
            "enableScheduleWhenNodeMetricsExpired": self.enable_schedule_when_node_metrics_expired,
            "resourceWeights": dict(self.resource_weights),
            "usageThresholds": dict(self.usage_thresholds),
            "prodUsageThresholds": dict(self.prod_usage_thresholds),
            "scoreAccordingProdUsage": self.score_according_prod_usage,
            "estimatedScalingFactors": dict(self.estimated_scaling_factors),
        }
        # the newer arguments only when set: the version of a configuration that does not use them stays the same
        if self.dominant_resource_weight:
            out["dominantResourceWeight"] = self.dominant_resource_weight
        if self.prod_usage_include_sys:
            out["prodUsageIncludeSys"] = True
        if self.estimated_seconds_after_pod_scheduled is not None:
            out["estimatedSecondsAfterPodScheduled"] = self.estimated_seconds_after_pod_scheduled
        if self.estimated_seconds_after_initialized is not None:
            out["estimatedSecondsAfterInitialized"] = self.estimated_seconds_after_initialized
        if self.allow_customize_estimation:
            out["allowCustomizeEstimation"] = True
        if self.supported_resources:
            out["supportedResources"] = list(self.supported_resources)
        a = self.aggregated
        if a != Aggregated():
            out["aggregated"] = {
                "usageThresholds": dict(a.usage_thresholds),
                "usageAggregationType": a.usage_aggregation_type,
                "usageAggregatedDuration": f"{a.usage_aggregated_duration_s}s",
                "scoreAggregationType": a.score_aggregation_type,
                "scoreAggregatedDuration": f"{a.score_aggregated_duration_s}s",
            }
        return out


ARGS_KEYS: Final = frozenset(  # the fields of upstream's LoadAwareSchedulingArgs
    {
        "filterExpiredNodeMetrics",
        "nodeMetricExpirationSeconds",
        "enableScheduleWhenNodeMetricsExpired",
        "resourceWeights",
        "dominantResourceWeight",
        "usageThresholds",
        "prodUsageThresholds",
        "prodUsageIncludeSys",
        "scoreAccordingProdUsage",
        "estimator",
        "estimatedScalingFactors",
        "estimatedSecondsAfterPodScheduled",
        "estimatedSecondsAfterInitialized",
        "allowCustomizeEstimation",
        "aggregated",
        "supportedResources",
    }
)
_KEYS: Final = {"enabled", "weight", *ARGS_KEYS}
_AGG_KEYS: Final = {
    "usageThresholds",
    "usageAggregationType",
    "usageAggregatedDuration",
    "scoreAggregationType",
    "scoreAggregatedDuration",
}


def _bool(raw: Any, path: str, errors: list[FieldIssue], default: bool) -> bool:
    got = checked_bool(raw, path, errors)
    return default if got is None else got


def _int(
    raw: Any, path: str, errors: list[FieldIssue], default: int, low: int = 0, high: int | None = None
) -> int:
    got = checked_int(raw, path, errors, low=low, high=high)
    return default if got is None else got


def _seconds(raw: Any, path: str, errors: list[FieldIssue]) -> int | None:
    """An optional number of seconds (upstream: a pointer, unset by default)."""
    if raw is None:
        return None
    value = _int(raw, path, errors, -1)
    return None if value < 0 else value


def _amounts(raw: Any, path: str, errors: list[FieldIssue], default: Amounts, high: int | None) -> Amounts:
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        errors.append(FieldIssue(path=path, message="must map resource names to integers"))
        return default
    return tuple((str(k), _int(raw[k], f"{path}[{k}]", errors, 0, 0, high)) for k in sorted(raw, key=str))


def _names(raw: Any, path: str, errors: list[FieldIssue]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        errors.append(FieldIssue(path=path, message="must be a list of resource names"))
        return ()
    return tuple(sorted(set(raw)))


def _agg_type(raw: Any, path: str, errors: list[FieldIssue]) -> str:
    if raw is None or raw == "":
        return ""
    if raw not in AGGREGATION_TYPES:
        errors.append(
            FieldIssue(
                path=path, code="NotSupported", message=f"must be one of {', '.join(AGGREGATION_TYPES)}"
            )
        )
        return ""
    return str(raw)


def _agg_duration(raw: Any, path: str, errors: list[FieldIssue]) -> int:
    if raw is None or raw == "" or raw == 0:
        return 0
    us, error = parse_go_duration(raw) if isinstance(raw, str) else (None, "must be a duration such as 5m")
    if us is None or us < 0 or us % 1_000_000:
        errors.append(FieldIssue(path=path, message=error or "must be whole seconds", value=str(raw)))
        return 0
    return us // 1_000_000


def _aggregated(raw: Any, p: str, errors: list[FieldIssue]) -> Aggregated:
    if raw is None:
        return Aggregated()
    if not isinstance(raw, Mapping):
        errors.append(FieldIssue(path=p, message="must be a mapping"))
        return Aggregated()
    for extra in sorted(set(raw) - _AGG_KEYS):
        errors.append(
            FieldIssue(path=f"{p}.{extra}", message=f"unknown key; supported: {', '.join(sorted(_AGG_KEYS))}")
        )
    return Aggregated(
        usage_thresholds=_amounts(raw.get("usageThresholds"), f"{p}.usageThresholds", errors, (), 100),
        usage_aggregation_type=_agg_type(
            raw.get("usageAggregationType"), f"{p}.usageAggregationType", errors
        ),
        usage_aggregated_duration_s=_agg_duration(
            raw.get("usageAggregatedDuration"), f"{p}.usageAggregatedDuration", errors
        ),
        score_aggregation_type=_agg_type(
            raw.get("scoreAggregationType"), f"{p}.scoreAggregationType", errors
        ),
        score_aggregated_duration_s=_agg_duration(
            raw.get("scoreAggregatedDuration"), f"{p}.scoreAggregatedDuration", errors
        ),
    )


def parse_args(raw: Any, path: str, errors: list[FieldIssue]) -> LoadAwareArgs:
    """``LoadAwareSchedulingArgs`` from their YAML/JSON shape (camelCase keys; every key optional)."""
    default = LoadAwareArgs()
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        errors.append(FieldIssue(path=path, message="must be a mapping"))
        return default
    for extra in sorted(set(raw) - _KEYS):
        errors.append(
            FieldIssue(path=f"{path}.{extra}", message=f"unknown key; supported: {', '.join(sorted(_KEYS))}")
        )
    if raw.get("estimator") not in (None, "", "default", "defaultEstimator"):
        errors.append(
            FieldIssue(path=f"{path}.estimator", code="NotSupported", message="only the default estimator")
        )
    factors = dict(
        _amounts(raw.get("estimatedScalingFactors"), f"{path}.estimatedScalingFactors", errors, (), 100)
    )
    for k, v in default.estimated_scaling_factors:  # upstream fills in the defaults it is not given
        factors.setdefault(k, v)
    dominant = _int(raw.get("dominantResourceWeight"), f"{path}.dominantResourceWeight", errors, 0, 0, 100)
    # upstream's default weights apply only when neither weights nor a dominant weight are given
    default_weights = default.resource_weights if not dominant else ()
    weights = _amounts(raw.get("resourceWeights"), f"{path}.resourceWeights", errors, default_weights, None)
    if raw.get("resourceWeights") is not None and not dominant and not any(w for _, w in weights):
        errors.append(
            FieldIssue(
                path=f"{path}.resourceWeights",
                message="needs at least one positive weight (or a dominantResourceWeight)",
            )
        )
        weights = default.resource_weights
    usage = raw.get("usageThresholds")
    return LoadAwareArgs(
        enabled=_bool(raw.get("enabled"), f"{path}.enabled", errors, True),
        weight=_int(raw.get("weight"), f"{path}.weight", errors, 1),
        filter_expired_node_metrics=_bool(
            raw.get("filterExpiredNodeMetrics"), f"{path}.filterExpiredNodeMetrics", errors, True
        ),
        node_metric_expiration_s=_int(
            raw.get("nodeMetricExpirationSeconds"), f"{path}.nodeMetricExpirationSeconds", errors, 180
        ),
        enable_schedule_when_node_metrics_expired=_bool(
            raw.get("enableScheduleWhenNodeMetricsExpired"),
            f"{path}.enableScheduleWhenNodeMetricsExpired",
            errors,
            False,
        ),
        resource_weights=weights,
        dominant_resource_weight=dominant,
        usage_thresholds=(
            default.usage_thresholds
            if usage is None or usage == {}
            else _amounts(usage, f"{path}.usageThresholds", errors, default.usage_thresholds, 100)
        ),
        prod_usage_thresholds=_amounts(
            raw.get("prodUsageThresholds"), f"{path}.prodUsageThresholds", errors, (), 100
        ),
        prod_usage_include_sys=_bool(
            raw.get("prodUsageIncludeSys"), f"{path}.prodUsageIncludeSys", errors, False
        ),
        score_according_prod_usage=_bool(
            raw.get("scoreAccordingProdUsage"), f"{path}.scoreAccordingProdUsage", errors, False
        ),
        estimated_scaling_factors=tuple(sorted(factors.items())),
        estimated_seconds_after_pod_scheduled=_seconds(
            raw.get("estimatedSecondsAfterPodScheduled"), f"{path}.estimatedSecondsAfterPodScheduled", errors
        ),
        estimated_seconds_after_initialized=_seconds(
            raw.get("estimatedSecondsAfterInitialized"), f"{path}.estimatedSecondsAfterInitialized", errors
        ),
        allow_customize_estimation=_bool(
            raw.get("allowCustomizeEstimation"), f"{path}.allowCustomizeEstimation", errors, False
        ),
        aggregated=_aggregated(raw.get("aggregated"), f"{path}.aggregated", errors),
        supported_resources=_names(raw.get("supportedResources"), f"{path}.supportedResources", errors),
    )
