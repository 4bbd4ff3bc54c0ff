"""Search: enumerate -> reject with reasons -> evaluate -> rank, over NumPy arrays.

The candidates are every combination of the SearchSpace whose degrees multiply to the
GPU count. Recompute and offload split the space into screens; inside a screen the numeric
axes (the degree triples, each with its sequence-parallel setting, micro-batch, virtual stages,
ep) and the ZeRO stages are broadcast axes of one box (_Grid.box), the candidate ranks a leading
axis of its Stage, and the same formula functions that explain one configuration evaluate them
all at once (fitplan.memory.breakdown.busiest_totals, fitplan.timing.step.step_time, with a
Memo that keeps what no recompute mode changes). Each (ZeRO, SP, recompute)
group then reads its slice of the screen, in the order the rank and the reject counts
expect. What the search returns is re-evaluated exactly, one configuration at a time,
before it is shown.
"""
from dataclasses import replace
from itertools import islice, product

import numpy as np

from fitplan.errors import SpecError
from fitplan.analysis import margin_limit_bytes
from fitplan.explain import RAW, Memo
from fitplan.memory.breakdown import Breakdown, Setup, busiest_totals, evaluate
from fitplan.memory.stages import Stage, candidate_stages, end_stages
from fitplan.record import record
from fitplan.specs import compat
from fitplan.specs.parallel import SEARCHED_RECOMPUTE, SETTINGS, Offload, ParallelConfig, Recompute, ZeroStage
from fitplan.units import fmt_count
# Settings every candidate shares: the user's value (with --suggest) or the default.

# A space larger than this takes more than a few seconds (about 7-19 M candidates/s on one core,
# bench/search.py) and a few hundred MiB; it is refused with the levers that narrow it.
MAX_CANDIDATES = 20_000_000

RANK_ORDER = (
    "least disturbance from plain data parallelism, in this order: no offload before offload (host memory, the "
    "host link and a CPU optimizer step; tried only when nothing fits on the GPUs alone, in the order optimizer, "
    "optimizer+params, activations, params-nvme); no CP before CP (it changes every "
    "layer's attention kernel and traffic; tried only when nothing else fits); recompute none < selective "
    "< full; ZeRO stage lower first; no TP before TP; no PP before PP; no interleaving before interleaving; "
    "micro-batch closer to the requested one first; sequence parallel off before on; then smaller tp, pp, "
    "cp, virtual stages; then smaller per-GPU total"
)


@record(slots=True, kw_only=True)
class SearchSpace:
    tp: tuple[int, ...]
    pp: tuple[int, ...]
    cp: tuple[int, ...]
    micro_batches: tuple[int, ...]
    virtual_stages: tuple[int, ...]
    zero: tuple[ZeroStage, ...] = tuple(ZeroStage)
    sequence_parallel: tuple[bool, ...] = (False, True)
    recompute: tuple[Recompute, ...] = SEARCHED_RECOMPUTE
    requested_micro_batch: int = 1
    allow_cross_node_tp: bool = False
    ep: tuple[int, ...] = (1,)
    settings: ParallelConfig = ParallelConfig()   # its SETTINGS fields hold for every candidate
    # tiers: each is searched whole, in this order, only while the ones before it have nothing that fits
    offload: tuple[Offload, ...] = (Offload.NONE,)


def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def default_space(num_gpus: int, *, micro_batch: int = 1, max_cp: int = 8, max_virtual_stages: int = 4,
                  micro_batches: tuple[int, ...] | None = None, allow_cross_node_tp: bool = False,
                  num_experts: int = 0) -> SearchSpace:
    """tp, pp: every divisor of the GPU count; cp: divisors up to max_cp; micro-batch: the
    requested one and its halvings (a smaller micro-batch is the cheapest memory lever);
    ep: the divisors of the expert count that divide the GPU count (MoE models only)."""
    divs = divisors(num_gpus)
    if micro_batches is None:
        halvings, mb = [], micro_batch
        while mb >= 1:
            halvings.append(mb)
            mb //= 2
        micro_batches = tuple(sorted(set(halvings + [1])))
    eps = tuple(d for d in divisors(num_experts) if num_gpus % d == 0) if num_experts else (1,)
    return SearchSpace(tp=divs, pp=divs, cp=tuple(d for d in divs if d <= max_cp),
                       micro_batches=tuple(sorted(micro_batches)),
                       virtual_stages=tuple(range(1, max_virtual_stages + 1)),
                       requested_micro_batch=micro_batch, allow_cross_node_tp=allow_cross_node_tp, ep=eps)


