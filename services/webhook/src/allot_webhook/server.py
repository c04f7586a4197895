"""The admission webhooks, a small HTTPS server of their own (``admission.k8s.io/v1``), run by ``allot-webhook`` and
``allot webhook`` (:mod:`allot_webhook.main`).

- ``POST /validate`` (ValidatingWebhookConfiguration): Pods that Allot schedules, ElasticQuotas, ElasticQuotaProfiles,
  PodGroups and Reservations go through the same admission as ``allot apply`` and kube-sync's ingest
  (:func:`verdict`), so an object ``kubectl apply`` accepts is one the services accept, and a refused one is refused
  at the door with every field path and reason instead of being recorded as rejected later. What Allot reads but
  does not act on comes back as ``warnings`` (kubectl prints them). A pod of another scheduler is not Allot's to
  judge: allowed as it is. An update of a pod may not change its QoS class, its Koordinator priority class or its
  ``koordinator.sh/priority`` label (Koordinator's pod webhook refuses it too; kube-sync records a pod once, so such
  a change would never reach the services).
- ``POST /mutate`` (MutatingWebhookConfiguration), on pod creation: first the cluster's ClusterColocationProfiles, as
  Koordinator's mutating webhook applies them (:func:`allot_contracts.objects.profile_mutation.apply_profiles`: the
  profiles, the labels of the pod's namespace and the PriorityClasses are listed from the API server at each review,
  :func:`cluster_profiles`), each profile named in a warning; then ``spec.schedulerName`` set to Allot's. The answer is
  one JSON patch from the pod as sent to the pod as mutated. *Which* pods is the configuration's
  ``namespaceSelector`` (a namespace label) and ``objectSelector`` (a pod label): the API server only sends those.
  A pod that names another scheduler than ``default-scheduler`` (itself, or through a profile's ``schedulerName``)
  keeps it (with a warning): routing never overrides an explicit choice. A profile naming a PriorityClass that does
  not exist refuses the pod (upstream's webhook fails the request); a list that fails is the webhook's error (500:
  ``failurePolicy`` decides). The validating webhook, which the API server calls after every mutating one, sees the
  mutated pod.

ElasticQuota trees are checked too, as quota-manager checks them (``allot_quota``'s topology rules), against the
cluster's ElasticQuotas listed from the API server at each review (:func:`quota_tree_issues`): the parent exists and is
a parent, the children's ``min`` fit in their parent's, the tree id stays, a namespace is bound to one quota, and a
quota with children cannot be deleted. The one rule that depends on usage and can be checked here: ``max`` of a key
in ``max-strict-check-resource-keys`` lowered below what is in use, with ``used`` as quota-manager's projection of the
log publishes it (``status.used``, written by the binder: :func:`published_used`), refused with upstream's reason.
A parent with pods stays quota-manager's to refuse, from the log: the webhook keeps no state.

TLS: the certificate and key are files (``--tls-cert-file``, ``--tls-private-key-file``), from cert-manager's
Certificate when installed, else the self-signed CA and certificate the Helm chart generates. ``/healthz`` and
``/metrics`` are served over plain HTTP on ``ALLOT_HTTP_PORT`` like every other process.

Bad input: each review is read within :data:`LIMITS` (size, nesting, header and body timeouts, connections:
``allot_runtime.httpserver``) and must be an AdmissionReview the API server sends (``admission.k8s.io/v1`` or
``v1beta1``, a string ``uid``, fields of their types: :mod:`allot_webhook.review`), else it is refused (400)
naming the field; a Pod without a pod's shape is denied with the field path and gets no patch. See docs/limits.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from aiohttp import web

from allot_contracts.events import FieldIssue
from allot_contracts.jsonpatch import diff
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.admission import admit, parse_priority_class
from allot_contracts.objects.colocation_profile import (
    PROFILE_API_VERSION,
    ColocationProfile,
    parse_colocation_profile,
)
from allot_contracts.objects.pod import BUILTIN_PRIORITY_CLASSES, PodContext, PriorityClassInfo
from allot_contracts.objects.profile_mutation import apply_profiles, namespace_labels
from allot_contracts.objects.qos_rules import immutable_issues
from allot_contracts.objects.quota import QUOTA_API, parse_quota
from allot_contracts.quantity import QuantityError, to_canonical
from allot_quota import QuotaEngine
from allot_runtime.httpserver import Limits, application, read_json, refuse, start
from allot_webhook.review import MalformedReview, parse_review, pod_scheduler, pod_shape_issues, request_kind

log = logging.getLogger("allot.webhook")

SCHEDULER = "allot-scheduler"
# causes a refusal lists at the most (each cut at 1,024 characters), as the API server caps a status's causes
MAX_CAUSES = 100
# What a review may be (docs/limits.md#http-servers): a body of 8 MiB (an object and its old version, each up to the
# API server's 3 MiB request limit), nested 100 levels; the API server's own call times out after 10 s by default.
LIMITS = Limits(
    header_timeout=10.0,
    body_timeout=10.0,
    idle_timeout=120.0,
    max_connections=128,
    max_body=8 * 1024 * 1024,
    max_depth=100,
)
VALIDATED = {
    ("v1", "Pod"),
    ("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota"),
    ("quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile"),
    ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup"),
    ("scheduling.koordinator.sh/v1alpha1", "Reservation"),
}


QUOTA_KIND = (QUOTA_API, "ElasticQuota")


class StatusCause(TypedDict):
    field: str
    message: str
    reason: str


class StatusDetails(TypedDict):
    name: str
    kind: str
    causes: list[StatusCause]


class DeniedStatus(TypedDict):
    """The ``status`` of a denied review: a ``422 Invalid`` with a cause per field, as the API server words it."""

    code: int
    reason: str
    message: str
    details: StatusDetails


class AdmissionResponse(TypedDict):
    """The ``response`` of an AdmissionReview (admission.k8s.io/v1)."""

    uid: str
    allowed: bool
    warnings: NotRequired[list[str]]
    status: NotRequired[DeniedStatus]
    patchType: NotRequired[str]
    patch: NotRequired[str]


QuotaLister = Callable[[], Awaitable[list[JsonObject]]]  # the cluster's ElasticQuotas, as listed

_CONTEXT = PodContext(resolve_priority=False)  # the API server's priority admission runs before webhooks


def verdict(manifest: JsonObject, old: JsonObject | None = None) -> tuple[list[FieldIssue], list[FieldIssue]]:
    """(issues, warnings) of one object, by the admission every door uses; for the update of a pod (``old``: the
    pod before it), also what the update may not change."""
    admitted = admit(manifest, _CONTEXT)
    issues = list(admitted.issues)
    if old is not None and manifest.get("kind") == "Pod":
        issues += immutable_issues(old, manifest)
    return issues, list(admitted.warnings)


def quota_tree_issues(request: JsonObject, cluster: list[JsonObject]) -> list[FieldIssue]:
    """What quota-manager's topology check would refuse about the ElasticQuota of ``request`` (create, update or
    delete), given the cluster's ElasticQuotas: they are loaded into a fresh engine parents first (one that does
    not fit is left out, as quota-manager would have rejected it), then the request is checked against them."""
    engine = QuotaEngine()
    pending = []
    for item in cluster:
        spec, _ = parse_quota({**item, "apiVersion": QUOTA_API, "kind": "ElasticQuota"})
        if spec is not None:
            pending.append(spec)
    pending.sort(key=lambda spec: (spec.namespace, spec.name))
    while pending:
        left = [spec for spec in pending if engine.apply_quota(spec)]
        if len(left) == len(pending):
            break
        pending = left
    for item in cluster:  # what is in use, as published: quota-manager's projection of the log
        metadata = item.get("metadata")
        name = str((metadata.get("name") if isinstance(metadata, dict) else None) or "")
        node = engine.hierarchy.nodes.get(name)
        if node is not None:
            node.used = published_used(item)
    deleting = request.get("operation") == "DELETE"
    found = request.get("oldObject" if deleting else "object")
    obj = found if isinstance(found, dict) else {}
    named = obj.get("metadata")
    metadata = named if isinstance(named, dict) else {}
    namespace = str(request.get("namespace") or metadata.get("namespace") or "")
    if deleting:
        name = str(request.get("name") or metadata.get("name") or "")
        # Only what forbids it: a quota the engine does not know (left out above) is the API server's to delete.
        return [i for i in engine.validate_delete(namespace, name) if i.code == "Forbidden"]
    spec, issues = parse_quota(
        {
            **obj,
            "apiVersion": QUOTA_API,
            "kind": "ElasticQuota",
            "metadata": {**metadata, "namespace": namespace},
        }
    )
    return list(issues) if spec is None else engine.validate_quota(spec)


def published_used(quota: JsonObject) -> dict[str, int]:
    """``status.used`` of a listed ElasticQuota in canonical units (the binder writes quota-manager's ``used`` there;
    a value that does not parse counts as nothing in use)."""
    status = quota.get("status")
    used = status.get("used") if isinstance(status, dict) else None
    out: dict[str, int] = {}
    for key, value in (used if isinstance(used, dict) else {}).items():
        if isinstance(value, str | int) and not isinstance(value, bool):
            with contextlib.suppress(QuantityError, ValueError, ZeroDivisionError):
                out[str(key)] = to_canonical(str(key), value)
    return out


async def _items(client: Any, path: str) -> list[JsonObject]:
    """The items of a list through ``client`` (none when the resource is not served: its CRD is not installed)."""
    from allot_runtime.kube.client import ApiError, call

    try:
        found = await call(client, "GET", path, timeout=5.0)
    except ApiError as exc:
        if exc.status == 404:
            return []
        raise
    listed = found.get("items") if isinstance(found, dict) else None
    return [item for item in listed or [] if isinstance(item, dict)]


def cluster_quotas(client: Any) -> QuotaLister:
    """The lister of the cluster's ElasticQuotas through ``client`` (none when the CRD is not installed)."""

    async def quotas() -> list[JsonObject]:
        return await _items(client, "/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas")

    return quotas


