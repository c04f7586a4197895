"""The writes of the fake API server (:mod:`allot_testing.fake_kube`): create, replace, delete and the four patch
types, each checked against the field limits of :mod:`allot_testing.fake_kube_rules` (pinned by
``tests/kube/contract``)."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import yaml
from aiohttp import web

from allot_testing.fake_kube_fields import manager_of
from allot_testing.fake_kube_rules import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    Obj,
    PatchError,
    field_errors,
    invalid,
    json_patch,
    merge_patch,
    status,
    strategic_merge_patch,
)

if TYPE_CHECKING:
    from allot_testing.fake_kube import FakeKube, FakeResource


async def patch_request(
    kube: FakeKube,
    request: web.Request,
    resource: FakeResource,
    namespace: str,
    name: str,
    sub: str,
    query: dict[str, str],
) -> web.Response:
    if sub and (sub != "status" or not resource.status_subresource):
        return web.json_response(
            status(404, "NotFound", "the server could not find the requested resource"), status=404
        )
    kind = request.headers.get("Content-Type", "").split(";")[0].strip()
    accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH] + ([] if resource.custom else [STRATEGIC_MERGE_PATCH])
    if kind not in accepted:
        return web.json_response(
            status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(accepted),
            ),
            status=415,
        )
    text = await request.text()
    try:
        body = yaml.safe_load(text) if kind == APPLY_PATCH else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        return web.json_response(status(400, "BadRequest", f"error decoding patch: {exc}"), status=400)
    if kind == APPLY_PATCH and not query.get("fieldManager"):
        return web.json_response(
            status(400, "BadRequest", "PATCH with apply content type must include a fieldManager"),
            status=400,
        )
    if kind == APPLY_PATCH and (resource.plural, namespace, name) not in kube.objects and not sub:
        return create(
            kube, resource, namespace, {**body, "metadata": {**body.get("metadata", {}), "name": name}}
        )
    manager = manager_of(query, request.headers.get("User-Agent", ""))
    return patch(kube, resource, namespace, name, sub, body, request.path, kind=kind, manager=manager)


def delete_request(
    kube: FakeKube, resource: FakeResource, namespace: str, name: str, body: Obj
) -> web.Response:
    """``DELETE`` an object: 404 when missing, 409 when a uid precondition does not hold."""
    obj = kube.objects.get((resource.plural, namespace, name))
    if obj is None:
        return kube.not_found(resource, name)
    want = (body.get("preconditions") or {}).get("uid")
    if want and want != obj["metadata"].get("uid"):
        return web.json_response(
            status(409, "Conflict", f"Precondition failed: UID in precondition: {want}"), status=409
        )
    kube.delete(resource.kind, name, namespace)
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})


def create(kube: FakeKube, resource: FakeResource, namespace: str, body: Obj) -> web.Response:
    meta = body.setdefault("metadata", {})
    if resource.namespaced:
        meta["namespace"] = namespace or meta.get("namespace") or "default"
    if not meta.get("name"):
        return web.json_response(status(422, "Invalid", "metadata.name: Required value"), status=422)
    body["kind"] = resource.kind
    meta.pop("resourceVersion", None)
    errors = field_errors(resource.kind, body)
    if errors:
        return web.json_response(invalid(resource.kind, meta["name"], errors), status=422)
    try:
        created = kube.create(body)
    except KeyError:
        return web.json_response(
            status(
                409,
                "AlreadyExists",
                f'{resource.plural} "{meta["name"]}" already exists',
                name=meta["name"],
                kind=resource.plural,
            ),
            status=409,
        )
    return web.json_response(created, status=201)


def replace(kube: FakeKube, resource: FakeResource, namespace: str, name: str, body: Obj) -> web.Response:
    key = (resource.plural, namespace if resource.namespaced else "", name)
    current = kube.objects.get(key)
    if current is None:
        return kube.not_found(resource, name)
    errors = field_errors(resource.kind, body)
    if errors:
        return web.json_response(invalid(resource.kind, name, errors), status=422)
    want = (body.get("metadata") or {}).get("resourceVersion")
    if want and want != current["metadata"]["resourceVersion"]:
        return web.json_response(
            status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                name=name,
                kind=resource.plural,
            ),
            status=409,
        )

    def replace(obj: Obj) -> None:
        meta = {**obj["metadata"], **(body.get("metadata") or {})}
        obj.clear()
        obj.update(copy.deepcopy(body))
        obj["metadata"] = meta
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version

    return web.json_response(kube.update(resource.kind, name, replace, namespace))


def patch(
    kube: FakeKube,
    resource: FakeResource,
    namespace: str,
    name: str,
    sub: str,
    patch: Any,
    path: str,
    *,
    kind: str = MERGE_PATCH,
    manager: str = "test",
) -> web.Response:
    kube.patches.append((path, patch))
    key = (resource.plural, namespace, name)
    if key not in kube.objects:
        return kube.not_found(resource, name)
    if sub and (sub != "status" or not resource.status_subresource):
        return web.json_response(
            status(404, "NotFound", "the server could not find the requested resource"), status=404
        )
    current = kube.objects[key]
    try:
        if kind == JSON_PATCH:
            patched = json_patch(current, patch)
        elif kind == STRATEGIC_MERGE_PATCH:
            patched = strategic_merge_patch(current, patch)
        else:  # merge, and apply as a merge (the fake keeps no field ownership)
            patched = merge_patch(current, patch)
    except (PatchError, ValueError, TypeError, KeyError, IndexError) as exc:
        return web.json_response(status(422, "Invalid", f"the patch cannot be applied: {exc}"), status=422)
    if sub == "status":  # the status subresource changes status only (a Node's status strategy: not its spec)
        result = {**current, "status": patched.get("status")}
        if resource.kind == "Node":
            result["metadata"] = patched.get("metadata") or current["metadata"]
    elif resource.status_subresource:  # the object's own endpoint ignores status
        result = {**patched, "status": current.get("status")}
    else:
        result = patched
    if result.get("status") is None:
        result.pop("status", None)
    errors = field_errors(resource.kind, result)
    if errors:
        return web.json_response(invalid(resource.kind, name, errors), status=422)

    def apply(obj: Obj) -> None:
        obj.clear()
        obj.update(copy.deepcopy(result))

    return web.json_response(
        kube.update(resource.kind, name, apply, namespace, manager=manager, subresource=sub)
    )
