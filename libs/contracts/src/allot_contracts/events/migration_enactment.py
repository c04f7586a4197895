"""The enactment ledger's outcomes for the descheduler's PodMigrationJobs (Kubernetes mode): the job object created
in the API server, and its status written back as the job progresses.

Recorded by reservation-manager's Kubernetes worker (producer ``reservation-manager.kube``) with the decision's event
id as causation and in ``decision`` and an event id derived from it, so a repeated call records nothing twice (the
pattern of :mod:`allot_contracts.events.enactment`). ``attempts`` counts the calls it took; ``reason`` and
``message`` are the API server's (``Invalid``, ``Forbidden``, ``AlreadyExists``, ``NotFound``, …).
"""

from __future__ import annotations

from typing import Final

from allot_contracts.events._base import JobEnactment, JobEnactmentFailed, JobObjectEnacted

# The decisions of reservation-manager that change what a PodMigrationJob's status shows: a status write carries out
# the latest of them (the worker that writes and the ledger that judges read this one set).
STATUS_DECISIONS: Final = frozenset(
    {
        "migration.pending",
        "migration.running",
        "migration.condition",
        "migration.succeeded",
        "migration.failed",
        "migration.aborted",
    }
)


class MigrationJobEnacted(JobObjectEnacted, frozen=True, kw_only=True, tag="migration.job_enacted.v1"):
    """The PodMigrationJob of a descheduler's ``migration.applied`` was created in the API server (``uid`` is the
    one it assigned; ``message`` says when it was there already, created by an earlier attempt)."""


class MigrationJobEnactmentFailed(
    JobEnactmentFailed, frozen=True, kw_only=True, tag="migration.job_enactment_failed.v1"
):
    """The API server refused to create that PodMigrationJob for good (``Invalid``, ``Forbidden``, ``AlreadyExists``
    for another object of that name, ``NotFound`` when the CRD is not installed). The job still runs in the log."""


class MigrationStatusEnacted(JobEnactment, frozen=True, kw_only=True, tag="migration.status_enacted.v1"):
    """The status a ``migration.*`` decision of the descheduler's job leads to (``phase``) was written on
    ``podmigrationjobs/{name}/status``."""

    phase: str = ""
    attempts: int = 1


class MigrationStatusEnactmentFailed(
    JobEnactmentFailed, frozen=True, kw_only=True, tag="migration.status_enactment_failed.v1"
):
    """That status patch was refused for good (``NotFound``: the object is gone; ``Invalid``, ``Forbidden``)."""


class MigrationDeletionEnacted(
    JobObjectEnacted, frozen=True, kw_only=True, tag="migration.deletion_enacted.v1"
):
    """The PodMigrationJob a ``migration.removed`` (``GarbageCollected``) scavenged was deleted from the API server
    (``DELETE podmigrationjobs/{name}`` with a uid precondition), or was gone already (``message`` says so: 404)."""


class MigrationDeletionEnactmentFailed(
    JobEnactmentFailed, frozen=True, kw_only=True, tag="migration.deletion_enactment_failed.v1"
):
    """That delete was refused for good (``Conflict``: the uid precondition failed; ``Invalid``, ``BadRequest``)."""


__all__ = [
    "MigrationDeletionEnacted",
    "MigrationDeletionEnactmentFailed",
    "MigrationJobEnacted",
    "MigrationJobEnactmentFailed",
    "MigrationStatusEnacted",
    "MigrationStatusEnactmentFailed",
]
