"""The fake API server (``allot_testing.fake_kube``) against the documented behaviour of the real one.

Every test pins one behaviour Allot relies on and cites where Kubernetes documents it (kubernetes.io, or the API
server's source where the documentation is silent). The tests speak plain HTTP, as any client would, so they test
the server, not Allot. When one fails, the fake drifted: fix the fake, then whatever in Allot relied on the drift.

Pinned here and relied on elsewhere: a 404 on a collection is told apart from "gone" through discovery (kube-sync's
reflector), status goes through the status subresource (the binder's ElasticQuota status), a pod being deleted is
a 409 on binding (the binder's ``pod.bind_failed``), two PodDisruptionBudgets are a 500 on eviction (a final
failure), and the Event note is limited in bytes (``binder.notices.fit_note``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from allot_testing.builders import a_node, a_pod, a_quota
from allot_testing.fake_kube import FakeKube

Obj = dict[str, Any]
QUOTAS = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team/elasticquotas"
PODS = "/api/v1/namespaces/default/pods"


class Api:
    """Plain HTTP against the fake, with its bearer token: ``(status, body)`` of each request."""

    def __init__(self, kube: FakeKube, session: aiohttp.ClientSession) -> None:
        self.kube = kube
        self.session = session

    async def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        **query: str,
    ) -> tuple[int, Any]:
        data = body if isinstance(body, str) or body is None else json.dumps(body)
        async with self.session.request(
            method,
            self.kube.url + path,
            data=data,
            params=query,
            headers={"Authorization": f"Bearer {self.kube.token}", "Content-Type": content_type},
        ) as response:
            text = await response.text()
            return response.status, json.loads(text) if text else None

    async def watch(self, path: str, **query: str) -> list[Obj]:
        """The events of one watch request that ends by itself (``timeoutSeconds``)."""
        params = {"watch": "true", "timeoutSeconds": "1", **query}
        async with self.session.get(
            self.kube.url + path, params=params, headers={"Authorization": f"Bearer {self.kube.token}"}
        ) as response:
            assert response.status == 200
            return [json.loads(line) async for line in response.content if line.strip()]


@pytest.fixture
async def api(kube: FakeKube) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(kube, session)


# -- resource versions, list and watch -------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes and
# #resource-versions: "clients must handle the case by recognizing the status code 410 Gone, clearing their local
# cache, performing a new get or list operation, and starting the watch from the resourceVersion that was returned."


async def test_a_watch_from_a_lists_resource_version_sees_only_later_changes(
    api: Api, kube: FakeKube
) -> None:
    """api-concepts, "Efficient detection of changes": list, then watch from the list's ``metadata.resourceVersion``:
    the watch reports what changed after it (ADDED, MODIFIED, DELETED), not what the list already held."""
    kube.create(a_quota("a", namespace="team"))
    code, listed = await api("GET", QUOTAS)
    assert code == 200 and [o["metadata"]["name"] for o in listed["items"]] == ["a"]
    version = listed["metadata"]["resourceVersion"]
    kube.create(a_quota("b", namespace="team"))
    kube.update("ElasticQuota", "a", lambda o: o["metadata"].setdefault("labels", {}).update(x="y"), "team")
    kube.delete("ElasticQuota", "b", "team")
    events = await api.watch(QUOTAS, resourceVersion=version)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(version)


async def test_a_watch_from_a_compacted_version_is_410_gone(api: Api, kube: FakeKube) -> None:
    """api-concepts, "Efficient detection of changes": a version older than what the server keeps is answered
    410 Gone, in a watch as an ``ERROR`` event whose object is a ``Status`` with code 410, reason ``Expired``."""
    kube.create(a_quota("a", namespace="team"))
    _, listed = await api("GET", QUOTAS)
    kube.create(a_quota("b", namespace="team"))
    kube.expire()
    events = await api.watch(QUOTAS, resourceVersion=listed["metadata"]["resourceVersion"])
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["kind"] == "Status"
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")


async def test_bookmarks_only_when_asked_for(api: Api, kube: FakeKube, eventually: Any) -> None:
    """api-concepts, "Watch bookmarks": with ``allowWatchBookmarks=true`` the server may send ``BOOKMARK`` events
    carrying only ``metadata.resourceVersion``; without it, never."""
    _, listed = await api("GET", QUOTAS)
    version = listed["metadata"]["resourceVersion"]
    for asked, expected in (("true", ["BOOKMARK"]), ("false", [])):
        watch = asyncio.ensure_future(api.watch(QUOTAS, resourceVersion=version, allowWatchBookmarks=asked))
        await eventually(lambda: bool(kube.watches), what="the watch open")
        kube.bookmark()
        events = await watch
        assert [e["type"] for e in events] == expected
        assert all(set(e["object"]["metadata"]) == {"resourceVersion"} for e in events)


async def test_lists_are_paged_with_limit_and_continue(api: Api, kube: FakeKube) -> None:
    """api-concepts, "Retrieving large results sets in chunks": ``limit`` bounds a page, ``metadata.continue`` asks
    for the next one (all pages at the first page's resourceVersion); an expired continue token is 410 Gone."""
    for name in ("a", "b", "c"):
        kube.create(a_quota(name, namespace="team"))
    code, first = await api("GET", QUOTAS, limit="2")
    assert code == 200 and len(first["items"]) == 2 and first["metadata"]["continue"]
    code, second = await api("GET", QUOTAS, limit="2", **{"continue": first["metadata"]["continue"]})
    assert [o["metadata"]["name"] for o in second["items"]] == ["c"] and not second["metadata"].get(
        "continue"
    )
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    code, gone = await api("GET", QUOTAS, limit="2", **{"continue": "100:expired"})
    assert (code, gone["reason"]) == (410, "Expired")


async def test_items_of_a_core_list_carry_no_kind(api: Api, kube: FakeKube) -> None:
    """api-concepts, "Collections": a list's ``kind`` is ``<Kind>List``; the items of a built-in list do not repeat
    ``kind``/``apiVersion`` (clients fill them in: the reflector does)."""
    kube.create(a_pod("p"))
    _, listed = await api("GET", PODS)
    assert listed["kind"] == "PodList" and "kind" not in listed["items"][0]


# -- 404: not found, or not served ------------------------------------------------------------------------------------
# https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api and api-concepts "Resource URIs": a
# 404 on a collection says the path is not served right now; discovery lists what is.


async def test_discovery_tells_a_resource_not_served_from_an_object_not_found(
    api: Api, kube: FakeKube
) -> None:
    """A missing object is 404 with ``details.name``; a resource not served is 404 on its collection too, and only
    discovery (``/apis/<group>/<version>``, an ``APIResourceList``) says which: so a 404 is never by itself
    evidence that objects were deleted."""
    code, missing = await api("GET", f"{QUOTAS}/nope")
    assert (code, missing["reason"], missing["details"]["name"]) == (404, "NotFound", "nope")
    code, listed = await api("GET", "/apis/scheduling.sigs.k8s.io/v1alpha1")
    assert code == 200 and listed["kind"] == "APIResourceList"
    names = {r["name"] for r in listed["resources"]}
    assert {"elasticquotas", "elasticquotas/status", "podgroups"} <= names
    kube.create(a_quota("q", namespace="team"))
    kube.unserve("ElasticQuota")
    code, _ = await api("GET", QUOTAS)
    assert code == 404
    _, listed = await api("GET", "/apis/scheduling.sigs.k8s.io/v1alpha1")
    assert "elasticquotas" not in {r["name"] for r in listed["resources"]}
    kube.serve("ElasticQuota")
    _, back = await api("GET", QUOTAS)
    assert [o["metadata"]["name"] for o in back["items"]] == ["q"]  # nothing was deleted
    code, _ = await api("GET", "/apis/nothing.example.com/v1")
    assert code == 404
    code, core = await api("GET", "/api/v1")
    assert code == 200 and {"pods", "pods/status", "nodes"} <= {r["name"] for r in core["resources"]}


# -- Binding ---------------------------------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/binding-v1/ (create: 201), and
# kubernetes/kubernetes pkg/registry/core/pod/storage/storage.go (BindingREST: the checks below are Conflicts).


def _binding(name: str, node: str, uid: str = "") -> Obj:
    meta = {"name": name, **({"uid": uid} if uid else {})}
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node}}


