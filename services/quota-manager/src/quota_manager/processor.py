"""quota-manager's decisions: admit each pod against its ElasticQuota (the PreFilter/Reserve stage for quota).

Consumes ``quota.applied``/``quota.deleted``, ``pod.submitted`` (to learn requests), ``pod.enqueued`` and
``pod.requeued`` (admission requests), ``pod.unschedulable``/``pod.rejected``/``pod.deleted`` (charges returned),
``pod.observed`` (already-bound pods are charged). Emits ``quota.admitted`` (the pod's request is charged: "used" is
after the charge), ``quota.waiting`` (the quota is full: the pod waits, it is not failed), ``quota.released``, and
``quota.registered``/``quota.rejected``/``quota.removed``.

Admission: ``used + request ≤ max`` on every dimension listed in ``max`` (a dimension absent from ``max`` does not
constrain; Kubernetes ``LessThanOrEqual`` semantics). A pod's quota: label ``quota.scheduling.koordinator.sh/name``,
else the quota named like the pod's namespace, else none (no quota applies). Waiting pods are admitted in arrival
order when quota frees.
"""

from __future__ import annotations

from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    FieldIssue,
    ObjectRef,
    PodDeleted,
    PodEnqueued,
    PodObserved,
    PodRejected,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    QuotaAdmitted,
    QuotaApplied,
    QuotaDeleted,
    QuotaRegistered,
    QuotaRejected,
    QuotaReleased,
    QuotaRemoved,
    QuotaWaiting,
)
from allot_contracts.kube import labels, pod_requests
from allot_contracts.quantity import QuantityError, format_quantity, to_canonical
from allot_runtime.processor import Emit

QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"


def _fmt(values: dict[str, int]) -> dict[str, str]:
    return {k: format_quantity(k, v) for k, v in sorted(values.items())}


def _text(values: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {format_quantity(k, v)}" for k, v in sorted(values.items())) + "}"


