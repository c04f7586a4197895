"""The fields Kubernetes knows in the objects Allot reads from files: every object's metadata; a Pod's spec, containers
and their resources (a workload's or Reservation's pod template's too); a Node's spec and status; the top level of a ConfigMap,
Namespace and PriorityClass and a workload's spec; the spec of each custom resource (as its CRD in
``deploy/helm/allot/crds`` has it; a test keeps the two equal). A misspelt field (``resouces:``) is refused with its
path and the nearest known name, as ``kubectl apply`` refuses it (strict field validation), not read as absent: a pod
whose requests were misspelt would otherwise be placed as if it asked for nothing. Objects read from an API server
have been decoded by it already; they are not checked again.

A Reservation's pod template is the exception to refusing: its CRD keeps the template as written
(``x-kubernetes-preserve-unknown-fields``) and Koordinator decodes it as a PodTemplateSpec, which skips a field it does
not have, so ``kubectl apply`` takes such a field and the scheduler ignores it (upstream's own sample,
``config/samples/scheduling_v1alpha1_reservation.yaml``, writes ``spec.template.namespace``). There an unknown field is
a warning (code :data:`IGNORED`) and ignored too, unless it is a likely misspelling of a known one, which is still
refused: ``resouces:`` would reserve nothing."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final

from allot_contracts.issues import FieldIssue

__all__ = ["BUILTIN", "CUSTOM", "IGNORED", "STATUS", "WORKLOADS", "unknown_fields"]

IGNORED: Final = (
    "Ignored"  # the code of an unknown field that is only a warning (a Reservation's pod template)
)

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
_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_NODE_SPEC = frozenset(
    {"podCIDR", "podCIDRs", "providerID", "unschedulable", "taints", "configSource", "externalID"}
)
_NODE_STATUS = frozenset(
    {
        "capacity",
        "allocatable",
        "phase",
        "conditions",
        "addresses",
        "daemonEndpoints",
        "nodeInfo",
        "images",
        "volumesInUse",
        "volumesAttached",
        "config",
        "runtimeHandlers",
        "features",
    }
)
_TOPOLOGY_TOP = frozenset({"apiVersion", "kind", "metadata", "topologyPolicies", "zones"})
_TEMPLATE = frozenset({"metadata", "spec"})

# (apiVersion, kind) -> its top-level fields, for the built-in kinds without a spec Allot reads
BUILTIN: dict[tuple[str, str], frozenset[str]] = {
    ("v1", "ConfigMap"): frozenset({"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"}),
    ("v1", "Namespace"): _TOP,
    ("scheduling.k8s.io/v1", "PriorityClass"): frozenset(
        {"apiVersion", "kind", "metadata", "value", "globalDefault", "description", "preemptionPolicy"}
    ),
}

# (apiVersion, kind) -> its spec's fields, for the workloads a standalone stack expands into pods
_SELECTOR_TEMPLATE = frozenset({"replicas", "selector", "template", "minReadySeconds"})
WORKLOADS: dict[tuple[str, str], frozenset[str]] = {
    ("apps/v1", "Deployment"): _SELECTOR_TEMPLATE
    | {"strategy", "revisionHistoryLimit", "paused", "progressDeadlineSeconds"},
    ("apps/v1", "ReplicaSet"): _SELECTOR_TEMPLATE,
    ("apps/v1", "StatefulSet"): _SELECTOR_TEMPLATE
    | {
        "serviceName",
        "volumeClaimTemplates",
        "podManagementPolicy",
        "updateStrategy",
        "revisionHistoryLimit",
        "persistentVolumeClaimRetentionPolicy",
        "ordinals",
    },
    ("batch/v1", "Job"): frozenset(
        {
            "parallelism",
            "completions",
            "activeDeadlineSeconds",
            "podFailurePolicy",
            "successPolicy",
            "backoffLimit",
            "backoffLimitPerIndex",
            "maxFailedIndexes",
            "selector",
            "manualSelector",
            "template",
            "ttlSecondsAfterFinished",
            "completionMode",
            "suspend",
            "podReplacementPolicy",
            "managedBy",
        }
    ),
}

# (apiVersion, kind) -> (its top-level fields, its spec's fields): the custom resources as their CRDs have them
CUSTOM: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {
    ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup"): (
        _TOP,
        frozenset({"minMember", "minResources", "scheduleTimeoutSeconds"}),
    ),
    ("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota"): (_TOP, frozenset({"min", "max"})),
    ("quota.koordinator.sh/v1alpha1", "ElasticQuotaProfile"): (
        _TOP,
        frozenset({"quotaName", "quotaLabels", "resourceRatio", "nodeSelector"}),
    ),
    ("config.koordinator.sh/v1alpha1", "ClusterColocationProfile"): (
        _TOP,
        frozenset(
            {
                "namespaceSelector",
                "selector",
                "qosClass",
                "priorityClassName",
                "koordinatorPriority",
                "labels",
                "annotations",
                "labelKeysMapping",
                "annotationKeysMapping",
                "labelSuffixes",
                "schedulerName",
                "patch",
                "probability",
            }
        ),
    ),
    ("scheduling.koordinator.sh/v1alpha1", "Device"): (_TOP, frozenset({"devices"})),
    ("scheduling.koordinator.sh/v1alpha1", "Reservation"): (
        _TOP,
        frozenset(
            {
                "template",
                "owners",
                "ttl",
                "expires",
                "preAllocation",
                "preAllocationPolicy",
                "allocateOnce",
                "allocatePolicy",
                "unschedulable",
                "taints",
            }
        ),
    ),
    ("scheduling.koordinator.sh/v1alpha1", "PodMigrationJob"): (
        _TOP,
        frozenset({"podRef", "mode", "ttl", "paused", "reservationOptions", "deleteOptions"}),
    ),
    ("slo.koordinator.sh/v1alpha1", "NodeMetric"): (_TOP, frozenset({"metricCollectPolicy"})),
    ("topology.node.k8s.io/v1alpha1", "NodeResourceTopology"): (_TOPOLOGY_TOP, frozenset()),
    ("topology.node.k8s.io/v1alpha2", "NodeResourceTopology"): (_TOPOLOGY_TOP | {"attributes"}, frozenset()),
}


# (apiVersion, kind) -> its status's fields, for the custom resources whose status a user writes (a NodeMetric
# stands for what koordlet reports)
STATUS: dict[tuple[str, str], frozenset[str]] = {
    ("slo.koordinator.sh/v1alpha1", "NodeMetric"): frozenset(
        {
            "updateTime",
            "nodeMetric",
            "podsMetric",
            "hostApplicationMetric",
            "prodReclaimableMetric",
            "prodPeakMetric",
        }
    )
}


def _unknown(value: object, known: frozenset[str], path: str, *, preserved: bool = False) -> list[FieldIssue]:
    """The keys of ``value`` not in ``known``, each refused with the known name it is most likely a misspelling of;
    ``preserved``: where the CRD keeps what is written and upstream's decoder skips what it does not know, a key that
    is no misspelling is a warning (:data:`IGNORED`) instead."""
    if not isinstance(value, dict):  # absent, or not an object: the admission says what it must be
        return []
    issues: list[FieldIssue] = []
    for key in value:
        if key in known:
            continue
        where = f"{path}.{key}" if path else str(key)
        near = _near(str(key), known)
        if preserved and not near:
            issues.append(FieldIssue(path=where, message=_ignored(str(key), known, path), code=IGNORED))
            continue
        message = "unknown field" + "".join(f"; did you mean {name!r}?" for name in near)
        issues.append(FieldIssue(path=where, message=message, code="FieldValueNotSupported"))
    return issues


def _ignored(key: str, known: frozenset[str], path: str) -> str:
    message = (
        "unknown field, ignored: Koordinator reads the template as a pod template, which has no such field"
    )
    if known == _TEMPLATE and key in _META:
        message += f" (a pod template's {key} is {path}.metadata.{key})"
    return message


def _near(key: str, known: frozenset[str]) -> list[str]:
    """The known field ``key`` is most likely a misspelling of, if any."""
    return difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)


def _pod_spec(spec: object, path: str, *, preserved: bool = False) -> list[FieldIssue]:
    """A pod spec's unknown fields, its containers' and their resources'."""
    issues = _unknown(spec, _POD_SPEC, path, preserved=preserved)
    for group in ("initContainers", "containers"):
        containers = spec.get(group) if isinstance(spec, dict) else None
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            where = f"{path}.{group}[{index}]"
            issues += _unknown(container, _CONTAINER, where, preserved=preserved)
            if isinstance(container, dict):
                issues += _unknown(
                    container.get("resources"), _RESOURCES, f"{where}.resources", preserved=preserved
                )
    return issues


