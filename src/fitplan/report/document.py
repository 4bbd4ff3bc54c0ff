"""What each report says, as blocks (fitplan.report.render draws them as text or markdown).
One unit per column: GiB = 2**30 bytes."""
from fitplan import presets
from fitplan.counts.params import shape_params
from fitplan.memory.breakdown import PARTS, STATE_PARTS
from fitplan.parts import label
from fitplan.report.render import Bullets, Heading, Lines, Table
from fitplan.report.sentences import PATTERN, inequality, monitor, reasons
from fitplan.units import fmt_count, fmt_gb, fmt_gib, fmt_ms

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
        f"training s={t.seq_len}, {batch}, precision {t.recipe.name} ({t.recipe.total_bytes:g} B/param), "
        f"activations {t.act_bytes} B/element, dropout {'on' if t.dropout else 'off'}, "
        f"{t.attention_kernel} attention",
        *finetune_lines(t),
        f"cluster  {fmt_gib(c.gpu.memory_bytes)} GiB per GPU, {fmt_gib(c.reserve_bytes)} GiB reserved, "
        f"{fmt_gib(c.usable_bytes)} GiB usable; {c.gpus_per_node} GPUs per node",
        *host_lines(c),
        *(f"assumed  {a}" for a in setup.assumed),
    ))]


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


def _inputs(term) -> str:
    return ", ".join(f"{k}={v}" for k, v in term.inputs)


def state_formula(b) -> str:
    """The sum of the state terms' own formulas, as the breakdown evaluated them."""
    by_key = {t.key: t for t in b.terms}
    return " + ".join(by_key[k].formula for k in STATE_PARTS)


TO_TRAIN_CITE = "[formulas.md#time-cost-and-energy-to-train; Narayanan et al. Eq. 4]"


def _amount(x) -> str:
    """A day count, GPU-hours, energy or cost for reading: 1,234,567 / 409.9 / 0.042."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.3g}"


def to_train_heading(setup) -> Heading:
    return Heading(f"To train {fmt_count(setup.training.train_tokens)} tokens  {TO_TRAIN_CITE}")


def to_train_note(setup) -> str:
    """What the energy and cost columns count."""
    c = setup.cluster
    energy = ("energy: no power figure for this GPU (--gpu-power sets one)" if c.gpu.power_watts is None else
              f"energy: {c.gpu.power_watts:g} W per GPU x PUE {c.pue:g}"
              + (", GPU boards only: no host, network or cooling" if c.pue == 1 else ""))
    cost = ("cost: no price (--gpu-hour-price sets one)" if c.gpu_hour_price is None else
            f"cost: GPU-hours x {c.gpu_hour_price:g} per GPU-hour")
    return f"days = tokens / (tokens/s) / 86400, GPU-hours = N x seconds / 3600; {energy}; {cost}"


def to_train_table(setup, labels, step_list) -> list:
    """One row per plan: days, GPU-hours, cost and energy to train --train-tokens."""
    from fitplan.timing.to_train import to_train
    rows = []
    for label, st in zip(labels, step_list):
        t = to_train(setup, st)
        rows.append((label, _amount(t.days), _amount(t.gpu_hours), _amount(t.cost), _amount(t.energy_mwh)))
    missing = ("; -: no step time (a global batch that dp x micro-batch does not divide, or no peak rate for the "
               "recipe's precision)" if any(r[1] == "-" for r in rows) else "")
    return [to_train_heading(setup),
            Table(("", "days", "GPU-hours", "cost", "energy MWh"), tuple(rows), align="lrrrr",
                  note=to_train_note(setup) + missing)]


def to_train_line(setup, st) -> str:
    """One plan's run in a line, for the minimum viable and recommended layouts."""
    from fitplan.timing.to_train import to_train
    t = to_train(setup, st)
    if t.days is None:
        return f"to train {fmt_count(t.tokens)} tokens: no time estimate"
    b = st.uncertainty
    span = (lambda x: "") if b is None else (
        lambda x: f" ({_amount(x * b.low_s / st.step_time_s)}-{_amount(x * b.high_s / st.step_time_s)})")
    return (f"to train {fmt_count(t.tokens)} tokens: {_amount(t.days)}{span(t.days)} days, {_amount(t.gpu_hours)} "
            f"GPU-hours, cost {_amount(t.cost) + span(t.cost) if t.cost is not None else '- (no --gpu-hour-price)'}, "
            f"{_amount(t.energy_mwh) if t.energy_mwh is not None else '-'} MWh"
            + ("" if b is None else f"  (in brackets: the step's {b.coverage:.0%} band)"))


