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
    if m.hybrid:
        from fitplan.counts.hybrid import KIND_NAMES, kind_counts
        kinds = ", ".join(f"{n} {KIND_NAMES[k]}" for k, n in kind_counts(m.layer_pattern).items() if n)
        return f"hybrid ({kinds}), {m.num_heads} heads, {m.num_kv_heads} kv heads of {m.kv_size // m.num_kv_heads}"
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
            *_ssm_rows(a, by),
            ("total", fmt_gib(a.per_gpu_bytes), "weights + KV cache" + (" + SSM state" if a.attention_layers is not None
                                                                         else ""), ""),
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
    if "serving/ssm_state_per_gpu" in by:
        ssm = by["serving/ssm_state_per_gpu"]
        out += [Heading(f"SSM state  [{ssm.cite}]"), Lines((
            f"the KV cache above covers the {a.attention_layers} attention layers only",
            f"per sequence, all Mamba layers: {a.ssm_state_bytes_per_sequence:,} B = "
            f"{fmt_gib(a.ssm_state_bytes_per_sequence)} GiB, the same at any context",
            f"per GPU for the batch: {_line(ssm)} B = {fmt_gib(a.ssm_state_bytes_per_gpu)} GiB"))]
    out += [Heading(f"Largest that fits  [{by['serving/max_batch'].cite}]"), Lines(_largest(a, by))]
    out += [Heading("Decode step, memory-bound lower bound"), Lines(_decode(a, by))]
    verdict = ("fits" if a.fits else "does not fit: the weights alone exceed the usable memory" if not a.weights_fit
               else "does not fit: the weights fit, the KV cache of this batch and context does not")
    out += [Lines(("", f"verdict: {verdict} ({fmt_gib(a.per_gpu_bytes)} GiB {'<=' if a.fits else '>'} "
                       f"{fmt_gib(a.usable_bytes_per_gpu)} GiB usable)"))]
    if a.server is not None:
        out += _server(a)
    where = []
    for t in a.terms + (a.server.terms if a.server is not None else ()):
        where += [f"{t.key} = {_value(t)}", f"    {t.formula}; {', '.join(f'{k}={v}' for k, v in t.inputs)}  [{t.cite}]"]
    out += [Heading("Where each number comes from"), Lines(tuple(where)), Bullets("assumptions", a.assumes)]
    if a.server is not None:
        out.append(Bullets(f"{SERVER_NAMES[a.server.name]}'s budget assumes", a.server.assumes))
    return out


SERVER_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _value(t) -> str:
    if t.unit == "bytes":
        return f"{t.value:,} B" + (f" = {fmt_gib(t.value)} GiB" if abs(t.value) >= 2**24 else "")
    if t.unit == "s":
        return f"{t.value:.6g} s"
    if t.unit == "ratio":
        return f"{t.value:.4g}"
    return f"{t.value:,}"


def _server(a) -> list:
    """The server's own budget: its terms per GPU, its blocks, what it logs, what fits."""
    v, by = a.server, {t.key: t for t in a.server.terms}
    name = SERVER_NAMES[v.name]
    rows = []
    for key, label in (("servers/vllm/requested", "requested (u*C)"), ("servers/sglang/free_at_start", "free at start"),
                       ("servers/sglang/mem_fraction_static", "mem_fraction_static")):
        if key in by:
            rows.append((label, _cell(by[key]), by[key].formula, str(by[key].cite)))
    rows.append(("weights", fmt_gib(v.weights_bytes), "fitplan's weights on this stage's GPUs (serving/weights)", ""))
    for key, label in (("servers/vllm/forward_peak", "forward (profile)"), ("servers/vllm/sampler_peak", "sampler (profile)"),
                       ("servers/vllm/activation_peak", "activation peak"), ("servers/sglang/cache_memory", "for caches"),
                       ("servers/mamba_state_per_layer", "Mamba state"), ("servers/vllm/page", "page (block x layer)"),
                       ("servers/sglang/mamba_pool", "Mamba pool")):
        if key in by:
            small = key in ("servers/mamba_state_per_layer", "servers/vllm/page")   # MiB, not GiB
            rows.append((label, f"{by[key].value:,} B" if small else _cell(by[key]), by[key].formula,
                         str(by[key].cite)))
    pool = by["servers/vllm/kv_pool" if v.name == "vllm" else "servers/sglang/kv_pool"]
    rows.append(("KV pool", fmt_gib(v.kv_pool_bytes), pool.formula, str(pool.cite)))
    stage = "" if v.stage == "only" else f", the {v.stage} pipeline stage (fewest blocks)"
    settings = ", ".join(f"{k} {x:g}" if isinstance(x, float) else f"{k} {x:,}" for k, x in v.settings)
    hy = dict(v.hybrid)
    unit = (f"blocks of {v.block_tokens:,} tokens, a {hy['page_bytes']:,} B page in each of the "
            f"{hy['stage_layers_per_group']} tensors its layers share (attention keys and values, or one Mamba state); "
            f"{hy['blocks_per_request']} a request; the log's" if "page_bytes" in hy else
            f"blocks of {v.block_tokens} tokens x {v.kv_token_bytes:,} B per token per GPU"
            if v.block_tokens > 1 else f"{v.kv_token_bytes:,} B per token per GPU, one token a page")
    verdict = (f"fits: {a.batch:,} requests of {a.context:,} tokens <= {v.max_batch:,}" if v.fits else
               f"{name} would refuse to start: no KV cache is left" if v.kv_blocks == 0 else
               f"{name} would refuse to start: one request of {v.context:,} tokens needs more than the pool holds "
               f"(longest {v.max_context:,})" if v.context > v.max_context and v.name == "vllm" else
               f"does not fit: a request of {v.context:,} tokens is longer than the pool ({v.max_context:,} tokens)"
               if v.context > v.max_context else
               f"does not fit: {a.batch:,} requests of {a.context:,} tokens > the {v.max_batch:,} that fit")
    return [Heading(f"{name}'s KV cache budget per GPU (GiB){stage}"), Lines((f"settings  {settings}",)),
            Table(("term", "value", "formula", "source"), tuple(rows), align="lrll"),
            Lines((f"blocks   {v.kv_blocks:,} {unit} = {v.kv_tokens:,} tokens  [{by[_blocks_key(v)].cite}]",
                   f"largest  context {v.max_context:,} tokens for one request; batch {v.max_batch:,} requests of "
                   f"{v.context:,} tokens (concurrency {v.max_concurrency:.2f}x)",
                   *(f"log      {line}" for line in v.log_lines),
                   f"verdict  {verdict}"))]


