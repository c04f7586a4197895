"""Object metadata as the API server validates it: names, namespaces, labels, annotations, owner references.

Responsibility: read ``metadata`` of any manifest into typed values and report what the API server would refuse,
with its field path and (where users search for it) its wording:

- ``metadata.name``: a DNS subdomain (lowercase ``a-z0-9``, ``-`` and ``.``, at most 253 characters) — pods, quotas,
  PodGroups, Reservations; Node names follow the same rule.
- ``metadata.namespace``: a DNS label (at most 63 characters).
- label keys: an optional DNS-subdomain prefix and ``/``, then a name of at most 63 characters
  (``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``); label values: empty or the same shape as a name.
- annotations: string values whose total size (keys + values) is at most 256 KiB.
- resource names (``spec.containers[*].resources``, quota lists): qualified names as label keys are.

This is the one metadata reader of the contracts: ``read_meta`` validates (the door); ``metadata_of``,
``labels_of`` and ``annotations_of`` read leniently what was admitted before (an event's manifest, a watch's object),
giving ``{}`` for what is missing or not a mapping, so that a damaged record never crashes a reader.

Pure; nothing here raises for bad input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, annotation_path, checked_objects, label_path

__all__ = [
    "ANNOTATIONS_MAX_BYTES",
    "Meta",
    "Owner",
    "annotations_of",
    "is_dns_label",
    "is_dns_subdomain",
    "is_label_value",
    "is_qualified_name",
    "labels_of",
    "metadata_of",
    "read_labels",
    "read_meta",
    "required_name",
]

ANNOTATIONS_MAX_BYTES: Final = 256 * 1024
_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_NAME_PART: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_SUBDOMAIN_REASON: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (at most 253 characters)"
)
_LABEL_REASON: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (at most 63 characters)"
)


def is_dns_subdomain(text: str) -> bool:
    return 0 < len(text) <= 253 and bool(_SUBDOMAIN.match(text))


def is_dns_label(text: str) -> bool:
    return 0 < len(text) <= 63 and bool(_LABEL.match(text))


def is_qualified_name(text: str) -> bool:
    """A label key or resource name: ``[prefix/]name``, prefix a DNS subdomain, name at most 63 characters."""
    prefix, slash, name = text.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(_NAME_PART.match(name))


def is_label_value(text: str) -> bool:
    return text == "" or (len(text) <= 63 and bool(_NAME_PART.match(text)))


class Owner(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One ``metadata.ownerReferences`` entry (what reservation owners and workload limits match on)."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


class Meta(msgspec.Struct, frozen=True, kw_only=True):
    """The metadata every kind shares. ``annotations`` holds the raw string values (JSON text stays text)."""

    name: str
    namespace: str
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, Any] = {}
    owners: tuple[Owner, ...] = ()
    terminating: bool = False


def _string_map(raw: Any, field: str, issues: list[FieldIssue], *, labels: bool) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path=f"metadata.{field}", message="must be a map of strings"))
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        path = label_path(str(key)) if labels else annotation_path(str(key))
        if not isinstance(key, str) or not is_qualified_name(key):
            issues.append(
                FieldIssue(
                    path=path,
                    code="InvalidField",
                    message="name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                    "and end with an alphanumeric character (at most 63 characters), with an optional DNS "
                    "subdomain prefix and '/'",
                    value=str(key)[:100],
                )
            )
            continue
        if labels:
            # YAML reads `8`, `true` or `010` (octal: 8) as a number or a boolean: kubectl refuses it
            if not isinstance(value, str):
                reason = "must be a string" + ("; quote it" if isinstance(value, int | float) else "")
                issues.append(FieldIssue(path=path, message=reason, value=str(value)[:100]))
                continue
            text = str(value)
            if not is_label_value(text):
                issues.append(
                    FieldIssue(
                        path=path,
                        message="a valid label value must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
                        "(at most 63 characters)",
                        value=text[:100],
                    )
                )
                continue
            out[key] = text
        else:
            # Annotation values may be decoded objects in YAML scenarios (an allowance of this project: JSON
            # annotations can be written as YAML); they are kept as they are and read by their own parsers.
            out[key] = value
    return out


def read_labels(raw: Any, issues: list[FieldIssue]) -> dict[str, str]:
    """``metadata.labels`` checked as the API server checks them (qualified names, label values), every bad one an
    issue with its path."""
    return _string_map(raw, "labels", issues, labels=True)


def _owners(raw: Any, issues: list[FieldIssue]) -> tuple[Owner, ...]:
    out: list[Owner] = []
    for path, entry in checked_objects(raw, "metadata.ownerReferences", issues):
        kind, name = entry.get("kind"), entry.get("name")
        if not isinstance(kind, str) or not kind or not isinstance(name, str) or not name:
            issues.append(FieldIssue(path=path, code="Required", message="kind and name are required"))
            continue
        out.append(
            Owner(
                api_version=str(entry.get("apiVersion") or ""),
                kind=kind,
                name=name,
                uid=str(entry.get("uid") or ""),
                controller=entry.get("controller") is True,
            )
        )
    return tuple(out)


def read_meta(
    manifest: Mapping[str, Any],
    issues: list[FieldIssue],
    *,
    namespaced: bool,
    default_namespace: str = "default",
) -> Meta:
    """``manifest["metadata"]`` validated; problems are appended to ``issues``. Cluster-scoped kinds get ``""`` as
    namespace (a namespace given on one is ignored, as the API server does)."""
    raw = manifest.get("metadata")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        issues.append(FieldIssue(path="metadata", message="must be an object"))
        raw = {}
    name = raw.get("name")
    if name is None or name == "":
        issues.append(FieldIssue(path="metadata.name", code="Required", message="is required"))
        name = ""
    elif not isinstance(name, str) or not is_dns_subdomain(name):
        issues.append(FieldIssue(path="metadata.name", message=_SUBDOMAIN_REASON, value=str(name)[:300]))
        name = str(name)
    namespace = ""
    if namespaced:
        namespace = raw.get("namespace") or default_namespace
        if not isinstance(namespace, str) or not is_dns_label(namespace):
            issues.append(
                FieldIssue(path="metadata.namespace", message=_LABEL_REASON, value=str(namespace)[:100])
            )
            namespace = str(namespace)
    labels = _string_map(raw.get("labels"), "labels", issues, labels=True)
    annotations = _string_map(raw.get("annotations"), "annotations", issues, labels=False)
    size = sum(
        len(k) + len(v.encode() if isinstance(v, str) else repr(v).encode()) for k, v in annotations.items()
    )
    if size > ANNOTATIONS_MAX_BYTES:
        issues.append(
            FieldIssue(
                path="metadata.annotations",
                code="TooLong",
                message=f"Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes (got {size})",
            )
        )
    uid = raw.get("uid")
    return Meta(
        name=name,
        namespace=namespace,
        uid=str(uid) if isinstance(uid, str | int) and not isinstance(uid, bool) else "",
        labels=labels,
        annotations=annotations,
        owners=_owners(raw.get("ownerReferences"), issues),
        terminating=bool(raw.get("deletionTimestamp")),
    )


def metadata_of(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """The manifest's ``metadata`` (``{}`` when it is missing or not a mapping)."""
    value = manifest.get("metadata")
    return value if isinstance(value, Mapping) else {}


def required_name(meta: Mapping[str, Any], issues: list[FieldIssue]) -> str:
    """``metadata.name`` of an object that must have one: the name, or ``""`` with a ``Required`` issue."""
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    issues.append(FieldIssue(path="metadata.name", code="Required", message="is required"))
    return ""


def labels_of(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The manifest's labels, keys and values as strings (``{}`` when missing or not a mapping)."""
    value = metadata_of(manifest).get("labels") or {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def annotations_of(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """The manifest's annotations as written (``{}`` when missing or not a mapping)."""
    value = metadata_of(manifest).get("annotations")
    return value if isinstance(value, Mapping) else {}
