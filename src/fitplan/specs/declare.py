"""One declaration per field.

Every field a user can set is declared once, on its dataclass field, as metadata: its kind
(how a value is read and written), its CLI flag, its spec-file key, unit, range, help text
and an example value. Everything that reads or writes a field is generated from that one
declaration:

  - the command line's flags (fitplan.cli),
  - the spec-file reader and writer (fitplan.files.load), `presets show --toml` included,
  - the web API's request schema and validation, and the form schema the page reads
    (fitplan.web.schema, GET /api/fields),

and tests/unit/test_fields.py walks every declared field through all three.

A flag's request key, the name the JSON API uses, is the flag without its dashes, with
'-' turned into '_' (--kv-heads -> kv_heads). A field without a flag says why (`file_only`).
"""
import functools
from dataclasses import MISSING, field, fields
from enum import Enum

from fitplan.record import record

# How a value is read (from a spec file, a flag or a JSON request) and written back.
KINDS = ("int", "number", "str", "bool", "enum", "choice", "size", "rate", "seconds", "power", "count", "table",
         "moments", "recipe", "gpu", "ints")
# strings with a unit: "80 GiB", "450 GB/s", "3 us", "700 W"
UNIT_KINDS = {"size": "B", "rate": "B/s", "seconds": "s", "power": "W"}
# kind count: a whole number, or one with a decimal suffix ("15T" tokens; fitplan.units.parse_count)


@record(slots=True, kw_only=True)
class Decl:
    kind: str
    help: str = ""
    flag: str | None = None        # the CLI flag; None: spec files only (file_only says why)
    off_flag: str | None = None    # bool: the flag that sets it false (--untied-embeddings)
    key: str | None = None         # the spec-file key; default: the field's name
    group: str = ""                # the CLI help group and the page's form section
    unit: str = ""                 # for numbers whose unit is not in their kind (TFLOP/s, tokens)
    scale: float = 1               # the field holds the flag's value times this (--peak-tflops 989 -> 989e12)
    lo: float | str | None = None  # the physically meaningful range, checked for every front end: in the
    hi: float | str | None = None  # flag's unit, or a string with a unit for sizes/rates/times ("1 MB/s")
    choices: tuple = ()            # kind choice: the allowed values
    enum: type | None = None       # kind enum: the Enum class
    table: type | None = None      # kind table (and recipe, gpu): the nested dataclass
    prefix: str = ""               # kind table: put before the nested fields' flags (intra-node-)
    example: object = None         # a valid, non-default value: the round-trip test and the page's hint
    omitted: str = ""              # the writer's comment when an optional value is absent
    file_only: str = ""            # why this field has no flag
    api: bool = True               # False: the command line only (a path on this machine)

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.flag is None or self.flag.startswith("--"), self.flag
        assert self.kind != "enum" or self.enum is not None
        assert (self.kind in ("table", "recipe", "gpu")) == (self.table is not None)

    @property
    def choice_values(self) -> tuple:
        if self.kind == "enum":
            return tuple(e.value for e in self.enum)
        return self.choices


@functools.cache
def bounds(d: Decl) -> tuple:
    """(lo, hi) in the field's own unit (bytes, bytes/s, s; a scaled flag's value times its
    scale), None where open. Cached: every spec's construction reads them (check_ranges)."""
    from fitplan.units import UNIT_PARSERS
    parse = UNIT_PARSERS.get(d.kind)
    if parse is not None:
        return tuple(None if b is None else parse(b) for b in (d.lo, d.hi))
    return tuple(None if b is None else b * d.scale for b in (d.lo, d.hi))


def field_bounds(cls, name: str) -> tuple:
    """(lo, hi) of one declared field of cls, in the field's unit."""
    return bounds(next(d for f, d in spec_fields(cls) if f.name == name))


def range_text(d: Decl) -> str:
    return f"{num_text(d.lo)} to {num_text(d.hi)}" if d.hi is not None else f">= {num_text(d.lo)}"


def out_of_range(d: Decl, name: str, value, shown=None) -> str | None:
    """The one-line complaint when value (in the field's unit) is outside the declared range,
    naming `name` (a flag, or a spec field); None when it is inside."""
    if _outside(value, *bounds(d)):
        shown = num_text(value / d.scale if d.scale != 1 else value) if shown is None else shown
        return f"{name} = {shown} is out of range; give {range_text(d)}"
    return None