def to_train_blocks(setup, st) -> list:
    """One configuration's run, each number with its formula and inputs."""
    from fitplan.timing.to_train import to_train
    t = to_train(setup, st)
    if t.days is None:
        return [to_train_heading(setup), Lines(("not estimated: no step time for this configuration",))]
    c = setup.cluster
    lines = [f"time       D/R = {t.tokens:,} / {st.tokens_per_s:,.0f} tokens/s = {t.seconds:,.4g} s = "
             f"{_amount(t.days)} days",
             f"GPU-hours  N*T/3600 = {t.num_gpus:,} x {t.seconds:,.4g} s / 3600 = {_amount(t.gpu_hours)}"]
    if t.energy_mwh is None:
        lines.append("energy     not estimated: the GPU states no power (--gpu-power sets it)")
    else:
        lines.append(f"energy     N*P*PUE*T/3.6e9 = {t.num_gpus:,} x {t.power_watts:g} W x {t.pue:g} x "
                     f"{t.seconds:,.4g} s / 3.6e9 = {_amount(t.energy_mwh)} MWh"
                     + (" (GPU boards only: no host, network or cooling; --pue scales for them)" if t.pue == 1
                        else f" (PUE {t.pue:g}: facility energy)"))
    if t.cost is None:
        lines.append("cost       not estimated: no price (--gpu-hour-price sets one)")
    else:
        lines.append(f"cost       H*price = {_amount(t.gpu_hours)} x {c.gpu_hour_price:g} = {_amount(t.cost)}")
    return [to_train_heading(setup), Lines(tuple(lines))]


