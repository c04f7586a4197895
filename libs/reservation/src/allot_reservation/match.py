"""Which reservations a pod may use (upstream's BeforePreFilter matching, §5.3 of the behaviour reference).

For every *matchable* reservation (phase Available on a node, not an ``allocateOnce`` one already allocated):

```
reservation-ignored pod            → matched (it may use what any reservation on the node holds, never bound to one)
owners do not match                → not considered (not reported: the reservation is simply not the pod's)
affinity names a reservation       → matched iff the name is this one (and exact-match holds)
reservation unschedulable          → no, unless the affinity tolerates node.kubernetes.io/unschedulable
untolerated NoSchedule/NoExecute   → no ("reservation(s) had untolerated taint {key: value}"); only a pod with a
                                     reservation affinity is checked (its tolerations); one without has none to check
affinity selector / terms mismatch → no (matched against node labels ∪ reservation labels)
exact-match fails                  → no
otherwise                          → matched
```

Owners: ``spec.owners`` are ORed; within one owner every given sub-matcher (object, controller, labelSelector) must
match. ``exact-match-reservation``: every listed resource must be requested exactly as reserved; a resource absent on
both sides counts as equal and checking continues (our decision 9, upstream stops at the first such resource).
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from allot_contracts.objects.reservation import OwnerController, Reservation, ReservationOwner
from allot_contracts.objects.reservation_pod import OwnerRef, PodReservation, ReservationAffinity
from allot_contracts.objects.selectors import (
    Taint,
    first_untolerated_taint,
    match_label_selector,
    match_node_selector_terms,
)

__all__ = [
    "PodFacts",
    "exact_match",
    "match_reservation",
    "owner_matches",
    "owners_match",
]

UNSCHEDULABLE_TAINT: Final[Taint] = ("node.kubernetes.io/unschedulable", "", "NoSchedule")

# reasons a reservation whose owners match is not usable (shown by explain with the reservation's name)
NAME_MISMATCH: Final = "reservation affinity names another reservation"
UNSCHEDULABLE: Final = "reservation is unschedulable"
AFFINITY_MISMATCH: Final = "reservation affinity does not match the reservation"
EXACT_MISMATCH: Final = "reservation allocatable does not exactly match the pod request"


class PodFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A pod as reservation matching reads it: identity, owners, labels, requests and what it says about
    reservations. Not the placement engine's overcommit ``PodFacts`` (priority class, QoS, NUMA binding of a bound
    pod) nor qos-enforcer's (cgroup settings): each engine's facts are what its matching or planning reads."""

    """What matching reads from a pod: identity, labels, owner references, requests and its reservation fields."""

    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"
    labels: dict[str, str] = {}
    owners: tuple[OwnerRef, ...] = ()
    requests: dict[str, int] = {}
    spec: PodReservation = PodReservation()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def owner_matches(owner: ReservationOwner, pod: PodFacts) -> bool:
    """One ``spec.owners`` entry: every sub-matcher that is given must match."""
    obj = owner.object
    if obj is not None and not (
        (not obj.uid or obj.uid == pod.uid)
        and (not obj.name or obj.name == pod.name)
        and (not obj.namespace or obj.namespace == pod.namespace)
        and (not obj.api_version or obj.api_version == pod.api_version)
    ):
        return False
    ctl = owner.controller
    if ctl is not None:
        if ctl.namespace and ctl.namespace != pod.namespace:
            return False
        if not any(_controller_matches(ctl, ref) for ref in pod.owners):
            return False
    return owner.selector is None or match_label_selector(owner.selector, pod.labels)


def _controller_matches(ctl: OwnerController, ref: OwnerRef) -> bool:
    return (
        (ctl.controller is None or ctl.controller == ref.controller)
        and (not ctl.uid or ctl.uid == ref.uid)
        and (not ctl.name or ctl.name == ref.name)
        and (not ctl.kind or ctl.kind == ref.kind)
        and (not ctl.api_version or ctl.api_version == ref.api_version)
    )


def owners_match(owners: Iterable[ReservationOwner], pod: PodFacts) -> bool:
    """``spec.owners`` are ORed (no owners match nothing)."""
    return any(owner_matches(o, pod) for o in owners)


def exact_match(requests: Mapping[str, int], allocatable: Mapping[str, int], names: Iterable[str]) -> bool:
    """Every listed resource requested exactly as reserved; absent on both sides counts as equal (decision 9)."""
    return all(requests.get(name) == allocatable.get(name) for name in names)


def _affinity_matches(
    affinity: ReservationAffinity, node_labels: Mapping[str, str], r: Reservation, node: str
) -> bool:
    labels = {**node_labels, **r.labels}
    if any(labels.get(k) != v for k, v in affinity.selector):
        return False
    return affinity.terms is None or match_node_selector_terms(affinity.terms, labels, node)


def match_reservation(
    r: Reservation, node: str, node_labels: Mapping[str, str], pod: PodFacts
) -> tuple[bool, str]:
    """Whether ``pod`` may use the available reservation ``r`` on ``node``: ``(True, "")``, or ``(False, reason)``;
    the reason is ``""`` when the reservation is not the pod's at all (its owners do not match)."""
    spec = pod.spec
    if spec.ignored:
        return True, ""
    if not owners_match(r.owners, pod):
        return False, ""
    affinity = spec.affinity
    if affinity is not None and affinity.name:
        if affinity.name != r.name:
            return False, NAME_MISMATCH
        if not exact_match(pod.requests, r.requests, spec.exact_match):
            return False, EXACT_MISMATCH
        return True, ""
    tolerations = affinity.tolerations if affinity is not None else ()
    if r.unschedulable and first_untolerated_taint((UNSCHEDULABLE_TAINT,), tolerations) is not None:
        return False, UNSCHEDULABLE
    # taints are tolerated through the affinity; a pod without one is not checked (upstream's nil affinity)
    taint = first_untolerated_taint(r.taints, tolerations) if affinity is not None else None
    if taint is not None:
        return False, f"reservation(s) had untolerated taint {{{taint[0]}: {taint[1]}}}"
    if affinity is not None and not _affinity_matches(affinity, node_labels, r, node):
        return False, AFFINITY_MISMATCH
    if not exact_match(pod.requests, r.requests, spec.exact_match):
        return False, EXACT_MISMATCH
    return True, ""
