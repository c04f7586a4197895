"""Quota chargeback: GPU-hours, GPU-memory-hours and CPU-hours per quota, namespace or workload over a window of
the log, split into what was used within the quota's min (own) and what was borrowed.

A pure function of the recorded events and the window (``allot report usage``): time is only the events'
``recorded_at``, so the same log and window always give the same report.

What each pod used, and when:

- a pod holds resources from its placement (``pod.placed``, or its decision in ``gang.group_placed``) until its
  release (``pod.released``, or ``pod.deleted`` when no release follows); a pod still holding at ``until`` is
  counted up to ``until``, and what it held before ``since`` is not counted;
- GPUs are the placement's GPU devices, each counted as its ``gpu-core`` share (a whole card is 1, a 50 % share of
  a card 0.5; a device without a core share counts its memory ratio, else 1); GPU memory is the devices'
  ``gpu-memory`` (GiB); CPUs are the placement's ``cpu`` request (cores);
- the borrowed part of each dimension is fixed at admission (``quota.admitted`` or the member's record in
  ``quota.group_admitted``): the amount the pod's quota borrowed above its min for that pod (its first borrow fact)
  over the pod's request in that dimension. GPUs follow ``nvidia.com/gpu`` (else ``koordinator.sh/gpu-core``,
  else ``koordinator.sh/gpu-memory-ratio``), GPU memory follows ``koordinator.sh/gpu-memory`` (else the GPU
  share), CPUs follow ``cpu``. A dimension the quota does not govern is all own.

A pod's workload is its controller (``ownerReferences`` with ``controller: true``, as ``Kind/name``), else its gang
(``PodGroup/name``), else the pod itself (``Pod/name``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from allot_contracts.events._base import Event
from allot_contracts.quantity import parse_quantity

__all__ = ["BY", "USAGE_TYPES", "UsageFold", "UsageRow", "Window", "usage"]

By = Literal["quota", "namespace", "workload"]
BY: tuple[By, ...] = ("quota", "namespace", "workload")

_US_PER_HOUR = 3_600_000_000
_GIB = 1 << 30
_GPU_DIMS = ("nvidia.com/gpu", "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio")
_GPU_MEM_DIMS = ("koordinator.sh/gpu-memory",)
_GANG_KEYS = ("pod-group.scheduling.sigs.k8s.io", "gang.scheduling.koordinator.sh/name")


@dataclass(frozen=True)
class Window:
    since_us: int
    until_us: int


@dataclass(frozen=True)
class UsageRow:
    """One group's usage over the window; ``*_borrowed`` is part of the total (own = total − borrowed)."""

    key: str
    pods: int
    gpu_hours: Fraction
    gpu_hours_borrowed: Fraction
    gpu_mem_gib_hours: Fraction
    gpu_mem_gib_hours_borrowed: Fraction
    cpu_hours: Fraction
    cpu_hours_borrowed: Fraction


@dataclass
class _Pod:
    namespace: str
    workload: str
    quota: str = ""
    borrowed: dict[str, Fraction] = field(default_factory=dict)  # dimension → borrowed share of the request
    start_us: int | None = None
    held: tuple[Fraction, Fraction, Fraction] = (Fraction(0), Fraction(0), Fraction(0))  # gpus, GiB, cores


def _workload(pod: str, manifest: Mapping[str, object]) -> str:
    meta = manifest.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") and ref.get("name"):
            return f"{ref['kind']}/{ref['name']}"
    for source in (meta.get("labels"), meta.get("annotations")):
        if isinstance(source, dict):
            for key in _GANG_KEYS:
                if source.get(key):
                    return f"PodGroup/{source[key]}"
    return f"Pod/{pod.split('/', 1)[-1]}"


def _borrowed(
    quota: str, request: Mapping[str, str], facts: Iterable[Mapping[str, object]]
) -> dict[str, Fraction]:
    """Dimension → share of the pod's request its quota borrowed (the first borrow fact at the pod's own quota)."""
    out: dict[str, Fraction] = {}
    for fact in facts:
        d = str(fact.get("dimension", ""))
        if fact.get("direction") != "borrow" or fact.get("quota") != quota or d in out or d not in request:
            continue
        asked = parse_quantity(request[d])
        if asked > 0:
            out[d] = min(Fraction(1), parse_quantity(str(fact.get("amount", "0"))) / asked)
    return out


def _share(borrowed: Mapping[str, Fraction], dims: Iterable[str], fallback: Fraction) -> Fraction:
    for d in dims:
        if d in borrowed:
            return borrowed[d]
    return fallback


def _held(allocation: Any) -> tuple[Fraction, Fraction, Fraction]:
    gpus, mem = Fraction(0), Fraction(0)
    for device in allocation.devices.get("gpu", ()):
        res = device.resources
        if "koordinator.sh/gpu-core" in res:
            gpus += Fraction(res["koordinator.sh/gpu-core"], 100)
        elif "koordinator.sh/gpu-memory-ratio" in res:
            gpus += Fraction(res["koordinator.sh/gpu-memory-ratio"], 100)
        else:
            gpus += 1
        mem += Fraction(res.get("koordinator.sh/gpu-memory", 0), _GIB)
    return gpus, mem, Fraction(allocation.requests.get("cpu", 0), 1000)


