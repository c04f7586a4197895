"""kube-sync as a process (``allot-kube-sync``, ``allot kube-sync``): the list-watches of :mod:`allot_kube_sync.sync`,
plus /healthz, /readyz and /metrics on the servers' shared health server (:mod:`allot_runtime.health`).

==========================  ==================  =====================================================================
Environment variable        Default             Meaning
==========================  ==================  =====================================================================
ALLOT_DATABASE_URL          (required)          PostgreSQL holding the event log
ALLOT_SCHEDULER_NAME        allot-scheduler     pods with this ``spec.schedulerName`` are Allot's
ALLOT_KUBECONFIG            (none)              kubeconfig path; else ``KUBECONFIG``, the in-cluster service
                                                account, ``~/.kube/config``
ALLOT_LEADER_ELECTION       advisory            ``advisory``: a PostgreSQL advisory lock (``kube-sync``) lets one
                                                replica record, the others stand by; ``lease``: the Lease
                                                ``ALLOT_LEASE_NAME`` (default ``allot-kube-sync``) in
                                                ``ALLOT_LEASE_NAMESPACE``, and every append carries the leader's
                                                term (``allot_runtime.kube.lease``)
ALLOT_LEASE_DURATION_S, _RENEW_DEADLINE_S, _RETRY_PERIOD_S  as for the services (15, 10, 2)
ALLOT_DB_READ_TIMEOUT       30                  seconds a read of the log waits for PostgreSQL, an append that plus
                                                the lock's 10 s (0: for ever), as for the services
ALLOT_HTTP_HOST / _PORT     0.0.0.0 / 8080      health and metrics listener
ALLOT_LOG_LEVEL / _FORMAT   INFO / json
==========================  ==================  =====================================================================

``/healthz`` answers at once; ``/readyz`` turns 200 once every resource's first list is recorded (a standby never
is). Exactly one replica records at a time: it holds the advisory lock or the Lease, the others wait for it
(``phase``: standing by). With the Lease, a replica that lost it (paused, partitioned) cannot append any more: the
log refuses its term, the refusal is recorded (``leader.write_refused``) and it exits, to be restarted as a
standby. An overlap would record nothing twice for the same object version anyway (derived event ids), but two
live copies would race on every change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from allot_contracts.errors import Unavailable
from allot_eventstore import Fence
from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
from allot_eventstore.migrate import ensure_current
from allot_eventstore.ownership import Ownership
from allot_eventstore.postgres import PostgresEventStore
from allot_kube_sync.sync import DEFAULT_SCHEDULER_NAME, PRODUCER, KubeSync
from allot_runtime import logs
from allot_runtime.health import health_app, serve_health
from allot_runtime.kube.lease import GuardedStore, Leadership, LeaseConfig, lease_identity, while_leading
from allot_runtime.settings import ServiceSettings
from allot_runtime.settings import load as load_settings
from allot_runtime.signals import stop_on_signals

# The variables this process reads besides the shared ALLOT_* settings (for deployment checks and docs).
ENVIRONMENT = ("ALLOT_SCHEDULER_NAME", "ALLOT_KUBECONFIG")
DEFAULT_LEASE = "allot-kube-sync"


@dataclass
class Progress:
    """What the health server reads: the phase kube-sync is in and, once it records, its list-watches."""

    phase: str = "starting"
    sync: KubeSync | None = None


def health(progress: Progress, registry: CollectorRegistry) -> web.Application:
    """kube-sync's answers: its phase, whether every resource's first list is recorded, its metrics."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": "kube-sync", "phase": progress.phase})

    async def readyz(_: web.Request) -> web.Response:
        sync = progress.sync
        ready = bool(sync is not None and sync.synced)
        pending = [] if sync is None else [str(r.resource) for r in sync.reflectors if not r.synced.is_set()]
        return web.json_response(
            {"ready": ready, "phase": progress.phase, "listing": pending},
            status=200 if ready else 503,
        )

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")

    return health_app(healthz=healthz, readyz=readyz, metrics=metrics)


