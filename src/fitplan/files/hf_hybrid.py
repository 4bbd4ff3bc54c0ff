"""Hybrid Mamba models from a Hugging Face config.json (fitplan.files.hf reads the file).

Each family's layers become fitplan's layer pattern (M Mamba, * attention, - MLP, E MoE; one
block behind one pre-norm each: fitplan.counts.hybrid), with the weights its transformers
module builds:

  nemotron_h        (models/nemotron_h/modeling_nemotron_h.py: NemotronHBlock, NemotronHMamba2Mixer,
                    NemotronHAttention, NemotronHMLP, NemotronHMoE) hybrid_override_pattern, or
                    layers_block_type (newer files: "mamba", "attention", "mlp", "moe"), one block per
                    letter; hidden_size, num_attention_heads, num_key_value_heads, head_dim (older files:
                    attention_head_dim; default hidden / heads), intermediate_size, vocab_size, max_position_embeddings,
                    tie_word_embeddings (default false), mlp_hidden_act (relu2: two matrices),
                    attention_bias and mlp_bias (default false), no rotary embedding; Mamba-2 of
                    mamba_num_heads x mamba_head_dim, n_groups, ssm_state_size, conv_kernel, chunk_size,
                    use_conv_bias (default true), use_bias (default false). MoE: n_routed_experts of
                    moe_intermediate_size, num_experts_per_tok, a shared expert of
                    moe_shared_expert_intermediate_size (n_shared_experts of them; counted as that width
                    over moe_intermediate_size shared experts, the same weights), a sigmoid router with
                    e_score_correction_bias (one number per expert), moe_latent_size (LatentMoE). The
                    multi-token-prediction modules (num_nextn_predict_layers) hold
                    mtp_hybrid_override_pattern's (or mtp_layers_block_type's) layers.
  granitemoehybrid  (models/granitemoehybrid/modeling_granitemoehybrid.py: GraniteMoeHybridDecoderLayer)
                    each of num_hidden_layers layers is a mixer (layer_types: "mamba" or "attention")
                    behind input_layernorm, then behind post_attention_layernorm the shared SwiGLU MLP
                    (shared_intermediate_size) with, when num_local_experts > 0, num_local_experts
                    SwiGLU experts of intermediate_size beside it (a router h -> E without bias): two
                    letters per layer, the mixer's and E (an MLP, -, without experts). Mamba-2 of
                    mamba_n_heads heads of mamba_d_head (d_inner = mamba_expand * hidden), mamba_n_groups,
                    mamba_d_state, mamba_d_conv, mamba_chunk_size, mamba_conv_bias, mamba_proj_bias;
                    position_embedding_type nope (none) or rope; tie_word_embeddings (default true).
  jamba             (models/jamba/modeling_jamba.py: JambaAttentionDecoderLayer, JambaMambaDecoderLayer,
                    JambaMambaMixer, JambaSparseMoeBlock) layer i is attention when
                    i % attn_layer_period == attn_layer_offset, else Mamba, and its feed-forward is an MoE
                    of num_experts SwiGLU experts of intermediate_size (top num_experts_per_tok) when
                    num_experts > 1 and i % expert_layer_period == expert_layer_offset, else a SwiGLU MLP:
                    two letters per layer. Mamba (mamba1) of mamba_expand * hidden channels, mamba_d_state,
                    mamba_d_conv, mamba_dt_rank ("auto": ceil(hidden / 16)), with RMSNorms on dt, B and C;
                    no position encoding; tie_word_embeddings (default false).

Every other field (rope_theta, eps, dt limits, routing scales and groups, residual multipliers)
does not change memory and is ignored.
"""
import math

from fitplan.errors import SpecError
from fitplan.specs.model import MambaSpec, Mlp, MoeSpec, Norm, Position, SsmVersion

HYBRID_FAMILIES = ("nemotron_h", "granitemoehybrid", "jamba")
NEMOTRON_H_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
RELU2 = ("relu2",)


def hybrid_shape(cfg) -> dict:
    """The ModelSpec keywords of a hybrid family's config (cfg: fitplan.files.hf._Config)."""
    return {"nemotron_h": _nemotron_h, "granitemoehybrid": _granite, "jamba": _jamba}[cfg.family](cfg)


