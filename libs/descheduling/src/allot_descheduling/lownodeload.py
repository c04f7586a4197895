"""LowNodeLoad: one descheduling round over the nodes' NodeMetrics, as a pure function.

``run_round`` classifies the nodes of each pool and chooses the pods to move off the hot ones; it returns what the
round saw and decided (:class:`DeschedulerNode`, :class:`DeschedulerCandidate`), the moves, and the anomaly counters
for the next round. Its inputs are plain data (:class:`NodeInput`, :class:`PodInput`, typed NodeMetrics); ``at`` is
the round's recorded time, the only clock.

Rules (upstream's LowNodeLoad, with Allot's choices where upstream leaves room; docs/descheduling.md):

1. Nodes: those matching ``nodeSelector``; each belongs to the first pool whose selector matches. A node is
   *excluded* (neither source nor target) without a NodeMetric, with an expired one (``at − updateTime ≥
   nodeMetricExpirationSeconds``), with one older than the last migration that moved a pod off or onto it, while a
   migration is still moving a pod off or onto it, or when its allocatable lacks a threshold resource.
2. Usage, per threshold resource, as upstream counts it: the NodeMetric's system usage (``systemUsage``, derived
   as ``nodeUsage − Σ podUsage − Σ host applications`` when absent) plus every reported pod's usage
   (``NodeMetric.system_and_pods_usage``); prod usage: the reported usage of its prod pods. Thresholds are
   percentages of allocatable; with ``useDeviationThresholds`` they are the pool's average usage minus (low) or plus
   (high) the given percentage, clipped to 0–100.
   A ``pods`` threshold counts the pods on the node (prod pods for the prod usage), one per pod moved.
3. A node is *low* (a target) when schedulable and at most its low threshold on every resource (and at most its prod
   low thresholds when set); *high* when above its high threshold on some resource (or above a prod high one). A
   node above its node thresholds is relieved by node usage alone; one only above its prod thresholds by prod pods.
4. Anomaly: a high node's counter counts consecutive rounds above; its anomaly is *confirmed* when the counter reaches
   ``consecutiveAbnormalities`` (1: at once). Any other state resets the counter, and so does moving pods off it.
5. Nothing moves when no node is low, when the low nodes are at most ``numberOfNodes``, when every node is low, or
   when no anomaly is confirmed. Sources are taken hottest first (weighted usage share, ``resourceWeights``).
6. Candidates of a source: its pods, each skipped with a reason: namespace not evictable; not matched by
   ``podSelectors``; refused by the evictor filter (:mod:`allot_descheduling.evictor`, the one every
   PodMigrationJob passes too: terminating, DaemonSet, mirror or static, system-critical, never-evict cost, local
   storage, …); a gang member whose gang's policy is Skip; placed in a reservation; already migrating; no usage
   reported for it.
7. Order: Koordinator priority class (free, batch, mid, prod), priority, Kubernetes QoS (BestEffort, Burstable,
   Guaranteed), Koordinator QoS (BE, LS, LSR, LSE), pod deletion cost, eviction cost; then *segmented* by usage: first
   the pods whose move alone brings the source under its high thresholds (smallest first: move no more than needed),
   then the others (largest first: move as few as possible); then name.
8. Walking that order while the source is still above a high threshold (re-checked before every pick): a pod moves
   to the low node with the least weighted usage after the move among those that stay at most their high thresholds
   on every resource (and prod high for a prod pod) with the pod's usage added, and — with ``nodeFit`` — whose
   allocatable holds the requests already there plus the pod's. A pod no target can take is skipped (``NoTarget``).
9. A gang member picked while its gang's policy is Whole (:mod:`allot_descheduling.gangs`) moves with every member
   of its gang, wherever it runs — each passing the checks of 6, the limits taking them all, each with a target —
   or none moves (``GangMemberHeld``, ``EvictionLimit``, ``NoTarget``, naming the member).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import msgspec

from allot_contracts.events import DeschedulerCandidate, DeschedulerNode
from allot_contracts.objects.nodemetric import NodeMetric
from allot_contracts.objects.selectors import match_label_selector
from allot_descheduling import usage as u
from allot_descheduling.config import LowNodeLoadArgs, NodePool, Profile
from allot_descheduling.evictor import PodInput
from allot_descheduling.relieve import Caps, Choice, Hot, Move, NodeFit, no_static_filter, relieve
from allot_descheduling.usage import NodeInput

__all__ = ["Caps", "Detector", "Move", "NodeFit", "NodeInput", "PodInput", "RoundOutcome", "run_round"]


class Detector(msgspec.Struct, frozen=True, kw_only=True):
    abnormal: int  # consecutive rounds above a high threshold
    round: int  # the round of the latest count


class RoundOutcome(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    nodes: list[DeschedulerNode]
    candidates: list[DeschedulerCandidate]
    moves: list[Move]
    detectors: dict[str, Detector]


def _pools(args: LowNodeLoadArgs, nodes: Sequence[NodeInput]) -> dict[str, list[NodeInput]]:
    out: dict[str, list[NodeInput]] = {p.name: [] for p in args.pools}
    for node in sorted(nodes, key=lambda n: n.name):
        if args.node_selector is not None and not match_label_selector(args.node_selector, node.labels):
            continue
        for pool in args.pools:
            if pool.selector is None or match_label_selector(pool.selector, node.labels):
                out[pool.name].append(node)
                break
    return out


def run_round(
    profile: Profile,
    *,
    at: int,
    round_no: int,
    nodes: Sequence[NodeInput],
    pods: Sequence[PodInput],
    metrics: Mapping[str, NodeMetric],
    detectors: Mapping[str, Detector],
    node_fit: NodeFit = no_static_filter,
    caps: Caps | None = None,
) -> RoundOutcome:
    """One round of ``profile``'s LowNodeLoad. ``node_fit``: the host's check that a pod may run on a node (selector,
    affinity, taints); ``caps``: the round's eviction limits, shared by the profiles of one round."""
    args = profile.low_node_load
    assert args is not None, "run_round needs a profile with LowNodeLoad"
    if args.paused:
        return RoundOutcome(message="LowNodeLoad is paused", nodes=[], candidates=[], moves=[], detectors={})
    by_node: dict[str, list[PodInput]] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    out_nodes: list[DeschedulerNode] = []
    choice = Choice(profile, node_fit, caps if caps is not None else Caps())
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.gang:
            choice.gangs.setdefault(pod.gang, []).append(pod)
    counters: dict[str, Detector] = {}
    messages: list[str] = []
    members = _pools(args, nodes)
    measured = {p.name: _measure(p, members[p.name], by_node, metrics, args, at) for p in args.pools}
    choice.live = {n.name: n for live, _ in measured.values() for n in live}
    for pool in args.pools:
        live, excluded = measured[pool.name]
        out_nodes += excluded
        message = _pool_round(
            pool,
            choice,
            round_no=round_no,
            live=live,
            by_node=by_node,
            detectors=detectors,
            out_nodes=out_nodes,
            counters=counters,
        )
        messages.append(f"{pool.name}: {message}" if len(args.pools) > 1 else message)
    return RoundOutcome(
        message="; ".join(messages),
        nodes=out_nodes,
        candidates=choice.candidates,
        moves=choice.moves,
        detectors=counters,
    )


