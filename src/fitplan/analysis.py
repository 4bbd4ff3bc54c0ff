"""The seed questions, answered from the core: how big is the state, how big are the
activations, and do the cheap options (DDP, ZeRO-1/2/3 over all GPUs) fit? And, for any
answer, the largest buffer its total leaves out.

Pure: returns dataclasses; fitplan.report renders them.
"""

from fitplan.counts import params as P
from fitplan.explain import Term, formula
from fitplan.memory import activations as A
from fitplan.memory import finetune as FT
from fitplan.memory import states as S
from fitplan.memory.breakdown import STATE_PARTS, Breakdown, Setup, Shapes, evaluate
from fitplan.parts import label
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.specs.parallel import ParallelConfig, Recompute, ZeroStage

STRATEGIES = (("ddp", ZeroStage.NONE), ("zero1", ZeroStage.OS), ("zero2", ZeroStage.OS_G), ("zero3", ZeroStage.OS_G_P))
DTYPE_NAMES = {1: "8-bit", 2: "bf16", 4: "fp32"}


@formula("activations/attention_factor", lambda *, e, D, M, **_: "5as/h" if (e, D, M) == (2, 1, 1)
         else "(e + D*(e + M))*a*s/h", Cite("korthikanti", "Eq. 1"), unit="ratio")
def attention_factor(*, a, s, h, e, D, M):
    """The attention-score term per s*b*h: 5as/h for 16-bit activations with dropout. It is
    the eager attention core of fitplan.memory.activations over s*b*h (b = 1)."""
    return A.attention_core_bytes(s=s, b=1, a=a, e=e, M=M, D=D, kernel="eager") / (s * h)


@record(slots=True)
class BlockingTerm:
    name: str          # "replicated bf16 weights + grads"
    bytes: int
    formula: str       # "4*psi"
    alone_exceeds: bool


@record(slots=True)
class Strategy:
    name: str
    breakdown: Breakdown
    blocking: BlockingTerm | None   # None when it fits


@record(slots=True)
class SeedAnswer:
    setup: Setup
    num_params: int
    shape_params: int
    bytes_per_param: dict          # component -> bytes per parameter
    state_total_bytes: int
    gpus_of_pure_state: float
    attention_factor: Term
    per_layer: Term
    all_layers_bytes: int
    strategies: tuple[Strategy, ...]
    layer_kinds: tuple = ()        # a hybrid model's (kind name, layers of it, one layer's Term), the widest first

    @property
    def bigger_problem(self) -> str:
        return "model state" if self.state_total_bytes >= self.all_layers_bytes else "activations"


def bytes_per_param(recipe) -> dict:
    parts = {"weights": recipe.weights_bytes, "grads": recipe.grads_bytes}
    if recipe.master_bytes:
        parts["master"] = recipe.master_bytes
    parts.update(dict(recipe.moments))
    return parts


def blocking_term(breakdown: Breakdown, recipe) -> BlockingTerm:
    """The largest of: the state the ZeRO stage leaves replicated, the state it shards,
    and the activations. Named with its formula, e.g. 'replicated bf16 weights + grads, 4*psi'."""
    zero = breakdown.config.zero
    sizes = {"states/weights": recipe.weights_bytes, "states/grads": recipe.grads_bytes,
             "states/master": recipe.master_bytes, "states/optimizer": recipe.optimizer_bytes}
    groups = []
    for sharded in (False, True):
        keys = [k for k in STATE_PARTS if sizes[k] and S.is_sharded(k, zero) == sharded]
        if keys:
            names = ("model state" if len(keys) == sum(1 for k in STATE_PARTS if sizes[k])
                     else " + ".join(label(k) for k in keys))
            dtypes = {sizes[k] for k in keys}
            only_16bit_copies = set(keys) <= {"states/weights", "states/grads"} and len(dtypes) == 1
            prefix = (DTYPE_NAMES.get(dtypes.pop(), "") + " ") if only_16bit_copies else ""
            b = sum(sizes[k] for k in keys)
            groups.append(BlockingTerm(("sharded " if sharded else "replicated ") + prefix + names,
                                       sum(breakdown.parts[k] for k in keys),
                                       S.per_gpu_text(f"{b:g}", sharded), False))
    groups.append(BlockingTerm("activations and runtime buffers", breakdown.activation_bytes, "see the peak", False))
    worst = max(groups, key=lambda g: g.bytes)
    return BlockingTerm(worst.name, worst.bytes, worst.formula, worst.bytes > breakdown.usable_bytes)


def seed_answer(setup: Setup, *, micro_batch: int) -> SeedAnswer:
    model, training, cluster = setup.model, setup.training, setup.cluster
    recipe = training.recipe
    n = P.num_params(model)
    total_state = int(S.unsharded_state_bytes(psi=n, B=recipe.total_bytes))
    if FT.is_lora(training):   # a frozen base and the adapters' full state
        base, adapters = FT.model_totals(model, training, n)
        total_state = base + int(S.unsharded_state_bytes(psi=adapters, B=recipe.total_bytes))
    sh = Shapes.of(setup)
    per_layer = (FT.lora_layer_bytes.term(**sh.kw(), **FT.lora_kw(setup), b=micro_batch, t=1, c=1, sp=False,
                                          recompute=Recompute.NONE) if FT.is_lora(training) else
                 A.per_layer_bytes.term(**sh.kw(), b=micro_batch, t=1, c=1, sp=False, recompute=Recompute.NONE))
    kinds, all_layers = (), per_layer.value * model.num_layers
    if model.hybrid:   # each kind of layer apart: the widest stands for "one layer"
        kinds, all_layers = hybrid_layer_terms(setup, micro_batch=micro_batch)
        per_layer = kinds[0][2]
    factor = attention_factor.term(a=sh.a, s=sh.s, h=sh.h, e=sh.e, D=sh.D, M=sh.M)
    strategies = []
    for name, zero in STRATEGIES:
        bd = evaluate(setup, ParallelConfig(dp=cluster.num_gpus, zero=zero, micro_batch=micro_batch))
        strategies.append(Strategy(name, bd, None if bd.fits else blocking_term(bd, recipe)))
    return SeedAnswer(setup=setup, num_params=n, shape_params=P.shape_params(model),
                      bytes_per_param=bytes_per_param(recipe), state_total_bytes=total_state,
                      gpus_of_pure_state=total_state / cluster.gpu.memory_bytes, attention_factor=factor,
                      per_layer=per_layer, all_layers_bytes=all_layers, strategies=tuple(strategies),
                      layer_kinds=kinds)


