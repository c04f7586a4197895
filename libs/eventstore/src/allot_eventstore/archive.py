"""Archived log segments: the events of positions *a*..*b* in one self-contained file, checked on its own.

A segment lets older history leave PostgreSQL and still be verified: it carries the stored chain hash before its
first event (its *boundary*), every record exactly as stored (so each hash is recomputed), the stored hash of its
last event, and every signed checkpoint that falls inside it with its signature. Checked alone, a segment proves that
its records chain from its boundary hash to its last hash and that every checkpoint the relay signed in that range
signs the recomputed chain; checked in a row, consecutive segments must meet (the last hash of one is the boundary
of the next, positions contiguous). An edit with recomputed hashes is caught by the first signed checkpoint after it
(forging one needs the relay's key); the events after a segment's newest checkpoint are sealed only by the next
segment's boundary, or by the live log (``--against-db``).

File format, version 1 (``docs/security.md``, "Archived log segments"); integers are big-endian::

    b"ALLOTSEG"                       8 bytes: magic
    body                              zlib stream of frames: u32 length + MessagePack array of records
    manifest                          JSON object (keys below), UTF-8
    u64 manifest length, b"ALLOTEND"  16 bytes: footer

The manifest is written last so that a segment is written in one streaming pass; it holds ``format`` (1),
``first_position``, ``last_position``, ``count``, ``boundary_hash`` (hex: the stored hash at ``first_position - 1``,
32 zero bytes for position 1), ``last_hash``, ``checkpoints`` (``position``, ``hash``, ``signed_at``, ``key_id``,
``signature``, bytes as hex), ``compression`` (``"zlib"``), ``body_bytes`` and ``body_sha256`` (the SHA-256 of every
byte before the manifest: magic and body). A record is a :class:`~allot_contracts.envelope.RecordedEvent` with its
stored payload bytes. The file carries no time of its own, so archiving the same events again gives the same bytes.

Memory: writing holds one page of records (:data:`PAGE`), reading one decompressed frame. Files are written to a
temporary name and linked into place, so a segment is complete or absent, and an existing file is never replaced.
Reading the log is :mod:`allot_eventstore.archive_log`; deleting archived rows (pruning) is not done here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import struct
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from allot_contracts.envelope import GENESIS_HASH, RecordedEvent
from allot_eventstore.anchor import AnchorCheck, AnchorReport, SignedCheckpoint

FORMAT = 1
MAGIC = b"ALLOTSEG"
END = b"ALLOTEND"
FOOTER = struct.Struct(">Q8s")
FRAME = struct.Struct(">I")
SUFFIX = ".allotseg"
PAGE = 5000  # records per frame (and per read of the log)
CHUNK = 1 << 20  # bytes read at a time when verifying
LEVEL = 3  # zlib level: a third of level 6's time for 15% more bytes (level 1 is hardly faster)
MAX_MANIFEST = 64 << 20  # a manifest larger than this is not one this code wrote


class SegmentCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    hash: str
    signed_at: int
    key_id: str
    signature: str

    @classmethod
    def of(cls, checkpoint: SignedCheckpoint) -> SegmentCheckpoint:
        return cls(
            position=checkpoint.position,
            hash=checkpoint.hash.hex(),
            signed_at=checkpoint.signed_at,
            key_id=checkpoint.key_id,
            signature=checkpoint.signature.hex(),
        )

    def signed(self) -> SignedCheckpoint:
        return SignedCheckpoint(
            position=self.position,
            hash=bytes.fromhex(self.hash),
            signed_at=self.signed_at,
            key_id=self.key_id,
            signature=bytes.fromhex(self.signature),
        )


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    format: int
    first_position: int
    last_position: int
    count: int
    boundary_hash: str
    last_hash: str
    checkpoints: list[SegmentCheckpoint]
    compression: str
    body_bytes: int
    body_sha256: str


class SegmentError(Exception):
    """A file that is not a segment this version can read (bad input, not tampering)."""


def segment_name(first: int, last: int) -> str:
    return f"log-{first:012d}-{last:012d}{SUFFIX}"


# ---------------------------------------------------------------------------------------------------- writing


class _Body:
    """The magic and the compressed frames, hashed and counted as they are written."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._zlib = zlib.compressobj(LEVEL)
        self._sha = hashlib.sha256()
        self.bytes = 0
        self._raw(MAGIC)

    def _raw(self, data: bytes) -> None:
        if data:
            self._out.write(data)
            self._sha.update(data)
            self.bytes += len(data)

    def frame(self, records: list[RecordedEvent]) -> None:
        encoded = msgspec.msgpack.encode(records)
        self._raw(self._zlib.compress(FRAME.pack(len(encoded))))
        self._raw(self._zlib.compress(encoded))

    def close(self) -> str:
        self._raw(self._zlib.flush())
        return self._sha.hexdigest()


