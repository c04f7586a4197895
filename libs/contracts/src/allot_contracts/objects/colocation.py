"""Co-location configuration, typed: Koordinator's ``slo-controller-config`` ConfigMap.

Responsibility: read the configuration that drives batch/mid overcommit, CPU normalization and resource amplification
(the ConfigMap keys ``colocation-config``, ``cpu-normalization-config`` and ``resource-amplification-config``, each a
JSON document in Koordinator's shape, with ``nodeConfigs`` overriding the cluster strategy for the nodes their
``nodeSelector`` matches). Every malformed field is a ``FieldIssue`` with its path; keys that are read but not acted
on are warnings. The ``ClusterColocationProfile`` object is :mod:`allot_contracts.objects.colocation_profile`.

Numbers: percentages are integers; ratios (``resourceDiffThreshold``, normalization and amplification ratios) are
kept as exact decimal text with two places (``"1.20"``) so that decisions never carry floats.

Defaults are Koordinator's (``DefaultColocationStrategy``): disabled; metrics aggregated over 300 s and reported
every 60 s with windows 5m/10m/30m; CPU reclaim threshold 60 %, memory 65 %; calculate policies ``usage``; degrade
after 15 minutes without a fresh NodeMetric; updates suppressed unless a value moves by more than 10 % or 300 s have
passed; mid thresholds 100 %, mid unallocated 0 %, mid static reserved 0 %.
Pure: no IO, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Final, TypeVar

import msgspec

from allot_contracts.issues import (
    FieldIssue,
    checked_bool,
    checked_int,
    checked_object,
    checked_objects,
    not_acted_on,
    not_supported,
)
from allot_contracts.objects.meta import metadata_of
from allot_contracts.objects.selectors import LabelSelector, match_label_selector, parse_label_selector

__all__ = [
    "CONFIGMAP_NAME",
    "CONFIGMAP_NAMESPACE",
    "ColocationConfig",
    "ColocationStrategy",
    "ModelRatio",
    "NormalizationStrategy",
    "AmplificationStrategy",
    "is_slo_config",
    "parse_colocation_configmap",
    "parse_ratio",
]

CONFIGMAP_NAMESPACE: Final = "koordinator-system"
CONFIGMAP_NAME: Final = "slo-controller-config"
KEY_COLOCATION: Final = "colocation-config"
KEY_NORMALIZATION: Final = "cpu-normalization-config"
KEY_AMPLIFICATION: Final = "resource-amplification-config"
CALCULATE_POLICIES: Final = ("usage", "request", "maxUsageRequest")
_OTHER_KEYS: Final = {
    "resource-threshold-config": "QoS thresholds are the qos-enforcer's; not read by the overcommit calculation",
    "resource-qos-config": "QoS classes are the qos-enforcer's; not read by the overcommit calculation",
    "cpu-burst-config": "CPU burst is not acted on",
    "system-config": "system settings are not acted on",
    "host-application-config": "host applications are read from the NodeMetric; this key is not acted on",
}


class ColocationStrategy(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    metric_aggregate_duration_s: int = 300
    metric_report_interval_s: int = 60
    metric_aggregate_durations_s: tuple[int, ...] = (300, 600, 1800)
    cpu_reclaim_threshold_percent: int = 60
    memory_reclaim_threshold_percent: int = 65
    cpu_calculate_policy: str = "usage"
    memory_calculate_policy: str = "usage"
    degrade_time_minutes: int = 15
    update_time_threshold_s: int = 300
    resource_diff_threshold: str = "0.10"  # exact decimal text
    batch_cpu_threshold_percent: int | None = None
    batch_memory_threshold_percent: int | None = None
    mid_reclaim_mode: str = ""  # "" (default: from the NodeMetric) | "static"
    mid_cpu_threshold_percent: int = 100
    mid_memory_threshold_percent: int = 100
    mid_unallocated_percent: int = 0
    mid_static_cpu_reserved_percent: int = 0
    mid_static_memory_reserved_percent: int = 0


class ModelRatio(msgspec.Struct, frozen=True, kw_only=True):
    base: str | None = None
    hyper_thread: str | None = None
    turbo: str | None = None
    hyper_thread_turbo: str | None = None


class NormalizationStrategy(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    default_ratio: str | None = None
    ratio_model: tuple[tuple[str, ModelRatio], ...] = ()


class AmplificationStrategy(msgspec.Struct, frozen=True, kw_only=True):
    enable: bool = False
    ratios: tuple[tuple[str, str], ...] = ()  # resource -> ratio text


class ColocationConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The three strategies with their node overrides (``(selector, strategy)`` in order: the first match wins)."""

    strategy: ColocationStrategy = ColocationStrategy()
    node_strategies: tuple[tuple[LabelSelector, ColocationStrategy], ...] = ()
    normalization: NormalizationStrategy = NormalizationStrategy()
    node_normalization: tuple[tuple[LabelSelector, NormalizationStrategy], ...] = ()
    amplification: AmplificationStrategy = AmplificationStrategy()
    node_amplification: tuple[tuple[LabelSelector, AmplificationStrategy], ...] = ()

    def for_node(
        self, labels: Mapping[str, str]
    ) -> tuple[ColocationStrategy, NormalizationStrategy, AmplificationStrategy]:
        def pick(base: Any, overrides: tuple[tuple[LabelSelector, Any], ...]) -> Any:
            for selector, value in overrides:
                if match_label_selector(selector, labels):
                    return value
            return base

        return (
            pick(self.strategy, self.node_strategies),
            pick(self.normalization, self.node_normalization),
            pick(self.amplification, self.node_amplification),
        )


