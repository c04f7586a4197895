"""The reads of the fake API server (:mod:`allot_testing.fake_kube`): discovery, lists with paging and field
selectors, and watch streams (replay after a ``resourceVersion``, 410 once compacted, bookmarks, timeouts)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from allot_testing.fake_kube_rules import Obj, group_list, matches, resource_list, status

if TYPE_CHECKING:
    from allot_testing.fake_kube import FakeKube, FakeResource


@dataclass(eq=False)
class Watch:
    """An open watch stream: what it selects and the queue of what it is still to send."""

    resource: FakeResource
    namespace: str
    selector: str
    bookmarks: bool
    queue: asyncio.Queue[Obj | str] = field(default_factory=asyncio.Queue)


def visible(watch: Watch, obj: Obj) -> bool:
    namespace = obj["metadata"].get("namespace", "")
    return (not watch.namespace or namespace == watch.namespace) and matches(obj, watch.selector)


def _served(kube: FakeKube) -> list[FakeResource]:
    return [r for r in kube.resources.values() if r.plural not in kube.unserved]


def discovery(kube: FakeKube, path: str) -> web.Response | None:
    """``GET /api``, ``/api/v1``, ``/apis`` and ``/apis/<group>/<version>``: what is served (a group/version
    with nothing served is 404, as when its last CRD is removed)."""
    served = _served(kube)
    if path.rstrip("/") == "/api":
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
    if path.rstrip("/") == "/apis":
        return web.json_response(group_list(sorted({r.api_version for r in served if "/" in r.api_version})))
    parts = [p for p in path.split("/") if p]
    if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
        version = "v1" if parts[0] == "api" else f"{parts[1]}/{parts[2]}"
        resources = [r for r in served if r.api_version == version]
        if not resources:
            return web.json_response(
                status(404, "NotFound", "the server could not find the requested resource"), status=404
            )
        return web.json_response(resource_list(version, resources))
    return None


def list_objects(
    kube: FakeKube, resource: FakeResource, namespace: str, query: dict[str, str]
) -> web.Response:
    token = query.get("continue", "")
    if token:
        if token not in kube.pages:
            return web.json_response(status(410, "Expired", "the continue token has expired"), status=410)
        remaining = kube.pages.pop(token)
        version = token.split(":", 1)[0]
    else:
        remaining = [
            copy.deepcopy(o)
            for (plural, ns, _), o in sorted(kube.objects.items())
            if plural == resource.plural
            and (not namespace or ns == namespace)
            and matches(o, query.get("fieldSelector", ""))
        ]
        version = str(kube.rv)
    limit = int(query.get("limit") or 0) or len(remaining) or 1
    items, rest = remaining[:limit], remaining[limit:]
    if "/" not in resource.api_version:
        items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
    metadata: Obj = {"resourceVersion": version}
    if rest:
        next_token = f"{version}:{uuid.uuid4().hex}"
        kube.pages[next_token] = rest
        metadata["continue"] = next_token
    return web.json_response(
        {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": items,
        }
    )


async def watch(
    kube: FakeKube, request: web.Request, resource: FakeResource, namespace: str, query: dict[str, str]
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    since = query.get("resourceVersion", "")
    watch = Watch(
        resource=resource,
        namespace=namespace,
        selector=query.get("fieldSelector", ""),
        bookmarks=query.get("allowWatchBookmarks") == "true",
    )
    # Synchronously (no await in between): replay what the client missed, then register for live events.
    if since and int(since) < kube.compacted:
        watch.queue.put_nowait(
            {
                "type": "ERROR",
                "object": status(410, "Expired", f"too old resource version: {since} ({kube.compacted})"),
            }
        )
        watch.queue.put_nowait("end")
    elif not since or since == "0":
        for (plural, _, _), obj in sorted(kube.objects.items()):
            if plural == resource.plural and visible(watch, obj):
                watch.queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(obj)})
    else:
        for rv, plural, kind, obj in kube.history:
            if rv > int(since) and plural == resource.plural and visible(watch, obj):
                watch.queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
    kube.watches.add(watch)
    deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                item = await asyncio.wait_for(watch.queue.get(), timeout=remaining)
            except TimeoutError:
                break
            if item in ("end", "close"):
                break
            if item == "expire":
                await response.write(
                    (
                        json.dumps(
                            {
                                "type": "ERROR",
                                "object": status(410, "Expired", "too old resource version"),
                            }
                        )
                        + "\n"
                    ).encode()
                )
                break
            if item == "drop":
                if request.transport is not None:
                    request.transport.close()
                return response
            await response.write((json.dumps(item) + "\n").encode())
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        kube.watches.discard(watch)
    return response
