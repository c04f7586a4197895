"""The fields Kubernetes knows in a Pod and a PodGroup (metadata, the pod spec, containers and their resources), so
that a misspelt one in a file (``resouces:``) is refused with its path as ``kubectl apply`` refuses it (strict field
validation), not read as absent: a pod whose requests were misspelt would otherwise be placed as if it asked for
nothing. Objects read from an API server have been decoded by it already; they are not checked again."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from allot_contracts.issues import FieldIssue

__all__ = ["unknown_fields"]

_META = frozenset(
    [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ]
)
_POD_SPEC = frozenset(
    [
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
    ]
)
_CONTAINER = frozenset(
    [
        "name",
        "image",
        "command",
        "args",
        "workingDir",
        "ports",
        "envFrom",
        "env",
        "resources",
        "resizePolicy",
        "restartPolicy",
        "volumeMounts",
        "volumeDevices",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "imagePullPolicy",
        "securityContext",
        "stdin",
        "stdinOnce",
        "tty",
    ]
)
_RESOURCES = frozenset({"limits", "requests", "claims"})
_POD_GROUP_SPEC = frozenset({"minMember", "minResources", "scheduleTimeoutSeconds"})
_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


def _unknown(value: object, known: frozenset[str], path: str) -> list[FieldIssue]:
    if not isinstance(value, dict):  # absent, or not an object: the admission says what it must be
        return []
    return [
        FieldIssue(
            path=f"{path}.{key}" if path else str(key),
            message="unknown field" + "".join(f"; did you mean {near!r}?" for near in _near(str(key), known)),
            code="FieldValueNotSupported",
        )
        for key in value
        if key not in known
    ]


def _near(key: str, known: frozenset[str]) -> list[str]:
    """The known field ``key`` is most likely a misspelling of, if any."""
    return difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)


def unknown_fields(body: Mapping[str, object]) -> list[FieldIssue]:
    """Every field of a Pod or PodGroup that Kubernetes does not know, with its path: what the API server refuses
    under ``kubectl apply``'s strict field validation (``strict decoding error: unknown field ...``)."""
    issues = _unknown(body, _TOP, "") + _unknown(body.get("metadata"), _META, "metadata")
    spec = body.get("spec")
    if body.get("kind") == "PodGroup":
        return issues + _unknown(spec, _POD_GROUP_SPEC, "spec")
    issues += _unknown(spec, _POD_SPEC, "spec")
    for group in ("initContainers", "containers"):
        containers = (spec or {}).get(group) if isinstance(spec, dict) else None
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            where = f"spec.{group}[{index}]"
            issues += _unknown(container, _CONTAINER, where)
            if isinstance(container, dict):
                issues += _unknown(container.get("resources"), _RESOURCES, f"{where}.resources")
    return issues
