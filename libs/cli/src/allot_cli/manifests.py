"""From YAML documents to input events: what ``allot apply`` records and what ``allot sim run`` feeds the pipeline.

Accepted documents (multi-document YAML, applied in order):

==========================================  ==================================================================
apiVersion / kind                           recorded as
==========================================  ==================================================================
v1 Node                                     ``node.applied``
scheduling.koordinator.sh/v1alpha1 Device   ``device.applied``
topology.node.k8s.io/v1alpha1               ``topology.applied``
NodeResourceTopology
v1 Pod (no ``spec.nodeName``)               ``pod.submitted``
v1 Pod (``spec.nodeName`` set)              ``pod.observed`` (already bound, with its allocation annotations)
scheduling.sigs.k8s.io/v1alpha1             ``quota.applied``
ElasticQuota
scheduling.sigs.k8s.io/v1alpha1 PodGroup    ``podgroup.applied``
quota.koordinator.sh/v1alpha1               ``quotaprofile.applied``
ElasticQuotaProfile
Reservation, NodeMetric                     ``object.ignored`` (accepted and recorded; reported as ignored)
ElasticQuotaProfile
allot.dev/v1 Delete ``{kind,namespace,name}``  the kind's ``*.deleted`` event
allot.dev/v1 AdvanceClock ``{seconds}``     the simulator's clock moves (a running stack has its own clock)
==========================================  ==================================================================

Admission: every document is validated before anything is recorded (one validator per kind, the same code the
services run), and errors name the document, the field path and the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from allot_cli.errors import UsageError
from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    DeviceApplied,
    DeviceDeleted,
    Event,
    FieldIssue,
    NodeApplied,
    NodeDeleted,
    ObjectIgnored,
    ObjectRef,
    PodDeleted,
    PodGroupApplied,
    PodGroupDeleted,
    PodObserved,
    PodSubmitted,
    QuotaApplied,
    QuotaDeleted,
    QuotaProfileApplied,
    QuotaProfileDeleted,
    TopologyApplied,
    TopologyDeleted,
)
from allot_contracts.kube import pod_requests_checked, storage_issues
from node_reporter.validate import validate_device, validate_node, validate_topology

IGNORED_KINDS = {
    ("scheduling.koordinator.sh/v1alpha1", "Reservation"),
    ("slo.koordinator.sh/v1alpha1", "NodeMetric"),
}
KNOWN = {
    ("v1", "Node"),
    ("v1", "Pod"),
    ("scheduling.koordinator.sh/v1alpha1", "Device"),
    ("topology.node.k8s.io/v1alpha1", "NodeResourceTopology"),
    ("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota"),
    ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup"),
    ("quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile"),
    ("allot.dev/v1", "Delete"),
    ("allot.dev/v1", "AdvanceClock"),
    *IGNORED_KINDS,
}
DELETABLE = {"Node", "Pod", "Device", "NodeResourceTopology", "ElasticQuota", "PodGroup", "ElasticQuotaProfile"}


@dataclass
class Document:
    source: str
    index: int
    body: dict[str, Any]

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def ref(self) -> ObjectRef:
        meta = self.body.get("metadata") or {}
        namespaced = self.kind in ("Pod", "ElasticQuota", "PodGroup", "ElasticQuotaProfile")
        return ObjectRef(
            namespace=str(meta.get("namespace") or "default") if namespaced else str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
        )

    def label(self) -> str:
        ref = self.ref.key if self.kind not in ("Delete", "AdvanceClock") else ""
        return f"{self.source} document {self.index + 1} ({self.kind or '?'}{' ' + ref if ref else ''})"


@dataclass
class Input:
    """What one document becomes: events to record, or a clock advance (simulator only)."""

    document: Document
    events: list[tuple[str, Event]] = field(default_factory=list)
    advance_seconds: float | None = None
    ignored: bool = False


def load_documents(path: str) -> list[Document]:
    try:
        text = Path(path).read_text() if path != "-" else __import__("sys").stdin.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        bodies = [b for b in yaml.safe_load_all(text) if b is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML: {exc}") from exc
    docs = []
    for index, body in enumerate(bodies):
        if not isinstance(body, dict):
            raise UsageError(f"{path} document {index + 1}: expected a mapping, got {type(body).__name__}")
        docs.append(Document(source=path, index=index, body=body))
    return docs


def validate(doc: Document) -> list[FieldIssue]:
    """Admission for one document: what the services would reject, rejected before anything is recorded."""
    issues: list[FieldIssue] = []
    if (doc.api_version, doc.kind) not in KNOWN:
        kinds = ", ".join(sorted(f"{a} {k}" for a, k in KNOWN))
        return [FieldIssue(path="kind", message=f"unsupported apiVersion/kind {doc.api_version} {doc.kind}; "
                                                f"accepted: {kinds}")]
    issues += [FieldIssue(path=p, message=m) for p, m in storage_issues(doc.body)]
    for part in ("metadata", "spec", "status"):
        if doc.body.get(part) is not None and not isinstance(doc.body[part], dict):
            issues.append(FieldIssue(path=part, message="must be an object"))
    if issues:
        return issues
    spec = doc.body.get("spec") or {}
    if doc.kind == "AdvanceClock":
        seconds = spec.get("seconds")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            issues.append(FieldIssue(path="spec.seconds", message="must be a non-negative number"))
        return issues
    if doc.kind == "Delete":
        if spec.get("kind") not in DELETABLE:
            issues.append(FieldIssue(path="spec.kind", message=f"must be one of {', '.join(sorted(DELETABLE))}"))
        if not spec.get("name"):
            issues.append(FieldIssue(path="spec.name", message="is required"))
        return issues
    if not doc.ref.name:
        return [FieldIssue(path="metadata.name", message="is required")]
    if doc.kind == "Node":
        return validate_node(doc.body)
    if doc.kind == "Device":
        return validate_device(doc.body)
    if doc.kind == "NodeResourceTopology":
        return validate_topology(doc.body)
    if doc.kind in ("ElasticQuota", "PodGroup", "ElasticQuotaProfile"):
        from allot_cli.admission import object_issues

        return object_issues(doc.kind, doc.body)
    if doc.kind == "Pod":
        if not isinstance(spec.get("containers"), list) or not spec.get("containers"):
            return [FieldIssue(path="spec.containers", message="at least one container is required")]
        _, problems = pod_requests_checked(doc.body)
        issues.extend(FieldIssue(path=p, message=m) for p, m in problems)
        if problems:  # the engines read the same fields; their view of a malformed pod adds nothing
            return issues
        for part in ("affinity", "securityContext"):
            if spec.get(part) is not None and not isinstance(spec[part], dict):
                issues.append(FieldIssue(path=f"spec.{part}", message="must be an object"))
        if spec.get("nodeName") is not None and not isinstance(spec["nodeName"], str):
            issues.append(FieldIssue(path="spec.nodeName", message="must be a string"))
        if issues:
            return issues
        issues.extend(_pod_admission(doc.body))
    return issues


def _pod_admission(manifest: dict[str, Any]) -> list[FieldIssue]:
    """Pod checks owned by the engines (device requests, annotations). Imported lazily: optional engines."""
    from allot_cli.admission import pod_issues

    return pod_issues(manifest)


def to_input(doc: Document, *, uid_factory: Any = None) -> Input:
    """Convert a validated document into input events (``uid_factory`` gives pod uids when the manifest has none)."""
    body = doc.body
    spec = body.get("spec") or {}
    ref = doc.ref
    if doc.kind == "AdvanceClock":
        return Input(document=doc, advance_seconds=float(spec["seconds"]))
    if doc.kind == "Delete":
        kind = spec["kind"]
        namespaced = kind in ("Pod", "ElasticQuota", "PodGroup", "ElasticQuotaProfile")
        target = ObjectRef(namespace=str(spec.get("namespace") or ("default" if namespaced else "")),
                           name=str(spec["name"]))
        delete: tuple[str, Event] = {
            "Node": lambda: (stream_id("node", target.name), NodeDeleted(name=target.name)),
            "Device": lambda: (stream_id("device", target.name), DeviceDeleted(name=target.name)),
            "NodeResourceTopology": lambda: (stream_id("topology", target.name), TopologyDeleted(name=target.name)),
            "Pod": lambda: (stream_id("pod", target.key), PodDeleted(pod=target)),
            "ElasticQuota": lambda: (stream_id("quota", target.key), QuotaDeleted(quota=target)),
            "PodGroup": lambda: (stream_id("podgroup", target.key), PodGroupDeleted(group=target)),
            "ElasticQuotaProfile": lambda: (stream_id("quotaprofile", target.key),
                                            QuotaProfileDeleted(profile=target)),
        }[kind]()
        return Input(document=doc, events=[delete])
    if (doc.api_version, doc.kind) in IGNORED_KINDS:
        return Input(document=doc, ignored=True, events=[(
            stream_id("object", f"{doc.kind}/{ref.key}"),
            ObjectIgnored(api_version=doc.api_version, kind=doc.kind, ref=ref, manifest=body))])
    if doc.kind == "Node":
        return Input(document=doc, events=[(stream_id("node", ref.name), NodeApplied(name=ref.name, manifest=body))])
    if doc.kind == "Device":
        return Input(document=doc, events=[(stream_id("device", ref.name), DeviceApplied(name=ref.name, manifest=body))])
    if doc.kind == "NodeResourceTopology":
        return Input(document=doc,
                     events=[(stream_id("topology", ref.name), TopologyApplied(name=ref.name, manifest=body))])
    if doc.kind == "ElasticQuota":
        return Input(document=doc, events=[(stream_id("quota", ref.key), QuotaApplied(quota=ref, manifest=body))])
    if doc.kind == "ElasticQuotaProfile":
        manifest = {**body, "metadata": {**(body.get("metadata") or {}), "namespace": ref.namespace}}
        return Input(document=doc, events=[(stream_id("quotaprofile", ref.key),
                                            QuotaProfileApplied(profile=ref, manifest=manifest))])
    if doc.kind == "PodGroup":
        manifest = {**body, "metadata": {**(body.get("metadata") or {}), "namespace": ref.namespace}}
        return Input(document=doc,
                     events=[(stream_id("podgroup", ref.key), PodGroupApplied(group=ref, manifest=manifest))])
    if doc.kind == "Pod":
        meta = dict(body.get("metadata") or {})
        meta.setdefault("namespace", ref.namespace)
        uid = str(meta.get("uid") or (uid_factory() if uid_factory else uuid.uuid5(uuid.NAMESPACE_URL, ref.key)))
        meta["uid"] = uid
        manifest = {**body, "metadata": meta}
        event: Event = (PodObserved if spec.get("nodeName") else PodSubmitted)(pod=ref, uid=uid, manifest=manifest)
        return Input(document=doc, events=[(stream_id("pod", ref.key), event)])
    raise UsageError(f"{doc.label()}: cannot convert")  # unreachable after validate()


def admit_all(docs: list[Document]) -> Iterator[str]:
    """Error lines for every invalid document (empty when all are valid)."""
    for doc in docs:
        for issue in validate(doc):
            yield f"{doc.label()}: {issue.path}: {issue.message}" if issue.path else f"{doc.label()}: {issue.message}"
