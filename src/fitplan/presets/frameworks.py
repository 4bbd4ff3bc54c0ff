"""Framework profiles: what each training framework does by default, each value cited to its source.

`--framework NAME` applies a profile's values wherever no flag or spec-file key sets the field
(fitplan.resolve; fitplan.specs.framework). The values are the defaults a user of the framework's
usual entry point gets (Megatron-LM's pretrain_gpt.py command line; Megatron-Bridge's recipes; the
frameworks' own launch scripts), read at the commits named. docs/frameworks.md tabulates them.
Recompute is left out: it is a layout axis the search chooses (a profile's habit is in its notes).
"""
from fitplan.specs.framework import Default, Framework

MIB = 2**20
MLM = "NVIDIA/Megatron-LM"
BRIDGE = "NVIDIA-NeMo/Megatron-Bridge"
TITAN = "pytorch/torchtitan"
DS = "deepspeedai/DeepSpeed"
TORCH = "pytorch/pytorch (torch 2.13.0)"
HF = "huggingface/transformers"
TUNE = "pytorch/torchtune"

# Megatron-Core's experts (Megatron-LM's and Megatron-Bridge's): a GEMM per local expert, launched from the host
MCORE_EXPERTS = (f"{MLM} megatron/core/transformer/moe/experts.py@d98e8a64dd (TEGroupedMLP: tokens_per_expert.tolist() "
                 f"to TE's GroupedLinear, one GEMM per local expert)")

# the caching allocator's reserved-but-unused share where expandable_segments is not set (fitplan.memory.runtime)
DEFAULT_ALLOCATOR_FRAGMENTATION = 0.15
EXPANDABLE = 0.0

