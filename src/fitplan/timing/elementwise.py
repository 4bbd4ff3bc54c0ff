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
from fitplan.timing.gemm import Gemm

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


# NVFP4's quantization moves more than the bytes it writes suggest. Each cast first reads the tensor for its
# global amax (the per-tensor FP32 scale over the 16-element blocks' E4M3 scales), the wgrad operands' columnwise
# copies pass through a 16-point random Hadamard transform with an amax of their own, and the gradients are
# rounded stochastically (Transformer Engine docs/features/low_precision_training/nvfp4/nvfp4.rst). Transformer
# Engine measured it on a B300 (docs/features/low_precision_training/gemm_profiling/gemm_profiling.rst@33294178,
# the worked 5B example: h 4096, ffn 16384, 31 x 512 tokens, one layer's 12 GEMMs): per layer, autocast (inputs
# quantized before each GEMM) minus --pre-quantize (the kernels alone) is 6.439 - 3.754 = 2.685 ms for NVFP4
# against 8.507 - 7.324 = 1.183 ms for MXFP8. fitplan's cast count (fp8_cast_forward_bytes and
# fp8_cast_backward_bytes, above) gives NVFP4 0.77 of MXFP8's bytes for that layer (its smaller writes);
# NVFP4_CAST_TRAFFIC scales NVFP4's count to the measured 2.27 times MXFP8's.
# MXFP8's own count stays the base: its level is absorbed with the other memory-bound kernels' by the end-to-end
# fit, and no measurement here prices the fp8 recipes' passes apart from it.
TE_B300_QUANTIZE_S = {"mxfp8": 8.507e-3 - 7.324e-3, "nvfp4": 6.439e-3 - 3.754e-3}
# the page's layer: 31 x 512 tokens through its four linears (qkv, proj, fc1, fc2; h 4096, ffn 16384, no gating)
_T, _H, _F = 31 * 512, 4096, 16384
TE_5B_LAYER = (Gemm("qkv", _T, 3 * _H, _H), Gemm("proj", _T, _H, _H), Gemm("fc1", _T, _F, _H), Gemm("fc2", _T, _H, _F))
NVFP4_QUANTIZE = Cite("transformer-engine", "docs/features/low_precision_training/gemm_profiling/gemm_profiling.rst"
                                            "@33294178 (5B layer on B300: autocast minus pre-quantized, NVFP4 "
                                            "2.685 ms, MXFP8 1.183 ms); nvfp4/nvfp4.rst (amax, RHT, SR)")


def cast_elements(gemms) -> tuple:
    """X, Y, W_el of a set of linear GEMMs: their inputs', outputs' and weights' elements, what the casts move."""
    return (sum(gm.g * gm.m * gm.k for gm in gemms), sum(gm.g * gm.m * gm.n for gm in gemms),
            sum(gm.g * gm.k * gm.n for gm in gemms))


def _layer_cast_bytes(compute, gemms):
    """fitplan's cast count for one layer of the measured model, weights cast every call (m = 1: the benchmark
    quantizes both operands each time)."""
    X, Y, W_el = cast_elements(gemms)
    e_lp = LOW_PRECISION_BYTES[compute]
    return (fp8_cast_forward_bytes.fn(X=X, W_el=W_el, n_g=len(gemms), e=2, m=1, e_lp=e_lp)
            + fp8_cast_backward_bytes.fn(X=X, Y=Y, e=2, e_lp=e_lp))


NVFP4_CAST_TRAFFIC = (TE_B300_QUANTIZE_S["nvfp4"] / TE_B300_QUANTIZE_S["mxfp8"]) / (
    _layer_cast_bytes("nvfp4", TE_5B_LAYER) / _layer_cast_bytes("mxfp8", TE_5B_LAYER))
CAST_TRAFFIC = {"nvfp4": NVFP4_CAST_TRAFFIC}


@formula("time/fp8_casts", "q*bytes/W_hbm", NVFP4_QUANTIZE, SECONDS,
         (f"q: the recipe's quantization traffic over the bytes counted for its casts, 1 but for NVFP4 (its amax "
          f"passes and Hadamard-transformed wgrad copies: "
          f"{TE_B300_QUANTIZE_S['nvfp4'] / TE_B300_QUANTIZE_S['mxfp8']:.2f} times MXFP8's time per layer as "
          f"Transformer Engine measured on a B300, q = {NVFP4_CAST_TRAFFIC:.2f})",))
