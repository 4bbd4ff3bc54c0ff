"""Assemble the per-GPU memory of one pipeline stage: a flat list of formula calls.

This is the only place that knows which terms exist. `stage_memory` runs with any
evaluator (fitplan.explain): RAW over NumPy arrays in the search, a Trace for the one
configuration a report explains. The busiest GPU is the larger of the first stage (the
embedding, the most micro-batches in flight) and the last (the output layer and logits).
"""
from dataclasses import dataclass, field

from fitplan.arith import ceil_div, is_array, maximum, minimum, select
from fitplan.counts import params as P
from fitplan.counts import stages as ST
from fitplan.explain import RAW, Term, Trace, formula
from fitplan.memory import activations as A
from fitplan.memory import finetune as FT
from fitplan.memory import offload as OF
from fitplan.memory import runtime as RT
from fitplan.memory import states as S
from fitplan.memory import timeline as TL
from fitplan.parts import ACTIVATIONS, RUNTIME, STATES, part_keys
from fitplan.sources import Cite
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from fitplan.errors import SpecError
from fitplan.specs.model import LAYER_KINDS, Position
from fitplan.specs.parallel import Offload, Recompute

PARTS = part_keys(STATES, ACTIVATIONS, RUNTIME)   # the table of parts, fitplan.parts
STATE_PARTS = part_keys(STATES)
UNBOUNDED_MICROBATCHES = 2**40   # no global batch given: assume enough micro-batches to fill the pipeline
STAGE = Cite("korthikanti", "Sec. 4.2.3")


@dataclass(frozen=True, slots=True)
class Setup:
    """The scalar half of a question: what is trained, how, and on which GPUs. `assumed` names
    each default the request took instead of a value the user gave (the reports print them);
    it does not change any answer, so equality ignores it."""
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    assumed: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        m, t = self.model, self.training
        if m.position is Position.LEARNED and t.seq_len > m.max_seq_len:
            raise SpecError(f"training.seq_len {t.seq_len} is longer than the model's learned position table "
                            f"({m.max_seq_len}); use --seq-len <= {m.max_seq_len} or a RoPE model")
        problem = FT.check_supported(m, t)
        if problem:
            raise SpecError(problem)


@dataclass(frozen=True, slots=True)
class MoeShapes:
    """The MoE-layer symbols of fitplan.memory.activations: top-k, rho (capacity factor, or
    the dropless load imbalance), expert and shared-expert widths, experts."""
    k: int
    rho: float
    f_e: int
    f_s: int
    E: int
    w: int | None = None   # LatentMoE: the routed experts' latent width l

    def kw(self) -> dict:
        """The keywords these symbols add to a formula call for an MoE layer."""
        return dict(k=self.k, rho=self.rho, f_e=self.f_e, f_s=self.f_s, E=self.E,
                    **({} if self.w is None else {"w": self.w}))


@dataclass(frozen=True, slots=True)
class Shapes:
    """The per-layer activation symbols of fitplan.memory.activations, from the specs; moe
    is None for a dense model."""
    s: int
    h: int
    a: int
    q: int
    kv: int
    f: int
    n: int
    e: int
    M: int
    D: int
    r_extra: int = 0          # MLA: the latents and their norms' outputs, replicated over tp
    kernel: str = "eager"
    moe: MoeShapes | None = None
    e_l: int | None = None    # bytes of a stored linear input where it differs from e (fp8 recipes: 1)
    bias: str = "none"        # which linears have a bias (counts.params.bias_kind): op SAC cannot save an addmm

    @classmethod
    def of(cls, setup: Setup) -> "Shapes":
        m, tr = setup.model, setup.training
        moe = None if m.moe is None else MoeShapes(
            k=m.moe.experts_per_token,
            rho=m.moe.capacity_factor if m.moe.capacity_factor is not None else tr.moe_imbalance,
            f_e=m.moe.expert_ffn_size, f_s=m.moe.num_shared_experts * m.moe.expert_ffn_size, E=m.moe.num_experts,
            w=m.moe.latent_size)
        r_extra = 0 if m.mla is None else 2 * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
        return cls(s=tr.seq_len, h=m.hidden_size, a=m.num_heads, q=m.q_size, kv=m.kv_size, f=m.ffn_hidden_size,
                   n=3 if m.mlp.gated else 2, e=tr.act_bytes, M=1, D=1 if tr.dropout else 0,
                   r_extra=r_extra, kernel="eager" if tr.attention_kernel == "eager" else "flash", moe=moe,
                   e_l=1 if tr.recipe.compute != "bf16" and tr.act_bytes > 1 else None, bias=P.bias_kind(m))

    def kw(self, recompute=None) -> dict:
        """The keywords of a per-layer formula call (activations.per_layer_bytes and its kin);
        r_extra and kernel only where they differ from the formulas' defaults, bias only for op
        recompute (the one mode it changes) on a model with biases."""
        out = dict(s=self.s, h=self.h, a=self.a, q=self.q, kv=self.kv, f=self.f, n=self.n, e=self.e, M=self.M,
                   D=self.D)
        if self.r_extra:
            out["r_extra"] = self.r_extra
        if self.kernel != "eager":
            out["kernel"] = self.kernel
        if self.e_l is not None:
            out["e_l"] = self.e_l
        if self.bias != "none" and str(recompute) == "op":
            out["bias"] = self.bias
        return out


def _stage_layers_text(*, n_dense=None, **_):
    return ("A_layer*l  (one micro-batch through this stage's l layers)" if n_dense is None else
            "n_dense*A_layer + (l - n_dense)*A_moe  (one micro-batch through this stage's l layers)")


@formula("activations/layers", _stage_layers_text, STAGE)
def stage_layers_bytes(*, A_layer, l, n_dense=None, A_moe=0):
    n_d = l if n_dense is None else n_dense
    return A_layer * n_d + A_moe * (l - n_d)


