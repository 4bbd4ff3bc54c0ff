"""fitplan.files.hf for the families past Llama: each published config.json (written out
below, model id beside it; auto_map and tokenizer-only keys left out) gives the model's
exact parameter count.

Where each published total comes from is written beside it. "Hub total" is the
`safetensors.total` the Hugging Face Hub reports for the repository (the sum of every
tensor's elements in its safetensors files). Two kinds of gap between that total and what
fitplan plans are stated, never absorbed: a tied output matrix that the files store a second
time (Falcon), and parts that are not the decoder (a vision tower, DeepSeek-V3's
multi-token-prediction layer and FP8 scales).
"""
import json
from pathlib import Path

import pytest

from fitplan.counts.params import active_params, shape_params
from fitplan.errors import SpecError
from fitplan.files.hf import model_from_hf_dict, model_from_hf_text, training_hints
from fitplan.specs import Mlp, Norm, Position, QkNorm

GEMMA_7B = r"""{
  "architectures": ["GemmaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 2,
  "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 24576, "max_position_embeddings": 8192,
  "model_type": "gemma", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16,
  "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0,
  "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": true, "vocab_size": 256000
}"""  # google/gemma-7b

GEMMA2_9B = r"""{
  "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
  "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2",
  "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
  "sliding_window_size": 4096, "torch_dtype": "float32", "transformers_version": "4.42.0.dev0",
  "use_cache": true, "vocab_size": 256000
}"""  # google/gemma-2-9b

GEMMA3_1B = r"""{
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
  "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
  "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144
}"""  # google/gemma-3-1b-pt

GEMMA3_4B = r"""{
  "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
  "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
  "model_type": "gemma3",
  "text_config": {
    "head_dim": 256, "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
    "num_attention_heads": 8, "num_hidden_layers": 34, "num_key_value_heads": 4, "query_pre_attn_scalar": 256,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024
  },
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
  "vision_config": {
    "hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
    "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false
  }
}"""  # google/gemma-3-4b-pt

PHI3_MINI = r"""{
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
  "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true, "vocab_size": 32064
}"""  # microsoft/Phi-3-mini-4k-instruct

QWEN15_MOE = r"""{
  "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21, "model_type": "qwen2_moe",
  "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.39.0.dev0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936,
  "decoder_sparse_step": 1, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
  "num_experts_per_tok": 4, "num_experts": 60, "norm_topk_prob": false, "output_router_logits": false,
  "router_aux_loss_coef": 0.001
}"""  # Qwen/Qwen1.5-MoE-A2.7B

QWEN3_8B = r"""{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960,
  "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
}"""  # Qwen/Qwen3-8B

QWEN3_30B_A3B = r"""{
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
  "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
  "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
}"""  # Qwen/Qwen3-30B-A3B

DEEPSEEK_V2_LITE = r"""{
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
  "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
  "n_shared_experts": 2, "norm_topk_prob": false, "num_attention_heads": 16, "num_experts_per_tok": 6,
  "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": null,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1", "use_cache": true, "v_head_dim": 128, "vocab_size": 102400
}"""  # deepseek-ai/DeepSeek-V2-Lite

DEEPSEEK_V3 = r"""{
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
  "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
}"""  # deepseek-ai/DeepSeek-V3

OLMO2_7B = r"""{
  "architectures": ["Olmo2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 500000, "tie_word_embeddings": false, "torch_dtype": "float32",
  "transformers_version": "4.47.0.dev0", "use_cache": true, "vocab_size": 100352
}"""  # allenai/OLMo-2-1124-7B

PYTHIA_1_4B = r"""{
  "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "layer_norm_eps": 1e-05,
  "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 16,
  "num_hidden_layers": 24, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": true,
  "use_parallel_residual": true, "vocab_size": 50304
}"""  # EleutherAI/pythia-1.4b

GPT_NEOX_20B = r"""{
  "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu_fast",
  "hidden_size": 6144, "initializer_range": 0.02, "intermediate_size": 24576, "layer_norm_eps": 1e-05,
  "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 64,
  "num_hidden_layers": 44, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.21.0.dev0", "use_cache": true,
  "use_parallel_residual": true, "vocab_size": 50432
}"""  # EleutherAI/gpt-neox-20b

