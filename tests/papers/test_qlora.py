"""QLoRA (Dettmers, Pagnoni, Holtzman, Zettlemoyer 2023, arXiv:2305.14314): "finetune a 65B parameter model
on a single 48GB GPU" must come out as fits, at the settings the paper's own training script states.

The settings, from artidoro/qlora (the paper's code) scripts/finetune_guanaco_65b.sh and qlora.py:
  model           huggyllama/llama-65b: LLaMA 65B, 80 layers, h 8192, 64 heads, ffn 22016, vocab 32000,
                  untied head, RMSNorm, RoPE, SwiGLU (HF config.json)
  base            --bits 4 --quant_type nf4 --double_quant: NF4 with double quantization
  adapters        --lora_r 64 --lora_modules all: every linear layer but lm_head (find_all_linear_names)
                  = q, k, v, o, gate, up, down; --lora_alpha 16; --lora_dropout 0.05 (not modelled: with
                  gradient checkpointing it touches only the layer being recomputed)
  precision       --bf16: adapters cast to bf16 (qlora.py: module.to(torch.bfloat16) for LoraLayer), no
                  fp32 master copy; --optim paged_adamw_32bit (the default): fp32 Adam moments, 8 B/param.
                  fitplan's bf16-adam recipe (2 + 2 + 0 + 8). Paging moves optimizer state to the host only
                  when GPU memory runs out; fitplan counts it on the GPU, the conservative case.
  memory saving   --gradient_checkpointing: full recompute
  batch           --per_device_train_batch_size 1 --gradient_accumulation_steps 16
  sequence        --source_max_len 16 --target_max_len 512: at most 528 tokens
  attention       HF LLaMA's eager attention of mid-2023 (no flash kernel), no dropout
The GPU: 48 GB, taken as 48 x 10^9 bytes (an RTX A6000's 48 GB is 48 GiB; the decimal reading is the
stricter), no reserve.
"""
import io
import json
from dataclasses import replace

from fitplan import presets
from fitplan.cli import main
from fitplan.memory import finetune as FT
from fitplan.analysis import risk
from fitplan.memory.breakdown import Setup, evaluate
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, Recompute, TrainingSpec
from fitplan.specs.model import Mlp, Norm, Position

LLAMA_65B = ModelSpec(name="llama-65b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=64,
                      ffn_hidden_size=22016, vocab_size=32000, max_seq_len=2048, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
                      position=Position.ROPE, tied_embeddings=False, linear_bias=False,
                      source="HF huggyllama/llama-65b config.json")
QLORA_65B = TrainingSpec(seq_len=16 + 512, recipe=presets.recipe("bf16-adam"), global_batch=16, act_bytes=2,
                         dropout=False, attention_kernel="eager", finetune="qlora", lora_rank=64,
                         lora_targets="qkv,o,mlp")
GPU_48GB = ClusterSpec(gpu=replace(presets.gpu("a100-80gb"), name="48 GB", memory_bytes=48 * 10**9,
                                   default_reserve_bytes=0), num_gpus=1, gpus_per_node=1, reserve_bytes=0)
CONFIG = ParallelConfig(micro_batch=1, recompute=Recompute.FULL)


def test_nf4_with_double_quantization_costs_4_127_bits_a_weight():
    """QLoRA Sec. 3: blocksize 64 for the weights, 8-bit constants in blocks of 256: 32/64 = 0.5 bits of
    constants become 8/64 + 32/(64*256) = 0.127 bits."""
    psi = 64 * 256 * 1000
    got = FT.quantized_weight_bytes(psi=psi, precision="nf4")
    assert got == psi // 2 + psi // 64 + 4 * (psi // (64 * 256))
    assert got * 8 / psi == 4 + 8 / 64 + 32 / (64 * 256) and round(got * 8 / psi, 3) == 4.127
    assert got / psi == 0.5 + 1 / 64 + 4 / (64 * 256)


