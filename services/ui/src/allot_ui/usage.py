"""The web view's usage page (``/usage``): quota chargeback as ``allot report usage`` computes it — GPU-hours, GPU-memory
GiB-hours and CPU-hours per quota, namespace or workload over a window of the log, own (within min) and borrowed —
as a table and a bar chart of one of the three (``metric``).

The window is read from the log only (``until`` defaults to the last recorded event), so a page shows the same figures
for the same log and query. A window the log cannot give (an end before year 1 or after 9999, a ``since`` after the
last recorded event) is refused (400, ``query.<since|until>: <reason>``).

Concurrency model (:class:`Reports`, one per application): a report is computed once per log position, grouping and
window (``since=7d`` and ``since=168h`` are one window), and kept among the last :data:`CACHE_SIZE`; requests for a
report being computed wait for that computation rather than starting their own; at most :data:`MOST_AT_ONCE`
different reports are computed at once, and a request for another is answered 503 with ``Retry-After`` (:class:`Busy`)
instead of queueing. Each computation folds the log page by page (:mod:`allot_stack.usage_window`), so its memory
does not grow with the window. A computation outlives the requests that wait for it (its result is cached for the
next one) and is cancelled when the view stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final

from allot_ui.html import e, table

if TYPE_CHECKING:
    from allot_ui.model import UiModel

__all__ = [
    "METRICS",
    "Busy",
    "Reports",
    "WindowRefused",
    "check_by",
    "check_metric",
    "check_since",
    "check_until",
    "usage_page",
]

# query value -> (row attribute of the total, of the borrowed part, label, unit)
METRICS: Final = {
    "gpu": ("gpu_hours", "gpu_hours_borrowed", "GPU-hours", "GPU-h"),
    "gpu-memory": ("gpu_mem_gib_hours", "gpu_mem_gib_hours_borrowed", "GPU memory GiB-hours", "GiB-h"),
    "cpu": ("cpu_hours", "cpu_hours_borrowed", "CPU-hours", "CPU-h"),
}
_BARS: Final = 20  # groups drawn in the chart (the table lists all)
CACHE_SIZE: Final = 16  # reports kept
MOST_AT_ONCE: Final = 2  # reports computed at once
RETRY_AFTER_S: Final = 5  # what a request refused for being one too many is told


def _window(since: str, until: str | None) -> None:
    """The window's syntax, checked as ``allot report usage`` checks its flags (the reason without the flag name)."""
    from allot_stack.usage_window import SYNTAX_ANCHOR_US, parse_window

    try:
        parse_window(since, until, last_us=SYNTAX_ANCHOR_US)
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text.split(": ", 1)[1] if text.startswith("--") else text) from None


def _bounded(value: str) -> str:
    if len(value) > 64:
        raise ValueError(f"at most 64 characters (got {len(value)})")
    return value


def check_since(value: str) -> str:
    if _bounded(value):
        _window(value, None)
    return value


def check_until(value: str) -> str:
    if _bounded(value):
        _window("1s", value)  # a window of its own: until's syntax alone
    return value


def _one_of(choices: tuple[str, ...] | dict[str, Any], value: str) -> str:
    if value and value not in choices:
        raise ValueError(f"must be one of {', '.join(choices)} or empty (got {value[:40]!r})")
    return value


def check_by(value: str) -> str:
    from allot_views.usage import BY

    return _one_of(BY, value)


def check_metric(value: str) -> str:
    return _one_of(METRICS, value)


class Busy(Exception):
    """Every slot for computing a report is taken: the request is answered 503 with ``Retry-After``."""

    retry_after: int = RETRY_AFTER_S


class WindowRefused(ValueError):
    """A window the log cannot give: ``query.<since|until>: <reason>`` (400)."""


Key = tuple[int, str, int, int]  # log position, grouping, window (µs)