# --- numbers -----------------------------------------------------------------------------------------------------------
def parse_ratio(
    raw: Any, path: str, issues: list[FieldIssue], *, low: str = "0", high: str | None = None
) -> str | None:
    """A ratio (number or numeric text) as exact decimal text with two places; ``None`` after an issue."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        issues.append(FieldIssue(path=path, message="must be a number", value=str(raw)))
        return None
    try:
        value = Decimal(repr(raw) if isinstance(raw, float) else str(raw).strip())
    except InvalidOperation:
        issues.append(FieldIssue(path=path, message="must be a number", value=str(raw)))
        return None
    if not value.is_finite() or value < Decimal(low) or (high is not None and value > Decimal(high)):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        issues.append(FieldIssue(path=path, message=f"must be {bounds}", value=str(raw)))
        return None
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def _seconds_list(raw: Any, path: str, issues: list[FieldIssue]) -> tuple[int, ...] | None:
    from allot_contracts.objects.duration import parse_go_duration

    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        issues.append(FieldIssue(path=path, message="must be a non-empty list of durations such as 5m"))
        return None
    out: list[int] = []
    for i, d in enumerate(raw):
        us, error = parse_go_duration(d) if isinstance(d, str) else (None, "must be a duration such as 5m")
        if us is None or us <= 0 or us % 1_000_000:
            issues.append(
                FieldIssue(path=f"{path}[{i}]", message=error or "must be whole seconds", value=str(d))
            )
            continue
        out.append(us // 1_000_000)
    return tuple(sorted(set(out)))


# --- colocation-config ---------------------------------------------------------------------------------------------------
_STRATEGY_KEYS: Final = {
    "enable",
    "metricAggregateDurationSeconds",
    "metricReportIntervalSeconds",
    "metricAggregatePolicy",
    "metricMemoryCollectPolicy",
    "cpuReclaimThresholdPercent",
    "memoryReclaimThresholdPercent",
    "cpuCalculatePolicy",
    "memoryCalculatePolicy",
    "degradeTimeMinutes",
    "updateTimeThresholdSeconds",
    "resourceDiffThreshold",
    "batchCPUThresholdPercent",
    "batchMemoryThresholdPercent",
    "midReclaimMode",
    "midCPUThresholdPercent",
    "midMemoryThresholdPercent",
    "midUnallocatedPercent",
    "midStaticCPUReservedPercent",
    "midStaticMemoryReservedPercent",
}


class _StrategyReader:
    """Reads a colocation strategy object key by key (paths under the prefix ``p``); what it sets goes into
    ``fields`` (ColocationStrategy field -> value)."""

    def __init__(
        self, raw: Mapping[str, object], p: str, issues: list[FieldIssue], warnings: list[FieldIssue]
    ) -> None:
        self.raw = raw
        self.p = p
        self.issues = issues
        self.warnings = warnings
        self.fields: dict[str, object] = {}

    def put(self, field: str, value: object) -> None:
        if value is not None:
            self.fields[field] = value

    def integer(self, key: str, field: str, *, low: int, high: int | None = None) -> None:
        self.put(field, checked_int(self.raw.get(key), f"{self.p}{key}", self.issues, low=low, high=high))

    def metric(self) -> None:
        """The metric collection fields."""
        raw, p, issues = self.raw, self.p, self.issues
        self.put("enable", checked_bool(raw.get("enable"), f"{p}enable", issues))
        self.integer("metricAggregateDurationSeconds", "metric_aggregate_duration_s", low=1)
        self.integer("metricReportIntervalSeconds", "metric_report_interval_s", low=1)
        policy = raw.get("metricAggregatePolicy")
        if policy is not None:
            if not isinstance(policy, Mapping):
                issues.append(FieldIssue(path=f"{p}metricAggregatePolicy", message="must be an object"))
            else:
                self.put(
                    "metric_aggregate_durations_s",
                    _seconds_list(policy.get("durations"), f"{p}metricAggregatePolicy.durations", issues),
                )
        if raw.get("metricMemoryCollectPolicy") is not None:
            self.warnings.append(
                not_acted_on(
                    f"{p}metricMemoryCollectPolicy",
                    "node-reporter reports memory without page cache; the policy is not acted on",
                )
            )

    def reclaim(self) -> None:
        """The reclaim thresholds, the calculate policies and the degrade and update timings."""
        raw, p, issues = self.raw, self.p, self.issues
        self.integer(
            "cpuReclaimThresholdPercent", "cpu_reclaim_threshold_percent", low=0
        )  # above 100: a negative margin
        self.integer("memoryReclaimThresholdPercent", "memory_reclaim_threshold_percent", low=0)
        for key, field, allowed in (
            ("cpuCalculatePolicy", "cpu_calculate_policy", ("usage", "maxUsageRequest")),
            ("memoryCalculatePolicy", "memory_calculate_policy", CALCULATE_POLICIES),
        ):
            value = raw.get(key)
            if value is None:
                continue
            if value not in allowed:
                issues.append(not_supported(f"{p}{key}", allowed, value))
                continue
            self.fields[field] = value
        self.integer("degradeTimeMinutes", "degrade_time_minutes", low=1)
        self.integer("updateTimeThresholdSeconds", "update_time_threshold_s", low=1)
        if raw.get("resourceDiffThreshold") is not None:
            diff = parse_ratio(raw["resourceDiffThreshold"], f"{p}resourceDiffThreshold", issues, high="1")
            if diff is not None and Decimal(diff) <= 0:
                issues.append(FieldIssue(path=f"{p}resourceDiffThreshold", message="must be greater than 0"))
            else:
                self.put("resource_diff_threshold", diff)

    def batch_mid(self) -> None:
        """The batch thresholds and the mid tier: reclaim mode, thresholds and static reservations."""
        self.integer("batchCPUThresholdPercent", "batch_cpu_threshold_percent", low=0)
        self.integer("batchMemoryThresholdPercent", "batch_memory_threshold_percent", low=0)
        mode = self.raw.get("midReclaimMode")
        if mode is not None:
            if mode not in ("", "default", "static"):
                self.issues.append(
                    FieldIssue(
                        path=f"{self.p}midReclaimMode",
                        code="NotSupported",
                        message="must be default or static",
                    )
                )
            else:
                self.fields["mid_reclaim_mode"] = "static" if mode == "static" else ""
        for key, field in (
            ("midCPUThresholdPercent", "mid_cpu_threshold_percent"),
            ("midMemoryThresholdPercent", "mid_memory_threshold_percent"),
            ("midUnallocatedPercent", "mid_unallocated_percent"),
            ("midStaticCPUReservedPercent", "mid_static_cpu_reserved_percent"),
            ("midStaticMemoryReservedPercent", "mid_static_memory_reserved_percent"),
        ):
            self.integer(key, field, low=0, high=100)


def _section_prefix(raw: Any, path: str, issues: list[FieldIssue]) -> str | None:
    """The path prefix for the fields of the strategy section ``raw`` at ``path`` (empty at the top level);
    ``None``, with the issue recorded, when the section is not an object and its base is kept."""
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message="must be an object"))
        return None
    return f"{path}." if path else ""


def parse_strategy(
    raw: Any, path: str, issues: list[FieldIssue], warnings: list[FieldIssue], base: ColocationStrategy
) -> ColocationStrategy:
    """A (possibly partial) ColocationStrategy over ``base``: fields it sets win."""
    p = _section_prefix(raw, path, issues)
    if p is None:
        return base
    reader = _StrategyReader(raw, p, issues, warnings)
    reader.metric()
    reader.reclaim()
    reader.batch_mid()
    for key in sorted(set(raw) - _STRATEGY_KEYS - {"nodeConfigs", "nodeSelector", "name", "extensions"}):
        issues.append(
            FieldIssue(
                path=f"{p}{key}",
                code="NotSupported",
                message="unknown colocation strategy key; known keys: " + ", ".join(sorted(_STRATEGY_KEYS)),
            )
        )
    if raw.get("extensions"):
        warnings.append(not_acted_on(f"{p}extensions", "extensions are not acted on"))
    return msgspec.structs.replace(base, **reader.fields) if reader.fields else base


def _model_ratio(raw: Any, path: str, issues: list[FieldIssue]) -> ModelRatio:
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=path, message="must be an object"))
        return ModelRatio()
    out: dict[str, str | None] = {}
    for key, field in (
        ("baseRatio", "base"),
        ("hyperThreadEnabledRatio", "hyper_thread"),
        ("turboEnabledRatio", "turbo"),
        ("hyperThreadTurboEnabledRatio", "hyper_thread_turbo"),
    ):
        if raw.get(key) is not None:
            out[field] = parse_ratio(raw[key], f"{path}.{key}", issues, low="1", high="5")
    return ModelRatio(**out)


def _named(
    raw: Mapping[str, Any], key: str, prefix: str, message: str, issues: list[FieldIssue]
) -> Iterator[tuple[str, Any, str]]:
    """``(name, value, path)`` of each entry of the map under ``key``, by name (not a map: an issue saying
    ``message``)."""
    entries = raw.get(key)
    if entries is None:
        return
    if not isinstance(entries, Mapping):
        issues.append(FieldIssue(path=f"{prefix}{key}", message=message))
        return
    for name in sorted(entries, key=str):
        yield str(name), entries[name], f"{prefix}{key}[{name}]"


def parse_normalization(
    raw: Any, path: str, issues: list[FieldIssue], base: NormalizationStrategy
) -> NormalizationStrategy:
    p = _section_prefix(raw, path, issues)
    if p is None:
        return base
    enable = checked_bool(raw.get("enable"), f"{p}enable", issues)
    default = (
        parse_ratio(raw["defaultRatio"], f"{p}defaultRatio", issues, low="1", high="5")
        if raw.get("defaultRatio") is not None
        else base.default_ratio
    )
    models = dict(base.ratio_model)
    for model, value, where in _named(raw, "ratioModel", p, "must map CPU models to ratios", issues):
        models[model] = _model_ratio(value, where, issues)
    return NormalizationStrategy(
        enable=base.enable if enable is None else enable,
        default_ratio=default,
        ratio_model=tuple(sorted(models.items())),
    )


def parse_amplification(
    raw: Any, path: str, issues: list[FieldIssue], base: AmplificationStrategy
) -> AmplificationStrategy:
    p = _section_prefix(raw, path, issues)
    if p is None:
        return base
    enable = checked_bool(raw.get("enable"), f"{p}enable", issues)
    ratios = dict(base.ratios)
    for name, value, where in _named(
        raw, "resourceAmplificationRatio", p, "must map resources to ratios", issues
    ):
        got = parse_ratio(value, where, issues, low="0")
        if got is not None:
            ratios[name] = got
    return AmplificationStrategy(
        enable=base.enable if enable is None else enable, ratios=tuple(sorted(ratios.items()))
    )


def _node_configs(
    raw: Any, path: str, issues: list[FieldIssue], parse: Any
) -> tuple[tuple[LabelSelector, Any], ...]:
    out = []
    for where, entry in checked_objects(raw, path, issues):
        if entry.get("nodeSelector") is None:
            issues.append(FieldIssue(path=f"{where}.nodeSelector", code="Required", message="is required"))
            continue
        selector = parse_label_selector(entry.get("nodeSelector"), f"{where}.nodeSelector", issues)
        out.append((selector, parse(entry, where)))
    return tuple(out)


def _json_key(data: Mapping[str, Any], key: str, issues: list[FieldIssue]) -> Any:
    text = data.get(key)
    if text is None:
        return None
    path = f"data[{key}]"
    if isinstance(text, Mapping):  # written as YAML in a scenario file: already an object
        return text
    if not isinstance(text, str):
        issues.append(FieldIssue(path=path, message="must be a JSON document (text)"))
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        issues.append(FieldIssue(path=path, message=f"is not valid JSON: {exc}"))
        return None


_Section = TypeVar("_Section")


def _data_section(
    data: Mapping[str, object],
    key: str,
    issues: list[FieldIssue],
    base: _Section,
    parse: Callable[[Any, str, _Section], _Section],
) -> tuple[_Section, tuple[tuple[LabelSelector, Any], ...]]:
    """The JSON section ``key`` of the ConfigMap's data: its cluster-wide settings over ``base``, and its
    ``nodeConfigs``, each over the cluster-wide ones (``base`` and none when the section is absent or unreadable)."""
    raw = _json_key(data, key, issues)
    if raw is None:
        return base, ()
    path = f"data[{key}]"
    cluster = parse(raw, path, base)
    nodes = _node_configs(
        raw.get("nodeConfigs") if isinstance(raw, Mapping) else None,
        f"{path}.nodeConfigs",
        issues,
        lambda entry, where: parse(entry, where, cluster),
    )
    return cluster, nodes


def is_slo_config(namespace: object, name: object) -> bool:
    """Whether a ConfigMap is the co-location configuration: ``slo-controller-config`` in ``koordinator-system``,
    the only one Koordinator's slo-controller reads (its ``--config-namespace``); one of that name elsewhere is
    anybody's ConfigMap."""
    return namespace == CONFIGMAP_NAMESPACE and name == CONFIGMAP_NAME


