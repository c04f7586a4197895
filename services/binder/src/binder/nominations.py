"""``status.nominatedNodeName`` of preemptors (Kubernetes mode), folded from the recorded decisions (pure).

After a preemption (``preemption.decided``) kube-scheduler and Koordinator set ``status.nominatedNodeName`` on the
preemptor, so other schedulers and the cluster autoscaler see the pending claim on that node; it is cleared when the
pod is placed or gives up. This follows the same decisions device-allocator's nominations follow
(``device_allocator.nominations``): a job's members are nominated to their nodes until the job is placed
(``pod.placed``, ``gang.group_placed``), a member goes away (deleted, evicted by quota, rejected), a victim's
eviction is refused for good, or an attempt fails again with every victim gone (except while it is held for a
preemptor or its victims are still leaving). Each change is *desired state* for the pod: the node, or None (clear).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from allot_contracts.events import (
    Event,
    GangGroupPlaced,
    GangGroupUnschedulable,
    PodDeleted,
    PodEvictionEnacted,
    PodPlaced,
    PodRejected,
    PodUnschedulable,
    PreemptionDecided,
    QuotaEvicted,
    QuotaGroupWaiting,
    QuotaWaiting,
)

KEEP = frozenset(
    {"PreemptionInProgress", "HeldForPreemptor", "HeldForGang"}
)  # failures that keep a nomination


@dataclass
class Job:
    nodes: dict[str, str]  # member -> nominated node
    pending: set[str] = field(default_factory=set)  # victims not gone yet


class Nominations:
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            "preemption.decided",
            "pod.placed",
            "gang.group_placed",
            "pod.deleted",
            "quota.evicted",
            "pod.rejected",
            "pod.eviction_enacted",
            "pod.unschedulable",
            "gang.group_unschedulable",
            "quota.waiting",
            "quota.group_waiting",
        }
    )

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}  # "pod:<ns/name>" or "gang:<group>" -> its nomination

    def fold(self, event: Event) -> dict[str, str | None]:
        """Fold one event; the pods whose ``nominatedNodeName`` changes: pod -> node, or None to clear it."""
        match event:
            case PreemptionDecided(job=name, gang=gang, nominated=nodes, victims=victims):
                key = f"{'gang' if gang else 'pod'}:{name}"
                before = self._end(key)
                self.jobs[key] = Job(nodes=dict(nodes), pending={v.pod.key for v in victims})
                return {**before, **nodes}
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod) | PodRejected(pod=pod):
                changes: dict[str, str | None] = {}
                for key, held in list(self.jobs.items()):
                    held.pending.discard(pod.key)
                    if pod.key in held.nodes:
                        changes |= self._end(key)
                return changes
            case PodEvictionEnacted(pod=pod, evicted=False):
                ended = [key for key, held in self.jobs.items() if pod.key in held.pending]
                return {member: node for key in ended for member, node in self._end(key).items()}
            case PodPlaced(pod=pod):
                return self._end(f"pod:{pod.key}")
            case GangGroupPlaced(group=group):
                return self._end(f"gang:{group}")
            case PodUnschedulable(pod=pod, codes=codes):
                return self._failed(f"pod:{pod.key}", codes)
            case GangGroupUnschedulable(group=group, codes=codes):
                return self._failed(f"gang:{group}", codes)
            case QuotaWaiting(pod=pod):
                return self._failed(f"pod:{pod.key}", [])
            case QuotaGroupWaiting(group=group):
                return self._failed(f"gang:{group}", [])
            case _:
                return {}

    def _failed(self, key: str, codes: list[str]) -> dict[str, str | None]:
        job = self.jobs.get(key)
        if job is None or job.pending or KEEP & set(codes):
            return {}
        return self._end(key)  # every victim is gone and it still failed: the nomination lapses

    def _end(self, key: str) -> dict[str, str | None]:
        job = self.jobs.pop(key, None)
        return dict.fromkeys(job.nodes) if job is not None else {}

    def nominated(self) -> dict[str, str]:
        """Every pod nominated now: pod -> node."""
        return {pod: node for job in self.jobs.values() for pod, node in job.nodes.items()}
