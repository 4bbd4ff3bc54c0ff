"""Spec files: model, training, GPU and cluster in TOML or JSON, and back to TOML.

A file may hold any of the tables [model] (with [model.moe], [model.mla]), [training]
(with [training.recipe] and [training.recipe.moments], or recipe = "a preset name"),
[recipe], [gpu] (with [gpu.intra_node], [gpu.inter_node]) and [cluster] (gpu = "a preset
name", or the file's own [gpu] table); JSON nests the same way. Every key is a declared
field (fitplan.specs.declare): this module reads and writes each as its declaration says,
and docs/spec-files.md, every key with its kind, unit, default and flag, is generated from
the same declarations (`reference_markdown`, checked by tests/unit/test_fields.py).

Units: sizes, bandwidths and latencies are strings with a unit, parsed by fitplan.units; a
bare number is rejected. Keys ending in _bytes are bytes per element or per parameter
(act_bytes = 2, weights_bytes = 2), and FLOP rates carry their unit in the key
(peak_bf16_flops_per_s), so those are bare numbers. Keys are strict: an unknown key is an
error with a "did you mean" suggestion. Omitted optional keys take the dataclass default.

`dump_toml` writes the same layout with every field spelled out, so what
`fitplan presets show NAME --toml` prints loads back equal (tests/unit/test_load.py).
This module and files/hf.py are the only places that read spec files; they sit outside the pure core.
"""
from __future__ import annotations

from dataclasses import MISSING
import difflib
from enum import Enum
from pathlib import Path

from fitplan import toml_text
from fitplan.errors import SpecError
from fitplan.files import parse_json, parse_toml, read_small_text
from fitplan.record import record
from fitplan.specs.cluster import ClusterSpec, GpuSpec
from fitplan.specs.declare import default_of, enum_value, file_key, spec_fields
from fitplan.specs.model import ModelSpec
from fitplan.specs.training import Recipe, TrainingSpec
from fitplan.units import (GB, GiB, KB, KiB, MB, MiB, TB, TiB, count_text, parse_bytes, parse_count, parse_rate,
                           parse_seconds, parse_watts)

TABLES = ("model", "training", "recipe", "gpu", "cluster")


@record(slots=True, kw_only=True)
class SpecFile:
    """Whatever tables one file holds; absent ones are None."""
    model: ModelSpec | None = None
    training: TrainingSpec | None = None
    recipe: Recipe | None = None
    gpu: GpuSpec | None = None
    cluster: ClusterSpec | None = None


# ---------------------------------------------------------------- reading

def read_document(path) -> tuple[dict, str]:
    """The parsed top level of a .toml or .json spec file, and the name errors use."""
    path = Path(path)
    where = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise SpecError(f"{where}: unknown spec file type {path.suffix or '(none)'!r}; use .toml or .json")
    text = read_small_text(path, where)
    return parse_document(text, fmt=suffix[1:], where=where), where


def parse_document(text: str, *, fmt: str = "toml", where: str = "<spec>") -> dict:
    if fmt == "toml":
        data = parse_toml(text, where)
    elif fmt == "json":
        data = parse_json(text, where)
        if not isinstance(data, dict):
            raise SpecError(f"{where}: the top level must be an object with tables such as \"model\", "
                            f"got {type(data).__name__}")
    else:
        raise SpecError(f"{where}: unknown spec format {fmt!r}; use toml or json")
    for name, value in data.items():
        if name not in TABLES:
            raise SpecError(f"{where}: unknown table {name!r}{_suggest(name, TABLES)}")
        if not isinstance(value, dict):
            raise SpecError(f"{where}: {name} must be a table ([{name}] in TOML, an object in JSON), got {value!r}")
    return data


def specs_from_document(data: dict, *, where: str = "<spec>") -> SpecFile:
    gpu = gpu_from_table(data["gpu"], where=where) if "gpu" in data else None
    return SpecFile(
        model=model_from_table(data["model"], where=where) if "model" in data else None,
        training=training_from_table(data["training"], where=where) if "training" in data else None,
        recipe=recipe_from_table(data["recipe"], where=where) if "recipe" in data else None,
        gpu=gpu,
        cluster=cluster_from_table(data["cluster"], gpu=gpu, where=where) if "cluster" in data else None)


def load_specs(path) -> SpecFile:
    data, where = read_document(path)
    return specs_from_document(data, where=where)


def _load(path, table: str):
    data, where = read_document(path)
    if table not in data:
        raise SpecError(f"{where}: no [{table}] table; add one (fitplan presets show NAME --toml prints an example)")
    return data, where


