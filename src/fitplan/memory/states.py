"""Bytes of model states (weights, gradients, master weights, optimizer moments) per GPU.

Symbols, as in [zero] Sec. 3.1 and 5: psi parameters held by this GPU's model-parallel
shard (after the tp/pp split), N_d the degree of the group ZeRO shards over (dp x cp),
and per-parameter bytes from the recipe: w weights, g grads, m master weights, K the
optimizer moments. For mixed-precision Adam w = g = 2, m = 4, K = 8 (the paper's K = 12
counts the master copy with the moments).

  baseline DP   (w + g + m + K) * psi
  ZeRO-1 P_os   (w + g) * psi + (m + K) * psi / N_d
  ZeRO-2 P_os+g w * psi + (g + m + K) * psi / N_d
  ZeRO-3        (w + g + m + K) * psi / N_d
Sharded buffers are padded to equal shards, hence ceil.
"""
from fitplan.arith import ceil_div
from fitplan.explain import formula
from fitplan.sources import Cite

ZERO_SEC5 = Cite("zero", "Sec. 5, Fig. 1")


def _text(symbol: str, stage: int):
    def text(*, zero, psi_e=0, **_):
        dense = f"{symbol}*psi/N_d" if zero >= stage else f"{symbol}*psi"
        experts = (f" + {symbol}*psi_e/N_ed" if zero >= stage else f" + {symbol}*psi_e") if psi_e else ""
        return dense + experts
    return text


def _state(psi, per_param, n_d, zero, stage, psi_e, n_ed):
    """Dense parameters shard over N_d = dp x cp; routed-expert parameters psi_e over the
    expert-data-parallel group N_ed = tp x dp x cp / ep (Megatron-LM's expert grid with
    expert tensor parallel 1)."""
    if zero >= stage:
        return ceil_div(psi * per_param, n_d) + ceil_div(psi_e * per_param, n_ed)
    return ceil_div(psi * per_param, 1) + ceil_div(psi_e * per_param, 1)


@formula("states/weights", _text("w", 3), ZERO_SEC5)
def weights_bytes(*, psi, w, n_d, zero, psi_e=0, n_ed=1):
    return _state(psi, w, n_d, zero, 3, psi_e, n_ed)


@formula("states/grads", _text("g", 2), ZERO_SEC5)
def grads_bytes(*, psi, g, n_d, zero, psi_e=0, n_ed=1):
    return _state(psi, g, n_d, zero, 2, psi_e, n_ed)


@formula("states/master", _text("m", 1), ZERO_SEC5)
def master_bytes(*, psi, m, n_d, zero, psi_e=0, n_ed=1):
    return _state(psi, m, n_d, zero, 1, psi_e, n_ed)


@formula("states/optimizer", _text("K", 1), ZERO_SEC5)
def optimizer_bytes(*, psi, K, n_d, zero, psi_e=0, n_ed=1):
    return _state(psi, K, n_d, zero, 1, psi_e, n_ed)


@formula("states/total", "B*psi", Cite("zero", "Sec. 3.1"))
def unsharded_state_bytes(*, psi, B):
    """All model states of psi parameters at B bytes each, before any sharding."""
    return ceil_div(psi * B, 1)
