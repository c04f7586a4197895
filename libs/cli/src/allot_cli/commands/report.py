"""``allot report usage``: quota chargeback from the log (GPU-hours, GPU-memory GiB-hours and CPU-hours per quota,
namespace or workload over a window, own vs borrowed). The computation is :mod:`allot_views.usage`; this module
reads the log and prints. The window comes from the log only (``--until`` defaults to the last recorded event), so
the same log and flags print the same report.
"""

from __future__ import annotations

import argparse
from typing import Any


async def usage_rows(url: str, since: str, until: str | None, by: str) -> tuple[Any, list[Any]]:
    """The window and its rows, read from the log at ``url`` (only the event types the report needs)."""
    from allot_eventstore.postgres import PostgresEventStore
    from allot_intake.errors import UsageError

    store = PostgresEventStore.connect(url)
    try:
        return await store_usage(store, since, until, by)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    finally:
        await store.close()


async def store_usage(store: Any, since: str, until: str | None, by: str) -> tuple[Any, list[Any]]:
    """The window and its rows from an open event store; ValueError naming the flag for a bad window."""
    from allot_cli.usage_window import parse_window
    from allot_views.usage import USAGE_TYPES, usage

    head, _ = await store.head()
    last = await store.read(after=head - 1, limit=1) if head else []
    window = parse_window(since, until, last_us=last[0].recorded_at if last else 0)
    events = [(r.recorded_at, r.decode()) async for r in store.iterate(types=USAGE_TYPES)]
    return window, usage(events, window, by)  # type: ignore[arg-type]


def _num(value: Any) -> float:
    return round(float(value), 3)


def _record(row: Any, by: str) -> dict[str, Any]:
    def split(total: Any, borrowed: Any) -> dict[str, float]:
        return {"own": _num(total - borrowed), "borrowed": _num(borrowed), "total": _num(total)}

    return {
        by: row.key,
        "pods": row.pods,
        "gpuHours": split(row.gpu_hours, row.gpu_hours_borrowed),
        "gpuMemoryGiBHours": split(row.gpu_mem_gib_hours, row.gpu_mem_gib_hours_borrowed),
        "cpuHours": split(row.cpu_hours, row.cpu_hours_borrowed),
    }


_METRICS = (("gpuHours", "GPU-H"), ("gpuMemoryGiBHours", "GiB-H"), ("cpuHours", "CPU-H"))


def render(window: Any, rows: list[Any], by: str, output: str) -> str:
    from allot_eventstore.clock import iso

    records = [_record(r, by) for r in rows]
    if output == "json":
        import json

        doc = {"since": iso(window.since_us), "until": iso(window.until_us), "by": by, "rows": records}
        return json.dumps(doc, indent=2)
    if output == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([by, "pods", *(f"{m}_{part}" for m, _ in _METRICS for part in ("own", "borrowed"))])
        for rec in records:
            writer.writerow(
                [rec[by], rec["pods"], *(rec[m][p] for m, _ in _METRICS for p in ("own", "borrowed"))]
            )
        return buf.getvalue().rstrip("\n")
    from allot_cli.output import elide, limit_for

    header = [by.upper(), "PODS", *(f"{h} OWN/BRW" for _, h in _METRICS)]
    cells = [
        [rec[by], str(rec["pods"]), *(f"{rec[m]['own']:.2f}/{rec[m]['borrowed']:.2f}" for m, _ in _METRICS)]
        for rec in records
    ]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    limit = limit_for("table") or 0
    widths[0] = max(len(header[0]), min(widths[0], limit - sum(widths[1:]) - 2 * (len(widths) - 1)))
    return "\n".join(
        "  ".join(
            elide(c, w).ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in [header, *cells]
    )


def cmd_usage(args: argparse.Namespace) -> int:
    import asyncio

    from allot_cli.usage_window import SYNTAX_ANCHOR_US, parse_window
    from allot_intake.errors import UsageError
    from allot_stack.connect import endpoints

    try:  # bad flags are refused before the log is read
        parse_window(args.since, args.until, last_us=SYNTAX_ANCHOR_US)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    window, rows = asyncio.run(usage_rows(endpoints().database_url, args.since, args.until, args.by))
    print(render(window, rows, args.by, args.output))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="usage reports from the log (quota chargeback)")
    sub = p.add_subparsers(dest="report_command", metavar="SUBCOMMAND")
    sub.required = True
    u = sub.add_parser(
        "usage",
        help="GPU-, GPU-memory- and CPU-hours per quota, namespace or workload, own vs borrowed",
        description="GPU-hours, GPU-memory GiB-hours and CPU-hours per quota, namespace or workload over a window "
        "of the log, split into own (within min) and borrowed. Times are the recorded events' times: --until "
        "defaults to the last recorded event; a duration as --since counts back from --until.",
    )
    u.add_argument(
        "--since", default="7d", help="start: a duration (30m, 12h, 7d, 2w) or an ISO time (default 7d)"
    )
    u.add_argument("--until", help="end: an ISO time, or a duration back from the last recorded event")
    u.add_argument("--by", choices=("quota", "namespace", "workload"), default="quota", help="group rows by")
    u.add_argument("-o", "--output", choices=("table", "csv", "json"), default="table", help="output format")
    u.set_defaults(func=cmd_usage)
