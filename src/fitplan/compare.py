"""Pure tensor parallelism, pure pipeline parallelism and hybrids, side by side.

Hybrids keep tp inside a node and split the rest between pp (across nodes) and dp
(outermost), one row per split: tp is the largest for which some split is legal by
fitplan.specs.compat's rules whatever the global batch, and a split the global batch rules
out is still shown, with its problem. Rows are ranked by step time among those that fit,
so a what-if (a slower inter-node link, fp8) shows how the ranking moves.

The seed's second exercise: for one model and N GPUs, what each layout costs in memory
(the simplified 10 B/param budget, then the full recipe, then activations by recompute
mode), in communication (bytes per step per GPU, link), in bubble and in step time; which
one to use and why; and what to watch on the real run. Pure: returns dataclasses built from
fitplan.memory.breakdown.evaluate and fitplan.timing.breakdown.evaluate_step; fitplan.report
words them.
"""
from dataclasses import replace

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.memory.breakdown import STATE_PARTS, Breakdown, Setup, Shapes, evaluate
from fitplan.parts import ACTIVATIONS, part_keys
from fitplan.record import record
from fitplan.specs import compat
from fitplan.specs.parallel import SEARCHED_RECOMPUTE, ParallelConfig
from fitplan.timing import compute as C
from fitplan.timing.breakdown import StepBreakdown, evaluate_step

STORED = [k for k in part_keys(ACTIVATIONS) if k != "activations/recompute_workspace"]


@record(slots=True)
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


@record(slots=True)
class Cost:
    """A layout's largest cost besides compute."""
    kind: str          # an axis ("tp", "cp", "pp", "dp": its exposed traffic), "bubble" or "recompute"
    seconds: float


@record(slots=True)
class Reason:
    """Why a layout is or is not the one to use. verdict: "preferred", "cannot_build" (its
    Layout.problem says why), "does_not_fit" (even with full recompute) or "slower" (it fits;
    against the preferred layout it is slower_s seconds per step slower, ratio times the
    step, mostly in the time part `mostly`, by mostly_s seconds)."""
    verdict: str
    layout: Layout
    cost: Cost | None = None       # preferred and slower layouts
    slower_s: float = 0.0
    ratio: float = 1.0
    mostly: str = ""               # a fitplan.timing.step.PARTS key
    mostly_s: float = 0.0


@record(slots=True)
class Metric:
    """A quantity to watch on the real run, with its expected value."""
    key: str       # "forward", "backward", "receive_wait", "bubble" or "stage_gap"
    value: float
    unit: str


