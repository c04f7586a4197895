"""What the node side adds to a node as the engine sees it: allocatable beyond the Node object, device liveness,
and load.

Responsibility: ``NodeOverrides`` (the batch/mid resources and amplified cpu of a ``node.allocatable_updated``
decision, and whether the node's devices are unschedulable because its node-reporter stopped sending heartbeats),
``effective_info`` (the Node as parsed, with the overrides applied: what every filter and score reads), and
``check`` (the per-node filter and score stage for heartbeat loss and load-aware scheduling, called by ``evaluate``).

Rules:
- Overridden resources replace the Node's own amounts (``kubernetes.io/batch-cpu`` written on a Node by hand is
  replaced by the computed value once one is recorded); a resource mapped to ``None`` keeps the Node's own amount
  (co-location switched off resets batch and mid to what the Node says).
- A node whose heartbeat was lost fails every pod that requests devices with
  ``node(s) had stale device inventory (no heartbeat from node-reporter)``; pods without device requests are not
  affected (the node's CPUs and memory do not depend on its node-reporter).
- Load-aware scheduling: see :mod:`allot_placement.loadaware`.
Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from allot_contracts.objects.inventory import NodeInfo
from allot_placement import loadaware

if TYPE_CHECKING:
    from allot_placement.config import PlacementConfig
    from allot_placement.pod import PodSpec
    from allot_placement.reasons import Reason
    from allot_placement.state import NodeState

__all__ = ["STALE_DEVICES", "NodeOverrides", "check", "effective_info"]

STALE_DEVICES: Final = (
    "node(s) had stale device inventory (no heartbeat from node-reporter)",
    "DeviceInventoryStale",
)


class NodeOverrides(msgspec.Struct, frozen=True, kw_only=True):
    allocatable: tuple[tuple[str, int | None], ...] = ()
    devices_stale: bool = False


def effective_info(base: NodeInfo | None, overrides: NodeOverrides | None) -> NodeInfo | None:
    if base is None or overrides is None or not overrides.allocatable:
        return base
    allocatable = dict(base.allocatable)
    for name, amount in overrides.allocatable:
        if amount is not None:
            allocatable[name] = amount
    return msgspec.structs.replace(base, allocatable=dict(sorted(allocatable.items())))


def check(cfg: PlacementConfig, state: NodeState, pod: PodSpec) -> tuple[Reason | None, int | None]:
    """(why the node fails, or None; the LoadAwareScheduling score, or None when it does not score the node)."""
    overrides = state.overrides
    if overrides is not None and overrides.devices_stale and pod.devices:
        return STALE_DEVICES, None
    load = state.load
    if load is None or not cfg.load_aware.enabled:
        return None, None
    return loadaware.filter_and_score(cfg.load_aware, load, pod.requests, pod.load)
