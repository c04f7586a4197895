"""A descheduler profile's ``GPUDefrag`` args (Allot's plugin; the style of upstream's plugin args)::

    - name: GPUDefrag
      args:
        paused: false
        dryRun: true                  # the default: rounds record their plans and ask for no PodMigrationJob
        maxMigrationsPerPlan: 4       # pods one plan may move (bounds the search)
        maxPlansPerRound: 8           # waiting pods a round makes room for
        gangMigration: Skip           # Skip | Whole: for a gang whose members state no policy
                                      # (descheduler.allot.dev/gang-migration on the pods)
        evictableNamespaces: {include: [...], exclude: [...]}

The round's eviction limits (``maxNoOfPodsToEvictPerNode`` / ``PerNamespace`` / ``Total``) and the migration
controller's evictor filter apply as to LowNodeLoad. Pure."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, checked_object
from allot_descheduling.fields import boolean, integer, namespaces, unknown
from allot_descheduling.gangs import ANN_GANG_MIGRATION, gang_moves_whole, parse_gang_migration

__all__ = ["ANN_GANG_MIGRATION", "DefragArgs", "gang_moves_whole", "parse_defrag_args"]

_FIELDS: Final = frozenset(
    {
        "apiVersion",
        "kind",
        "paused",
        "dryRun",
        "maxMigrationsPerPlan",
        "maxPlansPerRound",
        "gangMigration",
        "evictableNamespaces",
    }
)


class DefragArgs(msgspec.Struct, frozen=True, kw_only=True):
    paused: bool = False
    dry_run: bool = True
    max_per_plan: int = 4
    max_plans: int = 8
    gang_whole: bool = False  # gangMigration: Whole
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()


def parse_defrag_args(raw: Any, path: str, issues: list[FieldIssue]) -> DefragArgs:
    data = checked_object(raw, path, issues)
    unknown(data, _FIELDS, f"{path}.", issues)
    gang_whole = parse_gang_migration(data, path, issues)
    include, exclude = namespaces(data.get("evictableNamespaces"), f"{path}.evictableNamespaces", issues)
    return DefragArgs(
        paused=boolean(data.get("paused"), f"{path}.paused", issues, False),
        dry_run=boolean(data.get("dryRun"), f"{path}.dryRun", issues, True),
        max_per_plan=integer(data.get("maxMigrationsPerPlan"), f"{path}.maxMigrationsPerPlan", issues, 4, 1),
        max_plans=integer(data.get("maxPlansPerRound"), f"{path}.maxPlansPerRound", issues, 8, 1),
        gang_whole=gang_whole,
        include_namespaces=include,
        exclude_namespaces=exclude,
    )