@record(slots=True)
class Comparison:
    layouts: tuple[Layout, ...]
    preferred: Layout | None
    reasons: tuple[Reason, ...]    # the preferred layout's first, then the others' in layout order
    monitor: tuple[Metric, ...]    # for the preferred layout


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _candidates(setup: Setup, micro_batch: int) -> list[tuple[str, ParallelConfig]]:
    n = setup.cluster.num_gpus
    out = [("pure TP", ParallelConfig(tp=n, sequence_parallel=n > 1, micro_batch=micro_batch)),
           ("pure PP", ParallelConfig(pp=n, micro_batch=micro_batch))]
    splits = [ParallelConfig(tp=t, pp=p, dp=n // (t * p), sequence_parallel=t > 1, micro_batch=micro_batch)
              for t in _divisors(n) for p in _divisors(n // t)]
    any_batch = replace(setup.training, global_batch=None)   # a split the batch rules out is shown with its problem
    legal = [c for c in splits if not compat.check(setup.model, any_batch, setup.cluster, c)]
    tp = max((c.tp for c in legal), default=None)
    hybrids = [c for c in legal if c.tp == tp and (c.pp > 1 or c.dp == 1)]
    return out + [(f"hybrid pp{c.pp} x dp{c.dp}", c) for c in hybrids]


def _problem(setup: Setup, config: ParallelConfig) -> str:
    violations = compat.check(setup.model, setup.training, setup.cluster, config, allow_cross_node_tp=True)
    return violations[0].message if violations else ""


def _least_recompute(setup: Setup, config: ParallelConfig) -> tuple[ParallelConfig, Breakdown]:
    for rc in SEARCHED_RECOMPUTE:
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
                   for rc in SEARCHED_RECOMPUTE)
    chosen, memory = _least_recompute(setup, config)
    return Layout(name=name, config=chosen, problem="",
                  simplified_state_bytes=evaluate(simple, chosen).state_bytes,
                  state_bytes=sum(memory.parts[k] for k in STATE_PARTS), stored_by_recompute=stored,
                  memory=memory, step=evaluate_step(setup, chosen))


def largest_cost(l: Layout) -> Cost:
    """The layout's largest cost besides compute: an axis's exposed traffic, the bubble or
    the recompute FLOPs (the first of equal costs, in that order)."""
    st = l.step
    costs = [Cost(a, c.exposed_s) for a, c in st.comm.items() if c.degree > 1]
    costs.append(Cost("bubble", st.parts["time/bubble"]))
    costs.append(Cost("recompute", st.parts["time/compute"] * (1 - st.mfu / st.hfu)))
    return max(costs, key=lambda c: c.seconds)


def _against(l: Layout, preferred: Layout) -> Reason:
    part, extra = max(((k, l.step.parts[k] - preferred.step.parts[k]) for k in l.step.parts), key=lambda kv: kv[1])
    return Reason("slower", l, cost=largest_cost(l), slower_s=l.step.step_time_s - preferred.step.step_time_s,
                  ratio=l.step.step_time_s / preferred.step.step_time_s, mostly=part, mostly_s=extra)


def compare(setup: Setup, *, micro_batch: int = 1) -> Comparison:
    layouts = tuple(layout(setup, name, c) for name, c in _candidates(setup, micro_batch))
    layouts = tuple(sorted(layouts, key=lambda l: (not l.fits, l.step.step_time_s if l.step else float("inf"))))
    fitting = [l for l in layouts if not l.problem and l.fits]
    preferred = min(fitting, key=lambda l: l.step.step_time_s) if fitting else None
    reasons = [] if preferred is None else [Reason("preferred", preferred, cost=largest_cost(preferred))]
    for l in layouts:
        if l is preferred:
            continue
        if l.problem:
            reasons.append(Reason("cannot_build", l))
        elif not l.fits:
            reasons.append(Reason("does_not_fit", l))
        elif preferred is not None:
            reasons.append(_against(l, preferred))
    return Comparison(layouts=layouts, preferred=preferred, reasons=tuple(reasons),
                      monitor=monitor(setup, preferred) if preferred else ())


def monitor(setup: Setup, l: Layout) -> tuple[Metric, ...]:
    """Metrics that expose a pipeline-stage synchronisation bottleneck, with expected values:
    forward and backward time per micro-batch per stage, the point-to-point receive wait per
    micro-batch, the bubble per step, and the slowest minus the fastest stage per micro-batch
    (the last stage's output layer and loss, 3 x 2bshV/t FLOPs)."""
    st, c = l.step, l.config
    terms = {t.key: t.value for t in st.terms}
    sh = Shapes.of(setup)
    logits = F.logits_flops(B=c.micro_batch, s=sh.s, h=sh.h, V=setup.model.vocab_size)
    # the output layer runs in bf16 at its GEMM's sustained efficiency (fitplan.timing.gemm)
    gap = C.compute_s(F=C.per_gpu_flops(F=3 * logits, t=c.tp, c=c.cp), peak=setup.cluster.gpu.peak_bf16_flops_per_s,
                      eff=terms["ratio/head_efficiency"])
    sends = max(1, 2 * st.num_microbatches * c.virtual_stages)
    return (Metric("forward", terms["time/forward_microbatch"], "s"),
            Metric("backward", terms["time/backward_microbatch"], "s"),
            Metric("receive_wait", st.parts["time/pp_exposed"] / sends, "s"),
            Metric("bubble", st.parts["time/bubble"], "s"),
            Metric("stage_gap", gap, "s"))
