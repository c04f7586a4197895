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
3. A node is *low* (a target) when schedulable and at most its low threshold on every resource (and at most its prod
   low thresholds when set); *high* when above its high threshold on some resource (or above a prod high one).
4. Anomaly: a high node's counter counts consecutive rounds above; its anomaly is *confirmed* when the counter reaches
   ``consecutiveAbnormalities`` (1: at once). Any other state resets the counter, and so does moving pods off it.
5. Nothing moves when no node is low, when the low nodes are at most ``numberOfNodes``, when every node is low, or
   when no anomaly is confirmed. Sources are taken hottest first (weighted usage share, ``resourceWeights``).
6. Candidates of a source: its pods, each skipped with a reason: terminating; namespace not evictable; not matched by
   ``podSelectors``; DaemonSet-owned; mirror pod; system-critical (priority ≥ 2000000000, unless
   ``evictSystemCriticalPods``); ``scheduling.koordinator.sh/eviction-cost`` = 2147483647 or
   ``descheduler.alpha.kubernetes.io/prevent-eviction: "true"``; a gang member; placed in a reservation; local storage
   (``emptyDir`` / ``hostPath``, unless ``evictLocalStoragePods``); already migrating; no usage reported for it.
7. Order: Koordinator priority class (free, batch, mid, prod), priority, Kubernetes QoS (BestEffort, Burstable,
   Guaranteed), Koordinator QoS (BE, LS, LSR, LSE), pod deletion cost, eviction cost; then *segmented* by usage: first
   the pods whose move alone brings the source under its high thresholds (smallest first: move no more than needed),
   then the others (largest first: move as few as possible); then name.
8. Walking that order while the source is still above a high threshold (re-checked before every pick): a pod moves
   to the low node with the least weighted usage after the move among those that stay at most their high thresholds
   on every resource (and prod high for a prod pod) with the pod's usage added, and — with ``nodeFit`` — whose
   allocatable holds the requests already there plus the pod's. A pod no target can take is skipped (``NoTarget``).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Final

import msgspec

from allot_contracts.events import DeschedulerCandidate, DeschedulerNode
from allot_contracts.objects.nodemetric import NodeMetric
from allot_contracts.objects.selectors import match_label_selector
from allot_descheduling.config import LowNodeLoadArgs, NodePool, Profile, Thresholds

__all__ = ["Detector", "Move", "NodeInput", "PodInput", "RoundOutcome", "run_round"]

ANN_EVICTION_COST: Final = "scheduling.koordinator.sh/eviction-cost"
ANN_PREVENT_EVICTION: Final = "descheduler.alpha.kubernetes.io/prevent-eviction"
ANN_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
ANN_MIRROR: Final = "kubernetes.io/config.mirror"
MAX_COST: Final = 2_147_483_647
SYSTEM_CRITICAL: Final = 2_000_000_000
_KOORD_PRIORITY: Final = {"koord-free": 0, "koord-batch": 1, "koord-mid": 2, "koord-prod": 3, "": 3}
_KUBE_QOS: Final = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
_KOORD_QOS: Final = {"BE": 0, "LS": 1, "NONE": 1, "": 1, "LSR": 2, "LSE": 3, "SYSTEM": 4}
PROD: Final = "koord-prod"


class NodeInput(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    labels: dict[str, str] = {}
    allocatable: dict[str, int] = {}
    requested: dict[str, int] = {}  # the requests of the pods on it
    unschedulable: bool = False
    busy: str = ""  # why it is left alone this round (a migration still moving a pod off or onto it)
    settled_at: int = 0  # its NodeMetric must be at least this recent (the last migration touching it ended)


class PodInput(msgspec.Struct, frozen=True, kw_only=True):
    key: str  # namespace/name
    uid: str = ""
    node: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_kind: str = ""  # the controller's kind ("" for a bare pod)
    priority: int = 0
    koord_priority: str = ""
    kube_qos: str = "BestEffort"
    koord_qos: str = ""
    requests: dict[str, int] = {}
    local_storage: bool = False
    gang: str = ""
    reservation: str = ""
    migrating: str = ""  # the active PodMigrationJob moving it
    terminating: bool = False

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]


