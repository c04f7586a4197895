"""The descheduler, hosted by reservation-manager (docs/adr/0009-descheduler.md): LowNodeLoad rounds on recorded
time, acting only through PodMigrationJobs that reservation-manager's own migration controller arbitrates.

Projection: the nodes (``node.registered/removed``), each node's latest accepted NodeMetric
(``nodemetric.reported/removed``), the anomaly counters and round numbers (from its own ``descheduler.round``
decisions), and — read from the reservation engine it lives beside — the pods (where they run, what they are) and
the PodMigrationJobs.

Decisions:
- at each round's deadline (a ``timer.fired`` of reservation-manager; rounds fall on multiples of
  ``deschedulingInterval`` from the first NodeMetric on), per profile: ``descheduler.round`` with what it read and
  chose, and for each pod chosen a ``migration.applied`` (a PodMigrationJob, ``ReservationFirst`` by default, its
  reservation restricted to the node the round counted room on) — nothing but the round in a dry run. The jobs are
  arbitrated at once, by a timer at the same recorded time (the migration controller's usual path);
- pre-eviction hotspot re-check: when a NodeMetric of a node arrives while a job of the descheduler is still to evict
  a pod from it, and the node is no longer above the high thresholds of the round that asked for the job, the job is
  aborted (``migration.aborted``, its reservation removed); a gang moved whole is re-checked by its picked member's
  hot node and its waiting jobs are aborted together (none once a member is evicted).
Pure: time is the trigger's recorded time.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    DefragPlanned,
    DeschedulerCandidate,
    DeschedulerRound,
    Event,
    MigrationAborted,
    MigrationApplied,
    MigrationFailed,
    MigrationRejected,
    MigrationRemoved,
    MigrationSucceeded,
    NodeMetricRemoved,
    NodeMetricReported,
    NodeRegistered,
    NodeRemoved,
    ObjectRef,
    TimerFired,
)
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.inventory import NodeInfo
from allot_contracts.objects.migration import EVICT_DIRECTLY, parse_migration_job
from allot_contracts.objects.nodemetric import NodeMetric, parse_nodemetric
from allot_contracts.objects.selectors import first_untolerated_taint, match_node_selector_terms
from allot_contracts.objects.times import format_duration
from allot_descheduling import (
    Caps,
    DeschedulerConfig,
    DeschedulerConfigError,
    Detector,
    NodeInput,
    PodInput,
    Profile,
    parse_config,
    run_round,
)
from allot_reservation.arbitration import evictor_args
from allot_reservation.config import ReservationConfig
from allot_reservation.edits import obj, with_node_field
from allot_reservation.engine import NAME, ReservationEngine
from allot_reservation.evictee import pod_input
from allot_reservation.jobs import Job
from allot_reservation.migrate import Migrations
from allot_reservation.world import PodRecord
from reservation_manager.defrag_round import GpuHoldings, defrag_round

__all__ = ["INTERESTS", "Descheduler", "owns"]

INTERESTS: Final = frozenset(
    {"nodemetric.reported", "nodemetric.removed", "pod.unschedulable", "gang.group_unschedulable"}
)  # the refusals: the pods GPUDefrag makes room for
LABEL_CREATED_BY: Final = "koordinator.sh/created-by"
CREATOR: Final = "koord-descheduler"
ANN_TRIGGER: Final = "koordinator.sh/evict-trigger"
ANN_REASON: Final = "koordinator.sh/evict-reason"
ANN_ROUND: Final = "descheduler.allot.dev/round"
ANN_TARGET: Final = "descheduler.allot.dev/target"
Emit = tuple[str, Event]


# The events the descheduler's own state follows (its GPU holdings aside): any other is passed over at once.
_FOLLOWED: Final = (
    NodeRegistered,
    NodeRemoved,
    NodeMetricReported,
    NodeMetricRemoved,
    TimerFired,
    MigrationSucceeded,
    MigrationFailed,
    MigrationAborted,
    MigrationRejected,
    MigrationRemoved,
    DefragPlanned,
    DeschedulerRound,
)


# Read for every input: a set of the (unrelated) event classes, looked up by type, is the cheapest test.
_FOLLOWED_TYPES: Final[frozenset[type]] = frozenset(_FOLLOWED)
_OWNED: Final[frozenset[type]] = frozenset(
    {NodeMetricReported, NodeMetricRemoved, DeschedulerRound, DefragPlanned}
)


def owns(event: Event) -> bool:
    """Events only the descheduler reads (the reservation engine is not shown them)."""
    return type(event) in _OWNED


class Descheduler:
    def __init__(self, raw: Any) -> None:
        self.config: DeschedulerConfig = parse_config(raw) if raw else DeschedulerConfig()
        self.nodes: dict[str, NodeInfo] = {}
        self.metrics: dict[str, NodeMetric] = {}
        self.first_metric_at: int | None = None
        self.last_round_at: int | None = None
        self.rounds: dict[str, int] = {}  # profile -> rounds recorded
        self.detectors: dict[str, dict[str, Detector]] = {}  # profile -> node -> counter
        self.jobs: dict[
            str, tuple[str, dict[str, int], dict[str, int]]
        ] = {}  # job -> (source, high, prod high)
        self.kick_at: int | None = None  # jobs asked for, not yet arbitrated
        self.gpus = GpuHoldings()  # what GPUDefrag reads beside the engine's world
        self.defrag_rounds: dict[str, int] = {}  # profile -> GPUDefrag rounds recorded
        # read for every input, fixed by the configuration
        self.on = self.config.enabled
        self.defrags = any(p.defrag is not None for p in self.config.profiles)

    @property
    def enabled(self) -> bool:
        return self.on

    def agree(self, config: ReservationConfig) -> None:
        """A profile's ``evictLocalStoragePods`` / ``evictSystemCriticalPods`` must be allowed by the migration
        controller too: every job, the descheduler's included, passes its evictor filter, which would refuse them."""
        issues: list[FieldIssue] = []
        migration = config.migration
        for profile in self.config.profiles:
            for key, wanted, allowed in (
                ("evictLocalStoragePods", profile.evict_local_storage, migration.evict_local_storage),
                ("evictSystemCriticalPods", profile.evict_system_critical, migration.evict_system_critical),
            ):
                if wanted and not allowed:
                    issues.append(
                        FieldIssue(
                            path=f"{profile.args_path}.{key}",
                            message=f"the migration controller refuses such pods for every job: set migration.{key}"
                            " too (reservation-manager's config)",
                            value="true",
                        )
                    )
        if issues:
            raise DeschedulerConfigError(issues)

    # === apply ========================================================================================================
    def apply(self, event: Event, at: int) -> None:
        if self.defrags:
            self.gpus.apply(event)
        if type(event) not in _FOLLOWED_TYPES:
            return
        match event:
            case NodeRegistered(name=name, node=info):
                self.nodes[name] = info
                if self.first_metric_at is None and self.defrags:
                    self.first_metric_at = (
                        at  # GPUDefrag reads no NodeMetric: its rounds count from the nodes
                    )
            case NodeRemoved(name=name):
                self.nodes.pop(name, None)
                self.metrics.pop(name, None)
            case NodeMetricReported(name=name):
                if self.enabled:
                    self.metrics[name] = _metric(event)
                    if self.first_metric_at is None:
                        self.first_metric_at = at
            case NodeMetricRemoved(name=name):
                self.metrics.pop(name, None)
            case TimerFired(service=service) if service == NAME:
                self.kick_at = None
            case (
                MigrationSucceeded(job=ref)
                | MigrationFailed(job=ref)
                | MigrationAborted(job=ref)
                | MigrationRejected(job=ref)
                | MigrationRemoved(job=ref)
            ):
                self.jobs.pop(ref.name, None)  # nothing left to re-check
            case DefragPlanned(profile=profile, round=number, jobs=jobs):
                self.last_round_at = at
                self.defrag_rounds[profile] = number
                if jobs:
                    self.kick_at = at
            case DeschedulerRound(profile=profile, round=number, nodes=nodes, candidates=candidates):
                self.last_round_at = at
                self.rounds[profile] = number
                counters = self.detectors.setdefault(profile, {})
                counters.clear()
                for seen in nodes:
                    if seen.state == "high" and seen.abnormal_rounds and not seen.usage_after:
                        counters[seen.name] = Detector(abnormal=seen.abnormal_rounds, round=number)
                highs = {n.name: (n.high, n.prod_high) for n in nodes}
                hot = {n.name for n in nodes if n.state == "high"}
                for c in candidates:
                    if c.job:
                        high, prod_high = highs.get(c.node, ({}, {}))
                        # a gang member moved off a node that is not hot is re-checked with its gang, not by its node
                        self.jobs[c.job] = (c.node if c.node in hot else "", high, prod_high)
                if any(c.job for c in candidates):
                    self.kick_at = at
            case _:
                pass

    # === decide =======================================================================================================
    def decide(self, event: Event, at: int, engine: ReservationEngine) -> list[Emit]:
        if not self.enabled:
            return []
        match event:
            case TimerFired(service=service) if service == NAME:
                due = self.next_round()
                return self._round(at, engine) if due is not None and due <= at else []
            case NodeMetricReported(name=name):
                return self._recheck(name, _metric(event), at, engine)
            case _:
                return []

    def next_round(self) -> int | None:
        if not self.enabled or self.first_metric_at is None:
            return None
        interval = self.config.interval_us
        base = self.last_round_at if self.last_round_at is not None else self.first_metric_at
        return (base // interval + 1) * interval

    def next_deadline(self) -> int | None:
        times = [t for t in (self.next_round(), self.kick_at) if t is not None]
        return min(times) if times else None

    # --- a round ------------------------------------------------------------------------------------------------------
    def _round(self, at: int, engine: ReservationEngine) -> list[Emit]:
        nodes = self._node_inputs(engine)
        pods = self._pod_inputs(engine)
        caps = Caps(*self.config.caps)  # shared by the round's profiles, as upstream's eviction limiter
        out: list[Emit] = []
        for profile in self.config.profiles:
            if profile.defrag is not None and not profile.defrag.paused:
                out += self._defrag(_with_evictor(profile, engine.config), pods, engine)
            if profile.low_node_load is None:
                continue
            number = self.rounds.get(profile.name, 0) + 1
            outcome = run_round(
                _with_evictor(profile, engine.config),
                at=at,
                round_no=number,
                nodes=nodes,
                pods=pods,
                metrics=self.metrics,
                detectors=self.detectors.get(profile.name, {}),
                node_fit=lambda pod, node: self._unfit(pod, node, engine),
                caps=caps,
            )
            dry = self.config.dry_run or profile.low_node_load.dry_run or profile.dry_run
            evict_reasons = {m.pod: m.evict_reason for m in outcome.moves}
            jobs: list[Emit] = []
            names: list[str] = []
            candidates: list[DeschedulerCandidate] = []
            for c in outcome.candidates:
                rec = engine.world.pods.get(c.pod)
                if c.chosen and not dry and rec is not None:
                    name = _job_name(profile.name, number, c.pod)
                    jobs.append(_job(name, profile, number, rec, c, evict_reasons.get(c.pod, c.reason)))
                    names.append(name)
                    c = msgspec.structs.replace(c, job=name)
                candidates.append(c)
            chosen = sum(1 for c in candidates if c.chosen)
            message = outcome.message + (" (dry run: no job asked for)" if dry and chosen else "")
            out.append(
                (
                    stream_id("descheduler", profile.name),
                    DeschedulerRound(
                        profile=profile.name,
                        round=number,
                        dry_run=dry,
                        message=message,
                        nodes=outcome.nodes,
                        candidates=candidates,
                        jobs=names,
                    ),
                )
            )
            out += jobs
        return out

    def _defrag(self, profile: Profile, pods: list[PodInput], engine: ReservationEngine) -> list[Emit]:
        """One GPUDefrag round: its decision and, unless a dry run, a PodMigrationJob per move (a gang's members
        all in this one decision, or none of them)."""
        assert profile.defrag is not None
        number = self.defrag_rounds.get(profile.name, 0) + 1
        dry = self.config.dry_run or profile.defrag.dry_run or profile.dry_run
        planned = defrag_round(
            profile,
            number=number,
            nodes=self.nodes,
            records=engine.world.pods,
            held=self.gpus.held,
            refused=self.gpus.refused,
            inputs={p.key: p for p in pods},
            caps=self.config.caps,
            dry=dry,
        )
        if dry:
            return [(stream_id("descheduler", profile.name), planned)]
        jobs: list[Emit] = []
        plans = []
        for plan in planned.plans:
            moves = []
            for move in plan.moves:
                rec = engine.world.pods[move.pod]
                name = _job_name(f"{profile.name}-defrag", number, move.pod)
                chosen = DeschedulerCandidate(
                    pod=move.pod, node=move.source, chosen=True, code="Chosen", reason="", target=move.target
                )
                reason = f"GPUDefrag: making room for {plan.pending} on node {plan.target}"
                jobs.append(_job(name, profile, number, rec, chosen, reason, trigger="GPUDefrag"))
                moves.append(msgspec.structs.replace(move, job=name))
            plans.append(msgspec.structs.replace(plan, moves=moves))
        names = [m.job for p in plans for m in p.moves]
        decided = msgspec.structs.replace(planned, plans=plans, jobs=names)
        return [(stream_id("descheduler", profile.name), decided), *jobs]

    def _node_inputs(self, engine: ReservationEngine) -> list[NodeInput]:
        requested: dict[str, dict[str, int]] = {}
        for rec in engine.world.pods.values():
            if rec.node and rec.pod is not None:
                got = requested.setdefault(rec.node, {})
                for r, v in rec.pod.requests.items():
                    got[r] = got.get(r, 0) + v
        busy: dict[str, str] = {}
        settled: dict[str, int] = {}
        for job in sorted(engine.jobs.jobs.values(), key=lambda j: j.name):
            for node, word in ((_source(job, engine), "off"), (job.target_node, "onto")):
                if not node:
                    continue
                if job.active:
                    busy.setdefault(
                        node, f"PodMigrationJob {job.name} is still moving {job.spec.pod.key} {word} it"
                    )
                elif job.finished_at is not None:
                    settled[node] = max(settled.get(node, 0), job.finished_at)
        return [
            NodeInput(
                name=name,
                labels=dict(info.labels),
                allocatable=dict(info.allocatable),
                requested=requested.get(name, {}),
                unschedulable=info.unschedulable,
                busy=busy.get(name, ""),
                settled_at=settled.get(name, 0),
            )
            for name, info in sorted(self.nodes.items())
        ]

    def _unfit(self, pod: PodInput, node: str, engine: ReservationEngine) -> str:
        """Why ``pod`` may not run on ``node`` by its node selector, required node affinity and tolerations (the
        scheduler's static filters), "" when it may: LowNodeLoad's ``nodeFit`` for a target."""
        info = self.nodes.get(node)
        rec = engine.world.pods.get(pod.key)
        spec = rec.pod if rec is not None else None
        if info is None or spec is None:
            return ""
        unschedulable = (
            (("node.kubernetes.io/unschedulable", "", "NoSchedule"),) if info.unschedulable else ()
        )
        taint = first_untolerated_taint(info.taints + unschedulable, spec.tolerations)
        if taint is not None:
            return f"node {node} has the taint {taint[0]}={taint[1]}:{taint[2]} the pod does not tolerate"
        if any(info.labels.get(k) != v for k, v in spec.node_selector):
            return f"node {node} does not match the pod's nodeSelector"
        if spec.affinity is not None and not match_node_selector_terms(spec.affinity, info.labels, node):
            return f"node {node} does not match the pod's required node affinity"
        return ""

    def _pod_inputs(self, engine: ReservationEngine) -> list[PodInput]:
        migrating = {j.spec.pod.key: j.name for j in engine.jobs.jobs.values() if j.active}
        return [
            pod_input(rec, migrating.get(key, ""))
            for key, rec in sorted(engine.world.pods.items())
            if rec.node
        ]

    # --- the pre-eviction hotspot re-check ----------------------------------------------------------------------------
    def _recheck(self, node: str, metric: NodeMetric, at: int, engine: ReservationEngine) -> list[Emit]:
        waiting = [
            job
            for name, (source, _, _) in sorted(self.jobs.items())
            if source == node
            and (job := engine.jobs.jobs.get(name)) is not None
            and job.active
            and not job.evicted
            and not job.eviction_requested
        ]
        if not waiting:
            return []
        _, high, prod_high = self.jobs[waiting[0].name]
        usage = metric.system_and_pods_usage()
        prod = _prod_usage(metric)
        hot = [r for r, v in high.items() if usage.get(r, 0) > v] + [
            r for r, v in prod_high.items() if prod.get(r, 0) > v
        ]
        if hot:
            return []
        waiting = _with_gangs(waiting, engine)
        if not waiting:
            return []
        scratch = engine.jobs.copy()
        moves = Migrations(engine.config, engine.world, scratch, at)
        shown = ", ".join(f"{r} {usage.get(r, 0)} ≤ {v}" for r, v in sorted(high.items()))
        for job in waiting:
            moves.emit(
                stream_id("migration", job.name),
                MigrationAborted(
                    job=ObjectRef(name=job.name),
                    uid=job.uid,
                    message=f"hotspot re-check: node {node} is no longer above its high thresholds ({shown})",
                ),
                job,
            )
            moves.remove_reservation(job)
        return moves.out

    def snapshot(self) -> dict[str, object]:
        if not self.enabled:
            return {}
        snapshot: dict[str, object] = {
            "metrics": {n: m.update_time for n, m in sorted(self.metrics.items())},
            "first_metric_at": self.first_metric_at,
            "last_round_at": self.last_round_at,
            "rounds": dict(sorted(self.rounds.items())),
            "detectors": {
                p: {n: [d.abnormal, d.round] for n, d in sorted(ds.items())}
                for p, ds in sorted(self.detectors.items())
            },
            "jobs": sorted(self.jobs),
            "kick_at": self.kick_at,
        }
        if self.defrag_rounds:
            snapshot["defrag_rounds"] = dict(sorted(self.defrag_rounds.items()))
        return snapshot


def _with_gangs(waiting: list[Job], engine: ReservationEngine) -> list[Job]:
    """The jobs the re-check aborts: a gang moves whole or not at all, so a waiting job of a gang member takes the
    waiting jobs the same round asked for its gang's other members with it, unless one of those has already evicted
    its pod (the gang is moving: none is aborted)."""

    def gang(job: Job) -> str:
        rec = engine.world.pods.get(job.spec.pod.key)
        spec = rec.pod if rec is not None else None
        return spec.gang.gang_id if spec is not None and spec.gang is not None else ""

    out: list[Job] = []
    for job in waiting:
        group = [job]
        if gang(job):
            asked = job.spec.annotations.get(ANN_ROUND, "")
            group = [
                m
                for _, m in sorted(engine.jobs.jobs.items())
                if gang(m) == gang(job) and m.spec.annotations.get(ANN_ROUND, "") == asked
            ]
        if any(m.evicted or m.eviction_requested for m in group):
            continue
        out += [m for m in group if m.active and m not in out]
    return out


def _metric(event: NodeMetricReported) -> NodeMetric:
    metric = event.metric
    if metric is None:
        metric = parse_nodemetric(event.manifest, [], []) or NodeMetric(name=event.name)
    if metric.update_time != event.update_time:
        metric = msgspec.structs.replace(metric, update_time=event.update_time)
    return metric


def _spec(event: MigrationApplied) -> Any:
    return parse_migration_job(event.manifest, [], [])


def _prod_usage(metric: NodeMetric) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in metric.pods:
        if pod.priority == "koord-prod":
            for r, v in pod.usage.items():
                out[r] = out.get(r, 0) + v
    return out


def _source(job: Job, engine: ReservationEngine) -> str:
    if job.source_node:
        return job.source_node
    rec = engine.world.pods.get(job.spec.pod.key)
    return rec.node if rec is not None and job.active else ""


def _with_evictor(profile: Profile, config: ReservationConfig) -> Profile:
    """The profile with the evictor filter its round applies: the migration controller's (the jobs it asks for pass
    that filter too), narrowed by the profile's own evictLocalStoragePods / evictSystemCriticalPods."""
    args = evictor_args(config.migration, config.mode)
    return msgspec.structs.replace(
        profile,
        evictor=msgspec.structs.replace(
            args,
            evict_local_storage=args.evict_local_storage and profile.evict_local_storage,
            evict_system_critical=args.evict_system_critical and profile.evict_system_critical,
        ),
    )


def _job_name(profile: str, number: int, pod: str) -> str:
    namespace, name = pod.split("/", 1)
    return f"{profile}-r{number}-{namespace}-{name}"[:253].rstrip("-.")


def _job(
    name: str,
    profile: Profile,
    number: int,
    rec: PodRecord,
    chosen: DeschedulerCandidate,
    evict_reason: str,
    trigger: str = "LowNodeLoad",
) -> Emit:
    """The PodMigrationJob a chosen pod gets: the profile's mode and ttl when it sets them (else the migration
    controller's defaults), and — unless the mode is EvictDirectly — a reservation template of the pod restricted to
    the node the round counted room on."""
    namespace, pod_name = rec.key.split("/", 1)
    spec: JsonObject = {"podRef": {"namespace": namespace, "name": pod_name, "uid": rec.uid}}
    if profile.job_mode:  # else the migration controller's defaultJobMode
        spec["mode"] = profile.job_mode
    if profile.job_ttl_us:  # else the migration controller's defaultJobTTL
        spec["ttl"] = format_duration(profile.job_ttl_us)
    if profile.job_mode != EVICT_DIRECTLY and chosen.target:
        pod = rec.manifest()
        meta = obj(pod.get("metadata"))
        only: JsonObject = {"key": "metadata.name", "operator": "In", "values": [chosen.target]}
        template_spec = with_node_field(obj(pod.get("spec")), only)
        spec["reservationOptions"] = {
            "template": {
                "spec": {
                    "template": {
                        "metadata": {
                            k: v
                            for k, v in meta.items()
                            if k in ("namespace", "name", "labels", "annotations")
                        },
                        "spec": template_spec,
                    }
                }
            }
        }
    manifest = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {
            "name": name,
            "labels": {LABEL_CREATED_BY: CREATOR},
            "annotations": {
                ANN_TRIGGER: trigger,
                ANN_REASON: evict_reason,
                ANN_ROUND: f"{profile.name}/{number}",
                ANN_TARGET: chosen.target,
            },
        },
        "spec": spec,
    }
    return stream_id("migration", name), MigrationApplied(job=ObjectRef(name=name), manifest=manifest)
