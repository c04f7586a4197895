"""Kubernetes objects into the event log: list-watch, "what was recorded" from the log, real changes only.

Shared by node-reporter's watch (``adapters/kube.py``: Nodes, Koordinator ``Device``, ``NodeResourceTopology``) and
``allot kube-sync`` (pods, ElasticQuota, ElasticQuotaProfile, PodGroup).

- :func:`api_client`: a kubernetes-asyncio client from ``ALLOT_KUBECONFIG``, ``KUBECONFIG``, the in-cluster service
  account, or ``~/.kube/config``, in that order.
- :class:`Reflector`: list (paged), then watch from the list's ``resourceVersion`` with bookmarks and a server-side
  timeout; a watch that ends is resumed from the last version seen; ``410 Gone`` (an expired version, as an HTTP
  status or an ``ERROR`` event) makes it list again, and the list is handed over whole, so deletions missed while
  the watch was down are reconciled. Responses are read raw (``_preload_content=False``): objects stay the JSON the
  API server sent, nothing is lost in model round trips.
- :class:`Mirror`: for one kind, the objects as recorded in the log (folded from the log at start and before every
  reconciliation, so a restart neither records everything again nor misses a deletion) and the rule "record only a
  real change": a fingerprint of the parts that matter is compared, so status heartbeats record nothing. Event ids
  are derived from (kind, uid, resourceVersion) — deletions from (kind, uid) — so recording twice is a no-op.

Errors: transport failures, 5xx and 429 are transient (retried with backoff, logged); 401/403 are logged as errors
and retried too (fixing RBAC must not need a restart); a watch ``ERROR`` other than 410 ends the watch and is
retried. Nothing here decides anything: the services do, from the recorded events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge

from allot_contracts.envelope import NewEvent, canonical, derived_event_id
from allot_contracts.errors import InvalidInput, PermanentError, TransientError, Unavailable
from allot_contracts.events import Event, type_of

log = logging.getLogger("allot.kube")

Obj = dict[str, Any]

# ---------------------------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One API resource: ``api_version`` is ``v1`` (core) or ``group/version``."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def base(self) -> str:
        return f"/apis/{self.api_version}" if "/" in self.api_version else f"/api/{self.api_version}"

    def collection_path(self, namespace: str = "") -> str:
        """All objects (every namespace when ``namespace`` is empty)."""
        return f"{self.base}/namespaces/{namespace}/{self.plural}" if namespace else f"{self.base}/{self.plural}"

    def object_path(self, name: str, namespace: str = "", subresource: str = "") -> str:
        path = f"{self.collection_path(namespace if self.namespaced else '')}/{name}"
        return f"{path}/{subresource}" if subresource else path

    def __str__(self) -> str:
        return f"{self.plural}.{self.api_version.split('/')[0]}" if "/" in self.api_version else self.plural


NODES = Resource("v1", "Node", "nodes", False)
PODS = Resource("v1", "Pod", "pods", True)
DEVICES = Resource("scheduling.koordinator.sh/v1alpha1", "Device", "devices", False)
TOPOLOGIES = Resource("topology.node.k8s.io/v1alpha1", "NodeResourceTopology", "noderesourcetopologies", False)
ELASTIC_QUOTAS = Resource("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota", "elasticquotas", True)
QUOTA_PROFILES = Resource("quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile", "elasticquotaprofiles", True)
POD_GROUPS = Resource("scheduling.sigs.k8s.io/v1alpha1", "PodGroup", "podgroups", True)


def meta(obj: Obj) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def object_key(obj: Obj, namespaced: bool) -> str:
    m = meta(obj)
    return f"{m.get('namespace') or 'default'}/{m.get('name', '')}" if namespaced else str(m.get("name", ""))


# ---------------------------------------------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------------------------------------------


def _home_kubeconfig() -> str:
    return os.path.expanduser("~/.kube/config")


async def api_client(kubeconfig: str | None = None) -> Any:
    """A kubernetes-asyncio ``ApiClient``: ``kubeconfig`` (a path, or several joined by ``:``), else
    ``ALLOT_KUBECONFIG``, ``KUBECONFIG``, the in-cluster service account, ``~/.kube/config``. Close it when done."""
    from kubernetes_asyncio import config
    from kubernetes_asyncio.client import ApiClient, Configuration

    configuration = Configuration()
    path = kubeconfig or os.environ.get("ALLOT_KUBECONFIG") or os.environ.get("KUBECONFIG") or ""
    try:
        if path:
            await config.load_kube_config(config_file=path, client_configuration=configuration,
                                          persist_config=False)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(config_file=_home_kubeconfig(), client_configuration=configuration,
                                          persist_config=False)
    except (config.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        where = path or ("the in-cluster service account" if os.environ.get("KUBERNETES_SERVICE_HOST")
                         else "~/.kube/config")
        raise InvalidInput([("ALLOT_KUBECONFIG", f"cannot load the Kubernetes client configuration from {where}: "
                                                 f"{exc}")]) from exc
    return ApiClient(configuration=configuration)


class ApiError(PermanentError):
    """The API server answered with an error status (``status``; ``reason`` and ``message`` from its Status)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class Expired(TransientError):
    """410 Gone: the resourceVersion is too old; list again."""


