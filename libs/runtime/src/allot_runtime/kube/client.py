"""The Kubernetes API client: configuration, raw requests, and error translation into Allot's errors.

``api_client`` builds a kubernetes-asyncio ``ApiClient`` from ``ALLOT_KUBECONFIG``, ``KUBECONFIG``, the in-cluster
service account or ``~/.kube/config``. Requests are raw (``_preload_content=False``): the generated models are not
used to parse answers (the Binding reply is a ``Status`` the client would fail to read as a ``V1Binding``), and
errors become :class:`ApiError` (a final answer), :class:`Expired` (410: list again) or :class:`ApiUnavailable`
(no answer, 429, 5xx: try again). Shared by node-reporter, kube-sync and the binder.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from allot_contracts.errors import InvalidInput, PermanentError, TransientError, Unavailable
from allot_contracts.jsonvalue import JsonObject


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
        return (
            f"{self.base}/namespaces/{namespace}/{self.plural}" if namespace else f"{self.base}/{self.plural}"
        )

    def object_path(self, name: str, namespace: str = "", subresource: str = "") -> str:
        path = f"{self.collection_path(namespace if self.namespaced else '')}/{name}"
        return f"{path}/{subresource}" if subresource else path

    def __str__(self) -> str:
        return f"{self.plural}.{self.api_version.split('/')[0]}" if "/" in self.api_version else self.plural


NODES = Resource("v1", "Node", "nodes", False)
PODS = Resource("v1", "Pod", "pods", True)
DEVICES = Resource("scheduling.koordinator.sh/v1alpha1", "Device", "devices", False)
TOPOLOGIES = Resource(
    "topology.node.k8s.io/v1alpha1", "NodeResourceTopology", "noderesourcetopologies", False
)
ELASTIC_QUOTAS = Resource("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota", "elasticquotas", True)
QUOTA_PROFILES = Resource(
    "quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile", "elasticquotaprofiles", True
)
POD_GROUPS = Resource("scheduling.sigs.k8s.io/v1alpha1", "PodGroup", "podgroups", True)
RESERVATIONS = Resource("scheduling.koordinator.sh/v1alpha1", "Reservation", "reservations", False)
MIGRATION_JOBS = Resource("scheduling.koordinator.sh/v1alpha1", "PodMigrationJob", "podmigrationjobs", False)


def part(obj: JsonObject, key: str) -> JsonObject:
    """``obj[key]`` when it is an object (``metadata``, ``spec``, ``status``), else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def meta(obj: JsonObject) -> JsonObject:
    return part(obj, "metadata")


def object_key(obj: JsonObject, namespaced: bool) -> str:
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
            await config.load_kube_config(
                config_file=path, client_configuration=configuration, persist_config=False
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(
                config_file=_home_kubeconfig(), client_configuration=configuration, persist_config=False
            )
    except (config.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        where = path or (
            "the in-cluster service account"
            if os.environ.get("KUBERNETES_SERVICE_HOST")
            else "~/.kube/config"
        )
        raise InvalidInput(
            [("ALLOT_KUBECONFIG", f"cannot load the Kubernetes client configuration from {where}: {exc}")]
        ) from exc
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


# 500s that are final answers, not a server in trouble: asking again gets the same. The Eviction API answers a pod
# selected by two PodDisruptionBudgets so ("This pod has more than one PodDisruptionBudget, which the eviction
# subresource does not support.").
FINAL_INTERNAL_ERRORS = ("more than one PodDisruptionBudget",)


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
        if status >= 500 and any(final in message for final in FINAL_INTERNAL_ERRORS):
            return ApiError(status, reason, message)
        return ApiUnavailable(f"API server answered {status} {reason}: {message}", status=status, delay=delay)
    return ApiError(status, reason, message)


async def request(
    client: Any,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str = "application/json",
    timeout: aiohttp.ClientTimeout | float | None = None,
) -> aiohttp.ClientResponse:
    """One raw request through the client's configuration and authentication; the response is returned unread
    (the caller checks the status and reads or streams the body). Transport errors become :class:`ApiUnavailable`."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        response = await client.call_api(
            path,
            method,
            query_params=[(k, v) for k, v in query if v not in (None, "")],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=timeout,
        )
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


async def call(
    client: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    timeout: float = 30.0,
    query: Iterable[tuple[str, Any]] = (),
) -> Any:
    """One request whose answer is read as JSON: 2xx → the body; otherwise the error of :func:`status_error`."""
    return await read_json(
        await request(
            client, method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
    )
