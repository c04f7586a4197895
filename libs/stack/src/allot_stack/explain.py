"""Why a pod is where it is (or is not), answered from the event log: what ``allot explain pod NS/NAME`` prints and
the web view's pod page shows.

The lines are the pod's timeline (every event on its stream and its gang's, with the service that decided it), then the
reasons of its latest decisions: quota (the upstream message, runtime/used/request, who lent to it), gang
("3/8 members present"; the first member that does not fit), placement (node, devices, cpuset, top scores) or
"why not" (the Kubernetes-style summary, stable codes and per-node reasons).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import InputError
from allot_views.units import human_list

if TYPE_CHECKING:  # imported where used: ``allot explain --help`` loads no log, driver or engine
    from allot_contracts.envelope import RecordedEvent
    from allot_eventstore.protocol import EventStore
    from allot_views.nearest import Cluster

BIRTHS = frozenset({"pod.submitted", "pod.observed"})
REFUSED = "security.message_refused"
# The codes of allot_contracts.objects.profile_mutation's warnings: what a ClusterColocationProfile did to the pod.
PROFILE_NOTICES = frozenset({"Mutated", "Skipped"})
GANG_NAME = "gang.scheduling.koordinator.sh/name"
POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
Payload = dict[str, Any]  # an event's payload as decoded JSON


def current_life(own: list[RecordedEvent]) -> tuple[list[RecordedEvent], int]:
    """The events of the pod's latest life (from its latest submission or first observation), and how many earlier
    lives the stream holds (a pod deleted and created again under the same name)."""
    starts = [
        i
        for i, r in enumerate(own)
        if r.type == "pod.submitted"
        or (r.type == "pod.observed" and (i == 0 or own[i - 1].type == "pod.deleted"))
    ]
    if not starts:
        return own, 0
    return own[starts[-1] :], len(starts) - 1


def _groups(life: list[RecordedEvent]) -> set[str]:
    """Gang groups the pod belongs to: those it was told to wait in, and the one its manifest declares."""
    groups = {str(r.payload_dict().get("group")) for r in life if r.type == "gang.member_waiting"}
    for record in life:
        if record.type in BIRTHS:
            meta = record.payload_dict().get("manifest", {}).get("metadata") or {}
            name = (meta.get("annotations") or {}).get(GANG_NAME) or (meta.get("labels") or {}).get(
                POD_GROUP_LABEL
            )
            if name:
                groups.add(f"{meta.get('namespace') or 'default'}/{name}")
    return {g for g in groups if g and g != "None"}


async def history(store: EventStore, key: str) -> tuple[list[RecordedEvent], list[RecordedEvent]]:
    """The pod's stream, and the streams of the gang groups of its latest life."""
    own = await store.read_stream(f"pod:{key}")
    life, _ = current_life(own)
    group_events: list[RecordedEvent] = []
    for group in sorted(_groups(life)):
        group_events += await store.read_stream(f"gang:{group}")
    return own, group_events


# the events the cluster fold needs (where pods stand and what nodes hold); QoS, metrics and heartbeats are skipped
FOLDED = frozenset(
    {
        "device.reported", "node.registered", "node.removed",
        "gang.group_placed", "gang.group_ready", "gang.group_unschedulable", "gang.holds_released",
        "gang.member_waiting", "quota.admitted", "quota.evicted", "quota.group_waiting", "quota.waiting",
        "reservation.resolved", "pod.bind_failed", "pod.bind_requested", "pod.bound", "pod.deleted", "pod.enqueued",
        "pod.evicted", "pod.observed", "pod.placed", "pod.rejected", "pod.released", "pod.requeued", "pod.submitted",
        "pod.unschedulable",
    }
)  # fmt: skip