def seed(a) -> list:
    setup = a.setup
    bpp = " + ".join(f"{v:g} {k}" for k, v in a.bytes_per_param.items())
    total_bpp = setup.training.recipe.total_bytes
    big, small = max(a.state_total_bytes, a.all_layers_bytes), min(a.state_total_bytes, a.all_layers_bytes)
    if setup.training.finetune != "full":
        from fitplan.memory.finetune import model_totals
        base, adapters = model_totals(setup.model, setup.training, a.num_params)
        state_lines = (f"frozen base: {base:,} B ({fmt_gib(base)} GiB; no gradients or optimizer state)",
                       f"adapters: {adapters:,} parameters x ({bpp} = {total_bpp:g}) B",
                       f"total: {a.state_total_bytes:,} B = {fmt_gib(a.state_total_bytes)} GiB")
    else:
        state_lines = (f"bytes per parameter: {bpp} = {total_bpp:g}",
                       f"total: {total_bpp:g} * {a.num_params:,} = {a.state_total_bytes:,} B = "
                       f"{fmt_gib(a.state_total_bytes)} GiB")
    blocks = header(setup) + [
        Heading(f"(a) Model state  [ZeRO Sec. 3.1; recipe: {setup.training.recipe.source}]"),
        Lines((*state_lines,
               f"= {a.gpus_of_pure_state:.2f} GPUs of pure state ({fmt_gib(a.state_total_bytes)} GiB / "
               f"{fmt_gib(setup.cluster.gpu.memory_bytes)} GiB per GPU)")),
        Heading(f"(b) Activations, one micro-batch, no parallelism  [{a.per_layer.cite}]"),
        Lines((f"attention factor {a.attention_factor.formula} with {_inputs(a.attention_factor)}: "
               f"{a.attention_factor.value:g}",
               f"one layer: {a.per_layer.formula}",
               f"   with {_inputs(a.per_layer)}",
               f"   = {a.per_layer.value:,} B = {fmt_gib(a.per_layer.value)} GiB",
               f"all {setup.model.num_layers} layers: {a.all_layers_bytes:,} B = {fmt_gib(a.all_layers_bytes)} GiB",
               f"the bigger problem: {a.bigger_problem} ({fmt_gib(big)} GiB vs {fmt_gib(small)} GiB, "
               f"{big / max(1, small):.1f}x)")),
        Heading(f"(c) The cheap options on {setup.cluster.num_gpus} GPUs: dp={setup.cluster.num_gpus}, no tp/pp/cp, "
                f"no recompute  [ZeRO Sec. 5, Fig. 1]"),
    ]
    rows = []
    for s in a.strategies:
        b = s.breakdown
        why = "-" if s.blocking is None else (f"{s.blocking.name}, {s.blocking.formula} = "
                                              f"{fmt_gib(s.blocking.bytes)} GiB"
                                              + ("" if s.blocking.alone_exceeds else " (only the sum exceeds)"))
        rows.append((STRATEGY_NAMES[s.name], state_formula(b), fmt_gib(b.state_bytes), fmt_gib(b.activation_bytes),
                     fmt_gib(b.per_gpu_bytes), "yes" if b.fits else "no", why))
    blocks.append(Table(("strategy", "state formula", "state GiB", "activ. GiB", "total GiB", "fits", "too big"),
                        tuple(rows), align="llrrrll",
                        note=f"per GPU, against {fmt_gib(setup.cluster.usable_bytes)} GiB usable; total: the peak over "
                             f"the step; activ.: the rest of it, activations (the embedding and output-layer extras "
                             f"of Korthikanti Sec. 4.3 included) and runtime buffers"))
    if setup.training.train_tokens is not None:
        from fitplan.report.advice import legal_step
        blocks += to_train_table(setup, [STRATEGY_NAMES[s.name] for s in a.strategies],
                                 [legal_step(setup, s.breakdown.config) for s in a.strategies])
    blocks.append(Bullets("assumptions", a.per_layer.assumes))
    blocks.append(Lines(("", "next: --suggest searches tp, pp, cp, sequence parallel and recompute for a fit",)))
    return blocks


STAGE_NAMES = {"only": "every GPU holds the whole model depth (pp = 1)",
               "first": "first pipeline stage (embedding, most micro-batches in flight)",
               "last": "last pipeline stage (output layer and logits)"}


def stage_name(b) -> str:
    """The busiest pipeline rank in words, with the layers per stage where pp > 1."""
    name = STAGE_NAMES.get(b.stage, f"pipeline {b.stage} of {b.config.pp} (its layers with the most micro-batches "
                                    f"in flight)")
    if b.config.pp == 1:
        return name
    return f"{name}; layers per stage {_stage_list(b.stage_layers)}"


def _stage_list(layers) -> str:
    """7, 8 x 14, 7: runs of equal counts folded."""
    out, i = [], 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1] == layers[i]:
            j += 1
        out.append(f"{layers[i]}" if j == i else f"{layers[i]} x {j - i + 1}")
        i = j + 1
    return ", ".join(out)


def config_line(c) -> str:
    return (f"dp={c.dp} tp={c.tp} pp={c.pp} cp={c.cp}{f' ep={c.ep}' if c.ep > 1 else ''} zero={int(c.zero)} "
            f"sequence_parallel={'on' if c.sequence_parallel else 'off'} recompute={c.recompute.value} "
            f"micro_batch={c.micro_batch} virtual_stages={c.virtual_stages}"
            + ("" if c.offload.value == "none" else f" offload={c.offload.value}"))


