"""What ``allot replay [--verify]`` runs: rebuild every projection from the log alone and prove each decision.

With ``--verify`` it checks, in order, and stops at the first failure with a non-zero exit:
1. the hash chain (no edited, inserted, reordered or deleted event; optionally against ``--expect-head``) and its
   anchor: every checkpoint the relay signed must carry a valid signature of a configured public key and match the
   chain at its position, so a rewrite with recomputed hashes is caught (keys: :mod:`allot_stack.anchoring`);
2. the snapshot checks recorded in the log (``snapshot.verified``): a snapshot whose latest verdict is a mismatch is
   a failure until it is resolved (:mod:`allot_audit.snapshot_checks`);
3. every service's decisions: each is re-derived from the log and compared with what was recorded (payload, stream,
   event id, cause and correlation), up to the service's checkpoint; events after it are lag (reported per service,
   not a failure); a decision the service recorded for no trigger of its own is a mismatch too;
4. the live projections: each running service reports its position and state digest (over NATS), and a projection
   rebuilt from the log up to that position must have the same digest.
Each decision is re-derived under the configuration its service recorded when it ran under it (``config.applied``),
and the report names it per service: its hash and the positions it governed. Only a log (or the start of one)
recorded before services recorded their configuration is re-derived with the files on disk, read like the services
read them: ``--config-dir`` (default ``<state dir>/config``) holding ``<service>.yaml``; the report says so.
The command line (its flags, printing the lines and the JSON report) is ``allot_cli.commands.replay``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec

from allot_audit.replay_configs import DeciderConfigs, FileConfig, describe, load_configs, plan
from allot_audit.snapshot_checks import check_decider, summarise
from allot_audit.snapshot_checks import describe as describe_snapshots
from allot_audit.verify_jobs import Service, Since, verify_all
from allot_audit.verify_since import describe as describe_start
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import EventStore
from allot_eventstore.verify import ChainCheck, ChainReport
from allot_intake.errors import UsageError
from allot_runtime.processor import Host
from allot_runtime.recorded_config import recorded_configs
from allot_runtime.replay import Verified, rebuild
from allot_stack.anchoring import anchor_line, anchor_of, bound_unsealed, verifying_keys
from allot_stack.connect import Endpoints, bounded_store, check_hint, endpoints, find_state_dir
from allot_stack.pipeline import PROCESSORS, instances

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

Say = Callable[[str], None]
Keys = Mapping[str, "Ed25519PublicKey"]  # the public keys signed checkpoints are checked with, by key id
Report = dict[str, Any]  # the JSON report of ``--json``, filled in the order of the lines
# A check of the log that another command owns, run by ``--verify`` on the log up to its head: the line it prints and
# what the JSON report holds (None: nothing to report).
Extra = Callable[[EventStore, int], Awaitable[tuple[str, Any] | None]]


@dataclass(frozen=True)
class Options:
    """What ``allot replay`` was asked (its flags)."""

    verify: bool = False
    until: int | None = None
    since: int = 0
    expect_head: str | None = None
    anchor_keys: list[str] | None = None
    max_unanchored: int | None = None
    check_snapshots: int = 0
    config_dir: str | None = None
    live: bool = True
    jobs: int = 1


@dataclass(frozen=True)
class Extras:
    """The checks ``--verify`` reports after the chain that other commands own: the messages refused on the bus
    (report key ``refused_messages``) and, in Kubernetes mode, the enactment of decisions (``enactment``)."""

    refused: Extra
    enacted: Extra


class LiveState(TypedDict, total=False):
    """A running service's answer to ``state`` (:class:`allot_runtime.service_http.ServiceState`), as read here."""

    position: int
    digest: str
    ready: bool
    consistent: bool


