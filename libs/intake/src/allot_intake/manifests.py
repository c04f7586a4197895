"""The door: from YAML documents to input events, for ``allot apply``, ``allot sim run`` and ``kube-sync``.

Every document is read once, by the admission function of its kind (:mod:`allot_contracts.objects.admission`), and
becomes the input events the services act on; the events carry the object as the door read it. Accepted documents:

==============================================  ====================================================================
apiVersion / kind                               recorded as
==============================================  ====================================================================
v1 Node                                         ``node.applied``
scheduling.koordinator.sh/v1alpha1 Device       ``device.applied``
topology.node.k8s.io/v1alpha1                   ``topology.applied``
NodeResourceTopology
v1 Pod (no ``spec.nodeName``)                   ``pod.submitted``
v1 Pod (``spec.nodeName`` set)                  ``pod.observed`` (already bound, with its allocation annotations)
scheduling.sigs.k8s.io/v1alpha1 ElasticQuota    ``quota.applied``
quota.koordinator.sh/v1alpha1                   ``quotaprofile.applied``
ElasticQuotaProfile
scheduling.sigs.k8s.io/v1alpha1 PodGroup        ``podgroup.applied``
scheduling.koordinator.sh/v1alpha1 Reservation  ``reservation.applied``
scheduling.koordinator.sh/v1alpha1              ``migration.applied``
PodMigrationJob
slo.koordinator.sh/v1alpha1 NodeMetric          ``nodemetric.applied``
config.koordinator.sh/v1alpha1                  ``colocationprofile.applied`` (applied to the pods after it
ClusterColocationProfile                        at the door: :meth:`Door.admit_pod`)
v1 ConfigMap ``slo-controller-config``          ``colocation.applied`` (other ConfigMaps: ``object.ignored``)
scheduling.k8s.io/v1 PriorityClass              ``priorityclass.applied`` (resolves ``priorityClassName``)
v1 Namespace                                    ``object.ignored`` (its labels select profiles at the door)
apps/v1 Deployment, ReplicaSet, StatefulSet,    ``workload.expanded`` and the pods its controller would create
batch/v1 Job                                    (:mod:`allot_intake.workloads`; standalone mode only)
allot.dev/v1 Delete ``{kind,namespace,name}``   the kind's ``*.deleted`` event
allot.dev/v1 AdvanceClock ``{seconds}``         the simulator's clock moves (a running stack has its own clock)
allot.dev/v1 NodeHeartbeat ``{node}``           ``node.heartbeat`` (what a node's agent records; for scenarios)
==============================================  ====================================================================

Reading YAML is bounded (``LIMITS``): invalid UTF-8, a document nested deeper than ``max_depth``, one that expands
(aliases and merge keys included, counted as it is built) to more than ``max_nodes`` values or ``max_document_bytes``
of text, or a file larger than ``max_file_bytes`` is refused with the document and the reason, before anything else
reads it. Only plain data tags are read (YAML's safe loader: no Python objects).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from allot_contracts import kube
from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    ColocationConfigApplied,
    ColocationConfigDeleted,
    ColocationProfileApplied,
    ColocationProfileDeleted,
    DeviceApplied,
    DeviceDeleted,
    Event,
    FieldIssue,
    MigrationApplied,
    MigrationDeleted,
    NodeApplied,
    NodeDeleted,
    NodeHeartbeat,
    NodeMetricApplied,
    NodeMetricDeleted,
    ObjectIgnored,
    ObjectRef,
    PodDeleted,
    PodGroupApplied,
    PodGroupDeleted,
    PodObserved,
    PodSubmitted,
    PriorityClassApplied,
    PriorityClassDeleted,
    QuotaApplied,
    QuotaDeleted,
    QuotaProfileApplied,
    QuotaProfileDeleted,
    ReservationApplied,
    ReservationDeleted,
    TopologyApplied,
    TopologyDeleted,
    WorkloadExpanded,
)
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.admission import Admitted, Namespace, accepted_kinds, admit
from allot_contracts.objects.colocation_profile import ColocationProfile
from allot_contracts.objects.pod import BUILTIN_PRIORITY_CLASSES, Pod, PodContext, PriorityClassInfo
from allot_contracts.objects.profile_mutation import apply_profiles, namespace_labels
from allot_contracts.objects.quota import BUILTIN as BUILTIN_QUOTAS
from allot_contracts.objects.quota import ProfileSpec, QuotaSpec
from allot_intake.documents import NAMESPACED_DELETES, Document
from allot_intake.known_fields import IGNORED, unknown_fields
from allot_intake.quota_door import QuotaView
from allot_intake.workloads import WORKLOAD_KINDS, expand

CLI_KINDS: Final = {
    ("allot.dev/v1", "Delete"),
    ("allot.dev/v1", "AdvanceClock"),
    ("allot.dev/v1", "NodeHeartbeat"),
}
DELETABLE: Final = {
    "Node",
    "Pod",
    "Device",
    "NodeResourceTopology",
    "ElasticQuota",
    "PodGroup",
    "ElasticQuotaProfile",
    "Reservation",
    "PodMigrationJob",
    "NodeMetric",
    "ClusterColocationProfile",
    "ConfigMap",
    "PriorityClass",
}


@dataclass
class Input:
    """What one document becomes: events to record, or a clock advance (simulator only)."""

    document: Document
    events: list[tuple[str, Event]] = field(default_factory=list)
    advance_seconds: float | None = None
    ignored: bool = False


@dataclass
class Verdict:
    """Admission of one document: refused when ``issues``; ``warnings`` are printed either way."""

    document: Document
    issues: list[FieldIssue]
    warnings: list[FieldIssue]

    def lines(self, what: str, issues: list[FieldIssue]) -> Iterator[str]:
        for issue in issues:
            yield f"{what}: {self.document.label()}: {issue}"


def tell(verdicts: list[Verdict], say: Callable[[str], None]) -> tuple[list[Document], int]:
    """Say each verdict's warnings and refusals (``warning: …`` / ``error: …`` lines) through ``say``; the documents
    admitted and the number refused."""
    accepted: list[Document] = []
    refused = 0
    for verdict in verdicts:
        for line in verdict.lines("warning", verdict.warnings):
            say(line)
        if verdict.issues:
            refused += 1
            for line in verdict.lines("error", verdict.issues):
                say(line)
        else:
            accepted.append(verdict.document)
    return accepted, refused


# --- admission ---------------------------------------------------------------------------------------------------


@dataclass
class Door:
    """Admission of documents in order. It knows the PriorityClasses (built in, already recorded, and those earlier
    in the input) to resolve ``priorityClassName``, and, when ``quotas`` is given, the elastic quotas that exist, to
    refuse a pod naming one that does not (what Koordinator's pod webhook refuses). It knows the
    ClusterColocationProfiles and Namespaces the same way (already recorded, and earlier in the input) and applies
    the profiles to every new pod before admitting it, as Koordinator's mutating webhook does before validation
    (:mod:`allot_contracts.objects.profile_mutation`); the pod is recorded as mutated, with a warning per profile."""

    priority_classes: dict[str, PriorityClassInfo] = field(
        default_factory=lambda: dict(BUILTIN_PRIORITY_CLASSES)
    )
    quotas: set[str] | None = None
    # the quotas and profiles known: pods may not name a parent quota, and get their quota tree's node selector
    quota_view: QuotaView = field(default_factory=QuotaView)
    expand_workloads: bool = True
    resolve_priority: bool = True  # False for objects read from an API server (it resolved priorityClassName)
    # None: profiles are never applied (kube-sync: the API server's mutating webhook has applied them)
    profiles: dict[str, ColocationProfile] | None = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels
    # an object with a field Kubernetes does not know is refused (``kubectl apply``'s strict field validation:
    # ``allot_intake.known_fields``);
    # False for objects read from an API server (it decoded them: a newer server's fields are its business)
    strict: bool = True
    advanced: float = 0.0  # the seconds the AdvanceClock documents checked so far move the clock, in all

    def admit_pod(self, body: JsonObject) -> tuple[JsonObject, Admitted]:
        """The pod as the matching profiles and its quota tree leave it (the pod webhooks' mutations), and its
        admission."""
        if not self.profiles:
            body = self._in_quota_tree(body)
            return body, self._parent_quota(admit(body, self.context()))
        meta = body.get("metadata")
        namespace = str((meta.get("namespace") if isinstance(meta, dict) else None) or "default")
        mutation = apply_profiles(
            body,
            self.profiles.values(),
            namespace=namespace_labels(namespace, self.namespaces.get(namespace)),
            priority_classes=self.priority_classes,
        )
        manifest = self._in_quota_tree(mutation.manifest)
        admitted = self._parent_quota(admit(manifest, self.context()))
        issues = mutation.issues + mutation.attribute(admitted.issues)
        return manifest, msgspec.structs.replace(
            admitted,
            obj=None if issues else admitted.obj,
            issues=issues,
            warnings=mutation.warnings + list(admitted.warnings),
        )

    def _in_quota_tree(self, body: JsonObject) -> JsonObject:
        """A pod of a quota tree whose profile selects nodes gets that node affinity."""
        return self.quota_view.with_tree_affinity(body) if self.quotas is not None else body

    def _forget(self, doc: Document) -> None:
        """A ``Delete`` of a PriorityClass or ClusterColocationProfile: the pods after it no longer see it."""
        spec = kube.spec_of(doc.body)
        if spec.get("kind") == "PriorityClass" and spec.get("name") not in BUILTIN_PRIORITY_CLASSES:
            self.priority_classes.pop(str(spec.get("name")), None)
        elif spec.get("kind") == "ClusterColocationProfile" and self.profiles is not None:
            self.profiles.pop(str(spec.get("name")), None)

    def _remember(self, doc: Document, admitted: Admitted) -> None:
        obj = admitted.obj
        if doc.kind == "PriorityClass" and isinstance(obj, PriorityClassInfo):
            self.priority_classes[obj.name] = obj
        elif doc.kind == "ElasticQuota" and self.quotas is not None:
            self.quotas.add(admitted.name)
            if isinstance(obj, QuotaSpec):
                self.quota_view.note_quota(obj)
        elif isinstance(obj, ProfileSpec) and self.quotas is not None:
            self.quotas.add(obj.quota_name)  # the root quota of its tree
            self.quota_view.note_profile(obj)
        elif doc.kind == "ClusterColocationProfile" and isinstance(obj, ColocationProfile):
            if self.profiles is not None:
                self.profiles[obj.name] = obj
        elif doc.kind == "Namespace" and isinstance(obj, Namespace):
            self.namespaces[obj.name] = dict(obj.labels)

    def _advance(self, seconds: float) -> list[FieldIssue]:
        if self.advanced + seconds > MAX_RUN_SECONDS:
            why = f"would move the clock past {MAX_RUN_SECONDS} seconds (100 years) in all; {self.advanced:.0f} so far"
            return [FieldIssue(path="spec.seconds", message=why, value=f"{seconds:g}")]
        self.advanced += seconds
        return []

    def context(self) -> PodContext:
        return PodContext(
            priority_classes=dict(self.priority_classes),
            quotas=frozenset(self.quotas | BUILTIN_QUOTAS) if self.quotas is not None else None,
            resolve_priority=self.resolve_priority,
        )

    def check(self, doc: Document) -> Verdict:
        """The document's admission: refused with every field Kubernetes does not know (unless read from an API
        server), else with what the admission of its kind says; a field ignored as upstream ignores it is a warning."""
        if not self.strict or (doc.api_version, doc.kind) in CLI_KINDS:
            return self._admit(doc)
        unknown = unknown_fields(doc.api_version, doc.kind, doc.body)
        if refused := [issue for issue in unknown if issue.code != IGNORED]:
            return Verdict(doc, refused, [])
        verdict = self._admit(doc)
        verdict.warnings[:0] = unknown
        return verdict

    def _admit(self, doc: Document) -> Verdict:
        body = doc.body
        key = (doc.api_version, doc.kind)
        if key in CLI_KINDS:
            issues = _cli_kind_issues(doc)
            if not issues and doc.kind == "Delete":
                self._forget(doc)
            if not issues and doc.kind == "AdvanceClock":
                issues = self._advance(_seconds(kube.spec_of(doc.body)["seconds"]))
            return Verdict(doc, issues, [])
        if key in WORKLOAD_KINDS:
            if not self.expand_workloads:
                return Verdict(
                    doc,
                    [],
                    [
                        FieldIssue(
                            path="kind",
                            code="Ignored",
                            message="workloads are the API server's business here",
                        )
                    ],
                )
            pods, issues, warnings = expand(body)
            doc.pods = [self.admit_pod(p) for p in pods]
            for _, pod in doc.pods[:1]:  # every pod has the template's problems: report them once
                issues += [msgspec.structs.replace(i, path=f"spec.template: {i.path}") for i in pod.issues]
                warnings += pod.warnings
            return Verdict(doc, issues, warnings)
        if key == ("v1", "Pod"):
            doc.body, admitted = self.admit_pod(body)
        else:
            admitted = admit(body, self.context())
        doc.admitted = admitted
        if admitted.ok:
            self._remember(doc, admitted)
        if (
            admitted.issues
            and admitted.issues[0].code == "NotSupported"
            and admitted.issues[0].path in ("kind", "apiVersion")
        ):
            path, message = (
                admitted.issues[0].path,
                admitted.issues[0].message,
            )  # a known kind: the apiVersion
            versions = sorted(a for a, k in WORKLOAD_KINDS | CLI_KINDS if k == doc.kind)  # a workload's, ours
            if path == "kind" and versions:
                path = "apiVersion"
                message = f"unsupported apiVersion {doc.api_version!r} for {doc.kind}; accepted: {', '.join(versions)}"
            elif path == "kind":
                message = f"unsupported apiVersion/kind {doc.api_version} {doc.kind}; accepted: " + ", ".join(
                    sorted([*accepted_kinds(), *(f"{a} {k}" for a, k in sorted(WORKLOAD_KINDS | CLI_KINDS))])
                )
            return Verdict(doc, [FieldIssue(path=path, code="NotSupported", message=message)], [])
        return Verdict(doc, list(admitted.issues), list(admitted.warnings))

    def _parent_quota(self, admitted: Admitted) -> Admitted:
        """A pod naming a parent quota is refused, as Koordinator's pod webhook refuses it."""
        pod = admitted.obj
        issue = (
            self.quota_view.parent_issue(pod) if self.quotas is not None and isinstance(pod, Pod) else None
        )
        if issue is None:
            return admitted
        return msgspec.structs.replace(admitted, obj=None, issues=[*admitted.issues, issue])

    def check_all(self, docs: list[Document]) -> list[Verdict]:
        return [self.check(doc) for doc in docs]


# An AdvanceClock moves the simulated clock by at most ten years, and the documents of a run by at most a hundred in
# all: beyond any timeout or TTL a scenario waits for, well within the dates a timestamp can be written for (an
# infinite or 1e308-second step overflowed the clock, and one of thousands of years the dates written from it).
MAX_ADVANCE_SECONDS: Final = 10 * 365 * 86_400
MAX_RUN_SECONDS: Final = 100 * 365 * 86_400


def _cli_kind_issues(doc: Document) -> list[FieldIssue]:
    spec = doc.body.get("spec") or {}
    if not isinstance(spec, dict):
        return [FieldIssue(path="spec", message="must be an object")]
    issues: list[FieldIssue] = []
    if doc.kind == "AdvanceClock":
        seconds = spec.get("seconds")
        if (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not 0 <= seconds <= MAX_ADVANCE_SECONDS  # NaN is not, nor an infinity
        ):
            why = f"must be a number of seconds from 0 to {MAX_ADVANCE_SECONDS} (10 years)"
            issues.append(FieldIssue(path="spec.seconds", message=why, value=str(seconds)[:40]))
        return issues
    if doc.kind == "NodeHeartbeat":
        if not isinstance(spec.get("node"), str) or not spec.get("node"):
            issues.append(
                FieldIssue(path="spec.node", code="Required", message="is required (the node's name)")
            )
        return issues
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in DELETABLE:
        issues.append(FieldIssue(path="spec.kind", message=f"must be one of {', '.join(sorted(DELETABLE))}"))
    if not spec.get("name") or not isinstance(spec["name"], str):
        issues.append(FieldIssue(path="spec.name", code="Required", message="is required (a string)"))
    namespace = spec.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        issues.append(FieldIssue(path="spec.namespace", message="must be a string"))
    return issues


def admit_all(docs: list[Document], door: Door | None = None) -> Iterator[str]:
    """Error lines for every invalid document (empty when all are valid), warnings printed to stderr."""
    door = door or Door()
    for verdict in door.check_all(docs):
        for line in verdict.lines("warning", verdict.warnings):
            print(line, file=sys.stderr)
        for issue in verdict.issues:
            yield f"{verdict.document.label()}: {issue}"


# --- events ------------------------------------------------------------------------------------------------------


def _pod_event(admitted: Admitted, body: JsonObject, ref: ObjectRef, uid_factory: Any) -> tuple[str, Event]:
    meta: JsonObject = dict(kube.meta(body))
    meta.setdefault("namespace", ref.namespace)
    uid = str(meta.get("uid") or (uid_factory() if uid_factory else uuid.uuid5(uuid.NAMESPACE_URL, ref.key)))
    meta["uid"] = uid
    manifest = {**body, "metadata": meta}
    spec = admitted.obj
    if spec is not None and not spec.uid:
        spec = msgspec.structs.replace(spec, uid=uid)
    bound = bool(kube.spec_of(body).get("nodeName"))
    event: Event = (PodObserved if bound else PodSubmitted)(
        pod=ref,
        uid=uid,
        manifest=manifest,
        spec=spec,
        issues=list(admitted.issues),
        warnings=list(admitted.warnings),
    )
    return stream_id("pod", ref.key), event


def _deleted(kind: str, target: ObjectRef) -> tuple[str, Event]:
    makers: dict[str, Callable[[], tuple[str, Event]]] = {
        "Node": lambda: (stream_id("node", target.name), NodeDeleted(name=target.name)),
        "Device": lambda: (stream_id("device", target.name), DeviceDeleted(name=target.name)),
        "NodeResourceTopology": lambda: (
            stream_id("topology", target.name),
            TopologyDeleted(name=target.name),
        ),
        "Pod": lambda: (stream_id("pod", target.key), PodDeleted(pod=target)),
        "ElasticQuota": lambda: (stream_id("quota", target.key), QuotaDeleted(quota=target)),
        "PodGroup": lambda: (stream_id("podgroup", target.key), PodGroupDeleted(group=target)),
        "ElasticQuotaProfile": lambda: (
            stream_id("quotaprofile", target.key),
            QuotaProfileDeleted(profile=target),
        ),
        "Reservation": lambda: (
            stream_id("reservation", target.name),
            ReservationDeleted(reservation=target),
        ),
        "PodMigrationJob": lambda: (stream_id("migration", target.name), MigrationDeleted(job=target)),
        "NodeMetric": lambda: (stream_id("nodemetric", target.name), NodeMetricDeleted(name=target.name)),
        "ClusterColocationProfile": lambda: (
            stream_id("colocationprofile", target.name),
            ColocationProfileDeleted(name=target.name),
        ),
        "ConfigMap": lambda: (stream_id("colocation", target.key), ColocationConfigDeleted(ref=target)),
        "PriorityClass": lambda: (
            stream_id("priorityclass", target.name),
            PriorityClassDeleted(name=target.name),
        ),
    }
    return makers[kind]()


def _seconds(value: JsonValue) -> float:
    """An ``AdvanceClock``'s seconds (a number, or its text)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"seconds must be a number, not {value!r}")
    return float(value)


def to_input(doc: Document, *, uid_factory: Any = None, door: Door | None = None) -> Input:
    """Convert a document into input events (``uid_factory`` gives pod uids when the manifest has none). A
    document not yet checked is admitted here with ``door`` (kube-sync records what the API server holds even when
    the door refuses it: a refused pod is recorded with its issues and rejected by the first service)."""
    body = doc.body
    spec = kube.spec_of(body)
    key = (doc.api_version, doc.kind)
    if doc.admitted is None and key not in CLI_KINDS and key not in WORKLOAD_KINDS:
        (door or Door()).check(doc)
    ref = doc.ref
    if doc.kind == "AdvanceClock":
        return Input(document=doc, advance_seconds=_seconds(spec["seconds"]))
    if doc.kind == "NodeHeartbeat":
        node = str(spec["node"])
        return Input(document=doc, events=[(stream_id("node", node), NodeHeartbeat(name=node))])
    if doc.kind == "Delete":
        kind = str(spec["kind"])
        namespaced = kind in NAMESPACED_DELETES
        target = ObjectRef(
            namespace=str(spec.get("namespace") or ("default" if namespaced else "")), name=str(spec["name"])
        )
        return Input(document=doc, events=[_deleted(kind, target)])
    if key in WORKLOAD_KINDS:
        events: list[tuple[str, Event]] = [
            (
                stream_id("workload", f"{doc.kind}/{ref.key}"),
                WorkloadExpanded(
                    api_version=doc.api_version,
                    kind=doc.kind,
                    ref=ref,
                    manifest=body,
                    pods=[p.name for _, p in doc.pods],
                ),
            )
        ]
        for manifest, pod in doc.pods:
            ref = ObjectRef(namespace=pod.namespace, name=pod.name)
            events.append(_pod_event(pod, manifest, ref, uid_factory))
        return Input(document=doc, events=events)
    return _admitted_input(doc, uid_factory)


def _admitted_input(doc: Document, uid_factory: Any) -> Input:
    """The input event of an object the door admitted (recorded as ignored when Allot does not act on its kind)."""
    body = doc.body
    ref = doc.ref
    admitted = doc.admitted
    assert admitted is not None
    obj = admitted.obj
    issues, warnings = list(admitted.issues), list(admitted.warnings)
    if doc.kind == "Pod":
        return Input(document=doc, events=[_pod_event(admitted, body, ref, uid_factory)])
    if doc.kind == "Node":
        return Input(
            document=doc, events=[(stream_id("node", ref.name), NodeApplied(name=ref.name, manifest=body))]
        )
    if doc.kind == "Device":
        return Input(
            document=doc,
            events=[(stream_id("device", ref.name), DeviceApplied(name=ref.name, manifest=body))],
        )
    if doc.kind == "NodeResourceTopology":
        return Input(
            document=doc,
            events=[(stream_id("topology", ref.name), TopologyApplied(name=ref.name, manifest=body))],
        )
    with_namespace: JsonObject = {**body, "metadata": {**kube.meta(body), "namespace": ref.namespace}}
    if doc.kind == "ElasticQuota":
        event: Event = QuotaApplied(quota=ref, manifest=body, spec=obj, issues=issues, warnings=warnings)
        return Input(document=doc, events=[(stream_id("quota", ref.key), event)])
    if doc.kind == "ElasticQuotaProfile":
        event = QuotaProfileApplied(
            profile=ref, manifest=with_namespace, spec=obj, issues=issues, warnings=warnings
        )
        return Input(document=doc, events=[(stream_id("quotaprofile", ref.key), event)])
    if doc.kind == "PodGroup":
        event = PodGroupApplied(
            group=ref, manifest=with_namespace, spec=obj, issues=issues, warnings=warnings
        )
        return Input(document=doc, events=[(stream_id("podgroup", ref.key), event)])
    uid = str(kube.meta(body).get("uid") or "")
    if doc.kind == "Reservation":
        event = ReservationApplied(reservation=ref, uid=uid, manifest=body)
        return Input(document=doc, events=[(stream_id("reservation", ref.name), event)])
    if doc.kind == "PodMigrationJob":
        event = MigrationApplied(job=ref, uid=uid, manifest=body)
        return Input(document=doc, events=[(stream_id("migration", ref.name), event)])
    if doc.kind == "NodeMetric":
        return Input(
            document=doc,
            events=[(stream_id("nodemetric", ref.name), NodeMetricApplied(name=ref.name, manifest=body))],
        )
    if doc.kind == "ClusterColocationProfile":
        event = ColocationProfileApplied(name=ref.name, manifest=body)
        return Input(document=doc, events=[(stream_id("colocationprofile", ref.name), event)])
    if doc.kind == "ConfigMap" and obj is not None:
        event = ColocationConfigApplied(ref=ref, manifest=with_namespace)
        return Input(document=doc, events=[(stream_id("colocation", ref.key), event)])
    if doc.kind == "PriorityClass" and isinstance(obj, PriorityClassInfo):
        event = PriorityClassApplied(name=ref.name, manifest=body, spec=obj)
        return Input(document=doc, events=[(stream_id("priorityclass", ref.name), event)])
    # Accepted, recorded, not acted on (Namespace, other ConfigMaps).
    return Input(
        document=doc,
        ignored=True,
        events=[
            (
                stream_id("object", f"{doc.kind}/{ref.key}"),
                ObjectIgnored(api_version=doc.api_version, kind=doc.kind, ref=ref, manifest=body),
            )
        ],
    )
