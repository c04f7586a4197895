"""The cluster's inventory as device-allocator folds it into the placement engine: nodes, their devices and their
NUMA topology, each upserted when reported and deleted when removed."""

from __future__ import annotations

from allot_contracts.events import (
    DevicesRemoved,
    DevicesReported,
    Event,
    NodeRegistered,
    NodeRemoved,
    TopologyRemoved,
    TopologyReported,
)
from allot_contracts.objects.sharing import Parts
from allot_placement import PlacementEngine
from device_allocator.folding import folds_any

_FOLDED = folds_any(
    NodeRegistered, NodeRemoved, DevicesReported, DevicesRemoved, TopologyReported, TopologyRemoved
)


def fold_inventory(engine: PlacementEngine, event: Event, parts: Parts) -> bool:
    """Fold a node, its devices or its topology into ``engine`` (their repeated parts held once, in ``parts``);
    False for other events."""
    if not _FOLDED(event):  # most events: one test instead of a failed pattern per type
        return False
    match event:
        case NodeRegistered(node=node):
            engine.upsert_node(parts.node(node))
        case NodeRemoved(name=name):
            engine.delete_node(name)
        case DevicesReported(name=name, inventory=inventory):
            engine.upsert_device(name, parts.inventory(inventory))
        case DevicesRemoved(name=name):
            engine.delete_device(name)
        case TopologyReported(name=name, topology=topology):
            engine.upsert_topology(name, topology)
        case TopologyRemoved(name=name):
            engine.delete_topology(name)
        case _:
            return False
    return True