async def live_states(ep: Endpoints, names: list[str], timeout: float = 2.0) -> dict[str, LiveState]:
    """Each running service's position, state digest and readiness, asked over NATS (none when none answers). NATS
    is given ``timeout`` seconds to answer too: one that does not, or refuses the credentials, raises
    :class:`~allot_bus.adapters.natsauth.NatsUnavailable` or :class:`~allot_contracts.errors.InvalidInput`."""
    if not ep.nats_url:
        return {}
    from allot_bus.adapters.nats import connect

    nc = await connect(
        ep.nats_url,
        name="allot-replay",
        connect_timeout=timeout,
        give_up_after=timeout,
        url_from=ep.nats_from,
    )
    out: dict[str, LiveState] = {}
    try:
        for name in names:
            try:
                reply = await nc.request(ep.names.admin(name, "state"), b"", timeout=timeout)
                out[name] = msgspec.json.decode(reply.data, type=LiveState)
            except Exception:
                continue
    finally:
        await nc.close()
    return out


def chain_line(chain: ChainReport) -> str:
    """The first line of ``--verify``: ok, BROKEN (an event edited, inserted, reordered or deleted), or intact but
    with another head than ``--expect-head`` pinned (the log grew or is another one, or the hash was mistyped)."""
    summary = f"{chain.events} events, head {chain.head_hash[:16]}…"
    if chain.head_unexpected:
        return f"hash chain   intact: {summary}; but it is NOT the expected head (--expect-head)"
    return f"hash chain   {'ok' if chain.ok else 'BROKEN'}: {summary}"


def since_position(options: Options, head: int, until: int) -> int:
    """The ``--since`` position, checked against the log (0: not given); ``--check-snapshots`` needs ``--verify``."""
    if options.check_snapshots and not options.verify:
        raise UsageError("--check-snapshots: only with --verify (it records what re-deriving found)")
    since = options.since
    if not since:
        return 0
    if not options.verify:
        raise UsageError("--since: only with --verify (it says where the decision checks start)")
    if since > until:
        raise UsageError(
            f"--since: position {since} is after the last position verified ({until}: "
            + ("--until" if options.until else "the log's head")
            + ")"
        )
    return since


async def replay(options: Options, say: Say, extras: Extras) -> tuple[int, Report]:
    """Rebuild (or with ``verify``, verify) every projection, saying each line of the report; the exit code (0, or
    1 at the first failure) and the JSON report."""
    ep = endpoints()
    state_dir = find_state_dir()
    config_dir = (
        Path(options.config_dir) if options.config_dir else (state_dir / "config" if state_dir else None)
    )
    configs = load_configs(config_dir)
    keys = verifying_keys(options.anchor_keys, os.environ, state_dir) if options.verify else {}
    pg = bounded_store(ep.database_url)
    run = _Run(options, say, ep, pg)
    try:
        code = await run.run(configs, keys, extras)
        return code, run.report
    finally:
        await pg.close()


