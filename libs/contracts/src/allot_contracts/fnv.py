"""FNV-1a hashes as Go's ``hash/fnv`` computes them: Kubernetes names generated pods by the 32-bit one, Koordinator
names quota trees by the 64-bit one. Pure."""

from __future__ import annotations

__all__ = ["fnv1a32", "fnv1a64"]


def fnv1a32(data: bytes) -> int:
    return _fnv1a(data, offset=0x811C9DC5, prime=0x01000193, mask=0xFFFFFFFF)


def fnv1a64(data: bytes) -> int:
    return _fnv1a(data, offset=0xCBF29CE484222325, prime=0x100000001B3, mask=0xFFFFFFFFFFFFFFFF)


def _fnv1a(data: bytes, *, offset: int, prime: int, mask: int) -> int:
    h = offset
    for b in data:
        h ^= b
        h = (h * prime) & mask
    return h