async def test_binding_answers(api: Api, kube: FakeKube) -> None:
    """201 with a ``Status`` (not a Binding); then 409 ``already assigned to node``; a uid precondition that does
    not hold is 409; a pod being deleted is 409 Conflict "pod x is being deleted, cannot be assigned to a host"
    (not a 500, as the API server answered before 1.20); a missing pod 404."""
    pod = kube.create(a_pod("p"))
    code, body = await api("POST", f"{PODS}/p/binding", _binding("p", "n1", pod["metadata"]["uid"]))
    assert (code, body["kind"], body["status"]) == (201, "Status", "Success")
    assert kube.get("Pod", "p")["spec"]["nodeName"] == "n1"
    code, body = await api("POST", f"{PODS}/p/binding", _binding("p", "n2"))
    assert code == 409 and 'pod p is already assigned to node "n1"' in body["message"]
    kube.create(a_pod("q"))
    code, body = await api("POST", f"{PODS}/q/binding", _binding("q", "n1", "another-uid"))
    assert (code, body["reason"]) == (409, "Conflict") and "Precondition failed" in body["message"]
    kube.update("Pod", "q", lambda o: o["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"))
    code, body = await api("POST", f"{PODS}/q/binding", _binding("q", "n1"))
    assert (code, body["reason"]) == (409, "Conflict")
    assert body["message"].endswith("pod q is being deleted, cannot be assigned to a host")
    code, body = await api("POST", f"{PODS}/nope/binding", _binding("nope", "n1"))
    assert code == 404


