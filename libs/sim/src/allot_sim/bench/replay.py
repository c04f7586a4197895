"""``allot bench replay``: what ``allot replay --verify`` costs on a long log (events/s, peak memory).

For each ``--events`` size a log of that many events is built (``allot_sim.bench._history``: the openb GPU cluster,
then rounds of openb pods submitted, decided and deleted, written straight into PostgreSQL with the services'
checkpoints), then ``allot replay --verify --no-live`` runs ``--runs`` times as its own process against it, as a
user runs it. Reported per size: the median wall time and ``events_per_s`` (events in the log ÷ wall time),
``cpu_s``: the median CPU seconds (user + system) of the verify process and every process it started (the figure to
compare on a busy machine), and ``peak_rss_mib``: the largest resident memory of the verify process and every process
it started, summed, sampled every 20 ms. Every run must verify (exit 0); a run that does not stops the benchmark.
Before the timed runs, the bytecode of what a run imports is compiled once into a directory of its own
(``PYTHONPYCACHEPREFIX``, :func:`write_bytecode`), as an installed package has it, so that no timed run compiles its
sources whatever ``PYTHONDONTWRITEBYTECODE`` says (``--no-compile``: the bytecode the environment has).

Server: ``ALLOT_DATABASE_URL`` when set, where each log is kept as the database ``allot_bench_history_<events>`` and
reused by later runs (``--fresh`` rebuilds it); otherwise an embedded PostgreSQL in a temporary directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

from allot_intake.errors import UsageError
from allot_runtime.memory import tree_rss
from allot_sim.bench._history import History, build_history
from allot_sim.bench._postgres import _admin, create_database, drop_database, postgres_server
from allot_sim.bench.placement import trace_csv

GOALS: dict[str, float] = {"events_per_s": 20_000, "peak_rss_mib": 300}
MiB = 1024 * 1024


@dataclass(frozen=True)
class Logs:
    """The logs to measure on: one of each size in ``events`` (kept ones reused unless ``fresh``), built from the
    openb ``nodes`` and ``pods_csv``; ``runs`` timed runs each."""

    events: list[int]
    runs: int
    fresh: bool
    nodes: Path
    pods_csv: Path


async def _kept_head(server_url: str, name: str) -> int | None:
    """The head of a kept log (None when there is none, or it was left half-built)."""
    from allot_eventstore.urls import with_database

    conn = await _admin(server_url)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return None
    finally:
        await conn.close()
    conn = await _admin(with_database(server_url, name))
    try:
        built = await conn.fetchval("SELECT count(*) FROM checkpoints")
        return int(await conn.fetchval("SELECT position FROM log_head WHERE id = 1")) if built else None
    except Exception:
        return None
    finally:
        await conn.close()


async def history(server_url: str, events: int, logs: Logs, *, keep: bool) -> tuple[str, History | int]:
    """The URL of a log of ``events`` events: a kept one, or a new one (then its build figures)."""
    from allot_eventstore.migrate import migrate
    from allot_eventstore.urls import with_database

    name = f"allot_bench_history_{events}"
    if keep and not logs.fresh and (head := await _kept_head(server_url, name)) is not None:
        url = with_database(server_url, name)
        await migrate(url)  # a log kept by an earlier version gets this version's tables
        return url, head
    await drop_database(server_url, name)
    url = await create_database(server_url, name)
    built = await build_history(
        url,
        events,
        nodes_csv=trace_csv(logs.nodes, "--nodes"),
        pods_csv=trace_csv(logs.pods_csv, "--pods-csv"),
    )
    return url, built


def write_bytecode(commands: list[list[str]], env: Mapping[str, str] | None = None) -> str:
    """A new directory holding the bytecode of what ``commands`` import, for ``PYTHONPYCACHEPREFIX``: each is run once
    here (untimed, in the environment ``env`` or this one) writing it, so that a timed run loads compiled modules as
    an installed package does (its bytecode is compiled when it is installed) whatever ``PYTHONDONTWRITEBYTECODE``
    says. Remove it when done (``shutil.rmtree``)."""
    import tempfile

    prefix = tempfile.mkdtemp(prefix="allot-bench-bytecode-")
    writing = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    for command in commands:
        subprocess.run(
            command, env=writing | {"PYTHONPYCACHEPREFIX": prefix}, check=True, capture_output=True
        )
    return prefix


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Run ``command``; (wall seconds, CPU seconds of its process tree, peak resident bytes of its process tree,
    stdout). Raises when it fails."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    out, err = proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise UsageError(f"{' '.join(command)} failed ({proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")
    return seconds, after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime, peak, out


class VerifyRun(TypedDict):
    """One ``allot replay --verify``: its wall time, the CPU time and peak memory of its process tree, its verdict."""

    seconds: float
    cpu_s: float
    peak_rss_mib: float
    ok: bool


class Verify(TypedDict):
    """``allot replay --verify`` on one log: the median run (wall and CPU seconds), the largest peak, every run;
    ``bytecode``: compiled before the runs, or as the environment has it."""

    seconds: float
    events_per_s: int
    cpu_s: float
    bytecode: str
    peak_rss_mib: float
    runs: list[VerifyRun]


class Machine(TypedDict):
    """Where the benchmark ran, and its load before (and after) it."""

    platform: str
    python: str
    cpus: int | None
    load_average: float
    load_average_after: NotRequired[float]


class LogsReport(TypedDict):
    """The figures of a benchmark over logs of each size (``sizes``: per size, the log and what was measured on it),
    with the goals, the machine and where PostgreSQL came from."""

    goals: dict[str, float]
    machine: Machine
    runs: int
    sizes: dict[str, dict[str, object]]
    server: str


def verify_command(*options: str) -> list[str]:
    """``allot replay --verify --no-live --json`` with ``options``, as its own Python process."""
    return [
        sys.executable,
        "-c",
        "from allot_cli.main import main; main()",
        "replay",
        "--verify",
        "--no-live",
        "--json",
        *options,
    ]


def verify_runs(url: str, runs: int, *, compiled: bool = True) -> list[VerifyRun]:
    """``runs`` timed runs of ``allot replay --verify`` on the log at ``url``; with ``compiled``, on bytecode
    compiled before them by one untimed run over the log's first events (:func:`write_bytecode`)."""
    env = {**os.environ, "ALLOT_DATABASE_URL": url}
    env.pop("ALLOT_NATS_URL", None)
    bytecode = write_bytecode([verify_command("--until", "1000")], env) if compiled else None
    results: list[VerifyRun] = []
    try:
        for _ in range(runs):
            seconds, cpu, peak, out = measure(
                verify_command(), env | ({"PYTHONPYCACHEPREFIX": bytecode} if bytecode else {})
            )
            verdict = json.loads(out)
            results.append(
                {
                    "seconds": round(seconds, 2),
                    "cpu_s": round(cpu, 2),
                    "peak_rss_mib": round(peak / MiB, 1),
                    "ok": verdict["ok"],
                }
            )
    finally:
        if bytecode:
            shutil.rmtree(bytecode, ignore_errors=True)
    return results


