"""PodGroup ``status`` as the coscheduling PodGroup controller writes it, derived from recorded events only (pure).

What upstream does (kubernetes-sigs/scheduler-plugins, ``pkg/controllers/podgroup_controller.go``, read for its
behaviour; the rules below are ours):

- The controller reconciles a PodGroup whenever the group or one of its pods (pods labelled with its name) changes.
  ``running``, ``succeeded`` and ``failed`` are the numbers of the group's pods in pod phase Running, Succeeded and
  Failed: every pod object that still exists counts, finished ones included. ``scheduled`` counts bound pods.
- A group in phase ``Finished`` or ``Failed`` is never reconciled again: both phases are final.
- Pending becomes PreScheduling once the group has at least minMember pods. From any later phase, in one pass and
  in this order, each rule seeing the phase the previous one left:
  no pods at all → Pending; Scheduling and scheduled ≥ minMember → Scheduled;
  Scheduled and running + succeeded ≥ minMember → Running;
  failed > 0 and failed + running + succeeded ≥ minMember → Failed; succeeded ≥ minMember → Finished.
  So Finished wins over Failed, a group can pass Scheduled → Running in one pass, and Running is left only for
  Pending (every pod gone), Failed or Finished — a running pod deleted later does not move it back.

How Allot applies them (``phase``, table-tested; ``PodGroupState`` holds the facts):

- The group's pods are the members the gang-coordinator recorded (``gang.member_waiting``, ``gang.group_ready``);
  ``scheduled`` counts members recorded ``pod.bound``; a member's pod phase is the latest ``pod.phase_observed``
  of its current life (kube-sync records Running, Succeeded and Failed).
- kube-sync records ``pod.deleted`` when a pod finishes (its resources are free) while the object still exists, so
  a member deleted after a Succeeded or Failed phase stays counted; one deleted in any other phase leaves the group.
  Allot does not learn when a finished pod object is removed later: it counts until the PodGroup is deleted or the
  name gets a new life (a new ``pod.submitted``). A PodGroup that upstream would drop back to Pending because all its
  finished pods were garbage-collected therefore keeps its phase; conversely a new life leaves the group until the
  gang-coordinator records it a member again, so a group whose every member was re-created passes through Pending
  where upstream (which sees the new pods by label at once) would stay Running.
- Before Scheduled, the phases follow the counts as they stand (Pending, PreScheduling, Scheduling, Scheduled; the
  scheduler plugin's part upstream). From Scheduled on, the rules above, with the phase last derived as the phase
  the pass starts from. The phase is derived after every recorded event that touches the group, in log order, so
  the same log always gives the same sequence of phases, whenever the status is written.
"""

from __future__ import annotations

from typing import Final, TypedDict

import msgspec

PENDING: Final = "Pending"
PRE_SCHEDULING: Final = "PreScheduling"
SCHEDULING: Final = "Scheduling"
SCHEDULED: Final = "Scheduled"
RUNNING: Final = "Running"
FAILED: Final = "Failed"
FINISHED: Final = "Finished"
FINAL: Final = (FINISHED, FAILED)
# Pod phases counted in the status; a member that finished is still counted after its pod.deleted.
COUNTED: Final = ("Running", "Succeeded", "Failed")
FINISHED_POD: Final = ("Succeeded", "Failed")

__all__ = ["PodGroupState", "phase"]


def phase(
    previous: str,
    *,
    members: int,
    min_member: int,
    scheduled: int,
    running: int,
    succeeded: int,
    failed: int,
) -> str:
    """The phase after one pass over these counts, starting from ``previous`` (see the module docstring)."""
    if previous in FINAL:
        return previous
    if members == 0:
        return PENDING
    if scheduled and scheduled >= min_member:
        current = SCHEDULED
    elif scheduled:
        current = SCHEDULING
    elif members >= min_member > 0:
        current = PRE_SCHEDULING
    else:
        current = PENDING
    started = running + succeeded
    if previous == RUNNING or (current == SCHEDULED and started and started >= min_member):
        current = RUNNING  # Running is left only for Pending, Failed or Finished
    if failed and failed + running + succeeded >= min_member:
        current = FAILED
    if succeeded and succeeded >= min_member:
        current = FINISHED
    return current


class PodGroupStatus(TypedDict):
    """A PodGroup's ``status`` as the coscheduling controller writes it."""

    phase: str
    scheduled: int
    running: int
    succeeded: int
    failed: int


class PodGroupState(msgspec.Struct, kw_only=True):
    """What the status of one PodGroup follows from: its members, their bindings and pod phases."""

    min_member: int = 0
    members: set[str] = msgspec.field(default_factory=set)
    bound: set[str] = msgspec.field(default_factory=set)
    phases: dict[str, str] = msgspec.field(default_factory=dict)  # member -> Running/Succeeded/Failed
    exists: bool = False
    phase: str = ""  # derived after the latest event that touched the group

    def count(self, pod_phase: str) -> int:
        return sum(1 for member, p in self.phases.items() if p == pod_phase and member in self.members)

    def settle(self) -> None:
        """Derive the phase from the facts as they now stand (call after every change, in log order)."""
        self.phase = phase(
            self.phase,
            members=len(self.members),
            min_member=self.min_member,
            scheduled=len(self.bound & self.members),
            running=self.count("Running"),
            succeeded=self.count("Succeeded"),
            failed=self.count("Failed"),
        )

    def status(self) -> PodGroupStatus:
        """``status`` as written: phase and the four counts (0 is written too, so a count can go back to 0)."""
        return {
            "phase": self.phase or PENDING,
            "scheduled": len(self.bound & self.members),
            "running": self.count("Running"),
            "succeeded": self.count("Succeeded"),
            "failed": self.count("Failed"),
        }

    def leave(self, pod: str) -> None:
        self.members.discard(pod)
        self.bound.discard(pod)
        self.phases.pop(pod, None)

    def deleted(self, pod: str) -> None:
        """The member's pod life was recorded deleted: a finished pod stays counted (see the module docstring)."""
        if self.phases.get(pod) not in FINISHED_POD:
            self.leave(pod)
