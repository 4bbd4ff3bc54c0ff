"""Plain-text reports. Fixed widths, one unit per column (GiB = 2**30 B), no terminal sniffing."""
from fitplan import presets
from fitplan.analysis import SeedAnswer
from fitplan.memory.breakdown import PARTS, Breakdown

from fitplan.units import GiB

LABELS = {
    "states/weights": "weights", "states/grads": "grads", "states/master": "master weights",
    "states/optimizer": "optimizer", "activations/layers": "activations",
    "activations/pipeline_in_flight": "pipeline extras (in flight)", "activations/embedding": "embedding extras",
    "activations/output": "output-layer extras", "activations/recompute_workspace": "recompute workspace",
}
STRATEGY_NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}
STRATEGY_FORMULAS = {"ddp": "(w+g+m+K)*psi", "zero1": "(w+g)*psi + (m+K)*psi/N_d",
                     "zero2": "w*psi + (g+m+K)*psi/N_d", "zero3": "(w+g+m+K)*psi/N_d"}


def gib(num_bytes) -> str:
    return f"{num_bytes / GiB:,.2f}"


def _header(setup) -> list[str]:
    m, t, c = setup.model, setup.training, setup.cluster
    from fitplan.counts.params import shape_params
    count = (f"{m.published_params:,} parameters (published; shape-derived {shape_params(m):,})"
             if m.published_params else f"{shape_params(m):,} parameters (from shapes)")
    batch = f"global batch {t.global_batch}" if t.global_batch else "global batch not given"
    return [
        f"model    {m.name}: {count}",
        f"         L={m.num_layers} h={m.hidden_size} a={m.num_heads} kv_heads={m.num_kv_heads} "
        f"ffn={m.ffn_hidden_size} V={m.vocab_size} mlp={m.mlp.value} "
        f"{'tied' if m.tied_embeddings else 'untied'} embeddings",
        f"training s={t.seq_len}, {batch}, precision {t.recipe.name} ({t.recipe.total_bytes:g} B/param), "
        f"activations {t.act_bytes} B/element, dropout {'on' if t.dropout else 'off'}",
        f"cluster  {c.num_gpus} x {c.gpu.name}: {gib(c.gpu.memory_bytes)} GiB each, {gib(c.reserve_bytes)} GiB "
        f"reserved, {gib(c.usable_bytes)} GiB usable; {c.gpus_per_node} GPUs per node",
    ]


def seed(a: SeedAnswer) -> str:
    setup = a.setup
    bpp = " + ".join(f"{v:g} {k}" for k, v in a.bytes_per_param.items())
    total_bpp = setup.training.recipe.total_bytes
    lines = _header(setup) + ["", "(a) Model state  [ZeRO Sec. 3.1; recipe: " + setup.training.recipe.source + "]",
        f"    bytes per parameter: {bpp} = {total_bpp:g}",
        f"    total: {total_bpp:g} * {a.num_params:,} = {a.state_total_bytes:,} B = {gib(a.state_total_bytes)} GiB",
        f"    = {a.gpus_of_pure_state:.2f} GPUs of pure state ({gib(a.state_total_bytes)} GiB / "
        f"{gib(setup.cluster.gpu.memory_bytes)} GiB per GPU)",
        "", f"(b) Activations, one micro-batch, no parallelism  [{a.per_layer.cite}]",
        f"    attention factor {a.attention_factor.formula} with {_inputs(a.attention_factor)}: "
        f"{a.attention_factor.value:g}",
        f"    one layer: {a.per_layer.formula}",
        f"       with {_inputs(a.per_layer)}",
        f"       = {a.per_layer.value:,} B = {gib(a.per_layer.value)} GiB",
        f"    all {setup.model.num_layers} layers: {a.all_layers_bytes:,} B = {gib(a.all_layers_bytes)} GiB",
        f"    the bigger problem: {a.bigger_problem} ({gib(max(a.state_total_bytes, a.all_layers_bytes))} GiB vs "
        f"{gib(min(a.state_total_bytes, a.all_layers_bytes))} GiB, "
        f"{max(a.state_total_bytes, a.all_layers_bytes) / max(1, min(a.state_total_bytes, a.all_layers_bytes)):.1f}x)",
        "", f"(c) The cheap options on {setup.cluster.num_gpus} GPUs: dp={setup.cluster.num_gpus}, no tp/pp/cp, "
            f"no recompute  [ZeRO Sec. 5, Fig. 1]",
        f"    {'strategy':<8} {'state formula':<26} {'state':>10} {'activ.':>9} {'total':>10}  {'fits':<4}  "
        f"too big (GiB)"]
    for s in a.strategies:
        b = s.breakdown
        why = "-" if s.blocking is None else (f"{s.blocking.name}, {s.blocking.formula} = {gib(s.blocking.bytes)}"
                                              + ("" if s.blocking.alone_exceeds else " (the sum exceeds, no one term)"))
        lines.append(f"    {STRATEGY_NAMES[s.name]:<8} {STRATEGY_FORMULAS[s.name]:<26} {gib(b.state_bytes):>10} "
                     f"{gib(b.activation_bytes):>9} {gib(b.per_gpu_bytes):>10}  {'yes' if b.fits else 'no':<4}  {why}")
    lines.append(f"    (GiB per GPU against {gib(setup.cluster.usable_bytes)} GiB usable; activations include the "
                 f"embedding and output-layer extras, Korthikanti Sec. 4.3)")
    lines += _assumptions(a.per_layer.assumes)
    lines.append("next: --suggest searches tp, pp, cp, sequence parallel and recompute for a configuration that fits")
    return "\n".join(lines) + "\n"


