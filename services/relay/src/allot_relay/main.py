"""The relay as a process (``allot-relay``, also ``allot relay``): log → JetStream, with a health and metrics endpoint.

Reads ALLOT_DATABASE_URL, ALLOT_NATS_URL, ALLOT_NATS_PREFIX, ALLOT_NATS_STREAM and ALLOT_HTTP_PORT like the services.
``/healthz`` answers at once; ``/readyz`` turns 200 once the schema is current and the relay is publishing, and says
503 (with the reason) while the log cannot be read: each read is given ``ALLOT_DB_READ_TIMEOUT`` seconds (30), and so
is each check of the LISTEN session that wakes the relay at every append (replaced when lost:
:mod:`allot_eventstore.listen`).
With ``ALLOT_ANCHOR_KEY_FILE`` (an Ed25519 private key, PEM) it also seals the log: a signed checkpoint of the
published head every ``ALLOT_ANCHOR_EVERY_EVENTS`` events or ``ALLOT_ANCHOR_EVERY_SECONDS`` seconds (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_bus.relay import Relay
from allot_contracts.errors import InvalidInput
from allot_eventstore.anchor import CheckpointPolicy
from allot_eventstore.anchor_keys import load_signing_key
from allot_eventstore.anchor_log import PostgresCheckpoints, Sealer
from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
from allot_eventstore.listen import Listener
from allot_eventstore.migrate import ensure_current
from allot_eventstore.postgres import PostgresEventStore
from allot_relay import settings
from allot_relay.settings import AnchorSettingsError
from allot_runtime import logs, memory
from allot_runtime.health import health_app, serve_health
from allot_runtime.metrics import standard_collectors
from allot_runtime.settings import database_url_problem, db_bounds, db_read_timeout
from allot_runtime.signals import stop_on_signals, unless_stopped


@dataclass
class Publishing:
    """What the health server reads: the log, the relay and its wake-ups (the newest head seen), once the relay is
    publishing. ``/metrics`` reads no more than that: a scrape answers at once, whether PostgreSQL answers or not."""

    store: PostgresEventStore | None = None
    relay: Relay | None = None
    listening: Listener | None = None


async def _serve(state: Publishing) -> web.AppRunner:
    registry = CollectorRegistry()
    standard_collectors(registry, "relay")
    published = Gauge(
        "allot_relay_published_position", "Last log position published to JetStream", registry=registry
    )
    lag = Gauge(
        "allot_relay_lag_events",
        "Events in the log not yet on JetStream (up to the newest head the relay was told of)",
        registry=registry,
    )

    class Published(Collector):
        """Events published (acknowledged by JetStream) and publish requests sent, read from the relay at scrape."""

        def collect(self) -> Iterator[Metric]:
            relay = state.relay
            done = CounterMetricFamily(
                "allot_relay_published_events", "Events published to JetStream and acked"
            )
            sent = CounterMetricFamily(
                "allot_relay_publish_requests", "Publish requests sent, including refused or unanswered ones"
            )
            done.add_metric([], float(relay.published_total if relay is not None else 0))
            sent.add_metric([], float(relay.sent if relay is not None else 0))
            yield done
            yield sent

    registry.register(Published())

    async def metrics(_: web.Request) -> web.Response:
        if state.relay is not None:
            published.set(state.relay.published_position)
        if state.relay is not None and state.listening is not None:
            lag.set(max(state.listening.head - state.relay.published_position, 0))
        return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        position = state.relay.published_position if state.relay is not None else None
        return web.json_response({"status": "ok", "service": "relay", "published": position})

    async def readyz(_: web.Request) -> web.Response:
        if state.relay is None or state.store is None:
            return web.json_response({"ready": False, "reason": "starting"}, status=503)
        if (unreachable := state.store.unreachable.reason) is not None:  # nothing can be read to publish
            reason = f"the event log cannot be reached: {unreachable}"
            return web.json_response({"ready": False, "reason": reason}, status=503)
        return web.json_response({"ready": True})

    return await serve_health(health_app(healthz=healthz, readyz=readyz, metrics=metrics))


ENVIRONMENT = settings.ENVIRONMENT  # what the relay reads besides the shared settings


def sealer(store: PostgresEventStore, environ: Mapping[str, str]) -> Sealer | None:
    """The relay's sealer from its settings; None (and a warning) when no signing key is configured."""
    path = environ.get("ALLOT_ANCHOR_KEY_FILE", "").strip()
    try:
        policy = CheckpointPolicy.from_env(environ)
        key = load_signing_key(Path(path)) if path else None
    except InvalidInput as exc:
        raise AnchorSettingsError(str(exc)) from exc
    if key is None:
        logging.getLogger("allot.relay").warning(
            "ALLOT_ANCHOR_KEY_FILE is not set: the log is not sealed, so a rewrite with recomputed hashes would go "
            "unnoticed by `allot replay --verify` (docs/security.md)"
        )
        return None
    return Sealer(store, PostgresCheckpoints(store), key, policy)