async def cluster(store: EventStore, until: int | None = None) -> Cluster:
    """One fold of the whole log (up to position ``until`` when given): the cluster view (what nodes hold, where pods
    stand) and each pod's priority and arrival, for the nearest miss and the queue place (allot_views.nearest)."""
    from allot_views.cluster import ClusterView
    from allot_views.nearest import Cluster, note_submitted

    folded = Cluster(view=ClusterView())
    async for record in store.iterate(types=FOLDED, until=until):
        folded.view.apply(record)
        if record.type == "pod.submitted":
            note_submitted(folded.priority, folded.arrival, folded.specs, record)
    return folded


async def pod_history(url: str, key: str) -> tuple[list[RecordedEvent], list[RecordedEvent], Cluster]:
    from allot_stack.connect import bounded_store

    store = bounded_store(url)
    try:
        own, group = await history(store, key)
        return own, group, await cluster(store)
    finally:
        await store.close()


def _summary(record: RecordedEvent) -> str:
    from allot_stack.enactment import outcome_summary
    from allot_stack.reservation_views import resolved_summary as reservation_summary

    p = record.payload_dict()
    match record.type:
        case "quota.admitted":
            return f"quota {p['quota']}: request {p['request']}, used after {p['used']}, limit {p['limit']}"
        case "quota.waiting" | "quota.group_waiting" | "pod.unschedulable" | "gang.group_unschedulable":
            return str(p.get("message", ""))
        case "quota.evicted":
            return f"{p['cause']}: {p['message']}"
        case "quota.reclaim_blocked":
            return str(p["message"])
        case "pod.placed":
            return f"node {p['node']}"
        case "pod.bound":
            return f"node {p['node']} ({p.get('mode', 'standalone')})"
        case "pod.rejected":
            return str(p["message"])
        case "gang.member_waiting":
            return f"gang {p['gang']}: {p['present']}/{p['min_available']} members present ({p['reason']})"
        case (
            "gang.group_ready" | "gang.group_admitted" | "quota.group_admitted" | "reservation.group_resolved"
        ):
            return f"group {p['group']} attempt {p['attempt']}: {len(p['members'])} members"
        case "gang.holds_released":
            return f"attempt {p['attempt']}: {p['reason']}"
        case "qos.recorded":
            plan = f", plan r{p['plan']['revision']}" if p.get("plan") else ""
            return f"{p['koord_qos']} / {p['kube_qos']} / {p['priority_class']}{plan}"
        case "qos.plan_recorded":
            return f"plan r{p['plan']['revision']}: {p.get('reason', '')}"
        case "qos.plan_removed":
            return str(p["reason"])
        case "qos.applied":
            counts = _outcome_counts(p.get("results") or [])
            return f"r{p['revision']} {'ok' if p['ok'] else 'FAILED'} ({counts})"
        case "qos.drift_corrected":
            return f"{sum(c['outcome'] == 'applied' for c in p['corrected'])} value(s) restored"
        case "pod.evicted":
            return f"{p['cause']}: {p['message']}"
        case "preemption.decided":
            return str(p["message"])
        case "pod.eviction_enacted":
            return f"{'evicted' if p['evicted'] else 'NOT evicted'} through the Eviction API: {p['message']}"
        case "pod.released":
            return f"{p['reason']} on {p['node']}"
        case "pod.phase_observed":
            return f"phase {p['phase']}"
        case "reservation.resolved":
            return reservation_summary(p)
        case _:
            return outcome_summary(record.type, p)


# the latest of these says where the pod stands; older ones are history
STANDING = (
    "quota.waiting",
    "quota.admitted",
    "quota.group_waiting",
    "quota.group_admitted",
    "pod.placed",
    "gang.group_placed",
    "pod.unschedulable",
    "gang.group_unschedulable",
    "pod.rejected",
    "pod.bound",
    "quota.evicted",
    "pod.evicted",
    "gang.member_waiting",
)


