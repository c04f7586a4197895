"""binder in Kubernetes mode: the IO worker that carries the processor's decisions to the API server.

The processor (``binder.processor``, ``mode: kubernetes``) decides ``pod.bind_requested``; this worker, an ``Extra``
task of the binder process, takes the *outstanding* requests from the processor's projection (requested, neither
bound nor failed), and for each:

1. finds the request's event in the log (so nothing is bound on a decision that is not committed), then
2. POSTs ``/api/v1/namespaces/{ns}/pods/{name}/binding`` with ``Binding{metadata{name, uid, annotations},
   target{kind: Node, name}}``: the API server checks the uid, sets ``spec.nodeName``, merges the annotations
   (``scheduling.koordinator.sh/device-allocated``, ``resource-status``, …) and ``PodScheduled`` in one update, so
   the allocation can never be seen without the binding or the reverse;
3. records the outcome as producer ``binder.kube``, with the id derived from the request's event id (one outcome
   per request, whatever happens): ``pod.bound`` (mode ``kubernetes``) or ``pod.bind_failed``.

Outcomes: success, or 409 "already assigned to node X" with X the requested node (an earlier attempt of ours that
succeeded) → ``pod.bound``. 404, 409 otherwise (another node, a uid precondition: the pod was re-created, scheduling
gates, the pod being deleted), 400/422 → ``pod.bind_failed`` (the device-allocator frees the pod's devices). Transport
errors, 429 and 5xx → retried with backoff; 401/403 → retried too and logged as errors (RBAC is fixed without a
restart). The response is read raw (``_preload_content=False``): the API server answers a Binding with a ``Status``,
which the generated client would fail to deserialise as a ``V1Binding`` even though the bind succeeded.

It also applies ``quota.status_published`` patches (the latest per quota) to the ElasticQuota objects as JSON merge
patches: status on the ``status`` subresource, then the annotations on the object (whose patches carry no status;
only without a status subresource does the object's own patch carry it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from allot_contracts.envelope import RecordedEvent, canonical, stream_id
from allot_contracts.errors import Fenced, TransientError
from allot_contracts.events import (
    Event,
    MigrationEvictionRequested,
    ObjectRef,
    PodBindFailed,
    PodBindRequested,
    PodBound,
    PodEvicted,
    QuotaEvicted,
)
from allot_contracts.events.enactment import QuotaStatusEnacted, QuotaStatusEnactmentFailed
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.kube.client import ApiError, api_client, call
from allot_runtime.metrics import ATTEMPT_BUCKETS, RegistryFamilies, counter, histogram
from binder.adapters.api import Retry, post
from binder.adapters.evict import EvictionState, evict_due, evict_pods_due, evict_quota_due
from binder.adapters.outcomes import latest_decision, record_outcome
from binder.processor import BindRequest

log = logging.getLogger("allot.binder.kube")

PRODUCER = "binder.kube"
ELASTIC_QUOTAS = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas/{name}"
ALREADY_ASSIGNED = re.compile(r'is already assigned to node "?([^"\s]+)"?')


# -- errors ----------------------------------------------------------------------------------------------------------


class Refused(TransientError):
    """401/403: the API server refused the request (RBAC, an expired token). Retried: fixing RBAC needs no restart."""


# -- binding ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    bound: bool
    message: str


def binding_body(request: BindRequest) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": request.pod.name,
            "namespace": request.pod.namespace,
            "uid": request.uid,
            "annotations": dict(request.annotations),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": request.node},
    }


async def bind(client: Any, request: BindRequest) -> Outcome:
    """POST the Binding; the final answer as an :class:`Outcome`. Raises ``TransientError`` when there is none yet
    (no answer, 429, 5xx, 401/403)."""
    path = f"/api/v1/namespaces/{request.pod.namespace}/pods/{request.pod.name}/binding"
    exc = await post(
        client, path, binding_body(request), kind="Binding", permission="pods/binding", refused=Refused
    )
    if exc is None:
        return Outcome(True, "bound")
    match = ALREADY_ASSIGNED.search(exc.message) if exc.status == 409 else None
    if match is not None and match.group(1) == request.node:
        return Outcome(True, f"already assigned to node {request.node}")
    return Outcome(False, f"binding {request.pod.key} to {request.node} failed: {exc}")


# -- the worker ------------------------------------------------------------------------------------------------------


class BinderMetrics(RegistryFamilies):
    def __init__(self, registry: CollectorRegistry) -> None:
        r, text = registry, "Binding attempts against the API server, by result (bound, failed, retried)"
        self.bindings = counter(r, "allot_binder_bindings_total", text, ("result",))
        self.duration = histogram(
            r, "allot_binder_binding_duration_seconds", "Time of one Binding POST", (), ATTEMPT_BUCKETS
        )
        self.quota_patches = counter(
            r, "allot_binder_quota_patches_total", "ElasticQuota status patches, by result", ("result",)
        )


@dataclass
class View:
    """What the worker reads from the binder's runtime (under its lock): outstanding requests and quota patches."""

    ready: bool
    requests: list[BindRequest]
    patches: dict[str, JsonObject]
    evictions: list[MigrationEvictionRequested] = field(default_factory=list)
    pod_evictions: list[PodEvicted] = field(default_factory=list)  # pod.evicted decisions to carry out
    quota_evictions: list[QuotaEvicted] = field(default_factory=list)  # quota.evicted decisions to carry out


