"""Serving memory and the decode bound (`fitplan infer`): weights per GPU, the KV cache, the
largest batch and context that fit, and a memory-bound lower bound on one decode step.

Symbols: L layers, p pipeline stages, t tensor-parallel degree, g key/value heads, d head
size, s context (tokens each sequence holds in the cache: prompt and output), b batch
(sequences decoded at once), e bytes per cached element; MLA: r the key/value latent rank,
d_r the decoupled rotary key width; psi parameters one GPU holds, M usable bytes per GPU,
B the GPU's HBM bandwidth. One model instance: tp x pp GPUs, --gpus of them.

Parameters and their split over tp and pp are fitplan.counts.params' (through
fitplan.memory.stages.stage_psi): vocabulary-parallel embedding and head, replicated
norms, L/p layers per stage; routed experts are spread over the stage's t GPUs (expert
parallel over the tensor-parallel group; slicing each expert by t holds the same bytes).
"""
from dataclasses import replace

from fitplan.arith import ceil_div, minimum
from fitplan.errors import SpecError
from fitplan.explain import BYTES, COUNT, RAW, SECONDS, Term, Trace, formula
from fitplan.memory.breakdown import stage_at, stage_expert_psi, stage_psi
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig
from fitplan.specs.model import Position
from fitplan.specs.serving import KV_BYTES, KV_PRECISIONS, WEIGHT_FORMATS, WEIGHT_PRECISIONS, WeightFormat



# DeepSeek-V2's table of KV cache per token: GQA 2*n_g*d_h*l elements, MLA (d_c + d_h^R)*l
KV_TABLE = Cite("deepseek-v2", "Sec. 2.1.4, Table 1")
SERVING = Cite("fitplan", "formulas.md#serving")


# ---------------------------------------------------------------- the KV cache

@formula("serving/kv_cache", "2*L*g*d*s*b*e", KV_TABLE)
def gqa_kv_bytes(*, L, g, d, s, b, e):
    """Keys and values of g heads of d for every layer, token and sequence."""
    return 2 * L * g * d * s * b * e


@formula("serving/kv_cache_per_gpu", "2*(L/p)*ceil(g/t)*d*s*b*e  (kv heads split over tp; one each, "
                                     "replicated, when t > g)", KV_TABLE)
