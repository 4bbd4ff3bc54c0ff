"""A layer's memory-bound kernels: elementwise traffic, and an fp8 recipe's casts.

Norms, activation functions, dropout, softmax (eager), residual and bias adds read and write whole
activations at HBM bandwidth. Their bytes are taken in proportion to what the layer stores for
backward: kappa HBM bytes per stored byte, kappa being the kernel family's counted traffic
(fitplan.timing.calibration.ELEMENTWISE_TRAFFIC: fused, compiled) times one fitted scale, or eager's
measured whole. The
backward moves BACKWARD_TRAFFIC times the forward's bytes; a recompute reruns the forward's traffic of
what it did not store. An fp8 recipe adds its casts (Transformer Engine).
"""
from fitplan.arith import maximum, select
from fitplan.explain import SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.training import LOW_PRECISION_BYTES

ELEMENTWISE = Cite("fitplan", "formulas.md#elementwise-traffic (kappa: fitplan.timing.calibration)")
FP8_CASTS = Cite("transformer-engine", "fp8 casts before each fp8 GEMM, transposed copies for wgrad on Hopper, "
                                       "weights cast once per step (is_first_microbatch); DelayedScaling's amax "
                                       "history (amax_history_len = 1024) updated once per step")
# The backward's memory-bound kernels move 1.5 times the forward's bytes: an elementwise op, a norm or a
# softmax reads its output gradient and its saved input (or output) and writes its input gradient, three
# tensors against the forward's two (read the input, write the output).
BACKWARD_TRAFFIC = 1.5
# Transformer Engine DelayedScaling: amax_history_len = 1024 fp32 entries per fp8 tensor
AMAX_HISTORY = 1024


def mix(n_dense, L, dense, moe):
    """The stage's average over its n_dense dense and L - n_dense MoE layers; a stage without
    layers (--first-stage-layers 0: the embedding alone) takes the MoE layer's, which its zero
    layers multiply away."""
    if n_dense is None:
        return dense
    return select(L > 0, (n_dense * dense + (L - n_dense) * moe) / maximum(L, 1), moe)


def mix_kinds(weights, L, values):
    """A hybrid stage's average over its layers: each kind's value times its layers (weights),
    over the L layers (0 for a stage without layers)."""
    total = 0
    for n, v in zip(weights, values):
        total = total + n * v
    return total / maximum(L, 1)


@formula("time/layer_elementwise", "kappa*A/W_hbm  (A: the bytes the layer stores for backward, no recompute)",
         ELEMENTWISE, SECONDS,
         ("memory-bound kernels move kappa bytes of HBM traffic per byte of activation the layer stores: the "
          "kernel family's counted traffic times the fitted elementwise_scale (fitplan.timing.calibration); "
          "a flash kernel's softmax is inside the attention kernel",))
def elementwise_s(*, A, kappa, W):
    return kappa * A / W


@formula("bytes/fp8_casts_forward", "(e + e_lp)*X + ((e + 2*e_lp)*W_el + 2*4*H*3*n_g)/m  (input casts; weights "
                                    "and amax history once per step)", FP8_CASTS, "bytes")
def fp8_cast_forward_bytes(*, X, W_el, n_g, e, m, e_lp=1, H=AMAX_HISTORY):
    """Per micro-batch and layer: each low-precision GEMM's input read at e bytes and written at e_lp
    (X elements; e_lp: the precision's bytes per element with its scales, 1 for fp8); its weight (W_el
    elements) read at e and written with its transpose, and the amax histories of its three tensors
    (input, weight, grad) read and written, once per step of m micro-batches."""
    return (e + e_lp) * X + ((e + 2 * e_lp) * W_el + 2 * 4 * H * 3 * n_g) / m


@formula("bytes/fp8_casts_backward", "(e + e_lp)*Y + e_lp*(X + Y)  (output-gradient casts; transposed copies "
                                     "for wgrad)", FP8_CASTS, "bytes")
def fp8_cast_backward_bytes(*, X, Y, e, e_lp=1):
    """Per micro-batch and layer: each GEMM's output gradient (Y elements) read at e and written at
    e_lp, and the transposed low-precision copies of its input and output gradient the weight-gradient
    GEMM reads (Hopper's layout; MXFP8 and NVFP4 quantize each direction with its own scales)."""
    return (e + e_lp) * Y + e_lp * (X + Y)


@formula("bytes/moe_routed_copies", "k*rho*s*b*h*e/(t*c)", Cite("fitplan", "formulas.md#moe"), "bytes",
         ("the k routed copies of the stage's sequence-sharded tokens, at the activations' element size",))
def moe_routed_bytes(*, k, rho, s, b, h, e, t, c):
    return k * rho * s * b * h * e / (t * c)


@formula("time/moe_token_traffic", "kappa_moe*C/W_hbm", ELEMENTWISE, SECONDS,
         ("an MoE layer's router, permutation and unpermutation move kappa_moe bytes of HBM traffic per byte of its "
          "routed copies (fitplan.timing.calibration's moe_traffic, fitted end to end)",))
def moe_traffic_s(*, C, kappa_moe, W):
    return kappa_moe * C / W


@formula("time/fp8_casts", "bytes/W_hbm", FP8_CASTS, SECONDS)
def cast_s(*, bytes_, W):
    return bytes_ / W


