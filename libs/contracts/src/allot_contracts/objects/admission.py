"""Admission: one function per kind, the same for every door (``allot apply``, ``kube-sync``, the simulator, the
admission webhook and the services).

Responsibility: ``admit(manifest, context)`` finds the kind of a manifest in ``KINDS``, runs that kind's parser and
returns an ``Admitted``: the typed object (``obj``) or ``None``, the ``issues`` that refuse it (field path, code,
reason) and the ``warnings`` (what was read but is not acted on, or is suspicious). A manifest of a kind Allot does
not know is refused with the list of kinds it accepts; a kind Allot accepts but does not act on is admitted with a
warning saying so. Checks that need the state of the cluster (a quota's parent, a gang's settings in force) are not
made here: the service that owns that state makes them and records the outcome.

Values the log cannot store faithfully (NUL characters, integers beyond 64 bits, non-finite numbers, non-string
keys) are refused for every kind.

Adding a kind: a module ``allot_contracts/objects/<kind>.py`` with a msgspec Struct and a parser
``parse(manifest, issues, warnings) -> T | None``, then one entry in ``KINDS``.
Pure; nothing here raises for bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

import msgspec

from allot_contracts.issues import FieldIssue, not_acted_on
from allot_contracts.kube import storage_issues
from allot_contracts.objects.colocation import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    is_slo_config,
    parse_colocation_configmap,
)
from allot_contracts.objects.colocation_profile import parse_colocation_profile
from allot_contracts.objects.gang import parse_pod_group
from allot_contracts.objects.meta import is_dns_label, is_dns_subdomain, metadata_of, read_meta
from allot_contracts.objects.migration import parse_migration_job
from allot_contracts.objects.nodemetric import parse_nodemetric
from allot_contracts.objects.nodes import admit_device, admit_node, admit_topology
from allot_contracts.objects.pod import parse_pod
from allot_contracts.objects.pod_priority import (
    BUILTIN_PRIORITY_CLASSES,
    DEFAULT_CONTEXT,
    PodContext,
    PriorityClassInfo,
    check_preemption_policy,
)
from allot_contracts.objects.quota import parse_profile, parse_quota
from allot_contracts.objects.reservation import parse_reservation

__all__ = [
    "KINDS",
    "Admitted",
    "KindSpec",
    "Namespace",
    "admit",
    "kind_spec",
    "parse_namespace",
    "parse_priority_class",
]

Parser = Callable[[Mapping[str, Any], list[FieldIssue], list[FieldIssue], PodContext], Any]


class KindSpec(NamedTuple):
    api_version: str
    kind: str
    namespaced: bool
    parse: Parser
    acted_on: bool = True  # False: admitted and recorded, but nothing in Allot acts on it (a warning says so)
    note: str = ""
    # True: its parser reads the metadata whole (read_meta), so admit() does not read it again
    reads_metadata: bool = False


class Admitted(msgspec.Struct, frozen=True, kw_only=True):
    api_version: str
    kind: str
    namespace: str
    name: str
    obj: Any = None
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []

    @property
    def ok(self) -> bool:
        return not self.issues

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class Namespace(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    labels: dict[str, str] = {}


def parse_namespace(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> Namespace | None:
    before = len(issues)
    meta = read_meta(manifest, issues, namespaced=False)
    if meta.name and not is_dns_label(meta.name):
        issues.append(
            FieldIssue(path="metadata.name", message="a namespace name must be a lowercase RFC 1123 label")
        )
    return None if len(issues) > before else Namespace(name=meta.name, labels=dict(meta.labels))


def parse_priority_class(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> PriorityClassInfo | None:
    """A ``scheduling.k8s.io/v1`` PriorityClass: ``value`` a 32-bit integer at most one billion (higher values are
    reserved for system classes), ``globalDefault``, ``preemptionPolicy``."""
    before = len(issues)
    meta = read_meta(manifest, issues, namespaced=False)
    value = manifest.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        issues.append(FieldIssue(path="value", code="Required", message="is required and must be an integer"))
        value = 0
    elif not -(2**31) <= value <= 1_000_000_000 and not meta.name.startswith("system-"):
        issues.append(
            FieldIssue(
                path="value",
                message="must be at most 1000000000 (higher values are reserved for system priority classes)",
                value=str(value),
            )
        )
    default = manifest.get("globalDefault", False)
    if not isinstance(default, bool):
        issues.append(FieldIssue(path="globalDefault", message="must be true or false", value=str(default)))
        default = False
    if meta.name.startswith("system-"):
        _system_class(meta.name, value, default, issues)
    policy = manifest.get("preemptionPolicy")
    policy = "PreemptLowerPriority" if policy in (None, "") else policy  # a 0 or a false is no default
    check_preemption_policy(policy, "preemptionPolicy", issues)
    if len(issues) > before:
        return None
    return PriorityClassInfo(
        name=meta.name, value=value, global_default=default, preemption_policy=str(policy)
    )


def _system_class(name: str, value: int, default: bool, issues: list[FieldIssue]) -> None:
    """A ``system-`` name is reserved for the API server's own classes, with their own value (as it refuses any other:
    ``priority class names with 'system-' prefix are reserved for system use only``)."""
    system = {k: c for k, c in BUILTIN_PRIORITY_CLASSES.items() if k.startswith("system-")}
    known = system.get(name)
    if known is None:
        why = f"{name} is not a known system priority class ({', '.join(sorted(system))})"
    elif value != known.value:
        why = f"value of {name} PriorityClass must be {known.value}"
    elif default:
        why = f"globalDefault of {name} PriorityClass must be false"
    else:
        return
    message = f"priority class names with 'system-' prefix are reserved for system use only: {why}"
    issues.append(FieldIssue(path="metadata.name", code="Forbidden", message=message, value=name))


def _plain(
    parse: Callable[[Mapping[str, Any], list[FieldIssue], list[FieldIssue]], Any],
) -> Parser:
    return lambda manifest, issues, warnings, _context: parse(manifest, issues, warnings)


def _pair(parse: Callable[[dict[str, Any]], tuple[Any, list[FieldIssue]]]) -> Parser:
    def run(
        manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue], _: PodContext
    ) -> Any:
        obj, found = parse(dict(manifest))
        issues.extend(found)
        return obj if not found else None

    return run


def _configmap(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue], _: PodContext
) -> Any:
    meta = metadata_of(manifest)
    namespace = meta.get("namespace") or "default"
    if is_slo_config(namespace, meta.get("name")):
        config = parse_colocation_configmap(manifest, issues, warnings)
        read_meta(manifest, issues, namespaced=True)  # after the data's issues, as admit() adds any kind's
        return config
    read_meta(manifest, issues, namespaced=True)
    where, why = "metadata.name", ""
    if meta.get("name") == CONFIGMAP_NAME:  # Koordinator's slo-controller reads it in its own namespace only
        where, why = "metadata.namespace", f" (not {CONFIGMAP_NAME} in namespace {str(namespace)[:63]})"
    warnings.append(
        not_acted_on(
            where,
            f"accepted but not acted on: the only ConfigMap Allot reads is {CONFIGMAP_NAMESPACE}/"
            f"{CONFIGMAP_NAME} (co-location strategy){why}",
        )
    )
    return None


KINDS: Final[tuple[KindSpec, ...]] = (
    KindSpec("v1", "Pod", True, lambda m, i, w, c: parse_pod(m, i, w, c), reads_metadata=True),
    KindSpec("v1", "Node", False, _plain(admit_node)),
    KindSpec("scheduling.koordinator.sh/v1alpha1", "Device", False, _plain(admit_device)),
    KindSpec("topology.node.k8s.io/v1alpha1", "NodeResourceTopology", False, _plain(admit_topology)),
    KindSpec(
        "scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota", True, _pair(parse_quota), reads_metadata=True
    ),
    KindSpec(
        "quota.koordinator.sh/v1alpha1",
        "ElasticQuotaProfile",
        True,
        _pair(parse_profile),
        reads_metadata=True,
    ),
    KindSpec("scheduling.sigs.k8s.io/v1alpha1", "PodGroup", True, _plain(parse_pod_group)),
    KindSpec("scheduling.koordinator.sh/v1alpha1", "Reservation", False, _plain(parse_reservation)),
    KindSpec("scheduling.koordinator.sh/v1alpha1", "PodMigrationJob", False, _plain(parse_migration_job)),
    KindSpec("slo.koordinator.sh/v1alpha1", "NodeMetric", False, _plain(parse_nodemetric)),
    KindSpec(
        "config.koordinator.sh/v1alpha1", "ClusterColocationProfile", False, _plain(parse_colocation_profile)
    ),
    KindSpec("v1", "ConfigMap", True, _configmap, reads_metadata=True),
    KindSpec(
        "scheduling.k8s.io/v1", "PriorityClass", False, _plain(parse_priority_class), reads_metadata=True
    ),
    KindSpec(
        "v1",
        "Namespace",
        False,
        _plain(parse_namespace),
        acted_on=False,
        note="a Namespace is recorded; only its labels are read, by the namespaceSelector of ClusterColocationProfiles "
        "(pods may name any namespace)",
        reads_metadata=True,
    ),
)
_BY_KIND: Final = {(k.api_version, k.kind): k for k in KINDS}


def kind_spec(api_version: str, kind: str) -> KindSpec | None:
    return _BY_KIND.get((api_version, kind))


def accepted_kinds() -> list[str]:
    return sorted(f"{k.api_version} {k.kind}" for k in KINDS)


def _metadata_issues(
    manifest: Mapping[str, Any], namespaced: bool, found: list[FieldIssue]
) -> list[FieldIssue]:
    """What the API server refuses in any object's metadata (label keys and values, annotation keys, the annotations'
    size, owner references) that the kind's parser has not reported already."""
    issues: list[FieldIssue] = []
    read_meta(manifest, issues, namespaced=namespaced)
    reported = {i.path for i in found}
    return [i for i in issues if i.path not in reported]