def step_times(setup, items, draw) -> tuple[list | None, list]:
    """The step time of each item (a suggestion or a breakdown) and the blocks `draw` makes of
    them; or, when the GPU cannot run the recipe's precision (fp8 on an A100), None and one line
    that says so, so that no report drops its time section silently."""
    from fitplan.report.advice import steps
    step_list = steps(setup, items)
    if step_list is not None:
        return step_list, draw(step_list)
    from fitplan.errors import SpecError, one_line
    from fitplan.timing.breakdown import evaluate_step
    try:
        evaluate_step(setup, items[0].config)
        why = "the time model declined this configuration"
    except SpecError as error:
        why = one_line(str(error))
    return None, [Lines((f"not estimated: {why}",))]


def _step_blocks(st) -> list:
    """One configuration's step: its rates (advice.time_table's row), the parts it adds up
    from in seconds, and each axis's traffic and link (advice._links)."""
    from fitplan.report.advice import _links, time_table
    row = time_table([None], [st])
    summary = Table(row.header[1:], tuple(r[1:] for r in row.rows), align=row.align[1:], note=row.note)
    shown = {"time/compute": True, "time/bubble": True,
             "time/dp_after_step": bool(st.parts["time/dp_after_step"]),
             "time/optimizer": bool(st.parts["time/optimizer"]),
             "time/offload": bool(st.parts["time/offload"]),
             **{f"time/{a}_exposed": c.degree > 1 for a, c in st.comm.items()}}
    names = {f"time/{a}_exposed": f"exposed {c.name} traffic" for a, c in st.comm.items()}
    secs = lambda v: f"{v:,.3f}" if v == 0 or v >= 0.001 else f"{v:.2g}"
    parts = tuple((names.get(k, label(k)), secs(v), f"{v / st.step_time_s:.1%}") for k, v in st.parts.items()
                  if shown.get(k, bool(v)))
    return [summary, Lines((overlap_line(st.config),)),
            Table(("part of the step", "s", "share"), parts + (("step", secs(st.step_time_s), "100.0%"),),
                  align="lrr", note=f"{st.num_microbatches:,} micro-batches per step, bubble fraction "
                                    f"{st.bubble_fraction:.1%}; MFU {st.mfu:.1%} ({st.mfu_causal:.1%} with a "
                                    f"causal mask's half of the attention FLOPs), HFU {st.hfu:.1%} (recompute "
                                    f"included), {st.tflops_per_gpu:,.0f} TFLOP/s per GPU"),
            Lines((f"links: {_links(st)}",))]


def overlap_line(c) -> str:
    """The overlaps the step assumes, each flag's value (defaults resolved), [docs/formulas.md#overlap]."""
    from fitplan.specs.parallel import overlaps_ep_comm, overlaps_param_gather
    on = lambda x: "on" if x else "off"
    parts = [f"grad reduce {on(c.overlap_grad_reduce)}"]
    if int(c.zero) >= 1:
        parts.append(f"param gather {on(overlaps_param_gather(c))}")
    if c.tp > 1:
        parts.append(f"tp {on(c.tp_comm_overlap and c.sequence_parallel)}")
    if c.cp > 1:
        parts.append(f"cp {on(c.cp_comm_overlap)}")
    if c.ep > 1:
        parts.append(f"ep {on(overlaps_ep_comm(c))}")
    return "overlap with compute: " + ", ".join(parts) + "  [docs/formulas.md#overlap: --overlap-grad-reduce, " \
        "--overlap-param-gather, --tp-comm-overlap, --cp-comm-overlap, --overlap-moe-expert-parallel-comm]"


PER_LAYER_NOTE = ("ms per layer and micro-batch: the stage's average layer; each axis's traffic on its link, "
                  "with (the exposed part); pp per micro-batch; dp without ZeRO-3 the step's reductions spread over "
                  "layers and micro-batches; * paces the step")


