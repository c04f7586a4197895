"""Per-pod timelines read from the log: when each stage of a pod's path was recorded, and the figures derived from
them (throughput, submit→bound latency, per-hop latency). Used by ``allot bench e2e``; pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from allot_contracts.envelope import RecordedEvent

# A plain pod's path through the services, one event per hop (docs/architecture.md).
PATH = ("pod.submitted", "quota.admitted", "reservation.resolved", "pod.placed", "pod.bound", "qos.recorded")
TERMINAL = ("pod.bound", "pod.unschedulable", "pod.rejected")
WATCHED = tuple(sorted({*PATH, *TERMINAL, "pod.released"}))


class Hop(TypedDict):
    """One hop of the path: its median and 99th percentile (ms), over ``n`` pods."""

    p50_ms: float
    p99_ms: float
    n: int


class Latency(TypedDict):
    """Submit→bound over the ``bound`` pods (ms)."""

    bound: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


class Timelines:
    """The first time (µs) each watched event type was recorded for each pod stream of interest."""

    def __init__(self, pods: Iterable[str]) -> None:
        self.times: dict[str, dict[str, int]] = {f"pod:{key}": {} for key in pods}
        self.terminal: dict[str, str] = {}

    def feed(self, records: Iterable[RecordedEvent]) -> None:
        for record in records:
            seen = self.times.get(record.stream_id)
            if seen is None or record.type in seen:
                continue
            seen[record.type] = record.recorded_at
            if record.type in TERMINAL and record.stream_id not in self.terminal:
                self.terminal[record.stream_id] = record.type

    @property
    def done(self) -> bool:
        return len(self.terminal) == len(self.times)

    def released(self) -> int:
        return sum(1 for seen in self.times.values() if "pod.released" in seen)

    def outcomes(self) -> dict[str, int]:
        out = {kind.split(".", 1)[1]: 0 for kind in TERMINAL}
        for kind in self.terminal.values():
            out[kind.split(".", 1)[1]] += 1
        out["pending"] = len(self.times) - len(self.terminal)
        return out

    def span_s(self) -> float:
        """Seconds from the first submission to the last terminal decision."""
        starts = [seen["pod.submitted"] for seen in self.times.values() if "pod.submitted" in seen]
        ends = [self.times[stream][kind] for stream, kind in self.terminal.items()]
        if not starts or not ends:
            return 0.0
        return (max(ends) - min(starts)) / 1e6

    def submit_span_s(self) -> float:
        starts = [seen["pod.submitted"] for seen in self.times.values() if "pod.submitted" in seen]
        return (max(starts) - min(starts)) / 1e6 if starts else 0.0

    def latencies_ms(self, until: str = "pod.bound") -> list[float]:
        return [
            (seen[until] - seen["pod.submitted"]) / 1e3
            for seen in self.times.values()
            if until in seen and "pod.submitted" in seen
        ]

    def hops(self) -> dict[str, Hop]:
        """p50 / p99 (ms) of every hop of the path, over the pods that made it."""
        out: dict[str, Hop] = {}
        for earlier, later in zip(PATH, PATH[1:]):
            values = [
                (seen[later] - seen[earlier]) / 1e3
                for seen in self.times.values()
                if earlier in seen and later in seen
            ]
            out[f"{earlier}→{later}"] = {
                "p50_ms": round(percentile(values, 0.5), 1),
                "p99_ms": round(percentile(values, 0.99), 1),
                "n": len(values),
            }
        return out

    def latency_summary(self) -> Latency:
        bound = self.latencies_ms()
        return {
            "bound": len(bound),
            "p50_ms": round(percentile(bound, 0.5), 1),
            "p99_ms": round(percentile(bound, 0.99), 1),
            "max_ms": round(max(bound, default=0.0), 1),
        }
