"""Signatures of log checkpoints: `cryptography` is loaded where a key is used, and checks as before."""

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from allot_eventstore.anchor import key_id, sign_checkpoint, signature_problem


def test_a_signed_checkpoint_passes_and_another_signature_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    signed = sign_checkpoint(key, position=7, hash=bytes(32), signed_at=1)
    keys = {key_id(key.public_key()): key.public_key()}
    assert signature_problem(signed, keys) is None
    forged = sign_checkpoint(key, position=8, hash=bytes(32), signed_at=1)
    tampered = type(signed)(
        position=signed.position,
        hash=signed.hash,
        signed_at=signed.signed_at,
        key_id=signed.key_id,
        signature=forged.signature,
    )
    assert "does not carry a valid signature" in (signature_problem(tampered, keys) or "")