FALCON_7B = r"""{
  "alibi": false, "apply_residual_connection_post_layernorm": false, "architectures": ["FalconForCausalLM"],
  "attention_dropout": 0.0, "bias": false, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
  "hidden_size": 4544, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
  "multi_query": true, "new_decoder_architecture": false, "num_attention_heads": 71, "num_hidden_layers": 32,
  "parallel_attn": true, "torch_dtype": "bfloat16", "transformers_version": "4.27.4", "use_cache": true,
  "vocab_size": 65024
}"""  # tiiuae/falcon-7b

FALCON_40B = r"""{
  "alibi": false, "apply_residual_connection_post_layernorm": false, "architectures": ["FalconForCausalLM"],
  "attention_dropout": 0.0, "bias": false, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
  "hidden_size": 8192, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
  "new_decoder_architecture": true, "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8,
  "parallel_attn": true, "torch_dtype": "bfloat16", "transformers_version": "4.27.4", "use_cache": true,
  "vocab_size": 65024
}"""  # tiiuae/falcon-40b


def _model(text, name="m"):
    return model_from_hf_text(text, where="config.json", name=name)


def _siglip_so400m_896() -> int:
    """Gemma 3's vision tower (transformers SiglipVisionModel, vision_use_head false), from
    the vision_config above: a 14x14 patch convolution with bias, (896/14)^2 = 4096 learned
    positions, 27 encoder layers (q, k, v, o with biases; fc1 and fc2 with biases; two
    LayerNorms), a final LayerNorm. Not planned by fitplan; it closes the published total."""
    d, f, layers, patches = 1152, 4304, 27, (896 // 14) ** 2
    layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    return (3 * 14 * 14 * d + d) + patches * d + layers * layer + 2 * d


@pytest.mark.parametrize(("config", "params"), [
    # Hub total 8,537,680,896 (google/gemma-7b). 28 x (attention 4 x 3072 x 4096 + GeGLU 3 x 3072 x 24576
    # + 2 norms) + tied 256000 x 3072 + final norm.
    (GEMMA_7B, 8_537_680_896),
    # Hub total 9,241,705,984 (google/gemma-2-9b). 42 x (q, o 2 x 3584 x 4096 + k, v 2 x 3584 x 2048 + GeGLU
    # 3 x 3584 x 14336 + 4 norms of 3584) + tied 256000 x 3584 + final norm.
    (GEMMA2_9B, 9_241_705_984),
    # Hub total 999,885,952 (google/gemma-3-1b-pt and -it). The 4 norms and q_norm, k_norm of 256 per layer.
    (GEMMA3_1B, 999_885_952),
    # Hub total 3,821,079,552 (microsoft/Phi-3-mini-4k-instruct). Fused qkv_proj 3072 x 9216 and gate_up_proj
    # 3072 x 16384: the same weights as separate projections.
    (PHI3_MINI, 3_821_079_552),
    # Hub total 14,315,784,192 (Qwen/Qwen1.5-MoE-A2.7B). Per layer 60 experts of 1408, the router 2048 x 60,
    # the shared expert of 5632 and its gate 2048 x 1, q/k/v biases.
    (QWEN15_MOE, 14_315_784_192),
    # Hub total 8,190,735,360 (Qwen/Qwen3-8B). q_norm and k_norm of 128 per layer.
    (QWEN3_8B, 8_190_735_360),
    # Hub total 30,532,122,624 (Qwen/Qwen3-30B-A3B; the card's 30.5B).
    (QWEN3_30B_A3B, 30_532_122_624),
    # Hub total 15,706,484,224 (deepseek-ai/DeepSeek-V2-Lite; the card's 15.7B). No query latent
    # (q_lora_rank null): q_proj 2048 x 16 x 192; layer 0 dense, 26 MoE layers of 64 + 2 shared experts.
    (DEEPSEEK_V2_LITE, 15_706_484_224),
    # deepseek-ai/DeepSeek-V3's checkpoint: 671,026,419,200 numbers in the tensors of layers 0-60, the embedding,
    # the final norm and the head, counted from the safetensors headers without the FP8 weight_scale_inv tensors
    # and without layer 61, the multi-token-prediction module (the card: "671B of the Main Model weights and 14B
    # of the Multi-Token Prediction (MTP) Module weights"). It includes the 58 MoE layers' e_score_correction_bias,
    # 58 x 256 = 14,848 numbers that the deepseek-v3 preset leaves out (671,026,404,352).
    (DEEPSEEK_V3, 671_026_419_200),
    # Hub total 7,298,617,344 (allenai/OLMo-2-1124-7B). q_norm and k_norm over 4096 each per layer.
    (OLMO2_7B, 7_298_617_344),
    # The Pythia card's "Total Params" 1,414,647,808 (EleutherAI/pythia-1.4b): 24 x (12h^2 + 13h) + untied
    # 2 x 50304 x 2048 + final LayerNorm 2h.
    (PYTHIA_1_4B, 1_414_647_808),
    # The GPT-NeoX-20B card's n_parameters 20,554,567,680 (EleutherAI/gpt-neox-20b).
    (GPT_NEOX_20B, 20_554_567_680),
    # tiiuae/falcon-7b: Hub total 7,217,189,760 counts lm_head.weight, which the files store beside
    # word_embeddings although FalconForCausalLM ties them: 7,217,189,760 - 65024 x 4544 = 6,921,720,704.
    # Per layer: query_key_value 4544 x (71 + 2) x 64, dense 4544^2, MLP 2 x 4544 x 18176, one LayerNorm.
    (FALCON_7B, 6_921_720_704),
    # tiiuae/falcon-40b: Hub total 41,835,970,560 with the same stored copy of the tied head:
    # 41,835,970,560 - 65024 x 8192 = 41,303,293,952. query_key_value 8192 x (128 + 2 x 8) x 64; ln_attn and ln_mlp.
    (FALCON_40B, 41_303_293_952),
])
def test_published_parameter_counts(config, params):
    assert shape_params(_model(config)) == params


def test_gemma3_reads_the_language_model_of_an_image_and_text_file():
    """google/gemma-3-4b-pt: Hub total 4,300,079,472 = the language model 3,880,263,168 (fitplan's count:
    Gemma3TextConfig's vocabulary 262,208 and context 131,072, which text_config leaves out) + the SigLIP
    vision tower 416,866,032 + the projector (mm_input_projection_weight 1152 x 2560, mm_soft_emb_norm 1152)."""
    m = _model(GEMMA3_4B)
    assert (m.vocab_size, m.max_seq_len, m.sliding_window, m.full_attention_every) == (262_208, 131_072, 1024, 6)
    vision, projector = _siglip_so400m_896(), 1152 * 2560 + 1152
    assert vision == 416_866_032
    assert shape_params(m) == 3_880_263_168
    assert shape_params(m) + vision + projector == 4_300_079_472
    assert training_hints(GEMMA3_4B)["notes"] == (
        "gemma3: the language model (text_config) only; the vision tower (vision_config) and the multi-modal "
        "projector are not planned",)


def test_gemma_shapes():
    g1, g2, g3 = _model(GEMMA_7B), _model(GEMMA2_9B), _model(GEMMA3_1B)
    for m in (g1, g2, g3):
        assert (m.mlp, m.norm, m.position, m.tied_embeddings, m.linear_bias) == (
            Mlp.GEGLU, Norm.RMSNORM, Position.ROPE, True, False)
    assert g1.head_dim == 256 and g1.q_size == 4096 != g1.hidden_size     # 16 heads of 256 on h = 3072
    assert (g1.norms_per_layer, g1.qk_norm, g1.sliding_window) == (2, QkNorm.NONE, None)
    assert (g2.norms_per_layer, g2.qk_norm, g2.sliding_window, g2.full_attention_every) == (4, QkNorm.NONE, 4096, 2)
    assert (g3.norms_per_layer, g3.qk_norm, g3.sliding_window, g3.full_attention_every) == (4, QkNorm.HEAD, 512, 6)


def test_phi3_olmo2_qwen3_and_neox_shapes():
    phi, olmo, qwen, neox = _model(PHI3_MINI), _model(OLMO2_7B), _model(QWEN3_8B), _model(PYTHIA_1_4B)
    assert (phi.sliding_window, phi.full_attention_every, phi.linear_bias) == (2047, None, False)
    assert (olmo.qk_norm, olmo.norms_per_layer) == (QkNorm.PROJECTION, 2)
    assert (qwen.qk_norm, qwen.head_dim, qwen.sliding_window, qwen.qkv_bias) == (QkNorm.HEAD, None, None, False)
    assert (neox.mlp, neox.norm, neox.position, neox.linear_bias, neox.tied_embeddings) == (
        Mlp.GELU, Norm.LAYERNORM, Position.ROPE, True, False)


def test_falcon_attention_and_norms():
    f7, f40 = _model(FALCON_7B), _model(FALCON_40B)
    assert (f7.num_kv_heads, f7.norms_per_layer, f7.ffn_hidden_size, f7.max_seq_len) == (1, 1, 18176, 2048)
    assert (f7.tied_embeddings, f7.linear_bias, f7.norm) == (True, False, Norm.LAYERNORM)
    assert (f40.num_kv_heads, f40.norms_per_layer) == (8, 2)
    sequential = model_from_hf_text(FALCON_7B.replace('"parallel_attn": true', '"parallel_attn": false'))
    assert sequential.norms_per_layer == 2
    multi_head = model_from_hf_text(FALCON_7B.replace('"multi_query": true', '"multi_query": false'))
    assert multi_head.num_kv_heads == 71


def test_moe_shapes():
    q15, q3, v2, v3 = _model(QWEN15_MOE), _model(QWEN3_30B_A3B), _model(DEEPSEEK_V2_LITE), _model(DEEPSEEK_V3)
    e = q15.moe
    assert (e.num_experts, e.experts_per_token, e.expert_ffn_size, e.num_shared_experts) == (60, 4, 1408, 4)
    assert (e.shared_expert_gate, e.expert_bias, e.first_dense_layers, q15.qkv_bias) == (True, False, 0, True)
    e = q3.moe
    assert (e.num_experts, e.experts_per_token, e.expert_ffn_size, e.num_shared_experts) == (128, 8, 768, 0)
    assert q3.qk_norm is QkNorm.HEAD
    assert active_params(q3) == 3_353_032_704   # the card's 3.3B activated
    e, a = v2.moe, v2.mla
    assert (e.num_experts, e.num_shared_experts, e.first_dense_layers, e.expert_bias) == (64, 2, 1, False)
    assert (a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (
        0, 512, 128, 64, 128)
    e, a = v3.moe, v3.mla
    assert (e.num_experts, e.num_shared_experts, e.first_dense_layers, e.expert_bias) == (256, 1, 3, True)
    assert (e.route_nodes, v3.mtp_depth) == (4, 1)      # n_group 8, topk_group 4; num_nextn_predict_layers 1
    assert a.q_lora_rank == 1536
    assert training_hints(DEEPSEEK_V3)["notes"] == (
        "deepseek_v3: the 1 multi-token-prediction module (num_nextn_predict_layers) planned on the last pipeline "
        "stage (memory and time), outside the parameter count, as the model card counts the main model",)


def test_deepseek_v3_is_the_preset_plus_the_score_bias():
    from dataclasses import replace

    from fitplan.presets import MODELS
    m = _model(DEEPSEEK_V3, name="deepseek-v3")
    preset = MODELS["deepseek-v3"].model
    assert replace(m, source="") == replace(preset, source="", moe=replace(preset.moe, expert_bias=True))
    assert shape_params(m) - shape_params(preset) == 58 * 256


def test_qwen_moe_dense_layers_from_mlp_only_layers():
    import json
    config = json.loads(QWEN3_30B_A3B)
    assert model_from_hf_dict({**config, "mlp_only_layers": [0, 1]}).moe.first_dense_layers == 2
    with pytest.raises(SpecError, match="MoE layers are the last ones"):
        model_from_hf_dict({**config, "mlp_only_layers": [5]})
    with pytest.raises(SpecError, match="MoE layers are the last ones"):
        model_from_hf_dict({**config, "decoder_sparse_step": 2})


def test_layer_types_decide_the_sliding_layers():
    import json
    config = json.loads(GEMMA3_1B)
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)]
    assert model_from_hf_dict({**config, "layer_types": types}).full_attention_every == 6
    every = model_from_hf_dict({**config, "layer_types": ["sliding_attention"] * 26})
    assert (every.sliding_window, every.full_attention_every) == (512, None)
    assert model_from_hf_dict({**config, "layer_types": ["full_attention"] * 26}).sliding_window is None
    with pytest.raises(SpecError, match="attend fully at layers"):
        model_from_hf_dict({**config, "layer_types": ["full_attention"] + ["sliding_attention"] * 25})