def parse_colocation_configmap(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> ColocationConfig | None:
    """The co-location configuration of a ``slo-controller-config`` ConfigMap (None after any issue)."""
    before = len(issues)
    data = checked_object(manifest.get("data"), "data", issues, message="must be a map of key to text")
    for key in sorted(data, key=str):
        if key in _OTHER_KEYS:
            warnings.append(not_acted_on(f"data[{key}]", _OTHER_KEYS[key]))
        elif key not in (KEY_COLOCATION, KEY_NORMALIZATION, KEY_AMPLIFICATION):
            warnings.append(not_acted_on(f"data[{key}]", "unknown key; not acted on"))

    def strategy(raw: Any, where: str, base: ColocationStrategy) -> ColocationStrategy:
        return parse_strategy(raw, where, issues, warnings, base)

    def normalization(raw: Any, where: str, base: NormalizationStrategy) -> NormalizationStrategy:
        return parse_normalization(raw, where, issues, base)

    def amplification(raw: Any, where: str, base: AmplificationStrategy) -> AmplificationStrategy:
        return parse_amplification(raw, where, issues, base)

    cluster, nodes = _data_section(data, KEY_COLOCATION, issues, ColocationStrategy(), strategy)
    norm, norm_nodes = _data_section(data, KEY_NORMALIZATION, issues, NormalizationStrategy(), normalization)
    amp, amp_nodes = _data_section(data, KEY_AMPLIFICATION, issues, AmplificationStrategy(), amplification)
    if len(issues) > before:
        return None
    return ColocationConfig(
        strategy=cluster,
        node_strategies=nodes,
        normalization=norm,
        node_normalization=norm_nodes,
        amplification=amp,
        node_amplification=amp_nodes,
    )


def is_colocation_configmap(manifest: Mapping[str, Any]) -> bool:
    meta = metadata_of(manifest)
    return (
        manifest.get("apiVersion") == "v1"
        and manifest.get("kind") == "ConfigMap"
        and isinstance(meta, Mapping)
        and meta.get("name") == CONFIGMAP_NAME
    )
