"""How one training step is spread over ranks: degrees, ZeRO stage, recompute mode."""
from enum import IntEnum, StrEnum

from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs._check import positive_int
from fitplan.specs.declare import check_ranges, declared

CONFIG = "one configuration (with --suggest: fixes that axis of the search)"


class ZeroStage(IntEnum):
    """What data parallelism shards; a higher stage shards more [zero Sec. 5]."""
    NONE = 0   # DDP: every data-parallel rank holds the full model states
    OS = 1     # ZeRO-1 (P_os): master weights and optimizer moments
    OS_G = 2   # ZeRO-2 (P_os+g): + gradients
    OS_G_P = 3 # ZeRO-3 (P_os+g+p), FSDP full shard: + weights


class Recompute(StrEnum):
    """Activation recomputation. Ordered by how much it recomputes (`level`)."""
    NONE = "none"
    NORMS = "norms"           # DeepSeek-V3 Sec. 3.2.3: recompute the RMSNorms and MLA's up-projections
    SELECTIVE = "selective"   # drop the attention core (softmax, its dropout), recompute it [korthikanti Sec. 5]
    OP = "op"                 # torchtitan op-level SAC: save matmul (every second one) and attention outputs
    FULL = "full"             # keep only each layer's input, recompute the whole forward [korthikanti Sec. 5]

    @property
    def level(self) -> int:
        return ("none", "norms", "selective", "op", "full").index(self.value)


# What the search and compare try by default; norms and op are framework-specific, used when asked for.
SEARCHED_RECOMPUTE = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)


# ParallelConfig fields that are one setting for a whole search, not an axis it varies
SETTINGS = ("schedule", "shard_degree", "reshard_after_forward", "microbatch_grad_sync", "first_stage_layers",
            "last_stage_layers",
            "recompute_num_layers", "recompute_method", "overlap_grad_reduce", "overlap_param_gather",
            "tp_comm_overlap", "cp_comm_overlap", "ep_comm_overlap")


class Schedule(StrEnum):
    """The pipeline schedule: in-flight micro-batches, bubble, parameter copies
    (fitplan.timing.pipeline, fitplan.memory.activations)."""
    ONE_F_ONE_B = "1f1b"        # PipeDream-Flush [narayanan Sec. 2.2.1]; interleaved with --virtual-stages
    GPIPE = "gpipe"             # all forwards, then all backwards [huang 2019 (GPipe); narayanan Sec. 2.2.1]
    ZERO_BUBBLE = "zero-bubble" # ZB-H1: weight gradients deferred into the bubble [qi 2023 Sec. 3]
    DUALPIPE = "dualpipe"       # bidirectional, two stages per rank [deepseek-v3 Sec. 3.2.1, Table 2]


class Offload(StrEnum):
    """What leaves the GPU for host (CPU) memory or NVMe (fitplan.memory.offload). Ordered by
    disturbance (`level`): the search tries them in that order, and only when nothing fits on
    the GPUs alone (fitplan.search)."""
    NONE = "none"
    OPTIMIZER = "optimizer"                 # ZeRO-Offload: master weights, moments and gradients in host memory,
                                            # the optimizer step on the CPU [zero-offload Sec. 4]
    OPTIMIZER_PARAMS = "optimizer+params"   # ZeRO-Infinity / ZeRO-3 offload_param cpu: the 16-bit weights too
    PARAMS_NVME = "params-nvme"             # ZeRO-Infinity offload_param nvme: weights on NVMe, optimizer on the CPU
    ACTIVATIONS = "activations"             # stored activations copied to host memory in forward, back in backward

    @property
    def level(self) -> int:
        return OFFLOAD_ORDER.index(self)

    @property
    def optimizer(self) -> bool:
        """Master weights, moments and gradients live in host memory; the CPU steps the optimizer."""
        return self in (Offload.OPTIMIZER, Offload.OPTIMIZER_PARAMS, Offload.PARAMS_NVME)

    @property
    def params(self) -> bool:
        """The working (16-bit) weights leave the GPU between uses (ZeRO-3 only)."""
        return self in (Offload.OPTIMIZER_PARAMS, Offload.PARAMS_NVME)

    @property
    def activations(self) -> bool:
        return self is Offload.ACTIVATIONS


# Least disturbance first: the optimizer step moves to the CPU (once per step); then the weights too (fetched
# for every forward and backward); then the stored activations (every micro-batch's, both ways); then the
# weights to NVMe, the slowest tier.
OFFLOAD_ORDER = (Offload.NONE, Offload.OPTIMIZER, Offload.OPTIMIZER_PARAMS, Offload.ACTIVATIONS, Offload.PARAMS_NVME)


class RecomputeMethod(StrEnum):
    """Megatron-LM --recompute-method, with --recompute-num-layers N (full recompute only)."""
    UNIFORM = "uniform"   # every layer recomputed, checkpointed in groups of N layers
    BLOCK = "block"       # the first N layers of each stage recomputed, the rest stored whole


