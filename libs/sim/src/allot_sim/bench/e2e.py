"""``allot bench e2e``: pods per second through the running stack, against the placement engine alone.

Starts the real stack exactly as ``allot up`` does (embedded PostgreSQL and nats-server, migrations, the relay and
the seven services as separate supervised processes) in a temporary state directory, then:

1. **cluster**: ``allot apply -f`` of the openb GPU cluster (1,213 ``v1 Node`` + 1,213 Koordinator ``Device``), as a
   user runs it: the command's wall time, until the services have handled every object, gives
   ``cluster_objects_per_s``.
2. **burst**: ``allot apply --no-wait`` of the first ``--pods`` pods of the openb pod list (5,000 by default) in one
   file; ``e2e_pods_per_s`` = pods / seconds from the first ``pod.submitted`` to the last terminal decision
   (``pod.bound``, ``pod.unschedulable`` or ``pod.rejected``), all read from the log's recorded times.
3. **open loop**: for each ``--rates`` value, pods offered at that rate for ``--duration`` seconds (appended by a
   paced submitter, as an API would); ``p50_ms`` / ``p99_ms`` of submit→bound at each rate. Latency is only
   meaningful below saturation; the figure at a rate above it shows the queue growing.
4. **in process**: the same burst pods through the placement engine alone (``allot bench placement``'s loop),
   before the stack starts, under the placement policy the stack's device-allocator is given (``--policy``, by
   default its own default, ``koordinator``; written to its config file in the state directory), so that both
   make the same decisions: ``distribution_penalty`` = in-process pods/s ÷ ``e2e_pods_per_s``. The policy decides
   much of the engine's cost on a large cluster: spreading pods over nodes (``koordinator``, ``spread``) leaves
   every node with a state of its own, which no cached result of an identical machine answers.

Between phases every pod is deleted (and its allocation released) so each phase starts from an empty cluster.
Per-hop p50/p99 come from the recorded time of each event of a pod's path; ``cpu_s_per_1000_pods`` is the CPU
time each process of the stack used during the burst, with the children it reaped (a snapshot's forked encoder;
PostgreSQL: the postmaster and its backends), which is where the time goes. ``peak_rss_mib`` is each process's peak resident set (``VmHWM``, read before the stack stops; for
PostgreSQL the largest of the postmaster and its backends). ``--node-count N`` replicates the openb node list with
new names to N nodes (6,065 = five-fold), for the cluster and the in-process run alike. Prints one JSON object with
``--json``.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import UsageError
from allot_sim.bench._pauses import PauseSummary, after_quiet, exports, overlapping, summary
from allot_sim.bench._timeline import WATCHED, Hop, Latency, Timelines
from allot_sim.bench.openb_docs import NAMESPACE, cluster_docs, name_of, pod_docs, write_yaml
from allot_sim.bench.placement import _throughput, trace_csv
from allot_stack.control import SILENT, Reporter
from allot_stack.stackfile import StackFile

if TYPE_CHECKING:
    from allot_eventstore.postgres import PostgresEventStore

GOALS = {
    "e2e_pods_per_s": 1000,
    "e2e_pods_per_s_floor": 700,
    "p99_ms_at_300": 300,
    "distribution_penalty": 3,
    "cluster_objects_per_s": 2000,
    "device_allocator_peak_rss_mib": 300,
}


PendingWork = Callable[[Any], Awaitable[dict[str, int]]]


class Waits(NamedTuple):
    """How the benchmark learns that the services have caught up with the log (``allot_stack.logtools``):
    ``pending_work(store)`` (each service's first unhandled position; empty when idle) and
    ``wait_idle(store, timeout=…, settle=…)``."""

    pending_work: PendingWork
    wait_idle: Callable[..., Awaitable[None]]


class Cluster(TypedDict):
    """The cluster phase: objects applied, the command's wall time, until the services handled them all."""

    cluster_objects: int
    cluster_apply_s: float
    cluster_registration_s: float
    cluster_user_s: float
    cluster_objects_per_s: int


class OpenLoopRate(Latency):
    """One open-loop rate: pods offered, the rate reached, submit→bound latency, outcomes and hops."""

    rate: float
    pods: int
    offered_per_s: int | None
    outcomes: dict[str, int]
    hops: dict[str, Hop]
    snapshot_pause_ms: dict[str, int]


class StackFigures(Cluster):
    """What the phases through the running stack measure."""

    burst_pods: int
    burst_s: float
    e2e_pods_per_s: int
    burst_submit_s: float
    burst_outcomes: dict[str, int]
    burst_latency: Latency
    hops_burst: dict[str, Hop]
    cpu_s_per_1000_pods: dict[str, float]
    peak_rss_mib: dict[str, float]
    snapshot_exports: dict[str, PauseSummary]
    snapshot_pause_ms_burst: dict[str, int]
    open_loop: list[OpenLoopRate]
    p50_ms: dict[str, float]
    p99_ms: dict[str, float]


class Report(StackFigures):
    """What ``allot bench e2e`` prints: the stack's figures, the engine's alone beside them, and the machine
    (:func:`measure` orders the keys alphabetically, as they are printed)."""

    benchmark: str
    cpus: int | None
    distribution_penalty: float
    goals: dict[str, int]
    inprocess_pods_per_s: int
    inprocess_pods_per_s_runs: list[int]
    machine: str
    policy: str
    python: str


@dataclass(frozen=True)
class Options:
    """``--pods`` in the burst, open-loop ``--rates`` (comma-separated pods/s) offered for ``--duration`` seconds
    each, the openb ``--nodes`` and ``--pods-csv``, the stack's ``--state-dir``, each phase's ``--timeout`` and
    ``--node-count`` (the node list replicated with new names to that many nodes; 0: as read) and the placement
    ``--policy`` of the device-allocator and the engine alone."""

    pods: int
    rates: str
    duration: float
    nodes: Path
    pods_csv: Path
    state_dir: Path | None
    timeout: float
    node_count: int = 0
    policy: str = "koordinator"


def _progress(text: str) -> None:
    print(f"bench e2e: {text}", file=sys.stderr, flush=True)


# -- CPU accounting -------------------------------------------------------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    # utime + stime, and cutime + cstime: the children it has reaped (a service's snapshot is encoded by one)
    return int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])


