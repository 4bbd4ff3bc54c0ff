"""Assemble the per-GPU memory of one pipeline stage: a flat list of formula calls.

This is the only place that knows which terms exist. `stage_memory` runs with any
evaluator (fitplan.explain): RAW over NumPy arrays in the search, a Trace for the one
configuration a report explains. The busiest GPU is the larger of the first stage (the
embedding, the most micro-batches in flight) and the last (the output layer and logits).
"""
from dataclasses import dataclass, field

from fitplan.arith import ceil_div, is_array, maximum, select
from fitplan.counts import params as P
from fitplan.explain import RAW, Term, Trace, formula
from fitplan.memory import activations as A
from fitplan.memory import states as S
from fitplan.parts import ACTIVATIONS, STATES, part_keys
from fitplan.sources import Cite
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from fitplan.errors import SpecError
from fitplan.specs.model import Mlp, Position

PARTS = part_keys(STATES, ACTIVATIONS)   # the table of parts, fitplan.parts
STATE_PARTS = PARTS[:4]
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


@dataclass(frozen=True, slots=True)
class MoeShapes:
    """The MoE-layer symbols of fitplan.memory.activations: top-k, rho (capacity factor, or
    the dropless load imbalance), expert and shared-expert widths, experts."""
    k: int
    rho: float
    f_e: int
    f_s: int
    E: int

    def kw(self) -> dict:
        """The keywords these symbols add to a formula call for an MoE layer."""
        return dict(k=self.k, rho=self.rho, f_e=self.f_e, f_s=self.f_s, E=self.E)


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

    @classmethod
    def of(cls, setup: Setup) -> "Shapes":
        m, tr = setup.model, setup.training
        moe = None if m.moe is None else MoeShapes(
            k=m.moe.experts_per_token,
            rho=m.moe.capacity_factor if m.moe.capacity_factor is not None else tr.moe_imbalance,
            f_e=m.moe.expert_ffn_size, f_s=m.moe.num_shared_experts * m.moe.expert_ffn_size, E=m.moe.num_experts)
        r_extra = 0 if m.mla is None else 2 * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
        return cls(s=tr.seq_len, h=m.hidden_size, a=m.num_heads, q=m.q_size, kv=m.kv_size, f=m.ffn_hidden_size,
                   n=3 if m.mlp is Mlp.SWIGLU else 2, e=tr.act_bytes, M=1, D=1 if tr.dropout else 0,
                   r_extra=r_extra, kernel=tr.attention_kernel, moe=moe)

    def kw(self) -> dict:
        """The keywords of a per-layer formula call (activations.per_layer_bytes and its kin);
        r_extra and kernel only where they differ from the formulas' defaults."""
        out = dict(s=self.s, h=self.h, a=self.a, q=self.q, kv=self.kv, f=self.f, n=self.n, e=self.e, M=self.M,
                   D=self.D)
        if self.r_extra:
            out["r_extra"] = self.r_extra
        if self.kernel != "eager":
            out["kernel"] = self.kernel
        return out


def _stage_layers_text(*, n_dense=None, **_):
    return ("A_layer*L/p  (one micro-batch through this stage's layers)" if n_dense is None else
            "n_dense*A_layer + (L/p - n_dense)*A_moe  (one micro-batch through this stage's layers)")


