"""What the per-GPU total leaves out, as labelled estimates (not added to the total).

Used to say, for a shown answer, which unmodelled buffer matters most against its headroom.
"""
from fitplan.arith import ceil_div, select
from fitplan.explain import formula
from fitplan.sources import Cite


@formula("buffers/zero3_gather", "4*P_layer/t", Cite("deepspeed", "ZeRO-3 estimate: 4 x largest layer"))
def zero3_gather_bytes(*, P_layer, t):
    """ZeRO-3 materialises each layer's full 16-bit parameters (and gradients) before use;
    DeepSpeed's estimator budgets 4 bytes per parameter of the largest layer."""
    return ceil_div(4 * P_layer, t)


@formula("buffers/logits_grad", "4*s*b*V/(t*c)", Cite("korthikanti", "Sec. 4.3 (the fp32 logits' gradient)"))
def logits_grad_bytes(*, s, b, V, t, c):
    """The cross-entropy backward makes a gradient as large as the fp32 logits."""
    return ceil_div(4 * s * b * V, t * c)


@formula("buffers/p2p", "2*e*s*b*h/(t*c)", Cite("narayanan", "Sec. 4.1 (scatter/gather: b*s*h/t per send)"))
def p2p_bytes(*, e, s, b, h, t, c, sp):
    """One send and one receive buffer of a micro-batch's boundary activations."""
    return ceil_div(2 * e * s * b * h, select(sp, t, 1) * c)
