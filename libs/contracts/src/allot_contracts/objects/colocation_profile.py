"""Koordinator's ``ClusterColocationProfile`` (``config.koordinator.sh/v1alpha1``): reading one, which pods it
selects, and whether its ``probability`` lets it apply to a pod.

Responsibility: the typed profile (:class:`ColocationProfile`) with every malformed field refused by its path; the
selection rule of Koordinator's pod mutating webhook (``pkg/webhook/pod/mutating/cluster_colocation_profile.go``):
``namespaceSelector`` against the labels of the pod's namespace and ``selector`` against the pod's labels, an absent
or empty selector matching everything; and the probability draw. What a selected profile does to a pod is
:mod:`allot_contracts.objects.profile_mutation`.

``probability`` (an integer or a percentage such as ``"50%"``, 0 to 100) is random upstream (``rand.Intn(100)`` per
pod). Allot decides it from the pod itself so that every door, the simulator and a replay agree: the draw is the
first 8 bytes of SHA-256 of ``"<profile name>/<pod identity>"`` modulo 100 (the identity is the pod's uid when the
manifest has one, else ``namespace/name``), and the profile applies when the draw is below the percentage; 100 %
always applies, 0 % never (docs/node-side.md, "ClusterColocationProfile").
Pure; no IO.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, not_supported
from allot_contracts.objects import names as n
from allot_contracts.objects.meta import metadata_of, required_name
from allot_contracts.objects.pod_patch import patch_issues
from allot_contracts.objects.selectors import LabelSelector, match_label_selector, parse_label_selector

__all__ = [
    "ANN_SKIP_UPDATE_RESOURCES",
    "PROFILE_API_VERSION",
    "PROFILE_KIND",
    "ColocationProfile",
    "draw",
    "parse_colocation_profile",
    "pod_identity",
    "profile_matches",
]

PROFILE_API_VERSION: Final = "config.koordinator.sh/v1alpha1"
PROFILE_KIND: Final = "ClusterColocationProfile"
# On the profile's own metadata: the matched pods' cpu/memory are not moved to batch/mid resources.
ANN_SKIP_UPDATE_RESOURCES: Final = "config.koordinator.sh/skip-update-resources"
_INT32: Final = (-(2**31), 2**31 - 1)

Pairs = tuple[tuple[str, str], ...]


class ColocationProfile(msgspec.Struct, frozen=True, kw_only=True):
    """What a ClusterColocationProfile sets on the pods it selects (``probability`` as a percentage; ``patch`` the
    strategic merge patch as written)."""

    name: str
    namespace_selector: LabelSelector | None = None
    selector: LabelSelector | None = None
    probability_percent: int = 100
    qos_class: str = ""
    priority_class_name: str = ""
    koordinator_priority: int | None = None
    labels: Pairs = ()
    annotations: Pairs = ()
    label_keys_mapping: Pairs = ()
    annotation_keys_mapping: Pairs = ()
    label_suffixes: Pairs = ()
    scheduler_name: str = ""
    patch: dict[str, Any] | None = None
    skip_update_resources: bool = False


def _string_pairs(raw: Any, path: str, issues: list[FieldIssue]) -> Pairs:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        issues.append(FieldIssue(path=path, message="must be a map of strings"))
        return ()
    return tuple(sorted((str(k), v) for k, v in raw.items()))


def _probability(raw: Any, issues: list[FieldIssue]) -> int:
    if raw is None:
        return 100
    text = str(raw)
    if isinstance(raw, int) and not isinstance(raw, bool):
        value: int | None = raw
    elif isinstance(raw, str) and raw.endswith("%") and raw[:-1].isdigit():
        value = int(raw[:-1])
    else:
        value = None
    if value is None or not 0 <= value <= 100:
        issues.append(
            FieldIssue(
                path="spec.probability",
                message="must be an integer or a percentage such as 50%, from 0 to 100",
                value=text,
            )
        )
        return 100
    return value


def _selector(spec: Mapping[str, Any], key: str, issues: list[FieldIssue]) -> LabelSelector | None:
    raw = spec.get(key)
    return None if raw is None else parse_label_selector(raw, f"spec.{key}", issues)


def parse_colocation_profile(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> ColocationProfile | None:
    """Read a ClusterColocationProfile; ``None`` (with ``issues``) when any field is refused."""
    before = len(issues)
    meta = metadata_of(manifest)
    name = required_name(meta, issues)
    spec = manifest.get("spec") or {}
    if not isinstance(spec, Mapping):
        issues.append(FieldIssue(path="spec", message="must be an object"))
        return None
    qos = spec.get("qosClass") or ""
    if qos and (not isinstance(qos, str) or qos not in n.QOS_CLASSES):
        issues.append(not_supported("spec.qosClass", sorted(n.QOS_CLASSES), qos))
    priority = spec.get("koordinatorPriority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not _INT32[0] <= priority <= _INT32[1]
    ):
        issues.append(
            FieldIssue(
                path="spec.koordinatorPriority", message="must be a 32-bit integer", value=str(priority)
            )
        )
        priority = None
    for key in ("priorityClassName", "schedulerName"):
        if spec.get(key) is not None and not isinstance(spec.get(key), str):
            issues.append(FieldIssue(path=f"spec.{key}", message="must be a string"))
    patch = spec.get("patch")
    if patch is not None:
        issues += patch_issues(patch, "spec.patch")
    annotations = meta.get("annotations")
    profile = ColocationProfile(
        name=name,
        namespace_selector=_selector(spec, "namespaceSelector", issues),
        selector=_selector(spec, "selector", issues),
        probability_percent=_probability(spec.get("probability"), issues),
        qos_class=str(qos),
        priority_class_name=str(spec.get("priorityClassName") or ""),
        koordinator_priority=priority,
        labels=_string_pairs(spec.get("labels"), "spec.labels", issues),
        annotations=_string_pairs(spec.get("annotations"), "spec.annotations", issues),
        label_keys_mapping=_string_pairs(spec.get("labelKeysMapping"), "spec.labelKeysMapping", issues),
        annotation_keys_mapping=_string_pairs(
            spec.get("annotationKeysMapping"), "spec.annotationKeysMapping", issues
        ),
        label_suffixes=_string_pairs(spec.get("labelSuffixes"), "spec.labelSuffixes", issues),
        scheduler_name=str(spec.get("schedulerName") or ""),
        patch=dict(patch) if isinstance(patch, Mapping) and patch else None,
        skip_update_resources=isinstance(annotations, Mapping) and ANN_SKIP_UPDATE_RESOURCES in annotations,
    )
    return None if len(issues) > before else profile


def profile_matches(
    profile: ColocationProfile, pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str]
) -> bool:
    """Koordinator's webhook rule: both selectors must match (an absent or empty one matches everything)."""
    if profile.namespace_selector is not None and not match_label_selector(
        profile.namespace_selector, namespace_labels
    ):
        return False
    return profile.selector is None or match_label_selector(profile.selector, pod_labels)


def pod_identity(manifest: Mapping[str, Any]) -> str:
    """What the probability draw is derived from: the pod's uid when it has one, else ``namespace/name``."""
    meta = metadata_of(manifest)
    if meta.get("uid"):
        return str(meta["uid"])
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or meta.get('generateName') or ''}"


def draw(profile: str, identity: str) -> int:
    """The pod's draw for a profile, in [0, 100): the profile applies when it is below its probability."""
    digest = hashlib.sha256(f"{profile}/{identity}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100
