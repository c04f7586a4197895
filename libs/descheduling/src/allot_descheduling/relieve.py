"""LowNodeLoad's choice of pods on one hot node: which may not move and why, the order the others are taken in, and
where each goes (the underutilized node it fits best). Pure: :func:`relieve` mutates only the round's working
usage (:class:`allot_descheduling.usage.LiveNode`) and the lists it is given."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Final

import msgspec

from allot_contracts.events import DeschedulerCandidate
from allot_contracts.objects.selectors import match_label_selector
from allot_descheduling import usage as u
from allot_descheduling.config import LowNodeLoadArgs, NodePool, Profile
from allot_descheduling.evictor import (
    ANN_DELETION_COST,
    ANN_EVICTION_COST,
    PodInput,
    int_annotation,
    refusal,
)
from allot_descheduling.gangs import gang_moves_whole, gang_refusal

__all__ = ["Caps", "Choice", "Hot", "Move", "NodeFit", "no_static_filter", "overutilized_reason", "relieve"]

_KOORD_PRIORITY: Final = {"koord-free": 0, "koord-batch": 1, "koord-mid": 2, "koord-prod": 3, "": 3}
_KUBE_QOS: Final = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
_KOORD_QOS: Final = {"BE": 0, "LS": 1, "NONE": 1, "": 1, "LSR": 2, "LSE": 3, "SYSTEM": 4}
# why the pod may not run on the node (its selector, required affinity, tolerations), "" when it may
NodeFit = Callable[[PodInput, str], str]


class Move(msgspec.Struct, frozen=True, kw_only=True):
    pod: str
    uid: str
    source: str
    target: str
    pool: str
    reason: str
    evict_reason: str = ""  # upstream's words, for the job's koordinator.sh/evict-reason


def _skip(
    pod: PodInput,
    args: LowNodeLoadArgs,
    profile: Profile,
    usage: dict[str, int] | None,
    *,
    whole: bool = False,
) -> tuple[str, str]:
    """Why the pod may not move (code, reason); ``("", "")`` when it may. ``whole``: a gang member whose gang's
    policy lets it move whole (its gang is checked member by member when it is picked)."""
    namespace = pod.namespace
    if args.include_namespaces and namespace not in args.include_namespaces:
        return "NamespaceExcluded", f"namespace {namespace} is not among evictableNamespaces.include"
    if namespace in args.exclude_namespaces:
        return "NamespaceExcluded", f"namespace {namespace} is in evictableNamespaces.exclude"
    if args.pod_selectors and not any(match_label_selector(s, pod.labels) for s in args.pod_selectors):
        return "NotSelected", "the pod matches none of podSelectors"
    code, reason = refusal(pod, profile.evictor_args())
    if code:
        return code, reason
    if pod.gang and not whole:
        return (
            "GangMember",
            f"a member of gang {pod.gang}: a gang is moved whole or not at all, and its policy"
            " (descheduler.allot.dev/gang-migration, else gangMigration) is Skip",
        )
    if pod.reservation:
        return "Reserved", f"placed in reservation {pod.reservation}"
    if pod.migrating:
        return "Migrating", f"already being migrated by PodMigrationJob {pod.migrating}"
    if usage is None:
        return "NoPodMetric", "the node's NodeMetric reports no usage for it"
    return "", ""


class Caps:
    """The descheduler's eviction limits for one round (``maxNoOfPodsToEvictPerNode`` / ``PerNamespace`` /
    ``Total``, upstream's EvictionLimiter): counted over every profile and pool of the round; 0 is no limit."""

    def __init__(self, per_node: int = 0, per_namespace: int = 0, total: int = 0) -> None:
        self.limits = (per_node, per_namespace, total)
        self.nodes: dict[str, int] = {}
        self.namespaces: dict[str, int] = {}
        self.total = 0

    def refusal(self, pod: PodInput, node: str) -> str:
        per_node, per_namespace, total = self.limits
        if total and self.total >= total:
            return f"maxNoOfPodsToEvictTotal ({total}) pods are already moving this round"
        if per_node and self.nodes.get(node, 0) >= per_node:
            return (
                f"maxNoOfPodsToEvictPerNode ({per_node}) pods are already moving off node {node} this round"
            )
        if per_namespace and self.namespaces.get(pod.namespace, 0) >= per_namespace:
            return (
                f"maxNoOfPodsToEvictPerNamespace ({per_namespace}) pods of namespace {pod.namespace} are already"
                " moving this round"
            )
        return ""

    def refusal_all(self, pods: Sequence[PodInput]) -> str:
        """Why the limits refuse moving all of ``pods`` (off their nodes) together, "" when they allow it."""
        saved = (self.total, dict(self.nodes), dict(self.namespaces))
        try:
            for pod in pods:
                why = self.refusal(pod, pod.node)
                if why:
                    return why
                self.take(pod, pod.node)
            return ""
        finally:
            self.total, self.nodes, self.namespaces = saved

    def take(self, pod: PodInput, node: str) -> None:
        self.total += 1
        self.nodes[node] = self.nodes.get(node, 0) + 1
        self.namespaces[pod.namespace] = self.namespaces.get(pod.namespace, 0) + 1