class Detector(msgspec.Struct, frozen=True, kw_only=True):
    abnormal: int  # consecutive rounds above a high threshold
    round: int  # the round of the latest count


class Move(msgspec.Struct, frozen=True, kw_only=True):
    pod: str
    uid: str
    source: str
    target: str
    pool: str
    reason: str


class RoundOutcome(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    nodes: list[DeschedulerNode]
    candidates: list[DeschedulerCandidate]
    moves: list[Move]
    detectors: dict[str, Detector]


class _Node:
    """A node in a round: its usage moves as the round chooses pods."""

    __slots__ = (
        "input",
        "low",
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
                self.pod_usage[pod.key] = dict(got.usage)
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


def _pct(amount: int, alloc: int) -> Fraction:
    return Fraction(amount * 100, alloc) if alloc else Fraction(0)


def _hundredths(value: Fraction) -> int:
    return int(value * 100)


def _amounts(node: _Node, pcts: Mapping[str, Fraction]) -> dict[str, int]:
    return {r: int(node.alloc(r) * p / 100) for r, p in sorted(pcts.items())}


def _thresholds(
    pool_pcts: Thresholds, nodes: list[_Node], usage_of: str, deviation: bool, sign: int
) -> dict[str, Fraction]:
    """The pool's percentages (with deviation: average ± given, clipped to 0–100)."""
    if not deviation:
        return dict(pool_pcts)
    out: dict[str, Fraction] = {}
    for r, given in pool_pcts.items():
        shares = [
            _pct((n.usage if usage_of == "node" else n.prod_usage).get(r, 0), n.alloc(r)) for n in nodes
        ]
        average = sum(shares, Fraction(0)) / len(shares) if shares else Fraction(0)
        out[r] = min(Fraction(100), max(Fraction(0), average + sign * given))
    return out


def _over(usage: Mapping[str, int], pcts: Mapping[str, Fraction], node: _Node) -> list[str]:
    """The resources on which ``usage`` is above the percentages of the node's allocatable."""
    return [r for r, p in sorted(pcts.items()) if usage.get(r, 0) * 100 > p * node.alloc(r)]


def _at_most(usage: Mapping[str, int], pcts: Mapping[str, Fraction], node: _Node) -> bool:
    return not _over(usage, pcts, node)


def _score(
    usage: Mapping[str, int], node: _Node, weights: Mapping[str, int], resources: Sequence[str]
) -> Fraction:
    total = sum(weights.get(r, 1) for r in resources) or 1
    return (
        sum((weights.get(r, 1) * _pct(usage.get(r, 0), node.alloc(r)) for r in resources), Fraction(0))
        / total
    )


def _describe(
    usage: Mapping[str, int], pcts: Mapping[str, Fraction], node: _Node, word: str, prefix: str = ""
) -> str:
    return ", ".join(
        f"{prefix}{r} {_fmt(_pct(usage.get(r, 0), node.alloc(r)))}% {word} {_fmt(pcts[r])}%"
        for r in sorted(pcts)
    )


def _fmt(value: Fraction) -> str:
    return f"{float(value):.1f}".removesuffix(".0")


def _int_annotation(pod: PodInput, key: str) -> int:
    try:
        return int(pod.annotations.get(key, "0"))
    except ValueError:
        return 0


def _skip(
    pod: PodInput, args: LowNodeLoadArgs, profile: Profile, usage: dict[str, int] | None
) -> tuple[str, str]:
    """Why the pod may not move (code, reason); ``("", "")`` when it may."""
    if pod.terminating:
        return "Terminating", "the pod is terminating"
    namespace = pod.namespace
    if args.include_namespaces and namespace not in args.include_namespaces:
        return "NamespaceExcluded", f"namespace {namespace} is not among evictableNamespaces.include"
    if namespace in args.exclude_namespaces:
        return "NamespaceExcluded", f"namespace {namespace} is in evictableNamespaces.exclude"
    if args.pod_selectors and not any(match_label_selector(s, pod.labels) for s in args.pod_selectors):
        return "NotSelected", "the pod matches none of podSelectors"
    if pod.owner_kind == "DaemonSet":
        return "DaemonSet", "a DaemonSet pod belongs to its node"
    if ANN_MIRROR in pod.annotations:
        return "MirrorPod", "a mirror (static) pod cannot be evicted"
    if pod.priority >= SYSTEM_CRITICAL and not profile.evict_system_critical:
        return "SystemCritical", f"system-critical priority {pod.priority} (evictSystemCriticalPods is off)"
    if _int_annotation(pod, ANN_EVICTION_COST) >= MAX_COST:
        return "EvictionDisabled", f"{ANN_EVICTION_COST} is {MAX_COST}: never evicted"
    if pod.annotations.get(ANN_PREVENT_EVICTION) == "true":
        return "EvictionDisabled", f"{ANN_PREVENT_EVICTION} is true"
    if pod.gang:
        return (
            "GangMember",
            f"a member of gang {pod.gang}: a gang is moved whole or not at all, a migration moves one pod",
        )
    if pod.reservation:
        return "Reserved", f"placed in reservation {pod.reservation}"
    if pod.local_storage and not profile.evict_local_storage:
        return "LocalStorage", "uses local storage (emptyDir or hostPath; evictLocalStoragePods is off)"
    if pod.migrating:
        return "Migrating", f"already being migrated by PodMigrationJob {pod.migrating}"
    if usage is None:
        return "NoPodMetric", "the node's NodeMetric reports no usage for it"
    return "", ""


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
) -> RoundOutcome:
    args = profile.low_node_load
    assert args is not None, "run_round needs a profile with LowNodeLoad"
    if args.paused:
        return RoundOutcome(message="LowNodeLoad is paused", nodes=[], candidates=[], moves=[], detectors={})
    by_node: dict[str, list[PodInput]] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    out_nodes: list[DeschedulerNode] = []
    out_candidates: list[DeschedulerCandidate] = []
    moves: list[Move] = []
    counters: dict[str, Detector] = {}
    messages: list[str] = []
    members = _pools(args, nodes)
    for pool in args.pools:
        message = _pool_round(
            pool,
            args,
            profile,
            at=at,
            round_no=round_no,
            nodes=members[pool.name],
            by_node=by_node,
            metrics=metrics,
            detectors=detectors,
            out_nodes=out_nodes,
            out_candidates=out_candidates,
            moves=moves,
            counters=counters,
        )
        messages.append(f"{pool.name}: {message}" if len(args.pools) > 1 else message)
    return RoundOutcome(
        message="; ".join(messages),
        nodes=out_nodes,
        candidates=out_candidates,
        moves=moves,
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


def _pool_round(
    pool: NodePool,
    args: LowNodeLoadArgs,
    profile: Profile,
    *,
    at: int,
    round_no: int,
    nodes: list[NodeInput],
    by_node: Mapping[str, list[PodInput]],
    metrics: Mapping[str, NodeMetric],
    detectors: Mapping[str, Detector],
    out_nodes: list[DeschedulerNode],
    out_candidates: list[DeschedulerCandidate],
    moves: list[Move],
    counters: dict[str, Detector],
) -> str:
    resources = sorted(pool.high)
    live: list[_Node] = []
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
        live.append(_Node(node, metric, by_node.get(node.name, [])))
    if not live:
        return "no node with a current NodeMetric"
    low_pct = _thresholds(pool.low, live, "node", pool.use_deviation, -1)
    high_pct = _thresholds(pool.high, live, "node", pool.use_deviation, +1)
    prod_low_pct = _thresholds(pool.prod_low, live, "prod", pool.use_deviation, -1)
    prod_high_pct = _thresholds(pool.prod_high, live, "prod", pool.use_deviation, +1)
    state: dict[str, str] = {}
    over: dict[str, str] = {}
    for n in live:
        hot = _over(n.usage, high_pct, n) + [f"prod {r}" for r in _over(n.prod_usage, prod_high_pct, n)]
        if hot:
            state[n.name] = "high"
            over[n.name] = "above high: " + "; ".join(
                filter(
                    None,
                    [
                        _describe(n.usage, {r: high_pct[r] for r in _over(n.usage, high_pct, n)}, n, ">"),
                        _describe(
                            n.prod_usage,
                            {r: prod_high_pct[r] for r in _over(n.prod_usage, prod_high_pct, n)},
                            n,
                            ">",
                            "prod ",
                        ),
                    ],
                )
            )
        elif (
            not n.input.unschedulable
            and _at_most(n.usage, low_pct, n)
            and _at_most(n.prod_usage, prod_low_pct, n)
        ):
            state[n.name] = "low"
        else:
            state[n.name] = "normal"
    confirmed: list[_Node] = []
    need = pool.anomaly.consecutive_abnormalities
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
    lows = [n for n in live if state[n.name] == "low"]
    message = ""
    if not lows:
        message = "no node is under the low thresholds"
    elif len(lows) <= args.number_of_nodes:
        message = (
            f"{len(lows)} node(s) under the low thresholds, at most numberOfNodes ({args.number_of_nodes})"
        )
    elif len(lows) == len(live):
        message = "every node is under the low thresholds"
    elif not abnormal:
        message = "no node is above the high thresholds"
    elif not confirmed:
        message = f"no hot node's anomaly is confirmed yet (needs {need} consecutive rounds)"
    acting = confirmed if not message else []
    weights = pool.weights
    acting.sort(key=lambda n: (-_score(n.usage, n, weights, resources), n.name))
    chosen_from: set[str] = set()
    for source in acting:
        _relieve(
            source,
            lows,
            pool,
            args,
            profile,
            by_node.get(source.name, []),
            high_pct,
            prod_high_pct,
            weights,
            resources,
            out_candidates,
            moves,
            over[source.name],
        )
        if any(m.source == source.name for m in moves):
            chosen_from.add(source.name)
            counters.pop(source.name, None)  # moving pods off it resets its anomaly
    targets_used = {m.target for m in moves}
    for n in live:
        moved = n.name in chosen_from or n.name in targets_used
        measured = n.metric.system_and_pods_usage()
        out_nodes.append(
            DeschedulerNode(
                name=n.name,
                pool=pool.name,
                state=state[n.name],
                reason=over.get(n.name, ""),
                metric_time=n.metric.update_time,
                allocatable={r: n.alloc(r) for r in resources},
                usage={r: measured.get(r, 0) for r in resources},
                usage_pct={r: _hundredths(_pct(measured.get(r, 0), n.alloc(r))) for r in resources},
                low=_amounts(n, low_pct),
                high=_amounts(n, high_pct),
                prod_usage={r: n.prod_reported.get(r, 0) for r in sorted(prod_high_pct)}
                if prod_high_pct
                else {},
                prod_low=_amounts(n, prod_low_pct),
                prod_high=_amounts(n, prod_high_pct),
                abnormal_rounds=abnormal.get(n.name, 0),
                confirmed=n in confirmed,
                usage_after={r: n.usage.get(r, 0) for r in resources} if moved else {},
            )
        )
    if message:
        return message
    count = sum(1 for m in moves if m.pool == pool.name)
    return f"{count} pod(s) to move off {len(chosen_from)} of {len(confirmed)} confirmed hot node(s)"


def _relieve(
    source: _Node,
    lows: list[_Node],
    pool: NodePool,
    args: LowNodeLoadArgs,
    profile: Profile,
    pods: list[PodInput],
    high_pct: dict[str, Fraction],
    prod_high_pct: dict[str, Fraction],
    weights: Mapping[str, int],
    resources: list[str],
    out: list[DeschedulerCandidate],
    moves: list[Move],
    hot_reason: str,
) -> None:
    eligible: list[PodInput] = []
    for pod in sorted(pods, key=lambda p: p.key):
        usage = source.pod_usage.get(pod.key)
        code, reason = _skip(pod, args, profile, usage)
        if code:
            out.append(
                DeschedulerCandidate(
                    pod=pod.key, uid=pod.uid, node=source.name, code=code, reason=reason, usage=usage or {}
                )
            )
        else:
            eligible.append(pod)

    def sufficient(pod: PodInput) -> bool:
        after = _minus(source.usage, source.pod_usage[pod.key])
        prod_after = source.prod_usage
        if pod.koord_priority == PROD:
            prod_after = _minus(source.prod_usage, source.pod_usage[pod.key])
        return _at_most(after, high_pct, source) and _at_most(prod_after, prod_high_pct, source)

    def order(pod: PodInput) -> tuple[int, int, int, int, int, int, int, Fraction, str]:
        score = _score(source.pod_usage[pod.key], source, weights, resources)
        segment = 0 if sufficient(pod) else 1
        return (
            _KOORD_PRIORITY.get(pod.koord_priority, 3),
            pod.priority,
            _KUBE_QOS.get(pod.kube_qos, 1),
            _KOORD_QOS.get(pod.koord_qos, 1),
            _int_annotation(pod, ANN_DELETION_COST),
            _int_annotation(pod, ANN_EVICTION_COST),
            segment,
            score if segment == 0 else -score,
            pod.key,
        )

    for pod in sorted(eligible, key=order):
        usage = source.pod_usage[pod.key]
        is_prod = pod.koord_priority == PROD
        still = _over(source.usage, high_pct, source) + _over(source.prod_usage, prod_high_pct, source)
        if not still:
            out.append(
                DeschedulerCandidate(
                    pod=pod.key,
                    uid=pod.uid,
                    node=source.name,
                    code="SourceRelieved",
                    reason=f"node {source.name} is under its high thresholds once the pods chosen before it move",
                    usage=usage,
                )
            )
            continue
        helps = [r for r in _over(source.usage, high_pct, source) if usage.get(r, 0) > 0]
        if is_prod:
            helps += [r for r in _over(source.prod_usage, prod_high_pct, source) if usage.get(r, 0) > 0]
        if not helps:
            out.append(
                DeschedulerCandidate(
                    pod=pod.key,
                    uid=pod.uid,
                    node=source.name,
                    code="NotHelping",
                    reason="moving it would not lower what is above the high thresholds"
                    + ("" if is_prod else " (the prod usage: it is not a prod pod)"),
                    usage=usage,
                )
            )
            continue
        target = _target(
            pod, usage, is_prod, lows, high_pct, prod_high_pct, weights, resources, args.node_fit
        )
        if target is None:
            out.append(
                DeschedulerCandidate(
                    pod=pod.key,
                    uid=pod.uid,
                    node=source.name,
                    code="NoTarget",
                    reason="no underutilized node stays under its high thresholds with it"
                    + (" and fits its requests" if args.node_fit else ""),
                    usage=usage,
                )
            )
            continue
        source.usage = _minus(source.usage, usage)
        target.usage = _plus(target.usage, usage)
        target.requested = _plus(target.requested, pod.requests)
        if is_prod:
            source.prod_usage = _minus(source.prod_usage, usage)
            target.prod_usage = _plus(target.prod_usage, usage)
        reason = f"node {source.name} is {hot_reason}; LowNodeLoad moves it towards {target.name}"
        moves.append(
            Move(
                pod=pod.key,
                uid=pod.uid,
                source=source.name,
                target=target.name,
                pool=pool.name,
                reason=reason,
            )
        )
        out.append(
            DeschedulerCandidate(
                pod=pod.key,
                uid=pod.uid,
                node=source.name,
                chosen=True,
                code="Chosen",
                reason=reason,
                usage=usage,
                target=target.name,
            )
        )


def _target(
    pod: PodInput,
    usage: Mapping[str, int],
    is_prod: bool,
    lows: list[_Node],
    high_pct: dict[str, Fraction],
    prod_high_pct: dict[str, Fraction],
    weights: Mapping[str, int],
    resources: list[str],
    node_fit: bool,
) -> _Node | None:
    best: tuple[Fraction, str, _Node] | None = None
    for t in lows:
        after = _plus(t.usage, usage)
        if not _at_most(after, high_pct, t):
            continue
        if is_prod and not _at_most(_plus(t.prod_usage, usage), prod_high_pct, t):
            continue
        if node_fit and any(
            t.requested.get(r, 0) + v > t.alloc(r)
            for r, v in pod.requests.items()
            if v > 0 and r in ("cpu", "memory")
        ):
            continue
        key = (_score(after, t, weights, resources), t.name, t)
        if best is None or key[:2] < best[:2]:
            best = key
    return best[2] if best is not None else None


def _minus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = max(0, out.get(r, 0) - v)
    return out


def _plus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return out