def load_model(path) -> ModelSpec:
    data, where = _load(path, "model")
    return model_from_table(data["model"], where=where)


def load_training(path) -> TrainingSpec:
    data, where = _load(path, "training")
    return training_from_table(data["training"], where=where)


def load_recipe(path) -> Recipe:
    data, where = _load(path, "recipe")
    return recipe_from_table(data["recipe"], where=where)


def load_gpu(path) -> GpuSpec:
    data, where = _load(path, "gpu")
    return gpu_from_table(data["gpu"], where=where)


def load_cluster(path) -> ClusterSpec:
    data, where = _load(path, "cluster")
    gpu = gpu_from_table(data["gpu"], where=where) if "gpu" in data else None
    return cluster_from_table(data["cluster"], gpu=gpu, where=where)


class _Table:
    """Typed, strict reads from one table. Every getter records its key, so `done` knows
    the declared keys and can name the closest one to a typo."""

    def __init__(self, data, path: str, where: str):
        if not isinstance(data, dict):
            raise SpecError(f"{where}: {path} must be a table, got {data!r}")
        self.data, self.path, self.where, self.keys = data, path, where, []

    def _get(self, key: str, required: bool, hint: str):
        self.keys.append(key)
        value = self.data.get(key)   # JSON null counts as absent
        if value is None and required:
            typo = difflib.get_close_matches(key, [k for k in self.data if k not in self.keys], n=1, cutoff=0.6)
            if typo:   # a misspelt key reads better as such than as a missing one
                raise SpecError(f"{self.where}: unknown key '{self.path}.{typo[0]}' (did you mean "
                                f"'{self.path}.{key}'?)")
            raise SpecError(f"{self.where}: missing key '{self.path}.{key}'; add it ({hint})")
        return value

    def _fail(self, key: str, what: str, value) -> SpecError:
        return SpecError(f"{self.where}: {self.path}.{key} must be {what}, got {value!r}")

    def int(self, key: str, *, default=MISSING):
        value = self._get(key, default is MISSING, "a whole number")
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, "a whole number", value)
        return value

    def number(self, key: str, *, default=MISSING):
        value = self._get(key, default is MISSING, "a number")
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(key, "a number", value)
        return value

    def str(self, key: str, *, default=MISSING):
        value = self._get(key, default is MISSING, "a string in quotes")
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._fail(key, "a string in quotes", value)
        return value

    def bool(self, key: str, *, default=MISSING):
        value = self._get(key, default is MISSING, "true or false")
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def enum(self, key: str, kind: type[Enum], *, default=MISSING):
        choices = ", ".join(str(k.value) for k in kind)
        value = self._get(key, default is MISSING, f"one of {choices}")
        if value is None:
            return default
        try:
            return kind(value)
        except ValueError:
            raise SpecError(f"{self.where}: {self.path}.{key} = {value!r} is not one of {choices}") from None

    def _unit(self, key: str, parse, example: str, default):
        value = self._get(key, default is MISSING, f'a string with a unit, e.g. {key} = "{example}"')
        if value is None:
            return default
        if not isinstance(value, str):
            raise SpecError(f"{self.where}: {self.path}.{key} = {value!r} has no unit; write it as a string "
                            f"with a unit, e.g. {key} = \"{example}\"")
        return parse(value, f"{self.where}: {self.path}.{key}")

    def size(self, key: str, *, default=MISSING) -> int:
        return self._unit(key, parse_bytes, "80 GiB", default)

    def rate(self, key: str, *, default=MISSING) -> float:
        return self._unit(key, parse_rate, "450 GB/s", default)

    def seconds(self, key: str, *, default=MISSING) -> float:
        return self._unit(key, parse_seconds, "5 us", default)

    def power(self, key: str, *, default=MISSING) -> float:
        return self._unit(key, parse_watts, "700 W", default)

    def count(self, key: str, *, default=MISSING) -> int:
        """A whole number, or a string with a decimal suffix: 300000000000 or "300B"."""
        value = self._get(key, default is MISSING, f'a whole number or a string such as {key} = "15T"')
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise self._fail(key, 'a whole number or a string such as "15T"', value)
        return parse_count(value, f"{self.where}: {self.path}.{key}")

    def table(self, key: str) -> "_Table":
        return _Table(self._get(key, True, f"a [{self.path}.{key}] table"), f"{self.path}.{key}", self.where)

    def done(self) -> None:
        for key in self.data:
            if key not in self.keys:
                raise SpecError(f"{self.where}: unknown key '{self.path}.{key}'"
                                f"{_suggest(key, self.keys, prefix=self.path + '.')}")


