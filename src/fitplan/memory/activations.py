"""Activation bytes stored for the backward pass, per GPU.

Symbols, as in [korthikanti] Table 1: s sequence length, b micro-batch size, h hidden
size, a attention heads, t tensor-parallel degree, L layers, p pipeline degree, v
vocabulary (here V). Generalised: q = a*d query width, kv = g*d key/value width, f ffn
size, n = 2 (GeLU) or 3 (fused SwiGLU) stored ffn-wide tensors, e bytes per activation
element, M bytes per dropout-mask element, D = 1 with dropout and 0 without, c context-
parallel degree. The derivation is in docs/formulas.md; per layer and micro-batch:

  R = s*b*h*(4e + 2*D*M)      two LN inputs, two LN outputs, two dropout masks;
                              replicated over tp unless sequence parallel splits them
  T = s*b*(e*(2q + 2kv) + n*e*f)
                              Q, K, V, attention-output-projection input, the MLP's
                              ffn-wide tensors; split by tp
  S = a*s^2*b*(e + D*(e + M)) softmax output, its dropout mask and output; split by tp

With e = 2, M = 1, D = 1, q = kv = h, f = 4h, n = 2 this is Korthikanti et al.'s
R = 10sbh, T = 24sbh, S = 5as^2b, and:
  none       (R*[t if no SP else 1] + T + S) / (t*c)   Table 2 rows 2-3: sbh(10 + 24/t + 5as/(ht)), sbh/t(34 + 5as/h)
  selective  (R*[t if no SP else 1] + T) / (t*c)       Table 2 rows 4-5: sbh(10 + 24/t), 34sbh/t
  full       e*s*b*h / ([t if SP else 1]*c)            Table 2 row 6: 2sbh (the layer input; under SP it is the
                                                        sequence-sharded input, 2sbh/t)
Context parallel splits the sequence, so every term divides by c (for the score term,
a*(s/c)*s*b: local queries against all keys).
"""
from fitplan.arith import ceil_div, minimum, select
from fitplan.counts.params import op_sac_saved
from fitplan.explain import COUNT, formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

TABLE2 = Cite("korthikanti", "Table 2 (Sec. 4), generalised in formulas.md#activations")
SEC43 = Cite("korthikanti", "Sec. 4.3")


def _paper_shaped(*, h, q, kv, f, n, e, M, D, r_extra=0, kernel="eager", k=0, e_l=None, **_) -> bool:
    """GPT shapes with Korthikanti et al.'s assumptions: the formula reduces to Table 2."""
    return (q, kv, f, n, e, M, D, r_extra, kernel, k, e_l) == (h, h, 4 * h, 2, 2, 1, 1, 0, "eager", 0, None)


def _layer_text(*, recompute, sp, t, c, **kw):
    div_c = "" if c == 1 else "/c"
    if recompute == Recompute.OP:
        return _op_text(n=kw.get("n", 2), bias=kw.get("bias", "none"), k=kw.get("k", 0))
    if recompute == Recompute.NORMS:
        return ("(R'*[t if no SP] + T' + S)/(t*c), R'=s*b*h*(2e+2DM) (norm outputs recomputed), "
                "T' drops MLA's Q, K, V (up-projections recomputed)")
    if _paper_shaped(**kw):
        if recompute == Recompute.FULL:
            return ("2*s*b*h/t" if sp and t > 1 else "2*s*b*h") + div_c
        if t == 1:
            return ("34*s*b*h" if recompute == Recompute.SELECTIVE else "s*b*h*(34 + 5as/h)") + div_c
        if sp:
            return ("34*s*b*h/t" if recompute == Recompute.SELECTIVE else "s*b*h/t*(34 + 5as/h)") + div_c
        return ("s*b*h*(10 + 24/t)" if recompute == Recompute.SELECTIVE else "s*b*h*(10 + 24/t + 5as/(h*t))") + div_c
    rep = "R" if sp else "R*t"
    if recompute == Recompute.FULL:
        return "e*s*b*h/(t*c)" if sp else "e*s*b*h/c"
    core = "" if recompute == Recompute.SELECTIVE else " + S"
    ln = "2e+2e_l+2DM" if kw.get("e_l") is not None else "4e+2DM"
    r = f"R=s*b*(h*({ln}) + e*r_x)" if kw.get("r_extra") else f"R=s*b*h*({ln})"
    if kw.get("e_l") is None:
        mlp = "n*e*f_s + k*rho*(e*(h + n*f_e) + 4) + 8E" if kw.get("k") else "n*e*f"
    else:
        mlp = ("(n-1)*e*f_s + e_l*f_s + k*rho*(e_l*h + (n-1)*e*f_e + e_l*f_e + 4) + 8E" if kw.get("k")
               else "(n-1)*e*f + e_l*f")
    sc = "S=4*a*s*b (flash: fp32 logsumexp)" if kw.get("kernel") == "flash" else "S=a*s^2*b*(e+D*(e+M))"
    attn = "e*(2q+2kv)" if kw.get("e_l") is None else "e*(q+2kv) + e_l*q"
    return f"({rep} + T{core})/(t*c), {r}, T=s*b*({attn} + {mlp}), {sc}"