def test_the_65b_base_and_its_adapters():
    setup = Setup(LLAMA_65B, QLORA_65B, GPU_48GB)
    b = evaluate(setup, CONFIG)
    by_key = {t.key: t.value for t in b.terms}
    assert by_key["params/stage"] == 65_285_660_672                 # LLaMA 65B's count from its shapes
    # every linear layer adapted at r = 64: 80 x 64 x (3*8192 + 8192 + 2*8192 | 8192 + 8192 | 3*(8192 + 22016))
    assert by_key["params/lora_adapters"] == 80 * 64 * (6 * 8192 + 2 * 8192 + 3 * (8192 + 22016)) == 799_539_200
    # the 4-bit base: 80 layers of 4*8192^2 + 3*8192*22016 weights, NF4 + double-quantized constants
    assert by_key["params/stage_linear_weights"] == 80 * (4 * 8192**2 + 3 * 8192 * 22016) == 64_760_053_760
    assert by_key["states/base_linear_weights"] == 33_407_713_280


def test_65b_qlora_fits_on_one_48gb_gpu():
    """It fits, tight: the peak is a layer's backward (the head's micro-batch already freed), 45.89 GB of 48,
    95.6% of capacity, above Fujii et al.'s 80%. The runtime terms at that moment: the CUDA context (400 MiB),
    the default cuBLAS workspace (8,519,680 B), one layer's backward gradients with no weight gradient (the
    base is frozen), the dequantized weight and the allocator's 2 MiB pages per transient tensor."""
    b = evaluate(Setup(LLAMA_65B, QLORA_65B, GPU_48GB), CONFIG)
    assert b.fits and b.peak.phase == "backward of micro-batch 1"
    parts = {k: round(v / 10**9, 2) for k, v in b.parts.items() if v}
    assert parts == {"states/weights": 36.06, "states/grads": 1.6, "states/optimizer": 6.4,
                     "activations/layers": 0.69, "activations/output": 0.08, "activations/recompute_workspace": 0.18,
                     "runtime/dequant_workspace": 0.36, "runtime/cuda_context": 0.42, "runtime/blas_workspace": 0.01,
                     "runtime/layer_backward": 0.16, "runtime/logits_grad": 0.14, "runtime/allocator": 0.02}
    held = b.peak.held
    assert held["activations/output"] == 0 and held["runtime/cuda_context"] == 400 * 2**20
    assert held["runtime/blas_workspace"] == 8_519_680
    assert b.per_gpu_bytes == sum(held.values()) == 45_889_091_584 and b.headroom_bytes == 2_110_908_416
    assert risk(b).level == "tight"


def test_the_same_without_qlora_does_not_fit():
    """LoRA on the bf16 base (130 GB of weights) or full fine-tuning is far past one 48 GB GPU."""
    lora = replace(QLORA_65B, finetune="lora")
    assert not evaluate(Setup(LLAMA_65B, lora, GPU_48GB), CONFIG).fits
    assert not evaluate(Setup(LLAMA_65B, replace(QLORA_65B, finetune="full"), GPU_48GB), CONFIG).fits


def test_from_the_command_line():
    out = io.StringIO()
    code = main(["plan", "--layers", "80", "--hidden", "8192", "--heads", "64", "--ffn", "22016", "--vocab", "32000",
                 "--mlp", "swiglu", "--max-seq-len", "2048", "--seq-len", "528", "--gpus", "1",
                 "--gpu", "a100-80gb", "--gpu-memory", "48 GB", "--reserve", "0 GiB", "--finetune", "qlora", "--lora-rank", "64",
                 "--lora-targets", "qkv,o,mlp", "--precision", "bf16-adam", "--recompute", "full",
                 "--micro-batch", "1", "--global-batch", "16", "--attention-kernel", "eager", "--no-dropout",
                 "--json"], out=out, err=io.StringIO())
    data = json.loads(out.getvalue())
    assert code == 0 and data["fits"]
    assert data["training"]["finetune"] == {"mode": "qlora", "lora_rank": 64, "lora_targets": ["qkv", "o", "mlp"],
                                            "base_precision": "nf4"}
    assert data["per_gpu_bytes"] == evaluate(Setup(LLAMA_65B, QLORA_65B, GPU_48GB), CONFIG).per_gpu_bytes