@pytest.mark.parametrize(("text", "change", "needle"), [
    (FALCON_7B, {"alibi": True}, "alibi is true"),
    (QWEN3_8B, {"use_sliding_window": True, "max_window_layers": 28}, "use_sliding_window is true"),
    (QWEN15_MOE, {"shared_expert_intermediate_size": 2000}, "not a whole number of moe_intermediate_size"),
    (DEEPSEEK_V2_LITE, {"moe_layer_freq": 2}, "moe_layer_freq = 2"),
    (PYTHIA_1_4B, {"attention_bias": False}, "attention_bias is false"),
    (GEMMA2_9B, {"hidden_activation": "relu"}, "hidden_activation 'relu' is not a GeLU"),
    (GEMMA3_4B, {"text_config": None}, "language model in 'text_config'"),
    (QWEN3_8B, {"model_type": "qwen3", "num_experts": 8}, "num_experts = 8 in a qwen3 config"),
])
def test_what_cannot_be_stated_is_refused(text, change, needle):
    import json
    with pytest.raises(SpecError) as err:
        model_from_hf_dict({**json.loads(text), **change}, where="x/config.json")
    assert str(err.value).startswith("x/config.json")
    assert needle in str(err.value)


def test_plan_and_infer_say_the_sliding_window_is_not_modelled(tmp_path):
    from fitplan.cli import build_parser, request_from_args
    from fitplan.resolve import resolve, resolve_serving
    (tmp_path / "config.json").write_text(GEMMA2_9B)
    args = ["--hf-config", str(tmp_path), "--gpus", "8"]
    plan = resolve(request_from_args(build_parser().parse_args(["plan", *args, "--seq-len", "8192"])))
    assert ("sliding window of 4,096 tokens on all but every 2nd layer not modelled in activations: full "
            "attention assumed") in plan.setup.assumed
    serve = resolve_serving(request_from_args(build_parser().parse_args(["infer", *args])))
    assert ("sliding window of 4,096 tokens on all but every 2nd layer not modelled in the KV cache: every "
            "layer caches the whole context") in serve.assumed


