"""What the admission webhooks accept as an AdmissionReview (docs/limits.md#http-servers): the versions the API server
sends, a request whose fields have the types the API server gives them. A review that is not one is refused (HTTP
400) with the field path and the reason, before any object in it is judged: the API server never sends one, so it is
a client's mistake, not an object to allow or deny.

A Pod is also checked for the shape every pod has (``metadata`` and ``spec`` objects, ``spec.containers`` a list of
objects) before anything else is read from it: a pod without it is denied with the field path, whichever scheduler
it names, and never gets a JSON patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.meta import is_dns_label

__all__ = ["ACCEPTED_VERSIONS", "MalformedReview", "Review", "parse_review", "pod_shape_issues"]

ACCEPTED_VERSIONS: Final = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class MalformedReview(ValueError):
    """The body is not an AdmissionReview the API server would send: ``path`` and ``reason``."""

    def __init__(self, path: str, reason: str, value: object = None) -> None:
        shown = "" if value is None else f" (got {_shown(value)})"
        super().__init__(f"{path}: {reason}{shown}" if path else f"{reason}{shown}")
        self.path = path


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Review:
    """An AdmissionReview whose ``request`` has the types the API server gives it (the answer echoes
    ``api_version``)."""

    api_version: str
    request: JsonObject


def _optional_string(request: JsonObject, key: str) -> None:
    value = request.get(key)
    if value is not None and not isinstance(value, str):
        raise MalformedReview(f"request.{key}", "must be a string", value)


def _optional_object(request: JsonObject, key: str, operation: str) -> None:
    value = request.get(key)
    required = key == "object" and operation in ("CREATE", "UPDATE")
    if value is None and required:
        raise MalformedReview(f"request.{key}", f"is required for {operation}")
    if value is not None and not isinstance(value, dict):
        raise MalformedReview(f"request.{key}", "must be an object", value)


def _kind(request: JsonObject) -> None:
    kind = request.get("kind")
    if not isinstance(kind, dict):
        raise MalformedReview("request.kind", "must be an object with group, version and kind", kind)
    for key in ("group", "version", "kind"):
        value = kind.get(key, "")
        if not isinstance(value, str):
            raise MalformedReview(f"request.kind.{key}", "must be a string", value)
    if not kind.get("kind"):
        raise MalformedReview("request.kind.kind", "must be a non-empty string")


def parse_review(body: object) -> Review:
    """``body`` as an AdmissionReview, or :class:`MalformedReview` naming the first field that is not as sent."""
    if not isinstance(body, dict):
        raise MalformedReview("", "the body must be an AdmissionReview object")
    if body.get("kind") != "AdmissionReview":
        raise MalformedReview("kind", "must be AdmissionReview", body.get("kind"))
    version = body.get("apiVersion")
    if version not in ACCEPTED_VERSIONS:
        raise MalformedReview("apiVersion", f"must be one of {', '.join(ACCEPTED_VERSIONS)}", version)
    request = body.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request", "must be an object", request)
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("request.uid", "must be a non-empty string", uid)
    _kind(request)
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise MalformedReview("request.operation", f"must be one of {', '.join(OPERATIONS)}", operation)
    for key in ("namespace", "name"):
        _optional_string(request, key)
    namespace = request.get("namespace")
    if namespace and not is_dns_label(str(namespace)):  # it goes into the API server's URL of the namespace
        raise MalformedReview("request.namespace", "must be a namespace name (a DNS-1123 label)", namespace)
    for key in ("object", "oldObject"):
        _optional_object(request, key, str(operation))
    return Review(api_version=str(version), request=request)


def request_kind(request: JsonObject) -> tuple[str, str]:
    """(apiVersion, kind) of the object a request is about, from ``request.kind`` (its group, version and kind)."""
    found = request.get("kind")
    kind = found if isinstance(found, dict) else {}
    api_version = "/".join(p for p in (kind.get("group"), kind.get("version")) if isinstance(p, str) and p)
    name = kind.get("kind")
    return api_version, name if isinstance(name, str) else ""


def pod_scheduler(pod: JsonObject) -> JsonValue:
    """``spec.schedulerName`` of a pod (None when not set or ``spec`` is not an object)."""
    spec = pod.get("spec")
    return spec.get("schedulerName") if isinstance(spec, dict) else None


def _containers(spec: JsonObject, key: str, required: bool) -> list[FieldIssue]:
    containers = spec.get(key)
    if containers is None and not required:
        return []
    if not isinstance(containers, list):
        return [FieldIssue(path=f"spec.{key}", message="must be a list", value=_shown(containers))]
    issues = [
        FieldIssue(path=f"spec.{key}[{i}]", message="must be an object", value=_shown(c))
        for i, c in enumerate(containers)
        if not isinstance(c, dict)
    ]
    if required and not containers:
        issues.append(FieldIssue(path=f"spec.{key}", message="at least one container is required"))
    return issues


def pod_shape_issues(pod: JsonObject) -> list[FieldIssue]:
    """What keeps ``pod`` from being a pod at all: ``metadata`` and ``spec`` not objects, ``spec.schedulerName`` not
    a string, ``spec.containers`` (``spec.initContainers``) not a list of objects."""
    issues = []
    metadata = pod.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        issues.append(FieldIssue(path="metadata", message="must be an object", value=_shown(metadata)))
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [*issues, FieldIssue(path="spec", message="must be an object", value=_shown(spec))]
    scheduler = spec.get("schedulerName")
    if scheduler is not None and not isinstance(scheduler, str):
        issues.append(
            FieldIssue(path="spec.schedulerName", message="must be a string", value=_shown(scheduler))
        )
    return issues + _containers(spec, "containers", True) + _containers(spec, "initContainers", False)