class _Ledger:
    def __init__(self, window: Window, by: By) -> None:
        self.window, self.by = window, by
        self.pods: dict[str, _Pod] = {}
        self.sums: dict[str, list[Fraction]] = {}
        self.members: dict[str, set[str]] = {}

    def pod(self, key: str) -> _Pod:
        if key not in self.pods:
            self.pods[key] = _Pod(
                namespace=key.split("/", 1)[0] if "/" in key else "", workload=_workload(key, {})
            )
        return self.pods[key]

    def admit(
        self, key: str, quota: str, request: Mapping[str, str], facts: Iterable[Mapping[str, object]]
    ) -> None:
        p = self.pod(key)
        p.quota, p.borrowed = quota, _borrowed(quota, request, facts)

    def place(self, key: str, at: int, allocation: Any) -> None:
        self.close(key, at)
        if allocation is not None:
            p = self.pod(key)
            p.start_us, p.held = at, _held(allocation)

    def close(self, key: str, at: int) -> None:
        p = self.pods.get(key)
        if p is None or p.start_us is None:
            return
        start, end = max(p.start_us, self.window.since_us), min(at, self.window.until_us)
        p.start_us = None
        if end <= start:
            return
        hours = Fraction(end - start, _US_PER_HOUR)
        gpu_b = _share(p.borrowed, _GPU_DIMS, Fraction(0))
        shares = (gpu_b, _share(p.borrowed, _GPU_MEM_DIMS, gpu_b), p.borrowed.get("cpu", Fraction(0)))
        group = {"quota": p.quota or "-", "namespace": p.namespace or "-", "workload": p.workload}[self.by]
        if self.by == "workload":
            group = f"{p.namespace}/{p.workload}" if p.namespace else p.workload
        sums = self.sums.setdefault(group, [Fraction(0)] * 6)
        for i, (amount, share) in enumerate(zip(p.held, shares, strict=True)):
            sums[2 * i] += amount * hours
            sums[2 * i + 1] += amount * hours * share
        self.members.setdefault(group, set()).add(key)


class UsageFold:
    """:func:`usage` one event at a time, for a reader that streams the log (pages of it) rather than holding the
    window: what it keeps is one small record per pod and one sum per group, however many events the window spans."""

    def __init__(self, window: Window, by: By = "quota") -> None:
        self.window = window
        self._ledger = _Ledger(window, by)

    def add(self, at: int, event: Event) -> bool:
        """Fold the event recorded at ``at`` (µs, in log order); False once the window is over (``at`` after its end:
        the event is not folded, and no later one needs to be)."""
        from allot_contracts.events.gangs import GangGroupPlaced, QuotaGroupAdmitted
        from allot_contracts.events.inputs import PodDeleted, PodObserved, PodSubmitted
        from allot_contracts.events.pods import PodPlaced, PodReleased
        from allot_contracts.events.quota import QuotaAdmitted

        if at > self.window.until_us:
            return False
        ledger = self._ledger
        match event:
            case PodSubmitted(pod=ref, manifest=manifest) | PodObserved(pod=ref, manifest=manifest):
                ledger.close(ref.key, at)
                ledger.pods[ref.key] = _Pod(namespace=ref.namespace, workload=_workload(ref.key, manifest))
            case QuotaAdmitted(pod=ref, quota=quota, request=request, detail=detail):
                ledger.admit(ref.key, quota, request, detail.borrow if detail else [])
            case QuotaGroupAdmitted(detail=detail) if detail is not None:
                for key, member in detail.members.items():
                    ledger.admit(key, member.quota, member.request, member.borrow)
            case PodPlaced(pod=ref, decision=decision):
                ledger.place(ref.key, at, decision.allocation)
            case GangGroupPlaced(decisions=decisions):
                for key, decision in decisions.items():
                    ledger.place(key, at, decision.allocation)
            case PodReleased(pod=ref) | PodDeleted(pod=ref):
                ledger.close(ref.key, at)
            case _:
                pass
        return True

    def rows(self) -> list[UsageRow]:
        """The rows for what was folded, every pod still holding counted up to the window's end."""
        ledger = self._ledger
        for key in list(ledger.pods):
            ledger.close(key, self.window.until_us)
        return [
            UsageRow(group, len(ledger.members[group]), *sums) for group, sums in sorted(ledger.sums.items())
        ]


def usage(events: Iterable[tuple[int, Event]], window: Window, by: By = "quota") -> list[UsageRow]:
    """Usage per ``by`` group over ``window`` from the log's events: ``(recorded_at in µs, event)`` in log order."""
    fold = UsageFold(window, by)
    for at, event in events:
        if not fold.add(at, event):
            break
    return fold.rows()


USAGE_TYPES = (
    "pod.submitted",
    "pod.observed",
    "quota.admitted",
    "quota.group_admitted",
    "pod.placed",
    "gang.group_placed",
    "pod.released",
    "pod.deleted",
)
