"""Floating-point operations of a training step: GEMMs only, as [korthikanti] App. A counts.

Symbols, as in [korthikanti] Table 1 and App. A: B sequences in the batch the count is
for (a micro-batch b, or the whole step), s sequence length, h hidden size, L layers, V
vocabulary. Generalised: q = a*d query width, kv = g*d key/value width (GQA), f ffn size,
n ffn-wide weight matrices (2 GeLU, 3 SwiGLU). A GEMM of (x, y) by (y, z) is 2xyz FLOPs.

Per layer, forward:
  linear  2*B*s*h*(2q + 2kv + n*f)   Q, K, V and output projections, the MLP matrices
  core    4*B*s^2*q                  the two attention GEMMs, Q K^T and scores x V
  logits  2*B*s*h*V                  the output layer, once per model
For GPT shapes (q = kv = h, f = 4h, n = 2) the layer is 24Bsh^2 + 4Bs^2h, App. A.
Backward is 2x forward. Model FLOPs (Eq. 7) count forward and backward once; hardware
FLOPs add what recompute reruns in the backward pass:
  selective  the attention core, 4Bs^2h per layer
  full       the whole layer forward, 24Bsh^2 + 4Bs^2h per layer (logits are not rerun)
With full recompute this is [narayanan] Eq. 3 exactly. With selective it gives the factor
1 + 2s/(9h) over the layers, not Eq. 8's printed 1 + s/(3h): see korthikanti_eq8_printed.
The attention core is counted over all s^2 query-key pairs, as both papers do (no
causal-mask halving).
"""
from fitplan.explain import FLOPS, formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

APP_A = Cite("korthikanti", "App. A, generalised in formulas.md#flops")
EQ7 = Cite("korthikanti", "Eq. 7 (App. A)")
GEMMS_ONLY = ("only GEMMs are counted (Korthikanti App. A): norms, softmax, activations ignored",
              "attention core over all s^2 pairs (no causal halving), as Korthikanti and Narayanan count")


@formula("flops/matmul", "2*B*s*P", APP_A, FLOPS, GEMMS_ONLY)
def matmul_flops(*, B, s, P):
    """Forward FLOPs of B*s tokens through weight matrices of P parameters per token (one
    multiply-add per weight): any attention (GQA, MLA), dense or MoE (router, shared and the
    k routed experts) layer (fitplan.counts.params.layer_matmul_params). GPT shapes: P = 12h^2
    (QKV 3h^2, output projection h^2, MLP 8h^2), so 24Bsh^2 as in Korthikanti App. A."""
    return 2 * B * s * P


@formula("flops/attention_core", lambda *, v=None, **_: "4*B*s^2*q" if v is None else "2*B*s^2*(q + v)",
         APP_A, FLOPS, GEMMS_ONLY)
def attention_core_flops(*, B, s, q, v=None):
    """Forward FLOPs of Q K^T (2Bs^2q) and of the scores times V (2Bs^2v, v = q unless the
    value heads are narrower, as in MLA). GPT: 4Bs^2h."""
    return 2 * B * s * s * (q + (q if v is None else v))


@formula("flops/logits", "2*B*s*h*V", APP_A, FLOPS)
def logits_flops(*, B, s, h, V):
    """Forward FLOPs of the output layer (the vocabulary projection)."""
    return 2 * B * s * h * V


@formula("flops/ssd_scan", "2*B*s*(Q*N*G + Q*d + 2*N*d)",
         Cite("mamba2", "Sec. 6 (the SSD algorithm's four steps), as ssd_combined.py's kernels run them: "
                        "_bmm_chunk_fwd, _chunk_state_fwd, _chunk_scan_fwd"), FLOPS,
         ("the state passing between chunks and the conv are elementwise, not counted (Korthikanti App. A counts "
          "GEMMs only)",))
def ssd_flops(*, B, s, Q, N, G, d):
    """Forward GEMM FLOPs of one Mamba-2 layer's chunked scan over B sequences (Q chunk size,
    N state, G groups, d = H*P): per chunk of Q tokens, C^T B for each group (2*Q*Q*N), the
    intra-chunk output (C^T B o L) X for each head (2*Q*Q*P), the chunk's state B^T X (2*Q*N*P)
    and the inter-chunk output C h (2*Q*N*P); s/Q chunks: 2*s*(Q*N*G + Q*d + 2*N*d). Mamba
    (mamba1)'s selective scan is elementwise: 0."""
    return 2 * B * s * (Q * N * G + Q * d + 2 * N * d)


@formula("flops/ssd_backward_rerun", "2*B*s*(Q*N*G + N*d)",
         Cite("mamba2", "ssd_combined.py _mamba_chunk_scan_combined_bwd: _bmm_chunk_fwd and _chunk_state_fwd rerun"),
         FLOPS, ("the fused scan keeps neither C^T B nor the chunk states: its backward recomputes both, whatever "
                 "the recompute mode",))
def ssd_backward_rerun_flops(*, B, s, Q, N, G, d):
    """Forward GEMM FLOPs one Mamba-2 layer's backward reruns inside the fused scan: C^T B for each
    group (2*s*Q*N*G) and the chunk states B^T X (2*s*N*d)."""
    return 2 * B * s * (Q * N * G + N * d)


def _forward_text(*, F_ssm=0, **_):
    return "L*(F_linear + F_core" + (" + F_ssm" if not isinstance(F_ssm, int) or F_ssm else "") + ") + F_logits"


@formula("flops/forward", _forward_text, APP_A, FLOPS)
def forward_flops(*, L, F_linear, F_core, F_logits, F_ssm=0):
    """One forward pass over L layers, plus the logits where the output layer is held. F_ssm: a
    hybrid model's Mamba-2 scans, per layer (the stage's average)."""
    return L * (F_linear + F_core + F_ssm) + F_logits


