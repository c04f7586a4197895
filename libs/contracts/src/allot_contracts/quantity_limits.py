"""How large a quantity may be: the maxima every door holds an amount to, by resource kind and scale.

Responsibility: one place for the range of an amount read from a manifest (``allot apply``, ``allot webhook``,
kube-sync and the services all read manifests through :mod:`allot_contracts.objects`). A value no machine can have
(a NodeMetric reporting ``1e30`` cpu, a node with a million terabytes, a pod asking for more than any node holds)
is a broken or hostile reporter, not a fact to schedule by: it is refused with the field path and the maximum
instead of turning every later decision on that node into nonsense.

The maxima (canonical units: cpu in millicores, everything else in base units), documented in docs/limits.md:

- ``node`` scale, for what one machine has or one pod asks for (node capacity and allocatable, Device and NUMA zone
  resources, NodeMetric usages, pod requests, limits and overhead, gang minimum resources):

  - cpu-like (``cpu``, ``kubernetes.io/batch-cpu``, ``kubernetes.io/mid-cpu``): 1,000,000 cores (10^9 millicores);
    the largest machines have a few thousand;
  - everything else (bytes, device shares, counts, extended resources): 2^53 (8 Pi of bytes), the largest
    integer a JSON reader holding numbers as doubles keeps exact; the largest machines have tens of Ti of memory;
- ``cluster`` scale, for amounts summed over many machines (ElasticQuota ``min``/``max``, a quota profile's
  resources): 2^63 - 1, the largest amount the log stores.

Negative amounts are refused at either scale (``must be greater than or equal to 0``, Kubernetes' wording);
NaN and infinities never parse (:func:`allot_contracts.quantity.parse_quantity`).
Pure: no IO, no clock.
"""

from __future__ import annotations

from typing import Final, Literal

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.quantity import QuantityError, to_canonical

__all__ = ["CLUSTER_MAX", "CPU_NODE_MAX_MILLI", "NODE_MAX", "Scale", "maximum", "range_issue"]

Scale = Literal["node", "cluster"]

CPU_NODE_MAX_MILLI: Final = 10**9  # one million cores
NODE_MAX: Final = 2**53  # bytes, device shares, counts
CLUSTER_MAX: Final = 2**63 - 1
_CPU_LIKE: Final = frozenset({n.CPU, n.BATCH_CPU, n.MID_CPU})


def maximum(name: str, scale: Scale = "node") -> int:
    """The largest canonical amount of resource ``name`` accepted at ``scale``."""
    if scale == "cluster":
        return CLUSTER_MAX
    return CPU_NODE_MAX_MILLI if name in _CPU_LIKE else NODE_MAX


def _described(name: str, limit: int) -> str:
    if limit == CPU_NODE_MAX_MILLI and name in _CPU_LIKE:
        unit = "" if name == n.CPU else " (counted in millicores: 1000000000)"
        return f"1000000 cores{unit}, more than any node has"
    if limit == NODE_MAX:
        return f"{NODE_MAX} (8Pi), more than any node has"
    return f"{limit}, the largest amount the log stores"


def range_issue(name: str, amount: int, path: str, value: object, scale: Scale = "node") -> FieldIssue | None:
    """Why the canonical ``amount`` of ``name`` (read from ``value`` at ``path``) is out of range, or None."""
    if amount < 0:
        return FieldIssue(
            path=path,
            code="InvalidQuantity",
            message=f'Invalid value: "{value}": must be greater than or equal to 0',
            value=str(value)[:100],
        )
    limit = maximum(name, scale)
    if amount > limit:
        return FieldIssue(
            path=path,
            code="InvalidQuantity",
            message=f'Invalid value: "{value}": must be at most {_described(name, limit)}',
            value=str(value)[:100],
        )
    return None


def checked_amount(
    name: str, value: object, path: str, issues: list[FieldIssue], *, code: str = "InvalidQuantity"
) -> int | None:
    """The canonical amount of ``name`` read from ``value`` (a quantity at ``path``), or None with the issue that
    refuses it: not a quantity (with ``code``), negative, or beyond what one machine has."""
    try:
        amount = to_canonical(name, value)  # type: ignore[arg-type]  # anything else is refused as not a quantity
    except QuantityError as exc:
        issues.append(FieldIssue(path=path, code=code, message=str(exc)))
        return None
    problem = range_issue(name, amount, path, value)
    if problem is not None:
        issues.append(problem)
        return None
    return amount
