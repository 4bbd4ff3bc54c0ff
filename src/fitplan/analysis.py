"""The seed questions, answered from the core: how big is the state, how big are the
activations, and do the cheap options (DDP, ZeRO-1/2/3 over all GPUs) fit?

Pure: returns dataclasses; fitplan.report renders them.
"""
from dataclasses import dataclass

from fitplan.counts import params as P
from fitplan.explain import Term, formula
from fitplan.memory import activations as A
from fitplan.memory.breakdown import STATE_PARTS, Breakdown, Setup, evaluate, shape_inputs
from fitplan.sources import Cite
from fitplan.specs.parallel import ParallelConfig, Recompute, ZeroStage

STRATEGIES = (("ddp", ZeroStage.NONE), ("zero1", ZeroStage.OS), ("zero2", ZeroStage.OS_G), ("zero3", ZeroStage.OS_G_P))
DTYPE_NAMES = {1: "8-bit", 2: "bf16", 4: "fp32"}
_STATE_NAMES = {"states/weights": "weights", "states/grads": "grads", "states/master": "master weights",
                "states/optimizer": "optimizer moments"}
_SHARD_STAGE = {"states/weights": 3, "states/grads": 2, "states/master": 1, "states/optimizer": 1}


@formula("activations/attention_factor", lambda *, e, D, M, **_: "5as/h" if (e, D, M) == (2, 1, 1)
         else "(e + D*(e + M))*a*s/h", Cite("korthikanti", "Eq. 1"), unit="ratio")
def attention_factor(*, a, s, h, e, D, M):
    """The attention-score term per s*b*h: 5as/h for 16-bit activations with dropout."""
    return (e + D * (e + M)) * a * s / h


@dataclass(frozen=True, slots=True)
class BlockingTerm:
    name: str          # "replicated bf16 weights + grads"
    bytes: int
    formula: str       # "4*psi"
    alone_exceeds: bool


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    breakdown: Breakdown
    blocking: BlockingTerm | None   # None when it fits


@dataclass(frozen=True, slots=True)
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
        keys = [k for k in STATE_PARTS if sizes[k] and (zero >= _SHARD_STAGE[k]) == sharded]
        if keys:
            names = (f"model state" if len(keys) == sum(1 for k in STATE_PARTS if sizes[k])
                     else " + ".join(_STATE_NAMES[k] for k in keys))
            dtypes = {sizes[k] for k in keys}
            only_16bit_copies = set(keys) <= {"states/weights", "states/grads"} and len(dtypes) == 1
            prefix = (DTYPE_NAMES.get(dtypes.pop(), "") + " ") if only_16bit_copies else ""
            b = sum(sizes[k] for k in keys)
            groups.append(BlockingTerm(("sharded " if sharded else "replicated ") + prefix + names,
                                       sum(breakdown.parts[k] for k in keys),
                                       f"{b:g}*psi/N_d" if sharded else f"{b:g}*psi", False))
    groups.append(BlockingTerm("activations", breakdown.activation_bytes, "see activations", False))
    worst = max(groups, key=lambda g: g.bytes)
    return BlockingTerm(worst.name, worst.bytes, worst.formula, worst.bytes > breakdown.usable_bytes)


def seed_answer(setup: Setup, *, micro_batch: int) -> SeedAnswer:
    model, training, cluster = setup.model, setup.training, setup.cluster
    recipe = training.recipe
    n = P.num_params(model)
    total_state = int(-(-n * recipe.total_bytes // 1))
    shapes = dict(shape_inputs(setup), b=micro_batch, t=1, c=1, sp=False, recompute=Recompute.NONE)
    per_layer = A.per_layer_bytes.term(**shapes)
    factor = attention_factor.term(a=shapes["a"], s=shapes["s"], h=shapes["h"], e=shapes["e"], D=shapes["D"],
                                   M=shapes["M"])
    strategies = []
    for name, zero in STRATEGIES:
        bd = evaluate(setup, ParallelConfig(dp=cluster.num_gpus, zero=zero, micro_batch=micro_batch))
        strategies.append(Strategy(name, bd, None if bd.fits else blocking_term(bd, recipe)))
    return SeedAnswer(setup=setup, num_params=n, shape_params=P.shape_params(model),
                      bytes_per_param=bytes_per_param(recipe), state_total_bytes=total_state,
                      gpus_of_pure_state=total_state / cluster.gpu.memory_bytes, attention_factor=factor,
                      per_layer=per_layer, all_layers_bytes=per_layer.value * model.num_layers,
                      strategies=tuple(strategies))
