"""Unit parsing: binary and decimal prefixes differ (GiB = 2**30, GB = 1e9), exact ints; and the formats."""
import pytest

from fitplan.errors import SpecError
from fitplan.units import (GB, GiB, count_text, fmt_gb, fmt_gib, fmt_ms, parse_bytes, parse_count, parse_rate,
                           parse_seconds, parse_watts, to_gib)


@pytest.mark.parametrize(("text", "expected"), [
    ("80 GiB", 80 * 2**30), ("192GiB", 192 * GiB), ("0.1 GiB", 107_374_183),   # 0.1 * 2**30 = 107374182.4 -> ceil
    ("141 GB", 141 * GB), ("1.5 TiB", 3 * 2**39), ("512 MiB", 2**29), ("7 B", 7),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80", "80 GIB", "-1 GiB", "", "1e400 GB", "eighty GiB", "80 gib"])
def test_parse_bytes_rejects(text):
    with pytest.raises(SpecError):
        parse_bytes(text, "gpu.memory")


def test_rates_and_times():
    assert parse_rate("450 GB/s") == 450e9
    assert parse_rate("200 Gb/s") == 25e9          # bits: 200e9 / 8
    assert parse_seconds("5 us") == pytest.approx(5e-6)
    with pytest.raises(SpecError):
        parse_rate("0 GB/s")


def test_formats():
    assert fmt_gib(1234.56 * 2**30) == "1,234.56" and fmt_gib(0) == "0.00"
    assert fmt_gb(4.3e9) == "4.3" and fmt_gb(34_634.6e9) == "34,634.6"
    assert fmt_ms(0.0263456) == "26.346"
    assert to_gib(3 * 2**29) == 1.5


@pytest.mark.parametrize(("text", "expected"), [
    ("15T", 15 * 10**12), ("300B", 300 * 10**9), ("1.5T", 1_500 * 10**9), ("2.5M", 2_500_000), ("4K", 4_000),
    ("12345", 12345), (" 7 B ", 7 * 10**9), (300_000_000_000, 300 * 10**9),
])
def test_parse_count_reads_decimal_suffixes(text, expected):
    """--train-tokens: K, M, B, T are 10^3, 10^6, 10^9, 10^12 (token counts are quoted in decimal)."""
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["1.5", "15t", "15 TB", "", "fifteen", "-3T", "1e40T", True, 1.5])
def test_parse_count_rejects(text):
    with pytest.raises(SpecError):
        parse_count(text, "--train-tokens")


def test_count_text_round_trips():
    for n in (15 * 10**12, 1_500 * 10**9, 12345, 1):
        assert parse_count(count_text(n)) == n
    assert count_text(15 * 10**12) == "15T" and count_text(1_500 * 10**9) == "1500B"


def test_parse_watts():
    assert parse_watts("700 W") == 700 and parse_watts("1.2 kW") == 1200 and parse_watts("750W") == 750
    for bad in ("700", "700 w", "0 W", "1 MW"):
        with pytest.raises(SpecError):
            parse_watts(bad, "--gpu-power")