class _Run:
    """One ``allot replay``: the log, the deciders planned from it, and the report filled as the checks go."""

    def __init__(self, options: Options, say: Say, ep: Endpoints, pg: PostgresEventStore) -> None:
        self.options, self.say, self.ep, self.pg = options, say, ep, pg
        self.store: EventStore = pg
        self.report: Report = {"ok": True}
        self.started = time.perf_counter()
        self.deciders: dict[str, DeciderConfigs] = {}
        self.hosts: list[tuple[str, Host]] = []
        self.through: dict[str, int] = {}
        self.verified: dict[str, Verified] = {}
        self.producers: list[str] = []
        self.configs: dict[str, FileConfig] = {}

    def fail(self, line: str) -> int:
        self.report["ok"] = False
        self.say(f"MISMATCH: {line}")
        return 1

    async def run(self, configs: dict[str, FileConfig], keys: Keys, extras: Extras) -> int:
        head = await self.store.head()
        until = self.options.until or head[0]
        since = since_position(self.options, head[0], until)
        self.report["decisions"] = {}
        await self.plan(configs, until)
        if self.options.verify and (code := await self.verify(head, until, since, keys, extras)):
            return code
        self.report["behind"] = {}
        for name, host in self.hosts:
            if not self.options.verify:
                await rebuild(host, self.store, until=until)
                self.report["decisions"][name] = {"digest": host.digest()}
                self.say(f"projection   {name:<20} digest {host.digest()[:16]}…")
            elif code := self.decisions(name):
                return code
        if self.options.verify and self.options.live and (code := await self.live()):
            return code
        self.done()
        return 0

    async def plan(self, configs: dict[str, FileConfig], until: int) -> None:
        """Every decider of the log, the configurations it ran under, and the checkpoint it has decided up to."""
        producers = await self.store.producers()
        # the binder ran in Kubernetes mode: its decisions were binding requests
        if "binder.kube" in producers:
            binder = configs.get("binder", FileConfig(config={}))
            configs["binder"] = FileConfig(config={"mode": "kubernetes", **binder.config}, path=binder.path)
        self.producers, self.configs = producers, configs
        self.deciders = plan(
            [name for service, _ in PROCESSORS for name in instances(service, producers)],
            await recorded_configs(self.store),
            configs,
        )
        self.hosts = [
            (
                name,
                decider.first() if self.options.verify else decider.host(decider.timeline.applied_by(until)),
            )
            for name, decider in self.deciders.items()
        ]
        # A service decides up to its checkpoint; what comes after it is lag (not yet decided), never a mismatch.
        checkpoints = await self.store.checkpoints()
        self.through = {name: checkpoints.get(name, 0) for name, _ in self.hosts}

    async def verify(
        self, head: tuple[int, bytes], until: int, since: int, keys: Keys, extras: Extras
    ) -> int:
        """The chain and every decision (in parallel), then the lines about them; 1 at the first failure."""
        chain, self.verified = await verify_all(
            self.ep.database_url,
            ChainCheck(
                head=head, expected_head=self.options.expect_head, anchor=await anchor_of(self.pg, keys)
            ),
            [Service(service, tuple(instances(service, self.producers))) for service, _ in PROCESSORS],
            files=self.configs,
            until=until,
            through=self.through,
            jobs=self.options.jobs,
            since=Since(since, head[1]) if since else None,
        )
        bound_unsealed(chain, self.options.max_unanchored)
        await self.chain_lines(chain, head[0], since, extras)
        if not chain.ok:
            return self.fail(str(chain.problem))
        if failed := [
            self.verified[name].since for name, _ in self.hosts if since and self.verified[name].since.problem
        ]:
            self.report["snapshot_mismatch"] = {
                "consumer": failed[0].snapshot[0],
                "position": failed[0].snapshot[1],
            }
            return self.fail(failed[0].problem)
        return await self.snapshots()

    async def chain_lines(self, chain: ChainReport, head: int, since: int, extras: Extras) -> None:
        self.report["chain"] = msgspec.to_builtins(chain)
        self.say(chain_line(chain))
        self.say(anchor_line(chain))
        refused = await extras.refused(self.store, head)
        if refused is not None:
            self.say(refused[0])
            self.report["refused_messages"] = refused[1]
        if since:
            self.report["since"] = {
                name: msgspec.to_builtins(self.verified[name].since) for name, _ in self.hosts
            }
            for name, _ in self.hosts:
                self.say(describe_start(name, self.verified[name].since))
        if enacted := await extras.enacted(self.store, head):
            self.say(enacted[0])
            self.report["enactment"] = enacted[1]

    async def snapshots(self) -> int:
        """``--check-snapshots N``: re-derive each decider's newest N snapshots and record the verdicts; then a
        ``snapshots`` line per decider with recorded verdicts. 1 when a snapshot checked now does not reproduce, or
        one recorded earlier as a mismatch has not been resolved (:func:`allot_audit.snapshot_checks.summarise`)."""
        count = self.options.check_snapshots
        fresh = [
            v for decider in self.deciders.values() for v in await check_decider(decider, self.store, count)
        ]
        self.report["snapshots"] = {}
        unresolved = []
        for name in self.deciders:
            summary = await summarise(self.store, name)
            unresolved += summary.unresolved
            if summary.checked or count:
                self.report["snapshots"][name] = msgspec.to_builtins(summary)
                self.say(describe_snapshots(name, summary))
        if failed := [v for v in fresh if v.result != "ok"]:
            self.report["snapshot_mismatch"] = {
                "consumer": failed[0].consumer,
                "position": failed[0].position,
            }
            return self.fail(
                f"snapshot of {failed[0].consumer} at position {failed[0].position} is not the fold of the "
                f"log from position {failed[0].start}: first difference at {failed[0].path} (recorded; not used on "
                "restart)"
            )
        if unresolved:
            first = unresolved[0]
            self.report["snapshot_mismatch"] = {"consumer": first.consumer, "position": first.position}
            return self.fail(
                f"snapshot of {first.consumer} at position {first.position} was recorded as not the fold of the "
                f"log (snapshot.verified: first difference at {first.path}) and is not resolved: a later check of "
                "it that reproduces, or a newer snapshot checked ok once it is no longer stored, resolves it"
            )
        return 0

    def decisions(self, name: str) -> int:
        """The lines about one decider's re-derived decisions; 1 when one does not reproduce."""
        result = self.verified[name]
        mismatches = result.mismatches
        self.report["decisions"][name] = {
            "triggers": result.checked,
            "mismatches": len(mismatches),
            "behind": result.behind,
            "checkpoint": self.through[name],
            "configs": self.deciders[name].report(result.governed),
        }
        self.say(
            f"decisions    {name:<20} {result.checked:>7} triggers re-derived, "
            f"{'all reproduce' if not mismatches else f'{len(mismatches)} DO NOT reproduce'}"
            + (
                f"; {result.behind} not decided yet (checkpoint {self.through[name]})"
                if result.behind
                else ""
            ),
        )
        for entry in self.report["decisions"][name]["configs"]:
            self.say(describe(name, entry))
        if result.behind:
            self.report["behind"][name] = result.behind
        if mismatches:
            self.report["first_mismatch"] = msgspec.to_builtins(mismatches[0])
            return self.fail(mismatches[0].describe())
        return 0

    async def live(self) -> int:
        """Each running service's projection against the one rebuilt from the log up to its position."""
        from allot_bus.adapters.natsauth import NatsUnavailable
        from allot_contracts.errors import InvalidInput

        self.report["live"] = {}
        try:
            states = await live_states(self.ep, [name for name, _ in self.hosts])
        except (NatsUnavailable, InvalidInput) as exc:  # InvalidInput names the setting itself
            check = f" ({check_hint(self.ep.nats_from)})" if isinstance(exc, NatsUnavailable) else ""
            self.say(f"live         {exc}{check}; compared the log with itself only")
            return 0
        if not states:
            self.say("live         no running service answered; compared the log with itself only")
        for name, _ in self.hosts:
            state = states.get(name)
            if state is None:
                continue
            if not state.get("consistent", True) or not state.get("ready", True):
                self.say(f"live         {name:<20} is rebuilding after a failure; not compared")
                continue
            decider = self.deciders[name]
            host = decider.host(decider.timeline.latest())  # the config it runs under now
            await rebuild(host, self.store, until=int(state["position"]))
            same = host.digest() == state["digest"]
            self.report["live"][name] = {"position": state["position"], "match": same}
            self.say(
                f"live         {name:<20} at position {state['position']:>7}: "
                f"{'matches the log' if same else 'DIFFERS from the log'}",
            )
            if not same:
                return self.fail(
                    f"{name}'s live projection (digest {state['digest'][:16]}…) differs from the "
                    f"one rebuilt from the log up to {state['position']} ({host.digest()[:16]}…)",
                )
        return 0

    def done(self) -> None:
        self.report["seconds"] = round(time.perf_counter() - self.started, 3)
        if self.report["behind"]:
            lagging = ", ".join(
                f"{name} {count} event(s) behind" for name, count in self.report["behind"].items()
            )
            self.say(
                f"lag          {lagging}: every decision recorded so far reproduces; verify again once they "
                f"have caught up to cover the rest",
            )
        self.say(f"verified in {self.report['seconds']}s" if self.options.verify else "rebuilt")
