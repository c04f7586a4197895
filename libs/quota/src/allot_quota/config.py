"""Engine configuration: Koordinator's ElasticQuota plugin arguments plus the feature gates that change quota maths.

``QuotaConfig.from_dict`` accepts the upstream argument names (camelCase) with the upstream defaults, and a
``featureGates`` map; unknown keys and wrongly typed values raise :class:`QuotaConfigError` naming the key, so a typo in a
config file is never silently ignored. ``to_dict`` writes the same shape back (durations as ``"120s"``), which is
what the quota-manager records with its decisions so a replay runs with the configuration of the time.

Where our defaults differ from upstream's feature-gate defaults (not its arguments) it is on purpose and
documented in ``docs/quota.md``: ``MultiQuotaTree`` is on (ElasticQuotaProfile trees work out of the box) and
``ElasticQuotaEnableUpdateResourceKey`` is on (a child's max keys must be a subset of its parent's, not equal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.quantity import to_canonical
from allot_contracts.resources import ResourceList, format_resource_list

__all__ = ["QuotaConfig", "QuotaConfigError", "parse_duration"]

_MAX_INT64: Final = 2**63 - 1
_CORES_DEFAULT_MAX: Final = _MAX_INT64 // 5


class QuotaConfigError(InvalidConfig):
    """A quota config that cannot be loaded; every issue names its key."""


def _builtin_max() -> ResourceList:
    # MaxInt64/5 of cpu (cores, so ×1000 in millicores) and memory (bytes).
    return {"cpu": _CORES_DEFAULT_MAX * 1000, "memory": _CORES_DEFAULT_MAX}


_DURATION: Final = re.compile(r"(\d+)(h|ms|m|s)")
_UNIT_SECONDS: Final = {"h": 3600, "m": 60, "s": 1}


def parse_duration(value: Any, key: str) -> int:
    """Whole seconds from an int or a Go-style duration string (``"120s"``, ``"2m"``, ``"1h30m"``)."""
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{key}: duration must not be negative")
        return value
    if isinstance(value, str) and value:
        pos, total_ms = 0, 0
        for m in _DURATION.finditer(value):
            if m.start() != pos:
                break
            n, unit = int(m.group(1)), m.group(2)
            total_ms += n if unit == "ms" else n * _UNIT_SECONDS[unit] * 1000
            pos = m.end()
        if pos == len(value):
            return total_ms // 1000
    raise ValueError(
        f"{key}: {value!r} is not a duration (e.g. '120s', '2m', '1h30m' or an integer of seconds)"
    )


def _format_duration(seconds: int) -> str:
    return f"{seconds}s"


_FEATURES: Final = {
    "ElasticQuotaGuaranteeUsage": "enable_guarantee",
    "DisableDefaultQuota": "disable_default_quota",
    "MultiQuotaTree": "multi_quota_tree",
    "ElasticQuotaEnableUpdateResourceKey": "update_resource_key",
}
_ARGS: Final = {
    "enableRuntimeQuota": "enable_runtime_quota",
    "enableMinQuotaScale": "enable_min_quota_scale",
    "enableCheckParentQuota": "enable_check_parent_quota",
    "monitorAllQuotas": "monitor_all_quotas",
    "disableDefaultQuotaPreemption": "disable_default_quota_preemption",
    "quotaGroupNamespace": "quota_group_namespace",
    "delayEvictTime": "delay_evict_seconds",
    "revokePodInterval": "revoke_pod_interval_seconds",
    "systemQuotaGroupMax": "system_quota_max",
    "defaultQuotaGroupMax": "default_quota_max",
    "version": "version",
}


@dataclass(frozen=True)
class QuotaConfig:
    version: int = 1
    enable_runtime_quota: bool = True
    enable_min_quota_scale: bool = True
    enable_check_parent_quota: bool = False
    monitor_all_quotas: bool = False
    disable_default_quota_preemption: bool = True
    quota_group_namespace: str = "koordinator-system"
    delay_evict_seconds: int = 120
    revoke_pod_interval_seconds: int = 1
    system_quota_max: ResourceList = field(default_factory=_builtin_max)
    default_quota_max: ResourceList = field(default_factory=_builtin_max)
    # feature gates
    enable_guarantee: bool = False
    disable_default_quota: bool = False
    multi_quota_tree: bool = True
    update_resource_key: bool = True

    @classmethod
    def from_dict(cls, data: Any = None) -> QuotaConfig:
        """The config, or :class:`QuotaConfigError` naming every refused key and why."""
        if data is not None and not isinstance(data, dict):
            raise QuotaConfigError([FieldIssue(path="", message="the quota config must be a mapping")])
        data = dict(data or {})
        issues: list[FieldIssue] = []
        kwargs: dict[str, Any] = {}
        gates = data.pop("featureGates", None) or {}
        for key in sorted(set(data) - set(_ARGS), key=str):
            issues.append(
                FieldIssue(
                    path=str(key),
                    code="FieldValueNotSupported",
                    message=f"unknown quota config key; supported: {', '.join(sorted([*_ARGS, 'featureGates']))}",
                )
            )
        if not isinstance(gates, dict):
            issues.append(FieldIssue(path="featureGates", message="expected a map of gate name to boolean"))
            gates = {}
        defaults = cls()
        for key, value in data.items():
            if key in _ARGS:
                attr = _ARGS[key]
                try:
                    kwargs[attr] = _convert(key, value, getattr(defaults, attr))
                except ValueError as exc:
                    issues.append(FieldIssue(path=key, message=str(exc).removeprefix(f"{key}: ")))
        for key, value in gates.items():
            if key not in _FEATURES:
                issues.append(
                    FieldIssue(
                        path=f"featureGates.{key}",
                        code="FieldValueNotSupported",
                        message=f"unknown feature gate; supported: {', '.join(sorted(_FEATURES))}",
                    )
                )
            elif not isinstance(value, bool):
                issues.append(
                    FieldIssue(path=f"featureGates.{key}", message=f"expected true or false, got {value!r}")
                )
            else:
                kwargs[_FEATURES[key]] = value
        if issues:
            raise QuotaConfigError(issues)
        return cls(**kwargs)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {}
        for key, attr in _ARGS.items():
            value = getattr(self, attr)
            if attr in ("delay_evict_seconds", "revoke_pod_interval_seconds"):
                value = _format_duration(value)
            elif isinstance(value, dict):
                value = format_resource_list(value)
            out[key] = value
        out["featureGates"] = {key: getattr(self, attr) for key, attr in sorted(_FEATURES.items())}
        return out


def _convert(key: str, value: Any, default: Any) -> Any:
    if key in ("delayEvictTime", "revokePodInterval"):
        return parse_duration(value, key)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{key}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{key}: expected an integer, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{key}: expected a non-empty string, got {value!r}")
        return value
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected a ResourceList map, got {value!r}")
    try:
        return {str(k): to_canonical(str(k), v) for k, v in value.items()}
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from exc
