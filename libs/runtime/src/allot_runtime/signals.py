"""Stopping a process cleanly: SIGTERM (Kubernetes, the dev stack's supervisor) or SIGINT (Ctrl-C) sets one event."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def stop_on_signals() -> asyncio.Event:
    """An event set when the process receives SIGTERM or SIGINT; call it in the running event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``work``'s result, or None when ``stop`` is set first (``work`` is then cancelled): a wait that SIGTERM must
    be able to end, such as connecting to a server that is not up yet (NATS is waited for, never given up on)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return None if task.cancelled() else task.result()
