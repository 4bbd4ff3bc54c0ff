"""The questions fitplan answers, as pure functions of specs.

Every front end (the command line, the web API) resolves its request into a Setup
(fitplan.resolve) and calls these; fitplan.service renders what they return. Nothing here
parses, prints or opens a file.

  plan      the seed report (no configuration), one configuration, or the search with
            its lower bound and, when nothing fits, the smallest GPU count that does
  sweep     (fitplan.sweep) the least per-GPU memory any configuration needs, over GPU counts,
            sequence lengths or micro-batches
  largest_fitting_micro_batch
            the largest micro-batch one configuration fits with, everything else kept
  chosen    the configuration to export: the one given, or the search's recommended (or
            minimum viable) layout
"""
from dataclasses import replace

from fitplan.analysis import SeedAnswer, seed_answer
from fitplan.counts.params import num_params
from fitplan.memory.bound import LowerBound, gpu_state_floor, lower_bound
from fitplan.memory.breakdown import Breakdown, Setup, evaluate
from fitplan.memory.breakdown import fits as config_fits
from fitplan.record import record
from fitplan.request import SearchOptions
from fitplan.specs import ClusterSpec, compat
from fitplan.specs.declare import field_bounds
from fitplan.specs.parallel import OFFLOAD_ORDER, ParallelConfig

SMALLEST_TRIES = 64
WORK_CANDIDATES = 40_000_000   # one answer's searches together: a few seconds (bench/search.py)
MAX_GPUS = int(field_bounds(ClusterSpec, "num_gpus")[1])   # the declared range of --gpus


@record(slots=True)
class SearchAnswer:
    result: object            # fitplan.search.SearchResult
    bound: LowerBound
    smallest: dict | None     # when nothing fits: {"general", "power_of_two", "searched_up_to"}


@record(slots=True)
class PlanAnswer:
    """One of: the seed report, one configuration's breakdown, or a search."""
    setup: Setup
    seed: SeedAnswer | None = None
    breakdown: Breakdown | None = None
    search: SearchAnswer | None = None

    @property
    def fits(self) -> bool:
        if self.search is not None:
            return self.search.result.feasible
        if self.breakdown is not None:
            return self.breakdown.fits
        return any(s.breakdown.fits for s in self.seed.strategies)


def default_max_cp(seq_len: int) -> int:
    """The context-parallel degrees worth searching grow with the sequence: 8 below 128K tokens,
    16 from 128K (Llama 3 Herd Table 4 trained 131,072-token sequences with cp 16), 32 from 1M
    (fitplan's extension of the same tokens per rank); --max-cp overrides."""
    return 32 if seq_len >= 2**20 else 16 if seq_len >= 2**17 else 8


def space_for(setup: Setup, micro_batch: int, opts: SearchOptions, fixed: dict):
    """The search space for this setup, with each given axis fixed."""
    from fitplan.search import default_space   # NumPy is loaded only by the search
    max_cp = opts.max_cp if opts.max_cp is not None else default_max_cp(setup.training.seq_len)
    space = default_space(setup.cluster.num_gpus, micro_batch=micro_batch, max_cp=max_cp,
                          allow_cross_node_tp=opts.allow_cross_node_tp,
                          num_experts=setup.model.moe.num_experts if setup.model.moe else 0)
    from fitplan.specs.parallel import SETTINGS
    if setup.cluster.host_memory_bytes is not None:   # host memory to offload to: tried when nothing else fits
        space = replace(space, offload=OFFLOAD_ORDER)
    settings = {k: v for k, v in fixed.items() if k in SETTINGS}
    return replace(space, settings=replace(space.settings, **settings),
                   **{axis: (value,) for axis, value in fixed.items() if axis not in SETTINGS})


def suggest(setup: Setup, micro_batch: int, opts: SearchOptions, fixed: dict) -> SearchAnswer:
    from fitplan.search import search
    space = space_for(setup, micro_batch, opts, fixed)
    result = search(setup, space, top=opts.top, rank=opts.rank, recommend=True)
    bound = space_bound(setup, space)
    smallest = None if result.feasible else smallest_fitting(setup, micro_batch, opts, fixed, bound.min_gpus)
    return SearchAnswer(result, bound, smallest)


def space_bound(setup: Setup, space) -> LowerBound:
    """The lower bound on the busiest GPU over every configuration of a search space: its
    smallest micro-batch, and the least state its offload modes keep (gpu_state_floor)."""
    model, training = setup.model, setup.training
    state, act = gpu_state_floor(setup, space.offload)
    return lower_bound(B=training.recipe.total_bytes, psi=num_params(model), e=training.act_bytes,
                       s=training.seq_len, b_min=min(space.micro_batches), h=model.hidden_size,
                       L=model.num_layers, N=setup.cluster.num_gpus, U=setup.cluster.usable_bytes, state=state,
                       act=act)


def plan(setup: Setup, micro_batch: int, *, config: ParallelConfig | None, suggesting: bool,
         opts: SearchOptions, fixed: dict) -> PlanAnswer:
    if suggesting:
        return PlanAnswer(setup, search=suggest(setup, micro_batch, opts, fixed))
    if config is not None:
        return PlanAnswer(setup, breakdown=evaluate(setup, config))
    return PlanAnswer(setup, seed=seed_answer(setup, micro_batch=micro_batch))


