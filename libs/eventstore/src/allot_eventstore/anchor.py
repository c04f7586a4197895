"""The anchored chain: checkpoints of the log head, signed with an Ed25519 key the database never sees.

The hash chain alone proves that the log is *consistent*, not that it is *the one that was written*: whoever can
write to the database can disable the append-only trigger, edit an event, recompute every hash after it and move the
head. A checkpoint closes that gap. It says "the event at position *p* has chain hash *h*", signed by the relay with a
private key kept outside PostgreSQL (a file, or a Kubernetes Secret mounted as one). Verification walks the chain and,
at every checkpoint's position, compares the recomputed chain with the signed hash: an edit anywhere at or before a
checkpoint changes the hash there, and forging a new checkpoint needs the key.

This module is pure: the signed message, signing, checking one checkpoint, the sealing policy (time comes in as
data), and :class:`AnchorCheck`, which :func:`allot_eventstore.verify.verify_chain` consults as it streams the chain.
Keys are read in :mod:`allot_eventstore.anchor_keys`; checkpoints are stored in :mod:`allot_eventstore.anchor_log`.
What this does and does not protect against: docs/security.md, "The anchored chain".
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

import msgspec

from allot_contracts.envelope import RecordedEvent
from allot_contracts.errors import InvalidInput
from allot_eventstore.clock import iso

# `cryptography` is imported where a key is used: a service that only reads the log needs none of it.
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

DOMAIN = b"allot.log-checkpoint.v1\n"  # a signature made for anything else can never pass as a checkpoint
EVERY_EVENTS = 1000  # default sealing interval, in events published
EVERY_SECONDS = 10.0  # default sealing interval, in seconds (when at least one event was published)


class SignedCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """The event at ``position`` has chain hash ``hash``; signed at ``signed_at`` (µs since the epoch, the relay's
    clock) by the key whose id is ``key_id``."""

    position: int
    hash: bytes
    signed_at: int
    key_id: str
    signature: bytes

    def message(self) -> bytes:
        return signed_message(self.position, self.hash, self.signed_at)

    def describe(self) -> str:
        return f"checkpoint at position {self.position} (key {self.key_id}, signed {when(self.signed_at)})"


def when(us: int) -> str:
    """``us`` (µs since the epoch) as an ISO time; as a number when no calendar date has it (a forged row)."""
    try:
        return iso(us)
    except (OverflowError, ValueError):
        return f"{us} µs after the epoch"


def signed_message(position: int, chain_hash: bytes, signed_at: int) -> bytes:
    return DOMAIN + f"{position}\n{chain_hash.hex()}\n{signed_at}\n".encode()


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short, stable name for a public key: the first 16 hex digits of SHA-256 over its 32 raw bytes."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign_checkpoint(
    key: Ed25519PrivateKey, *, position: int, hash: bytes, signed_at: int
) -> SignedCheckpoint:
    return SignedCheckpoint(
        position=position,
        hash=hash,
        signed_at=signed_at,
        key_id=key_id(key.public_key()),
        signature=key.sign(signed_message(position, hash, signed_at)),
    )


def signature_problem(checkpoint: SignedCheckpoint, keys: Mapping[str, Ed25519PublicKey]) -> str | None:
    """Why ``checkpoint`` cannot be trusted with ``keys`` (by key id), or None when its signature holds."""
    from cryptography.exceptions import InvalidSignature

    public = keys.get(checkpoint.key_id)
    if public is None:
        return (
            f"the {checkpoint.describe()} is signed by key {checkpoint.key_id}, which is not a configured anchor key "
            f"(configured: {', '.join(sorted(keys))}); it was forged, or its key was rotated out: configure the old "
            "public key too"
        )
    try:
        public.verify(checkpoint.signature, checkpoint.message())
    except InvalidSignature:
        return (
            f"the {checkpoint.describe()} does not carry a valid signature of key {checkpoint.key_id}: it was forged "
            "or altered in the database"
        )
    return None


class CheckpointPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """When the relay seals: once ``every_events`` events were published since the last checkpoint, or once
    ``every_seconds`` passed since it and at least one event was; the first checkpoint as soon as there is an event."""

    every_events: int = EVERY_EVENTS
    every_seconds: float = EVERY_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CheckpointPolicy:
        """From ``ALLOT_ANCHOR_EVERY_EVENTS`` (a positive integer) and ``ALLOT_ANCHOR_EVERY_SECONDS`` (a number ≥ 0),
        each defaulting to the field's default."""
        issues: list[tuple[str, str]] = []
        events, seconds = EVERY_EVENTS, EVERY_SECONDS
        raw = environ.get("ALLOT_ANCHOR_EVERY_EVENTS", "").strip()
        if raw:
            events = int(raw) if raw.isascii() and raw.isdigit() else 0
            if events < 1:
                issues.append(("ALLOT_ANCHOR_EVERY_EVENTS", f"must be a positive integer, not {raw!r}"))
        raw = environ.get("ALLOT_ANCHOR_EVERY_SECONDS", "").strip()
        if raw:
            try:
                seconds = float(raw)
            except ValueError:
                seconds = -1.0
            if not 0 <= seconds < float("inf"):
                issues.append(("ALLOT_ANCHOR_EVERY_SECONDS", f"must be a number of seconds ≥ 0, not {raw!r}"))
        if issues:
            raise InvalidInput(issues, subject="relay settings")
        return cls(every_events=events, every_seconds=seconds)

    def due(self, last: SignedCheckpoint | None, position: int, now: int) -> bool:
        if last is None:
            return position > 0
        if position <= last.position:
            return False
        return (
            position - last.position >= self.every_events or now - last.signed_at >= self.every_seconds * 1e6
        )