def explain(
    key: str, own: list[RecordedEvent], group: list[RecordedEvent], folded: Cluster | None = None
) -> list[str]:
    from allot_stack.enactment import explain_lines as enactment_lines
    from allot_stack.reservation_views import explain_lines as reservation_lines
    from allot_views.nearest import queue_lines

    if not own:
        raise InputError(f"no pod {key} in the log")
    life, earlier = current_life(own)
    start = life[0].position
    group = [r for r in group if r.position >= start and key in (r.payload_dict().get("members") or [key])]
    events = sorted([*life, *group], key=lambda r: r.position)
    lines = _timeline_lines(key, events, earlier)
    last = {r.type: r.payload_dict() for r in events}
    latest, standing = _standing(events)
    lines.append("")
    if life[-1].type == "pod.deleted":
        lines.append("deleted:   the pod no longer exists")
    lines += _quota_lines(last, standing, folded)
    placed_decision = (last.get("pod.placed") or {}).get("decision") or _member_decision(
        last.get("gang.group_placed"), key
    )
    lines += reservation_lines(last.get("reservation.resolved"), placed_decision)
    lines += _placement_lines(key, last, standing)
    if standing in ("pod.unschedulable", "gang.group_unschedulable"):
        lines += _why_not_lines(key, life, events, last[standing], latest, folded)
    lines += _outcome_lines(events, last, standing)
    if life[-1].type != "pod.deleted":
        preempting = next((r for r in reversed(events) if r.type == "preemption.decided"), None)
        nominated = preempting is not None and latest is not None and preempting.position > latest.position
        lines += queue_lines(key, folded, nominated=nominated)
    lines += enforcement(events)
    lines += enactment_lines(life)
    lines += _admission_lines(life, last)
    return lines


def _timeline_lines(key: str, events: list[RecordedEvent], earlier: int) -> list[str]:
    """The heading and the timeline: every event of the pod's latest life with the service that recorded it."""
    from allot_eventstore.clock import iso

    lines = [f"pod {key}", ""]
    if earlier:
        lines += [
            f"({earlier} earlier life/lives of a pod with this name not shown: it was deleted and created "
            "again)",
            "",
        ]
    lines.append("timeline:")
    for record in events:
        lines.append(
            f"  #{record.position:<7} {iso(record.recorded_at)}  {record.type:<26} {record.producer:<20} "
            f"{_summary(record)}".rstrip()
        )
    return lines


def _standing(events: list[RecordedEvent]) -> tuple[RecordedEvent | None, str]:
    """The latest event that says where the pod stands, and its type (``gang.holds_released`` when a later release
    undid a placement or an admission)."""
    latest = next((r for r in reversed(events) if r.type in STANDING), None)
    standing = latest.type if latest is not None else ""
    released = next((r for r in reversed(events) if r.type == "gang.holds_released"), None)
    if (
        released is not None
        and latest is not None
        and released.position > latest.position
        and standing in ("gang.group_placed", "pod.placed", "quota.group_admitted", "quota.admitted")
    ):
        standing = "gang.holds_released"  # the placement was undone (timeout, a member gone)
    return latest, standing


def _quota_lines(last: dict[str, Payload], standing: str, folded: Cluster | None) -> list[str]:
    """The quota the pod was admitted to (with what it borrowed), or why it waits for quota."""
    from allot_views.nearest import group_quota_change, quota_change

    lines: list[str] = []
    if "quota.admitted" in last and standing not in ("quota.waiting", "quota.group_waiting"):
        detail = last["quota.admitted"].get("detail", {})
        lines.append(
            f"quota:     {detail.get('quota') or last['quota.admitted']['quota']} "
            f"(runtime {human_list(detail.get('runtime') or {})}, min {human_list(detail.get('min') or {})}, "
            f"max {human_list(detail.get('max') or {})})"
        )
        for fact in detail.get("borrow", []):
            lenders = ", ".join(
                f"{lender['quota']} {lender['amount']} ({lender['kind']})" for lender in fact["lenders"]
            )
            lines.append(
                f"  borrowed {fact['amount']} {fact['dimension']} within {fact['parent']}: from {lenders}"
            )
    if standing in ("quota.waiting", "quota.group_waiting"):
        lines.append(f"quota:     {last[standing]['message']}")
        if standing == "quota.waiting":
            lines += quota_change(last[standing].get("detail"), last[standing]["quota"])
        elif folded is not None:  # a gang group: every member's request against the quota's limit
            detail = last[standing].get("detail") or {}
            members = folded.view.groups.get(str(last[standing].get("group")), [])
            specs = [folded.specs.get(m, {}) for m in members]
            lines += group_quota_change(detail.get("first") or {}, specs, detail.get("used_before"))
    return lines


