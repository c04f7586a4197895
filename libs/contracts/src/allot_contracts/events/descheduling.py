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
    "DefragMove",
    "DefragPlan",
    "DefragPlanned",
    "DefragWaiting",
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


class DefragMove(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One pod a GPU defragmentation plan moves: off ``source``, onto ``gpus`` (indexes) of ``target``."""

    pod: str
    uid: str = ""
    source: str
    target: str
    gpus: list[int] = []
    gang: str = ""  # the gang it moves with (every member is in the same plan)
    job: str = ""  # the PodMigrationJob asked for (not in a dry run)


class DefragPlan(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The fewest moves that let one waiting GPU pod fit on ``target`` (its ``gpus``), with the cluster's FGD
    fragmentation (weight × milli-GPU, ``frag_weight`` per milli) before and after the moves and the pod's placement."""

    pending: str
    target: str
    gpus: list[int] = []
    moves: list[DefragMove] = []
    frag_before: int
    frag_after: int


class DefragWaiting(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A waiting GPU pod the round made no plan for; ``code``: ``Fits`` (it fits without moves),
    ``InsufficientFree`` (the free GPU of the nodes it may use, fragments included, is less than it asks),
    ``NoPlan`` (no set of moves within the limits lets it fit), ``RoundLimit`` (the round's plans are used up)."""

    pod: str
    code: str
    reason: str


class DefragPlanned(Event, frozen=True, kw_only=True, tag="descheduler.defrag_planned.v1"):
    """One round of one profile's GPUDefrag: the waiting GPU pods, the plans that let them fit, and the cluster's
    FGD fragmentation before the round and after its plans (weight × milli-GPU; divide by ``frag_weight`` × 1000
    for GPUs). In a dry run (the default) nothing is asked for; otherwise every move is a PodMigrationJob."""

    profile: str
    plugin: str = "GPUDefrag"
    round: int
    dry_run: bool = True
    message: str
    frag_weight: int = 0
    frag_before: int = 0
    frag_after: int = 0
    free_milli: int = 0  # idle milli-GPU of the schedulable nodes
    plans: list[DefragPlan] = []
    waiting: list[DefragWaiting] = []
    jobs: list[str] = []
