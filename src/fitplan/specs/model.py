"""The model: a decoder-only transformer described by its shapes."""
from enum import StrEnum

from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs._check import positive_int
from fitplan.specs.declare import check_ranges, declared

MOE = "mixture of experts"
MLA = "multi-head latent attention"
MAMBA = "hybrid Mamba layers"
# The layer kinds of a hybrid model's pattern, as Megatron-LM's hybrid models and Nemotron-H's
# hybrid_override_pattern name them (Megatron-LM megatron/core/ssm/mamba_hybrid_layer_allocation.py Symbols)
MAMBA_LAYER, ATTENTION_LAYER, MLP_LAYER, MOE_LAYER = "M", "*", "-", "E"
LAYER_KINDS = (MAMBA_LAYER, ATTENTION_LAYER, MLP_LAYER, MOE_LAYER)


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
    NONE = "none"        # no position encoding (NoPE): the Mamba layers carry order (Nemotron-H, Granite 4.0-H, Jamba)


class SsmVersion(StrEnum):
    MAMBA2 = "mamba2"    # Mamba-2, the SSD layer (Dao & Gu 2024): scalar A per head, B and C per group
    MAMBA1 = "mamba1"    # Mamba, the selective scan (Gu & Dao 2023): A per channel and state, x_proj and dt_proj (Jamba)


@record(slots=True, kw_only=True)
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
    latent_size: int | None = declared("int", default=None, flag="--moe-latent", group=MOE, lo=1, hi=10**7,
                                       example=1024, omitted="the routed experts work at the hidden size",
                                       help="LatentMoE (Nemotron 3 Super, Ultra): the routed experts work on a "
                                            "latent of this width, projected from and back to h once per token")

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
        if self.latent_size is not None:
            positive_int("model.moe", "latent_size", self.latent_size, maximum=10**7)
        if self.capacity_factor is not None and not (isinstance(self.capacity_factor, (int, float))
                                                     and 0 < self.capacity_factor <= 1000):
            raise SpecError(f"model.moe.capacity_factor must be in (0, 1000] or absent (dropless), "
                            f"got {self.capacity_factor!r}")
        check_ranges(self, "model.moe")


@record(slots=True, kw_only=True)
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