def _inputs(term) -> str:
    return ", ".join(f"{k}={v}" for k, v in term.inputs)


def _assumptions(assumes) -> list[str]:
    return ["", "assumptions:"] + [f"  - {x}" for x in assumes] + [""]


def breakdown(setup, b: Breakdown) -> str:
    c = b.config
    lines = _header(setup) + ["", config_line(c), f"busiest GPU: {_stage_name(b)}", "",
                              f"  {'term':<30} {'GiB':>10}  formula (source)"]
    by_key = {t.key: t for t in b.terms}
    for key in PARTS:
        term = by_key.get(key)
        how = f"{term.formula}  ({term.cite})" if term else "not held on this stage"
        lines.append(f"  {LABELS[key]:<30} {gib(b.parts[key]):>10}  {how}")
    lines += [f"  {'total':<30} {gib(b.per_gpu_bytes):>10}",
              f"  {'usable (capacity - reserve)':<30} {gib(b.usable_bytes):>10}  "
              f"{gib(setup.cluster.gpu.memory_bytes)} - {gib(b.reserve_bytes)} reserve",
              f"  {'headroom':<30} {gib(b.headroom_bytes):>10}",
              "", f"verdict: {'fits' if b.fits else 'does not fit'} "
                  f"({gib(b.per_gpu_bytes)} GiB {'<=' if b.fits else '>'} {gib(b.usable_bytes)} GiB usable)",
              "", "where (every formula with its inputs):"]
    for t in b.terms:
        lines.append(f"  {t.key} = {_value(t)}")
        lines.append(f"      {t.formula}; {_inputs(t)}  [{t.cite}]")
    assumes = sorted({a for t in b.terms for a in t.assumes})
    return "\n".join(lines + _assumptions(assumes))


def _value(term) -> str:
    if term.unit == "bytes":
        return f"{term.value:,} B ({gib(term.value)} GiB)"
    return f"{term.value:,}" if isinstance(term.value, int) else f"{term.value:.6g}"


def _stage_name(b: Breakdown) -> str:
    return {"only": "every GPU holds the whole model (pp = 1)",
            "first": "first pipeline stage (embedding, most micro-batches in flight)",
            "last": "last pipeline stage (output layer and logits)"}[b.stage]


