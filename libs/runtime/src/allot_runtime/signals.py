"""Stopping a process cleanly: SIGTERM (Kubernetes, the dev stack's supervisor) or SIGINT (Ctrl-C) sets one event."""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals() -> asyncio.Event:
    """An event set when the process receives SIGTERM or SIGINT; call it in the running event loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
