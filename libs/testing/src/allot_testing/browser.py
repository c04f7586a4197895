"""Headless Chromium for the web view's browser tests: a page's screenshot, and how much two screenshots differ
(an 8-bit PNG decoder of our own, so no imaging library is needed). Tests skip with ``SKIP_NO_CHROMIUM`` when no
Chromium is installed (Debian: ``apt-get install chromium``)."""

from __future__ import annotations

import asyncio
import shutil
import struct
import zlib
from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "SIZE", "SKIP_NO_CHROMIUM", "decode_png", "differing_fraction", "screenshot"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
SIZE = (1200, 900)


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw pixels) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    out, prev = bytearray(), bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out += line
        prev = line
    return width, height, bpp, bytes(out)


def differing_fraction(a: bytes, b: bytes) -> float:
    wa, ha, pa, ra = decode_png(a)
    wb, hb, pb, rb = decode_png(b)
    assert (wa, ha) == (wb, hb), "screenshots of different sizes"
    differ = sum(
        1 for i in range(wa * ha) if max(abs(ra[i * pa + k] - rb[i * pb + k]) for k in range(3)) > 24
    )
    return differ / (wa * ha)


async def screenshot(url: str, out: Path) -> bytes:
    assert CHROMIUM is not None
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={SIZE[0]},{SIZE[1]}",
        f"--screenshot={out}",
        url,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    return await asyncio.to_thread(out.read_bytes)


SKIP_NO_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium installed (Debian: apt-get install chromium)"
)
