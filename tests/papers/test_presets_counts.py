"""Preset parameter counts against their sources.

Llama 3.1 (HF config.json, REFERENCE 5.3): exactly 8,030,261,248 / 70,553,706,496 /
405,853,388,800. Llama 2 (REFERENCE 5.2 check column, printed to 4 significant digits).
GPT-3 (Brown et al. Table 2.1): the published count is used, and the shape-derived count
must agree with it to the table's rounding (13B: 40 x 128 = 5120, not the printed 5140).
The presets for the calibration sources' runs (Llama 3, Qwen3 MoE, gpt-oss, Kimi K2, NeMo's GPT-3 and
Nemotron) follow, each against its model card or report.
"""
from dataclasses import replace

import pytest

from fitplan.counts.params import active_params, embedding_params, num_params, shape_params
from fitplan.presets import MODELS


@pytest.mark.parametrize(("name", "count"), [("llama3.1-8b", 8_030_261_248), ("llama3.1-70b", 70_553_706_496),
                                             ("llama3.1-405b", 405_853_388_800)])
def test_llama31_exact(name, count):
    assert shape_params(MODELS[name].model) == count
    assert num_params(MODELS[name].model) == count


@pytest.mark.parametrize(("name", "billions"), [("llama2-7b", 6.738), ("llama2-13b", 13.016), ("llama2-70b", 68.98)])
def test_llama2(name, billions):
    assert shape_params(MODELS[name].model) / 1e9 == pytest.approx(billions, abs=0.0005 if billions < 60 else 0.005)


@pytest.mark.parametrize("name", [n for n in MODELS if n.startswith("gpt3-")])
def test_gpt3_shapes_agree_with_published(name):
    """Published counts are given to 2-3 significant digits; the shapes agree within 2%
    (350M: 355.9M; 2.7B: 2.65B, the largest gaps)."""
    model = MODELS[name].model
    assert num_params(model) == model.published_params
    assert shape_params(model) == pytest.approx(model.published_params, rel=0.02)


def test_gpt3_175b_shape_count():
    """12*96*12288^2 + 13*96*12288 + (50257 + 2048)*12288 + 2*12288 (final LayerNorm)."""
    assert shape_params(MODELS["gpt3-175b"].model) == 174_604_259_328


# The presets added for the calibration sources' runs (Megatron-Bridge, NeMo and NeMo AutoModel performance
# tables). Each shape-derived count against the count its source publishes; where a source's figure is a
# name or rounds, the test says which and why the shapes cannot be held to more.

def _non_embedding(model) -> int:
    """The count without the input embedding and the untied output matrix (2*V*h), as the Qwen3 and
    Nemotron-4 cards split it."""
    return shape_params(model) - 2 * embedding_params(model)


