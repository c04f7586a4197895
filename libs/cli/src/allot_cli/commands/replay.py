"""``allot replay [--verify]``: rebuild every projection from the log alone and prove each decision.

With ``--verify`` it checks, in order, and stops at the first failure with a non-zero exit:
1. the hash chain (no edited, inserted, reordered or deleted event; optionally against ``--expect-head``) and its
   anchor: every checkpoint the relay signed must carry a valid signature of a configured public key and match the
   chain at its position, so a rewrite with recomputed hashes is caught (keys: :mod:`allot_stack.anchoring`);
2. every service's decisions: each is re-derived from the log and compared field by field with what was recorded,
   up to the service's checkpoint; events after it are lag (reported per service, not a failure);
3. the live projections: each running service reports its position and state digest (over NATS), and a projection
   rebuilt from the log up to that position must have the same digest.
Each decision is re-derived under the configuration its service recorded when it ran under it (``config.applied``),
and the report names it per service: its hash and the positions it governed. Only a log (or the start of one)
recorded before services recorded their configuration is re-derived with the files on disk, read like the services
read them: ``--config-dir`` (default ``<state dir>/config``) holding ``<service>.yaml``; the report says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if (
    TYPE_CHECKING
):  # the rest is imported when the command runs: ``allot replay --help`` loads no engine or driver
    from allot_cli.replay_configs import DeciderConfigs
    from allot_eventstore.protocol import EventStore
    from allot_eventstore.verify import ChainReport
    from allot_runtime.replay import Verified
    from allot_stack.connect import Endpoints


async def live_states(ep: Endpoints, names: list[str], timeout: float = 2.0) -> dict[str, dict[str, Any]]:
    if not ep.nats_url:
        return {}
    import msgspec

    from allot_bus.adapters.nats import connect

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
    import msgspec

    from allot_cli.enactment_bound import DEFAULT_BOUND
    from allot_cli.replay_configs import FileConfig, describe, load_configs, plan
    from allot_cli.verify_jobs import Service, Since, verify_all
    from allot_cli.verify_since import describe as describe_start
    from allot_eventstore.postgres import PostgresEventStore
    from allot_eventstore.verify import verify_chain
    from allot_runtime.recorded_config import recorded_configs
    from allot_runtime.replay import rebuild
    from allot_stack.anchoring import anchor_line, anchor_of, bound_unsealed, verifying_keys
    from allot_stack.connect import endpoints, find_state_dir
    from allot_stack.enactment import verify_report as enactment_report
    from allot_stack.explain import refused_counts, refused_line
    from allot_stack.pipeline import PROCESSORS, instances

    ep = endpoints()
    state_dir = find_state_dir()
    config_dir = Path(args.config_dir) if args.config_dir else (state_dir / "config" if state_dir else None)
    configs = load_configs(config_dir)
    keys = verifying_keys(getattr(args, "anchor_key", None), os.environ, state_dir) if args.verify else {}
    pg = PostgresEventStore.connect(ep.database_url)
    store: EventStore = pg
    report: dict[str, Any] = {"ok": True}
    started = time.perf_counter()
    try:
        head = await store.head()
        until = args.until or head[0]
        since = _since(args, head[0], until)
        report["decisions"] = {}
        producers = await store.producers()
        if (
            "binder.kube" in producers
        ):  # the binder ran in Kubernetes mode: its decisions were binding requests
            binder = configs.get("binder", FileConfig(config={}))
            configs["binder"] = FileConfig(config={"mode": "kubernetes", **binder.config}, path=binder.path)
        deciders = plan(
            [name for service, _ in PROCESSORS for name in instances(service, producers)],
            await recorded_configs(store),
            configs,
        )
        hosts = [
            (name, decider.first() if args.verify else decider.host(decider.timeline.applied_by(until)))
            for name, decider in deciders.items()
        ]
        # A service decides up to its checkpoint; what comes after it is lag (not yet decided), never a mismatch.
        checkpoints = await store.checkpoints()
        through = {name: checkpoints.get(name, 0) for name, _ in hosts}
        verified: dict[str, Verified] = {}
        if args.verify:
            chain, verified = await verify_all(
                ep.database_url,
                verify_chain(
                    store.iterate(until=head[0]),
                    head=head,
                    expected_head=args.expect_head,
                    anchor=await anchor_of(pg, keys),
                ),
                [Service(service, tuple(instances(service, producers))) for service, _ in PROCESSORS],
                files=configs,
                until=until,
                through=through,
                jobs=getattr(args, "jobs", None) or os.cpu_count() or 1,
                since=Since(since, head[1]) if since else None,
            )
            bound_unsealed(chain, getattr(args, "max_unanchored", None))
            report["chain"] = msgspec.to_builtins(chain)
            _say(args, chain_line(chain))
            _say(args, anchor_line(chain))
            report["refused_messages"] = await refused_counts(store, until=head[0])
            _say(args, refused_line(report["refused_messages"]))
            if since:
                report["since"] = {name: msgspec.to_builtins(verified[name].since) for name, _ in hosts}
                for name, _ in hosts:
                    _say(args, describe_start(name, verified[name].since))
            if enacted := await enactment_report(
                store,
                until=head[0],
                now=time.time_ns() // 1000,
                bound=int(getattr(args, "enactment_bound", DEFAULT_BOUND) * 1e6),
            ):
                _say(args, enacted[0])
                report["enactment"] = enacted[1]
            if not chain.ok:
                _say(args, f"MISMATCH: {chain.problem}")
                report["ok"] = False
                return _finish(args, report, 1)
            if failed := [
                verified[name].since for name, _ in hosts if since and verified[name].since.problem
            ]:
                _say(args, f"MISMATCH: {failed[0].problem}")
                report["ok"] = False
                report["snapshot_mismatch"] = {
                    "consumer": failed[0].snapshot[0],
                    "position": failed[0].snapshot[1],
                }
                return _finish(args, report, 1)
            if not await _snapshots(args, store, deciders, report):
                return _finish(args, report, 1)
        report["behind"] = {}
        for name, host in hosts:
            if args.verify:
                result = verified[name]
                mismatches = result.mismatches
                report["decisions"][name] = {
                    "triggers": result.checked,
                    "mismatches": len(mismatches),
                    "behind": result.behind,
                    "checkpoint": through[name],
                    "configs": deciders[name].report(result.governed),
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
                for entry in report["decisions"][name]["configs"]:
                    _say(args, describe(name, entry))
                if result.behind:
                    report["behind"][name] = result.behind
                if mismatches:
                    report["ok"] = False
                    report["first_mismatch"] = msgspec.to_builtins(mismatches[0])
                    _say(args, f"MISMATCH: {mismatches[0].describe()}")
                    return _finish(args, report, 1)
            else:
                await rebuild(host, store, until=until)
                report["decisions"][name] = {"digest": host.digest()}
                _say(args, f"projection   {name:<20} digest {host.digest()[:16]}…")
        if args.verify and not args.no_live:
            states = await live_states(ep, [name for name, _ in hosts])
            report["live"] = {}
            if not states:
                _say(args, "live         no running service answered; compared the log with itself only")
            for name, _ in hosts:
                state = states.get(name)
                if state is None:
                    continue
                if not state.get("consistent", True) or not state.get("ready", True):
                    _say(args, f"live         {name:<20} is rebuilding after a failure; not compared")
                    continue
                host = deciders[name].host(deciders[name].timeline.latest())  # the config it runs under now
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


async def _snapshots(
    args: argparse.Namespace, store: EventStore, deciders: dict[str, DeciderConfigs], report: dict[str, Any]
) -> bool:
    """``--check-snapshots N``: re-derive each decider's newest N snapshots and record the verdicts; then a
    ``snapshots`` line per decider with recorded verdicts. False when a snapshot checked now does not reproduce."""
    import msgspec

    from allot_cli.snapshot_checks import check_decider, describe, summarise

    count: int = getattr(args, "check_snapshots", 0) or 0
    fresh = [v for decider in deciders.values() for v in await check_decider(decider, store, count)]
    report["snapshots"] = {}
    for name in deciders:
        summary = await summarise(store, name)
        if summary.checked or count:
            report["snapshots"][name] = msgspec.to_builtins(summary)
            _say(args, describe(name, summary))
    if failed := [v for v in fresh if v.result != "ok"]:
        report["ok"] = False
        report["snapshot_mismatch"] = {"consumer": failed[0].consumer, "position": failed[0].position}
        _say(
            args,
            f"MISMATCH: snapshot of {failed[0].consumer} at position {failed[0].position} is not the fold of the "
            f"log from position {failed[0].start}: first difference at {failed[0].path} (recorded; not used on "
            "restart)",
        )
        return False
    return True


def chain_line(chain: ChainReport) -> str:
    """The first line of ``--verify``: ok, BROKEN (an event edited, inserted, reordered or deleted), or intact but
    with another head than ``--expect-head`` pinned (the log grew or is another one, or the hash was mistyped)."""
    summary = f"{chain.events} events, head {chain.head_hash[:16]}…"
    if chain.head_unexpected:
        return f"hash chain   intact: {summary}; but it is NOT the expected head (--expect-head)"
    return f"hash chain   {'ok' if chain.ok else 'BROKEN'}: {summary}"


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, flush=True)


def _finish(args: argparse.Namespace, report: dict[str, Any], code: int) -> int:
    if args.json:
        print(json.dumps(report, indent=2))
    elif code:
        print("replay verification FAILED", file=sys.stderr)
    return code


def _since(args: argparse.Namespace, head: int, until: int) -> int:
    """The ``--since`` position, checked against the log (0: not given); ``--check-snapshots`` needs ``--verify``."""
    from allot_intake.errors import UsageError

    if getattr(args, "check_snapshots", 0) and not args.verify:
        raise UsageError("--check-snapshots: only with --verify (it records what re-deriving found)")
    since: int = getattr(args, "since", None) or 0
    if not since:
        return 0
    if not args.verify:
        raise UsageError("--since: only with --verify (it says where the decision checks start)")
    if since > until:
        raise UsageError(
            f"--since: position {since} is after the last position verified ({until}: "
            + ("--until" if args.until else "the log's head")
            + ")"
        )
    return since


def _position(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a log position ≥ 1, not {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be a number of events ≥ 0, not {text!r}")
    return int(text)


def cmd_replay(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))


def register(subparsers: Any) -> None:
    from allot_cli.enactment_bound import DEFAULT_BOUND, bound_seconds

    p = subparsers.add_parser(
        "replay", help="rebuild projections from the log; --verify proves every decision"
    )
    p.add_argument(
        "--verify", action="store_true", help="check the hash chain, every decision and live projections"
    )
    p.add_argument("--expect-head", help="hash the log head must have (from an earlier audit)")
    p.add_argument(
        "--anchor-key",
        action="append",
        metavar="PATH",
        help="public key (PEM) that signs the log's checkpoints; repeat for rotated keys "
        "(default: ALLOT_ANCHOR_PUBLIC_KEYS, else <state dir>/anchor.pub)",
    )
    p.add_argument(
        "--max-unanchored",
        type=_count,
        metavar="EVENTS",
        help="fail when more than this many events follow the newest signed checkpoint",
    )
    p.add_argument("--until", type=int, help="stop at this log position")
    p.add_argument(
        "--since",
        type=_position,
        metavar="POSITION",
        help="with --verify: re-derive each service's decisions from its newest snapshot at or before POSITION "
        "(checked by re-deriving it); the hash chain and signed checkpoints are still checked in full",
    )
    p.add_argument(
        "--check-snapshots",
        type=_count,
        default=0,
        metavar="N",
        help="with --verify: re-derive each service's newest N snapshots from the log and record each verdict "
        "(snapshot.verified); a service never restarts from a snapshot that did not reproduce",
    )
    p.add_argument(
        "--enactment-bound",
        type=bound_seconds,
        default=DEFAULT_BOUND,
        metavar="SECONDS",
        help="Kubernetes mode: report decisions older than this with no recorded outcome in the cluster (default 300)",
    )
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