_PROFILES = (
    Framework(
        "megatron-lm", "Megatron-LM's pretrain_gpt.py with its command-line defaults (Transformer Engine layers)",
        training={
            "kernels": Default("fused", f"{MLM} megatron/training/arguments.py@d98e8a64dd (bias-activation, "
                                        f"masked-softmax, RoPE and bias-dropout fusions on; TE layers)"),
            "attention_kernel": Default("flash", f"{MLM} megatron/core/transformer/transformer_config.py@d98e8a64dd "
                                                 f"(attention_backend auto: TE picks cuDNN on Hopper+, FlashAttention "
                                                 f"on Ampere)"),
            "cross_entropy": Default("fused", f"{MLM} megatron/core/tensor_parallel/cross_entropy.py@d98e8a64dd "
                                              f"(vocab-parallel: the fp32 softmax saved, its gradient in place)"),
            "optimizer_impl": Default("fused", f"{MLM} megatron/core/optimizer/__init__.py@d98e8a64dd (TE "
                                               f"FusedAdam)"),
            "fp8_weight_cache": Default(True, f"{MLM} megatron/core/extensions/transformer_engine.py@d98e8a64dd "
                                              f"(is_first_microbatch passed: TE keeps the quantized weights)"),
            "expert_gemm": Default("per-expert", MCORE_EXPERTS),
            "grad_bucket_bytes": Default(160_000_000, f"{MLM} megatron/core/distributed/distributed_data_parallel.py"
                                                      f"@d98e8a64dd (max(4e7, 1e6*dp) parameters of fp32 main "
                                                      f"gradients, dp <= 40)"),
            "fragmentation": Default(DEFAULT_ALLOCATOR_FRAGMENTATION,
                                     f"{MLM} megatron/training/arguments.py@d98e8a64dd (PYTORCH_CUDA_ALLOC_CONF not "
                                     f"set: PyTorch's caching allocator)"),
        },
        config={
            "overlap_grad_reduce": Default(False, f"{MLM} megatron/core/distributed/distributed_data_parallel_config"
                                                  f".py@d98e8a64dd (overlap_grad_reduce False)"),
            "overlap_param_gather": Default(False, f"{MLM} megatron/core/distributed/distributed_data_parallel_config"
                                                   f".py@d98e8a64dd (overlap_param_gather False)"),
            "tp_comm_overlap": Default(False, f"{MLM} megatron/core/model_parallel_config.py@d98e8a64dd "
                                              f"(tp_comm_overlap False)"),
            "cp_comm_overlap": Default(True, f"{MLM} megatron/training/arguments.py@d98e8a64dd (--cp-comm-type "
                                             f"p2p: the K/V ring overlaps the attention)"),
        },
        notes=("recompute: none unless --recompute-activations (selective: core_attn)",)),
    Framework(
        "nemo", "NeMo's Megatron-Bridge recipes (Megatron-Core with Transformer Engine)",
        training={
            "kernels": Default("fused", f"{BRIDGE} src/megatron/bridge/models/llama/llama_bridge.py@067f987df0 "
                                        f"(bias-activation, softmax, RoPE, bias-dropout fusions on)"),
            "attention_kernel": Default("flash", f"{BRIDGE} src/megatron/bridge/recipes/llama/h100/llama3.py"
                                                 f"@067f987df0 (attention_backend None: TE's cuDNN on Hopper+)"),
            "cross_entropy": Default("fused", f"{BRIDGE} src/megatron/bridge/models/gpt_provider.py@067f987df0 "
                                              f"(cross_entropy_loss_fusion, TE's fused cross-entropy)"),
            "optimizer_impl": Default("fused", f"{BRIDGE} src/megatron/bridge/recipes/utils/optimizer_utils.py"
                                               f"@067f987df0 (distributed FusedAdam)"),
            "grad_bucket_bytes": Default(128 * MIB * 4, f"{BRIDGE} src/megatron/bridge/training/comm_overlap.py"
                                                        f"@067f987df0 (bucket of 128 Mi parameters, fp32 main "
                                                        f"gradients)"),
            "fragmentation": Default(EXPANDABLE, f"{BRIDGE} src/megatron/bridge/recipes/utils/environment_utils.py"
                                                 f"@067f987df0 (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)"),
            "expert_gemm": Default("per-expert", MCORE_EXPERTS),
        },
        config={
            "overlap_grad_reduce": Default(True, f"{BRIDGE} src/megatron/bridge/recipes/common.py@067f987df0 "
                                                 f"(_pretrain_common: overlap_grad_reduce)"),
            "overlap_param_gather": Default(True, f"{BRIDGE} src/megatron/bridge/recipes/common.py@067f987df0 "
                                                  f"(_pretrain_common: overlap_param_gather)"),
            "cp_comm_overlap": Default(True, f"{MLM} megatron/core/extensions/transformer_engine.py@d98e8a64dd "
                                             f"(cp_comm_type p2p)"),
        },
        notes=("tensor-parallel overlap (userbuffers) is set per recipe (on for Llama 3 70B): --tp-comm-overlap",
               "recompute: none in the Llama recipes; full or selective in the larger and MoE ones")),
    Framework(
        "torchtitan", "torchtitan (PyTorch FSDP2, DTensor tensor/context parallel; eager kernels unless compiled)",
        training={
            "kernels": Default("eager", f"{TITAN} torchtitan/models/llama3/model/model.py@73a0e6979d (nn.RMSNorm, "
                                        f"F.silu(w1 x) * w3 x, complex RoPE: one kernel per op); compile off"),
            "attention_kernel": Default("cudnn", f"{TITAN} torchtitan/models/attention.py@73a0e6979d (SDPA with "
                                                 f"cuDNN, then Flash, then math, set_priority)"),
            "cross_entropy": Default("pytorch", f"{TITAN} torchtitan/components/loss.py@73a0e6979d "
                                                f"(F.cross_entropy on the logits' fp32 copy)"),
            "optimizer_impl": Default("fused", f"{TITAN} torchtitan/config/job_config.py@73a0e6979d (AdamW "
                                               f"implementation fused)"),
            "fsdp_prefetch": Default(1, f"{TORCH} torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py@cf30153c4c "
                                        f"(backward prefetch of the next module)"),
            "fp8_weight_cache": Default(False, f"{TITAN} torchtitan/components/quantization/float8.py@73a0e6979d "
                                               f"(torchao float8 linears: the weight cast per use, no cache)"),
            "fragmentation": Default(EXPANDABLE, f"{TITAN} run_train.sh@73a0e6979d (expandable_segments:True)"),
            "expert_gemm": Default("grouped", f"{TITAN} torchtitan/models/moe/moe.py@003edbe52d (MoEArgs.use_grouped_mm "
                                              f"True: torch._grouped_mm over device offsets, no host sync)"),
        },
        config={
            "overlap_grad_reduce": Default(True, f"{TORCH} torch/distributed/fsdp/_fully_shard (reduce-scatter per "
                                                 f"block during the backward)"),
            "overlap_param_gather": Default(True, f"{TORCH} torch/distributed/fsdp/_fully_shard/_fully_shard.py"
                                                  f"@cf30153c4c (all-gather on its own stream, prefetched)"),
            "tp_comm_overlap": Default(False, f"{TITAN} torchtitan/config/job_config.py@73a0e6979d "
                                              f"(enable_async_tensor_parallel False)"),
        },
        notes=("recompute: selective by default (every second block in 0.2.x, per-op on main); full for 70B and "
               "405B",)),
    Framework(
        "deepspeed", "DeepSpeed ZeRO on the user's own model code (eager kernels)",
        training={
            "kernels": Default("eager", f"{DS} deepspeed/runtime/engine.py@edaa722126 (no kernels of its own: the "
                                        f"model's, uncompiled)"),
            "attention_kernel": Default("flash2", f"{TORCH} torch/nn/attention/__init__.py@cf30153c4c (SDPA tries "
                                                  f"Flash first: FlashAttention-2)"),
            "cross_entropy": Default("pytorch", f"{DS} deepspeed/runtime/engine.py@edaa722126 (the model's own loss)"),
            "optimizer_impl": Default("fused", f"{DS} deepspeed/runtime/engine.py@edaa722126 "
                                               f"(_configure_basic_optimizer: FusedAdam)"),
            "grad_bucket_bytes": Default(1_000_000_000, f"{DS} deepspeed/runtime/zero/config.py@edaa722126 "
                                                        f"(reduce_bucket_size 5e8 elements of bf16 gradients)"),
            "fragmentation": Default(DEFAULT_ALLOCATOR_FRAGMENTATION, f"{DS} deepspeed/runtime/zero/config.py"
                                                                      f"@edaa722126 (no allocator setting; "
                                                                      f"contiguous_gradients)"),
        },
        config={
            "overlap_grad_reduce": Default(False, f"{DS} deepspeed/runtime/zero/config.py@edaa722126 (overlap_comm "
                                                  f"None: on for ZeRO-3 only; stages 0-1 reduce after backward)"),
            "overlap_param_gather": Default(None, f"{DS} deepspeed/runtime/zero/config.py@edaa722126 "
                                                  f"(stage3_prefetch_bucket_size 5e7: ZeRO-3 prefetches)"),
        },
        notes=("ZeRO-3 with overlap_comm reduces during the backward; stages 0-2 do not",)),
    Framework(
        "fsdp", "a plain training loop over PyTorch FSDP2 (fully_shard), eager kernels",
        training={
            "kernels": Default("eager", f"{TORCH} (no fused kernels: the model's own ops)"),
            "attention_kernel": Default("flash2", f"{TORCH} torch/nn/attention/__init__.py@cf30153c4c (SDPA priority "
                                                  f"Flash, efficient, math, cuDNN)"),
            "cross_entropy": Default("pytorch", f"{TORCH} torch/nn/functional.py (F.cross_entropy)"),
            "optimizer_impl": Default("foreach", f"{TORCH} torch/optim/optimizer.py@cf30153c4c "
                                                 f"(_default_to_fused_or_foreach: foreach on CUDA)"),
            "fsdp_prefetch": Default(1, f"{TORCH} torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py@cf30153c4c "
                                        f"(_backward_prefetch: depth 1)"),
            "fp8_weight_cache": Default(False, f"{TORCH} (no Transformer Engine: low-precision casts per use)"),
            "fragmentation": Default(DEFAULT_ALLOCATOR_FRAGMENTATION, f"{TORCH} c10/cuda/CUDACachingAllocator.cpp "
                                                                      f"(expandable_segments off by default)"),
        },
        config={
            "overlap_grad_reduce": Default(True, f"{TORCH} torch/distributed/fsdp/_fully_shard (reduce-scatter per "
                                                 f"module during the backward)"),
            "overlap_param_gather": Default(True, f"{TORCH} torch/distributed/fsdp/_fully_shard/_fully_shard.py"
                                                  f"@cf30153c4c (implicit forward prefetch, backward depth 1)"),
        }),
    Framework(
        "hf", "the Hugging Face Transformers Trainer (DDP, or FSDP through Accelerate), eager kernels",
        training={
            "kernels": Default("eager", f"{HF} src/transformers/models/llama/modeling_llama.py@5dd4a63548 (RMSNorm in "
                                        f"fp32, act_fn(gate)*up, rotate_half RoPE); torch_compile False"),
            "attention_kernel": Default("flash2", f"{HF} src/transformers/modeling_utils.py@040ba14675 (sdpa by "
                                                  f"default: torch's Flash first)"),
            "cross_entropy": Default("pytorch", f"{HF} src/transformers/loss/loss_utils.py@0114da07ec "
                                                f"(ForCausalLMLoss: logits.float(), then cross_entropy)"),
            "optimizer_impl": Default("fused", f"{HF} src/transformers/training_args.py@00349ae87e "
                                               f"(adamw_torch_fused with torch >= 2.8)"),
            "grad_bucket_bytes": Default(25 * MIB, f"{TORCH} torch/nn/parallel/distributed.py@cf30153c4c "
                                                   f"(bucket_cap_mb 25)"),
            "grad_bucket_view": Default(False, f"{TORCH} torch/nn/parallel/distributed.py@cf30153c4c "
                                               f"(gradient_as_bucket_view False)"),
            "fp8_weight_cache": Default(False, f"{HF} src/transformers/modeling_utils.py@040ba14675 (no Transformer "
                                               f"Engine layers: low-precision casts per use)"),
            "fragmentation": Default(DEFAULT_ALLOCATOR_FRAGMENTATION, f"{HF} src/transformers/training_args.py"
                                                                      f"@00349ae87e (no allocator setting)"),
        },
        config={
            "overlap_grad_reduce": Default(True, f"{TORCH} torch/nn/parallel/distributed.py@cf30153c4c (DDP reduces "
                                                 f"buckets during the backward)"),
        },
        notes=("gradient checkpointing off unless set (then full recompute of every decoder layer)",)),
    Framework(
        "torchtune", "torchtune's recipes (FSDP2, eager kernels, chunked loss)",
        training={
            "kernels": Default("eager", f"{TUNE} torchtune/modules/rms_norm.py@bd2a0fc7c3 (RMSNorm in fp32); compile "
                                        f"False"),
            "attention_kernel": Default("flash2", f"{TUNE} torchtune/modules/attention_utils.py@bd2a0fc7c3 (SDPA)"),
            "cross_entropy": Default("chunked", f"{TUNE} torchtune/modules/loss/cross_entropy_loss.py@bd2a0fc7c3 "
                                                f"(LinearCrossEntropyLoss: the output layer and the fp32 loss chunk "
                                                f"by chunk)"),
            "ce_chunks": Default(8, f"{TUNE} torchtune/modules/loss/cross_entropy_loss.py@bd2a0fc7c3 "
                                    f"(num_output_chunks=8)"),
            "fp8_weight_cache": Default(False, f"{TUNE} torchtune/training/quantization.py@bd2a0fc7c3 (torchao "
                                               f"float8 linears: cast per use, no cache)"),
            "optimizer_impl": Default("fused", f"{TUNE} recipes/configs/llama3_1/8B_full.yaml@bd2a0fc7c3 (AdamW "
                                               f"fused: True)"),
            "fsdp_prefetch": Default(1, f"{TUNE} torchtune/training/_distributed.py@bd2a0fc7c3 (FSDP2's implicit "
                                        f"prefetch)"),
            "fragmentation": Default(EXPANDABLE, f"{TUNE} torchtune/__init__.py@bd2a0fc7c3 (expandable_segments:True "
                                                 f"on import)"),
        },
        config={
            "overlap_grad_reduce": Default(True, f"{TUNE} torchtune/training/_distributed.py@bd2a0fc7c3 "
                                                 f"(FSDP2 reduce-scatter per layer)"),
            "overlap_param_gather": Default(True, f"{TUNE} torchtune/training/_distributed.py@bd2a0fc7c3 (FSDP2)"),
        },
        notes=("recompute: full per layer in the Llama full fine-tune configs (enable_activation_checkpointing)",)),
)
FRAMEWORKS = {f.name: f for f in _PROFILES}


