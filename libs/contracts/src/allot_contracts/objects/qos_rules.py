"""Koordinator's QoS class and priority class of a pod, and the combinations its pod webhook refuses.

Responsibility: one place for what every door (``allot apply``, the simulator, ``allot webhook``, kube-sync, all
through :func:`allot_contracts.objects.pod.parse_pod`) decides about ``koordinator.sh/qosClass`` and the
Koordinator priority class, as Koordinator's validating pod webhook does
(``pkg/webhook/pod/validating/cluster_colocation_profile.go``):

- the *raw* QoS class is the ``koordinator.sh/qosClass`` label, or none; the *raw* priority class is the
  ``koordinator.sh/priority-class`` label when the pod has it, else the band of ``spec.priority`` (which the API
  server, or the door, resolves from ``priorityClassName``): [9000, 9999] koord-prod, [7000, 7999] koord-mid,
  [5000, 5999] koord-batch, [3000, 3999] koord-free, anything else none;
- refused: QoS ``BE`` with koord-prod or with no Koordinator priority; QoS ``LSR`` with anything but koord-prod;
  ``LSR``/``LSE`` without requested CPUs or with a fractional CPU request; ``kubernetes.io/batch-cpu`` or
  ``batch-memory`` requests without QoS ``BE``. Each with upstream's reason and the field path;
- on an update (only ``allot webhook`` sees one: apply refuses a pod that exists, kube-sync records one life per
  pod), the raw QoS class, the raw priority class and the ``koordinator.sh/priority`` label may not change.

The "with default" values the engines act on (:func:`koord_qos_of`, :func:`koord_priority_of`) fill what is missing:
the QoS from the Kubernetes QoS (``BestEffort`` → ``BE``, else ``LS``), the priority class from the QoS (``SYSTEM``,
``LSE``, ``LSR``, ``LS`` → koord-prod, ``BE`` → koord-batch).
Pure; nothing here raises for bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from allot_contracts.issues import FieldIssue, label_path, not_supported
from allot_contracts.objects import names as n
from allot_contracts.objects.gang import LABEL_SUB_PRIORITY
from allot_contracts.objects.meta import metadata_of

__all__ = [
    "FORBIDDEN_PRIORITIES",
    "immutable_issues",
    "koord_priority_of",
    "koord_qos_of",
    "priority_class_raw",
    "qos_class_raw",
    "qos_issues",
]

CPU_REQUESTS_PATH: Final = "spec.containers[*].resources.requests[cpu]"
_BANDS_TEXT: Final = ", ".join(f"{name} {low}-{high}" for name, low, high in n.PRIORITY_BANDS)
# QoS class -> the raw priority classes it may not be combined with ("" = no Koordinator priority).
FORBIDDEN_PRIORITIES: Final = {
    "BE": ("", "koord-prod"),
    "LSR": ("", "koord-mid", "koord-batch", "koord-free"),
}
_BATCH: Final = (n.BATCH_CPU, n.BATCH_MEMORY)


def qos_class_raw(labels: Mapping[str, str]) -> str:
    """The ``koordinator.sh/qosClass`` label when it names a QoS class, else ``""`` (upstream's QoSNone)."""
    value = labels.get(n.LABEL_QOS, "")
    return value if value in n.QOS_CLASSES else ""


def priority_class_raw(labels: Mapping[str, str], priority: int | None) -> str:
    """The ``koordinator.sh/priority-class`` label when present (``""`` unless it names a class), else the band of
    ``priority`` (``None``: the pod has none), else ``""`` (upstream's PriorityNone)."""
    if n.LABEL_PRIORITY_CLASS in labels:
        value = labels[n.LABEL_PRIORITY_CLASS]
        return value if value in n.PRIORITY_CLASSES else ""
    if priority is not None:
        for name, low, high in n.PRIORITY_BANDS:
            if low <= priority <= high:
                return name
    return ""


def koord_qos_of(labels: Mapping[str, str], kube_qos: str) -> str:
    """The QoS class with default: the label, else ``BE`` for a Kubernetes ``BestEffort`` pod, else ``LS``."""
    return qos_class_raw(labels) or ("BE" if kube_qos == "BestEffort" else "LS")


def koord_priority_of(labels: Mapping[str, str], priority: int | None, koord_qos: str) -> str:
    """The priority class with default: the raw one, else derived from the QoS class."""
    raw = priority_class_raw(labels, priority)
    if raw:
        return raw
    if koord_qos in ("SYSTEM", "LSE", "LSR", "LS"):
        return "koord-prod"
    if koord_qos == "BE":
        return "koord-batch"
    return ""


def _priority_source(labels: Mapping[str, str], priority: int | None, class_name: str) -> str:
    if n.LABEL_PRIORITY_CLASS in labels:
        return f"from the label {n.LABEL_PRIORITY_CLASS}={labels[n.LABEL_PRIORITY_CLASS]}"
    if priority is None:
        return f"the pod has no {n.LABEL_PRIORITY_CLASS} label and no spec.priority"
    where = f"spec.priority {priority}" + (f" of priorityClassName {class_name}" if class_name else "")
    if priority_class_raw({}, priority):
        return f"from {where}"
    return (
        f"the pod has no {n.LABEL_PRIORITY_CLASS} label and {where} is in no Koordinator priority band "
        f"({_BANDS_TEXT})"
    )


def _cpu_text(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def qos_issues(
    labels: Mapping[str, str],
    priority: int | None,
    requests: Mapping[str, int],
    *,
    priority_class_name: str = "",
    check_priority: bool = True,
) -> list[FieldIssue]:
    """What Koordinator's pod webhook refuses about this pod's QoS class (``priority``: ``spec.priority`` as
    resolved, ``None`` when the pod has none, and ``priority_class_name`` the PriorityClass it came from;
    ``requests``: Kubernetes PodRequests over canonical integers). ``check_priority=False`` leaves out the priority
    combinations (the priority itself was refused)."""
    issues = [
        not_supported(label_path(key), sorted(allowed), labels[key])
        for key, allowed in ((n.LABEL_QOS, n.QOS_CLASSES), (n.LABEL_PRIORITY_CLASS, n.PRIORITY_CLASSES))
        if labels.get(key) and labels[key] not in allowed
    ]
    if issues:
        return issues
    qos = qos_class_raw(labels)
    batch = [name for name in _BATCH if requests.get(name, 0) != 0]
    if batch and qos != "BE":
        issues.append(
            FieldIssue(
                path=label_path(n.LABEL_QOS),
                code="Required",
                message="Required value: must specify koordinator QoS BE with koordinator colocation resources "
                f"({', '.join(batch)} requested)",
                value=labels.get(n.LABEL_QOS, ""),
            )
        )
    pc = priority_class_raw(labels, priority)
    if check_priority and pc in FORBIDDEN_PRIORITIES.get(qos, ()):
        issues.append(
            FieldIssue(
                path=label_path(n.LABEL_QOS),
                code="Forbidden",
                message=f"Forbidden: {n.LABEL_QOS}={qos} and priorityClass={pc} cannot be used in combination "
                f"({_priority_source(labels, priority, priority_class_name)})",
            )
        )
    cpu = requests.get(n.CPU, 0)
    if qos in ("LSR", "LSE") and cpu == 0:
        issues.append(
            FieldIssue(
                path=CPU_REQUESTS_PATH,
                code="Required",
                message=f"Required value: {qos} Pod must declare the requested CPUs",
            )
        )
    elif qos in ("LSR", "LSE") and cpu % 1000 != 0:
        issues.append(
            FieldIssue(
                path=CPU_REQUESTS_PATH,
                code="InvalidCPURequest",
                message=f'Invalid value: "{_cpu_text(cpu)}": the requested CPUs of {qos} Pod must be integer',
            )
        )
    return issues


def _labels(manifest: Mapping[str, Any]) -> Mapping[str, str]:
    labels = metadata_of(manifest).get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): v for k, v in labels.items() if isinstance(v, str)}


def _priority(manifest: Mapping[str, Any]) -> int | None:
    spec = manifest.get("spec")
    raw = spec.get("priority") if isinstance(spec, Mapping) else None
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def immutable_issues(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldIssue]:
    """What an update of pod ``old`` into ``new`` may not change: the raw QoS class, the raw priority class, the
    ``koordinator.sh/priority`` label (upstream, with the feature gate ColocationProfileSkipValidatingPriority off,
    its default)."""
    old_labels, new_labels = _labels(old), _labels(new)
    compared = (
        (label_path(n.LABEL_QOS), qos_class_raw(old_labels), qos_class_raw(new_labels)),
        (
            "spec.priority",
            priority_class_raw(old_labels, _priority(old)),
            priority_class_raw(new_labels, _priority(new)),
        ),
        (
            label_path(LABEL_SUB_PRIORITY),
            old_labels.get(LABEL_SUB_PRIORITY, ""),
            new_labels.get(LABEL_SUB_PRIORITY, ""),
        ),
    )
    return [
        FieldIssue(
            path=path,
            code="FieldImmutable",
            message=f'Invalid value: "{now}": field is immutable (was "{before}")',
        )
        for path, before, now in compared
        if before != now
    ]