class QuotaManager:
    name: ClassVar[str] = "quota-manager"
    interests: ClassVar[frozenset[str]] = frozenset(
        {"quota.applied", "quota.deleted", "pod.submitted", "pod.observed", "pod.enqueued", "pod.requeued",
         "pod.unschedulable", "pod.rejected", "pod.deleted"}
    )

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.quotas: dict[str, dict[str, int]] = {}  # name -> max
        self.used: dict[str, dict[str, int]] = {}
        self.charges: dict[str, tuple[str, dict[str, int]]] = {}  # pod -> (quota, request)
        self.waiting: dict[str, int] = {}  # pod -> attempt, insertion (arrival) order
        self.manifests: dict[str, dict[str, Any]] = {}

    # -- helpers ----------------------------------------------------------------------------------------------

    def quota_of(self, pod: str) -> str:
        manifest = self.manifests.get(pod, {})
        named = labels(manifest).get(QUOTA_LABEL, "")
        if named and named in self.quotas:
            return named
        namespace = pod.split("/", 1)[0]
        return namespace if namespace in self.quotas else ""

    def _request(self, pod: str, quota: str) -> dict[str, int]:
        req = pod_requests(self.manifests.get(pod, {}))
        limit = self.quotas.get(quota)
        return {k: v for k, v in req.items() if limit is None or k in limit}

    def _charge(self, pod: str, quota: str, request: dict[str, int]) -> None:
        self._uncharge(pod)
        self.charges[pod] = (quota, request)
        used = self.used.setdefault(quota, {})
        for k, v in request.items():
            used[k] = used.get(k, 0) + v

    def _uncharge(self, pod: str) -> tuple[str, dict[str, int]] | None:
        charge = self.charges.pop(pod, None)
        if charge is not None:
            quota, request = charge
            used = self.used.setdefault(quota, {})
            for k, v in request.items():
                used[k] = used.get(k, 0) - v
        return charge

    # -- evolve ----------------------------------------------------------------------------------------------

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case PodSubmitted(pod=pod, manifest=manifest):
                self.manifests[pod.key] = manifest
            case PodObserved(pod=pod, manifest=manifest):
                self.manifests[pod.key] = manifest
                quota = self.quota_of(pod.key)
                self._charge(pod.key, quota, self._request(pod.key, quota))
            case PodDeleted(pod=pod):
                self._uncharge(pod.key)
                self.waiting.pop(pod.key, None)
                self.manifests.pop(pod.key, None)
            case QuotaRegistered(quota=ref, max=maximum):
                self.quotas[ref.name] = {k: to_canonical(k, v) for k, v in maximum.items()}
            case QuotaRemoved(quota=ref):
                self.quotas.pop(ref.name, None)
            case QuotaAdmitted(pod=pod, quota=quota):
                self.waiting.pop(pod.key, None)
                self._charge(pod.key, quota, self._request(pod.key, quota))
            case QuotaWaiting(pod=pod, attempt=attempt):
                self.waiting[pod.key] = attempt
            case QuotaReleased(pod=pod):
                self._uncharge(pod.key)
            case _:
                pass

    # -- decide ----------------------------------------------------------------------------------------------

    def _admit(self, pod: ObjectRef, attempt: int, used: dict[str, dict[str, int]]) -> Event:
        quota = self.quota_of(pod.key)
        request = self._request(pod.key, quota)
        limit = self.quotas.get(quota, {})
        current = used.get(quota, {})
        after = {k: current.get(k, 0) + v for k, v in request.items()}
        exceeded = sorted(k for k, v in after.items() if k in limit and v > limit[k])
        if exceeded:
            message = (
                f"Insufficient quotas, quotaName: {quota}, runtime: {_text(limit)}, used: {_text(current)}, "
                f"pod's request: {_text(request)}, exceedDimensions: [{', '.join(exceeded)}]"
            )
            return QuotaWaiting(pod=pod, attempt=attempt, quota=quota, message=message,
                                detail={"exceedDimensions": exceeded})
        merged = dict(current)
        merged.update(after)
        used[quota] = merged
        return QuotaAdmitted(pod=pod, attempt=attempt, quota=quota, request=_fmt(request), used=_fmt(merged),
                             limit=_fmt(limit))

    def _drain_waiting(self, used: dict[str, dict[str, int]], skip: str = "") -> list[Emit]:
        out: list[Emit] = []
        for key, attempt in list(self.waiting.items()):
            if key == skip or key not in self.manifests:
                continue
            namespace, name = key.split("/", 1)
            decision = self._admit(ObjectRef(namespace=namespace, name=name), attempt, used)
            if isinstance(decision, QuotaAdmitted):
                out.append(Emit(stream_id=stream_id("pod", key), event=decision))
        return out

    def _release(self, pod: ObjectRef, reason: str) -> list[Emit]:
        charge = self.charges.get(pod.key)
        if charge is None:
            return []
        quota, request = charge
        used = {q: dict(v) for q, v in self.used.items()}
        after = {k: used.get(quota, {}).get(k, 0) - v for k, v in request.items()}
        used.setdefault(quota, {}).update(after)
        released = Emit(
            stream_id=stream_id("pod", pod.key),
            event=QuotaReleased(pod=pod, quota=quota, request=_fmt(request), used=_fmt(used[quota]), reason=reason),
        )
        return [released, *self._drain_waiting(used, skip=pod.key)]

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case PodEnqueued(pod=pod, attempt=attempt) | PodRequeued(pod=pod, attempt=attempt):
                if pod.key not in self.manifests:
                    return []
                used = {q: dict(v) for q, v in self.used.items()}
                if pod.key in self.charges:  # a requeue of a pod still charged: re-admit from scratch
                    quota, request = self.charges[pod.key]
                    used[quota] = {k: used.get(quota, {}).get(k, 0) - request.get(k, 0) for k in used.get(quota, {})}
                return [Emit(stream_id=stream_id("pod", pod.key), event=self._admit(pod, attempt, used))]
            case PodUnschedulable(pod=pod):
                return self._release(pod, "unschedulable")
            case PodRejected(pod=pod):
                return self._release(pod, "rejected")
            case PodDeleted(pod=pod):
                # evolve already returned the charge; admit whoever now fits.
                used = {q: dict(v) for q, v in self.used.items()}
                return self._drain_waiting(used)
            case QuotaApplied(quota=ref, manifest=manifest):
                maximum, minimum, issues = _parse_quota(manifest)
                if issues:
                    return [Emit(stream_id=stream_id("quota", ref.key), event=QuotaRejected(quota=ref, errors=issues))]
                return [Emit(stream_id=stream_id("quota", ref.key),
                             event=QuotaRegistered(quota=ref, max=_fmt(maximum), min=_fmt(minimum)))]
            case QuotaDeleted(quota=ref):
                if ref.name not in self.quotas:
                    return []
                return [Emit(stream_id=stream_id("quota", ref.key), event=QuotaRemoved(quota=ref))]
            case _:
                return []

    def snapshot(self) -> dict[str, Any]:
        return {
            "quotas": {q: {"max": _fmt(m), "used": _fmt({k: v for k, v in self.used.get(q, {}).items() if v})}
                       for q, m in sorted(self.quotas.items())},
            "charges": {p: [q, _fmt(r)] for p, (q, r) in sorted(self.charges.items())},
            "waiting": sorted(self.waiting),
        }


def _parse_quota(manifest: dict[str, Any]) -> tuple[dict[str, int], dict[str, int], list[FieldIssue]]:
    issues: list[FieldIssue] = []
    spec = manifest.get("spec") or {}
    out: dict[str, dict[str, int]] = {"max": {}, "min": {}}
    for field in ("max", "min"):
        values = spec.get(field) or {}
        if not isinstance(values, dict):
            issues.append(FieldIssue(path=f"spec.{field}", message="must be a mapping of resource to quantity"))
            continue
        for k, v in values.items():
            try:
                amount = to_canonical(str(k), v)
            except QuantityError as exc:
                issues.append(FieldIssue(path=f"spec.{field}[{k}]", message=str(exc)))
                continue
            if amount < 0:
                issues.append(FieldIssue(path=f"spec.{field}[{k}]", message=f"value < 0: {v!r}"))
            out[field][str(k)] = amount
    if "max" not in spec:
        issues.append(FieldIssue(path="spec.max", message="is required"))
    for k, v in out["min"].items():
        if k not in out["max"]:
            issues.append(FieldIssue(path=f"spec.min[{k}]", message="is included in min, which is not included in max"))
        elif v > out["max"][k]:
            issues.append(FieldIssue(path=f"spec.min[{k}]", message=f"min {v} > max {out['max'][k]}"))
    return out["max"], out["min"], issues
