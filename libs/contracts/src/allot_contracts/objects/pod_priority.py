"""A pod's priority as the API server's priority admission computes it, and the PriorityClasses it is resolved against.

``read_priority(spec, context, issues)`` resolves ``priorityClassName`` against the classes known at the door
(:class:`PodContext`), checks ``spec.priority`` and ``preemptionPolicy``, and falls back to the global default
class. Part of reading a pod (:func:`allot_contracts.objects.pod.parse_pod`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n

__all__ = [
    "BUILTIN_PRIORITY_CLASSES",
    "DEFAULT_CONTEXT",
    "PodContext",
    "PriorityClassInfo",
    "check_preemption_policy",
    "read_priority",
]


class PriorityClassInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A ``scheduling.k8s.io/v1`` PriorityClass as pods resolve it."""

    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


# What every cluster has (the API server's system classes) and what a Koordinator installation adds.
BUILTIN_PRIORITY_CLASSES: Final = {
    c.name: c
    for c in (
        PriorityClassInfo(name="system-cluster-critical", value=2_000_000_000),
        PriorityClassInfo(name="system-node-critical", value=2_000_001_000),
        *(PriorityClassInfo(name=name, value=low) for name, low, _ in n.PRIORITY_BANDS),
    )
}


class PodContext(msgspec.Struct, frozen=True, kw_only=True):
    """What admission of a pod may consult besides the pod: the PriorityClasses known at the door, and (when the
    door knows them) the names of the elastic quotas that exist. ``quotas is None`` skips the quota check (a
    service learns about quotas from the log in order; the door checks)."""

    priority_classes: dict[str, PriorityClassInfo] = msgspec.field(
        default_factory=lambda: dict(BUILTIN_PRIORITY_CLASSES)
    )
    quotas: frozenset[str] | None = None
    # False for pods read from an API server: their spec.priority was computed by its priority admission from a
    # PriorityClass the door may not know; it is taken as given.
    resolve_priority: bool = True


DEFAULT_CONTEXT: Final = PodContext()


def check_preemption_policy(policy: object, path: str, issues: list[FieldIssue]) -> None:
    """An issue when ``policy`` (a pod's or a PriorityClass's ``preemptionPolicy``) is given but not one Kubernetes
    knows."""
    if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
        issues.append(
            FieldIssue(
                path=path,
                code="NotSupported",
                message='supported values: "Never", "PreemptLowerPriority"',
                value=str(policy),
            )
        )


def read_priority(
    spec: Mapping[str, Any], context: PodContext, issues: list[FieldIssue]
) -> tuple[int, str, bool, bool]:
    """``(priority, priorityClassName, preemption_never, priority_given)`` as the priority admission computes."""
    raw = spec.get("priority")
    given: int | None = None
    if raw is not None:
        if isinstance(raw, bool) or not isinstance(raw, int) or not -(2**31) <= raw < 2**31:
            issues.append(
                FieldIssue(path="spec.priority", message="must be a 32-bit integer", value=str(raw))
            )
        else:
            given = raw
    name = spec.get("priorityClassName")
    policy = spec.get("preemptionPolicy")
    check_preemption_policy(policy, "spec.preemptionPolicy", issues)
    if name not in (None, "") and given is not None and not context.resolve_priority:
        return given, str(name), policy == "Never", True
    if name not in (None, ""):
        if not isinstance(name, str):
            issues.append(FieldIssue(path="spec.priorityClassName", message="must be a string"))
            return given or 0, "", policy == "Never", given is not None
        pc = context.priority_classes.get(name)
        if pc is None:
            issues.append(
                FieldIssue(
                    path="spec.priorityClassName",
                    code="NotFound",
                    message=f"no PriorityClass with name {name} was found",
                    value=name,
                )
            )
            return given or 0, name, policy == "Never", given is not None
        if given is not None and given != pc.value:
            issues.append(
                FieldIssue(
                    path="spec.priority",
                    code="Forbidden",
                    message=f"the integer value of priority ({given}) must not be provided in pod spec; priority "
                    f"admission controller computed {pc.value} from the given PriorityClass name",
                )
            )
        never = (policy or pc.preemption_policy) == "Never"
        return pc.value, name, never, True
    if given is not None:
        return given, "", policy == "Never", True
    default = next(
        (c for c in sorted(context.priority_classes.values(), key=lambda c: c.name) if c.global_default), None
    )
    if default is not None:
        return default.value, default.name, (policy or default.preemption_policy) == "Never", True
    return 0, "", policy == "Never", False