def per_layer_rows(setup, config):
    """The per-layer table's header and rows, equal neighbouring stages folded (0-6), or None
    when the GPU cannot run the recipe's precision."""
    from fitplan.errors import SpecError
    from fitplan.timing.breakdown import per_layer
    try:
        stages = per_layer(setup, config)
    except SpecError:
        return None
    degree = {"tp": config.tp, "ep": config.ep, "cp": config.cp, "dp": config.dp * config.cp, "pp": config.pp}
    axes = [a for a in ("tp", "ep", "cp", "dp", "pp") if degree[a] > 1]
    ms = lambda x: f"{1e3 * x:,.3g}" if x else "0"
    cell = lambda busy, exposed: ms(busy) if ms(busy) == ms(exposed) else f"{ms(busy)} ({ms(exposed)})"
    header = ("stage", "layers", "forward", "backward", "recompute", *(f"{a} (exposed)" for a in axes))
    rows, keys = [], []
    for st in stages:
        body = (f"{st.layers:g}" + ("" if st.dense_layers in (None, 0) else f" ({st.dense_layers} dense)"),
                ms(st.forward_s), ms(st.backward_s), ms(st.recompute_s), *(cell(*st.comm[a]) for a in axes))
        mark = "*" if st.paces else ""
        if rows and keys[-1] == (body, mark == "") and not mark and not rows[-1][0].endswith("*"):
            first = rows[-1][0].split("-")[0]
            rows[-1] = (f"{first}-{st.stage}",) + rows[-1][1:]
            continue
        rows.append((f"{st.stage}{mark}",) + body)
        keys.append((body, mark == ""))
    return header, tuple(rows)


def per_layer_blocks(setup, config) -> list:
    """Forward, backward, recompute and each axis's traffic per layer, per pipeline stage."""
    table = per_layer_rows(setup, config)
    if table is None:
        return []
    header, rows = table
    return [Heading("Per layer, one micro-batch, each pipeline stage  [docs/formulas.md#per-layer]"),
            Table(header, rows, align="l" + "r" * (len(header) - 1), note=PER_LAYER_NOTE)]


STAGE_WORDS = {"only": "the only pipeline stage", "first": "the first pipeline stage", "last": "the last pipeline stage"}


def peak_where(b) -> str:
    """Where the peak is: 'backward of micro-batch 1 (loss), on the last pipeline stage'."""
    return f"{b.peak.phase}, on {STAGE_WORDS.get(b.stage, 'pipeline ' + b.stage)}"


