"""Model presets with the training setup their source states. Shapes are cited."""

from fitplan.presets.registry import Registry, deferred
from fitplan.record import record
from fitplan.specs.model import MambaSpec, MlaSpec, Mlp, ModelSpec, MoeSpec, Norm, Position, QkNorm


@record(slots=True, kw_only=True)
class ModelPreset:
    """A model with the training setup its source states. global_batch None: not published
    (fitplan.resolve then takes its stated default). attention_kernel and dropout are how
    the model was trained: the GPT-3 family keeps Korthikanti et al.'s eager attention with
    dropout (the exercise's numbers); the Llama, Mistral and DeepSeek families trained
    without dropout (their config.json attention_dropout 0.0) and are planned with a flash
    kernel, every current framework's default."""
    model: ModelSpec
    seq_len: int
    micro_batch: int = 1
    global_batch: int | None = None
    gpu: str = "h100-80gb"     # the GPU preset used when none is named
    attention_kernel: str = "flash"
    dropout: bool = False
    moe_dispatcher: str = "alltoall"   # how its MoE tokens travelled (fitplan.specs.training.moe_dispatcher)
    fp8_weight_cache: bool = True      # its low-precision GEMMs kept quantized weight copies (training.fp8_weight_cache)
    batch_source: str = ""     # where the published global batch comes from


GPT3 = "Brown et al. 2020 (GPT-3), Table 2.1; vocabulary 50257 (GPT-2 BPE)"


@deferred
def _gpt3(name, params, layers, hidden, heads, batch_tokens, gpu="h100-80gb", note=""):
    model = ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                      ffn_hidden_size=4 * hidden, vocab_size=50257, max_seq_len=2048, published_params=params,
                      source=GPT3 + note)
    return ModelPreset(model=model, seq_len=2048, micro_batch=1, global_batch=batch_tokens // 2048, gpu=gpu,
                       attention_kernel="eager", dropout=True, batch_source="GPT-3 Table 2.1's batch in tokens, in 2,048-token sequences")


@deferred
def _llama(name, layers, hidden, ffn, heads, kv_heads, vocab, seq, source, global_batch=None, batch_source="",
           max_seq=None):
    """seq: the sequence length pre-training used (the plan's default); max_seq: the longest the
    released model takes, when longer (Llama 3.1: 131,072 after its long-context stage)."""
    model = ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                      ffn_hidden_size=ffn, vocab_size=vocab, max_seq_len=max_seq or seq, mlp=Mlp.SWIGLU,
                      norm=Norm.RMSNORM, position=Position.ROPE, tied_embeddings=False, linear_bias=False,
                      source=source)
    return ModelPreset(model=model, seq_len=seq, micro_batch=1, global_batch=global_batch, batch_source=batch_source)


@deferred
def _mixtral(name, layers, hidden, ffn, heads, vocab, source):
    model = ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=8,
                      ffn_hidden_size=ffn, vocab_size=vocab, max_seq_len=32768, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
                      position=Position.ROPE, tied_embeddings=False, linear_bias=False,
                      moe=MoeSpec(num_experts=8, experts_per_token=2, expert_ffn_size=ffn), source=source)
    return ModelPreset(model=model, seq_len=4096, micro_batch=1, global_batch=1024,
                       batch_source="fitplan's choice for Mixtral (4M tokens; the paper states none)")


MIXTRAL = ("Jiang et al. 2024, Mixtral of Experts (arXiv:2401.04088); HF mistralai/{} config.json; "
           "context 32k, planned at 4096-token sequences")
DEEPSEEK_V3 = ModelSpec(
    name="deepseek-v3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128, ffn_hidden_size=18432,
    vocab_size=129280, max_seq_len=163840, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
    tied_embeddings=False, linear_bias=False,
    moe=MoeSpec(num_experts=256, experts_per_token=8, expert_ffn_size=2048, num_shared_experts=1,
                first_dense_layers=3, route_nodes=4),
    mtp_depth=1,
    mla=MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    source="DeepSeek-V3 Technical Report (arXiv:2412.19437) Sec. 4.2 and HF deepseek-ai/DeepSeek-V3 config.json: "
           "61 layers (3 dense), h 7168, MLA 128 heads, 256 routed + 1 shared experts of 2048, top-8, at most 4 "
           "nodes per token (Sec. 3.2.2); one multi-token-prediction module (Sec. 2.2) on the last stage; the "
           "routers' bias terms are not counted")

