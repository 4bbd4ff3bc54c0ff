"""A pipeline rank as memory and time see it (Stage): its layers from the split (both directions'
under DualPipe), its dense and hybrid layer kinds, whether it holds the embedding and the head, its
parameters and experts (scaled to the published count), the ZeRO shard group, and which ranks can be
the busiest. Ints for one configuration, arrays over the search's candidates."""

from fitplan.arith import is_array, maximum, minimum, select
from fitplan.counts import params as P
from fitplan.counts import stages as ST
from fitplan.explain import RAW, formula, layout_inputs, once
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.specs import ModelSpec
from fitplan.specs.model import LAYER_KINDS

@record(slots=True)
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


def split_kw(model: ModelSpec, c) -> dict:
    """The split's keywords for fitplan.counts.stages: the model's layers, pp and the pinned end stages."""
    first, last = getattr(c, "first_stage_layers", None), getattr(c, "last_stage_layers", None)
    pins = {k: v for k, v in (("first", first), ("last", last)) if v is not None}
    return dict(L=model.num_layers, p=c.pp, **pins)


def stage_at(ev, model: ModelSpec, c, i) -> Stage:
    """Pipeline rank i: its layers from the split (fitplan.counts.stages); under DualPipe
    rank i runs stage i of one direction and stage p-1-i of the other [deepseek-v3 Sec. 3.2.1],
    so it holds both stages' layers, and ranks 0 and p-1 both the embedding and the head. No recompute
    mode changes it: the search's screens (one per recompute mode) form it once per rank array (its sums are new
    arrays, which would make every term read from them miss the memo)."""
    if ev is RAW and type(i) is int and type(c.pp) is int:   # one configuration's rank: formed once (_EXACT)
        key = (id(model), c.pp, getattr(c, "virtual_stages", 1), getattr(c, "first_stage_layers", None),
               getattr(c, "last_stage_layers", None), getattr(c, "schedule", None), i)
        hit = _EXACT.get(key)
        if hit is None:
            if len(_EXACT) >= 4096:
                _EXACT.clear()
            hit = _EXACT[key] = (_stage_at(ev, model, c, i), model)   # the model held: its id stays unique
        return hit[0]
    return once(ev, lambda: _stage_at(ev, model, c, i), lambda: layout_inputs("stage_at", model, c, i))


# The exact path's stages (RAW on one configuration's ints), by what the split reads: a report's exact memory, fits
# check and step time of one layout, and its largest micro-batch's scan over others, ask for the same ranks' again
_EXACT: dict = {}


def _stage_at(ev, model: ModelSpec, c, i) -> Stage:
    from fitplan.specs.parallel import Schedule
    kw, moe, v = split_kw(model, c), model.moe, getattr(c, "virtual_stages", 1)
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
    kw, v = split_kw(model, c), getattr(c, "virtual_stages", 1)
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
    ranks = candidate_ranks(model, c)
    if not is_array(c.pp):   # one configuration: each distinct rank once (small pp repeats them)
        ranks = sorted(set(ranks))
    return [stage_at(RAW, model, c, i) for i in ranks]


def end_stages(model: ModelSpec, c) -> list:
    """The first and the last pipeline rank's Stage (ranks 0 and p-1, where the data-parallel
    gradients and the optimizer step are largest); the search's box view carries them
    precomputed (`ends`), since they depend only on pp, the virtual stages and the settings."""
    cached = getattr(c, "ends", None)
    if cached is not None:
        return list(cached)
    p = c.pp
    return [stage_at(RAW, model, c, i) for i in (0 * p, p - 1)]