def breakdown(setup, b) -> list:
    from fitplan.analysis import risk
    from fitplan.report.advice import caveat
    by_key = {t.key: t for t in b.terms}
    rows = []
    held = b.peak.held
    for key in PARTS:
        if key == "activations/moe_buffers" and setup.model.moe is None:
            continue
        term = by_key.get(key)
        if key.startswith("runtime/") and not b.parts[key] and not held.get(key):
            continue   # a runtime buffer this layout does not create
        rows.append((label(key), fmt_gib(b.parts[key]), fmt_gib(held[key]) if key in held else "-",
                     term.formula if term else "not held on this stage", str(term.cite) if term else ""))
    rows += [("peak", "", fmt_gib(b.per_gpu_bytes), f"the largest moment of the step: {b.peak.phase}", ""),
             ("usable", fmt_gib(b.usable_bytes), "", f"capacity {fmt_gib(setup.cluster.gpu.memory_bytes)} - reserve "
                                                      f"{fmt_gib(b.reserve_bytes)}", ""),
             ("headroom", fmt_gib(b.headroom_bytes), "", "usable - peak", "")]
    verdict = "fits" if b.fits else "does not fit"
    r = risk(b)
    where = []
    for t in b.terms:
        value = f"{t.value:,} B = {fmt_gib(t.value)} GiB" if t.unit == "bytes" else f"{t.value:,}"
        where += [f"{t.key} = {value}", f"    {t.formula}; {_inputs(t)}  [{t.cite}]"]
    return header(setup) + [
        Heading(f"Configuration: {config_line(b.config)}"),
        Lines((f"busiest GPU: {stage_name(b)}",)),
        Table(("term", "GiB", "at peak", "formula", "source"), tuple(rows), align="lrrll",
              note="GiB: each term's largest size; at peak: what the GPU holds at the step's largest moment "
                   "(docs/formulas.md#peak)"),
        Lines(("", f"peak: {fmt_gib(b.per_gpu_bytes)} GiB at {peak_where(b)}",
               f"verdict: {verdict} ({fmt_gib(b.per_gpu_bytes)} GiB "
               f"{'<=' if b.per_gpu_bytes <= b.usable_bytes else '>'} {fmt_gib(b.usable_bytes)} GiB usable"
               + ("" if b.host_fits else f"; host memory {fmt_gib(b.host_per_node_bytes)} GiB per node > "
                                         f"{fmt_gib(b.host_limit_bytes)} GiB") + f"); risk: {r.level}",
               caveat(setup, b), f"rule: {r.rule}")),
        Heading(f"Memory over the step, {STAGE_WORDS.get(b.stage, 'pipeline ' + b.stage)}  "
                f"[docs/formulas.md#peak]"),
        timeline_table(setup, b),
    ] + host_table(setup, b) + [Heading("Estimated step time  [fitplan.timing.step, docs/formulas.md#step-time]"),
         *step_times(setup, [b], lambda step_list: _step_blocks(step_list[0]))[1]] + (
        per_layer_blocks(setup, b.config)) + (
        [] if setup.training.train_tokens is None else
        to_train_blocks(setup, (step_times(setup, [b], lambda _: [])[0] or [None])[0])) + [
        Heading("Where each number comes from"), Lines(tuple(where)),
        Bullets("assumptions", tuple(sorted({x for t in b.terms for x in t.assumes}))),
    ]


def timeline_table(setup, b) -> Table:
    """Each forward and backward of the busiest rank's schedule, then the optimizer step: GiB
    held by group, the peak marked."""
    from fitplan.memory.timeline import GROUPS
    from fitplan.memory.breakdown import stage_timeline
    events = stage_timeline(setup, b)
    rows = []
    for e in events:
        g = e.by_group()
        mark = "peak" if e.bytes == b.per_gpu_bytes else ""
        rows.append((e.phase + (f" (x {e.repeat:,})" if e.repeat > 1 else ""), *(fmt_gib(g[k]) for k in GROUPS),
                     fmt_gib(e.bytes), mark))
    return Table(("event", *GROUPS, "GiB", ""), tuple(rows), align="lrrrrl",
                 note="x N: the steady state's forward/backward pair, the same N times; runtime: buffers, transients "
                      "and the allocator's share; activations: stored for backward and recomputed")


