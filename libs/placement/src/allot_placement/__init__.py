"""allot_placement: the pure placement engine (devices, topology, NUMA, CPUs, node scoring, FGD).

Public surface (see docs/placement.md):

    from allot_placement import PlacementEngine, PlacementConfig, Decision, FieldIssue

    eng = PlacementEngine(PlacementConfig.from_dict(cfg_dict))
    eng.upsert_node(node); eng.upsert_device(device); eng.upsert_topology(nrt)
    decision = eng.schedule(pod)            # never mutates the engine
    if decision.outcome == "Scheduled":
        eng.assume(decision)
"""

from allot_contracts.issues import FieldIssue
from allot_placement.config import ConfigError, PlacementConfig, TypicalPod
from allot_placement.decision import Decision, GroupDecision, NodeScore
from allot_placement.engine import PlacementEngine
from allot_placement.state import Allocation

__all__ = [
    "Allocation",
    "ConfigError",
    "Decision",
    "FieldIssue",
    "GroupDecision",
    "NodeScore",
    "PlacementConfig",
    "PlacementEngine",
    "TypicalPod",
]
