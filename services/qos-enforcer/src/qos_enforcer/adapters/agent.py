"""The node agent: applies qos-enforcer's plans on the node it runs on and records what it did.

Runs next to the processor of a per-node instance (``ALLOT_INSTANCE`` = the node), reading the current plans from
the processor's projection (under the runtime's lock) and recording as ``qos-enforcer-agent@<node>`` (a producer
of its own, so the processor consumes its events as inputs):

- a new plan revision is applied (:class:`qos_enforcer.enforce.Enforcer`) and recorded as ``qos.applied`` with every
  write's read-back outcome; a pod whose plan is gone has its CDI specs removed;
- every ``reconcileSeconds`` a reconcile pass re-reads every planned value; what drifted is written again and
  recorded as ``qos.drift_corrected`` (with the value found); the pass is recorded as ``qos.reconciled`` when it
  found something, and otherwise at most every ``reconcileRecordSeconds``;
- with BE suppression or eviction enabled, node and pod usage is sampled every ``sampleSeconds`` and recorded as
  ``qos.usage_sampled`` when it moved by ``sampleChangePercent`` of capacity, or ``sampleRecordSeconds`` passed;
- on start (restart included) the plans the log says were applied are reconciled (drift corrected, nothing written
  when everything holds) and the others applied: the recorded plan is the state to restore, and applying is
  idempotent.

Settings (``agent:`` in the service's config file; ``ALLOT_QOS_DRY_RUN=1`` also sets ``dryRun``, ``ALLOT_QOS_AGENT=on|off``
``enabled``)::

    agent:
      enabled: true                 # default: true for a per-node instance
      dryRun: false                 # print each plan's writes as JSON lines; write and record nothing
      cgroupFsRoot: /sys/fs/cgroup
      mountinfo: /proc/self/mountinfo
      cdiSpecDir: /var/run/cdi
      resctrlRoot: /sys/fs/resctrl
      procRoot: /proc
      pollSeconds: 0.5
      reconcileSeconds: 30
      retrySeconds: 5               # a plan that does not hold (pod cgroup not there yet) is retried this often
      reconcileRecordSeconds: 600
      sampleSeconds: 5
      sampleRecordSeconds: 60
      sampleChangePercent: 5
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO

import msgspec

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.errors import AlreadyProcessed
from allot_contracts.events import Event, ObjectRef
from allot_contracts.events.qos import (
    QosApplied,
    QosDriftCorrected,
    QosPlan,
    QosReconciled,
    QosUsageSampled,
    WriteOutcome,
)
from allot_eventstore.protocol import EventStore
from qos_enforcer.cgroups.mode import CgroupError, detect
from qos_enforcer.cgroups.paths import kubepods_cgroup
from qos_enforcer.config import AgentSettings, QosConfig, agent_settings, parse_config
from qos_enforcer.enforce import Enforcer, all_ok
from qos_enforcer.processor import QosEnforcer
from qos_enforcer.resctrl import ResctrlFs
from qos_enforcer.sampler import Sampler

log = logging.getLogger("allot.qos-enforcer.agent")

SERVICE = "qos-enforcer"


def producer_for(node: str) -> str:
    """``qos-enforcer-agent@<node>``: not an instance name of the processor, so replay treats it as an input."""
    return f"{SERVICE}-agent@{node}"


class Seen(msgspec.Struct, frozen=True, kw_only=True):
    """The last application of a plan: its life and revision, whether it held, its outcomes, the next retry."""

    uid: str
    revision: int
    ok: bool
    signature: tuple[tuple[str, str], ...] = ()
    retry_at: float = 0.0


class AgentContext(Protocol):
    """What the agent needs from the running service."""

    lock: asyncio.Lock
    ready: asyncio.Event
    store: EventStore

    def processor(self) -> QosEnforcer: ...


class Agent:
    def __init__(
        self,
        node: str,
        context: AgentContext,
        config: QosConfig,
        settings: AgentSettings,
        *,
        enforcer: Enforcer | None = None,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], int] = time.time_ns,
    ) -> None:
        self.node = node
        self.ctx = context
        self.config = config
        self.settings = settings
        self.producer = producer_for(node)
        self.out = out or sys.stdout
        self.clock = clock
        self.wall = wall
        layout, layout_error = None, ""
        if enforcer is None:
            try:
                layout = detect(settings.cgroup_fs_root, settings.mountinfo)
            except CgroupError as error:
                layout_error = str(error)
                log.error("cgroup hierarchy not usable, cgroup writes will be recorded as failed: %s", error)
            resctrl = ResctrlFs(settings.resctrl_root)
            enforcer = Enforcer(
                layout=layout,
                layout_error=layout_error,
                base=kubepods_cgroup(config.cgroup_driver, config.cgroup_root),  # type: ignore[arg-type]
                cdi_dir=settings.cdi_spec_dir,
                hami=config.hami,
                resctrl=None if resctrl.unavailable() else resctrl,
                dry_run=settings.dry_run,
            )
        self.enforcer = enforcer
        self.sampler = Sampler(enforcer.layout, settings.proc_root)
        self.seen: dict[str, Seen] = {}  # pod key (or "node") -> what was last applied there
        self.started = False
        self.last_failed = 0
        self.pending: list[NewEvent] = []
        self.last_reconcile = -1e18
        self.last_reconcile_record = -1e18
        self.last_sample: QosUsageSampled | None = None
        self.last_sample_at = -1e18
        self.sampled_at = -1e18
        self.samples_wanted = config.thresholds.enable

    # -- recording -------------------------------------------------------------------------------------------------

    def _queue(self, stream: str, event: Event, key: str) -> None:
        self.pending.append(
            NewEvent(stream_id=stream, event=event, event_id=derived_event_id(self.producer, key, 0))
        )

    async def flush(self) -> None:
        if not self.pending or self.settings.dry_run:
            self.pending.clear()
            return
        batch, self.pending = self.pending, []
        try:
            await self.ctx.store.append(batch, producer=self.producer)
        except AlreadyProcessed:
            pass
        except Exception as error:  # the database may be away: keep them for the next step
            log.warning("could not record %d agent events (kept for the next try): %s", len(batch), error)
            self.pending = batch + self.pending

    # -- one step --------------------------------------------------------------------------------------------------

    async def _desired(self) -> tuple[dict[str, tuple[ObjectRef, str, QosPlan, int, bool]], Any]:
        async with self.ctx.lock:
            processor = self.ctx.processor()
            return processor.desired(self.node), processor.node_desired(self.node)

    def _print(self, what: str, revision: int, results: list[WriteOutcome]) -> None:
        line = {
            "node": self.node,
            "target": what,
            "revision": revision,
            "writes": [msgspec.to_builtins(r) for r in results],
        }
        print(json.dumps(line, sort_keys=True), file=self.out, flush=True)

    async def _enforce(
        self,
        key: str,
        stream: str,
        ref: ObjectRef | None,
        uid: str,
        revision: int,
        apply: Callable[[bool], list[WriteOutcome]],
        *,
        now: float,
        reconcile_due: bool,
    ) -> tuple[int, int, int]:
        """One plan: applied when new, retried while it does not hold, drift-checked when a reconcile is due.
        Returns (checked, values drifted, failing)."""
        seen = self.seen.get(key)
        if (
            seen is None
            or (seen.uid, seen.revision) != (uid, revision)
            or (not seen.ok and now >= seen.retry_at)
        ):
            retry = seen is not None and (seen.uid, seen.revision) == (uid, revision)
            results = await asyncio.to_thread(apply, False)
            ok = all_ok(results)
            signature = tuple(  # what holds and what does not; written-now and already-there are alike
                (r.target, "holds" if r.outcome in ("applied", "unchanged") else r.outcome) for r in results
            )
            if self.settings.dry_run:
                self._print(key, revision, results)
            elif not retry or seen is None or signature != seen.signature:
                self._queue(
                    stream,
                    QosApplied(
                        node=self.node,
                        pod=ref,
                        uid=uid,
                        revision=revision,
                        trigger="retry" if retry else "plan",
                        ok=ok,
                        results=results,
                    ),
                    f"retry/{key}/{uid}/{revision}/{self.wall()}"
                    if retry
                    else f"applied/{key}/{uid}/{revision}",
                )
            self.seen[key] = Seen(
                uid=uid,
                revision=revision,
                ok=ok,
                signature=signature,
                retry_at=now + self.settings.retry_seconds,
            )
            return (1 if retry else 0), 0, (0 if ok else 1)
        if not reconcile_due or not seen.ok:
            return 0, 0, (0 if seen.ok else 1)
        results = await asyncio.to_thread(apply, True)
        corrected = [r for r in results if r.outcome == "applied"]
        if corrected:
            self._queue(
                stream,
                QosDriftCorrected(node=self.node, pod=ref, uid=uid, revision=revision, corrected=results),
                f"drift/{key}/{uid}/{self.wall()}",
            )
        ok = all_ok(results)
        if not ok:
            self.seen[key] = msgspec.structs.replace(seen, ok=False, retry_at=now)
        return 1, len(corrected), (0 if ok else 1)

    async def step(self) -> None:
        """Apply new revisions, retry failing ones, reconcile when due, sample when due, record what happened."""
        now = self.clock()
        desired, node_plan = await self._desired()
        restart = not self.started
        if restart:  # what the log says was applied: reconciled, not applied again
            self.started = True
            self.seen = {
                key: Seen(uid=uid, revision=applied, ok=applied_ok)
                for key, (_, uid, _, applied, applied_ok) in desired.items()
                if applied
            }
            if node_plan is not None and node_plan[3]:
                self.seen["node"] = Seen(uid="", revision=node_plan[3], ok=node_plan[4])
        reconcile_due = restart or now - self.last_reconcile >= self.settings.reconcile_seconds
        checked = drifted = failed = 0
        for key, (ref, uid, plan, _, _) in desired.items():

            def apply_pod(check: bool, uid: str = uid, plan: QosPlan = plan) -> list[WriteOutcome]:
                return self.enforcer.apply_pod(uid, plan, check_only=check)

            c, d, f = await self._enforce(
                key,
                stream_id("pod", key),
                ref,
                uid,
                plan.revision,
                apply_pod,
                now=now,
                reconcile_due=reconcile_due,
            )
            checked, drifted, failed = checked + c, drifted + d, failed + f
        gone = [key for key in self.seen if key not in desired and key != "node"]
        for key in gone:
            del self.seen[key]
        if gone or restart:
            await asyncio.to_thread(self.enforcer.prune, [entry[1] for entry in desired.values()])
        if node_plan is not None:
            revision, cgroups, groups, _, _ = node_plan

            def apply_node(check: bool) -> list[WriteOutcome]:
                return self.enforcer.apply_node(cgroups, groups, check_only=check)

            c, d, f = await self._enforce(
                "node",
                stream_id("qos", self.node),
                None,
                "",
                revision,
                apply_node,
                now=now,
                reconcile_due=reconcile_due,
            )
            checked, drifted, failed = checked + c, drifted + d, failed + f
        if reconcile_due:
            self.last_reconcile = now
            if (
                drifted
                or failed != self.last_failed
                or now - self.last_reconcile_record >= self.settings.reconcile_record_seconds
            ):
                self.last_reconcile_record, self.last_failed = now, failed
                self._queue(
                    stream_id("qos", self.node),
                    QosReconciled(
                        node=self.node, plans=len(desired), checked=checked, drifted=drifted, failed=failed
                    ),
                    f"reconciled/{self.node}/{self.wall()}",
                )
        if (
            self.samples_wanted
            and self.settings.sample_seconds > 0
            and now - self.sampled_at >= self.settings.sample_seconds
        ):
            self.sampled_at = now
            self._maybe_record_sample(desired, now)
        await self.flush()

    def _maybe_record_sample(
        self, desired: Mapping[str, tuple[ObjectRef, str, QosPlan, int, bool]], now: float
    ) -> None:
        paths = {
            key: next((t.path for t in entry[2].cgroups if t.scope == "pod"), "")
            for key, entry in desired.items()
        }
        sample = self.sampler.sample({k: p for k, p in paths.items() if p}, now)
        if sample is None:
            return
        event = QosUsageSampled(node=self.node, **msgspec.structs.asdict(sample))
        last = self.last_sample
        change = self.settings.sample_change_percent
        moved = last is None or (
            abs(event.cpu_used_milli - last.cpu_used_milli) * 100 >= change * max(event.cpu_capacity_milli, 1)
            or abs(event.memory_used_bytes - last.memory_used_bytes) * 100
            >= change * max(event.memory_capacity_bytes, 1)
            or set(event.pods) != set(last.pods)
        )
        if moved or now - self.last_sample_at >= self.settings.sample_record_seconds:
            self.last_sample, self.last_sample_at = event, now
            self._queue(stream_id("qos", self.node), event, f"sample/{self.node}/{self.wall()}")

    async def run(self, stop: asyncio.Event) -> None:
        await self._wait(stop, self.ctx.ready)
        log.info(
            "node agent for %s started (%s; cgroup %s)",
            self.node,
            "dry run" if self.settings.dry_run else "enforcing",
            self.enforcer.layout.mode if self.enforcer.layout is not None else self.enforcer.layout_error,
        )
        while not stop.is_set():
            try:
                await self.step()
            except Exception:  # one bad step must not stop enforcement; the next one retries
                log.exception("node agent step failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.poll_seconds)
        await self.flush()

    @staticmethod
    async def _wait(stop: asyncio.Event, ready: asyncio.Event) -> None:
        while not stop.is_set() and not ready.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ready.wait(), timeout=0.5)


class _ServiceContext:
    """The running service seen as an :class:`AgentContext`."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.lock = ctx.runtime.lock
        self.ready = ctx.consumer.ready
        self.store = ctx.store

    def processor(self) -> QosEnforcer:
        processor = self._ctx.host.processor
        assert isinstance(processor, QosEnforcer)
        return processor


async def node_agent(ctx: Any, stop: asyncio.Event) -> None:
    """The service extra: the agent of ``ALLOT_INSTANCE``'s node (idle without an instance or when disabled)."""
    config = ctx.settings.config()
    settings = agent_settings(config, os.environ)
    node = ctx.settings.instance
    if not node or not settings.enabled:
        log.info("node agent off (%s)", "no ALLOT_INSTANCE" if not node else "agent.enabled is false")
        await stop.wait()
        return
    agent = Agent(node, _ServiceContext(ctx), parse_config(config), settings)
    await agent.run(stop)