@dataclass
class BindWorker:
    store: Any
    client: Any
    view: Callable[[], Awaitable[View]]
    decider: str = "binder"  # the producer of pod.bind_requested
    leadership: Any = (
        None  # lease mode: every API server write checks the lease first (allot_runtime.kube.lease)
    )
    metrics: BinderMetrics = field(default_factory=lambda: BinderMetrics.of(CollectorRegistry()))
    concurrency: int = 16
    poll: float = 0.1
    backoff: tuple[float, float] = (0.5, 30.0)
    refused_delay: float = 10.0  # after 401/403
    recorded: dict[str, tuple[str, int]] = field(default_factory=dict)  # pod -> (uid, attempt) answered
    retries: dict[str, Retry] = field(default_factory=dict)  # pod -> backoff
    quota_retries: dict[str, Retry] = field(default_factory=dict)  # quota -> backoff
    patched: dict[str, bytes] = field(default_factory=dict)  # quota -> canonical patch applied
    status_subresource: bool | None = None  # None: not known yet
    evictions: EvictionState = field(default_factory=EvictionState)  # PodMigrationJob evictions

    async def run(self, stop: asyncio.Event) -> None:
        log.info("binding through the API server (producer %s)", PRODUCER)
        while not stop.is_set():
            try:
                await self.step()
            except Fenced as exc:  # a newer leader took over: record it once and stop writing
                if self.leadership is not None:
                    await self.leadership.refused(exc, "binding and patching ElasticQuota status")
                return
            except TransientError:
                pass
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.poll)

    async def step(self) -> None:
        """One pass: bind every due outstanding request, apply every changed quota patch."""
        view = await self.view()
        if not view.ready:
            return
        requests = view.requests
        keys = {r.pod.key for r in requests}
        for key in [k for k in self.recorded if k not in keys]:
            self.recorded.pop(key, None)  # its outcome reached the projection
        for key in [k for k in self.retries if k not in keys]:
            self.retries.pop(key, None)
        now = time.monotonic()
        due = [
            r
            for r in requests
            if self.recorded.get(r.pod.key) != (r.uid, r.attempt)
            and self.retries.get(r.pod.key, Retry()).not_before <= now
        ]
        if due:
            gate = asyncio.Semaphore(self.concurrency)

            async def one(request: BindRequest) -> None:
                async with gate:
                    await self._bind_one(request)

            await asyncio.gather(*(one(r) for r in due))
        if view.evictions:
            await evict_due(self, view.evictions)
        if view.pod_evictions:
            await evict_pods_due(self, view.pod_evictions)
        if view.quota_evictions:
            await evict_quota_due(self, view.quota_evictions)
        for key, patch in sorted(view.patches.items()):
            waiting = self.quota_retries.get(key, Retry()).not_before > now
            if self.patched.get(key) != canonical(patch) and not waiting:
                await self._patch_one(key, patch)

    def _check(self, what: str) -> None:
        """Before an API server write: refused (``Fenced``) unless this process holds the lease now."""
        if self.leadership is not None:
            self.leadership.check(what)

    async def _request_record(self, request: BindRequest) -> RecordedEvent | None:
        def same(record: RecordedEvent) -> bool:
            event = record.decode()
            return isinstance(event, PodBindRequested) and (event.uid, event.attempt) == (
                request.uid,
                request.attempt,
            )

        stream = stream_id("pod", request.pod.key)
        return await latest_decision(self.store, stream, "pod.bind_requested", self.decider, same)

    def _retry_later(
        self, key: str, exc: Exception, retries: dict[str, Retry] | None = None, what: str = "pod"
    ) -> None:
        retry = (self.retries if retries is None else retries).setdefault(key, Retry())
        retry.failures += 1
        delay = min(self.backoff[1], self.backoff[0] * 2 ** (retry.failures - 1))
        hint = self.refused_delay if isinstance(exc, Refused) else getattr(exc, "delay", None)
        delay = max(delay, hint) if hint else delay
        retry.not_before = time.monotonic() + delay * (0.8 + 0.4 * random.random())
        log.log(
            logging.ERROR if retry.failures >= 5 or isinstance(exc, Refused) else logging.WARNING,
            "%s %s: %s; retrying in %.1fs (attempt %d)",
            what,
            key,
            exc,
            delay,
            retry.failures,
        )

    async def _bind_one(self, request: BindRequest) -> None:
        key = request.pod.key
        try:
            trigger = await self._request_record(request)
            if trigger is None:
                return  # not committed yet (or superseded): the next pass sees the truth
            self._check(f"Binding {key} to {request.node}")
            started = time.perf_counter()
            outcome = await bind(self.client, request)
            self.metrics.duration.observe(time.perf_counter() - started)
            event = (
                PodBound(
                    pod=request.pod,
                    uid=request.uid,
                    attempt=request.attempt,
                    node=request.node,
                    annotations=dict(request.annotations),
                    mode="kubernetes",
                )
                if outcome.bound
                else PodBindFailed(
                    pod=request.pod,
                    uid=request.uid,
                    attempt=request.attempt,
                    node=request.node,
                    message=outcome.message,
                )
            )
            await record_outcome(self.store, decision=trigger, stream=stream_id("pod", key), event=event)
        except Fenced:
            raise
        except TransientError as exc:
            self.metrics.bindings.labels("retried").inc()
            self._retry_later(key, exc)
            return
        self.recorded[key] = (request.uid, request.attempt)
        self.retries.pop(key, None)
        self.metrics.bindings.labels("bound" if outcome.bound else "failed").inc()
        if outcome.bound:
            log.info("bound %s to %s (%s)", key, request.node, outcome.message)
        else:
            log.warning("%s", outcome.message)

    async def _patch_one(self, key: str, patch: JsonObject) -> None:
        namespace, name = key.split("/", 1)
        path = ELASTIC_QUOTAS.format(namespace=namespace, name=name)
        quota = ObjectRef(namespace=namespace, name=name)
        outcome: Event
        try:
            decision = await latest_decision(
                self.store,
                stream_id("quota", key),
                "quota.status_published",
                self.decider,
                lambda record: canonical(record.payload_dict().get("patch") or {}) == canonical(patch),
            )
            if decision is None:
                return  # not committed yet (or superseded): the next pass sees the truth
            attempts = self.quota_retries.get(key, Retry()).failures + 1
            try:
                self._check(f"ElasticQuota {key} status")
                result = await self._write_quota(path, patch)
                outcome = (
                    QuotaStatusEnacted(quota=quota, decision=decision.event_id, attempts=attempts)
                    if result is None
                    else QuotaStatusEnactmentFailed(
                        quota=quota,
                        decision=decision.event_id,
                        reason=result.reason,
                        message=str(result),
                        status_written=True,
                        attempts=attempts,
                    )
                )
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise Refused(
                        f"the API server refused the ElasticQuota patch ({exc}): check the binder's "
                        "RBAC (patch elasticquotas, elasticquotas/status)"
                    ) from exc
                outcome = QuotaStatusEnactmentFailed(
                    quota=quota,
                    decision=decision.event_id,
                    reason=exc.reason,
                    message=str(exc),
                    attempts=attempts,
                )
                log.log(
                    logging.DEBUG if exc.status == 404 else logging.WARNING,
                    "ElasticQuota %s status not written: %s",
                    key,
                    exc,
                )
            await record_outcome(self.store, decision=decision, stream=stream_id("quota", key), event=outcome)
        except Fenced:
            raise
        except TransientError as exc:
            self.metrics.quota_patches.labels("retried").inc()
            self._retry_later(key, exc, self.quota_retries, what="ElasticQuota")
            return
        self.quota_retries.pop(key, None)
        self.patched[key] = canonical(patch)
        self.metrics.quota_patches.labels(_quota_result(outcome)).inc()

    async def _write_quota(self, path: str, patch: JsonObject) -> ApiError | None:
        """Status on the ``status`` subresource first, then the annotations on the object: only the object's own
        endpoint goes through admission webhooks, so a webhook refusing the annotations never stops the status.
        Without a status subresource (a CRD that has none) the object's own patch carries the status. None when all
        of it is written; the refusal of the annotations when only the status is."""
        rest = {k: v for k, v in patch.items() if k != "status"}
        if "status" in patch and self.status_subresource is not False:
            try:
                await call(
                    self.client,
                    "PATCH",
                    f"{path}/status",
                    {"status": patch["status"]},
                    content_type="application/merge-patch+json",
                )
                self.status_subresource = True
            except ApiError as exc:
                if exc.status != 404 or self.status_subresource:
                    raise
                await call(self.client, "PATCH", path, patch, content_type="application/merge-patch+json")
                self.status_subresource = False  # the object exists: its CRD has no status subresource
                return None
        elif "status" in patch:
            rest = patch
        if rest.get("metadata") or set(rest) - {"metadata"}:
            try:
                await call(self.client, "PATCH", path, rest, content_type="application/merge-patch+json")
            except ApiError as exc:
                if exc.status in (401, 403, 404) or "status" not in patch:
                    raise
                log.warning("ElasticQuota %s: status written, annotations refused: %s", path, exc)
                return exc
        return None