def _pattern_from(cfg, pattern_key: str, list_key: str, *, required: bool = True) -> str | None:
    """A Nemotron-H pattern: the string field, or the list of block names newer files write."""
    pattern = cfg.str(pattern_key, default=None)
    blocks = cfg.strs(list_key)
    if pattern is None and blocks is not None:
        unknown = sorted(set(blocks) - set(NEMOTRON_H_BLOCKS))
        if unknown:
            raise SpecError(f"{cfg.where}: {list_key} has {unknown[0]!r}; fitplan reads "
                            f"{', '.join(NEMOTRON_H_BLOCKS)}")
        pattern = "".join(NEMOTRON_H_BLOCKS[b] for b in blocks)
    if pattern is None and required:
        raise SpecError(f"{cfg.where}: a nemotron_h config needs '{pattern_key}' (or '{list_key}') naming its "
                        f"layers; add it")
    return pattern


def _shared_experts(cfg, width: int, ffn: int, field: str) -> int:
    """A shared MLP of `width` as shared experts of the routed width (the same weights)."""
    if width % ffn:
        raise SpecError(f"{cfg.where}: {field} {width} is not a whole number of routed experts' width {ffn}; "
                        f"fitplan counts the shared expert in routed experts' widths; describe the model in a "
                        f"model spec file")
    return width // ffn


def _nemotron_h(cfg) -> dict:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    cfg.activation("mlp_hidden_act", default="relu2", allowed=RELU2, what="squared ReLU")
    pattern = _pattern_from(cfg, "hybrid_override_pattern", "layers_block_type")
    layers = cfg.int("num_hidden_layers", default=len(pattern))
    if layers != len(pattern):
        raise SpecError(f"{cfg.where}: num_hidden_layers {layers} but the pattern names {len(pattern)} layers")
    attention_bias, mlp_bias = cfg.bool("attention_bias", False), cfg.bool("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise SpecError(f"{cfg.where}: attention_bias = {str(attention_bias).lower()} but mlp_bias = "
                        f"{str(mlp_bias).lower()}; fitplan's linear_bias covers every linear layer, so it needs both "
                        f"true or both false")
    out = dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
               num_kv_heads=cfg.int("num_key_value_heads", default=heads),
               head_dim=_head_dim(cfg.int("head_dim", "attention_head_dim", default=None), hidden, heads),
               ffn_hidden_size=cfg.int("intermediate_size"), vocab_size=cfg.int("vocab_size"),
               max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.RELU2, norm=Norm.RMSNORM,
               position=Position.NONE, tied_embeddings=cfg.bool("tie_word_embeddings", False),
               linear_bias=attention_bias, layer_pattern=pattern)
    mtp = cfg.int("num_nextn_predict_layers", default=0)
    if mtp:
        out.update(mtp_depth=mtp, mtp_pattern=_pattern_from(cfg, "mtp_hybrid_override_pattern",
                                                            "mtp_layers_block_type"))
    used = set(pattern) | set(out.get("mtp_pattern") or "")
    if "M" in used:
        out["mamba"] = MambaSpec(num_heads=cfg.int("mamba_num_heads"), head_dim=cfg.int("mamba_head_dim"),
                                 state_size=cfg.int("ssm_state_size"), num_groups=cfg.int("n_groups", default=1),
                                 conv_kernel=cfg.int("conv_kernel", default=4),
                                 chunk_size=cfg.int("chunk_size", default=128),
                                 conv_bias=cfg.bool("use_conv_bias", True), proj_bias=cfg.bool("use_bias", False))
    if "E" in used:
        ffn = cfg.int("moe_intermediate_size")
        shared = cfg.int("moe_shared_expert_intermediate_size", default=0) * cfg.int("n_shared_experts", default=1)
        out["moe"] = MoeSpec(num_experts=cfg.int("n_routed_experts"), experts_per_token=cfg.int("num_experts_per_tok"),
                             expert_ffn_size=ffn, expert_bias=True,
                             num_shared_experts=_shared_experts(cfg, shared, ffn, "moe_shared_expert_intermediate_size"),
                             latent_size=cfg.int("moe_latent_size", default=None))
    return out