def _suggest(name: str, known, prefix: str = "") -> str:
    # A name the user began ("h100" of "h100-80gb") beats a near spelling ("h800").
    close = ([k for k in known if name and k.startswith(name)]
             or difflib.get_close_matches(name, list(known), n=1, cutoff=0.6))
    if close:
        return f" (did you mean '{prefix}{close[0]}'?)"
    return f"; known keys: {', '.join(known)}"


def _build(cls, where: str, **kwargs):
    """Construct a spec; its own validation errors get the file name in front."""
    try:
        return cls(**kwargs)
    except SpecError as err:
        raise SpecError(f"{where}: {err}") from None


def _is_float(f) -> bool:
    return f.type in (float, float | None)


def read_spec(cls, t: _Table, *, defaults: dict | None = None, gpu: GpuSpec | None = None):
    """A spec of class cls from one table, every field read as its declaration says
    (fitplan.specs.declare). `defaults` replace dataclass defaults that depend on another
    spec (a cluster's node size and reserve default to its GPU's); `gpu` is the file's own
    [gpu] table, for a cluster."""
    defaults = defaults or {}
    kw = {}
    for f, d in spec_fields(cls):
        default = defaults.get(f.name, default_of(f))
        value = _READ[d.kind](t, file_key(f), d, default, gpu)
        kw[f.name] = float(value) if _is_float(f) and isinstance(value, int) else value
    t.done()
    return _build(cls, t.where, **kw)


def _read_choice(t: _Table, key: str, d, default, gpu):
    return (t.int if all(isinstance(c, int) for c in d.choices) else t.str)(key, default=default)


def _read_table(t: _Table, key: str, d, default, gpu):
    if default is not MISSING and t.data.get(key) is None:
        t._get(key, False, "")
        return default
    return read_spec(d.table, t.table(key))


def _read_moments(t: _Table, key: str, d, default, gpu):
    moments = t.table(key)
    return tuple((name, moments.number(name)) for name in list(moments.data))


def _read_recipe(t: _Table, key: str, d, default, gpu):
    from fitplan.presets import RECIPES   # presets import the specs; import late to keep specs first
    raw = t._get(key, True, f'a preset name such as {key} = "mixed-adam", or a [{t.path}.{key}] table')
    if isinstance(raw, str):
        if raw not in RECIPES:
            raise SpecError(f"{t.where}: {t.path}.{key} = {raw!r} is not a precision preset{_suggest(raw, RECIPES)}")
        return RECIPES[raw]
    if isinstance(raw, dict):
        return read_spec(Recipe, _Table(raw, f"{t.path}.{key}", t.where))
    raise SpecError(f"{t.where}: {t.path}.{key} must be a preset name or a table, got {raw!r}")


def _read_gpu(t: _Table, key: str, d, default, gpu):
    from fitplan.presets import GPUS
    name = t.str(key, default=None)
    if name is not None and gpu is not None:
        raise SpecError(f"{t.where}: {t.path}.{key} = {name!r} and a [gpu] table both name the GPU; keep one")
    if name is not None:
        if name not in GPUS:
            raise SpecError(f"{t.where}: {t.path}.{key} = {name!r} is not a GPU preset{_suggest(name, GPUS)}")
        return GPUS[name]
    if gpu is None:
        raise SpecError(f"{t.where}: the cluster has no GPU; add cluster.gpu = \"h100-80gb\" (a preset) or a [gpu] table")
    return gpu


_READ = {
    "int": lambda t, key, d, default, gpu: t.int(key, default=default),
    "number": lambda t, key, d, default, gpu: t.number(key, default=default),
    "str": lambda t, key, d, default, gpu: t.str(key, default=default),
    "bool": lambda t, key, d, default, gpu: t.bool(key, default=default),
    "enum": lambda t, key, d, default, gpu: t.enum(key, d.enum, default=default),
    "choice": _read_choice,
    "size": lambda t, key, d, default, gpu: t.size(key, default=default),
    "rate": lambda t, key, d, default, gpu: t.rate(key, default=default),
    "seconds": lambda t, key, d, default, gpu: t.seconds(key, default=default),
    "power": lambda t, key, d, default, gpu: t.power(key, default=default),
    "count": lambda t, key, d, default, gpu: t.count(key, default=default),
    "table": _read_table, "moments": _read_moments, "recipe": _read_recipe, "gpu": _read_gpu,
}


