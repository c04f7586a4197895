"""The client: connections to the log (PostgreSQL) and the bus (NATS), and subscriptions over them.

Settings are those of the services (``ALLOT_DATABASE_URL``, ``ALLOT_NATS_URL``, ``ALLOT_NATS_PREFIX``,
``ALLOT_NATS_STREAM``, ``ALLOT_DB_READ_TIMEOUT``); NATS is optional: without it a subscription follows the log by
polling PostgreSQL. Each read of the log waits ``read_timeout`` seconds at most (30, as a service's), so a database
that stops answering ends a subscription with :class:`~allot_contracts.errors.Unavailable` instead of a wait without
end.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

from nats.aio.client import Client

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_client.filters import Filter
from allot_client.subscription import Subscription
from allot_eventstore.bounds import DB_READ_TIMEOUT_S, DB_READ_TIMEOUT_VARIABLE, db_read_timeout_seconds
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import EventStore

__all__ = ["READ_TIMEOUT_S", "AllotClient"]

READ_TIMEOUT_S = DB_READ_TIMEOUT_S  # as a service's ALLOT_DB_READ_TIMEOUT


class AllotClient:
    """Follow Allot's event log.

    ``async with AllotClient(database_url=..., nats_url=...) as client:`` then ``client.follow(after=...)``.
    ``store`` / ``nc`` let a caller share connections it already has (they are not closed by the client).
    ``read_timeout``: the seconds each read of the log the client opens may wait (None: no bound), set by
    ``timeouts_from`` (named when a read outlasts it; :meth:`from_env`: ``ALLOT_DB_READ_TIMEOUT``).
    """

    def __init__(
        self,
        *,
        database_url: str | None = None,
        nats_url: str | None = None,
        prefix: str = "allot",
        stream: str = "ALLOT_EVENTS",
        name: str = "allot-client",
        store: EventStore | None = None,
        nc: Client | None = None,
        read_timeout: float | None = READ_TIMEOUT_S,
        timeouts_from: str | None = None,
    ) -> None:
        if store is None and not database_url:
            raise ValueError("database_url: the event log's PostgreSQL URL is required (or pass store=)")
        self.database_url = database_url
        self.nats_url = nats_url
        self.names = BusNames(prefix=prefix, stream=stream)
        self.name = name
        self.read_timeout = read_timeout
        self.timeouts_from = timeouts_from
        self._store = store
        self._nc = nc
        self._owned: list[EventStore | Client] = []

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, name: str = "allot-client") -> AllotClient:
        """Settings from the services' environment variables (``ValueError`` naming one that cannot be read)."""
        env = os.environ if environ is None else environ
        return cls(
            read_timeout=_read_timeout(env.get(DB_READ_TIMEOUT_VARIABLE, "")),
            timeouts_from=DB_READ_TIMEOUT_VARIABLE,
            database_url=env.get("ALLOT_DATABASE_URL"),
            nats_url=env.get("ALLOT_NATS_URL") or None,
            prefix=env.get("ALLOT_NATS_PREFIX", "allot"),
            stream=env.get("ALLOT_NATS_STREAM", "ALLOT_EVENTS"),
            name=name,
        )

    async def __aenter__(self) -> AllotClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        if self._store is None:
            assert self.database_url is not None
            self._store = PostgresEventStore.connect(
                self.database_url,
                pool_size=2,
                read_timeout=self.read_timeout,
                timeouts_from=self.timeouts_from,
            )
            self._owned.append(self._store)
        if self._nc is None and self.nats_url:
            self._nc = await connect(self.nats_url, name=self.name)
            self._owned.append(self._nc)

    async def close(self) -> None:
        owned, self._owned = self._owned, []
        for resource in reversed(owned):
            await resource.close()
            if resource is self._nc:
                self._nc = None
            elif resource is self._store:
                self._store = None

    @property
    def store(self) -> EventStore:
        if self._store is None:
            raise RuntimeError(
                "the client is not open: use `async with AllotClient(...)` or `await client.open()`"
            )
        return self._store

    async def head(self) -> int:
        """The log's last position now."""
        return (await self.store.head())[0]

    def follow(
        self,
        *,
        after: int = 0,
        types: Collection[str] | None = None,
        namespaces: Collection[str] | None = None,
        nodes: Collection[str] | None = None,
        quotas: Collection[str] | None = None,
        idle: float = 1.0,
    ) -> Subscription:
        """Every event after position ``after`` that matches the filter, in log order, each once; see
        :class:`allot_client.filters.Filter` for the criteria and :class:`Subscription` for the guarantees."""
        flt = Filter(types=types, namespaces=namespaces, nodes=nodes, quotas=quotas)
        return Subscription(self.store, self._nc, self.names, flt, after=after, idle=idle)


def _read_timeout(text: str) -> float | None:
    """``ALLOT_DB_READ_TIMEOUT`` as the services read it (seconds, 0 for no bound, unset for the default), refused
    with a :class:`ValueError` that names it."""
    try:
        return db_read_timeout_seconds(text) or None
    except ValueError as exc:
        raise ValueError(f"{DB_READ_TIMEOUT_VARIABLE}: {exc}") from None
