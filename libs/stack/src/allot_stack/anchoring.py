"""How ``allot replay --verify`` finds the anchor keys and reports the anchored chain.

The public keys that verification trusts come from, in order: ``--anchor-key PATH`` (repeatable), else
``ALLOT_ANCHOR_PUBLIC_KEYS`` (paths separated by commas), else ``<state dir>/anchor.pub`` (written by the dev stack
next to the key it generates). A private key file works too (its public half is used). With none, the log is
reported as unanchored: consistent, but not proven to be the one that was written (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from allot_contracts.errors import InvalidInput, SchemaMismatch
from allot_eventstore.anchor import AnchorCheck
from allot_eventstore.anchor_keys import ensure_signing_key, load_verifying_keys
from allot_eventstore.anchor_log import anchor_check
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.verify import ChainReport
from allot_intake.errors import InputError
from allot_relay.settings import ENVIRONMENT as RELAY_SETTINGS

STATE_PUBLIC_KEY = "anchor.pub"
STATE_SIGNING_KEY = "anchor.key"


def relay_anchor_env(state_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The dev stack relay's anchor settings: the ones in ``environ`` if it names a key, else a key generated in
    ``state_dir`` on first start (mode 0600, its public half beside it for ``allot replay --verify``)."""
    env = {name: environ[name] for name in RELAY_SETTINGS if environ.get(name)}
    if "ALLOT_ANCHOR_KEY_FILE" not in env:
        env["ALLOT_ANCHOR_KEY_FILE"] = str(ensure_signing_key(state_dir / STATE_SIGNING_KEY))
    return env


def key_paths(flags: Sequence[str] | None, environ: Mapping[str, str], state_dir: Path | None) -> list[Path]:
    if flags:
        return [Path(p) for p in flags]
    listed = [p.strip() for p in environ.get("ALLOT_ANCHOR_PUBLIC_KEYS", "").split(",") if p.strip()]
    if listed:
        return [Path(p) for p in listed]
    if state_dir is not None and (state_dir / STATE_PUBLIC_KEY).exists():
        return [state_dir / STATE_PUBLIC_KEY]
    return []


def verifying_keys(
    flags: Sequence[str] | None, environ: Mapping[str, str], state_dir: Path | None
) -> dict[str, Ed25519PublicKey]:
    try:
        return load_verifying_keys(key_paths(flags, environ, state_dir))
    except InvalidInput as exc:
        raise InputError(str(exc)) from exc


async def anchor_of(store: PostgresEventStore, keys: Mapping[str, Ed25519PublicKey]) -> AnchorCheck:
    try:
        return await anchor_check(store, keys)
    except SchemaMismatch as exc:
        raise InputError(str(exc)) from exc


def anchor_line(chain: ChainReport) -> str:
    """The ``anchor`` line of the verify output."""
    anchor = chain.anchor
    if anchor is None:
        return "anchor       not checked"
    if anchor.failed:
        return "anchor       BROKEN: the log and its signed checkpoints disagree (below)"
    if not anchor.anchored:
        return f"anchor       UNANCHORED: {anchor.note}"
    if (
        not chain.ok and not chain.head_unexpected
    ):  # another head than --expect-head: the chain itself is whole
        return f"anchor       {anchor.checkpoints} signed checkpoint(s) matched the chain before it broke"
    keys = ", ".join(anchor.keys)
    pending = (
        f"; {anchor.unanchored_events} event(s) after it not sealed yet" if anchor.unanchored_events else ""
    )
    return (
        f"anchor       ok: {anchor.checkpoints} signed checkpoint(s) match the chain (key {keys}), newest at "
        f"position {anchor.newest_position} signed {anchor.newest_signed_at}{pending}"
    )


def bound_unsealed(chain: ChainReport, limit: int | None) -> None:
    """Fail ``chain`` when more than ``limit`` events follow the newest valid checkpoint (``--max-unanchored``)."""
    anchor = chain.anchor
    if limit is None or anchor is None or not chain.ok or anchor.unanchored_events <= limit:
        return
    newest = f"the newest checkpoint (position {anchor.newest_position})" if anchor.anchored else "position 0"
    chain.ok = False
    anchor.failed = True
    chain.position = anchor.newest_position + 1
    chain.problem = (
        f"{anchor.unanchored_events} events after {newest} are not sealed, more than --max-unanchored {limit}: "
        "the newest checkpoints were removed, or the relay is not sealing (is its key configured?)"
    )
