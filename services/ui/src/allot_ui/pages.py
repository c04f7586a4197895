"""The pages of the web audit view: pure functions from the model to HTML (no template engine, no JavaScript build;
one small script follows the live event stream). Every value shown is escaped."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from allot_eventstore.clock import iso
from allot_ui.gpus import gpu_summary
from allot_ui.html import e, pod_link, table, tiles
from allot_ui.model import UiModel
from allot_views.cluster import HELD, PodView
from allot_views.units import human

NAV = (
    ("/", "Overview"),
    ("/gpus", "GPUs"),
    ("/pods", "Pods"),
    ("/quotas", "Quotas"),
    ("/gangs", "Gangs"),
    ("/reservations", "Reservations"),
    ("/events", "Events"),
    ("/usage", "Usage"),
    ("/verify", "Verify"),
)
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .brand{font-weight:700;margin-right:12px}main{padding:16px}
h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;min-width:40%}
th,td{border:1px solid #dde1e8;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}.num{text-align:right}.muted{color:#6b7385}.bad{color:#b3261e;font-weight:600}
.ok{color:#1b7f3b;font-weight:600}td a{white-space:nowrap}
pre{background:#fff;border:1px solid #dde1e8;padding:10px;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}
.tiles{display:flex;gap:12px;flex-wrap:wrap}.tile{background:#fff;border:1px solid #dde1e8;padding:10px 14px}
.tile b{display:block;font-size:22px}.gpu{display:inline-block;width:18px;height:18px;margin:1px;
border:1px solid #8a93a6;background:#fff;position:relative;vertical-align:middle}
.gpu i{position:absolute;left:0;bottom:0;width:100%;background:#3b6fd8}
.gpu.full i{background:#1d2330}.gpu.bad{border-color:#b3261e;background:#f6d5d2}form.filters{margin-bottom:10px}form.filters input,form.filters select{margin-right:8px}
"""
LIVE_SCRIPT = """
const body=document.getElementById('live');const since=Number(body.dataset.after);
const src=new EventSource('/api/stream?after='+since);
src.onmessage=(m)=>{const e=JSON.parse(m.data);const tr=document.createElement('tr');
for(const v of [e.position,e.time,e.type,e.stream,e.producer]){const td=document.createElement('td');
td.textContent=v;tr.appendChild(td);}body.insertBefore(tr,body.firstChild);
while(body.children.length>200){body.removeChild(body.lastChild);}};
"""


_e = e


def layout(title: str, path: str, body: str, model: UiModel, *, script: str = "") -> str:
    nav = "".join(
        f'<a href="{href}"{" class=on" if href == path else ""}>{_e(label)}</a>' for href, label in NAV
    )
    chain = (
        f'<span class="bad">chain broken at {model.chain.verified_to + 1}</span>'
        if model.chain.problem
        else f'<span class="muted">log #{model.position}</span>'
    )
    tail = f"<script>{script}</script>" if script else ""
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)} · Allot</title>"
        f"<style>{STYLE}</style></head><body><header><span class=brand>Allot</span>{nav}"
        f'<span style="margin-left:auto">{chain}</span></header><main><h1>{_e(title)}</h1>{body}</main>{tail}'
        "</body></html>"
    )


_tiles = tiles


# --- overview, pods -----------------------------------------------------------------------------------------------
def held_pods(model: UiModel) -> dict[str, PodView]:
    """The pods waiting for something (quota, a gang, a node, a binding), each with its reason codes: the pods the
    services count in ``allot_held_pods`` and ``allot explain`` says are waiting."""
    return {key: pod for key, pod in sorted(model.view.pods.items()) if pod.phase in HELD}


def overview_page(model: UiModel) -> str:
    phases = Counter(p.phase for p in model.view.pods.values())
    s = gpu_summary(model)
    head = _tiles(
        (
            ("nodes", len(model.view.nodes)),
            ("pods", len(model.view.pods)),
            *((phase.lower(), n) for phase, n in sorted(phases.items())),
            ("GPUs in use", f"{s['gpus_in_use']} / {s['gpus']}"),
            ("GPUs free", s["gpus_free"]),
            ("events", model.position),
        )
    )
    held = held_pods(model)
    if not held:
        return head + "<h2>Why pods are pending</h2><p>No pod is held back.</p>"
    reasons = Counter(code for pod in held.values() for code in set(pod.codes) or {"Unknown"})
    rows = [
        (pod_link(key), pod.phase, ", ".join(pod.codes) or "Unknown", pod.message)
        for key, pod in held.items()
    ]
    return (
        head
        + f"<h2>Why pods are pending: {len(held)} pod(s) held back</h2>"
        + table(("reason code", "pods"), reasons.most_common(20))
        + "<h2>Held back</h2>"
        + table(("pod", "phase", "reason", "message"), rows[:50], raw=(0,))
    )


