"""fitplan.files.hf: ModelSpecs from the hand-written config.json files under examples/hf/
(dimensions as published on the Hugging Face Hub), checked by their parameter counts."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from fitplan.counts.params import shape_params
from fitplan.errors import SpecError
from fitplan.presets import MODELS
from fitplan.specs import Mlp, Norm, Position
from fitplan.files.hf import model_from_hf_config, model_from_hf_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hf"


@pytest.mark.parametrize(("folder", "params"), [
    # 12 layers x (12h^2 + 13h = 7,087,872) = 85,054,464; wte 50257*768 = 38,597,376 (tied, counted once);
    # wpe 1024*768 = 786,432; ln_f 2*768 = 1,536. Total 124,439,808 (the Hub's 124M; nanoGPT's 124,337,664
    # is the same model with bias=False).
    ("gpt2", 124_439_808),
    # per layer: q, o 2*4096^2 = 33,554,432; k, v 2*4096*1024 = 8,388,608; SwiGLU 3*4096*14336 = 176,160,768;
    # two RMSNorms 8,192 -> 218,112,000; x32 = 6,979,584,000. Untied embedding + head 2*128256*4096 =
    # 1,050,673,152; final norm 4,096. Total 8,030,261,248 (Hub safetensors metadata for Llama-3.1-8B).
    ("llama-3.1-8b", 8_030_261_248),
    # the same layers as Llama 3.1 8B, vocabulary 32000: 6,979,584,000 + 2*32000*4096 + 4,096 = 7,241,732,096
    ("mistral-7b", 7_241_732_096),
    # meta-llama/Meta-Llama-3-8B and -70B: Llama 3.1's shapes and Hub totals (tests/papers/test_presets_counts.py)
    ("llama-3-8b", 8_030_261_248),
    ("llama-3-70b", 70_553_706_496),
    # Qwen/Qwen3-30B-A3B's Hub total; Qwen3-235B-A22B's card: 235B (tests/papers/test_presets_counts.py)
    ("qwen3-30b-a3b", 30_532_122_624),
    ("qwen3-235b-a22b", 235_093_634_560),
    # openai/gpt-oss-20b and -120b: the model card's 20.9B and 116.8B (tests/papers/test_presets_counts.py)
    ("gpt-oss-20b", 20_914_757_184),
    ("gpt-oss-120b", 116_829_156_672),
    # moonshotai/Kimi-K2-Base: the card's 1T (tests/papers/test_presets_counts.py)
    ("kimi-k2", 1_026_408_232_448),
])
def test_example_parameter_counts(folder, params):
    assert shape_params(model_from_hf_config(EXAMPLES / folder)) == params


@pytest.mark.parametrize(("folder", "preset"), [
    ("llama-3-8b", "llama3-8b"), ("llama-3-70b", "llama3-70b"), ("qwen3-30b-a3b", "qwen3-30b-a3b"),
    ("qwen3-235b-a22b", "qwen3-235b-a22b"), ("gpt-oss-20b", "gpt-oss-20b"), ("gpt-oss-120b", "gpt-oss-120b"),
    ("kimi-k2", "kimi-k2")])
def test_presets_are_their_config_files(folder, preset):
    """Each preset is its config.json read by the importer, shape for shape (the context included):
    the preset adds only its name, its source and the training settings it carries."""
    m = model_from_hf_config(EXAMPLES / folder)
    expected = MODELS[preset].model
    assert m == replace(expected, name=m.name, source=m.source)


def test_gpt2_shapes():
    m = model_from_hf_config(EXAMPLES / "gpt2" / "config.json")
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads) == (12, 768, 12, 12)
    assert (m.ffn_hidden_size, m.vocab_size, m.max_seq_len) == (3072, 50257, 1024)   # n_inner absent -> 4h
    assert (m.mlp, m.norm, m.position) == (Mlp.GELU, Norm.LAYERNORM, Position.LEARNED)
    assert m.tied_embeddings and m.linear_bias and m.head_dim is None
    assert m.name == "gpt2"   # the folder's name


def test_llama_matches_the_preset_but_for_the_context():
    """The llama3.1-8b preset is the same shapes with max_seq_len 8192 (its pre-training length);
    config.json states the extended 131072."""
    m = model_from_hf_config(EXAMPLES / "llama-3.1-8b")
    preset = MODELS["llama3.1-8b"].model
    assert m.max_seq_len == 131_072
    assert m == replace(preset, name=m.name, source=m.source, max_seq_len=131_072)


def test_folder_and_file_give_the_same_spec():
    assert model_from_hf_config(EXAMPLES / "mistral-7b") == model_from_hf_config(EXAMPLES / "mistral-7b" / "config.json")


def test_name_can_be_given():
    assert model_from_hf_config(EXAMPLES / "gpt2", name="my-gpt2").name == "my-gpt2"


GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128, "vocab_size": 100}
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 1000, "max_position_embeddings": 4096}


@pytest.mark.parametrize(("extra", "ffn"), [({}, 256), ({"n_inner": None}, 256), ({"n_inner": 100}, 100)])
def test_gpt2_ffn_defaults_to_4h(extra, ffn):
    assert model_from_hf_dict({**GPT2, **extra}).ffn_hidden_size == ffn


def test_gpt2_old_files_with_n_ctx_only():
    config = {k: v for k, v in GPT2.items() if k != "n_positions"} | {"n_ctx": 512}
    assert model_from_hf_dict(config).max_seq_len == 512


def test_gpt2_attribute_map_aliases():
    """transformers 5 may write hidden_size etc. for GPT-2 (attribute_map); canonical names win."""
    config = {"model_type": "gpt2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "max_position_embeddings": 128, "vocab_size": 100}
    assert model_from_hf_dict(config) == model_from_hf_dict(GPT2)


@pytest.mark.parametrize(("extra", "kv_heads", "head_dim", "q_size"), [
    ({}, 8, None, 4096),
    ({"num_key_value_heads": None}, 32, None, 4096),      # missing or null: = heads (multi-head attention)
    ({"head_dim": None}, 8, None, 4096),
    ({"head_dim": 128}, 8, None, 4096),                   # = hidden/heads: stored as None, like the presets
    ({"head_dim": 64}, 8, 64, 2048),                      # decoupled head size: q width 32*64
])
def test_llama_heads(extra, kv_heads, head_dim, q_size):
    config = {**LLAMA, **extra}
    if extra.get("num_key_value_heads", 0) is None:
        del config["num_key_value_heads"]
    m = model_from_hf_dict(config)
    assert (m.num_kv_heads, m.head_dim, m.q_size) == (kv_heads, head_dim, q_size)


def test_llama_biases():
    assert not model_from_hf_dict(LLAMA).linear_bias
    assert model_from_hf_dict({**LLAMA, "attention_bias": True, "mlp_bias": True}).linear_bias


def test_qwen2_count():
    """Qwen2-0.5B: per layer q, o 2*896^2 = 1,605,632; k, v 2*896*128 = 229,376; q/k/v biases
    896 + 2*128 = 1,152; SwiGLU 3*896*4864 = 13,074,432; norms 1,792 -> 14,912,384; x24 =
    357,897,216; tied embedding 151936*896 = 136,134,656; final norm 896. Total 494,032,768
    (Hub safetensors metadata)."""
    m = model_from_hf_config(EXAMPLES / "qwen2-0.5b")
    assert shape_params(m) == 494_032_768


def test_mixtral_counts_its_experts():
    """Mixtral 8x7B: 46,702,792,704 parameters, 12,879,925,248 active (Jiang et al. 2024: 47B
    total, 13B active): per layer attention 41,943,040, 8 experts x 3 x 4096 x 14336, router
    4096 x 8, norms 8192; 32 layers plus untied 32000 x 4096 embedding and head."""
    from fitplan.counts.params import active_params
    from fitplan.presets import MODELS
    m = model_from_hf_config(EXAMPLES / "mixtral-8x7b")
    assert m.moe.num_experts == 8 and m.moe.experts_per_token == 2
    assert shape_params(m) == 46_702_792_704 and active_params(m) == 12_879_925_248
    assert replace(m, name="mixtral-8x7b", max_seq_len=32768, source="") == replace(
        MODELS["mixtral-8x7b"].model, source="")


def test_experts_in_a_dense_family_are_refused():
    with pytest.raises(SpecError, match="num_experts = 64"):
        model_from_hf_dict({**LLAMA, "num_experts": 64})


@pytest.mark.parametrize(("config", "needle"), [
    ({**LLAMA, "model_type": "lama"}, "unknown model_type 'lama'; did you mean 'llama'?"),
    ({**LLAMA, "model_type": "mamba"}, "unknown model_type 'mamba'"),
    ({k: v for k, v in LLAMA.items() if k != "model_type"}, "no 'model_type'"),
    ({k: v for k, v in LLAMA.items() if k != "intermediate_size"}, "has no 'intermediate_size'"),
    ({k: v for k, v in GPT2.items() if k != "n_embd"}, "has no 'n_embd' (nor 'hidden_size')"),
    ({**LLAMA, "hidden_size": "4096"}, "'hidden_size' must be a whole number, got '4096'"),
    ({**LLAMA, "hidden_size": 4096.0}, "'hidden_size' must be a whole number, got 4096.0"),
    ({**LLAMA, "num_hidden_layers": True}, "'num_hidden_layers' must be a whole number"),
    ({**LLAMA, "tie_word_embeddings": "yes"}, "'tie_word_embeddings' must be true or false"),
    ({**LLAMA, "hidden_act": "gelu"}, "hidden_act 'gelu' is not SiLU"),
    ({**GPT2, "activation_function": "relu"}, "activation_function 'relu' is not a GeLU"),
    ({**LLAMA, "attention_bias": True}, "attention_bias = true but mlp_bias = false"),
    ({**LLAMA, "num_key_value_heads": 5}, "not divisible by num_kv_heads 5"),   # ModelSpec's own check
    ([1, 2, 3], "expected a JSON object"),
])
def test_errors_name_the_file_and_the_field(config, needle):
    with pytest.raises(SpecError) as err:
        model_from_hf_dict(config, where="x/config.json")
    message = str(err.value)
    assert message.startswith("x/config.json: ")
    assert needle in message
    assert "\n" not in message


def test_malformed_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096,,}')   # the second comma is column 45
    with pytest.raises(SpecError, match=r"config.json: not valid JSON \(.* at line 1, column 45\)"):
        model_from_hf_config(path)


def test_folder_without_config(tmp_path):
    with pytest.raises(SpecError, match="no config.json in this folder"):
        model_from_hf_config(tmp_path)


def test_missing_path(tmp_path):
    with pytest.raises(SpecError, match="no such file or folder"):
        model_from_hf_config(tmp_path / "nope")


def test_examples_are_valid_json():
    for path in sorted(EXAMPLES.glob("*/config.json")):
        assert isinstance(json.loads(path.read_text()), dict), path
    assert len(list(EXAMPLES.glob("*/config.json"))) == 16   # 12 transformers, 4 hybrid Mamba models
