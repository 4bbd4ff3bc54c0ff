"""fitplan.files.hf_hybrid: hybrid Mamba models from their config.json (examples/hf/, the published files'
fields) give the published parameter counts, layer by layer kind.

Where each published total comes from is written beside it. "Hub total" is the `safetensors.total` the Hugging
Face Hub reports (the sum of every tensor's elements in the repository's safetensors files); where a page prints
only a rounded figure, the exact one and where it was read are both given.
"""
import json
from pathlib import Path

import pytest

from fitplan.counts import hybrid as HY
from fitplan.counts.params import active_params, norm_params, shape_params
from fitplan.errors import SpecError
from fitplan.files.hf import model_from_hf_config, model_from_hf_dict, training_hints
from fitplan.presets import MODELS
from fitplan.specs import Mlp, Position
from fitplan.specs.model import SsmVersion

HF = Path(__file__).resolve().parents[2] / "examples" / "hf"


def _hf(name):
    return model_from_hf_config(HF / name)


def _cfg(name) -> dict:
    return json.loads((HF / name / "config.json").read_text())


def test_nemotron_h_8b_is_its_published_count_layer_by_layer():
    """nvidia/Nemotron-H-8B-Base-8K: 8,100,852,736 parameters, the sum of the checkpoint's tensors (the model card:
    "8B"; the Hub: 8.1B params). Derived here from the shapes, kind by kind (mamba_ssm Mamba2, transformers
    NemotronHMamba2Mixer): a Mamba-2 layer is in_proj 4096 x (2*8192 + 2*8*128 + 128) = 76,021,760, conv1d
    (8192 + 2048) x (4 + 1) = 51,200, A_log, D, dt_bias 3 x 128, the gated norm 8192, out_proj 8192 x 4096 =
    33,554,432, its pre-norm 4096: 109,640,064; an attention layer 2 x 4096^2 + 2 x 4096 x 1024 + 4096 =
    41,947,136; an MLP layer (squared ReLU, up and down) 2 x 4096 x 21504 + 4096 = 176,164,864; 24, 4 and 24 of
    them, the untied embedding and head 2 x 131072 x 4096 and the final norm."""
    m = _hf("nemotron-h-8b")
    assert (m.num_layers, m.mlp, m.position, m.tied_embeddings) == (52, Mlp.RELU2, Position.NONE, False)
    assert HY.kind_counts(m.layer_pattern) == {"M": 24, "*": 4, "-": 24, "E": 0}
    assert sum(HY.block_params(m, "M")) == 109_640_064
    assert sum(HY.block_params(m, "*")) == 41_947_136
    assert sum(HY.block_params(m, "-")) == 176_164_864
    assert 24 * 109_640_064 + 4 * 41_947_136 + 24 * 176_164_864 + 2 * 131072 * 4096 + 4096 == 8_100_852_736
    assert shape_params(m) == 8_100_852_736 == active_params(m)


def test_granite_4_h_tiny_is_its_hub_total():
    """ibm-granite/granite-4.0-h-tiny: Hub total 6,939,037,248 (the card's "7B"). Each of its 40 decoder layers is a
    mixer (36 Mamba-2, 4 attention) and a MoE block of 64 SwiGLU experts of 512 (top 6) beside a shared SwiGLU MLP
    of 1024: 80 of fitplan's layers. Mamba-2: in_proj 1536 x (2*3072 + 2*128 + 48) = 9,904,128, conv (3072 + 256) x
    5 = 16,640, 3 x 48, norm 3072, out_proj 3072 x 1536, pre-norm 1536; MoE: router 1536 x 64, experts 64 x 3 x 1536 x
    512, shared 3 x 1536 x 1024, pre-norm; tied embedding 100352 x 1536."""
    m = _hf("granite-4.0-h-tiny")
    assert m.num_layers == 80 and m.layer_pattern.count("E") == 40 and m.layer_pattern.count("M") == 36
    assert (m.mamba.num_heads, m.mamba.head_dim, m.mamba.num_groups, m.mamba.chunk_size) == (48, 64, 1, 256)
    assert (m.moe.num_experts, m.moe.experts_per_token, m.moe.expert_ffn_size, m.moe.num_shared_experts) == (
        64, 6, 512, 2)
    assert sum(HY.block_params(m, "M")) == 9_904_128 + 16_640 + 144 + 3072 + 3072 * 1536 + 1536
    assert shape_params(m) == 6_939_037_248
    assert m.tied_embeddings and m.position is Position.NONE


