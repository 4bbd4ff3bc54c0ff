"""The model: a decoder-only transformer described by its shapes."""
from dataclasses import dataclass
from enum import StrEnum

from fitplan.errors import SpecError
from fitplan.specs._check import positive_int
from fitplan.specs.declare import check_ranges, declared

MOE = "mixture of experts"
MLA = "multi-head latent attention"


class Mlp(StrEnum):
    GELU = "gelu"       # fc1 (h -> f), GeLU, fc2 (f -> h): two matrices [gpt3]
    SWIGLU = "swiglu"   # gate and up (h -> f), SiLU(gate) * up, down (f -> h): three matrices [llama3]
    GEGLU = "geglu"     # gate and up (h -> f), GeLU(gate) * up, down (f -> h): three matrices (Gemma)
    RELU2 = "relu2"     # fc1 (h -> f), squared ReLU relu(x)^2, fc2 (f -> h): two matrices (Nemotron-4)

    @property
    def gated(self) -> bool:
        """A gated MLP: gate and up projections (h -> f each) and a down projection, three
        matrices; SwiGLU and GeGLU differ only in the activation. GeLU and squared ReLU are
        not gated: fc1 and fc2, two matrices, the same parameters, FLOPs and stored tensors
        (fitplan.memory.activations: the activation's input and fc2's input)."""
        return self in (Mlp.SWIGLU, Mlp.GEGLU)


class Norm(StrEnum):
    LAYERNORM = "layernorm"  # weight and bias: 2h parameters
    RMSNORM = "rmsnorm"      # weight only: h parameters


class QkNorm(StrEnum):
    NONE = "none"              # no norm on queries and keys
    HEAD = "head"              # RMSNorm over each head's d (one weight of d for q, one for k): Qwen3, Gemma 3
    PROJECTION = "projection"  # RMSNorm over the whole q (a*d) and k (g*d) projections: OLMo 2