class Choice:
    """What one round's choices share: the profile and its args, the host's node-fit check, the eviction caps, and
    the candidates and moves recorded so far."""

    def __init__(self, profile: Profile, static: NodeFit, caps: Caps) -> None:
        assert profile.low_node_load is not None
        self.profile = profile
        self.args: LowNodeLoadArgs = profile.low_node_load
        self.node_fit: NodeFit | None = static if self.args.node_fit else None
        self.caps = caps
        self.candidates: list[DeschedulerCandidate] = []
        self.moves: list[Move] = []
        self.gangs: dict[str, list[PodInput]] = {}  # the round's gangs: their members, wherever they run
        self.live: dict[str, u.LiveNode] = {}  # every node the round measures, of every pool
        self.moved: set[str] = set()  # the pods chosen so far
        self.gang_refused: dict[str, tuple[str, str]] = {}  # gang -> why it may not move whole this round

    def skip(self, pod: PodInput, source: str, code: str, reason: str, usage: Mapping[str, int]) -> None:
        self.candidates.append(
            DeschedulerCandidate(
                pod=pod.key, uid=pod.uid, node=source, code=code, reason=reason, usage=dict(usage)
            )
        )


class Hot(msgspec.Struct, frozen=True, kw_only=True):
    """A confirmed hot node's thresholds in a round: the effective ones (percent of allocatable) and those the
    pool configures (upstream's eviction reason prints these)."""

    high: dict[str, Fraction]
    prod_high: dict[str, Fraction]
    weights: Mapping[str, int]
    resources: list[str]
    reason: str  # why it is hot, as the round describes it
    # under its node high thresholds, above its prod ones: relieved by moving prod pods, by prod usage (upstream's
    # prodHighNodes); a node above its node thresholds is relieved by node usage alone (upstream's sourceNodes)
    prod_only: bool = False

    def still(self, source: u.LiveNode) -> list[str]:
        """The resources on which ``source`` is still above what it is relieved by."""
        if self.prod_only:
            return u.over(source.prod_usage, self.prod_high, source)
        return u.over(source.usage, self.high, source)


def relieve(
    choice: Choice, source: u.LiveNode, lows: list[u.LiveNode], pool: NodePool, pods: list[PodInput], hot: Hot
) -> None:
    """Choose the pods that move off ``source`` (appending to ``choice``), in the order of :func:`_order`, while it
    is still above a high threshold."""
    eligible: list[PodInput] = []
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.key in choice.moved:
            continue  # chosen with its gang
        usage = source.pod_usage.get(pod.key)
        whole = gang_moves_whole(pod.annotations, choice.args.gang_whole)
        code, reason = choice.gang_refused.get(pod.gang) or _skip(
            pod, choice.args, choice.profile, usage, whole=whole
        )
        if code:
            choice.skip(pod, source.name, code, reason, usage or {})
        else:
            eligible.append(pod)
    for pod in sorted(eligible, key=lambda p: _order(p, source, hot)):
        if pod.key in choice.moved:
            continue  # chosen with its gang
        usage = source.pod_usage[pod.key]
        is_prod = pod.koord_priority == u.PROD
        still = hot.still(source)
        if not still:
            reason = f"node {source.name} is under its high thresholds once the pods chosen before it move"
            choice.skip(pod, source.name, "SourceRelieved", reason, usage)
            continue
        if not any(usage.get(r, 0) > 0 for r in still) or (hot.prod_only and not is_prod):
            reason = "moving it would not lower what is above the high thresholds" + (
                " (the prod usage: it is not a prod pod)" if hot.prod_only and not is_prod else ""
            )
            choice.skip(pod, source.name, "NotHelping", reason, usage)
            continue
        if pod.gang:
            _move_gang(choice, pod, source, lows, pool, hot)
            continue
        capped = choice.caps.refusal(pod, source.name)
        if capped:
            choice.skip(pod, source.name, "EvictionLimit", capped, usage)
            continue
        target = _target(pod, usage, is_prod, lows, hot, choice.node_fit)
        if target is None:
            reason = "no underutilized node stays under its high thresholds with it" + (
                " and fits it (selector, affinity, taints, requests)" if choice.node_fit is not None else ""
            )
            choice.skip(pod, source.name, "NoTarget", reason, usage)
            continue
        _move(choice, pod, source, target, pool, hot, usage, is_prod)