def _value_words(v) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "on", False: "off", None: "by ZeRO stage"}[v]
    return f"{v:,}" if isinstance(v, int) else str(v)


# What each profile field changes in the estimate (the user reads this beside the value).
EFFECTS = {
    "kernels": "elementwise traffic per layer (fused 1.35, compiled 1.5 counted and scaled by the fit, eager 12 "
               "measured passes over the activations; docs/calibration.md, Elementwise traffic)",
    "attention_kernel": "the attention core's efficiency by architecture and kernel (docs/calibration.md, Attention); "
                        "memory keeps no score matrix for any flash-type kernel",
    "cross_entropy": "the loss's saved logits and its backward's buffers (memory): fused keeps the fp32 softmax once, "
                     "pytorch an fp32 copy too, chunked one chunk's at a time, linear no logits",
    "optimizer_impl": "the optimizer step's temporaries (memory): fused none, foreach one shard-sized list",
    "grad_bucket_bytes": "the gradient-reduction buckets held during the backward (memory) and their message size "
                         "(time)",
    "grad_bucket_view": "whether DDP's buckets alias the gradients (memory)",
    "fsdp_prefetch": "how many blocks' parameters are gathered ahead (memory)",
    "fragmentation": "the allocator's reserved-but-unused share (memory)",
    "cuda_graphs": "the host's per-layer launch floor (time: layer_overhead, moe_sync_overhead)",
    "expert_gemm": "the host's launches per local expert after an MoE layer reads its token counts (time: "
                   "moe_sync_overhead, none for one grouped kernel)",
    "ce_chunks": "the chunked loss's chunks: one chunk's fp32 logits and gradients at a time (memory)",
    "fp8_weight_cache": "the quantized weight copies low-precision recipes keep across micro-batches (memory)",
    "optimizer_in_backward": "no gradients held: each parameter stepped in its hook (memory)",
    "paged_optimizer": "the optimizer state in managed memory, on the host while the GPU needs the room (memory)",
    "overlap_grad_reduce": "the gradient reduction hidden under the backward (time)",
    "overlap_param_gather": "the parameter gather hidden under the forward (time)",
    "tp_comm_overlap": "tensor-parallel collectives hidden under the GEMMs (time)",
    "cp_comm_overlap": "the context-parallel K/V ring hidden under the attention (time)",
}


