"""The admission webhooks facing a careless or hostile client, over real TLS on loopback: slow or half-open
connections are answered 408 and closed, a review that is not one the API server sends is refused (400) naming the
field, and a pod without a pod's shape is denied with the field path and never gets a JSON patch."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from allot_runtime.httpserver import Limits
from allot_testing.builders import a_pod
from allot_testing.tls import serving
from allot_webhook.server import LIMITS, Webhook

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command to make a CA"
)

# Bounds on how long an answer takes leave room for a loaded machine; a connection held would take the client's wait.
SLACK = 4.0
WAIT = 20.0
SHORT = Limits(
    header_timeout=0.5,
    body_timeout=0.5,
    idle_timeout=5.0,
    max_connections=4,
    max_body=LIMITS.max_body,
    max_depth=LIMITS.max_depth,
)


@pytest.fixture
async def endpoint(tmp_path: Path, unused_tcp_port: int) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    async with serving(Webhook(), tmp_path, unused_tcp_port, SHORT) as served:
        yield served


def review(obj: Any = None, **request: Any) -> dict[str, Any]:
    """A CREATE review of ``obj`` (a pod of Allot's by default), with ``request`` fields replaced."""
    if obj is None:
        obj = a_pod("p")
        obj["spec"]["schedulerName"] = "allot-scheduler"
    inner = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "default",
        "operation": "CREATE",
        "object": obj,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": inner}


async def send(
    endpoint: tuple[str, ssl.SSLContext], path: str, data: bytes, content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    url, trust = endpoint
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}{path}", data=data, headers={"Content-Type": content_type}, ssl=trust) as answer,
    ):
        assert answer.headers.get("X-Content-Type-Options") == "nosniff"
        return answer.status, dict(await answer.json())


async def post(endpoint: tuple[str, ssl.SSLContext], path: str, body: Any) -> tuple[int, dict[str, Any]]:
    return await send(endpoint, path, json.dumps(body).encode())


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
async def test_a_review_the_api_server_would_not_send_is_refused_naming_the_field(
    endpoint: Any, path: str
) -> None:
    v9 = {**review(), "apiVersion": "admission.k8s.io/v9"}
    no_uid = review()
    del no_uid["request"]["uid"]
    cases = [
        (v9, "apiVersion: must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1"),
        (review(kind="Pod"), "request.kind: must be an object"),
        (no_uid, "request.uid: must be a non-empty string"),
        (review(uid={"a": 1}), "request.uid: must be a non-empty string"),
        (review(uid=""), "request.uid: must be a non-empty string"),
        (review(operation="CREATE", object=None), "request.object: is required for CREATE"),
        (review(object="x"), "request.object: must be an object"),
        (review(operation="UPDATE", object=[]), "request.object: must be an object"),
        (review(operation="PATCH"), "request.operation: must be one of CREATE, UPDATE, DELETE, CONNECT"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": []}, "request: must be"),
    ]
    for body, reason in cases:
        status, answer = await post(endpoint, path, body)
        assert (status, answer["message"][: len(reason)]) == (400, reason)


async def test_a_body_that_does_not_say_it_is_json_is_refused(endpoint: Any) -> None:
    """The API server sends ``Content-Type: application/json`` (a charset may follow); a form or text body is not a
    review, whatever it holds."""
    body = json.dumps(review()).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/yaml"):
        status, answer = await send(endpoint, "/validate", body, content_type)
        assert status == 415, content_type
        assert answer["message"] == (
            f"the body must be Content-Type: application/json (an AdmissionReview); got {content_type}"
        )
    status, answer = await send(endpoint, "/mutate", body, "application/json; charset=utf-8")
    assert status == 200 and answer["response"]["allowed"] is True


async def test_the_accepted_versions_are_echoed(endpoint: Any) -> None:
    for version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        status, answer = await post(endpoint, "/validate", {**review(), "apiVersion": version})
        assert status == 200 and answer["apiVersion"] == version
        assert answer["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"


async def test_json_nested_too_deep_is_refused_with_a_reason(endpoint: Any) -> None:
    status, answer = await send(endpoint, "/validate", b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and "levels deep" in answer["message"]
    deep: Any = "x"
    for _ in range(500):
        deep = {"a": deep}
    pod = a_pod("p")
    pod["spec"]["schedulerName"] = "allot-scheduler"
    pod["metadata"]["annotations"] = {"deep": deep}
    for path in ("/validate", "/mutate"):
        status, answer = await post(endpoint, path, review(pod))
        assert status == 400 and f"at most {LIMITS.max_depth} are accepted" in answer["message"]


def spec_list() -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": []}


def containers_string(scheduler: str) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"schedulerName": scheduler, "containers": "x"}}


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
async def test_a_pod_without_a_pods_shape_is_denied_with_the_field_path_and_no_patch(
    endpoint: Any, path: str
) -> None:
    cases = [
        (spec_list(), "spec"),
        ({"metadata": {"name": "p"}}, "spec"),
        (containers_string("allot-scheduler"), "spec.containers"),
        (containers_string("default-scheduler"), "spec.containers"),
        ({"metadata": [], "spec": {"containers": [{"name": "c"}]}}, "metadata"),
        ({"metadata": {"name": "p"}, "spec": {"schedulerName": 1, "containers": [{}]}}, "spec.schedulerName"),
        ({"metadata": {"name": "p"}, "spec": {"containers": ["x"]}}, "spec.containers[0]"),
    ]
    for pod, field in cases:
        status, answer = await post(endpoint, path, review(pod))
        assert status == 200, answer
        response = answer["response"]
        assert response["allowed"] is False, (pod, response)
        assert field in [c["field"] for c in response["status"]["details"]["causes"]]
        assert "patch" not in response


async def test_a_well_formed_pod_still_gets_its_patch(endpoint: Any) -> None:
    pod = a_pod("p")
    status, answer = await post(endpoint, "/mutate", review(pod))
    assert status == 200 and answer["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "allot-scheduler"} in patch or any(
        op["path"] == "/spec/schedulerName" for op in patch
    )


async def raw(endpoint: tuple[str, ssl.SSLContext], *parts: bytes, pause: float = 0.0) -> tuple[bytes, float]:
    """``parts`` sent over TLS ``pause`` seconds apart; what came back until the server closed, and when."""
    url, trust = endpoint
    port = int(url.rsplit(":", 1)[1])
    began = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trust)

    async def trickle() -> None:
        for part in parts:
            try:
                writer.write(part)
                await writer.drain()
            except (ConnectionError, ssl.SSLError):
                return
            await asyncio.sleep(pause)

    sending = asyncio.create_task(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), WAIT)
    except (ConnectionError, ssl.SSLError):
        answer = b""
    sending.cancel()
    writer.close()
    return answer, time.monotonic() - began