@pytest.mark.parametrize(("name", "count"), [
    # meta-llama/Meta-Llama-3-8B and -70B: the Hub's safetensors totals, the same as Llama 3.1's (REFERENCE
    # 5.3): Llama 3.1 changed rope_scaling and max_position_embeddings only, neither of which has weights.
    ("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496),
    # Qwen/Qwen3-30B-A3B: the Hub's safetensors total (the card's 30.5B).
    ("qwen3-30b-a3b", 30_532_122_624),
])
def test_exact_published_counts(name, count):
    assert shape_params(MODELS[name].model) == count
    assert num_params(MODELS[name].model) == count


def test_qwen3_moe_against_their_cards():
    """Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B model cards: "30.5B in total and 3.3B activated, 29.9B
    non-embedding"; "235B in total and 22B activated, 234B non-embedding". The cards' activated counts
    include the embedding (without it 30B-A3B's is 3.04B, not 3.3B); 3,353,032,704 prints as 3.3B, cut
    rather than rounded (the existing test_hf_architectures figure)."""
    small, large = MODELS["qwen3-30b-a3b"].model, MODELS["qwen3-235b-a22b"].model
    assert _non_embedding(small) / 1e9 == pytest.approx(29.9, abs=0.05)       # 29,909,793,792
    assert active_params(small) == 3_353_032_704
    assert shape_params(large) == 235_093_634_560 and shape_params(large) / 1e9 == pytest.approx(235, abs=0.5)
    assert _non_embedding(large) / 1e9 == pytest.approx(234, abs=0.5)         # 233,848,954,880
    assert active_params(large) == 22_190_763_520 and active_params(large) / 1e9 == pytest.approx(22, abs=0.5)


@pytest.mark.parametrize(("name", "total", "active", "card_total", "card_active"), [
    # OpenAI's gpt-oss model card (arXiv:2508.10925): 120b 116.8B total, 5.1B active; 20b 20.9B, 3.6B.
    ("gpt-oss-120b", 116_829_156_672, 5_132_849_472, 116.8, 5.1),
    ("gpt-oss-20b", 20_914_757_184, 3_608_307_264, 20.9, 3.6),
])
def test_gpt_oss_against_its_model_card(name, total, active, card_total, card_active):
    """Per layer: q, k, v, o with biases 2*2880*4096 + 2*2880*512 + (4096 + 2*512 + 2880) = 26,550,080, the
    64 sinks, two RMSNorms 5,760; a router 2880*E + E; E experts of 3*2880^2 + 3*2880 biases (gate/up 2f, down
    h). Plus untied 2 * 201,088 * 2880 and the final norm. The card's active count leaves out the input
    embedding (a lookup) and keeps the unembedding: with it 5.71B and 4.19B, not 5.1B and 3.6B."""
    model = MODELS[name].model
    assert shape_params(model) == total and total / 1e9 == pytest.approx(card_total, abs=0.05)
    assert active_params(model) - embedding_params(model) == active
    assert active / 1e9 == pytest.approx(card_active, abs=0.05)
    sinks = model.num_layers * model.num_heads            # 2,304 and 1,536: below the card's rounding
    assert shape_params(replace(model, attention_sinks=False)) == total - sinks


def test_kimi_k2_against_its_model_card():
    """moonshotai/Kimi-K2-Base model card: 1T total, 32B activated. The shapes give 1,026,408,232,448, the
    card's 1T. The activated count, without the input embedding as gpt-oss's, is 31,687,095,808 (32B); with
    it 32.86B would print 33B. The technical report's 1.04T is not these shapes: one DeepSeek-V3-style
    multi-token-prediction module (a 384-expert MoE layer, a 2h -> h projection, three norms) would add
    17,162,147,200 and make 1.0436T, but the released config has num_nextn_predict_layers 0 and no such layer."""
    model = MODELS["kimi-k2"].model
    assert shape_params(model) == 1_026_408_232_448 and shape_params(model) / 1e12 == pytest.approx(1, abs=0.05)
    active = active_params(model) - embedding_params(model)
    assert active == 31_687_095_808 and active / 1e9 == pytest.approx(32, abs=0.5)


@pytest.mark.parametrize(("name", "count", "named"), [
    # NeMo's GPT-3 5B and 20B: 24 (44) x (12h^2 + 13h) + (50257 + 2048) x h + 2h. NeMo publishes no count; its
    # names round these: 5.05B and 20.26B.
    ("nemo-gpt3-5b", 5_047_365_632, 5), ("nemo-gpt3-20b", 20_256_221_184, 20),
])
def test_nemo_gpt3_counts(name, count, named):
    assert shape_params(MODELS[name].model) == count
    assert round(count / 1e9) == named


def test_nemo_gpt3_175b_is_the_gpt3_175b_preset():
    """NeMo's 175B (GPTConfig175B, nemo/collections/llm/gpt/model/base.py; launcher gpt3/175b.yaml: 96 layers,
    h 12288, 96 heads, ffn 49152, seq 2048, learned positions, tied) has the gpt3-175b preset's shapes. Only
    the vocabulary differs: NeMo's performance script (scripts/performance/llm/pretrain_gpt3_175b.py) uses a
    NullTokenizer of 51,200, the launcher the GPT-2 BPE's 50,257 padded to a multiple of 128 x tp (50,688 at
    tp 4). At 51,200: 943 more rows of 12,288, 11,587,584 parameters (0.007%)."""
    preset = MODELS["gpt3-175b"].model
    shapes = (preset.num_layers, preset.hidden_size, preset.num_heads, preset.ffn_hidden_size, preset.max_seq_len)
    assert shapes == (96, 12288, 96, 49152, 2048)
    assert shape_params(replace(preset, vocab_size=51200)) - shape_params(preset) == 11_587_584


def test_nemotron4_against_their_reports():
    """Nemotron-4 340B report (arXiv:2406.11704): 9.4B embedding and 331.6B non-embedding parameters; per
    layer q, o 2*18432^2, k, v 2*18432*8*192, squared-ReLU MLP 2*18432*73728, two LayerNorms 4*18432.
    Nemotron-4 15B report (arXiv:2402.16819): 12.5B non-embedding and 3.2B embedding parameters. The shapes
    give 2*256000*6144 = 3,145,728,000 embedding parameters, which round to 3.1B: the report's 3.2B does not
    follow from its own Table 1 (it would be 3.15 rounded twice); the non-embedding count agrees."""
    big, small = MODELS["nemotron4-340b"].model, MODELS["nemotron4-15b"].model
    assert _non_embedding(big) == 331_592_011_776 and _non_embedding(big) / 1e9 == pytest.approx(331.6, abs=0.05)
    assert 2 * embedding_params(big) / 1e9 == pytest.approx(9.4, abs=0.05)           # 9,437,184,000
    assert _non_embedding(small) == 12_483_047_424 and _non_embedding(small) / 1e9 == pytest.approx(12.5, abs=0.05)
    assert 2 * embedding_params(small) == 3_145_728_000


@pytest.mark.parametrize(("name", "count", "non_embedding"), [
    # 32 x (4h^2 + 2*h*4h + 4h) + 2*256000*h + 2h at h = 4096; 40 x (...) at h = 6144. NVIDIA's card calls the
    # first "8 billion parameters" (nvidia/nemotron-3-8b-base-4k), NeMo the second "22B": names, not counts.
    # With their untied 256,000-row embeddings the shapes give 8.54B and 21.27B (6.44B and 18.12B without).
    ("nemotron3-8b", 8_540_135_424, 6_442_983_424), ("nemotron3-22b", 21_266_116_608, 18_120_388_608),
])
def test_nemotron3_counts(name, count, non_embedding):
    model = MODELS[name].model
    assert shape_params(model) == count and _non_embedding(model) == non_embedding


def test_qwen25_against_their_cards():
    """Qwen/Qwen2.5-7B's card: "7.61B parameters, 6.53B non-embedding". The config's shapes (28 layers, h 3584,
    28 heads, 4 KV heads, ffn 18944, q/k/v biases, untied, vocab 152,064) give 7,615,616,512 and 6,525,6xx,xxx:
    7.61B cut (not rounded, as the Qwen3 cards print) and 6.53B. Qwen/Qwen2.5-32B's card says 32.5B and 31.0B;
    its config's shapes (64 layers, h 5120, 40 heads, 8 KV heads, ffn 27648) give 32.76B and 31.21B, 0.7% more
    than the card. fitplan counts the config's shapes (the weights a run holds) and leaves the card's figure
    unexplained."""
    small, large = MODELS["qwen2.5-7b"].model, MODELS["qwen2.5-32b"].model
    assert shape_params(small) == 7_615_616_512 and int(shape_params(small) / 1e7) / 100 == 7.61
    assert _non_embedding(small) / 1e9 == pytest.approx(6.53, abs=0.005)
    # 64*(2*5120^2 + 2*5120*1024 + 3*5120*27648 + 5120 + 2*1024 + 2*5120) + 5120 + 2*152064*5120
    assert shape_params(large) == 64 * (2 * 5120**2 + 2 * 5120 * 1024 + 3 * 5120 * 27648 + 5120 + 2 * 1024
                                        + 2 * 5120) + 5120 + 2 * 152064 * 5120
    assert _non_embedding(large) / 1e9 == pytest.approx(31.21, abs=0.005)