def frameworks_markdown() -> str:
    """docs/frameworks.md: every profile's values, what each changes and where the framework sets it
    (written by tools/framework_reference.py; tests/unit/test_frameworks.py keeps it in step)."""
    out = ["# Framework profiles", "",
           "Generated by `python tools/framework_reference.py` from `src/fitplan/presets/frameworks.py`; do not edit.",
           "",
           "`--framework NAME` (spec-file key `training.framework`) fills every field below that no flag or "
           "spec-file key sets, and prints each value it applied under `assumed`. A flag always wins: "
           "`--framework torchtitan --kernels compiled` is torchtitan with `torch.compile`. Without `--framework` "
           "each field keeps its own default (docs/spec-files.md).",
           "", "The end-to-end constants (docs/calibration.md) were fitted with each published run's framework "
           "profile applied, so the profile is part of what the error band covers.", "",
           "## What each field changes", "", "| field | changes |", "|---|---|"]
    out += [f"| `{name}` | {what} |" for name, what in EFFECTS.items()]
    for f in _PROFILES:
        out += ["", f"## `{f.name}`", "", f.description + ".", "", "| field | value | source |", "|---|---|---|"]
        for name, d in list(f.training.items()) + list(f.config.items()):
            out.append(f"| `{name}` | {_value_words(d.value)} | {d.source} |")
        if f.notes:
            out += [""] + [f"- {n}" for n in f.notes]
    out += ["", "Sources are `repository path@commit (what the file sets)`; a repository's commit is the one the "
            "profile was read at. Open them on the repository's hosting site at that commit.", ""]
    return "\n".join(out)