async def write_segment(
    path: Path,
    records: AsyncIterator[RecordedEvent],
    *,
    first: int,
    last: int,
    boundary_hash: bytes,
    checkpoints: Iterable[SignedCheckpoint],
) -> Manifest:
    """Write positions ``first``..``last`` from ``records`` to ``path`` (complete or absent; never replacing a file:
    :class:`FileExistsError`). ``checkpoints`` are those signed in that range. Raises ``ValueError`` when the records
    are not exactly those positions in order (the log changed under the reader)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as out:
            body = _Body(out)
            page: list[RecordedEvent] = []
            expected, last_hash = first, boundary_hash
            async for record in records:
                if record.position != expected or record.position > last:
                    raise ValueError(f"expected position {expected} of the log, read {record.position}")
                page.append(record)
                expected, last_hash = expected + 1, record.hash
                if len(page) == PAGE:
                    body.frame(page)
                    page = []
            if page:
                body.frame(page)
            if expected != last + 1:
                raise ValueError(f"the log ended at position {expected - 1}, before {last}")
            digest = body.close()
            manifest = Manifest(
                format=FORMAT,
                first_position=first,
                last_position=last,
                count=last - first + 1,
                boundary_hash=boundary_hash.hex(),
                last_hash=last_hash.hex(),
                checkpoints=[SegmentCheckpoint.of(c) for c in checkpoints],
                compression="zlib",
                body_bytes=body.bytes,
                body_sha256=digest,
            )
            encoded = msgspec.json.encode(manifest)
            out.write(encoded)
            out.write(FOOTER.pack(len(encoded), END))
            out.flush()
            os.fsync(out.fileno())
        os.link(tmp, path)  # refuses to replace an existing file, and the segment appears whole
    finally:
        tmp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # make the new name durable too
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return manifest


# ---------------------------------------------------------------------------------------------------- reading


class SegmentReport(msgspec.Struct, kw_only=True):
    """What checking one segment found; ``problem`` is empty when it holds."""

    file: str
    ok: bool
    first_position: int = 0
    last_position: int = 0
    count: int = 0
    boundary_hash: str = ""
    last_hash: str = ""
    sha256: str = ""
    problem: str = ""
    anchor: AnchorReport | None = None
    sealed_at: list[int] = []  # positions of the signed checkpoints checked in it (with a key configured)


def read_manifest(path: Path) -> tuple[Manifest | None, str]:
    """The manifest of the segment at ``path``, or None and why it cannot be trusted (a damaged segment).
    :class:`SegmentError` when ``path`` is not a segment at all (missing, unreadable, another kind of file)."""
    try:
        with path.open("rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise SegmentError(
                    f"{path}: not an Allot log segment (it does not start with {MAGIC.decode()})"
                )
            size = f.seek(0, os.SEEK_END)
            if size < len(MAGIC) + FOOTER.size:
                return None, "the file is truncated: it ends before its manifest"
            f.seek(size - FOOTER.size)
            length, end = FOOTER.unpack(f.read(FOOTER.size))
            if end != END or length > min(MAX_MANIFEST, size - len(MAGIC) - FOOTER.size):
                return None, "the file is truncated or damaged: it does not end with a segment manifest"
            f.seek(size - FOOTER.size - length)
            raw = f.read(length)
    except OSError as exc:
        raise SegmentError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    try:
        head = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return None, f"its manifest is not readable JSON: {exc}"
    if isinstance(head, dict) and head.get("format") != FORMAT:
        raise SegmentError(
            f"{path}: segment format {head.get('format')!r} is not one this version reads ({FORMAT})"
        )
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except msgspec.ValidationError as exc:
        return None, f"its manifest is damaged: {exc}"
    if manifest.compression != "zlib":
        raise SegmentError(f"{path}: compression {manifest.compression!r} is not one this version reads")
    if manifest.body_bytes != size - FOOTER.size - length:
        return None, (
            f"the manifest says the records take {manifest.body_bytes} bytes, the file holds "
            f"{size - FOOTER.size - length}: it was truncated or spliced"
        )
    return manifest, ""


def _body_frames(path: Path, manifest: Manifest, digest: hashlib._Hash) -> Iterator[list[RecordedEvent]]:
    """The decoded frames of the body; ``digest`` is fed every byte read. ``ValueError`` on a damaged body."""
    decoder = msgspec.msgpack.Decoder(list[RecordedEvent])
    inflate = zlib.decompressobj()
    pending = b""
    with path.open("rb") as f:
        digest.update(f.read(len(MAGIC)))  # checked by read_manifest
        remaining = manifest.body_bytes - len(MAGIC)
        while remaining > 0:
            chunk = f.read(min(CHUNK, remaining))
            if not chunk:
                raise ValueError("the file ends inside its records")
            remaining -= len(chunk)
            digest.update(chunk)
            try:
                pending += inflate.decompress(chunk)
            except zlib.error as exc:
                raise ValueError(f"the records do not decompress: {exc}") from exc
            while len(pending) >= FRAME.size:
                (length,) = FRAME.unpack_from(pending)
                if len(pending) < FRAME.size + length:
                    break
                try:
                    yield decoder.decode(pending[FRAME.size : FRAME.size + length])
                except msgspec.DecodeError as exc:
                    raise ValueError(f"a page of records cannot be decoded: {exc}") from exc
                pending = pending[FRAME.size + length :]
    if not inflate.eof or inflate.unused_data:
        raise ValueError("the compressed records are cut short or followed by other data")
    if pending:
        raise ValueError("the records end in the middle of a page")


async def _manifest_checkpoints(checkpoints: list[SignedCheckpoint]) -> AsyncIterator[SignedCheckpoint]:
    for checkpoint in checkpoints:
        yield checkpoint


async def verify_segment(path: Path, keys: Mapping[str, Ed25519PublicKey]) -> SegmentReport:
    """Check the segment at ``path`` on its own (module docstring). :class:`SegmentError` when it is not one."""
    manifest, problem = read_manifest(path)
    report = SegmentReport(file=str(path), ok=False)
    if manifest is None:
        report.problem = problem
        return report
    report.first_position, report.last_position = manifest.first_position, manifest.last_position
    report.count, report.boundary_hash, report.last_hash = (
        manifest.count,
        manifest.boundary_hash,
        manifest.last_hash,
    )
    problem = _manifest_problem(manifest)
    if problem:
        report.problem = problem
        return report
    checkpoints = [c.signed() for c in manifest.checkpoints]
    anchor = (
        AnchorCheck(_manifest_checkpoints(checkpoints), keys)
        if keys
        else AnchorCheck(None, keys, unchecked=len(checkpoints))
    )
    digest = hashlib.sha256()
    try:
        report.problem = await _walk(path, manifest, anchor, digest) or ""
    except ValueError as exc:
        report.problem = f"the segment is damaged: {exc}"
    if not report.problem and digest.hexdigest() != manifest.body_sha256:
        report.problem = (
            f"the file's SHA-256 {digest.hexdigest()[:16]}… is not the {manifest.body_sha256[:16]}… its manifest "
            "names: its bytes were changed after it was written"
        )
    report.anchor = anchor.report(manifest.last_position)
    report.anchor.unanchored_events = manifest.last_position - (
        report.anchor.newest_position if report.anchor.anchored else manifest.first_position - 1
    )
    report.sha256 = _file_sha256(path) if not report.problem else ""
    if keys and not report.problem:
        report.sealed_at = sorted({c.position for c in checkpoints})
    report.ok = not report.problem
    return report


def check_segment(path: str, key_files: list[str]) -> SegmentReport:
    """:func:`verify_segment` from plain arguments, in a process of its own (``allot log verify-segment --jobs``)."""
    from allot_eventstore.anchor_keys import load_verifying_keys

    return asyncio.run(verify_segment(Path(path), load_verifying_keys(Path(k) for k in key_files)))


def _manifest_problem(manifest: Manifest) -> str:
    if manifest.first_position < 1 or manifest.last_position < manifest.first_position:
        return f"its manifest names positions {manifest.first_position} to {manifest.last_position}"
    if manifest.count != manifest.last_position - manifest.first_position + 1:
        return (
            f"its manifest counts {manifest.count} events for positions {manifest.first_position} to "
            f"{manifest.last_position}"
        )
    try:
        boundary = bytes.fromhex(manifest.boundary_hash)
        for c in manifest.checkpoints:
            bytes.fromhex(c.hash), bytes.fromhex(c.signature)
    except ValueError:
        return "its manifest has a hash or signature that is not hexadecimal"
    if manifest.first_position == 1 and boundary != GENESIS_HASH:
        return "it starts at position 1 but its boundary hash is not the chain's genesis (32 zero bytes)"
    positions = [c.position for c in manifest.checkpoints]
    if positions != sorted(positions) or any(
        not manifest.first_position <= p <= manifest.last_position for p in positions
    ):
        return (
            "its manifest lists checkpoints out of order or outside positions "
            f"{manifest.first_position} to {manifest.last_position}"
        )
    return ""


async def _walk(path: Path, manifest: Manifest, anchor: AnchorCheck, digest: hashlib._Hash) -> str | None:
    """Recompute the chain over the body from the boundary hash; the first problem found, or None."""
    problem = await anchor.start()
    if problem is not None:
        return problem
    prev, expected = bytes.fromhex(manifest.boundary_hash), manifest.first_position
    for frame in _body_frames(path, manifest, digest):
        for record in frame:
            if record.position != expected:
                return (
                    f"position {expected} is {'missing' if record.position > expected else 'duplicated'} "
                    f"(the next record is at {record.position}): records were removed, added or reordered"
                )
            if not record.hash_follows(prev):
                return (
                    f"event at position {record.position} ({record.type}, id {record.event_id}) does not match its "
                    "hash: it was edited, or an earlier event was"
                )
            if record.position == anchor.next_position:
                problem = await anchor.check(record)
                if problem is not None:
                    return problem
            prev, expected = record.hash, expected + 1
    if expected != manifest.last_position + 1:
        return f"the records end at position {expected - 1}, the manifest says {manifest.last_position}"
    if prev.hex() != manifest.last_hash:
        return (
            f"the chain ends with hash {prev.hex()[:16]}… but the manifest names {manifest.last_hash[:16]}… as the "
            "segment's last hash"
        )
    return anchor.finish(expected - 1)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def joins(reports: list[SegmentReport]) -> list[str]:
    """Where segments that verified on their own fail to meet, in position order (empty when they form one chain)."""
    problems: list[str] = []
    ordered = sorted((r for r in reports if r.ok), key=lambda r: r.first_position)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after.first_position != before.last_position + 1:
            what = "a gap" if after.first_position > before.last_position + 1 else "an overlap"
            problems.append(
                f"{Path(before.file).name} ends at position {before.last_position} and {Path(after.file).name} "
                f"starts at {after.first_position}: {what} between them"
            )
        elif after.boundary_hash != before.last_hash:
            problems.append(
                f"{Path(after.file).name} starts from boundary hash {after.boundary_hash[:16]}… but "
                f"{Path(before.file).name} ends with {before.last_hash[:16]}…: they are not the same chain"
            )
    return problems


def unsealed_stretches(reports: list[SegmentReport], limit: int) -> list[str]:
    """Stretches of more than ``limit`` events with no signed checkpoint after them, over segments that verified
    and meet (checkpoints removed from a manifest, or a relay that was not sealing; ``--max-unanchored``)."""
    ordered = sorted((r for r in reports if r.ok), key=lambda r: r.first_position)
    if not ordered:
        return []
    problems: list[str] = []
    previous = ordered[0].first_position - 1
    for position in [p for r in ordered for p in r.sealed_at]:
        if position - previous > limit:
            problems.append(
                f"positions {previous + 1} to {position}: {position - previous} events before the next signed "
                f"checkpoint, more than --max-unanchored {limit}: checkpoints were removed from a manifest, or the "
                "relay was not sealing"
            )
        previous = position
    last = ordered[-1].last_position
    if last - previous > limit:
        problems.append(
            f"the last {last - previous} events (positions {previous + 1} to {last}) follow the newest signed "
            f"checkpoint in the segments, more than --max-unanchored {limit}"
        )
    return problems