def hybrid_layer_terms(setup: Setup, *, micro_batch: int) -> tuple[tuple, int]:
    """A hybrid model's layers, one GPU, no recompute: ((kind name, layers of it, one layer's
    Term) for each kind it has, the widest first; the bytes of all of them)."""
    from fitplan.counts import hybrid as HY
    from fitplan.explain import Trace
    from fitplan.memory.hybrid_memory import hybrid_activations
    from fitplan.memory.stages import stage_at
    model, trace, c = setup.model, Trace(), ParallelConfig(micro_batch=micro_batch)
    stage = stage_at(trace, model, c, 0)
    layer = dict(Shapes.of(setup).kw(), b=micro_batch, t=1, c=1, sp=False, recompute=Recompute.NONE)
    a_stage, *_ = hybrid_activations(trace, setup, c, stage=stage, layer=layer)
    counts = HY.kind_counts(model.layer_pattern)
    kinds = [(HY.KIND_NAMES[k], n, trace.get(f"activations/per_{HY.KIND_NAMES[k]}_layer"))
             for k, n in counts.items() if n]
    kinds.sort(key=lambda x: -x[2].value)
    main = sum(n * term.value for _, n, term in kinds)
    return tuple(kinds), int(main)


RISK_FRACTION = 0.8
FITS_WITH_MARGIN, TIGHT, LIKELY_OOM = "fits_with_margin", "tight", "likely_oom"
RISK_RULE = ("Fujii et al. 2024 (arXiv:2411.06465): over 454 training runs on A100 and H100 GPUs, none whose "
             "estimated memory (temporary buffers and fragmentation included) stayed below 80% of GPU memory ran out "
             "of memory. fitplan applies it to its peak over the step (runtime buffers included): fits_with_margin "
             "when the peak is at most 80% of capacity and within usable memory, tight when it is above 80% but "
             "within usable memory (capacity - reserve), likely_oom beyond usable memory")


# What the memory model cannot pin, and so the band around its peak (docs/formulas.md#peak): the
# caching allocator's fragmentation, from none (every free block reused) to FRAGMENTATION_SPREAD of the moment's
# transient bytes beyond the assumed share (GMLake, Guo et al. 2024: 15% on average over eight LLMs with the
# default allocator), and one layer's backward buffers, an upper bound (fitplan validate measures below it).
FRAGMENTATION_SPREAD = 0.15
BAND_RULE = ("band: the peak without the allocator's fragmentation and with half the layer backward's buffers (an "
             "upper bound), to the peak with 15% more of the moment's transient bytes lost to fragmentation "
             "(GMLake's average); likely_oom only when even its low end is over usable memory")


@record(slots=True)
class Risk:
    level: str           # FITS_WITH_MARGIN, TIGHT or LIKELY_OOM
    rule: str            # RISK_RULE
    fraction: float      # peak / capacity
    limit_bytes: int     # the most a peak may be and still fit with margin
    band_bytes: tuple = ()   # (low, high): the peak's band (BAND_RULE)


def peak_band(b: Breakdown) -> tuple[int, int]:
    """(low, high) around the peak, from the terms at its moment (BAND_RULE)."""
    from fitplan.memory.timeline import transient_bytes
    held = b.peak.held
    low = b.per_gpu_bytes - held.get("runtime/allocator", 0) - held.get("runtime/layer_backward", 0) // 2
    D = transient_bytes({k: v for k, v in held.items() if k != "runtime/allocator"})
    return int(low), int(b.per_gpu_bytes + -(-FRAGMENTATION_SPREAD * D // 1))


def margin_limit_bytes(*, capacity, usable):
    """The largest peak that fits with margin: 80% of capacity, and never beyond usable memory
    (ints, or the search's arrays)."""
    from fitplan.arith import minimum
    return minimum(capacity * 4 // 5, usable)


def risk(b: Breakdown) -> Risk:
    """The verdict on one configuration's peak, by RISK_RULE, with its band (BAND_RULE): likely_oom only
    when the band's low end is over usable memory (or the host's memory is short), tight between."""
    limit = int(margin_limit_bytes(capacity=b.capacity_bytes, usable=b.usable_bytes))
    peak = b.per_gpu_bytes
    band = peak_band(b)
    if not b.host_fits or band[0] > b.usable_bytes:
        level = LIKELY_OOM
    else:
        level = FITS_WITH_MARGIN if peak <= limit else TIGHT
    return Risk(level, RISK_RULE + "; " + BAND_RULE, peak / b.capacity_bytes, limit, band)


def is_safe(setup: Setup, b: Breakdown) -> bool:
    """Fits with a margin a user can trust (risk: fits_with_margin), what the search recommends."""
    return risk(b).level == FITS_WITH_MARGIN