def model_from_table(data: dict, *, where: str = "<spec>") -> ModelSpec:
    return read_spec(ModelSpec, _Table(data, "model", where))


def recipe_from_table(data: dict, *, where: str = "<spec>", path: str = "recipe") -> Recipe:
    return read_spec(Recipe, _Table(data, path, where))


def training_from_table(data: dict, *, where: str = "<spec>") -> TrainingSpec:
    return read_spec(TrainingSpec, _Table(data, "training", where))


def gpu_from_table(data: dict, *, where: str = "<spec>") -> GpuSpec:
    return read_spec(GpuSpec, _Table(data, "gpu", where))


def cluster_from_table(data: dict, *, gpu: GpuSpec | None = None, where: str = "<spec>") -> ClusterSpec:
    """`gpu` is the [gpu] table of the same file, already read, if it has one. The node size
    and the reserve default to the GPU's."""
    t = _Table(data, "cluster", where)
    chosen = _read_gpu(t, "gpu", None, None, gpu)
    t.keys.remove("gpu")     # read again, in declaration order, by read_spec
    return read_spec(ClusterSpec, t, gpu=gpu, defaults={"gpus_per_node": chosen.gpus_per_node,
                                                        "reserve_bytes": chosen.default_reserve_bytes})


# ---------------------------------------------------------------- writing

_SIZE_UNITS = (("TiB", TiB), ("TB", TB), ("GiB", GiB), ("GB", GB), ("MiB", MiB), ("MB", MB), ("KiB", KiB), ("KB", KB))
_RATE_UNITS = (("TB/s", TB), ("GB/s", GB), ("MB/s", MB), ("KB/s", KB))
_TIME_UNITS = (("s", 1), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))
_POWER_UNITS = (("kW", 1e3), ("W", 1))


def size_text(num_bytes: int) -> str:
    """The largest unit that divides the size exactly: 80 GiB, 141 GB, 12345 B."""
    for unit, scale in _SIZE_UNITS:
        if num_bytes and num_bytes % scale == 0:
            return f"{num_bytes // scale} {unit}"
    return f"{num_bytes} B"


def _mantissas(value: float):
    """Shortest first, so 250e-9 s is written "250 ns", not "250.00000000000003 ns"."""
    for digits in (3, 6, 9, 12, 15):
        yield f"{value:.{digits}g}"
    yield repr(value).removesuffix(".0")


def _scaled_text(value: float, units, parse, base: str) -> str:
    """A unit string that `parse` reads back to exactly `value`; repr in the base unit if no
    shorter one does (repr round-trips a float)."""
    if value == 0:
        return f"0 {base}"
    for unit, scale in units:
        mantissa = value / scale
        if not 1 <= abs(mantissa) < 1e6:
            continue
        for text in _mantissas(mantissa):
            candidate = f"{text} {unit}"
            if "e" not in text and parse(candidate) == value:
                return candidate
    return f"{value!r} {base}"


def rate_text(bytes_per_s: float) -> str:
    return _scaled_text(bytes_per_s, _RATE_UNITS, parse_rate, "B/s")


def seconds_text(seconds: float) -> str:
    return _scaled_text(seconds, _TIME_UNITS, parse_seconds, "s")


def power_text(watts: float) -> str:
    return _scaled_text(watts, _POWER_UNITS, parse_watts, "W")


def _count_value(count: int):
    """"15T" where a suffix divides the count exactly, else the whole number itself."""
    text = count_text(count)
    return count if text == str(count) else text


UNIT_TEXT = {"size": size_text, "rate": rate_text, "seconds": seconds_text, "power": power_text,
             "count": _count_value}


def _value_text(d, value):
    if d.kind in UNIT_TEXT:
        return UNIT_TEXT[d.kind](value)
    return enum_value(value)


def spec_toml(spec, header: str, *, prefix: str = "") -> str:
    """One spec as a TOML table (and its nested tables after it), every declared field in
    declaration order: units in values, a comment with the help text above each key, and
    absent optional fields named in a comment."""
    items, comments, nested = [], {}, []
    for f, d in spec_fields(type(spec)):
        key, value = file_key(f), getattr(spec, f.name)
        if d.kind == "gpu":
            continue     # a cluster's GPU is the file's [gpu] table (dump_toml)
        if value is None:
            if d.omitted:
                comments[key] = f"omitted: {d.omitted}"
        elif d.kind in ("table", "recipe"):
            nested.append(spec_toml(value, f"{header}.{key}", prefix=prefix + d.prefix))
        elif d.kind == "moments":
            nested.append(toml_text.table(f"{header}.{key}", list(value)))
        else:
            items.append((key, _value_text(d, value)))
            if d.help:
                comments[key] = (f"--{prefix}{d.flag[2:]}: " if d.flag else "") + d.help
    return "\n".join([toml_text.table(header, items, comments), *nested])