def _placement_lines(key: str, last: dict[str, Payload], standing: str) -> list[str]:
    """Where the pod was placed: node, policy, its allocation annotations and the top scores."""
    lines: list[str] = []
    placed = last.get("pod.placed") or _member_decision(last.get("gang.group_placed"), key)
    if placed is not None and standing in ("pod.placed", "gang.group_placed", "pod.bound"):
        decision = placed.get("decision", placed)
        lines.append(
            f"placement: node {decision.get('node')} (policy {decision.get('policy')}, config "
            f"{decision.get('config_version')})"
        )
        for kind, value in sorted((decision.get("annotations") or {}).items()):
            lines.append(f"  {kind}: {json.dumps(value, sort_keys=True)}")
        for score in (decision.get("scores") or [])[:5]:
            lines.append(f"  score {score['node']}: {score['score']} {score.get('components', {})}")
    return lines


def _why_not_lines(
    key: str,
    life: list[RecordedEvent],
    events: list[RecordedEvent],
    p: Payload,
    latest: RecordedEvent | None,
    folded: Cluster | None,
) -> list[str]:
    """Why the pod could not be placed: the summary, its codes, the per-node reasons and what would be nearest."""
    decision = p.get("decision") or {}
    lines = [f"why not:   {p['message']}"]
    if p.get("codes"):
        lines.append(f"  codes: {', '.join(p['codes'])}")
    reasons = decision.get("node_reasons") or _first_member_reasons(decision)
    for node, node_reasons in sorted(reasons.items())[:20]:
        lines.append(f"  {node}: {'; '.join(node_reasons)}")
    lines += _nearest(key, life, decision, reasons, folded)
    preempted = next((r for r in reversed(events) if r.type == "preemption.decided"), None)
    if preempted is not None and latest is not None and preempted.position > latest.position:
        lines.append(f"preempting: {preempted.payload_dict()['message']}")
    return lines


def _outcome_lines(events: list[RecordedEvent], last: dict[str, Payload], standing: str) -> list[str]:
    """A gang wait, a given-back placement or an eviction, when that is where the pod stands."""
    lines: list[str] = []
    if standing == "gang.member_waiting":
        lines.append(f"gang:      {_summary(next(r for r in reversed(events) if r.type == standing))}")
    if standing == "gang.holds_released":
        lines.append(f"gang:      placement given back: {last[standing]['reason']}")
    if standing == "quota.evicted":
        lines.append(f"evicted:   {last['quota.evicted']['cause']}: {last['quota.evicted']['message']}")
        if blocked := last.get("quota.reclaim_blocked"):
            lines.append(f"  blocked: {blocked['message']}")
    if standing == "pod.evicted":
        lines.append(f"evicted:   {last['pod.evicted']['cause']}: {last['pod.evicted']['message']}")
        if enacted := last.get("pod.eviction_enacted"):
            done = "evicted" if enacted["evicted"] else "NOT evicted"
            lines.append(f"  Kubernetes: {done} through the Eviction API: {enacted['message']}")
    return lines