def _granite(cfg) -> dict:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    layers = cfg.int("num_hidden_layers")
    cfg.activation("hidden_act", default="silu", allowed=("silu", "swish"), what="SiLU")
    types = cfg.strs("layer_types") or ["attention"] * layers
    if len(types) != layers or set(types) - {"mamba", "attention"}:
        raise SpecError(f"{cfg.where}: layer_types must list num_hidden_layers ({layers}) entries of 'mamba' and "
                        f"'attention'")
    if cfg.bool("attention_bias", False):
        raise SpecError(f"{cfg.where}: attention_bias is true; Granite's MLPs and experts have no biases and "
                        f"fitplan's linear_bias covers every linear layer; describe the model in a model spec file")
    experts = cfg.int("num_local_experts", default=0)
    shared = cfg.int("shared_intermediate_size")
    ffn_letter = "E" if experts else "-"
    pattern = "".join(("M" if t == "mamba" else "*") + ffn_letter for t in types)
    position = cfg.str("position_embedding_type", default="nope")
    out = dict(num_layers=len(pattern), hidden_size=hidden, num_heads=heads,
               num_kv_heads=cfg.int("num_key_value_heads", default=heads), ffn_hidden_size=shared,
               vocab_size=cfg.int("vocab_size"), max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.SWIGLU,
               norm=Norm.RMSNORM, position=Position.ROPE if position == "rope" else Position.NONE,
               tied_embeddings=cfg.bool("tie_word_embeddings", True), linear_bias=False, layer_pattern=pattern)
    if "mamba" in types:
        d_inner = cfg.int("mamba_expand", default=2) * hidden
        n_heads = cfg.int("mamba_n_heads")
        head_dim = cfg.int("mamba_d_head", default=d_inner // n_heads)
        if n_heads * head_dim != d_inner:
            raise SpecError(f"{cfg.where}: mamba_n_heads {n_heads} x mamba_d_head {head_dim} is not mamba_expand x "
                            f"hidden_size = {d_inner} (transformers GraniteMoeHybridMambaLayer)")
        out["mamba"] = MambaSpec(num_heads=n_heads, head_dim=head_dim, state_size=cfg.int("mamba_d_state"),
                                 num_groups=cfg.int("mamba_n_groups", default=1),
                                 conv_kernel=cfg.int("mamba_d_conv", default=4),
                                 chunk_size=cfg.int("mamba_chunk_size", default=256),
                                 conv_bias=cfg.bool("mamba_conv_bias", True),
                                 proj_bias=cfg.bool("mamba_proj_bias", False))
    if experts:
        ffn = cfg.int("intermediate_size")
        out["moe"] = MoeSpec(num_experts=experts, experts_per_token=cfg.int("num_experts_per_tok"),
                             expert_ffn_size=ffn,
                             num_shared_experts=_shared_experts(cfg, shared, ffn, "shared_intermediate_size"))
    return out


def _jamba(cfg) -> dict:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    layers = cfg.int("num_hidden_layers")
    cfg.activation("hidden_act", default="silu", allowed=("silu", "swish"), what="SiLU")
    attn_period, attn_offset = cfg.int("attn_layer_period", default=8), cfg.int("attn_layer_offset", default=4)
    moe_period, moe_offset = cfg.int("expert_layer_period", default=2), cfg.int("expert_layer_offset", default=1)
    experts = cfg.int("num_experts", default=16)
    if attn_period < 1 or moe_period < 1:
        raise SpecError(f"{cfg.where}: attn_layer_period and expert_layer_period must be >= 1")
    pattern = "".join(("*" if i % attn_period == attn_offset else "M")
                      + ("E" if experts > 1 and i % moe_period == moe_offset else "-") for i in range(layers))
    d_inner = cfg.int("mamba_expand", default=2) * hidden
    rank = cfg.data.get("mamba_dt_rank", "auto")
    dt_rank = math.ceil(hidden / 16) if rank == "auto" else cfg.int("mamba_dt_rank")
    out = dict(num_layers=len(pattern), hidden_size=hidden, num_heads=heads,
               num_kv_heads=cfg.int("num_key_value_heads", default=heads), ffn_hidden_size=cfg.int("intermediate_size"),
               vocab_size=cfg.int("vocab_size"), max_seq_len=cfg.int("max_position_embeddings", default=262144),
               mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.NONE,
               tied_embeddings=cfg.bool("tie_word_embeddings", False), linear_bias=False, layer_pattern=pattern,
               mamba=MambaSpec(num_heads=d_inner, head_dim=1, state_size=cfg.int("mamba_d_state", default=16),
                               conv_kernel=cfg.int("mamba_d_conv", default=4), version=SsmVersion.MAMBA1,
                               dt_rank=dt_rank, inner_norms=True, conv_bias=cfg.bool("mamba_conv_bias", True),
                               proj_bias=cfg.bool("mamba_proj_bias", False)))
    if "E" in pattern:
        out["moe"] = MoeSpec(num_experts=experts, experts_per_token=cfg.int("num_experts_per_tok", default=2),
                             expert_ffn_size=cfg.int("intermediate_size"))
    return out


def _head_dim(head_dim, hidden: int, heads: int):
    return None if head_dim is None or head_dim * heads == hidden else head_dim
