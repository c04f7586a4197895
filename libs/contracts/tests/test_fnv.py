"""FNV-1a as Go's hash/fnv computes it (the published test vectors)."""

import pytest

from allot_contracts.fnv import fnv1a32, fnv1a64


@pytest.mark.parametrize(
    ("data", "expected"), [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)]
)
def test_fnv1a32_known_vectors(data: bytes, expected: int) -> None:
    assert fnv1a32(data) == expected


def test_fnv1a64_of_nothing_is_the_offset_basis() -> None:
    assert fnv1a64(b"") == 0xCBF29CE484222325
