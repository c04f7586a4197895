"""Which PodMigrationJobs may start now (upstream's migration arbitrator, v0.7 / v1.4 / v1.6). Every job passes
it, whoever asked for it: the descheduler or a user applying a PodMigrationJob by hand.

Non-retryable checks fail the job (``ForbiddenMigratePod``): another active job already migrates the pod; the
evictor filter refuses the pod (:mod:`allot_descheduling.evictor`, the filter the descheduler's candidates pass too:
namespaces, DaemonSet, mirror and static pods, bare pods in Kubernetes mode unless ``evictAllBarePods``,
system-critical priority, the priority threshold, the never-evict eviction cost, local storage, PVCs with
``ignorePvcPods``, the label selector); a workload whose replicas equal 1, its max migrating or its max unavailable
(unless ``skipCheckExpectedReplicas``).

Retryable checks keep it Pending: at most ``maxMigratingGlobally`` running jobs, ``maxMigratingPerNode`` per source
node (default 2), ``maxMigratingPerNamespace`` per namespace, ``maxMigratingPerWorkload`` per workload and
``maxUnavailablePerWorkload`` unavailable (not running, or migrating) pods per workload — so a workload never drops
below what it may lose. A workload is the pods sharing a controller reference; its expected replicas are the pods of
it Allot knows (there is no scale subresource in the log).

A pod annotated ``descheduler.alpha.kubernetes.io/evict`` passes every check but the one job per pod (upstream:
"any annotated as evictable pod pass non-retryable filter", and the retryable filter likewise).

Order: lower-priority pods first, then the newest job (upstream sorts by creation time, newest first), then name.
Pure.
"""

from __future__ import annotations

from allot_descheduling.evictor import EvictorArgs, evict_requested, refusal
from allot_reservation.config import IntOrPercent, MigrationConfig
from allot_reservation.evictee import pod_input
from allot_reservation.jobs import RUNNING, Job, Jobs
from allot_reservation.world import PodRecord, World

__all__ = ["evictor_args", "forbidden", "held", "max_unavailable", "order"]


def max_unavailable(replicas: int, limit: IntOrPercent | None) -> int:
    """Upstream's ``GetMaxUnavailable``: the configured amount (at least 1), else 1 / 2 / 10% by workload size."""
    value = 0
    if limit is not None:
        value = limit.scaled(replicas) or 1
    if value == 0:
        value = replicas * 10 // 100 if replicas > 10 else 2 if replicas >= 4 else 1
    return min(value, replicas)


def order(jobs: list[Job], world: World) -> list[Job]:
    def key(job: Job) -> tuple[int, int, str]:
        pod = world.pods.get(job.spec.pod.key)
        return (pod.priority if pod is not None else 0, -job.created_at, job.name)

    return sorted(jobs, key=key)


def _running(jobs: Jobs, other_than: Job) -> list[Job]:
    return [j for j in jobs.active() if j.phase == RUNNING and j.name != other_than.name]


def evictor_args(cfg: MigrationConfig, mode: str) -> EvictorArgs:
    """The evictor filter's settings: the migration controller's. Standalone, Allot re-creates a bare pod itself,
    so bare pods may be evicted; in Kubernetes mode only with ``evictAllBarePods``."""
    return EvictorArgs(
        evict_local_storage=cfg.evict_local_storage,
        evict_system_critical=cfg.evict_system_critical,
        ignore_pvc=cfg.ignore_pvc,
        evict_bare_pods=mode != "kubernetes" or cfg.evict_all_bare_pods,
        include_namespaces=cfg.include_namespaces,
        exclude_namespaces=cfg.exclude_namespaces,
        priority_threshold=cfg.priority_threshold,
        label_selector=cfg.label_selector,
    )


def forbidden(job: Job, pod: PodRecord, jobs: Jobs, world: World, cfg: MigrationConfig, mode: str) -> str:
    """Why the pod may never be migrated by this job ("" when it may)."""
    for other in jobs.active():
        if (
            other.name != job.name
            and other.spec.pod.key == job.spec.pod.key
            and (other.phase == RUNNING or (other.created_at, other.name) < (job.created_at, job.name))
        ):
            return f"the pod is already being migrated by PodMigrationJob {other.name!r}"
    subject = pod_input(pod)
    code, why = refusal(subject, evictor_args(cfg, mode))
    if code:
        return why
    wkey = world.workload_key(pod)
    if wkey is not None and not cfg.skip_check_expected_replicas and not evict_requested(subject.annotations):
        replicas = len(world.workload_pods(wkey))
        most = max_unavailable(replicas, cfg.max_per_workload)
        unavailable = max_unavailable(replicas, cfg.max_unavailable_per_workload)
        if replicas == 1 or replicas in (most, unavailable):
            return (
                f"its workload has {replicas} replica(s), max migrating {most}, max unavailable {unavailable}: "
                "migrating it would leave nothing running"
            )
    return ""


def held(job: Job, pod: PodRecord, jobs: Jobs, world: World, cfg: MigrationConfig) -> tuple[str, str]:
    """The limit that keeps the job Pending now, as ``(reason, message)``; ``("", "")`` when it may start."""
    if evict_requested(pod.evictor_annotations or {}):
        return "", ""
    running = _running(jobs, job)
    others = [j for j in running if j.spec.pod.key != job.spec.pod.key]
    if cfg.max_globally and len(others) >= cfg.max_globally:
        return "MaxMigratingGlobally", f"{len(others)} pods are migrating, at most {cfg.max_globally} at once"
    if cfg.max_per_node and pod.node:
        on_node = [j for j in others if j.source_node == pod.node]
        if len(on_node) >= cfg.max_per_node:
            return (
                "MaxMigratingPerNode",
                f"{len(on_node)} pods of node {pod.node} are migrating, at most {cfg.max_per_node}",
            )
    namespace = job.spec.pod.namespace
    if cfg.max_per_namespace:
        in_ns = [j for j in others if j.spec.pod.namespace == namespace]
        if len(in_ns) >= cfg.max_per_namespace:
            return (
                "MaxMigratingPerNamespace",
                f"{len(in_ns)} pods of namespace {namespace} are migrating, at most {cfg.max_per_namespace}",
            )
    wkey = world.workload_key(pod)
    if wkey is None:
        return "", ""
    members = world.workload_pods(wkey)
    replicas = len(members)
    keys = {p.key for p in members}
    migrating = {j.spec.pod.key for j in others if j.spec.pod.key in keys}
    most = max_unavailable(replicas, cfg.max_per_workload)
    if migrating and len(migrating) >= most:
        return (
            "MaxMigratingPerWorkload",
            f"{len(migrating)} pods of its workload are migrating, at most {most} of {replicas}",
        )
    unavailable = {p.key for p in members if not p.node and p.key != pod.key} | migrating
    limit = max_unavailable(replicas, cfg.max_unavailable_per_workload)
    if len(unavailable) >= limit:
        return (
            "MaxUnavailablePerWorkload",
            f"{len(unavailable)} pods of its workload are unavailable or migrating, at most {limit} of {replicas}",
        )
    return "", ""
