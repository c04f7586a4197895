"""What the node side adds to a node as the engine sees it: allocatable beyond the Node object, NUMA-level batch
resources, CPU amplification, device liveness, and load.

Responsibility: ``NodeOverrides`` (the batch/mid resources, NUMA-level batch resources and amplified cpu of a
``node.allocatable_updated`` decision, and whether the node's devices are unschedulable because its node-reporter
stopped sending heartbeats), ``effective_info`` and ``effective_topology`` (the Node and its NodeResourceTopology as
parsed, with the overrides applied: what every filter and score reads), ``amplify`` and ``check_amplified`` (the
amplified-CPU filter), and ``check`` (the per-node filter and score stage for heartbeat loss and load-aware
scheduling, called by ``evaluate``).

Rules:
- Overridden resources replace the Node's own amounts (``kubernetes.io/batch-cpu`` written on a Node by hand is
  replaced by the computed value once one is recorded); a resource mapped to ``None`` keeps the Node's own amount
  (co-location switched off resets batch and mid to what the Node says).
- NUMA-level batch resources (``kubernetes.io/batch-cpu``/``batch-memory`` per NUMA zone) replace the zones' own
  amounts in the topology; a pod bound to NUMA nodes (a NUMA topology policy on the pod or the node) that requests
  batch resources is then distributed over the zones' batch resources like cpu and memory, and fails with
  ``Insufficient NUMA kubernetes.io/batch-cpu`` when its NUMA nodes lack them. Pods without a NUMA policy are
  checked against the node-level amount only.
- CPU amplification (a cpu ratio above 1 in ``amplification``): the node's cpu allocatable is already the amplified
  one (``allocatable``); each NUMA zone's cpu is amplified the same way (``ceil(cpu × ratio)``). A cpuset-bound pod
  consumes ``amplify(cpu)`` of it, since its CPUs are exclusive: the filter counts every cpuset-bound pod on the node
  at its amplified amount, the incoming pod too when it gets a cpuset, and fails the node with ``Insufficient
  amplified cpu`` when the sum exceeds the amplified allocatable (the node-level fit check counts requests as they
  are). Scores count cpuset-bound pods amplified in the same way. The recorded allocation keeps the pod's own
  request (quota and overcommit read requests, not the amplified charge).
- A node whose heartbeat was lost fails every pod that requests devices with
  ``node(s) had stale device inventory (no heartbeat from node-reporter)``; pods without device requests are not
  affected (the node's CPUs and memory do not depend on its node-reporter).
- Load-aware scheduling: see :mod:`allot_placement.loadaware`.
Pure.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Final

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import NodeInfo, Topology
from allot_placement import loadaware
from allot_placement.state import amplify

if TYPE_CHECKING:
    from allot_placement.config import PlacementConfig
    from allot_placement.pod import PodSpec
    from allot_placement.reasons import Reason
    from allot_placement.state import NodeState

__all__ = [
    "INSUFFICIENT_AMPLIFIED_CPU",
    "STALE_DEVICES",
    "NodeOverrides",
    "amplify",
    "check",
    "check_amplified",
    "effective_info",
    "effective_topology",
]

STALE_DEVICES: Final = (
    "node(s) had stale device inventory (no heartbeat from node-reporter)",
    "DeviceInventoryStale",
)
INSUFFICIENT_AMPLIFIED_CPU: Final = ("Insufficient amplified cpu", "InsufficientAmplifiedCPU")
_ENC: Final = msgspec.msgpack.Encoder()


class NodeOverrides(msgspec.Struct, frozen=True, kw_only=True):
    allocatable: tuple[tuple[str, int | None], ...] = ()
    numa: tuple[tuple[int, tuple[tuple[str, int], ...]], ...] = ()  # NUMA zone -> batch resources
    cpu_amplification: str = ""  # the cpu amplification ratio when above 1 (e.g. "1.50"), else ""
    devices_stale: bool = False

    @property
    def ratio(self) -> Decimal | None:
        return Decimal(self.cpu_amplification) if self.cpu_amplification else None


def effective_info(base: NodeInfo | None, overrides: NodeOverrides | None) -> NodeInfo | None:
    if base is None or overrides is None or not overrides.allocatable:
        return base
    allocatable = dict(base.allocatable)
    for name, amount in overrides.allocatable:
        if amount is not None:
            allocatable[name] = amount
    return msgspec.structs.replace(base, allocatable=dict(sorted(allocatable.items())))


def effective_topology(base: Topology | None, overrides: NodeOverrides | None) -> Topology | None:
    """The topology with NUMA-level batch resources and the amplified per-zone cpu applied."""
    if base is None or overrides is None or not (overrides.numa or overrides.ratio):
        return base
    zones = {z: dict(v) for z, v in base.numa_allocatable.items()}
    ratio = overrides.ratio
    if ratio is not None:
        for zone in zones.values():
            if n.CPU in zone:
                zone[n.CPU] = amplify(zone[n.CPU], ratio)
    for z, resources in overrides.numa:
        if z in zones:
            zones[z].update(resources)
    return msgspec.structs.replace(
        base,
        numa_allocatable={z: dict(sorted(v.items())) for z, v in sorted(zones.items())},
        content_key=base.content_key + _ENC.encode((overrides.numa, overrides.cpu_amplification)),
    )


def check_amplified(state: NodeState, info: NodeInfo, cpu: int, cpuset: bool, extra: int) -> Reason | None:
    """The amplified-CPU filter: cpuset-bound pods (the incoming one when ``cpuset``) count at their amplified
    amount against the node's amplified cpu allocatable; ``extra``: what the placed ones add beyond their
    requests (``NodeState.amplified_extra``)."""
    ratio = state.overrides.ratio if state.overrides is not None else None
    if ratio is None or cpu <= 0:
        return None
    need = amplify(cpu, ratio) if cpuset else cpu
    if state.requested.get(n.CPU, 0) + extra + need > info.allocatable.get(n.CPU, 0):
        return INSUFFICIENT_AMPLIFIED_CPU
    return None


def check(cfg: PlacementConfig, state: NodeState, pod: PodSpec) -> tuple[Reason | None, int | None]:
    """(why the node fails, or None; the LoadAwareScheduling score, or None when it does not score the node)."""
    overrides = state.overrides
    if overrides is not None and overrides.devices_stale and pod.devices:
        return STALE_DEVICES, None
    load = state.load
    if load is None or not cfg.load_aware.enabled:
        return None, None
    return loadaware.filter_and_score(cfg.load_aware, load, pod.requests, pod.load)
