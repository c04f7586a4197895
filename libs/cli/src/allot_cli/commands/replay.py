"""``allot replay [--verify]``: rebuild every projection from the log alone and prove each decision.

With ``--verify`` it checks, in order, and stops at the first failure with a non-zero exit:
1. the hash chain (no edited, inserted, reordered or deleted event; optionally against ``--expect-head``);
2. every service's decisions: each is re-derived from the log and compared field by field with what was recorded,
   up to the service's checkpoint; events after it are lag (reported per service, not a failure);
3. the live projections: each running service reports its position and state digest (over NATS), and a projection
   rebuilt from the log up to that position must have the same digest.
Decision configs are read like the services read them: ``--config-dir`` (default ``<state dir>/config``) holding
``<service>.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from allot_bus.adapters.nats import connect
from allot_cli.connect import Endpoints, endpoints, find_state_dir
from allot_cli.pipeline import PROCESSORS, build_instance, instances
from allot_cli.verify_jobs import Service, verify_all
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import EventStore
from allot_runtime.processor import Host
from allot_runtime.replay import Verified, rebuild


def load_configs(config_dir: Path | None) -> dict[str, dict[str, Any]]:
    import yaml

    configs: dict[str, dict[str, Any]] = {}
    if config_dir is None or not config_dir.is_dir():
        return configs
    for name, _ in PROCESSORS:
        path = config_dir / f"{name}.yaml"
        if path.exists():
            configs[name] = dict(yaml.safe_load(path.read_text()) or {})
    return configs


async def live_states(ep: Endpoints, names: list[str], timeout: float = 2.0) -> dict[str, dict[str, Any]]:
    if not ep.nats_url:
        return {}
    try:
        nc = await connect(ep.nats_url, name="allot-replay", connect_timeout=2)
    except Exception:
        return {}
    out: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            try:
                reply = await nc.request(ep.names.admin(name, "state"), b"", timeout=timeout)
                out[name] = dict(msgspec.json.decode(reply.data))
            except Exception:
                continue
    finally:
        await nc.close()
    return out


async def run(args: argparse.Namespace) -> int:
    ep = endpoints()
    state_dir = find_state_dir()
    config_dir = Path(args.config_dir) if args.config_dir else (state_dir / "config" if state_dir else None)
    configs = load_configs(config_dir)
    store: EventStore = PostgresEventStore.connect(ep.database_url)
    report: dict[str, Any] = {"ok": True}
    started = time.perf_counter()
    try:
        head = await store.head()
        until = args.until or head[0]
        report["decisions"] = {}
        producers = await store.producers()
        if (
            "binder.kube" in producers
        ):  # the binder ran in Kubernetes mode: its decisions were binding requests
            configs.setdefault("binder", {}).setdefault("mode", "kubernetes")
        groups = [
            Service(service, tuple(instances(service, producers)), configs.get(service, {}))
            for service, _ in PROCESSORS
        ]
        names = [name for group in groups for name in group.instances]
        # A service decides up to its checkpoint; what comes after it is lag (not yet decided), never a mismatch.
        checkpoints = await store.checkpoints()
        through = {name: checkpoints.get(name, 0) for name in names}
        verified: dict[str, Verified] = {}
        if args.verify:
            chain, verified = await verify_all(
                ep.database_url,
                groups,
                head=head,
                until=until,
                through=through,
                expected_head=args.expect_head,
                jobs=args.jobs,
            )
            report["chain"] = msgspec.to_builtins(chain)
            _say(
                args,
                f"hash chain   {'ok' if chain.ok else 'BROKEN'}: {chain.events} events, head {chain.head_hash[:16]}…",
            )
            if not chain.ok:
                _say(args, f"MISMATCH: {chain.problem}")
                report["ok"] = False
                return _finish(args, report, 1)
        report["behind"] = {}
        for group, name in ((g, n) for g in groups for n in g.instances):
            if args.verify:
                result = verified[name]
                mismatches = result.mismatches
                report["decisions"][name] = {
                    "triggers": result.checked,
                    "mismatches": len(mismatches),
                    "behind": result.behind,
                    "checkpoint": through[name],
                }
                _say(
                    args,
                    f"decisions    {name:<20} {result.checked:>7} triggers re-derived, "
                    f"{'all reproduce' if not mismatches else f'{len(mismatches)} DO NOT reproduce'}"
                    + (
                        f"; {result.behind} not decided yet (checkpoint {through[name]})"
                        if result.behind
                        else ""
                    ),
                )
                if result.behind:
                    report["behind"][name] = result.behind
                if mismatches:
                    report["ok"] = False
                    report["first_mismatch"] = msgspec.to_builtins(mismatches[0])
                    _say(args, f"MISMATCH: {mismatches[0].describe()}")
                    return _finish(args, report, 1)
            else:
                host = Host(build_instance(group.service, name, group.config), name=name)
                await rebuild(host, store, until=until)
                report["decisions"][name] = {"digest": host.digest()}
                _say(args, f"projection   {name:<20} digest {host.digest()[:16]}…")
        if args.verify and not args.no_live:
            states = await live_states(ep, names)
            report["live"] = {}
            if not states:
                _say(args, "live         no running service answered; compared the log with itself only")
            for name in names:
                service = name.split("@", 1)[0]
                state = states.get(name)
                if state is None:
                    continue
                if not state.get("consistent", True) or not state.get("ready", True):
                    _say(args, f"live         {name:<20} is rebuilding after a failure; not compared")
                    continue
                host = Host(build_instance(service, name, configs.get(service, {})), name=name)
                await rebuild(host, store, until=int(state["position"]))
                same = host.digest() == state["digest"]
                report["live"][name] = {"position": state["position"], "match": same}
                _say(
                    args,
                    f"live         {name:<20} at position {state['position']:>7}: "
                    f"{'matches the log' if same else 'DIFFERS from the log'}",
                )
                if not same:
                    report["ok"] = False
                    _say(
                        args,
                        f"MISMATCH: {name}'s live projection (digest {state['digest'][:16]}…) differs from the "
                        f"one rebuilt from the log up to {state['position']} ({host.digest()[:16]}…)",
                    )
                    return _finish(args, report, 1)
        report["seconds"] = round(time.perf_counter() - started, 3)
        if report["behind"]:
            lagging = ", ".join(f"{name} {count} event(s) behind" for name, count in report["behind"].items())
            _say(
                args,
                f"lag          {lagging}: every decision recorded so far reproduces; verify again once they "
                f"have caught up to cover the rest",
            )
        _say(args, f"verified in {report['seconds']}s" if args.verify else "rebuilt")
        return _finish(args, report, 0)
    finally:
        await store.close()


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, flush=True)


def _finish(args: argparse.Namespace, report: dict[str, Any], code: int) -> int:
    if args.json:
        print(json.dumps(report, indent=2))
    elif code:
        print("replay verification FAILED", file=sys.stderr)
    return code


def cmd_replay(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "replay", help="rebuild projections from the log; --verify proves every decision"
    )
    p.add_argument(
        "--verify", action="store_true", help="check the hash chain, every decision and live projections"
    )
    p.add_argument("--expect-head", help="hash the log head must have (from an earlier audit)")
    p.add_argument("--until", type=int, help="stop at this log position")
    p.add_argument("--config-dir", help="directory with <service>.yaml decision configs")
    p.add_argument("--no-live", action="store_true", help="do not compare with running services")
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes verifying at once (default: one per CPU); the result is the same for any number",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_replay)