@formula("activations/pipeline_in_flight", "A_stage*(chunks - v)/v  (the other micro-batches in flight)", STAGE)
def in_flight_bytes(*, A_stage, v, chunks):
    """chunks model chunks of l/v layers each are held; one micro-batch's worth, v of
    them, is counted in activations/layers."""
    return ceil_div(A_stage * (chunks - v), v)


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline rank as the memory and time models see it: its index, its layers (both
    stages' under DualPipe), how many of them are dense (MoE models; None for dense models),
    and whether it holds the embedding and the output head; for a hybrid model, how many of
    its layers are Mamba, attention, MLP and MoE blocks (None otherwise). Ints for one
    configuration, arrays over the search's candidates."""
    index: object
    layers: object       # multi-token-prediction modules' layers included (they sit with the head)
    n_dense: object
    embedding: object
    head: object
    mtp: object = 0      # multi-token-prediction modules on this rank
    n_mamba: object = None
    n_attention: object = None
    n_mlp: object = None
    n_moe: object = None

    def kinds(self) -> dict:
        """A hybrid stage's layers by kind (M, *, -, E), or None."""
        if self.n_mamba is None:
            return None
        return dict(zip(LAYER_KINDS, (self.n_mamba, self.n_attention, self.n_mlp, self.n_moe)))


def _split_kw(model: ModelSpec, c) -> dict:
    first, last = getattr(c, "first_stage_layers", None), getattr(c, "last_stage_layers", None)
    pins = {k: v for k, v in (("first", first), ("last", last)) if v is not None}
    return dict(L=model.num_layers, p=c.pp, **pins)


def stage_at(ev, model: ModelSpec, c, i) -> Stage:
    """Pipeline rank i: its layers from the split (fitplan.counts.stages); under DualPipe
    rank i runs stage i of one direction and stage p-1-i of the other [deepseek-v3 Sec. 3.2.1],
    so it holds both stages' layers, and ranks 0 and p-1 both the embedding and the head."""
    from fitplan.specs.parallel import Schedule
    kw, moe, v = _split_kw(model, c), model.moe, getattr(c, "virtual_stages", 1)
    layers = lambda j, k: ev(ST.stage_layers, key=k, v=v, i=j, **kw)
    dense = (lambda j, k: None) if moe is None or model.hybrid else (lambda j, k: ev(
        ST.dense_layers_on_stage, key=k, L_d=moe.first_dense_layers, v=v, i=j, **kw))
    p = c.pp
    if getattr(c, "schedule", None) == Schedule.DUALPIPE:
        mirror = p - 1 - i
        l = layers(i, "pipeline/stage_layers") + layers(mirror, "pipeline/mirror_stage_layers")
        n_d = None if moe is None else (dense(i, "params/dense_layers_on_stage")
                                        + dense(mirror, "params/dense_layers_on_mirror_stage"))
        emb = head = (i == 0) | (i == p - 1)
    else:
        l, n_d = layers(i, "pipeline/stage_layers"), dense(i, "params/dense_layers_on_stage")
        emb, head = (i == 0) | (p == 1), (i == p - 1) | (p == 1)
    mtp = select(head, model.mtp_depth, 0) if model.mtp_depth else 0   # DeepSeek-V3 Sec. 2.2: after the last layer
    if model.hybrid:
        return _hybrid_stage(model, c, i, l=l, emb=emb, head=head, mtp=mtp, dual=getattr(c, "schedule", None)
                             == Schedule.DUALPIPE)
    return Stage(i, l + mtp, n_d, emb, head, mtp)


def _hybrid_stage(model: ModelSpec, c, i, *, l, emb, head, mtp, dual) -> Stage:
    """A hybrid model's stage: its slice of the pattern counted by kind
    (fitplan.counts.stages.kind_layers_on_stage), plus its multi-token-prediction modules'
    layers (mtp_pattern each)."""
    from fitplan.counts import hybrid as HY
    kw, v = _split_kw(model, c), getattr(c, "virtual_stages", 1)
    cum = HY.prefix_counts(model.layer_pattern)
    extra = HY.kind_counts(model.mtp_pattern or "")
    counts = []
    for k in LAYER_KINDS:
        n = ST.kind_layers_on_stage(cum=cum[k], v=v, i=i, **kw)
        if dual:
            n = n + ST.kind_layers_on_stage(cum=cum[k], v=v, i=c.pp - 1 - i, **kw)
        counts.append(n + mtp * extra[k])
    per_module = len(model.mtp_pattern or "")
    return Stage(i, l + mtp * per_module, None, emb, head, mtp, *counts)


def hybrid_layer_kw(model: ModelSpec, stage: Stage, *, replicated: bool = True) -> dict:
    """The keywords of P.hybrid_layers_params for a hybrid stage: each kind's layer count and
    its split and replicated parameters (fitplan.counts.hybrid.block_params); replicated=False
    leaves the replicated ones out (the linear weights alone)."""
    from fitplan.counts import hybrid as HY
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    out = {}
    for k, n in stage.kinds().items():
        tag = HY.KIND_TAGS[k]
        S, R = HY.block_params(model, k) if k in used else (0, 0)
        out.update({f"n_{tag}": n, f"S_{tag}": S, f"R_{tag}": R if replicated else 0})
    return out


def stage_psi(ev, model: ModelSpec, c, *, stage: Stage, key: str | None = None):
    """Parameters one GPU of a pipeline stage holds before ZeRO, routed experts excluded
    (stage_expert_psi). c: a ParallelConfig, or the search's grid (only its tp and pp are
    read, so serving's layouts use it too: fitplan.serving)."""
    if model.hybrid:   # the ends here, the layers kind by kind
        psi = ev(P.stage_params, key=key, l=0, S=0, R=0, Vh=P.embedding_params(model), P_pos=P.position_params(model),
                 N_f=P.norm_params(model), head=P.head_params(model), tied=model.tied_embeddings, t=c.tp, p=c.pp,
                 emb=stage.embedding, out=stage.head)
        psi = psi + ev(P.hybrid_layers_params, key=key and key + "_layers", t=c.tp, **hybrid_layer_kw(model, stage))
        if model.mtp_depth:
            psi = psi + ev(P.mtp_extra_params, key=key and key + "_mtp", D=stage.mtp, h=model.hidden_size, t=c.tp)
        return _published(ev, model, psi, key)
    moe = {} if model.moe is None else dict(n_dense=stage.n_dense, S_moe=P.moe_layer_sharded_params(model),
                                            R_moe=P.moe_layer_replicated_params(model))
    psi = ev(P.stage_params, key=key, l=stage.layers, S=P.layer_sharded_params(model),
             R=P.layer_replicated_params(model), Vh=P.embedding_params(model), P_pos=P.position_params(model),
             N_f=P.norm_params(model), head=P.head_params(model), tied=model.tied_embeddings, t=c.tp, p=c.pp,
             emb=stage.embedding, out=stage.head, **moe)
    if model.mtp_depth:
        psi = psi + ev(P.mtp_extra_params, key=key and key + "_mtp", D=stage.mtp, h=model.hidden_size, t=c.tp)
    return _published(ev, model, psi, key)


def _published(ev, model: ModelSpec, psi, key):
    if model.published_params is None:
        return psi
    return ev(P.scale_to_published, key=key and key + "_scaled", psi_shape=psi, published=model.published_params,
              derived=P.shape_params(model))


def stage_expert_psi(ev, model: ModelSpec, c, *, stage: Stage, key: str | None = None):
    """Routed-expert parameters one GPU of a stage holds (0 for dense models): E/ep experts
    of each MoE layer on the stage (c's ep is read)."""
    l, n_d = (stage.n_moe, 0) if model.hybrid else (stage.layers, stage.n_dense)
    psi_e = ev(P.stage_expert_params, key=key, l=l, n_dense=n_d, X=P.expert_params(model), ep=c.ep)
    return _published(ev, model, psi_e, key and key + "_experts")


@formula("states/shard_group", lambda *, shard=None, **_: "dp*c" if shard is None else "shard degree",
         Cite("fitplan", "formulas.md#hybrid-sharding (FSDP2 data_parallel_shard_degree; Megatron-LM "
                         "--num-distributed-optimizer-instances)"), "count")
def shard_group(*, dp, c, shard=None):
    """The ranks ZeRO shards state over: all dp x cp, or the hybrid-sharding group."""
    return dp * c if shard is None else shard + 0 * dp


# Bytes per weight of Transformer Engine's quantized copies: the rowwise data and, for the backward's
# transposed GEMMs, the columnwise (transformer_engine/pytorch/tensor/float8_tensor.py: a separate _transpose
# only where the GPU lacks non-TN fp8 GEMMs, Hopper and Ada; utils.py is_non_tn_fp8_gemm_supported: compute
# capability 10.x and later has them), mxfp8_tensor.py (rowwise and columnwise data, a uint8 scale per 32
# elements each), nvfp4_tensor.py (4-bit data and an fp8 scale per 16 elements, rowwise and columnwise).
LOW_PRECISION_COPY = {"fp8": 1.0, "mxfp8": 1 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
TRANSPOSE_FREE = ("blackwell", "blackwell-ultra")   # non-TN fp8 GEMMs: no transposed fp8 copy


def fp8_cache_factor(*, compute: str, weights_bytes, architecture) -> float:
    """c8: bytes per linear weight Transformer Engine keeps quantized across micro-batches. fp8: the cast
    (none with fp8 primary weights, which are the cast) and, on Hopper, its transpose; mxfp8 and nvfp4:
    both directions, each with its block scales."""
    if compute == "fp8":
        rowwise = 0.0 if weights_bytes <= 1 else 1.0
        return rowwise + (0.0 if architecture in TRANSPOSE_FREE else 1.0)
    return 2 * LOW_PRECISION_COPY[compute]


@formula("runtime/fp8_weight_cache",
         lambda *, zero3, **_: "c8*psi_lin" + ("/l  (ZeRO-3: the gathered layer's)" if zero3 else ""),
         Cite("transformer-engine", "module/base.py: quantized weight workspaces kept across micro-batches "
                                    "(is_first_microbatch); tensor/float8_tensor.py, mxfp8_tensor.py, nvfp4_tensor.py"),
         assumes=("low-precision recipes keep, per linear weight, its quantized copies for the forward and the "
                  "backward GEMMs across micro-batches (--no-fp8-weight-cache: frameworks that cast per use)",))
def fp8_weight_cache_bytes(*, c8, psi_lin, l, zero3):
    """Transformer Engine's quantized copies of the stage's linear weights (psi_lin: the layers'
    tp-split GEMM weights and this rank's experts): c8 bytes per parameter (fp8_cache_factor)."""
    return select(zero3, ceil_div(c8 * psi_lin, maximum(l, 1)), ceil_div(c8 * psi_lin, 1))


@formula("states/grads", "g*P_max/[N_d under ZeRO-2/3]  (the largest parameter's gradient, stepped in its hook)",
         Cite("torchtune", "torchtune/modules/optim.py OptimizerInBackward (post-accumulate-grad hooks step and "
                           "free each parameter's gradient); torch/distributed/optim/apply_optimizer_in_backward.py"))
def optimizer_in_backward_grads_bytes(*, g, P_max, n_d, zero):
    """With the optimizer stepped in each parameter's gradient hook, one parameter's gradient lives
    at a time: the largest's (P_max), its shard under ZeRO-2/3."""
    return ceil_div(g * P_max, select(zero >= 2, n_d, 1))


@formula("states/optimizer", "K*P_max/[N_d under ZeRO-1+]  (the pages of the parameter being stepped)",
         Cite("bnb-code", "bitsandbytes/optim/optimizer.py get_state_buffer (paged when numel >= 1e5: "
                              "cudaMallocManaged), functional.py prefetch_tensor"),
         assumes=("a paged optimizer's state lives in CUDA managed memory: the driver moves its pages to the host "
                  "while the GPU needs the room and back for the update; on the GPU at least the state of the "
                  "parameter being stepped",))
def paged_resident_bytes(*, K, P_max, n_d, zero):
    x = ceil_div(K * P_max, select(zero >= 1, n_d, 1))
    return x if is_array(x) else int(x)


@formula("runtime/gathered_weights", "w*(psi + psi_e)  (the stage's weights, gathered beside their shards)",
         Cite("fitplan", "formulas.md#hybrid-sharding (FSDP2 reshard_after_forward=False; with pipeline stages, "
                         "torch.distributed.pipelining's stage.py sets reshard_after_backward False until the last "
                         "micro-batch)"),
         assumes=("with reshard_after_forward off every gathered layer stays until its backward; with pipeline "
                  "stages every layer stays gathered from its first backward to the step's last",))
def gathered_weights_bytes(*, psi, psi_e, w, keep):
    """ZeRO-3/FSDP without resharding after forward, or under pipeline parallelism: each layer's
    gathered weights are held through the step's backwards; at the turn all of them. The gather
    fills a buffer of its own, the whole layer, beside the rank's shard (FSDP2's all-gather
    outputs; measured on CPU: fitplan validate's fsdp2-nosync rows), whole whatever the sharding.
    keep: 1 where that holds (ints or arrays)."""
    return keep * (psi * w + psi_e * w)


def pipelined(c):
    """1 where sharded data parallelism runs inside pipeline stages (pp > 1; ints or arrays) and syncs once per
    step: torch.distributed.pipelining's stage (backward_maybe_with_nosync) turns off gradient sync and
    resharding after backward until the last micro-batch, so ZeRO-2/3 gradients accumulate unsharded, ZeRO-3
    weights stay gathered and both sync once per step. --microbatch-grad-sync (Llama 3's FSDP: each micro-batch
    reduce-scattered into a sharded fp32 accumulator; the Ultra-Scale Playbook's 4*psi/N_d) turns it off. The one
    rule the memory (here) and the time (fitplan.timing.data_parallel) read."""
    return select(c.pp > 1, 0 if getattr(c, "microbatch_grad_sync", False) else 1, 0)


def kept_gathered(c):
    """1 where ZeRO-3's gathered weights stay through the backwards (ints or arrays): with
    reshard_after_forward off, or pipelined."""
    return maximum(int(not c.reshard_after_forward), pipelined(c))


@formula("runtime/accumulated_grads", "g*(psi + psi_e)*(1 - 1/N_d)  (the stage's gradients, unsharded until the "
                                      "last micro-batch's reduce-scatter)",
         Cite("fitplan", "formulas.md#runtime (torch.distributed.pipelining stage.py backward_maybe_with_nosync: "
                         "set_requires_gradient_sync(False); FSDP2 _fsdp_param.py to_accumulated_grad_if_needed)"),
         assumes=("ZeRO-2/3 with pipeline stages accumulates each micro-batch's gradients unsharded, at the "
                  "recipe's gradient precision, and reduce-scatters them once after the last backward "
                  "(torchtitan's FSDP2 with torch.distributed.pipelining; neither Megatron-LM nor DeepSpeed runs "
                  "ZeRO-2/3 with pipeline stages)",))
def accumulated_grads_bytes(*, psi, psi_e, g, n_d, n_ed, pipelined):
    """Beyond the gradient shard (states/grads), the rest of the stage's unsharded gradients,
    held from the first backward until the last micro-batch's reduce-scatter: g*psi in all, the
    shard itself not yet made (the optimizer's zero_grad set it to None; measured on CPU: fitplan
    validate's fsdp2-nosync rows). pipelined: 1 where pp > 1 (ints or arrays)."""
    return pipelined * (ceil_div(psi * g * (n_d - 1), n_d) + ceil_div(psi_e * g * (n_ed - 1), n_ed))


def stage_memory(ev, setup: Setup, c, *, first: bool | None = None, stage: Stage | None = None,
                 comms: dict | None = None) -> dict:
    """Bytes per term on one GPU of a pipeline stage: `stage`, or the first (first=True) or
    last (first=False) one. c: a ParallelConfig, or the search's grid (the same attribute
    names; its degrees, micro-batch and virtual stages are arrays, its zero,
    sequence_parallel, recompute and the SETTINGS scalars). comms: the communicators' terms
    (_communicators) of c already computed for another stage; no stage changes them."""
    from fitplan.specs.parallel import Schedule
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    tp, pp, dp, cp, b, v = c.tp, c.pp, c.dp, c.cp, c.micro_batch, c.virtual_stages
    if stage is None:
        stage = stage_at(ev, model, c, 0 * pp if first else pp - 1)
    moe = model.moe
    n_dense = stage.n_dense
    psi = stage_psi(ev, model, c, stage=stage)
    n_d = ev(shard_group, dp=dp, c=cp, shard=c.shard_degree) if c.shard_degree is not None else dp * cp
    replicas = dp * cp // n_d
    experts = {} if moe is None else dict(psi_e=stage_expert_psi(ev, model, c, stage=stage),
                                          n_ed=maximum(tp * dp * cp // (c.ep * replicas), 1))
    zero = c.zero
    lora = FT.is_lora(training)
    frozen = None   # a frozen base's bytes as ZeRO-3 shards and gathers them (fitplan.memory.finetune)
    if lora:   # a frozen base, trained adapters (fitplan.memory.finetune)
        out, trained, frozen = _lora_states(ev, setup, c, stage=stage, psi=psi, n_d=n_d)
    else:
        out = {
            "states/weights": ev(S.weights_bytes, psi=psi, w=recipe.weights_bytes, n_d=n_d, zero=zero, **experts),
            "states/grads": ev(S.grads_bytes, psi=psi, g=recipe.grads_bytes, n_d=n_d, zero=zero, **experts),
            "states/master": ev(S.master_bytes, psi=psi, m=recipe.master_bytes, n_d=n_d, zero=zero, **experts),
            "states/optimizer": ev(S.optimizer_bytes, psi=psi, K=recipe.optimizer_bytes, n_d=n_d, zero=zero,
                                   **experts),
        }
        trained = dict(psi=psi, n_d=n_d, zero=zero, **experts)
    OF.place_states(ev, out, OF.offload_of(c), trained=dict(trained, g_h=OF.gradient_precision(recipe)))
    if training.optimizer_in_backward or training.paged_optimizer:
        P_max = _largest_trained(setup, c, stage=stage, trained=trained)
        if training.optimizer_in_backward:
            out["states/grads"] = ev(optimizer_in_backward_grads_bytes, g=recipe.grads_bytes, P_max=P_max, n_d=n_d,
                                     zero=zero)
        if training.paged_optimizer and not OF.offload_of(c).optimizer:
            resident = ev(paged_resident_bytes, K=recipe.optimizer_bytes, P_max=P_max, n_d=n_d, zero=zero)
            paged = out["states/optimizer"] - resident
            out["host/optimizer"] = ev(OF.moved_bytes, key="host/optimizer",
                                       gpu_bytes=paged if is_array(paged) else int(paged), what="states/optimizer (paged)")
            out["states/optimizer"] = resident
    keep = kept_gathered(c)
    if zero == 3 and (is_array(keep) or keep):
        out["runtime/gathered_weights"] = ev(FT.gathered_frozen_bytes, W_shard=frozen, keep=keep) if lora else ev(
            gathered_weights_bytes, psi=psi, psi_e=experts.get("psi_e", 0), w=recipe.weights_bytes, keep=keep)
    else:
        out["runtime/gathered_weights"] = 0 * psi
    if recipe.compute != "bf16" and training.fp8_weight_cache:
        if model.hybrid:
            psi_lin = ev(P.hybrid_layers_params, key="params/stage_linear", t=tp,
                         **hybrid_layer_kw(model, stage, replicated=False))
        else:
            psi_lin = ev(P.stage_params, key="params/stage_linear", l=stage.layers, S=P.layer_sharded_params(model),
                         R=0, Vh=0, P_pos=0, N_f=0, head=0, tied=False, t=tp, p=pp, emb=False, out=False,
                         **({} if moe is None else dict(n_dense=n_dense, S_moe=P.moe_layer_sharded_params(model))))
        out["runtime/fp8_weight_cache"] = ev(
            fp8_weight_cache_bytes, c8=fp8_cache_factor(compute=recipe.compute, weights_bytes=recipe.weights_bytes,
                                                        architecture=setup.cluster.gpu.architecture),
            zero3=int(zero == 3), psi_lin=psi_lin + experts.get("psi_e", 0), l=stage.layers)
    else:
        out["runtime/fp8_weight_cache"] = 0 * psi
    sh, sp = Shapes.of(setup), c.sequence_parallel
    per_layer, per_workspace = (FT.lora_layer_bytes, FT.lora_workspace_bytes) if lora else (
        A.per_layer_bytes, A.recompute_workspace_bytes)
    layer = dict(sh.kw(c.recompute), b=b, t=tp, c=cp, sp=sp, recompute=c.recompute, **(FT.lora_kw(setup) if lora else {}))
    m = UNBOUNDED_MICROBATCHES if training.global_batch is None else training.global_batch // (dp * b)
    a_layer = None if model.hybrid else ev(per_layer, **layer)
    dual = c.schedule == Schedule.DUALPIPE
    v_held = 2 if dual else v
    chunks = ev(A.chunks_in_flight, p=pp, v=v_held, r=stage.index, m=m, schedule=str(c.schedule))
    l = stage.layers
    if model.hybrid:
        a_stage, workspace, buffers, a_layer = hybrid_activations(ev, setup, c, stage=stage, layer=layer)
    elif moe is None:
        a_stage = ev(stage_layers_bytes, A_layer=a_layer, l=l)
        workspace = ev(per_workspace, **layer)
        buffers = 0 * a_layer
    else:
        mk = sh.moe
        moe_layer = dict(layer, **mk.kw())
        a_moe = ev(A.per_layer_bytes, key="activations/per_moe_layer", **moe_layer)
        a_stage = ev(stage_layers_bytes, A_layer=a_layer, l=l, n_dense=n_dense, A_moe=a_moe)
        workspace = maximum(ev(A.recompute_workspace_bytes, **layer),
                            ev(A.recompute_workspace_bytes, key="activations/recompute_workspace_moe", **moe_layer))
        buffers = ev(A.moe_buffers_bytes, s=sh.s, b=b, h=mk.w or sh.h, e=sh.e, k=mk.k, rho=mk.rho, t=tp, c=cp,
                     **({} if sh.e_l is None else {"e_l": sh.e_l})) * select(l - n_dense > 0, 1, 0)
    if c.recompute == Recompute.FULL and c.recompute_num_layers is not None:
        a_stage, workspace = _partial_full(ev, setup, c, layer=layer, l=l, n_dense=n_dense, a_input=a_layer,
                                           per_layer=per_layer)
    out["activations/layers"] = a_stage
    out["activations/pipeline_in_flight"] = ev(in_flight_bytes, A_stage=a_stage, v=v_held, chunks=chunks)
    if OF.offload_of(c).activations:   # stored activations go to host memory; one layer's are on the GPU in transit
        out["host/activations"] = ev(OF.host_activation_bytes, A_stage=a_stage,
                                     A_in_flight=out["activations/pipeline_in_flight"])
        out["activations/layers"] = ev(OF.in_transit_bytes, A_layer=a_layer if moe is None or model.hybrid else
                                       maximum(a_layer, a_moe), A_stage=a_stage)
        out["activations/pipeline_in_flight"] = 0 * a_layer
    frozen = {"ids": 0} if lora else {}   # a frozen embedding and head keep no token ids and no head input
    n_mb = lambda: ev(A.embedding_microbatches, chunks=chunks, v=v_held)
    out["activations/embedding"] = _held(stage.embedding, lambda: ev(
        A.embedding_bytes, s=sh.s, b=b, h=sh.h, M=sh.M, D=sh.D, t=tp, c=cp, sp=sp, n_mb=n_mb(), **frozen), a_layer)
    n_out = (m if c.schedule == Schedule.GPIPE else 1) * (1 + model.mtp_depth)   # each MTP module has its own loss
    out["activations/output"] = _held(stage.head, lambda: ev(
        A.output_bytes, s=sh.s, b=b, h=sh.h, V=model.vocab_size, e=sh.e, t=tp, c=cp, sp=sp,
        **({} if (not is_array(n_out) and n_out == 1) else {"n_mb": n_out}), **loss_kept(setup, b=b, t=tp, c=cp)),
        a_layer)
    out["activations/recompute_workspace"] = workspace
    out["activations/moe_buffers"] = buffers
    out["runtime/dequant_workspace"] = (ev(FT.dequant_workspace_bytes, P_max=FT.largest_linear(model), t=tp)
                                        if lora and FT.base_precision(training) in ("nf4", "int8") else 0 * a_layer)
    out.update(_runtime(ev, setup, c, stage=stage, psi=psi, trained=trained, layer=layer, a_layer=a_layer,
                        comms=comms))
    return out


def hybrid_block_bytes(ev, setup: Setup, layer: dict, suffix: str = "") -> dict:
    """One layer's stored bytes for each kind of a hybrid model (activations.per_block_bytes;
    0 for the kinds it does not have). layer: the per-layer keywords (Shapes.kw with b, t, c,
    sp, recompute)."""
    from fitplan.counts import hybrid as HY
    model, sh = setup.model, Shapes.of(setup)
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    base = {k: layer[k] for k in ("s", "b", "h", "e", "M", "D", "t", "c", "sp", "recompute")}
    if sh.e_l is not None:
        base["e_l"] = sh.e_l
    out = {}
    for kind in LAYER_KINDS:
        if kind not in used:
            out[kind] = 0 * layer["b"]
            continue
        kw = dict(base, kind=kind)
        if kind == "*":
            kw.update(q=sh.q, kv=sh.kv, a=sh.a, **({} if sh.kernel == "eager" else {"kernel": sh.kernel}))
        elif kind == "M":
            kw["T_tok"] = ev(A.mamba_per_token_bytes, **mamba_token_kw(model, sh))
        else:
            kw["T_tok"] = A.mlp_per_token_bytes(h=sh.h, f=sh.f, n=sh.n, e=sh.e, e_l=sh.e_l,
                                                **(sh.moe.kw() if kind == "E" else {}))
        out[kind] = ev(A.per_block_bytes, key=f"activations/per_{HY.KIND_NAMES[kind]}_layer{suffix}", **kw)
    return out


def hybrid_activations(ev, setup: Setup, c, *, stage: Stage, layer: dict):
    """A hybrid stage's activations: (the stage's layers for one micro-batch, the recompute
    workspace, the MoE all-to-all buffers, the widest layer's bytes). Each kind's block
    (activations.per_block_bytes) times its count on the stage; the workspace is the largest
    kind's (a recomputed block's activations, or an attention core under selective), a Mamba
    layer's adding its scan's transient chunk states (activations.ssd_scan_workspace_bytes)."""
    from fitplan.counts import hybrid as HY
    model, sh = setup.model, Shapes.of(setup)
    kinds = stage.kinds()
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    bytes_of = hybrid_block_bytes(ev, setup, layer)
    if c.recompute == Recompute.FULL:   # the whole block, re-created while its backward runs
        extra_of = hybrid_block_bytes(ev, setup, dict(layer, recompute=Recompute.NONE), "_kept")
    elif c.recompute == Recompute.SELECTIVE:   # the attention core it dropped
        kept = hybrid_block_bytes(RAW, setup, dict(layer, recompute=Recompute.NONE))
        extra_of = {k: kept[k] - bytes_of[k] for k in LAYER_KINDS}
    else:
        extra_of = {k: 0 * layer["b"] for k in LAYER_KINDS}
    a_stage = ev(A.hybrid_stage_bytes, **{f"n_{HY.KIND_TAGS[k]}": n for k, n in kinds.items()},
                 **{f"A_{HY.KIND_TAGS[k]}": bytes_of[k] for k in LAYER_KINDS})
    workspace = widest = 0 * layer["b"]
    for kind in sorted(used, key=LAYER_KINDS.index):
        extra = extra_of[kind]
        if kind == "M" and model.mamba.version.value == "mamba2":   # the scan's chunk states, in forward and backward
            m = model.mamba
            extra = extra + ev(A.ssd_scan_workspace_bytes, b=layer["b"], s=sh.s, Q=m.chunk_size, H=m.num_heads,
                               P=m.head_dim, N=m.state_size, G=m.num_groups, t=layer["t"], c=layer["c"])
        workspace = maximum(workspace, extra)
        widest = maximum(widest, bytes_of[kind])
    if "E" in used:
        mk = sh.moe
        buffers = ev(A.moe_buffers_bytes, s=sh.s, b=layer["b"], h=mk.w or sh.h, e=sh.e, k=mk.k, rho=mk.rho,
                     t=layer["t"], c=layer["c"], **({} if sh.e_l is None else {"e_l": sh.e_l})) * select(
            kinds["E"] > 0, 1, 0)
    else:
        buffers = 0 * layer["b"]
    return a_stage, workspace, buffers, widest


def mamba_token_kw(model: ModelSpec, sh: "Shapes") -> dict:
    """The keywords of activations.mamba_per_token_bytes for the model's Mamba layers."""
    from fitplan.counts import hybrid as HY
    m = model.mamba
    kw = dict(W_in=HY.in_proj_width(model), d=m.d_inner, G=m.num_groups, N=m.state_size, e=sh.e)
    if sh.e_l is not None:
        kw["e_l"] = sh.e_l
    if m.version.value == "mamba1":
        kw.update(version="mamba1", R=HY.dt_rank(model), s=sh.s)
    return kw


def _runtime(ev, setup: Setup, c, *, stage: Stage, psi, trained: dict, layer: dict, a_layer,
             comms: dict | None = None) -> dict:
    """The runtime's buffers on one GPU of a stage (fitplan.memory.runtime), and the aux values
    the peak and the timeline read (fitplan.memory.timeline). psi: the stage's parameters (what
    FSDP gathers); trained: the parameters that get gradients and their sharding (the adapters
    under LoRA), which the buckets and the optimizer step hold."""
    model, training, cluster, recipe = setup.model, setup.training, setup.cluster, setup.training.recipe
    tp, pp, cp, b, zero = c.tp, c.pp, c.cp, c.micro_batch, c.zero
    sh, moe = Shapes.of(setup), model.moe
    psi_t, n_d = trained["psi"], trained["n_d"]
    psi_e, n_ed = trained.get("psi_e", 0), trained.get("n_ed", 1)
    out = {"runtime/cuda_context": ev(RT.cuda_context_bytes, X_ctx=cluster.cuda_context_bytes) + 0 * a_layer,
           "runtime/blas_workspace": ev(RT.blas_workspace_bytes, W_blas=cluster.gpu.blas_workspace_bytes) + 0 * a_layer,
           **(_communicators(ev, setup, c, like=a_layer) if comms is None else comms),
           "runtime/grad_buckets": ev(RT.grad_buckets_bytes, psi=psi_t + psi_e, g=recipe.grads_bytes, zero=int(zero),
                                      view=training.grad_bucket_view, bucket=training.grad_bucket_bytes)}
    piped = pipelined(c)
    if zero >= 2 and (is_array(piped) or piped):
        out["runtime/accumulated_grads"] = ev(accumulated_grads_bytes, psi=psi_t, psi_e=psi_e, g=recipe.grads_bytes,
                                              n_d=n_d, n_ed=n_ed, pipelined=piped)
    else:
        out["runtime/accumulated_grads"] = 0 * a_layer
    zero3 = zero == 3
    if zero3:
        w_kw = dict(S=P.layer_sharded_params(model), R=P.layer_replicated_params(model), Vh=P.embedding_params(model),
                    P_pos=P.position_params(model), N_f=P.norm_params(model), head=P.head_params(model),
                    tied=model.tied_embeddings, t=tp, p=pp)
        head = ev(P.stage_params, key="params/fsdp_output_unit", l=0, emb=False, out=stage.head, **w_kw)
        if model.hybrid:
            unit = _hybrid_fsdp_unit(ev, model, c, w_kw)
        else:
            unit = ev(P.stage_params, key="params/fsdp_layer_unit", l=1, emb=False, out=False, **w_kw)
        if moe is not None and not model.hybrid:
            unit = maximum(unit, ev(P.stage_params, key="params/fsdp_moe_layer_unit", l=1, emb=False, out=False,
                                    n_dense=0, S_moe=P.moe_layer_sharded_params(model),
                                    R_moe=P.moe_layer_replicated_params(model), **w_kw)
                           + ceil_div(P.expert_params(model), c.ep))
        units = FT.fsdp_units(ev, setup, c, P_layer=unit, P_head=head) if FT.is_lora(training) else RT.fsdp_units(
            ev, w=recipe.weights_bytes, P_layer=unit, P_head=head)
        fsdp = dict(units, w=recipe.weights_bytes, g=recipe.grads_bytes, k=training.fsdp_prefetch,
                    keep=kept_gathered(c), acc=piped)
        out["runtime/fsdp_buffers"] = ev(RT.fsdp_buffers_bytes, **fsdp)
        out[TL.FSDP_LOSS] = ev(RT.fsdp_buffers_bytes, key="runtime/fsdp_buffers_loss", **fsdp, moment="loss")
        out[TL.FSDP_FORWARD] = RT.fsdp_buffers_bytes(**fsdp, moment="forward")
    else:
        out["runtime/fsdp_buffers"] = out[TL.FSDP_FORWARD] = out[TL.FSDP_LOSS] = 0 * a_layer
    grads_kw = {k: layer[k] for k in ("s", "b", "h", "a", "q", "kv", "f", "n", "e", "t", "c", "sp")}
    w_grad = 0 if FT.is_lora(training) else recipe.weights_bytes   # a frozen base gets no weight gradients
    grads_kw.update(kernel=sh.kernel, w=w_grad)
    if model.tied_embeddings:   # both ends on one rank: one parameter, its gradient accumulated across the backward
        grads_kw.update(V=model.vocab_size, tied=stage.embedding * stage.head)
    backward = ev(RT.layer_backward_bytes, **grads_kw)
    if model.hybrid and model.mamba is not None and "M" in model.layer_pattern:
        from fitplan.counts import hybrid as HY
        backward = maximum(backward, ev(RT.mamba_backward_bytes, s=sh.s, b=b, h=sh.h, e=sh.e, t=tp, c=cp,
                                        sp=c.sequence_parallel,
                                        W_in=HY.in_proj_width(model), d=model.mamba.d_inner, w=w_grad))
    if moe is not None:
        backward = maximum(backward, ev(RT.layer_backward_bytes, key="runtime/layer_backward_moe", **grads_kw,
                                        k=sh.moe.k, rho=sh.moe.rho, f_e=sh.moe.f_e, f_s=sh.moe.f_s))
    out["runtime/layer_backward"] = backward
    loss = dict(s=sh.s, b=b, V=model.vocab_size, e=sh.e, t=tp, c=cp, kernel=training.cross_entropy)
    chunks = {"k": training.ce_chunks} if training.cross_entropy == "chunked" else {}
    out["runtime/logits_grad"] = _held(stage.head, lambda: ev(RT.logits_grad_bytes, **loss, h=sh.h, w=w_grad,
                                                             **chunks), a_layer)
    out[TL.LOSS_FORWARD] = RT.loss_forward_bytes(**loss, h=sh.h, w=recipe.weights_bytes, **chunks) * select(
        stage.head, 1, 0)
    out[TL.OUTPUT_ONE] = _held(stage.head, lambda: A.output_bytes(
        s=sh.s, b=b, h=sh.h, V=model.vocab_size, e=sh.e, t=tp, c=cp, sp=c.sequence_parallel, n_mb=1 + model.mtp_depth,
        **loss_kept(setup, b=b, t=tp, c=cp)), a_layer)   # as activations/output counts one micro-batch
    out["runtime/p2p"] = ev(RT.p2p_bytes, e=sh.e, s=sh.s, b=b, h=sh.h, t=tp, c=cp, sp=c.sequence_parallel, pp=pp)
    n_opt = n_d if zero >= 1 else 1
    psi_opt = ceil_div(psi_t, n_opt) + ceil_div(psi_e, select(zero >= 1, n_ed, 1))
    # foreach's scratch is shaped like Adam's second moment; 8-bit and one-moment optimizers keep none
    v = recipe.moments[1][1] if len(recipe.moments) == 2 and recipe.moments[1][1] >= 2 else 0
    if OF.offload_of(c).optimizer:   # the CPU steps the optimizer (ZeRO-Offload): no GPU temporaries
        out["runtime/optimizer_step"] = 0 * a_layer
    else:
        out["runtime/optimizer_step"] = ev(RT.optimizer_step_bytes, psi_opt=psi_opt, v=v, g=recipe.grads_bytes,
                                           m=recipe.master_bytes, impl=training.optimizer_impl)
    out[TL.STREAMS] = 1 + 2 * int(zero3)   # the compute stream; FSDP2's all-gather and reduce-scatter streams
    return out


def loss_kept(setup: Setup, *, b, t, c) -> dict:
    """What the loss keeps for its backward, as activations.output_bytes takes it: x bytes per logit (4: fp32;
    2: torchtune's chunked loss compiled, bf16 chunks; 0: a fused linear cross-entropy), the head's input
    kept or not (k_in), and what a fused linear cross-entropy holds instead of logits: the output layer's
    input gradient (e*s*b*h/c), its weight gradient in the weights' dtype (w*V*h/t; none for a frozen head)
    and the per-token losses (4*s*b/c) (Liger-Kernel ops/fused_linear_cross_entropy.py: grad_input,
    grad_weight and loss_1d saved for backward)."""
    training, model = setup.training, setup.model
    lora, ce = FT.is_lora(training), training.cross_entropy
    out = {"k_in": 1} if lora or ce == "linear" else {}
    if ce == "linear":
        s, h, e = training.seq_len, model.hidden_size, training.act_bytes
        w = 0 if lora else training.recipe.weights_bytes
        out.update(x=0, held=ceil_div(e * s * b * h, c) + ceil_div(w * model.vocab_size * h, t) + ceil_div(4 * s * b, c))
    elif ce == "chunked" and training.kernels == "compiled":
        out["x"] = 2
    return out


def _largest_trained(setup: Setup, c, *, stage: Stage, trained: dict):
    """The largest trained parameter tensor on a GPU of the stage: a layer's widest matrix split over tp, or the
    embedding or output layer where the stage holds them; no more than the rank's trained parameters."""
    model = setup.model
    widest = FT.largest_linear(model)
    if model.moe is not None:
        widest = max(widest, model.hidden_size * model.moe.expert_ffn_size)
    ends = select(stage.embedding | stage.head, model.vocab_size * model.hidden_size, 0)
    return minimum(ceil_div(maximum(widest, ends), c.tp), trained["psi"] + trained.get("psi_e", 0))


COMMUNICATOR_TERMS = ("runtime/nccl", "runtime/deepep")   # what _communicators returns


def _communicators(ev, setup: Setup, c, *, like) -> dict:
    """NCCL's buffers for the communicators the layout creates (fitplan.memory.runtime.nccl_bytes), and
    DeepEP's where it dispatches the experts' tokens. Rings: tp, the gradient reduction group (dp x cp), the
    experts' data-parallel group, cp when its K/V exchange is an all-gather, the world group when larger
    than all of them. p2p: the pipeline's neighbours, cp's K/V ring (TE's p2p, with --cp-comm-overlap) and
    an NCCL all-to-all's expert group; ranks in Megatron-Core's order (fitplan.timing.axes.placement)."""
    from fitplan.timing.comm import group_is_intra_node
    cluster, G = setup.cluster, setup.cluster.gpus_per_node
    tp, pp, dp, cp, ep = c.tp, c.pp, c.dp, c.cp, c.ep
    world = tp * cp * dp * pp
    n_ed = maximum(tp * cp * dp // maximum(ep, 1), 1)
    cp_p2p = 1 if getattr(c, "cp_comm_overlap", True) else 0
    nccl_a2a = setup.training.moe_dispatcher != "deepep" and setup.model.moe is not None
    largest = maximum(maximum(tp, cp * dp), maximum(maximum(pp, cp), ep))
    rings = (1 * (tp > 1) + 1 * (dp * cp > 1) + 1 * ((ep > 1) & (n_ed > 1)) + (1 - cp_p2p) * (cp > 1)
             + 1 * (world > largest))   # 1 *: NumPy's bools add as "or"
    gpu = cluster.gpu
    nvlink = "pcie" not in gpu.intra_node.name.lower()
    net_ch = maximum(1, ceil_div(gpu.inter_node.bytes_per_s, RT.NCCL_P2P_PER_CHANNEL_NET_GBPS * 10**9))
    P2P = RT._pow2_up(minimum(cluster.nccl_channels, RT.NCCL_MAX_CHANNELS))
    groups = []
    for n, stride, used in ((pp, tp * cp * dp, pp > 1), (cp, tp, (cp > 1) & (cp_p2p == 1))):
        intra = group_is_intra_node(stride=stride, n=n, G=G)
        peers = select(used & intra, minimum(2, n - 1), 0 * n)
        spans = used & ~intra if is_array(intra) else bool(used) and not bool(intra)
        ch = RT.p2p_channels_per_peer(P2P=P2P, n=n, spans=spans, net_ch=net_ch, nvlink=nvlink)
        groups.append((peers, ch, 1 * spans))
    if nccl_a2a:   # ep consecutive ranks: min(ep, G) - 1 peers on this node, the rest across nodes
        spans = ep > G
        ch = RT.p2p_channels_per_peer(P2P=P2P, n=ep, spans=spans, net_ch=net_ch, nvlink=nvlink)
        groups.append((select(ep > 1, minimum(ep, G) - 1, 0 * ep), ch, 1 * spans))
    out = {"runtime/nccl": ev(RT.nccl_bytes, C=cluster.nccl_channels, buffsize=cluster.nccl_buffsize_bytes,
                              rings=rings, p2p_groups=tuple(groups)) + 0 * like}
    deepep = setup.model.moe is not None and setup.training.moe_dispatcher == "deepep"
    out["runtime/deepep"] = (ev(RT.deepep_bytes, ep=ep, h=setup.model.hidden_size, e=setup.training.act_bytes)
                             + 0 * like if deepep else 0 * like)
    return out


def _hybrid_fsdp_unit(ev, model: ModelSpec, c, w_kw: dict):
    """The largest layer FSDP gathers at once in a hybrid model: each kind's block (its split and
    replicated parameters, an MoE block with its E/ep experts)."""
    from fitplan.counts import hybrid as HY
    unit = 0 * c.tp
    for kind in sorted(set(model.layer_pattern) | set(model.mtp_pattern or ""), key=LAYER_KINDS.index):
        S, R = HY.block_params(model, kind)
        this = ev(P.stage_params, key=f"params/fsdp_{HY.KIND_NAMES[kind]}_layer_unit", l=1, emb=False, out=False,
                  **dict(w_kw, S=S, R=R))
        if kind == "E":
            this = this + ceil_div(P.expert_params(model), c.ep)
        unit = maximum(unit, this)
    return unit


def _lora_states(ev, setup: Setup, c, *, stage: Stage, psi, n_d) -> tuple[dict, dict, object]:
    """The states of a frozen base with rank-r adapters (fitplan.memory.finetune), the trained
    parameters' sharding (for offload's host gradients), and the bytes ZeRO-3 shards and
    gathers of the stage (FT.frozen_sharded_bytes)."""
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    l, zero = stage.layers, c.zero
    P_a = ev(FT.adapter_params, l=l, r=training.lora_rank, D=FT.adapter_dims(model, training)[0], t=c.tp)
    psi_lin = ev(FT.stage_linear_params, l=l, P_lin=FT.linear_params(model), t=c.tp)
    precision = FT.base_precision(training)
    W_lin = ev(FT.quantized_weight_bytes, psi=psi_lin, precision=precision, w=recipe.weights_bytes)
    C_q = ev(FT.quant_constant_bytes, psi=psi_lin, precision=precision)
    W_shard = ev(FT.frozen_sharded_bytes, W_lin=W_lin, C_q=C_q, psi=psi, psi_lin=psi_lin, P_a=P_a,
                 w=recipe.weights_bytes)
    out = {"states/weights": ev(FT.frozen_weights_bytes, W_shard=W_shard, C_q=C_q, n_d=n_d, zero=zero),
           "states/grads": ev(FT.adapter_grads_bytes, P_a=P_a, g=recipe.grads_bytes, n_d=n_d, zero=zero),
           "states/master": ev(FT.adapter_master_bytes, P_a=P_a, m=recipe.master_bytes, n_d=n_d, zero=zero),
           "states/optimizer": ev(FT.adapter_optimizer_bytes, P_a=P_a, K=recipe.optimizer_bytes, n_d=n_d, zero=zero)}
    return out, dict(psi=P_a, n_d=n_d, zero=zero), W_shard


@formula("activations/layers",
         lambda *, method, **_: "min(N, l)*A_input + (l - min(N, l))*A_keep_stage/l  (block: the first N layers "
                                "recomputed)" if method == "block" else
         "ceil(l/N)*A_input  (uniform: each group of N layers keeps its input)",
         Cite("megatron", "--recompute-method uniform|block --recompute-num-layers N (transformer_block.py "
                          "_checkpointed_forward)"))
def partial_recompute_stage_bytes(*, A_input, A_keep_stage, l, N, method):
    """Full recompute of part of a stage [Megatron-LM --recompute-granularity full]. block:
    the first N layers of the stage keep only their input, the rest everything (A_keep_stage:
    the stage's bytes without recompute; its mean per layer for the kept ones). uniform:
    every layer is recomputed, in groups of N layers that each keep their first input."""
    if method == "block":
        n = minimum(N, l)
        return n * A_input + ceil_div((l - n) * A_keep_stage, maximum(l, 1))
    return ceil_div(l, N) * A_input


@formula("activations/recompute_workspace",
         lambda *, method, **_: "A_keep_layer  (one layer recomputed at a time)" if method == "block" else
         "min(N, l)*A_keep_layer  (a group of N layers recomputed at once)",
         Cite("megatron", "transformer_block.py _checkpointed_forward"))
def partial_recompute_workspace_bytes(*, A_keep_layer, l, N, method):
    return A_keep_layer if method == "block" else minimum(N, l) * A_keep_layer


def _partial_full(ev, setup: Setup, c, *, layer, l, n_dense, a_input, per_layer=A.per_layer_bytes):
    """Megatron's --recompute-num-layers with --recompute-method: the stage's stored bytes and
    the workspace, from the layers' bytes without recompute (a_input: a layer's input)."""
    keep = dict(layer, recompute=Recompute.NONE)
    a_keep = ev(per_layer, key="activations/per_layer_kept", **keep)
    if setup.model.moe is None:
        stage_keep = ev(stage_layers_bytes, key="activations/layers_kept", A_layer=a_keep, l=l)
        widest = a_keep
    else:
        a_keep_moe = ev(A.per_layer_bytes, key="activations/per_moe_layer_kept", **keep, **Shapes.of(setup).moe.kw())
        stage_keep = ev(stage_layers_bytes, key="activations/layers_kept", A_layer=a_keep, l=l, n_dense=n_dense,
                        A_moe=a_keep_moe)
        widest = maximum(a_keep, a_keep_moe)
    method, N = str(c.recompute_method), c.recompute_num_layers
    return (ev(partial_recompute_stage_bytes, A_input=a_input, A_keep_stage=stage_keep, l=l, N=N, method=method),
            ev(partial_recompute_workspace_bytes, A_keep_layer=widest, l=l, N=N, method=method))


def _held(holds, compute, like):
    """A term only some stages hold: computed (and explained) only where it is held."""
    if is_array(holds):
        return compute() * holds
    return compute() if holds else 0 * like


HOST_KEYS = OF.HOST_PARTS + OF.NVME_PARTS


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The busiest GPU of one configuration, term by term, with the Terms that explain it.
    parts: each term's bytes (the allocator's at the peak); peak: the step's largest moment and
    what it holds (fitplan.memory.timeline); aux: what the timeline reads beside the parts."""
    config: ParallelConfig
    stage: str                 # "only" (pp = 1), "first", "last" or "stage i"
    parts: dict                # key -> bytes, in PARTS order
    terms: tuple[Term, ...]    # every formula evaluated for that stage, in call order
    usable_bytes: int
    reserve_bytes: int
    stage_index: int = 0                 # the busiest pipeline rank
    stage_layers: tuple[int, ...] = ()   # layers per pipeline stage, stage 0 first
    host: dict = field(default_factory=dict)   # host/* and nvme/* bytes per GPU (offload), of the rank with most
    host_per_node_bytes: int = 0         # host memory one node needs (fitplan.memory.offload.per_node_bytes)
    nvme_per_node_bytes: int = 0
    host_limit_bytes: int | None = None  # the cluster's --host-memory per node; None: not limited
    peak: TL.Peak | None = None
    aux: dict = field(default_factory=dict)
    capacity_bytes: int = 0

    @property
    def state_bytes(self) -> int:
        return sum(self.parts[k] for k in STATE_PARTS)

    @property
    def activation_bytes(self) -> int:
        """The peak beyond the model states: activations and runtime buffers held then."""
        return self.per_gpu_bytes - self.state_bytes

    @property
    def per_gpu_bytes(self) -> int:
        """The step's peak on the busiest GPU (fitplan.memory.timeline)."""
        return self.peak.bytes

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.per_gpu_bytes

    @property
    def host_fits(self) -> bool:
        return self.host_limit_bytes is None or self.host_per_node_bytes <= self.host_limit_bytes

    @property
    def fits(self) -> bool:
        return self.per_gpu_bytes <= self.usable_bytes and self.host_fits


def _stage_peak(trace, setup: Setup, parts: dict) -> TL.Peak:
    """The stage's peak, its allocator term recorded in the trace at the peak's moment."""
    phi = setup.training.fragmentation
    pk = TL.peak(parts, phi=phi)
    held = dict(pk.held)
    held["runtime/allocator"] = trace(RT.allocator_bytes, phi=phi, D=TL.transient_bytes(
        {k: v for k, v in pk.held.items() if k != "runtime/allocator"}), streams=parts[TL.STREAMS])
    return TL.Peak(pk.bytes, pk.moment, pk.phase, held)


def evaluate(setup: Setup, config: ParallelConfig) -> Breakdown:
    """Exact integer breakdown of the busiest GPU, with its explanation: the candidate ranks
    (candidate_ranks: one of each composition, at its most micro-batches in flight) are
    evaluated, the largest peak wins (the lowest rank among equals). Host memory (offload) is
    the most of any candidate rank's."""
    best, host, host_parts = None, (0, 0), {}
    for i in sorted(set(candidate_ranks(setup.model, config))):
        trace = Trace()
        st = stage_at(trace, setup.model, config, i)
        parts = stage_memory(trace, setup, config, stage=st)
        pk = _stage_peak(trace, setup, parts)
        if best is None or pk.bytes > best[3].bytes:
            best = (i, parts, trace, pk)
        if OF.host_total(parts) + OF.nvme_total(parts) > sum(host):
            host_parts = parts
        host = max(host[0], OF.host_total(parts)), max(host[1], OF.nvme_total(parts))
    i, parts, trace, pk = best
    p = config.pp
    stage = "only" if p == 1 else "first" if i == 0 else "last" if i == p - 1 else f"stage {i}"
    cluster = setup.cluster
    per_node = [0, 0]
    if config.offload is not Offload.NONE or setup.training.paged_optimizer:   # host bytes, each process on a node
        per_node = [trace(OF.per_node_bytes, key=key, per_gpu=x, G=cluster.gpus_per_node, N=cluster.num_gpus)
                    if x or key == "host/per_node" else 0
                    for key, x in (("host/per_node", host[0]), ("nvme/per_node", host[1]))]
    aux = {k: v for k, v in parts.items() if k.startswith("aux/")}
    held_at = TL.moments(parts, phi=setup.training.fragmentation).values()
    shown = {k: max(int(h[k]) for h in held_at if k in h) for k in PARTS}   # each term at its largest
    return Breakdown(config=config, stage=stage, parts={k: shown[k] for k in PARTS}, terms=tuple(trace.terms),
                     usable_bytes=cluster.usable_bytes, reserve_bytes=cluster.reserve_bytes,
                     stage_index=i, stage_layers=ST.split(setup.model.num_layers, p, config.virtual_stages,
                                                          config.first_stage_layers, config.last_stage_layers),
                     host={k: host_parts.get(k, 0) for k in HOST_KEYS}, host_per_node_bytes=per_node[0],
                     nvme_per_node_bytes=per_node[1], host_limit_bytes=cluster.host_memory_bytes,
                     peak=pk, aux=aux, capacity_bytes=cluster.gpu.memory_bytes)


def stage_timeline(setup: Setup, b: Breakdown) -> tuple:
    """The busiest rank's memory over the step, event by event (fitplan.memory.timeline.timeline):
    its schedule's forwards and backwards, then the optimizer step; the largest is b's peak."""
    from fitplan.specs.parallel import Schedule
    c = b.config
    st = stage_at(RAW, setup.model, c, b.stage_index)
    dual = c.schedule == Schedule.DUALPIPE
    m = UNBOUNDED_MICROBATCHES if setup.training.global_batch is None else setup.training.global_batch // (c.dp * c.micro_batch)
    v = 2 if dual else c.virtual_stages
    chunks = int(A.chunks_in_flight(p=c.pp, v=v, r=b.stage_index, m=m, schedule=str(c.schedule)))
    parts = stage_memory(RAW, setup, c, stage=st)   # each term as its moments hold it, not b.parts' largest
    return TL.timeline(parts, phi=setup.training.fragmentation, chunks=chunks, m=m, v=v, p=c.pp,
                       schedule=str(c.schedule), head=bool(st.head))


def candidate_ranks(model: ModelSpec, c) -> list:
    """The pipeline ranks the search evaluates (ints, or arrays over candidates): 0, 1, the
    boundary rank where the middle stages' larger layer count starts
    (fitplan.counts.stages.boundary_stage), p-1, and for an MoE model with L_d dense layers
    first, ranks 2 .. L_d + 1 and the first larger-count rank past them. Memory falls with
    the rank (fewer micro-batches in flight) while the middle counts do not, so among ranks
    of one composition the lowest is the busiest: the list holds one of each
    (tests/unit/test_stages.py checks it against every rank)."""
    p = c.pp
    b = ST.boundary_stage(L=model.num_layers, p=p, v=c.virtual_stages, first=c.first_stage_layers,
                          last=c.last_stage_layers)
    ranks = [0 * p, minimum(1, p - 1), minimum(b, p - 1), p - 1]
    dense = 0 if model.moe is None else model.moe.first_dense_layers
    if dense:
        ranks += [minimum(i, p - 1) for i in range(2, dense + 2)] + [minimum(maximum(b, dense + 1), p - 1)]
    return ranks


def candidate_stages(model: ModelSpec, c) -> list:
    """The Stage of each candidate rank; the search's grid carries them precomputed (`stages`),
    since they depend only on pp, the virtual stages and the settings."""
    cached = getattr(c, "stages", None)
    if cached is not None:
        return list(cached)
    return [stage_at(RAW, model, c, i) for i in candidate_ranks(model, c)]


def busiest_total(setup: Setup, c):
    """The step's peak on the busiest stage, over arrays of candidates (the search's path):
    the most of the candidate ranks' closed-form peaks (fitplan.memory.timeline.peak_bytes)."""
    return busiest_totals(setup, c)[0]


def busiest_totals(setup: Setup, c):
    """(the step's peak on the busiest stage, host bytes per node): the most of the candidate
    ranks for each (closed-form peaks: fitplan.memory.timeline.peak_bytes); the host figure is
    0 without offload."""
    out = host = comms = None
    for st in candidate_stages(setup.model, c):
        parts = stage_memory(RAW, setup, c, stage=st, comms=comms)
        # NCCL's and DeepEP's buffers depend on the degrees only: computed for the first rank, a
        # third of the screening's time when each rank recomputed them
        comms = comms or {key: parts[key] for key in COMMUNICATOR_TERMS}
        t = TL.peak_bytes(parts, phi=setup.training.fragmentation)
        out = t if out is None else maximum(out, t)
        if OF.offload_of(c) is not Offload.NONE or setup.training.paged_optimizer:
            x = OF.host_total(parts)
            host = x if host is None else maximum(host, x)
    if host is None:
        return out, 0
    cluster = setup.cluster
    return out, OF.per_node_bytes(per_gpu=host, G=cluster.gpus_per_node, N=cluster.num_gpus)


def fits(setup: Setup, config: ParallelConfig) -> bool:
    """Breakdown.fits of one configuration without its explanation: on ints busiest_totals is
    exactly the peak and the host bytes per node that evaluate gives (tests/unit/test_search.py)."""
    peak, host = busiest_totals(setup, config)
    limit = setup.cluster.host_memory_bytes
    return peak <= setup.cluster.usable_bytes and (limit is None or host <= limit)
