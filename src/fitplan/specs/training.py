"""The training setup: sequence length, global batch, precision recipe."""
from dataclasses import dataclass

from fitplan.errors import SpecError
from fitplan.specs._check import positive_int


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """Bytes per parameter of each model-state component.

    ZeRO shards them in order [zero Sec. 5]: stage 1 shards master weights and optimizer
    moments, stage 2 adds gradients, stage 3 adds the weights.
    """

    name: str
    weights_bytes: int | float          # the working copy used in forward and backward
    grads_bytes: int | float
    master_bytes: int | float           # a higher-precision copy the optimizer updates (0: none)
    moments: tuple[tuple[str, int | float], ...]   # optimizer state per parameter, by name
    compute: str = "bf16"               # GEMM precision, picks the GPU's peak rate: "bf16" or "fp8"
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("weights_bytes", "grads_bytes", "master_bytes"):
            _non_negative(f"recipe.{name}", getattr(self, name))
        for moment, size in self.moments:
            _non_negative(f"recipe.moments.{moment}", size)
        if self.compute not in ("bf16", "fp8"):
            raise SpecError(f"recipe.compute must be 'bf16' or 'fp8', got {self.compute!r}")
        if self.weights_bytes == 0:
            raise SpecError("recipe.weights_bytes must be > 0: training needs the weights")

    @property
    def optimizer_bytes(self) -> int | float:
        return sum(size for _, size in self.moments)

    @property
    def total_bytes(self) -> int | float:
        return self.weights_bytes + self.grads_bytes + self.master_bytes + self.optimizer_bytes


def _non_negative(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= 64):
        raise SpecError(f"{field} must be a number of bytes per parameter in 0..64, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSpec:
    """What one training step processes and in which precision.

    act_bytes is the element size of stored activations (2: bf16/fp16, Korthikanti Sec. 4).
    dropout=True stores 1-byte dropout masks, as Korthikanti et al. assume.
    """

    seq_len: int
    recipe: Recipe
    global_batch: int | None = None   # sequences per step; None: enough micro-batches to fill the pipeline
    act_bytes: int = 2
    dropout: bool = True
    attention_kernel: str = "eager"   # "eager": the s^2 scores are stored; "flash": only an fp32 logsumexp
    moe_imbalance: float = 1.0        # dropless MoE: busiest expert's tokens / the mean (1.0: balanced)

    def __post_init__(self) -> None:
        if self.attention_kernel not in ("eager", "flash"):
            raise SpecError(f"training.attention_kernel must be 'eager' or 'flash', got {self.attention_kernel!r}")
        if isinstance(self.moe_imbalance, bool) or not isinstance(self.moe_imbalance, (int, float)) \
                or not (1 <= self.moe_imbalance <= 1000):
            raise SpecError(f"training.moe_imbalance must be in [1, 1000] (1: perfectly balanced), "
                            f"got {self.moe_imbalance!r}")
        positive_int("training", "seq_len", self.seq_len, maximum=10**9)
        if self.global_batch is not None:
            positive_int("training", "global_batch", self.global_batch, maximum=10**12)
        if self.act_bytes not in (1, 2, 4):
            raise SpecError(f"training.act_bytes must be 1, 2 or 4, got {self.act_bytes!r}")
