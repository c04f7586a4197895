"""The placement engine's decisions (defined in :mod:`allot_contracts.decisions.placement`, where the events that
carry them are defined)."""

from allot_contracts.decisions.placement import Decision, Freed, GroupDecision, NodeScore

__all__ = ["Decision", "Freed", "GroupDecision", "NodeScore"]
