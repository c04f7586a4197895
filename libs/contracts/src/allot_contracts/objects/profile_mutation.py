"""What Koordinator's pod mutating webhook does to a new pod with the ClusterColocationProfiles of the cluster
(``pkg/webhook/pod/mutating/cluster_colocation_profile.go``), as one pure function every door calls before it
admits the pod: ``allot apply``, the simulator and ``allot webhook`` (kube-sync records pods the API server's webhook
already mutated, and does not apply profiles again).

:func:`apply_profiles`, in upstream's order:

1. The profiles whose ``namespaceSelector`` matches the labels of the pod's namespace and whose ``selector`` matches
   the pod's labels, all chosen against the pod as it was sent, applied in name order.
2. For each, unless its ``probability`` draw excludes the pod (:func:`~allot_contracts.objects.colocation_profile.draw`):
   ``labels``, ``annotations``, ``labelKeysMapping`` (``labels[new] = labels[old]``, ``""`` when there is no old
   one), ``annotationKeysMapping``, ``labelSuffixes`` (appended to a label the pod has), ``schedulerName``,
   ``qosClass`` (the ``koordinator.sh/qosClass`` label), ``priorityClassName`` with the PriorityClass's ``value`` as
   ``spec.priority`` and its ``preemptionPolicy`` (a PriorityClass that does not exist refuses the pod, as the
   webhook's error does), ``koordinatorPriority`` (the ``koordinator.sh/priority`` label), then ``patch`` (a strategic
   merge patch, :mod:`allot_contracts.objects.pod_patch`).
3. Once any profile matched (even one the draw excluded), unless one of them carries the annotation
   ``config.koordinator.sh/skip-update-resources``: for a pod whose Koordinator priority class (with default: the
   ``koordinator.sh/priority-class`` label, the ``spec.priority`` band, else from its QoS class) is koord-batch or
   koord-mid, ``cpu`` and ``memory`` in every container's and init container's requests and limits and in
   ``spec.overhead`` become ``kubernetes.io/batch-cpu`` / ``batch-memory`` (``mid-cpu`` / ``mid-memory``), cpu as its
   count of millicores in the API server's canonical form (``"500"``, ``"1k"`` for 1000); a container with an
   extended limit and no extended request then requests its limit.

The result says which profile changed which field: one warning per profile (code ``Mutated``: the fields it set,
``Skipped``: the draw excluded the pod), one for the resources, and ``set_by`` (field path → profile) so that a
refusal of the mutated pod can name the profile that caused it. A cpu quantity that cannot be read is left where it
is, for admission to refuse with its path.
Pure; the manifest given is not modified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonpatch import diff, field_path
from allot_contracts.kube import koord_priority_class
from allot_contracts.objects import names as n
from allot_contracts.objects.colocation_profile import ColocationProfile, draw, pod_identity, profile_matches
from allot_contracts.objects.gang import LABEL_SUB_PRIORITY
from allot_contracts.objects.pod_patch import PatchError, merge_pod_patch
from allot_contracts.objects.pod_priority import PriorityClassInfo
from allot_contracts.quantity import QuantityError, to_canonical

__all__ = ["ProfileMutation", "apply_profiles", "namespace_labels"]

NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
_TRANSLATE: Final = {
    "koord-batch": {n.CPU: n.BATCH_CPU, n.MEMORY: n.BATCH_MEMORY},
    "koord-mid": {n.CPU: n.MID_CPU, n.MEMORY: n.MID_MEMORY},
}
_SI: Final = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))
_SHOWN: Final = 12  # fields named per warning


@dataclass
class ProfileMutation:
    """The pod after the profiles; ``issues`` refuse it (the webhook would have failed)."""

    manifest: dict[str, Any]
    applied: list[str] = field(default_factory=list)
    issues: list[FieldIssue] = field(default_factory=list)
    warnings: list[FieldIssue] = field(default_factory=list)
    set_by: dict[str, str] = field(default_factory=dict)  # field path -> the profile that set it

    def attribute(self, issues: Iterable[FieldIssue]) -> list[FieldIssue]:
        """``issues`` about the mutated pod, each naming the profile that set its field."""
        out = []
        for issue in issues:
            profile = self.set_by.get(issue.path)
            if profile:
                issue = FieldIssue(
                    path=issue.path,
                    code=issue.code,
                    value=issue.value,
                    message=f"{issue.message} (set by ClusterColocationProfile {profile})",
                )
            out.append(issue)
        return out


def namespace_labels(name: str, labels: Mapping[str, Any] | None) -> dict[str, str]:
    """A namespace's labels as the API server keeps them: with ``kubernetes.io/metadata.name`` (a namespace no one
    described has only that one)."""
    return {**{str(k): str(v) for k, v in (labels or {}).items()}, NAMESPACE_NAME_LABEL: name}


def _copy(value: Any) -> Any:
    """A copy of a manifest's maps and lists (their leaves are immutable)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _labels(meta: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = meta.get(key)
    return value if isinstance(value, dict) else {}