def test_plan_says_which_norms_activations_leave_out(tmp_path):
    from fitplan.cli import build_parser, request_from_args
    from fitplan.resolve import resolve
    (tmp_path / "config.json").write_text(GEMMA3_1B)
    argv = ["plan", "--hf-config", str(tmp_path), "--gpus", "8", "--seq-len", "4096"]
    assumed = resolve(request_from_args(build_parser().parse_args(argv))).setup.assumed
    assert ("4 norms per layer: activations count the inputs of two, as Korthikanti Table 2's layer has (the "
            "parameters count all 4)") in assumed
    assert ("query/key norms (head): their inputs are not counted in activations (the parameters count them)"
            in assumed)


def test_megatron_export_refuses_what_its_flags_cannot_state(tmp_path):
    import io

    from fitplan.cli import main
    (tmp_path / "config.json").write_text(QWEN3_8B)
    out, err = io.StringIO(), io.StringIO()
    code = main(["export", "--hf-config", str(tmp_path), "--gpus", "8", "--seq-len", "4096", "--format", "megatron"],
                out=out, err=err)
    # Qwen3's per-head q/k RMSNorm is Megatron's --qk-layernorm (a norm of head_dim on each head's q and k)
    assert code == 0 and "--qk-layernorm" in out.getvalue().split()
    # OLMo 2's norm over the whole q and k projections has no Megatron flag: refused, said why
    from dataclasses import replace

    from fitplan.export import export, make_plan
    from fitplan.presets import MODELS, RECIPES
    from fitplan.specs import ParallelConfig, TrainingSpec
    from fitplan.specs.model import QkNorm
    olmo_like = replace(MODELS["llama2-7b"].model, qk_norm=QkNorm.PROJECTION)
    result = export("megatron", make_plan(model=olmo_like, training=TrainingSpec(seq_len=4096, recipe=RECIPES[
        "mixed-adam"]), parallel=ParallelConfig(dp=8), global_batch=64))
    assert not result.ok and "query/key norms over the whole projection (OLMo 2)" in result.message


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hf"


