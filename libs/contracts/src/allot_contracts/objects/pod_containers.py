"""A pod's containers as node-side enforcement and the QoS class need them: requests and limits per container.

``read_containers(spec, issues)`` reads ``spec.containers`` and ``spec.initContainers`` (names as written,
canonical values, name and range checks, extended resources whose request differs from their limit refused);
``pod_limits`` sums them as Kubernetes ``PodLimits``; ``kube_qos_of`` gives the Kubernetes QoS class. Part of
reading a pod (:func:`allot_contracts.objects.pod.parse_pod`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, checked_list, checked_object
from allot_contracts.objects import names as n
from allot_contracts.objects.meta import is_qualified_name
from allot_contracts.quantity import QuantityError, parse_quantity, to_canonical
from allot_contracts.quantity_limits import range_issue

__all__ = ["Container", "kube_qos_of", "pod_limits", "read_containers", "read_quantities"]

_NATIVE: Final = frozenset({n.CPU, n.MEMORY, n.EPHEMERAL_STORAGE, n.PODS})


class Container(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One container's resources (canonical integers, after aliases) as node-side enforcement needs them."""

    name: str
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    init: bool = False


def read_quantities(raw: Any, path: str, issues: list[FieldIssue]) -> dict[str, int]:
    """A container's requests or limits (names as written, canonical values), with name and range checks."""
    out: dict[str, int] = {}
    for name, value in checked_object(
        raw, path, issues, message="must be a map of resource name to quantity"
    ).items():
        fpath = f"{path}[{name}]"
        if not isinstance(name, str) or not is_qualified_name(name):
            issues.append(
                FieldIssue(
                    path=fpath,
                    code="InvalidResourceName",
                    message="must be a standard resource name or a fully qualified extended resource name "
                    "(e.g. 'example.com/foo')",
                    value=str(name)[:100],
                )
            )
            continue
        try:
            amount = to_canonical(name, parse_quantity(value))
        except QuantityError as exc:
            issues.append(FieldIssue(path=fpath, code="InvalidQuantity", message=str(exc)))
            continue
        problem = range_issue(name, amount, fpath, value)
        if problem is not None:
            issues.append(problem)
            continue
        out[name] = amount
    return out


def read_containers(spec: Mapping[str, Any], issues: list[FieldIssue]) -> tuple[Container, ...]:
    out: list[Container] = []
    for field, init in (("containers", False), ("initContainers", True)):
        containers: list[Any] = checked_list(spec.get(field), f"spec.{field}", issues)
        for i, c in enumerate(containers):
            path = f"spec.{field}[{i}]"
            if not isinstance(c, Mapping):
                issues.append(FieldIssue(path=path, message="must be a container object"))
                continue
            res = c.get("resources") or {}
            if not isinstance(res, Mapping):
                issues.append(
                    FieldIssue(path=f"{path}.resources", message="must be an object with requests and limits")
                )
                continue
            requests = read_quantities(res.get("requests"), f"{path}.resources.requests", issues)
            limits = read_quantities(res.get("limits"), f"{path}.resources.limits", issues)
            for name in sorted(requests.keys() & limits.keys()):
                # as the API server validates them: a request at most its limit, an extended resource's equal to it
                extended = (
                    "/" in name
                    and name not in _NATIVE
                    and not name.startswith(("hugepages-", "kubernetes.io/"))
                )
                rule = (
                    "less than or equal to"
                    if requests[name] > limits[name]
                    else "equal to"
                    if extended
                    else ""
                )
                if rule and requests[name] != limits[name]:
                    issues.append(
                        FieldIssue(
                            path=f"{path}.resources.requests[{name}]",
                            code="InvalidValue",
                            message=f"must be {rule} {name} limit of {res['limits'][name]}",
                            value=str(res["requests"][name]),
                        )
                    )
            cname = c.get("name")
            out.append(
                Container(
                    name=cname if isinstance(cname, str) else f"#{i}",
                    requests=dict(sorted(requests.items())),
                    limits=dict(sorted(limits.items())),
                    init=init,
                )
            )
    return tuple(out)


def pod_limits(containers: tuple[Container, ...]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in containers:
        for k, v in c.limits.items():
            total[k] = max(total.get(k, 0), v) if c.init else total.get(k, 0) + v
    return dict(sorted(total.items()))


def kube_qos_of(containers: tuple[Container, ...]) -> str:
    """Kubernetes QoS: Guaranteed (every container: cpu and memory limits == requests), BestEffort (no cpu or
    memory requests or limits anywhere), else Burstable. A request defaults to the limit."""
    if not containers:
        return "BestEffort"
    any_set = False
    guaranteed = True
    for c in containers:
        for res in (n.CPU, n.MEMORY):
            lim = c.limits.get(res)
            req = c.requests.get(res, lim)
            if req is not None or lim is not None:
                any_set = True
            if lim is None or req is None or req != lim:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