def _lease_config(settings: ServiceSettings) -> LeaseConfig:
    """kube-sync's Lease (``ALLOT_LEASE_*``; this process's own identity)."""
    return LeaseConfig(
        namespace=settings.lease_namespace,
        name=settings.lease_name or DEFAULT_LEASE,
        identity=lease_identity(),
        lease_duration=settings.lease_duration_s,
        renew_deadline=settings.lease_renew_deadline_s,
        retry_period=settings.lease_retry_period_s,
    )


async def run_kube_sync(
    *, scheduler_name: str | None = None, kubeconfig: str | None = None, stop: asyncio.Event | None = None
) -> None:
    logs.setup(
        "kube-sync",
        level=os.environ.get("ALLOT_LOG_LEVEL", "INFO"),
        fmt=os.environ.get("ALLOT_LOG_FORMAT", "json"),
    )
    log = logging.getLogger("allot.kube-sync")
    database_url = os.environ["ALLOT_DATABASE_URL"]
    settings = load_settings(PRODUCER)  # leader election; a bad value is refused before anything starts
    scheduler_name = scheduler_name or os.environ.get("ALLOT_SCHEDULER_NAME") or DEFAULT_SCHEDULER_NAME
    if stop is None:
        stop = stop_on_signals()
    registry = CollectorRegistry()
    progress = Progress(phase="waiting for the database schema")
    runner = await serve_health(health(progress, registry))
    try:
        delay = 0.5
        while not stop.is_set():
            try:
                await ensure_current(
                    database_url, read_timeout=settings.read_timeout, timeouts_from=DB_READ_TIMEOUT_VARIABLE
                )
                break
            except Exception as exc:  # a database that is still starting raises driver errors
                log.warning("waiting for the database schema: %s", exc)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                delay = min(delay * 2, 5.0)
        if stop.is_set():
            return
        from allot_runtime.kube import api_client

        progress.phase = "connecting to the API server"
        client = await api_client(kubeconfig)
        stores: list[PostgresEventStore] = []

        def log_store(fence: Fence | None = None) -> PostgresEventStore:
            """A store whose reads and appends (the lease's term and its record too) are bounded as the services'."""
            stores.append(
                PostgresEventStore.connect(
                    database_url,
                    fence=fence,
                    read_timeout=settings.read_timeout,
                    write_timeout=settings.write_timeout,
                    timeouts_from=DB_READ_TIMEOUT_VARIABLE,
                )
            )
            return stores[-1]

        ownership: Ownership | None = None  # released last, once every object sync recorded is in the log
        leadership: Leadership | None = None  # likewise
        try:
            hold: Any
            store: Any
            if settings.leader_election == "lease":
                config = _lease_config(settings)
                client.user_agent = f"allot-kube-sync/{config.identity}"
                leadership = Leadership(client=client, store=log_store(), config=config, decider=PRODUCER)
                progress.phase = "standing by: waiting for the lease"
                if not await leadership.acquire(stop):
                    return
                store = GuardedStore(
                    log_store(leadership.fence), leadership, "recording the cluster's objects"
                )
                hold = leadership.hold
            else:
                ownership = Ownership(database_url, PRODUCER)
                progress.phase = "standing by: another replica records"
                if not await ownership.acquire(stop):
                    return
                store = log_store()
                hold = ownership.hold
            sync = KubeSync(store=store, client=client, scheduler_name=scheduler_name, registry=registry)
            progress.sync, progress.phase = sync, "running"
            try:
                await while_leading(hold, sync.run, stop)
            except (
                Unavailable
            ) as exc:  # the lease or the lock was lost: a supervisor restarts this as a standby
                log.error("%s", exc)
                raise SystemExit(1) from exc
        finally:
            if ownership is not None:
                await ownership.release()
            if leadership is not None:
                await leadership.release()
            await client.close()
            for opened in stores:
                await opened.close()
        log.info("kube-sync stopped")
    finally:
        await runner.cleanup()