# -- Eviction --------------------------------------------------------------------------------------------------------
# https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ ("How API-initiated eviction works"): 200/201
# when allowed; "429 Too Many Requests: the eviction is not currently allowed because of the configured
# PodDisruptionBudget"; "500 Internal Server Error: the eviction is not allowed because there is a
# misconfiguration, like if multiple PodDisruptionBudgets reference the same Pod."


def _eviction(name: str) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}


def _budget(name: str, allowed: int, labels: dict[str, str]) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1},
    }


async def test_eviction_answers(api: Api, kube: FakeKube) -> None:
    kube.create(a_pod("free"))
    code, _ = await api("POST", f"{PODS}/free/eviction", _eviction("free"))
    assert code == 201 and kube.get("Pod", "free") is None
    guarded = a_pod("guarded")
    guarded["metadata"]["labels"] = {"app": "web", "tier": "front"}
    kube.create(guarded)
    kube.create(_budget("web", 0, {"app": "web"}))
    code, body = await api("POST", f"{PODS}/guarded/eviction", _eviction("guarded"))
    assert (code, body["reason"]) == (429, "TooManyRequests")
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    kube.create(_budget("front", 5, {"tier": "front"}))  # a second budget: refused whatever both allow
    code, body = await api("POST", f"{PODS}/guarded/eviction", _eviction("guarded"))
    assert code == 500
    assert body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )
    kube.delete("PodDisruptionBudget", "front", "default")
    kube.update("PodDisruptionBudget", "web", lambda o: o["status"].update(disruptionsAllowed=1), "default")
    code, _ = await api("POST", f"{PODS}/guarded/eviction", _eviction("guarded"))
    assert (
        code == 201 and kube.get("PodDisruptionBudget", "web", "default")["status"]["disruptionsAllowed"] == 0
    )
    code, _ = await api("POST", f"{PODS}/guarded/eviction", _eviction("guarded"))
    assert code == 404


# -- status subresource ----------------------------------------------------------------------------------------------
# https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#status-subresource
# "PUT/POST/PATCH requests to the custom resource ignore changes to the status stanza"; requests to /status "ignore
# changes to anything except the status stanza".


