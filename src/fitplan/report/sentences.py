"""Sentences built from the core's structured results, shared by the text, markdown and
JSON reports (the JSON keeps the texts that explain: the lower bound's inequality, compare's
reasons and what to monitor). No formula lives here: each sentence words numbers the core
computed."""
from fitplan.parts import label
from fitplan.units import fmt_gib


def inequality(bound) -> str:
    """The lower bound of fitplan.memory.bound with its numbers, e.g. 'busiest GPU >=
    (B*psi + e*s*b*h*L)/N = (16*175,000,000,000 + 2*2048*1*12288*96)/8 B = 326.53 GiB > usable
    182.00 GiB'."""
    x = dict(bound.inputs)
    relation = ">" if bound.excludes else "<="
    act = f"{x['e']}*{x['s']}*{x['b_min']}*{x['h']}*{x['L']}"
    if "S" not in x and "act" not in x:
        return (f"busiest GPU >= (B*psi + e*s*b*h*L)/N = ({x['B']}*{x['psi']:,} + {act})/{bound.num_gpus} B = "
                f"{fmt_gib(bound.per_gpu_bytes)} GiB {relation} usable {fmt_gib(bound.usable_bytes)} GiB")
    state = f"{x['S']:,}" if "S" in x else f"{x['B']}*{x['psi']:,}"
    terms = ("S" if "S" in x else "B*psi") + (" + e*s*b*h*L" if x.get("act", 1) else "")
    values = state + (f" + {act}" if x.get("act", 1) else "")
    why = " (S: the least state the GPUs keep: a frozen base with adapters, or what offload leaves)" if "S" in x else ""
    return (f"busiest GPU >= ({terms})/N = ({values})/{bound.num_gpus} B = {fmt_gib(bound.per_gpu_bytes)} GiB "
            f"{relation} usable {fmt_gib(bound.usable_bytes)} GiB{why}")


# ---------------------------------------------------------------- fitplan.compare

PATTERN = {"tp": "all-reduce (RS + AG with SP)", "ep": "all-to-all", "cp": "ring point-to-point",
           "pp": "point-to-point", "dp": "all-reduce / reduce-scatter + all-gather"}
MONITOR = {   # Metric.key -> (what is measured, what a departure from the expected value catches)
    "forward": ("forward time per micro-batch, per stage",
                "a stage much slower than this is the straggler every other stage waits on"),
    "backward": ("backward time per micro-batch, per stage",
                 "about 2x forward (3x under full recompute); more points at recompute or a slow stage"),
    "receive_wait": ("point-to-point receive wait per micro-batch",
                     "waits well above one send's transfer time mean the upstream stage is late"),
    "bubble": ("bubble time per step", "{bubble_formula} = {bubble_fraction:.2%} of the pipelined work; more means "
                                       "stages drift"),
    "stage_gap": ("slowest minus fastest stage, per micro-batch",
                  "the last stage's output layer and loss (3 x 2bshV/t FLOPs); a larger gap is an imbalanced split"),
}


def layout_words(c) -> str:
    """A configuration in a few words, only what differs from one plain GPU: 'tp8 pp2 sp selective',
    'dp4 tp2 pp2 v2 zero1', 'dp8' (the chart labels)."""
    degrees = (("dp", c.dp), ("tp", c.tp), ("pp", c.pp), ("v", c.virtual_stages), ("cp", c.cp), ("ep", c.ep))
    words = [f"{axis}{n}" for axis, n in degrees if n > 1]
    words += [f"zero{int(c.zero)}"] if int(c.zero) else []
    words += ["sp"] if c.sequence_parallel else []
    words += [c.recompute.value] if c.recompute.value != "none" else []
    words += [f"mb{c.micro_batch}"] if c.micro_batch > 1 else []
    return " ".join(words) or "one GPU"


def config_short(c) -> str:
    return f"tp={c.tp} pp={c.pp} dp={c.dp}, recompute {c.recompute.value}"


def cost(layout, c) -> str:
    """A compare.Cost in words, e.g. 'tp traffic (all-reduce (RS + AG with SP), inside a node over NVLink 4)'."""
    st = layout.step
    if c.kind == "bubble":
        return f"pipeline bubble ({st.bubble_fraction:.1%} of the pipelined work)"
    if c.kind == "recompute":
        return f"{layout.config.recompute.value} recompute ({st.hfu / st.mfu - 1:+.1%} FLOPs)"
    ac = st.comm[c.kind]
    where = "inside a node" if ac.intra_node else "across nodes"
    return f"{ac.name} traffic ({PATTERN[c.kind]}, {where} over {ac.link})"


def reason(r) -> str:
    """One compare.Reason as a sentence."""
    l = r.layout
    if r.verdict == "cannot_build":
        return f"{l.name}: cannot be built here: {l.problem}"
    if r.verdict == "does_not_fit":
        return (f"{l.name}: does not fit even with full recompute ({fmt_gib(l.memory.per_gpu_bytes)} GiB > "
                f"{fmt_gib(l.memory.usable_bytes)} GiB)")
    largest = f"its largest cost is {cost(l, r.cost)}: {r.cost.seconds:,.3g} s"
    if r.verdict == "preferred":
        return (f"{l.name} ({config_short(l.config)}) is the fastest layout that fits: {l.step.step_time_s:,.3f} s "
                f"per step, MFU {l.step.mfu:.1%}; {largest}")
    return (f"{l.name}: {r.slower_s:+,.3g} s per step ({r.ratio:.3f}x), mostly {label(r.mostly)} "
            f"({r.mostly_s:+,.3g} s); {largest}")


def reasons(cmp) -> tuple[str, ...]:
    return tuple(reason(r) for r in cmp.reasons)


def monitor(cmp) -> tuple[tuple[str, float, str, str], ...]:
    """(metric, expected value, unit, what it catches) for each compare.Metric."""
    if cmp.preferred is None:
        return ()
    st = cmp.preferred.step
    words = dict(bubble_formula=next(t.formula for t in st.terms if t.key == "pipeline/bubble_fraction"),
                 bubble_fraction=st.bubble_fraction)
    return tuple((MONITOR[m.key][0], m.value, m.unit, MONITOR[m.key][1].format(**words)) for m in cmp.monitor)
