"""A running service's snapshot is encoded by a forked child from its copy-on-write memory (Linux): the service only
pauses for the fork, goes on changing its projection meanwhile, and the snapshot is the projection at the fork. A child
that fails or dies is logged and the snapshot retried an interval later; a stop that cannot wait kills it; without fork
the export runs in process."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import msgspec
import pytest

from allot_eventstore.memory import InMemoryEventStore
from allot_runtime import forked
from allot_runtime.processor import Host
from allot_runtime.snapshots import BACKGROUND_NICE, Snapshots, restore
from allot_testing.processors import EchoProcessor

pytestmark = pytest.mark.skipif(
    not forked.AVAILABLE, reason="a forked snapshot child needs os.fork, which this platform lacks"
)


def a_host(position: int) -> Host:
    host = Host(EchoProcessor(), name="echo")
    host.processor.seen.append(f"pod-{position}")
    host.position = position
    return host


def reaped(pid: int) -> bool:
    """The child ``pid`` is gone and reaped (other children of the test process, such as servers, do not count)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def recording_children(monkeypatch: pytest.MonkeyPatch, nices: list[int] | None = None) -> list[forked.Child]:
    """Every child :func:`forked.start` forks from now on (and, in ``nices``, the niceness each was asked for)."""
    started: list[forked.Child] = []
    start = forked.start

    def recorded(work, *, nice=0):  # type: ignore[no-untyped-def]
        child = start(work, nice=nice)
        started.append(child)
        if nices is not None:
            nices.append(nice)
        return child

    monkeypatch.setattr(forked, "start", recorded)
    return started


def fresh() -> Host:
    return Host(EchoProcessor(), name="echo")


async def test_the_snapshot_is_the_projection_at_the_fork_while_the_service_goes_on() -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=10, keep=2, config_hash="h")
    assert snapshots.fork
    host = a_host(10)
    at_fork = host.digest()
    snapshots.start(host)
    host.processor.seen.append("pod-11")  # the parent decides on while the child encodes
    host.position = 11
    assert snapshots.writing is not None
    assert await snapshots.writing
    restored, position, digest = await restore(fresh, store, config_hash="h", until=100)
    assert position == 10 and restored.processor.seen == ["pod-10"]
    assert digest == at_fork == restored.digest() != host.digest()
    assert snapshots.since == 10 and not snapshots.due(19)


async def test_a_state_larger_than_the_pipe_comes_back_whole() -> None:
    parts = [os.urandom(3 << 20), b"", msgspec.Raw(os.urandom(100_000))]
    answer = await forked.start(lambda: ({"n": 1}, parts)).answer()
    assert answer.meta == {"n": 1} and answer.payload == b"".join(parts) and answer.peak_rss > 0


async def test_the_child_runs_at_the_niceness_asked_for() -> None:
    answer = await forked.start(lambda: (os.nice(0), []), nice=3).answer()
    assert answer.meta == os.nice(0) + 3


async def test_a_running_service_snapshots_in_the_background_and_a_stop_at_full_priority(monkeypatch) -> None:
    nices: list[int] = []
    recording_children(monkeypatch, nices)
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=10, keep=5, config_hash="h")
    snapshots.start(a_host(10))
    assert snapshots.writing is not None and await snapshots.writing
    assert await snapshots.on_stop(a_host(15), consistent=True, timeout=10) is not None
    assert nices == [BACKGROUND_NICE, 0] and BACKGROUND_NICE > 0
    assert await store.snapshot_positions("echo") == [10, 15]


@pytest.mark.parametrize(
    ("export", "reason"),
    [
        (lambda self: (_ for _ in ()).throw(ValueError("no encoding")), "ValueError: no encoding"),
        (lambda self: os._exit(3), "the child ended before sending its answer (exit code 3)"),
    ],
)
async def test_a_child_that_fails_or_dies_is_logged_and_retried_an_interval_later(
    monkeypatch, caplog, export, reason
) -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=10, keep=2, config_hash="h")
    monkeypatch.setattr(Host, "export_state_parts", export)
    caplog.set_level(logging.WARNING, logger="allot.snapshots")
    snapshots.start(a_host(10))
    assert snapshots.writing is not None
    assert not await snapshots.writing
    assert f"echo: its projection cannot be snapshot at position 10: {reason}" in caplog.text
    assert await store.snapshot_positions("echo") == []
    assert not snapshots.due(19) and snapshots.due(20)


async def test_at_most_one_snapshot_is_in_flight(monkeypatch) -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=10, keep=10, config_hash="h")
    snapshots.start(a_host(10))
    first = snapshots.writing
    snapshots.start(a_host(30))  # the first one is still being encoded: nothing started
    assert snapshots.writing is first and first is not None
    await first
    assert await store.snapshot_positions("echo") == [10]
    assert snapshots.overdue(30)


async def test_a_stop_that_cannot_wait_for_the_child_kills_it(monkeypatch, caplog) -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=1000, keep=2, config_hash="h")
    monkeypatch.setattr(Host, "export_state_parts", lambda self: time.sleep(30) or [])
    children = recording_children(monkeypatch)
    caplog.set_level(logging.WARNING, logger="allot.snapshots")
    started = time.monotonic()
    assert await snapshots.on_stop(a_host(45), consistent=True, timeout=0.3) is None
    assert time.monotonic() - started < 3
    assert "was not encoded within the shutdown timeout" in caplog.text
    assert [child.pid for child in children if not reaped(child.pid)] == [], "the child was killed and reaped"
    assert len(children) == 1


async def test_without_fork_or_when_it_fails_the_export_runs_in_process(monkeypatch, caplog) -> None:
    store = InMemoryEventStore()
    in_process = Snapshots(store, every=10, keep=10, config_hash="h", fork=False)
    in_process.start(a_host(10))
    assert in_process.writing is not None
    assert await in_process.writing

    def no_fork() -> int:
        raise OSError("out of memory")

    monkeypatch.setattr(forked.os, "fork", no_fork)
    caplog.set_level(logging.WARNING, logger="allot.snapshots")
    snapshots = Snapshots(store, every=10, keep=10, config_hash="h")
    snapshots.start(a_host(20))
    assert snapshots.writing is not None
    assert await snapshots.writing
    assert "cannot fork to snapshot its projection (out of memory); exporting in process" in caplog.text
    assert await store.snapshot_positions("echo") == [10, 20]
    host, position, _ = await restore(fresh, store, config_hash="h", until=100)
    assert position == 20 and host.processor.seen == ["pod-20"]


def test_a_child_dies_with_its_parent(tmp_path) -> None:
    """A service killed while its child encodes leaves no orphan behind (``PR_SET_PDEATHSIG``)."""
    pids = tmp_path / "pid"
    middle = os.fork()
    if middle == 0:  # the "service": starts a child that would run a minute, then dies at once
        try:
            child = forked.start(lambda: (time.sleep(60), [b""]))
            pids.write_text(str(child.pid))
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
