"""``allot bench sampler``: what node-reporter's NodeMetric sampling costs a node.

The agent's metrics loop (``node_reporter.adapters.agent``) runs for ``--seconds`` seconds against this machine's
``/proc`` and the cgroups of ``--pods`` pods: a sample every ``--interval`` seconds, a NodeMetric built and recorded
(into an in-memory log) every ``--report`` seconds, exactly as a per-node node-reporter does. The pods' cgroups are

- ``--cgroups real`` (the default when run as root on a cgroup v1 machine): real cgroups created for the run under
  this machine's cpu, cpuacct and memory hierarchies (``<controller>/allot-bench-<pid>/kubepods/...``, removed
  afterwards), so the kernel generates every file the sampler reads, as on a node;
- ``--cgroups v1`` / ``v2``: a kubelet-shaped tree of plain files (cgroupfs driver / systemd driver).

Every third pod is Guaranteed, Burstable or BestEffort. Reported: ``cpu_percent`` = process CPU time (user + system)
/ wall time over the run (one core = 100 %), ``cpu_ms_per_sample`` (reporting included; the passes the loop actually made), samples and reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypedDict

from allot_intake.errors import UsageError

GiB = 1024**3
QOS = ("guaranteed", "burstable", "besteffort")


def _uids(count: int) -> list[str]:
    return [f"{i:08d}-0000-4000-8000-{i:012d}" for i in range(count)]


def _real_layout(base: str, uids: list[str]) -> tuple[Any, list[str]]:
    """Real cgroup v1 pod cgroups under ``<controller>/<base>``; returns the layout and the directories made."""
    from node_reporter.metrics.cgroups import CgroupLayout, detect

    root = detect("/sys/fs/cgroup")
    if root.version != 1:
        raise UsageError("--cgroups real needs a cgroup v1 machine (use --cgroups v1 or v2)")
    made: list[str] = []
    for controller in sorted({root.cpuacct, root.cpu, root.memory}):
        made.append(os.path.join(controller, base))
        for i, uid in enumerate(uids):
            qos = QOS[i % 3]
            rel = "kubepods" if qos == "guaranteed" else f"kubepods/{qos}"
            path = os.path.join(controller, base, rel, f"pod{uid}")
            try:
                os.makedirs(path)
            except OSError as exc:
                raise UsageError(
                    f"cannot create cgroup {path}: {exc.strerror} (run as root, or --cgroups v2)"
                ) from exc
    layout = CgroupLayout(
        version=1,
        cpuacct=os.path.join(root.cpuacct, base),
        cpu=os.path.join(root.cpu, base),
        memory=os.path.join(root.memory, base),
    )
    return layout, made


def _remove(made: list[str]) -> None:
    for top in made:
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


class Report(TypedDict):
    """What ``allot bench sampler`` prints."""

    benchmark: str
    cgroups: str
    pods: int
    pods_seen: int
    interval_s: float
    report_s: float
    wall_s: float
    cpu_s: float
    cpu_percent: float
    cpu_ms_per_sample: float
    samples: int
    reports: int


def measure(*, pods: int, interval: float, report: float, seconds: float, cgroups: str | None) -> Report:
    from allot_eventstore.memory import InMemoryEventStore
    from node_reporter.adapters.agent import Agent, AgentConfig
    from node_reporter.metrics.sampler import Sampler
    from node_reporter.metrics.testing import write_cgroups

    mode = cgroups or ("real" if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/cpuacct") else "v2")
    uids = _uids(pods)
    made: list[str] = []
    with tempfile.TemporaryDirectory(prefix="allot-bench-sampler-") as tmp:
        sampler = Sampler(proc_root="/", cgroup_root=str(Path(tmp) / "cgroup"))
        if mode == "real":
            sampler.layout, made = _real_layout(f"allot-bench-{os.getpid()}", uids)
        else:
            version = 1 if mode == "v1" else 2
            layout = {uid: (QOS[i % 3], 10**9 * i, GiB // 4, GiB // 16) for i, uid in enumerate(uids)}
            write_cgroups(Path(tmp) / "cgroup", layout, version)
            sampler = Sampler(proc_root="/", cgroup_root=str(Path(tmp) / "cgroup"))
        try:
            ctx = SimpleNamespace(
                store=InMemoryEventStore(),
                settings=SimpleNamespace(instance="bench-node"),
                runtime=SimpleNamespace(name="node-reporter@bench-node"),
            )
            config = AgentConfig(
                sample_interval_s=interval,
                report_interval_s=report,
                aggregate_duration_s=max(int(report), 1),
                aggregate_durations_s=(max(int(report), 1),),
            )
            agent = Agent(ctx, config)
            agent.sampler = sampler
            passes = 0
            sample = sampler.sample

            def counted(at: int, mono_ns: int) -> Any:
                nonlocal passes
                passes += 1
                return sample(at, mono_ns)

            sampler.sample = counted  # type: ignore[method-assign]

            async def main() -> tuple[float, float]:
                stop = asyncio.Event()
                t0, c0 = time.perf_counter(), time.process_time()
                task = asyncio.create_task(agent.metrics_loop(stop))
                await asyncio.sleep(seconds)
                stop.set()
                await task
                return time.perf_counter() - t0, time.process_time() - c0

            wall, cpu = asyncio.run(main())
            found = len(sampler.pods)
        finally:
            _remove(made)
    samples = max(passes, 1)
    reports = sum(1 for r in ctx.store.events if r.type == "nodemetric.applied")
    result: Report = {
        "benchmark": "sampler",
        "cgroups": mode,
        "pods": pods,
        "pods_seen": found,
        "interval_s": interval,
        "report_s": report,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 3),
        "cpu_percent": round(100 * cpu / wall, 2),
        "cpu_ms_per_sample": round(1000 * cpu / samples, 2),
        "samples": samples,
        "reports": reports,
    }
    return result
