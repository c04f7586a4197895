"""The binder's second Kubernetes worker: Events, ``PodScheduled`` conditions, PodGroup status and node device
capacity, rendered from the recorded decisions (``binder.notices``) and written to the API server.

It tails the log (the types :class:`binder.notices.Renderer` reads) from its checkpoint ``binder.kube.notices``, so a
restart neither repeats nor misses anything, and writes:

- Events through :class:`binder.adapters.events.EventRecorder` (series, aggregation, spam filter). Events of
  decisions recorded more than ``horizon`` ago (10 minutes: a first start over an old log) are not written; the
  API server would expire them within the hour anyway.
- ``PodScheduled`` with a strategic merge patch on ``pods/{name}/status`` (the pod's other conditions stay), the
  latest per pod; a pod bound or deleted since gets none. 404 (the pod is gone) ends it.
- ``status.nominatedNodeName`` of a preemptor (``binder.nominations``), with a merge patch on ``pods/{name}/status``:
  set after its preemption, cleared (null) when it is placed or gives up; 404 (the pod is gone) ends it.
- PodGroup ``status`` (phase; scheduled, running, succeeded, failed) with a merge patch on
  ``podgroups/{name}/status``; 404 (a gang declared by annotations only, or the PodGroup deleted) ends it.
- the Node's ``status.capacity`` and ``status.allocatable`` device resources and batch/mid resources, and its
  annotations ``node.koordinator.sh/cpu-normalization-ratio`` and ``raw-allocatable``, in one merge patch on
  ``nodes/{name}/status`` (the API server keeps metadata changes made through a Node's status subresource; only its
  spec is reset), as field manager ``allot-binder``, so node-reporter's watch records none of it back (the fields
  that manager owns are Allot's output). Resources and annotations that disappeared are removed; the kubelet's own
  are untouched.

Conditions, status and capacity are *desired state*: kept until written (retried with backoff), the latest wins.
The Node's resources and annotations are the one part of these that decisions change (``node.allocatable_updated``,
``device.reported``/``device.removed``): once a Node's patch is written, each such decision not superseded yet gets
its outcome in the enactment ledger, ``node.status_enacted`` (or ``node.status_enactment_failed`` when the patch is
refused for good, ``NotFound`` for a Node not in the cluster), caused by the decision (``binder.adapters.outcomes``).
Every write first checks the leader's lease (:meth:`allot_runtime.kube.lease.Leadership.check`).

At start the renderer first folds what was recorded up to the checkpoint, writing nothing but keeping the state
later notices depend on (PodGroup members and phases, pod uids, node resources); the PodGroups and Nodes it saw are
written once more (idempotent patches), so a restart neither loses a group's history nor leaves a status stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allot_contracts.envelope import RecordedEvent
from allot_contracts.errors import Fenced, TransientError
from allot_contracts.events import Event, PodBound, PodDeleted, PodSubmitted
from allot_contracts.events.enactment import NodeStatusEnacted, NodeStatusEnactmentFailed
from allot_runtime.kube import BINDER_FIELD_MANAGER
from allot_runtime.kube.client import ApiError, call
from binder.adapters.events import EventRecorder, micro_time
from binder.adapters.outcomes import record_outcome
from binder.nominations import Nominations
from binder.notices import Condition, Notice, Renderer

log = logging.getLogger("allot.binder.notices")

CHECKPOINT = "binder.kube.notices"
POD_STATUS = "/api/v1/namespaces/{namespace}/pods/{name}/status"
POD_GROUP_STATUS = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{namespace}/podgroups/{name}/status"
NODE_STATUS = "/api/v1/nodes/{name}/status"
# the Node's patch names its field manager, so node-reporter's watch knows the fields it sets for Allot's own output
AS_BINDER = (("fieldManager", BINDER_FIELD_MANAGER),)
Query = tuple[tuple[str, str], ...]
# decisions the Node's patch carries out, by what supersedes what: the latest of each group per node
NODE_DECISIONS = {
    "node.allocatable_updated": "allocatable",
    "device.reported": "devices",
    "device.removed": "devices",
}


@dataclass
class NoticeWorker:
    store: Any
    client: Any
    leadership: Any = None  # allot_runtime.kube.lease.Leadership in lease mode
    renderer: Renderer = field(default_factory=Renderer)
    recorder: EventRecorder | None = None
    poll: float = 0.5
    page: int = 2000
    horizon: float = 600.0
    wall: Any = time.time
    position: int = 0
    conditions: dict[str, Condition] = field(default_factory=dict)  # pod -> latest, not written yet
    groups: set[str] = field(default_factory=set)  # PodGroups whose status is not written yet
    nodes: set[str] = field(default_factory=set)  # Nodes whose capacity is not written yet
    written_nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> resources written
    written_annotations: dict[str, dict[str, str]] = field(
        default_factory=dict
    )  # node -> annotations written
    decisions: dict[str, dict[str, RecordedEvent]] = field(default_factory=dict)  # node -> group -> decision
    nominations: Nominations = field(default_factory=Nominations)
    nominated: dict[str, str | None] = field(
        default_factory=dict
    )  # pod -> nominatedNodeName to write (None: clear)
    not_before: float = 0.0
    failures: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.recorder is None:
            instance = getattr(getattr(self.leadership, "config", None), "identity", "") or "allot-scheduler"
            self.recorder = EventRecorder(
                send=self._send, controller=self.renderer.scheduler, instance=instance
            )

    async def _send(
        self, method: str, path: str, body: Mapping[str, object], content_type: str, query: Query = ()
    ) -> Any:
        if self.leadership is not None:
            self.leadership.check(f"{method} {path}")
        return await call(self.client, method, path, body, content_type=content_type, query=query)

    async def run(self, stop: asyncio.Event) -> None:
        self.position = await self.store.get_checkpoint(CHECKPOINT)
        await self.warm_up()
        log.info("writing Events and status from position %d", self.position)
        while not stop.is_set():
            try:
                await self.step()
            except Fenced as exc:
                if self.leadership is not None:
                    await self.leadership.refused(exc, "writing Events and status")
                return
            except (TransientError, ApiError) as exc:
                self.failures += 1
                delay = min(30.0, 0.5 * 2 ** min(self.failures, 6))
                self.not_before = time.monotonic() + delay
                log.warning("Events and status not written (%s); retrying in %.1fs", exc, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.poll)

    async def warm_up(self) -> None:
        """Fold what was recorded up to ``position`` without writing anything but the latest PodGroup status and
        Node resources it leads to (see the module docstring)."""
        if not self.position:
            return
        async for record in self.store.iterate(types=self._interests(), until=self.position):
            self._decided(record)
            event = record.decode()
            self.nominations.fold(event)
            rendered = self.renderer.render(event)
            self.groups.update(rendered.pod_groups)
            self.nodes.update(rendered.nodes)
        self.nominated = dict(self.nominations.nominated())  # written once more (idempotent)

    def _interests(self) -> frozenset[str]:
        return self.renderer.interests | Nominations.interests

    async def step(self) -> None:
        """Fold what was recorded since the last pass, then write what is due."""
        while True:
            records = await self.store.read(after=self.position, types=self._interests(), limit=self.page)
            if not records:
                break
            events: list[tuple[Notice, float]] = []
            for record in records:
                self._decided(record)
                event = record.decode()
                self.nominated.update(self.nominations.fold(event))
                rendered = self.renderer.render(event)
                at = record.recorded_at / 1_000_000
                fresh = self.wall() - at < self.horizon
                events.extend((notice, at) for notice in rendered.notices if fresh)
                if isinstance(event, PodBound | PodDeleted | PodSubmitted):
                    self.conditions.pop(event.pod.key, None)  # bound, gone or a new life: nothing pending
                for condition in rendered.conditions:
                    self.conditions[condition.pod.key] = condition
                self.groups.update(rendered.pod_groups)
                self.nodes.update(rendered.nodes)
            for notice, at in events:
                await self._event(notice, at)
            self.position = records[-1].position
            await self.store.advance_checkpoint(CHECKPOINT, self.position)
            if len(records) < self.page:
                break
        if time.monotonic() >= self.not_before:
            await self._write_state()
            self.failures = 0

    async def _event(self, notice: Notice, at: float) -> None:
        assert self.recorder is not None
        try:
            result = await self.recorder.record(notice, at=at)
        except ApiError as exc:
            if exc.status in (401, 403):
                raise
            result = "failed"
            log.warning("Event %s on %s not written: %s", notice.reason, notice.regarding.name, exc)
        self.counts[result] = self.counts.get(result, 0) + 1

    async def _write_state(self) -> None:
        for key in sorted(self.conditions):
            condition = self.conditions[key]
            await self._patch(
                POD_STATUS.format(namespace=condition.pod.namespace, name=condition.pod.name),
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": condition.status,
                                "reason": condition.reason,
                                "message": condition.message,
                                "lastProbeTime": None,
                                "lastTransitionTime": micro_time(self.wall()).split(".")[0] + "Z",
                            }
                        ]
                    }
                },
                strategic=True,
            )
            self.conditions.pop(key, None)
        for key in sorted(self.nominated):
            namespace, _, name = key.partition("/")
            nomination = {"status": {"nominatedNodeName": self.nominated[key]}}
            await self._patch(POD_STATUS.format(namespace=namespace, name=name), nomination)
            self.nominated.pop(key, None)
        for key in sorted(self.groups):
            status = self.renderer.group_status(key)
            namespace, _, name = key.rpartition("/")
            if status is not None:
                await self._patch(POD_GROUP_STATUS.format(namespace=namespace, name=name), {"status": status})
            self.groups.discard(key)
        for node in sorted(self.nodes):
            resources = self.renderer.node_capacity(node)
            annotations = self.renderer.node_annotations(node)
            body: dict[str, object] = {}
            patch = _changes(self.written_nodes.get(node, {}), resources)
            if patch:
                body["status"] = {"capacity": patch, "allocatable": patch}
            notes = _changes(self.written_annotations.get(node, {}), annotations)
            if notes:
                body["metadata"] = {"annotations": notes}
            unchanged = (
                node in self.written_nodes
                and self.written_nodes[node] == resources
                and self.written_annotations.get(node) == annotations
            )  # a decision that changes nothing the Node shows: answered without a write
            refused = (
                await self._patch(NODE_STATUS.format(name=node), body, query=AS_BINDER)
                if body and not unchanged
                else None
            )
            self.written_nodes[node] = resources
            self.written_annotations[node] = annotations
            self.nodes.discard(node)
            await self._enacted(node, refused)

    def _decided(self, record: RecordedEvent) -> None:
        group = NODE_DECISIONS.get(record.type)
        if group is not None:
            node = str(record.payload_dict().get("name", ""))
            self.decisions.setdefault(node, {})[group] = record  # a newer one supersedes it
            self.nodes.add(node)  # answered even when it changes nothing the Node shows

    async def _enacted(self, node: str, refused: ApiError | None) -> None:
        """The outcome of every decision the Node's patch carried out (docs/kubernetes.md, the enactment ledger)."""
        for decision in sorted(self.decisions.pop(node, {}).values(), key=lambda r: r.position):
            outcome: Event = (
                NodeStatusEnacted(node=node, decision=decision.event_id, attempts=self.failures + 1)
                if refused is None
                else NodeStatusEnactmentFailed(
                    node=node,
                    decision=decision.event_id,
                    reason=refused.reason or str(refused.status),
                    message=str(refused),
                    attempts=self.failures + 1,
                )
            )
            await record_outcome(self.store, decision=decision, stream=decision.stream_id, event=outcome)

    async def _patch(
        self, path: str, patch: Mapping[str, object], *, strategic: bool = False, query: Query = ()
    ) -> ApiError | None:
        """None when written; the refusal when refused for good (404: the object is gone; other 4xx)."""
        kind = "application/strategic-merge-patch+json" if strategic else "application/merge-patch+json"
        try:
            await self._send("PATCH", path, patch, kind, query)
        except ApiError as exc:
            if exc.status in (401, 403) or exc.status >= 500:
                raise
            log.debug("%s not written: %s", path, exc)
            return exc
        return None


def _changes(before: dict[str, str], now: dict[str, str]) -> dict[str, str | None]:
    """A merge patch from what was written to what is wanted: every wanted value, and None for what went away."""
    patch: dict[str, str | None] = {name: None for name in before if name not in now}
    patch.update(now)
    return patch


async def notice_worker(ctx: Any, stop: asyncio.Event) -> None:
    """The binder's second ``Extra`` in Kubernetes mode."""
    from binder.adapters.kube import binder_client

    client = await binder_client(ctx)
    try:
        await NoticeWorker(store=ctx.store, client=client, leadership=getattr(ctx, "leadership", None)).run(
            stop
        )
    finally:
        await client.close()
