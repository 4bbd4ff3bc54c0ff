"""Parameter counts from shapes, and their split over tensor and pipeline parallelism.

Symbols: L layers, h hidden size, q = a*d query width, kv = g*d key/value width (g kv
heads, d head size), f ffn size, V vocabulary, s_max learned-position table length,
t tensor-parallel degree, p pipeline-parallel degree.

Per layer (GPT-3 / Megatron-LM GPT; Llama drops biases and uses RMSNorm):
  attention  h*(q + 2kv) + q*h weights, (q + 2kv) + h biases
  mlp        n*h*f weights (n = 2 GeLU and squared ReLU, 3 SwiGLU and GeGLU), f (GeLU) or 2f
             (SwiGLU) + h biases
  norms      n_norm x (2h LayerNorm | h RMSNorm); n_norm = 2 (before attention and before
             the MLP) unless the model says otherwise: Gemma 2/3 add post-attention and
             post-feedforward norms (4, transformers Gemma2DecoderLayer), Falcon-7B's parallel
             block shares one input norm (1, FalconDecoderLayer)
  q/k norms  head: 2d (one RMSNorm weight of d for q and one for k, shared by the heads:
             transformers Qwen3Attention q_norm/k_norm, Gemma3Attention); projection: q + kv
             (RMSNorms over the whole projections: transformers Olmo2Attention)
For GPT shapes (q = kv = h, f = 4h) a layer is 12h^2 + 13h, as in [narayanan Eq. 2].

Attention sinks (gpt-oss): a learned logit per head that joins each softmax, a per layer
(transformers GptOssAttention.sinks; Megatron-LM DotProductAttention softmax_offset of
num_attention_heads_per_partition, so split by t with the heads).

An MoE layer adds the router h*E, with a sigmoid gate on the shared experts h (Qwen2-MoE's
shared_expert_gate, transformers Qwen2MoeSparseMoeBlock) and a routing-score bias E per
layer (DeepSeek-V3's e_score_correction_bias, transformers DeepseekV3TopkRouter) where the
model has them. LatentMoE (Nemotron 3 Super and Ultra: transformers NemotronHMoE
fc1_latent_proj and fc2_latent_proj; Megatron-LM MoELayer, both TELinear
parallel_mode="duplicated", so replicated over tp) projects each token h -> l before dispatch
and l -> h after the combine, 2*h*l; its routed experts work at width l, n*l*f each.

Hybrid models (layer_pattern: Mamba, attention, MLP and MoE layers, one block each) are
counted layer kind by layer kind in fitplan.counts.hybrid.

Under tensor parallelism (Megatron column/row-parallel linears) the weight matrices,
the column-parallel biases and the vocabulary-parallel embedding and head are split by t;
the row-parallel biases and the norms are replicated on every tp rank. The learned
position table is replicated too. [korthikanti Sec. 3 / Megatron-LM tensor_parallel.layers]
"""
from fitplan.arith import ceil_div, select
from fitplan.explain import COUNT, formula
from fitplan.sources import Cite
from fitplan.specs.model import ModelSpec, Norm, Position, QkNorm

NARAYANAN_EQ2 = Cite("narayanan", "Eq. 2")
SPLIT = Cite("fitplan", "formulas.md#params (Megatron-LM tensor_parallel.layers)")


def norm_params(model: ModelSpec) -> int:
    return 2 * model.hidden_size if model.norm is Norm.LAYERNORM else model.hidden_size


def layer_norms_params(model: ModelSpec) -> int:
    """The norms of one layer: norms_per_layer norms of h (2h for LayerNorm), and the query/key
    norms: 2d per layer (head), q + kv (projection)."""
    qk = {QkNorm.NONE: 0, QkNorm.HEAD: 2 * (model.head_dim or model.hidden_size // model.num_heads),
          QkNorm.PROJECTION: model.q_size + model.kv_size}[model.qk_norm]
    return model.norms_per_layer * norm_params(model) + qk


def _mlp_mats(model: ModelSpec) -> int:
    return 3 if model.mlp.gated else 2


def _mla_down(model: ModelSpec) -> int:
    """MLA's down-projections to the latents: h*q_lora and h*(kv_lora + d_rope)."""
    m = model.mla
    return model.hidden_size * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)


