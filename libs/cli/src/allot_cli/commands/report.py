"""``allot report usage``: quota chargeback from the log (GPU-hours, GPU-memory GiB-hours and CPU-hours per quota,
namespace or workload over a window, own vs borrowed). The computation is :mod:`allot_views.usage`, the log is read
by :mod:`allot_stack.usage_window`; this module reads the flags and prints. The window comes from the log only (``--until`` defaults to the last recorded event), so
the same log and flags print the same report.
"""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli._groups import subcommands


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

    from allot_intake.errors import UsageError
    from allot_stack.connect import endpoints
    from allot_stack.usage_window import SYNTAX_ANCHOR_US, parse_window, usage_rows

    try:  # bad flags are refused before the log is read
        parse_window(args.since, args.until, last_us=SYNTAX_ANCHOR_US)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    window, rows = asyncio.run(usage_rows(endpoints().database_url, args.since, args.until, args.by))
    print(render(window, rows, args.by, args.output))
    return 0


def register(subparsers: Any) -> None:
    sub = subcommands(subparsers, "report", help_text="usage reports from the log (quota chargeback)")
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