class ApiUnavailable(Unavailable):
    """The API server did not answer, or answered 429/5xx."""

    def __init__(self, message: str, *, status: int = 0, delay: float | None = None) -> None:
        super().__init__(message, delay=delay)
        self.status = status


def status_error(status: int, body: bytes | str, *, retry_after: str | None = None) -> Exception:
    """The exception for an error response (a Kubernetes ``Status`` body when the server sent one)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    reason, message = "", text.strip()[:2000]
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        parsed = json.loads(text)
        reason, message = str(parsed.get("reason", "")), str(parsed.get("message", message))
    if status == 410:
        return Expired(f"resource version expired: {message}", delay=0.0)
    if status == 429 or status >= 500:
        delay = None
        with contextlib.suppress(TypeError, ValueError):
            delay = float(retry_after) if retry_after else None
        error = ApiError(status, reason, message)
        if status >= 500 and "is being deleted" in message:
            return error  # the API server reports a pod being deleted as an internal error; it is final
        return ApiUnavailable(f"API server answered {status} {reason}: {message}", status=status, delay=delay)
    return ApiError(status, reason, message)


async def request(client: Any, method: str, path: str, *, query: Iterable[tuple[str, Any]] = (),
                  body: Any = None, content_type: str = "application/json",
                  timeout: aiohttp.ClientTimeout | float | None = None) -> aiohttp.ClientResponse:
    """One raw request through the client's configuration and authentication; the response is returned unread
    (the caller checks the status and reads or streams the body). Transport errors become :class:`ApiUnavailable`."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        response = await client.call_api(
            path, method, query_params=[(k, v) for k, v in query if v not in (None, "")],
            header_params=headers, body=body, auth_settings=["BearerToken"], _preload_content=False,
            _return_http_data_only=True, _request_timeout=timeout)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise ApiUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
    return response  # type: ignore[no-any-return]


async def read_json(response: aiohttp.ClientResponse) -> Any:
    """The body of a response as JSON; error statuses raise (see :func:`status_error`)."""
    try:
        body = await response.read()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise ApiUnavailable(f"reading the response: {type(exc).__name__}: {exc}") from exc
    finally:
        response.release()
    if not 200 <= response.status < 300:
        raise status_error(response.status, body, retry_after=response.headers.get("Retry-After"))
    try:
        return json.loads(body) if body else {}
    except ValueError as exc:
        raise ApiUnavailable(f"the API server sent a body that is not JSON: {body[:200]!r}") from exc


# ---------------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------------


