"""The model: a decoder-only transformer described by its shapes."""
from dataclasses import dataclass
from enum import StrEnum

from fitplan.errors import SpecError
from fitplan.specs._check import positive_int


class Mlp(StrEnum):
    GELU = "gelu"       # fc1 (h -> f), GeLU, fc2 (f -> h): two matrices [gpt3]
    SWIGLU = "swiglu"   # gate and up (h -> f), SiLU(gate) * up, down (f -> h): three matrices [llama3]


class Norm(StrEnum):
    LAYERNORM = "layernorm"  # weight and bias: 2h parameters
    RMSNORM = "rmsnorm"      # weight only: h parameters


class Position(StrEnum):
    LEARNED = "learned"  # a (max_seq_len x h) table [gpt3]
    ROPE = "rope"        # no parameters [llama3]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Shapes of a decoder-only transformer. Counts are derived in fitplan.counts.params."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    max_seq_len: int
    mlp: Mlp = Mlp.GELU
    norm: Norm = Norm.LAYERNORM
    position: Position = Position.LEARNED
    tied_embeddings: bool = True
    linear_bias: bool = True          # biases on every linear layer (GPT-2/3); Llama has none
    qkv_bias: bool = False            # biases on q/k/v only (Qwen2); ignored when linear_bias
    head_dim: int | None = None       # None: hidden_size // num_heads
    published_params: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
                     "vocab_size", "max_seq_len"):
            positive_int("model", name, getattr(self, name))
        if self.head_dim is not None:
            positive_int("model", "head_dim", self.head_dim)
        elif self.hidden_size % self.num_heads and self.num_kv_heads != self.num_heads:
            raise SpecError(f"model.hidden_size {self.hidden_size} is not divisible by num_heads "
                            f"{self.num_heads}; set head_dim explicitly or fix the heads")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(f"model.num_heads {self.num_heads} is not divisible by num_kv_heads "
                            f"{self.num_kv_heads}; grouped-query attention needs whole groups")
        if self.published_params is not None:
            positive_int("model", "published_params", self.published_params)
        for name, kind in (("mlp", Mlp), ("norm", Norm), ("position", Position)):
            if not isinstance(getattr(self, name), kind):
                raise SpecError(f"model.{name} must be one of {', '.join(k.value for k in kind)}")

    @property
    def q_size(self) -> int:
        """Width of the query projection, a*d; h when head_dim is not given. (GPT-3 XL
        prints 24 heads with d_model 2048, which no whole head size multiplies to; the
        projections are still h wide.)"""
        return self.num_heads * self.head_dim if self.head_dim is not None else self.hidden_size

    @property
    def kv_size(self) -> int:
        """Width of each of the key and value projections, g*d."""
        if self.head_dim is not None:
            return self.num_kv_heads * self.head_dim
        return self.hidden_size * self.num_kv_heads // self.num_heads
