"""Hybrid models: Mamba, attention, MLP and MoE layers in the order of a pattern.

Megatron-LM's hybrid models and Nemotron-H name each layer with one letter (Megatron-LM
megatron/core/ssm/mamba_hybrid_layer_allocation.py Symbols; transformers NemotronHConfig
hybrid_override_pattern): M Mamba, * attention, - MLP, E MoE. Each layer is one block behind
one pre-norm (transformers NemotronHBlock: norm, mixer, residual; Megatron-LM MambaLayer, and a
TransformerLayer holding only attention or only an MLP). Jamba and Granite 4.0-H pair each
mixer with an MLP or MoE behind a second norm: the same blocks, two letters per decoder layer
(fitplan.files.hf).

Symbols (Mamba-2: [mamba2] Sec. 7, state-spaces/mamba mamba_ssm/modules/mamba2.py): h hidden
size, H heads, P head size, d = H*P inner width, G groups of B and C, N state size, K conv
width; Mamba (mamba1, mamba_ssm/modules/mamba_simple.py): d channels, N state, R dt rank.

One Mamba-2 layer's parameters (mamba_ssm Mamba2.__init__, Megatron-LM MambaMixer.__init__):
  in_proj   h*(2d + 2GN + H)        z, x, B, C and dt    (+ 2d + 2GN + H biases with proj_bias)
  conv1d    (d + 2GN)*K             depthwise over x, B and C  (+ d + 2GN biases)
  A_log, D, dt_bias                 H each
  norm      d                       the gated RMSNorm before out_proj (RMSNormGated, groups of d/G)
  out_proj  d*h                     (+ h bias)
One Mamba layer (mamba1; mamba_simple.Mamba): in_proj h*2d, conv1d d*K (+ d), x_proj d*(R + 2N),
dt_proj R*d + d, A_log d*N, D d, out_proj d*h; Jamba adds RMSNorms of R, N and N on dt, B and C
(transformers JambaMambaMixer dt_layernorm, b_layernorm, c_layernorm).

Tensor parallelism (Megatron-LM MambaMixer): in_proj is column-parallel with each of z, x, B,
C and dt split by t (nheads and ngroups must be divisible by t), conv1d, A_log, D, dt_bias and
the gated norm's weight are split with them, out_proj is row-parallel: every weight of the
mixer is split by t. The block's pre-norm and a row-parallel bias are replicated.
"""
from fitplan.counts import params as P
from fitplan.specs.model import (ATTENTION_LAYER, LAYER_KINDS, MAMBA_LAYER, MLP_LAYER, MOE_LAYER, ModelSpec,
                                 SsmVersion)

# The kinds' names in keys and texts, in LAYER_KINDS order
KIND_NAMES = {MAMBA_LAYER: "mamba", ATTENTION_LAYER: "attention", MLP_LAYER: "mlp", MOE_LAYER: "moe"}
# ... and in formulas' keywords (n_M, S_A, ...)
KIND_TAGS = {MAMBA_LAYER: "M", ATTENTION_LAYER: "A", MLP_LAYER: "D", MOE_LAYER: "E"}