# BLOOM-176B as trained: bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm (TP 4, PP 12,
# 48 nodes of 8 A100 80GB, micro-batch 2, global batch 2048 of 2048 tokens, ALiBi, embedding LayerNorm,
# full activation checkpointing, bf16 with DeepSpeed's own ZeRO-1 equivalent); shapes from HF
# bigscience/bloom config.json; 176,247,271,424 parameters (the HF model card). The embedding LayerNorm
# (2h) is inside the published count, not the shapes.
BLOOM = ModelSpec(
    name="bloom-176b", num_layers=70, hidden_size=14336, num_heads=112, num_kv_heads=112, ffn_hidden_size=57344,
    vocab_size=250880, max_seq_len=2048, mlp=Mlp.GELU, norm=Norm.LAYERNORM, position=Position.ALIBI,
    tied_embeddings=True, linear_bias=True, published_params=176_247_271_424,
    source="BigScience 2022, BLOOM (arXiv:2211.05100); HF bigscience/bloom config.json (70 layers, h 14336, "
           "112 heads, vocab 250880, ALiBi, tied); 176,247,271,424 parameters from the HF model card")
LLAMA2 = "Touvron et al. 2023 (Llama 2) Table 1; shapes from HF meta-llama/Llama-2-*-hf config.json"
LLAMA2_BATCH = "Llama 2 Sec. 2.2 (4M tokens of 4,096-token sequences)"
LLAMA3 = ("Llama 3 Herd (arXiv:2407.21783) Table 3; HF meta-llama/Llama-3.1-* config.json (vocab 128256, "
          "max_position_embeddings 131072: Sec. 3.4.2 extends the 8K pre-training context to 128K)")
LLAMA31_MAX = 131072
LLAMA3_0 = ("Llama 3 Herd (arXiv:2407.21783) Table 3; HF meta-llama/Meta-Llama-3-{} config.json: Llama 3.1's shapes "
            "with an 8,192-token context and no rope_scaling (vocab 128256)")


@deferred
def _qwen25(name, layers, hidden, heads, kv_heads, ffn, repo, counts):
    """Qwen2.5 dense (HF config.json of Qwen/Qwen2.5-*; model type qwen2): SwiGLU, RMSNorm, RoPE, biases on q, k and
    v only, untied embeddings, vocab 152,064; trained on 4,096-token sequences before long context (the model
    card's context is 131,072)."""
    model = ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                      ffn_hidden_size=ffn, vocab_size=152064, max_seq_len=131072, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
                      position=Position.ROPE, tied_embeddings=False, linear_bias=False, qkv_bias=True,
                      source=f"HF {repo} config.json and model card ({counts}): {layers} layers, h {hidden}, {heads} "
                             f"heads of 128, {kv_heads} KV heads, ffn {ffn}, q/k/v biases, untied, vocab 152,064")
    return ModelPreset(model=model, seq_len=4096)


@deferred
def _qwen3_moe(name, layers, hidden, heads, expert_ffn, dense_ffn, repo):
    """Qwen3 MoE (Qwen3 Technical Report, arXiv:2505.09388, Table 2; HF config.json): 128 experts, top-8,
    no shared expert, every layer routed, q/k RMSNorms of head_dim 128, 4 KV heads, untied; pre-trained
    on 4,096-token sequences (the report's general and reasoning stages) before its long-context stage."""
    model = ModelSpec(
        name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=4, head_dim=128,
        ffn_hidden_size=dense_ffn, vocab_size=151936, max_seq_len=40960, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
        position=Position.ROPE, tied_embeddings=False, linear_bias=False, qk_norm=QkNorm.HEAD,
        moe=MoeSpec(num_experts=128, experts_per_token=8, expert_ffn_size=expert_ffn),
        source=f"Qwen3 Technical Report (arXiv:2505.09388) Table 2 and HF {repo} config.json: {layers} layers, "
               f"h {hidden}, {heads} query heads of 128 and 4 KV heads with per-head q/k RMSNorm, 128 experts of "
               f"{expert_ffn}, top-8, no shared expert; planned at the report's 4,096-token pre-training sequences")
    return ModelPreset(model=model, seq_len=4096)


