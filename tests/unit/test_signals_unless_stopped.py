"""``unless_stopped``: a wait a stop request ends (the work is cancelled), or the work's result when it comes first."""

from __future__ import annotations

import asyncio

from allot_runtime.signals import unless_stopped


def test_the_work_comes_first() -> None:
    async def run() -> int | None:
        stop = asyncio.Event()
        return await unless_stopped(asyncio.sleep(0, result=7), stop)

    assert asyncio.run(run()) == 7


def test_a_stop_ends_the_wait_and_cancels_the_work() -> None:
    cancelled = []

    async def forever() -> int:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 1

    async def run() -> int | None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return await asyncio.wait_for(unless_stopped(forever(), stop), timeout=5)

    assert asyncio.run(run()) is None
    assert cancelled == [True]


def test_an_error_of_the_work_is_raised() -> None:
    async def failing() -> int:
        raise ValueError("no")

    async def run() -> int | None:
        return await unless_stopped(failing(), asyncio.Event())

    try:
        asyncio.run(run())
    except ValueError as exc:
        assert str(exc) == "no"
    else:
        raise AssertionError("the work's error was swallowed")
