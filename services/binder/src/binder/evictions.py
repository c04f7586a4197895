"""Evictions the binder carries out in Kubernetes mode (pure bookkeeping).

Two kinds of decisions evict a running pod, and the binder's worker (``binder.adapters.evict``) carries out each one
that is still outstanding through the Eviction API, recording the answer as producer ``binder.kube``:

- ``migration.eviction_requested`` (reservation-manager: a PodMigrationJob evicts its pod), answered by
  ``migration.evicted`` or ``migration.eviction_failed``; outstanding from its decision until its answer, or until
  the job is gone;
- ``pod.evicted`` (qos-enforcer: a BE pod under memory pressure; device-allocator: a pod preempted for a
  reservation), answered by ``pod.eviction_enacted``; outstanding from its decision until its answer, or until that
  life of the pod is gone (deleted, evicted by quota, re-created);
- ``quota.evicted`` (quota-manager: a lender takes back its min, or an over-use revoke), answered by
  ``quota.eviction_enacted`` or ``quota.eviction_enactment_failed``; outstanding from its decision until its answer,
  or until that life of the pod is gone (deleted, re-created).
"""

from __future__ import annotations

from allot_contracts.events import (
    Event,
    MigrationDeleted,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    MigrationRemoved,
    PodDeleted,
    PodEvicted,
    PodEvictionEnacted,
    PodSubmitted,
    QuotaEvicted,
)
from allot_contracts.events.enactment import QuotaEvictionEnacted, QuotaEvictionEnactmentFailed


class EvictionRequests:
    def __init__(self) -> None:
        self.requested: dict[str, MigrationEvictionRequested] = {}  # job -> its outstanding request
        self.pods: dict[str, PodEvicted] = {}  # pod -> its outstanding eviction
        self.quota: dict[str, QuotaEvicted] = {}  # pod -> its outstanding quota eviction

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
            case PodEvicted(pod=pod):
                self.pods[pod.key] = event
            case QuotaEvicted(pod=pod, uid=uid):
                self._answered(self.pods, pod.key, uid)
                self.quota[pod.key] = event
            case QuotaEvictionEnacted(pod=pod, uid=uid) | QuotaEvictionEnactmentFailed(pod=pod, uid=uid):
                self._answered(self.quota, pod.key, uid)
            case PodEvictionEnacted(pod=pod, uid=uid):
                self._answered(self.pods, pod.key, uid)
            case PodDeleted(pod=pod, uid=uid):
                self._answered(self.pods, pod.key, uid)
                self._answered(self.quota, pod.key, uid)
            case PodSubmitted(pod=pod, uid=uid):
                for requests in (self.pods, self.quota):
                    request = requests.get(pod.key)
                    if request is not None and request.uid != uid:
                        requests.pop(pod.key, None)  # a new life: the eviction was about the previous one
            case _:
                pass

    @staticmethod
    def _answered(requests: dict[str, PodEvicted] | dict[str, QuotaEvicted], key: str, uid: str) -> None:
        request = requests.get(key)
        if request is not None and (not uid or not request.uid or uid == request.uid):
            requests.pop(key, None)

    def outstanding(self) -> list[MigrationEvictionRequested]:
        return [self.requested[k] for k in sorted(self.requested)]

    def outstanding_pods(self) -> list[PodEvicted]:
        return [self.pods[k] for k in sorted(self.pods)]

    def outstanding_quota(self) -> list[QuotaEvicted]:
        return [self.quota[k] for k in sorted(self.quota)]