class Reports:
    """The usage reports of one view: computed once per key, shared, bounded (the module's docstring)."""

    def __init__(self, *, most: int = MOST_AT_ONCE, keep: int = CACHE_SIZE) -> None:
        self.most, self.keep = most, keep
        self._done: OrderedDict[Key, list[Any]] = OrderedDict()
        self._running: dict[Key, asyncio.Task[list[Any]]] = {}

    async def report(self, model: UiModel, by: str, since: str, until: str) -> tuple[Any, list[Any]]:
        """The window and rows for the query at the view's log position."""
        from allot_stack.usage_window import fold_window, window_at

        position = model.position
        try:
            window = await window_at(model.store, since, until or None, position=position)
        except ValueError as exc:
            flag, _, reason = str(exc).partition(": ")
            name = flag.removeprefix("--")
            plain = reason.replace("--since", "since").replace("--until", "until")
            raise WindowRefused(f"query.{name}: {plain}") from None
        key = (position, by, window.since_us, window.until_us)
        if key in self._done:
            self._done.move_to_end(key)
            return window, self._done[key]
        task = self._running.get(key)
        if task is None:
            if len(self._running) >= self.most:
                raise Busy(
                    f"{len(self._running)} usage reports are being computed (at most {self.most} at once); "
                    f"try again in {RETRY_AFTER_S} s"
                )
            task = asyncio.create_task(
                fold_window(model.store, window, by, position=position), name=f"usage report {key}"
            )
            self._running[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        return window, await asyncio.shield(task)

    def _finished(self, key: Key, task: asyncio.Task[list[Any]]) -> None:
        del self._running[key]
        if task.cancelled() or task.exception() is not None:  # the waiters have it (or have gone)
            return
        self._done[key] = task.result()
        while len(self._done) > self.keep:
            self._done.popitem(last=False)

    async def close(self) -> None:
        """Cancel the computations still running (the view stops)."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(BaseException):
                await task


def chart(rows: list[Any], metric: str) -> str:
    """Horizontal bars, one per group (the largest ``_BARS``), own and borrowed stacked, as inline SVG."""
    total_attr, borrowed_attr, label, unit = METRICS[metric]
    drawn = sorted(rows, key=lambda r: (-getattr(r, total_attr), r.key))[:_BARS]
    drawn = [r for r in drawn if getattr(r, total_attr) > 0]
    if not drawn:
        return f"<p>No {e(label)} in this window.</p>"
    top = float(max(getattr(r, total_attr) for r in drawn))
    left, width, bar, gap = 220, 520, 18, 6
    height = len(drawn) * (bar + gap) + 30
    parts = [
        f'<svg role="img" aria-label="{e(label)} per group, own and borrowed" width="{left + width + 120}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg" style="font:12px system-ui,sans-serif">'
    ]
    for i, row in enumerate(drawn):
        total, borrowed = float(getattr(row, total_attr)), float(getattr(row, borrowed_attr))
        own_w, brw_w = width * (total - borrowed) / top, width * borrowed / top
        y = i * (bar + gap)
        name = row.key if len(row.key) <= 32 else row.key[:31] + "…"
        parts.append(
            f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{e(name)}</text>'
            f'<rect x="{left}" y="{y}" width="{own_w:.1f}" height="{bar}" fill="#3b6fd8"><title>{e(row.key)}: own '
            f"{total - borrowed:.2f} {e(unit)}</title></rect>"
            f'<rect x="{left + own_w:.1f}" y="{y}" width="{brw_w:.1f}" height="{bar}" fill="#e8962e"><title>'
            f"{e(row.key)}: borrowed {borrowed:.2f} {e(unit)}</title></rect>"
            f'<text x="{left + own_w + brw_w + 6:.1f}" y="{y + 13}">{total:.2f}</text>'
        )
    legend_y = len(drawn) * (bar + gap) + 14
    parts.append(
        f'<rect x="{left}" y="{legend_y - 10}" width="12" height="12" fill="#3b6fd8"/>'
        f'<text x="{left + 16}" y="{legend_y}">own (within min)</text>'
        f'<rect x="{left + 140}" y="{legend_y - 10}" width="12" height="12" fill="#e8962e"/>'
        f'<text x="{left + 156}" y="{legend_y}">borrowed</text></svg>'
    )
    return "".join(parts)


async def usage_page(reports: Reports, model: UiModel, query: dict[str, str]) -> str:
    """The page's body; :class:`WindowRefused` (400) or :class:`Busy` (503) when it cannot be computed."""
    from allot_eventstore.clock import iso

    by = query.get("by") or "quota"
    since = query.get("since") or "7d"
    until = query.get("until") or ""
    metric = query.get("metric") or "gpu"
    window, rows = await reports.report(model, by, since, until)
    label = METRICS[metric][2]
    links = " · ".join(
        f'<a href="/usage?by={b}&amp;since={e(since)}&amp;metric={metric}">{b}</a>'
        if b != by
        else f"<b>{b}</b>"
        for b in ("quota", "namespace", "workload")
    )
    metrics = " · ".join(
        f'<a href="/usage?by={by}&amp;since={e(since)}&amp;metric={m}">{e(v[2])}</a>'
        if m != metric
        else f"<b>{e(v[2])}</b>"
        for m, v in METRICS.items()
    )
    head = (
        f"<p>From {e(iso(window.since_us))} to {e(iso(window.until_us))} (recorded times; the same figures as "
        f"<code>allot report usage --since {e(since)} --by {by}</code>). By: {links}. Chart: {metrics}.</p>"
    )
    cells = [
        (
            row.key,
            row.pods,
            *(
                f"{float(getattr(row, t) - getattr(row, b)):.2f} / {float(getattr(row, b)):.2f}"
                for t, b, _, _ in METRICS.values()
            ),
        )
        for row in rows
    ]
    columns = (by, "pods", *(f"{v[3]} own / borrowed" for v in METRICS.values()))
    body = table(columns, cells) if rows else "<p>Nothing held resources in this window.</p>"
    return head + f"<h2>{e(label)} per {by}</h2>" + chart(rows, metric) + "<h2>All figures</h2>" + body