@formula("activations/layers", _stage_layers_text, STAGE)
def stage_layers_bytes(*, A_layer, L, p, n_dense=None, A_moe=0):
    n_d = L // p if n_dense is None else n_dense
    return A_layer * n_d + A_moe * (L // p - n_d)


@formula("activations/pipeline_in_flight", "A_stage*(chunks - v)/v  (the other micro-batches in flight)", STAGE)
def in_flight_bytes(*, A_stage, v, chunks):
    """chunks model chunks of L/(p*v) layers each are held; one micro-batch's worth, v of
    them, is counted in activations/layers."""
    return ceil_div(A_stage * (chunks - v), v)


def stage_psi(ev, model: ModelSpec, c, *, first: bool, key: str | None = None, n_dense=None):
    """Parameters one GPU of the first (or last) pipeline stage holds before ZeRO, routed
    experts excluded (stage_expert_psi). c: a ParallelConfig, or the search's grid (only its
    tp and pp are read, so serving's layouts use it too: fitplan.serving)."""
    moe = {} if model.moe is None else dict(n_dense=n_dense, S_moe=P.moe_layer_sharded_params(model),
                                            R_moe=P.moe_layer_replicated_params(model))
    psi = ev(P.stage_params, key=key, L=model.num_layers, S=P.layer_sharded_params(model),
             R=P.layer_replicated_params(model), Vh=P.embedding_params(model), P_pos=P.position_params(model),
             N_f=P.norm_params(model), head=P.head_params(model), tied=model.tied_embeddings, t=c.tp, p=c.pp,
             is_first=first, **moe)
    return _published(ev, model, psi, key)


def _published(ev, model: ModelSpec, psi, key):
    if model.published_params is None:
        return psi
    return ev(P.scale_to_published, key=key and key + "_scaled", psi_shape=psi, published=model.published_params,
              derived=P.shape_params(model))


def stage_expert_psi(ev, model: ModelSpec, c, *, n_dense, key: str | None = None):
    """Routed-expert parameters one GPU of a stage holds (0 for dense models): E/ep experts
    of each MoE layer on the stage (c's pp and ep are read)."""
    psi_e = ev(P.stage_expert_params, key=key, L=model.num_layers, p=c.pp, n_dense=n_dense,
               X=P.expert_params(model), ep=c.ep)
    return _published(ev, model, psi_e, key and key + "_experts")


def stage_memory(ev, setup: Setup, c, *, first: bool) -> dict:
    """Bytes per term on one GPU of the first (first=True) or the last pipeline stage.
    c: a ParallelConfig, or the search's grid (the same attribute names; its degrees,
    micro-batch and virtual stages are arrays, its zero, sequence_parallel and recompute
    scalars)."""
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    tp, pp, dp, cp, b, v = c.tp, c.pp, c.dp, c.cp, c.micro_batch, c.virtual_stages
    moe = model.moe
    n_dense = None if moe is None else ev(P.dense_layers_on_stage, L=model.num_layers, L_d=moe.first_dense_layers,
                                          p=pp, is_first=first)
    psi = stage_psi(ev, model, c, first=first, n_dense=n_dense)
    experts = {} if moe is None else dict(psi_e=stage_expert_psi(ev, model, c, n_dense=n_dense),
                                          n_ed=tp * dp * cp // c.ep)
    n_d, zero = dp * cp, c.zero
    out = {
        "states/weights": ev(S.weights_bytes, psi=psi, w=recipe.weights_bytes, n_d=n_d, zero=zero, **experts),
        "states/grads": ev(S.grads_bytes, psi=psi, g=recipe.grads_bytes, n_d=n_d, zero=zero, **experts),
        "states/master": ev(S.master_bytes, psi=psi, m=recipe.master_bytes, n_d=n_d, zero=zero, **experts),
        "states/optimizer": ev(S.optimizer_bytes, psi=psi, K=recipe.optimizer_bytes, n_d=n_d, zero=zero, **experts),
    }
    sh, sp = Shapes.of(setup), c.sequence_parallel
    layer = dict(sh.kw(), b=b, t=tp, c=cp, sp=sp, recompute=c.recompute)
    m = UNBOUNDED_MICROBATCHES if training.global_batch is None else training.global_batch // (dp * b)
    a_layer = ev(A.per_layer_bytes, **layer)
    chunks = ev(A.chunks_in_flight, p=pp, v=v, r=0 if first else pp - 1, m=m)
    if moe is None:
        a_stage = ev(stage_layers_bytes, A_layer=a_layer, L=model.num_layers, p=pp)
        workspace = ev(A.recompute_workspace_bytes, **layer)
        buffers = 0 * a_layer
    else:
        mk = sh.moe
        moe_layer = dict(layer, **mk.kw())
        a_moe = ev(A.per_layer_bytes, key="activations/per_moe_layer", **moe_layer)
        a_stage = ev(stage_layers_bytes, A_layer=a_layer, L=model.num_layers, p=pp, n_dense=n_dense, A_moe=a_moe)
        workspace = maximum(ev(A.recompute_workspace_bytes, **layer),
                            ev(A.recompute_workspace_bytes, key="activations/recompute_workspace_moe", **moe_layer))
        buffers = ev(A.moe_buffers_bytes, s=sh.s, b=b, h=sh.h, e=sh.e, k=mk.k, rho=mk.rho, t=tp, c=cp) * select(
            model.num_layers // pp - n_dense > 0, 1, 0)
    out["activations/layers"] = a_stage
    out["activations/pipeline_in_flight"] = ev(in_flight_bytes, A_stage=a_stage, v=v, chunks=chunks)
    n_mb = lambda: ev(A.embedding_microbatches, p=pp, v=v, m=m)
    out["activations/embedding"] = _held(select(pp == 1, True, first), lambda: ev(
        A.embedding_bytes, s=sh.s, b=b, h=sh.h, M=sh.M, D=sh.D, t=tp, c=cp, sp=sp, n_mb=n_mb()), a_layer)
    out["activations/output"] = _held(select(pp == 1, True, not first), lambda: ev(
        A.output_bytes, s=sh.s, b=b, h=sh.h, V=model.vocab_size, e=sh.e, t=tp, c=cp, sp=sp), a_layer)
    out["activations/recompute_workspace"] = workspace
    out["activations/moe_buffers"] = buffers
    return out


def _held(holds, compute, like):
    """A term only some stages hold: computed (and explained) only where it is held."""
    if is_array(holds):
        return compute() * holds
    return compute() if holds else 0 * like


def total(parts: dict):
    return sum(parts[k] for k in PARTS)


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The busiest GPU of one configuration, term by term, with the Terms that explain it."""
    config: ParallelConfig
    stage: str                 # "only" (pp = 1), "first" or "last"
    parts: dict                # key -> bytes, in PARTS order
    terms: tuple[Term, ...]    # every formula evaluated for that stage, in call order
    usable_bytes: int
    reserve_bytes: int

    @property
    def state_bytes(self) -> int:
        return sum(self.parts[k] for k in STATE_PARTS)

    @property
    def activation_bytes(self) -> int:
        return self.per_gpu_bytes - self.state_bytes

    @property
    def per_gpu_bytes(self) -> int:
        return total(self.parts)

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.per_gpu_bytes

    @property
    def fits(self) -> bool:
        return self.per_gpu_bytes <= self.usable_bytes


def evaluate(setup: Setup, config: ParallelConfig) -> Breakdown:
    """Exact integer breakdown of the busiest GPU, with its explanation."""
    stages = [True] if config.pp == 1 else [True, False]
    best = None
    for first in stages:
        trace = Trace()
        parts = stage_memory(trace, setup, config, first=first)
        if best is None or total(parts) > total(best[1]):
            best = (first, parts, trace)
    first, parts, trace = best
    stage = "only" if config.pp == 1 else ("first" if first else "last")
    return Breakdown(config=config, stage=stage, parts=parts, terms=tuple(trace.terms),
                     usable_bytes=setup.cluster.usable_bytes, reserve_bytes=setup.cluster.reserve_bytes)


def busiest_total(setup: Setup, c):
    """Per-GPU bytes of the busiest stage, over arrays of candidates (the search's path)."""
    first = total(stage_memory(RAW, setup, c, first=True))
    last = total(stage_memory(RAW, setup, c, first=False))
    return maximum(first, last)   # equal when pp = 1: the one stage holds both ends