def search(setup, r, bound, smallest) -> list:
    from fitplan.report.advice import time_table
    blocks = header(setup) + [
        Heading(f"Search over {r.considered:,} candidates on {r.num_gpus} GPUs: "
                f"{r.considered - r.fit:,} rejected, {r.fit:,} fit"),
        Lines(("rejected, by the first rule broken: " + "; ".join(f"{k} {v:,}" for k, v in r.rejected_by_reason.items()),)),
        Heading("Lower bound, for every configuration  [docs/formulas.md#lower-bound]"),
        Lines((inequality(bound),
               f"so N >= {bound.min_gpus} GPUs in general, {bound.min_gpus_power_of_two} as a power of two")),
    ]
    if not r.feasible:
        if bound.excludes:
            why = (f"Nothing fits on {_gpus(r.num_gpus)}, whatever the ZeRO stage, tp, pp, cp, sequence parallel or "
                   f"recompute mode: sharding only partitions the bytes, and even their average exceeds the usable "
                   f"memory.")
        else:
            why = (f"Nothing fits on {_gpus(r.num_gpus)}: the bound allows this count, but every legal candidate "
                   f"exceeds memory or breaks a rule (counts above).")
        lines = [why]
        if r.least_loaded is not None:
            lines.append(f"least loaded: {config_line(r.least_loaded.config)} needs "
                         f"{fmt_gib(r.least_loaded.per_gpu_bytes)} GiB")
        if smallest:
            def found(n):
                return str(n) if n else f"none up to {smallest['searched_up_to']}"
            lines.append(f"smallest GPU count where the search finds a fit: {found(smallest['general'])} "
                         f"(power of two: {found(smallest['power_of_two'])})")
        return blocks + [Heading("Verdict"), Lines(tuple(lines))]
    from fitplan.answers import largest_fitting_micro_batch
    rows = tuple((str(i), str(c.dp), str(c.tp), str(c.pp), str(c.cp), str(c.ep), str(int(c.zero)),
                  "on" if c.sequence_parallel else "off", c.recompute.value, str(c.micro_batch),
                  str(largest_fitting_micro_batch(setup, c) or "-"), str(c.virtual_stages),
                  fmt_gib(s.breakdown.per_gpu_bytes), fmt_gib(s.breakdown.headroom_bytes), s.rank_reason)
                 for i, s in enumerate(r.suggestions, 1) for c in [s.config])
    first = ("shortest step first" if r.rank_order.startswith("estimated step") else
             "lowest cost to train first" if r.rank_order.startswith("estimated cost") else "least disturbance first")
    blocks += [Heading(f"Configurations that fit, {first}"), Lines((f"ranked by {r.rank_order}",)),
               Table(("#", "dp", "tp", "pp", "cp", "ep", "zero", "sp", "recompute", "mb", "max mb", "v", "per-GPU GiB",
                      "headroom GiB", "why this rank"), rows, align="rrrrrrrlrrrrrrl",
                     note="max mb: the largest micro-batch that layout fits with, all else kept, among those the global "
                          "batch divides into")]
    step_list, shown = step_times(setup, r.suggestions, lambda sl: [time_table(r.suggestions, sl)])
    blocks += [Heading("Estimated step time of each"), *shown]
    if setup.training.train_tokens is not None:
        blocks += to_train_table(setup, [f"#{i}" for i in range(1, len(r.suggestions) + 1)],
                                 step_list or [None] * len(r.suggestions))
    return blocks + recommendation(setup, r)


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")


def recommendation(setup, r) -> list:
    """(e) the minimum viable layout and (f) the one to run, each with its memory and time, and
    (f) justified against the next-fastest safe alternative."""
    from fitplan.report.advice import caveat, justify, short, steps
    from fitplan.search import RECOMMEND_ORDER
    mv, rec = r.minimum_viable, r.recommended
    out = []
    if mv is not None:
        out += [Heading("Minimum viable: the least disturbance from plain data parallelism"),
                Lines((short(mv.config), *_memory_and_time(setup, mv, steps), caveat(setup, mv.breakdown)))]
    lines = [f"chosen as {RECOMMEND_ORDER}"]
    if rec is None:
        lines.append(f"nothing to recommend: {r.recommend_note}")
    else:
        lines += [short(rec.config) + ("  (the minimum viable layout too)" if mv is not None and
                                       rec.config == mv.config else ""), *_memory_and_time(setup, rec, steps)]
        if r.recommend_note:
            lines.append(r.recommend_note)
        if r.alternatives:
            lines += justify(setup, rec, r.alternatives[0])
        else:
            lines.append("no other layout fits with margin")
        lines.append(caveat(setup, rec.breakdown))
    return out + [Heading("Recommended: the one to run"), Lines(tuple(lines))]


