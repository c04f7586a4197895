"""List-watch of one resource kind into a sink, with resumes, 410 relists and backoff (a reflector).

See :mod:`allot_runtime.kube.mirror` for the sink that records objects into the event log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from allot_contracts.errors import TransientError
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.kube.client import (
    ApiError,
    ApiUnavailable,
    Expired,
    Resource,
    meta,
    part,
    read_json,
    request,
    status_error,
)
from allot_runtime.metrics import RegistryFamilies, counter, gauge

log = logging.getLogger("allot.kube")


# ---------------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------------


class WatchMetrics(RegistryFamilies):
    """Prometheus families of the watchers, registered once per registry (``component``: who watches)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r, watched = registry, ("component", "resource")
        self.events = counter(r, "allot_kube_watch_events_total", "Watch events received", (*watched, "type"))
        self.lists = counter(
            r, "allot_kube_lists_total", "Full lists (start, and relists after 410 Gone)", watched
        )
        self.errors = counter(
            r, "allot_kube_watch_errors_total", "List and watch failures, retried with backoff", watched
        )
        self.recorded = counter(
            r, "allot_kube_events_recorded_total", "Input events recorded in the log", ("component", "type")
        )
        self.skipped = counter(
            r,
            "allot_kube_objects_skipped_total",
            "Objects not recorded because admission refused them",
            watched,
        )
        self.synced = gauge(r, "allot_kube_synced", "1 once the resource's first list is recorded", watched)


# ---------------------------------------------------------------------------------------------------------------
# The reflector: list, then watch; relist on 410
# ---------------------------------------------------------------------------------------------------------------


class Sink:
    """What a reflector feeds: a full list (to reconcile against), then watch events one by one."""

    async def replace(self, objects: list[JsonObject]) -> None:
        raise NotImplementedError

    async def apply(self, event_type: str, obj: JsonObject) -> None:
        raise NotImplementedError


@dataclass
class Backoff:
    initial: float = 0.5
    maximum: float = 30.0
    current: float = 0.0

    def next(self, hint: float | None = None) -> float:
        self.current = min(self.maximum, self.current * 2 if self.current else self.initial)
        delay = hint if hint is not None else self.current
        return float(delay * (0.8 + 0.4 * random.random()))

    def reset(self) -> None:
        self.current = 0.0