PHASES = ("", "Pending", "Waiting", "Placed", "Bound", "Unschedulable", "Rejected", "Evicted", "Deleted")


def pods_page(model: UiModel, query: Mapping[str, str]) -> str:
    phase, namespace, node, text = (query.get(k, "") for k in ("phase", "namespace", "node", "q"))
    limit = int(query.get("limit") or 500)  # checked by allot_ui.query
    matched = [
        (key, pod)
        for key, pod in sorted(model.view.pods.items())
        if (not phase or pod.phase == phase)
        and (not namespace or key.startswith(f"{namespace}/"))
        and (not node or pod.node == node)
        and (not text or text in key or text in pod.message)
    ]
    options = "".join(f"<option{' selected' if p == phase else ''}>{_e(p)}</option>" for p in PHASES)
    form = (
        "<form class=filters>"
        f"<select name=phase>{options}</select>"
        f'<input name=namespace placeholder=namespace value="{_e(namespace)}">'
        f'<input name=node placeholder=node value="{_e(node)}">'
        f'<input name=q placeholder="name or message" value="{_e(text)}"><button>Filter</button></form>'
    )
    rows = [
        (
            pod_link(key),
            pod.phase,
            pod.node or "-",
            _devices(pod),
            pod.quota or "-",
            pod.qos or "-",
            pod.message,
        )
        for key, pod in matched[:limit]
    ]
    more = f'<p class="muted">{len(matched) - limit} more not shown</p>' if len(matched) > limit else ""
    return (
        form
        + f'<p class="muted">{len(matched)} pod(s)</p>'
        + table(("pod", "phase", "node", "devices", "quota", "qos", "message"), rows, raw=(0,))
        + more
    )


def _devices(pod: PodView) -> str:
    return " ".join(f"{k}:{','.join(map(str, v))}" for k, v in pod.devices.items()) or "-"


def pod_page(key: str, lines: list[str]) -> str:
    return f"<pre>{_e(chr(10).join(lines))}</pre>"


# --- quotas, gangs, reservations ---------------------------------------------------------------------------------
def _values(values: Mapping[str, str], dims: Sequence[str]) -> str:
    return " ".join(f"{d}={human(d, values[d])}" for d in dims if d in values) or "-"


def quotas_page(model: UiModel) -> str:
    p = model.projections
    rows = []
    for row in p.quotas:
        dims = [d for d in row["dimensions"] if d != "pods"]
        name = "&nbsp;&nbsp;" * row["depth"] + _e(row["name"])
        rows.append(
            (
                name,
                row["namespace"],
                row["pods"],
                _e(_values(row["min"], dims)),
                _e(_values(row["max"], dims) if row["max"] else "unlimited"),
                _e(_values(row["runtime"], dims)),
                _e(_values(row["used"], dims)),
                _e(_values(row["request"], dims)),
            )
        )
    current = [f for f in reversed(model.ledger) if not f["returned"]]
    returned = [f for f in reversed(model.ledger) if f["returned"]]
    return (
        _projection_note(model)
        + table(
            ("quota", "namespace", "pods", "min", "max", "runtime", "used", "request"),
            rows,
            raw=range(8),
        )
        + "<h2>Borrow ledger: current borrows (latest first)</h2>"
        + (_ledger(current) if current else "<p>No pod holds a borrow now.</p>")
        + "<h2>Borrow ledger: returned borrows (latest first)</h2>"
        + (_ledger(returned, returned=True) if returned else "<p>No borrow returned yet.</p>")
    )


def _ledger(facts: Sequence[Mapping[str, Any]], *, returned: bool = False) -> str:
    """The borrow facts quota-manager recorded at admission; ``returned``: with the position they went back at."""
    columns = ("position", "pod", "within", "borrowed", "lent by", *(("returned at",) if returned else ()))
    rows = [
        (
            f["position"],
            pod_link(f["pod"]),
            f.get("parent", ""),
            f"{f.get('amount')} {f.get('dimension')}",
            ", ".join(
                f"{lender.get('quota')} {lender.get('amount')} ({lender.get('kind')})"
                for lender in f.get("lenders", [])
            ),
            *((f["returned"],) if returned else ()),
        )
        for f in facts
    ]
    return table(columns, rows, raw=(1,))


def _projection_note(model: UiModel) -> str:
    p = model.projections
    if p.error:
        return f'<p class="bad">The projections could not be rebuilt: {_e(p.error)}</p>'
    return f'<p class="muted">As the services saw the log at position {p.position} (rebuilt in {p.took_s:.2f} s).</p>'


