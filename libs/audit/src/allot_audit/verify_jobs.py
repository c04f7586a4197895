"""``allot replay --verify`` on several cores: the hash chain and each service's decisions, in parallel.

The work splits into ``jobs`` shares, each reading the log from PostgreSQL on its own, in position order, with
memory bounded by a page and the projections it holds:

- the chain (and its signed checkpoints), in the calling process: checked on the pages its own share of decisions
  reads (that pass then reads every event, not only those its services consume: the log is read once there), or
  in a pass of its own when that share has no decisions to check or stops before the head (``--until``);
- the decisions of every service (all its instances, each under the configurations it recorded), the services split
  into ``jobs`` shares of about equal cost (:func:`split`: the calling process's share is lighter by the chain's
  cost); each share is one pass over the log (``allot_runtime.replay.verify_many``: each event read and decoded
  once for all the share's instances), the calling process's beside the chain, each other share in a child process: on
  Linux a fork of the calling process taken before it starts its own pass (``allot_runtime.forked``: it begins at once
  with everything imported and opens its own connections, touching none of the parent's), elsewhere or when the system
  will not fork, a ``spawn`` interpreter. The calling process working too saves one process's memory.

Every result depends only on the log and the configs, never on which process ran it or when, and results are
reported in a fixed order: the report is the same for any ``jobs``. With ``jobs=1`` everything runs in the calling
process: the chain, then every service's decisions in one pass.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import multiprocessing
import pickle
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import msgspec

from allot_audit.replay_configs import FileConfig, plan
from allot_audit.verify_since import Start, start_from
from allot_eventstore.verify import ChainCheck, ChainReport
from allot_runtime import forked
from allot_runtime.recorded_config import recorded_configs
from allot_runtime.replay import VERIFY_PAGE, Verified, verify_many
from allot_stack.connect import bounded_store

# What checking the chain and re-deriving each service's decisions cost, relatively (CPU seconds on the 317k-event log
# of ``allot bench replay``, 2026-11-29): how the services are split over the processes. A service's figure is what it
# adds to a pass that reads the log anyway (the chain's pass reads every event), and a share after the first also
# starts a process of its own (``WORKER_COST``: a fork's pages copied as it writes them). A service not listed costs
# ``OTHER``.
CHAIN_COST = 1.3
WORKER_COST = 0.3
COST = {
    "device-allocator": 12.0,
    "quota-manager": 5.6,
    "qos-enforcer": 3.1,
    "reservation-manager": 2.3,
    "binder": 1.6,
    "gang-coordinator": 1.0,
    "node-reporter": 0.3,
}
OTHER = 1.0


# Verifying allocates many short-lived objects (a decoded event, its recomputed decisions) beside projections that live
# for the whole run: with the default thresholds the collector walks those projections again and again. It runs
# about 300 times less often here (still every 200,000 net allocations for the young objects: more than a page of
# events and what deciding on them holds at once, so a pass does not scan each page's objects just before they are
# freed; at 50,000 that was 18 collections, 0.4 CPU-s, on the 317k-event log, finding 8 objects of garbage); memory
# stays bounded by the projections and a page of each stream (docs/benchmarks/replay.md).
COLLECT_EVERY = (200_000, 20, 100)


@contextmanager
def seldom_collected() -> Iterator[None]:
    """Run the block with the cyclic garbage collector at ``COLLECT_EVERY``, what was imported before it frozen out of
    its walks (:func:`gc.freeze`); both are restored after."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*COLLECT_EVERY)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@dataclass(frozen=True)
class Service:
    """One service's instances to verify (or a share's of several services, :func:`split`)."""

    service: str
    instances: tuple[str, ...]


@dataclass(frozen=True)
class Since:
    """``verify --since``: start each service's decision checks at its newest snapshot at or before ``position``;
    ``head_hash`` chooses the sampled interval."""

    position: int
    head_hash: bytes


@dataclass(frozen=True)
class Job:
    """What every service's task shares: the log, the files on disk, how far and from where to verify."""

    url: str
    files: dict[str, FileConfig]
    until: int | None
    through: dict[str, int]
    since: Since | None = None


async def _decisions(job: Job, group: Service, chain: ChainCheck | None = None) -> dict[str, Verified]:
    """The decisions of ``group``'s instances; with ``chain``, the pass feeds it every page of the log as well."""
    store = bounded_store(job.url, pool_size=2)
    try:
        deciders = plan(group.instances, await recorded_configs(store), job.files)
        hosts = {name: decider.first() for name, decider in deciders.items()}
        starts: dict[str, Start] = {}
        if job.since is not None:
            for name, decider in deciders.items():
                hosts[name], starts[name] = await start_from(
                    decider, store, since=job.since.position, head_hash=job.since.head_hash
                )
        failed = {name: Verified(since=start) for name, start in starts.items() if start.problem}
        kept = [host for name, host in hosts.items() if name not in failed]
        verified = (
            await verify_many(
                kept,
                store,
                until=job.until,
                through=job.through,
                switches={name: decider.switches() for name, decider in deciders.items()},
                starts={name: start.position for name, start in starts.items()},
                tap=chain.feed if chain is not None else None,
            )
            if kept or chain is not None
            else {}
        )
        return failed | {
            name: msgspec.structs.replace(result, since=starts.get(name)) for name, result in verified.items()
        }
    finally:
        await store.close()


def decisions_task(job: Job, group: Service) -> dict[str, Verified]:
    with seldom_collected():
        return asyncio.run(_decisions(job, group))