class AnchorReport(msgspec.Struct, kw_only=True):
    """What the anchor check found. ``anchored`` is False when no key is configured or no checkpoint exists yet;
    ``unanchored_events`` counts the events after the newest valid checkpoint (sealed only at the next one);
    ``failed`` says that the log disagrees with a checkpoint, or a checkpoint cannot be trusted."""

    anchored: bool
    keys: list[str]
    failed: bool = False
    checkpoints: int = 0
    newest_position: int = 0
    newest_signed_at: str = ""
    unanchored_events: int = 0
    note: str = ""


class AnchorCheck:
    """Checks the chain against signed checkpoints while :func:`~allot_eventstore.verify.verify_chain` streams it.

    ``checkpoints`` come in position order (several at one position are allowed: two relays, or a restart); each is
    read only when the chain reaches it, so memory stays bounded whatever the log's length. ``verify_chain`` calls
    :meth:`check` for a record whose position is :attr:`next_position` and :meth:`finish` after the last record."""

    def __init__(
        self,
        checkpoints: AsyncIterator[SignedCheckpoint] | None,
        keys: Mapping[str, Ed25519PublicKey],
        *,
        unchecked: int = 0,
    ) -> None:
        self._source = checkpoints if keys else None
        self._keys = dict(keys)
        self._pending: SignedCheckpoint | None = None
        self._newest: SignedCheckpoint | None = None
        self._checked = 0
        self._unchecked = unchecked  # checkpoints present but not checked (no key configured), for the report
        self._last_good = 0
        self._failed = False
        self.next_position = 0 if self._source is not None else -1

    async def start(self) -> str | None:
        """Read the first checkpoint; a problem when it cannot be trusted."""
        return self._fail(await self._advance())

    def _fail(self, problem: str | None) -> str | None:
        self._failed = self._failed or problem is not None
        return problem

    async def _advance(self) -> str | None:
        self._pending = None
        self.next_position = -1
        if self._source is None:
            return None
        nxt = await anext(self._source, None)
        if nxt is None:
            return None
        problem = signature_problem(nxt, self._keys)
        if problem is None and nxt.position < 1:
            problem = f"the {nxt.describe()} names no event (positions start at 1)"
        self._pending = nxt
        self.next_position = nxt.position
        return problem

    async def check(self, record: RecordedEvent) -> str | None:
        """``record`` is at :attr:`next_position`: every checkpoint there must sign its hash."""
        while self._pending is not None and self._pending.position == record.position:
            checkpoint = self._pending
            if checkpoint.hash != record.hash:
                return self._fail(
                    f"event at position {record.position} has chain hash {record.hash.hex()[:16]}… but the "
                    f"{checkpoint.describe()} signed {checkpoint.hash.hex()[:16]}…: an event in positions "
                    f"{self._last_good + 1} to {record.position} was rewritten and the hashes after it recomputed"
                )
            self._checked += 1
            self._newest = checkpoint
            problem = await self._advance()
            if problem is not None:
                return self._fail(problem)
        self._last_good = record.position
        return None

    def finish(self, last_position: int) -> str | None:
        """After the chain's last record: a checkpoint beyond it means signed events were removed."""
        if self._pending is not None and self._pending.position > last_position:
            return self._fail(
                f"the {self._pending.describe()} is beyond the end of the log: the chain ends at position "
                f"{last_position}, so signed events were deleted"
            )
        return None

    def report(self, last_position: int) -> AnchorReport:
        keys = sorted(self._keys)
        unanchored = last_position - (self._newest.position if self._newest else 0)
        if not keys:
            note = "no public key configured: the chain is checked for consistency only; " + (
                f"{self._unchecked} signed checkpoints in the log are not checked"
                if self._unchecked
                else "the log has no signed checkpoint"
            )
            return AnchorReport(anchored=False, keys=[], unanchored_events=last_position, note=note)
        if self._newest is None:
            return AnchorReport(
                anchored=False,
                keys=keys,
                failed=self._failed,
                unanchored_events=unanchored,
                note="no signed checkpoint in the log yet: the relay seals the head once it runs with the key",
            )
        return AnchorReport(
            anchored=True,
            keys=keys,
            failed=self._failed,
            checkpoints=self._checked,
            newest_position=self._newest.position,
            newest_signed_at=when(self._newest.signed_at),
            unanchored_events=unanchored,
        )