def _example(folder: str) -> dict:
    return json.loads((EXAMPLES / folder / "config.json").read_text())


def test_gpt_oss_shapes():
    """openai/gpt-oss-120b (examples/hf/gpt-oss-120b): 64 query heads of 64 on h = 2880 (q = 4096 != h), 8 KV
    heads; q, k, v, o biases, a sink per head; 128 experts of 2880 with biases behind a biased router, top-4;
    sliding (128 tokens) and full layers alternate, from a sliding first layer."""
    m = model_from_hf_dict(_example("gpt-oss-120b"))
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.q_size) == (
        36, 2880, 64, 8, 64, 4096)
    assert (m.mlp, m.norm, m.position, m.tied_embeddings) == (Mlp.SWIGLU, Norm.RMSNORM, Position.ROPE, False)
    assert (m.linear_bias, m.attention_sinks, m.sliding_window, m.full_attention_every) == (True, True, 128, 2)
    e = m.moe
    assert (e.num_experts, e.experts_per_token, e.expert_ffn_size, e.num_shared_experts, e.first_dense_layers,
            e.expert_bias) == (128, 4, 2880, 0, 0, True)
    assert training_hints(json.dumps(_example("gpt-oss-120b")))["dropout"] is False   # attention_dropout 0.0


def test_gpt_oss_defaults_and_older_names():
    """GptOssConfig's defaults: attention_bias true, layer_types alternating from a sliding first layer,
    sliding_window 128; older files name the top-k experts_per_token and transformers maps num_experts."""
    config = _example("gpt-oss-20b")
    for key in ("attention_bias", "layer_types", "sliding_window", "num_experts_per_tok"):
        del config[key]
    config["num_experts"] = config.pop("num_local_experts")
    m = model_from_hf_dict(config)
    assert m == model_from_hf_dict(_example("gpt-oss-20b"))
    assert (m.moe.num_experts, m.moe.experts_per_token, m.sliding_window, m.full_attention_every) == (32, 4, 128, 2)