def _mla_up_out(model: ModelSpec) -> int:
    """MLA's up-projections from the latents and the output projection."""
    m, h, a = model.mla, model.hidden_size, model.num_heads
    q_up = (m.q_lora_rank or h) * a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    return q_up + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim) + a * m.v_head_dim * h


def bias_kind(model: ModelSpec) -> str:
    """Which linears have a bias: "all" (GPT), "qkv" (Qwen2: q, k and v only) or "none" (Llama)."""
    return "all" if model.linear_bias else "qkv" if model.qkv_bias else "none"


def op_sac_saved(*, n: int, bias: str = "none", moe: bool = False) -> tuple[str, ...]:
    """The linears whose outputs torchtitan's op-level SAC saves in one layer
    (formulas.md#partial-recompute). Its policy saves every odd-numbered aten.mm of the
    layer, counted in forward order q, k, v, o, then w1, w3, w2 (SwiGLU; gate, up, down) or
    w1, w2 (GeLU: fc1, fc2). A linear with a bias runs as aten.addmm (ATen Linear.cpp,
    _flatten_nd_linear for a contiguous 3-D input), which the policy neither saves nor
    counts. MoE layers: only the attention's linears (the MLP is accounted whole)."""
    b_qkv, b_rest = bias != "none", bias == "all"
    linears = [("q", b_qkv), ("k", b_qkv), ("v", b_qkv), ("o", b_rest)]
    if not moe:
        linears += [("w1", b_rest), ("w3", b_rest), ("w2", b_rest)] if n == 3 else [("w1", b_rest), ("w2", b_rest)]
    return tuple([name for name, biased in linears if not biased][0::2])


def rerun_matmul_params(model: ModelSpec, recompute) -> int:
    """Weight-matrix parameters whose matmuls a partial recompute reruns per layer. op
    (torchtitan op-level SAC): every linear whose output op_sac_saved does not keep; bias-free
    that is wk, wo and w3 (or fc2), h*kv + q*h + h*f, and with biases on every linear all of
    them (addmm is neither saved nor counted); an MoE layer's MLP GEMMs are not rerun. norms
    (DeepSeek-V3 Sec. 3.2.3): MLA's up-projections from the latents (no GEMMs for a model
    without MLA)."""
    h = model.hidden_size
    if str(recompute) == "op" and model.mla is not None:
        return h * model.kv_size + model.q_size * h
    if str(recompute) == "op":
        q, kv, f, n = model.q_size, model.kv_size, model.ffn_hidden_size, _mlp_mats(model)
        size = {"q": h * q, "k": h * kv, "v": h * kv, "o": q * h, "w1": h * f, "w3": h * f, "w2": f * h}
        names = ["q", "k", "v", "o"] + ([] if model.moe is not None else ["w1", "w3", "w2"] if n == 3 else ["w1", "w2"])
        saved = op_sac_saved(n=n, bias=bias_kind(model), moe=model.moe is not None)
        return sum(size[x] for x in names if x not in saved)
    if str(recompute) == "norms" and model.mla is not None:
        return _mla_up_out(model) - model.num_heads * model.mla.v_head_dim * h
    return 0


def attention_matmul_params(model: ModelSpec) -> int:
    """Weight-matrix parameters of one attention block: GQA h(q + 2kv) + qh; MLA its five
    projections."""
    if model.mla is not None:
        return _mla_down(model) + _mla_up_out(model)
    return model.hidden_size * (model.q_size + 2 * model.kv_size) + model.q_size * model.hidden_size


