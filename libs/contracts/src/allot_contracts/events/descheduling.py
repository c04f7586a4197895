"""Descheduling: the rounds of the descheduler (LowNodeLoad), each a recorded decision with what it read.

A round reads every node's latest NodeMetric, classifies the nodes of each pool against their thresholds, and, for
the hot nodes whose anomaly is confirmed, walks the candidate pods in order, saying of each why it was or was not
chosen. The PodMigrationJobs it asks for are recorded in the same decision (``migration.applied``, producer
reservation-manager); a dry-run round records only what it would have asked for. Amounts are canonical integers
(cpu in millicores, memory in bytes); percentages are hundredths of a percent (``6000`` = 60 %).
"""

from __future__ import annotations

import msgspec

from allot_contracts.events._base import Event

__all__ = [
    "DeschedulerCandidate",
    "DeschedulerNode",
    "DeschedulerRound",
]


class DeschedulerNode(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One node as a round saw it. ``state``: ``low`` (under every low threshold: a target), ``normal``, ``high``
    (above a high threshold: a source once its anomaly is confirmed) or ``excluded`` (``reason`` says why)."""

    name: str
    pool: str
    state: str
    reason: str = ""
    metric_time: int | None = None  # the NodeMetric's updateTime (µs)
    allocatable: dict[str, int] = {}
    usage: dict[str, int] = {}
    usage_pct: dict[str, int] = {}  # hundredths of a percent of allocatable
    low: dict[str, int] = {}  # threshold amounts
    high: dict[str, int] = {}
    prod_usage: dict[str, int] = {}
    prod_low: dict[str, int] = {}
    prod_high: dict[str, int] = {}
    abnormal_rounds: int = 0  # consecutive rounds above a high threshold, this one included
    confirmed: bool = False  # the anomaly is confirmed: pods are moved off it this round
    usage_after: dict[str, int] = {}  # what the round expects once its moves are done


class DeschedulerCandidate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A pod on a confirmed hot node, in the order the round considered it; ``code`` is stable (``Chosen``,
    ``DaemonSet``, ``EvictionDisabled``, ``GangMember``, ``Reserved``, ``LocalStorage``, ``NoPodMetric``, …)."""

    pod: str
    uid: str = ""
    node: str
    chosen: bool = False
    code: str
    reason: str
    usage: dict[str, int] = {}
    target: str = ""  # the node the round counted room on (chosen pods)
    job: str = ""  # the PodMigrationJob asked for (not in a dry run)


class DeschedulerRound(Event, frozen=True, kw_only=True, tag="descheduler.round.v1"):
    """One descheduling round of one profile's LowNodeLoad, at the recorded time of its timer."""

    profile: str
    plugin: str = "LowNodeLoad"
    round: int  # 1, 2, … per profile
    dry_run: bool = False
    message: str
    nodes: list[DeschedulerNode] = []
    candidates: list[DeschedulerCandidate] = []
    jobs: list[str] = []
