"""Archived log segments on a real PostgreSQL: ``allot log archive`` writes self-contained segment files and
``allot log verify-segment`` checks them on their own, in a row, and against the live log.

The attacker here holds the segment files (and may rewrite the database) but not the relay's signing key."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from allot_cli.main import main
from allot_contracts.envelope import RecordedEvent
from allot_eventstore import ManualClock
from allot_eventstore.anchor import CheckpointPolicy, sign_checkpoint
from allot_eventstore.anchor_keys import ensure_signing_key, load_signing_key
from allot_eventstore.anchor_log import PostgresCheckpoints, Sealer
from allot_eventstore.archive import (
    FOOTER,
    PAGE,
    Manifest,
    SegmentCheckpoint,
    _Body,
    _body_frames,
    read_manifest,
)
from allot_eventstore.postgres import PostgresEventStore
from allot_testing.builders import an_event
from allot_testing.tampering import rewrite_with_recomputed_hashes

pytestmark = pytest.mark.integration


def allot(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return int(exit_.value.code or 0)


async def _sealed_log(url: str, key_file: Path, events: int) -> None:
    """``events`` events sealed as the relay seals them: at the first, then every 4 (clock passed in)."""
    store = PostgresEventStore.connect(url)
    try:
        sealer = Sealer(
            store,
            PostgresCheckpoints(store),
            load_signing_key(key_file),
            CheckpointPolicy(every_events=4, every_seconds=3600),
            clock=ManualClock(),
        )
        for _ in range(events):
            await sealer((await store.append([an_event()], producer="t")).head)
    finally:
        await store.close()


@pytest.fixture
def log(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sealed log of 23 events (checkpoints at 1, 5, 9, …, 21), its public key configured; returns the key."""
    key = ensure_signing_key(tmp_path / "anchor.key")
    asyncio.run(_sealed_log(database_url, key, 23))
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_ANCHOR_PUBLIC_KEYS", str(key.with_suffix(".pub")))
    monkeypatch.setenv("ALLOT_STATE_DIR", str(tmp_path / "state"))
    return key


def _segments(out: Path) -> list[Path]:
    return sorted(out.glob("log-*.allotseg"))


def _verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = allot("log", "verify-segment", "--json", *argv)
    return code, json.loads(capsys.readouterr().out)


def _records(path: Path) -> tuple[Manifest, list[RecordedEvent]]:
    manifest, problem = read_manifest(path)
    assert manifest is not None, problem
    return manifest, [r for frame in _body_frames(path, manifest, hashlib.sha256()) for r in frame]


def _forge(path: Path, manifest: Manifest, records: list[RecordedEvent], **changes: object) -> None:
    """Rewrite ``path`` as a well-formed segment of ``records``: a fresh body, its SHA-256 and size in the manifest
    (what anyone with the file can do; only the signatures need the key)."""
    with path.open("wb") as out:
        body = _Body(out)
        for start in range(0, len(records), PAGE):
            body.frame(records[start : start + PAGE])
        digest = body.close()
        forged = msgspec.structs.replace(manifest, body_bytes=body.bytes, body_sha256=digest, **changes)
        encoded = msgspec.json.encode(forged)
        out.write(encoded)
        out.write(FOOTER.pack(len(encoded), b"ALLOTEND"))


def _rehash(records: list[RecordedEvent], start: int, boundary: bytes) -> list[RecordedEvent]:
    """Recompute every hash from index ``start`` on (the first from ``boundary``), as an attacker without the key
    would."""
    out = list(records[:start])
    prev = records[start - 1].hash if start else boundary
    for record in records[start:]:
        prev = record.expected_hash(prev)
        out.append(msgspec.structs.replace(record, hash=prev))
    return out


