"""Anchor keys on disk: the relay's Ed25519 signing key and the public keys that verification trusts.

Both are PEM files: the private key as PKCS#8 (``openssl genpkey -algorithm ed25519`` writes one), the public key as
SubjectPublicKeyInfo (``openssl pkey -pubout``). In Kubernetes the private key is a Secret mounted as a file; the dev
stack generates one on first start (:func:`ensure_signing_key`, mode 0600, its public half beside it as ``.pub``).
Every problem is an :class:`~allot_contracts.errors.InvalidInput` naming the file and the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from allot_contracts.errors import InvalidInput
from allot_eventstore.anchor import key_id

SUBJECT = "anchor key"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InvalidInput([(str(path), "does not exist")], subject=SUBJECT) from None
    except OSError as exc:
        raise InvalidInput([(str(path), f"cannot be read: {exc.strerror or exc}")], subject=SUBJECT) from exc


def _parse(path: Path, data: bytes, kind: str, load: Callable[[bytes], object]) -> object:
    if b"-----BEGIN" not in data:
        raise InvalidInput([(str(path), f"not a PEM file (expected an Ed25519 {kind} key)")], subject=SUBJECT)
    try:
        return load(data)
    except (ValueError, TypeError) as exc:
        raise InvalidInput([(str(path), f"not a readable PEM {kind} key: {exc}")], subject=SUBJECT) from exc


def _not_ed25519(path: Path, key: object, kind: str) -> InvalidInput:
    return InvalidInput(
        [(str(path), f"is a {type(key).__name__.lstrip('_')}, not an Ed25519 {kind} key")], subject=SUBJECT
    )


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    key = _parse(path, _read(path), "private", lambda data: load_pem_private_key(data, password=None))
    if not isinstance(key, Ed25519PrivateKey):
        raise _not_ed25519(path, key, "private")
    return key


def _load_public(path: Path) -> Ed25519PublicKey:
    """A public key file, or a private key file (its public half): both can configure verification."""
    data = _read(path)
    if b"PRIVATE KEY-----" in data:
        return load_signing_key(path).public_key()
    key = _parse(path, data, "public", load_pem_public_key)
    if not isinstance(key, Ed25519PublicKey):
        raise _not_ed25519(path, key, "public")
    return key


def load_verifying_keys(paths: Iterable[Path]) -> dict[str, Ed25519PublicKey]:
    """The public keys in ``paths``, by key id (a rotated key stays listed to check its older checkpoints)."""
    keys: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        key = _load_public(Path(path))
        keys[key_id(key)] = key
    return keys


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def ensure_signing_key(path: Path) -> Path:
    """A signing key at ``path``: the one there, or a new one written with mode 0600 (its public half beside it,
    ``<name>.pub``, mode 0644). The key appears whole or not at all, and an existing one is never replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        try:
            os.link(tmp, path)  # complete or absent, never half written; refuses to replace a key
        except FileExistsError:
            pass  # another start won the race: use its key
        finally:
            tmp.unlink()
    public = path.with_suffix(".pub")
    pem_public = public_pem(load_signing_key(path).public_key())
    if not public.exists() or public.read_bytes() != pem_public:
        tmp = public.with_suffix(".pub.tmp")
        tmp.write_bytes(pem_public)
        tmp.chmod(0o644)
        tmp.replace(public)
    return path
