"""A lower bound on the busiest GPU that holds for every configuration, and the
smallest GPU count it allows.

Sharding only partitions; it never removes bytes. Over all N GPUs together:
  - model states hold at least B*psi bytes (B = the recipe's bytes per parameter; tp
    replication, tied-embedding copies and shard padding only add), and
  - each data-parallel replica stores at least every layer's input for one micro-batch,
    e*s*b_min*h*L bytes, the least any recompute mode keeps (full recompute, Korthikanti
    Table 2: 2sbh per layer), b_min the smallest micro-batch searched.
The busiest GPU holds at least the average, so it needs
  (B*psi + e*s*b_min*h*L) / N  <=  usable bytes per GPU,
which no ZeRO stage, tp, pp, cp, sequence parallel or recompute mode can beat.
"""

from fitplan.arith import ceil_div
from fitplan.explain import COUNT, formula
from fitplan.memory.states import unsharded_state_bytes
from fitplan.record import record
from fitplan.sources import Cite

BOUND = Cite("fitplan", "formulas.md#lower-bound (ZeRO Sec. 5 + Korthikanti Table 2)")


@formula("bound/total", "B*psi + e*s*b_min*h*L", BOUND)
def least_total_bytes(*, B, psi, e, s, b_min, h, L, state=None, act=1):
    """state: the least state bytes on the GPUs when it is not B*psi (a frozen base with
    adapters, or state offloaded: fitplan.memory.finetune.least_gpu_state); act = 0 when the
    activations may leave the GPUs too (activation offload)."""
    states = unsharded_state_bytes(psi=psi, B=B) if state is None else state
    return states + act * e * s * b_min * h * L


@formula("bound/per_gpu", "(B*psi + e*s*b_min*h*L)/N", BOUND)
def least_per_gpu_bytes(*, total, N):
    return ceil_div(total, N)


@formula("bound/min_gpus", "ceil((B*psi + e*s*b_min*h*L)/U)", BOUND, COUNT)
def min_gpus(*, total, U):
    return max(ceil_div(total, U), 1)


@record(slots=True)
class LowerBound:
    total_bytes: int
    per_gpu_bytes: int
    usable_bytes: int
    num_gpus: int
    min_gpus: int
    inputs: tuple[tuple[str, int | float], ...]   # (symbol, value): B, psi, e, s, b_min, h, L

    @property
    def excludes(self) -> bool:
        """True when the bound alone proves that nothing fits on num_gpus."""
        return self.per_gpu_bytes > self.usable_bytes

    @property
    def min_gpus_power_of_two(self) -> int:
        return 1 << (self.min_gpus - 1).bit_length()


def lower_bound(*, B, psi: int, e: int, s: int, b_min: int, h: int, L: int, N: int, U: int, state=None,
                act: int = 1) -> LowerBound:
    total = int(least_total_bytes(B=B, psi=psi, e=e, s=s, b_min=b_min, h=h, L=L, state=state, act=act))
    extra = (("S", int(state)),) if state is not None else ()
    return LowerBound(total_bytes=total, per_gpu_bytes=least_per_gpu_bytes(total=total, N=N), usable_bytes=U,
                      num_gpus=N, min_gpus=min_gpus(total=total, U=U),
                      inputs=(("B", B), ("psi", psi), ("e", e), ("s", s), ("b_min", b_min), ("h", h), ("L", L))
                      + extra + ((("act", act),) if act != 1 else ()))


def gpu_state_floor(setup, offloads) -> tuple[int | None, int]:
    """(S, act) for lower_bound: the least state bytes all GPUs together keep, over the offload
    modes searched (None: B*psi, the full state of full training without offload), and
    whether every mode keeps the activations on the GPUs (0 if activation offload is among
    them). Offload moves the gradients, master weights and moments (optimizer), and the
    weights too (optimizer+params, params-nvme); a frozen base has no gradients or moments."""
    from fitplan.counts.params import num_params
    from fitplan.memory import finetune as FT
    model, training = setup.model, setup.training
    recipe = training.recipe
    psi = num_params(model)
    if FT.is_lora(training):
        base, adapters = FT.model_totals(model, training, psi)
        full, weights = base + int(recipe.total_bytes * adapters), base + int(recipe.weights_bytes * adapters)
    else:
        full, weights = None, int(recipe.weights_bytes * psi)
    states = [full if o is o.NONE or o.activations else weights if not o.params else 0 for o in offloads]
    values = [int(recipe.total_bytes * psi) if x is None else x for x in states]
    least = min(values)
    act = 0 if any(o.activations for o in offloads) else 1
    if least == values[0] and states[0] is None and act == 1:
        return None, 1
    return least, act
