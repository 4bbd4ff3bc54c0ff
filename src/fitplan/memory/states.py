"""Bytes of model states (weights, gradients, master weights, optimizer moments) per GPU.

Symbols, as in [zero] Sec. 3.1 and 5: psi parameters held by this GPU's model-parallel
shard (after the tp/pp split), N_d the degree of the group ZeRO shards over (dp x cp),
and per-parameter bytes from the recipe: w weights, g grads, m master weights, K the
optimizer moments. For mixed-precision Adam w = g = 2, m = 4, K = 8 (the paper's K = 12
counts the master copy with the moments).

Each component is its bytes times psi, or times psi/N_d from the ZeRO stage SHARDED_FROM
names on (baseline DP shards nothing). Sharded buffers are padded to equal shards, hence
ceil.
"""
from fitplan.arith import ceil_div, select
from fitplan.explain import formula
from fitplan.sources import Cite
from fitplan.specs.parallel import ZeroStage

ZERO_SEC5 = Cite("zero", "Sec. 5, Fig. 1")
# The first ZeRO stage that shards each state component over N_d ([zero] Sec. 5.1-5.3):
# P_os the optimizer states (here the master weights and the moments), P_os+g also the
# gradients, P_os+g+p also the weights.
SHARDED_FROM = {"states/weights": ZeroStage.OS_G_P, "states/grads": ZeroStage.OS_G,
                "states/master": ZeroStage.OS, "states/optimizer": ZeroStage.OS}


def is_sharded(key: str, zero):
    """Whether ZeRO stage `zero` shards state component `key` over N_d (elementwise on an array of stages)."""
    return zero >= SHARDED_FROM[key]


def per_gpu_text(coefficient: str, sharded: bool, psi_e=0) -> str:
    """The formula text of coefficient bytes per parameter: c*psi, or c*psi/N_d when
    sharded, plus the routed experts' c*psi_e (/N_ed) when there are any."""
    dense = f"{coefficient}*psi/N_d" if sharded else f"{coefficient}*psi"
    experts = (f" + {coefficient}*psi_e/N_ed" if sharded else f" + {coefficient}*psi_e") if psi_e else ""
    return dense + experts


def _text(symbol: str, key: str):
    def text(*, zero, psi_e=0, **_):
        return per_gpu_text(symbol, is_sharded(key, zero), psi_e)
    return text


def _state(key, psi, per_param, n_d, zero, psi_e, n_ed):
    """Dense parameters shard over N_d = dp x cp; routed-expert parameters psi_e over the
    expert-data-parallel group N_ed = tp x dp x cp / ep (Megatron-LM's expert grid with
    expert tensor parallel 1). zero: a stage, or the search's array of them."""
    sharded = is_sharded(key, zero)
    return ceil_div(psi * per_param, select(sharded, n_d, 1)) + ceil_div(psi_e * per_param, select(sharded, n_ed, 1))


@formula("states/weights", _text("w", "states/weights"), ZERO_SEC5)
def weights_bytes(*, psi, w, n_d, zero, psi_e=0, n_ed=1):
    return _state("states/weights", psi, w, n_d, zero, psi_e, n_ed)


@formula("states/grads", _text("g", "states/grads"), ZERO_SEC5)
def grads_bytes(*, psi, g, n_d, zero, psi_e=0, n_ed=1):
    return _state("states/grads", psi, g, n_d, zero, psi_e, n_ed)


@formula("states/master", _text("m", "states/master"), ZERO_SEC5)
def master_bytes(*, psi, m, n_d, zero, psi_e=0, n_ed=1):
    return _state("states/master", psi, m, n_d, zero, psi_e, n_ed)


@formula("states/optimizer", _text("K", "states/optimizer"), ZERO_SEC5)
def optimizer_bytes(*, psi, K, n_d, zero, psi_e=0, n_ed=1):
    return _state("states/optimizer", psi, K, n_d, zero, psi_e, n_ed)


@formula("states/total", "B*psi", Cite("zero", "Sec. 3.1"))
def unsharded_state_bytes(*, psi, B):
    """All model states of psi parameters at B bytes each, before any sharding."""
    return ceil_div(psi * B, 1)