def machine() -> Machine:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
    }


def on_logs(
    logs: Logs, goals: dict[str, float], measure_one: Callable[[str, int], Mapping[str, object]]
) -> LogsReport:
    """Build or reuse a log of each size, measure it with ``measure_one(url, events)``: the figures per size with
    the goals and the machine (this benchmark and ``allot bench restart``)."""
    before = machine()
    with postgres_server() as (server_url, source):
        result: LogsReport = {
            "goals": goals,
            "machine": before,
            "runs": logs.runs,
            "sizes": {},
            "server": source,
        }
        for events in logs.events:
            url, built = asyncio.run(history(server_url, events, logs, keep=source == "environment"))
            head = built.events if isinstance(built, History) else built
            result["sizes"][str(events)] = {
                "events": head,
                "built": built.__dict__ if isinstance(built, History) else "kept",
                **measure_one(url, head),
            }
    result["machine"]["load_average_after"] = round(os.getloadavg()[0], 2)
    return result


def verify_on_logs(logs: Logs, *, compiled: bool = True) -> LogsReport:
    """``allot replay --verify`` timed on each log (``compiled``: on bytecode compiled before the runs)."""

    def verify(url: str, events: int) -> Verify:
        runs = verify_runs(url, logs.runs, compiled=compiled)
        seconds = statistics.median(r["seconds"] for r in runs)
        return {
            "seconds": seconds,
            "events_per_s": round(events / seconds),
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "bytecode": "compiled before the runs" if compiled else "as found",
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "runs": runs,
        }

    return on_logs(logs, GOALS, verify)