def _share_in_child(job: Job, share: Service) -> tuple[str | None, list[bytes]]:
    """``decisions_task`` in a forked child (:func:`allot_runtime.forked.start`): ``(None, [its result pickled])``,
    or what it raised: ``(its traceback, [the exception pickled])``, the payload empty when the exception does not
    come back from pickle as itself (the parent then raises :class:`~allot_runtime.forked.ChildFailed` with the
    traceback). A fork starts with the collector off (its pages stay shared until written); a whole pass needs it on."""
    gc.enable()
    try:
        return None, [pickle.dumps(decisions_task(job, share), protocol=pickle.HIGHEST_PROTOCOL)]
    except Exception as exc:  # noqa: BLE001 - raised again in the parent
        said = "".join(traceback.format_exception(exc))
        try:
            raised = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(raised)  # noqa: S301 - our own bytes, read back to see that they come back
        except Exception:  # noqa: BLE001 - an exception that does not survive pickle: its text goes instead
            raised = b""
        return said, [raised]


def _fork_shares(job: Job, shares: list[Service]) -> list[forked.Child] | None:
    """A forked child per share, or None when the system would not fork them all (the ones made are ended)."""
    children: list[forked.Child] = []
    try:
        for share in shares:
            children.append(forked.start(functools.partial(_share_in_child, job, share)))
    except OSError:  # no more processes or memory for them: the caller starts interpreters instead
        for child in children:
            child.kill()
        return None
    return children


async def _answer_of(child: forked.Child) -> dict[str, Verified]:
    """What a child sent: its share's results, or what it raised, raised again here with its traceback as a note."""
    answer = await child.answer()
    if answer.meta is None:
        verified: dict[str, Verified] = pickle.loads(answer.payload)  # noqa: S301 - our own child's bytes
        return verified
    if not answer.payload:
        raise forked.ChildFailed(f"verifying a share failed in its process:\n{answer.meta}")
    raised: Exception = pickle.loads(answer.payload)  # noqa: S301 - our own child's bytes
    raised.add_note(f"raised in the process verifying a share:\n{answer.meta}")
    raise raised


async def verify_all(
    url: str,
    chain: ChainCheck,
    groups: list[Service],
    *,
    files: dict[str, FileConfig],
    until: int | None,
    through: dict[str, int],
    jobs: int,
    since: Since | None = None,
) -> tuple[ChainReport, dict[str, Verified]]:
    """The chain report (``chain``, fed here) and every instance's decisions, in ``jobs`` processes (with
    ``since``: each from its newest checked snapshot at or before that position, ``allot_audit.verify_since``)."""
    job = Job(url, files, until, through, since)
    with seldom_collected():
        return await _verify_all(chain, split([g for g in groups if g.instances], jobs), job)


def split(groups: list[Service], jobs: int) -> list[Service]:
    """The instances of ``groups`` in ``max(jobs, 1)`` shares of about equal cost (:data:`COST`), the calling
    process's first: it also checks the chain, so it starts with :data:`CHAIN_COST`, and every other one with
    :data:`WORKER_COST`, its process's start. Each service in turn, the most
    expensive first, goes to the share that costs least so far (the first of equal ones). A share is one
    :class:`Service` (its ``service``: the names of its services joined by ``+``); an empty one has no instances."""
    loads = [CHAIN_COST] + [WORKER_COST] * (max(jobs, 1) - 1)
    shares: list[list[Service]] = [[] for _ in loads]
    for group in sorted(groups, key=lambda g: -COST.get(g.service, OTHER)):
        least = loads.index(min(loads))
        shares[least].append(group)
        loads[least] += COST.get(group.service, OTHER)
    return [
        Service("+".join(g.service for g in share), tuple(name for g in share for name in g.instances))
        for share in shares
    ]


async def _chain_alone(job: Job, chain: ChainCheck) -> ChainReport:
    """The chain checked in a read of its own (up to the head it was given), to the first problem."""
    store = bounded_store(job.url, pool_size=2)
    try:
        pages = store.pages(until=chain.head[0], page=VERIFY_PAGE)
        try:
            async for page in pages:
                if not await chain.feed(page):
                    break  # the rest is not read (nor the page read ahead)
        finally:
            await pages.aclose()  # type: ignore[attr-defined]
        return await chain.report()
    finally:
        await store.close()


async def _verify_all(
    chain: ChainCheck, shares: list[Service], job: Job
) -> tuple[ChainReport, dict[str, Verified]]:
    mine, theirs = shares[0], [share for share in shares[1:] if share.instances]
    verified: dict[str, Verified] = {}
    # this process's share reads the log up to ``until``: when that is the chain's head, the chain is checked on the
    # pages it reads
    shared = bool(mine.instances) and job.until == chain.head[0]

    async def alone() -> ChainReport | None:
        return None if shared else await _chain_alone(job, chain)

    async def here() -> ChainReport | None:
        if mine.instances:
            verified.update(await _decisions(job, mine, chain if shared else None))
        return await chain.report() if shared else None

    children = _fork_shares(job, theirs) if theirs and forked.AVAILABLE else None
    if not theirs:
        reports = [await alone(), await here()]
    elif children is not None:
        # every child was forked before this process starts its own pass: each is a copy of it as it was then. A
        # failure anywhere cancels the rest (a cancelled wait for a child kills it) and is raised as itself.
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(alone()), group.create_task(here())]
                answers = [group.create_task(_answer_of(child)) for child in children]
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        reports = [task.result() for task in tasks]
        for answer in answers:
            verified.update(answer.result())
    else:
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(
            max_workers=len(theirs), mp_context=multiprocessing.get_context("spawn")
        ) as pool:

            async def spawned(share: Service) -> None:
                verified.update(await loop.run_in_executor(pool, decisions_task, job, share))

            # the workers take their shares; this process checks the chain beside its own
            reports = list(await asyncio.gather(alone(), here(), *(spawned(share) for share in theirs)))[:2]
    report = reports[0] or reports[1]
    assert report is not None  # one of them checked the chain
    return report, verified