def layer_matmul_params(model: ModelSpec, *, moe_layer: bool, rho: float = 1) -> float:
    """Weight-matrix parameters one token passes through in one layer: attention and the MLP;
    an MoE layer's router, shared experts and k routed experts (times rho, the busiest rank's
    load imbalance, when the caller wants its time rather than the model's FLOPs)."""
    n, h = _mlp_mats(model), model.hidden_size
    if not moe_layer:
        return attention_matmul_params(model) + n * h * model.ffn_hidden_size
    return attention_matmul_params(model) + moe_matmul_params(model, rho=rho)


def routed_width(model: ModelSpec) -> int:
    """The width the routed experts work at: the latent (LatentMoE), else h."""
    return model.moe.latent_size or model.hidden_size


def latent_projection_params(model: ModelSpec) -> int:
    """LatentMoE's h -> l and l -> h projections, 2*h*l (and their biases); 0 without a latent."""
    lat = model.moe.latent_size
    if lat is None:
        return 0
    return 2 * model.hidden_size * lat + ((lat + model.hidden_size) if model.linear_bias else 0)


def moe_matmul_params(model: ModelSpec, *, rho: float = 1) -> float:
    """An MoE block's weight-matrix parameters per token: the router h*E, the shared experts,
    their gate, LatentMoE's projections 2*h*l and k routed experts of n*w*f_e (w: routed_width),
    times rho."""
    n, h, e = _mlp_mats(model), model.hidden_size, model.moe
    lat = 0 if e.latent_size is None else 2 * h * e.latent_size
    return (h * e.num_experts + n * h * e.num_shared_experts * e.expert_ffn_size + (h if e.shared_expert_gate else 0)
            + lat + rho * e.experts_per_token * n * routed_width(model) * e.expert_ffn_size)


def attention_sharded_params(model: ModelSpec) -> int:
    """Attention parameters that tensor parallelism splits by t.

    GQA: Q, K, V and output projections h(q + 2kv) + qh, plus their column biases.
    MLA (DeepSeek-V2/V3, Megatron-LM MLASelfAttention): the up-projections from the latents
    q_lora*a*(d_nope + d_rope) (or h*a*(d_nope + d_rope) without a query latent) and
    kv_lora*a*(d_nope + d_v), and the output projection a*d_v*h; the down-projections are
    replicated (attention_replicated_params). Either with attention sinks: a more, one per head."""
    sinks = model.num_heads if model.attention_sinks else 0
    if model.mla is not None:
        return _mla_up_out(model) + sinks
    biases = (model.q_size + 2 * model.kv_size) if (model.linear_bias or model.qkv_bias) else 0
    return attention_matmul_params(model) + biases + sinks


def attention_replicated_params(model: ModelSpec) -> int:
    """Attention parameters every tp rank holds: the row-parallel output bias; for MLA the
    down-projections to the latents and the latents' RMSNorms."""
    if model.mla is not None:
        return _mla_down(model) + model.mla.q_lora_rank + model.mla.kv_lora_rank   # + the latents' RMSNorms
    return model.hidden_size if model.linear_bias else 0


def mlp_sharded_params(model: ModelSpec, f: int, width: int | None = None) -> int:
    """A dense MLP of width f: n*w*f weights (n = 2 GeLU and squared ReLU, 3 SwiGLU and GeGLU;
    w = h, or a LatentMoE expert's latent) and its column biases."""
    col_biases = (2 * f if model.mlp.gated else f) if model.linear_bias else 0
    return _mlp_mats(model) * (model.hidden_size if width is None else width) * f + col_biases


def mlp_replicated_params(model: ModelSpec) -> int:
    return model.hidden_size if model.linear_bias else 0


def layer_sharded_params(model: ModelSpec) -> int:
    """Parameters of one dense layer that tensor parallelism splits by t."""
    return attention_sharded_params(model) + mlp_sharded_params(model, model.ffn_hidden_size)


def layer_replicated_params(model: ModelSpec) -> int:
    """Parameters of one dense layer every tp rank holds: its norms (q/k norms included, even
    the projection-wide ones, which are small), the row-parallel biases."""
    return layer_norms_params(model) + attention_replicated_params(model) + mlp_replicated_params(model)


