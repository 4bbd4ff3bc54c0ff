"""Where every formula and figure comes from. Code cites a short key; reports print the rest."""
from fitplan.record import record


@record(slots=True)
class Source:
    title: str
    authors: str
    year: int
    locator: str  # arXiv id, repository path or document


SOURCES = {
    "zero": Source("ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
                   "Rajbhandari, Rasley, Ruwase, He", 2020, "arXiv:1910.02054"),
    "korthikanti": Source("Reducing Activation Recomputation in Large Transformer Models",
                          "Korthikanti et al.", 2022, "arXiv:2205.05198"),
    "narayanan": Source("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
                        "Narayanan et al.", 2021, "arXiv:2104.04473"),
    "gpt3": Source("Language Models are Few-Shot Learners", "Brown et al.", 2020, "arXiv:2005.14165"),
    "llama2": Source("Llama 2: Open Foundation and Fine-Tuned Chat Models", "Touvron et al.", 2023,
                     "arXiv:2307.09288; HF meta-llama/Llama-2-*-hf config.json"),
    "llama3": Source("The Llama 3 Herd of Models", "Llama Team, AI @ Meta", 2024,
                     "arXiv:2407.21783 Table 3; HF meta-llama/Llama-3.1-*/config.json"),
    "megatron": Source("Megatron-LM", "NVIDIA", 2023, "megatron/training/theoretical_memory_usage.py"),
    "megatron-schedules": Source("Megatron-LM pipeline schedules", "NVIDIA", 2023,
                                 "megatron/core/pipeline_parallel/schedules.py"),
    "transformer-math": Source("Transformer Math 101", "Anthony, Biderman, Schoelkopf (EleutherAI)", 2023,
                               "blog.eleuther.ai/transformer-math"),
    "bitsandbytes": Source("8-bit Optimizers via Block-wise Quantization", "Dettmers et al.", 2022,
                           "arXiv:2110.02861"),
    "fp8": Source("FP8 Formats for Deep Learning", "Micikevicius et al.", 2022, "arXiv:2209.05433"),
    "thakur": Source("Optimization of Collective Communication Operations in MPICH",
                     "Thakur, Rabenseifner, Gropp", 2005, "IJHPCA 19(1)"),
    "pytorch-ddp": Source("PyTorch DistributedDataParallel", "PyTorch", 2020,
                          "torch/nn/parallel/distributed.py (bucket_cap_mb=25); Li et al., VLDB 2020"),
    "deepspeed": Source("DeepSpeed memory estimators", "Microsoft", 2023,
                        "deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs"),
    "flash-attention": Source("FlashAttention benchmarks", "Dao et al.", 2022,
                              "Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py (causal: half the "
                              "s^2 FLOPs)"),
    "qi-zero-bubble": Source("Zero Bubble Pipeline Parallelism", "Qi, Wan, Huang, Lin", 2023, "arXiv:2401.10241"),
    "deepseek-v3": Source("DeepSeek-V3 Technical Report", "DeepSeek-AI", 2024, "arXiv:2412.19437"),
    "gpipe": Source("GPipe: Efficient Training of Giant Neural Networks using Pipeline Parallelism",
                    "Huang et al.", 2019, "arXiv:1811.06965"),
    "megatron-split": Source("Megatron-LM pipeline layer split", "NVIDIA", 2025,
                             "megatron/core/transformer/transformer_block.py get_num_layers_to_build; "
                             "--account-for-embedding/loss-in-pipeline-split, "
                             "--decoder-first/last-pipeline-num-layers"),
    "torchtitan": Source("torchtitan", "PyTorch", 2025,
                         "torchtitan/models/llama3/infra/parallelize.py (op-level selective AC, FSDP2 "
                         "reshard_after_forward, data_parallel_shard/replicate_degree)"),
    "deepseek-v2": Source("DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model",
                          "DeepSeek-AI", 2024, "arXiv:2405.04434"),
    "pope": Source("Efficiently Scaling Transformer Inference", "Pope et al.", 2022, "arXiv:2211.05102"),
    "vllm": Source("vLLM engine arguments", "vLLM project", 2025,
                   "vllm/engine/arg_utils.py (EngineArgs.gpu_memory_utilization = 0.9)"),
    "vllm-memory": Source("vLLM V1: memory profiling and KV cache sizing at start-up", "vLLM project", 2025,
                          "vllm-project/vllm vllm/v1/worker/gpu_worker.py @35d5cda (init_device, "
                          "determine_available_memory); vllm/utils/mem_utils.py @a6d5c39 (memory_profiling); "
                          "vllm/v1/worker/gpu_model_runner.py @4e17906 (profile_run, _dummy_sampler_run); "
                          "vllm/v1/sample/sampler.py @3e34265; vllm/v1/sample/ops/topk_topp_sampler.py @3babc05; "
                          "vllm/v1/core/kv_cache_utils.py @bbf906a; vllm/engine/arg_utils.py @99d7eb5; hybrid "
                          "models: vllm/model_executor/models/config.py @0144dd5 "
                          "(HybridAttentionMambaModelConfig), vllm/v1/core/kv_cache_utils.py @001cabc and "
                          "vllm/v1/kv_cache_interface.py @001cabc (KV cache groups, MambaSpec), "
                          "vllm/model_executor/layers/mamba/mamba_utils.py @02d7108"),
    "sglang": Source("SGLang: the KV cache pool at start-up", "SGLang team", 2025,
                     "sgl-project/sglang python/sglang/srt/model_executor/model_runner.py @01cc04e "
                     "(init_torch_distributed, profile_max_num_token); python/sglang/srt/server_args.py "
                     "ServerArgs._handle_gpu_memory_settings (the reserved-memory heuristic, v0.5); hybrid "
                     "models: python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py @001ccef "
                     "(handle_max_mamba_cache, profile_max_num_token, init_memory), "
                     "python/sglang/srt/configs/mamba_utils.py @02e208d (Mamba2StateShape, mamba2_state_dtype)"),
    "awq": Source("AWQ: Activation-aware Weight Quantization for LLM Compression and Acceleration", "Lin et al.",
                  2023, "arXiv:2306.00978; AutoAWQ's GEMM format (fp16 scale, 4-bit zero point per group)"),
    "transformer-engine": Source("Transformer Engine", "NVIDIA", 2024, "transformer_engine/pytorch/module/base.py"),
    "nccl": Source("NCCL: its tuning model and its buffers", "NVIDIA", 2026,
                   "NVIDIA/nccl src/graph/tuning.cc @5067397c (ncclTunerConstantsDefaults, ncclTopoTuneModel, "
                   "ncclTopoGetAlgoTime); src/init.cc, src/include/device.h (buffers); issues #864, #1685"),
    "torchtune": Source("torchtune", "PyTorch", 2025, "pytorch/torchtune (@bd2a0fc7c3)"),
    "bnb-code": Source("bitsandbytes", "bitsandbytes-foundation", 2025,
                       "bitsandbytes-foundation/bitsandbytes (@95f9af309d)"),
    "liger": Source("Liger Kernel: Efficient Triton Kernels for LLM Training", "Hsu et al.", 2024,
                    "arXiv:2410.10989; linkedin/Liger-Kernel src/liger_kernel/ops/fused_linear_cross_entropy.py "
                    "(@ead96b618e)"),
    "deepep": Source("DeepEP: expert-parallel dispatch and combine kernels", "DeepSeek-AI", 2025,
                     "deepseek-ai/DeepEP (csrc/legacy/config.hpp buffer size hints, @dd758caf45)"),
    "nccl-tests": Source("nccl-tests bus bandwidths, as published", "NVIDIA; Bekman", 2026,
                         "stas00/ml-engineering network/README.md @744d01e; NVIDIA/nccl-tests#212, #267; "
                         "NVIDIA/nccl#812"),
    "megatron-gb200": Source("Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72", "Yao et al. "
                             "(NVIDIA)", 2025, "NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/"
                             "deepseek-v3-gb200-optimization.md and images/image6.png (HybridEP) @eb0783b6"),
    "megatron-overlap": Source("Megatron-Core communication overlap", "NVIDIA", 2026,
                               "megatron/core/distributed/distributed_data_parallel_config.py (overlap_grad_reduce, "
                               "overlap_param_gather: False); megatron/core/model_parallel_config.py "
                               "(tp_comm_overlap, overlap_moe_expert_parallel_comm: False) @d98e8a6"),
    "zero-offload": Source("ZeRO-Offload: Democratizing Billion-Scale Model Training", "Ren, Rajbhandari, Aminabadi, "
                           "Ruwase, Yang, Zhang, Li, He", 2021, "arXiv:2101.06840 (USENIX ATC 2021)"),
    "zero-infinity": Source("ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale Deep Learning",
                            "Rajbhandari, Ruwase, Rasley, Smith, He", 2021, "arXiv:2104.07857"),
    "deepnvme": Source("DeepNVMe: affordable I/O scaling for deep learning", "DeepSpeed", 2025,
                       "deepspeedai/DeepSpeed blogs/deepnvme/06-2025/README.md (4 Gen4 SSDs: 10 GB/s reads, 5 writes)"),
    "torch-offload": Source("torch.autograd.graph.save_on_cpu", "PyTorch", 2023,
                            "torch/autograd/graph.py: saved tensors packed to (pinned) CPU memory, unpacked in backward"),
    "lora": Source("LoRA: Low-Rank Adaptation of Large Language Models", "Hu et al.", 2021, "arXiv:2106.09685"),
    "qlora": Source("QLoRA: Efficient Finetuning of Quantized LLMs", "Dettmers, Pagnoni, Holtzman, Zettlemoyer", 2023,
                    "arXiv:2305.14314; artidoro/qlora scripts/finetune_guanaco_65b.sh"),
    "fsdp-qlora": Source("FSDP-QLoRA: 4-bit weights sharded by FSDP", "Answer.AI; bitsandbytes", 2024,
                         "bitsandbytes-foundation/bitsandbytes (@95f9af309d) bitsandbytes/nn/modules.py (Params4bit, "
                         "quant_storage) and docs/source/fsdp_qlora.md; AnswerDotAI/fsdp_qlora (@05ed9f2a60) train.py "
                         "(load_and_quantize: FSDP syncs only parameters and buffers, so every rank builds its own "
                         "quant_state)"),
    "llm-int8": Source("LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale", "Dettmers et al.", 2022,
                       "arXiv:2208.07339; bitsandbytes Linear8bitLt"),
    "pcie": Source("PCI Express Base Specification 4.0 and 5.0", "PCI-SIG", 2019,
                   "16 and 32 GT/s per lane, 128b/130b encoding; vendor datasheets for NVLink-C2C"),
    "pytorch-runtime": Source("PyTorch runtime memory (caching allocator, cuBLAS workspaces, FSDP2, optimizers)",
                              "PyTorch", 2025, "c10/cuda/CUDACachingAllocator.cpp; aten/src/ATen/cuda/"
                              "CublasHandlePool.cpp; torch/distributed/fsdp/_fully_shard; torch/optim/adam.py"),
    "megatron-loss": Source("Megatron-LM vocab-parallel cross-entropy", "NVIDIA", 2024,
                            "megatron/core/tensor_parallel/cross_entropy.py"),
    "fujii": Source("Accelerating Large Language Model Training with 4D Parallelism and Memory Consumption "
                    "Estimator", "Fujii, Watanabe, Yokota", 2024, "arXiv:2411.06465"),
    "mamba2": Source("Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured State "
                     "Space Duality", "Dao, Gu", 2024, "arXiv:2405.21060; state-spaces/mamba mamba_ssm/modules/mamba2.py, "
                     "mamba_ssm/ops/triton/ssd_combined.py"),
    "mamba": Source("Mamba: Linear-Time Sequence Modeling with Selective State Spaces", "Gu, Dao", 2023,
                    "arXiv:2312.00752; state-spaces/mamba mamba_ssm/modules/mamba_simple.py, "
                    "mamba_ssm/ops/selective_scan_interface.py"),
    "megatron-mamba": Source("Megatron-LM hybrid Mamba models", "NVIDIA", 2025,
                             "megatron/core/ssm/mamba_mixer.py (MambaMixer), mamba_block.py, "
                             "mamba_hybrid_layer_allocation.py"),
    "nemotron-h": Source("Nemotron-H: A Family of Accurate and Efficient Hybrid Mamba-Transformer Models", "NVIDIA",
                         2025, "arXiv:2504.03624; transformers models/nemotron_h/modeling_nemotron_h.py"),
    "jamba": Source("Jamba: A Hybrid Transformer-Mamba Language Model", "Lieber et al. (AI21)", 2024,
                    "arXiv:2403.19887; transformers models/jamba/modeling_jamba.py"),
    "fitplan": Source("fitplan's own derivation (see docs/formulas.md)", "fitplan", 2026, "docs/formulas.md"),
    "vendor": Source("Vendor data sheets", "NVIDIA, AMD", 2024, "per-GPU preset source field"),
}