def _order(
    pod: PodInput, source: u.LiveNode, hot: Hot
) -> tuple[int, int, int, int, int, int, int, Fraction, str]:
    """Koordinator priority class, priority, Kubernetes QoS, Koordinator QoS, deletion cost, eviction cost; then
    the pods whose move alone relieves the node (smallest first), then the others (largest first); then name."""
    usage = source.pod_usage[pod.key]
    if hot.prod_only:
        prod_after = u.minus(source.prod_usage, usage) if pod.koord_priority == u.PROD else source.prod_usage
        sufficient = u.at_most(prod_after, hot.prod_high, source)
    else:
        sufficient = u.at_most(u.minus(source.usage, usage), hot.high, source)
    score = u.score(usage, source, hot.weights, hot.resources)
    return (
        _KOORD_PRIORITY.get(pod.koord_priority, 3),
        pod.priority,
        _KUBE_QOS.get(pod.kube_qos, 1),
        _KOORD_QOS.get(pod.koord_qos, 1),
        int_annotation(pod, ANN_DELETION_COST),
        int_annotation(pod, ANN_EVICTION_COST),
        0 if sufficient else 1,
        score if sufficient else -score,
        pod.key,
    )


def _move(
    choice: Choice,
    pod: PodInput,
    source: u.LiveNode,
    target: u.LiveNode,
    pool: NodePool,
    hot: Hot,
    usage: Mapping[str, int],
    is_prod: bool,
    gang: tuple[str, str] = ("", ""),
) -> None:
    """Record ``pod``'s move; ``gang``: the reason and evict reason of the gang it moves with."""
    evict_reason = gang[1] or overutilized_reason(
        source, hot, pool, prod=is_prod and not u.over(source.usage, hot.high, source)
    )
    source.usage = u.minus(source.usage, usage)
    target.usage = u.plus(target.usage, usage)
    target.requested = u.plus(target.requested, pod.requests)
    if is_prod:
        source.prod_usage = u.minus(source.prod_usage, usage)
        target.prod_usage = u.plus(target.prod_usage, usage)
    choice.caps.take(pod, source.name)
    choice.moved.add(pod.key)
    reason = gang[0] or f"node {source.name} is {hot.reason}; LowNodeLoad moves it towards {target.name}"
    choice.moves.append(
        Move(
            pod=pod.key,
            uid=pod.uid,
            source=source.name,
            target=target.name,
            pool=pool.name,
            reason=reason,
            evict_reason=evict_reason,
        )
    )
    choice.candidates.append(
        DeschedulerCandidate(
            pod=pod.key,
            uid=pod.uid,
            node=source.name,
            chosen=True,
            code="Chosen",
            reason=reason,
            usage=dict(usage),
            target=target.name,
        )
    )


def _move_gang(
    choice: Choice, pod: PodInput, source: u.LiveNode, lows: list[u.LiveNode], pool: NodePool, hot: Hot
) -> None:
    """``pod`` is picked and its gang's policy lets it move whole: every member moves (each to the low node it fits
    best), counted as one migration each, or — when a member may not move, the limits do not take them all or some
    member has no target — none does, ``pod`` recorded with why."""
    members = sorted(choice.gangs.get(pod.gang) or [pod], key=lambda p: p.key)
    code, reason, plan = _gang_plan(choice, members, lows, hot)
    if code:
        choice.gang_refused[pod.gang] = (code, reason)
        choice.skip(pod, source.name, code, reason, source.pod_usage[pod.key])
        return
    evict_reason = overutilized_reason(
        source, hot, pool, prod=pod.koord_priority == u.PROD and not u.over(source.usage, hot.high, source)
    )
    for member, src, target, usage in plan:
        reason = (
            f"node {source.name} is {hot.reason}; LowNodeLoad moves {pod.key} and with it gang {pod.gang} whole"
            f" ({len(plan)} pods); this one towards {target.name}"
        )
        gang = (reason, f"{evict_reason}; gang {pod.gang} moves whole")
        _move(choice, member, src, target, pool, hot, usage, member.koord_priority == u.PROD, gang)