@record
class _Grid:
    """Candidates with ParallelConfig's attribute names: the numeric axes as arrays (int64
    when enumerated, float64 views of a group's legal ones for evaluation, see `take`), the
    discrete modes as the group's scalars. stage_memory and step_time read it as they read
    one ParallelConfig."""
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    micro_batch: np.ndarray
    virtual_stages: np.ndarray
    ep: np.ndarray
    zero: ZeroStage = ZeroStage.NONE
    sequence_parallel: object = False   # a group's setting; a box view's: one per degree triple where it has both
    recompute: Recompute = Recompute.NONE
    settings: ParallelConfig = ParallelConfig()   # SETTINGS read through it (__getattr__)
    offload: Offload = Offload.NONE
    stages: tuple | None = None   # the candidate ranks' Stage (fitplan.memory.stages.candidate_stages) per (pp, v)
    pair: np.ndarray | None = None   # each row's (pp, virtual stages) pair: its position in the stages' arrays
    shape: tuple = ()   # (degree triples, micro-batches, virtual stages, ep): the rows' C-order shape
    stacked: Stage | None = None   # a box view's candidate ranks as one Stage, on a leading axis (busiest_totals)
    ends: tuple | None = None      # a box view's first and last ranks' Stage (fitplan.memory.stages.end_stages)

    def __getattr__(self, name):
        if name in SETTINGS:
            return getattr(self.settings, name)
        raise AttributeError(name)

    def __len__(self) -> int:
        return len(self.tp)

    def box(self, legal: dict) -> tuple:
        """(rows, view): the screening's view of the degree triples with a legal candidate, every
        micro-batch, virtual-stage and ep value of each, for each sequence-parallel setting at once.
        legal: {sp: the legal mask of the grid under that setting}; rows: {sp: the positions in this grid
        of its degree triples' candidates, in (degrees, micro-batch, virtual stages, ep) C order}. The
        view's degree axis holds each setting's triples in turn (a triple legal under both appears twice)
        and its sequence_parallel is the setting of each, a bool per triple, or the one setting's scalar:
        a screen then covers both settings in one pass. The view's axes broadcast instead of
        repeating, the ZeRO stages first and the degree triples last: tp, pp, dp, cp and
        sequence_parallel are (1, 1, 1, 1, D), micro_batch (1, M, 1, 1, 1), virtual_stages (1, 1, V, 1,
        1), ep (1, 1, 1, E, 1), each candidate rank's Stage (1, 1, V, 1, D), and `stacked` holds them on
        a leading axis, (K, 1, 1, V, 1, D), for the memory model to take every rank in one pass; the
        first axis is left for the ZeRO stages (the search screens them at once: `zero` an array of them,
        (Z, 1, 1, 1, 1)). A term then costs what its own axes cost: the parameters are per (degrees,
        virtual stages), the states per (degrees, virtual stages, ZeRO stage), the per-layer
        activations per (degrees, micro-batch); only the sums span the box. The degree triples are
        the longest axis (~100 against 1-16), so they are the innermost: NumPy runs a broadcast
        operation as loops over its last axis, and a short last axis made each sum several times
        slower (a sum of a (K, D, 1, V, 1, Z) and a (1, D, M, V, 1, 1) term took 380 us against 100
        us in this order). The legality rules separate along these axes (every rule reads degrees,
        or pp with v, or one axis), so the box wastes only its illegal virtual stages, which the
        caller drops."""
        if not self.shape:   # the empty grid (no degree triple divides the GPU count): nothing to screen
            return {sp: np.zeros(0, dtype=np.int64) for sp in legal}, self
        d, m, v, e = self.shape
        per = m * v * e
        by_sp = {sp: np.flatnonzero(mask.reshape(d, per).any(axis=1)) for sp, mask in legal.items()}
        rows = {sp: (degrees[:, None] * per + np.arange(per)).ravel() for sp, degrees in by_sp.items()}
        degrees = np.concatenate(list(by_sp.values()))
        sp = (next(iter(legal)) if len(legal) == 1 else
              np.concatenate([np.full(len(x), s) for s, x in by_sp.items()]).reshape(1, 1, 1, 1, -1))
        first = degrees * per
        col = lambda a: a[first].astype(np.float64).reshape(1, 1, 1, 1, -1)
        along = lambda a, step, n, axis: a[:n * step:step].astype(np.float64).reshape(
            tuple(n if i == axis else 1 for i in range(5)))
        stages = stacked = None
        if self.stages is not None:   # each field per (pp, v): the first micro-batch's and ep's rows
            at = (first[None, :] + np.arange(v)[:, None] * e).ravel()
            shaped = lambda x: None if x is None else x[self.pair[at]].astype(np.float64).reshape(1, 1, v, 1, -1)
            stages = tuple(Stage(*(shaped(getattr(st, name)) for name in Stage.__slots__)) for st in self.stages)
            stacked = Stage(*(None if getattr(stages[0], name) is None else
                              np.stack([getattr(st, name) for st in stages]) for name in Stage.__slots__))
        view = replace(self, tp=col(self.tp), pp=col(self.pp), dp=col(self.dp), cp=col(self.cp),
                       micro_batch=along(self.micro_batch, v * e, m, 1), virtual_stages=along(self.virtual_stages, e, v, 2),
                       ep=along(self.ep, 1, e, 3), sequence_parallel=sp, stages=stages, pair=None, stacked=stacked,
                       shape=(len(degrees), m, v, e))
        return rows, view


