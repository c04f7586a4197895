"""What quota-manager does when Kubernetes refuses one of its evictions for good (docs/quota.md, "A refused
reclaim"; docs/kubernetes.md, the enactment ledger).

A ``quota.evicted`` frees the victim's charge at once, as the decision assumes the pod goes. In Kubernetes mode the
binder carries it out through the Eviction API and records the answer; ``quota.eviction_enactment_failed`` (a
PodDisruptionBudget that allows no disruption, two budgets, another final refusal) means the pod keeps running. Then,
from those recorded events only:

- the victim is charged to its quota again, as it was (the engine's accounting follows what runs);
- it is recorded ``quota.reclaim_blocked`` (why, the API server's words, the quota's use after it), which
  ``allot explain pod`` shows;
- it is not chosen again in this life, neither as an intra-quota preemption victim nor by over-use revoke: both
  pick other pods in its place (it still counts in its quota's used), or none.

The pod's life ending (``pod.deleted``, a new life) forgets all of it; ``quota.eviction_enacted`` ends the wait.
Pure state, folded in ``QuotaManager.evolve``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from allot_contracts.events import ObjectRef, QuotaReclaimBlocked
from allot_contracts.events.enactment import QuotaEvictionEnactmentFailed
from allot_contracts.objects.pod import Pod


@dataclass
class Evicting:
    spec: Pod
    node: str
    cause: str


@dataclass
class Reclaims:
    evicting: dict[str, Evicting] = field(default_factory=dict)  # pod -> what it was, until the answer
    blocked: set[str] = field(default_factory=set)  # pods whose eviction was refused (this life)
    owed: dict[str, QuotaReclaimBlocked] = field(default_factory=dict)  # recorded by the next decision

    def evicted(self, key: str, spec: Pod | None, node: str, cause: str) -> None:
        if spec is not None:
            self.evicting[key] = Evicting(spec=spec, node=node, cause=cause)

    def enacted(self, key: str) -> None:
        self.evicting.pop(key, None)

    def refused(self, event: QuotaEvictionEnactmentFailed) -> Evicting | None:
        """The victim to charge again (None when it is not waiting for this answer)."""
        held = self.evicting.pop(event.pod.key, None)
        if held is None or (event.uid and held.spec.uid and event.uid != held.spec.uid):
            return None
        self.blocked.add(event.pod.key)
        return held

    def owe(self, event: QuotaEvictionEnactmentFailed, held: Evicting, used: dict[str, str]) -> None:
        self.owed[event.pod.key] = QuotaReclaimBlocked(
            pod=event.pod,
            uid=event.uid or held.spec.uid,
            quota=event.quota,
            cause=held.cause,
            decision=event.decision,
            reason=event.reason,
            message=f"the eviction ({held.cause}) was refused by the API server and the pod keeps running, "
            f"charged to quota {event.quota} again; it is not chosen as a victim again: {event.reason}: "
            f"{event.message}",
            used={k: str(v) for k, v in sorted(used.items())},
        )

    def gone(self, key: str) -> None:
        """The pod's life ended (deleted, or a new life)."""
        self.evicting.pop(key, None)
        self.blocked.discard(key)
        self.owed.pop(key, None)

    def settled(self, pod: ObjectRef) -> None:
        self.owed.pop(pod.key, None)

    def digest(self) -> dict[str, object]:
        return {"evicting": sorted(self.evicting), "blocked": sorted(self.blocked), "owed": sorted(self.owed)}