def test_archive_writes_segments_that_verify_on_their_own_and_against_the_log(log, tmp_path, capsys):
    out = tmp_path / "archive"
    assert allot("log", "archive", "--until", "20", "--out", str(out), "--segment-size", "8") == 0
    assert "nothing was deleted" in capsys.readouterr().out
    files = _segments(out)
    assert [f.name for f in files] == [
        "log-000000000001-000000000008.allotseg",
        "log-000000000009-000000000016.allotseg",
        "log-000000000017-000000000020.allotseg",
    ]
    manifest, records = _records(files[1])
    assert [r.position for r in records] == list(range(9, 17)) and manifest.count == 8
    assert [c.position for c in manifest.checkpoints] == [9, 13]
    assert manifest.boundary_hash == _records(files[0])[0].last_hash

    code, report = _verify(capsys, *map(str, reversed(files)), "--against-db")  # any order
    assert code == 0 and report["ok"], report["problems"]
    one = _verify(capsys, *map(str, reversed(files)), "--against-db", "--jobs", "1")[1]
    assert [s["sha256"] for s in one["segments"]] == [s["sha256"] for s in report["segments"]]
    assert [s["anchor"]["checkpoints"] for s in report["segments"]] == [1, 2, 2]  # 17–20: at 17
    capsys.readouterr()
    assert allot("log", "verify-segment", *map(str, files)) == 0
    text = capsys.readouterr().out
    assert "segments 3 meet: one chain over positions 1–20" in text

    # a second run keeps what is there and continues after it; the same events give the same bytes
    before = [f.read_bytes() for f in files]
    assert allot("log", "archive", "--until", "23", "--out", str(out), "--segment-size", "8") == 0
    assert [f.read_bytes() for f in _segments(out)[:3]] == before
    assert _segments(out)[3].name == "log-000000000021-000000000023.allotseg"
    again = tmp_path / "again"
    assert allot("log", "archive", "--until", "20", "--out", str(again), "--segment-size", "8") == 0
    assert [f.read_bytes() for f in _segments(again)] == before
    assert _verify(capsys, *map(str, _segments(out)), "--against-db")[0] == 0


@pytest.fixture
def archived(log, tmp_path, capsys) -> list[Path]:
    out = tmp_path / "archive"
    assert allot("log", "archive", "--until", "23", "--out", str(out), "--segment-size", "12") == 0
    capsys.readouterr()
    return _segments(out)  # 1–12 (checkpoints 1, 5, 9), 13–23 (13, 17, 21)


def _tampered(capsys, files: list[Path], change: Callable[[Path], None]) -> dict:
    change(files[0])
    code, report = _verify(capsys, *map(str, files))
    assert code == 1 and not report["ok"]
    return report


def test_an_edited_record_with_recomputed_hashes_is_caught_by_its_checkpoint(archived, capsys):
    def edit(path: Path) -> None:
        manifest, records = _records(path)
        records[5] = msgspec.structs.replace(records[5], producer="someone-else")  # position 6
        records = _rehash(records, 5, bytes.fromhex(manifest.boundary_hash))
        _forge(path, manifest, records, last_hash=records[-1].hash.hex())

    report = _tampered(capsys, archived, edit)
    assert report["segments"][0]["problem"].startswith("event at position 9 has chain hash")
    assert "positions 6 to 9 was rewritten" in report["segments"][0]["problem"]


def test_a_truncated_segment_is_caught(archived, capsys):
    def cut(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])

    report = _tampered(capsys, archived, cut)
    assert "truncated" in report["segments"][0]["problem"]


def test_records_in_swapped_order_are_caught(archived, capsys):
    def swap(path: Path) -> None:
        manifest, records = _records(path)
        records[3], records[4] = records[4], records[3]
        _forge(path, manifest, records)

    report = _tampered(capsys, archived, swap)
    assert "position 4 is missing" in report["segments"][0]["problem"]


def test_a_segment_of_another_chain_is_caught_where_it_meets_the_previous_one(archived, capsys):
    manifest, records = _records(archived[1])
    other = bytes(range(32))  # consistent from another boundary, its checkpoints dropped: alone it holds
    records = _rehash(records, 0, other)
    _forge(
        archived[1],
        manifest,
        records,
        boundary_hash=other.hex(),
        checkpoints=[],
        last_hash=records[-1].hash.hex(),
    )
    code, report = _verify(capsys, str(archived[1]))
    assert code == 0 and report["segments"][0]["anchor"]["unanchored_events"] == 11
    code, report = _verify(capsys, *map(str, archived))
    assert code == 1 and "they are not the same chain" in report["problems"][0]


