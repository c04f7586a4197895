"""Pod facts for matching: from the pod as the door read it (``facts_from_pod``), or from a manifest when an event
carries none (``facts_of``; requests are then computed only when the pod names resources to match exactly, since
quantity parsing is the costly part of reading a pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonValue
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.requests import pod_requests
from allot_contracts.objects.reservation_pod import OwnerRef, parse_owner_references, parse_pod_reservation
from allot_reservation.match import PodFacts

__all__ = ["facts_from_pod", "facts_of"]


def facts_from_pod(pod: Pod) -> PodFacts:
    return PodFacts(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        labels=dict(pod.labels),
        owners=tuple(
            OwnerRef(api_version=o.api_version, kind=o.kind, name=o.name, uid=o.uid, controller=o.controller)
            for o in pod.owners
        ),
        requests=dict(pod.requests),
        spec=pod.reservation,
    )


def _map(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def facts_of(manifest: Mapping[str, JsonValue]) -> tuple[PodFacts, list[FieldIssue]]:
    """The pod's facts and the problems of its reservation annotations (empty when well-formed)."""
    meta = manifest.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = _map(meta.get("labels"))
    annotations = meta.get("annotations")
    issues: list[FieldIssue] = []
    spec = parse_pod_reservation(annotations if isinstance(annotations, Mapping) else {}, labels, issues)
    requests: dict[str, int] = {}
    if spec.exact_match:
        pod_spec = manifest.get("spec")
        requests = pod_requests(pod_spec if isinstance(pod_spec, Mapping) else {}, [])
    return (
        PodFacts(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            api_version=str(manifest.get("apiVersion") or "v1"),
            labels=labels,
            owners=parse_owner_references(meta),
            requests=requests,
            spec=spec,
        ),
        issues,
    )