@deferred
def _gpt_oss(name, layers, experts, repo):
    """gpt-oss (OpenAI's gpt-oss model card, arXiv:2508.10925; HF config.json)."""
    model = ModelSpec(
        name=name, num_layers=layers, hidden_size=2880, num_heads=64, num_kv_heads=8, head_dim=64,
        ffn_hidden_size=2880, vocab_size=201088, max_seq_len=131072, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
        position=Position.ROPE, tied_embeddings=False, linear_bias=True, attention_sinks=True,
        sliding_window=128, full_attention_every=2,
        moe=MoeSpec(num_experts=experts, experts_per_token=4, expert_ffn_size=2880, expert_bias=True),
        source=f"OpenAI gpt-oss model card (arXiv:2508.10925) and HF {repo} config.json: {layers} layers, h 2880, "
               f"64 query heads of 64 and 8 KV heads with q/k/v/o biases and a learned sink per head, banded "
               f"(128-token window) and full attention alternating, {experts} experts of 2880 with biases "
               f"(clamped SwiGLU), top-4, a router with a bias, vocab 201,088, untied; planned at its "
               f"4,096-token initial context (initial_context_length)")
    return ModelPreset(model=model, seq_len=4096)


KIMI_K2 = ModelSpec(
    name="kimi-k2", num_layers=61, hidden_size=7168, num_heads=64, num_kv_heads=64, ffn_hidden_size=18432,
    vocab_size=163840, max_seq_len=131072, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
    tied_embeddings=False, linear_bias=False,
    moe=MoeSpec(num_experts=384, experts_per_token=8, expert_ffn_size=2048, num_shared_experts=1,
                first_dense_layers=1, expert_bias=True),
    mla=MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    source="Kimi K2 technical report (arXiv:2507.20534) and HF moonshotai/Kimi-K2-Base config.json (DeepSeek-V3's "
           "architecture): 61 layers (1 dense), h 7168, MLA 64 heads, 384 routed + 1 shared experts of 2048, "
           "top-8, the routers' score bias (noaux_tc), vocab 163,840, untied; no multi-token prediction module")

# NeMo's GPT-3 as its NeMo Framework Launcher recipes train it (launcher_scripts/conf/training/gpt3/5b.yaml,
# 20b.yaml; the same shapes as NeMo 2.0's GPTConfig5B and GPTConfig20B, nemo/collections/llm/gpt/model/base.py):
# GPT-2 BPE vocabulary (Megatron pads it to a multiple of 128 x tp), learned positions, tied embeddings, biases,
# hidden and attention dropout 0.1, 2,048-token sequences, global batch 2048.
NEMO_GPT3 = ("NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/{}.yaml (NeMo 2.0: GPTConfig{} in "
             "nemo/collections/llm/gpt/model/base.py): {} layers, h {}, {} heads, ffn 4h, seq 2048, GPT-2 BPE "
             "vocabulary 50257 (Megatron pads it to a multiple of 128 x tp), dropout 0.1")
NEMO_GPT3_BATCH = "NeMo-Framework-Launcher gpt3/{}.yaml: global_batch_size 2048, micro_batch_size {}"


@deferred
def _nemo_gpt3(name, size, layers, hidden, heads, micro_batch):
    model = ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                      ffn_hidden_size=4 * hidden, vocab_size=50257, max_seq_len=2048,
                      source=NEMO_GPT3.format(size.lower(), size.upper(), layers, hidden, heads))
    return ModelPreset(model=model, seq_len=2048, micro_batch=micro_batch, global_batch=2048, dropout=True,
                       batch_source=NEMO_GPT3_BATCH.format(size.lower(), micro_batch))


# Nemotron as NeMo trains it (nemo/collections/llm/gpt/model/nemotron.py NemotronConfig and its Nemotron3Config8B,
# Nemotron3Config22B, Nemotron4Config15B, Nemotron4Config340B; NeMo-Framework-Launcher conf/training/nemotron/):
# squared-ReLU MLP (two matrices), LayerNorm with zero-centred gamma (layernorm1p: weight and bias), no linear
# biases, untied embeddings, RoPE on half of each head (rotary_percentage 0.5: no parameters), no dropout,
# vocabulary 256,000 (a SentencePiece model; NeMo's performance scripts use a NullTokenizer of 256000).
NEMOTRON = ("nemo/collections/llm/gpt/model/nemotron.py {}: {} layers, h {}, {} heads ({} KV), ffn {}, "
            "squared-ReLU MLP, LayerNorm (layernorm1p), no linear bias, untied, RoPE on half of each head, vocab "
            "256,000, seq 4096")