@dataclass(frozen=True)
class ProfileWorld:
    """What applying the ClusterColocationProfiles to a pod needs from the cluster."""

    profiles: list[ColocationProfile] = field(default_factory=list)
    namespace: dict[str, str] = field(default_factory=dict)  # the labels of the pod's namespace
    priority_classes: dict[str, PriorityClassInfo] = field(
        default_factory=lambda: dict(BUILTIN_PRIORITY_CLASSES)
    )


ProfileSource = Callable[[str], Awaitable[ProfileWorld]]  # the pod's namespace -> the world


def cluster_profiles(client: Any) -> ProfileSource:
    """The cluster's ClusterColocationProfiles (none when the CRD is not installed), the labels of the pod's namespace
    and the PriorityClasses, through ``client``. A profile Allot cannot read is left out, with a log line."""
    from allot_runtime.kube.client import ApiError, call

    async def world(namespace: str) -> ProfileWorld:
        profiles = []
        for item in await _items(client, f"/apis/{PROFILE_API_VERSION}/clustercolocationprofiles"):
            issues: list[FieldIssue] = []
            profile = parse_colocation_profile(item, issues, [])
            if profile is None:
                log.warning("ClusterColocationProfile left out: %s", "; ".join(str(i) for i in issues))
            else:
                profiles.append(profile)
        found = ProfileWorld(profiles=profiles)
        if any(p.namespace_selector for p in profiles):
            try:
                obj = await call(client, "GET", f"/api/v1/namespaces/{namespace}", timeout=5.0)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                obj = {}
            found.namespace.update(
                ((obj.get("metadata") or {}).get("labels") or {}) if isinstance(obj, dict) else {}
            )
        if any(p.priority_class_name for p in profiles):
            for item in await _items(client, "/apis/scheduling.k8s.io/v1/priorityclasses"):
                pc = parse_priority_class(item, [], [])
                if pc is not None:
                    found.priority_classes[pc.name] = pc
        return found

    return world


