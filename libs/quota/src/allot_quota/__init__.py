"""Allot's elastic-quota engine: hierarchical ElasticQuota with borrowing, lending and reclaim, as pure decisions.

Start with :class:`QuotaEngine` (``engine.py``); semantics for users are in ``docs/quota.md``.
"""

from allot_contracts.issues import FieldIssue
from allot_quota.config import QuotaConfig
from allot_quota.decisions import AdmitDecision, Eviction, UsageChange, VictimsDecision
from allot_quota.engine import ENGINE_VERSION, QuotaEngine
from allot_quota.model import DEFAULT_QUOTA, ROOT_QUOTA, SYSTEM_QUOTA
from allot_quota.runtime import hamilton

__all__ = [
    "DEFAULT_QUOTA",
    "ENGINE_VERSION",
    "ROOT_QUOTA",
    "SYSTEM_QUOTA",
    "AdmitDecision",
    "Eviction",
    "FieldIssue",
    "QuotaConfig",
    "QuotaEngine",
    "UsageChange",
    "VictimsDecision",
    "hamilton",
]