@deferred
def _nemotron(name, config, layers, hidden, heads, kv_heads, ffn, source="", global_batch=None, batch_source=""):
    model = ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                      ffn_hidden_size=ffn, vocab_size=256000, max_seq_len=4096, mlp=Mlp.RELU2, norm=Norm.LAYERNORM,
                      position=Position.ROPE, tied_embeddings=False, linear_bias=False,
                      source=source + NEMOTRON.format(config, layers, hidden, heads, kv_heads, ffn))
    return ModelPreset(model=model, seq_len=4096, global_batch=global_batch, batch_source=batch_source)

# Hybrid Mamba models, as their Hugging Face config.json states them (model_type nemotron_h: transformers
# NemotronHConfig; the same files examples/hf/<name>/config.json holds, and fitplan.files.hf reads): every
# layer one block behind an RMSNorm (M Mamba-2, * attention, - MLP, E MoE), squared-ReLU MLPs and experts
# (two matrices), no linear biases, no position encoding (the Mamba layers carry order; Megatron-LM's recipes
# run --position-embedding-type none), untied embeddings, vocabulary 131,072. Nemotron 3's MoE layers route
# with a sigmoid and a per-expert score bias (e_score_correction_bias) to 6 or 22 experts, beside a shared
# expert of twice the routed width (counted as two shared experts: the same weights); Super and Ultra's
# experts work on a latent (LatentMoE, moe_latent_size). Their multi-token-prediction module
# (num_nextn_predict_layers 1) is an attention and an MoE layer (mtp_hybrid_override_pattern "*E").
NEMOTRON_H = ("HF nvidia/{} config.json (model_type nemotron_h): {}; transformers "
              "models/nemotron_h/modeling_nemotron_h.py")


@deferred
def _nemotron_h(name, hf_id, note, *, pattern, hidden, heads, kv_heads, mamba_heads, ffn=1, moe=None, mtp=0,
                max_seq=262144, seq=8192):
    model = ModelSpec(name=name, num_layers=len(pattern), hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                      head_dim=None if heads * 128 == hidden else 128, ffn_hidden_size=ffn, vocab_size=131072, max_seq_len=max_seq, mlp=Mlp.RELU2,
                      norm=Norm.RMSNORM, position=Position.NONE, tied_embeddings=False, linear_bias=False,
                      layer_pattern=pattern, moe=moe, mtp_depth=mtp, mtp_pattern="*E" if mtp else None,
                      mamba=MambaSpec(num_heads=mamba_heads, head_dim=64, state_size=128, num_groups=8,
                                      chunk_size=128),
                      source=NEMOTRON_H.format(hf_id, note))
    return ModelPreset(model=model, seq_len=seq)


def _nemotron3_moe(experts, top_k, ffn, latent=None):
    return MoeSpec(num_experts=experts, experts_per_token=top_k, expert_ffn_size=ffn, num_shared_experts=2,
                   expert_bias=True, latent_size=latent)


NEMOTRON_3_NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
NEMOTRON_3_SUPER_PATTERN = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*"
                            "EMEMEMEME")
NEMOTRON_3_ULTRA_PATTERN = ("MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*"
                            "EMEMEM*EMEMEMEM*EMEMEMEME")
