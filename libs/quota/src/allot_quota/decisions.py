"""The quota engine's decision records (defined in :mod:`allot_contracts.decisions.quota`, where the events that
carry them are defined)."""

from allot_contracts.decisions.quota import AdmitDecision, Eviction, UsageChange, VictimsDecision

__all__ = ["AdmitDecision", "Eviction", "UsageChange", "VictimsDecision"]
