"""How one training step is spread over ranks: degrees, ZeRO stage, recompute mode."""
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from fitplan.errors import SpecError
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
    """Activation recomputation [korthikanti Sec. 5]. Ordered by how much it recomputes."""
    NONE = "none"
    SELECTIVE = "selective"   # drop the attention core (softmax, its dropout), recompute it
    FULL = "full"             # keep only each layer's input, recompute the whole forward

    @property
    def level(self) -> int:
        return ("none", "selective", "full").index(self.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """Degrees, not rank lists. World size = tp * pp * dp * cp.

    Rank order is tp innermost, then cp, then pp, then dp (Megatron-LM's default grid), so a
    tp group is contiguous and stays inside a node when tp <= GPUs per node.
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

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "micro_batch", "virtual_stages", "ep"):
            positive_int("parallel", name, getattr(self, name), maximum=10**9)
        if not isinstance(self.zero, ZeroStage):
            raise SpecError(f"parallel.zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if not isinstance(self.recompute, Recompute):
            raise SpecError(f"parallel.recompute must be none, selective or full, got {self.recompute!r}")
        check_ranges(self, "parallel")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

