"""Job-level preemption: one decision names the job, every victim and where each member will go.

A *job* is a gang group (``gang`` true, ``job`` its group id) or a plain pod as a job of one (``job`` its
``namespace/name``). The device-allocator records ``preemption.decided`` when the job fits nowhere but fits whole once
the victims are gone; the victims' ``pod.evicted`` (cause ``Preempted``) are recorded in the same append, and the
binder enacts them (standalone: deletes the pods; Kubernetes mode: the Eviction API). The members are placed by the
job's next attempt, once every victim is gone (docs/gang.md#preemption).
"""

from __future__ import annotations

import msgspec

from allot_contracts.events._base import Event, ObjectRef


class PreemptionVictim(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One pod to evict: where it runs, its priority, and the gang it goes with (``gang``: every placed member of
    that gang is a victim too, so no gang is left running short of members)."""

    pod: ObjectRef
    uid: str = ""
    node: str
    priority: int = 0
    gang: str = ""


class PreemptionDecided(Event, frozen=True, kw_only=True, tag="preemption.decided.v1"):
    """device-allocator: ``job`` (attempt ``attempt``, priority ``priority``: its lowest member's) fits nowhere now,
    and fits whole once ``victims`` are evicted — every victim has a strictly lower priority and may be preempted.
    ``nominated``: member → the node it will go to. Until the job is placed, pods of priority up to ``priority`` are
    not placed on the nominated nodes. ``message`` says the same in words."""

    job: str
    gang: bool = False
    attempt: int
    priority: int
    members: list[str]
    nominated: dict[str, str]
    victims: list[PreemptionVictim]
    message: str


__all__ = ["PreemptionDecided", "PreemptionVictim"]