def layer_elementwise(ev, setup, c, sh, *, L, n_dense, kappa, kappa_moe, kinds=None):
    """Forward elementwise seconds per layer (stage average), and what recompute reruns of
    them: the traffic of the activations it did not store."""
    from fitplan.memory import activations as A
    from fitplan.specs.parallel import Recompute
    W = setup.cluster.gpu.hbm_bytes_per_s
    if W is None:   # no HBM figure: the memory-bound kernels are left out
        zero = 0 * c.micro_batch
        return zero, zero
    if kinds is not None:
        return _hybrid_elementwise(ev, setup, c, sh, L=L, kinds=kinds, kappa=kappa, kappa_moe=kappa_moe, W=W)
    layer = dict(sh.kw(), b=c.micro_batch, t=c.tp, c=c.cp, sp=c.sequence_parallel)
    extras = [("", {})] if n_dense is None else [("", {}), ("_moe", sh.moe.kw())]
    full = [ev(A.per_layer_bytes, key=f"bytes/layer_activations{tag}", recompute=Recompute.NONE, **layer, **extra)
            for tag, extra in extras]
    A_none = full[0] if n_dense is None else mix(n_dense, L, full[0], full[1])
    mem = ev(elementwise_s, A=A_none, kappa=kappa, W=W)
    if n_dense is not None:   # the MoE layers' token handling: router, permute, unpermute over the routed copies
        copies = ev(moe_routed_bytes, k=sh.moe.k, rho=sh.moe.rho, s=sh.s, b=c.micro_batch, h=sh.h, e=sh.e, t=c.tp,
                    c=c.cp)
        mem = mem + mix(n_dense, L, 0 * copies, ev(moe_traffic_s, C=copies, kappa_moe=kappa_moe, W=W))
    if c.recompute == Recompute.NONE:
        return mem, 0 * mem
    kept = [ev(A.per_layer_bytes, key=f"bytes/layer_activations_stored{tag}", recompute=c.recompute, **layer, **extra)
            for tag, extra in extras]
    A_kept = kept[0] if n_dense is None else mix(n_dense, L, kept[0], kept[1])
    return mem, ev(elementwise_s, key="time/layer_elementwise_rerun", A=A_none - A_kept, kappa=kappa, W=W)


def _hybrid_elementwise(ev, setup, c, sh, *, L, kinds, kappa, kappa_moe, W):
    """layer_elementwise for a hybrid stage: each kind's stored bytes (activations.per_block_bytes,
    through fitplan.memory.hybrid_memory.hybrid_activations) weighted by its layers; the MoE layers'
    routed copies add their token traffic."""
    from fitplan.explain import RAW
    from fitplan.memory import hybrid_memory as HM
    from fitplan.specs.model import LAYER_KINDS
    from fitplan.specs.parallel import Recompute
    layer = dict(sh.kw(), b=c.micro_batch, t=c.tp, c=c.cp, sp=c.sequence_parallel)
    used = set(setup.model.layer_pattern) | set(setup.model.mtp_pattern or "")
    stored = {}
    scan = 0   # a Mamba-2 layer's fp32 chunk states and C^T B: written and read in each pass like stored bytes
    m = setup.model.mamba
    if "M" in used and m.version.value == "mamba2":
        from fitplan.memory import activations as A
        scan = A.ssd_scan_workspace_bytes(b=c.micro_batch, s=sh.s, Q=m.chunk_size, H=m.num_heads, P=m.head_dim,
                                          N=m.state_size, G=m.num_groups, t=c.tp, c=c.cp)
    for mode in {Recompute.NONE, c.recompute}:
        per = HM.hybrid_block_bytes(RAW, setup, dict(layer, recompute=mode))
        per["M"] = per["M"] + scan
        stored[mode] = mix_kinds([kinds[k] for k in LAYER_KINDS], L, [per[k] for k in LAYER_KINDS])
    mem = ev(elementwise_s, A=stored[Recompute.NONE], kappa=kappa, W=W)
    if "E" in used:
        copies = ev(moe_routed_bytes, k=sh.moe.k, rho=sh.moe.rho, s=sh.s, b=c.micro_batch, h=sh.moe.w or sh.h, e=sh.e,
                    t=c.tp, c=c.cp)
        mem = mem + kinds["E"] / maximum(L, 1) * ev(moe_traffic_s, C=copies, kappa_moe=kappa_moe, W=W)
    if c.recompute == Recompute.NONE:
        return mem, 0 * mem
    return mem, ev(elementwise_s, key="time/layer_elementwise_rerun", A=stored[Recompute.NONE] - stored[c.recompute],
                   kappa=kappa, W=W)


def fp8_casts(ev, setup, sh, kinds, *, L, n_dense, m, like, weights=None):
    """fp8 recipes: the casts' and amax bookkeeping's traffic per layer (stage average),
    forward and backward, at HBM bandwidth. kinds: the dense (and MoE) layers' linear GEMMs, or
    a hybrid stage's per kind of layer with their layer counts (weights)."""
    W = setup.cluster.gpu.hbm_bytes_per_s
    compute = setup.training.recipe.compute
    if compute == "bf16" or W is None:
        zero = 0 * like
        return zero, zero
    e_lp = LOW_PRECISION_BYTES[compute]
    elements = [(sum(gm.g * gm.m * gm.k for gm in gs), sum(gm.g * gm.m * gm.n for gm in gs),
                 sum(gm.g * gm.k * gm.n for gm in gs)) for gs in kinds]
    if weights is not None:
        X, Y, W_el = (mix_kinds(weights, L, list(col)) for col in zip(*elements))
    else:
        X, Y, W_el = elements[0] if n_dense is None else (mix(n_dense, L, a, b) for a, b in zip(*elements))
    f = ev(cast_s, key="time/fp8_casts_forward", W=W, bytes_=ev(
        fp8_cast_forward_bytes, X=X, W_el=W_el, n_g=len(kinds[-1]), e=sh.e, m=m, e_lp=e_lp))
    b = ev(cast_s, key="time/fp8_casts_backward", W=W, bytes_=ev(fp8_cast_backward_bytes, X=X, Y=Y, e=sh.e,
                                                                 e_lp=e_lp))
    return f, b
