"""Evictions the binder carries out in Kubernetes mode (pure bookkeeping).

reservation-manager decides ``migration.eviction_requested`` (a PodMigrationJob evicts its pod); the binder's worker
(``binder.adapters.evict``) calls the Eviction API for every request that is still outstanding and records the answer
as producer ``binder.kube``: ``migration.evicted`` or ``migration.eviction_failed``. A request is outstanding from
its decision until its answer, or until the job is gone.
"""

from __future__ import annotations

from allot_contracts.events import (
    Event,
    MigrationDeleted,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    MigrationRemoved,
)


class EvictionRequests:
    def __init__(self) -> None:
        self.requested: dict[str, MigrationEvictionRequested] = {}  # job -> its outstanding request

    def evolve(self, event: Event) -> None:
        match event:
            case MigrationEvictionRequested(job=job):
                self.requested[job.name] = event
            case (
                MigrationEvicted(job=job)
                | MigrationEvictionFailed(job=job)
                | MigrationRemoved(job=job)
                | MigrationDeleted(job=job)
            ):
                self.requested.pop(job.name, None)
            case _:
                pass

    def outstanding(self) -> list[MigrationEvictionRequested]:
        return [self.requested[k] for k in sorted(self.requested)]
