"""One consumer name, one deciding process: the second instance stands by until the first is gone."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import asyncpg
import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.ownership import Ownership
from allot_eventstore.urls import plain_url
from allot_testing.tcp_proxy import tcp_proxy, through

pytestmark = pytest.mark.integration


async def test_a_second_instance_stands_by_until_the_first_releases(database_url, bus_names):
    name = f"quota-manager-{bus_names['prefix']}"
    first, second = Ownership(database_url, name, retry_s=0.1), Ownership(database_url, name, retry_s=0.1)
    stop = asyncio.Event()
    assert await first.acquire(stop)
    waiting = asyncio.create_task(second.acquire(stop))
    await asyncio.sleep(0.5)
    assert not waiting.done(), "the second instance must not own the name while the first holds it"
    await first.release()
    assert await asyncio.wait_for(waiting, timeout=5)
    await second.release()


async def test_standing_by_ends_when_the_service_is_asked_to_stop(database_url, bus_names):
    name = f"binder-{bus_names['prefix']}"
    owner, standby = Ownership(database_url, name), Ownership(database_url, name, retry_s=0.1)
    stop = asyncio.Event()
    assert await owner.acquire(asyncio.Event())
    task = asyncio.create_task(standby.acquire(stop))
    await asyncio.sleep(0.3)
    stop.set()
    assert await asyncio.wait_for(task, timeout=5) is False
    await owner.release()
    await standby.release()


async def test_losing_the_lock_connection_stops_the_owner(database_url, bus_names):
    name = f"device-allocator-{bus_names['prefix']}"
    owner = Ownership(database_url, name, check_s=0.2)
    assert await owner.acquire(asyncio.Event())
    pid = owner._conn.get_server_pid()
    conn = await asyncpg.connect(plain_url(database_url))
    try:
        await conn.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()
    with pytest.raises(Unavailable, match="lost the connection that holds ownership"):
        await asyncio.wait_for(owner.hold(asyncio.Event()), timeout=5)
    successor = Ownership(database_url, name)
    assert await asyncio.wait_for(successor.acquire(asyncio.Event()), timeout=5)
    await successor.release()


async def test_a_check_without_an_answer_is_waited_for_not_taken_for_a_lost_lock(database_url, bus_names):
    """A database that stops answering (connections left open) holds the session and its lock: the owner waits for
    the answer and goes on holding once it comes (was: stopped after the check's timeout, then restarted)."""
    name = f"binder-{bus_names['prefix']}"
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        owner = Ownership(through(database_url, proxy), name, check_s=0.2)
        assert await owner.acquire(asyncio.Event())
        stop = asyncio.Event()
        holding = asyncio.create_task(owner.hold(stop))
        proxy.freeze()
        await asyncio.sleep(1.5)  # several checks' time without an answer
        assert not holding.done()
        proxy.thaw()
        await asyncio.sleep(0.5)  # answered: checks go on
        assert not holding.done()
        standby, given_up = Ownership(database_url, name, retry_s=0.1), asyncio.Event()
        asyncio.get_running_loop().call_later(0.5, given_up.set)
        assert not await standby.acquire(given_up)  # the lock was held throughout
        await standby.release()
        stop.set()
        await asyncio.wait_for(holding, timeout=5)
        await owner.release()


async def test_a_check_unanswered_past_its_bound_counts_as_a_lost_lock(database_url, bus_names):
    """The wait for an answer has a bound: past it the owner stops, as the server may have dropped the session and
    freed the lock for a standby while this side's half-open socket still waits."""
    name = f"binder-{bus_names['prefix']}"
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        owner = Ownership(through(database_url, proxy), name, check_s=0.2, unanswered_s=1.0)
        assert await owner.acquire(asyncio.Event())
        holding = asyncio.create_task(owner.hold(asyncio.Event()))
        proxy.freeze()
        with pytest.raises(Unavailable, match="no answer to the ownership check within 1 s"):
            await asyncio.wait_for(holding, timeout=10)
        proxy.thaw()
        await owner.release()


async def test_an_attempt_to_take_ownership_left_unanswered_is_given_up_and_made_again(
    database_url, bus_names, caplog
):
    """A standby whose attempt to take the lock gets no answer (the connection went silent) gives it up within
    ``check_s`` and tries again over a new connection: it takes over once the server answers (was: waited for ever
    on the silent connection, deaf to its stop too)."""
    name = f"binder-{bus_names['prefix']}"
    parts = urlsplit(database_url)
    owner = Ownership(database_url, name)
    assert await owner.acquire(asyncio.Event())
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        standby = Ownership(through(database_url, proxy), name, retry_s=0.1, check_s=0.5)
        taking = asyncio.create_task(standby.acquire(asyncio.Event()))
        try:
            await asyncio.sleep(0.5)  # standing by: its attempts are answered (the owner holds the lock)
            proxy.freeze()
            await asyncio.sleep(0.3)  # an attempt is on its way
            caplog.clear()
            deadline = asyncio.get_running_loop().time() + 3
            while "cannot take ownership yet (no answer within 0.5 s)" not in caplog.text:
                assert asyncio.get_running_loop().time() < deadline, caplog.text
                await asyncio.sleep(0.05)
            await owner.release()
            proxy.thaw()
            assert await asyncio.wait_for(taking, timeout=15)
        finally:
            proxy.thaw()
            taking.cancel()
            await standby.release()


def _left_pending(before: set[asyncio.Task[object]]) -> list[asyncio.Task[object]]:
    """Tasks started since ``before`` that have not ended, but the proxy's own (one per connection it carries)."""
    return [
        task
        for task in asyncio.all_tasks() - before
        if not task.done() and not getattr(task.get_coro(), "__qualname__", "").startswith("TcpProxy.")
    ]


async def test_a_check_given_up_past_its_bound_leaves_no_task_behind(database_url, bus_names):
    """Past the bound the check ends its unanswered query by closing the connection under it: nothing it started is
    left waiting (was: the query was cancelled, and asyncpg's CancelRequest, sent from a task of its own over the same
    silent network, waited for ever, with nothing left to close the connection that would have ended it)."""
    name = f"binder-{bus_names['prefix']}"
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        owner = Ownership(through(database_url, proxy), name, check_s=0.2, unanswered_s=0.6)
        assert await owner.acquire(asyncio.Event())
        before = asyncio.all_tasks()
        holding = asyncio.create_task(owner.hold(asyncio.Event()))
        proxy.freeze()
        with pytest.raises(Unavailable, match="no answer to the ownership check within 0.6 s"):
            await asyncio.wait_for(holding, timeout=10)
        assert _left_pending(before) == []
        assert owner._conn.is_closed()
        proxy.thaw()
        await owner.release()


async def test_a_stop_while_a_check_waits_for_its_answer_holds_the_lock_until_released(
    database_url, bus_names
):
    """Stopped while the check waits for an answer: the session, and so the lock, stays until the owner releases it
    after its last writes (was: its connection was closed at the stop, and a server that was only slow freed the lock
    for a standby at once); the release ends the unanswered query with its connection, and nothing the check started
    is left waiting."""
    name = f"binder-{bus_names['prefix']}"
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        owner = Ownership(through(database_url, proxy), name, check_s=0.2)
        assert await owner.acquire(asyncio.Event())
        before, stop = asyncio.all_tasks(), asyncio.Event()
        holding = asyncio.create_task(owner.hold(stop))
        proxy.freeze()
        await asyncio.sleep(0.6)  # a check is waiting for its answer
        assert not holding.done()
        stop.set()
        await asyncio.wait_for(holding, timeout=10)
        assert not owner._conn.is_closed()  # the session holding the lock is left to the release
        standby, given_up = Ownership(database_url, name, retry_s=0.1), asyncio.Event()
        asyncio.get_running_loop().call_later(0.5, given_up.set)
        assert not await standby.acquire(given_up)
        await standby.release()
        await asyncio.wait_for(owner.release(), timeout=10)
        assert _left_pending(before) == []
        proxy.thaw()


async def test_the_lock_outlives_the_stop_until_the_owner_releases_it(database_url, bus_names):
    """A stopping service finishes its batch and records its checkpoint after ``stop``: released at the stop itself,
    the lock let a standby take over while the old owner still appended. ``hold`` returns at ``stop`` holding it."""
    name = f"gang-coordinator-{bus_names['prefix']}"
    owner, standby = Ownership(database_url, name, check_s=0.1), Ownership(database_url, name, retry_s=0.1)
    stop = asyncio.Event()
    assert await owner.acquire(asyncio.Event())
    holding = asyncio.create_task(owner.hold(stop))
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(holding, timeout=5)
    waiting = asyncio.create_task(standby.acquire(asyncio.Event()))
    await asyncio.sleep(0.5)
    assert not waiting.done(), "the standby took over before the stopping owner released the lock"
    await owner.release()
    assert await asyncio.wait_for(waiting, timeout=5)
    await standby.release()