@record(slots=True, kw_only=True)
class MambaSpec:
    """The Mamba layers (M) of a hybrid model. Mamba-2 (state-spaces/mamba mamba_ssm/modules/
    mamba2.py, Megatron-LM megatron/core/ssm/mamba_mixer.py): num_heads heads of head_dim
    channels (d_inner = num_heads*head_dim), B and C in num_groups groups of state_size, a
    depthwise causal conv of conv_kernel over x, B and C, the chunked SSD scan over chunks of
    chunk_size tokens. Mamba (version mamba1, mamba_ssm/modules/mamba_simple.py; Jamba): d_inner
    channels (num_heads = d_inner, head_dim = 1), each with a state of state_size, dt of dt_rank."""

    num_heads: int = declared("int", flag="--mamba-heads", group=MAMBA, lo=1, hi=2**20, example=16,
                              help="Mamba heads (Mamba-2: nheads; Mamba: the d_inner channels, with --mamba-head-dim 1)")
    head_dim: int = declared("int", flag="--mamba-head-dim", group=MAMBA, lo=1, hi=2**16, example=32,
                             help="channels per Mamba head (d_inner = heads x head dim)")
    state_size: int = declared("int", flag="--mamba-state", group=MAMBA, lo=1, hi=2**16, example=64,
                               help="the SSM state per channel (d_state, N)")
    num_groups: int = declared("int", default=1, flag="--mamba-groups", group=MAMBA, lo=1, hi=2**16, example=4,
                               help="groups of heads sharing B and C (Mamba-2 ngroups)")
    conv_kernel: int = declared("int", default=4, flag="--mamba-conv", group=MAMBA, lo=1, hi=1024, example=2,
                                help="the causal depthwise convolution's width (d_conv)")
    chunk_size: int = declared("int", default=128, flag="--mamba-chunk", group=MAMBA, lo=1, hi=2**20, example=256,
                               help="tokens per chunk of the SSD scan (Megatron-LM: 128; mamba_ssm: 256)")
    version: SsmVersion = declared("enum", default=SsmVersion.MAMBA2, enum=SsmVersion, flag="--mamba-version",
                                   group=MAMBA, example=SsmVersion.MAMBA1,
                                   help="mamba2 (SSD: Nemotron-H, Granite 4.0-H) or mamba1 (selective scan: Jamba)")
    dt_rank: int = declared("int", default=0, flag="--mamba-dt-rank", group=MAMBA, lo=0, hi=2**20, example=256,
                            help="Mamba (mamba1) only: the rank of dt's projection (x_proj, dt_proj); 0: mamba_ssm's "
                                 "auto, ceil(h/16)")
    inner_norms: bool = declared("bool", default=False, flag="--mamba-inner-norms", off_flag="--no-mamba-inner-norms",
                                 group=MAMBA, example=True,
                                 help="Mamba (mamba1): RMSNorms on dt, B and C (Jamba's dt/b/c_layernorm)")
    conv_bias: bool = declared("bool", default=True, flag="--mamba-conv-bias", off_flag="--no-mamba-conv-bias",
                               group=MAMBA, example=False, help="a bias on the convolution (conv_bias)")
    proj_bias: bool = declared("bool", default=False, flag="--mamba-proj-bias", off_flag="--no-mamba-proj-bias",
                               group=MAMBA, example=True, help="biases on in_proj and out_proj (use_bias)")

    def __post_init__(self) -> None:
        for name in ("num_heads", "head_dim", "state_size", "num_groups", "conv_kernel", "chunk_size"):
            positive_int("model.mamba", name, getattr(self, name), maximum=10**7)
        if not isinstance(self.version, SsmVersion):
            raise SpecError(f"model.mamba.version must be one of {', '.join(v.value for v in SsmVersion)}")
        for name in ("inner_norms", "conv_bias", "proj_bias"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"model.mamba.{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.dt_rank, bool) or not isinstance(self.dt_rank, int) or self.dt_rank < 0:
            raise SpecError(f"model.mamba.dt_rank must be a whole number >= 0, got {self.dt_rank!r}")
        if self.version is SsmVersion.MAMBA2:
            if self.num_heads % self.num_groups:   # Megatron-LM MambaMixer: nheads % ngroups == 0
                raise SpecError(f"model.mamba.num_heads {self.num_heads} is not divisible by num_groups "
                                f"{self.num_groups}; every group of B and C serves whole heads")
            if self.dt_rank or self.inner_norms:
                raise SpecError("model.mamba.dt_rank and inner_norms belong to Mamba (version mamba1); a Mamba-2 "
                                "layer projects dt per head in in_proj")
        else:
            if self.head_dim != 1 or self.num_groups != 1:
                raise SpecError("model.mamba: a Mamba (mamba1) layer has one state per channel: give num_heads = "
                                "d_inner, head_dim 1 and num_groups 1")
        check_ranges(self, "model.mamba")

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim


@record(slots=True, kw_only=True)
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
                                  example=Position.ROPE, help="learned position table, rope or alibi (no parameters), "
                                                              "or none (NoPE: hybrid Mamba models)")
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
    layer_pattern: str | None = declared("str", default=None, flag="--hybrid-pattern", group=MAMBA, example="M*M-ME",
                                         omitted="every layer is attention and an MLP",
                                         help="a hybrid model's layers, one letter each: M Mamba, * attention, - MLP, "
                                              "E MoE (Megatron-LM's hybrid pattern, Nemotron-H's "
                                              "hybrid_override_pattern); --layers is its length")
    mamba: MambaSpec | None = declared("table", default=None, table=MambaSpec, omitted="no Mamba layers")
    mtp_pattern: str | None = declared("str", default=None, flag="--mtp-pattern", group=MAMBA, example="*E",
                                       omitted="a transformer layer (non-hybrid models)",
                                       help="a hybrid model's multi-token-prediction module: its layers, one letter "
                                            "each (Nemotron 3: *E, an attention and an MoE layer)")
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
                  self.qk_head_dim) if self.position is Position.ROPE else 0
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
        self._check_hybrid()
        check_ranges(self, "model")

    def _check_hybrid(self) -> None:
        """A hybrid model's pattern names every layer (Megatron-LM _allocate_override: the pattern's
        length is num_layers); its letters need the tables they use."""
        if self.mamba is not None and not isinstance(self.mamba, MambaSpec):
            raise SpecError("model.mamba must be a MambaSpec table")
        pattern = self.layer_pattern
        if pattern is None:
            if self.mamba is not None:
                raise SpecError("model.mamba: Mamba layers need a layer_pattern (--hybrid-pattern) saying where they "
                                "are, e.g. M*M-")
            if self.mtp_pattern is not None:
                raise SpecError("model.mtp_pattern belongs to a hybrid model (layer_pattern); a transformer's "
                                "multi-token-prediction module is one layer (--mtp-depth)")
            return
        for name, text in (("layer_pattern", pattern), ("mtp_pattern", self.mtp_pattern)):
            if text is None:
                continue
            if not isinstance(text, str) or not text:
                raise SpecError(f"model.{name} must be a non-empty string of M, *, - and E")
            bad = sorted(set(text) - set(LAYER_KINDS))
            if bad:
                raise SpecError(f"model.{name}: {bad[0]!r} is not a layer; use M (Mamba), * (attention), - (MLP) "
                                f"or E (MoE)")
        if len(pattern) != self.num_layers:
            raise SpecError(f"model.layer_pattern names {len(pattern)} layers but num_layers is {self.num_layers}; "
                            f"set num_layers (--layers) to {len(pattern)}")
        used = set(pattern) | set(self.mtp_pattern or "")
        if MAMBA_LAYER in used and self.mamba is None:
            raise SpecError("model.layer_pattern has Mamba layers (M) but no [model.mamba] table; give --mamba-heads, "
                            "--mamba-head-dim and --mamba-state")
        if MOE_LAYER in used and self.moe is None:
            raise SpecError("model.layer_pattern has MoE layers (E) but no [model.moe] table; give --experts and "
                            "--experts-per-token")
        if self.moe is not None and MOE_LAYER not in used:
            raise SpecError("model.moe: the layer_pattern has no MoE layer (E) to use it; add E layers or drop the "
                            "MoE table")
        if self.moe is not None and self.moe.first_dense_layers:
            raise SpecError("model.moe.first_dense_layers: in a hybrid model the layer_pattern says which layers "
                            "are MoE (E) and which dense (-); set it to 0")
        if self.mla is not None:
            raise SpecError("model.mla: latent attention in a hybrid model is not modelled; its attention layers are "
                            "grouped-query attention")
        if self.mtp_depth and self.mtp_pattern is None:
            raise SpecError("model.mtp_pattern: a hybrid model's multi-token-prediction module needs its layers, "
                            "e.g. --mtp-pattern '*E' (Nemotron 3)")

    @property
    def hybrid(self) -> bool:
        """A hybrid model: its layers are the pattern's blocks (Mamba, attention, MLP, MoE), each
        behind one pre-norm, rather than attention-and-MLP layers."""
        return self.layer_pattern is not None

    @property
    def q_size(self) -> int:
        """Width of the query projection, a*d; h when head_dim is not given (then h is a
        whole number of heads: __post_init__). MLA: the decompressed query (= key) width,
        a*(qk_nope + qk_rope)."""
        if self.mla is not None:
            return self.num_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_heads * self.head_dim if self.head_dim is not None else self.hidden_size

    @property
    def qk_head_dim(self) -> int:
        """Width of one query-key product, q_size per head: head_dim (or h/a), MLA's qk_nope + qk_rope."""
        return self.q_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of each of the key and value projections, g*d. MLA: the value width a*v_head_dim
        (activations store Q, K of q_size and V, O of kv_size: 2q + 2kv as for GQA)."""
        if self.mla is not None:
            return self.num_heads * self.mla.v_head_dim
        if self.head_dim is not None:
            return self.num_kv_heads * self.head_dim
        return self.hidden_size * self.num_kv_heads // self.num_heads