def _set_meta(pod: dict[str, Any], key: str) -> dict[str, Any]:
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        meta = pod["metadata"] = {}
    if not isinstance(meta.get(key), dict):
        meta[key] = {}
    value: dict[str, Any] = meta[key]
    return value


def _mutate_one(
    pod: dict[str, Any], profile: ColocationProfile, priority_classes: Mapping[str, PriorityClassInfo]
) -> dict[str, Any]:
    """``pod`` as one profile leaves it (upstream's ``doMutateByColocationProfile``); :class:`PatchError` when it
    cannot be applied."""
    if profile.labels:
        _set_meta(pod, "labels").update(profile.labels)
    if profile.annotations:
        _set_meta(pod, "annotations").update(profile.annotations)
    for key, mapping in (
        ("labels", profile.label_keys_mapping),
        ("annotations", profile.annotation_keys_mapping),
    ):
        if mapping:
            values = _set_meta(pod, key)
            for old, new in mapping:
                values[new] = values.get(old, "")
    if profile.label_suffixes:
        labels = _set_meta(pod, "labels")
        for key, suffix in profile.label_suffixes:
            if key in labels:
                labels[key] = f"{labels[key]}{suffix}"
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = pod["spec"] = {}
    if profile.scheduler_name:
        spec["schedulerName"] = profile.scheduler_name
    if profile.qos_class:
        _set_meta(pod, "labels")[n.LABEL_QOS] = profile.qos_class
    if profile.priority_class_name:
        pc = priority_classes.get(profile.priority_class_name)
        if pc is None:
            raise PatchError(
                "spec.priorityClassName",
                f"no PriorityClass with name {profile.priority_class_name} was found",
                code="NotFound",
            )
        spec.update(priorityClassName=pc.name, priority=pc.value, preemptionPolicy=pc.preemption_policy)
    if profile.koordinator_priority is not None:
        _set_meta(pod, "labels")[LABEL_SUB_PRIORITY] = str(profile.koordinator_priority)
    if profile.patch:
        return merge_pod_patch(pod, profile.patch)
    return pod


def _decimal_si(value: int) -> str:
    """An integer as the API server writes a DecimalSI quantity: ``1000`` → ``1k``, ``1500`` → ``1500``."""
    for suffix, factor in _SI:
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def _moved(values: dict[str, Any], translate: Mapping[str, str]) -> None:
    for plain, extended in translate.items():
        if plain not in values:
            continue
        amount = values[plain]
        if plain == n.CPU:
            try:
                amount = _decimal_si(to_canonical(n.CPU, amount))
            except (QuantityError, TypeError):
                continue  # unreadable: admission refuses it at its own path
        del values[plain]
        values[extended] = amount


