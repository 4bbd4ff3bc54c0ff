"""Writing TOML by hand: values, keys and tables, with no dependency.

Python 3.11 reads TOML (tomllib) but cannot write it. fitplan writes only flat tables of
strings, booleans, ints, floats and lists of those, so a few lines cover it. Every
function returns text; tests read the text back with tomllib.
"""
import math
import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def string(text: str) -> str:
    """A TOML basic string. Control characters (and DEL, which TOML forbids raw) are escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else string(name)


def number(value: int | float) -> str:
    """Ints get digit separators (175_000_000_000); large floats are written as m e k when
    that reads back to the very same float (989e12), otherwise as repr, which round-trips."""
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if abs(value) >= 1e6:
        for exp in (12, 9, 6):
            if abs(value) < 10**exp:
                continue
            mantissa = repr(value / 10**exp)
            if mantissa.endswith(".0"):
                mantissa = mantissa[:-2]
            if "e" in mantissa:
                continue
            text = f"{mantissa}e{exp}"
            if float(text) == value:
                return text
    return repr(value)


def value(obj) -> str:
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, (int, float)):
        return number(obj)
    if isinstance(obj, str):
        return string(obj)
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(value(item) for item in obj) + "]"
    raise TypeError(f"cannot write {type(obj).__name__} as a TOML value: {obj!r}")


def table(header: str, items, comments: dict | None = None) -> str:
    """`[header]` then `key = value` lines, in the order given. `comments` maps a key to a
    comment written on the line above it (omitted keys can be explained the same way)."""
    comments = comments or {}
    items = list(items)
    lines = [f"[{header}]"] if header else []
    for name, item in items:
        if name in comments:
            lines.append(f"# {comments[name]}")
        lines.append(f"{key(name)} = {value(item)}")
    present = {name for name, _ in items}
    for name, note in comments.items():
        if name not in present:
            lines.append(f"# {name}: {note}")
    return "\n".join(lines) + "\n"