def gqa_kv_per_gpu_bytes(*, L, p, g, t, d, s, b, e):
    """One GPU's share: its stage's L/p layers, its g/t kv heads. With t > g each kv head is
    replicated on t/g ranks, so every rank holds one (vLLM's QKVParallelLinear)."""
    return gqa_kv_bytes.fn(L=L // p, g=ceil_div(g, t), d=d, s=s, b=b, e=e)


@formula("serving/kv_cache", "L*(r + d_r)*s*b*e", KV_TABLE)
def mla_kv_bytes(*, L, r, d_r, s, b, e):
    """MLA caches one compressed latent of r and one shared rotary key of d_r per token and
    layer, whatever the number of heads."""
    return L * (r + d_r) * s * b * e


@formula("serving/kv_cache_per_gpu", "(L/p)*(r + d_r)*s*b*e  (the latent is not split by heads: every tp "
                                     "rank holds all of it)", KV_TABLE)
def mla_kv_per_gpu_bytes(*, L, p, r, d_r, s, b, e):
    """The latent has no head axis, so tensor parallelism replicates it (vLLM's and SGLang's MLA
    backends; their data-parallel attention, which splits the batch instead, is not modelled)."""
    return mla_kv_bytes.fn(L=L // p, r=r, d_r=d_r, s=s, b=b, e=e)


def _kv(model: ModelSpec, *, t, p, s, b, e, per_gpu: bool, ev=None, key=None, L_a=None):
    """The KV cache (per_gpu: one GPU's share), by the attention's kind. L_a: a hybrid model's
    attention layers (the busiest stage's when per_gpu, with p = 1): only they cache keys and values."""
    call = ev or (lambda f, key=None, **kw: f.fn(**kw))
    if L_a is not None:
        f = gqa_kv_per_gpu_bytes if per_gpu else gqa_kv_bytes
        return call(f, key=key, L=L_a, g=model.num_kv_heads, d=model.kv_size // model.num_kv_heads, s=s, b=b, e=e,
                    **(dict(p=1, t=t) if per_gpu else {}))
    split = dict(p=p, t=t) if per_gpu else {}
    if model.mla is not None:
        f = mla_kv_per_gpu_bytes if per_gpu else mla_kv_bytes
        split.pop("t", None)
        return call(f, key=key, L=model.num_layers, r=model.mla.kv_lora_rank, d_r=model.mla.qk_rope_head_dim,
                    s=s, b=b, e=e, **split)
    f = gqa_kv_per_gpu_bytes if per_gpu else gqa_kv_bytes
    return call(f, key=key, L=model.num_layers, g=model.num_kv_heads, d=model.kv_size // model.num_kv_heads,
                s=s, b=b, e=e, **split)


# ---------------------------------------------------------------- a hybrid model's recurrent state

# vLLM's MambaStateShapeCalculator (vllm/model_executor/layers/mamba/mamba_utils.py): per sequence and Mamba layer a
# conv state of (d_conv - 1) x conv channels / t and a temporal state of heads / t x head dim x state (Mamba:
# d_inner / t x state); the conv state in the model's dtype, the SSM state in mamba_ssm_cache_dtype (float32 in
# Nemotron-H's and Nemotron 3's config.json)
SSM_STATE = Cite("mamba2", "mamba2.py allocate_inference_cache (conv_state, ssm_state); vLLM mamba_utils.py "
                           "MambaStateShapeCalculator (d_conv - 1 columns, extra_groups_for_head_shards); SGLang "
                           "configs/mamba_utils.py Mamba2StateShape")
CONV_STATE_BYTES, SSM_STATE_BYTES = 2, 4


@formula("serving/mamba_state_per_layer", "(K - 1)*C_t*e_c + (H/t)*P*N*e_s  (one sequence's conv state over its "
                                           "C_t channels on the GPU and its SSM state)", SSM_STATE)
def mamba_state_layer_bytes(*, K, C_t, H, t, P, N, e_c=CONV_STATE_BYTES, e_s=SSM_STATE_BYTES):
    """One Mamba layer's recurrent state for one sequence on one GPU: the last K - 1 inputs of the
    causal conv over the GPU's C_t channels and the SSM state of its H/t heads of P channels by N
    (Mamba: H = d_inner, P = 1). It does not grow with the context."""
    return (K - 1) * C_t * e_c + (H // t) * P * N * e_s


def mamba_state_kw(model: ModelSpec, t: int) -> dict:
    """The inputs of mamba_state_layer_bytes on one of t tensor-parallel GPUs, shaped as vLLM's
    MambaStateShapeCalculator and SGLang's Mamba2StateShape shape them: Mamba's conv over d_inner/t
    channels; Mamba-2's over (d_inner + 2GN)/t, its G groups replicated up to t where t does not
    divide them (extra_groups_for_head_shards)."""
    from fitplan.specs.model import SsmVersion
    m = model.mamba
    if m.version is SsmVersion.MAMBA1:
        C_t = ceil_div(m.d_inner, t)
    else:
        G = m.num_groups if m.num_groups % t == 0 else t
        C_t = (m.d_inner + 2 * G * m.state_size) // t
    return dict(K=m.conv_kernel, C_t=C_t, H=m.num_heads, t=t, P=m.head_dim, N=m.state_size)


@formula("serving/ssm_state", "L_M*S_M*b  (each Mamba layer's state per sequence; constant in the context)",
         SSM_STATE)
def ssm_state_bytes(*, L_M, S_M, b):
    """The recurrent state of L_M Mamba layers for b sequences on one GPU."""
    return L_M * S_M * b


def _ssm(model: ModelSpec, *, L_M, b, t, ev=None, key=None):
    """The Mamba layers' state (0 for a model without them)."""
    if model.mamba is None or not L_M:
        return 0
    call = ev or (lambda f, key=None, **kw: f.fn(**kw))
    S_M = call(mamba_state_layer_bytes, key=key and key + "_layer", **mamba_state_kw(model, t))
    return call(ssm_state_bytes, key=key, L_M=L_M, S_M=S_M, b=b)


# ---------------------------------------------------------------- weights

@formula("serving/weights", "ceil(psi*bits/8)", SERVING)
def weight_bytes(*, psi, bits):
    return ceil_div(psi * bits, 8)


@formula("serving/weights", "ceil((psi*bits + ceil(psi/G)*q)/8)  (G weights per group, q bits of scale and zero "
                            "point each)", Cite("awq", "Sec. 5.1 (group size 128)"))
def grouped_weight_bytes(*, psi, bits, G, q):
    return ceil_div(psi * bits + ceil_div(psi, G) * q, 8)


def _weights(ev, psi, fmt: WeightFormat, key: str):
    if fmt.group > 1:
        return ev(grouped_weight_bytes, key=key, psi=psi, bits=fmt.bits, G=fmt.group, q=fmt.group_bits)
    return ev(weight_bytes, key=key, psi=psi, bits=fmt.bits)


@formula("serving/weights_read", "W - W_e + W_e*min(E, b*k)/E  (the experts a batch's b tokens touch)", SERVING)
def weights_read_bytes(*, W, W_e, E, b, k):
    """Weights one GPU reads in a decode step: all but the routed experts no token picked; b
    tokens with k experts each touch at most min(E, b*k) of the E (routing assumed spread)."""
    return W - W_e + ceil_div(W_e * min(E, b * k), E)


# ---------------------------------------------------------------- what fits, how fast

# vLLM's EngineArgs.gpu_memory_utilization default: the engine's weights, KV cache and activations take at
# most this share of the GPU; the rest is the CUDA context, NCCL, cuBLAS and the sampler's workspace.
GPU_MEMORY_UTILIZATION = 0.9


@formula("serving/usable_per_gpu", f"min(capacity - reserve, {GPU_MEMORY_UTILIZATION}*capacity)",
         Cite("vllm", "vllm/engine/arg_utils.py EngineArgs.gpu_memory_utilization = 0.9"), BYTES,
         ("the serving engine takes 90% of the GPU for weights, KV cache and activations (vLLM's default); "
          "--reserve lowers it further",))
def serving_usable_bytes(*, usable, capacity):
    return minimum(usable, int(capacity * GPU_MEMORY_UTILIZATION))


@formula("serving/largest", "floor((M - W)/KV_1)  (KV_1: the per-GPU cache of one more unit; 0 when the weights "
                            "do not fit)", SERVING, COUNT)
def largest_fitting(*, M, W, KV_1):
    """The KV cache is linear in b and in s: the largest count whose cache fits beside the weights."""
    return max(0, (M - W) // KV_1)


@formula("serving/decode_step_s", "(W_read + KV_gpu)/B", Cite("pope", "Sec. 2"), SECONDS)
def decode_step_s(*, W_read, KV_gpu, B):
    """Memory-bound decode: every step reads the GPU's weights and its whole cache once at
    least, so it takes at least this long at peak HBM bandwidth (a lower bound)."""
    return (W_read + KV_gpu) / B


# ---------------------------------------------------------------- the answer

@record(slots=True)
class ServingAnswer:
    model: ModelSpec
    cluster: ClusterSpec
    tp: int
    pp: int
    batch: int
    context: int
    weight_precision: str
    kv_precision: str
    stage: str                         # only | first | last: the GPU whose weights are largest
    weights_bytes_per_gpu: int
    kv_cache_bytes: int                # the batch's cache, each token's keys and values counted once
    kv_cache_bytes_per_gpu: int        # what the busiest GPU stores (replicas included)
    kv_cache_bytes_per_token: int      # all layers, counted once
    usable_bytes_per_gpu: int
    max_batch: int
    max_context: int
    max_context_limit: int | None      # the learned position table's length, where it caps the context
    weights_read_bytes_per_gpu: int
    decode_step_s_lower_bound: float | None   # None: the GPU states no HBM bandwidth
    terms: tuple[Term, ...]
    assumes: tuple[str, ...]
    assumed: tuple[str, ...] = ()
    stage_weights_bytes: tuple[tuple[str, int], ...] = ()   # each stage's weights per GPU: only, or first and last
    server: object = None              # fitplan.servers.ServerAnswer with --server: the server's own budget
    ssm_state_bytes_per_gpu: int = 0         # a hybrid model's Mamba layers: the batch's conv and SSM states
    ssm_state_bytes_per_sequence: int = 0    # all Mamba layers, one sequence, counted once: constant in the context
    attention_layers: int | None = None      # a hybrid model's layers with a KV cache (None: every layer)

    @property
    def per_gpu_bytes(self) -> int:
        return self.weights_bytes_per_gpu + self.kv_cache_bytes_per_gpu + self.ssm_state_bytes_per_gpu

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes_per_gpu - self.per_gpu_bytes

    @property
    def weights_fit(self) -> bool:
        return self.weights_bytes_per_gpu <= self.usable_bytes_per_gpu

    @property
    def fits(self) -> bool:
        return self.per_gpu_bytes <= self.usable_bytes_per_gpu

    @property
    def kv_replicas(self) -> int:
        """Copies of each cached element the tp ranks keep together (1: split, no copy)."""
        m, t = self.model, self.tp
        return t if m.mla is not None else max(1, t // m.num_kv_heads)


def check_layout(model: ModelSpec, cluster: ClusterSpec, *, tp: int, pp: int, context: int) -> None:
    """The rules a serving layout must keep, each a one-line SpecError."""
    if tp * pp != cluster.num_gpus:
        raise SpecError(f"--gpus is {cluster.num_gpus} but tp x pp = {tp} x {pp} = {tp * pp}; fitplan infer plans "
                        f"one model instance, so make tp x pp equal the GPU count")
    if model.num_heads % tp:
        raise SpecError(f"attention heads ({model.num_heads}) must be divisible by tp={tp}; pick a tp that "
                        f"divides {model.num_heads}")
    g = model.num_kv_heads
    if model.mla is None and g % tp and tp % g:
        raise SpecError(f"kv heads ({g}) and tp={tp}: one must divide the other (heads split, or each "
                        f"replicated on tp/{g} ranks)")
    if model.ffn_hidden_size % tp:
        raise SpecError(f"ffn size {model.ffn_hidden_size} must be divisible by tp={tp}")
    if model.mamba is not None and model.mamba.num_heads % tp:
        raise SpecError(f"Mamba heads ({model.mamba.num_heads}) must be divisible by tp={tp}; pick a tp that divides "
                        f"{model.mamba.num_heads}")
    if model.num_layers % pp:
        raise SpecError(f"layers ({model.num_layers}) must be divisible by pp={pp}; pick a pp that divides "
                        f"{model.num_layers}")
    if model.position is Position.LEARNED and context > model.max_seq_len:
        raise SpecError(f"--context {context} is longer than the model's learned position table "
                        f"({model.max_seq_len}); give --context <= {model.max_seq_len}")


def plan_serving(model: ModelSpec, cluster: ClusterSpec, *, tp: int, pp: int, batch: int, context: int,
                 weight_precision: str = "bf16", kv_precision: str = "bf16",
                 assumed: tuple[str, ...] = ()) -> ServingAnswer:
    """Weights and KV cache on the busiest GPU of a tp x pp instance serving `batch` sequences
    of `context` tokens, the largest batch and context that fit, and the decode bound."""
    if weight_precision not in WEIGHT_FORMATS:
        raise SpecError(f"--weight-precision: choose from {', '.join(WEIGHT_PRECISIONS)}")
    if kv_precision not in KV_BYTES:
        raise SpecError(f"--kv-precision: choose from {', '.join(KV_PRECISIONS)}")
    check_layout(model, cluster, tp=tp, pp=pp, context=context)
    ev, fmt, e = Trace(), WEIGHT_FORMATS[weight_precision], KV_BYTES[kv_precision]
    c = ParallelConfig(tp=tp, pp=pp, ep=tp)   # routed experts spread over the tp GPUs of a stage
    moe = model.moe

    served = replace(model, mtp_depth=0)   # multi-token-prediction modules are a training objective: not served

    def stage_weights(first: bool, where: str):
        st = stage_at(ev, served, c, 0 if first else pp - 1)   # pp divides the layers here: L/p each
        psi = stage_psi(ev, served, c, stage=st, key=f"params/stage_{where}")
        psi_e = 0 if moe is None else stage_expert_psi(ev, served, c, stage=st, key=f"params/stage_{where}_experts")
        return psi, psi_e

    stages = [("only", True)] if pp == 1 else [("first", True), ("last", False)]
    held = {name: stage_weights(first, name) for name, first in stages}
    stage = max(held, key=lambda name: sum(held[name]))
    psi, psi_e = held[stage]
    W = _weights(ev, psi + psi_e, fmt, "serving/weights_per_gpu")
    W_e = 0 if moe is None else _weights(ev, psi_e, fmt, "serving/weights_experts_per_gpu")
    by_stage = tuple((name, _weights(RAW, sum(held[name]), fmt, "")) for name in held)

    # a hybrid model: the KV cache of its attention layers only (the busiest stage's per GPU), and its Mamba layers'
    # recurrent state, constant in the context
    L_a = L_a_gpu = L_M_gpu = None
    if model.hybrid:
        per_stage = [stage_at(RAW, served, c, i) for i in range(pp)]
        L_a = model.layer_pattern.count("*")
        L_a_gpu = max(int(st.n_attention) for st in per_stage)
        L_M_gpu = max(int(st.n_mamba) for st in per_stage)
    kv_args = dict(t=tp, p=pp, e=e)
    kv_total = _kv(model, s=context, b=batch, per_gpu=False, ev=ev, L_a=L_a, **kv_args)
    kv_gpu = _kv(model, s=context, b=batch, per_gpu=True, ev=ev, L_a=L_a_gpu, **kv_args)
    kv_token = _kv(model, s=1, b=1, per_gpu=False, ev=ev, key="serving/kv_cache_per_token", L_a=L_a, **kv_args)
    ssm_gpu = _ssm(model, L_M=L_M_gpu, b=batch, t=tp, ev=ev, key="serving/ssm_state_per_gpu")
    ssm_sequence = _ssm(model, L_M=model.layer_pattern.count("M") if model.hybrid else 0, b=1, t=1, ev=ev,
                        key="serving/ssm_state_per_sequence")

    M = ev(serving_usable_bytes, key="serving/usable_per_gpu", usable=cluster.usable_bytes,
           capacity=cluster.gpu.memory_bytes)
    one_sequence = (_kv(model, s=context, b=1, per_gpu=True, ev=ev, key="serving/kv_per_gpu_per_sequence",
                        L_a=L_a_gpu, **kv_args)
                    + _ssm(model, L_M=L_M_gpu, b=1, t=tp, ev=ev, key="serving/ssm_state_per_gpu_per_sequence"))
    one_token = _kv(model, s=1, b=batch, per_gpu=True, ev=ev, key="serving/kv_per_gpu_per_token", L_a=L_a_gpu,
                    **kv_args)
    max_batch = ev(largest_fitting, key="serving/max_batch", M=M, W=W, KV_1=one_sequence)
    max_context = ev(largest_fitting, key="serving/max_context", M=M, W=W + ssm_gpu, KV_1=one_token)
    limit = model.max_seq_len if model.position is Position.LEARNED else None
    if limit is not None:
        max_context = min(max_context, limit)
    held = lambda s, b: (_kv(model, s=s, b=b, per_gpu=True, L_a=L_a_gpu, **kv_args)
                         + _ssm(model, L_M=L_M_gpu, b=b, t=tp))
    for n, s_of, b_of in ((max_batch, lambda n: context, lambda n: n), (max_context, lambda n: n, lambda n: batch)):
        # the closed form, checked against the cache itself: n fits, n + 1 does not
        fits = lambda n: W + held(s_of(n), b_of(n)) <= M
        assert n == 0 or fits(n), n
        assert not fits(n + 1) or n == limit, n

    if moe is None:
        W_read = W
    else:
        W_read = ev(weights_read_bytes, key="serving/weights_read_per_gpu", W=W, W_e=W_e, E=moe.num_experts, b=batch,
                    k=moe.experts_per_token)
    B = cluster.gpu.hbm_bytes_per_s
    # a decode step reads the cache and reads and writes the recurrent state
    step = None if B is None else ev(decode_step_s, key="serving/decode_step_s_lower_bound", W_read=W_read,
                                     KV_gpu=kv_gpu + 2 * ssm_gpu, B=B)
    return ServingAnswer(
        model=model, cluster=cluster, tp=tp, pp=pp, batch=batch, context=context, weight_precision=weight_precision,
        kv_precision=kv_precision, stage=stage, weights_bytes_per_gpu=W, kv_cache_bytes=kv_total,
        kv_cache_bytes_per_gpu=kv_gpu, kv_cache_bytes_per_token=kv_token, usable_bytes_per_gpu=M,
        max_batch=max_batch, max_context=max_context, max_context_limit=limit, weights_read_bytes_per_gpu=W_read,
        decode_step_s_lower_bound=step, terms=tuple(ev.terms), assumes=_assumptions(model, fmt, tp, pp),
        assumed=assumed, stage_weights_bytes=by_stage, ssm_state_bytes_per_gpu=ssm_gpu,
        ssm_state_bytes_per_sequence=ssm_sequence, attention_layers=L_a)


def _assumptions(model: ModelSpec, fmt: WeightFormat, tp: int, pp: int) -> tuple[str, ...]:
    out = ["every parameter is stored at the weight precision, the embedding and output head included (checkpoints "
           "that keep those in bf16 hold more)" + (f"; {fmt.note}" if fmt.note else ""),
           "memory per GPU is weights + KV cache within 90% of the GPU (vLLM's gpu_memory_utilization); "
           "activations, the sampler's logits and the engine's workspace come out of the other 10% and --reserve",
           "decode reads every weight the GPU holds (the input embedding's table counted in full, though a step "
           "gathers only b rows) and the whole cache at the full context: a lower bound at peak HBM bandwidth"]
    if model.moe is not None:
        out.append("routed experts are spread over the tp GPUs of a stage (expert parallel over the tp group); a "
                   "decode step of b tokens reads min(E, b*k) experts per MoE layer: routing assumed spread, an "
                   "upper bound on the experts touched")
    if pp > 1:
        out.append(f"with pp = {pp} a token passes the stages one after another: its latency is about pp times the "
                   f"step bound, and the bound is for the busiest stage")
    if model.hybrid:
        out.append("a hybrid model caches keys and values in its attention layers only; each Mamba layer keeps per "
                   "sequence a conv state of d_conv - 1 inputs (2 B each) and an SSM state of heads x head dim x "
                   "state in float32 (the mamba_ssm_cache_dtype Nemotron-H's and Nemotron 3's configs state; vLLM's "
                   "default follows the model's dtype, half of it), whatever the context; a decode step reads and "
                   "writes it")
    if model.mla is None and tp > model.num_kv_heads:
        out.append(f"tp {tp} > {model.num_kv_heads} kv heads: each kv head is replicated on {tp // model.num_kv_heads} "
                   f"GPUs (vLLM)")
    return tuple(out)