async def test_slow_headers_and_bodies_get_a_408_within_the_timeout(endpoint: Any) -> None:
    answer, took = await raw(
        endpoint, b"POST /validate HTTP/1.1\r\n", b"Host: x\r\n", b"X-A: b\r\n", pause=0.3
    )
    assert answer.startswith(b"HTTP/1.1 408") and took < 0.9 + SLACK
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    answer, took = await raw(endpoint, head + b'{"kind": ')  # shorter than its Content-Length
    assert answer.startswith(b"HTTP/1.1 408") and b"body" in answer and took < 1.0 + SLACK
    answer, took = await raw(endpoint, head, *[b" "] * 40, pause=0.1)  # trickled
    assert answer.startswith(b"HTTP/1.1 408") and took < 1.0 + SLACK


async def test_half_open_connections_are_not_all_kept(endpoint: Any) -> None:
    url, trust = endpoint
    port = int(url.rsplit(":", 1)[1])
    began = time.monotonic()
    opened = [
        await asyncio.open_connection("127.0.0.1", port, ssl=trust) for _ in range(SHORT.max_connections)
    ]
    answer, _ = await raw(endpoint, b"POST /validate HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 503")
    for reader, _ in opened:
        assert (await asyncio.wait_for(reader.read(), WAIT)).startswith(b"HTTP/1.1 408")
    assert time.monotonic() - began < 0.5 + SLACK
    for _, writer in opened:
        writer.close()
    status, _ = await post(endpoint, "/validate", review())
    assert status == 200


def allot_pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    pod = a_pod("p", annotations=annotations or {})
    pod["spec"].update(schedulerName="allot-scheduler", **spec)
    return pod


async def test_values_that_raised_inside_the_checks_are_answered_without_a_500(endpoint: Any) -> None:
    """Each of these was a 500 naming no field (a traceback in the log), or held the webhook for seconds: numbers
    longer than Python converts, JSON nested past Python's recursion, a CPU range of millions, digits that are
    digits only to ``isdigit()``, a list that is a number."""
    status_json = "scheduling.koordinator.sh/resource-status"
    cases: list[tuple[dict[str, Any], str]] = [
        (allot_pod({status_json: '{"cpuset": "0-30000000"}'}, nodeName="n1"), "cpuset"),
        (allot_pod({status_json: '{"cpuset": "\u00b2"}'}, nodeName="n1"), "cpuset"),
        (
            allot_pod(
                {
                    "gang.scheduling.koordinator.sh/name": "g",
                    "gang.scheduling.koordinator.sh/min-available": "9" * 5000,
                }
            ),
            "min-available",
        ),
        (
            allot_pod(
                {
                    "gang.scheduling.koordinator.sh/name": "g",
                    "gang.scheduling.koordinator.sh/waiting-time": "9" * 5000 + "s",
                }
            ),
            "waiting-time",
        ),
        (allot_pod({"scheduling.koordinator.sh/resource-spec": "[" * 5000 + "]" * 5000}), "resource-spec"),
        (
            allot_pod(
                {
                    "scheduling.koordinator.sh/device-allocated": '{"rdma": [{"minor": 0, "resources": {}, "extension": {"vfs": 5}}]}'
                },
                nodeName="n1",
            ),
            "device-allocated",
        ),
    ]
    exponent = allot_pod()
    exponent["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e" + "0" * 5000
    cases.append((exponent, "requests[cpu]"))
    for pod, where in cases:
        began = time.monotonic()
        status, answer = await post(endpoint, "/validate", review(pod))
        assert status == 200, (where, answer)
        assert time.monotonic() - began < 2 + SLACK, where
        response = answer["response"]
        said = json.dumps(response.get("status", {})) + json.dumps(response.get("warnings", []))
        assert where in said, (where, response)


async def test_a_namespace_that_is_not_a_name_and_a_body_that_is_not_json_are_refused(endpoint: Any) -> None:
    status, answer = await post(endpoint, "/mutate", review(namespace="spark?x=1&labelSelector=a"))
    assert (status, answer["message"][:36]) == (400, "request.namespace: must be a namespa")
    status, answer = await send(endpoint, "/validate", json.dumps(review()).replace('"p"', "NaN", 1).encode())
    assert (status, answer["message"]) == (400, "the body is not JSON: NaN is not a JSON value")


async def test_a_refusal_lists_at_most_a_hundred_causes(endpoint: Any) -> None:
    pod = allot_pod()
    pod["metadata"]["labels"] = {f"!{i}": "" for i in range(5000)}
    status, answer = await post(endpoint, "/validate", review(pod))
    assert status == 200
    refusal = answer["response"]["status"]
    assert len(refusal["details"]["causes"]) == 100
    assert refusal["message"].endswith("; and 4900 more")
