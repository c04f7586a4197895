"""The documents a what-if asks about: Pods and PodGroups, read strictly (an unknown field is refused with its path,
as ``kubectl apply --validate=strict`` refuses it), then admitted by the door ``allot apply`` uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from allot_intake.errors import InputError, UsageError

if TYPE_CHECKING:
    from allot_intake.documents import Document
    from allot_intake.manifests import Door, Input

KINDS = ("Pod", "PodGroup")
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


def _unknown(value: object, known: frozenset[str], path: str) -> list[str]:
    if not isinstance(value, dict):
        return [] if value is None else [f"{path}: must be a mapping"]
    return [
        f"{path}.{key}: unknown field" if path else f"{key}: unknown field"
        for key in value
        if key not in known
    ]


def unknown_fields(body: Mapping[str, object]) -> list[str]:
    """Every field of a Pod or PodGroup that Kubernetes does not know, with its path."""
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


def read(paths: list[str]) -> list[Document]:
    """The documents of ``paths`` ('-': stdin), every one a Pod or PodGroup with only known fields."""
    from allot_intake.documents import load_documents

    try:
        docs = [doc for path in paths for doc in load_documents(path)]
    except InputError as exc:
        raise UsageError(str(exc)) from exc
    if not docs:
        raise UsageError("-f: no documents found")
    problems: list[str] = []
    for doc in docs:
        if doc.kind not in KINDS:
            problems.append(
                f"{doc.label()}: kind: a what-if asks about Pods and PodGroups, not {doc.kind or '?'}"
            )
            continue
        problems += [f"{doc.label()}: {issue}" for issue in unknown_fields(doc.body)]
    if problems:
        raise UsageError("invalid input:\n  " + "\n  ".join(problems))
    return docs


def admitted(docs: list[Document], door: Door) -> tuple[list[Input], list[str], list[str]]:
    """The documents as the events ``allot apply`` would record, the pods asked about ("ns/name") and the door's
    warnings; a document the door refuses is a :class:`UsageError` naming each refused field."""
    from allot_intake.manifests import to_input

    verdicts = door.check_all(docs)
    refused = [line for verdict in verdicts for line in verdict.lines("error", verdict.issues)]
    if refused:
        raise UsageError("invalid input:\n  " + "\n  ".join(refused))
    warnings = [line for verdict in verdicts for line in verdict.lines("warning", verdict.warnings)]
    keys = [doc.ref.key for doc in docs if doc.kind == "Pod"]
    return [to_input(doc) for doc in docs], keys, warnings
