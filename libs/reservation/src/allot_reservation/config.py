"""reservation-manager configuration: the Reservation controller's GC period and Koordinator's
``MigrationControllerArgs`` (same names, same defaults).

```yaml
mode: standalone            # or kubernetes: how an eviction is carried out (set by the process from ALLOT_KUBE_MODE)
gcDurationSeconds: 86400    # finished reservations are removed this long after they finished
migration:
  defaultJobMode: ReservationFirst
  defaultJobTTL: 5m                # a job without spec.ttl fails with Timeout this long after its creation; 0: never
  maxMigratingGlobally: 0          # 0 / absent: no limit
  maxMigratingPerNode: 2
  maxMigratingPerNamespace: 0
  maxMigratingPerWorkload: null    # an integer or "10%"; absent: 1 / 2 / 10% by workload size, as upstream
  maxUnavailablePerWorkload: null  # likewise
  skipCheckExpectedReplicas: false
  evictQPS: 10                     # evictions per second (token bucket), and its burst
  evictBurst: 1
  objectLimiters:                  # per-workload (and optionally per-namespace) migration rate
    workload: {duration: 5m, maxMigrating: null, burst: 1}
  evictAllBarePods: false          # Kubernetes mode: pods without a controller are not evicted unless set
  evictLocalStoragePods: false     # pods with emptyDir / hostPath volumes are not evicted unless set
  evictSystemCriticalPods: false   # pods of priority >= 2000000000 are not evicted unless set
  ignorePvcPods: false             # set: pods with a persistentVolumeClaim are not evicted
  namespaces: {include: [], exclude: []}
  labelSelector: null              # only pods matching it may migrate
  priorityThreshold: null          # {value: N}: only pods with priority below N may migrate
```
Unknown keys are errors (a misspelled limit must not silently disable itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

import msgspec

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue, checked_bool
from allot_contracts.objects.selectors import LabelSelector, parse_label_selector
from allot_contracts.objects.times import DurationError, parse_duration_us
from allot_descheduling.migration_args import CONTROLLER_FIELDS

__all__ = ["ConfigError", "IntOrPercent", "Limiter", "MigrationConfig", "ReservationConfig"]

_MIGRATION_KEYS: Final = CONTROLLER_FIELDS  # upstream MigrationControllerArgs names


class ConfigError(InvalidConfig):
    pass


class IntOrPercent(msgspec.Struct, frozen=True):
    """An absolute number or a percentage of a workload's replicas (Kubernetes ``IntOrString``)."""

    value: int
    percent: bool = False

    def scaled(self, replicas: int) -> int:
        """Rounded down, as upstream's ``GetScaledValueFromIntOrPercent(…, roundUp=false)``."""
        return replicas * self.value // 100 if self.percent else self.value


class Limiter(msgspec.Struct, frozen=True):
    duration_us: int
    max_migrating: IntOrPercent | None = None
    burst: int = 1


class MigrationConfig(msgspec.Struct, frozen=True, kw_only=True):
    default_mode: str = "ReservationFirst"
    default_job_ttl_us: int = 300_000_000
    max_globally: int = 0
    max_per_node: int = 2
    max_per_namespace: int = 0
    max_per_workload: IntOrPercent | None = None
    max_unavailable_per_workload: IntOrPercent | None = None
    skip_check_expected_replicas: bool = False
    evict_qps: Fraction = Fraction(10)
    evict_burst: int = 1
    limiters: dict[str, Limiter] = msgspec.field(
        default_factory=lambda: {"workload": Limiter(duration_us=300_000_000)}
    )
    evict_all_bare_pods: bool = False
    evict_local_storage: bool = False
    evict_system_critical: bool = False
    ignore_pvc: bool = False
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    label_selector: LabelSelector | None = None
    priority_threshold: int | None = None


class ReservationConfig(msgspec.Struct, frozen=True, kw_only=True):
    mode: str = "standalone"
    gc_us: int = 86_400_000_000
    migration: MigrationConfig = MigrationConfig()

    @classmethod
    def from_dict(cls, raw: Mapping[str, object] | None) -> ReservationConfig:
        issues: list[FieldIssue] = []
        data = dict(raw or {})
        mode = data.pop("mode", "standalone")
        if mode not in ("standalone", "kubernetes"):
            issues.append(
                FieldIssue(path="mode", message="must be standalone or kubernetes", value=str(mode))
            )
        gc = _int(data.pop("gcDurationSeconds", 86400), "gcDurationSeconds", issues)
        migration = _migration(data.pop("migration", None) or {}, issues)
        for key in sorted(data):
            issues.append(FieldIssue(path=str(key), code="FieldValueNotSupported", message="unknown setting"))
        if issues:
            raise ConfigError(issues)
        return cls(mode=str(mode), gc_us=gc * 1_000_000, migration=migration)


def _int(raw: Any, path: str, issues: list[FieldIssue], minimum: int = 0) -> int:
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        issues.append(FieldIssue(path=path, message=f"must be an integer ≥ {minimum}", value=str(raw)))
        return 0
    return raw


def _int_or_percent(raw: Any, path: str, issues: list[FieldIssue]) -> IntOrPercent | None:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return IntOrPercent(raw)
    if isinstance(raw, str) and raw.endswith("%") and raw[:-1].isdigit():
        return IntOrPercent(int(raw[:-1]), True)
    issues.append(
        FieldIssue(path=path, message="must be a non-negative integer or a percentage such as '10%'")
    )
    return None


def _bool(raw: Any, path: str, issues: list[FieldIssue]) -> bool:
    return checked_bool(raw, path, issues) or False