def test_kimi_k2_is_read_as_deepseek_v3():
    """moonshotai/Kimi-K2-Base names model_type kimi_k2 with DeepseekV3ForCausalLM and DeepseekV3Config: the
    same model as the file relabelled deepseek_v3 (topk_method noaux_tc: the score bias; n_group 1: no
    node-limited routing; num_nextn_predict_layers 0)."""
    config = _example("kimi-k2")
    m = model_from_hf_dict(config)
    assert m == model_from_hf_dict({**config, "model_type": "deepseek_v3"})
    e, a = m.moe, m.mla
    assert (e.num_experts, e.experts_per_token, e.num_shared_experts, e.first_dense_layers, e.expert_bias,
            e.route_nodes, m.mtp_depth) == (384, 8, 1, 1, True, None, 0)
    assert (m.num_heads, a.q_lora_rank, a.kv_lora_rank, m.vocab_size) == (64, 1536, 512, 163_840)
    assert training_hints(json.dumps(config))["notes"] == ()


def test_gpt_oss_without_attention_biases_is_refused():
    with pytest.raises(SpecError) as err:
        model_from_hf_dict({**_example("gpt-oss-20b"), "attention_bias": False}, where="x/config.json")
    assert str(err.value).startswith("x/config.json: attention_bias is false; gpt-oss's experts and router keep "
                                     "their biases")