def admit(manifest: Mapping[str, Any], context: PodContext = DEFAULT_CONTEXT) -> Admitted:
    """Admission of one manifest (see the module docstring)."""
    api_version = str(manifest.get("apiVersion") or "")
    kind = str(manifest.get("kind") or "")
    meta = manifest.get("metadata") or {}
    name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
    spec = kind_spec(api_version, kind)
    namespace = ""
    if spec is not None and spec.namespaced and isinstance(meta, Mapping):
        namespace = str(meta.get("namespace") or "default")
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    if spec is None:
        same = [k for k in KINDS if k.kind == kind]
        if same:
            message = f"unsupported apiVersion {api_version!r} for {kind}; accepted: {same[0].api_version}"
        else:
            message = (
                f"unsupported apiVersion/kind {api_version} {kind}; accepted: {', '.join(accepted_kinds())}"
            )
        issues.append(
            FieldIssue(path="kind" if same == [] else "apiVersion", code="NotSupported", message=message)
        )
        return Admitted(api_version=api_version, kind=kind, namespace=namespace, name=name, issues=issues)
    issues += [FieldIssue(path=p, message=m) for p, m in storage_issues(manifest)]
    for part in ("metadata", "spec", "status"):
        if manifest.get(part) is not None and not isinstance(manifest[part], Mapping):
            issues.append(FieldIssue(path=part, message="must be an object"))
    if issues:
        return Admitted(api_version=api_version, kind=kind, namespace=namespace, name=name, issues=issues)
    if not name:
        issues.append(FieldIssue(path="metadata.name", code="Required", message="is required"))
    elif not is_dns_subdomain(name) and kind != "Pod":
        issues.append(
            FieldIssue(
                path="metadata.name",
                message="must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'; at most 253 characters)",
                value=name[:300],
            )
        )
    if issues:
        return Admitted(api_version=api_version, kind=kind, namespace=namespace, name=name, issues=issues)
    obj = spec.parse(manifest, issues, warnings, context)
    if not spec.reads_metadata:  # the parser read the parts it uses: the metadata is read whole here, once
        issues += _metadata_issues(manifest, spec.namespaced, issues)
    if not spec.acted_on:
        warnings.append(not_acted_on("kind", spec.note))
    return Admitted(
        api_version=api_version,
        kind=kind,
        namespace=namespace,
        name=name,
        obj=obj if not issues else None,
        issues=issues,
        warnings=warnings,
    )