def test_a_forged_checkpoint_signature_is_caught(archived, capsys):
    def forge(path: Path) -> None:
        manifest, records = _records(path)
        records[5] = msgspec.structs.replace(records[5], producer="someone-else")
        records = _rehash(records, 5, bytes.fromhex(manifest.boundary_hash))
        thief = Ed25519PrivateKey.generate()
        checkpoints = [
            SegmentCheckpoint.of(
                msgspec.structs.replace(
                    sign_checkpoint(
                        thief, position=c.position, hash=records[c.position - 1].hash, signed_at=1
                    ),
                    key_id=c.key_id,  # claims the real key
                )
            )
            for c in manifest.checkpoints
        ]
        _forge(path, manifest, records, checkpoints=checkpoints, last_hash=records[-1].hash.hex())

    report = _tampered(capsys, archived, forge)
    assert "signature" in report["segments"][0]["problem"] and "forged" in report["segments"][0]["problem"]


def test_a_flipped_byte_is_caught_by_the_file_hash(archived, capsys):
    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[20] ^= 0x01
        path.write_bytes(bytes(data))

    report = _tampered(capsys, archived, flip)
    assert "damaged" in report["segments"][0]["problem"] or "SHA-256" in report["segments"][0]["problem"]


def test_a_gap_between_segments_is_caught(log, tmp_path, capsys):
    out = tmp_path / "archive"
    assert allot("log", "archive", "--until", "23", "--out", str(out), "--segment-size", "8") == 0
    files = _segments(out)
    code, report = _verify(capsys, str(files[0]), str(files[2]))
    assert code == 1 and "a gap between them" in report["problems"][0]


def test_a_rewritten_database_no_longer_meets_its_archive(archived, database_url, capsys):
    asyncio.run(rewrite_with_recomputed_hashes(database_url, 18))
    capsys.readouterr()
    assert allot("log", "verify-segment", "--against-db", *map(str, archived)) == 1
    assert "not the same chain" in capsys.readouterr().out
    # and the archive refuses to replace its segments with the rewritten log's
    assert allot("log", "archive", "--until", "23", "--out", str(archived[0].parent)) == 1
    assert "it is not replaced" in capsys.readouterr().err


def test_bad_input_is_a_clear_error(log, tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert allot("log", "verify-segment", str(other)) == 2
    assert "not an Allot log segment" in capsys.readouterr().err
    assert allot("log", "verify-segment", str(tmp_path / "missing.allotseg")) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert allot("log", "archive", "--until", "24", "--out", str(tmp_path / "a")) == 2
    assert "--until: must be a position of the log, 1 to its head 23, not 24" in capsys.readouterr().err


def test_checkpoints_dropped_from_a_manifest_are_caught_with_max_unanchored(archived, capsys):
    assert (
        _verify(capsys, *map(str, archived), "--max-unanchored", "4")[0] == 0
    )  # sealed every 4, 2 at the end
    manifest, records = _records(
        archived[1]
    )  # the newest segment: rewritten from position 20, checkpoints dropped
    records[7] = msgspec.structs.replace(records[7], producer="someone-else")
    records = _rehash(records, 7, bytes.fromhex(manifest.boundary_hash))
    _forge(archived[1], manifest, records, checkpoints=[], last_hash=records[-1].hash.hex())
    code, report = _verify(capsys, *map(str, archived))
    assert code == 0, "alone, a segment without checkpoints is only as sealed as what follows it"
    assert report["segments"][1]["anchor"]["unanchored_events"] == 11
    code, report = _verify(capsys, *map(str, archived), "--max-unanchored", "4")
    assert code == 1 and "the last 14 events (positions 10 to 23) follow the newest" in report["problems"][0]