def _memory_and_time(setup, s, steps) -> tuple[str, ...]:
    b = s.breakdown
    from fitplan.answers import largest_fitting_micro_batch
    memory = (f"{fmt_gib(b.per_gpu_bytes)} GiB per GPU, {fmt_gib(b.headroom_bytes)} GiB headroom; "
              f"recompute needed: {s.config.recompute.value}; largest micro-batch that fits: "
              f"{largest_fitting_micro_batch(setup, s.config) or '-'}")
    st = (steps(setup, [s]) or [None])[0]
    if st is None:
        return memory, "no step time: the GPU has no peak rate for this recipe's precision"
    run = () if setup.training.train_tokens is None else (to_train_line(setup, st),)
    from fitplan.report.advice import band_phrase
    return memory, (f"{st.step_time_s:,.3f} s per step{band_phrase(st)}, {st.tokens_per_s:,.0f} tokens/s, MFU {st.mfu:.1%} "
                    f"({st.mfu_causal:.1%} causal); {st.num_microbatches} micro-batches per step"), *run


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


def compare(setup, cmp) -> list:
    rows, comm_rows = [], []
    for l in cmp.layouts:
        c = l.config
        if l.problem:
            rows.append((l.name, f"{c.tp}/{c.pp}/{c.dp}", "-", "-", "-", "-", "-", "cannot be built: " + l.problem))
            continue
        stored = " / ".join(fmt_gib(b) for _, b in l.stored_by_recompute)
        st = l.step
        rows.append((l.name, f"{c.tp}/{c.pp}/{c.dp}", fmt_gib(l.simplified_state_bytes), fmt_gib(l.state_bytes), stored,
                     c.recompute.value, fmt_gib(l.memory.per_gpu_bytes),
                     ("fits" if l.fits else "does not fit") + f"; step {st.step_time_s:,.3f} s, MFU {st.mfu:.1%}, "
                     f"bubble {st.bubble_fraction:.1%}"))
        for axis, ac in st.comm.items():
            if ac.degree > 1:
                comm_rows.append((l.name, ac.name, str(ac.degree), PATTERN[axis], fmt_gb(ac.bytes_per_step),
                                  ("inside a node, " if ac.intra_node else "across nodes, ") + ac.link,
                                  f"{ac.exposed_s:,.3g}"))
    simple = presets.recipe("exercise-10")   # fitplan.compare's simplified budget
    budget = f"{simple.total_bytes:g} B/param"
    blocks = header(setup) + [
        Heading("Pure tensor parallel, pure pipeline parallel and a hybrid"),
        Table(("layout", "tp/pp/dp", f"{budget} GiB", "full state GiB", "activations none / selective / full GiB",
               "recompute", "per-GPU GiB", "verdict"), tuple(rows), align="llrrrlrl",
              note=f"per busiest GPU; {budget} is bf16 weights + 8 B of Adam moments, no gradients or master copy: "
                   f"the exercise's simplified budget (recipe {simple.name}); the full state uses "
                   f"{setup.training.recipe.name}; the recompute column is the least that fits"),
        Heading("Communication per step, per GPU"),
        Table(("layout", "axis", "degree", "pattern", "GB/step", "link", "exposed s"), tuple(comm_rows),
              align="llrlrlr") if comm_rows else Lines(("no communication",)),
        Heading("Proposal"), Lines(reasons(cmp) or ("nothing fits on these GPUs",)),
    ]
    if cmp.monitor:
        blocks += [Heading(f"What to monitor on the {cmp.preferred.name} run (pipeline-stage synchronisation)"),
                   Table(("metric", "expected", "what it catches"),
                         tuple((m, f"{fmt_ms(v)} ms" if unit == "s" else f"{v:g} {unit}", why)
                               for m, v, unit, why in monitor(cmp)), align="lrl")]
    return blocks