async def test_status_goes_through_the_status_subresource_only(api: Api, kube: FakeKube) -> None:
    kube.create(a_quota("q", namespace="team"))
    merge = "application/merge-patch+json"
    code, after = await api(
        "PATCH",
        f"{QUOTAS}/q",
        {"metadata": {"annotations": {"a": "1"}}, "status": {"used": {"cpu": "1"}}},
        content_type=merge,
    )
    assert (
        code == 200
        and after["metadata"]["annotations"] == {"a": "1"}
        and "used" not in after.get("status", {})
    )
    code, after = await api(
        "PATCH",
        f"{QUOTAS}/q/status",
        {"metadata": {"annotations": {"b": "2"}}, "status": {"used": {"cpu": "2"}}},
        content_type=merge,
    )
    assert code == 200 and after["status"] == {"used": {"cpu": "2"}}
    assert after["metadata"]["annotations"] == {"a": "1"}  # metadata through /status is ignored
    code, _ = await api("PATCH", f"{QUOTAS}/q/scale", {"spec": {}}, content_type=merge)
    assert code == 404  # a subresource the resource does not have


# -- field management ------------------------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management and #using-update-operations:
# "Update operations ... the managed fields are updated" with the fields the request changed, under the manager of
# the ``fieldManager`` query parameter (else derived from the user agent), per subresource; a field changed by
# another manager is no longer owned by the previous one. node-reporter leaves out what the binder's manager owns.


async def test_managed_fields_follow_who_changed_what(api: Api, kube: FakeKube) -> None:
    kube.create(a_node("n1"))
    merge = "application/merge-patch+json"
    batch = {"status": {"allocatable": {"kubernetes.io/batch-cpu": "2000"}}}
    code, node = await api(
        "PATCH", "/api/v1/nodes/n1/status", batch, content_type=merge, fieldManager="allot-binder"
    )
    assert code == 200
    [entry] = [e for e in node["metadata"]["managedFields"] if e["manager"] == "allot-binder"]
    assert entry["operation"] == "Update" and entry["subresource"] == "status"
    assert entry["fieldsV1"] == {"f:status": {"f:allocatable": {"f:kubernetes.io/batch-cpu": {}}}}
    other = {"status": {"allocatable": {"kubernetes.io/batch-cpu": "7000"}}}
    code, node = await api(
        "PATCH", "/api/v1/nodes/n1/status", other, content_type=merge, fieldManager="kubectl"
    )
    assert code == 200 and "allot-binder" not in {e["manager"] for e in node["metadata"]["managedFields"]}


# -- patch types -----------------------------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/using-api/api-concepts/#patch-and-apply and
# https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/: JSON patch
# (application/json-patch+json), merge patch (application/merge-patch+json), strategic merge patch
# (application/strategic-merge-patch+json; "not supported for custom resources"), apply
# (application/apply-patch+yaml, which needs a fieldManager: https://kubernetes.io/docs/reference/using-api/server-side-apply/).