def _children(pid: int) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    yield int(entry.name)
            except (OSError, IndexError, ValueError):
                continue


def _stack_pids(stack: StackFile) -> dict[str, list[int]]:
    """Each process of the stack by name (PostgreSQL: the postmaster and its backends)."""
    out = {name: [pid] for name, info in stack.get("processes", {}).items() if (pid := info.get("pid"))}
    if (pg := stack.get("postgres", {}).get("pid")) is not None:
        out["postgres"] = [pg, *_children(pg)]
    if (nats := stack.get("nats", {}).get("pid")) is not None:
        out["nats-server"] = [nats]
    return out


def _cpu_snapshot(stack: StackFile) -> dict[str, float]:
    tick = os.sysconf("SC_CLK_TCK")
    return {name: sum(_cpu_ticks(p) for p in pids) / tick for name, pids in _stack_pids(stack).items()}


# -- peak memory ----------------------------------------------------------------------------------------------------


def vm_hwm_kib(status: str) -> int | None:
    """The peak resident set (``VmHWM``, which the kernel states in kB) in KiB from the text of
    ``/proc/<pid>/status``; None without that line (a kernel thread, a zombie)."""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split(":", 1)[1].split()[0])
    return None


def _peak_rss_kib(pid: int) -> int | None:
    try:
        return vm_hwm_kib(Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return None


def peak_rss_mib(pids: dict[str, list[int]]) -> dict[str, float]:
    """Each name's peak resident set in MiB, the largest over its processes (their shared pages, PostgreSQL's
    buffers, count once); names whose processes are all gone are left out."""
    out: dict[str, float] = {}
    for name, group in sorted(pids.items()):
        peaks = [kib for pid in group if (kib := _peak_rss_kib(pid)) is not None]
        if peaks:
            out[name] = round(max(peaks) / 1024, 1)
    return out


# -- phases ---------------------------------------------------------------------------------------------------------


async def _follow(
    store: Any,
    timelines: Timelines,
    cursor: int,
    *,
    pending_work: PendingWork,
    until_done: bool,
    timeout: float,
    stop: asyncio.Event | None = None,
) -> int:
    """Feed the log into ``timelines`` from ``cursor`` until every pod has a terminal decision (or ``stop``)."""
    deadline = time.monotonic() + timeout
    while True:
        records = await store.read(after=cursor, types=WATCHED, limit=20_000)
        timelines.feed(records)
        if records:
            cursor = records[-1].position
            continue
        finished = timelines.done and (until_done or (stop is not None and stop.is_set()))
        if finished and not await pending_work(store):  # the last hops (qos.recorded) are in too
            timelines.feed(await store.read(after=cursor, types=WATCHED, limit=100_000))
            return cursor
        if time.monotonic() > deadline:
            raise UsageError(f"pods still without a decision after {timeout:.0f}s: {timelines.outcomes()}")
        await asyncio.sleep(0.1)


async def _register(
    store: Any,
    command: list[str],
    env: dict[str, str],
    *,
    pending_work: PendingWork,
    objects: int,
    timeout: float,
) -> Cluster:
    """Run ``allot apply --no-wait`` of the cluster and watch the log until every service has handled it all:
    ``cluster_objects_per_s`` counts from the first object recorded to that moment; ``cluster_apply_s`` is the
    command itself (reading and checking the YAML, recording); ``cluster_user_s`` is what ``allot apply`` without
    ``--no-wait`` makes a user wait."""
    head = (await store.head())[0]
    started = time.monotonic()
    apply = await asyncio.create_subprocess_exec(*command, env=env, stdout=asyncio.subprocess.DEVNULL)
    if await asyncio.wait_for(apply.wait(), timeout=timeout) != 0:
        raise UsageError(f"allot apply of the cluster failed ({apply.returncode})")
    applied_s = time.monotonic() - started
    deadline = started + timeout
    while await pending_work(store):
        if time.monotonic() > deadline:
            raise UsageError(f"the services did not register the cluster within {timeout:.0f}s")
        await asyncio.sleep(0.02)
    done_wall, done = time.time(), time.monotonic()  # noqa: TID251 - compared with recorded times (wall clock)
    first = await store.read(after=head, limit=1)
    registration = done_wall - first[0].recorded_at / 1e6
    return {
        "cluster_objects": objects,
        "cluster_apply_s": round(applied_s, 2),
        "cluster_registration_s": round(registration, 2),
        "cluster_user_s": round(done - started, 2),
        "cluster_objects_per_s": round(objects / registration),
    }


async def _delete_all(store: Any, keys: list[str], *, waits: Waits, timeout: float) -> None:
    """Delete the pods (one bulk append) and wait until the services have handled it all."""
    from allot_contracts.envelope import NewEvent, stream_id
    from allot_contracts.events import ObjectRef, PodDeleted

    news = []
    for key in keys:
        namespace, name = key.split("/", 1)
        news.append(
            NewEvent(
                stream_id=stream_id("pod", key),
                event=PodDeleted(pod=ObjectRef(namespace=namespace, name=name)),
                event_id=str(uuid.uuid4()),
            )
        )
    for start in range(0, len(news), 2000):
        await store.append(news[start : start + 2000], producer="api")
    await waits.wait_idle(store, timeout=timeout, settle=0.5)


async def _open_loop(
    store: Any, docs: list[JsonObject], rate: float, *, pending_work: PendingWork, timeout: float
) -> Timelines:
    """Offer ``docs`` at ``rate`` pods/s (each due at ``i / rate`` s, appended as soon as it is due) while following
    the log; returns the pods' timelines once each has a terminal decision."""
    from allot_contracts.envelope import NewEvent
    from allot_intake.documents import Document
    from allot_intake.manifests import to_input

    inputs = [
        to_input(Document(source="open-loop", index=i, body=d), uid_factory=lambda: str(uuid.uuid4()))
        for i, d in enumerate(docs)
    ]
    news = [
        NewEvent(stream_id=s, event=e, event_id=str(uuid.uuid4())) for item in inputs for s, e in item.events
    ]
    timelines = Timelines(f"{NAMESPACE}/{name_of(d)}" for d in docs)
    cursor = (await store.head())[0]
    stop = asyncio.Event()
    follower = asyncio.create_task(
        _follow(
            store, timelines, cursor, pending_work=pending_work, until_done=False, timeout=timeout, stop=stop
        )
    )
    started, sent = time.monotonic(), 0
    try:
        while sent < len(news):
            due = min(len(news), int((time.monotonic() - started) * rate) + 1)
            if due > sent:
                await store.append(news[sent:due], producer="api")
                sent = due
            await asyncio.sleep(max(0.0, started + sent / rate - time.monotonic()))
        stop.set()
        await follower
    finally:
        follower.cancel()
    return timelines


async def _open_loop_phases(
    args: Options, waits: Waits, stack: StackFile, store: PostgresEventStore
) -> tuple[list[OpenLoopRate], list[tuple[float, float]]]:
    """Each ``--rates`` phase offered at its rate once the stack is quiet, its pods deleted after: the figures of each
    phase and its wall-clock span (for the snapshot exports that overlap it)."""
    open_loop: list[OpenLoopRate] = []
    phase_walls: list[tuple[float, float]] = []
    ports = [port for info in stack.get("processes", {}).values() if (port := info.get("port"))]
    for rate in [float(r) for r in args.rates.split(",") if r.strip()]:
        count = max(1, int(rate * args.duration))
        # The quiet after the deletions makes a service's due snapshot start (allot_runtime.snapshots): let
        # it finish before the phase rather than stall the phase's first pods; it is reported on its own.
        await after_quiet(ports, timeout=args.timeout)
        await waits.wait_idle(store, timeout=args.timeout, settle=0.5)
        _progress(f"open loop: {count} pods offered at {rate:g}/s")
        started_wall = time.time()  # noqa: TID251 - compared with the services' log times
        phase = await _open_loop(
            store,
            pod_docs(args.pods_csv, count, prefix=f"r{rate:g}-"),
            rate,
            pending_work=waits.pending_work,
            timeout=args.timeout,
        )
        phase_walls.append((started_wall, time.time()))  # noqa: TID251
        submit = phase.submit_span_s()
        open_loop.append(
            {
                "rate": rate,
                "pods": count,
                "offered_per_s": round(count / submit) if submit else None,
                **phase.latency_summary(),
                "outcomes": phase.outcomes(),
                "hops": phase.hops(),
                "snapshot_pause_ms": {},
            }
        )
        await _delete_all(store, [k.split(":", 1)[1] for k in phase.times], waits=waits, timeout=args.timeout)
    return open_loop, phase_walls


async def _measure(
    args: Options, waits: Waits, stack: StackFile, state_dir: Path, env: dict[str, str], work: Path
) -> StackFigures:
    from allot_stack.connect import bounded_store
    from allot_stack.processes import bin_path

    store = bounded_store(stack["database_url"])  # bounded as the commands' (ALLOT_DB_READ_TIMEOUT)
    allot = bin_path("allot")
    try:
        cluster = cluster_docs(args.nodes, args.node_count)
        cluster_file = write_yaml(work / "cluster.yaml", cluster)
        _progress(f"registering the openb cluster: allot apply -f ({len(cluster)} objects)")
        cluster_figures = await _register(
            store,
            [allot, "apply", "--no-wait", "-f", str(cluster_file)],
            env,
            pending_work=waits.pending_work,
            objects=len(cluster),
            timeout=args.timeout,
        )

        docs = pod_docs(args.pods_csv, args.pods)
        pods_file = write_yaml(work / "pods.yaml", docs)
        timelines = Timelines(f"{NAMESPACE}/{name_of(d)}" for d in docs)
        cursor = (await store.head())[0]
        _progress(f"burst: allot apply --no-wait of {len(docs)} pods")
        burst_started = time.time()  # noqa: TID251 - compared with the services' log times (wall clock)
        cpu_before = _cpu_snapshot(stack)
        apply = await asyncio.create_subprocess_exec(
            allot, "apply", "--no-wait", "-f", str(pods_file), env=env, stdout=asyncio.subprocess.DEVNULL
        )
        follower = asyncio.create_task(
            _follow(
                store,
                timelines,
                cursor,
                pending_work=waits.pending_work,
                until_done=True,
                timeout=args.timeout,
            )
        )
        try:  # a failed apply records nothing: stop following at once rather than wait out the timeout
            if await asyncio.wait_for(apply.wait(), timeout=args.timeout) != 0:
                raise UsageError(f"allot apply of the burst failed ({apply.returncode})")
            await follower
        finally:
            follower.cancel()
        cpu_after = _cpu_snapshot(stack)
        burst_wall = (burst_started, time.time())  # noqa: TID251
        span = timelines.span_s()
        e2e_pods_per_s = round(len(docs) / span)
        cpu_s_per_1000_pods = {
            name: round((cpu_after.get(name, 0.0) - before) * 1000 / len(docs), 2)
            for name, before in sorted(cpu_before.items())
        }
        peak = peak_rss_mib(_stack_pids(stack)).get("device-allocator")
        _progress(f"burst: {e2e_pods_per_s} pods/s; device-allocator peak RSS {peak} MiB; deleting the pods")
        await _delete_all(
            store, [k.split(":", 1)[1] for k in timelines.times], waits=waits, timeout=args.timeout
        )

        open_loop, phase_walls = await _open_loop_phases(args, waits, stack, store)
        peaks = peak_rss_mib(_stack_pids(stack))  # while the processes run: VmHWM goes with them
        _progress(f"peak RSS, MiB: {', '.join(f'{name} {mib:g}' for name, mib in peaks.items())}")
        found = exports(
            {name: log for name, info in stack.get("processes", {}).items() if (log := info.get("log"))}
        )
        for entry, (start, end) in zip(open_loop, phase_walls, strict=True):
            entry["snapshot_pause_ms"] = overlapping(found, start, end)
        pauses = summary(found)
        if "device-allocator" in pauses:
            longest = pauses["device-allocator"]
            _progress(
                f"device-allocator snapshots: {longest['count']}, longest pause {longest['max_ms']} ms "
                f"({longest['max_bytes'] / 2**20:.0f} MiB); forked encoding up to {longest['forked_max_ms']} ms, "
                f"child peak RSS up to {longest['forked_peak_rss_mib']} MiB"
            )
        return {
            **cluster_figures,
            "burst_pods": len(docs),
            "burst_s": round(span, 2),
            "e2e_pods_per_s": e2e_pods_per_s,
            "burst_submit_s": round(timelines.submit_span_s(), 2),
            "burst_outcomes": timelines.outcomes(),
            "burst_latency": timelines.latency_summary(),
            "hops_burst": timelines.hops(),
            "cpu_s_per_1000_pods": cpu_s_per_1000_pods,
            "peak_rss_mib": peaks,
            "snapshot_exports": pauses,
            "snapshot_pause_ms_burst": overlapping(found, *burst_wall),
            "open_loop": open_loop,
            "p50_ms": {f"{p['rate']:g}": p["p50_ms"] for p in open_loop},
            "p99_ms": {f"{p['rate']:g}": p["p99_ms"] for p in open_loop},
        }
    finally:
        await store.close()


def device_allocator_config(state_dir: Path, policy: str) -> Path:
    """Give the stack's device-allocator placement ``policy``: its config file in ``state_dir``
    (``config/device-allocator.yaml``, where the supervisor looks for it), so that the stack decides as the engine
    alone does. A state directory with another config for it is refused (:class:`UsageError`): the benchmark would
    compare other decisions, or overwrite the user's file."""
    path = state_dir / "config" / "device-allocator.yaml"
    text = f"policy: {policy}\n"
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise UsageError(
            f"{path}: the state directory has a device-allocator config of its own; the benchmark writes it "
            f"(policy {policy}, --policy) so that the stack and the engine alone decide alike: use another "
            "--state-dir"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def measure(args: Options, *, reporter: Reporter = SILENT) -> Report:
    """The four phases (in process first, then the stack started in ``args.state_dir`` or a temporary directory);
    ``reporter`` hears about the cleanup of a stack whose supervisor died."""
    from allot_stack.control import start_stack, stop_stack
    from allot_stack.logtools import pending_work, wait_idle

    waits = Waits(pending_work, wait_idle)

    trace_csv(args.nodes, "nodes CSV")
    trace_csv(args.pods_csv, "pods CSV")
    work = Path(tempfile.mkdtemp(prefix="allot-bench-e2e-"))
    state_dir = (args.state_dir or work / "stack").resolve()
    try:
        device_allocator_config(state_dir, args.policy)
    except UsageError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _progress(
        f"in process: {args.pods} pods through the placement engine alone, policy {args.policy} (3 runs)"
    )
    inproc = [
        _throughput(args.nodes, args.pods_csv, args.pods, args.node_count, policy=args.policy)[
            "placements_per_s"
        ]
        for _ in range(3)
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ALLOT_DATABASE_URL", "ALLOT_NATS_URL", "ALLOT_NATS_PREFIX", "ALLOT_NATS_STREAM")
    }
    env["ALLOT_STATE_DIR"] = str(state_dir)
    _progress(f"starting the stack in {state_dir} (embedded PostgreSQL and NATS, relay, seven services)")
    try:
        stack = start_stack(state_dir, env=env)
        try:
            out = asyncio.run(_measure(args, waits, stack, state_dir, env, work))
        finally:
            stop_stack(state_dir, reporter=reporter)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the generated files, and the stack unless --state-dir
    inprocess_pods_per_s = round(statistics.median(inproc))
    return {
        "benchmark": "e2e",
        "burst_latency": out["burst_latency"],
        "burst_outcomes": out["burst_outcomes"],
        "burst_pods": out["burst_pods"],
        "burst_s": out["burst_s"],
        "burst_submit_s": out["burst_submit_s"],
        "cluster_apply_s": out["cluster_apply_s"],
        "cluster_objects": out["cluster_objects"],
        "cluster_objects_per_s": out["cluster_objects_per_s"],
        "cluster_registration_s": out["cluster_registration_s"],
        "cluster_user_s": out["cluster_user_s"],
        "cpu_s_per_1000_pods": out["cpu_s_per_1000_pods"],
        "cpus": os.cpu_count(),
        "distribution_penalty": round(inprocess_pods_per_s / out["e2e_pods_per_s"], 2),
        "e2e_pods_per_s": out["e2e_pods_per_s"],
        "goals": GOALS,
        "hops_burst": out["hops_burst"],
        "inprocess_pods_per_s": inprocess_pods_per_s,
        "inprocess_pods_per_s_runs": inproc,
        "machine": platform.machine(),
        "open_loop": out["open_loop"],
        "policy": args.policy,
        "p50_ms": out["p50_ms"],
        "p99_ms": out["p99_ms"],
        "peak_rss_mib": out["peak_rss_mib"],
        "python": platform.python_version(),
        "snapshot_exports": out["snapshot_exports"],
        "snapshot_pause_ms_burst": out["snapshot_pause_ms_burst"],
    }
