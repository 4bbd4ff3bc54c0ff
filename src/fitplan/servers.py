"""The KV cache a serving engine sets aside at start-up, computed by the engine's own rule, and
what the engine then logs (`fitplan infer --server vllm|sglang`).

vLLM (V1 engine) profiles before it allocates the cache: it reads the GPU's total memory,
loads the weights, runs one forward pass of max_num_batched_tokens dummy tokens and one
sampler pass of min(max_num_seqs, max_num_batched_tokens) dummy requests, and gives the
cache what is left of gpu_memory_utilization x total. It then cuts the cache into blocks of
16 tokens and logs the block count, "GPU KV cache size: N tokens" and "Maximum concurrency for
N tokens per request: X". SGLang reads the free memory before and after loading the weights
and gives the cache mem_fraction_static x (free before) - (used by the weights), one token a
page ("KV Cache is allocated. #tokens: N").

Symbols: C the GPU's memory (the preset's, what nvidia-smi reports), u gpu_memory_utilization,
f mem_fraction_static, W the weights the GPU holds (fitplan.serving), T the profile's tokens
(max_num_batched_tokens), R the sampler warm-up's requests, h hidden size, V vocabulary, t
tensor-parallel degree, e bytes per activation element (2: bf16 activations, whatever the weight
precision), KV_tok one token's keys and values on one GPU (its layers, its heads: fitplan.serving's
per-GPU cache at s = b = 1, so MLA and replicated kv heads are counted as serving counts them),
B tokens per block, s the context each request holds (--context; vLLM's max_model_len).

Hybrid models (Mamba layers M and attention layers * by model.layer_pattern): both servers keep a
constant recurrent state per request and Mamba layer beside the attention layers' KV cache, with the
same per-GPU shapes: a conv state of (K - 1) x (d + 2*G'*N)/t in bf16 and an SSM state of
H/t x P x N in float32 (G' the groups, raised to t when t does not divide them; Mamba: d/t
channels and d/t x N). vLLM puts both in one pool of equal pages: it raises the attention block
size until one attention page holds a Mamba state, pads the Mamba page to it, groups the layers by
kind into groups of S layers, and gives each request ceil(s/B) blocks per attention group and one
per Mamba group. SGLang splits the memory it keeps for caches: r/(1 + r) of it to a pool of Mamba
state slots (r = mamba_full_memory_ratio), the rest to the KV cache of the attention layers, and
admits at most a third of the slots as running requests.
Pure: no printing, files or torch.
"""

from fitplan.arith import ceil_div
from fitplan.errors import SpecError
from fitplan.explain import COUNT, RATIO, RAW, Term, Trace, formula
from fitplan.record import record
from fitplan.serving import CONV_STATE_BYTES, SSM_STATE_BYTES, mamba_state_kw, mamba_state_layer_bytes
from fitplan.sources import Cite
from fitplan.specs import ModelSpec
from fitplan.specs.serving import SERVERS

GiB, MiB = 2**30, 2**20
ACT_BYTES = 2   # bf16 activations (vLLM and SGLang run fp8 and int4 checkpoints with bf16 activations)

VLLM_WORKER = Cite("vllm-memory", "vllm/v1/worker/gpu_worker.py Worker.determine_available_memory")
VLLM_RUNNER = Cite("vllm-memory", "vllm/v1/worker/gpu_model_runner.py profile_run, _dummy_run")
VLLM_SAMPLER = Cite("vllm-memory", "gpu_model_runner.py _dummy_sampler_run (top_p 0.9, top_k V-1); "
                                   "v1/sample/sampler.py; v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p")
VLLM_BLOCKS = Cite("vllm-memory", "vllm/v1/core/kv_cache_utils.py get_num_blocks, "
                                  "get_max_concurrency_for_kv_cache_config, estimate_max_model_len")
VLLM_DEFAULTS = Cite("vllm-memory", "vllm/engine/arg_utils.py EngineArgs get_batch_defaults (vllm serve)")
SGLANG_POOL = Cite("sglang", "python/sglang/srt/model_executor/model_runner.py profile_max_num_token")
SGLANG_DEFAULTS = Cite("sglang", "python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings")
VLLM_HYBRID_BLOCK = Cite("vllm-memory", "vllm/model_executor/models/config.py HybridAttentionMambaModelConfig."
                                        "verify_and_update_config (later vllm/platforms/interface.py "
                                        "_align_hybrid_block_size); vllm/v1/kv_cache_interface.py AttentionSpec, "
                                        "MambaSpec page_size_bytes")
VLLM_GROUPS = Cite("vllm-memory", "vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, "
                                  "get_kv_cache_config_from_groups, get_num_blocks")
VLLM_HYBRID_REPORT = Cite("vllm-memory", "vllm/v1/core/kv_cache_utils.py _report_kv_cache_config, "
                                         "get_max_concurrency_for_kv_cache_config; kv_cache_interface.py "
                                         "MambaSpec.max_memory_usage_bytes (one page, mamba_cache_mode none)")
SGLANG_MAMBA = Cite("sglang", "python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py "
                              "handle_max_mamba_cache, profile_max_num_token")
SGLANG_MAMBA_REQS = Cite("sglang", "model_runner_kv_cache_mixin.py init_memory (max_num_reqs; "
                                   "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3)")