def _quota_result(outcome: Event) -> str:
    """The metric's result label of an ElasticQuota outcome: patched, missing or refused."""
    if isinstance(outcome, QuotaStatusEnactmentFailed):
        return "missing" if outcome.reason == "NotFound" and not outcome.status_written else "refused"
    return "patched"


def runtime_view(ctx: Any) -> Callable[[], Awaitable[View]]:
    """The view of a running binder: its projection under the runtime's lock, and whether it is caught up."""

    async def view() -> View:
        async with ctx.runtime.lock:
            ready = bool(ctx.consumer.ready.is_set() and ctx.runtime.consistent)
            processor = ctx.host.processor
            return View(
                ready=ready,
                requests=processor.outstanding() if ready else [],
                patches=processor.quota_patches() if ready else {},
                evictions=processor.evictions.outstanding() if ready else [],
                pod_evictions=processor.evictions.outstanding_pods() if ready else [],
                quota_evictions=processor.evictions.outstanding_quota() if ready else [],
            )

    return view


async def binder_client(ctx: Any) -> Any:
    """An API client for the binder's workers; under leader election its user agent names this instance."""
    client = await api_client()
    leadership = getattr(ctx, "leadership", None)
    if leadership is not None:
        client.user_agent = f"allot-binder/{leadership.config.identity}"
    return client


async def bind_worker(ctx: Any, stop: asyncio.Event) -> None:
    """The binder's ``Extra`` in Kubernetes mode (added by ``main`` when ``ALLOT_KUBE_MODE=kubernetes``)."""
    client = await binder_client(ctx)
    leadership = getattr(ctx, "leadership", None)
    try:
        worker = BindWorker(
            store=ctx.store,
            client=client,
            view=runtime_view(ctx),
            decider=ctx.runtime.name,
            metrics=BinderMetrics.of(ctx.metrics.registry),
            leadership=leadership,
        )
        await worker.run(stop)
    finally:
        await client.close()
