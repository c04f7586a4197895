"""Usage arithmetic of a LowNodeLoad round: a node whose usage moves as the round chooses pods
(:class:`LiveNode`), shares of allocatable as exact fractions, thresholds (with deviation), the weighted score that
orders hot nodes, targets and pods, and the round's descriptions of usage against thresholds. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Final

import msgspec

from allot_contracts.objects.nodemetric import NodeMetric
from allot_descheduling.config import Thresholds
from allot_descheduling.evictor import PodInput

__all__ = ["PODS", "PROD", "LiveNode", "NodeInput"]

PROD: Final = "koord-prod"
PODS: Final = "pods"  # a threshold resource counted as upstream does: the pods on the node, one per pod moved


class NodeInput(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    labels: dict[str, str] = {}
    allocatable: dict[str, int] = {}
    requested: dict[str, int] = {}  # the requests of the pods on it
    unschedulable: bool = False
    busy: str = ""  # why it is left alone this round (a migration still moving a pod off or onto it)
    settled_at: int = 0  # its NodeMetric must be at least this recent (the last migration touching it ended)


class LiveNode:
    """A node in a round: its usage moves as the round chooses pods."""

    __slots__ = (
        "input",
        "low",
        "measured",
        "metric",
        "pod_usage",
        "prod_high",
        "prod_low",
        "prod_reported",
        "prod_usage",
        "requested",
        "usage",
    )

    def __init__(self, node: NodeInput, metric: NodeMetric, pods: Sequence[PodInput]) -> None:
        self.input = node
        self.metric = metric
        self.usage = metric.system_and_pods_usage()
        self.usage[PODS] = len(pods)
        self.measured = dict(self.usage)  # as reported, before the round moves anything
        self.requested = dict(node.requested)
        by_uid = {m.uid: m for m in metric.pods if m.uid}
        by_key = {m.key: m for m in metric.pods}
        self.pod_usage: dict[str, dict[str, int]] = {}
        self.prod_usage: dict[str, int] = {}
        known = {p.key: p for p in pods}
        for pod in pods:
            got = by_uid.get(pod.uid) if pod.uid else None
            got = got or by_key.get(pod.key)
            if got is not None:
                self.pod_usage[pod.key] = {**got.usage, PODS: 1}
        self.prod_usage[PODS] = sum(1 for p in pods if p.koord_priority == PROD)
        for m in metric.pods:
            pod_known = known.get(m.key)
            klass = (pod_known.koord_priority if pod_known is not None else "") or m.priority
            if klass == PROD:
                for r, v in m.usage.items():
                    self.prod_usage[r] = self.prod_usage.get(r, 0) + v
        self.prod_reported = dict(self.prod_usage)
        self.low: dict[str, Fraction] = {}
        self.prod_low: dict[str, Fraction] = {}
        self.prod_high: dict[str, Fraction] = {}

    @property
    def name(self) -> str:
        return self.input.name

    def alloc(self, r: str) -> int:
        return self.input.allocatable.get(r, 0)


def pct(amount: int, alloc: int) -> Fraction:
    return Fraction(amount * 100, alloc) if alloc else Fraction(0)


def hundredths(value: Fraction) -> int:
    return int(value * 100)


def amounts(node: LiveNode, pcts: Mapping[str, Fraction]) -> dict[str, int]:
    return {r: int(node.alloc(r) * p / 100) for r, p in sorted(pcts.items())}


def thresholds(
    pool_pcts: Thresholds, nodes: list[LiveNode], usage_of: str, deviation: bool, sign: int
) -> dict[str, Fraction]:
    """The pool's percentages (with deviation: average ± given, clipped to 0–100)."""
    if not deviation:
        return dict(pool_pcts)
    out: dict[str, Fraction] = {}
    for r, given in pool_pcts.items():
        shares = [pct((n.usage if usage_of == "node" else n.prod_usage).get(r, 0), n.alloc(r)) for n in nodes]
        average = sum(shares, Fraction(0)) / len(shares) if shares else Fraction(0)
        out[r] = min(Fraction(100), max(Fraction(0), average + sign * given))
    return out


def over(usage: Mapping[str, int], pcts: Mapping[str, Fraction], node: LiveNode) -> list[str]:
    """The resources on which ``usage`` is above the percentages of the node's allocatable."""
    return [r for r, p in sorted(pcts.items()) if usage.get(r, 0) * 100 > p * node.alloc(r)]


def at_most(usage: Mapping[str, int], pcts: Mapping[str, Fraction], node: LiveNode) -> bool:
    return not over(usage, pcts, node)


def score(
    usage: Mapping[str, int], node: LiveNode, weights: Mapping[str, int], resources: Sequence[str]
) -> Fraction:
    total = sum(weights.get(r, 1) for r in resources) or 1
    return (
        sum((weights.get(r, 1) * pct(usage.get(r, 0), node.alloc(r)) for r in resources), Fraction(0)) / total
    )


def describe(
    usage: Mapping[str, int], pcts: Mapping[str, Fraction], node: LiveNode, word: str, prefix: str = ""
) -> str:
    return ", ".join(
        f"{prefix}{r} {fmt(pct(usage.get(r, 0), node.alloc(r)))}% {word} {fmt(pcts[r])}%"
        for r in sorted(pcts)
    )


def fmt(value: Fraction) -> str:
    return f"{float(value):.1f}".removesuffix(".0")


def minus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = max(0, out.get(r, 0) - v)
    return out


def plus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return out