HYBRID_PRESETS = (
    _nemotron_h("nemotron-h-8b", "Nemotron-H-8B-Base-8K",
                "52 layers (24 Mamba-2, 24 MLP, 4 attention), h 4096, 32 heads (8 KV) of 128, MLP 21,504, Mamba-2 "
                "128 heads of 64, 8 groups, state 128 (Nemotron-H report, arXiv:2504.03624, Table 1)",
                pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", hidden=4096, heads=32, kv_heads=8,
                mamba_heads=128, ffn=21504, max_seq=8192),
    _nemotron_h("nemotron-3-nano-30b-a3b", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                "52 layers (23 Mamba-2, 23 MoE, 6 attention), h 2688, 32 heads (2 KV) of 128, 128 experts of 1856, "
                "top-6, a shared expert of 3712, Mamba-2 64 heads of 64, 8 groups, state 128",
                pattern=NEMOTRON_3_NANO_PATTERN, hidden=2688, heads=32, kv_heads=2, mamba_heads=64, ffn=1856,
                moe=_nemotron3_moe(128, 6, 1856)),
    _nemotron_h("nemotron-3.5-lightning-30b-a3b", "NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16",
                "Nemotron 3 Nano's shapes (layers_block_type naming the same 52 layers) and one multi-token-"
                "prediction module of an attention and an MoE layer",
                pattern=NEMOTRON_3_NANO_PATTERN, hidden=2688, heads=32, kv_heads=2, mamba_heads=64, ffn=1856,
                moe=_nemotron3_moe(128, 6, 1856), mtp=1),
    _nemotron_h("nemotron-3-super-120b-a12b", "NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
                "88 layers (40 Mamba-2, 40 MoE, 8 attention), h 4096, 32 heads (2 KV) of 128, 512 experts of 2688 "
                "on a latent of 1024, top-22, a shared expert of 5376, Mamba-2 128 heads of 64, 8 groups, state "
                "128, one multi-token-prediction module",
                pattern=NEMOTRON_3_SUPER_PATTERN, hidden=4096, heads=32, kv_heads=2, mamba_heads=128, ffn=2688,
                moe=_nemotron3_moe(512, 22, 2688, latent=1024), mtp=1),
    _nemotron_h("nemotron-3-ultra-550b-a55b", "NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
                "108 layers (48 Mamba-2, 48 MoE, 12 attention), h 8192, 64 heads (2 KV) of 128, 512 experts of "
                "5120 on a latent of 2048, top-22, a shared expert of 10240, Mamba-2 256 heads of 64, 8 groups, "
                "state 128, one multi-token-prediction module",
                pattern=NEMOTRON_3_ULTRA_PATTERN, hidden=8192, heads=64, kv_heads=2, mamba_heads=256, ffn=5120,
                moe=_nemotron3_moe(512, 22, 5120, latent=2048), mtp=1),
)