def _excluded(
    node: NodeInput, metric: NodeMetric | None, args: LowNodeLoadArgs, pool: NodePool, at: int
) -> str:
    if node.busy:
        return node.busy
    if metric is None or not metric.has_node_metric:
        return "no NodeMetric reported"
    updated = metric.update_time or 0
    if at - updated >= args.expiration_us:
        return f"NodeMetric expired (updated {(at - updated) // 1_000_000}s ago)"
    if updated < node.settled_at:
        return "its NodeMetric predates the last migration that moved a pod off or onto it"
    missing = [r for r in sorted(set(pool.high) | set(pool.prod_high)) if node.allocatable.get(r, 0) <= 0]
    if missing:
        return f"no allocatable {', '.join(missing)}"
    return ""


def _measure(
    pool: NodePool,
    nodes: list[NodeInput],
    by_node: Mapping[str, list[PodInput]],
    metrics: Mapping[str, NodeMetric],
    args: LowNodeLoadArgs,
    at: int,
) -> tuple[list[u.LiveNode], list[DeschedulerNode]]:
    """The pool's nodes the round measures, and those it leaves out (with why)."""
    live: list[u.LiveNode] = []
    out_nodes: list[DeschedulerNode] = []
    for node in nodes:
        metric = metrics.get(node.name)
        why = _excluded(node, metric, args, pool, at)
        if why or metric is None:
            out_nodes.append(
                DeschedulerNode(
                    name=node.name,
                    pool=pool.name,
                    state="excluded",
                    reason=why,
                    metric_time=metric.update_time if metric is not None else None,
                )
            )
            continue
        live.append(u.LiveNode(node, metric, by_node.get(node.name, [])))
    return live, out_nodes