VLLM_BLOCK_TOKENS = 16           # CacheConfig.block_size on CUDA
VLLM_UTILIZATION = 0.9           # CacheConfig.gpu_memory_utilization
SGLANG_PAGE_TOKENS = 1           # ServerArgs.page_size
# vLLM's sampler warm-up, per request and vocabulary entry, at its peak (the re-scatter in apply_top_k_top_p):
# the model's bf16 logits (2, held by the caller), their fp32 copy (4), the sort's fp32 values (4) and int64
# indices (8), the top-k mask (1), the top-p probabilities (4) and mask (1), the re-scattered fp32 logits (4).
SAMPLER_BYTES = 2 + 4 + 4 + 8 + 1 + 4 + 1 + 4
KV_DTYPES = {"vllm": ("bf16", "fp8"), "sglang": ("bf16", "fp8")}   # --kv-cache-dtype auto, fp8 (no int8 cache)
VLLM_KERNEL_BLOCK = 16           # the attention backends' block alignment on CUDA (FlashAttention: multiples of 16)
SGLANG_MAMBA_RATIO = (9, 10)     # ServerArgs.mamba_full_memory_ratio = 0.9, as a fraction
SGLANG_SLOTS_PER_REQUEST = 3     # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (radix cache on, no extra buffer)


# ---------------------------------------------------------------- vLLM

@formula("servers/vllm/defaults", "vllm serve: T = 8192, max_num_seqs = 1024 on GPUs of >= 70 GiB other than A100; "
                                  "else T = 2048, max_num_seqs = 256; max_num_seqs <= T", VLLM_DEFAULTS, COUNT)
def vllm_default_tokens(*, big):
    return 8192 if big else 2048


def vllm_default_seqs(*, big, T):
    return min(1024 if big else 256, T)


@formula("servers/vllm/requested", "floor(u*C)  (the share of the GPU's total this instance may use)",
         Cite("vllm-memory", "vllm/v1/worker/gpu_worker.py Worker.init_device requested_memory"))
def vllm_requested_bytes(*, u, C):
    return int(u * C)


@formula("servers/vllm/forward_peak", "T*e*(2h + max(qkv/t + o/t + h, F))  (the residual and the normed stream; "
                                      "the wider of the attention block's q,k,v, output and o_proj output and the "
                                      "MLP's transient F per token)", VLLM_RUNNER)
def vllm_forward_peak_bytes(*, T, e, h, qkv_t, o_t, F):
    return T * e * (2 * h + max(qkv_t + o_t + h, F))


@formula("servers/vllm/sampler_peak", f"(T + 2R)*h*e + R*V*{SAMPLER_BYTES}  (the profile's hidden states, the "
                                      f"R rows sampled and their random copy; per logit: bf16 logits 2, fp32 4, "
                                      f"sorted values 4, int64 indices 8, top-k mask 1, top-p probabilities 4 and "
                                      f"mask 1, re-scattered 4 B)", VLLM_SAMPLER)
def vllm_sampler_peak_bytes(*, T, R, h, V, e):
    return (T + 2 * R) * h * e + R * V * SAMPLER_BYTES


@formula("servers/vllm/activation_peak", "max(forward_peak, sampler_peak)  (the sampler runs on the last "
                                         "pipeline stage only; torch's allocated peak over the profile run)",
         Cite("vllm-memory", "vllm/utils/mem_utils.py memory_profiling torch_peak_increase"))
def vllm_activation_peak_bytes(*, forward, sampler):
    return max(forward, sampler)


@formula("servers/vllm/kv_pool", "floor(u*C) - W - A  (requested memory less the weights and the profiled "
                                 "activation peak: vLLM's available KV cache memory)", VLLM_WORKER)
def vllm_kv_pool_bytes(*, requested, W, A):
    return requested - W - A


@formula("servers/vllm/kv_blocks", "floor(pool / (B*KV_tok))  (blocks of B tokens on every layer of the GPU: "
                                   "num_gpu_blocks)", VLLM_BLOCKS, COUNT)