def _template(spec: object, *, preserved: bool = False) -> list[FieldIssue]:
    """A pod template's (``spec.template``: a workload's, a Reservation's) unknown fields; ``preserved``: a
    Reservation's (the module's docstring)."""
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        return []
    return (
        _unknown(template, _TEMPLATE, "spec.template", preserved=preserved)
        + _unknown(template.get("metadata"), _META, "spec.template.metadata", preserved=preserved)
        + _pod_spec(template.get("spec"), "spec.template.spec", preserved=preserved)
    )


def unknown_fields(api_version: str, kind: str, body: Mapping[str, object]) -> list[FieldIssue]:
    """Every field of ``body`` that Kubernetes does not know where this module knows the fields, with its path: what
    the API server refuses under ``kubectl apply``'s strict field validation (``strict decoding error: unknown field
    ...``), and in a Reservation's template the fields it keeps and upstream ignores (code :data:`IGNORED`, a
    warning). Other kinds (and the parts not listed here: a custom resource's status, a ResourceList's names, a
    workload's strategy) are left to their readers."""
    key = (api_version, kind)
    issues = _unknown(body.get("metadata"), _META, "metadata")
    spec = body.get("spec")
    if key == ("v1", "Node"):
        return (
            _unknown(body, _TOP, "")
            + issues
            + _unknown(spec, _NODE_SPEC, "spec")
            + _unknown(body.get("status"), _NODE_STATUS, "status")
        )
    if key in CUSTOM:
        top, fields = CUSTOM[key]
        issues = _unknown(body, top, "") + issues + (_unknown(spec, fields, "spec") if fields else [])
        status = STATUS.get(key)
        issues += _unknown(body.get("status"), status, "status") if status else []
        return issues + (_template(spec, preserved=True) if kind == "Reservation" else [])
    if key in BUILTIN:
        return _unknown(body, BUILTIN[key], "") + issues
    if key in WORKLOADS:
        return _unknown(body, _TOP, "") + issues + _unknown(spec, WORKLOADS[key], "spec") + _template(spec)
    if key != ("v1", "Pod"):
        return issues
    return _unknown(body, _TOP, "") + issues + _pod_spec(spec, "spec")
