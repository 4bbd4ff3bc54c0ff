"""A layer's GEMMs on one GPU, at the stage's degrees.

A layer's GEMMs are listed at the stage's degrees (tensor parallel t, context parallel c,
expert parallel ep, micro-batch b), each a fitplan.timing.gemm.Gemm whose time the GEMM curve
gives. Backward GEMMs (dgrad, wgrad) have the forward's three dimensions in another order and
are taken to cost as much.

Symbols: T tokens per GPU per micro-batch (b*s/c), h hidden size, q = a*d query width, kv
key/value width, f ffn size, E experts, k_r experts per token, rho the busiest rank's load,
V vocabulary.
"""
from fitplan.timing.gemm import Gemm


def attention_linears(model, *, T, t) -> tuple[Gemm, ...]:
    """Q, K, V and output projections (Megatron column/row-parallel: n or k split by t). MLA:
    the down-projections to the latents replicated on every tp rank, the up-projections and
    the output split."""
    h, mla = model.hidden_size, model.mla
    if mla is None:
        return (Gemm("qkv", T, (model.q_size + 2 * model.kv_size) / t, h),
                Gemm("attention_out", T, h, model.q_size / t))
    a = model.num_heads
    out = [Gemm("kv_down", T, mla.kv_lora_rank + mla.qk_rope_head_dim, h)]
    if mla.q_lora_rank:
        out.append(Gemm("q_down", T, mla.q_lora_rank, h))
    out += [Gemm("q_up", T, a * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) / t, mla.q_lora_rank or h),
            Gemm("kv_up", T, a * (mla.qk_nope_head_dim + mla.v_head_dim) / t, mla.kv_lora_rank),
            Gemm("attention_out", T, h, a * mla.v_head_dim / t)]
    return tuple(out)


def mlp_linears(model, *, T, t, f, tag="mlp", g=1, width=None) -> tuple[Gemm, ...]:
    """A dense MLP of width f split by t: the up (and gate) projection, then the down one
    (width: its input's, h or a LatentMoE expert's latent)."""
    n_up = 2 if model.mlp.gated else 1
    w = model.hidden_size if width is None else width
    return (Gemm(f"{tag}_up", T, n_up * f / t, w, g), Gemm(f"{tag}_down", T, w, f / t, g))


def moe_gemms(model, *, T, t, ep=1, rho=1) -> tuple[Gemm, ...]:
    """An MoE block's GEMMs (Megatron-LM's MoELayer, expert tensor parallel 1): the router; the
    shared experts as a dense MLP split by t; LatentMoE's h -> l and l -> h projections
    (replicated, on the rank's T/t sequence-sharded tokens); the E/ep local experts as one
    grouped GEMM each way, every expert receiving T_e = k_r*rho*T*ep/(t*E) tokens."""
    e, h = model.moe, model.hidden_size
    out = (Gemm("router", T, e.num_experts, h),)
    if e.num_shared_experts:
        out += mlp_linears(model, T=T, t=t, f=e.num_shared_experts * e.expert_ffn_size, tag="shared")
    if e.latent_size is not None:
        out += (Gemm("latent_down", T / t, e.latent_size, h), Gemm("latent_up", T / t, h, e.latent_size))
    T_e = e.experts_per_token * rho * T * ep / (t * e.num_experts)
    return out + mlp_linears(model, T=T_e, t=1, f=e.expert_ffn_size, tag="experts", g=e.num_experts / ep,
                             width=e.latent_size)


def linear_gemms(model, *, T, t, ep=1, moe_layer=False, rho=1) -> tuple[Gemm, ...]:
    """The layer's linear GEMMs on one GPU for T tokens: attention, then the MLP or the MoE
    block (moe_gemms; the tp ranks dispatch their T/t sequence-sharded tokens)."""
    out = attention_linears(model, T=T, t=t)
    if not moe_layer:
        return out + mlp_linears(model, T=T, t=t, f=model.ffn_hidden_size)
    return out + moe_gemms(model, T=T, t=t, ep=ep, rho=rho)


def mamba_linears(model, *, T, t) -> tuple[Gemm, ...]:
    """A Mamba layer's projections (Megatron-LM MambaMixer: in_proj column-parallel, out_proj
    row-parallel); Mamba (mamba1) adds x_proj (d -> R + 2N) and dt_proj (R -> d)."""
    from fitplan.counts import hybrid as HY
    m, h = model.mamba, model.hidden_size
    out = (Gemm("mamba_in_proj", T, HY.in_proj_width(model) / t, h), Gemm("mamba_out_proj", T, h, m.d_inner / t))
    if m.version.value == "mamba1":
        R = HY.dt_rank(model)
        out += (Gemm("mamba_x_proj", T, R + 2 * m.state_size, m.d_inner / t), Gemm("mamba_dt_proj", T, m.d_inner / t, R))
    return out


def block_gemms(model, kind: str, *, T, t, ep=1, rho=1) -> tuple[Gemm, ...]:
    """A hybrid model's layer of `kind` (M, *, -, E): its linear GEMMs on one GPU for T tokens."""
    if kind == "M":
        return mamba_linears(model, T=T, t=t)
    if kind == "*":
        return attention_linears(model, T=T, t=t)
    if kind == "-":
        return mlp_linears(model, T=T, t=t, f=model.ffn_hidden_size)
    return moe_gemms(model, T=T, t=t, ep=ep, rho=rho)


def ssd_gemms(model, *, b, s, t, c) -> tuple[Gemm, ...]:
    """A Mamba-2 layer's chunked scan per GPU as batched GEMMs (fitplan.counts.flops.ssd_flops):
    over the b*s/(c*Q) chunks of Q tokens, C^T B for each of the G/t local groups, then for each
    of the H/t local heads the intra-chunk output (Q x Q by Q x P), the chunk state (N x Q by
    Q x P) and the inter-chunk output (Q x N by N x P)."""
    m = model.mamba
    Q, N, P = m.chunk_size, m.state_size, m.head_dim
    chunks = b * s / (c * Q)
    heads, groups = chunks * m.num_heads / t, chunks * m.num_groups / t
    return (Gemm("ssd_cb", Q, Q, N, groups), Gemm("ssd_intra", Q, P, Q, heads), Gemm("ssd_state", N, P, Q, heads),
            Gemm("ssd_inter", Q, P, N, heads))


def core_gemms(model, *, b, s, t, c) -> tuple[Gemm, ...]:
    """An eager attention core per GPU: b*a/t heads of s/c local queries against s keys, the scores
    Q K^T and the context P V as two batched GEMMs (the s^2 scores written and read back). A flash
    kernel is timed at its benchmarked efficiency instead (flash_core_efficiency)."""
    a = model.num_heads
    d_qk, d_v = model.q_size / a, model.kv_size / a if model.mla is not None else model.q_size / a
    heads, q_len = b * a / t, s / c
    return (Gemm("attention_scores", q_len, s, d_qk, heads), Gemm("attention_context", q_len, d_v, s, heads))


def head_gemms(model, *, T, t) -> tuple[Gemm, ...]:
    """The output layer (vocabulary-parallel: n split by t)."""
    return (Gemm("output_layer", T, model.vocab_size / t, model.hidden_size),)