def smallest_fitting(setup: Setup, micro_batch: int, opts: SearchOptions, fixed: dict, start: int) -> dict:
    """The smallest GPU count from the lower bound upwards where the search finds a fit,
    in general and among powers of two. Bounded: at most SMALLEST_TRIES counts each, never
    past MAX_GPUS, and at most WORK_CANDIDATES candidates in all (a count past the budget, or
    whose own search would pass fitplan.search.MAX_CANDIDATES, is not tried, and
    `searched_up_to` says how far the scan got)."""
    from fitplan.search import MAX_CANDIDATES, search, space_size
    seen: dict = {}
    work = [0]

    def fits(n: int) -> bool:
        if n not in seen:
            s = replace(setup, cluster=replace(setup.cluster, num_gpus=n))
            space = space_for(s, micro_batch, opts, fixed)
            size = space_size(n, space)
            work[0] += size
            if work[0] > WORK_CANDIDATES or size > MAX_CANDIDATES:   # past a budget: not tried
                return False
            seen[n] = bool(search(s, space, top=1, explain=False).suggestions)   # one exact fit confirms
        return seen[n]

    start = max(start, 1)
    general = next((n for n in range(start, min(start + SMALLEST_TRIES, MAX_GPUS + 1)) if fits(n)), None)
    powers = [1 << k for k in range((start - 1).bit_length(), MAX_GPUS.bit_length()) if (1 << k) <= MAX_GPUS]
    power = next((p for p in powers[:SMALLEST_TRIES] if fits(p)), None)
    return {"general": general, "power_of_two": power, "searched_up_to": max(seen) if seen else start}


def largest_fitting_micro_batch(setup: Setup, config: ParallelConfig, *, fits: bool | None = None) -> int | None:
    """The largest micro-batch this configuration fits with, every other setting kept, among
    those the global batch allows (dp x micro-batch divides it, and the pipeline rules on the
    micro-batches per step hold: fitplan.specs.compat); None if none fits. Memory grows with
    the micro-batch (activations and buffers scale with it), so the scan stops at the first
    legal one past the configuration's that does not fit. fits: whether the configuration
    itself fits, where the caller knows it exactly (the search's Evaluated), else None: it is
    then checked (fitplan.memory.breakdown.fits)."""
    with_b: dict = {}   # each micro-batch's configuration, made (and validated) once for both questions

    def at(b: int) -> ParallelConfig:
        if b not in with_b:
            with_b[b] = replace(config, micro_batch=b)
        return with_b[b]

    def legal(b: int) -> bool:
        return not compat.check(setup.model, setup.training, setup.cluster, at(b), allow_cross_node_tp=True)

    def fits_at(b: int) -> bool:
        if b == config.micro_batch and fits is not None:
            return fits
        return config_fits(setup, at(b))

    hi = int(field_bounds(ParallelConfig, "micro_batch")[1])
    b0 = config.micro_batch
    G = setup.training.global_batch
    if G is None:   # no batch to divide: double, then halve the gap (memory grows with b)
        if not fits_at(b0):
            return next((b for b in range(b0 - 1, 0, -1) if fits_at(b)), None)
        lo, up = b0, b0 * 2
        while up <= hi and fits_at(up):
            lo, up = up, up * 2
        up = min(up, hi + 1)
        while up - lo > 1:
            mid = (lo + up) // 2
            lo, up = (mid, up) if fits_at(mid) else (lo, mid)
        return lo
    per_rank = G // config.dp if G % config.dp == 0 else 0   # sequences each data-parallel rank takes per step
    candidates = [b for b in range(1, min(per_rank, hi) + 1) if per_rank % b == 0]
    if not fits_at(b0) or not legal(b0):
        return next((b for b in reversed(candidates) if b < b0 and legal(b) and fits_at(b)), None)
    best = b0
    for b in candidates:
        if b <= b0 or not legal(b):
            continue
        if not fits_at(b):
            break
        best = b
    return best


PICKS = ("recommended", "minimum-viable")


def chosen_config(setup: Setup, micro_batch: int, *, config: ParallelConfig | None, opts: SearchOptions,
                  fixed: dict, pick: str = "recommended") -> tuple[ParallelConfig | None, str]:
    """The configuration to export and how it was chosen: the one given (""), or else the
    layout `plan --suggest` prints under that name, from the same search: "recommended" (the
    shortest step that fits with margin, fitplan.search.RECOMMEND_ORDER) or "minimum-viable"
    (least disturbance). (None, pick) when nothing fits."""
    if config is not None:
        return config, ""
    from fitplan.search import search
    result = search(setup, space_for(setup, micro_batch, opts, fixed), top=1, rank=opts.rank, recommend=True)
    chosen = result.recommended if pick == "recommended" else result.minimum_viable
    return (chosen.config if chosen is not None else None), pick


def export_global_batch(setup: Setup, config: ParallelConfig) -> int:
    """The global batch an export writes: the training's, or the time model's default of
    4p micro-batches per pipeline (fitplan.timing.pipeline.num_microbatches)."""
    from fitplan.timing.pipeline import num_microbatches
    if setup.training.global_batch is not None:
        return setup.training.global_batch
    return config.dp * config.micro_batch * num_microbatches(B=None, b=config.micro_batch, d=config.dp, p=config.pp)