def gangs_page(model: UiModel) -> str:
    rows = [
        (g.get("gang"), g.get("phase"), g.get("min_available", g.get("minMember", "")), g.get("explain", ""))
        for g in model.projections.gangs
    ]
    return _projection_note(model) + (
        table(("gang", "phase", "min", "why"), rows) if rows else "<p>No gang.</p>"
    )


def reservations_page(model: UiModel) -> str:
    p = model.projections
    res = [
        (r["reservation"], r["phase"], r["node"], r["allocatable"], r["allocated"], r["owners"], r["message"])
        for r in p.reservations
    ]
    mig = [
        tuple(m.get(k, "") for k in ("job", "phase", "mode", "pod", "reservation", "reason"))
        for m in p.migrations
    ]
    return (
        _projection_note(model)
        + (
            table(("reservation", "phase", "node", "allocatable", "allocated", "owners", "message"), res)
            if res
            else "<p>No reservation.</p>"
        )
        + "<h2>Migrations</h2>"
        + (
            table(("job", "phase", "mode", "pod", "reservation", "reason"), mig)
            if mig
            else "<p>No migration.</p>"
        )
        + "<h2>GPU defragmentation (latest first)</h2>"
        + defrag_rounds(model)
    )


def _gpus(milli: int, weight: int) -> str:
    return f"{milli / (weight * 1000):.2f}" if weight else str(milli)


def defrag_rounds(model: UiModel) -> str:
    """The GPUDefrag rounds that planned or found a pod waiting: each plan's moves and the FGD fragmentation (in
    GPUs) before and after, the pods it made no plan for with the reason."""
    if not model.defrag:
        return "<p>No GPU defragmentation round planned anything or found a pod waiting.</p>"
    rows = []
    for position, r in reversed(model.defrag):
        weight = int(r.get("frag_weight") or 0)
        mode = "dry run" if r.get("dry_run", True) else "jobs " + ", ".join(r.get("jobs") or [])
        for plan in r.get("plans") or []:
            moves = "; ".join(
                f"{m['pod']} {m['source']} → {m['target']}"
                + (f" (gang {m['gang']})" if m.get("gang") else "")
                for m in plan.get("moves") or []
            )
            frag = f"{_gpus(plan['frag_before'], weight)} → {_gpus(plan['frag_after'], weight)}"
            rows.append(
                (position, r["profile"], mode, plan["pending"], f"fits on {plan['target']}", moves, frag)
            )
        for w in r.get("waiting") or []:
            rows.append((position, r["profile"], mode, w["pod"], w["code"], w["reason"], ""))
    return table(
        ("position", "profile", "mode", "waiting pod", "outcome", "moves", "fragmentation (GPUs)"), rows
    )


# --- events, verify ----------------------------------------------------------------------------------------------
def event_row(record: Any) -> tuple[Any, ...]:
    return (record.position, iso(record.recorded_at), record.type, record.stream_id, record.producer)


def events_page(model: UiModel) -> str:
    rows = [event_row(r) for r in reversed(list(model.recent)[-200:])]
    head = "".join(f"<th>{c}</th>" for c in ("position", "time", "type", "stream", "producer"))
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>" for row in rows)
    return (
        '<p class="muted">Latest first; new events appear as they are recorded.</p>'
        f'<table><thead><tr>{head}</tr></thead><tbody id=live data-after="{model.position}">{body}</tbody></table>'
    )


def verify_page(model: UiModel) -> str:
    chain = model.chain
    status = (
        f'<p class="bad">Hash chain broken: {_e(chain.problem)}</p>'
        if chain.problem
        else f'<p class="ok">Hash chain intact from position 1 to {chain.verified_to}.</p>'
    )
    lag = table(
        ("consumer", "checkpoint", "events behind", "next event to handle"),
        [(n, model.checkpoints[n], lag, model.pending.get(n) or "-") for n, lag in model.lag().items()],
    )
    return (
        status
        + f"<p>Log head: position {model.head}. Folded into this view: {model.position}.</p>"
        + "<h2>Per-service lag</h2>"
        + '<p class="muted">Events behind: log positions between the checkpoint and the head while an event the '
        "service consumes waits there (0 when it has handled all it reads), as <code>allot_consumer_lag_events</code>"
        " counts them.</p>"
        + lag
        + '<p class="muted">Re-deriving every decision is <code>allot replay --verify</code>.</p>'
    )


def query_string(query: Mapping[str, str]) -> str:
    return urlencode({k: v for k, v in query.items() if v})
