"""Unit parsing: binary and decimal prefixes differ (GiB = 2**30, GB = 1e9), exact ints; and the formats."""
import pytest

from fitplan.errors import SpecError
from fitplan.units import GB, GiB, fmt_gb, fmt_gib, fmt_ms, parse_bytes, parse_rate, parse_seconds, to_gib


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