@dataclass(frozen=True, slots=True)
class _Thresholds:
    """A pool's thresholds for this round, as percentages of allocatable per resource."""

    low: dict[str, Fraction]
    high: dict[str, Fraction]
    prod_low: dict[str, Fraction]
    prod_high: dict[str, Fraction]

    @classmethod
    def of(cls, pool: NodePool, live: list[u.LiveNode]) -> _Thresholds:
        return cls(
            low=u.thresholds(pool.low, live, "node", pool.use_deviation, -1),
            high=u.thresholds(pool.high, live, "node", pool.use_deviation, +1),
            prod_low=u.thresholds(pool.prod_low, live, "prod", pool.use_deviation, -1),
            prod_high=u.thresholds(pool.prod_high, live, "prod", pool.use_deviation, +1),
        )


def _classify(live: list[u.LiveNode], th: _Thresholds) -> tuple[dict[str, str], dict[str, str]]:
    """Each node's state (high, low or normal), and for the high ones which thresholds they are above (rule 3)."""
    state: dict[str, str] = {}
    over: dict[str, str] = {}
    for n in live:
        above = u.over(n.usage, th.high, n) + [f"prod {r}" for r in u.over(n.prod_usage, th.prod_high, n)]
        if above:
            state[n.name] = "high"
            over[n.name] = "above high: " + "; ".join(
                filter(
                    None,
                    [
                        u.describe(n.usage, {r: th.high[r] for r in u.over(n.usage, th.high, n)}, n, ">"),
                        u.describe(
                            n.prod_usage,
                            {r: th.prod_high[r] for r in u.over(n.prod_usage, th.prod_high, n)},
                            n,
                            ">",
                            "prod ",
                        ),
                    ],
                )
            )
        elif (
            not n.input.unschedulable
            and u.at_most(n.usage, th.low, n)
            and u.at_most(n.prod_usage, th.prod_low, n)
        ):
            state[n.name] = "low"
        else:
            state[n.name] = "normal"
    return state, over


def _count_anomalies(
    live: list[u.LiveNode],
    state: Mapping[str, str],
    need: int,
    *,
    round_no: int,
    detectors: Mapping[str, Detector],
    counters: dict[str, Detector],
) -> tuple[list[u.LiveNode], dict[str, int]]:
    """The high nodes' consecutive rounds above (recorded in ``counters``), and those whose anomaly is confirmed."""
    confirmed: list[u.LiveNode] = []
    abnormal: dict[str, int] = {}
    for n in live:
        if state[n.name] != "high":
            continue
        prev = detectors.get(n.name)
        count = prev.abnormal + 1 if prev is not None and prev.round == round_no - 1 else 1
        abnormal[n.name] = count
        counters[n.name] = Detector(abnormal=count, round=round_no)
        if need <= 1 or count >= need:
            confirmed.append(n)
    return confirmed, abnormal


