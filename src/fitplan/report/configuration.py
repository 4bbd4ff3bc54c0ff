"""One configuration's report: its memory at the peak term by term, the timeline, the step time
with each axis's exposed traffic, and the per-layer table of every pipeline stage."""
from fitplan.memory.breakdown import PARTS
from fitplan.memory.timeline import allocated_bytes, reserved_bytes
from fitplan.parts import label
from fitplan.report.advice import step_times
from fitplan.report.header import config_line, header, host_table, term_inputs
from fitplan.report.render import Bullets, Heading, Lines, Table
from fitplan.report.to_train import to_train_blocks
from fitplan.units import fmt_gib


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
        where += [f"{t.key} = {value}", f"    {t.formula}; {term_inputs(t)}  [{t.cite}]"]
    return header(setup) + [
        Heading(f"Configuration: {config_line(b.config)}"),
        Lines((f"busiest GPU: {stage_name(b)}",)),
        Table(("term", "GiB", "at peak", "formula", "source"), tuple(rows), align="lrrll",
              note="GiB: each term's largest size; at peak: what the GPU holds at the step's largest moment "
                   "(docs/formulas.md#peak)"),
        Lines(("", f"peak: {fmt_gib(b.per_gpu_bytes)} GiB at {peak_where(b)} (nvidia-smi); "
                   f"{fmt_gib(allocated_bytes(b.peak.held))} GiB allocated (torch.cuda.max_memory_allocated), "
                   f"{fmt_gib(reserved_bytes(b.peak.held))} GiB reserved (torch.cuda.max_memory_reserved)",
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
    from fitplan.memory.events import GROUPS
    from fitplan.memory.events import stage_timeline
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