def moe_layer_sharded_params(model: ModelSpec) -> int:
    """One MoE layer's tp-split parameters: attention and the shared experts (a dense MLP of
    num_shared_experts * expert_ffn_size)."""
    e = model.moe
    return attention_sharded_params(model) + mlp_sharded_params(model, e.num_shared_experts * e.expert_ffn_size)


def moe_router_params(model: ModelSpec) -> int:
    """An MoE block's replicated routing parameters: the router (h*E), with the shared experts'
    gate (h), the routing-score bias (E) and LatentMoE's projections where the model has them."""
    e = model.moe
    return (model.hidden_size * e.num_experts + (model.hidden_size if e.shared_expert_gate else 0)
            + (e.num_experts if e.expert_bias else 0) + latent_projection_params(model))


def moe_layer_replicated_params(model: ModelSpec) -> int:
    """One MoE layer's replicated parameters: norms, row biases and the router (h*E), with the
    shared experts' gate (h), the routing-score bias (E) and the latent projections where the
    model has them."""
    e = model.moe
    shared_bias = mlp_replicated_params(model) if e.num_shared_experts else 0
    return layer_norms_params(model) + attention_replicated_params(model) + shared_bias + moe_router_params(model)


def expert_params(model: ModelSpec, experts: int | None = None) -> int:
    """Routed-expert parameters of one MoE layer (all E experts, or `experts` of them); expert
    parallelism splits them by ep (expert tensor parallel degree 1)."""
    e, w = model.moe, routed_width(model)
    per_expert = mlp_sharded_params(model, e.expert_ffn_size, width=w) + (w if model.linear_bias else 0)   # + down bias
    return (e.num_experts if experts is None else experts) * per_expert


def num_moe_layers(model: ModelSpec) -> int:
    if model.hybrid:
        return model.layer_pattern.count("E")
    return 0 if model.moe is None else model.num_layers - model.moe.first_dense_layers


def embedding_params(model: ModelSpec) -> int:
    return model.vocab_size * model.hidden_size


def position_params(model: ModelSpec) -> int:
    return model.max_seq_len * model.hidden_size if model.position is Position.LEARNED else 0


def head_params(model: ModelSpec) -> int:
    """The output projection; 0 when it shares the embedding matrix."""
    return 0 if model.tied_embeddings else model.vocab_size * model.hidden_size


def _layers_params(model: ModelSpec, experts_per_layer: int | None) -> int:
    if model.hybrid:
        from fitplan.counts import hybrid
        return hybrid.layers_params(model, experts_per_layer)
    L_moe = num_moe_layers(model)
    dense = (model.num_layers - L_moe) * (layer_sharded_params(model) + layer_replicated_params(model))
    if not L_moe:
        return dense
    return dense + L_moe * (moe_layer_sharded_params(model) + moe_layer_replicated_params(model)
                            + expert_params(model, experts_per_layer))


def shape_params(model: ModelSpec) -> int:
    """Every parameter, counted once: L layers + embedding + positions + final norm + head."""
    return (_layers_params(model, None) + embedding_params(model) + position_params(model)
            + norm_params(model) + head_params(model))


def active_params(model: ModelSpec) -> int:
    """Parameters one token passes through: the same, with experts_per_token routed experts
    per MoE layer instead of all of them (the "active" count MoE papers quote)."""
    k = model.moe.experts_per_token if model.moe is not None else None
    return (_layers_params(model, k) + embedding_params(model) + position_params(model)
            + norm_params(model) + head_params(model))


def num_params(model: ModelSpec) -> int:
    """The count the planner uses: the published one when the preset states it."""
    return model.published_params if model.published_params is not None else shape_params(model)


@formula("params/narayanan_eq2", "12*l*h^2*(1 + 13/(12h) + (V + s)/(12*l*h))", NARAYANAN_EQ2, COUNT)
def narayanan_eq2(*, l, h, V, s):
    """[narayanan Eq. 2], rearranged to stay in integers: 12*l*h^2 + 13*l*h + (V + s)*h.
    It leaves out the final LayerNorm (2h), which shape_params counts."""
    return 12 * l * h * h + 13 * l * h + (V + s) * h


