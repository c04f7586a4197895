"""The GPU page of the web audit view: per node, each GPU's index, uuid, model, memory allocated/total, cores
allocated, health and holders, and the node's free GPUs; all from :func:`allot_views.cluster.gpu_rows`, the projection
``allot describe node`` and the per-GPU metrics (``allot_gpu_*``) agree with."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from allot_ui.html import e, pod_link, table, tiles
from allot_ui.model import UiModel
from allot_views.cluster import GpuRow

GIB = 1 << 30
DETAILED = 20  # nodes whose GPUs are listed one by one when no node is asked for


def gib(value: int) -> str:
    return f"{value / GIB:.4g} GiB"


def gpu_summary(model: UiModel) -> dict[str, int]:
    """Counts over every GPU of the cluster (``/api/summary`` and the tiles); shares in gpu-core percent."""
    rows = [g for node in model.gpus().values() for g in node]
    return {
        "gpus": len(rows),
        "gpus_healthy": sum(1 for g in rows if g.healthy),
        "gpus_free": sum(1 for g in rows if g.free),
        "gpus_in_use": sum(1 for g in rows if g.holders),
        "gpus_full": sum(1 for g in rows if g.holders and g.cores_used >= g.cores),
        "gpus_partial": sum(1 for g in rows if g.holders and g.cores_used < g.cores),
        "gpu_shares_used": sum(min(g.cores_used, g.cores) for g in rows),
    }


def _square(g: GpuRow) -> str:
    used = min(100 * g.cores_used // g.cores, 100) if g.cores else 0
    who = ", ".join(f"{p} ({c}%)" for p, c, _ in g.holders) or ("free" if g.healthy else "unhealthy")
    cls = "gpu full" if g.holders and used >= 100 else "gpu bad" if not g.healthy else "gpu"
    return f'<span class="{cls}" title="GPU {g.index}: {e(who)}"><i style="height:{used}%"></i></span>'


def _holders(g: GpuRow) -> str:
    return (
        ", ".join(f"{pod_link(p)} ({c}%, {gib(m)})" for p, c, m in g.holders)
        or '<span class="muted">-</span>'
    )


def gpu_detail(rows: Iterable[GpuRow]) -> list[Sequence[Any]]:
    return [
        (
            g.index,
            e(g.uuid),
            e(g.model or "-"),
            '<span class="ok">healthy</span>' if g.healthy else '<span class="bad">unhealthy</span>',
            f"{g.cores_used}% / {g.cores}%",
            f"{gib(g.memory_used)} / {gib(g.memory)}",
            _holders(g),
        )
        for g in rows
    ]


def gpus_page(model: UiModel, query: Mapping[str, str]) -> str:
    """The totals, one line per GPU node, and each GPU of the nodes shown in detail: the node asked for
    (``?node=``), else the first :data:`DETAILED` nodes (a large cluster's page stays small)."""
    nodes: Mapping[str, list[GpuRow]] = model.gpus()
    chosen = query.get("node", "")
    s = gpu_summary(model)
    head = tiles(
        (
            ("GPUs", s["gpus"]),
            ("healthy", s["gpus_healthy"]),
            ("free", s["gpus_free"]),
            ("in use", s["gpus_in_use"]),
            ("whole", s["gpus_full"]),
            ("partially used (fragments)", s["gpus_partial"]),
            ("GPUs' worth of cores allocated", f"{s['gpu_shares_used'] / 100:g}"),
        )
    )
    overview = [
        (
            f'<a href="/gpus?node={quote(name)}">{e(name)}</a>',
            "".join(_square(g) for g in rows),
            sum(1 for g in rows if g.free),
            f"{gib(sum(g.memory_used for g in rows))} / {gib(sum(g.memory for g in rows))}",
        )
        for name, rows in nodes.items()
        if not chosen or name == chosen
    ]
    legend = (
        '<p class="muted">Each square is a GPU; its fill is the share of gpu-core allocated (hover for who); '
        "free: healthy and nothing allocated.</p>"
    )
    shown = [chosen] if chosen in nodes else [] if chosen else list(nodes)[:DETAILED]
    more = len(nodes) - len(shown) if not chosen else 0
    details = "".join(
        f'<h2 id="node-{e(name)}">{e(name)}: {sum(1 for g in nodes[name] if g.free)} of {len(nodes[name])} '
        "GPUs free</h2>"
        + table(
            ("index", "uuid", "model", "health", "cores allocated", "memory allocated", "held by"),
            gpu_detail(nodes[name]),
            raw=range(7),
        )
        for name in shown
    )
    note = f'<p class="muted">{more} more node(s): pick one above for its GPUs.</p>' if more > 0 else ""
    empty = f"<p>No node {e(chosen)} reports a GPU.</p>" if chosen else "<p>No node reports a GPU.</p>"
    return (
        head
        + legend
        + table(("node", "GPUs", "free", "memory allocated"), overview, raw=(0, 1))
        + (details + note if shown else empty)
    )
