"""A descheduler profile's ``MigrationController`` args, as upstream's ``MigrationControllerArgs``.

Upstream's MigrationController is the profile's evict plugin and the controller of every PodMigrationJob; Allot's is
reservation-manager's (its ``migration:`` settings, the same names). So the args a ``DeschedulerConfiguration``
carries serve twice:

- the descheduler's own jobs: ``defaultJobMode`` / ``defaultJobTTL`` (else the migration controller's defaults),
  ``evictLocalStoragePods`` / ``evictSystemCriticalPods`` (narrow the evictor filter of its rounds) and ``dryRun``
  (rounds ask for no job, as upstream's dry-run controller creates none);
- the migration controller's settings (``controller``): every arg reservation-manager's ``migration:`` reads, which
  the host uses when its own config has no ``migration:`` key.

Upstream args about how its controller runs (``maxConcurrentReconciles``, ``evictionPolicy``, ``schedulerNames``,
``defaultDeleteOptions``, ``arbitrationArgs``, ``skipEvictionGates``, ``evictFailedBarePods``, ``nodeFit``,
``nodeSelector``) are accepted and not acted on (docs/descheduling.md). Pure.
"""

from __future__ import annotations

from typing import Final

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.migration import EVICT_DIRECTLY, RESERVATION_FIRST
from allot_descheduling.fields import boolean, duration, one_of, unknown

__all__ = ["CONTROLLER_FIELDS", "MigrationArgs", "NOT_ACTED", "parse_migration_args"]

# reservation-manager's migration: settings (allot_reservation.config), upstream's names
CONTROLLER_FIELDS: Final = frozenset(
    {
        "defaultJobMode",
        "defaultJobTTL",
        "maxMigratingGlobally",
        "maxMigratingPerNode",
        "maxMigratingPerNamespace",
        "maxMigratingPerWorkload",
        "maxUnavailablePerWorkload",
        "skipCheckExpectedReplicas",
        "evictQPS",
        "evictBurst",
        "objectLimiters",
        "evictAllBarePods",
        "evictLocalStoragePods",
        "evictSystemCriticalPods",
        "ignorePvcPods",
        "namespaces",
        "labelSelector",
        "priorityThreshold",
    }
)
NOT_ACTED: Final = frozenset(
    {
        "maxConcurrentReconciles",
        "evictFailedBarePods",
        "nodeFit",
        "nodeSelector",
        "skipEvictionGates",
        "schedulerNames",
        "evictionPolicy",
        "defaultDeleteOptions",
        "arbitrationArgs",
    }
)
_FIELDS: Final = CONTROLLER_FIELDS | NOT_ACTED | {"apiVersion", "kind", "dryRun"}


class MigrationArgs(msgspec.Struct, frozen=True, kw_only=True):
    job_mode: str = ""  # "": the migration controller's defaultJobMode
    job_ttl_us: int = 0  # 0: the migration controller's defaultJobTTL
    evict_local_storage: bool = False
    evict_system_critical: bool = False
    dry_run: bool = False
    controller: dict[str, object] = {}  # the migration controller's settings these args give


def parse_migration_args(raw: JsonObject, path: str, issues: list[FieldIssue]) -> MigrationArgs:
    """The args at ``path`` (``…pluginConfig[i].args``); every problem is an issue with its path."""
    unknown(raw, _FIELDS, f"{path}.", issues)
    mode = raw.get("defaultJobMode") or ""
    modes = ("", RESERVATION_FIRST, EVICT_DIRECTLY)
    if not one_of(
        mode, modes, f"{path}.defaultJobMode", issues, f"must be {RESERVATION_FIRST} or {EVICT_DIRECTLY}"
    ):
        mode = ""
    return MigrationArgs(
        job_mode=str(mode),
        job_ttl_us=duration(raw.get("defaultJobTTL"), f"{path}.defaultJobTTL", issues, 0),
        evict_local_storage=boolean(
            raw.get("evictLocalStoragePods"), f"{path}.evictLocalStoragePods", issues, False
        ),
        evict_system_critical=boolean(
            raw.get("evictSystemCriticalPods"), f"{path}.evictSystemCriticalPods", issues, False
        ),
        dry_run=boolean(raw.get("dryRun"), f"{path}.dryRun", issues, False),
        controller={k: v for k, v in sorted(raw.items()) if k in CONTROLLER_FIELDS},
    )
