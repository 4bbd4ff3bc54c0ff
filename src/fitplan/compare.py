"""Pure tensor parallelism, pure pipeline parallelism and hybrids, side by side.

Hybrids keep tp inside a node (the largest legal tp <= GPUs per node) and split the rest
between pp (across nodes) and dp (outermost), one row per split; rows are ranked by step
time among those that fit, so a what-if (a slower inter-node link, fp8) shows how the
ranking moves.

The seed's second exercise: for one model and N GPUs, what each layout costs in memory
(the simplified 10 B/param budget, then the full recipe, then activations by recompute
mode), in communication (pattern, bytes per step per GPU, link), in bubble and in step
time; which one to use and why; and what to watch on the real run. Pure: returns
dataclasses built from fitplan.memory.breakdown.evaluate and fitplan.timing.step.evaluate_step.
"""
from dataclasses import dataclass, replace

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.memory.breakdown import PARTS, STATE_PARTS, Breakdown, Setup, evaluate, shape_inputs
from fitplan.parts import label
from fitplan.specs import compat
from fitplan.specs.parallel import ParallelConfig, Recompute
from fitplan.timing import compute as C
from fitplan.timing.step import StepBreakdown, evaluate_step

STORED = [k for k in PARTS if k.startswith("activations/") and k != "activations/recompute_workspace"]
PATTERN = {"tp": "all-reduce (RS + AG with SP)", "cp": "ring point-to-point", "pp": "point-to-point",
           "dp": "all-reduce / reduce-scatter + all-gather"}


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    config: ParallelConfig | None
    problem: str                       # why the layout cannot be built here ("" when it can)
    simplified_state_bytes: int = 0    # the exercise's 10 B/param on the busiest GPU
    state_bytes: int = 0               # the full recipe
    stored_by_recompute: tuple = ()    # (mode, stored activation bytes), none -> full
    memory: Breakdown | None = None    # at the least recompute that fits (full when none does)
    step: StepBreakdown | None = None

    @property
    def fits(self) -> bool:
        return self.memory is not None and self.memory.fits


@dataclass(frozen=True, slots=True)
class Comparison:
    layouts: tuple[Layout, ...]
    preferred: Layout | None
    reasons: tuple[str, ...]
    monitor: tuple[tuple[str, float, str, str], ...]   # (metric, expected value, unit, what it catches)