def _limiters(raw: Any, issues: list[FieldIssue]) -> dict[str, Limiter]:
    if not isinstance(raw, dict):
        issues.append(
            FieldIssue(path="migration.objectLimiters", message="must be a map of workload / namespace")
        )
        return {}
    out: dict[str, Limiter] = {}
    for kind, spec in sorted(raw.items()):
        path = f"migration.objectLimiters.{kind}"
        if kind not in ("workload", "namespace"):
            issues.append(FieldIssue(path=path, code="NotSupported", message="must be workload or namespace"))
            continue
        if not isinstance(spec, dict):
            issues.append(FieldIssue(path=path, message="must be an object"))
            continue
        try:
            duration = parse_duration_us(spec.get("duration", "0s"))
        except DurationError as exc:
            issues.append(FieldIssue(path=f"{path}.duration", message=str(exc)))
            continue
        if duration:
            out[kind] = Limiter(
                duration_us=duration,
                max_migrating=_int_or_percent(spec.get("maxMigrating"), f"{path}.maxMigrating", issues),
                burst=_int(spec.get("burst"), f"{path}.burst", issues) or 1,
            )
    return out


def _migration(raw: Any, issues: list[FieldIssue]) -> MigrationConfig:
    if not isinstance(raw, dict):
        issues.append(FieldIssue(path="migration", message="must be an object"))
        return MigrationConfig()
    for key in sorted(set(raw) - _MIGRATION_KEYS):
        issues.append(
            FieldIssue(path=f"migration.{key}", code="FieldValueNotSupported", message="unknown setting")
        )
    mode = raw.get("defaultJobMode", "ReservationFirst")
    if mode not in ("ReservationFirst", "EvictDirectly"):
        issues.append(
            FieldIssue(path="migration.defaultJobMode", message="must be ReservationFirst or EvictDirectly")
        )
    default_ttl = 300_000_000
    ttl_raw = raw.get("defaultJobTTL")
    if ttl_raw is not None:
        try:
            default_ttl = parse_duration_us(str(ttl_raw))
        except DurationError as exc:
            issues.append(FieldIssue(path="migration.defaultJobTTL", message=str(exc), value=str(ttl_raw)))
    qps_raw = raw.get("evictQPS", 10)
    qps = Fraction(10)
    if isinstance(qps_raw, bool) or not isinstance(qps_raw, int | float | str):
        issues.append(FieldIssue(path="migration.evictQPS", message="must be a positive number"))
    else:
        try:
            qps = Fraction(str(qps_raw))
        except ValueError:
            issues.append(FieldIssue(path="migration.evictQPS", message="must be a positive number"))
        if qps <= 0:
            issues.append(FieldIssue(path="migration.evictQPS", message="must be a positive number"))
            qps = Fraction(10)
    ns = raw.get("namespaces") or {}
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    if not isinstance(ns, dict):
        issues.append(
            FieldIssue(path="migration.namespaces", message="must be {include: [...], exclude: [...]}")
        )
    else:
        include = tuple(str(v) for v in ns.get("include") or [])
        exclude = tuple(str(v) for v in ns.get("exclude") or [])
    selector = None
    if raw.get("labelSelector") is not None:
        selector = parse_label_selector(raw["labelSelector"], "migration.labelSelector", issues)
    threshold = None
    pt = raw.get("priorityThreshold")
    if pt is not None:
        if not isinstance(pt, dict) or not isinstance(pt.get("value"), int):
            issues.append(
                FieldIssue(path="migration.priorityThreshold", message="must be {value: <integer>}")
            )
        else:
            threshold = int(pt["value"])
    limiters = (
        _limiters(raw["objectLimiters"], issues)
        if raw.get("objectLimiters") is not None
        else MigrationConfig().limiters
    )
    return MigrationConfig(
        default_mode=str(mode),
        default_job_ttl_us=default_ttl,
        max_globally=_int(raw.get("maxMigratingGlobally"), "migration.maxMigratingGlobally", issues),
        max_per_node=_int(raw.get("maxMigratingPerNode", 2), "migration.maxMigratingPerNode", issues),
        max_per_namespace=_int(
            raw.get("maxMigratingPerNamespace"), "migration.maxMigratingPerNamespace", issues
        ),
        max_per_workload=_int_or_percent(
            raw.get("maxMigratingPerWorkload"), "migration.maxMigratingPerWorkload", issues
        ),
        max_unavailable_per_workload=_int_or_percent(
            raw.get("maxUnavailablePerWorkload"), "migration.maxUnavailablePerWorkload", issues
        ),
        skip_check_expected_replicas=_bool(
            raw.get("skipCheckExpectedReplicas"), "migration.skipCheckExpectedReplicas", issues
        ),
        evict_qps=qps,
        evict_burst=_int(raw.get("evictBurst", 1), "migration.evictBurst", issues, minimum=1) or 1,
        limiters=limiters,
        evict_all_bare_pods=_bool(raw.get("evictAllBarePods"), "migration.evictAllBarePods", issues),
        evict_local_storage=_bool(
            raw.get("evictLocalStoragePods"), "migration.evictLocalStoragePods", issues
        ),
        evict_system_critical=_bool(
            raw.get("evictSystemCriticalPods"), "migration.evictSystemCriticalPods", issues
        ),
        ignore_pvc=_bool(raw.get("ignorePvcPods"), "migration.ignorePvcPods", issues),
        include_namespaces=include,
        exclude_namespaces=exclude,
        label_selector=selector,
        priority_threshold=threshold,
    )