class WatchMetrics:
    """Prometheus families of the watchers, registered once per registry (``component``: who watches)."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, WatchMetrics] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.events = Counter("allot_kube_watch_events_total", "Watch events received",
                              ["component", "resource", "type"], registry=registry)
        self.lists = Counter("allot_kube_lists_total", "Full lists (start, and relists after 410 Gone)",
                             ["component", "resource"], registry=registry)
        self.errors = Counter("allot_kube_watch_errors_total", "List and watch failures, retried with backoff",
                              ["component", "resource"], registry=registry)
        self.recorded = Counter("allot_kube_events_recorded_total", "Input events recorded in the log",
                                ["component", "type"], registry=registry)
        self.skipped = Counter("allot_kube_objects_skipped_total",
                               "Objects not recorded because admission refused them", ["component", "resource"],
                               registry=registry)
        self.synced = Gauge("allot_kube_synced", "1 once the resource's first list is recorded",
                            ["component", "resource"], registry=registry)

    @classmethod
    def of(cls, registry: CollectorRegistry) -> WatchMetrics:
        found = cls._by_registry.get(registry)
        if found is None:
            found = cls._by_registry[registry] = cls(registry)
        return found


# ---------------------------------------------------------------------------------------------------------------
# The reflector: list, then watch; relist on 410
# ---------------------------------------------------------------------------------------------------------------


class Sink:
    """What a reflector feeds: a full list (to reconcile against), then watch events one by one."""

    async def replace(self, objects: list[Obj]) -> None:
        raise NotImplementedError

    async def apply(self, event_type: str, obj: Obj) -> None:
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
                if exc.status != 404:
                    listed = False
                    await self._failed(exc, stop)
                    continue
                # The resource is not served (its CRD is not installed, or was removed): nothing exists. Record
                # that (deleting what was recorded before), count as synced, and look again later.
                if not self.synced.is_set():
                    log.warning("%s is not served by the API server (CRD not installed?); looking again every "
                                "%.0fs", self.resource, self.absent_retry)
                listed = False
                try:
                    await self.sink.replace([])
                except TransientError as failure:
                    await self._failed(failure, stop)
                    continue
                self.metrics.synced.labels(*self._labels()).set(1)
                self.synced.set()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.absent_retry)
            except TransientError as exc:
                await self._failed(exc, stop)

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
        objects: list[Obj] = []
        token = ""
        version = ""
        while True:
            response = await request(self.client, "GET", self.resource.collection_path(), query=[
                ("limit", self.page_size), ("continue", token), ("fieldSelector", self.field_selector)],
                timeout=aiohttp.ClientTimeout(total=self.list_timeout))
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
        self.resource_version = version
        self.metrics.lists.labels(*self._labels()).inc()
        self.metrics.synced.labels(*self._labels()).set(1)
        self.synced.set()
        return version

    async def watch_once(self, stop: asyncio.Event | None = None) -> None:
        """One watch request from ``resource_version`` until the server ends it (or ``stop`` is set: the stream is
        closed, so a stop never waits for the server's timeout); raises :class:`Expired` on 410."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.watch_timeout + 30)
        response = await request(self.client, "GET", self.resource.collection_path(), query=[
            ("watch", "true"), ("resourceVersion", self.resource_version), ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.watch_timeout), ("fieldSelector", self.field_selector)], timeout=timeout)
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
                    raise ApiUnavailable(f"watch of {self.resource} broke: {type(exc).__name__}: {exc}") from exc
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

    async def _event(self, event: Obj) -> None:
        kind = str(event.get("type", ""))
        obj = event.get("object") or {}
        self.metrics.events.labels(*self._labels(), kind or "?").inc()
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise status_error(code or 500, json.dumps(obj))
        version = str(meta(obj).get("resourceVersion") or "")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            await self.sink.apply(kind, obj)
        if version:
            self.resource_version = version


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


# ---------------------------------------------------------------------------------------------------------------
# The log side: what was recorded, and recording real changes only
# ---------------------------------------------------------------------------------------------------------------


def strip_server_fields(obj: Obj) -> Obj:
    """The object without ``metadata.managedFields`` (server bookkeeping, never an input)."""
    m = {k: v for k, v in meta(obj).items() if k != "managedFields"}
    return {**obj, "metadata": m}