def _gang_plan(
    choice: Choice, members: list[PodInput], lows: list[u.LiveNode], hot: Hot
) -> tuple[str, str, list[tuple[PodInput, u.LiveNode, u.LiveNode, dict[str, int]]]]:
    """Where each member of a gang goes, or ``(code, reason)`` of why the gang may not move whole."""
    gang = members[0].gang
    held: list[tuple[str, bool, str]] = []
    for m in members:
        src = choice.live.get(m.node)
        code, why = _skip(
            m, choice.args, choice.profile, src.pod_usage.get(m.key) if src else None, whole=True
        )
        problem = f"{code}: {why}" if code else ""
        if src is None:
            problem = f"its node {m.node} is not measured this round (excluded, or no NodeMetric)"
        held.append((m.key, gang_moves_whole(m.annotations, choice.args.gang_whole), problem))
    code, reason = gang_refusal(gang, held)
    if code:
        return code, reason, []
    capped = choice.caps.refusal_all(members)
    if capped:
        reason = f"gang {gang} moves whole or not at all, counted as {len(members)} migrations: {capped}"
        return "EvictionLimit", reason, []
    saved = [(t, t.usage, t.prod_usage, t.requested) for t in lows]
    plan: list[tuple[PodInput, u.LiveNode, u.LiveNode, dict[str, int]]] = []
    try:
        for m in members:
            src = choice.live[m.node]
            usage = src.pod_usage[m.key]
            is_prod = m.koord_priority == u.PROD
            others = [t for t in lows if t.name != m.node]
            target = _target(m, usage, is_prod, others, hot, choice.node_fit)
            if target is None:
                reason = (
                    f"gang {gang} moves whole or not at all, and no underutilized node stays under its high"
                    f" thresholds with member {m.key} (and the members placed before it)"
                )
                return "NoTarget", reason, []
            target.usage = u.plus(target.usage, usage)
            target.requested = u.plus(target.requested, m.requests)
            if is_prod:
                target.prod_usage = u.plus(target.prod_usage, usage)
            plan.append((m, src, target, usage))
        return "", "", plan
    finally:
        for t, usage, prod_usage, requested in saved:
            t.usage, t.prod_usage, t.requested = usage, prod_usage, requested


def overutilized_reason(source: u.LiveNode, hot: Hot, pool: NodePool, *, prod: bool) -> str:
    """Upstream's eviction reason (``koordinator.sh/evict-reason`` of the job), from the node's usage when the pod is
    chosen: ``node is overutilized, node cpu usage(56.13%)>threshold(50.00%)`` (``prod …`` for the prod usage),
    the threshold as the pool configures it."""
    usage, effective, configured, word = (
        (source.prod_usage, hot.prod_high, pool.prod_high, "prod")
        if prod
        else (source.usage, hot.high, pool.high, "node")
    )
    infos = [
        f"{word} {r} usage({float(u.pct(usage.get(r, 0), source.alloc(r))):.2f}%)"
        f">threshold({float(configured.get(r, Fraction(0))):.2f}%)"
        for r in sorted(u.over(usage, effective, source))
    ]
    return "node is overutilized, " + ", ".join(infos)


def _target(
    pod: PodInput,
    usage: Mapping[str, int],
    is_prod: bool,
    lows: list[u.LiveNode],
    hot: Hot,
    node_fit: NodeFit | None,
) -> u.LiveNode | None:
    """The low node with the least weighted usage after the move among those that stay at most their high thresholds
    with it (prod high too for a prod pod) and, with ``nodeFit``, fit it."""
    best: tuple[Fraction, str, u.LiveNode] | None = None
    for t in lows:
        after = u.plus(t.usage, usage)
        if not u.at_most(after, hot.high, t):
            continue
        if is_prod and not u.at_most(u.plus(t.prod_usage, usage), hot.prod_high, t):
            continue
        if node_fit is not None and not _fits(pod, t, node_fit):
            continue
        key = (u.score(after, t, hot.weights, hot.resources), t.name, t)
        if best is None or key[:2] < best[:2]:
            best = key
    return best[2] if best is not None else None


def _fits(pod: PodInput, target: u.LiveNode, static: NodeFit) -> bool:
    """nodeFit: the pod may run on the target (its node selector, required node affinity and tolerations, as the
    host's ``static`` says) and the target holds its cpu and memory requests and one more pod."""
    if static(pod, target.name):
        return False
    if any(
        target.requested.get(r, 0) + v > target.alloc(r)
        for r, v in pod.requests.items()
        if v > 0 and r in ("cpu", "memory")
    ):
        return False
    pods_cap = target.alloc(u.PODS)
    return not pods_cap or target.usage.get(u.PODS, 0) + 1 <= pods_cap


def no_static_filter(pod: PodInput, node: str) -> str:
    """A ``NodeFit`` that lets every pod onto every node (the host knows no selectors or taints)."""
    return ""
