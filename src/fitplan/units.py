"""The only module that parses and prints sizes, rates and times.

Inside fitplan every quantity is a plain number in base units and its name says which
(`_bytes`, `_s`, `_flops`, `_per_s`). Memory capacity uses binary prefixes (GiB = 2**30
bytes); link bandwidth and FLOP rates use decimal prefixes (GB/s = 1e9 bytes/s), as vendor
sheets and nccl-tests do. Strings are parsed with Decimal so "0.1 GiB" is an exact int.
"""
from decimal import Decimal
import re

from fitplan.errors import SpecError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

_TIME_UNITS = {"s": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"), "ns": Decimal("1e-9")}
_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
# A byte count above this is not a GPU memory or a model size anyone plans for (1 EiB).
MAX_BYTES = 2**60
MAX_EXPONENT = 30   # a mantissa's power of ten beyond +-30 is a typo, and Decimal arithmetic on it overflows


def _split(text: str, field: str, example: str):
    if not isinstance(text, str):
        raise SpecError(f"{field}: expected a string such as {example!r}, got {text!r}")
    match = re.fullmatch(r"\s*" + _NUMBER + r"\s*([A-Za-z/]+)\s*", text)
    if not match:
        raise SpecError(f"{field}: cannot read {text!r}; write a number and a unit, e.g. {example!r}")
    try:
        number = Decimal(match.group(1))
        huge = number and not -MAX_EXPONENT <= number.adjusted() <= MAX_EXPONENT
    except ArithmeticError:   # decimal's Overflow / InvalidOperation on an exponent past its limits
        huge = True
    if huge:
        raise SpecError(f"{field}: {text!r} is out of any range fitplan plans for; check the exponent")
    return number, match.group(2)


def parse_bytes(text: str, field: str = "size") -> int:
    """'80 GiB' -> 85899345920. Case-sensitive on purpose: 'GiB' and 'GB' differ by 7%."""
    number, unit = _split(text, field, "80 GiB")
    scale = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB,
             "KB": KB, "kB": KB, "MB": MB, "GB": GB, "TB": TB}.get(unit)
    if scale is None:
        raise SpecError(f"{field}: unknown unit {unit!r} in {text!r}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")
    value = number * scale
    if value > MAX_BYTES:
        raise SpecError(f"{field}: {text!r} is larger than 1 EiB; check the unit")
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def parse_rate(text: str, field: str = "bandwidth") -> float:
    """'450 GB/s' -> 4.5e11 bytes/s. Rates are decimal (GB/s = 1e9 B/s)."""
    number, unit = _split(text, field, "450 GB/s")
    scale = {"B/s": 1, "KB/s": KB, "MB/s": MB, "GB/s": GB, "TB/s": TB, "Gb/s": GB / 8}.get(unit)
    if scale is None:
        raise SpecError(f"{field}: unknown unit {unit!r} in {text!r}; use B/s, MB/s, GB/s, TB/s or Gb/s")
    value = float(number) * scale
    if value <= 0:
        raise SpecError(f"{field}: {text!r} must be positive")
    return value


def parse_seconds(text: str, field: str = "latency") -> float:
    """'5 us' -> 5e-6 seconds."""
    number, unit = _split(text, field, "5 us")
    scale = _TIME_UNITS.get(unit)
    if scale is None:
        raise SpecError(f"{field}: unknown unit {unit!r} in {text!r}; use s, ms, us or ns")
    return float(number * scale)


def parse_watts(text: str, field: str = "power") -> float:
    """'700 W' -> 700.0, '1.2 kW' -> 1200.0: a GPU's electrical power."""
    number, unit = _split(text, field, "700 W")
    scale = {"W": 1, "kW": KB}.get(unit)
    if scale is None:
        raise SpecError(f"{field}: unknown unit {unit!r} in {text!r}; use W or kW")
    value = float(number * scale)
    if value <= 0:
        raise SpecError(f"{field}: {text!r} must be positive")
    return value


COUNT_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}   # decimal: 15T tokens = 15e12


def parse_count(text, field: str = "count") -> int:
    """'15T' -> 15_000_000_000_000, '300B' -> 3e11 as an int, '2.5M' -> 2_500_000; a whole
    number (an int, or digits as text) as it is. Suffixes are decimal (K, M, B, T), as token
    counts are quoted; the count must come out whole."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise SpecError(f"{field}: expected a count such as '15T' or 300000000000, got {text!r}")
    match = re.fullmatch(r"\s*" + _NUMBER + r"\s*([KMBT]?)\s*", text)
    if not match:
        raise SpecError(f"{field}: cannot read {text!r}; write a whole number, or a number with K, M, B or T "
                        f"(thousand, million, billion, trillion), e.g. '15T'")
    try:
        number = Decimal(match.group(1))
        huge = number and not -MAX_EXPONENT <= number.adjusted() <= MAX_EXPONENT
    except ArithmeticError:
        huge = True
    if huge:
        raise SpecError(f"{field}: {text!r} is out of any range fitplan plans for; check the exponent")
    value = number * COUNT_SUFFIXES.get(match.group(2), 1)
    if value != value.to_integral_value():
        raise SpecError(f"{field}: {text!r} is not a whole number")
    return int(value)


def count_text(count: int) -> str:
    """A count with the largest decimal suffix that divides it exactly: 15000000000000 -> '15T',
    1500000000000 -> '1500B', 12345 -> '12345'; parse_count reads it back."""
    for suffix, scale in sorted(COUNT_SUFFIXES.items(), key=lambda kv: -kv[1]):
        if count and count % scale == 0:
            return f"{count // scale}{suffix}"
    return str(count)


def fmt_count(count) -> str:
    """A large count for reading: 15e12 -> '15T', 3e11 -> '300B', 2.5e6 -> '2.5M'."""
    for suffix, scale in sorted(COUNT_SUFFIXES.items(), key=lambda kv: -kv[1]):
        if count >= scale:
            return f"{count / scale:,.4g}{suffix}"
    return f"{count:,}"


def to_gib(num_bytes) -> float:
    """Bytes as GiB, a plain number (a chart's axis)."""
    return num_bytes / GiB


def fmt_gib(num_bytes) -> str:
    """Bytes as GiB with two decimals and thousands separators: 1325604929536 -> '1,234.56'."""
    return f"{num_bytes / GiB:,.2f}"


def fmt_gb(num_bytes) -> str:
    """Bytes as decimal GB (traffic, as link rates count it) with one decimal: 4.3e9 -> '4.3'."""
    return f"{num_bytes / GB:,.1f}"


def fmt_rate(bytes_per_s) -> str:
    """A link rate in decimal GB/s, shortest form: 4.5e11 -> '450 GB/s'."""
    return f"{bytes_per_s / GB:g} GB/s"


def fmt_ms(seconds) -> str:
    """Seconds as milliseconds with three decimals: 0.0263456 -> '26.346'."""
    return f"{seconds * 1e3:,.3f}"


UNIT_PARSERS = {"size": parse_bytes, "rate": parse_rate, "seconds": parse_seconds, "power": parse_watts,
                "count": parse_count}