def _blocks_key(v) -> str:
    return "servers/vllm/kv_blocks" if v.name == "vllm" else "servers/sglang/kv_tokens"


def _cell(t) -> str:
    return fmt_gib(t.value) if t.unit == "bytes" else f"{t.value:g}"


def _ssm_rows(a, by) -> tuple:
    ssm = by.get("serving/ssm_state_per_gpu")
    if ssm is None:
        return ()
    return (("SSM state", fmt_gib(a.ssm_state_bytes_per_gpu), ssm.formula, str(ssm.cite)),)


def _largest(a, by) -> tuple[str, ...]:
    if not a.weights_fit:
        return (f"nothing: the weights alone, {fmt_gib(a.weights_bytes_per_gpu)} GiB per GPU, exceed the "
                f"{fmt_gib(a.usable_bytes_per_gpu)} GiB usable; raise tp or pp, lower the weight precision, or use "
                f"larger GPUs",)
    per_seq, per_tok = by["serving/kv_per_gpu_per_sequence"], by["serving/kv_per_gpu_per_token"]
    capped = (f" (the learned position table's {a.max_context_limit:,} rows)"
              if a.max_context_limit is not None and a.max_context == a.max_context_limit else "")
    state = by.get("serving/ssm_state_per_gpu_per_sequence")
    per_seq_value = per_seq.value + (state.value if state is not None else 0)
    with_state = "" if state is None else f" (KV {per_seq.value:,} + SSM state {state.value:,})"
    free = "free" if state is None else "free after the batch's SSM state"
    return (f"batch at context {a.context:,}: {a.max_batch:,} sequences = floor(({fmt_gib(a.usable_bytes_per_gpu)} "
            f"- {fmt_gib(a.weights_bytes_per_gpu)}) GiB / {per_seq_value:,} B per sequence per GPU{with_state})",
            f"context at batch {a.batch:,}: {a.max_context:,} tokens = floor({free} / {per_tok.value:,} B per token "
            f"of the batch per GPU){capped}",
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
    state = f" + 2 x {a.ssm_state_bytes_per_gpu:,} (the SSM state, read and written)" if a.ssm_state_bytes_per_gpu else ""
    lines.append(f"{step.formula} = ({a.weights_read_bytes_per_gpu:,} + {a.kv_cache_bytes_per_gpu:,}{state}) B / "
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
        "kv_cache_layers": m.num_layers if a.attention_layers is None else a.attention_layers,
        "ssm_state_bytes_per_gpu": a.ssm_state_bytes_per_gpu,
        "ssm_state_bytes_per_sequence": a.ssm_state_bytes_per_sequence,
        "per_gpu_bytes": a.per_gpu_bytes, "usable_bytes_per_gpu": a.usable_bytes_per_gpu,
        "headroom_bytes": a.headroom_bytes, "weights_fit": a.weights_fit, "fits": a.fits,
        "max_batch": a.max_batch, "max_context": a.max_context,
        "weights_read_bytes_per_gpu": a.weights_read_bytes_per_gpu,
        "decode_step_s_lower_bound": a.decode_step_s_lower_bound,
        "assumed": list(a.assumed), "assumptions": list(a.assumes),
        **({} if a.server is None else {"server": _server_json(a.server)}),
    })


def _server_json(v) -> dict:
    """--server: the server's own budget on the GPU that binds; kv_tokens is the token count the
    server logs (vLLM "GPU KV cache size", SGLang "#tokens"); hybrid: a hybrid model's Mamba figures."""
    return {"name": v.name, "stage": v.stage, "settings": dict(v.settings), "capacity_bytes": v.capacity_bytes,
            "weights_bytes": v.weights_bytes, "activation_peak_bytes": v.activation_peak_bytes,
            "kv_pool_bytes": v.kv_pool_bytes, "kv_token_bytes": v.kv_token_bytes, "block_tokens": v.block_tokens,
            "kv_blocks": v.kv_blocks, "kv_tokens": v.kv_tokens, "context": v.context, "max_context": v.max_context,
            "max_batch": v.max_batch, "max_concurrency": v.max_concurrency, "fits": v.fits,
            "log": list(v.log_lines), "assumptions": list(v.assumes), **({"hybrid": dict(v.hybrid)} if v.hybrid else {}),
            "terms": [{"key": t.key, "value": t.value, "formula": t.formula, "source": str(t.cite)} for t in v.terms]}
