"""`fitplan infer`: serving memory and the decode bound, as blocks (text, markdown) or JSON
(fitplan.serving.ServingAnswer). Sizes in GiB (2**30 B) in the tables, with GB (10**9 B)
beside the cache, whose published figures are decimal."""
from fitplan import __version__
from fitplan.counts.params import num_params, shape_params
from fitplan.report.jsonout import dump
from fitplan.report.render import Bullets, Heading, Lines, Table
from fitplan.specs.serving import KV_BYTES, WEIGHT_FORMATS
from fitplan.units import fmt_gb, fmt_gib, fmt_rate

STAGES = {"only": "every GPU holds the whole depth (pp = 1)",
          "first": "first pipeline stage (the embedding)", "last": "last pipeline stage (the output head)"}


def _weight_text(name: str) -> str:
    f = WEIGHT_FORMATS[name]
    per = f"{f.bits / 8:g} B/param" + (f" + {f.group_bits} bits per {f.group}" if f.group > 1 else "")
    return f"{name} ({per})"


def _attention(m) -> str:
    if m.mla is not None:
        return (f"MLA, latent {m.mla.kv_lora_rank} + rotary key {m.mla.qk_rope_head_dim} cached per token and "
                f"layer")
    return f"{m.num_heads} heads, {m.num_kv_heads} kv heads of {m.kv_size // m.num_kv_heads}"


def _terms(a) -> dict:
    return {t.key: t for t in a.terms}


def _line(t) -> str:
    return f"{t.formula} = {t.value:,}"


def blocks(a) -> list:
    m, c, by = a.model, a.cluster, _terms(a)
    count = (f"{m.published_params:,} parameters (published; shape-derived {shape_params(m):,})"
             if m.published_params else f"{shape_params(m):,} parameters (from shapes)")
    hbm = f"HBM {fmt_rate(c.gpu.hbm_bytes_per_s)}" if c.gpu.hbm_bytes_per_s else "HBM bandwidth not stated"
    out = [Heading(f"fitplan infer: {m.name} on {c.num_gpus} x {c.gpu.name}, tp={a.tp} pp={a.pp}"), Lines((
        f"model    {count}; L={m.num_layers}, {_attention(m)}",
        f"serving  batch {a.batch:,}, context {a.context:,} tokens; weights {_weight_text(a.weight_precision)}, "
        f"KV cache {a.kv_precision} ({KV_BYTES[a.kv_precision]} B/element)",
        f"cluster  {fmt_gib(c.gpu.memory_bytes)} GiB per GPU, {fmt_gib(c.reserve_bytes)} GiB reserved, "
        f"{fmt_gib(a.usable_bytes_per_gpu)} GiB usable; {hbm}",
        *(f"assumed  {x}" for x in a.assumed)))]
    w, kv = by["serving/weights_per_gpu"], by["serving/kv_cache_per_gpu"]
    rows = (("weights", fmt_gib(a.weights_bytes_per_gpu), w.formula, str(w.cite)),
            ("KV cache", fmt_gib(a.kv_cache_bytes_per_gpu), kv.formula, str(kv.cite)),
            ("total", fmt_gib(a.per_gpu_bytes), "weights + KV cache", ""),
            ("usable", fmt_gib(a.usable_bytes_per_gpu), by["serving/usable_per_gpu"].formula + f"  (capacity "
             f"{fmt_gib(c.gpu.memory_bytes)}, reserve {fmt_gib(c.reserve_bytes)})", str(by["serving/usable_per_gpu"].cite)),
            ("headroom", fmt_gib(a.headroom_bytes), "usable - total", ""))
    out += [Heading(f"Memory per GPU (busiest: {STAGES[a.stage]})"),
            Table(("term", "GiB", "formula", "source"), rows, align="lrll")]
    copies = "" if a.kv_replicas == 1 else f"; tp keeps {a.kv_replicas} copies of each element"
    total = by["serving/kv_cache"]
    out += [Heading(f"KV cache  [{total.cite}]"), Lines((
        f"per token, all layers: {by['serving/kv_cache_per_token'].formula} with s = b = 1: "
        f"{a.kv_cache_bytes_per_token:,} B",
        f"the batch: {_line(total)} B = {fmt_gb(a.kv_cache_bytes)} GB ({fmt_gib(a.kv_cache_bytes)} GiB)",
        f"per GPU: {a.kv_cache_bytes_per_gpu:,} B = {fmt_gib(a.kv_cache_bytes_per_gpu)} GiB{copies}"))]
    out += [Heading(f"Largest that fits  [{by['serving/max_batch'].cite}]"), Lines(_largest(a, by))]
    out += [Heading("Decode step, memory-bound lower bound"), Lines(_decode(a, by))]
    verdict = ("fits" if a.fits else "does not fit: the weights alone exceed the usable memory" if not a.weights_fit
               else "does not fit: the weights fit, the KV cache of this batch and context does not")
    out += [Lines(("", f"verdict: {verdict} ({fmt_gib(a.per_gpu_bytes)} GiB {'<=' if a.fits else '>'} "
                       f"{fmt_gib(a.usable_bytes_per_gpu)} GiB usable)"))]
    where = []
    for t in a.terms:
        value = (f"{t.value:,} B" + (f" = {fmt_gib(t.value)} GiB" if t.value >= 2**24 else "")) if t.unit == "bytes" else (
            f"{t.value:.6g} s" if t.unit == "s" else f"{t.value:,}")
        where += [f"{t.key} = {value}", f"    {t.formula}; {', '.join(f'{k}={v}' for k, v in t.inputs)}  [{t.cite}]"]
    return out + [Heading("Where each number comes from"), Lines(tuple(where)), Bullets("assumptions", a.assumes)]