def dump_toml(*specs) -> str:
    """One spec file holding each given spec (ModelSpec, TrainingSpec, Recipe, GpuSpec,
    ClusterSpec; at most one of each). A ClusterSpec brings its GPU as the [gpu] table."""
    headers = {ModelSpec: "model", TrainingSpec: "training", GpuSpec: "gpu", ClusterSpec: "cluster", Recipe: "recipe"}
    parts, kinds = [], set()
    cluster_gpu = next((s.gpu for s in specs if isinstance(s, ClusterSpec)), None)
    for spec in specs:
        if type(spec) not in headers:
            raise TypeError(f"dump_toml cannot write {type(spec).__name__}")
        if type(spec) in kinds:
            raise ValueError(f"dump_toml got two {type(spec).__name__}s; a spec file holds one of each")
        if isinstance(spec, GpuSpec) and cluster_gpu is not None:
            if spec != cluster_gpu:
                raise ValueError("dump_toml got a GpuSpec that differs from the ClusterSpec's GPU")
            continue
        kinds.add(type(spec))
        parts.append(spec_toml(spec, headers[type(spec)]))
        if isinstance(spec, ClusterSpec):
            parts.append(spec_toml(spec.gpu, "gpu"))
    return "\n".join(parts)


# ---------------------------------------------------------------- the reference page

_KIND_TEXT = {"int": "whole number", "number": "number", "str": "string", "bool": "true / false",
              "size": 'size string ("80 GiB")', "rate": 'rate string ("450 GB/s")', "seconds": 'time string ("3 us")',
              "power": 'power string ("700 W")', "count": 'whole number, or a string with K, M, B or T ("15T")',
              "moments": "table: moment name -> bytes per parameter", "recipe": "preset name or table",
              "gpu": "GPU preset name (or the file's [gpu] table)", "table": "table"}


def _rows(cls, header: str, prefix: str = ""):
    out, nested = [], []
    for f, d in spec_fields(cls):
        key = file_key(f)
        if d.kind in ("table", "recipe"):
            nested.append((d.table, f"{header}.{key}", prefix + d.prefix))
            if d.kind == "table":
                continue
        kind = ("one of " + ", ".join(f"`{c}`" for c in d.choice_values)) if d.kind in ("enum", "choice") \
            else _KIND_TEXT[d.kind]
        default = default_of(f)
        default_text = "required" if default is MISSING else (
            f"omitted: {d.omitted}" if default is None else f"`{toml_text.value(enum_value(default))}`")
        flag = f"`--{prefix}{d.flag[2:]}`" + (f" / `{d.off_flag}`" if d.off_flag else "") + (
            f" (in {d.unit}: x {d.scale:g})" if d.scale != 1 else "") if d.flag else f"none: {d.file_only}"
        out.append(f"| `{key}` | {kind} | {default_text} | {flag} | {d.help} |")
    blocks = [f"## [{header}]", "", "| key | value | default | flag | meaning |", "|---|---|---|---|---|", *out, ""]
    for table, name, p in nested:
        blocks += _rows(table, name, p)
    return blocks


def reference_markdown() -> str:
    """docs/spec-files.md: every key of every table, generated from the declarations."""
    lines = ["# Spec files", "",
             "Generated from the field declarations (`src/fitplan/specs/declare.py`) by "
             "`python tools/spec_reference.py`; `tests/unit/test_fields.py` fails when it is out of date.", "",
             "A spec file is TOML (or JSON with the same nesting) holding any of the tables below. "
             "`fitplan presets show NAME --toml` prints a complete example that loads back equal. "
             "Load one with `--spec FILE`; a flag overrides the file, and the file overrides a preset. "
             "Keys are strict: an unknown key is an error that names the closest known one. "
             "A `[cluster]` names its GPU with `gpu = \"preset\"` or uses the file's own `[gpu]` table; "
             "its `gpus_per_node` and `reserve` default to the GPU's.", ""]
    for cls, header in ((ModelSpec, "model"), (TrainingSpec, "training"), (GpuSpec, "gpu"), (ClusterSpec, "cluster")):
        lines += _rows(cls, header)
    return "\n".join(lines).rstrip("\n") + "\n"