class WebhookError(Exception):
    """The webhook cannot answer (HTTP 500): the API server applies the webhook's ``failurePolicy``."""


def _line(issue: FieldIssue) -> str:
    return f"{issue.path}: {issue.message}" if issue.path else issue.message


@dataclass
class Webhook:
    scheduler: str = SCHEDULER
    quotas: QuotaLister | None = None  # None: ElasticQuota trees are not checked (no API server to list them)
    profiles: ProfileSource | None = (
        None  # None: no ClusterColocationProfile is applied (no API server to list them)
    )
    counts: dict[str, int] = field(default_factory=dict)

    def _count(self, what: str, by: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + by

    def validate(self, request: JsonObject) -> AdmissionResponse:
        """The ``response`` of an AdmissionReview for the validating webhook."""
        uid = str(request["uid"])  # parse_review: a non-empty string
        obj = request.get("object")
        if request.get("operation") == "DELETE" or not isinstance(obj, dict):
            return {"uid": uid, "allowed": True}
        api_version, kind = request_kind(request)
        manifest: JsonObject = {"apiVersion": api_version, "kind": kind, **obj}
        manifest["apiVersion"], manifest["kind"] = api_version, kind
        namespace, metadata = request.get("namespace"), manifest.get("metadata")
        if namespace and isinstance(metadata, dict):
            manifest["metadata"] = {"namespace": namespace, **metadata}
        if (api_version, kind) not in VALIDATED:
            self._count("ignored")
            return {
                "uid": uid,
                "allowed": True,
                "warnings": [f"Allot does not read {api_version} {kind}"],
            }
        shape = pod_shape_issues(obj) if kind == "Pod" else []
        if shape:  # not a pod, whichever scheduler it names
            return self._refused(uid, obj, shape)
        if kind == "Pod" and (pod_scheduler(obj) or "") != self.scheduler:
            self._count("not-ours")
            return {"uid": uid, "allowed": True}
        try:
            old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
            issues, warnings = verdict(manifest, old if isinstance(old, dict) else None)
        except (
            Exception
        ) as exc:  # a validator's bug is the webhook's error: failurePolicy decides, not a guess
            self._count("error")
            log.exception("validating %s failed", kind)
            raise WebhookError(f"Allot could not validate this {kind}: {type(exc).__name__}") from exc
        response: AdmissionResponse = {"uid": uid, "allowed": True}
        if warnings:
            response["warnings"] = [_line(w) for w in warnings]
        if issues:
            self._deny(response, kind, obj, issues)
        else:
            self._count("allowed")
        return response

    def _refused(self, uid: str, pod: JsonObject, issues: list[FieldIssue]) -> AdmissionResponse:
        response: AdmissionResponse = {"uid": uid, "allowed": True}
        self._deny(response, "Pod", pod, issues)
        return response

    def _deny(
        self, response: AdmissionResponse, kind: str, obj: JsonObject, issues: list[FieldIssue]
    ) -> None:
        self._count("denied")
        metadata = obj.get("metadata")
        named = metadata if isinstance(metadata, dict) else {}
        name = str(named.get("name") or named.get("generateName") or "")
        response["allowed"] = False
        shown = issues[:MAX_CAUSES]  # an object with 600,000 bad label keys made a 300 MB answer
        more = f"; and {len(issues) - len(shown)} more" if len(issues) > len(shown) else ""
        response["status"] = {
            "code": 422,
            "reason": "Invalid",
            "message": f"{kind} {name[:253]} is invalid: " + "; ".join(_line(i)[:1024] for i in shown) + more,
            "details": {
                "name": name[:253],
                "kind": kind,
                "causes": [
                    {"field": i.path[:1024], "message": i.message[:1024], "reason": "FieldValueInvalid"}
                    for i in shown
                ],
            },
        }

    async def review_validate(self, request: JsonObject) -> AdmissionResponse:
        """:meth:`validate`, then, for an ElasticQuota it let through (or its deletion), the tree check against the
        cluster's quotas. A list that fails is the webhook's error: ``failurePolicy`` decides."""
        response = self.validate(request)
        if self.quotas is None or not response["allowed"] or request_kind(request) != QUOTA_KIND:
            return response
        try:
            issues = quota_tree_issues(request, await self.quotas())
        except Exception as exc:
            self._count("error")
            log.exception("checking the ElasticQuota tree failed")
            raise WebhookError(f"Allot could not check the ElasticQuota tree: {exc}") from exc
        if issues:
            deleting = request.get("operation") == "DELETE"
            if not deleting:
                self._count("allowed", -1)  # counted by validate, refused now
            target = request.get("oldObject" if deleting else "object")
            self._deny(response, "ElasticQuota", target if isinstance(target, dict) else {}, issues)
        return response

    async def _profiled(
        self, request: JsonObject, obj: JsonObject
    ) -> tuple[JsonObject, list[FieldIssue], list[FieldIssue]]:
        """The pod after the cluster's ClusterColocationProfiles: (pod, issues, warnings)."""
        if self.profiles is None:
            return obj, [], []
        found = obj.get("metadata")
        metadata = found if isinstance(found, dict) else {}
        namespace = str(metadata.get("namespace") or request.get("namespace") or "default")
        try:
            world = await self.profiles(namespace)
        except Exception as exc:
            self._count("error")
            log.exception("listing the ClusterColocationProfiles failed")
            raise WebhookError(f"Allot could not list the ClusterColocationProfiles: {exc}") from exc
        if not world.profiles:
            return obj, [], []
        # Matched in the request's namespace; the pod's own (absent) namespace is not written back.
        named = metadata.get("uid") or metadata.get("name")
        mutation = apply_profiles(
            {**obj, "metadata": {**metadata, "namespace": namespace}},
            world.profiles,
            namespace=namespace_labels(namespace, world.namespace),
            priority_classes=world.priority_classes,
            identity=None if named else str(request.get("uid", "")),  # generateName only: this creation's uid
        )
        pod = mutation.manifest
        mutated = pod.get("metadata")
        if "namespace" not in metadata and isinstance(mutated, dict):
            mutated.pop("namespace", None)
        if mutation.applied:
            self._count("profiled")
        return pod, mutation.issues, mutation.warnings

    async def review_mutate(self, request: JsonObject) -> AdmissionResponse:
        """The ``response`` for the mutating webhook on pod creation: the ClusterColocationProfiles applied, then
        ``spec.schedulerName`` set, as one JSON patch."""
        uid = str(request["uid"])
        obj = request.get("object")
        _, kind = request_kind(request)
        if request.get("operation") != "CREATE" or kind != "Pod" or not isinstance(obj, dict):
            return {"uid": uid, "allowed": True}
        shape = pod_shape_issues(obj)
        if shape:  # not a pod: nothing to route or patch
            return self._refused(uid, obj, shape)
        pod, issues, notices = await self._profiled(request, obj)
        warnings = [_line(w) for w in notices]
        response: AdmissionResponse = {"uid": uid, "allowed": True}
        if issues:
            if warnings:
                response["warnings"] = warnings
            self._deny(response, "Pod", obj, issues)
            return response
        spec = pod.get("spec")
        current = str(pod_scheduler(pod) or "")
        if current and current not in ("default-scheduler", self.scheduler):
            self._count("kept")
            warnings.append(
                f"spec.schedulerName: kept {current!r}; Allot schedules pods of {self.scheduler!r}"
            )
        elif current != self.scheduler:
            pod = {
                **pod,
                "spec": {**(spec if isinstance(spec, dict) else {}), "schedulerName": self.scheduler},
            }
            self._count("routed")
        if warnings:
            response["warnings"] = warnings
        patch = diff(obj, pod)
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return response

    def app(self, limits: Limits = LIMITS) -> web.Application:
        async def review(
            request: web.Request, answer: Callable[[JsonObject], Awaitable[AdmissionResponse]]
        ) -> web.Response:
            if (
                request.content_type != "application/json"
            ):  # what the API server sends; a form is not a review
                shown = request.headers.get("Content-Type", "none")[:100]
                raise refuse(
                    f"the body must be Content-Type: application/json (an AdmissionReview); got {shown}", 415
                )
            try:
                found = parse_review(await read_json(request))
            except MalformedReview as exc:
                raise refuse(str(exc)) from None
            try:
                response = await answer(found.request)
            except WebhookError as exc:
                return web.json_response({"message": str(exc)}, status=500)
            return web.json_response(
                {"apiVersion": found.api_version, "kind": "AdmissionReview", "response": response}
            )

        async def validate(request: web.Request) -> web.Response:
            return await review(request, self.review_validate)

        async def mutate(request: web.Request) -> web.Response:
            return await review(request, self.review_mutate)

        app = application(limits)
        app.add_routes([web.post("/validate", validate), web.post("/mutate", mutate)])
        return app


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


async def serve(
    webhook: Webhook,
    *,
    host: str,
    port: int,
    context: ssl.SSLContext,
    stop: asyncio.Event,
    limits: Limits | None = None,
) -> None:
    """Serve the webhooks over TLS until ``stop``, with ``limits`` (:data:`LIMITS` unless given)."""
    runner = await start(webhook.app(limits or LIMITS), host, port, ssl_context=context)
    log.info("admission webhooks on https://%s:%d (/validate, /mutate)", host, port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