def _containers(spec: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    out = []
    for group in ("initContainers", "containers"):
        raw = spec.get(group)
        if raw is None:
            continue
        if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
            return None
        out += raw
    return out


def _translate_resources(pod: dict[str, Any]) -> str:
    """Upstream's ``mutatePodResourceSpec``: the priority class whose resources the pod now asks for, or ``""``."""
    spec = pod.get("spec")
    containers = _containers(spec) if isinstance(spec, dict) else None
    if containers is None or not all(_readable(c.get("resources")) for c in containers):
        return ""  # malformed: admission refuses it with the path
    priority_class = koord_priority_class(pod)
    translate = _TRANSLATE.get(priority_class)
    if translate is None:
        return ""
    for container in containers:
        resources = container.get("resources")
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            if isinstance(resources.get(part), dict):
                _moved(resources[part], translate)
        limits = resources.get("limits")
        if not isinstance(limits, dict):
            continue
        for extended in translate.values():
            requests = resources.get("requests")
            if extended in limits and not (isinstance(requests, dict) and extended in requests):
                if not isinstance(requests, dict):
                    requests = resources["requests"] = {}
                requests[extended] = limits[extended]
    if isinstance(spec, dict) and isinstance(spec.get("overhead"), dict):
        _moved(spec["overhead"], translate)
    return priority_class


def _readable(resources: Any) -> bool:
    return resources is None or (
        isinstance(resources, dict)
        and all(isinstance(resources.get(part) or {}, dict) for part in ("requests", "limits"))
    )


def _show(value: Any) -> str:
    return "{…}" if isinstance(value, dict | list) else str(value)


def _changes(before: Any, after: Any) -> list[tuple[str, str]]:
    """(field path, what it became) of every change."""
    return [
        (field_path(op["path"]), "removed" if op["op"] == "remove" else _show(op["value"]))
        for op in diff(before, after)
    ]


def _notice(code: str, lead: str, changes: list[tuple[str, str]]) -> FieldIssue:
    shown = ", ".join(f"{path}={value}" for path, value in changes[:_SHOWN])
    more = f" and {len(changes) - _SHOWN} more" if len(changes) > _SHOWN else ""
    return FieldIssue(path="", code=code, message=f"{lead}: {shown or 'nothing changed'}{more}")


def _pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = pod.get("metadata")
    return {str(k): str(v) for k, v in _labels(meta, "labels").items()} if isinstance(meta, Mapping) else {}


def apply_profiles(
    manifest: Mapping[str, Any],
    profiles: Iterable[ColocationProfile],
    *,
    namespace: Mapping[str, str],
    priority_classes: Mapping[str, PriorityClassInfo],
    identity: str | None = None,
) -> ProfileMutation:
    """The pod as Koordinator's mutating webhook leaves it (see the module docstring). ``namespace``: the labels of
    the pod's namespace (:func:`namespace_labels`); ``identity``: what the probability draw is derived from
    (default: the pod's uid, else ``namespace/name``)."""
    result = ProfileMutation(manifest=dict(manifest))
    if not all(isinstance(manifest.get(part) or {}, dict) for part in ("metadata", "spec")):
        return result  # malformed: admission refuses it with the path
    labels = _pod_labels(manifest)
    matched = sorted((p for p in profiles if profile_matches(p, labels, namespace)), key=lambda p: p.name)
    if not matched:
        return result
    pod: dict[str, Any] = _copy(result.manifest)
    who = identity if identity is not None else pod_identity(pod)
    for profile in matched:
        lead = f"ClusterColocationProfile {profile.name}"
        if profile.probability_percent < 100:
            drawn = draw(profile.name, who)
            if drawn >= profile.probability_percent:
                result.warnings.append(
                    FieldIssue(
                        path="",
                        code="Skipped",
                        message=f"{lead}: not applied to this pod (probability {profile.probability_percent}%, "
                        f"the pod's draw is {drawn})",
                    )
                )
                continue
        before = _copy(pod)
        try:
            pod = _mutate_one(pod, profile, priority_classes)
        except PatchError as exc:
            result.issues.append(FieldIssue(path=exc.path, code=exc.code, message=f"{lead}: {exc.message}"))
            return result
        changes = _changes(before, pod)
        result.applied.append(profile.name)
        result.set_by.update((path, profile.name) for path, _ in changes)
        result.warnings.append(_notice("Mutated", f"{lead} set", changes))
    if not any(p.skip_update_resources for p in matched):
        before = _copy(pod)
        priority_class = _translate_resources(pod)
        changes = _changes(before, pod)
        if changes:
            names = ", ".join(p.name for p in matched)
            result.set_by.update((path, matched[-1].name) for path, _ in changes)
            moved = " and ".join(f"{k} to {v}" for k, v in _TRANSLATE[priority_class].items())
            places = sorted({path.rsplit("[", 1)[0] for path, _ in changes})
            result.warnings.append(
                FieldIssue(
                    path="",
                    code="Mutated",
                    message=f"ClusterColocationProfile {names}: a {priority_class} pod: {moved} in "
                    + ", ".join(places),
                )
            )
    result.manifest = pod
    return result
