"""Random valid models, training setups and clusters for the property tests."""
from dataclasses import replace

from hypothesis import strategies as st

from fitplan import presets
from fitplan.memory.breakdown import Setup
from fitplan.specs import ClusterSpec, ModelSpec, TrainingSpec
from fitplan.specs.model import Mlp, Norm, Position
from fitplan.units import GiB


@st.composite
def models(draw) -> ModelSpec:
    head_dim = draw(st.sampled_from([16, 32, 64]))
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv * draw(st.sampled_from([1, 2, 4]))
    llama = draw(st.booleans())
    h = heads * head_dim
    return ModelSpec(name="drawn", num_layers=draw(st.sampled_from([2, 4, 6, 8, 12, 24])), hidden_size=h,
                     num_heads=heads, num_kv_heads=kv if llama else heads,
                     ffn_hidden_size=draw(st.sampled_from([2 * h, 3 * h, 4 * h])),
                     vocab_size=draw(st.integers(100, 5000)), max_seq_len=4096,
                     mlp=Mlp.SWIGLU if llama else Mlp.GELU, norm=Norm.RMSNORM if llama else Norm.LAYERNORM,
                     position=Position.ROPE if llama else Position.LEARNED, tied_embeddings=not llama,
                     linear_bias=not llama)


@st.composite
def setups(draw, gpus=st.sampled_from([1, 2, 4, 6, 8, 12, 16])) -> Setup:
    model = draw(models())
    training = TrainingSpec(seq_len=draw(st.sampled_from([64, 128, 256])),
                            recipe=presets.recipe(draw(st.sampled_from(sorted(presets.RECIPES)))),
                            global_batch=draw(st.sampled_from([None, 16, 48])),
                            dropout=draw(st.booleans()))
    gpu = presets.gpu("a100-80gb")
    # memory from "too small" to "roomy" for these small models, so both answers occur
    memory = draw(st.integers(8, 400)) * 2**20 * max(1, model.num_layers * model.hidden_size // 256)
    gpu = replace(gpu, memory_bytes=memory + GiB // 64, default_reserve_bytes=GiB // 64)
    n = draw(gpus)
    return Setup(model, training, ClusterSpec(gpu=gpu, num_gpus=n, gpus_per_node=draw(st.sampled_from([2, 4, 8])),
                                              reserve_bytes=GiB // 64))
