"""The header every report starts with: model, training, cluster, assumptions; the host-memory
and state lines a plan shares."""
from fitplan.counts.params import shape_params
from fitplan.memory.breakdown import STATE_PARTS
from fitplan.parts import label
from fitplan.report.render import Heading, Lines, Table
from fitplan.units import fmt_gib


STRATEGY_NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}


def header(setup) -> list:
    m, t, c = setup.model, setup.training, setup.cluster
    count = (f"{m.published_params:,} parameters (published; shape-derived {shape_params(m):,})"
             if m.published_params else f"{shape_params(m):,} parameters (from shapes)")
    batch = f"global batch {t.global_batch}" if t.global_batch else "global batch not given"
    return [Heading(f"fitplan: {m.name} on {c.num_gpus} x {c.gpu.name}"), Lines((
        f"model    {count}",
        f"         L={m.num_layers} h={m.hidden_size} a={m.num_heads} kv_heads={m.num_kv_heads} "
        f"ffn={m.ffn_hidden_size} V={m.vocab_size} mlp={m.mlp.value} "
        f"{'tied' if m.tied_embeddings else 'untied'} embeddings",
        *hybrid_lines(m),
        f"training s={t.seq_len}, {batch}, precision {t.recipe.name} ({t.recipe.total_bytes:g} B/param)"
        f"{gemm_precision(t)}, activations {t.act_bytes} B/element, dropout {'on' if t.dropout else 'off'}, "
        f"{t.attention_kernel} attention",
        *finetune_lines(t),
        f"cluster  {fmt_gib(c.gpu.memory_bytes)} GiB per GPU, {fmt_gib(c.reserve_bytes)} GiB reserved, "
        f"{fmt_gib(c.usable_bytes)} GiB usable; {c.gpus_per_node} GPUs per node",
        *host_lines(c),
        *(f"assumed  {a}" for a in setup.assumed),
    ))]


def gemm_precision(t) -> str:
    """', fp8 GEMMs (the last 14 layers' in bf16)': a low-precision recipe's GEMMs and the layers it keeps in bf16."""
    if t.recipe.compute == "bf16":
        return ""
    ends = [f"first {t.bf16_first_layers}" if t.bf16_first_layers else "",
            f"last {t.bf16_last_layers}" if t.bf16_last_layers else ""]
    kept = " and ".join(e for e in ends if e)
    return f", {t.recipe.compute} GEMMs" + (f" (the {kept} layers' in bf16)" if kept else "")


def hybrid_lines(m) -> tuple[str, ...]:
    """A hybrid model's layers by kind and its Mamba layers' shape."""
    if not m.hybrid:
        return ()
    from fitplan.counts.hybrid import KIND_NAMES, kind_counts
    kinds = ", ".join(f"{n} {KIND_NAMES[k]}" for k, n in kind_counts(m.layer_pattern).items() if n)
    line = f"         hybrid: {kinds} layers"
    mb = m.mamba
    if mb is not None:
        line += (f"; {'Mamba-2' if mb.version.value == 'mamba2' else 'Mamba'} {mb.num_heads} heads x {mb.head_dim}, "
                 f"state {mb.state_size}, {mb.num_groups} groups, conv {mb.conv_kernel}")
        if mb.version.value == "mamba2":
            line += f", chunk {mb.chunk_size}"
    if m.mtp_depth and m.mtp_pattern:
        line += f"; {m.mtp_depth} MTP module{'s' if m.mtp_depth > 1 else ''} of {m.mtp_pattern}"
    return (line,)


def finetune_lines(t) -> tuple[str, ...]:
    """The fine-tuning mode, when the base is frozen."""
    if t.finetune == "full":
        return ()
    from fitplan.memory.finetune import base_precision
    base = base_precision(t)
    base = f"the recipe's {t.recipe.weights_bytes:g} B" if base == "recipe" else base
    return (f"finetune {t.finetune}: frozen base (linear weights {base}), LoRA rank {t.lora_rank} on "
            f"{t.lora_targets.replace(',', ', ')}; only the adapters have gradients and optimizer state",)


def host_lines(c) -> tuple[str, ...]:
    """The host side offload uses, when a limit is given."""
    if c.host_memory_bytes is None:
        return ()
    return (f"host     {fmt_gib(c.host_memory_bytes)} GiB CPU memory per node, host link "
            f"{c.gpu.host_bytes_per_s / 1e9:g} GB/s per GPU, CPU optimizer {c.cpu_optimizer_params_per_s / 1e9:.3g}e9 "
            f"params/s per node, NVMe {c.nvme_bytes_per_s / 1e9:g} GB/s per node",)


def host_table(setup, b) -> list:
    """What an offloading configuration keeps in host memory and on NVMe."""
    if b.config.offload.value == "none":
        return []
    c = setup.cluster
    rows = tuple((label(k), fmt_gib(v)) for k, v in b.host.items() if v)
    limit = ("none (--host-memory sets one)" if b.host_limit_bytes is None else
             f"{fmt_gib(b.host_limit_bytes)} GiB per node: {'fits' if b.host_fits else 'does not fit'}")
    lines = [f"host memory per node: {fmt_gib(b.host_per_node_bytes)} GiB = the busiest GPU's "
             f"{fmt_gib(sum(v for k, v in b.host.items() if k.startswith('host/')))} GiB x "
             f"{min(c.gpus_per_node, c.num_gpus)} processes per node; limit {limit}"]
    if b.nvme_per_node_bytes:
        lines.append(f"NVMe per node: {fmt_gib(b.nvme_per_node_bytes)} GiB")
    return [Heading(f"Offloaded ({b.config.offload.value}), per GPU  [docs/formulas.md#offload]"),
            Table(("held off the GPU", "GiB"), rows, align="lr"), Lines(tuple(lines))]


def config_line(c) -> str:
    return (f"dp={c.dp} tp={c.tp} pp={c.pp} cp={c.cp}{f' ep={c.ep}' if c.ep > 1 else ''} zero={int(c.zero)} "
            f"sequence_parallel={'on' if c.sequence_parallel else 'off'} recompute={c.recompute.value} "
            f"micro_batch={c.micro_batch} virtual_stages={c.virtual_stages}"
            + ("" if c.offload.value == "none" else f" offload={c.offload.value}"))


def term_inputs(term) -> str:
    return ", ".join(f"{k}={v}" for k, v in term.inputs)


def state_formula(b) -> str:
    """The sum of the state terms' own formulas, as the breakdown evaluated them."""
    by_key = {t.key: t for t in b.terms}
    return " + ".join(by_key[k].formula for k in STATE_PARTS)