def _largest(a, by) -> tuple[str, ...]:
    if not a.weights_fit:
        return (f"nothing: the weights alone, {fmt_gib(a.weights_bytes_per_gpu)} GiB per GPU, exceed the "
                f"{fmt_gib(a.usable_bytes_per_gpu)} GiB usable; raise tp or pp, lower the weight precision, or use "
                f"larger GPUs",)
    per_seq, per_tok = by["serving/kv_per_gpu_per_sequence"], by["serving/kv_per_gpu_per_token"]
    capped = (f" (the learned position table's {a.max_context_limit:,} rows)"
              if a.max_context_limit is not None and a.max_context == a.max_context_limit else "")
    return (f"batch at context {a.context:,}: {a.max_batch:,} sequences = floor(({fmt_gib(a.usable_bytes_per_gpu)} "
            f"- {fmt_gib(a.weights_bytes_per_gpu)}) GiB / {per_seq.value:,} B per sequence per GPU)",
            f"context at batch {a.batch:,}: {a.max_context:,} tokens = floor(free / {per_tok.value:,} B per token of "
            f"the batch per GPU){capped}",
            "each checked: one more sequence, or one more token, does not fit")


def _decode(a, by) -> tuple[str, ...]:
    step = by.get("serving/decode_step_s_lower_bound")
    if step is None:
        return ("not estimated: the GPU states no HBM bandwidth; --hbm-bandwidth sets it",)
    lines = []
    read = by.get("serving/weights_read_per_gpu")
    if read is not None:
        lines.append(f"weights read per GPU: {read.formula} = {read.value:,} B = {fmt_gib(read.value)} GiB  "
                     f"[{read.cite}]")
    lines.append(f"{step.formula} = ({a.weights_read_bytes_per_gpu:,} + {a.kv_cache_bytes_per_gpu:,}) B / "
                 f"{fmt_rate(a.cluster.gpu.hbm_bytes_per_s)} = {step.value * 1e3:,.3f} ms per step  [{step.cite}]")
    lines.append(f"so at most {a.batch / step.value:,.0f} tokens/s for the batch, {1 / step.value:,.1f} per sequence")
    return tuple(lines)


def as_json(a) -> str:
    m, c = a.model, a.cluster
    return dump({
        "fitplan_version": __version__,
        "model": {"name": m.name, "num_params": num_params(m), "shape_params": shape_params(m),
                  "num_layers": m.num_layers, "num_kv_heads": m.num_kv_heads,
                  "attention": "mla" if m.mla is not None else "gqa"},
        "cluster": {"gpu": c.gpu.name, "num_gpus": c.num_gpus, "memory_bytes_per_gpu": c.gpu.memory_bytes,
                    "reserve_bytes_per_gpu": c.reserve_bytes, "hbm_bytes_per_s": c.gpu.hbm_bytes_per_s},
        "tp": a.tp, "pp": a.pp, "batch": a.batch, "context": a.context,
        "weight_precision": a.weight_precision, "kv_precision": a.kv_precision, "stage": a.stage,
        "weights_bytes_per_gpu": a.weights_bytes_per_gpu,
        "kv_cache_bytes": a.kv_cache_bytes, "kv_cache_bytes_per_gpu": a.kv_cache_bytes_per_gpu,
        "kv_cache_bytes_per_token": a.kv_cache_bytes_per_token, "kv_cache_replicas": a.kv_replicas,
        "per_gpu_bytes": a.per_gpu_bytes, "usable_bytes_per_gpu": a.usable_bytes_per_gpu,
        "headroom_bytes": a.headroom_bytes, "weights_fit": a.weights_fit, "fits": a.fits,
        "max_batch": a.max_batch, "max_context": a.max_context,
        "weights_read_bytes_per_gpu": a.weights_read_bytes_per_gpu,
        "decode_step_s_lower_bound": a.decode_step_s_lower_bound,
        "assumed": list(a.assumed), "assumptions": list(a.assumes),
    })