def _admission_lines(life: list[RecordedEvent], last: dict[str, Payload]) -> list[str]:
    """What the door said about the pod's manifest: profile changes, fields not acted on, rejection errors."""
    lines: list[str] = []
    for warning in life[0].payload_dict().get("warnings") or [] if life[0].type in BIRTHS else []:
        if warning.get("code") in PROFILE_NOTICES:
            lines.append(f"profile:   {warning['message']}")
        else:
            lines.append(f"not acted on: {warning['path']}: {warning['message']}")
    if "pod.rejected" in last:
        for error in last["pod.rejected"]["errors"]:
            lines.append(f"rejected:  {error['path']}: {error['message']}")
    return lines


def _nearest(
    key: str,
    life: list[RecordedEvent],
    decision: dict[str, Any],
    reasons: dict[str, list[str]],
    folded: Cluster | None,
) -> list[str]:
    """The nearest miss of a pod, or of its gang's failing member (counting the members placed before it)."""
    from allot_views.nearest import gang_spec, nearest_lines

    members = [m["pod"] for m in decision.get("members") or []]
    failed = next((m["pod"] for m in decision.get("members") or [] if m.get("node_reasons")), None)
    if decision.get("node_reasons") or failed is None or folded is None:
        return nearest_lines(reasons, _spec(life), folded)
    before = members[: members.index(failed) + 1]
    spec = gang_spec([folded.specs.get(m, {}) for m in before])
    note = f" for gang member {failed}, counting the {len(before) - 1} member(s) before it on the same node"
    return nearest_lines(reasons, spec, folded, note if len(before) > 1 else f" for gang member {failed}")


def _spec(life: list[RecordedEvent]) -> JsonObject:
    """The pod as the door read it (``pod.submitted``'s spec), or empty."""
    return dict(life[0].payload_dict().get("spec") or {}) if life[0].type in BIRTHS else {}


def _outcome_counts(results: list[Mapping[str, object]]) -> str:
    counts: dict[str, int] = {}
    for result in results:
        outcome = str(result["outcome"])
        counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no writes"


def _value(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)


def enforcement(events: list[RecordedEvent]) -> list[str]:
    """The pod's enforcement plan on its node (every value with the rule that set it) and how it was applied."""
    from allot_eventstore.clock import iso

    plan_record = next(
        (
            r
            for r in reversed(events)
            if r.type == "qos.plan_recorded" or (r.type == "qos.recorded" and r.payload_dict().get("plan"))
        ),
        None,
    )
    if plan_record is None:
        return []
    p = plan_record.payload_dict()
    plan = p["plan"]
    removed = next(
        (r for r in reversed(events) if r.type == "qos.plan_removed" and r.position > plan_record.position),
        None,
    )
    lines = [
        f"enforcement: plan r{plan['revision']} on node {p['node']} ({plan_record.type} by {plan_record.producer})"
    ]
    for target in plan.get("cgroups") or []:
        who = f"{target['scope']} {target['container']}" if target.get("container") else target["scope"]
        lines.append(f"  cgroup {who}: {target['path']}")
        for knob, value in sorted(target.get("settings", {}).items()):
            lines.append(
                f"    {knob} = {_value(value)}  <- {target.get('why', {}).get(knob, '')}".rstrip(" <-")
            )
    for gpu in plan.get("gpu") or []:
        lines.append(f"  gpu {gpu['container']}: CDI device {gpu['device']}")
        for name, value in sorted((gpu.get("env") or {}).items()):
            lines.append(f"    env {name}={value}")
        for key, value in sorted((gpu.get("annotations") or {}).items()):
            lines.append(f"    requested by the pod annotation {key}: {value.strip()}")
    if plan.get("resctrl"):
        group = plan.get("resctrl_group")
        own = f" (LLC {group['llc_start']}-{group['llc_end']}%, MB {group['mb_percent']}%)" if group else ""
        lines.append(f"  resctrl group: {plan['resctrl']}{own}")
    if not (plan.get("cgroups") or plan.get("gpu") or plan.get("resctrl")):
        lines.append("  nothing to enforce (no QoS strategy applies to this pod)")
    for warning in plan.get("warnings") or []:
        lines.append(
            f"  warning: {warning['path']}: {warning['message']}".replace("warning: : ", "warning: ")
        )
    if removed is not None:
        lines.append(f"  removed: {removed.payload_dict()['reason']} (nothing of it needs to hold any more)")
        return lines
    applied = next((r for r in reversed(events) if r.type == "qos.applied"), None)
    if applied is None:
        lines.append("  applied: not yet (no node agent has reported it)")
        return lines
    a = applied.payload_dict()
    behind = f"; plan r{plan['revision']} not applied yet" if a["revision"] != plan["revision"] else ""
    lines.append(
        f"  applied: r{a['revision']} {'ok' if a['ok'] else 'FAILED'} by {applied.producer} at {iso(applied.recorded_at)}"
        f" ({_outcome_counts(a.get('results') or [])}){behind}"
    )
    for result in a.get("results") or []:
        if result["outcome"] not in ("applied", "unchanged"):
            lines.append(
                f"    {result['outcome']}: {result['target']}: {result.get('error', '')}".rstrip(": ")
            )
    drifts = [r for r in events if r.type == "qos.drift_corrected" and r.position > applied.position]
    for drift in drifts:
        for c in drift.payload_dict()["corrected"]:
            found = f" (found {c['found']!r})" if c.get("found") else ""
            lines.append(
                f"  drift corrected at {iso(drift.recorded_at)}: {c['target']} = {c.get('value', '')}{found}"
            )
    return lines