async def test_the_patch_types_and_their_content_types(api: Api, kube: FakeKube) -> None:
    pod = a_pod("p")
    pod["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    kube.create(pod)
    code, after = await api(
        "PATCH",
        f"{PODS}/p",
        [{"op": "add", "path": "/metadata/labels", "value": {"a": "1"}}],
        content_type="application/json-patch+json",
    )
    assert code == 200 and after["metadata"]["labels"] == {"a": "1"}
    code, _ = await api(
        "PATCH",
        f"{PODS}/p",
        [{"op": "test", "path": "/metadata/labels/a", "value": "2"}],
        content_type="application/json-patch+json",
    )
    assert code == 422
    code, after = await api(
        "PATCH",
        f"{PODS}/p",
        {"metadata": {"labels": {"a": None, "b": "2"}}},
        content_type="application/merge-patch+json",
    )
    assert after["metadata"]["labels"] == {"b": "2"}  # null removes a key (RFC 7386)
    code, after = await api(
        "PATCH",
        f"{PODS}/p/status",
        {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert code == 200 and {c["type"] for c in after["status"]["conditions"]} == {"Ready", "PodScheduled"}
    kube.create(a_quota("q", namespace="team"))
    code, body = await api(
        "PATCH",
        f"{QUOTAS}/q",
        {"metadata": {"labels": {"a": "1"}}},
        content_type="application/strategic-merge-patch+json",
    )
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    applied = "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: ElasticQuota\nmetadata: {name: r}\nspec: {max: {cpu: 1}}\n"
    code, _ = await api("PATCH", f"{QUOTAS}/r", applied, content_type="application/apply-patch+yaml")
    assert code == 400  # no fieldManager
    code, created = await api(
        "PATCH", f"{QUOTAS}/r", applied, content_type="application/apply-patch+yaml", fieldManager="allot"
    )
    assert code in (200, 201) and created["spec"] == {"max": {"cpu": 1}}
    code, _ = await api("PATCH", f"{PODS}/p", "{}", content_type="application/json")
    assert code == 415


# -- field limits ----------------------------------------------------------------------------------------------------
# https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names ("no more than 253
# characters"); .../labels/#syntax-and-character-set (name part and value "63 characters or less"); the total size
# of annotations (256 KiB, apimachinery's TotalAnnotationSizeLimitB); and
# https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/ (events.k8s.io/v1 ``note``:
# "Maximal length of the note is 1kB"; the API server counts bytes).


def _event(name: str, note: str) -> Obj:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "allot-scheduler",
        "reportingInstance": "allot-scheduler",
        "action": "Scheduling",
        "reason": "FailedScheduling",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "p"},
        "note": note,
        "type": "Warning",
    }


@pytest.mark.parametrize(
    ("what", "change", "field"),
    [
        ("a name of 254 characters", lambda o: o["metadata"].update(name="n" * 254), "metadata.name"),
        ("a name with capitals", lambda o: o["metadata"].update(name="Web"), "metadata.name"),
        (
            "a label value of 64 characters",
            lambda o: o["metadata"].update(labels={"a": "v" * 64}),
            "metadata.labels",
        ),
        (
            "a label name of 64 characters",
            lambda o: o["metadata"].update(labels={"k" * 64: "v"}),
            "metadata.labels",
        ),
        (
            "annotations over 256 KiB",
            lambda o: o["metadata"].update(annotations={"big": "x" * (256 * 1024)}),
            "metadata.annotations",
        ),
    ],
)
async def test_objects_over_the_field_limits_are_invalid(
    api: Api, what: str, change: Any, field: str
) -> None:
    pod = a_pod("p")
    del pod["metadata"]["uid"]
    change(pod)
    code, body = await api("POST", PODS, pod)
    assert (code, body["reason"]) == (422, "Invalid"), what
    assert field in {c["field"] for c in body["details"]["causes"]}


async def test_an_event_note_is_limited_in_bytes(api: Api) -> None:
    fits = "é" * 512  # 512 characters, 1024 bytes
    code, _ = await api("POST", "/apis/events.k8s.io/v1/namespaces/default/events", _event("a", fits))
    assert code == 201
    over = "é" * 513  # 513 characters: far below 1024 characters, but 1026 bytes
    code, body = await api("POST", "/apis/events.k8s.io/v1/namespaces/default/events", _event("b", over))
    assert (code, body["reason"]) == (422, "Invalid") and body["details"]["causes"][0]["field"] == "note"
    limit = "a" * 253
    code, _ = await api("POST", PODS, {**a_pod(limit), "metadata": {"name": limit, "namespace": "default"}})
    assert code == 201


async def test_writes_need_the_bearer_token(kube: FakeKube) -> None:
    """https://kubernetes.io/docs/reference/access-authn-authz/authentication/ (bearer tokens): 401 without one."""
    async with aiohttp.ClientSession() as session, session.get(kube.url + PODS) as response:
        assert response.status == 401
