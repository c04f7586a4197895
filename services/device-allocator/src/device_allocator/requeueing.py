"""device-allocator's requeues: waiting pods and gang groups sent back through admission when they can now succeed.

- ``_requeue``: after capacity changed, every unschedulable pod that would fit on its own now (queue order: priority,
  arrival), every blocked gang group that would fit whole (``gang.retry_requested``), reserve pods that now fit, and
  pods that must use a reservation just placed; none that would land on a node nominated for a preemptor of at
  least its priority (device_allocator.nominations).
- ``_release_held``: pods held back for a reserving gang, once it no longer reserves.
- ``_release_nominated``: pods and gang groups held off a nominated node, once the nomination ended.

A mixin of :class:`device_allocator.processor.DeviceAllocator`: it reads the allocator's projection and never changes
it (decisions only).
"""

from __future__ import annotations

from typing import Any

from allot_contracts.envelope import stream_id
from allot_contracts.events import GangRetryRequested, ObjectRef, PodRequeued
from allot_contracts.objects.pod import Pod
from allot_placement import PlacementEngine
from allot_runtime.processor import Emit
from device_allocator.nominations import HELD_FOR_PREEMPTOR, PREEMPTING, Preemptions, job_id
from device_allocator.queueing import HELD, GangQueue
from device_allocator.reservations import Reservations

# codes of a pod that waits for something other than capacity (a gang gathering, a preemptor, its own victims)
WAITING_FOR_OTHERS = frozenset({HELD, HELD_FOR_PREEMPTOR, PREEMPTING})


class Requeueing:
    engine: PlacementEngine
    queue: GangQueue
    reservations: Reservations
    preemptions: Preemptions
    pods: dict[str, Pod]
    arrival: dict[str, int]
    unschedulable: dict[str, int]
    unschedulable_codes: dict[str, tuple[str, ...]]
    unschedulable_message: dict[str, str]

    def _pod_item(self, key: str) -> Any:
        raise NotImplementedError  # the allocator's

    def _nomination_done(self, job: str, out: list[Emit]) -> list[Emit]:
        """The job (a job_id) was placed: what was held off its nominated nodes goes again."""
        nomination = self.preemptions.jobs.get(job)
        if nomination is None:
            return []
        return self._release_nominated(f"{nomination.job} was placed", out)

    def _release_nominated(self, reason: str, out: list[Emit]) -> list[Emit]:
        """Pods and gang groups held off a nominated node go again (those already requeued in ``out`` aside)."""
        done = requeued_in(out)
        pods = [
            self._requeued(k, reason)
            for k in sorted(self.preemptions.held_pods - done)
            if k in self.unschedulable
        ]
        groups = [
            Emit(stream_id=stream_id("gang", group), event=GangRetryRequested(group=group, reason=reason))
            for group in sorted(self.preemptions.held_groups)
        ]
        return [*pods, *groups]

    def _release_held(self, reason: str, skip: set[str] | frozenset[str] = frozenset()) -> list[Emit]:
        """Pods held back for a reserving gang go back through admission once the reservation ends."""
        out = []
        for key in sorted(self.queue.held - skip):
            if key in self.unschedulable:
                out.append(self._requeued(key, reason))
        return out

    def _requeue(
        self, reason: str, codes: frozenset[str] | None = None, *, refresh: bool = False
    ) -> list[Emit]:
        """Send back, in queue order, every unschedulable pod that would fit on its own now, and ask the
        gang-coordinator to retry every waiting gang group that would now fit whole. ``codes``: only pods whose last
        attempt failed for one of these reasons can gain from what happened (the event's queueing hint).
        ``refresh`` (the cluster's nodes or devices changed): a pod that still does not fit but would now fail for
        other reasons is sent back too, so that what it waits for is not stale (upstream retries every pending pod
        on a Node or Device event)."""
        retried = self.reservations.retry()  # reserve pods waiting for capacity first
        if not self.unschedulable and not self.queue.blocked:
            return retried
        order = sorted(
            (
                k
                for k in self.unschedulable
                if k in self.pods and (codes is None or codes & set(self.unschedulable_codes.get(k, ())))
            ),
            key=lambda k: (-self.pods[k].priority, self.arrival.get(k, 0), k),
        )
        out: list[Emit] = retried
        band = self.queue.reserving_band()
        for group, members in self.queue.blocked_in_order():
            pods = [self.pods[m] for m in members if m in self.pods]
            contexts = self.reservations.group_contexts(members)
            placed = self.engine.schedule_group(pods, contexts) if len(pods) == len(members) else None
            if (
                placed is not None
                and placed.outcome == "Scheduled"
                and not self.preemptions.held_off(
                    job_id(group, True), min(p.priority for p in pods), [str(d.node) for d in placed.members]
                )
            ):
                out.append(
                    Emit(
                        stream_id=stream_id("gang", group),
                        event=GangRetryRequested(group=group, reason=reason),
                    )
                )
        for key in order:
            if key in self.queue.held and band is not None and self._pod_item(key).band <= band:
                continue  # still held for the reserving gang
            context = self.reservations.contexts.get(key)
            decision = self.engine.schedule(self.pods[key], reservations=context)
            if decision.outcome == "Scheduled":
                if not self.preemptions.held_off(
                    job_id(key, False), self.pods[key].priority, [str(decision.node)]
                ):
                    out.append(self._requeued(key, reason))
            elif refresh and self._reasons_changed(key, decision.codes, decision.message):
                out.append(self._requeued(key, f"{reason}: the reasons it waits for changed"))
        return out + self._requeue_owners(retried, skip=requeued_in(out))

    def _reasons_changed(self, key: str, codes: list[str], message: str) -> bool:
        """Whether an unschedulable pod would now be refused for other reasons than those recorded (a pod held back
        for a gang or a preemptor, or one whose preemption is under way, waits for that, not for these reasons)."""
        recorded = self.unschedulable_codes.get(key, ())
        if WAITING_FOR_OTHERS & set(recorded):
            return False
        return (tuple(codes), message) != (recorded, self.unschedulable_message.get(key, ""))

    def _requeue_owners(self, placed: list[Emit], skip: set[str] | None = None) -> list[Emit]:
        """Unschedulable pods that may use a reservation placed in this decision go through admission again."""
        waiting = sorted(
            (
                k
                for k in self.unschedulable
                if k in self.pods and k not in self.queue.held and k not in (skip or ())
            ),
            key=lambda k: (-self.pods[k].priority, self.arrival.get(k, 0), k),
        )
        return [
            self._requeued(key, "a reservation it may use was placed")
            for key in self.reservations.may_use(placed, waiting, self.pods)
        ]

    def _requeued(self, key: str, reason: str) -> Emit:
        """An unschedulable pod sent back through admission, as its next attempt."""
        namespace, name = key.split("/", 1)
        return Emit(
            stream_id=stream_id("pod", key),
            event=PodRequeued(
                pod=ObjectRef(namespace=namespace, name=name),
                attempt=self.unschedulable[key] + 1,
                reason=reason,
            ),
        )


def requeued_in(out: list[Emit]) -> set[str]:
    """The pods ``out`` already sends back through admission."""
    return {e.event.pod.key for e in out if isinstance(e.event, PodRequeued)}