def _held_back(
    args: LowNodeLoadArgs,
    live: list[u.LiveNode],
    lows: list[u.LiveNode],
    abnormal: Mapping[str, int],
    confirmed: list[u.LiveNode],
    need: int,
) -> str:
    """Why nothing moves off the pool this round (rule 5), or "" when the confirmed hot nodes are relieved."""
    if not lows:
        return "no node is under the low thresholds"
    if len(lows) <= args.number_of_nodes:
        return f"{len(lows)} node(s) under the low thresholds, at most numberOfNodes ({args.number_of_nodes})"
    if len(lows) == len(live):
        return "every node is under the low thresholds"
    if not abnormal:
        return "no node is above the high thresholds"
    if not confirmed:
        return f"no hot node's anomaly is confirmed yet (needs {need} consecutive rounds)"
    return ""


def _pool_round(
    pool: NodePool,
    choice: Choice,
    *,
    round_no: int,
    live: list[u.LiveNode],
    by_node: Mapping[str, list[PodInput]],
    detectors: Mapping[str, Detector],
    out_nodes: list[DeschedulerNode],
    counters: dict[str, Detector],
) -> str:
    moves = choice.moves
    resources = sorted(pool.high)
    if not live:
        return "no node with a current NodeMetric"
    th = _Thresholds.of(pool, live)
    state, over = _classify(live, th)
    need = pool.anomaly.consecutive_abnormalities
    confirmed, abnormal = _count_anomalies(
        live, state, need, round_no=round_no, detectors=detectors, counters=counters
    )
    lows = [n for n in live if state[n.name] == "low"]
    message = _held_back(choice.args, live, lows, abnormal, confirmed, need)
    acting = confirmed if not message else []
    weights = pool.weights
    acting.sort(key=lambda n: (-u.score(n.usage, n, weights, resources), n.name))
    chosen_from: set[str] = set()
    for source in acting:
        hot = Hot(
            high=th.high,
            prod_high=th.prod_high,
            weights=weights,
            resources=resources,
            reason=over[source.name],
            prod_only=not u.over(source.usage, th.high, source),
        )
        relieve(choice, source, lows, pool, by_node.get(source.name, []), hot)
        if any(m.source == source.name for m in moves):
            chosen_from.add(source.name)
            counters.pop(source.name, None)  # moving pods off it resets its anomaly
    targets_used = {m.target for m in moves} | {m.source for m in moves}  # a gang's members move off any node
    for n in live:
        moved = n.name in chosen_from or n.name in targets_used
        measured = n.measured
        out_nodes.append(
            DeschedulerNode(
                name=n.name,
                pool=pool.name,
                state=state[n.name],
                reason=over.get(n.name, ""),
                metric_time=n.metric.update_time,
                allocatable={r: n.alloc(r) for r in resources},
                usage={r: measured.get(r, 0) for r in resources},
                usage_pct={r: u.hundredths(u.pct(measured.get(r, 0), n.alloc(r))) for r in resources},
                low=u.amounts(n, th.low),
                high=u.amounts(n, th.high),
                prod_usage={r: n.prod_reported.get(r, 0) for r in sorted(th.prod_high)}
                if th.prod_high
                else {},
                prod_low=u.amounts(n, th.prod_low),
                prod_high=u.amounts(n, th.prod_high),
                abnormal_rounds=abnormal.get(n.name, 0),
                confirmed=n in confirmed,
                usage_after={r: n.usage.get(r, 0) for r in resources} if moved else {},
            )
        )
    if message:
        return message
    count = sum(1 for m in moves if m.pool == pool.name)
    return f"{count} pod(s) to move off {len(chosen_from)} of {len(confirmed)} confirmed hot node(s)"