def test_jamba_v0_1_is_its_published_count():
    """ai21labs/Jamba-v0.1: the Hub's 51.6B params; the Open LLM Leaderboard's request file for it records params
    51.57 (billions, from the same safetensors total); the exact total, 51,570,323,328, is the figure a public
    re-implementation reports reproducing from the checkpoint. 32 layers: attention at i % 8 == 4, Mamba elsewhere;
    MoE of 16 SwiGLU experts of 14336 (top 2) at odd i, a SwiGLU MLP at even i: 64 of fitplan's layers. A Mamba
    (mamba1) layer: in_proj 4096 x 16384, conv 8192 x (4 + 1), x_proj 8192 x (256 + 32), dt_proj 256 x 8192 + 8192,
    A_log 8192 x 16, D 8192, out_proj 8192 x 4096, Jamba's RMSNorms on dt, B and C (256 + 16 + 16)."""
    m = _hf("jamba-v0.1")
    assert m.num_layers == 64 and m.layer_pattern[:10] == "M-MEM-ME*-"
    assert (m.mamba.version, m.mamba.num_heads, m.mamba.dt_rank, m.mamba.inner_norms) == (
        SsmVersion.MAMBA1, 8192, 256, True)
    mamba = (4096 * 16384 + 8192 * 5 + 8192 * 288 + 256 * 8192 + 8192 + 8192 * 16 + 8192 + 8192 * 4096 + 288)
    assert sum(HY.block_params(m, "M")) == mamba + norm_params(m) == 105_308_448 + 4096
    assert shape_params(m) == 51_570_323_328
    assert round(shape_params(m) / 1e9, 2) == 51.57
    assert active_params(m) == 12_110_311_296   # the paper's "12B active" (arXiv:2403.19887 Sec. 1)


def test_nemotron_3_nano_is_the_hub_total_and_its_routing_biases():
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: Hub total 31,577,937,344 (the card's "30B"; its "3.5B active").
    fitplan counts also the 23 MoE layers' e_score_correction_bias, 23 x 128 = 2,944 numbers that transformers
    registers as buffers (NemotronHTopkRouter) and Megatron-LM trains: 31,577,940,288."""
    m = _hf("nemotron-3-nano-30b-a3b")
    assert shape_params(m) == 31_577_937_344 + 23 * 128
    assert active_params(m) == 3_580_076_352
    assert (m.moe.num_shared_experts, m.moe.expert_bias, m.moe.latent_size) == (2, True, None)


def test_presets_are_their_config_files():
    """The presets hold what the config.json files under examples/hf/ say (only the source note differs)."""
    from dataclasses import replace
    for name in ("nemotron-h-8b", "nemotron-3-nano-30b-a3b"):
        assert replace(MODELS[name].model, source="") == replace(_hf(name), source="")


def test_nemotron_3_checkpoints_with_their_mtp_module():
    """The Megatron-Bridge verification cards count every tensor of the checkpoints, the multi-token-prediction
    module included (examples/model_verification_cards/*/card.yaml): Nemotron 3.5 Lightning 32,913,266,240 and
    Nemotron 3 Super 123,611,033,088. fitplan's count is the main model; one MTP module adds its layers (an
    attention and an MoE layer, mtp_pattern *E) and its 2h -> h projection and three norms (DeepSeek-V3 Sec. 2.2)."""
    for name, published in (("nemotron-3.5-lightning-30b-a3b", 32_913_266_240),
                            ("nemotron-3-super-120b-a12b", 123_611_033_088)):
        m = MODELS[name].model
        h = m.hidden_size
        module = HY.mtp_layers_params(m) + 2 * h * h + 3 * h
        assert shape_params(m) + m.mtp_depth * module == published
    assert shape_params(MODELS["nemotron-3.5-lightning-30b-a3b"].model) == 31_577_940_288   # Nano's main model


def test_layers_block_type_and_mtp_fields():
    """Newer nemotron_h files name the layers in a list (layers_block_type, mtp_layers_block_type); the same model."""
    base = _cfg("nemotron-3-nano-30b-a3b")
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    listed = {k: v for k, v in base.items() if k != "hybrid_override_pattern"}
    listed.update(layers_block_type=[names[c] for c in base["hybrid_override_pattern"]], num_nextn_predict_layers=1,
                  mtp_layers_block_type=["attention", "moe"])
    m = model_from_hf_dict(listed, name="x")
    assert m.layer_pattern == base["hybrid_override_pattern"] and (m.mtp_depth, m.mtp_pattern) == (1, "*E")
    assert training_hints(json.dumps(listed))["notes"][0].startswith("nemotron_h: the 1 multi-token-prediction")


@pytest.mark.parametrize(("change", "message"), [
    ({"hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-MX"}, "'X' is not a layer"),
    ({"num_hidden_layers": 51}, "num_hidden_layers 51 but the pattern names 52 layers"),
    ({"hybrid_override_pattern": None}, "needs 'hybrid_override_pattern'"),
    ({"mlp_hidden_act": "silu"}, "mlp_hidden_act 'silu' is not squared ReLU"),
    ({"mamba_num_heads": 100}, "num_heads 100 is not divisible by num_groups 8"),
])
def test_bad_nemotron_h_files_name_the_field(change, message):
    config = {**_cfg("nemotron-h-8b"), **change}
    with pytest.raises(SpecError, match="config.json: .*" + message.replace("(", r"\(").replace("'", "'")):
        model_from_hf_dict(config, where="config.json")


def test_a_shared_expert_not_a_whole_number_of_experts_is_refused():
    config = {**_cfg("granite-4.0-h-tiny"), "shared_intermediate_size": 1000}
    with pytest.raises(SpecError, match="shared_intermediate_size 1000 is not a whole number"):
        model_from_hf_dict(config, where="config.json")
