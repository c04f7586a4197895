"""Snapshots: the verdict of re-deriving a stored snapshot of a decider's projection."""

from __future__ import annotations

from allot_contracts.events._base import Event

__all__ = ["SnapshotVerified"]


class SnapshotVerified(Event, frozen=True, kw_only=True, tag="snapshot.verified.v1"):
    """The snapshot of ``consumer`` at log ``position`` (state bytes with SHA-256 ``state_hash``, hex, made under the
    configuration ``config_hash``) was checked by folding the log from ``start`` (an earlier checked snapshot, or 0)
    to ``position`` and encoding the projection: ``result`` is ``"ok"`` when the bytes are the stored ones, else
    ``"mismatch"`` with ``path`` the first place the states differ. Recorded by ``allot replay --verify
    --check-snapshots`` in the stream ``snapshot:<consumer>``; a service restarting never uses a snapshot whose latest
    verdict is a mismatch."""

    consumer: str
    position: int
    state_hash: str
    result: str
    start: int = 0
    config_hash: str = ""
    path: str = ""
