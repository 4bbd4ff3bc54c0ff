"""`fitplan presets list` and `fitplan presets show NAME`: models, GPUs, precision recipes and
framework profiles."""
from fitplan import presets
from fitplan.counts.params import shape_params
from fitplan.report.render import Heading, Lines, Table
from fitplan.units import fmt_gib


def preset_list() -> list:
    models = tuple((n, str(p.model.num_layers), str(p.model.hidden_size), str(p.seq_len), p.model.source)
                   for n, p in presets.MODELS.items())
    gpus = tuple((n, fmt_gib(g.memory_bytes), g.source) for n, g in presets.GPUS.items())
    recipes = tuple((n, f"{r.total_bytes:g}", r.description) for n, r in presets.RECIPES.items())
    frameworks = tuple((n, f.description, framework_defaults(f)) for n, f in presets.FRAMEWORKS.items())
    return [Heading("models"), Table(("name", "L", "h", "s", "source"), models, align="lrrrl"),
            Heading("gpus"), Table(("name", "GiB", "source"), gpus, align="lrl"),
            Heading("precision recipes"), Table(("name", "B/param", "what"), recipes, align="lrl"),
            Heading("frameworks (--framework; each default's source: fitplan presets show NAME, docs/frameworks.md)"),
            Table(("name", "what", "defaults"), frameworks, align="lll")]


def _setting(v) -> str:
    """A profile value in words: on/off for a switch, 'the framework's rule' for None, the value otherwise."""
    if isinstance(v, bool) or v is None:
        return {True: "on", False: "off", None: "by ZeRO stage"}[v]
    return f"{v:,}" if isinstance(v, int) else str(v)


def framework_defaults(f) -> str:
    """A profile's values in a line: 'kernels eager, attention kernel cudnn, ..., overlap grad reduce on'."""
    items = list(f.training.items()) + list(f.config.items())
    return ", ".join(f"{name.replace('_', ' ')} {_setting(d.value)}" for name, d in items)


def _framework_preset(f) -> list:
    rows = tuple((name.replace("_", " "), _setting(d.value), d.source)
                 for name, d in list(f.training.items()) + list(f.config.items()))
    return [Heading(f"framework {f.name}: {f.description}"), Table(("setting", "value", "source"), rows, align="lll"),
            Lines(tuple(f"note: {n}" for n in f.notes) + (
                "--framework applies these where no flag or spec-file key sets them; docs/frameworks.md",))]


def _rate(bytes_per_s) -> str:
    return f"{bytes_per_s / 1e12:g} TB/s" if bytes_per_s >= 1e12 else f"{bytes_per_s / 1e9:g} GB/s"


def _link(link) -> str:
    return f"{link.name}, {_rate(link.bytes_per_s)} per GPU per direction, {link.latency_s * 1e6:g} us per message"


# The training settings a model preset carries (fitplan.presets.models.ModelPreset), in words;
# a setting added there is shown under its field name until it gets words here.
PRESET_SETTINGS = {"seq_len": "sequence length", "micro_batch": "micro-batch", "global_batch": "global batch",
                   "gpu": "GPU (when --gpu is not given)"}


def preset_show(name: str) -> list:
    """`fitplan presets show NAME`: what a model, GPU or precision preset holds, readably."""
    if name in presets.MODELS:
        return _model_preset(presets.MODELS[name])
    if name in presets.GPUS:
        return _gpu_preset(presets.GPUS[name])
    if name in presets.RECIPES:
        return _recipe_preset(presets.RECIPES[name])
    if name in presets.FRAMEWORKS:
        return _framework_preset(presets.FRAMEWORKS[name])
    presets.model(name)   # unknown: raises with the nearest names
    raise AssertionError(name)


