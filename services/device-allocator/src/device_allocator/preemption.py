"""Job-level preemption: the victim search (upstream: Coscheduling's job preemption, Koordinator v1.6, on
kube-scheduler's DefaultPreemption semantics). Pure: the engine is changed while trying and restored before returning.

A *job* is a gang group, or a plain pod as a job of one. It may preempt when none of its members has
``preemptionPolicy: Never``; its priority is its lowest member's. The search:

1. *Victim units.* A plain pod is a unit of its own; the placed members of one gang form one unit (a gang is evicted
   whole or not at all, so none is left running short of members). A unit may be a victim only if every pod of it
   has a strictly lower priority than the job and may be preempted: not labelled
   ``scheduling.koordinator.sh/disable-preemptible: "true"``, not labelled
   ``quota.scheduling.koordinator.sh/preemptible: "false"`` (upstream's ``IsEligiblePod``), and not a member of the
   job.
2. *All or nothing.* Every candidate unit is lifted off its nodes and the job's members are placed as one group
   (``schedule_group``: each member as if the previous ones were assumed). If they do not all fit even then, nothing
   is evicted.
3. *Reprieve.* Units are ranked by importance: highest priority among its pods, then number of pods (evicting a
   bigger gang costs more), then kind (``pod`` above ``gang``), then key. From the most important down, each lifted
   unit is put back and stays back if the job still fits whole (runs of units that can all come back are confirmed
   together). What stays lifted are the victims: none of them could be spared on its own, and the least important go
   first; among equal priorities and sizes the unit whose key sorts first goes first (upstream sorts victims by
   priority, job, then name).
4. The members go where the group placement with exactly the victims lifted puts them (their nominated nodes).

The same projection gives the same victims and the same nominated nodes, so ``allot replay --verify`` re-derives them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allot_contracts.objects import names as n
from allot_contracts.objects.pod import Pod
from allot_placement import GroupDecision, PlacementEngine
from allot_placement.reserved import ReservationContext
from allot_placement.trial import Lift, lifted

__all__ = ["Plan", "Unit", "job_priority", "may_preempt", "search", "units"]


@dataclass(frozen=True)
class Unit:
    """Pods evicted together: ``kind`` ``pod`` (``key`` its namespace/name) or ``gang`` (``key`` the gang id)."""

    kind: str
    key: str
    pods: tuple[str, ...]
    priority: int  # the highest priority among its pods

    @property
    def rank(self) -> tuple[int, int, str, str]:
        """Importance: a higher priority, then more pods (evicting it costs more), then kind and key."""
        return (self.priority, len(self.pods), self.kind, self.key)


@dataclass(frozen=True)
class Plan:
    victims: tuple[Unit, ...]
    placement: GroupDecision  # every member Scheduled, with exactly the victims lifted

    @property
    def nominated(self) -> dict[str, str]:
        return {d.pod: str(d.node) for d in self.placement.members}


class PlacedPods(dict[str, str]):
    """The placed pods (pod -> node), which also count them by priority: a job finds at once that no placed pod has a
    lower priority than its own (the usual case when a failed pod has nothing to preempt), without looking at each."""

    def __init__(self, pods: Mapping[str, Pod]) -> None:
        super().__init__()
        self._pods = pods
        self._priority: dict[str, int] = {}
        self._counts: Counter[int] = Counter()

    def __setitem__(self, key: str, node: str) -> None:
        self._forget(key)
        pod = self._pods.get(key)
        priority = pod.priority if pod is not None else 0
        self._priority[key] = priority
        self._counts[priority] += 1
        super().__setitem__(key, node)

    def pop(self, key: str, *default: Any) -> Any:  # type: ignore[override]
        self._forget(key)
        return super().pop(key, *default)

    def __delitem__(self, key: str) -> None:
        self._forget(key)
        super().__delitem__(key)

    def _forget(self, key: str) -> None:
        priority = self._priority.pop(key, None)
        if priority is not None:
            self._counts[priority] -= 1
            if not self._counts[priority]:
                del self._counts[priority]

    def any_below(self, priority: int) -> bool:
        """Whether a placed pod has a priority lower than ``priority`` (the distinct priorities are few)."""
        return any(p < priority for p in self._counts)


def may_preempt(members: Sequence[Pod]) -> bool:
    """A job with a member whose ``preemptionPolicy`` is ``Never`` preempts nothing."""
    return bool(members) and not any(m.preemption_never for m in members)


def job_priority(members: Sequence[Pod]) -> int:
    return min(m.priority for m in members)


def _preemptible(pod: Pod, priority: int) -> bool:
    return pod.priority < priority and pod.preemptible and pod.reservation.preemptible


def units(pods: Mapping[str, Pod], placed: Iterable[str], priority: int, job: Iterable[str]) -> list[Unit]:
    """The victim units among the ``placed`` pods for a job of ``priority`` whose members are ``job``."""
    members = set(job)
    grouped: dict[tuple[str, str], list[str]] = {}
    spared: set[str] = set()  # gangs with a pod that may not be a victim
    for key in placed:
        pod = pods.get(key)
        if pod is None:
            continue
        eligible = key not in members and _preemptible(pod, priority)
        if pod.gang is not None:
            grouped.setdefault(("gang", pod.gang.gang_id), []).append(key)
            if not eligible:
                spared.add(pod.gang.gang_id)
        elif eligible:
            grouped[("pod", key)] = [key]
    return [
        Unit(kind=kind, key=key, pods=tuple(sorted(keys)), priority=max(pods[k].priority for k in keys))
        for (kind, key), keys in sorted(grouped.items())
        if not (kind == "gang" and key in spared)
    ]


def search(
    engine: PlacementEngine,
    members: Sequence[Pod],
    contexts: Mapping[str, ReservationContext],
    candidates: Sequence[Unit],
) -> Plan | None:
    """The victims that let every member fit, or None when no set of candidates would do (see the module)."""
    if not candidates or not members:
        return None
    with lifted(engine) as lift:
        for unit in candidates:
            _lift(lift, unit)
        first = _fit(engine, members, contexts)
        if first is None:
            return None
        reprieve = _Reprieve(engine, members, contexts, lift, first)
        reprieve.run(sorted(candidates, key=lambda u: u.rank, reverse=True))  # the most important first
        return Plan(victims=tuple(sorted(reprieve.victims, key=lambda u: u.rank)), placement=reprieve.best)


class _Reprieve:
    """Put lifted units back, most important first, keeping each whose return still lets the job fit whole.

    Consecutive units are tried in halves: a run that can all come back is confirmed with one placement, a run
    that cannot is split until the single unit that cannot is found. Since putting pods back never makes room, this
    keeps exactly the units that trying them one by one would keep, with far fewer placements when most candidates
    are not in the way (the usual case: every lower-priority pod of the cluster is a candidate)."""

    def __init__(
        self,
        engine: PlacementEngine,
        members: Sequence[Pod],
        contexts: Mapping[str, ReservationContext],
        lift: Lift,
        best: GroupDecision,
    ) -> None:
        self.engine, self.members, self.contexts, self.lift = engine, members, contexts, lift
        self.best = best  # the placement with exactly the units still lifted
        self.victims: list[Unit] = []

    def run(self, run: list[Unit]) -> None:
        if not run:
            return
        for unit in run:
            _restore(self.lift, unit)
        fit = _fit(self.engine, self.members, self.contexts)
        if fit is not None:
            self.best = fit
            return
        for unit in run:
            _lift(self.lift, unit)
        if len(run) == 1:
            self.victims.append(run[0])
            return
        half = len(run) // 2
        self.run(run[:half])
        self.run(run[half:])


def _fit(
    engine: PlacementEngine, members: Sequence[Pod], contexts: Mapping[str, ReservationContext]
) -> GroupDecision | None:
    decision = engine.schedule_group(list(members), dict(contexts))
    return decision if decision.outcome == n.SCHEDULED else None


def _lift(lift: Lift, unit: Unit) -> None:
    for pod in unit.pods:
        lift.remove(pod)


def _restore(lift: Lift, unit: Unit) -> None:
    for pod in unit.pods:
        if lift.holds(pod):
            lift.restore(pod)
