"""The training setup: sequence length, global batch, precision recipe."""

from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs._check import positive_int
from fitplan.specs.declare import check_ranges, declared

_BPP = "bytes per parameter"
# The GEMMs' input precision: bf16, or a low precision (Transformer Engine's recipes: fp8 with per-tensor
# scales, delayed or current; MXFP8 with an 8-bit power-of-two scale per 32 elements; NVFP4 with an FP8 E4M3
# scale per 16 elements and an FP32 one per tensor) at the peak it runs at, and its bytes per element, scales
# included (TE transformer_engine/common/recipe/__init__.py; NVIDIA, Pretraining LLMs with NVFP4, arXiv:2509.25149)
COMPUTE_PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4")
PEAK_OF = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}
LOW_PRECISION_BYTES = {"fp8": 1, "mxfp8": 1 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
FINETUNE = ("full", "lora", "qlora")
# Where LoRA adapters go (fitplan.memory.finetune): the q, k and v projections, the attention output
# projection, the MLP's matrices (all of them: fc1/fc2, or gate/up/down). QLoRA adapts all three.
LORA_TARGETS = ("qkv", "o", "mlp")
CROSS_ENTROPY = ("pytorch", "fused", "chunked", "linear")
# attention kernels: eager keeps the s^2 scores; the others are flash-type (memory: an fp32 logsumexp), timed
# at their published speed (fitplan.timing.calibration.ATTENTION_EFFICIENCY)
ATTENTION_KERNELS = ("eager", "flash", "flash2", "flash3", "cudnn")
FRAMEWORKS = ("megatron-lm", "nemo", "torchtitan", "deepspeed", "fsdp", "hf", "torchtune")
KERNEL_FAMILIES = ("fused", "compiled", "eager")
# How a rank runs its local experts' GEMMs: per-expert (Transformer Engine's GroupedLinear as Megatron-Core runs it: one
# GEMM, weight cast and quantisation per local expert, launched by the host once it has read the token counts) or
# grouped (one grouped-GEMM kernel over all of them: torch._grouped_mm, grouped_gemm's gmm)
EXPERT_GEMMS = ("per-expert", "grouped")
ATTENTION_PRECISIONS = ("bf16", "fp8")
# The frozen base's linear weights: 2 B, 1 B (LLM.int8), or NF4 with double quantization (~0.516 B)
BASE_PRECISIONS = ("bf16", "int8", "nf4")


@record(slots=True, kw_only=True)
class Recipe:
    """Bytes per parameter of each model-state component.

    ZeRO shards them in order [zero Sec. 5]: stage 1 shards master weights and optimizer
    moments, stage 2 adds gradients, stage 3 adds the weights.
    """

    name: str = declared("str", file_only="a preset's name; custom bytes append (custom)")
    weights_bytes: int | float = declared("number", flag="--weight-bytes", group="training", lo=0, hi=64, example=1,
                                          unit=_BPP, help="custom bytes per parameter of the working weights")
    grads_bytes: int | float = declared("number", flag="--grad-bytes", group="training", lo=0, hi=64, example=4,
                                        unit=_BPP, help="custom bytes per parameter of the gradients")
    master_bytes: int | float = declared("number", flag="--master-bytes", group="training", lo=0, hi=64, example=0,
                                         unit=_BPP, help="custom bytes per parameter of the master weights (0: none)")
    moments: tuple[tuple[str, int | float], ...] = declared(
        "moments", flag="--optimizer-bytes", group="training", lo=0, hi=64, example=2, unit=_BPP,
        help="custom bytes per parameter of the optimizer state (one moment named 'optimizer' on the command line)")
    compute: str = declared("choice", default="bf16", choices=COMPUTE_PRECISIONS, flag="--compute-precision",
                            group="training", example="fp8",
                            help="GEMM precision, which picks the GPU's peak rate (default: the recipe's)")
    description: str = declared("str", default="", file_only="prose, not a setting")
    source: str = declared("str", default="", file_only="prose, not a setting")

    def __post_init__(self) -> None:
        for name in ("weights_bytes", "grads_bytes", "master_bytes"):
            _non_negative(f"recipe.{name}", getattr(self, name))
        for moment, size in self.moments:
            _non_negative(f"recipe.moments.{moment}", size)
        if self.weights_bytes == 0:
            raise SpecError("recipe.weights_bytes must be > 0: training needs the weights")
        check_ranges(self, "recipe")

    @property
    def optimizer_bytes(self) -> int | float:
        return sum(size for _, size in self.moments)

    @property
    def total_bytes(self) -> int | float:
        return self.weights_bytes + self.grads_bytes + self.master_bytes + self.optimizer_bytes


def _non_negative(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 64):
        raise SpecError(f"{field} must be a number of bytes per parameter in 0..64, got {value!r}")


@record(slots=True, kw_only=True)
class TrainingSpec:
    """What one training step processes and in which precision.

    act_bytes is the element size of stored activations (2: bf16/fp16, Korthikanti Sec. 4).
    dropout=True stores 1-byte dropout masks, as Korthikanti et al. assume.
    """

    seq_len: int = declared("int", flag="--seq-len", group="training", lo=1, hi=10**9, example=4096,
                            help="training sequence length")
    recipe: Recipe = declared("recipe", table=Recipe, flag="--precision", group="training", example="bf16-adam",
                              help="precision recipe, a preset name (default mixed-adam; fitplan presets list)")
    global_batch: int | None = declared("int", default=None, flag="--global-batch", group="training", lo=1,
                                        hi=10**12, example=512, omitted="enough micro-batches to fill the pipeline",
                                        help="sequences per step")
    act_bytes: int = declared("choice", default=2, choices=(1, 2, 4), flag="--act-bytes", group="training",
                              example=4, help="bytes per stored activation element")
    dropout: bool = declared("bool", default=True, flag="--dropout", off_flag="--no-dropout", group="training",
                             example=False, help="dropout on: its 1-byte masks are stored")
    attention_kernel: str = declared("choice", default="eager", choices=ATTENTION_KERNELS,
                                     flag="--attention-kernel", group="training", example="flash",
                                     help="eager stores the s^2 scores; flash (or a named one: flash2, flash3, "
                                          "cudnn, each at its published speed) keeps only an fp32 logsumexp; "
                                          "flash is the framework's, else the GPU generation's usual one")
    attention_precision: str = declared("choice", default="bf16", choices=ATTENTION_PRECISIONS,
                                        flag="--attention-precision", group="training", example="fp8",
                                        help="the flash attention core's precision: bf16, or fp8 (Transformer "
                                             "Engine's fp8 dot-product attention, Megatron-Core's "
                                             "fp8_dot_product_attention: MXFP8 under an MXFP8 recipe, per-tensor "
                                             "fp8 otherwise) at cuDNN's measured speed; needs a low-precision recipe")
    framework: str | None = declared("choice", default=None, choices=FRAMEWORKS, flag="--framework",
                                     group="training", example="torchtitan", omitted="none named: each setting at "
                                     "the default of the framework that implements it",
                                     help="the training framework, whose defaults (overlaps, kernels, loss, "
                                          "optimizer, allocator, prefetch) apply where no flag sets them; "
                                          "fitplan presets list shows each profile")
    kernels: str = declared("choice", default="fused", choices=KERNEL_FAMILIES, flag="--kernels", group="training",
                            example="eager",
                            help="the layers' memory-bound kernels: fused (Transformer Engine, apex), compiled "
                                 "(torch.compile) or eager (one PyTorch kernel per op); default: the framework's, "
                                 "else fused")
    cuda_graphs: bool = declared("bool", default=False, flag="--cuda-graphs", off_flag="--no-cuda-graphs",
                                 group="training", example=True,
                                 help="layers captured in CUDA graphs: no host launch overhead per layer (default: "
                                      "the framework's, else off)")
    moe_dispatcher: str = declared("choice", default="alltoall", choices=("alltoall", "deepep"),
                                   flag="--moe-dispatcher", group="training", example="deepep",
                                   help="how MoE tokens reach their experts: alltoall (NCCL all-to-all, every routed "
                                        "copy sent: Megatron-LM's alltoall dispatcher, torchtitan's) or deepep "
                                        "(DeepEP, Megatron-LM's flex dispatcher: a token crosses the network once "
                                        "per node and is forwarded over NVLink)")
    expert_gemm: str = declared("choice", default="per-expert", choices=EXPERT_GEMMS, flag="--expert-gemm",
                                group="training", example="grouped",
                                help="how a rank runs its local experts' GEMMs: per-expert (Transformer Engine's "
                                     "GroupedLinear, as Megatron-Core: one GEMM per local expert, which the host "
                                     "launches after reading the token counts) or grouped (one grouped-GEMM kernel for "
                                     "all of them: torch._grouped_mm, as torchtitan; grouped_gemm's gmm); default: the "
                                     "framework's, else per-expert")
    # Megatron-Core's first_last_layers_bf16 with num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16
    # (megatron/core/fp8_utils.py get_fp8_context, fp4_utils.py get_fp4_context: those layers run outside the
    # low-precision autocast); Megatron-Bridge's NVFP4 recipe for Nemotron 3 Super keeps the last 14 of 88
    bf16_first_layers: int = declared("int", default=0, flag="--bf16-first-layers", group="training", lo=0,
                                      hi=10**6, example=1,
                                      help="low-precision recipes: the model's first N layers keep their GEMMs in "
                                           "bf16 (Megatron-Core's --num-layers-at-start-in-bf16 with "
                                           "--first-last-layers-bf16); default 0")
    bf16_last_layers: int = declared("int", default=0, flag="--bf16-last-layers", group="training", lo=0,
                                     hi=10**6, example=14,
                                     help="low-precision recipes: the model's last N layers keep their GEMMs in bf16 "
                                          "(Megatron-Core's --num-layers-at-end-in-bf16); default 0")
    moe_imbalance: float = declared("number", default=1.0, flag="--moe-imbalance", group="training", lo=1, hi=1000,
                                    example=1.5,
                                    help="dropless MoE: the busiest expert rank's tokens over the mean (1: balanced)")
    # the whole run, for its time, cost and energy (fitplan.timing.to_train); nothing else reads it
    train_tokens: int | None = declared("count", default=None, flag="--train-tokens", group="to train", lo=1,
                                        hi=10**17, unit="tokens", example="15T",
                                        omitted="no time, cost or energy to train",
                                        help="tokens the whole run trains on, e.g. 15T (K, M, B, T: decimal); adds "
                                             "the days, GPU-hours, cost and energy to train each plan")

    # fine-tuning (fitplan.memory.finetune): a frozen base and rank-r adapters [hu 2021 (LoRA); dettmers 2023 (QLoRA)]
    finetune: str = declared("choice", default="full", choices=FINETUNE, flag="--finetune", group="fine-tuning",
                             example="lora",
                             help="full: every weight trained; lora: a frozen base plus rank-r adapters; qlora: the "
                                  "same on an NF4 base (4-bit, double-quantized)")
    lora_rank: int = declared("int", default=8, flag="--lora-rank", group="fine-tuning", lo=1, hi=2**16, example=64,
                              help="rank r of each LoRA adapter (default 8, peft's LoraConfig)")
    lora_targets: str = declared("str", default="qkv,o,mlp", flag="--lora-targets", group="fine-tuning",
                                 example="qkv,o",
                                 help="comma-separated layers that get adapters: qkv (the q, k, v projections), o "
                                      "(attention output), mlp (every MLP matrix); default all three, as QLoRA")
    base_precision: str | None = declared("choice", default=None, choices=BASE_PRECISIONS, flag="--base-precision",
                                          group="fine-tuning", example="int8",
                                          omitted="lora: the recipe's weight bytes; qlora: nf4",
                                          help="the frozen base's linear weights: bf16 (2 B), int8 (1 B) or nf4 (4-bit "
                                               "with double-quantized constants, 0.516 B); default: lora keeps the "
                                               "recipe's weights, qlora nf4")
    # the training engine's runtime choices (fitplan.memory.runtime): each changes a runtime buffer
    optimizer_impl: str = declared("choice", default="fused", choices=("foreach", "fused"), flag="--optimizer-impl",
                                   group="runtime", example="foreach",
                                   help="fused (the default: Megatron-LM's and DeepSpeed's FusedAdam, torchtitan's "
                                        "fused AdamW: no temporaries) or foreach (torch.optim's default on GPUs: a "
                                        "scratch copy of the second moment, and 16-bit gradients cast for fp32 "
                                        "master weights)")
    cross_entropy: str = declared("choice", default="pytorch", choices=CROSS_ENTROPY, flag="--cross-entropy",
                                  group="runtime", example="fused",
                                  help="the loss kernel: pytorch (F.cross_entropy on fp32 logits, as torchtitan and "
                                       "Hugging Face: two fp32 logit gradients in its backward), fused (Megatron-LM's "
                                       "vocab-parallel cross-entropy: the gradient in place of the saved softmax), "
                                       "chunked (torchtune's: the output layer and loss chunk by chunk; compiled "
                                       "kernels save bf16 logits) or linear (Liger's fused linear cross-entropy: no "
                                       "logits kept, the output layer's gradients made in the forward)")
    ce_chunks: int = declared("int", default=8, flag="--ce-chunks", group="runtime", lo=1, hi=4096, example=16,
                              help="chunks of the chunked cross-entropy (torchtune's num_output_chunks, default 8)")
    fp8_weight_cache: bool = declared("bool", default=True, flag="--fp8-weight-cache",
                                      off_flag="--no-fp8-weight-cache", group="runtime", example=False,
                                      help="low-precision recipes keep each linear weight's quantized copy (and on "
                                           "Hopper its transpose) across micro-batches, as Transformer Engine does "
                                           "for Megatron-LM; off: cast per use (torchao, DeepSeek's kernels)")
    optimizer_in_backward: bool = declared("bool", default=False, flag="--optimizer-in-backward",
                                           off_flag="--no-optimizer-in-backward", group="runtime", example=True,
                                           help="step each parameter in its gradient hook and free the gradient "
                                                "(torchtune's optimizer_in_bwd): no gradients are held, one "
                                                "micro-batch per step")
    paged_optimizer: bool = declared("bool", default=False, flag="--paged-optimizer", off_flag="--no-paged-optimizer",
                                     group="runtime", example=True,
                                     help="the optimizer state in CUDA managed memory (bitsandbytes' paged "
                                          "optimizers): evicted to the host while the GPU needs the room, outside "
                                          "PyTorch's allocator")
    grad_bucket_bytes: int = declared("size", default=25 * 2**20, key="grad_bucket", flag="--grad-bucket",
                                      group="runtime", example="100 MiB", lo="1 KiB", hi="64 GiB",
                                      help="gradient bucket size of the data-parallel reduction (PyTorch DDP's "
                                           "bucket_cap_mb default, 25 MiB)")
    grad_bucket_view: bool = declared("bool", default=True, flag="--grad-bucket-view", off_flag="--no-grad-bucket-view",
                                      group="runtime", example=False,
                                      help="gradients live in the reduction buckets (Megatron-LM's contiguous grad "
                                           "buffer, DDP gradient_as_bucket_view=True); off: PyTorch DDP's default, a "
                                           "second copy of every gradient")
    fsdp_prefetch: int = declared("int", default=1, flag="--fsdp-prefetch", group="runtime", lo=0, hi=16, example=2,
                                  help="ZeRO-3/FSDP: layers all-gathered ahead of the one computing (FSDP2's default "
                                       "1); each holds a gathered layer, and 0 leaves every gather exposed")
    fragmentation: float = declared("number", default=0.0, flag="--fragmentation", group="runtime", lo=0, hi=0.9,
                                    example=0.15,
                                    help="the caching allocator's reserved-but-unused share of the step's activations "
                                         "and buffers (0: expandable_segments, as torchtitan launches; PyTorch's "
                                         "default allocator: about 0.15)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "lora_targets", canonical_targets(self.lora_targets))
        positive_int("training", "lora_rank", self.lora_rank, maximum=2**16)
        if isinstance(self.moe_imbalance, bool) or not isinstance(self.moe_imbalance, (int, float)) \
                or not (1 <= self.moe_imbalance <= 1000):
            raise SpecError(f"training.moe_imbalance must be in [1, 1000] (1: perfectly balanced), "
                            f"got {self.moe_imbalance!r}")
        positive_int("training", "seq_len", self.seq_len, maximum=10**9)
        if self.global_batch is not None:
            positive_int("training", "global_batch", self.global_batch, maximum=10**12)
        if self.train_tokens is not None:
            positive_int("training", "train_tokens", self.train_tokens, maximum=10**17)
        if isinstance(self.fragmentation, bool) or not isinstance(self.fragmentation, (int, float)) \
                or not (0 <= self.fragmentation <= 0.9):
            raise SpecError(f"training.fragmentation must be a fraction in [0, 0.9], got {self.fragmentation!r}")
        check_ranges(self, "training")   # the declared ranges and choices (finetune, act_bytes, the kernels ...)


def canonical_targets(text) -> str:
    """'o, qkv' -> 'qkv,o': the LORA_TARGETS named, each once, in their order."""
    if not isinstance(text, str):
        raise SpecError(f"training.lora_targets must be a comma-separated list of {', '.join(LORA_TARGETS)}, "
                        f"got {text!r}")
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in LORA_TARGETS]
    if unknown or not names:
        raise SpecError(f"--lora-targets: {text!r} is not a comma-separated list of {', '.join(LORA_TARGETS)} "
                        f"(e.g. qkv,o,mlp)")
    return ",".join(t for t in LORA_TARGETS if t in names)