def _op_text(*, n, bias, k):
    saved = op_sac_saved(n=n, bias=bias, moe=k > 0)
    widths = ["q"] + [{"q": "q", "k": "kv", "v": "kv", "w1": "f", "w3": "f"}[x] for x in saved if x not in ("o", "w2")]
    rows = sum(x in ("o", "w2") for x in saved)
    terms = [(f"{widths.count(w)}{w}" if widths.count(w) > 1 else w) for w in ("q", "kv", "f") if w in widths]
    narrow = f"e*({' + '.join(terms)})" if len(terms) > 1 else f"e*{terms[0]}"
    moe = " + MoE MLP" if k else ""
    wide = "[t if no SP] + 2*[SP]" + ("" if not rows else " + t" if rows == 1 else f" + {rows}t")
    names = ", ".join(("w" + x if len(x) == 1 else x) for x in saved) or "none (every linear has a bias: addmm)"
    return (f"(e*s*b*h*({wide}) + s*b*({narrow} + 4a{moe}))/(t*c)  (input; saved mm outputs: {names}; "
            "SDPA out and fp32 logsumexp; under SP the two reduce-scatter outputs; row-parallel mm outputs "
            "are whole partial sums)")


def attention_core_bytes(*, s, b, a, e, M, D, kernel):
    """The attention core S: the s^2 scores, softmax and its dropout (eager), or only the fp32
    logsumexp a flash kernel keeps, 4*a*s*b (docs/engines.md#activations-saved-for-backward: SDPA's CPU flash path)."""
    return 4 * a * s * b if kernel == "flash" else a * s * s * b * (e + D * (e + M))


def _mlp_per_token(*, h, f, n, e, k, rho, f_e, f_s, E, e_l=None, swiglu_recompute=False, w=None):
    """Bytes per token the MLP stores beyond its input (LN2's output, in R).
    Dense: n e-byte tensors f wide. MoE (Megatron-LM MoELayer, expert tensor parallel 1): the
    shared experts' n*e*f_s; for each of the k*rho routed copies of the token (rho: capacity
    factor, or the load imbalance when dropless) the permuted input (h), the expert's n*f_e
    and its fp32 routing probability (4 B), which the expert's activation function multiplies
    in and keeps (Megatron-LM moe/experts.py bias_act_func, fusions/fused_bias_swiglu.py
    WeightedSwiGLUFunction: since "Memory efficient token permutation", 2025, the combine is
    an unweighted sum that keeps no expert output); and the router's fp32 logits and
    probabilities, 8E. LatentMoE (w: the latent width l): the routed copies are l wide, and
    fc2_latent_proj keeps its input, the combined latent (e_l*l); fc1_latent_proj's input is the
    norm's output, already counted."""
    e_l = e if e_l is None else e_l   # a linear's stored input (fp8: 1, docs/formulas.md#fp8-activations)
    # n ffn-wide tensors: n - 1 before the activation function, then fc2's input (a linear input)
    if k == 0:
        return (n - 1) * e * f + e_l * f
    # a routed copy: its dispatched input (fc1's input), the ffn-wide tensors and its fp32 probability, kept by
    # the weighted activation; DeepSeek-V3 caches the SwiGLU's inputs in fp8 and recomputes its output (Sec. 3.3.3)
    routed = (n - 1) * e_l * f_e if swiglu_recompute else (n - 1) * e * f_e + e_l * f_e
    latent = 0 if w is None else e_l * w   # fc2_latent_proj's input
    return (n - 1) * e * f_s + e_l * f_s + k * rho * (e_l * (h if w is None else w) + routed + 4) + 8 * E + latent


