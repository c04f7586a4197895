"""Workload objects in standalone mode: a Deployment, ReplicaSet, StatefulSet or Job becomes the pods its controller
would create, named as that controller names them.

In Kubernetes mode the controllers run in the cluster and Allot sees their pods; without a cluster (``allot apply``
against a standalone stack, ``allot sim run``) nobody would create them, so the door expands the workload itself:

==============  =========================================================================  ======================
kind            pods                                                                       names
==============  =========================================================================  ======================
Deployment      ``spec.replicas`` (default 1) pods of one ReplicaSet                        ``<deploy>-<hash>-<5>``
ReplicaSet      ``spec.replicas`` (default 1)                                               ``<rs>-<5>``
StatefulSet     ``spec.replicas`` (default 1), ordinals 0…N-1                               ``<sts>-<ordinal>``
Job             ``spec.parallelism`` (default 1), at most ``spec.completions``; Indexed     ``<job>-<5>``,
                jobs get their completion index                                             ``<job>-<i>-<5>``
==============  =========================================================================  ======================

``<hash>`` is the ``pod-template-hash`` label (derived from the pod template, so an unchanged template gives the
same name) and ``<5>`` five characters from the controllers' alphabet; both are computed from the object, never
drawn at random, so applying the same file twice names the same pods (the second apply is then refused as "already
exists", like any pod). Pods carry the template's labels and annotations, the owner reference of their controller,
and the workload's namespace. Nothing else of the workload (rollout strategy, scaling, restarts) is acted on;
``apply`` says so in a warning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from allot_contracts.fnv import fnv1a32
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.kube import storage_issues
from allot_contracts.objects.meta import read_meta

__all__ = ["MAX_REPLICAS", "WORKLOAD_KINDS", "expand"]

WORKLOAD_KINDS: Final = {
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
}
MAX_REPLICAS: Final = 10_000
_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # the characters Kubernetes uses for generated suffixes


def _encode(value: int, length: int | None = None) -> str:
    text = "".join(_ALPHABET[ord(c) % len(_ALPHABET)] for c in str(value))
    return text if length is None else (text * 2)[:length]


def _suffix(owner: str, index: int) -> str:
    return _encode(fnv1a32(f"{owner}/{index}".encode()), 5)


def _count(spec: Mapping[str, JsonValue], field: str, default: int, issues: list[FieldIssue]) -> int:
    value = spec.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        issues.append(
            FieldIssue(path=f"spec.{field}", message="must be a non-negative integer", value=str(value))
        )
        return 0
    if value > MAX_REPLICAS:
        issues.append(
            FieldIssue(
                path=f"spec.{field}",
                message=f"at most {MAX_REPLICAS} pods are created from one workload in standalone mode",
                value=str(value),
            )
        )
        return 0
    return value


def _pod(
    template: Mapping[str, JsonValue],
    name: str,
    namespace: str,
    owner: JsonObject,
    extra_labels: Mapping[str, str],
    extra_annotations: Mapping[str, str] = {},
) -> JsonObject:
    """A pod of the (checked) template: its metadata's labels and annotations, its spec."""
    meta = _object(template.get("metadata"))
    labels: JsonObject = {**_object(meta.get("labels")), **extra_labels}
    annotations: JsonObject = {**_object(meta.get("annotations")), **extra_annotations}
    out_meta: JsonObject = {"name": name, "namespace": namespace, "ownerReferences": [owner]}
    if labels:
        out_meta["labels"] = labels
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": _object(template.get("spec"))}


def _object(value: JsonValue) -> JsonObject:
    """A copy of ``value`` when it is an object, else an empty one."""
    return dict(value) if isinstance(value, dict) else {}


def _template_meta_issues(template: Mapping[str, JsonValue]) -> list[FieldIssue]:
    """What in the template's metadata cannot be copied into a pod (the pods' own admission checks the rest)."""
    meta = template.get("metadata")
    if meta is None:
        return []
    if not isinstance(meta, Mapping):
        return [FieldIssue(path="spec.template.metadata", message="must be an object")]
    return [
        FieldIssue(path=f"spec.template.metadata.{field}", message="must be a map of strings")
        for field in ("labels", "annotations")
        if meta.get(field) is not None and not isinstance(meta[field], Mapping)
    ]


def _owner(api_version: str, kind: str, name: str) -> JsonObject:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def expand(manifest: Mapping[str, JsonValue]) -> tuple[list[JsonObject], list[FieldIssue], list[FieldIssue]]:
    """The pods a workload's controller would create, with the issues that refuse it and the warnings to print."""
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    api_version, kind = str(manifest.get("apiVersion")), str(manifest.get("kind"))
    meta = read_meta(manifest, issues, namespaced=True)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        issues.append(FieldIssue(path="spec", code="Required", message="is required"))
        return [], issues, warnings
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        issues.append(FieldIssue(path="spec.template.spec", code="Required", message="is required"))
        return [], issues, warnings
    issues += [FieldIssue(path=p, message=m) for p, m in storage_issues(manifest)]
    issues += _template_meta_issues(template)
    if issues:
        return [], issues, warnings
    name, namespace = meta.name, meta.namespace
    pods: list[JsonObject] = []
    if kind == "Deployment":
        replicas = _count(spec, "replicas", 1, issues)
        digest = _encode(fnv1a32(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()))[:10]
        rs = f"{name}-{digest}"
        owner = _owner("apps/v1", "ReplicaSet", rs)
        pods = [
            _pod(template, f"{rs}-{_suffix(rs, i)}", namespace, owner, {"pod-template-hash": digest})
            for i in range(replicas)
        ]
    elif kind == "ReplicaSet":
        replicas = _count(spec, "replicas", 1, issues)
        owner = _owner(api_version, kind, name)
        pods = [_pod(template, f"{name}-{_suffix(name, i)}", namespace, owner, {}) for i in range(replicas)]
    elif kind == "StatefulSet":
        replicas = _count(spec, "replicas", 1, issues)
        owner = _owner(api_version, kind, name)
        pods = [
            _pod(
                template,
                f"{name}-{i}",
                namespace,
                owner,
                {"statefulset.kubernetes.io/pod-name": f"{name}-{i}", "apps.kubernetes.io/pod-index": str(i)},
            )
            for i in range(replicas)
        ]
    elif kind == "Job":
        parallelism = _count(spec, "parallelism", 1, issues)
        completions = spec.get("completions")
        count = parallelism
        if isinstance(completions, int) and not isinstance(completions, bool) and completions >= 0:
            count = min(parallelism, completions)
        owner = _owner(api_version, kind, name)
        indexed = spec.get("completionMode") == "Indexed"
        job_labels = {"batch.kubernetes.io/job-name": name, "job-name": name}
        for i in range(count):
            if indexed:
                index_labels = {**job_labels, "batch.kubernetes.io/job-completion-index": str(i)}
                pods.append(
                    _pod(
                        template,
                        f"{name}-{i}-{_suffix(name, i)}",
                        namespace,
                        owner,
                        index_labels,
                        {"batch.kubernetes.io/job-completion-index": str(i)},
                    )
                )
            else:
                pods.append(_pod(template, f"{name}-{_suffix(name, i)}", namespace, owner, job_labels))
    if issues:
        return [], issues, warnings
    warnings.append(
        FieldIssue(
            path="kind",
            code="Expanded",
            message=f"standalone mode: {kind} expanded into {len(pods)} pod(s) as its controller would create "
            "them; rollouts, scaling and restarts are not acted on",
        )
    )
    return pods, issues, warnings