_PRESETS = (
    _gpt3("gpt3-125m", 125_000_000, 12, 768, 12, 2**19),
    _gpt3("gpt3-350m", 350_000_000, 24, 1024, 16, 2**19),
    _gpt3("gpt3-760m", 760_000_000, 24, 1536, 16, 2**19),
    _gpt3("gpt3-1.3b", 1_300_000_000, 24, 2048, 16, 2**20,
          note="; the table's 24 heads x d_head 128 != d_model 2048 and no whole head size gives 24 heads of "
               "2048, so 16 heads of 128 (GPT-Neo 1.3B's choice): d_model, d_head and the 1.3B count as printed"),
    _gpt3("gpt3-2.7b", 2_700_000_000, 32, 2560, 32, 2**20),
    _gpt3("gpt3-6.7b", 6_700_000_000, 32, 4096, 32, 2**21),
    _gpt3("gpt3-13b", 13_000_000_000, 40, 5120, 40, 2**21,
          note="; the table prints d_model 5140, a typo for 40 x 128 = 5120"),
    # 1536 sequences x 2048 = 3.1M tokens: the table's 3.2M batch as Megatron-LM's GPT-3 example runs it.
    _gpt3("gpt3-175b", 175_000_000_000, 96, 12288, 96, 1536 * 2048, gpu="gpu-192gib"),
    # Shapes chosen so that the exercise's pure-TP (a = 64) and pure-PP (L = 128) layouts both
    # exist on 64 GPUs: 12*L*h^2 = 103.1e9, 103.5e9 with embeddings.
    ("dense-100b", lambda: ModelPreset(model=ModelSpec(
        name="dense-100b", num_layers=128, hidden_size=8192, num_heads=64, num_kv_heads=64,
        ffn_hidden_size=32768, vocab_size=51200, max_seq_len=2048,
        source="fitplan: a GPT-3-style ~100B decoder (L=128, h=8192, a=64, f=4h, V=51200, s=2048), "
               "103.5e9 parameters from shapes"), seq_len=2048, micro_batch=1, global_batch=1024, gpu="h100-80gb",
        attention_kernel="eager", dropout=True, batch_source="the exercise's comparison (1024 sequences)")),
    _mixtral("mixtral-8x7b", 32, 4096, 14336, 32, 32000, MIXTRAL.format("Mixtral-8x7B-v0.1")),
    _mixtral("mixtral-8x22b", 56, 6144, 16384, 48, 32768, MIXTRAL.format("Mixtral-8x22B-v0.1")),
    ("deepseek-v3", lambda: ModelPreset(
        model=DEEPSEEK_V3, seq_len=4096, micro_batch=1, global_batch=15360, moe_dispatcher="deepep",
        fp8_weight_cache=False,   # DeepGEMM's fp8 GEMMs quantize per use (deepseek-ai/DeepGEMM README)
        batch_source="DeepSeek-V3 report Sec. 4.2 (15360 sequences of 4K after the batch-size ramp)")),
    ("bloom-176b", lambda: ModelPreset(
        model=BLOOM, seq_len=2048, micro_batch=2, global_batch=2048, gpu="a100-80gb", attention_kernel="eager",
        dropout=False, batch_source="BLOOM's training script tr11-176B-ml.slurm (2048 sequences of 2048 tokens after "
                                    "the ramp, micro-batch 2)")),
    _llama("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, LLAMA2, global_batch=1024, batch_source=LLAMA2_BATCH),
    _llama("llama2-13b", 40, 5120, 13824, 40, 40, 32000, 4096, LLAMA2, global_batch=1024,
           batch_source=LLAMA2_BATCH),
    _llama("llama2-70b", 80, 8192, 28672, 64, 8, 32000, 4096, LLAMA2, global_batch=1024, batch_source=LLAMA2_BATCH),
    _llama("llama3.1-8b", 32, 4096, 14336, 32, 8, 128256, 8192, LLAMA3, max_seq=LLAMA31_MAX),
    _llama("llama3.1-70b", 80, 8192, 28672, 64, 8, 128256, 8192, LLAMA3, max_seq=LLAMA31_MAX),
    _llama("llama3.1-405b", 126, 16384, 53248, 128, 8, 128256, 8192, LLAMA3, global_batch=2048,
           batch_source="Llama 3 Herd Sec. 3.4.1 (16M tokens of 8,192-token sequences after the ramp)",
           max_seq=LLAMA31_MAX),
    _llama("llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, LLAMA3_0.format("8B")),
    _llama("llama3-70b", 80, 8192, 28672, 64, 8, 128256, 8192, LLAMA3_0.format("70B")),
    _qwen25("qwen2.5-7b", 28, 3584, 28, 4, 18944, "Qwen/Qwen2.5-7B", "7.61B parameters, 6.53B non-embedding"),
    _qwen25("qwen2.5-32b", 64, 5120, 40, 8, 27648, "Qwen/Qwen2.5-32B", "32.5B parameters, 31.0B non-embedding"),
    _qwen3_moe("qwen3-30b-a3b", 48, 2048, 32, 768, 6144, "Qwen/Qwen3-30B-A3B"),
    _qwen3_moe("qwen3-235b-a22b", 94, 4096, 64, 1536, 12288, "Qwen/Qwen3-235B-A22B"),
    _gpt_oss("gpt-oss-20b", 24, 32, "openai/gpt-oss-20b"),
    _gpt_oss("gpt-oss-120b", 36, 128, "openai/gpt-oss-120b"),
    ("kimi-k2", lambda: ModelPreset(
        model=KIMI_K2, seq_len=4096, global_batch=16384,
        batch_source="Kimi K2 technical report (arXiv:2507.20534): a global batch of 67M tokens throughout "
                     "pre-training at a 4,096-token context, 16,384 sequences (67.1M tokens)")),
    _nemo_gpt3("nemo-gpt3-5b", "5b", 24, 4096, 32, micro_batch=4),
    _nemo_gpt3("nemo-gpt3-20b", "20b", 44, 6144, 48, micro_batch=2),
    _nemotron("nemotron3-8b", "Nemotron3Config8B", 32, 4096, 32, 32, 16384),
    _nemotron("nemotron3-22b", "Nemotron3Config22B", 40, 6144, 48, 48, 24576),
    _nemotron("nemotron4-15b", "Nemotron4Config15B", 32, 6144, 48, 8, 24576,
              source="Nemotron-4 15B technical report (arXiv:2402.16819) Table 1; ", global_batch=1152,
              batch_source="Nemotron-4 15B report (arXiv:2402.16819) Table 2: the batch ramp's last stage, 1152 "
                           "sequences of 4,096 tokens"),
    _nemotron("nemotron4-340b", "Nemotron4Config340B", 96, 18432, 96, 8, 73728,
              source="Nemotron-4 340B technical report (arXiv:2406.11704) Table 1 and HF nvidia/Nemotron-4-340B-Base; ",
              global_batch=2304,
              batch_source="HF nvidia/Nemotron-4-340B-Base model card: global batch 2304 of 4,096-token sequences "
                           "(arXiv:2406.11704's ramp ends there)"),
)
# name -> the preset, built when first asked for (fitplan.presets.registry)
MODELS = Registry(_PRESETS + HYBRID_PRESETS)