MAX_INT = 2**63 - 1


def storage_issues(value: Any, path: str = "") -> list[str]:
    """Values the log cannot store faithfully (NUL characters, integers beyond 64 bits, non-finite numbers), as
    ``path: reason``. Everything else is recorded, and the services reject what they must with a recorded event."""
    issues: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            issues += storage_issues(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            issues += storage_issues(item, f"{path}[{index}]")
    elif isinstance(value, str):
        if "\x00" in value:
            issues.append(f"{path}: must not contain NUL characters")
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if abs(value) > MAX_INT:
            issues.append(f"{path}: integer out of range (must fit in 64 bits)")
    elif isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        issues.append(f"{path}: must be a finite number")
    return issues


@dataclass
class Known:
    uid: str
    fingerprint: bytes
    alive: bool = True


@dataclass
class Kind:
    """How one resource becomes input events.

    ``normalize`` gives the manifest to record (what matters, without server bookkeeping); ``fingerprint`` is
    computed on a normalized manifest — the recorded one when folding the log — so heartbeats compare equal;
    ``applied``/``deleted`` build the events; ``fold`` reads a recorded event back as (key, manifest or None for a
    deletion); ``admit`` returns admission problems (then nothing is recorded)."""

    resource: Resource
    types: frozenset[str]
    normalize: Callable[[Obj], Obj]
    fingerprint: Callable[[Obj], Any]
    applied: Callable[[Obj], list[tuple[str, Event]]]
    deleted: Callable[[str, str], list[tuple[str, Event]]]
    fold: Callable[[Event], tuple[str, Obj | None] | None]
    admit: Callable[[Obj], list[str]] = storage_issues


def spec_fingerprint(obj: Obj, *, drop_annotations: Iterable[str] = ()) -> Any:
    """uid, labels, annotations and spec: what a custom resource means to the scheduler."""
    m = meta(obj)
    dropped = set(drop_annotations)
    annotations = {k: v for k, v in (m.get("annotations") or {}).items() if k not in dropped}
    return {"uid": m.get("uid", ""), "labels": m.get("labels") or {}, "annotations": annotations,
            "spec": obj.get("spec")}


class Mirror(Sink):
    """One resource mirrored into the log as ``*.applied``/``*.deleted`` input events."""

    def __init__(self, *, store: Any, producer: str, kind: Kind, component: str, metrics: WatchMetrics,
                 in_scope: Callable[[str], bool] = lambda _: True) -> None:
        self.store = store
        self.producer = producer
        self.kind = kind
        self.component = component
        self.metrics = metrics
        self.in_scope = in_scope
        self.known: dict[str, Known] = {}
        self.writer = Writer(store, producer, component, metrics)
        self.position = 0  # how far the log has been folded
        self.refused: dict[str, str] = {}  # key -> resourceVersion refused by admission (logged once)

    @property
    def resource(self) -> Resource:
        return self.kind.resource

    def key_of(self, obj: Obj) -> str:
        return object_key(obj, self.resource.namespaced)

    async def refresh(self) -> None:
        """Fold what this producer recorded since the last refresh (the log is the memory; this is a cache)."""
        async for record in self.store.iterate(after=self.position, types=self.kind.types, producer=self.producer):
            self.position = record.position
            folded = self.kind.fold(record.decode())
            if folded is None:
                continue
            key, manifest = folded
            if manifest is None:
                if key in self.known:
                    self.known[key].alive = False
            else:
                self.known[key] = Known(uid=str(meta(manifest).get("uid", "")),
                                        fingerprint=canonical(self.kind.fingerprint(manifest)))

    async def replace(self, objects: list[Obj]) -> None:
        await self.refresh()
        seen = set()
        async with self.writer.batch():
            for obj in objects:
                seen.add(self.key_of(obj))
                await self.upsert(obj)
            for key, known in sorted(self.known.items()):
                if known.alive and key not in seen and self.in_scope(key):
                    await self._delete(key, known.uid)

    async def apply(self, event_type: str, obj: Obj) -> None:
        if event_type == "DELETED":
            key = self.key_of(obj)
            known = self.known.get(key)
            if known is not None and known.alive and self.in_scope(key):
                await self._delete(key, known.uid)
        else:
            await self.upsert(obj)

    async def upsert(self, obj: Obj) -> None:
        key = self.key_of(obj)
        if not key or not self.in_scope(key):
            return
        manifest = self.kind.normalize(obj)
        m = meta(manifest)
        uid, version = str(m.get("uid", "")), str(m.get("resourceVersion", ""))
        fingerprint = canonical(self.kind.fingerprint(manifest))
        known = self.known.get(key)
        if known is not None and known.alive and known.fingerprint == fingerprint:
            return  # nothing that matters changed (a status heartbeat, a resync)
        problems = self.kind.admit(manifest)
        if problems:
            if self.refused.get(key) != version:
                self.refused[key] = version
                self.metrics.skipped.labels(self.component, str(self.resource)).inc()
                log.warning("%s %s (resourceVersion %s) not recorded: %s", self.resource.kind, key, version,
                            "; ".join(problems))
            return
        self.refused.pop(key, None)
        known_now = Known(uid=uid, fingerprint=fingerprint)
        await self.writer.write(self.kind.applied(manifest), f"{self.resource.kind}/{uid}/{version}",
                                lambda: self.known.__setitem__(key, known_now))

    async def _delete(self, key: str, uid: str) -> None:
        entry = self.known[key]
        await self.writer.write(self.kind.deleted(key, uid), f"{self.resource.kind}/{uid or key}/deleted",
                                lambda: setattr(entry, "alive", False))


@dataclass
class _Pending:
    news: list[NewEvent]
    events: list[Event]
    basis: str
    done: Callable[[], None]


class Writer:
    """Appends one producer's input events, with ids derived from a basis (kind/uid/version). Alone, each change is
    one transaction; inside :meth:`batch` (a full list) changes are appended ``chunk`` at a time, so the first list
    of a large cluster takes a few transactions, not thousands. ``done`` runs once a change is in the log.

    A change the log refuses for good (``PermanentError``) is logged and skipped; transient failures propagate, and
    the list-watch retries (nothing of a failed batch was written)."""

    def __init__(self, store: Any, producer: str, component: str, metrics: WatchMetrics, chunk: int = 500) -> None:
        self.store = store
        self.producer = producer
        self.component = component
        self.metrics = metrics
        self.chunk = chunk
        self._batch: list[_Pending] | None = None

    async def write(self, events: list[tuple[str, Event]], basis: str, done: Callable[[], None]) -> None:
        pending = _Pending(news=[NewEvent(stream_id=stream, event=event,
                                          event_id=derived_event_id(self.producer, basis, index))
                                 for index, (stream, event) in enumerate(events)],
                           events=[event for _, event in events], basis=basis, done=done)
        if self._batch is not None:
            self._batch.append(pending)
        else:
            await self._commit([pending])

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        self._batch = []
        try:
            yield
            items = self._batch
        finally:
            self._batch = None
        for start in range(0, len(items), self.chunk):
            await self._commit(items[start:start + self.chunk])

    async def _commit(self, items: list[_Pending]) -> None:
        try:
            result = await self.store.append([new for item in items for new in item.news], producer=self.producer)
        except PermanentError as exc:
            if len(items) > 1:  # find the one the log refuses; record the others
                for item in items:
                    await self._commit([item])
                return
            log.error("%s: cannot record %s: %s", self.producer, items[0].basis, exc)
            return
        skipped = set(result.skipped)
        for item in items:
            item.done()
            for new, event in zip(item.news, item.events):
                if new.event_id not in skipped:
                    self.metrics.recorded.labels(self.component, type_of(event)).inc()


async def _close_on(stop: asyncio.Event, response: aiohttp.ClientResponse) -> None:
    await stop.wait()
    response.close()