def _stage_table(model, space: SearchSpace, pps, vs) -> tuple:
    """The candidate ranks' Stages for every (pp, virtual stages) pair, pp-major, computed at once on
    int64 arrays over the pairs (the split's arithmetic is exact on them); the grid's rows find theirs
    through _Grid.pair."""
    from types import SimpleNamespace
    settings = {name: getattr(space.settings, name) for name in SETTINGS}
    pp, v = (a.ravel() for a in np.meshgrid(pps, vs, indexing="ij"))
    slots = candidate_stages(model, SimpleNamespace(pp=pp, virtual_stages=v, **settings))
    as_pairs = lambda x: np.broadcast_to(np.asarray(x), pp.shape).astype(np.int64)
    per_slot = [Stage(*(None if getattr(st, name) is None else as_pairs(getattr(st, name)) for name in Stage.__slots__))
                for st in slots]
    return tuple(per_slot[k] for k in _undominated(per_slot))


def _undominated(slots) -> list:
    """The candidate slots worth evaluating: a slot is dropped where, for every (pp, v) pair,
    another kept slot has the same layers (dense and MTP ones too), holds the embedding and
    head wherever it does, and sits at the same or a lower rank (as many micro-batches in
    flight or more): that one is at least as busy. slots: each one's Stage over the pairs."""
    def dominates(a, b):
        x, y = slots[a], slots[b]
        same = lambda name: getattr(x, name) is None or bool((getattr(x, name) == getattr(y, name)).all())
        return (same("layers") and same("n_dense") and same("mtp") and bool((x.index <= y.index).all())
                and bool((x.embedding >= y.embedding).all()) and bool((x.head >= y.head).all()))
    kept: list = []
    for slot in range(len(slots)):
        if not any(dominates(k, slot) for k in kept):
            kept = [k for k in kept if not dominates(slot, k)] + [slot]
    return sorted(kept)


def _grid(num_gpus: int, space: SearchSpace, model=None) -> _Grid:
    degrees = [(t, p, c) for t, p, c in product(space.tp, space.pp, space.cp) if num_gpus % (t * p * c) == 0]
    if not degrees:
        return _Grid(*(np.zeros(0, dtype=np.int64) for _ in range(7)), settings=space.settings)
    deg = np.array(degrees, dtype=np.int64)
    mb = np.array(space.micro_batches, dtype=np.int64)
    vs = np.array(space.virtual_stages, dtype=np.int64)
    eps = np.array(space.ep, dtype=np.int64)
    d, m, v, e = len(deg), len(mb), len(vs), len(eps)
    # each axis's values in the rows' C order (degree triples, micro-batches, virtual stages, ep): repeated over
    # the axes after it, tiled over those before (a fifth of the time of indexing with a meshgrid's arrays: 58
    # against 285 us for Llama 3.1 405B at 16,384 GPUs)
    along = lambda values, inner, outer: np.tile(np.repeat(values, inner), outer)
    tp, pp, cp = (np.repeat(deg[:, i], m * v * e) for i in range(3))
    stages = pair = None
    if model is not None:
        pps = np.array(sorted(set(deg[:, 1].tolist())), dtype=np.int64)   # np.unique would import numpy.ma
        pair = along(np.searchsorted(pps, deg[:, 1]) * v, m * v * e, 1) + along(np.arange(v), e, d * m)
        stages = _stage_table(model, space, pps, vs)
    return _Grid(tp=tp, pp=pp, dp=num_gpus // (tp * pp * cp), cp=cp, micro_batch=along(mb, v * e, d),
                 virtual_stages=along(vs, e, d * m), ep=along(eps, 1, d * m * v), settings=space.settings,
                 stages=stages, pair=pair, shape=(d, m, v, e))


class Evaluated:
    """One configuration's exact answers, each computed when first read and then kept: its memory
    breakdown with the explanation (fitplan.memory.breakdown.evaluate), its step time
    (fitplan.timing.breakdown.evaluate_step; a SpecError where the GPU has no peak rate for the
    recipe's precision) and the largest micro-batch it fits with (fitplan.answers). A search
    makes one per configuration and every list that holds it (ranked, minimum viable,
    recommended, alternatives) shares it, so a report evaluates what it prints, once. fits: whether
    the configuration fits, where the search already knows it exactly (_exact), else None."""
    __slots__ = ("setup", "config", "_breakdown", "_step", "_largest", "_fits")

    def __init__(self, setup: Setup, config: ParallelConfig, fits: bool | None = None):
        self.setup, self.config, self._fits = setup, config, fits
        self._breakdown = self._step = self._largest = None

    @property
    def breakdown(self) -> Breakdown:
        if self._breakdown is None:
            self._breakdown = evaluate(self.setup, self.config)
        return self._breakdown

    @property
    def step(self):
        if self._step is None:
            from fitplan.timing.breakdown import evaluate_step
            self._step = evaluate_step(self.setup, self.config)
        return self._step

    @property
    def largest_micro_batch(self) -> int | None:
        if self._largest is None:
            from fitplan.answers import largest_fitting_micro_batch
            self._largest = (largest_fitting_micro_batch(self.setup, self.config, fits=self._fits),)
        return self._largest[0]


@record(slots=True)
class Suggestion:
    config: ParallelConfig
    exact: Evaluated
    rank_reason: str

    @property
    def breakdown(self) -> Breakdown:
        return self.exact.breakdown

    @property
    def step(self):
        return self.exact.step


