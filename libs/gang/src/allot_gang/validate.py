"""What a pod means to the gang engine, from the pod as read at the door (:mod:`allot_contracts.objects.pod`).

Parsing and validating gang input (annotations, labels, PodGroups) happens once, at the door
(:mod:`allot_contracts.objects.gang`); this module only projects a typed ``Pod`` onto the engine's ``PodInfo``.
"""

from __future__ import annotations

from allot_contracts.objects.pod import Pod

from .spec import PodInfo

__all__ = ["goes_alone", "pod_info"]


def pod_info(pod: Pod) -> PodInfo:
    gang = pod.gang
    return PodInfo(
        key=pod.key,
        namespace=pod.namespace,
        name=pod.name,
        gang_id=gang.gang_id if gang is not None else None,
        explicit=gang.explicit if gang is not None else (),
        priority=pod.priority,
        sub_priority=pod.sub_priority,
        node_name=pod.node_name,
        phase=pod.phase if pod.phase in ("Running", "Succeeded", "Failed") else "",
    )


def goes_alone(pod: Pod | None) -> bool:
    """Whether the gang gate lets a pod through the moment it arrives: it was admitted and declares no gang.
    Nothing is decided for such a pod at the gate, so nothing is recorded: quota admission takes it straight from
    ``pod.submitted`` (a gang member, or a pod refused at the door, goes through the gang-coordinator)."""
    return pod is not None and pod.gang is None