def vllm_blocks(*, pool, B, KV_tok):
    return max(0, pool // (B * KV_tok))


@formula("servers/vllm/max_concurrency", "blocks / ceil(s/B)  (\"Maximum concurrency for s tokens per request\")",
         VLLM_BLOCKS, RATIO)
def vllm_concurrency(*, blocks, s, B):
    return blocks / ceil_div(s, B)


@formula("servers/vllm/max_batch", "min(floor(blocks / ceil(s/B)), max_num_seqs)  (whole requests of s tokens; "
                                   "the scheduler runs at most max_num_seqs)", VLLM_BLOCKS, COUNT)
def vllm_max_batch(*, blocks, s, B, seqs):
    return min(blocks // ceil_div(s, B), seqs)


@formula("servers/max_context", "blocks*B  (the longest request whose cache fits: vLLM's estimated maximum model "
                                "length; SGLang's B = 1 token a page)", VLLM_BLOCKS, COUNT)
def max_context_tokens(*, blocks, B):
    return blocks * B


# ---------------------------------------------------------------- SGLang

@formula("servers/sglang/mem_fraction_static",
         "round((G - max(512 + 1.5*max(chunk, 2048) + 2*bs + tp*pp/8*1024, 10240 if G > 60*1024)) / G, 3)  "
         "(G the GPU's MiB as nvidia-smi reports them; chunk the chunked prefill size, bs the largest CUDA-graph batch)",
         SGLANG_DEFAULTS, RATIO)
def sglang_mem_fraction(*, G, chunk, bs, tp, pp):
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * bs + tp * pp / 8 * 1024
    if G > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((G - reserved) / G, 3)


def sglang_defaults(G: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by the GPU's MiB, as _handle_gpu_memory_settings sets them."""
    for below, chunk, small, large in ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80), (60 * 1024, 4096, 32, 160),
                                       (160 * 1024, 8192, 256, 512)):
        if G < below:
            return chunk, small if tp < 4 else large
    return 16384, 512


@formula("servers/sglang/free_at_start", "C - reserve - X_ctx  (free memory once the CUDA context is up, before the "
                                         "weights: total_gpu_memory)",
         Cite("sglang", "model_runner.py init_torch_distributed: get_available_gpu_memory"))
def sglang_free_bytes(*, C, reserve, X_ctx):
    return C - reserve - X_ctx


@formula("servers/sglang/kv_pool", "(M0 - W) - M0*(1 - f) = floor(f*M0) - W  (free after the weights less the "
                                   "share kept back for activations and CUDA graphs)", SGLANG_POOL)
def sglang_kv_pool_bytes(*, f, M0, W):
    return int(f * M0) - W


@formula("servers/sglang/kv_tokens", "floor(pool / KV_tok)  (max_total_num_tokens; page size 1)", SGLANG_POOL, COUNT)
def sglang_tokens(*, pool, KV_tok):
    return max(0, pool // KV_tok)


@formula("servers/sglang/max_batch", "floor(tokens / s)  (whole requests of s tokens)", SGLANG_POOL, COUNT)
def sglang_max_batch(*, tokens, s):
    return tokens // s


# ---------------------------------------------------------------- hybrid (Mamba + attention) models

@formula("servers/vllm/hybrid_block_size", f"{VLLM_KERNEL_BLOCK}*ceil(S_M / ({VLLM_KERNEL_BLOCK}*A_1))  (the "
                                           f"attention block raised until one attention page, B*A_1, holds one Mamba "
                                           f"state S_M; the Mamba page is padded up to it)", VLLM_HYBRID_BLOCK, COUNT)
def vllm_hybrid_block_tokens(*, S_M, A_1):
    return VLLM_KERNEL_BLOCK * ceil_div(S_M, VLLM_KERNEL_BLOCK * A_1)


@formula("servers/vllm/page", "B*A_1  (one block of one layer, attention or Mamba: the pool's unit)", VLLM_HYBRID_BLOCK)
def vllm_page_bytes(*, B, A_1):
    return B * A_1


@formula("servers/vllm/kv_blocks", "floor(floor(pool / page) / S)  (S: the layers of this GPU in the largest KV "
                                   "cache group; each of the S shared tensors holds num_gpu_blocks pages)",
         VLLM_GROUPS, COUNT)
def vllm_hybrid_blocks(*, pool, page, S):
    return max(0, pool // page // S)


@formula("servers/vllm/blocks_per_request", "G_a*ceil(s/B) + G_M  (a block per B tokens in each attention group, one "
                                            "per Mamba group: its state, whatever the context)", VLLM_HYBRID_REPORT,
         COUNT)
def vllm_blocks_per_request(*, G_a, G_M, s, B):
    return G_a * ceil_div(s, B) + G_M


@formula("servers/vllm/kv_cache_size_tokens", "floor(blocks / (G_a + G_M)) * min(B, s)  (\"GPU KV cache size\": "
                                              "the blocks shared out evenly over the groups, times the smallest "
                                              "group block size; a Mamba group's is max_model_len)",
         VLLM_HYBRID_REPORT, COUNT)
def vllm_hybrid_logged_tokens(*, blocks, G_a, G_M, B, s):
    return blocks // (G_a + G_M) * min(B, s)


@formula("servers/vllm/max_concurrency", "blocks / (G_a*ceil(s/B) + G_M)  (\"Maximum concurrency for s tokens per "
                                         "request\")", VLLM_HYBRID_REPORT, RATIO)
def vllm_hybrid_concurrency(*, blocks, per_request):
    return blocks / per_request


@formula("servers/vllm/max_batch", "min(floor(blocks / (G_a*ceil(s/B) + G_M)), max_num_seqs)", VLLM_HYBRID_REPORT,
         COUNT)
def vllm_hybrid_max_batch(*, blocks, per_request, seqs):
    return min(blocks // per_request, seqs)


@formula("servers/max_context", "floor((blocks - G_M) / G_a)*B  (the longest request whose attention blocks fit "
                                "beside its Mamba blocks: vLLM's estimated maximum model length)", VLLM_HYBRID_REPORT,
         COUNT)
def vllm_hybrid_max_context(*, blocks, G_a, G_M, B):
    return max(0, (blocks - G_M) // G_a * B)


@formula("servers/sglang/mamba_slots", "floor(rest * r / ((1 + r) * M_req))  (max_mamba_cache_size: r/(1 + r) of the "
                                       "memory left for caches, in whole request states M_req)", SGLANG_MAMBA, COUNT)
def sglang_mamba_slots(*, rest, r_num, r_den, M_req):
    return max(0, rest * r_num // ((r_den + r_num) * M_req))


@formula("servers/sglang/mamba_pool", "slots*M_req  (the Mamba state pool)", SGLANG_MAMBA)
def sglang_mamba_pool_bytes(*, slots, M_req):
    return slots * M_req


@formula("servers/sglang/kv_pool", "rest - mamba_pool  (what the Mamba state pool leaves to the attention layers' KV "
                                   "cache)", SGLANG_MAMBA)
def sglang_hybrid_kv_pool_bytes(*, rest, mamba):
    return rest - mamba


@formula("servers/sglang/max_running_requests", "min(clamp(floor(tokens*512/s), 2048, 4096), floor(slots/3))  "
                                                "(each running request may hold up to 3 Mamba slots)",
         SGLANG_MAMBA_REQS, COUNT)
def sglang_hybrid_running(*, tokens, s, slots):
    return min(min(max(tokens * 512 // s, 2048), 4096), slots // SGLANG_SLOTS_PER_REQUEST)


@formula("servers/sglang/max_batch", "min(floor(tokens / s), max_running_requests)", SGLANG_MAMBA_REQS, COUNT)
def sglang_hybrid_max_batch(*, tokens, s, running):
    return min(tokens // s, running)


@record(slots=True)
class HybridLayout:
    """A hybrid model as the servers cache it on each pipeline stage's GPUs."""
    attention_layers: int              # L_a, the whole model
    mamba_layers: int                  # L_M, the whole model
    stage_attention: tuple[int, ...]   # per stage
    stage_mamba: tuple[int, ...]
    group_layers: int                  # S: layers per KV cache group (vLLM)
    attention_groups: int              # G_a
    mamba_groups: int                  # G_M
    stage_group_layers: tuple[int, ...]   # per stage: its layers in its fullest group
    attention_token_bytes: int         # A_1: one token's keys and values in one attention layer on one GPU
    mamba_state_bytes: int             # S_M: one request's state in one Mamba layer on one GPU
    state_kw: tuple[tuple[str, int], ...]   # the inputs of servers/mamba_state_per_layer


def vllm_groups(pattern: str, pp: int) -> tuple[int, int, int, tuple[int, ...]]:
    """(S, G_a, G_M, each stage's layers in its fullest group) by kv_cache_utils.py
    _get_kv_cache_groups_uniform_page_size: the layers of each kind in model order, the group size
    the smaller kind's count (the larger's when it is under 1.5 times the smaller), each kind cut
    into ceil(n/S) groups taking every ceil(n/S)-th layer; a stage's tensors are shared by one layer
    of each group, so it needs as many as its fullest group has layers there."""
    kinds = [[i for i, c in enumerate(pattern) if c == k] for k in "*M"]
    lo, hi = min(len(k) for k in kinds), max(len(k) for k in kinds)
    S = hi if 2 * hi < 3 * lo else lo
    counts = [ceil_div(len(k), S) for k in kinds]
    groups = [k[i::n] for k, n in zip(kinds, counts) for i in range(n)]
    per = len(pattern) // pp
    stage = tuple(max(sum(1 for x in g if j * per <= x < (j + 1) * per) for g in groups) for j in range(pp))
    return S, counts[0], counts[1], stage


def hybrid_layout(model: ModelSpec, tp: int, pp: int, kv_bytes: int) -> HybridLayout | None:
    """None for a model without Mamba layers."""
    if not model.hybrid or model.mamba is None or "M" not in model.layer_pattern:
        return None
    pattern = model.layer_pattern
    if "*" not in pattern:
        raise SpecError(f"--server: {model.name} has no attention layers (model.layer_pattern {pattern!r}); the "
                        f"server models here are for attention + Mamba hybrids; drop --server")
    state_kw = dict(mamba_state_kw(model, tp), e_c=CONV_STATE_BYTES, e_s=SSM_STATE_BYTES)
    d = model.kv_size // model.num_kv_heads
    A_1 = 2 * ceil_div(model.num_kv_heads, tp) * d * kv_bytes
    per = len(pattern) // pp
    stages = [pattern[j * per:(j + 1) * per] for j in range(pp)]
    S, G_a, G_M, stage_S = vllm_groups(pattern, pp)
    return HybridLayout(pattern.count("*"), pattern.count("M"), tuple(st.count("*") for st in stages),
                        tuple(st.count("M") for st in stages), S, G_a, G_M, stage_S, A_1,
                        mamba_state_layer_bytes.fn(**state_kw), tuple(state_kw.items()))


# ---------------------------------------------------------------- the answer

@record(slots=True)
class ServerSettings:
    """What the user set; None: the server's default."""
    name: str
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None


@record(slots=True)
class ServerAnswer:
    name: str
    stage: str                      # the pipeline stage with the fewest blocks: it sets the pool for all
    context: int                    # s: tokens each request holds (vLLM's max_model_len)
    batch: int
    capacity_bytes: int             # C
    weights_bytes: int
    activation_peak_bytes: int      # vLLM: the profile's; SGLang: none profiled (f keeps a share back)
    kv_pool_bytes: int              # per GPU
    kv_token_bytes: int             # KV_tok: one token on one GPU
    block_tokens: int
    kv_blocks: int
    kv_tokens: int                  # the token count the server logs (dense: kv_blocks * block_tokens)
    max_context: int
    max_batch: int
    max_concurrency: float
    settings: tuple[tuple[str, int | float], ...]    # every setting, given or defaulted
    terms: tuple[Term, ...]
    assumes: tuple[str, ...]
    hybrid: tuple[tuple[str, int | float], ...] = ()   # a hybrid model's Mamba figures (empty: no Mamba layers)
    state_log: tuple[str, ...] = ()   # what the server logs about the Mamba state before the KV cache lines

    @property
    def fits(self) -> bool:
        return self.kv_blocks > 0 and self.context <= self.max_context and self.batch <= self.max_batch

    @property
    def log_lines(self) -> tuple[str, ...]:
        """The start-up lines the server prints for these figures."""
        if self.name == "vllm":
            return self.state_log + (f"Available KV cache memory: {self.kv_pool_bytes / GiB:.2f} GiB",
                    f"GPU KV cache size: {self.kv_tokens:,} tokens",
                    f"Maximum concurrency for {self.context:,} tokens per request: {self.max_concurrency:.2f}x")
        half = self.kv_tokens * self.kv_token_bytes / 2 / GiB
        return self.state_log + (f"KV Cache is allocated. #tokens: {self.kv_tokens}, K size: {half:.2f} GB, "
                                 f"V size: {half:.2f} GB",)


def check_server(settings: ServerSettings, kv_precision: str) -> None:
    """What the servers refuse, each a one-line SpecError (exit 2)."""
    name = settings.name
    if name not in SERVERS:
        raise SpecError(f"--server: invalid choice {name!r}; choose from {', '.join(SERVERS)}")
    if name != "vllm":
        for flag, value in (("--gpu-memory-utilization", settings.gpu_memory_utilization),
                            ("--max-num-batched-tokens", settings.max_num_batched_tokens),
                            ("--max-num-seqs", settings.max_num_seqs)):
            if value is not None:
                raise SpecError(f"{flag} is vLLM's setting; with --server {name} drop it (or use --server vllm)")
    if name != "sglang" and settings.mem_fraction_static is not None:
        raise SpecError(f"--mem-fraction-static is SGLang's setting; with --server {name} drop it (or use --server "
                        f"sglang)")
    if kv_precision not in KV_DTYPES[name]:
        raise SpecError(f"--kv-precision {kv_precision}: {name} has no {kv_precision} KV cache (kv-cache-dtype auto "
                        f"or fp8); give --kv-precision {' or '.join(KV_DTYPES[name])}")


def check_unused(opts) -> None:
    """A server's setting without --server is bad input: it would change nothing."""
    for flag, value, name in (("--gpu-memory-utilization", opts.gpu_memory_utilization, "vllm"),
                              ("--max-num-batched-tokens", opts.max_num_batched_tokens, "vllm"),
                              ("--max-num-seqs", opts.max_num_seqs, "vllm"),
                              ("--mem-fraction-static", opts.mem_fraction_static, "sglang")):
        if value is not None:
            raise SpecError(f"{flag} is {'vLLM' if name == 'vllm' else 'SGLang'}'s setting; add --server {name}")


def _mlp_transient(model: ModelSpec, t: int) -> int:
    """F: the widest MLP transient per token on one GPU. Dense (vLLM's LlamaMLP and GELU MLPs): gated
    gate_up 2f/t and the activation's output f/t, else fc1 f/t and its activation f/t. MoE (fused_moe's
    fused_experts: cache1 [k, c*f_e/t] and cache3 [k, h] share one buffer, cache2 [k, f_e/t]; the shared
    experts' output h held meanwhile)."""
    c = 3 if model.mlp.gated else 2
    dense = ceil_div(c * model.ffn_hidden_size, t)
    if model.moe is None:
        return dense
    m = model.moe
    up = ceil_div((2 if model.mlp.gated else 1) * m.expert_ffn_size, t)
    moe = m.experts_per_token * (max(up, model.hidden_size) + ceil_div(m.expert_ffn_size, t)) + model.hidden_size
    moe += ceil_div(c * m.num_shared_experts * m.expert_ffn_size, t)
    return max(moe, dense if m.first_dense_layers else 0)


def _attention_widths(model: ModelSpec, t: int) -> tuple[int, int]:
    """(q,k,v per GPU, attention output per GPU): GQA q + 2*g*d and a*d; MLA's decompressed
    q and k of a*(d_nope + d_rope) and v of a*d_v, output a*d_v."""
    if model.mla is not None:
        return ceil_div(2 * model.q_size + model.kv_size, t), ceil_div(model.kv_size, t)
    return ceil_div(model.q_size, t) + 2 * ceil_div(model.kv_size, t), ceil_div(model.q_size, t)


def plan_server(serving, settings: ServerSettings) -> ServerAnswer:
    """The server's KV pool on the GPU that binds, its blocks, and what fits (serving: a
    fitplan.serving.ServingAnswer for the same model, layout and precisions)."""
    check_server(settings, serving.kv_precision)
    from fitplan.serving import KV_BYTES, _kv
    m, c, tp, pp = serving.model, serving.cluster, serving.tp, serving.pp
    e = KV_BYTES[serving.kv_precision]
    hy = hybrid_layout(m, tp, pp, e)
    weights = dict(serving.stage_weights_bytes)
    names = list(weights)   # only, or first and last
    index = {"only": 0, "first": 0, "last": pp - 1}
    if hy is None:
        KV_tok = {st: _kv(m, t=tp, p=pp, s=1, b=1, e=e, per_gpu=True) for st in names}
    else:   # only the attention layers cache keys and values
        KV_tok = {st: hy.stage_attention[index[st]] * hy.attention_token_bytes for st in names}
    run = _vllm if settings.name == "vllm" else _sglang
    kw = lambda st: dict(W=weights[st], last=st != "first", KV_tok=KV_tok[st], hy=hy, i=index[st])
    # every stage sizes its own pool; the engine takes the fewest blocks, so the binding stage is reported
    stage = min(names, key=lambda st: run(RAW, serving, settings, **kw(st))["blocks"])
    ev = Trace()
    out = run(ev, serving, settings, **kw(stage))
    limit = serving.max_context_limit
    if "max_context" in out:   # vLLM's hybrid rule: the request's Mamba blocks come first
        max_context = out["max_context"]
    else:
        max_context = ev(max_context_tokens, key="servers/max_context", blocks=out["blocks"], B=out["B"])
    if limit is not None:
        max_context = min(max_context, limit)
    return ServerAnswer(
        name=settings.name, stage=stage, context=serving.context, batch=serving.batch,
        capacity_bytes=c.gpu.memory_bytes, weights_bytes=weights[stage], activation_peak_bytes=out["A"],
        kv_pool_bytes=out["pool"], kv_token_bytes=KV_tok[stage], block_tokens=out["B"], kv_blocks=out["blocks"],
        kv_tokens=out.get("tokens", out["blocks"] * out["B"]), max_context=max_context, max_batch=out["max_batch"],
        max_concurrency=out["concurrency"], settings=tuple(out["settings"].items()), terms=tuple(ev.terms),
        assumes=out["assumes"], hybrid=tuple(out.get("hybrid", {}).items()), state_log=out.get("state_log", ()))


def _state_term(ev, hy: HybridLayout) -> int:
    return ev(mamba_state_layer_bytes, key="servers/mamba_state_per_layer", **dict(hy.state_kw))


def _hybrid_assumes(hy: HybridLayout) -> str:
    return (f"Mamba state per request and layer: a conv state of d_conv - 1 columns in bf16 and an SSM state in "
            f"float32 ({hy.mamba_state_bytes:,} B per GPU), the mamba_ssm_cache_dtype Nemotron-H's config.json states; "
            f"SGLang defaults to float32 and vLLM releases with the NemotronH config hook read it from the config, "
            f"while earlier vLLM releases (and --mamba-ssm-cache-dtype bfloat16, or SGLANG_MAMBA_SSM_DTYPE) keep it in "
            f"bf16, about half the state; no speculative decoding (its extra Mamba states are not modelled)")


def _vllm(ev, serving, settings: ServerSettings, *, W: int, last: bool, KV_tok: int, hy: HybridLayout | None,
          i: int) -> dict:
    m, c, tp = serving.model, serving.cluster, serving.tp
    C = c.gpu.memory_bytes
    big = C >= 70 * GiB and "a100" not in c.gpu.name.lower()
    T = settings.max_num_batched_tokens or ev(vllm_default_tokens, key="servers/vllm/max_num_batched_tokens", big=big)
    R = settings.max_num_seqs or vllm_default_seqs(big=big, T=T)
    if T < R:   # SchedulerConfig's check
        raise SpecError(f"max_num_batched_tokens {T} is below max_num_seqs {R}: vLLM requires max_num_batched_tokens "
                        f">= max_num_seqs; raise --max-num-batched-tokens or lower --max-num-seqs")
    u = VLLM_UTILIZATION if settings.gpu_memory_utilization is None else settings.gpu_memory_utilization
    requested = ev(vllm_requested_bytes, key="servers/vllm/requested", u=u, C=C)
    qkv_t, o_t = _attention_widths(m, tp)
    forward = ev(vllm_forward_peak_bytes, key="servers/vllm/forward_peak", T=T, e=ACT_BYTES, h=m.hidden_size,
                 qkv_t=qkv_t, o_t=o_t, F=_mlp_transient(m, tp))
    sampler = ev(vllm_sampler_peak_bytes, key="servers/vllm/sampler_peak", T=T, R=min(R, T), h=m.hidden_size,
                 V=m.vocab_size, e=ACT_BYTES) if last else 0
    A = ev(vllm_activation_peak_bytes, key="servers/vllm/activation_peak", forward=forward, sampler=sampler)
    pool = ev(vllm_kv_pool_bytes, key="servers/vllm/kv_pool", requested=requested, W=W, A=A)
    s = serving.context
    extra = {}
    if hy is None:
        B = VLLM_BLOCK_TOKENS
        blocks = ev(vllm_blocks, key="servers/vllm/kv_blocks", pool=pool, B=B, KV_tok=KV_tok)
        concurrency = ev(vllm_concurrency, key="servers/vllm/max_concurrency", blocks=blocks, s=s, B=B)
        max_batch = ev(vllm_max_batch, key="servers/vllm/max_batch", blocks=blocks, s=s, B=B, seqs=R)
    else:
        B, blocks, concurrency, max_batch, extra = _vllm_hybrid(ev, hy, pool=pool, s=s, R=R, i=i)
    free = C - c.reserve_bytes - c.cuda_context_bytes
    assumes = [
        f"vLLM's V1 engine as `vllm serve` starts it: block_size {B}, gpu_memory_utilization {u:g}, "
        f"max_num_batched_tokens {T:,}, max_num_seqs {R:,}, CUDA graphs on, no LoRA, no speculative decoding",
        "C is the preset's memory, what nvidia-smi reports; vLLM reads CUDA's total, a few hundred MiB less on "
        "the same board (the driver's reservation), so its pool is smaller by u times that",
        "the CUDA context and NCCL's communicators exist before vLLM's first snapshot, so they come out of the "
        "1 - u share, not the pool; the non-torch memory that appears during the profile run (kernels loaded on "
        "first use, NCCL channels first connected) and the CUDA-graph estimate vLLM subtracts from v0.21 on are "
        "not modelled: each is usually a few hundred MiB, and the pool here is larger by them",
        "the profile's activation peak is the larger of the forward pass (the widest layer's transient, its "
        "attention skipped as in the profile run) and the sampler's warm-up (native top-k/top-p sort, vLLM's "
        "default on CUDA; VLLM_USE_FLASHINFER_SAMPLER=1 needs less); allocator rounding not counted",
        f"max_context is the longest request vLLM would accept "
        f"({'blocks*' + str(B) if hy is None else 'floor((blocks - G_M)/G_a)*' + str(B)}); it refuses to start when "
        f"--context (max_model_len) needs more blocks than the pool holds",
    ]
    if free < requested:
        assumes.append(f"free memory at start ({free / GiB:.2f} GiB: capacity less --reserve and the CUDA context) is "
                       f"below u*C ({requested / GiB:.2f} GiB): vLLM refuses to start; lower "
                       f"--gpu-memory-utilization")
        blocks = max_batch = 0
        if hy is not None:   # no pool at all: nothing logged, no request accepted
            extra.update(tokens=0, max_context=0)
    if m.sliding_window is not None:
        assumes.append("every layer caches the whole context (vLLM's hybrid allocator keeps only the window on "
                       "sliding-window layers, so it holds more tokens than this)")
    if hy is not None:
        assumes += extra.pop("assumes")
    settings_out = {"gpu_memory_utilization": u, "block_size": B, "max_num_batched_tokens": T, "max_num_seqs": R}
    return dict(pool=pool, A=A, B=B, blocks=blocks, concurrency=concurrency, max_batch=max_batch,
                settings=settings_out, assumes=tuple(assumes), **extra)


def _vllm_hybrid(ev, hy: HybridLayout, *, pool: int, s: int, R: int, i: int):
    """vLLM V1's hybrid KV cache manager: one pool of equal pages for attention and Mamba layers."""
    S_M = _state_term(ev, hy)
    B = ev(vllm_hybrid_block_tokens, key="servers/vllm/hybrid_block_size", S_M=S_M, A_1=hy.attention_token_bytes)
    page = ev(vllm_page_bytes, key="servers/vllm/page", B=B, A_1=hy.attention_token_bytes)
    S_i = hy.stage_group_layers[i]
    blocks = ev(vllm_hybrid_blocks, key="servers/vllm/kv_blocks", pool=pool, page=page, S=S_i)
    G_a, G_M = hy.attention_groups, hy.mamba_groups
    per_request = ev(vllm_blocks_per_request, key="servers/vllm/blocks_per_request", G_a=G_a, G_M=G_M, s=s, B=B)
    tokens = ev(vllm_hybrid_logged_tokens, key="servers/vllm/kv_cache_size_tokens", blocks=blocks, G_a=G_a, G_M=G_M,
                B=B, s=s)
    concurrency = ev(vllm_hybrid_concurrency, key="servers/vllm/max_concurrency", blocks=blocks,
                     per_request=per_request)
    max_batch = ev(vllm_hybrid_max_batch, key="servers/vllm/max_batch", blocks=blocks, per_request=per_request,
                   seqs=R)
    max_context = ev(vllm_hybrid_max_context, key="servers/max_context", blocks=blocks, G_a=G_a, G_M=G_M, B=B)
    padding = 100 * (page - S_M) / S_M
    state_log = (f"Setting attention block size to {B} tokens to ensure that attention page size is >= mamba page "
                 f"size.",) + ((f"Padding mamba page size by {padding:.2f}% to ensure that mamba page size and "
                                f"attention page size are exactly equal.",) if page > S_M else ())
    hybrid = {"attention_layers": hy.attention_layers, "mamba_layers": hy.mamba_layers,
              "mamba_state_bytes_per_layer": S_M, "attention_token_bytes_per_layer": hy.attention_token_bytes,
              "page_bytes": page, "layers_per_group": hy.group_layers, "attention_groups": G_a, "mamba_groups": G_M,
              "stage_layers_per_group": S_i, "blocks_per_request": per_request}
    assumes = [
        f"hybrid KV cache manager: {hy.attention_layers} attention and {hy.mamba_layers} Mamba layers in groups of "
        f"{hy.group_layers} ({G_a} attention, {G_M} Mamba groups); every block is one page of {page:,} B per layer, "
        f"so the {S_M:,} B Mamba state is padded to it and the attention block size is raised to {B} tokens",
        "prefix caching off, mamba_cache_mode none, the default vLLM set for hybrid models from v0.10.2 (one Mamba "
        "block per group and request); with prefix caching on (--enable-prefix-caching, or a release that turns it "
        "on for hybrids) mamba_cache_mode align holds 2 Mamba blocks per group and request, and all one per block "
        "of tokens with a block size rounded to the Mamba chunk: not modelled; --no-enable-prefix-caching matches "
        "this",
        "\"GPU KV cache size\" is what vLLM logs (the blocks shared out evenly over all groups, so it understates the "
        "tokens one request may hold); max_context is the longest request whose attention blocks fit beside its "
        "Mamba blocks",
        _hybrid_assumes(hy),
        "the profile run's forward peak is the attention and MLP layers' transient; a Mamba layer's (in_proj output, "
        "the chunked scan's states) is not counted",
    ]
    return B, blocks, concurrency, max_batch, dict(tokens=tokens, max_context=max_context, hybrid=hybrid,
                                                   state_log=state_log, assumes=assumes)


def _sglang(ev, serving, settings: ServerSettings, *, W: int, last: bool, KV_tok: int, hy: HybridLayout | None,
            i: int) -> dict:
    c, tp, pp = serving.cluster, serving.tp, serving.pp
    C = c.gpu.memory_bytes
    G = C // MiB
    chunk, bs = sglang_defaults(G, tp)
    f = settings.mem_fraction_static
    if f is None:
        f = ev(sglang_mem_fraction, key="servers/sglang/mem_fraction_static", G=G, chunk=chunk, bs=bs, tp=tp, pp=pp)
    M0 = ev(sglang_free_bytes, key="servers/sglang/free_at_start", C=C, reserve=c.reserve_bytes,
            X_ctx=c.cuda_context_bytes)
    s = serving.context
    extra = {}
    if hy is None:
        pool = ev(sglang_kv_pool_bytes, key="servers/sglang/kv_pool", f=f, M0=M0, W=W)
        tokens = ev(sglang_tokens, key="servers/sglang/kv_tokens", pool=pool, KV_tok=KV_tok)
        max_batch = ev(sglang_max_batch, key="servers/sglang/max_batch", tokens=tokens, s=s)
        concurrency = tokens / s
    else:
        rest = ev(sglang_kv_pool_bytes, key="servers/sglang/cache_memory", f=f, M0=M0, W=W)
        pool, tokens, max_batch, concurrency, extra = _sglang_hybrid(ev, hy, rest=rest, KV_tok=KV_tok, s=s)
    assumes = (
        f"SGLang's launch_server defaults: page size 1, mem_fraction_static {f:g}"
        + ("" if settings.mem_fraction_static is not None else
           f" from the GPU's {G:,} MiB (chunked_prefill_size {chunk:,}, cuda_graph_max_bs {bs})"),
        "the free memory at start is the GPU's less --reserve and the CUDA context (--cuda-context); NCCL's "
        "buffers and what loading leaves in the allocator's cache are not counted, so the pool here is larger "
        "by them",
        "the activations and CUDA graphs are not profiled: SGLang keeps 1 - mem_fraction_static of the free "
        "memory back for them",
    ) + (("max_running_requests (the request-slot pool, at most a few thousand) is not modelled as a cap on the "
          "batch",) if hy is None else tuple(extra.pop("assumes")))
    settings_out = {"mem_fraction_static": f, "page_size": SGLANG_PAGE_TOKENS, "chunked_prefill_size": chunk,
                    "cuda_graph_max_bs": bs}
    return dict(pool=pool, A=0, B=SGLANG_PAGE_TOKENS, blocks=tokens, concurrency=concurrency, max_batch=max_batch,
                settings=settings_out, assumes=assumes, **extra)


def _sglang_hybrid(ev, hy: HybridLayout, *, rest: int, KV_tok: int, s: int):
    """SGLang's hybrid pools: a pool of Mamba state slots, then the attention layers' KV cache."""
    S_M = _state_term(ev, hy)
    M_req = hy.mamba_layers * S_M   # mamba_cache_per_req: every Mamba layer of the model
    r_num, r_den = SGLANG_MAMBA_RATIO
    slots = ev(sglang_mamba_slots, key="servers/sglang/mamba_slots", rest=rest, r_num=r_num, r_den=r_den, M_req=M_req)
    mamba = ev(sglang_mamba_pool_bytes, key="servers/sglang/mamba_pool", slots=slots, M_req=M_req)
    pool = ev(sglang_hybrid_kv_pool_bytes, key="servers/sglang/kv_pool", rest=rest, mamba=mamba)
    tokens = ev(sglang_tokens, key="servers/sglang/kv_tokens", pool=pool, KV_tok=KV_tok)
    running = ev(sglang_hybrid_running, key="servers/sglang/max_running_requests", tokens=tokens, s=s, slots=slots)
    max_batch = ev(sglang_hybrid_max_batch, key="servers/sglang/max_batch", tokens=tokens, s=s, running=running)
    K, C_t, P, N = (dict(hy.state_kw)[k] for k in ("K", "C_t", "P", "N"))
    H_t = dict(hy.state_kw)["H"] // dict(hy.state_kw)["t"]
    conv = (slots + 1) * hy.mamba_layers * (K - 1) * C_t * dict(hy.state_kw)["e_c"]
    ssm = (slots + 1) * hy.mamba_layers * H_t * P * N * dict(hy.state_kw)["e_s"]
    state_log = (f"Mamba Cache is allocated. max_mamba_cache_size: {slots}, conv_state size: {conv / GiB:.2f}GB, "
                 f"ssm_state size: {ssm / GiB:.2f}GB",)
    hybrid = {"attention_layers": hy.attention_layers, "mamba_layers": hy.mamba_layers,
              "mamba_state_bytes_per_layer": S_M, "mamba_state_bytes_per_request": M_req,
              "mamba_full_memory_ratio": r_num / r_den, "max_mamba_cache_size": slots, "mamba_pool_bytes": mamba,
              "max_running_requests": running}
    assumes = [
        f"hybrid pools: mamba_full_memory_ratio {r_num / r_den:g} gives {r_num}/{r_num + r_den} of the memory left "
        f"for caches to {slots:,} Mamba state slots of {M_req:,} B (every Mamba layer of the model), the rest to the "
        f"KV cache of the attention layers; computed on integers here, where SGLang divides floating GB (a slot may "
        f"differ at an exact boundary)",
        f"radix cache on (SGLang's default), no extra Mamba buffer (mamba_scheduler_strategy no_buffer): a running "
        f"request may hold {SGLANG_SLOTS_PER_REQUEST} slots, so at most floor(slots/{SGLANG_SLOTS_PER_REQUEST}) run "
        f"at once; --disable-radix-cache makes it 1 and, with --max-running-requests, sizes the slots from it: not "
        f"modelled",
        "context_len (the request-slot estimate's) is --context, as if launched with --context-length; the Mamba "
        "pool's padding slot (logged in its size) is not taken from the KV budget",
        _hybrid_assumes(hy),
    ]
    return pool, tokens, max_batch, min(tokens / s, running), dict(hybrid=hybrid, state_log=state_log,
                                                                    assumes=assumes)