def _candidates(setup: Setup, micro_batch: int) -> list[tuple[str, ParallelConfig]]:
    n, g, L = setup.cluster.num_gpus, setup.cluster.gpus_per_node, setup.model.num_layers
    out = [("pure TP", ParallelConfig(tp=n, sequence_parallel=n > 1, micro_batch=micro_batch)),
           ("pure PP", ParallelConfig(pp=n, micro_batch=micro_batch))]
    tp = max([t for t in range(1, min(g, n) + 1) if n % t == 0 and setup.model.num_kv_heads % t == 0
              and setup.model.ffn_hidden_size % t == 0], default=1)
    rest = n // tp
    pps = [p for p in range(1, rest + 1) if rest % p == 0 and L % p == 0]
    hybrids = [ParallelConfig(tp=tp, pp=p, dp=rest // p, sequence_parallel=tp > 1, micro_batch=micro_batch)
               for p in pps if p > 1 or rest == 1]
    return out + [(f"hybrid pp{c.pp} x dp{c.dp}", c) for c in hybrids]


def _problem(setup: Setup, config: ParallelConfig) -> str:
    violations = compat.check(setup.model, setup.training, setup.cluster, config, allow_cross_node_tp=True)
    return violations[0].message if violations else ""


def _least_recompute(setup: Setup, config: ParallelConfig) -> tuple[ParallelConfig, Breakdown]:
    for rc in Recompute:
        c = replace(config, recompute=rc)
        b = evaluate(setup, c)
        if b.fits:
            return c, b
    return c, b


def layout(setup: Setup, name: str, config: ParallelConfig) -> Layout:
    problem = _problem(setup, config)
    if problem:
        return Layout(name=name, config=config, problem=problem)
    simple = replace(setup, training=replace(setup.training, recipe=presets.recipe("exercise-10")))
    stored = tuple((rc, sum(evaluate(setup, replace(config, recompute=rc)).parts[k] for k in STORED))
                   for rc in Recompute)
    chosen, memory = _least_recompute(setup, config)
    return Layout(name=name, config=chosen, problem="",
                  simplified_state_bytes=evaluate(simple, chosen).state_bytes,
                  state_bytes=sum(memory.parts[k] for k in STATE_PARTS), stored_by_recompute=stored,
                  memory=memory, step=evaluate_step(setup, chosen))


def _overhead(l: Layout) -> tuple[str, float]:
    """The layout's largest cost besides compute: an axis's exposed traffic or the bubble."""
    st = l.step
    costs = {f"{a} traffic ({PATTERN[a]}, {'inside a node' if c.intra_node else 'across nodes'} over {c.link})":
             c.exposed_s for a, c in st.comm.items() if c.degree > 1}
    costs[f"pipeline bubble ({st.bubble_fraction:.1%} of the pipelined work)"] = st.parts["time/bubble"]
    costs[f"{l.config.recompute.value} recompute ({st.hfu / st.mfu - 1:+.1%} FLOPs)"] = \
        st.parts["time/compute"] * (1 - st.mfu / st.hfu)
    return max(costs.items(), key=lambda kv: kv[1])


def compare(setup: Setup, *, micro_batch: int = 1) -> Comparison:
    layouts = tuple(layout(setup, name, c) for name, c in _candidates(setup, micro_batch))
    layouts = tuple(sorted(layouts, key=lambda l: (not l.fits, l.step.step_time_s if l.step else float("inf"))))
    built = [l for l in layouts if not l.problem]
    fitting = [l for l in built if l.fits]
    preferred = min(fitting, key=lambda l: l.step.step_time_s) if fitting else None
    reasons = []
    for l in layouts:
        if l is preferred:
            continue
        if l.problem:
            reasons.append(f"{l.name}: cannot be built here: {l.problem}")
        elif not l.fits:
            reasons.append(f"{l.name}: does not fit even with full recompute "
                           f"({l.memory.per_gpu_bytes / 2**30:,.2f} GiB > {l.memory.usable_bytes / 2**30:,.2f} GiB)")
        elif preferred is not None:
            what, secs = _overhead(l)
            part, extra = max(((k, l.step.parts[k] - preferred.step.parts[k]) for k in l.step.parts),
                              key=lambda kv: kv[1])
            reasons.append(f"{l.name}: {l.step.step_time_s - preferred.step.step_time_s:+,.3g} s per step "
                           f"({l.step.step_time_s / preferred.step.step_time_s:.3f}x), mostly {label(part)} "
                           f"({extra:+,.3g} s); its largest cost is {what}: {secs:,.3g} s")
    if preferred is not None:
        what, secs = _overhead(preferred)
        reasons.insert(0, f"{preferred.name} ({_short(preferred.config)}) is the fastest layout that fits: "
                          f"{preferred.step.step_time_s:,.3f} s per step, MFU {preferred.step.mfu:.1%}; "
                          f"its largest cost is {what}: {secs:,.3g} s")
    return Comparison(layouts=layouts, preferred=preferred, reasons=tuple(reasons),
                      monitor=monitor(setup, preferred) if preferred else ())


def _short(c: ParallelConfig) -> str:
    return f"tp={c.tp} pp={c.pp} dp={c.dp}, recompute {c.recompute.value}"


def monitor(setup: Setup, l: Layout) -> tuple:
    """Metrics that expose a pipeline-stage synchronisation bottleneck, with expected values."""
    st, c = l.step, l.config
    terms = {t.key: t.value for t in st.terms}
    sh = shape_inputs(setup)
    peak = C.peak_flops_per_s(setup.cluster.gpu, setup.training.recipe.compute)
    logits = F.logits_flops(B=c.micro_batch, s=sh["s"], h=sh["h"], V=setup.model.vocab_size)
    gpu = setup.cluster.gpu
    eff = C.gemm_efficiency(eff_max=gpu.efficiency, h=sh["h"], h0=gpu.efficiency_h0)
    gap = C.compute_s(F=C.per_gpu_flops(F=3 * logits, t=c.tp, c=c.cp), peak=peak, eff=eff)
    sends = max(1, 2 * st.num_microbatches * c.virtual_stages)
    return (
        ("forward time per micro-batch, per stage", terms["time/forward_microbatch"], "s",
         "a stage much slower than this is the straggler every other stage waits on"),
        ("backward time per micro-batch, per stage", terms["time/backward_microbatch"], "s",
         "about 2x forward (3x under full recompute); more points at recompute or a slow stage"),
        ("point-to-point receive wait per micro-batch", st.parts["time/pp_exposed"] / sends, "s",
         "waits well above one send's transfer time mean the upstream stage is late"),
        ("bubble time per step", st.parts["time/bubble"], "s",
         f"(p - 1)/(v*m) = {st.bubble_fraction:.2%} of the pipelined work; more means stages drift"),
        ("slowest minus fastest stage, per micro-batch", gap, "s",
         "the last stage's output layer and loss (3 x 2bshV/t FLOPs); a larger gap is an imbalanced split"),
    )
