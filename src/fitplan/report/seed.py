"""The seed report (no configuration): model state, activations and the DDP/ZeRO strategies."""
from fitplan.report.header import STRATEGY_NAMES, header, state_formula, term_inputs
from fitplan.report.render import Bullets, Heading, Lines, Table
from fitplan.report.to_train import to_train_table
from fitplan.units import fmt_gib


def _layer_lines(a) -> list:
    """One layer's formula and bytes; a hybrid model's, one line group per kind of layer."""
    kinds = a.layer_kinds or (("", a.setup.model.num_layers, a.per_layer),)
    out = []
    for name, n, term in kinds:
        label = f"one {name} layer ({n} of them)" if name else "one layer"
        out += [f"{label}: {term.formula}", f"   with {term_inputs(term)}",
                f"   = {term.value:,} B = {fmt_gib(term.value)} GiB"]
    return out


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
        Lines((f"attention factor {a.attention_factor.formula} with {term_inputs(a.attention_factor)}: "
               f"{a.attention_factor.value:g}",
               *_layer_lines(a),
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
