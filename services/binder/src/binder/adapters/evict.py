"""Kubernetes mode: the Eviction API calls behind PodMigrationJobs and ``pod.evicted`` decisions.

For every outstanding ``migration.eviction_requested`` (:mod:`binder.evictions`), once its event is committed in the
log, the worker POSTs ``/api/v1/namespaces/{ns}/pods/{name}/eviction`` (``policy/v1`` Eviction, the job's
``deleteOptions`` with a uid precondition on the pod's life) and records the answer as producer ``binder.kube`` with
an id derived from the request's: ``migration.evicted`` (accepted; also 404 and a failed uid precondition: that life
of the pod is already gone) or ``migration.eviction_failed`` (refused for good). A PodDisruptionBudget that does not
allow the eviction now (429) is retried with backoff, as are transport errors and 5xx; 401/403 are retried too and
logged as errors (RBAC: ``create pods/eviction``). A pod selected by more than one PodDisruptionBudget gets a 500
that no retry changes ("This pod has more than one PodDisruptionBudget, which the eviction subresource does not
support."): it is a final answer, recorded as the failed eviction with that message
(``allot_runtime.kube.client.FINAL_INTERNAL_ERRORS``).

Every outstanding ``pod.evicted`` (qos-enforcer's memory-pressure evictions of BE pods, device-allocator's
preemptions for a reservation) goes the same way, with the pod's uid as the only precondition, and is answered by
``pod.eviction_enacted`` on the pod's stream. As with the kubelet's and koordlet's evictions, the Eviction API
honours PodDisruptionBudgets: a budget that allows no disruption holds the eviction back until it does.

Every outstanding ``quota.evicted`` (quota-manager reclaiming a lender's min from borrowers, or revoking over-use)
goes the same way, with the pod's uid as the precondition, and is answered on the pod's stream by
``quota.eviction_enacted`` (accepted, or that life of the pod already gone) or ``quota.eviction_enactment_failed``
with the API server's reason and message. A PodDisruptionBudget that allows no disruption (429 ``TooManyRequests``,
"Cannot evict pod as it would violate the pod's disruption budget.") is such a final answer here, not a wait: the
reclaim was decided now, for a pod that needs the quota now, and the refusal is what the log must say.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from allot_contracts.envelope import RecordedEvent, stream_id
from allot_contracts.errors import Fenced, TransientError
from allot_contracts.events import (
    Event,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    ObjectRef,
    PodEvicted,
    PodEvictionEnacted,
    QuotaEvicted,
)
from allot_contracts.events.enactment import QuotaEvictionEnacted, QuotaEvictionEnactmentFailed
from allot_contracts.jsonvalue import JsonObject
from allot_runtime.kube.client import ApiUnavailable
from binder.adapters.api import Retry, post
from binder.adapters.outcomes import latest_decision, record_outcome

log = logging.getLogger("allot.binder.kube")

PRODUCER = "binder.kube"
DECIDER = "reservation-manager"  # the producer of migration.eviction_requested
EVICTION = "/api/v1/namespaces/{namespace}/pods/{name}/eviction"


@dataclass
class EvictionState:
    recorded: set[str] = field(default_factory=set)  # request event ids answered
    retries: dict[str, Retry] = field(default_factory=dict)  # job -> backoff
    pod_retries: dict[str, Retry] = field(default_factory=dict)  # pod -> backoff, for pod.evicted
    quota_retries: dict[str, Retry] = field(default_factory=dict)  # pod -> backoff, for quota.evicted


def eviction_body(
    request: MigrationEvictionRequested | PodEvicted | QuotaEvicted,
    delete_options: JsonObject | None = None,
) -> JsonObject:
    options: JsonObject
    if isinstance(request, MigrationEvictionRequested):
        options, uid = dict(request.delete_options), request.pod_uid
    else:
        options, uid = dict(delete_options or {}), request.uid
    if uid:
        preconditions = options.get("preconditions")
        options["preconditions"] = {**(preconditions if isinstance(preconditions, dict) else {}), "uid": uid}
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": request.pod.name, "namespace": request.pod.namespace},
        "deleteOptions": options,
    }


async def _post(
    client: Any, request: MigrationEvictionRequested | PodEvicted | QuotaEvicted, refused: type[Exception]
) -> tuple[str, str]:
    """POST the Eviction: ``(reason, message)`` of the final answer, reason "" when accepted (or that life of the pod
    is already gone); raises ``TransientError`` when there is no final answer yet."""
    pod: ObjectRef = request.pod
    path = EVICTION.format(namespace=pod.namespace, name=pod.name)
    exc = await post(
        client, path, eviction_body(request), kind="Eviction", permission="pods/eviction", refused=refused
    )
    if exc is None:
        return "", "evicted"
    if exc.status == 404 or (exc.status == 409 and "precondition" in exc.message.lower()):
        return "", f"pod {pod.key} is already gone ({exc})"
    return exc.reason or str(exc.status), str(exc)


async def evict(
    client: Any, request: MigrationEvictionRequested | PodEvicted, refused: type[Exception]
) -> tuple[bool, str]:
    """``(evicted, message)``; raises ``TransientError`` when there is no final answer yet."""
    reason, message = await _post(client, request, refused)
    return (True, message) if not reason else (False, f"evicting {request.pod.key} failed: {message}")


async def _request_record(
    store: Any, decider: str, request: MigrationEvictionRequested
) -> RecordedEvent | None:
    def same(record: RecordedEvent) -> bool:
        event = record.decode()
        return isinstance(event, MigrationEvictionRequested) and event.pod_uid == request.pod_uid

    stream = stream_id("migration", request.job.name)
    return await latest_decision(store, stream, "migration.eviction_requested", decider, same)


async def evict_due(worker: Any, requests: list[MigrationEvictionRequested]) -> None:
    """One pass over the outstanding evictions (called from the binder's worker step)."""
    state: EvictionState = worker.evictions
    now = time.monotonic()
    for request in requests:
        job = request.job.name
        retry = state.retries.get(job)
        if retry is not None and retry.not_before > now:
            continue
        try:
            record = await _request_record(worker.store, DECIDER, request)
            if record is None or record.event_id in state.recorded:
                continue  # not committed yet, or answered and on its way into the projection
            worker._check(f"Eviction of {request.pod.key}")
            evicted, message = await evict(worker.client, request, refused=_refused_type(worker))
            event = (
                MigrationEvicted(
                    job=request.job,
                    uid=request.uid,
                    pod=request.pod,
                    pod_uid=request.pod_uid,
                    node=request.node,
                    mode="kubernetes",
                )
                if evicted
                else MigrationEvictionFailed(
                    job=request.job, uid=request.uid, pod=request.pod, message=message
                )
            )
            await record_outcome(
                worker.store, decision=record, stream=stream_id("migration", job), event=event
            )
        except Fenced:
            raise
        except TransientError as exc:
            worker._retry_later(job, exc, state.retries, what="Eviction of job")
            continue
        state.recorded.add(record.event_id)
        state.retries.pop(job, None)
        (log.info if evicted else log.warning)("PodMigrationJob %s: %s", job, message)


async def _decision_record(store: Any, request: PodEvicted) -> RecordedEvent | None:
    """The committed ``pod.evicted`` of this life of the pod (the latest), or None."""
    history: list[RecordedEvent] = await store.read_stream(stream_id("pod", request.pod.key))
    for record in reversed(history):
        if record.type == "pod.evicted":
            event = record.decode()
            same = isinstance(event, PodEvicted) and event.uid == request.uid
            return record if same else None
    return None


Enacted = tuple[Event, bool, str]  # the outcome to record, whether it was carried out, what to log


async def _carry_out(
    worker: Any,
    requests: list[PodEvicted] | list[QuotaEvicted],
    retries: dict[str, Retry],
    *,
    find: Callable[[Any], Awaitable[RecordedEvent | None]],
    enact: Callable[[Any, RecordedEvent, int], Awaitable[Enacted]],
    what: str,
) -> None:
    """One pass over outstanding pod evictions: each committed decision not answered yet is carried out once, its
    outcome recorded on the pod's stream; a transient failure is retried later with backoff."""
    state: EvictionState = worker.evictions
    now = time.monotonic()
    for key in [k for k in retries if k not in {r.pod.key for r in requests}]:
        retries.pop(key, None)
    for request in requests:
        key = request.pod.key
        retry = retries.get(key)
        if retry is not None and retry.not_before > now:
            continue
        try:
            record = await find(request)
            if record is None or record.event_id in state.recorded:
                continue  # not committed yet, or answered and on its way into the projection
            worker._check(f"Eviction of {key}")
            outcome, done, message = await enact(request, record, (retry.failures if retry else 0) + 1)
            await record_outcome(worker.store, decision=record, stream=stream_id("pod", key), event=outcome)
        except Fenced:
            raise
        except TransientError as exc:
            worker._retry_later(key, exc, retries, what=f"Eviction ({what}) of pod")
            continue
        state.recorded.add(record.event_id)
        retries.pop(key, None)
        (log.info if done else log.warning)("%s (%s): %s", key, what, message)


async def evict_pods_due(worker: Any, requests: list[PodEvicted]) -> None:
    """One pass over the outstanding ``pod.evicted`` decisions (called from the binder's worker step)."""

    async def enact(request: PodEvicted, record: RecordedEvent, attempts: int) -> Enacted:
        evicted, message = await evict(worker.client, request, refused=_refused_type(worker))
        outcome = PodEvictionEnacted(
            pod=request.pod,
            uid=request.uid,
            node=request.node,
            cause=request.cause,
            evicted=evicted,
            message=message,
        )
        return outcome, evicted, message

    async def find(request: PodEvicted) -> RecordedEvent | None:
        return await _decision_record(worker.store, request)

    await _carry_out(
        worker, requests, worker.evictions.pod_retries, find=find, enact=enact, what="pod.evicted"
    )


DISRUPTION_BUDGET = "disruption budget"  # in the Eviction API's 429: a budget allows no disruption now


async def _quota_evict(client: Any, request: QuotaEvicted, refused: type[Exception]) -> tuple[str, str]:
    """As :func:`_post`, with a disruption budget's 429 a final answer."""
    try:
        return await _post(client, request, refused)
    except ApiUnavailable as exc:
        if exc.status == 429 and DISRUPTION_BUDGET in str(exc):
            return "TooManyRequests", str(exc)
        raise


def _of_life(uid: str) -> Callable[[RecordedEvent], bool]:
    return lambda record: record.payload_dict().get("uid", "") == uid


async def evict_quota_due(worker: Any, requests: list[QuotaEvicted], decider: str = "quota-manager") -> None:
    """One pass over the outstanding ``quota.evicted`` decisions (called from the binder's worker step)."""

    async def enact(request: QuotaEvicted, record: RecordedEvent, attempts: int) -> Enacted:
        reason, message = await _quota_evict(worker.client, request, refused=_refused_type(worker))
        common: dict[str, Any] = {
            "pod": request.pod,
            "uid": request.uid,
            "quota": request.quota,
            "decision": record.event_id,
            "message": message,
            "attempts": attempts,
        }
        if reason:
            return QuotaEvictionEnactmentFailed(reason=reason, **common), False, message
        return QuotaEvictionEnacted(**common), True, message

    async def find(request: QuotaEvicted) -> RecordedEvent | None:
        return await latest_decision(
            worker.store, stream_id("pod", request.pod.key), "quota.evicted", decider, _of_life(request.uid)
        )

    await _carry_out(
        worker, requests, worker.evictions.quota_retries, find=find, enact=enact, what="quota.evicted"
    )


def _refused_type(worker: Any) -> type[Exception]:
    from binder.adapters.kube import Refused

    return Refused