def _model_preset(p) -> list:
    from dataclasses import fields
    from fitplan.counts.params import active_params
    m = p.model
    count = (f"{m.published_params:,} (published; shape-derived {shape_params(m):,})" if m.published_params
             else f"{shape_params(m):,} (from shapes)")
    lines = [f"layers {m.num_layers}, hidden {m.hidden_size}, {m.num_heads} attention heads "
             f"({m.num_kv_heads} key/value heads{f', head dim {m.head_dim}' if m.head_dim else ''}), "
             f"ffn {m.ffn_hidden_size}, vocabulary {m.vocab_size:,}, context {m.max_seq_len:,}",
             f"{m.mlp.value} MLP, {m.norm.value}, {m.position.value} positions, "
             f"{'tied' if m.tied_embeddings else 'untied'} embeddings, {'' if m.linear_bias else 'no '}linear bias, "
             f"{'' if m.qkv_bias else 'no '}qkv bias" + (", attention sinks" if m.attention_sinks else ""),
             f"parameters {count}"]
    if m.moe is not None:
        e = m.moe
        lines += [f"mixture of experts: {e.num_experts} routed experts of ffn {e.expert_ffn_size}, "
                  f"{e.experts_per_token} per token, {e.num_shared_experts} shared, "
                  + (f"the first {e.first_dense_layers} layers dense, " if e.first_dense_layers else
                     "every layer routed, ")
                  + (f"capacity factor {e.capacity_factor:g}" if e.capacity_factor
                     else "dropless (no capacity factor)"),
                  f"active parameters per token {active_params(m):,}"]
    if m.mla is not None:
        a = m.mla
        lines.append(f"multi-head latent attention: q_lora_rank {a.q_lora_rank}, kv_lora_rank {a.kv_lora_rank}, "
                     f"qk_nope_head_dim {a.qk_nope_head_dim}, qk_rope_head_dim {a.qk_rope_head_dim}, "
                     f"v_head_dim {a.v_head_dim}")
    settings = []
    for f in fields(p):
        if f.name == "model":
            continue
        value = getattr(p, f.name)
        text = "not given" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
        if f.name == "global_batch" and value:
            text += f" sequences ({value * p.seq_len:,} tokens)"
        settings.append((PRESET_SETTINGS.get(f.name, f.name), text))
    if not any(f.name in ("recipe", "precision") for f in fields(p)):
        settings.append(("precision", f"{presets.recipes.DEFAULT_RECIPE} (fitplan's default; --precision changes it)"))
    return [Heading(f"model preset {m.name}"), Lines(tuple(lines)),
            Heading("training settings it carries"), Table(("setting", "value"), tuple(settings), align="ll"),
            Heading("source"), Lines((m.source or "not stated",))]


def _gpu_preset(g) -> list:
    fp8 = (f"{g.peak_fp8_flops_per_s / 1e12:,g} TFLOP/s fp8 dense" if g.peak_fp8_flops_per_s
           else "no fp8 tensor cores")
    rows = (("memory", f"{fmt_gib(g.memory_bytes)} GiB ({g.memory_bytes:,} B); {fmt_gib(g.default_reserve_bytes)} "
                       f"GiB reserved by default, {fmt_gib(g.memory_bytes - g.default_reserve_bytes)} GiB usable"),
            ("peak", f"{g.peak_bf16_flops_per_s / 1e12:,g} TFLOP/s bf16 dense, {fp8}"
                     + (f", {g.peak_fp4_flops_per_s / 1e12:,g} fp4 dense" if g.peak_fp4_flops_per_s else "")),
            ("GEMM curve", _gemm_curve(g)),
            ("HBM", _rate(g.hbm_bytes_per_s) if g.hbm_bytes_per_s else "not stated"),
            ("power", f"{g.power_watts:g} W, the board's maximum (the energy to train's default; --gpu-power)"
             if g.power_watts else "not stated"),
            ("inside a node", _link(g.intra_node)),
            ("across nodes", _link(g.inter_node)),
            ("node", f"{g.gpus_per_node} GPUs"))
    return [Heading(f"GPU preset {g.name}"), Table(("property", "value"), rows, align="ll"),
            Heading("source"), Lines((g.source or "not stated",))]


def _gemm_curve(g) -> str:
    """The GPU's GEMM time model in words (fitplan.timing.gemm)."""
    fp8 = "" if g.peak_fp8_flops_per_s is None else \
        f" ({g.efficiency if g.efficiency_fp8 is None else g.efficiency_fp8:g} of the fp8 peak for fp8 GEMMs)"
    w = g.gemm_bandwidth_bytes_per_s or g.hbm_bytes_per_s
    h0 = f", ceiling x h/(h + {g.efficiency_h0:g})" if g.efficiency_h0 else ""
    return (f"max(F/({g.efficiency:g} x peak), B/{_rate(w) if w else 'none'}) + {g.gemm_overhead_s * 1e6:g} us "
            f"per GEMM{fp8}{h0} (bench/calibrate.py)")


def _recipe_preset(r) -> list:
    rows = [("weights", f"{r.weights_bytes:g}"), ("gradients", f"{r.grads_bytes:g}"),
            ("master weights", f"{r.master_bytes:g}")]
    rows += [(f"optimizer: {k}", f"{v:g}") for k, v in r.moments]
    rows.append(("total", f"{r.total_bytes:g}"))
    return [Heading(f"precision recipe {r.name}"), Lines((r.description,) if r.description else ()),
            Table(("model state", "B/param"), tuple(rows), align="lr"),
            Lines((f"compute precision (GEMMs): {r.compute}",)),
            Heading("source"), Lines((r.source or "not stated",))]
