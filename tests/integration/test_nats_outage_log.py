"""A NATS outage in a process's log: a warning when it begins (what broke the connection, and that it is retried,
quietly), the driver's retries (every 0.5 s, for as long as NATS is away) at debug level, and one line when the
connection is back, as the event log's outages are said (``allot_bus.outage``). Real NATS behind a proxy that refuses
connections, then lets them through again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from allot_bus.adapters.nats import connect
from allot_testing.tcp_proxy import tcp_proxy

pytestmark = pytest.mark.integration


async def _until(condition: Callable[[], bool], seconds: float = 10) -> bool:
    for _ in range(int(seconds * 10)):
        if condition():
            return True
        await asyncio.sleep(0.1)
    return condition()


def _lines(caplog: pytest.LogCaptureFixture, text: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level and text in r.getMessage()]


# the NATS driver leaves the socket of each refused attempt to the collector (closed there, with a ResourceWarning)
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("give_up_after", [None, 5.0], ids=["waits", "gives-up-at-the-start"])
async def test_an_outage_is_a_warning_then_one_line_when_nats_is_back(
    nats_server_url: str, caplog: pytest.LogCaptureFixture, give_up_after: float | None
) -> None:
    """A command that gives up on a first connection that does not come (``give_up_after``) logs a later outage as
    a service does."""
    caplog.set_level(logging.DEBUG, logger="allot.bus")
    parts = urlsplit(nats_server_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 4222) as proxy:
        credentials = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        nc = await connect(
            parts._replace(netloc=f"{credentials}127.0.0.1:{proxy.port}").geturl(),
            name="test-outage",
            give_up_after=give_up_after,
        )
        try:
            proxy.refuse()
            assert await _until(lambda: proxy.refused >= 3)  # the driver tries again and again
            begun = _lines(caplog, "nats connection problem", logging.WARNING)
            assert len(begun) <= 2  # what broke the connection, and that it is retrying
            assert any("NATS at" in line and "quietly until it works" in line for line in begun)
            assert await _until(lambda: proxy.refused >= 8)
            assert _lines(caplog, "nats connection problem", logging.WARNING) == begun  # no line per retry
            assert len(_lines(caplog, "nats connection problem again", logging.DEBUG)) >= 6
            assert not _lines(caplog, "working again", logging.INFO)

            proxy.thaw()
            assert await _until(lambda: nc.is_connected)
            # the reconnected callback runs as its own task, after the client counts as connected
            assert await _until(lambda: bool(_lines(caplog, "working again", logging.INFO)))
            (back,) = _lines(caplog, "working again", logging.INFO)
            assert f"127.0.0.1:{proxy.port}" in back and "failed attempt(s)" in back
            assert _lines(caplog, "nats connection problem", logging.WARNING) == begun
        finally:
            await nc.close()
