"""Spec files: model, training, GPU and cluster in TOML or JSON, and back to TOML.

The one layout (a file may hold any of these tables; JSON nests the same way):

  [model]                    ModelSpec fields by name: counts are bare integers; mlp, norm
                             and position are strings; head_dim, published_params optional
  [training]                 seq_len, global_batch (optional), act_bytes, dropout, and
                             recipe = "mixed-adam" (a preset name) or a [training.recipe] table
  [training.recipe]          name, weights_bytes, grads_bytes, master_bytes, compute,
                             description, source
  [training.recipe.moments]  one key per optimizer moment, in bytes per parameter
  [recipe]                   a recipe on its own, same keys (and [recipe.moments])
  [gpu]                      name, memory = "80 GiB", peak_bf16_flops_per_s = 989e12,
                             peak_fp8_flops_per_s (omit: none), efficiency, efficiency_h0
                             (omit: 0, constant efficiency), gpus_per_node,
                             default_reserve = "5 GiB", source
  [gpu.intra_node], [gpu.inter_node]   name, bandwidth = "450 GB/s", latency = "3 us"
  [cluster]                  gpu = "h100-80gb" (a preset; omit it to use this file's [gpu]),
                             num_gpus, gpus_per_node (omit: the GPU's), reserve = "5 GiB"
                             (omit: the GPU's default_reserve)

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

from dataclasses import MISSING, dataclass, fields
import difflib
from enum import Enum
import json
from pathlib import Path
import tomllib

from fitplan import toml_text
from fitplan.errors import SpecError
from fitplan.specs.cluster import ClusterSpec, GpuSpec, LinkSpec
from fitplan.specs.model import MlaSpec, Mlp, ModelSpec, MoeSpec, Norm, Position
from fitplan.specs.training import Recipe, TrainingSpec
from fitplan.units import GB, GiB, KB, KiB, MB, MiB, TB, TiB, parse_bytes, parse_rate, parse_seconds

TABLES = ("model", "training", "recipe", "gpu", "cluster")


@dataclass(frozen=True, slots=True, kw_only=True)
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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file; check the path") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{where}: cannot read the file ({err.__class__.__name__}); check the path") from None
    return parse_document(text, fmt=suffix[1:], where=where), where


def parse_document(text: str, *, fmt: str = "toml", where: str = "<spec>") -> dict:
    if fmt == "toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise SpecError(f"{where}: not valid TOML ({err}); fix the syntax") from None
    elif fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError(f"{where}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                            f"fix the syntax") from None
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

    def table(self, key: str) -> "_Table":
        return _Table(self._get(key, True, f"a [{self.path}.{key}] table"), f"{self.path}.{key}", self.where)

    def done(self) -> None:
        for key in self.data:
            if key not in self.keys:
                raise SpecError(f"{self.where}: unknown key '{self.path}.{key}'"
                                f"{_suggest(key, self.keys, prefix=self.path + '.')}")


def _suggest(name: str, known, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if close:
        return f" (did you mean '{prefix}{close[0]}'?)"
    return f"; known keys: {', '.join(known)}"


def _defaults(cls) -> dict:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def _build(cls, where: str, **kwargs):
    """Construct a spec; its own validation errors get the file name in front."""
    try:
        return cls(**kwargs)
    except SpecError as err:
        raise SpecError(f"{where}: {err}") from None


def model_from_table(data: dict, *, where: str = "<spec>") -> ModelSpec:
    t, d = _Table(data, "model", where), _defaults(ModelSpec)
    spec = dict(name=t.str("name"), num_layers=t.int("num_layers"), hidden_size=t.int("hidden_size"),
                num_heads=t.int("num_heads"), num_kv_heads=t.int("num_kv_heads"),
                ffn_hidden_size=t.int("ffn_hidden_size"), vocab_size=t.int("vocab_size"),
                max_seq_len=t.int("max_seq_len"), mlp=t.enum("mlp", Mlp, default=d["mlp"]),
                norm=t.enum("norm", Norm, default=d["norm"]),
                position=t.enum("position", Position, default=d["position"]),
                tied_embeddings=t.bool("tied_embeddings", default=d["tied_embeddings"]),
                linear_bias=t.bool("linear_bias", default=d["linear_bias"]),
                qkv_bias=t.bool("qkv_bias", default=d["qkv_bias"]),
                head_dim=t.int("head_dim", default=None),
                moe=_moe_from(t, where) if t.data.get("moe") is not None else t._get("moe", False, ""),
                mla=_mla_from(t, where) if t.data.get("mla") is not None else t._get("mla", False, ""),
                published_params=t.int("published_params", default=None),
                source=t.str("source", default=""))
    t.done()
    return _build(ModelSpec, where, **spec)


def _moe_from(t: "_Table", where: str) -> MoeSpec:
    m = t.table("moe")
    spec = dict(num_experts=m.int("num_experts"), experts_per_token=m.int("experts_per_token"),
                expert_ffn_size=m.int("expert_ffn_size"), num_shared_experts=m.int("num_shared_experts", default=0),
                first_dense_layers=m.int("first_dense_layers", default=0),
                capacity_factor=m.number("capacity_factor", default=None))
    m.done()
    return _build(MoeSpec, where, **spec)


def _mla_from(t: "_Table", where: str) -> MlaSpec:
    m = t.table("mla")
    spec = {k: m.int(k) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    m.done()
    return _build(MlaSpec, where, **spec)


def recipe_from_table(data: dict, *, where: str = "<spec>", path: str = "recipe") -> Recipe:
    t, d = _Table(data, path, where), _defaults(Recipe)
    moments_table = t.table("moments")
    moments = tuple((name, moments_table.number(name)) for name in list(moments_table.data))
    spec = dict(name=t.str("name"), weights_bytes=t.number("weights_bytes"), grads_bytes=t.number("grads_bytes"),
                master_bytes=t.number("master_bytes"), moments=moments,
                compute=t.str("compute", default=d["compute"]),
                description=t.str("description", default=""), source=t.str("source", default=""))
    t.done()
    return _build(Recipe, where, **spec)


def training_from_table(data: dict, *, where: str = "<spec>") -> TrainingSpec:
    from fitplan.presets import RECIPES   # presets import the specs; import late to keep specs first

    t, d = _Table(data, "training", where), _defaults(TrainingSpec)
    raw = t._get("recipe", True, 'a preset name such as recipe = "mixed-adam", or a [training.recipe] table')
    if isinstance(raw, str):
        if raw not in RECIPES:
            raise SpecError(f"{where}: training.recipe = {raw!r} is not a precision preset"
                            f"{_suggest(raw, RECIPES)}")
        recipe = RECIPES[raw]
    elif isinstance(raw, dict):
        recipe = recipe_from_table(raw, where=where, path="training.recipe")
    else:
        raise SpecError(f"{where}: training.recipe must be a preset name or a table, got {raw!r}")
    spec = dict(seq_len=t.int("seq_len"), recipe=recipe, global_batch=t.int("global_batch", default=None),
                act_bytes=t.int("act_bytes", default=d["act_bytes"]),
                dropout=t.bool("dropout", default=d["dropout"]))
    t.done()
    return _build(TrainingSpec, where, **spec)


def _link_from_table(t: _Table) -> LinkSpec:
    link = dict(name=t.str("name"), bytes_per_s=t.rate("bandwidth"), latency_s=t.seconds("latency"))
    t.done()
    return _build(LinkSpec, t.where, **link)


def gpu_from_table(data: dict, *, where: str = "<spec>") -> GpuSpec:
    t, d = _Table(data, "gpu", where), _defaults(GpuSpec)
    fp8 = t.number("peak_fp8_flops_per_s", default=None)
    spec = dict(name=t.str("name"), memory_bytes=t.size("memory"),
                peak_bf16_flops_per_s=float(t.number("peak_bf16_flops_per_s")),
                peak_fp8_flops_per_s=None if fp8 is None else float(fp8), efficiency=t.number("efficiency"),
                efficiency_h0=float(t.number("efficiency_h0", default=d["efficiency_h0"])),
                intra_node=_link_from_table(t.table("intra_node")),
                inter_node=_link_from_table(t.table("inter_node")),
                gpus_per_node=t.int("gpus_per_node", default=d["gpus_per_node"]),
                default_reserve_bytes=t.size("default_reserve", default=d["default_reserve_bytes"]),
                source=t.str("source", default=""))
    t.done()
    return _build(GpuSpec, where, **spec)


def cluster_from_table(data: dict, *, gpu: GpuSpec | None = None, where: str = "<spec>") -> ClusterSpec:
    """`gpu` is the [gpu] table of the same file, already read, if it has one."""
    from fitplan.presets import GPUS

    t = _Table(data, "cluster", where)
    name = t.str("gpu", default=None)
    if name is not None and gpu is not None:
        raise SpecError(f"{where}: cluster.gpu = {name!r} and a [gpu] table both name the GPU; keep one")
    if name is not None:
        if name not in GPUS:
            raise SpecError(f"{where}: cluster.gpu = {name!r} is not a GPU preset{_suggest(name, GPUS)}")
        gpu = GPUS[name]
    if gpu is None:
        raise SpecError(f"{where}: the cluster has no GPU; add cluster.gpu = \"h100-80gb\" (a preset) or a [gpu] table")
    spec = dict(gpu=gpu, num_gpus=t.int("num_gpus"), gpus_per_node=t.int("gpus_per_node", default=gpu.gpus_per_node),
                reserve_bytes=t.size("reserve", default=gpu.default_reserve_bytes))
    t.done()
    return _build(ClusterSpec, where, **spec)


# ---------------------------------------------------------------- writing

_SIZE_UNITS = (("TiB", TiB), ("TB", TB), ("GiB", GiB), ("GB", GB), ("MiB", MiB), ("MB", MB), ("KiB", KiB), ("KB", KB))
_RATE_UNITS = (("TB/s", TB), ("GB/s", GB), ("MB/s", MB), ("KB/s", KB))
_TIME_UNITS = (("s", 1), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


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


def _omit(value, note: str, comments: dict, key: str):
    if value is None:
        comments[key] = note
        return []
    return [(key, value)]


def _model_toml(m: ModelSpec) -> str:
    comments = {}
    items = [("name", m.name), ("num_layers", m.num_layers), ("hidden_size", m.hidden_size),
             ("num_heads", m.num_heads), ("num_kv_heads", m.num_kv_heads), ("ffn_hidden_size", m.ffn_hidden_size),
             ("vocab_size", m.vocab_size), ("max_seq_len", m.max_seq_len), ("mlp", m.mlp.value),
             ("norm", m.norm.value), ("position", m.position.value), ("tied_embeddings", m.tied_embeddings),
             ("linear_bias", m.linear_bias), ("qkv_bias", m.qkv_bias)]
    items += _omit(m.head_dim, "omitted: hidden_size / num_heads", comments, "head_dim")
    items += _omit(m.published_params, "omitted: the count follows from the shapes", comments, "published_params")
    items.append(("source", m.source))
    out = [toml_text.table("model", items, comments)]
    if m.moe is not None:
        e = m.moe
        moe_items = [("num_experts", e.num_experts), ("experts_per_token", e.experts_per_token),
                     ("expert_ffn_size", e.expert_ffn_size), ("num_shared_experts", e.num_shared_experts),
                     ("first_dense_layers", e.first_dense_layers)]
        moe_comments = {}
        moe_items += _omit(e.capacity_factor, "omitted: dropless", moe_comments, "capacity_factor")
        out.append(toml_text.table("model.moe", moe_items, moe_comments))
    if m.mla is not None:
        out.append(toml_text.table("model.mla", [(k, getattr(m.mla, k)) for k in (
            "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")]))
    return "\n".join(out)


def _recipe_toml(r: Recipe, header: str) -> str:
    items = [("name", r.name), ("weights_bytes", r.weights_bytes), ("grads_bytes", r.grads_bytes),
             ("master_bytes", r.master_bytes), ("compute", r.compute), ("description", r.description),
             ("source", r.source)]
    return (toml_text.table(header, items, {"weights_bytes": "bytes per parameter of each model-state component"})
            + "\n" + toml_text.table(f"{header}.moments", list(r.moments)))


def _training_toml(t: TrainingSpec) -> str:
    comments = {"act_bytes": "bytes per stored activation element"}
    items = [("seq_len", t.seq_len)]
    items += _omit(t.global_batch, "omitted: enough micro-batches to fill the pipeline", comments, "global_batch")
    items += [("act_bytes", t.act_bytes), ("dropout", t.dropout)]
    return toml_text.table("training", items, comments) + "\n" + _recipe_toml(t.recipe, "training.recipe")


def _link_toml(link: LinkSpec, header: str) -> str:
    return toml_text.table(header, [("name", link.name), ("bandwidth", rate_text(link.bytes_per_s)),
                                    ("latency", seconds_text(link.latency_s))])


def _gpu_toml(g: GpuSpec) -> str:
    comments = {}
    items = [("name", g.name), ("memory", size_text(g.memory_bytes)),
             ("peak_bf16_flops_per_s", g.peak_bf16_flops_per_s)]
    items += _omit(g.peak_fp8_flops_per_s, "omitted: no fp8 tensor cores", comments, "peak_fp8_flops_per_s")
    items += [("efficiency", g.efficiency), ("efficiency_h0", g.efficiency_h0), ("gpus_per_node", g.gpus_per_node),
              ("default_reserve", size_text(g.default_reserve_bytes)), ("source", g.source)]
    return "\n".join((toml_text.table("gpu", items, comments), _link_toml(g.intra_node, "gpu.intra_node"),
                      _link_toml(g.inter_node, "gpu.inter_node")))


def _cluster_toml(c: ClusterSpec) -> str:
    return toml_text.table("cluster", [("num_gpus", c.num_gpus), ("gpus_per_node", c.gpus_per_node),
                                       ("reserve", size_text(c.reserve_bytes))],
                           {"num_gpus": "the GPU is the [gpu] table below"})


def dump_toml(*specs) -> str:
    """One spec file holding each given spec (ModelSpec, TrainingSpec, Recipe, GpuSpec,
    ClusterSpec; at most one of each). A ClusterSpec brings its GPU as the [gpu] table."""
    parts, kinds = [], set()
    cluster_gpu = next((s.gpu for s in specs if isinstance(s, ClusterSpec)), None)
    for spec in specs:
        writer = {ModelSpec: _model_toml, TrainingSpec: _training_toml, GpuSpec: _gpu_toml,
                  ClusterSpec: _cluster_toml, Recipe: lambda r: _recipe_toml(r, "recipe")}.get(type(spec))
        if writer is None:
            raise TypeError(f"dump_toml cannot write {type(spec).__name__}")
        if type(spec) in kinds:
            raise ValueError(f"dump_toml got two {type(spec).__name__}s; a spec file holds one of each")
        if isinstance(spec, GpuSpec) and cluster_gpu is not None:
            if spec != cluster_gpu:
                raise ValueError("dump_toml got a GpuSpec that differs from the ClusterSpec's GPU")
            continue
        kinds.add(type(spec))
        parts.append(writer(spec))
        if isinstance(spec, ClusterSpec):
            parts.append(_gpu_toml(spec.gpu))
    return "\n".join(parts)