def dt_rank(model: ModelSpec) -> int:
    """Mamba (mamba1)'s dt rank R: the given one, or mamba_ssm's "auto", ceil(h/16) (mamba_simple.Mamba)."""
    return model.mamba.dt_rank or -(-model.hidden_size // 16)


def in_proj_width(model: ModelSpec) -> int:
    """in_proj's output: z, x, B, C, dt (Mamba-2: 2d + 2GN + H); x and z (Mamba: 2d)."""
    m = model.mamba
    if m.version is SsmVersion.MAMBA1:
        return 2 * m.d_inner
    return 2 * m.d_inner + 2 * m.num_groups * m.state_size + m.num_heads


def conv_channels(model: ModelSpec) -> int:
    """The channels the causal conv runs over: x, B and C (Mamba-2: d + 2GN); x (Mamba: d)."""
    m = model.mamba
    return m.d_inner if m.version is SsmVersion.MAMBA1 else m.d_inner + 2 * m.num_groups * m.state_size


def _x_dt_proj(model: ModelSpec) -> int:
    """Mamba (mamba1) only: x_proj d*(R + 2N) and dt_proj R*d."""
    m = model.mamba
    R = dt_rank(model)
    return m.d_inner * (R + 2 * m.state_size) + R * m.d_inner


def mamba_matmul_params(model: ModelSpec) -> int:
    """Weight-matrix parameters one token passes through in a Mamba layer: in_proj and
    out_proj (and Mamba's x_proj and dt_proj)."""
    m, h = model.mamba, model.hidden_size
    extra = _x_dt_proj(model) if m.version is SsmVersion.MAMBA1 else 0
    return h * in_proj_width(model) + m.d_inner * h + extra


def mamba_sharded_params(model: ModelSpec) -> int:
    """A Mamba layer's parameters tensor parallelism splits by t: every mixer weight (module
    docstring); with proj_bias, in_proj's bias."""
    m = model.mamba
    d, K = m.d_inner, m.conv_kernel
    conv = conv_channels(model) * (K + (1 if m.conv_bias else 0))
    bias = in_proj_width(model) if m.proj_bias else 0
    if m.version is SsmVersion.MAMBA1:   # dt_proj's bias d, A_log d*N, D d
        ssm = d + d * m.state_size + d
        norm = 0
    else:                                # A_log, D, dt_bias; the gated RMSNorm
        ssm = 3 * m.num_heads
        norm = d
    return mamba_matmul_params(model) + conv + bias + ssm + norm


def mamba_replicated_params(model: ModelSpec) -> int:
    """A Mamba layer's parameters every tp rank holds: its pre-norm, out_proj's bias (proj_bias)
    and Jamba's RMSNorms on dt, B and C."""
    m = model.mamba
    inner = dt_rank(model) + 2 * m.state_size if m.inner_norms else 0
    return P.norm_params(model) + (model.hidden_size if m.proj_bias else 0) + inner


def block_params(model: ModelSpec, kind: str) -> tuple[int, int]:
    """(tp-split, replicated) parameters of one layer of `kind` (routed experts apart:
    P.expert_params). Attention: its projections (P.attention_sharded_params), its pre-norm and
    q/k norms; MLP: one of ffn_hidden_size; MoE: the shared experts split, the router, gate,
    routing-score bias and latent projections replicated (P.moe_layer_replicated_params)."""
    norm = P.norm_params(model)
    if kind == MAMBA_LAYER:
        return mamba_sharded_params(model), mamba_replicated_params(model)
    if kind == ATTENTION_LAYER:
        qk = P.layer_norms_params(model) - model.norms_per_layer * norm
        return P.attention_sharded_params(model), norm + qk + P.attention_replicated_params(model)
    if kind == MLP_LAYER:
        return P.mlp_sharded_params(model, model.ffn_hidden_size), norm + P.mlp_replicated_params(model)
    e = model.moe
    return (P.mlp_sharded_params(model, e.num_shared_experts * e.expert_ffn_size),
            norm + P.moe_router_params(model) + (P.mlp_replicated_params(model) if e.num_shared_experts else 0))


def block_matmul_params(model: ModelSpec, kind: str, rho: float = 1) -> float:
    """Weight-matrix parameters one token passes through in a layer of `kind` (rho: the busiest
    rank's load on the routed experts, as P.layer_matmul_params)."""
    if kind == MAMBA_LAYER:
        return mamba_matmul_params(model)
    if kind == ATTENTION_LAYER:
        return P.attention_matmul_params(model)
    if kind == MLP_LAYER:
        return (3 if model.mlp.gated else 2) * model.hidden_size * model.ffn_hidden_size
    return P.moe_matmul_params(model, rho=rho)


def kind_counts(pattern: str) -> dict:
    """How many layers of each kind a pattern holds."""
    return {k: pattern.count(k) for k in LAYER_KINDS}


def prefix_counts(pattern: str) -> dict:
    """For each kind, the number of its layers among the first j layers, j = 0 .. len: a layer
    range's count is a difference of two (fitplan.counts.stages.kind_layers_on_stage)."""
    out = {}
    for k in LAYER_KINDS:
        run, acc = [0], 0
        for c in pattern:
            acc += c == k
            run.append(acc)
        out[k] = tuple(run)
    return out


def layers_params(model: ModelSpec, experts_per_layer: int | None) -> int:
    """Every layer of the pattern, counted once (with `experts_per_layer` routed experts per MoE
    layer, or all of them)."""
    counts = kind_counts(model.layer_pattern)
    total = sum(n * sum(block_params(model, k)) for k, n in counts.items() if n)
    if counts[MOE_LAYER]:
        total += counts[MOE_LAYER] * P.expert_params(model, experts_per_layer)
    return total


def mtp_layers_params(model: ModelSpec, experts_per_layer: int | None = None) -> int:
    """One multi-token-prediction module's layers (mtp_pattern), without its projection and norms."""
    counts = kind_counts(model.mtp_pattern or "")
    total = sum(n * sum(block_params(model, k)) for k, n in counts.items() if n)
    if counts[MOE_LAYER]:
        total += counts[MOE_LAYER] * P.expert_params(model, experts_per_layer)
    return total
