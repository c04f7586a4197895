"""How the event store's connections read and write a timestamptz (µs since the epoch, what the envelope holds) and a
json value (its bytes), set on every connection of the store's pool as it is made."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from allot_eventstore.clock import from_datetime
from allot_eventstore.pg_errors import RECONNECTS

__all__ = ["codecs"]


# PostgreSQL's own epoch (2000-01-01T00:00:00Z) in µs since the Unix epoch: a timestamptz travels as µs since it.
_PG_EPOCH_US = 946_684_800_000_000


def _time_to_pg(value: int | datetime) -> tuple[int]:
    """A time to write (µs since the epoch; a datetime as well) as PostgreSQL's binary timestamptz."""
    return ((value if isinstance(value, int) else from_datetime(value)) - _PG_EPOCH_US,)


def _time_from_pg(value: tuple[int]) -> int:
    return value[0] + _PG_EPOCH_US


def _json_to_pg(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


async def codecs(conn: Any) -> None:
    """Every connection of the store reads a timestamptz as µs since the epoch (what the envelope holds) and a json
    value as its bytes, without making a datetime or a string of each row's first (reading the log is what replay
    and every catching-up service do most). Writing takes either form."""
    RECONNECTS.down = False  # a connection was made: a later outage is logged again
    await conn.set_type_codec(
        "timestamptz", schema="pg_catalog", encoder=_time_to_pg, decoder=_time_from_pg, format="tuple"
    )
    await conn.set_type_codec(
        "json", schema="pg_catalog", encoder=_json_to_pg, decoder=bytes, format="binary"
    )