@record(slots=True, kw_only=True)
class ParallelConfig:
    """Degrees, not rank lists. World size = tp * pp * dp * cp.

    Rank order is tp innermost, then cp, then dp, then pp (Megatron-Core's default order
    tp-cp-ep-dp-pp), so a tp group is contiguous and stays inside a node when tp <= GPUs per
    node, and the pipeline stages are the outermost blocks.
    """

    tp: int = declared("int", default=1, flag="--tp", group=CONFIG, lo=1, hi=2**20, example=2,
                       help="tensor-parallel degree")
    pp: int = declared("int", default=1, flag="--pp", group=CONFIG, lo=1, hi=2**20, example=2,
                       help="pipeline-parallel degree")
    dp: int = declared("int", default=1, flag="--dp", group=CONFIG, lo=1, hi=2**20, example=2,
                       help="data-parallel degree (default: the GPUs left by tp x pp x cp)")
    cp: int = declared("int", default=1, flag="--cp", group=CONFIG, lo=1, hi=2**20, example=2,
                       help="context-parallel degree")
    zero: ZeroStage = declared("choice", default=ZeroStage.NONE, choices=(0, 1, 2, 3), flag="--zero", group=CONFIG,
                               example=1, help="ZeRO stage: 0 none, 1 optimizer, 2 + gradients, 3 + weights")
    sequence_parallel: bool = declared("bool", default=False, flag="--sequence-parallel", group=CONFIG, example=True,
                                       help="shard the layer norms' and dropouts' activations over tp")
    recompute: Recompute = declared("enum", default=Recompute.NONE, enum=Recompute, flag="--recompute", group=CONFIG,
                                    example=Recompute.SELECTIVE, help="activation recomputation")
    micro_batch: int = declared("int", default=1, flag="--micro-batch", group="training", lo=1, hi=2**20, example=2,
                                help="sequences per micro-batch (default: the preset's, else 1)")
    # model chunks per pipeline rank (interleaved 1F1B) [narayanan Sec. 2.2.2]
    virtual_stages: int = declared("int", default=1, flag="--virtual-stages", group=CONFIG, lo=1, hi=4096, example=2,
                                   help="model chunks per pipeline rank (interleaved 1F1B)")
    # expert-parallel degree, drawn from the tp x dp x cp ranks (MoE only)
    ep: int = declared("int", default=1, flag="--ep", group=CONFIG, lo=1, hi=2**20, example=2,
                       help="expert-parallel degree (MoE models), drawn from the tp x dp x cp ranks")
    # uneven pipeline stages: Megatron-LM --decoder-first/last-pipeline-num-layers
    first_stage_layers: int | None = declared(
        "int", default=None, flag="--first-stage-layers", group=CONFIG, lo=0, hi=10**5, example=3,
        omitted="the even split (embedding and loss count as a layer each)",
        help="layers on the first pipeline stage (default: an even split, the embedding counted as a layer)")
    last_stage_layers: int | None = declared(
        "int", default=None, flag="--last-stage-layers", group=CONFIG, lo=0, hi=10**5, example=3,
        omitted="the even split (embedding and loss count as a layer each)",
        help="layers on the last pipeline stage (default: an even split, the output head counted as a layer)")
    schedule: Schedule = declared("enum", default=Schedule.ONE_F_ONE_B, enum=Schedule, flag="--schedule", group=CONFIG,
                                  example=Schedule.GPIPE, help="pipeline schedule (interleaving: --virtual-stages)")
    # hybrid sharding: FSDP2 data_parallel_shard_degree, Megatron --num-distributed-optimizer-instances
    shard_degree: int | None = declared(
        "int", default=None, flag="--shard-degree", group=CONFIG, lo=1, hi=2**20, example=2,
        omitted="all dp x cp ranks", help="hybrid sharding: shard ZeRO state over groups of N data-parallel ranks, "
                                          "replicate across groups (default: one group of all)")
    reshard_after_forward: bool = declared(
        "bool", default=True, flag="--reshard-after-forward", off_flag="--no-reshard-after-forward", group=CONFIG,
        example=False, help="ZeRO-3/FSDP: free gathered weights after forward (off: keep them for backward)")
    microbatch_grad_sync: bool = declared(
        "bool", default=False, flag="--microbatch-grad-sync", off_flag="--no-microbatch-grad-sync", group=CONFIG,
        example=True, help="ZeRO-2/3 with pipeline stages: reduce-scatter each micro-batch's gradients into a sharded "
                           "accumulator (Llama 3's fp32 accumulation) instead of holding them unsharded until the "
                           "last micro-batch (torch.distributed.pipelining's default)")
    recompute_num_layers: int | None = declared(
        "int", default=None, flag="--recompute-num-layers", group=CONFIG, lo=1, hi=10**5, example=2,
        omitted="every layer", help="full recompute: layers per group (uniform) or recomputed layers per stage (block)")
    recompute_method: RecomputeMethod = declared(
        "enum", default=RecomputeMethod.UNIFORM, enum=RecomputeMethod, flag="--recompute-method", group=CONFIG,
        example=RecomputeMethod.BLOCK, help="full recompute with --recompute-num-layers: uniform or block")
    # Communication overlap, each with its framework's default (docs/formulas.md#overlap; fitplan.timing.traffic)
    overlap_grad_reduce: bool = declared(
        "bool", default=True, flag="--overlap-grad-reduce", off_flag="--no-overlap-grad-reduce", group=CONFIG,
        example=False, help="reduce gradient buckets during the backward that produces them (default on, as PyTorch "
                            "DDP and FSDP do; Megatron-LM's --overlap-grad-reduce and DeepSpeed ZeRO-1/2's "
                            "overlap_comm default off)")
    overlap_param_gather: bool | None = declared(
        "bool", default=None, flag="--overlap-param-gather", off_flag="--no-overlap-param-gather", group=CONFIG,
        example=True, omitted="on with ZeRO-3, off with ZeRO-1/2",
        help="gather weights ahead of the compute that needs them: ZeRO-3 prefetches the next layer's (default on, "
             "as FSDP and DeepSpeed ZeRO-3 do), ZeRO-1/2 gather the updated weights during the next forward "
             "(Megatron-LM --overlap-param-gather, default off)")
    tp_comm_overlap: bool = declared(
        "bool", default=False, flag="--tp-comm-overlap", off_flag="--no-tp-comm-overlap", group=CONFIG, example=True,
        help="overlap tensor-parallel all-gathers and reduce-scatters with the GEMMs they feed (Megatron-LM "
             "--tp-comm-overlap, PyTorch async TP; needs --sequence-parallel; default off, as in both)")
    cp_comm_overlap: bool = declared(
        "bool", default=True, flag="--cp-comm-overlap", off_flag="--no-cp-comm-overlap", group=CONFIG, example=False,
        help="hide context parallel's K/V ring behind the attention core it feeds (default on, as Megatron-LM's p2p "
             "ring attention does)")
    ep_comm_overlap: bool | None = declared(
        "bool", default=None, flag="--overlap-moe-expert-parallel-comm", off_flag="--no-overlap-moe-expert-parallel-comm",
        group=CONFIG, example=True, omitted="on with --schedule dualpipe, off otherwise",
        help="hide the expert all-to-alls behind another micro-batch's compute (default on with --schedule dualpipe, "
             "DeepSeek-V3 Sec. 3.2.1; off otherwise, as Megatron-LM's --overlap-moe-expert-parallel-comm)")
    # offload to host memory or NVMe (ZeRO-Offload, ZeRO-Infinity, activation offload): fitplan.memory.offload
    offload: Offload = declared(
        "enum", default=Offload.NONE, enum=Offload, flag="--offload", group=CONFIG, example=Offload.OPTIMIZER,
        help="what moves off the GPU: optimizer (master weights, moments, gradients; CPU optimizer step), "
             "optimizer+params (and the weights, ZeRO-3), params-nvme (weights on NVMe), activations (stored "
             "activations to host memory)")

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "micro_batch", "virtual_stages", "ep"):
            positive_int("parallel", name, getattr(self, name), maximum=10**9)
        if not isinstance(self.zero, ZeroStage):
            raise SpecError(f"parallel.zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if not isinstance(self.recompute, Recompute):
            raise SpecError(f"parallel.recompute must be one of {', '.join(r.value for r in Recompute)}, "
                            f"got {self.recompute!r}")
        if not isinstance(self.offload, Offload):
            raise SpecError(f"parallel.offload must be one of {', '.join(o.value for o in Offload)}, "
                            f"got {self.offload!r}")
        if not isinstance(self.schedule, Schedule):
            raise SpecError(f"parallel.schedule must be one of {', '.join(x.value for x in Schedule)}, "
                            f"got {self.schedule!r}")
        check_ranges(self, "parallel")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp



def overlaps_param_gather(c) -> bool:
    """--overlap-param-gather as given, else its default: on with ZeRO-3 (FSDP and DeepSpeed prefetch),
    off with ZeRO-1/2 (Megatron-LM)."""
    return (int(c.zero) == 3) if c.overlap_param_gather is None else bool(c.overlap_param_gather)


def overlaps_ep_comm(c) -> bool:
    """--overlap-moe-expert-parallel-comm as given, else its default: on under DualPipe, off otherwise."""
    return (c.schedule == Schedule.DUALPIPE) if c.ep_comm_overlap is None else bool(c.ep_comm_overlap)