@record(slots=True)
class Cite:
    key: str
    where: str  # "Table 2", "Sec. 5", "Eq. 2"

    def __post_init__(self) -> None:
        if self.key not in SOURCES:
            raise KeyError(f"unknown source {self.key!r}; add it to fitplan.sources.SOURCES")

    def __str__(self) -> str:
        return f"{short_name(self.key)} {self.where}"


def short_name(key: str) -> str:
    return {"zero": "ZeRO", "korthikanti": "Korthikanti et al.", "narayanan": "Narayanan et al.",
            "gpt3": "GPT-3", "llama2": "Llama 2", "llama3": "Llama 3", "megatron": "Megatron-LM",
            "megatron-schedules": "Megatron-LM schedules", "transformer-math": "Transformer Math 101",
            "bitsandbytes": "Dettmers et al.", "fp8": "Micikevicius et al.", "fitplan": "fitplan",
            "deepspeed": "DeepSpeed", "thakur": "Thakur et al.", "pytorch-ddp": "PyTorch DDP",
            "vendor": "vendor sheet", "flash-attention": "FlashAttention benchmarks",
            "qi-zero-bubble": "Qi et al. (zero bubble)", "deepseek-v3": "DeepSeek-V3", "gpipe": "GPipe",
            "megatron-split": "Megatron-LM", "torchtitan": "torchtitan",
            "deepseek-v2": "DeepSeek-V2",
            "pope": "Pope et al.", "awq": "AWQ", "vllm": "vLLM", "vllm-memory": "vLLM", "sglang": "SGLang",
            "transformer-engine": "Transformer Engine", "nccl": "NCCL", "nccl-tests": "nccl-tests", "deepep": "DeepEP",
            "torchtune": "torchtune", "bnb-code": "bitsandbytes", "liger": "Liger-Kernel",
            "megatron-overlap": "Megatron-Core", "megatron-gb200": "Megatron-LM (GB200 DeepSeek-V3 guide)",
            "zero-offload": "ZeRO-Offload",
            "zero-infinity": "ZeRO-Infinity", "deepnvme": "DeepNVMe", "torch-offload": "PyTorch save_on_cpu",
            "lora": "LoRA", "qlora": "QLoRA", "fsdp-qlora": "FSDP-QLoRA", "llm-int8": "LLM.int8()", "pcie": "PCIe",
            "pytorch-runtime": "PyTorch", "megatron-loss": "Megatron-LM", "fujii": "Fujii et al.",
            "mamba2": "Dao & Gu (Mamba-2)", "mamba": "Gu & Dao (Mamba)", "megatron-mamba": "Megatron-LM",
            "nemotron-h": "Nemotron-H", "jamba": "Jamba"}[key]