def _recompute_text(*, recompute, frac=1, F_ssm=0, **_):
    ssm = " + F_ssm" if not isinstance(F_ssm, int) or F_ssm else ""
    return {"none": "0", "selective": "L*F_core",
            "full": f"L*(F_linear + F_core{ssm})" if frac == 1 else
            f"frac*L*(F_linear + F_core{ssm})  (frac: recomputed layers)",
            "op": "L*F_rerun  (the matmuls not saved: wk, wo, w3/fc2)",
            "norms": "L*F_rerun  (MLA's up-projections; norms cost no GEMM FLOPs)"}[str(recompute)]


@formula("flops/recompute", _recompute_text, Cite("korthikanti", "Sec. 5 and App. A"), FLOPS,
         ("selective reruns the attention core only; full reruns every layer's forward, not the logits",))
def recompute_flops(*, L, F_linear, F_core, recompute, F_rerun=0, frac=1, F_ssm=0):
    """Forward FLOPs rerun during the backward pass. frac: the share of layers full recompute
    covers (Megatron-LM --recompute-method block with --recompute-num-layers)."""
    if recompute == Recompute.FULL:
        return frac * L * (F_linear + F_core + F_ssm)
    if recompute == Recompute.SELECTIVE:
        return L * F_core
    if recompute in (Recompute.OP, Recompute.NORMS):
        return L * F_rerun
    return 0 * F_core


@formula("flops/backward", lambda *, F_frozen=0, **_: "2*F_forward + F_recompute" + (
    " - F_frozen  (no weight gradients for frozen matrices)" if not isinstance(F_frozen, int) or F_frozen else ""),
         APP_A, FLOPS, ("backward = 2x forward (Korthikanti App. A); the recomputed forward runs inside it",))
def backward_flops(*, F_forward, F_recompute, F_frozen=0):
    """F_frozen: the weight-gradient GEMMs a frozen base skips (fine-tuning with adapters)."""
    return 2 * F_forward + F_recompute - F_frozen


@formula("flops/frozen_weight_grads", "L*F_frozen_linear + F_logits",
         Cite("fitplan", "formulas.md#lora-and-qlora"), FLOPS,
         ("a frozen matrix's backward computes its input's gradient only: half of its 2x forward",))
def frozen_weight_grad_flops(*, L, F_frozen, F_logits):
    """The weight-gradient GEMMs a frozen base and head would have cost: one forward's worth of
    each frozen matrix (the adapters and the attention core keep their full backward)."""
    return L * F_frozen + F_logits


@formula("flops/model", "3*F_forward  (= 72BLsh^2(1 + s/(6h) + V/(12hL)) for GPT shapes)", EQ7, FLOPS)
def model_flops(*, F_forward):
    """Model FLOPs: forward plus a backward of twice its cost, no recompute. For GPT shapes
    over the whole model this is korthikanti_eq7."""
    return 3 * F_forward


@formula("flops/forward_causal", "F_forward - L*F_core/2", Cite("flash-attention", "benchmark_flash_attention.py"),
         FLOPS, ("a causal mask skips half of the s^2 scores: the convention of FlashAttention's benchmarks and of "
                 "MFU figures quoted with causal attention; fitplan's time model still runs the full core",))
def causal_forward_flops(*, F_forward, L, F_core):
    """The forward with the attention core counted at half, for a causal MFU."""
    return F_forward - L * F_core / 2


@formula("flops/hardware", "F_forward + F_backward", Cite("korthikanti", "Eq. 8, as derived in App. A"), FLOPS,
         ("the recomputed forward counted as executed (hardware FLOPs); selective adds 4Bs^2h per layer, "
          "i.e. 1 + 2s/(9h) over the layers, not Eq. 8's printed 1 + s/(3h)",))
def hardware_flops(*, F_forward, F_backward):
    return F_forward + F_backward


@formula("flops/korthikanti_eq7", "72*B*L*s*h^2*(1 + s/(6h) + V/(12hL))", EQ7, FLOPS)
def korthikanti_eq7(*, B, L, s, h, V):
    """[korthikanti] Eq. 7 as printed, in integers: 72BLsh^2 + 12BLs^2h + 6BshV."""
    return 72 * B * L * s * h * h + 12 * B * L * s * s * h + 6 * B * s * h * V


@formula("flops/korthikanti_eq8_printed", "72*B*L*s*h^2*(1 + s/(3h) + V/(12hL))",
         Cite("korthikanti", "Eq. 8 (App. A), as printed"), FLOPS)
def korthikanti_eq8_printed(*, B, L, s, h, V):
    """[korthikanti] Eq. 8 as printed: 72BLsh^2 + 24BLs^2h + 6BshV. It adds 12Bs^2h per
    layer to Eq. 7, three times the 4Bs^2h that rerunning the two attention GEMMs costs;
    Table 5's HFU follows it (Eq. 9, HFU/MFU ~ 1 + s/(6h)). fitplan's hardware_flops
    does not use it (it adds 4Bs^2h: factor 1 + 2s/(9h))."""
    return 72 * B * L * s * h * h + 24 * B * L * s * s * h + 6 * B * s * h * V


@formula("flops/narayanan_eq3", "96*B*s*l*h^2*(1 + s/(6h) + V/(16lh))", Cite("narayanan", "Eq. 3"), FLOPS,
         ("full activation recompute: 4 forward passes' worth per layer, logits 3x",))
def narayanan_eq3(*, B, s, l, h, V):
    """[narayanan] Eq. 3 as printed, in integers: 96Bslh^2 + 16Bs^2lh + 6BshV."""
    return 96 * B * s * l * h * h + 16 * B * s * s * l * h + 6 * B * s * h * V