@formula("activations/per_layer", _layer_text, TABLE2,
         assumes=("activations stored at e bytes/element; dropout masks at M bytes/element (Korthikanti Sec. 4)",
                  "eager attention stores the s^2 scores unless recomputed; flash keeps a 4*a*s*b logsumexp",
                  "LayerNorm mean/rstd (2sb elements) ignored, as in Korthikanti Sec. 4"))
def per_layer_bytes(*, s, b, h, a, q, kv, f, n, e, M, D, t, c, sp, recompute, r_extra=0, kernel="eager",
                    k=0, rho=1, f_e=0, f_s=0, E=0, e_l=None, bias="none", w=None):
    """Bytes one layer stores for one micro-batch on one GPU. k > 0 makes it an MoE layer
    (tokens sequence-sharded over tp, as Megatron-LM requires SP for MoE with tp > 1);
    r_extra adds replicated widths (MLA's latents). e_l: the bytes of a stored linear input
    (the norms' outputs, the attention output, fc2's input, a dispatched token) where it
    differs from e: 1 under fp8 recipes, whose weight-gradient GEMMs read an fp8 copy
    (Transformer Engine's Linear saves its fp8-cast input; DeepSeek-V3 Sec. 3.3.1). bias
    (counts.params.bias_kind) says which linears have a bias, which only op recompute depends on."""
    e_in = e if e_l is None else e_l
    if recompute == Recompute.FULL:
        return ceil_div(e * s * b * h, select(sp, t, 1) * c)
    mlp = _mlp_per_token(h=h, f=f, n=n, e=e, k=k, rho=rho, f_e=f_e, f_s=f_s, E=E, e_l=e_l, w=w,
                         swiglu_recompute=recompute == Recompute.NORMS and n == 3 and e_l is not None)
    if recompute == Recompute.OP:
        return op_sac_layer_bytes(s=s, b=b, h=h, a=a, q=q, kv=kv, f=f, n=n, e=e, t=t, c=c, sp=sp, bias=bias,
                                  moe_mlp=mlp if k else 0, moe=k > 0)
    # Q, K, V and the attention output: 2q + 2kv in all; the output (o_proj's input) is q wide for
    # grouped-query attention and kv = a*d_v wide for MLA, whose K is q wide
    out = select(r_extra > 0, kv, q)
    if recompute == Recompute.NORMS:   # the two norms' outputs, MLA's latent norms and up-projections (Q, K, V) go
        R = s * b * (h * (2 * e + 2 * D * M) + e * r_extra // 2)
        T = s * b * (e * select(r_extra > 0, 0, 2 * q + 2 * kv - out) + e_in * out + mlp)
    else:   # two norm inputs (e), two norm outputs (linear inputs), dropout masks; Q, K, V (e), attention output
        R = s * b * (h * (2 * e + 2 * e_in + 2 * D * M) + e * r_extra)
        T = s * b * (e * (2 * q + 2 * kv - out) + e_in * out + mlp)
    S = 0 if recompute == Recompute.SELECTIVE else attention_core_bytes(s=s, b=b, a=a, e=e, M=M, D=D, kernel=kernel)
    return ceil_div(R * select(sp, 1, t) + T + S, t * c)


def op_sac_layer_bytes(*, s, b, h, a, q, kv, f, n, e, t, c, sp, bias="none", moe_mlp=0, moe=False):
    """torchtitan's op-level selective checkpointing (activation_checkpoint.mode = "selective",
    selective_ac_option = "op", torchtitan/models/llama3/infra/parallelize.py). The layer runs
    under one non-reentrant checkpoint, which keeps the layer's input; its policy keeps the
    outputs of SDPA (the attention output and its fp32 logsumexp, 4 B per head and token), of
    reduce_scatter_tensor (under SP, the row-parallel outputs wo and w2 are reduce-scattered:
    two h-wide shards) and of every odd-numbered aten.mm (counts.params.op_sac_saved: wq, wv,
    w1 and, SwiGLU, w2 when no linear has a bias; a biased linear is an addmm, neither saved
    nor counted). Everything else is recomputed. Per rank: column-parallel outputs (q, kv, f)
    are split by t; a row-parallel mm output (wo, w2) is the rank's whole partial sum,
    s*b*h, SP or not; the input is sequence-sharded only under SP. MoE layers keep their MLP's
    stored tensors (moe_mlp, bytes per token; grouped expert GEMMs are not aten.mm) and the
    attention's saves."""
    saved = op_sac_saved(n=n, bias=bias, moe=moe)
    col = sum({"q": q, "k": kv, "v": kv, "w1": f, "w3": f}.get(x, 0) for x in saved)
    rows = sum(x in ("o", "w2") for x in saved)
    scatters = select(sp, 1, 0) * select(t > 1, 2, 0)
    wide = e * s * b * h * (select(sp, 1, t) + rows * t + scatters)
    narrow = s * b * (e * (q + col) + 4 * a + moe_mlp)
    return ceil_div(wide + narrow, t * c)


@formula("activations/recompute_workspace",
         lambda *, recompute, **_: {"none": "0", "selective": "S/(t*c)  (one layer's attention core)",
                                    "full": "(R*[t] + T + S)/(t*c)  (one layer, no recompute)",
                                    "op": "(R*[t] + T + S)/(t*c)  (one layer, no recompute; an upper bound)",
                                    "norms": "(R*[t] + T + S)/(t*c)  (one layer, no recompute; an upper bound)"
                                    }[str(recompute)],
         Cite("fitplan", "formulas.md#recompute-workspace"))
def recompute_workspace_bytes(*, s, b, h, a, q, kv, f, n, e, M, D, t, c, sp, recompute, r_extra=0,
                              kernel="eager", k=0, rho=1, f_e=0, f_s=0, E=0, e_l=None, bias="none", w=None):
    """While one layer's backward runs, its recomputed activations exist on top of the
    stored ones: the whole layer under full recompute, the attention core under selective.
    Korthikanti et al. leave this transient out; fitplan counts it (for the larger layer
    kind when a model mixes dense and MoE layers: the caller passes that one)."""
    if recompute == Recompute.NONE:
        return 0 * b
    if recompute in (Recompute.FULL, Recompute.OP, Recompute.NORMS):
        return per_layer_bytes(s=s, b=b, h=h, a=a, q=q, kv=kv, f=f, n=n, e=e, M=M, D=D, t=t, c=c, sp=sp,
                               recompute=Recompute.NONE, r_extra=r_extra, kernel=kernel, k=k, rho=rho, f_e=f_e,
                               f_s=f_s, E=E, e_l=e_l, w=w)
    return ceil_div(attention_core_bytes(s=s, b=b, a=a, e=e, M=M, D=D, kernel=kernel), t * c)


@formula("activations/moe_buffers", lambda *, e_l=None, **_: "2*e*k*rho*s*b*h/(t*c)" if e_l is None else
         "(e_l + e)*k*rho*s*b*h/(t*c)  (fp8 dispatch, bf16 combine)", Cite("fitplan", "formulas.md#moe"),
         assumes=("one MoE layer's all-to-all dispatch and combine buffers exist at a time",))
def moe_buffers_bytes(*, s, b, h, e, k, rho, t, c, e_l=None):
    """The all-to-all send and receive buffers of one MoE layer's routed tokens: the dispatch
    at e_l bytes per element (fp8 under an fp8 recipe, DeepSeek-V3 Sec. 3.3.3), the combine at e.
    h: the routed width (LatentMoE's latent l)."""
    return ceil_div(((e if e_l is None else e_l) + e) * k * rho * s * b * h, t * c)


def _chunks_text(*, schedule="1f1b", **_):
    return {"1f1b": "min(m, p - r) for v = 1; min(m*v, 2(p - r - 1) + (v - 1)p + 1) for v > 1",
            "zero-bubble": "min(m, p - r)  (ZB-H1 keeps 1F1B's peak)",
            "gpipe": "m  (every forward before any backward)",
            "dualpipe": "p + 1 half-rank chunks (two stages per rank)"}[str(schedule)]


@formula("activations/chunks_in_flight", _chunks_text,
         Cite("megatron-schedules", "forward_backward_pipelining_*: warmup micro-batches + 1 (ZB-H1 keeps it: "
                                    "Qi et al. 2023 Sec. 3.1; DualPipe p + 1: DeepSeek-V3 Table 2)"), COUNT)
def chunks_in_flight(*, p, v, r, m, schedule="1f1b"):
    """Model chunks (each 1/v of the rank's layers) whose activations pipeline rank r holds
    at its peak. 1F1B: the warm-up forwards plus the first steady-state one; for r = 0 and
    m >= p this is L layers' worth for v = 1 [korthikanti Sec. 4.2.3] and
    L*(1 + (p - 1)/(p*v)) for interleaved 1F1B [korthikanti Sec. 4.2.3, interleave factor].
    ZB-H1 has 1F1B's peak [qi 2023 Sec. 3.1]; GPipe holds all m; DualPipe p + 1 chunks of
    half a rank (its two stages) [deepseek-v3 Sec. 3.2.1, Table 2], the caller passes v = 2."""
    if schedule == "gpipe":
        return m * v
    if schedule == "dualpipe":
        return minimum(m, p) + 1
    one = minimum(m, p - r)
    interleaved = minimum(m * v, 2 * (p - r - 1) + (v - 1) * p + 1)
    return select(v == 1, one, interleaved)


@formula("activations/embedding",
         lambda *, sp, ids=8, **_: "n_mb*(D*M*s*b*h/" + ("t" if sp else "1") + (" + 8*s*b" if ids else "") + ")/c"
         + ("" if ids else "  (a frozen embedding keeps no token ids)"),
         Cite("korthikanti", "Sec. 4.3; token ids: Megatron-LM theoretical_memory_usage.py"))
def embedding_bytes(*, s, b, h, M, D, t, c, sp, n_mb, ids=8):
    """First stage: the embedding-dropout mask (sbhp/t in Sec. 4.3, with SP) and the int64
    token ids (8sb, Megatron-LM; ids=0 when the embedding is frozen, its weight gradient
    not computed), for each of the n_mb micro-batches in flight."""
    return n_mb * (ceil_div(D * M * s * b * h, select(sp, t, 1) * c) + ceil_div(ids * s * b, c))


@formula("activations/embedding_microbatches", "ceil(chunks/v)  (micro-batches whose chunks the rank holds)",
         Cite("megatron", "in_flight_microbatches"), COUNT)
def embedding_microbatches(*, chunks, v):
    """Micro-batches in flight on the rank that holds the embedding: its held chunks over v."""
    return ceil_div(chunks, v)


def _output_text(*, sp, n_mb=1, k_in=2, x=4, held=0, **_):
    kept = {4: "4*s*b*V/(t*c)", 2: "2*s*b*V/(t*c) + 8*s*b/c  (compiled chunked loss: bf16 logits and two fp32 row "
            "statistics)", 0: "0*V  (no logits kept: the loss runs with the output layer)"}.get(x, f"{x}*s*b*V/(t*c)")
    extra = " + H_lce  (the output layer's gradients, made in the forward)" if held else ""
    return (("" if n_mb == 1 else "n_mb*(") + (f"{k_in}*e*s*b*h" if k_in != 1 else "e*s*b*h")
            + ("/(t*c)" if sp else "/c") + f" + {kept}{extra}" + ("" if n_mb == 1 else ")")
            + ("" if k_in == 2 else "  (the head's input is not kept)"))


@formula("activations/output", _output_text, SEC43,
         assumes=("logits kept in fp32 for the cross-entropy (Korthikanti Sec. 4.3) unless --cross-entropy says "
                  "otherwise",))
def output_bytes(*, s, b, h, V, e, t, c, sp, n_mb=1, k_in=2, x=4, held=0):
    """Last stage: final-norm input and output-projection input (2sbh/t each in Sec. 4.3;
    k_in = 1 when the head is frozen or its gradients are made in the forward: its input is not
    kept) and the logits the loss saves for its backward, x bytes each: the fp32 logits of
    the vocabulary-parallel cross-entropy, 4sbV/t; 2 (bf16) with two fp32 statistics per row for
    a compiled chunked loss (torchtune's compute_cross_entropy under torch.compile); 0 for a fused
    linear cross-entropy, which holds `held` instead (the output layer's input and weight
    gradients). For the n_mb micro-batches whose loss waits for its backward (1 under 1F1B, all m
    under GPipe)."""
    logits = ceil_div(x * s * b * V, t * c) + select(x == 2, ceil_div(8 * s * b, c), 0 * s)
    return n_mb * (ceil_div(k_in * e * s * b * h, select(sp, t, 1) * c) + logits + held)


# ---------------------------------------------------------------- hybrid models: one block per layer

MAMBA_SAVED = Cite("mamba2", "ssd_combined.py MambaSplitConv1dScanCombinedFn.forward save_for_backward (zxbcdt, "
                             "out_x), as Megatron-LM's MambaMixer runs it (mamba_mixer.py _ssm_training, "
                             "ExtendedRMSNorm, out_proj); formulas.md#hybrid-models")
MAMBA1_SAVED = Cite("mamba", "selective_scan_interface.py MambaInnerFn.forward save_for_backward, checkpoint_lvl 1")


@formula("activations/mamba_per_token",
         lambda *, version="mamba2", **_: "e*(W_in + 2d) + e_l*d + 4G  (zxBCdt, out_x, the gated y; out_proj's input; "
         "the norm's fp32 rstd per group)" if version == "mamba2" else
         "e*(3d + R + 4N)  (xz, x_dbl, B, C, out) + 8*d*N*ceil(s/2048)/s  (the scan's fp32 chunk states)",
         MAMBA_SAVED, assumes=("Megatron-LM's memory-efficient path (use_mem_eff_path): the fused conv and scan "
                               "keep their input and the scan's output and recompute the conv, the chunk states "
                               "and dA in backward",))
def mamba_per_token_bytes(*, W_in, d, G, N, e, e_l=None, version="mamba2", R=0, s=1):
    """Bytes one token's Mamba mixer keeps for backward, summed over the tp ranks (the caller
    divides by t), beside its pre-norm's input and output (in R). Mamba-2 (Megatron-LM
    MambaMixer._ssm_training): mamba_split_conv1d_scan_combined keeps zxBCdt, in_proj's output
    (W_in = 2d + 2GN + H wide), and out_x, the scan's output before the z gate (d); the gated
    RMSNorm (ExtendedRMSNorm, mamba_ssm layernorm_gated) its input, the gated output (d), and an
    fp32 rstd per group (4G); out_proj its input (d, at e_l: fp8 under fp8 recipes). Mamba
    (mamba1: MambaInnerFn, checkpoint_lvl 1): xz (2d), x_dbl (R + 2N), B and C copies (2N), the
    scan's output (d), and its fp32 chunk states, 2N per channel per 2,048 tokens (s: the
    sequence length)."""
    e_l = e if e_l is None else e_l
    if version == "mamba1":
        return e * (3 * d + R + 4 * N) + 8 * d * N * ceil_div(s, 2048) / s
    return e * (W_in + 2 * d) + e_l * d + 4 * G


def _block_text(*, kind, recompute, sp, **kw):
    if recompute == Recompute.FULL:
        return "e*s*b*h/(" + ("t*c" if sp else "c") + ")  (the block's input)"
    core = " + S" if kind == "*" and recompute != Recompute.SELECTIVE else ""
    T = {"M": "T_mamba: s*b*(mamba_per_token)", "*": "T=s*b*(e*(q + 2kv) + e_l*q)",
         "-": "T=s*b*(n-1)*e*f + e_l*f", "E": "T=s*b*(MoE MLP per token)"}[kind]
    return f"(R*[t if no SP] + T{core})/(t*c), R=s*b*h*(e + e_l + D*M) (one pre-norm, one dropout), {T}"


@formula("activations/per_block", _block_text,
         Cite("fitplan", "formulas.md#hybrid-models (Korthikanti Table 2 split into its attention and MLP blocks)"),
         assumes=("a hybrid layer is one block behind one pre-norm: its norm's input and output and its dropout "
                  "mask are replicated over tp unless sequence parallel splits them",))
def per_block_bytes(*, kind, s, b, h, e, M, D, t, c, sp, recompute, T_tok=0, q=0, kv=0, a=0, kernel="eager",
                    e_l=None):
    """Bytes one layer of a hybrid model (a Mamba, attention, MLP or MoE block) stores for one
    micro-batch on one GPU. The blocks of a transformer layer, attention and MLP, add up to
    per_layer_bytes (the norms, dropouts and stored tensors of Korthikanti's Table 2 belong to
    one block or the other). T_tok: the bytes per token the block's own tensors keep, summed over
    the tp ranks (mamba_per_token_bytes; an MLP's or MoE's _mlp_per_token); attention's are its
    Q, K, V and output, and its core S unless recomputed (selective)."""
    if recompute == Recompute.FULL:
        return ceil_div(e * s * b * h, select(sp, t, 1) * c)
    e_in = e if e_l is None else e_l
    R = s * b * h * (e + e_in + D * M)
    if kind == "*":
        T = s * b * (e * (q + 2 * kv) + e_in * q)
        S = 0 if recompute == Recompute.SELECTIVE else attention_core_bytes(s=s, b=b, a=a, e=e, M=M, D=D,
                                                                            kernel=kernel)
    else:
        T, S = s * b * T_tok, 0
    return ceil_div(R * select(sp, 1, t) + T + S, t * c)


def mlp_per_token_bytes(*, h, f, n, e, k=0, rho=1, f_e=0, f_s=0, E=0, e_l=None, w=None):
    """An MLP's (k = 0) or MoE block's (k > 0) bytes per token beside its input (_mlp_per_token)."""
    return _mlp_per_token(h=h, f=f, n=n, e=e, k=k, rho=rho, f_e=f_e, f_s=f_s, E=E, e_l=e_l, w=w)


@formula("activations/ssd_scan_workspace", "4*b*ceil(s/(Q*c))*(H*P*N + G*Q^2 + 2*H*Q)/t  (fp32 chunk states, C^T B "
         "per chunk, dA_cumsum and dt)", Cite("mamba2", "ssd_combined.py _mamba_chunk_scan_combined_fwd: states, CB, "
                                                         "dA_cumsum, dt"),
         assumes=("the SSD scan's chunk states and per-chunk C^T B exist while one Mamba layer runs forward or "
                  "backward (recomputed there, not stored)",))
def ssd_scan_workspace_bytes(*, b, s, Q, H, P, N, G, t, c):
    """The fp32 intermediates of one Mamba-2 layer's chunked scan on one GPU, transient: the
    states entering each chunk (H*P*N per chunk), C^T B of each chunk per group (G*Q^2), and the
    per-head cumulative dA and dt (Q each per chunk)."""
    return ceil_div(4 * b * ceil_div(s, Q * c) * (H * P * N + G * Q * Q + 2 * H * Q), t)


@formula("activations/layers", "n_M*A_M + n_A*A_A + n_D*A_D + n_E*A_E  (one micro-batch through the stage's "
                               "Mamba, attention, MLP and MoE layers)", Cite("korthikanti", "Sec. 4.2.3"))
def hybrid_stage_bytes(*, n_M, A_M, n_A, A_A, n_D, A_D, n_E, A_E):
    return n_M * A_M + n_A * A_A + n_D * A_D + n_E * A_E