async def run_relay() -> None:
    logs.setup(
        "relay",
        level=os.environ.get("ALLOT_LOG_LEVEL", "INFO"),
        fmt=os.environ.get("ALLOT_LOG_FORMAT", "json"),
    )
    memory.configure()
    log = logging.getLogger("allot.relay")
    database_url = os.environ["ALLOT_DATABASE_URL"]
    names = BusNames(
        prefix=os.environ.get("ALLOT_NATS_PREFIX", "allot"),
        stream=os.environ.get("ALLOT_NATS_STREAM", "ALLOT_EVENTS"),
    )
    read_timeout, write_timeout = db_bounds(db_read_timeout(os.environ))
    stop = stop_on_signals()
    state = Publishing()
    runner = await _serve(state)
    try:
        while not stop.is_set():
            try:
                await ensure_current(
                    database_url, read_timeout=read_timeout, timeouts_from=DB_READ_TIMEOUT_VARIABLE
                )
                break
            except Exception as exc:
                log.warning("waiting for the database schema: %s", exc)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
        if stop.is_set():
            return
        store = PostgresEventStore.connect(
            database_url,
            read_timeout=read_timeout,
            write_timeout=write_timeout,
            timeouts_from=DB_READ_TIMEOUT_VARIABLE,
        )
        seal = sealer(store, os.environ)
        nc = await unless_stopped(
            connect(os.environ.get("ALLOT_NATS_URL", "nats://127.0.0.1:4222"), name="allot-relay"), stop
        )
        if nc is None:
            return
        relay = Relay(store, nc.jetstream(), names, on_published=seal)
        state.store, state.relay = store, relay
        log.info("relay started: log → stream %s (%s)", names.stream, names.all_events)
        try:
            async with store.notifications() as listening:
                state.listening = listening
                await relay.run(stop, wake=listening.woken)
        finally:
            with contextlib.suppress(Exception):
                await nc.drain()
            await store.close()
    finally:
        await runner.cleanup()


def main() -> None:
    """``allot-relay``: a clear line and exit code 2 for a setting it cannot use, as the services do."""
    if not os.environ.get("ALLOT_DATABASE_URL"):
        print(
            "allot-relay: invalid configuration: ALLOT_DATABASE_URL: is required (e.g. postgresql://user@host:5432/allot)",
            file=sys.stderr,
        )
        sys.exit(2)
    if (problem := database_url_problem(os.environ["ALLOT_DATABASE_URL"])) is not None:
        print(f"allot-relay: invalid configuration: ALLOT_DATABASE_URL: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        db_read_timeout(os.environ)
    except InvalidInput as exc:
        print(f"allot-relay: invalid configuration: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_relay())
    except (AnchorSettingsError, InvalidInput) as exc:
        print(f"allot-relay: {exc}", file=sys.stderr)
        sys.exit(2)
