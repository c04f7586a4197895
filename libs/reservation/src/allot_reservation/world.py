"""What reservation-manager knows about pods and nodes (besides reservations and jobs).

A pod is known from ``pod.submitted`` / ``pod.observed`` until ``pod.deleted``; ``node`` is where it holds resources
(placed, bound or observed), ``bound`` whether it was bound, ``reservation`` the reservation it was placed in.
Facts for matching are read lazily, once per pod life.
"""

from __future__ import annotations

from allot_contracts import kube
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.reservation_pod import OwnerRef
from allot_reservation.book import Book
from allot_reservation.facts import facts_from_pod, facts_of
from allot_reservation.match import PodFacts

__all__ = ["PodRecord", "World"]


class PodRecord:
    __slots__ = ("_facts", "bound", "key", "manifest", "node", "pod", "reservation", "uid")

    def __init__(
        self,
        key: str,
        uid: str,
        manifest: JsonObject,
        node: str = "",
        bound: bool = False,
        pod: Pod | None = None,
    ) -> None:
        self.key = key
        self.uid = uid
        self.manifest = manifest
        self.pod = pod  # as the door read it (None for events that carry none)
        self.node = node
        self.bound = bound
        self.reservation = ""
        self._facts: tuple[PodFacts, list[FieldIssue]] | None = None

    def facts(self) -> tuple[PodFacts, list[FieldIssue]]:
        if self._facts is None:
            self._facts = (facts_from_pod(self.pod), []) if self.pod is not None else facts_of(self.manifest)
        return self._facts

    @property
    def controller(self) -> OwnerRef | None:
        return next((o for o in self.facts()[0].owners if o.controller), None)

    @property
    def priority(self) -> int:
        if self.pod is not None:
            return self.pod.priority
        return kube.priority_value(self.manifest)


class World:
    def __init__(self) -> None:
        self.pods: dict[str, PodRecord] = {}
        self.nodes: dict[str, dict[str, str]] = {}  # node -> labels
        self.book = Book()

    def workload_key(self, pod: PodRecord) -> str | None:
        ctl = pod.controller
        if ctl is None:
            return None
        return ctl.uid or f"{pod.key.split('/', 1)[0]}/{ctl.kind}/{ctl.name}"

    def workload_pods(self, key: str) -> list[PodRecord]:
        return [p for _, p in sorted(self.pods.items()) if self.workload_key(p) == key]