class Position(StrEnum):
    LEARNED = "learned"  # a (max_seq_len x h) table [gpt3]
    ROPE = "rope"        # no parameters [llama3]
    ALIBI = "alibi"      # no parameters: a bias on the attention scores (Press et al. 2022) [BLOOM]


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeSpec:
    """Mixture-of-experts MLPs. The first `first_dense_layers` layers keep a dense MLP of
    ModelSpec.ffn_hidden_size (DeepSeek-V3: 3); every other layer routes each token to
    `experts_per_token` of `num_experts` experts of `expert_ffn_size`, plus
    `num_shared_experts` experts every token uses."""

    num_experts: int = declared("int", flag="--experts", group=MOE, lo=1, hi=2**20, example=16,
                                help="routed experts per MoE layer (makes the model mixture-of-experts)")
    experts_per_token: int = declared("int", flag="--experts-per-token", group=MOE, lo=1, hi=2**20, example=4,
                                      help="top-k routing")
    expert_ffn_size: int = declared("int", flag="--expert-ffn", group=MOE, lo=1, hi=10**7, example=1024,
                                    help="each expert's MLP size (default --ffn)")
    num_shared_experts: int = declared("int", default=0, flag="--shared-experts", group=MOE, lo=0, hi=2**20,
                                       example=1, help="experts every token uses (DeepSeek)")
    first_dense_layers: int = declared("int", default=0, flag="--first-dense-layers", group=MOE, lo=0, hi=10**5, example=1,
                                       help="leading layers with a dense MLP")
    route_nodes: int | None = declared("int", default=None, flag="--route-nodes", group=MOE, lo=1, hi=2**16,
                                       example=4, omitted="tokens may go to any node",
                                       help="node-limited routing: each token's experts lie on at most N nodes, so "
                                            "it crosses the network at most N times (DeepSeek-V3: 4)")
    shared_expert_gate: bool = declared("bool", default=False, flag="--shared-expert-gate",
                                        off_flag="--no-shared-expert-gate", group=MOE, example=True,
                                        help="a sigmoid gate (h -> 1 weights) scales the shared experts' output "
                                             "(Qwen2-MoE's shared_expert_gate)")
    expert_bias: bool = declared("bool", default=False, flag="--expert-bias", off_flag="--no-expert-bias", group=MOE,
                                 example=True, help="a bias per routed expert on the routing scores, E numbers per "
                                                    "MoE layer (DeepSeek-V3's e_score_correction_bias; gpt-oss's "
                                                    "router bias)")
    capacity_factor: float | None = declared("number", default=None, flag="--capacity-factor", group=MOE, lo=0.001,
                                             hi=1000, example=1.25, omitted="dropless",
                                             help="MoE capacity factor (default: dropless)")

    def __post_init__(self) -> None:
        for name in ("num_experts", "experts_per_token", "expert_ffn_size"):
            positive_int("model.moe", name, getattr(self, name), maximum=10**7)
        for name in ("num_shared_experts", "first_dense_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"model.moe.{name} must be a whole number >= 0, got {value!r}")
        for name in ("shared_expert_gate", "expert_bias"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"model.moe.{name} must be true or false, got {getattr(self, name)!r}")
        if self.shared_expert_gate and not self.num_shared_experts:
            raise SpecError("model.moe.shared_expert_gate needs shared experts (num_shared_experts >= 1) to gate")
        if self.experts_per_token > self.num_experts:
            raise SpecError(f"model.moe.experts_per_token ({self.experts_per_token}) exceeds num_experts "
                            f"({self.num_experts})")
        if self.capacity_factor is not None and not (isinstance(self.capacity_factor, (int, float))
                                                     and 0 < self.capacity_factor <= 1000):
            raise SpecError(f"model.moe.capacity_factor must be in (0, 1000] or absent (dropless), "
                            f"got {self.capacity_factor!r}")
        check_ranges(self, "model.moe")


@dataclass(frozen=True, slots=True, kw_only=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass through
    low-rank latents. In training (no weight absorption) the per-head Q, K, V are
    decompressed, so activations are stored like multi-head attention with query/key head
    size qk_nope + qk_rope and value head size v_head_dim, plus the latents."""

    q_lora_rank: int = declared("int", flag="--q-lora-rank", group=MLA, lo=0, hi=10**6, example=768,
                                help="the query latent's rank (0: queries are not compressed)")
    kv_lora_rank: int = declared("int", flag="--kv-lora-rank", group=MLA, lo=1, hi=10**6, example=256,
                                 help="the key/value latent's rank (makes the attention MLA)")
    qk_nope_head_dim: int = declared("int", flag="--qk-nope-head-dim", group=MLA, lo=1, hi=2**16, example=64,
                                     help="per-head query/key width without rotary embedding")
    qk_rope_head_dim: int = declared("int", flag="--qk-rope-head-dim", group=MLA, lo=1, hi=2**16, example=32,
                                     help="per-head query/key width with rotary embedding")
    v_head_dim: int = declared("int", flag="--v-head-dim", group=MLA, lo=1, hi=2**16, example=64, help="per-head value width")

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            positive_int("model.mla", name, getattr(self, name), maximum=10**6)
        if isinstance(self.q_lora_rank, bool) or not isinstance(self.q_lora_rank, int) or self.q_lora_rank < 0:
            raise SpecError(f"model.mla.q_lora_rank must be a whole number >= 0, got {self.q_lora_rank!r}")
        check_ranges(self, "model.mla")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Shapes of a decoder-only transformer. Counts are derived in fitplan.counts.params."""

    name: str = declared("str", file_only="a preset's or config's name; a changed shape appends (modified)")
    num_layers: int = declared("int", flag="--layers", group="model", lo=1, hi=10**5, example=24, help="transformer layers")
    hidden_size: int = declared("int", flag="--hidden", group="model", lo=1, hi=2**20, example=2048, help="hidden size h")
    num_heads: int = declared("int", flag="--heads", group="model", lo=1, hi=2**16, example=16, help="attention heads")
    num_kv_heads: int = declared("int", flag="--kv-heads", group="model", lo=1, hi=2**16, example=8,
                                 help="key/value heads (grouped-query attention); default: --heads")
    ffn_hidden_size: int = declared("int", flag="--ffn", group="model", lo=1, hi=10**7, example=5632,
                                    help="MLP hidden size; default 4*hidden for gelu and relu2")
    vocab_size: int = declared("int", flag="--vocab", group="model", lo=1, hi=10**8, example=32000, help="vocabulary size")
    max_seq_len: int = declared("int", flag="--max-seq-len", group="model", lo=1, hi=10**9, example=16384,
                                help="the longest sequence the model takes (a learned position table's rows); "
                                     "default --seq-len for a custom shape")
    mlp: Mlp = declared("enum", default=Mlp.GELU, enum=Mlp, flag="--mlp", group="model", example=Mlp.SWIGLU,
                        help="gelu, relu2 (squared ReLU: Nemotron-4): two matrices; swiglu, geglu (Gemma): three, "
                             "gated")
    norm: Norm = declared("enum", default=Norm.LAYERNORM, enum=Norm, flag="--norm", group="model",
                          example=Norm.RMSNORM, help="layernorm (weight and bias) or rmsnorm (weight only)")
    position: Position = declared("enum", default=Position.LEARNED, enum=Position, flag="--position", group="model",
                                  example=Position.ROPE, help="learned position table, rope or alibi (no parameters)")
    tied_embeddings: bool = declared("bool", default=True, flag="--tied-embeddings", off_flag="--untied-embeddings",
                                     group="model", example=False,
                                     help="the output layer shares the embedding's weights")
    linear_bias: bool = declared("bool", default=True, flag="--linear-bias", off_flag="--no-linear-bias",
                                 group="model", example=False,
                                 help="biases on every linear layer (GPT-2/3); Llama has none")
    qkv_bias: bool = declared("bool", default=False, flag="--qkv-bias", off_flag="--no-qkv-bias", group="model",
                              example=True, help="biases on q/k/v only (Qwen2); ignored with --linear-bias")
    head_dim: int | None = declared("int", default=None, flag="--head-dim", group="model", lo=1, hi=2**16, example=128,
                                    omitted="hidden_size / num_heads",
                                    help="per-head width, when it is not hidden / heads")
    norms_per_layer: int = declared("int", default=2, flag="--norms-per-layer", group="model", lo=1, hi=8, example=4,
                                    help="norms in each layer: 2 (before attention and before the MLP); Gemma 2/3 "
                                         "add two post-norms (4); Falcon-7B's parallel block has 1")
    qk_norm: QkNorm = declared("enum", default=QkNorm.NONE, enum=QkNorm, flag="--qk-norm", group="model",
                               example=QkNorm.HEAD, help="RMSNorm on queries and keys: head (a weight of head_dim "
                                                         "each for q and k: Qwen3, Gemma 3) or projection (over the "
                                                         "whole q and k widths: OLMo 2)")
    sliding_window: int | None = declared("int", default=None, flag="--sliding-window", group="model", lo=1,
                                          hi=10**9, unit="tokens", example=4096,
                                          omitted="every layer attends to the whole sequence",
                                          help="local attention over this many tokens (recorded; activations and "
                                               "KV caches are planned for full attention)")
    full_attention_every: int | None = declared("int", default=None, flag="--full-attention-every", group="model",
                                                lo=2, hi=10**5, example=6,
                                                omitted="with a sliding window, every layer slides",
                                                help="with --sliding-window: layer i attends fully when (i+1) is a "
                                                     "multiple of this (Gemma 2: 2, Gemma 3: 6)")
    attention_sinks: bool = declared("bool", default=False, flag="--attention-sinks", off_flag="--no-attention-sinks",
                                     group="model", example=True,
                                     help="a learned sink logit per attention head in every layer's softmax "
                                          "(gpt-oss): a parameters per layer; no GEMM FLOPs")
    moe: MoeSpec | None = declared("table", default=None, table=MoeSpec, omitted="dense: every layer has a dense MLP")
    mla: MlaSpec | None = declared("table", default=None, table=MlaSpec,
                                   omitted="(grouped-query) multi-head attention")
    mtp_depth: int = declared("int", default=0, flag="--mtp-depth", group="model", lo=0, hi=16, example=1,
                              help="multi-token-prediction modules after the last layer (DeepSeek-V3: 1), each a "
                                   "projection of 2h -> h and one more layer, sharing the embedding and head")
    published_params: int | None = declared("int", default=None, flag="--params", group="model", lo=1, hi=10**16,
                                            example=7_000_000_000, omitted="the count follows from the shapes",
                                            help="a published parameter count to use instead of the shape-derived one")
    source: str = declared("str", default="", file_only="where the shapes come from; prose, not a setting")

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
                     "vocab_size", "max_seq_len"):
            positive_int("model", name, getattr(self, name))
        if self.head_dim is not None:
            positive_int("model", "head_dim", self.head_dim)
        elif self.hidden_size % self.num_heads and self.mla is None:
            # Megatron-LM asserts hidden % heads == 0 unless --kv-channels is given; transformers likewise
            raise SpecError(f"model.hidden_size {self.hidden_size} is not a whole number of {self.num_heads} heads "
                            f"({self.hidden_size / self.num_heads:g} per head); set head_dim (--head-dim) or pick a "
                            f"head count that divides {self.hidden_size}")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(f"model.num_heads {self.num_heads} is not divisible by num_kv_heads "
                            f"{self.num_kv_heads}; grouped-query attention needs whole groups")
        rotary = (self.mla.qk_rope_head_dim if self.mla is not None else
                  self.head_dim or self.hidden_size // self.num_heads) if self.position is Position.ROPE else 0
        if rotary % 2:   # RoPE rotates pairs of dimensions
            raise SpecError(f"model: rotary embeddings need an even head dimension, got {rotary}; change "
                            f"{'qk_rope_head_dim' if self.mla is not None else 'head_dim or the heads'}")
        if self.published_params is not None:
            positive_int("model", "published_params", self.published_params)
        if self.moe is not None and not isinstance(self.moe, MoeSpec):
            raise SpecError("model.moe must be a MoeSpec table")
        if self.mla is not None and not isinstance(self.mla, MlaSpec):
            raise SpecError("model.mla must be a MlaSpec table")
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise SpecError(f"model.moe.first_dense_layers ({self.moe.first_dense_layers}) exceeds num_layers "
                            f"({self.num_layers})")
        positive_int("model", "norms_per_layer", self.norms_per_layer, maximum=8)
        if self.sliding_window is not None:
            positive_int("model", "sliding_window", self.sliding_window)
        if self.full_attention_every is not None:
            positive_int("model", "full_attention_every", self.full_attention_every)
            if self.sliding_window is None:
                raise SpecError("model.full_attention_every needs a sliding window (sliding_window) for the other "
                                "layers")
        for name, kind in (("mlp", Mlp), ("norm", Norm), ("position", Position), ("qk_norm", QkNorm)):
            if not isinstance(getattr(self, name), kind):
                raise SpecError(f"model.{name} must be one of {', '.join(k.value for k in kind)}")
        check_ranges(self, "model")

    @property
    def q_size(self) -> int:
        """Width of the query projection, a*d; h when head_dim is not given (then h is a
        whole number of heads: __post_init__). MLA: the decompressed query (= key) width,
        a*(qk_nope + qk_rope)."""
        if self.mla is not None:
            return self.num_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_heads * self.head_dim if self.head_dim is not None else self.hidden_size

    @property
    def kv_size(self) -> int:
        """Width of each of the key and value projections, g*d. MLA: the value width a*v_head_dim
        (activations store Q, K of q_size and V, O of kv_size: 2q + 2kv as for GQA)."""
        if self.mla is not None:
            return self.num_heads * self.mla.v_head_dim
        if self.head_dim is not None:
            return self.num_kv_heads * self.head_dim
        return self.hidden_size * self.num_kv_heads // self.num_heads