def cast_s(*, bytes_, W, q=1):
    return q * bytes_ / W


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
    elements = [cast_elements(gs) for gs in kinds]
    if weights is not None:
        X, Y, W_el = (mix_kinds(weights, L, list(col)) for col in zip(*elements))
    else:
        X, Y, W_el = elements[0] if n_dense is None else (mix(n_dense, L, a, b) for a, b in zip(*elements))
    q = CAST_TRAFFIC.get(compute, 1)
    f = ev(cast_s, key="time/fp8_casts_forward", W=W, q=q, bytes_=ev(
        fp8_cast_forward_bytes, X=X, W_el=W_el, n_g=len(kinds[-1]), e=sh.e, m=m, e_lp=e_lp))
    b = ev(cast_s, key="time/fp8_casts_backward", W=W, q=q, bytes_=ev(fp8_cast_backward_bytes, X=X, Y=Y, e=sh.e,
                                                                      e_lp=e_lp))
    return f, b


# The loss's memory-bound kernels: HBM bytes per logit element (e: the logits' element size, as the output layer
# writes them), forward and backward, counted kernel by kernel from each loss's source. The logits are V/t per token
# on a vocabulary-parallel rank, so a large vocabulary on a small hidden size makes this a layer's worth of traffic.
#   fused    Transformer Engine's parallel cross-entropy, which Megatron-Bridge's recipes select
#            (cross_entropy_fusion_impl "te"; transformer_engine/common/triton/cross_entropy.py, pytorch/triton/
#            cross_entropy.py): the online-softmax kernel reads the logits (e), the loss kernel reads them again (e)
#            and writes the fp32 gradient (4); the backward scales it in place by the per-token loss gradient
#            (element_mul_kernel: 4 + 4) and autograd casts it to the logits' dtype (4 + e). Megatron-Core's own
#            fused loss (fusions/fused_cross_entropy.py) makes the same passes in fp32 with one more, and Megatron-LM's
#            command line without --cross-entropy-loss-fusion runs them unfused (about 52 bytes): counted as TE's.
#   pytorch  F.cross_entropy on an fp32 copy (torchtitan, Hugging Face, DeepSpeed's models): the copy (e + 4),
#            log_softmax's forward kernel (cunn_SoftMaxForward) reading its input twice and writing once (12);
#            backward nll_loss's zero-filled gradient (4), log_softmax's backward (cunn_SoftMaxBackward) reading the
#            gradient twice and the output once and writing (16), the copy's backward cast (4 + e). Measured on one
#            H200 (docs/measurements/gpu-step-profile-2026-12-04-nvidia-h200.json, 16,384 tokens x 32,000 logits):
#            the two softmax kernels took 1.651 and 2.142 ms, 12 and 16 bytes per logit at 3.81 and 3.92 TB/s, the
#            rate a device copy reached there (3.78). With fp32 logits (e = 4) `.float()` returns its input and its
#            backward passes the gradient through: no copy either way (12 and 20).
#   chunked  torchtune's chunked loss: the same kernels, a chunk at a time.
#   linear   Liger's fused linear cross-entropy: per chunk the GEMM writes the logits (counted with the GEMM), its
#            kernel reads them twice and writes the gradient in their place (3e), all in the forward.
def loss_traffic_per_logit(kernel: str, e) -> tuple:
    """(forward, backward) HBM bytes per logit element of the loss kernel (--cross-entropy)."""
    if kernel == "linear":
        return 3 * e, 0 * e
    if kernel == "fused":
        return 2 * e + 4, 12 + e
    copy = (e < 4) * (e + 4)   # pytorch, chunked: the fp32 copy and its backward cast, none for fp32 logits
    return 12 + copy, 20 + copy


LOSS_TRAFFIC = Cite("fitplan", "formulas.md#loss-traffic (transformer_engine/common/triton/cross_entropy.py; "
                               "torch log_softmax and nll_loss kernels; Liger-Kernel ops/cross_entropy.py)")


@formula("time/loss_traffic", "n*beta*s*b*V/(t*c*W_hbm)", LOSS_TRAFFIC, SECONDS,
         ("the loss's memory-bound kernels move beta bytes per logit element each way (fitplan.timing.elementwise."
          "loss_traffic_per_logit, by --cross-entropy), on the stage with the output layer, n losses per micro-batch "
          "(the multi-token-prediction modules' each)",))
def loss_traffic_s(*, n, beta, s, b, V, t, c, W):
    return n * beta * s * b * V / (t * c * W)


def loss_traffic(ev, setup, c, sh, *, n):
    """(forward, backward) seconds of the loss's memory-bound kernels per micro-batch on a stage holding n losses
    (0 without the output layer); none without an HBM figure."""
    W = setup.cluster.gpu.hbm_bytes_per_s
    if W is None:
        zero = 0 * c.micro_batch
        return zero, zero
    f, b = loss_traffic_per_logit(setup.training.cross_entropy, sh.e)
    kw = dict(n=n, s=sh.s, b=c.micro_batch, V=setup.model.vocab_size, t=c.tp, c=c.cp, W=W)
    return (ev(loss_traffic_s, key="time/loss_traffic_forward", beta=f, **kw),
            ev(loss_traffic_s, key="time/loss_traffic_backward", beta=b, **kw))