def config_line(c) -> str:
    return (f"config: dp={c.dp} tp={c.tp} pp={c.pp} cp={c.cp} zero={int(c.zero)} "
            f"sequence_parallel={'on' if c.sequence_parallel else 'off'} recompute={c.recompute.value} "
            f"micro_batch={c.micro_batch} virtual_stages={c.virtual_stages}")


def search(setup, r, bound, smallest) -> str:
    lines = _header(setup) + ["", f"Search over {r.considered:,} candidates on {r.num_gpus} GPUs: "
                                  f"{r.considered - r.fit:,} rejected, {r.fit:,} fit"]
    lines += [f"  rejected: " + "; ".join(f"{k} {v:,}" for k, v in r.rejected_by_reason.items())]
    lines += ["", "Lower bound (every configuration):", f"  {bound.inequality}",
              f"  so N >= {bound.min_gpus} GPUs in general, {bound.min_gpus_power_of_two} as a power of two"]
    if not r.feasible:
        if bound.excludes:
            lines += ["", f"Nothing fits on {r.num_gpus} GPUs, whatever the ZeRO stage, tp, pp, cp, sequence "
                          f"parallel or recompute mode: the inequality above exceeds the usable memory."]
        else:
            lines += ["", f"Nothing fits on {r.num_gpus} GPUs: the bound allows it, but each of the legal candidates "
                          f"exceeds memory or breaks a rule (counts above)."]
            if r.closest is not None:
                lines.append(f"  closest: {config_line(r.closest.config)} needs {gib(r.closest.per_gpu_bytes)} GiB")
        if smallest:
            g, p2 = smallest["general"], smallest["power_of_two"]
            lines.append(f"  smallest GPU count where the search finds a fit: "
                         f"{g if g else 'none up to ' + str(smallest['searched_up_to'])} "
                         f"(power of two: {p2 if p2 else 'none up to ' + str(smallest['searched_up_to'])})")
        return "\n".join(lines) + "\n"
    lines += ["", f"Ranked by {r.rank_order}", "",
              f"  {'#':>2} {'dp':>4} {'tp':>3} {'pp':>3} {'cp':>3} {'zero':>4} {'sp':>3} {'recompute':>9} {'mb':>3} "
              f"{'v':>2} {'per-GPU':>9} {'headroom':>9}  needs"]
    for i, s in enumerate(r.suggestions, 1):
        c, b = s.config, s.breakdown
        lines.append(f"  {i:>2} {c.dp:>4} {c.tp:>3} {c.pp:>3} {c.cp:>3} {int(c.zero):>4} "
                     f"{'on' if c.sequence_parallel else 'off':>3} {c.recompute.value:>9} {c.micro_batch:>3} "
                     f"{c.virtual_stages:>2} {gib(b.per_gpu_bytes):>9} {gib(b.headroom_bytes):>9}  {s.rank_reason}")
    lines.append("  (GiB per GPU; headroom against the usable memory)")
    best = r.suggestions[0]
    lines += ["", f"Recommended: #1, {best.rank_reason}; {gib(best.breakdown.per_gpu_bytes)} GiB per GPU, "
                  f"{gib(best.breakdown.headroom_bytes)} GiB headroom. Recompute needed: {best.config.recompute.value}."]
    return "\n".join(lines) + "\n"


def preset_list() -> str:
    lines = ["models:"]
    for name, p in presets.MODELS.items():
        lines.append(f"  {name:<16} L={p.model.num_layers:<4} h={p.model.hidden_size:<6} s={p.seq_len:<6} "
                     f"{p.model.source}")
    lines.append("gpus:")
    for name, g in presets.GPUS.items():
        lines.append(f"  {name:<16} {gib(g.memory_bytes):>8} GiB  {g.source}")
    lines.append("precision recipes:")
    for name, r in presets.RECIPES.items():
        lines.append(f"  {name:<20} {r.total_bytes:>4g} B/param  {r.description}")
    return "\n".join(lines) + "\n"


def preset_show(name: str) -> str:
    for registry in (presets.MODELS, presets.GPUS, presets.RECIPES):
        if name in registry:
            return repr(registry[name]) + "\n"
    presets.model(name)   # raises with suggestions
    return ""
