"""Rows for ``allot get reservations`` and ``allot get migrations`` (and the audit view): Reservations and PodMigrationJobs as reservation-manager
knows them (its projection rebuilt from the log), with the status upstream writes (phase, node, allocatable,
allocated, owners; a job's phase, mode, pod, reservation, target node, reason)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allot_contracts.quantity import format_quantity
from allot_eventstore.clock import iso


def _resources(values: dict[str, int]) -> str:
    return " ".join(f"{k}={format_quantity(k, v)}" for k, v in sorted(values.items())) or "-"


def reservation_rows(engine: Any) -> list[dict[str, Any]]:
    rows = []
    for name, r in sorted(engine.world.book.records.items()):
        status = r.status()
        scheduled = r.conditions.get("Scheduled")
        message = scheduled[2] if scheduled is not None and scheduled[0] == "False" else ""
        ready = r.conditions.get("Ready")
        if ready is not None and ready[0] == "False" and ready[2]:
            message = ready[2]
        rows.append(
            {
                "reservation": name,
                "phase": r.phase,
                "node": r.node or "-",
                "policy": r.spec.allocate_policy or "Default",
                "allocatable": _resources(r.allocatable or r.spec.requests),
                "allocated": _resources(r.allocated),
                "owners": ",".join(sorted(r.owners)) or "-",
                "expires": iso(r.expires_at) if r.expires_at is not None else "never",
                "job": r.job or "-",
                "message": message,
                "status": status,
            }
        )
    for name, message in sorted(engine.rejected.items()):
        if name not in engine.world.book.records:
            rows.append(
                {
                    "reservation": name,
                    "phase": "Rejected",
                    "node": "-",
                    "policy": "-",
                    "allocatable": "-",
                    "allocated": "-",
                    "owners": "-",
                    "expires": "-",
                    "job": "-",
                    "message": message,
                    "status": {},
                }
            )
    return rows


def migration_rows(engine: Any) -> list[dict[str, Any]]:
    rows = []
    for name, job in sorted(engine.jobs.jobs.items()):
        status = job.status()
        rows.append(
            {
                "job": name,
                "phase": job.phase,
                "mode": job.mode or job.spec.mode or "-",
                "pod": job.spec.pod.key,
                "from": job.source_node or "-",
                "to": job.target_node or "-",
                "reservation": job.reservation or "-",
                "status": status.get("status", "-"),
                "reason": job.reason or "-",
                "message": job.message,
                "detail": status,
            }
        )
    for name, message in sorted(engine.jobs.rejected.items()):
        rows.append(
            {
                "job": name,
                "phase": "Failed",
                "mode": "-",
                "pod": "-",
                "from": "-",
                "to": "-",
                "reservation": "-",
                "status": "-",
                "reason": "Invalid",
                "message": message,
                "detail": {},
            }
        )
    return rows


# --- allot explain pod ------------------------------------------------------------------------------------------------


def resolved_summary(p: Mapping[str, object]) -> str:
    """The timeline line of a ``reservation.resolved``."""
    return str(p.get("reason", ""))


def explain_lines(resolved: dict[str, Any] | None, decision: dict[str, Any] | None) -> list[str]:
    """What ``allot explain pod`` says about reservations: the reservation the pod was placed in, or those it
    matched (with their nodes) and, for those whose owners matched but which it could not use, why."""
    match = (resolved or {}).get("match")
    used = (decision or {}).get("reservation")
    lines: list[str] = []
    if used:
        lines.append(f"reservation: placed in {used['name']} (uid {used.get('uid') or '-'})")
    if not match:
        return lines
    if not used:
        if match.get("ignored"):
            lines.append("reservation: ignores reservations (reservation-ignored): may use what they hold")
        elif match.get("candidates"):
            offered = ", ".join(f"{c['name']} on {c['node']}" for c in match["candidates"])
            lines.append(f"reservation: may use {offered}")
        if match.get("required"):
            named = f" (affinity names {match['name']})" if match.get("name") else ""
            lines.append(f"  a reservation is required: the pod has a reservation affinity{named}")
    for name, why in sorted((match.get("unmatched") or {}).items()):
        lines.append(f"  not usable: {name}: {why}")
    return lines
