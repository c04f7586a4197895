"""Kubernetes Events as kube-scheduler's event library writes them: deduplicated into series, similar ones
aggregated, and rate-limited per object.

- **Series.** An Event identical to one written in the last 6 minutes (same object, type, reason, action, note,
  controller) is not created again: the existing one is patched with ``series: {count, lastObservedTime}``
  (``events.k8s.io/v1``).
- **Aggregation.** When an object gets 10 Events in 10 minutes that differ only in their note, the next ones are
  written as one Event whose note is ``(combined from similar events): <latest note>`` (client-go's aggregator).
- **Spam filter.** A token bucket per object: 25 Events at once, then one every 5 minutes; Events beyond are dropped
  and counted (client-go's ``EventSourceObjectSpamFilter`` defaults).

Events are best effort, as upstream: a write that fails is retried a few times and then dropped (they expire after
an hour anyway); the log keeps the decisions they describe for good.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from allot_runtime.kube.client import ApiError
from binder.notices import NAME_LIMIT, Notice, fit_note

EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
SERIES_WINDOW = 6 * 60.0
AGGREGATE_WINDOW = 10 * 60.0
AGGREGATE_AFTER = 10
BURST = 25
REFILL_EVERY = 5 * 60.0
COMBINED = "(combined from similar events): "

Send = Callable[[str, str, Mapping[str, object], str], Awaitable[Any]]  # (method, path, body, content type)


def micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class _Written:
    name: str
    namespace: str
    count: int
    at: float


@dataclass
class EventRecorder:
    """Writes :class:`Notice` s as ``events.k8s.io/v1`` Events through ``send`` (the worker's guarded API call)."""

    send: Send
    controller: str = "allot-scheduler"
    instance: str = "allot-scheduler"
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    buckets: dict[tuple[str, ...], _Bucket] = field(default_factory=dict)
    similar: dict[tuple[str, ...], list[tuple[float, str]]] = field(default_factory=dict)
    series: dict[tuple[str, ...], _Written] = field(default_factory=dict)
    dropped: int = 0

    def _allow(self, obj: tuple[str, ...], now: float) -> bool:
        bucket = self.buckets.get(obj)
        if bucket is None:
            bucket = self.buckets[obj] = _Bucket(tokens=BURST, at=now)
        bucket.tokens = min(BURST, bucket.tokens + (now - bucket.at) / REFILL_EVERY)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _aggregate(self, key: tuple[str, ...], note: str, now: float) -> str:
        recent = [(t, n) for t, n in self.similar.get(key, []) if now - t < AGGREGATE_WINDOW]
        if note not in {n for _, n in recent}:
            recent.append((now, note))
        self.similar[key] = recent
        return fit_note(COMBINED + note) if len({n for _, n in recent}) > AGGREGATE_AFTER else fit_note(note)

    async def record(self, notice: Notice, *, at: float) -> str:
        """Write one notice (``at``: when its decision was recorded, seconds since the epoch). Returns what was
        done: ``created``, ``series`` (an existing Event patched), ``dropped`` (spam filter)."""
        now = self.clock()
        ref = notice.regarding
        obj = (ref.kind, ref.namespace, ref.name, ref.uid)
        if not self._allow(obj, now):
            self.dropped += 1
            return "dropped"
        similar = (*obj, notice.type, notice.reason, notice.action)
        note = self._aggregate(similar, notice.note, now)
        key = (*similar, note)
        for stale in [k for k, w in self.series.items() if now - w.at >= SERIES_WINDOW]:
            self.series.pop(stale, None)
        written = self.series.get(key)
        namespace = ref.namespace or "default"
        if written is not None:
            written.count += 1
            written.at = now
            patch = {"series": {"count": written.count, "lastObservedTime": micro_time(self.wall())}}
            try:
                await self.send(
                    "PATCH",
                    f"{EVENTS.format(namespace=written.namespace)}/{written.name}",
                    patch,
                    "application/merge-patch+json",
                )
                return "series"
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self.series.pop(key, None)  # expired on the server: write it anew
        # client-go names an Event <object>.<time in ns, hex>; two decisions recorded in one append share the time,
        # so the reason and note are mixed in (the same decision written again keeps its name: AlreadyExists)
        suffix = f".{int(at * 1e9):x}{zlib.crc32(f'{notice.reason}/{note}'.encode()):08x}"
        # the name is a DNS subdomain of at most 253 characters: a long object name is cut (at a label's end)
        name = ref.name[: NAME_LIMIT - len(suffix)].rstrip("-.") + suffix
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": micro_time(at),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": notice.action,
            "reason": notice.reason,
            "regarding": ref.ref(),
            "note": note,
            "type": notice.type,
        }
        try:
            await self.send("POST", EVENTS.format(namespace=namespace), body, "application/json")
        except ApiError as exc:
            if exc.status != 409:  # AlreadyExists: written before a restart or a lost answer
                raise
        self.series[key] = _Written(name=name, namespace=namespace, count=1, at=now)
        return "created"
