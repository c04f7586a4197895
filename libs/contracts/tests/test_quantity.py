from fractions import Fraction

import pytest

from allot_contracts.quantity import QuantityError, format_quantity, parse_quantity, to_canonical


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("4", Fraction(4)),
        ("8Gi", Fraction(8 * 2**30)),
        ("83201216Ki", Fraction(83201216 * 1024)),
        ("1e3", Fraction(1000)),
        ("1.5", Fraction(3, 2)),
        ("100M", Fraction(10**8)),
        (".5", Fraction(1, 2)),
        (3, Fraction(3)),
        (0.25, Fraction(1, 4)),
    ],
    ids=lambda v: str(v),
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


# Kubernetes reads ASCII digits only and no white space around them; "٣" and "２" are digits to a regex's \d
@pytest.mark.parametrize(
    "text",
    ["", "abc", "1.2.3", "5 Gi", "1Q", "--1", True, None, "\u0663", "\uff12", " 1", "2\n", "1e" + "0" * 5000],
)
def test_parse_quantity_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_a_quantity_with_more_digits_than_any_resource_is_refused_naming_it_briefly():
    assert parse_quantity("9" * 64) == 10**64 - 1
    for text in ("9" * 65, "9" * 5000, "0." + "1" * 5000):  # 5,000 digits: more than Python converts
        with pytest.raises(
            QuantityError, match=f"its number has {len(text)} characters, at most 64"
        ) as caught:
            parse_quantity(text)
        assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("name", "text", "canonical"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "1.0001", 1001),
        ("memory", "1Ki", 1024),
        ("nvidia.com/gpu", "2", 2),
        # Koordinator's batch and mid cpu are integer milli-cores ("2000" is 2 cores), read with Value()
        ("kubernetes.io/batch-cpu", "2000", 2000),
        ("kubernetes.io/mid-cpu", "2000", 2000),
        ("kubernetes.io/mid-cpu", "2k", 2000),
    ],
)
def test_to_canonical_rounds_up(name, text, canonical):
    assert to_canonical(name, text) == canonical


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("cpu", 500, "500m"),
        ("cpu", 4000, "4"),
        ("memory", 8 * 2**30, "8Gi"),
        ("memory", 1000, "1000"),
        ("koordinator.sh/gpu-core", 100, "100"),
        ("koordinator.sh/gpu-memory", 0, "0"),
        # as slo-controller's midresource plugin writes them (upstream plugin_test.go: MidCPU "20000")
        ("kubernetes.io/batch-cpu", 2500, "2500"),
        ("kubernetes.io/mid-cpu", 2500, "2500"),
        ("kubernetes.io/mid-cpu", 20000, "20000"),
    ],
)
def test_format_quantity_roundtrip(name, value, text):
    assert format_quantity(name, value) == text
    assert to_canonical(name, text) == value


def test_cpusets_name_cpus_linux_numbers_in_ascii_digits():
    from allot_contracts.objects.cpuset import CpusetError, parse_cpuset

    assert parse_cpuset("0-3,8191") == [0, 1, 2, 3, 8191]
    for text in (
        "0-30000000",
        "8192",
        "\u00b2",
        "0-\u00b2",
        "9" * 5000,
    ):  # the first took seconds and gigabytes
        with pytest.raises(CpusetError):
            parse_cpuset(text)


def test_a_64_bit_integer_is_read_as_kubernetes_reads_one():
    from allot_contracts.objects.selectors import int64_text

    assert [int64_text(t) for t in ("7", "-7", str(2**63 - 1), str(-(2**63)))] == [7, -7, 2**63 - 1, -(2**63)]
    assert [int64_text(t) for t in (str(2**63), "\u00b2", "", "-", "1.0", "9" * 5000)] == [None] * 6
