"""Values held for long, each distinct one held once: what a projection keeps of thousands of pods of few shapes.

A service that keeps every pod it has read (the device-allocator's pods as read at the door, and what load-aware
scheduling keeps of each pod on a node) holds, for each, some twenty objects that most other pods repeat: the same
requests and limits, the same container list, the same device request, the same empty reservation and NUMA parts,
the same QoS strings. Decoded from each pod's event, every pod gets its own copies: at 30,000 pods about 2.2 kB each.
:class:`Parts` gives back a value equal to the one it is given, the first such value it was given, so each distinct
part is held once (a pod's own name, uid and allocation stay its own: about 0.45 kB a pod).

Invariants:
- What is given back is equal to what is given, of the same type, and encodes to the same bytes: a part is shared
  only with one of its type that encodes to the same bytes, so even the order of a mapping's keys is kept. Nothing a
  decision reads changes; only how many copies of a value exist.
- Pods and their parts are frozen in use: no code changes a pod's mappings after the door, which is what lets two
  pods hold one mapping.
- Bounded: the table is emptied when it reaches ``limit`` entries (values already shared stay shared).
- Part of the state: a snapshot holds the table, so a restored service shares what the live one shares, and the
  state of one is the state of the other byte for byte.
"""

from __future__ import annotations

from typing import Final, TypeVar

import msgspec

from allot_contracts.objects.inventory import Inventory, NodeInfo
from allot_contracts.objects.pod import Pod

__all__ = ["Parts"]

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)

# the fields of a pod whose values repeat across pods; its own (name, uid, its allocation) are left as they are
_POD_PARTS: Final = (
    "namespace",
    "labels",
    "owners",
    "kube_qos",
    "koord_qos",
    "koord_priority",
    "priority_class_name",
    "requests",
    "limits",
    "containers",
    "devices",
    "hints",
    "joint",
    "partition",
    "resource_spec",
    "numa_spec",
    "node_selector",
    "affinity",
    "tolerations",
    "preferred_nodes",
    "gpu_filter",
    "quota",
    "reservation",
    "load_estimation",
)
_NODE_PARTS: Final = ("taints", "allocatable", "reserved_cpus", "usage_thresholds")
_DEVICE_PARTS: Final = ("type", "resources", "pcie", "labels", "vf_groups")
_INVENTORY_PARTS: Final = ("labels", "partitions", "content_key")
_encode = msgspec.msgpack.Encoder().encode
_NAMES: dict[type, bytes] = {}  # a type -> its module and name, the prefix of its values' keys


class Parts:
    """The values seen so far, by type and encoding."""

    __slots__ = ("_held", "limit")

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        # the name of its type and its encoding -> the value: plain bytes, so that a snapshot holds the table and a
        # restored service goes on sharing exactly as the one that never stopped (a state's bytes depend on which of
        # its values are one object)
        self._held: dict[bytes, object] = {}

    def one(self, value: T) -> T:
        """``value``, or the equal value of its type given here before."""
        kind = type(value)
        name = _NAMES.get(kind)
        if name is None:
            name = _NAMES[kind] = f"{kind.__module__}.{kind.__qualname__}:".encode()
        key = name + _encode(value)
        held = self._held.get(key)
        if held is None:
            if len(self._held) >= self.limit:
                self._held.clear()
            self._held[key] = value
            return value
        return held  # type: ignore[return-value]  # same type and bytes: the key says so

    def struct(self, value: S, fields: tuple[str, ...]) -> S:
        """``value`` (a frozen struct), or an equal one whose ``fields`` are the values held here."""
        swap: dict[str, object] = {}
        for field in fields:
            part = getattr(value, field)
            if part is not None and (held := self.one(part)) is not part:
                swap[field] = held
        return msgspec.structs.replace(value, **swap) if swap else value

    def pod(self, pod: Pod) -> Pod:
        """``pod``, or an equal pod whose repeated parts are the ones held here."""
        return self.struct(pod, _POD_PARTS)

    def node(self, node: NodeInfo) -> NodeInfo:
        """A Node as read, its parts but its name and labels (which name it) held once."""
        return self.struct(node, _NODE_PARTS)

    def inventory(self, inventory: Inventory) -> Inventory:
        """A node's devices as reported, each device's parts but its minor, id and bus held once."""
        devices = {
            kind: tuple(self.struct(device, _DEVICE_PARTS) for device in of_kind)
            for kind, of_kind in inventory.devices.items()
        }
        return msgspec.structs.replace(self.struct(inventory, _INVENTORY_PARTS), devices=devices)

    def __len__(self) -> int:
        return len(self._held)
