"""``allot bench sampler``: what node-reporter's NodeMetric sampling costs a node.

The agent's metrics loop (``node_reporter.adapters.agent``) runs for ``--seconds`` seconds against this machine's
``/proc`` and the cgroups of ``--pods`` pods: a sample every ``--interval`` seconds, a NodeMetric built and recorded
(into an in-memory log) every ``--report`` seconds, exactly as a per-node node-reporter does. The pods' cgroups are

- ``--cgroups real`` (the default when run as root on a cgroup v1 machine): real cgroups created for the run under
  this machine's cpu, cpuacct and memory hierarchies (``<controller>/allot-bench-<pid>/kubepods/...``, removed
  afterwards), so the kernel generates every file the sampler reads, as on a node;
- ``--cgroups v1`` / ``v2``: a kubelet-shaped tree of plain files (cgroupfs driver / systemd driver).

Every third pod is Guaranteed, Burstable or BestEffort. Reported: ``cpu_percent`` = process CPU time (user + system)
/ wall time over the run (one core = 100 %), ``cpu_ms_per_sample`` (reporting included; the passes the loop actually made), samples and reports.
"""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.bench import report


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sampler",
        help="CPU cost of node-reporter's NodeMetric sampling (pods, interval)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pods", type=int, default=100, help="pod cgroups on the node (default 100)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument(
        "--report", type=float, default=60.0, help="seconds between NodeMetric reports (default 60)"
    )
    p.add_argument(
        "--seconds", type=float, default=125.0, help="length of the run (default 125: two reports)"
    )
    p.add_argument(
        "--cgroups",
        choices=["real", "v1", "v2"],
        default=None,
        help="real cgroups (root, cgroup v1) or a file tree",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from allot_sim.bench.sampler import measure

    result = measure(
        pods=args.pods, interval=args.interval, report=args.report, seconds=args.seconds, cgroups=args.cgroups
    )
    report(result, as_json=args.json)
    return 0