@dataclass
class Reflector:
    """List-watch of one resource into a :class:`Sink`."""

    client: Any
    resource: Resource
    sink: Sink
    component: str
    metrics: WatchMetrics
    field_selector: str = ""
    page_size: int = 500
    watch_timeout: int = 300
    backoff: Backoff = field(default_factory=Backoff)
    absent_retry: float = 60.0
    list_timeout: float = 120.0
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    resource_version: str = ""
    absent: bool = False  # discovery said the resource is not served (logged once)

    def _labels(self) -> tuple[str, str]:
        return self.component, str(self.resource)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: list, then watch; a watch that ends or breaks resumes from the last version seen; 410
        lists again. Failures are logged and retried with backoff (a failed list is listed again)."""
        listed = False
        expired = 0
        while not stop.is_set():
            try:
                if not listed:
                    await self.list_once()
                    listed = True
                started = time.monotonic()
                await self.watch_once(stop)  # a broken or ended watch resumes from the last version seen
                expired = 0
                if time.monotonic() - started < 1.0 and not stop.is_set():
                    # A watch that ends at once (a proxy cutting streams): do not hammer the API server.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=self.backoff.next())
                else:
                    self.backoff.reset()
            except Expired as exc:
                listed = False
                expired += 1
                log.info("%s: %s; listing again", self.resource, exc)
                if expired > 1:  # expired again right after a list: do not spin
                    await self._failed(exc, stop)
                continue
            except ApiError as exc:
                listed = False
                if exc.status != 404:
                    await self._failed(exc, stop)
                    continue
                await self._not_found(exc, stop)
            except TransientError as exc:
                await self._failed(exc, stop)

    async def _not_found(self, exc: ApiError, stop: asyncio.Event) -> None:
        """A 404 on the list or the watch. It never means by itself that the objects are gone: discovery (the
        group/version's resource list) says whether the resource is served. Served: a passing 404 (an API server or
        a proxy starting, a CRD being re-established): retried with backoff, and the next list records only the
        differences. Not served (its CRD is not installed, or removed): nothing is recorded, what was recorded stays
        as it was, the resource counts as synced (nothing to wait for), and it is listed again every
        ``absent_retry``; the list that succeeds then records only what changed."""
        try:
            served = await self.served()
        except (TransientError, ApiError) as failure:
            await self._failed(failure, stop)
            return
        if served:
            await self._failed(exc, stop)
            return
        if not self.absent:
            log.warning(
                "%s is not served by the API server (CRD not installed?); what was recorded stays as it is; "
                "looking again every %.0fs",
                self.resource,
                self.absent_retry,
            )
        self.absent = True
        self.metrics.synced.labels(*self._labels()).set(1)
        self.synced.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=self.absent_retry)

    async def served(self) -> bool:
        """Whether discovery lists the resource: ``GET /api/v1`` or ``/apis/<group>/<version>``, whose
        ``resources`` name it (a group/version that is not served at all answers 404)."""
        try:
            found = await read_json(
                await request(self.client, "GET", self.resource.base, timeout=aiohttp.ClientTimeout(total=30))
            )
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        names = {str(r.get("name", "")) for r in (found.get("resources") or []) if isinstance(r, dict)}
        return self.resource.plural in names

    async def _failed(self, exc: Exception, stop: asyncio.Event) -> None:
        if stop.is_set():
            return
        self.metrics.errors.labels(*self._labels()).inc()
        delay = self.backoff.next(getattr(exc, "delay", None))
        status = getattr(exc, "status", 0)
        level = logging.ERROR if status in (401, 403) else logging.WARNING
        log.log(level, "%s: list/watch failed: %s; retrying in %.1fs", self.resource, exc, delay)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)

    async def list_once(self) -> str:
        """A full, paged list handed to the sink in one piece; returns (and keeps) its resourceVersion."""
        objects: list[JsonObject] = []
        token = ""
        version = ""
        while True:
            response = await request(
                self.client,
                "GET",
                self.resource.collection_path(),
                query=[
                    ("limit", self.page_size),
                    ("continue", token),
                    ("fieldSelector", self.field_selector),
                ],
                timeout=aiohttp.ClientTimeout(total=self.list_timeout),
            )
            page = await read_json(response)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", self.resource.api_version)
                item.setdefault("kind", self.resource.kind)
                objects.append(item)
            metadata = page.get("metadata") or {}
            version = str(metadata.get("resourceVersion") or version)
            token = str(metadata.get("continue") or "")
            if not token:
                break
        await self.sink.replace(objects)
        if self.absent:
            log.info("%s is served again; recorded what changed meanwhile", self.resource)
            self.absent = False
        self.resource_version = version
        self.metrics.lists.labels(*self._labels()).inc()
        self.metrics.synced.labels(*self._labels()).set(1)
        self.synced.set()
        return version

    async def watch_once(self, stop: asyncio.Event | None = None) -> None:
        """One watch request from ``resource_version`` until the server ends it (or ``stop`` is set: the stream is
        closed, so a stop never waits for the server's timeout); raises :class:`Expired` on 410."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.watch_timeout + 30)
        response = await request(
            self.client,
            "GET",
            self.resource.collection_path(),
            query=[
                ("watch", "true"),
                ("resourceVersion", self.resource_version),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", self.watch_timeout),
                ("fieldSelector", self.field_selector),
            ],
            timeout=timeout,
        )
        closer = asyncio.ensure_future(_close_on(stop, response)) if stop is not None else None
        try:
            if response.status != 200:
                await read_json(response)  # raises the matching error
                return
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                    if stop is not None and stop.is_set():
                        return
                    raise ApiUnavailable(
                        f"watch of {self.resource} broke: {type(exc).__name__}: {exc}"
                    ) from exc
                if not line:
                    return  # the server ended the watch (timeoutSeconds): resume from resource_version
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise ApiUnavailable(f"watch of {self.resource} sent a line that is not JSON") from exc
                await self._event(event)
        finally:
            if closer is not None:
                closer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await closer
            response.release()

    async def _event(self, event: JsonObject) -> None:
        kind = str(event.get("type", ""))
        obj = part(event, "object")
        self.metrics.events.labels(*self._labels(), kind or "?").inc()
        if kind == "ERROR":
            code = obj.get("code")
            raise status_error(
                int(code) if isinstance(code, int | float | str) and code else 500, json.dumps(obj)
            )
        version = str(meta(obj).get("resourceVersion") or "")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            await self.sink.apply(kind, obj)
        if version:
            self.resource_version = version


def list_watches(
    client: Any,
    sinks: Iterable[tuple[Resource, Sink, str]],
    *,
    component: str,
    metrics: WatchMetrics,
    watch_timeout: int = 300,
    backoff: tuple[float, float] = (0.5, 30.0),
    absent_retry: float = 60.0,
) -> list[Reflector]:
    """A reflector for each (resource, sink, field selector), in that order, all with the same settings (``backoff``:
    its initial and maximum delay); :func:`run_in_order` runs them."""
    return [
        Reflector(
            client=client,
            resource=resource,
            sink=sink,
            component=component,
            metrics=metrics,
            field_selector=selector,
            watch_timeout=watch_timeout,
            absent_retry=absent_retry,
            backoff=Backoff(initial=backoff[0], maximum=backoff[1]),
        )
        for resource, sink, selector in sinks
    ]


async def run_in_order(reflectors: list[Reflector], stop: asyncio.Event) -> None:
    """Start the reflectors one after another, each once the previous one has its first list recorded (so, e.g.,
    quotas are in the log before the pods that use them), then keep them all running until ``stop``."""
    async with asyncio.TaskGroup() as tg:
        for reflector in reflectors:
            tg.create_task(reflector.run(stop), name=f"watch-{reflector.resource}")
            waiter = asyncio.ensure_future(reflector.synced.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if stop.is_set():
                break


async def _close_on(stop: asyncio.Event, response: aiohttp.ClientResponse) -> None:
    await stop.wait()
    response.close()
