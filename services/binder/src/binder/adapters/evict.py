"""Kubernetes mode: the Eviction API calls behind PodMigrationJobs.

For every outstanding ``migration.eviction_requested`` (:mod:`binder.evictions`), once its event is committed in the
log, the worker POSTs ``/api/v1/namespaces/{ns}/pods/{name}/eviction`` (``policy/v1`` Eviction, the job's
``deleteOptions`` with a uid precondition on the pod's life) and records the answer as producer ``binder.kube`` with
an id derived from the request's: ``migration.evicted`` (accepted; also 404 and a failed uid precondition: that life
of the pod is already gone) or ``migration.eviction_failed`` (refused for good). A PodDisruptionBudget that does not
allow the eviction now (429) is retried with backoff, as are transport errors and 5xx; 401/403 are retried too and
logged as errors (RBAC: ``create pods/eviction``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from allot_contracts.envelope import NewEvent, RecordedEvent, derived_event_id, stream_id
from allot_contracts.errors import Fenced, TransientError
from allot_contracts.events import MigrationEvicted, MigrationEvictionFailed, MigrationEvictionRequested
from allot_runtime.kube.client import ApiError, call

log = logging.getLogger("allot.binder.kube")

PRODUCER = "binder.kube"
DECIDER = "reservation-manager"  # the producer of migration.eviction_requested
EVICTION = "/api/v1/namespaces/{namespace}/pods/{name}/eviction"


@dataclass
class EvictionState:
    recorded: set[str] = field(default_factory=set)  # request event ids answered
    retries: dict[str, Any] = field(default_factory=dict)  # job -> backoff (the worker's _Retry)


def eviction_body(request: MigrationEvictionRequested) -> dict[str, Any]:
    options = dict(request.delete_options)
    if request.pod_uid:
        options["preconditions"] = {**(options.get("preconditions") or {}), "uid": request.pod_uid}
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": request.pod.name, "namespace": request.pod.namespace},
        "deleteOptions": options,
    }


async def evict(
    client: Any, request: MigrationEvictionRequested, refused: type[Exception]
) -> tuple[bool, str]:
    """``(evicted, message)``; raises ``TransientError`` when there is no final answer yet."""
    path = EVICTION.format(namespace=request.pod.namespace, name=request.pod.name)
    try:
        await call(client, "POST", path, eviction_body(request))
    except ApiError as exc:
        if exc.status in (401, 403):
            raise refused(
                f"the API server refused the Eviction ({exc}): check the binder's RBAC (create pods/eviction)"
            ) from exc
        if exc.status == 404 or (exc.status == 409 and "precondition" in exc.message.lower()):
            return True, f"pod {request.pod.key} is already gone ({exc})"
        return False, f"evicting {request.pod.key} failed: {exc}"
    return True, "evicted"


async def _request_record(
    store: Any, decider: str, request: MigrationEvictionRequested
) -> RecordedEvent | None:
    history: list[RecordedEvent] = await store.read_stream(stream_id("migration", request.job.name))
    for record in reversed(history):
        if record.type == "migration.eviction_requested" and record.producer == decider:
            event = record.decode()
            same = isinstance(event, MigrationEvictionRequested) and event.pod_uid == request.pod_uid
            return record if same else None
    return None


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
            new = NewEvent(
                stream_id=stream_id("migration", job),
                event=event,
                event_id=derived_event_id(PRODUCER, record.event_id, 0),
                causation_id=record.event_id,
                correlation_id=record.correlation_id or record.event_id,
            )
            await worker.store.append([new], producer=PRODUCER)
        except Fenced:
            raise
        except TransientError as exc:
            worker._retry_later(job, exc, state.retries, what="Eviction of job")
            continue
        state.recorded.add(record.event_id)
        state.retries.pop(job, None)
        (log.info if evicted else log.warning)("PodMigrationJob %s: %s", job, message)


def _refused_type(worker: Any) -> type[Exception]:
    from binder.adapters.kube import Refused

    return Refused
