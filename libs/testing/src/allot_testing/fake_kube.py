"""A fake Kubernetes API server at the HTTP level (aiohttp), for testing the watchers and the binder without a
cluster and without mocking the client.

What it serves, the way the real API server does:

- ``GET`` collections (core ``/api/v1/…`` and ``/apis/<group>/<version>/…``, cluster-wide or per namespace) with a
  ``resourceVersion``, ``limit``/``continue`` paging and ``fieldSelector`` (``a=b``, ``a!=b``, comma-separated, on
  dotted paths: ``metadata.name``, ``spec.schedulerName``, …). Items of core lists carry no ``kind``/``apiVersion``.
- ``?watch=true``: a chunked stream of JSON lines (``ADDED``/``MODIFIED``/``DELETED``, ``BOOKMARK`` when
  ``allowWatchBookmarks``), replaying what happened after the requested ``resourceVersion``; a version older than
  the compaction point gets an ``ERROR`` event with a ``410 Expired`` Status; ``timeoutSeconds`` ends the stream.
- Discovery: ``GET /api``, ``/api/v1``, ``/apis`` and ``/apis/<group>/<version>`` (an ``APIResourceList`` of what is
  served; 404 for a group/version with nothing served).
  Lists, watches and discovery are served by :mod:`allot_testing.fake_kube_reads`.
- ``POST …/pods/{name}/binding`` and ``…/eviction``: :mod:`allot_testing.fake_kube_pods` (the real server's answers:
  409 for a pod being deleted, 429 for a PodDisruptionBudget that allows nothing, 500 for two budgets, …).
- ``PATCH`` in the four patch types: ``application/json-patch+json``, ``merge-patch+json``, ``apply-patch+yaml`` (with a
  ``fieldManager``; applied as a merge, no field ownership) and ``strategic-merge-patch+json`` (built-in kinds only,
  415 on a custom resource; lists of ``conditions`` merged by ``type``). A resource with a status subresource ignores
  status in the object's own patch; ``/status`` applies only status (a Node also keeps its metadata changes there,
  as the API server's Node status strategy does).
- ``POST`` on a collection creates an object (409 ``AlreadyExists``); ``PUT`` replaces one, with the
  ``metadata.resourceVersion`` of the body as a precondition (409 ``Conflict`` when stale): Leases
  (``coordination.k8s.io/v1``) and Events (``events.k8s.io/v1``) are served this way.
- Field limits on every write (422 ``Invalid`` with a cause per field): names (253, a DNS subdomain), label keys and
  values (63), annotations (256 KiB in all), an Event's ``note`` (1 KiB): :mod:`allot_testing.fake_kube_rules`.
- ``DELETE`` of an object, with a uid precondition (409) in the body's ``preconditions``.
- Bearer-token authentication (401 without the token).
- ``metadata.managedFields`` of ``Update`` writes: what a write changed becomes its manager's (``fieldManager``, else
  the User-Agent): :mod:`allot_testing.fake_kube_fields`.

Test controls (plain methods, no HTTP): :meth:`FakeKube.create`, :meth:`update`, :meth:`delete`, :meth:`heartbeat`,
:meth:`set_phase`, :meth:`bookmark`, :meth:`unserve` / :meth:`serve` (a resource not served: 404), :meth:`expire` (compacts history: open watches get 410 and old versions stop
working), :meth:`drop_watches` (cuts open streams), :meth:`fail` (the next matching requests get an error status or
a dropped connection). Everything received is kept: :attr:`requests`, :attr:`bindings`, :attr:`patches`, and the
``User-Agent`` of every write in :attr:`writers`.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from allot_testing import fake_kube_fields, fake_kube_pods, fake_kube_reads, fake_kube_writes
from allot_testing.fake_kube_reads import Watch, visible
from allot_testing.fake_kube_rules import (
    FAULT_REASONS,
    Obj,
    kubeconfig_text,
    matches,
    merge_patch,
    status,
    strategic_merge_patch,
)

__all__ = [
    "FAST_LEASE",
    "RESOURCES",
    "FakeKube",
    "FakeResource",
    "matches",
    "merge_patch",
    "status",
    "strategic_merge_patch",
]

# a Lease election in a test's time: a term of 1 s, renewed within 0.6 s, tried every 0.1 s
FAST_LEASE = {
    "ALLOT_LEADER_ELECTION": "lease",
    "ALLOT_LEASE_DURATION_S": "1",
    "ALLOT_LEASE_RENEW_DEADLINE_S": "0.6",
    "ALLOT_LEASE_RETRY_PERIOD_S": "0.1",
}


@dataclass(frozen=True)
class FakeResource:
    api_version: str  # "v1" or "group/version"
    kind: str
    plural: str
    namespaced: bool
    status_subresource: bool = False
    custom: bool = (
        False  # defined by a CustomResourceDefinition (no strategic merge patch; status-only /status)
    )


RESOURCES = (
    FakeResource("v1", "Pod", "pods", True, status_subresource=True),
    FakeResource("v1", "Node", "nodes", False, status_subresource=True),
    FakeResource("scheduling.koordinator.sh/v1alpha1", "Device", "devices", False, custom=True),
    FakeResource(
        "topology.node.k8s.io/v1alpha1", "NodeResourceTopology", "noderesourcetopologies", False, custom=True
    ),
    FakeResource("slo.koordinator.sh/v1alpha1", "NodeMetric", "nodemetrics", False, True, custom=True),
    FakeResource("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota", "elasticquotas", True, True, custom=True),
    FakeResource(
        "quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile", "elasticquotaprofiles", True, custom=True
    ),
    FakeResource("scheduling.sigs.k8s.io/v1alpha1", "PodGroup", "podgroups", True, True, custom=True),
    FakeResource(
        "scheduling.koordinator.sh/v1alpha1", "Reservation", "reservations", False, True, custom=True
    ),
    FakeResource(
        "scheduling.koordinator.sh/v1alpha1", "PodMigrationJob", "podmigrationjobs", False, True, custom=True
    ),
    FakeResource("coordination.k8s.io/v1", "Lease", "leases", True),
    FakeResource("events.k8s.io/v1", "Event", "events", True),
    FakeResource("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", True, status_subresource=True),
)


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int = 500
    message: str = "injected failure"
    times: int = 1
    drop: bool = False
    after: bool = False


class FakeKube:
    """The fake API server. ``async with FakeKube() as kube:`` starts it on a free port (``kube.url``)."""

    def __init__(self, resources: tuple[FakeResource, ...] = RESOURCES, token: str = "test-token") -> None:
        self.resources = {(r.api_version, r.plural): r for r in resources}
        self.token = token
        self.rv = 100
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name) -> object
        self.history: list[tuple[int, str, str, Obj]] = []  # (rv, plural, type, object)
        self.compacted = 0
        self.watches: set[Watch] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.bindings: list[Obj] = []
        self.evictions: list[Obj] = []  # Eviction bodies received
        self.disruption_blocked: set[str] = set()  # "ns/name" of pods a PodDisruptionBudget protects (429)
        self.unserved: set[str] = (
            set()
        )  # plurals not served now (:meth:`unserve`): 404, absent from discovery
        self.patches: list[tuple[str, Obj]] = []
        self.writers: list[tuple[str, str, str]] = []  # (method, path, User-Agent) of every write
        self.faults: list[Fault] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self.pages: dict[str, list[Obj]] = {}  # continue token -> the rest of a paged list
        self._open_streams: set[web.StreamResponse] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def __aenter__(self) -> FakeKube:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for watch in list(self.watches):
            watch.queue.put_nowait("close")
        await asyncio.sleep(0)
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, directory: Path) -> str:
        """Write a kubeconfig pointing at this server (with its token); returns the path."""
        path = Path(directory) / "fake-kubeconfig.yaml"
        path.write_text(kubeconfig_text(self.url, self.token))
        return str(path)

    # -- test controls ---------------------------------------------------------------------------------------------

    def resource(self, kind_or_plural: str) -> FakeResource:
        for r in self.resources.values():
            if kind_or_plural in (r.kind, r.plural):
                return r
        raise KeyError(kind_or_plural)

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, resource: FakeResource, kind: str, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self.history.append((rv, resource.plural, kind, copy.deepcopy(obj)))
        for watch in list(self.watches):
            if watch.resource == resource and visible(watch, obj):
                watch.queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})

    @staticmethod
    def _key(resource: FakeResource, obj: Obj) -> tuple[str, str, str]:
        meta = obj["metadata"]
        namespace = (meta.get("namespace") or "default") if resource.namespaced else ""
        return resource.plural, namespace, meta["name"]

    def create(self, obj: Obj, *, manager: str = "test") -> Obj:
        resource = self.resource(obj["kind"])
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta.setdefault("namespace", "default")
        key = self._key(resource, obj)
        if key in self.objects:
            raise KeyError(f"{key} exists")
        obj.setdefault("apiVersion", resource.api_version)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["resourceVersion"] = self._next_rv()
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta.pop("managedFields", None)
        fake_kube_fields.track(None, obj, manager=manager, time=meta["creationTimestamp"])
        self.objects[key] = obj
        self._emit(resource, "ADDED", obj)
        return copy.deepcopy(obj)

    def get(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        resource = self.resource(kind)
        found = self.objects.get(
            (resource.plural, (namespace or "default") if resource.namespaced else "", name)
        )
        return copy.deepcopy(found) if found is not None else None

    def update(
        self,
        kind: str,
        name: str,
        mutate: Callable[[Obj], None],
        namespace: str = "",
        *,
        manager: str = "test",
        subresource: str = "",
    ) -> Obj:
        """Change an object in place (``mutate`` edits a copy); a new resourceVersion and a MODIFIED event. The fields
        it changed become ``manager``'s in ``metadata.managedFields`` (:mod:`allot_testing.fake_kube_fields`)."""
        resource = self.resource(kind)
        key = (resource.plural, (namespace or "default") if resource.namespaced else "", name)
        before = self.objects[key]
        obj = copy.deepcopy(before)
        mutate(obj)
        fake_kube_fields.track(before, obj, manager=manager, subresource=subresource)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[key] = obj
        self._emit(resource, "MODIFIED", obj)
        return copy.deepcopy(obj)

    def heartbeat(self, kind: str, name: str, namespace: str = "") -> Obj:
        """A status-only change (what kubelets and controllers write all the time)."""

        def touch(obj: Obj) -> None:
            status_ = obj.setdefault("status", {})
            status_["conditions"] = [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": f"beat-{self.rv + 1}"}
            ]

        return self.update(kind, name, touch, namespace)

    def set_phase(self, name: str, phase: str, namespace: str = "default") -> Obj:
        return self.update(
            "Pod", name, lambda o: o.setdefault("status", {}).__setitem__("phase", phase), namespace
        )

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        resource = self.resource(kind)
        key = (resource.plural, (namespace or "default") if resource.namespaced else "", name)
        obj = self.objects.pop(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(resource, "DELETED", obj)

    def delete_quietly(self, kind: str, name: str, namespace: str = "") -> None:
        """Remove an object without any watch event reaching anyone (as if it happened while nobody watched, and
        the history were compacted since): only a relist can find out."""
        resource = self.resource(kind)
        self.objects.pop((resource.plural, (namespace or "default") if resource.namespaced else "", name))
        self._next_rv()
        self.expire()

    def bookmark(self) -> None:
        for watch in list(self.watches):
            if watch.bookmarks:
                watch.queue.put_nowait(
                    {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": watch.resource.kind,
                            "apiVersion": watch.resource.api_version,
                            "metadata": {"resourceVersion": str(self.rv)},
                        },
                    }
                )

    def expire(self) -> None:
        """Compact the history: every open watch gets ``ERROR 410`` and versions up to now are too old."""
        self.compacted = self.rv  # watching from an older version needs events that are gone
        self.history.clear()
        for watch in list(self.watches):
            watch.queue.put_nowait("expire")

    def unserve(self, kind: str) -> None:
        """Stop serving a resource (as while its CRD is removed or not established): its paths answer 404 and
        discovery leaves it out; open watches of it end. Its objects are kept for :meth:`serve`."""
        resource = self.resource(kind)
        self.unserved.add(resource.plural)
        for watch in list(self.watches):
            if watch.resource == resource:
                watch.queue.put_nowait("end")

    def serve(self, kind: str) -> None:
        self.unserved.discard(self.resource(kind).plural)

    def drop_watches(self) -> None:
        """Cut every open watch stream (no final chunk): clients see a broken connection."""
        for watch in list(self.watches):
            watch.queue.put_nowait("drop")

    def fail(
        self,
        method: str,
        path: str,
        *,
        status: int = 500,
        message: str = "injected failure",
        times: int = 1,
        drop: bool = False,
        after: bool = False,
    ) -> None:
        """The next ``times`` requests whose path matches the regex ``path`` fail: an error status, a dropped
        connection (``drop``), or — with ``after`` — handled normally but the connection dropped before the answer
        (the request took effect; the client cannot know)."""
        self.faults.append(Fault(method.upper(), re.compile(path), status, message, times, drop, after))

    def count(self, method: str, pattern: str, query: str | None = None) -> int:
        rx = re.compile(pattern)
        return sum(
            1 for m, p, q in self.requests if m == method and rx.search(p) and (query is None or query in q)
        )

    # -- HTTP ------------------------------------------------------------------------------------------------------

    def _parse(self, path: str) -> tuple[FakeResource, str, str, str] | None:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            version, rest = "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None
        resource = self.resources.get((version, rest[0]))
        if resource is None or resource.plural in self.unserved:
            return None
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        return resource, namespace, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append((request.method, request.path, query))
        if request.method != "GET":
            self.writers.append((request.method, request.path, request.headers.get("User-Agent", "")))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(status(401, "Unauthorized", "Unauthorized"), status=401)
        fault = next(
            (
                f
                for f in self.faults
                if f.times > 0 and f.method == request.method and f.pattern.search(request.path)
            ),
            None,
        )
        if fault is not None:
            fault.times -= 1
            if not fault.after:
                if fault.drop:
                    return self._drop(request)
                return web.json_response(
                    status(
                        fault.status,
                        FAULT_REASONS.get(
                            fault.status, "InternalError" if fault.status >= 500 else "Injected"
                        ),
                        fault.message,
                    ),
                    status=fault.status,
                )
        response = await self._route(request, query)
        if fault is not None and fault.after:
            return self._drop(request)  # handled, but the answer never reaches the client
        return response

    @staticmethod
    def _drop(request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)

    async def _route(self, request: web.Request, query: dict[str, str]) -> web.StreamResponse:
        legacy = re.fullmatch(r"/api/v1/namespaces/([^/]+)/bindings", request.path)
        if (
            legacy and request.method == "POST"
        ):  # the older collection endpoint: same checks, pod from the body
            body = await request.json()
            name = str((body.get("metadata") or {}).get("name", ""))
            return fake_kube_pods.bind(self, legacy.group(1), name, body)
        if request.method == "GET" and (found := fake_kube_reads.discovery(self, request.path)) is not None:
            return found
        parsed = self._parse(request.path)
        if parsed is None:
            return web.json_response(
                status(404, "NotFound", "the server could not find the requested resource"), status=404
            )
        resource, namespace, name, sub = parsed
        if request.method == "GET" and not name:
            if query.get("watch") in ("true", "1"):
                return await fake_kube_reads.watch(self, request, resource, namespace, query)
            return fake_kube_reads.list_objects(self, resource, namespace, query)
        if request.method == "GET":
            obj = self.objects.get((resource.plural, namespace, name))
            if obj is None:
                return self.not_found(resource, name)
            return web.json_response(obj)
        if request.method == "POST" and resource.plural == "pods" and sub == "binding":
            return fake_kube_pods.bind(self, namespace, name, await request.json())
        if request.method == "POST" and resource.plural == "pods" and sub == "eviction":
            return fake_kube_pods.evict(self, namespace, name, await request.json())
        if request.method == "PATCH" and name:
            return await fake_kube_writes.patch_request(self, request, resource, namespace, name, sub, query)
        if request.method == "POST" and not name:
            return fake_kube_writes.create(self, resource, namespace, await request.json())
        if request.method == "DELETE" and name and not sub:
            body = await request.json() if request.can_read_body else {}
            return fake_kube_writes.delete_request(self, resource, namespace, name, body or {})
        if request.method == "PUT" and name and not sub:
            return fake_kube_writes.replace(self, resource, namespace, name, await request.json())
        return web.json_response(
            status(405, "MethodNotAllowed", f"{request.method} {request.path}"), status=405
        )

    @staticmethod
    def not_found(resource: FakeResource, name: str) -> web.Response:
        return web.json_response(
            status(404, "NotFound", f'{resource.plural} "{name}" not found', name=name, kind=resource.plural),
            status=404,
        )
