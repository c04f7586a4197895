"""Listing pods and nodes (:mod:`allot_stack.listing`) imports no scheduling engine, even when it runs."""

from __future__ import annotations

import subprocess
import sys


def test_listing_pods_runs_without_a_scheduling_engine() -> None:
    code = (
        "import asyncio, sys\n"
        "from allot_eventstore.memory import InMemoryEventStore\n"
        "from allot_stack.listing import loader\n"
        "from allot_views.kinds import kind_named\n"
        "asyncio.run(loader(kind_named('pods'))(InMemoryEventStore(), 0))\n"
        "asyncio.run(loader(kind_named('nodes'))(InMemoryEventStore(), 0))\n"
        "print(' '.join(m for m in sys.modules if m.startswith('allot_')))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert "allot_stack.listing" in loaded
    assert not {"allot_placement", "allot_quota", "allot_gang", "allot_reservation"} & loaded
