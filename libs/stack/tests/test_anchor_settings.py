"""Where the anchor keys come from: the dev stack generates the relay's signing key on first start (0600, under the
state dir) and verification finds its public half there; settings that cannot be used are refused with their name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from allot_contracts.errors import InvalidInput
from allot_eventstore.anchor import (
    CheckpointPolicy,
    SignedCheckpoint,
    key_id,
    sign_checkpoint,
    signature_problem,
)
from allot_eventstore.anchor_keys import ensure_signing_key, load_signing_key, load_verifying_keys
from allot_stack.anchoring import key_paths, relay_anchor_env
from allot_stack.supervisor import Supervisor
from allot_testing import fuzz


def _relay_env(supervisor: Supervisor) -> dict[str, str]:
    return next(c.env for c in supervisor.children if c.name == "relay")


def test_the_dev_stack_generates_the_signing_key_on_first_start(tmp_path, monkeypatch):
    monkeypatch.delenv("ALLOT_ANCHOR_KEY_FILE", raising=False)
    supervisor = Supervisor(state_dir=tmp_path)
    supervisor.plan_children()
    key = Path(_relay_env(supervisor)["ALLOT_ANCHOR_KEY_FILE"])
    assert key == tmp_path / "anchor.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key_id(load_signing_key(key).public_key())

    again = Supervisor(state_dir=tmp_path)
    again.plan_children()
    assert key_id(load_signing_key(Path(_relay_env(again)["ALLOT_ANCHOR_KEY_FILE"])).public_key()) == first
    assert key_paths(None, {}, tmp_path) == [tmp_path / "anchor.pub"], "verify finds the public half there"
    assert list(load_verifying_keys(key_paths(None, {}, tmp_path))) == [first]


def test_a_key_of_your_own_is_passed_to_the_relay_and_none_is_generated(tmp_path, monkeypatch):
    own = ensure_signing_key(tmp_path / "secret" / "relay.key")
    monkeypatch.setenv("ALLOT_ANCHOR_KEY_FILE", str(own))
    monkeypatch.setenv("ALLOT_ANCHOR_EVERY_EVENTS", "50")
    env = relay_anchor_env(tmp_path / "state", dict(os.environ))
    assert env == {"ALLOT_ANCHOR_KEY_FILE": str(own), "ALLOT_ANCHOR_EVERY_EVENTS": "50"}
    assert not (tmp_path / "state" / "anchor.key").exists()


def test_verify_keys_come_from_the_flag_then_the_environment_then_the_state_dir(tmp_path):
    ensure_signing_key(tmp_path / "anchor.key")
    env = {"ALLOT_ANCHOR_PUBLIC_KEYS": "/k/a.pub, /k/b.pub"}
    assert key_paths(["/flag.pub"], env, tmp_path) == [Path("/flag.pub")]
    assert key_paths(None, env, tmp_path) == [Path("/k/a.pub"), Path("/k/b.pub")]
    assert key_paths(None, {}, tmp_path) == [tmp_path / "anchor.pub"]
    assert key_paths(None, {}, tmp_path / "empty") == []


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({"ALLOT_ANCHOR_EVERY_EVENTS": "0"}, "ALLOT_ANCHOR_EVERY_EVENTS"),
        ({"ALLOT_ANCHOR_EVERY_EVENTS": "ten"}, "ALLOT_ANCHOR_EVERY_EVENTS"),
        ({"ALLOT_ANCHOR_EVERY_EVENTS": "²"}, "ALLOT_ANCHOR_EVERY_EVENTS"),
        ({"ALLOT_ANCHOR_EVERY_SECONDS": "-1"}, "ALLOT_ANCHOR_EVERY_SECONDS"),
        ({"ALLOT_ANCHOR_EVERY_SECONDS": "nan"}, "ALLOT_ANCHOR_EVERY_SECONDS"),
    ],
)
def test_unusable_sealing_intervals_are_refused_by_name(environ, field):
    with pytest.raises(InvalidInput, match=field):
        CheckpointPolicy.from_env(environ)


def test_the_sealing_policy_takes_time_as_data(tmp_path):
    policy = CheckpointPolicy(every_events=100, every_seconds=5)
    assert policy.due(None, 1, 0) and not policy.due(None, 0, 0)
    key = load_signing_key(ensure_signing_key(tmp_path / "anchor.key"))
    last = sign_checkpoint(key, position=10, hash=b"\0" * 32, signed_at=1_000_000)
    assert not policy.due(last, 10, 99_000_000), "nothing new to seal"
    assert not policy.due(last, 50, 5_999_999)
    assert policy.due(last, 50, 6_000_000), "five seconds later"
    assert policy.due(last, 110, 1_000_000), "a hundred events later"


# -- fuzzing the doors: key files, sealing settings, checkpoint rows -------------------------------------------------

_PEM_LIKE = st.sampled_from(
    [
        b"",
        b"-----BEGIN PRIVATE KEY-----\n",
        b"-----BEGIN PUBLIC KEY-----\n",
        b"-----BEGIN EC PRIVATE KEY-----\n",
    ]
)


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_any_key_file_is_loaded_or_refused_with_its_path(examples, tmp_path):
    tally = fuzz.Tally("anchor key files")
    path = tmp_path / "anchor.key"

    valid = ensure_signing_key(tmp_path / "valid.key").read_bytes()

    @fuzz.settings_for(examples)
    @given(_PEM_LIKE, st.binary(max_size=300) | st.just(valid[27:]), st.sampled_from(["private", "public"]))
    def check(prefix: bytes, body: bytes, kind: str) -> None:
        path.write_bytes(prefix + body)
        try:
            load_signing_key(path) if kind == "private" else load_verifying_keys([path])
        except InvalidInput as exc:
            assert str(path) in str(exc)
            tally.count("refused")
        else:
            tally.count("loaded")

    check()


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_any_sealing_interval_is_taken_or_refused_by_name(examples):
    tally = fuzz.Tally("anchor sealing settings")

    @fuzz.settings_for(examples)
    @given(
        st.dictionaries(
            st.sampled_from(["ALLOT_ANCHOR_EVERY_EVENTS", "ALLOT_ANCHOR_EVERY_SECONDS"]),
            st.text(max_size=12) | st.integers(-5, 10**6).map(str) | st.floats().map(str),
        )
    )
    def check(environ: dict[str, str]) -> None:
        try:
            policy = CheckpointPolicy.from_env(environ)
        except InvalidInput as exc:
            assert any(name in str(exc) for name in environ)
            tally.count("refused")
        else:
            assert policy.every_events >= 1 and 0 <= policy.every_seconds < float("inf")
            tally.count("taken")

    check()


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_any_checkpoint_row_is_trusted_only_with_a_valid_signature(examples, tmp_path):
    tally = fuzz.Tally("anchor checkpoint rows")
    key = load_signing_key(ensure_signing_key(tmp_path / "anchor.key"))
    keys = {key_id(key.public_key()): key.public_key()}
    genuine = sign_checkpoint(key, position=7, hash=b"\1" * 32, signed_at=5)

    rows = st.builds(
        SignedCheckpoint,
        position=st.integers(-(2**63), 2**63 - 1) | st.just(7),
        hash=st.binary(max_size=40) | st.just(genuine.hash),
        signed_at=st.integers(-(2**63), 2**63 - 1) | st.just(5),
        key_id=st.sampled_from([genuine.key_id, "0" * 16, ""]) | st.text(max_size=20),
        signature=st.binary(max_size=80) | st.just(genuine.signature),
    )

    @fuzz.settings_for(examples)
    @given(rows | st.just(genuine))
    def check(row: SignedCheckpoint) -> None:
        problem = signature_problem(row, keys)
        assert (problem is None) == (row == genuine)
        tally.count("trusted" if problem is None else "refused")

    check()