@record(slots=True)
class SearchResult:
    num_gpus: int
    space: SearchSpace
    considered: int
    rejected_by_reason: dict
    fit: int
    suggestions: tuple[Suggestion, ...]  # the top ones
    least: Evaluated | None = None   # the legal candidate with the smallest per-GPU total
    rank_order: str = RANK_ORDER
    minimum_viable: Suggestion | None = None   # least disturbance (RANK_ORDER), whatever --rank says
    recommended: Suggestion | None = None      # the one to run: RECOMMEND_ORDER (search(recommend=True))
    alternatives: tuple[Suggestion, ...] = ()  # the next ones in RECOMMEND_ORDER, for the justification
    recommend_note: str = ""                   # why recommended is None, or how it was chosen without time

    @property
    def feasible(self) -> bool:
        return self.fit > 0

    @property
    def least_loaded(self) -> Breakdown | None:
        return None if self.least is None else self.least.breakdown


def _groups(space: SearchSpace):
    return [(z, sp, rc) for rc in space.recompute for z in space.zero for sp in space.sequence_parallel]


def check_size(num_gpus: int, space: SearchSpace, where: str = "") -> None:
    """One search's limit, MAX_CANDIDATES, checked in closed form before anything is enumerated."""
    size = space_size(num_gpus, space)
    if size > MAX_CANDIDATES:
        raise SpecError(f"{where}the search space has {size:,} candidates (limit {MAX_CANDIDATES:,}); narrow it: a "
                        f"smaller --micro-batch (it and its halvings are searched), a smaller --max-cp, or fix an axis "
                        f"with --tp, --pp, --cp, --ep, --zero, --recompute, --virtual-stages or --offload")


def space_size(num_gpus: int, space: SearchSpace) -> int:
    """Candidates in every offload tier: an upper bound on what one search evaluates."""
    return tier_size(num_gpus, space) * len(space.offload)


def tier_size(num_gpus: int, space: SearchSpace) -> int:
    num_degrees = degree_triples(num_gpus, space.tp, space.pp, space.cp)
    return num_degrees * len(space.micro_batches) * len(space.virtual_stages) * len(space.ep) * len(_groups(space))