def _member_decision(placed: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if placed is None:
        return None
    decision = placed.get("decisions", {}).get(key)
    return dict(decision) if decision else None


def _first_member_reasons(decision: dict[str, Any]) -> dict[str, list[str]]:
    for member in decision.get("members") or []:
        if member.get("node_reasons"):
            return dict(member["node_reasons"])
    return {}


async def refused_about(url: str, stream: str) -> list[RecordedEvent]:
    """The ``security.message_refused`` warnings about messages that claimed an event of ``stream``."""
    from allot_stack.connect import bounded_store

    store = bounded_store(url)
    try:
        return [
            record
            async for record in store.iterate(types={REFUSED})
            if record.payload_dict().get("claimed_stream") == stream
        ]
    finally:
        await store.close()


async def refused_counts(store: EventStore, *, until: int | None = None) -> dict[str, int]:
    """How many messages the services refused on the bus up to ``until``, by reason (``allot replay --verify``)."""
    counts: dict[str, int] = {}
    async for record in store.iterate(types={REFUSED}, until=until):
        reason = str(record.payload_dict().get("reason", "?"))
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items()))


def refused_line(counts: dict[str, int]) -> str:
    """The verify report's line about the bus: refusals are warnings about traffic, not faults of the log."""
    if not counts:
        return "bus          no message was refused"
    reasons = ", ".join(f"{reason} {n}" for reason, n in counts.items())
    return (
        f"bus          {sum(counts.values())} message(s) refused ({reasons}): claimed on the bus, not in the log; "
        "nothing was decided on them (allot events tail --type 'security.*')"
    )


def refusal_lines(refused: list[RecordedEvent]) -> list[str]:
    """What the bus claimed about the pod and the services refused (docs/security.md)."""
    from allot_eventstore.clock import iso

    if not refused:
        return []
    lines = [
        "",
        f"refused messages ({len(refused)}): claimed on the bus, not in the log; nothing was decided on them",
    ]
    for record in refused:
        w = record.payload_dict()
        lines.append(
            f"  {iso(record.recorded_at)}  {w['consumer']}: {w['reason']}: {w.get('claimed_type') or '?'} "
            f"{w.get('claimed_event_id') or '?'} claiming position {w.get('claimed_position', 0)}"
        )
    return lines


async def migrations(url: str, key: str) -> list[RecordedEvent]:
    from allot_stack.connect import on_log
    from allot_stack.migration_views import pod_migrations

    return await on_log(lambda store: pod_migrations(store, key), url)
