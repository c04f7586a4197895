"""One outage, logged as two lines: its first failure (a warning) and its end; the failures in between at debug level,
so that a database away for an hour is not a warning per retry (the consumer's and the relay's retry loops)."""

from __future__ import annotations

import logging
import time

__all__ = ["Outage"]


class Outage:
    """The outage ``name`` (a consumer, the relay) is in, if any: :meth:`failed` at each failed attempt, :meth:`over`
    at the first success after them."""

    def __init__(self, name: str, log: logging.Logger) -> None:
        self.name = name
        self.log = log
        self.since: float | None = None  # time.monotonic() of the first failure
        self.failures = 0

    def failed(self, what: str, exc: BaseException, *, retry_in: float | None = None) -> None:
        self.failures += 1
        then = f"; retrying in {retry_in:.1f}s" if retry_in is not None else "; retrying"
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning(
                "%s: %s (%s: %s)%s, quietly until it works", self.name, what, type(exc).__name__, exc, then
            )
        else:
            self.log.debug("%s: %s again (%s: %s)%s", self.name, what, type(exc).__name__, exc, then)

    def over(self) -> None:
        if self.since is not None:
            self.log.info(
                "%s: working again after %.1fs and %d failed attempt(s)",
                self.name,
                time.monotonic() - self.since,
                self.failures,
            )
            self.since, self.failures = None, 0