def degree_triples(n: int, tp, pp, cp) -> int:
    """#{(t, p, c) in tp x pp x cp : t*p*c divides n}, in closed form rather than by enumeration,
    so a work limit is known before anything is enumerated (a GPU count such as 720,720 has
    240 divisors: 240^2 x |cp| triples to test, seconds for a sweep of 64 such counts).
    When an axis holds every divisor of n (default_space's tp and pp), the count of its
    values dividing m (m | n) is the divisor function d(m) = prod (e_i + 1) over m = prod
    q_i^e_i; when both do, the pairs (t, p) with t*p | m number sum_{k | m} d(k) =
    prod (e_i + 1)(e_i + 2)/2 (both are multiplicative, the second as the Dirichlet product of d
    and 1: Hardy & Wright, An Introduction to the Theory of Numbers, ch. 16, the divisor function)."""
    primes = _prime_factors(n)
    divs = set(divisors(n))
    full_t, full_p = divs <= set(tp), divs <= set(pp)
    cs = [c for c in cp if n % c == 0]
    if full_t and full_p:
        return sum(_product((e + 1) * (e + 2) // 2 for e in _exponents(n // c, primes)) for c in cs)
    if full_t or full_p:
        other = pp if full_t else tp
        return sum(_product(e + 1 for e in _exponents(n // (x * c), primes))
                   for x in other for c in cs if n % (x * c) == 0)
    return sum(1 for t, p, c in product(tp, pp, cs) if n % (t * p * c) == 0)


def _prime_factors(n: int) -> tuple[int, ...]:
    out, q = [], 2
    while q * q <= n:
        if n % q == 0:
            out.append(q)
            while n % q == 0:
                n //= q
        q += 1
    return tuple(out + ([n] if n > 1 else []))


def _exponents(m: int, primes) -> list[int]:
    """The exponent of each prime in m (m's primes are among them)."""
    out = []
    for q in primes:
        e = 0
        while m % q == 0:
            m //= q
            e += 1
        out.append(e)
    return out


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _legal(setup: Setup, grid: _Grid, space: SearchSpace, rejected: dict) -> np.ndarray:
    """Boolean mask of legal candidates; each illegal one is counted under the first rule it breaks.
    The rules run on the grid's axes as broadcast arrays (the degree triples, micro-batches,
    virtual stages and ep values, each alone on its axis: the grid's C order), so a rule costs
    what its own axes cost; only the masks span every candidate."""
    full = grid.shape or (len(grid),)   # no shape: the empty grid of a GPU count no degree triple divides
    if grid.shape:
        own = lambda a, axis: a.reshape(full)[tuple(slice(None) if i == axis else slice(0, 1) for i in range(4))]
        grid = replace(grid, tp=own(grid.tp, 0), pp=own(grid.pp, 0), dp=own(grid.dp, 0), cp=own(grid.cp, 0),
                       micro_batch=own(grid.micro_batch, 1), virtual_stages=own(grid.virtual_stages, 2),
                       ep=own(grid.ep, 3))
    ok = np.ones(full, dtype=bool)
    for rule in compat.RULES:
        passed = np.asarray(rule.ok(setup.model, setup.training, setup.cluster, grid, space.allow_cross_node_tp),
                            dtype=bool)
        if passed.all():   # on the rule's own axes: most rules reject nothing, and the masks span every candidate
            continue
        newly = ok & ~passed
        if newly.any():
            rejected[rule.id] = rejected.get(rule.id, 0) + int(newly.sum())
        ok &= passed
    return ok.ravel()


def rank_key(*, cp, recompute_level, zero, tp, pp, v, mb, requested_mb, sp, total, ep=1, offload_level=0):
    """RANK_ORDER as a tuple, most significant first; elementwise on arrays, so the
    search and the brute-force check in the tests sort by the same key."""
    return (offload_level, cp > 1, recompute_level, zero, tp > 1, pp > 1, ep > 1, v > 1, abs(mb - requested_mb), -mb,
            sp, tp, pp, ep, cp, v, total)


def _rank_keys(grid: _Grid, idx: np.ndarray, totals: np.ndarray, requested_mb: int) -> np.ndarray:
    """RANK_ORDER's columns, one row each (most significant first), one column per fitting
    candidate: each key column contiguous, as _packed reads them."""
    key = rank_key(cp=grid.cp[idx], recompute_level=grid.recompute.level, zero=int(grid.zero), tp=grid.tp[idx],
                   pp=grid.pp[idx], v=grid.virtual_stages[idx], mb=grid.micro_batch[idx], requested_mb=requested_mb,
                   sp=int(grid.sequence_parallel), total=totals, ep=grid.ep[idx], offload_level=grid.offload.level)
    out = np.empty((len(key), len(totals)))
    for j, k in enumerate(key):   # a row's assignment broadcasts the scalar keys
        out[j] = k
    return out


def _packed(keys: np.ndarray) -> list:
    """The rank keys (RANK_ORDER's columns, one row each: _rank_keys) as fewer columns in the same
    lexicographic order, most significant first: consecutive whole-number columns packed into
    one int64 each in mixed radix (each column less its least value, times the product of the
    ranges after it; a new word before the product passes 2^62), the last column (the per-GPU
    total) as it is. np.lexsort's time grows with its columns: 17 of them took ~20 ms on the
    31,000 fits of a GPT-3 search, three take a few."""
    words, word, span = [], None, 1
    for column in keys[:-1]:
        low = column.min()
        width = int(column.max() - low) + 1
        if word is not None and span * width >= 2**62:
            words.append(word)
            word, span = None, 1
        digit = (column - low).astype(np.int64)
        word = digit if word is None else word * width + digit
        span *= width
    return [*words, word, keys[-1]]


THROUGHPUT_ORDER = ("estimated step time, shortest first (fitplan.timing.step); ties broken by least disturbance")
COST_ORDER = ("estimated cost to train, lowest first: GPU-hours to train the tokens, N x step time / tokens per step "
              "(fitplan.timing.to_train), which orders as the cost for one token count and price; ties broken by "
              "least disturbance")
# --rank cost without --train-tokens: the cost of this many tokens is shown (the order is the same for any count)
COST_TOKENS = 10**9
RECOMMEND_ORDER = ("the shortest estimated step among the layouts that fit with margin (peak over the step at most "
                   "80% of GPU memory, Fujii et al.'s rule: fitplan.analysis.risk); ties broken by least disturbance; "
                   "when none has that margin, the shortest among those that fit, marked tight")
RECOMMEND_SCAN = 64   # exact checks of the margin, fastest first, before giving up on a safe layout
ALTERNATIVES = 4


def search(setup: Setup, space: SearchSpace, *, top: int = 5, rank: str = "disturbance",
           recommend: bool = False, explain: bool = True) -> SearchResult:
    """rank: 'disturbance' (RANK_ORDER), 'throughput' (THROUGHPUT_ORDER) or 'cost' (COST_ORDER;
    needs the cluster's gpu_hour_price) orders the suggestions. recommend: also pick the minimum
    viable layout (RANK_ORDER) and the recommended one (RECOMMEND_ORDER), whatever the rank.
    explain=False answers only whether something fits: the first `top` exact fits and no
    least-loaded candidate (for scans over GPU counts). What the result holds is checked exactly
    (fitplan.memory.breakdown.busiest_totals on ints); each one's explanation and step time are
    evaluated when first read (Evaluated)."""
    from fitplan.timing.compute import peak_flops_per_s
    if rank == "cost" and setup.cluster.gpu_hour_price is None:
        raise SpecError("--rank cost: give --gpu-hour-price, the price of one GPU-hour (e.g. --gpu-hour-price 2.50), "
                        "and --train-tokens for the run's total")
    if rank in ("throughput", "cost"):
        peak_flops_per_s(setup.cluster.gpu, setup.training.recipe.compute)   # a SpecError for fp8 on an fp8-less GPU
    timed = rank in ("throughput", "cost") or recommend and _has_time(setup)
    tokens = setup.training.train_tokens or COST_TOKENS
    num_gpus = setup.cluster.num_gpus
    check_size(num_gpus, space)
    usable = setup.cluster.usable_bytes
    host_limit = setup.cluster.host_memory_bytes
    margin_limit = margin_limit_bytes(capacity=setup.cluster.gpu.memory_bytes, usable=usable)
    base = _grid(num_gpus, space, setup.model)
    rejected: dict = {}
    keys, steps, hours, members, closest, margins = [], [], [], [], None, []
    legal_by_sp = {}
    for sp in space.sequence_parallel:
        per_group: dict = {}
        legal_by_sp[sp] = (_legal(setup, replace(base, sequence_parallel=sp), space, per_group), per_group)
    # the candidates legal with either SP setting, boxed once (a degree triple's SP setting one more value along the
    # box's degree axis): every screen evaluates this box (the rows each group keeps are picked after), so one pass
    # covers both settings, the screens share their arrays, and the Memo computes the terms no recompute mode
    # changes once
    rows_by_sp, view = base.box({sp: legal for sp, (legal, _) in legal_by_sp.items()})
    if timed and view.shape and view.shape[0]:
        view = replace(view, ends=tuple(end_stages(setup.model, view)))
    segment, start = {}, 0   # each SP setting's stretch of a screened array in the rows' order
    for sp, rows in rows_by_sp.items():
        segment[sp], start = slice(start, start + len(rows)), start + len(rows)
    # the memory and the time models' memos, the communicators' terms
    memo, comms, timing_memo = Memo(), {}, Memo()
    shape = view.shape
    considered = 0
    zeros = np.array([int(z) for z in space.zero], dtype=np.float64).reshape(-1, 1, 1, 1, 1)   # the box's ZeRO axis
    # offload tier -> [recompute, (busiest totals, host bytes), step times or None], every ZeRO stage and SP setting
    # at once
    screens: dict = {}
    timed_groups = []   # (screen, its view, ZeRO position, SP setting, rows kept, fits) of each group with a fit
    for offload, (zero, sp, rc) in ((o, g) for o in space.offload for g in _groups(space)):
        if (zero, sp, rc) == _groups(space)[0]:   # a new tier: stop once an earlier one has a fit
            if members:
                break
            considered += tier_size(num_gpus, space)
        grid = replace(base, zero=zero, sequence_parallel=sp, recompute=rc, offload=offload)
        legal, per_group = legal_by_sp[sp]
        for rule, count in per_group.items():
            rejected[rule] = rejected.get(rule, 0) + count
        if zero > 0:   # ZeRO over one rank shards nothing: the same candidate as ZeRO-0
            single = legal & (grid.dp * grid.cp == 1)
            rejected["zero_over_one_rank"] = rejected.get("zero_over_one_rank", 0) + int(single.sum())
            legal = legal & ~single
        if setup.training.finetune != "full" and rc not in SEARCHED_RECOMPUTE:
            rejected["lora_recompute_mode"] = rejected.get("lora_recompute_mode", 0) + int(legal.sum())
            continue
        if offload.params and zero != ZeroStage.OS_G_P:   # weights leave the GPU only as ZeRO-3 shards
            rejected["offload_params_needs_zero3"] = rejected.get("offload_params_needs_zero3", 0) + int(legal.sum())
            continue
        rows = rows_by_sp[sp]
        keep = legal[rows]
        idx = rows[keep]
        if len(idx) == 0:
            continue
        every_zero = replace(view, zero=zeros, recompute=rc, offload=offload)
        if screens.get(offload, (None,))[0] != rc:   # the groups run recompute-major: one screen per offload tier
            with np.errstate(all="ignore"):   # the box's illegal rows may divide by zero; they are dropped below
                screens[offload] = [rc, busiest_totals(setup, every_zero, memo, comms), None]
            memo.sweep()
        screen = screens[offload]
        totals, host = screen[1]
        at = space.zero.index(zero)
        flat = lambda a: _in_rows(a, len(zeros), shape, at, segment[sp])
        totals, host = flat(totals)[keep], host if np.ndim(host) == 0 else flat(host)[keep]
        fits = totals <= usable
        rejected["exceeds_memory"] = rejected.get("exceeds_memory", 0) + int((~fits).sum())
        if host_limit is not None and offload is not Offload.NONE:
            over = fits & (host > host_limit)
            rejected["exceeds_host_memory"] = rejected.get("exceeds_host_memory", 0) + int(over.sum())
            fits = fits & ~over
        low = int(np.argmin(totals))
        if closest is None or totals[low] < closest[0]:
            closest = (totals[low], grid, idx[low])   # its ParallelConfig built once, at the end
        if fits.any():
            keys.append(_rank_keys(grid, idx[fits], totals[fits], space.requested_micro_batch))
            margins.append(totals[fits] <= margin_limit)
            if timed:   # timed below, once every memory screen is done
                timed_groups.append((screen, every_zero, at, sp, keep, fits))
            members.append((grid, idx[fits]))
    # the time screens, on the screen's box, every ZeRO stage and SP setting at once, the terms no mode changes
    # once: after the memory screens, whose memo (the terms the recompute modes share) goes first, so the two
    # memos' arrays are never held at once (DeepSeek-V3: ~7 MB less at the peak, ~1,800 fewer page faults)
    memo = comms = None
    if timed_groups:
        from fitplan.timing.step import step_time   # the time model is loaded only when something fits
        from fitplan.timing.work import pacing_rank
        # the slowest rank (the most forward FLOPs, which no recompute mode changes): one array for every screen, so
        # the stage's terms hit the memo as the layout's do
        with np.errstate(all="ignore"):
            slowest = pacing_rank(setup, timed_groups[0][1])
    for screen, every_zero, at, sp, keep, fits in timed_groups:
        if screen[2] is None:
            with np.errstate(all="ignore"):
                screen[2] = step_time(timing_memo, setup, every_zero, stage_index=slowest, flops=False)
            timing_memo.sweep()
        on_fits = lambda a: _in_rows(a, len(zeros), shape, at, segment[sp])[keep][fits]
        steps.append(on_fits(screen[2]["time/step"]))
        if rank == "cost":
            from fitplan.timing.to_train import gpu_hours_to_train
            hours.append(gpu_hours_to_train(RAW, tokens=tokens, num_gpus=num_gpus,
                                            tokens_per_s=on_fits(screen[2]["rate/tokens"])))
    fit = sum(len(i) for _, i in members)
    picks: dict = {}
    if fit:
        allkeys = np.concatenate(keys, axis=1)                # the RANK_ORDER key, one column per candidate
        step_s = np.concatenate(steps) if timed else None     # estimated step seconds, when timed
        group_of = np.repeat(np.arange(len(members)), [len(i) for _, i in members])
        index_of = np.concatenate([i for _, i in members])
        exact = _exact(setup, members, group_of, index_of, margin_limit, allkeys[-1])
        packed = _packed(allkeys)                             # the same order in two or three columns
        by_disturbance = _Order(packed)
        by_time = _Order([step_s, *packed]) if timed else by_disturbance
        with_margin = np.concatenate(margins)                # the float screen of fitplan.analysis.risk
        if rank == "cost":
            gpu_h = np.concatenate(hours)                     # GPU-hours to train, one per candidate
            price = setup.cluster.gpu_hour_price
            order = _Order([gpu_h, *packed])
            lead = lambda pos: (f"cost ~{_approx(gpu_h[pos] * price)} ({_approx(gpu_h[pos])} GPU-hours) to train "
                                f"{fmt_count(tokens)} tokens")
        else:
            order = by_time if rank == "throughput" else by_disturbance
            lead = (lambda pos: f"step ~{step_s[pos]:.4g} s") if rank == "throughput" else None
        picks["ranked"] = _take(exact, order, top, space, lead)
        if recommend:
            picks["minimum_viable"] = (_take(exact, by_disturbance, 1, space, None) or [None])[0]
            safe = _take(exact, _Order(by_time.keys, where=with_margin), ALTERNATIVES + 1, space,
                         (lambda pos: f"step ~{step_s[pos]:.4g} s") if timed else None, scan=RECOMMEND_SCAN,
                         safe=True)
            tight = [] if safe else _take(exact, by_time, ALTERNATIVES + 1, space,
                                          (lambda pos: f"step ~{step_s[pos]:.4g} s") if timed else None)
            chosen = safe or tight
            picks["recommended"] = chosen[0] if chosen else None
            picks["alternatives"] = tuple(chosen[1:])
            picks["recommend_note"] = ("" if safe and timed else
                                       "no time model for this recipe's precision on this GPU, so the least "
                                       "disturbance that fits with margin instead" if safe else
                                       "no fitting layout's peak is within 80% of GPU memory (fitplan.analysis.risk): "
                                       "this is the fastest of them, and it is tight; more GPUs, or a smaller "
                                       "micro-batch or sequence, give a margin" if tight else "")
    ranked = picks.pop("ranked", [])
    return SearchResult(num_gpus=num_gpus, space=space, considered=considered,
                        rejected_by_reason=dict(sorted(rejected.items())), fit=fit, suggestions=tuple(ranked),
                        least=None if closest is None or not explain else Evaluated(setup, _config(*closest[1:])),
                        rank_order={"throughput": THROUGHPUT_ORDER, "cost": COST_ORDER}.get(rank, RANK_ORDER), **picks)


def _in_rows(a, n_zero: int, shape: tuple, at: int, stretch: slice):
    """A screened array in the rows' order, one group's: its ZeRO stage (at, of n_zero), the degree triples moved
    first, its SP setting's stretch of them (the box's shape: degrees, micro-batches, virtual stages, ep)."""
    return np.moveaxis(np.broadcast_to(a, (n_zero,) + shape[1:] + shape[:1])[at], -1, 0).ravel()[stretch]


def _approx(x) -> str:
    """A cost or GPU-hour count in a rank reason: 1,542,451 or 41.1."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _has_time(setup: Setup) -> bool:
    """Whether the GPU has a peak rate for the recipe's GEMM precision (no fp8 on an A100)."""
    from fitplan.timing.compute import peak_flops_per_s
    try:
        peak_flops_per_s(setup.cluster.gpu, setup.training.recipe.compute)
        return True
    except SpecError:
        return False


# How far a screened peak may lie from a limit and still be taken as screened. The screen runs the exact path's
# formulas on float64: whole numbers below 2^53 add and multiply exactly, a ceil or floor of a quotient of two
# of them is exact (fitplan.arith.ceil_div), and the rest (a fractional factor such as the fragmentation's)
# rounds by parts in 10^16, bytes at most on these totals: a MiB is a thousand times that.
SCREEN_TOLERANCE_BYTES = 2**20


def _exact(setup, members, group_of, index_of, margin_limit, screened):
    """Candidate position -> (its Evaluated, whether it fits, whether it fits with margin), once
    however many orders ask. screened: each candidate's screened peak; one within
    SCREEN_TOLERANCE_BYTES of the usable or the margin limit (or any, where a host limit applies:
    the screen's host bytes are not kept) is checked exactly on ints, busiest_totals on one
    configuration being the peak and host bytes evaluate gives (tests/unit/test_search.py)."""
    cache: dict = {}
    usable, host_limit = setup.cluster.usable_bytes, setup.cluster.host_memory_bytes

    def get(pos):
        if pos not in cache:
            config = _config(members[group_of[pos]][0], index_of[pos])
            peak = screened[pos]
            if host_limit is None and min(abs(peak - usable), abs(peak - margin_limit)) > SCREEN_TOLERANCE_BYTES:
                fits = peak <= usable
            else:
                peak, host = busiest_totals(setup, config)
                fits = peak <= usable and (host_limit is None or host <= host_limit)
            cache[pos] = (Evaluated(setup, config, fits), fits, fits and peak <= margin_limit)   # analysis.risk's margin
        return cache[pos]
    return get


class _Order:
    """Candidate positions in the lexicographic order of `keys` (most significant first; equal keys
    by position, as np.lexsort), sorted only as far as they are read: a search prints a few of tens
    of thousands of fits, and a full sort of 31,000 took ~4-8 ms. The first n in order all have a
    first key no greater than the (n+1)-th smallest first key (np.partition), and every position
    past that value comes after all of them, so sorting those alone gives the order's exact
    prefix; a reader that wants more gets a prefix 16 times longer, up to all. `where`: only the
    positions this mask keeps, in the same order."""
    __slots__ = ("keys", "where")

    def __init__(self, keys, where=None):
        self.keys, self.where = list(keys), where

    def __iter__(self):
        first, n, done = self.keys[0], 64, 0
        while True:
            cut = np.partition(first, n)[n] if n < len(first) else np.nan
            whole = cut != cut   # every position: all asked for, or a NaN cut (NaN keys sort last)
            head = np.arange(len(first)) if whole else np.flatnonzero(first <= cut)
            head = head[np.lexsort([k[head] for k in self.keys[::-1]])]
            if self.where is not None:
                head = head[self.where[head]]
            yield from head[done:].tolist()
            if whole:
                return
            done, n = len(head), n * 16


def _take(exact, order, count: int, space: SearchSpace, lead, *, scan: int | None = None, safe: bool = False) -> list:
    """The first `count` candidates in `order` that fit (exactly where the float screening is
    near a limit: _exact), with margin where `safe`, looking at no more than `scan` of them.
    `lead`: a candidate position -> the words its rank reason starts with (its step time or cost),
    or None."""
    out = []
    for pos in islice(order, scan):
        if len(out) == count:
            break
        evaluated, fits, with_margin = exact(pos)
        if with_margin if safe else fits:
            reason = rank_reason(evaluated.config, space.requested_micro_batch)
            if lead is not None:
                reason = f"{lead(pos)}; {reason}"
            out.append(Suggestion(evaluated.config, evaluated, reason))
    return out


def _config(grid: _Grid, i: int) -> ParallelConfig:
    return ParallelConfig(tp=int(grid.tp[i]), pp=int(grid.pp[i]), dp=int(grid.dp[i]), cp=int(grid.cp[i]),
                          zero=ZeroStage(grid.zero), sequence_parallel=bool(grid.sequence_parallel),
                          recompute=grid.recompute,
                          micro_batch=int(grid.micro_batch[i]), virtual_stages=int(grid.virtual_stages[i]),
                          ep=int(grid.ep[i]), offload=grid.offload,
                          **{name: getattr(grid.settings, name) for name in SETTINGS})


def rank_reason(config: ParallelConfig, requested_mb: int) -> str:
    """The rank key in words, most significant first."""
    parts = [f"recompute {config.recompute.value}" + ("" if config.recompute is Recompute.NONE else " needed"),
             f"ZeRO-{int(config.zero)}",
             "no TP" if config.tp == 1 else f"TP {config.tp}" + (" + SP" if config.sequence_parallel else ""),
             "no PP" if config.pp == 1 else f"PP {config.pp}" + (f" x {config.virtual_stages} virtual"
                                                                if config.virtual_stages > 1 else ""),
             "no CP" if config.cp == 1 else f"CP {config.cp}"]
    if config.ep > 1:
        parts.insert(4, f"EP {config.ep}")
    if config.offload is not Offload.NONE:
        parts.insert(0, f"offload {config.offload.value} needed")
    if config.micro_batch != requested_mb:
        parts.append(f"micro-batch {config.micro_batch} instead of {requested_mb}")
    return ", ".join(parts)
