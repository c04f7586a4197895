"""Which PodMigrationJobs may start now (upstream's migration arbitrator, v0.7 / v1.4 / v1.6).

Non-retryable checks fail the job (``ForbiddenMigratePod``): another active job already migrates the pod; the pod's
namespace is excluded (or not included); it does not match the configured label selector; its priority is not below
the priority threshold; in Kubernetes mode a pod without a controller (nothing would re-create it) unless
``evictAllBarePods``; a workload whose replicas equal 1, its max migrating or its max unavailable (unless
``skipCheckExpectedReplicas``).

Retryable checks keep it Pending: at most ``maxMigratingGlobally`` running jobs, ``maxMigratingPerNode`` per source
node (default 2), ``maxMigratingPerNamespace`` per namespace, ``maxMigratingPerWorkload`` per workload and
``maxUnavailablePerWorkload`` unavailable (not running, or migrating) pods per workload — so a workload never drops
below what it may lose. A workload is the pods sharing a controller reference; its expected replicas are the pods of
it Allot knows (there is no scale subresource in the log).

Order: lower-priority pods first, then the newest job (upstream sorts by creation time, newest first), then name.
Pure.
"""

from __future__ import annotations

from allot_contracts.objects.selectors import match_label_selector
from allot_reservation.config import IntOrPercent, MigrationConfig
from allot_reservation.jobs import RUNNING, Job, Jobs
from allot_reservation.world import PodRecord, World

__all__ = ["forbidden", "held", "max_unavailable", "order"]


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


def forbidden(job: Job, pod: PodRecord, jobs: Jobs, world: World, cfg: MigrationConfig, mode: str) -> str:
    """Why the pod may never be migrated by this job ("" when it may)."""
    for other in jobs.active():
        if (
            other.name != job.name
            and other.spec.pod.key == job.spec.pod.key
            and (other.phase == RUNNING or (other.created_at, other.name) < (job.created_at, job.name))
        ):
            return f"the pod is already being migrated by PodMigrationJob {other.name!r}"
    namespace = job.spec.pod.namespace
    if cfg.include_namespaces and namespace not in cfg.include_namespaces:
        return f"namespace {namespace!r} is not among the namespaces migrations may touch"
    if namespace in cfg.exclude_namespaces:
        return f"namespace {namespace!r} is excluded from migrations"
    facts, _ = pod.facts()
    if cfg.label_selector is not None and not match_label_selector(cfg.label_selector, facts.labels):
        return "the pod does not match the configured label selector"
    if cfg.priority_threshold is not None and pod.priority >= cfg.priority_threshold:
        return f"the pod's priority {pod.priority} is not below the threshold {cfg.priority_threshold}"
    wkey = world.workload_key(pod)
    if wkey is None:
        if mode == "kubernetes" and not cfg.evict_all_bare_pods:
            return "the pod has no controller to re-create it (set evictAllBarePods to allow it)"
        return ""
    if not cfg.skip_check_expected_replicas:
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