def _stage_text(*, emb, out, n_dense=None, **_):
    layers = "l*(S/t + R)" if n_dense is None else "n_dense*(S/t + R) + (l - n_dense)*(S_moe/t + R_moe)"
    ends = (" + ceil(V*h/t) + P_pos" if emb else "") + (" + N_f + ceil(head/t)" if out else "")
    return layers + ends


@formula("params/stage_experts", "(l - n_dense)*X/ep", Cite("fitplan", "formulas.md#moe"), COUNT)
def stage_expert_params(*, l, n_dense, X, ep):
    """Routed-expert parameters one GPU holds: its E/ep experts of each of the stage's l - n_dense MoE layers."""
    return (l - n_dense) * ceil_div(X, ep)


@formula("params/stage", _stage_text, SPLIT, COUNT)
def stage_params(*, l, S, R, Vh, P_pos, N_f, head, tied, t, p, emb, out, n_dense=None, S_moe=0, R_moe=0):
    """Parameters held by one GPU of a pipeline stage with l layers; emb: it holds the
    embedding (the first stage), out: the final norm and output layer (the last stage).

    S, R: per-layer sharded and replicated counts; Vh = V*h; P_pos learned positions;
    N_f final norm; head = V*h if untied else 0. With tied embeddings and p > 1 the last
    stage keeps its own copy of the embedding for the output layer (Megatron-LM
    `setup_embeddings_and_output_layer`). Vocabulary rows are padded to t equal shards.
    MoE models: n_dense of the stage's layers are dense (S, R), the rest MoE (S_moe, R_moe,
    routed experts excluded: stage_expert_params); n_dense=None means all dense.
    """
    n_d = l if n_dense is None else n_dense
    layers = n_d * (ceil_div(S, t) + R) + (l - n_d) * (ceil_div(S_moe, t) + R_moe)
    out_matrix = select(tied, select(p > 1, Vh, 0), head)
    return (layers + select(emb, ceil_div(Vh, t) + P_pos, 0)
            + select(out, N_f + ceil_div(out_matrix, t), 0))


def _hybrid_text(**_):
    return "sum over the stage's M, *, -, E layers of n_k*(ceil(S_k/t) + R_k)"


@formula("params/stage_hybrid_layers", _hybrid_text,
         Cite("megatron-mamba", "mamba_mixer.py: every Mamba mixer weight split by t; formulas.md#hybrid-models"),
         COUNT)
def hybrid_layers_params(*, n_M, S_M, R_M, n_A, S_A, R_A, n_D, S_D, R_D, n_E, S_E, R_E, t):
    """A hybrid stage's layers on one GPU: n_k layers of each kind, S_k of each split by t
    (padded to t equal shards), R_k replicated (fitplan.counts.hybrid.block_params); routed
    experts apart (stage_expert_params with l = n_E)."""
    return (n_M * (ceil_div(S_M, t) + R_M) + n_A * (ceil_div(S_A, t) + R_A) + n_D * (ceil_div(S_D, t) + R_D)
            + n_E * (ceil_div(S_E, t) + R_E))


@formula("params/mtp_extra", "D*(ceil(2h*h/t) + 3h)", Cite("deepseek-v3", "Sec. 2.2, Fig. 3"), COUNT)
def mtp_extra_params(*, D, h, t):
    """Beyond its transformer layer (counted with the stage's layers), each multi-token-
    prediction module has a projection of the concatenated [hidden; embedding] 2h -> h
    (split by tp) and three RMSNorms (the two inputs' and its output's); the embedding
    and output head are shared with the main model."""
    return D * (ceil_div(2 * h * h, t) + 3 * h)


@formula("params/scaled", "psi_shape * N_published / N_shape", Cite("fitplan", "formulas.md#published-counts"), COUNT)
def scale_to_published(*, psi_shape, published, derived):
    """A preset's published count is used; each GPU's share follows the shape-derived split."""
    return ceil_div(psi_shape * published, derived)