def _outside(value, lo, hi) -> bool:
    """Whether a number (not a bool; anything else passes) is NaN or outside [lo, hi], an open end being None."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and (value != value or (lo is not None and value < lo) or (hi is not None and value > hi)))


MAX_TEXT = 2000   # characters in a name or a source note


def check_ranges(obj, owner: str) -> None:
    """Every declared range and choice of a spec, on construction: spec files and code get the
    same bounds as the flags (fitplan.request.checked). Texts (names, sources) must be printable
    one-liners: a name reaches the exported shell and Python files, where a line break would
    start a command."""
    for name, d, test, lo, hi in _checks(type(obj)):
        value = getattr(obj, name)
        if test == "str":
            if isinstance(value, str) and (not value.isprintable() or len(value) > MAX_TEXT):
                from fitplan.errors import SpecError
                raise SpecError(f"{owner}.{name} must be printable text without line breaks or control "
                                f"characters, at most {MAX_TEXT:,} characters; got {value[:40]!r}")
        elif test == "choice":
            if value is not None and value not in d.choices:
                from fitplan.errors import SpecError
                raise SpecError(f"{owner}.{name} must be one of {', '.join(map(str, d.choices))}, got {value!r}")
        else:
            for item in _flat(value):
                if _outside(item, lo, hi):   # out_of_range's test, on the bounds _checks read once
                    from fitplan.errors import SpecError
                    raise SpecError(out_of_range(d, f"{owner}.{name}", item))


@functools.cache
def _checks(cls) -> tuple:
    """(field name, Decl, test, lo, hi) for each declared field of cls that check_ranges tests: "str"
    (printable), "choice" (one of its choices) or "range" (within bounds(d)). Cached per class: a spec's
    construction walks them, and hashing a Decl for bounds' cache on every field cost more than the test."""
    out = []
    for f, d in spec_fields(cls):
        if d.kind == "choice":   # its choices are its range
            out.append((f.name, d, "choice", None, None))
            continue
        if d.kind == "str":
            out.append((f.name, d, "str", None, None))
        if d.lo is not None or d.hi is not None:   # numbers only: the test passes over anything else
            out.append((f.name, d, "range", *bounds(d)))
    return tuple(out)


def _flat(value):
    if isinstance(value, tuple):   # recipe moments: (name, bytes) pairs
        return [v for item in value for v in (item[1:] if isinstance(item, tuple) else (item,))]
    return [value]


def num_text(x) -> str:
    if isinstance(x, str):
        return x
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def declared(kind: str, *, default=MISSING, **kw):
    """A dataclass field carrying its declaration: `num_layers: int = declared("int", flag=...)`."""
    return field(default=default, metadata={"decl": Decl(kind=kind, **kw)})


def decl_of(f) -> Decl:
    return f.metadata["decl"]


@functools.cache
def spec_fields(cls) -> tuple:
    """(dataclass field, Decl) for every declared field of cls, in declaration order. Cached:
    every spec's construction walks them (check_ranges)."""
    return tuple((f, decl_of(f)) for f in fields(cls) if "decl" in f.metadata)


def file_key(f) -> str:
    return decl_of(f).key or f.name


def default_of(f):
    return f.default   # MISSING when the field has none


def request_key(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


@record(slots=True)
class Flagged:
    """One flag: where its value lands (a path of field names from a root spec), its
    declaration and the flag as the CLI spells it (a nested table's prefix applied)."""
    path: tuple[str, ...]
    decl: Decl
    flag: str
    off_flag: str | None
    required: bool = False     # an option without a default (export's --format); spec fields never are

    @property
    def key(self) -> str:
        return request_key(self.flag)

    @property
    def off_key(self) -> str | None:
        return None if self.off_flag is None else request_key(self.off_flag)


def flagged(cls, root: str, *, prefix: str = "", path: tuple[str, ...] = ()) -> list[Flagged]:
    """Every flag that sets a field of cls or of its nested tables, in declaration order."""
    out = []
    for f, d in spec_fields(cls):
        here = path + (f.name,)
        if d.flag is not None:
            out.append(Flagged((root, *here), d, "--" + prefix + d.flag[2:], d.off_flag))
        if d.table is not None:   # a nested table, or a preset name whose fields can be set one by one
            out += flagged(d.table, root, prefix=prefix + d.prefix, path=here)
    return out


def enum_value(value):
    return value.value if isinstance(value, Enum) else value
