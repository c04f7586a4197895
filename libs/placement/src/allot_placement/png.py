"""A tiny pure-Python line-chart renderer that writes PNG files (zlib + struct; no plotting dependency).

Used by ``allot sim trace --plot`` to draw allocation against arrival like the FGD paper's Figure 9(a). It draws
axes with ticks and labels (a built-in 5×7 pixel font), a dashed reference line, one coloured polyline per series
(two pixels wide), and a legend. Deterministic: the same series give byte-identical files.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

__all__ = ["line_chart"]

_FONT = {
    "0": "01110100011001110101110011000101110",
    "1": "00100011000010000100001000010001110",
    "2": "01110100010000100010001000100011111",
    "3": "11111000100010000010000011000101110",
    "4": "00010001100101010010111110001000010",
    "5": "11111100001111000001000011000101110",
    "6": "00110010001000011110100011000101110",
    "7": "11111000010001000100010000100001000",
    "8": "01110100011000101110100011000101110",
    "9": "01110100011000101111000010001001100",
    "A": "01110100011000111111100011000110001",
    "B": "11110100011000111110100011000111110",
    "C": "01110100011000010000100001000101110",
    "D": "11100100101000110001100011001011100",
    "E": "11111100001000011110100001000011111",
    "F": "11111100001000011110100001000010000",
    "G": "01110100011000010111100011000101111",
    "H": "10001100011000111111100011000110001",
    "I": "01110001000010000100001000010001110",
    "J": "00111000100001000010000101001001100",
    "K": "10001100101010011000101001001010001",
    "L": "10000100001000010000100001000011111",
    "M": "10001110111010110101100011000110001",
    "N": "10001100011100110101100111000110001",
    "O": "01110100011000110001100011000101110",
    "P": "11110100011000111110100001000010000",
    "Q": "01110100011000110001101011001001101",
    "R": "11110100011000111110101001001010001",
    "S": "01111100001000001110000010000111110",
    "T": "11111001000010000100001000010000100",
    "U": "10001100011000110001100011000101110",
    "V": "10001100011000110001100010101000100",
    "W": "10001100011000110101101011010101010",
    "X": "10001100010101000100010101000110001",
    "Y": "10001100011000101010001000010000100",
    "Z": "11111000010001000100010001000011111",
    "%": "11000110010001000100010001001100011",
    ".": "00000000000000000000000000110001100",
    "-": "00000000000000011111000000000000000",
    "+": "00000001000010011111001000010000000",
    "(": "00010001000100001000010000010000010",
    ")": "01000001000001000010000100010001000",
    " ": "0" * 35,
    ":": "00000011000110000000011000110000000",
    "/": "00000000010001000100010001000000000",
    "@": "01110100011011110101101111000001110",
    "=": "00000000001111100000111110000000000",
}
PALETTE = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
]


class _Canvas:
    def __init__(self, w: int, h: int) -> None:
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def set(self, x: int, y: int, c: tuple[int, int, int]) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i : i + 3] = bytes(c)

    def line(
        self, x0: int, y0: int, x1: int, y1: int, c: tuple[int, int, int], width: int = 1, dash: int = 0
    ) -> None:
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, step = dx + dy, 0
        while True:
            if not dash or (step // dash) % 2 == 0:
                for ox in range(width):
                    for oy in range(width):
                        self.set(x0 + ox, y0 + oy, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy
            step += 1

    def text(self, x: int, y: int, s: str, c: tuple[int, int, int] = (0, 0, 0), scale: int = 2) -> None:
        for ch in s.upper():
            glyph = _FONT.get(ch, _FONT[" "])
            for i, bit in enumerate(glyph):
                if bit == "1":
                    for ox in range(scale):
                        for oy in range(scale):
                            self.set(x + (i % 5) * scale + ox, y + (i // 5) * scale + oy, c)
            x += 6 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return (
                struct.pack(">I", len(data))
                + kind
                + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
            )

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    x_step: float,
    y_step: float,
    reference: bool = True,
    width: int = 1000,
    height: int = 640,
) -> bytes:
    """A PNG line chart; ``series`` is ``[(name, [(x, y), ...])]`` drawn in palette order."""
    cv = _Canvas(width, height)
    left, right, top, bottom = 90, width - 270, 50, height - 70
    (x0, x1), (y0, y1) = x_range, y_range

    def px(x: float, y: float) -> tuple[int, int]:
        return (
            round(left + (x - x0) * (right - left) / (x1 - x0)),
            round(bottom - (y - y0) * (bottom - top) / (y1 - y0)),
        )

    grey, black = (220, 220, 220), (0, 0, 0)
    v = y0
    while v <= y1 + 1e-9:
        _, y = px(x0, v)
        cv.line(left, y, right, y, grey)
        cv.text(left - 12 * len(f"{v:g}") - 6, y - 7, f"{v:g}")
        v += y_step
    v = x0
    while v <= x1 + 1e-9:
        x, _ = px(v, y0)
        cv.line(x, top, x, bottom, grey)
        cv.text(x - 6 * len(f"{v:g}"), bottom + 10, f"{v:g}")
        v += x_step
    cv.line(left, bottom, right, bottom, black, 2)
    cv.line(left, top, left, bottom, black, 2)
    if reference:
        a, b = max(x0, y0), min(x1, y1)
        cv.line(*px(a, a), *px(b, b), (160, 160, 160), 1, dash=6)
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        inside = [(x, min(y, y1)) for x, y in pts if x0 <= x <= x1]
        for (xa, ya), (xb, yb) in zip(inside, inside[1:]):
            if ya < y0 and yb < y0:
                continue
            if ya < y0:  # enter the plot where the segment crosses the bottom edge
                xa, ya = xa + (xb - xa) * (y0 - ya) / (yb - ya), y0
            elif yb < y0:
                xb, yb = xa + (xb - xa) * (y0 - ya) / (yb - ya), y0
            cv.line(*px(xa, ya), *px(xb, yb), color, 2)
        ly = top + 10 + i * 26
        cv.line(right + 20, ly + 7, right + 50, ly + 7, color, 3)
        cv.text(right + 58, ly, name)
    cv.text(left, 6, title)
    cv.text((left + right) // 2 - 6 * len(x_label), height - 30, x_label)
    cv.text(8, top - 22, y_label)
    return cv.png()
