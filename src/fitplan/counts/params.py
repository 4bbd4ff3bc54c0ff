"""Parameter counts from shapes, and their split over tensor and pipeline parallelism.

Symbols: L layers, h hidden size, q = a*d query width, kv = g*d key/value width (g kv
heads, d head size), f ffn size, V vocabulary, s_max learned-position table length,
t tensor-parallel degree, p pipeline-parallel degree.

Per layer (GPT-3 / Megatron-LM GPT; Llama drops biases and uses RMSNorm):
  attention  h*(q + 2kv) + q*h weights, (q + 2kv) + h biases
  mlp        n*h*f weights (n = 2 GeLU, 3 SwiGLU), f (GeLU) or 2f (SwiGLU) + h biases
  norms      2 x (2h LayerNorm | h RMSNorm)
For GPT shapes (q = kv = h, f = 4h) a layer is 12h^2 + 13h, as in [narayanan Eq. 2].

Under tensor parallelism (Megatron column/row-parallel linears) the weight matrices,
the column-parallel biases and the vocabulary-parallel embedding and head are split by t;
the row-parallel biases and the norms are replicated on every tp rank. The learned
position table is replicated too. [korthikanti Sec. 3 / Megatron-LM tensor_parallel.layers]
"""
from fitplan.arith import ceil_div, select
from fitplan.explain import COUNT, formula
from fitplan.sources import Cite
from fitplan.specs.model import Mlp, ModelSpec, Norm, Position

NARAYANAN_EQ2 = Cite("narayanan", "Eq. 2")
SPLIT = Cite("fitplan", "formulas.md#params (Megatron-LM tensor_parallel.layers)")


def norm_params(model: ModelSpec) -> int:
    return 2 * model.hidden_size if model.norm is Norm.LAYERNORM else model.hidden_size


def layer_sharded_params(model: ModelSpec) -> int:
    """Parameters of one layer that tensor parallelism splits by t."""
    h, q, kv, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    mlp_mats = 3 if model.mlp is Mlp.SWIGLU else 2
    weights = h * (q + 2 * kv) + q * h + mlp_mats * h * f
    col_biases = (q + 2 * kv) + (2 * f if model.mlp is Mlp.SWIGLU else f)
    qkv_biases = (q + 2 * kv) if model.qkv_bias else 0
    return weights + (col_biases if model.linear_bias else qkv_biases)


def layer_replicated_params(model: ModelSpec) -> int:
    """Parameters of one layer every tp rank holds: two norms, and the row-parallel biases."""
    row_biases = 2 * model.hidden_size if model.linear_bias else 0
    return 2 * norm_params(model) + row_biases


def embedding_params(model: ModelSpec) -> int:
    return model.vocab_size * model.hidden_size


def position_params(model: ModelSpec) -> int:
    return model.max_seq_len * model.hidden_size if model.position is Position.LEARNED else 0


def head_params(model: ModelSpec) -> int:
    """The output projection; 0 when it shares the embedding matrix."""
    return 0 if model.tied_embeddings else model.vocab_size * model.hidden_size


def shape_params(model: ModelSpec) -> int:
    """Every parameter, counted once: L layers + embedding + positions + final norm + head."""
    per_layer = layer_sharded_params(model) + layer_replicated_params(model)
    return (model.num_layers * per_layer + embedding_params(model) + position_params(model)
            + norm_params(model) + head_params(model))


def num_params(model: ModelSpec) -> int:
    """The count the planner uses: the published one when the preset states it."""
    return model.published_params if model.published_params is not None else shape_params(model)


@formula("params/narayanan_eq2", "12*l*h^2*(1 + 13/(12h) + (V + s)/(12*l*h))", NARAYANAN_EQ2, COUNT)
def narayanan_eq2(*, l, h, V, s):
    """[narayanan Eq. 2], rearranged to stay in integers: 12*l*h^2 + 13*l*h + (V + s)*h.
    It leaves out the final LayerNorm (2h), which shape_params counts."""
    return 12 * l * h * h + 13 * l * h + (V + s) * h


def _stage_text(**kw):
    return ("L/p*(S/t + R) + ceil(V*h/t) + P_pos [+ last-stage extras when p = 1]" if kw["is_first"]
            else "L/p*(S/t + R) + N_f + head [+ first-stage extras when p = 1]")


@formula("params/stage", _stage_text, SPLIT, COUNT)
def stage_params(*, L, S, R, Vh, P_pos, N_f, head, tied, t, p, is_first):
    """Parameters held by one GPU of the first (is_first) or last pipeline stage.

    S, R: per-layer sharded and replicated counts; Vh = V*h; P_pos learned positions;
    N_f final norm; head = V*h if untied else 0. With tied embeddings and p > 1 the last
    stage keeps its own copy of the embedding for the output layer (Megatron-LM
    `setup_embeddings_and_output_layer`). Vocabulary rows are padded to t equal shards.
    """
    layers = (L // p) * (ceil_div(S, t) + R)
    emb = ceil_div(Vh, t) + P_pos
    out_matrix = select(tied, select(p > 1, Vh, 0), head)
    out = N_f + ceil_div(out_matrix, t)
    single = p == 1
    return layers + select(is_first, emb + select(single, out, 0), out + select(single, emb, 0))


@formula("params/scaled", "psi_shape * N_published / N_shape", Cite("fitplan", "formulas.md#published-counts"), COUNT)
def scale_to_published(*, psi_shape, published, derived):
    """A preset's published count is used; each GPU's share follows the shape-derived split."""
    return ceil_div(psi_shape * published, derived)
