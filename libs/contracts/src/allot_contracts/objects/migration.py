"""Koordinator ``PodMigrationJob`` (scheduling.koordinator.sh/v1alpha1, cluster-scoped): move one pod elsewhere.

``parse_migration_job`` turns a manifest into :class:`PodMigrationJob`, every problem a ``FieldIssue`` with its path.
Modes: ``ReservationFirst`` (reserve on another node first, then evict; the re-created pod lands in the reservation)
and ``EvictDirectly``; ``""`` means the configured default (upstream's default is ``ReservationFirst``). ``ttl`` is the
job's timeout (none when absent). ``reservationOptions.reservationRef`` names an existing Reservation to use instead of
creating one from ``reservationOptions.template`` (or from the pod). A job applied with ``status.phase: Aborted`` is
aborted (upstream: "the user forcefully aborted the PodMigrationJob"). Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from allot_contracts.issues import FieldIssue, checked_text, not_acted_on, optional_object
from allot_contracts.objects.meta import metadata_of, required_name
from allot_contracts.objects.reservation_pod import unknown_field_issues
from allot_contracts.objects.times import DurationError, checked_duration_us, parse_timestamp_us

__all__ = ["API_VERSION", "KIND", "MODES", "PodMigrationJob", "PodRef", "parse_migration_job"]

API_VERSION: Final = "scheduling.koordinator.sh/v1alpha1"
KIND: Final = "PodMigrationJob"
RESERVATION_FIRST: Final = "ReservationFirst"
EVICT_DIRECTLY: Final = "EvictDirectly"
MODES: Final = ("", RESERVATION_FIRST, EVICT_DIRECTLY)
_SPEC_FIELDS: Final = frozenset({"paused", "ttl", "mode", "podRef", "reservationOptions", "deleteOptions"})
_OPTION_FIELDS: Final = frozenset({"reservationRef", "template", "preemptionOptions"})


class PodRef(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodMigrationJob(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    paused: bool = False
    ttl_us: int = 0  # 0 = no timeout of its own
    mode: str = ""  # "" = the configured default mode
    pod: PodRef
    reservation_ref: str = ""  # use this existing Reservation (ReservationFirst)
    reservation_template: dict[str, Any] | None = None  # ReservationTemplateSpec {metadata, spec}
    delete_options: dict[str, Any] = {}
    created_us: int | None = None
    aborted: bool = False  # the user set status.phase to Aborted


def _strings(raw: Any, path: str, issues: list[FieldIssue]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        issues.append(FieldIssue(path=path, message="must be a map of strings"))
        return {}
    return {str(k): str(v) for k, v in sorted(raw.items())}


def _pod_ref(spec: Mapping[str, Any], issues: list[FieldIssue]) -> PodRef | None:
    """``spec.podRef``: the pod to migrate (namespace and name required, kind Pod)."""
    ref = spec.get("podRef")
    if not isinstance(ref, dict):
        issues.append(
            FieldIssue(path="spec.podRef", code="Required", message="the pod to migrate is required")
        )
        return None
    for field in ("namespace", "name"):
        if not isinstance(ref.get(field), str) or not ref[field]:
            issues.append(
                FieldIssue(
                    path=f"spec.podRef.{field}", code="Required", message="is required (InvalidPodRef)"
                )
            )
    if ref.get("kind") not in (None, "", "Pod"):
        issues.append(FieldIssue(path="spec.podRef.kind", code="NotSupported", message="must be Pod"))
    if isinstance(ref.get("namespace"), str) and isinstance(ref.get("name"), str):
        return PodRef(namespace=ref["namespace"], name=ref["name"], uid=str(ref.get("uid") or ""))
    return None


def _template(options: Mapping[str, Any], issues: list[FieldIssue]) -> dict[str, Any] | None:
    tmpl = optional_object(options.get("template"), "spec.reservationOptions.template", issues)
    if tmpl is None:
        return None
    for part in ("metadata", "spec"):
        if tmpl.get(part) is not None and not isinstance(tmpl[part], dict):
            issues.append(
                FieldIssue(path=f"spec.reservationOptions.template.{part}", message="must be an object")
            )
    return tmpl


def _reservation_options(
    spec: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> tuple[str, dict[str, Any] | None]:
    """``spec.reservationOptions``: the Reservation named to use, or the template of the one to make."""
    reservation_ref = ""
    template = None
    options = spec.get("reservationOptions")
    if options is not None:
        if not isinstance(options, dict):
            issues.append(FieldIssue(path="spec.reservationOptions", message="must be an object"))
        else:
            unknown_field_issues(options, _OPTION_FIELDS, "spec.reservationOptions", issues)
            rref = options.get("reservationRef")
            if rref is not None:
                if not isinstance(rref, dict) or not isinstance(rref.get("name"), str) or not rref["name"]:
                    issues.append(
                        FieldIssue(
                            path="spec.reservationOptions.reservationRef.name",
                            code="Required",
                            message="a reservation reference needs the Reservation's name",
                        )
                    )
                else:
                    reservation_ref = rref["name"]
            template = _template(options, issues)
            if options.get("preemptionOptions") is not None:
                warnings.append(
                    not_acted_on(
                        "spec.reservationOptions.preemptionOptions",
                        "preemption on behalf of a migration is not supported; the job fails if its "
                        "reservation cannot be scheduled",
                    )
                )
    if reservation_ref and template is not None:
        warnings.append(
            not_acted_on(
                "spec.reservationOptions.template",
                "reservationRef names an existing Reservation; the template is not used",
            )
        )
    return reservation_ref, template


def parse_migration_job(
    manifest: Mapping[str, Any], issues: list[FieldIssue], warnings: list[FieldIssue]
) -> PodMigrationJob | None:
    """Admit a PodMigrationJob manifest; ``None`` when ``issues`` grew."""
    before = len(issues)
    meta = metadata_of(manifest)
    name = required_name(meta, issues)
    labels = _strings(meta.get("labels"), "metadata.labels", issues)
    annotations = _strings(meta.get("annotations"), "metadata.annotations", issues)
    created = None
    if meta.get("creationTimestamp") is not None:
        try:
            created = parse_timestamp_us(meta["creationTimestamp"])
        except DurationError as exc:
            issues.append(
                FieldIssue(path="metadata.creationTimestamp", code="InvalidValue", message=str(exc))
            )
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        issues.append(FieldIssue(path="spec", code="Required", message="a PodMigrationJob needs a spec"))
        return None
    unknown_field_issues(spec, _SPEC_FIELDS, "spec", issues)
    paused = spec.get("paused", False)
    if not isinstance(paused, bool):
        issues.append(FieldIssue(path="spec.paused", message="must be true or false", value=str(paused)))
        paused = False
    ttl_us = checked_duration_us(spec.get("ttl"), "spec.ttl", issues) or 0
    mode = checked_text(spec.get("mode"), "spec.mode", issues)
    if mode is not None and mode not in MODES:
        issues.append(
            FieldIssue(
                path="spec.mode",
                code="NotSupported",
                message=f"must be {RESERVATION_FIRST} or {EVICT_DIRECTLY}",
                value=str(mode),
            )
        )
    pod = _pod_ref(spec, issues)
    reservation_ref, template = _reservation_options(spec, issues, warnings)
    delete_options = spec.get("deleteOptions") or {}
    if not isinstance(delete_options, dict):
        issues.append(FieldIssue(path="spec.deleteOptions", message="must be an object"))
        delete_options = {}
    if len(issues) > before or pod is None:
        return None
    return PodMigrationJob(
        name=name,
        uid=str(meta.get("uid") or ""),
        labels=labels,
        annotations=annotations,
        paused=paused,
        ttl_us=ttl_us,
        mode=mode or "",
        pod=pod,
        reservation_ref=reservation_ref,
        reservation_template=template,
        delete_options=delete_options,
        created_us=created,
        aborted=isinstance(manifest.get("status"), dict) and manifest["status"].get("phase") == "Aborted",
    )
