"""Assemble the step time of one training step: a flat list of formula calls.

This is the only place that knows which time terms exist. `step_time` runs with any
evaluator (fitplan.explain): RAW over NumPy arrays of degrees in the search, a Trace for
the one configuration a report explains. Discrete modes (zero, recompute, the overlap
choice) are scalars, as in fitplan.memory.breakdown.stage_memory; degrees, micro-batch
and virtual stages may be arrays.

The step is paced by the busiest pipeline stage, the last (it holds the output layer):
  step = compute + tp + cp + pp (exposed, per micro-batch, all m of them)
       + bubble ((p - 1)/(v*m) of that pipelined work)
       + dp (the exposed rest of the traffic issued during the step, and ZeRO-1/2's
             weight all-gather after the optimizer step)
Overlap: each axis's exposed part is what the compute available to hide it leaves over, per
the configuration's overlap flags (ParallelConfig, with the frameworks' defaults: tp exposed,
cp hidden behind the attention core, ep hidden under DualPipe, dp gradients reduced during
the backward, ZeRO-3 prefetched). See fitplan.timing.traffic. Collectives run as NCCL runs
them (fitplan.timing.comm.collective_s) over the nodes each group spans.
Micro-batches per step: global_batch // (dp*b), or 4*p when no global batch is given
(fitplan.timing.pipeline.DEFAULT_MICROBATCHES_PER_STAGE).
"""
from dataclasses import dataclass

from fitplan.arith import ceil_div, is_array, maximum, minimum, select
from fitplan.counts import stages as ST
from fitplan.counts import flops as F
from fitplan.explain import RAW, SECONDS, Term, Trace, formula
from fitplan.memory import finetune as FT
from fitplan.memory import states as S
from fitplan.counts import params as P
from fitplan.memory.breakdown import (Setup, Shapes, candidate_stages, pipelined, stage_at, stage_expert_psi,
                                     stage_psi)
from fitplan.parts import TIME, part_keys
from fitplan.specs.parallel import Recompute, Schedule, overlaps_ep_comm, overlaps_param_gather
from fitplan.sources import Cite
from fitplan.specs import ParallelConfig
from fitplan.timing import comm as CM
from fitplan.timing import compute as C
from fitplan.timing import offload as OFF
from fitplan.timing import gemm as G
from fitplan.timing import pipeline as PL
from fitplan.timing import traffic as T
from fitplan.timing.traffic import DDP_BUCKET_BYTES

PARTS = part_keys(TIME)   # the table of parts, fitplan.parts
AXES = ("tp", "ep", "cp", "pp", "dp")


@formula("time/step", "T_compute + T_tp + T_ep + T_cp + T_pp + T_bubble + T_dp + T_dp_after + T_opt + T_offload",
         Cite("fitplan", "formulas.md#step-time"), SECONDS,
         ("exposed parts add; what overlaps is already subtracted in each part",))
def step_total_s(*, T_compute, T_tp, T_ep, T_cp, T_pp, T_bubble, T_dp, T_dp_after, T_opt, T_offload=0):
    return T_compute + T_tp + T_ep + T_cp + T_pp + T_bubble + T_dp + T_dp_after + T_opt + T_offload


def step_flops(ev, setup: Setup, prefix: str, *, B, L, recompute, n_dense=None, rho=1, head=1, frac=1,
               mtp=0) -> dict:
    """Forward, backward (with recompute) FLOPs of B sequences through L layers and the
    logits, keyed "core", "forward", "backward"; each Term under prefix. MoE models: n_dense
    of the L layers are dense; the linear FLOPs are the layers' average, with the routed
    experts' share scaled by rho (the busiest rank's load) when the caller times a stage."""
    model, sh = setup.model, Shapes.of(setup)
    lora = FT.is_lora(setup.training)
    if lora:   # the frozen matrices and the rank-r adapters beside them (fitplan.memory.finetune)
        base_lin = ev(F.matmul_flops, key=f"{prefix}/layer_frozen_linear", B=B, s=sh.s, P=FT.linear_params(model))
        lin = base_lin + ev(F.matmul_flops, key=f"{prefix}/layer_adapters", B=B, s=sh.s,
                            P=setup.training.lora_rank * FT.adapter_dims(model, setup.training)[0])
    elif model.moe is None:
        lin = ev(F.matmul_flops, key=f"{prefix}/layer_linear", B=B, s=sh.s,
                 P=P.layer_matmul_params(model, moe_layer=False))
    else:
        dense = ev(F.matmul_flops, key=f"{prefix}/dense_layer_linear", B=B, s=sh.s,
                   P=P.layer_matmul_params(model, moe_layer=False))
        moe = ev(F.matmul_flops, key=f"{prefix}/moe_layer_linear", B=B, s=sh.s,
                 P=P.layer_matmul_params(model, moe_layer=True, rho=rho))
        lin = ev(average_layer_flops, key=f"{prefix}/layer_linear", F_dense=dense, F_moe=moe, n_dense=n_dense, L=L)
    v_heads = model.kv_size if model.mla is not None else None
    core = ev(F.attention_core_flops, key=f"{prefix}/attention_core", B=B, s=sh.s, q=sh.q,
              **({} if v_heads is None else {"v": v_heads}))
    logits = ev(F.logits_flops, key=f"{prefix}/logits", B=B, s=sh.s, h=sh.h, V=model.vocab_size) * head
    if model.mtp_depth:   # each MTP module: its own logits and its 2h -> h projection (DeepSeek-V3 Sec. 2.2)
        logits = logits + mtp * head * (
            ev(F.logits_flops, key=f"{prefix}/mtp_logits", B=B, s=sh.s, h=sh.h, V=model.vocab_size)
            + ev(F.matmul_flops, key=f"{prefix}/mtp_projection", B=B, s=sh.s, P=2 * sh.h * sh.h))
    fwd = ev(F.forward_flops, key=f"{prefix}/forward", L=L, F_linear=lin, F_core=core, F_logits=logits)
    extra = {}
    if recompute in (Recompute.OP, Recompute.NORMS):
        extra["F_rerun"] = ev(F.matmul_flops, key=f"{prefix}/rerun_linear", B=B, s=sh.s,
                              P=P.rerun_matmul_params(model, recompute))
    if recompute == Recompute.FULL and not (isinstance(frac, (int, float)) and frac == 1):
        extra["frac"] = frac
    rec = ev(F.recompute_flops, key=f"{prefix}/recompute", L=L, F_linear=lin, F_core=core, recompute=recompute,
             **extra)
    # what the recompute reruns, by class: the layers' linears, or their attention core
    rerun_linear = {Recompute.FULL: frac * L * lin, Recompute.OP: L * extra.get("F_rerun", 0),
                    Recompute.NORMS: L * extra.get("F_rerun", 0)}.get(recompute, 0 * lin)
    rerun_core = {Recompute.FULL: frac * L * core, Recompute.SELECTIVE: L * core}.get(recompute, 0 * core)
    if lora:   # no weight gradients for the frozen matrices and the head: their backward is the input gradient
        frozen = ev(F.frozen_weight_grad_flops, key=f"{prefix}/frozen_weight_grads", L=L, F_frozen=base_lin,
                    F_logits=logits)
        bwd = ev(F.backward_flops, key=f"{prefix}/backward", F_forward=fwd, F_recompute=rec, F_frozen=frozen)
        return {"core": core, "forward": fwd, "backward": bwd, "linear": L * lin, "logits": logits,
                "rerun_linear": rerun_linear, "rerun_core": rerun_core, "recompute": rec,
                "model": ev(F.hardware_flops, key=f"{prefix}/model_lora", F_forward=fwd,
                            F_backward=ev(F.backward_flops, key=f"{prefix}/backward_no_recompute", F_forward=fwd,
                                          F_recompute=0, F_frozen=frozen))}
    bwd = ev(F.backward_flops, key=f"{prefix}/backward", F_forward=fwd, F_recompute=rec)
    return {"core": core, "forward": fwd, "backward": bwd, "linear": L * lin, "logits": logits,
            "rerun_linear": rerun_linear, "rerun_core": rerun_core, "recompute": rec}


@formula("time/pass", "(F_lin/(peak_lin*eff_lin) + F_core/(peak*eff_core) + F_head/(peak*eff_head))/(t*c) + l*T_mem",
         Cite("fitplan", "formulas.md#compute-time"), SECONDS,
         ("the layers' linear GEMMs (fp8 under an fp8 recipe), the attention core and the output layer each at "
          "their sustained efficiency (fitplan.timing.gemm); T_mem: a layer's memory-bound kernels and fp8 casts",))
def pass_s(*, F_lin, F_core, F_head, peak_lin, peak, eff_lin, eff_core, eff_head, t, c, l, T_mem):
    """One micro-batch's pass (forward, or backward with its recompute) through l layers on one GPU."""
    return (F_lin / (peak_lin * eff_lin) + F_core / (peak * eff_core) + F_head / (peak * eff_head)) / (t * c) \
        + l * T_mem


@formula("flops/average_layer_linear", "(n_dense*F_dense + (L - n_dense)*F_moe)/L",
         Cite("fitplan", "formulas.md#moe"), "flops")
def average_layer_flops(*, F_dense, F_moe, n_dense, L):
    return (n_dense * F_dense + (L - n_dense) * F_moe) / maximum(L, 1)


@formula("comm/moe_a2a_count", lambda *, recompute, **_: "m*L_moe*" + ("6" if str(recompute) == "full" else "4"),
         Cite("fitplan", "formulas.md#moe (Megatron-LM alltoall token dispatcher)"), "count",
         ("dispatch and combine in forward and again in backward; full recompute reruns the forward's two",
          "exposed: on the critical path (no dispatcher overlap)"))
def moe_a2a_count(*, m, L_moe, recompute):
    return m * L_moe * (6 if recompute == Recompute.FULL else 4)


def _a2a_text(*, k_net=None, e_l=None, **_):
    k = "k" if k_net is None else "min(k, N_route)"
    e = "e" if e_l is None else "(e_l + e)/2"
    return f"{e}*{k}*rho*s*b*h/(t*c)"


@formula("comm/moe_a2a_message", _a2a_text,
         Cite("fitplan", "formulas.md#moe (node-limited routing and fp8 dispatch: DeepSeek-V3 Sec. 3.2.2, 3.3.3)"),
         "bytes")
def moe_a2a_bytes(*, e, k, rho, s, b, h, t, c, k_net=None, e_l=None):
    """One all-to-all's buffer per GPU: its sequence-sharded tokens' k routed copies (rho:
    the busiest rank receives rho times the mean). Node-limited routing (k_net = min(k, N)
    where the expert group crosses nodes): a token crosses the network once per node it is
    routed to, at most N, and is forwarded inside the node over NVLink (not counted). An fp8
    dispatch sends e_l-byte elements and the combine e-byte ones: their mean per all-to-all."""
    k_eff = k if k_net is None else k_net
    e_eff = e if e_l is None else (e_l + e) / 2
    return e_eff * k_eff * rho * s * b * h / (t * c)


@dataclass(frozen=True, slots=True)
class AxisTime:
    """One parallel axis's traffic on the busiest GPU per step: the wire bytes it sends, the
    seconds of it left on the critical path, whether its group stays inside a node, and the
    seconds it keeps its link busy (exposed or hidden); and the same two times for one layer and
    one micro-batch (the per-layer breakdown; pp: one micro-batch's sends, dp without ZeRO-3:
    the step's reductions spread over the stage's layers and micro-batches). Scalars for one configuration, arrays over the
    search's candidates."""
    bytes: object
    exposed_s: object
    intra: object
    busy_s: object = 0
    layer_busy_s: object = 0
    layer_exposed_s: object = 0
    nodes: object = 1


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """One layer's compute for one micro-batch on the paced stage (the stage's average layer):
    forward, backward without recompute, the recompute, and the linear GEMMs of its attention
    and MLP blocks (the windows tensor-parallel overlap hides behind)."""
    forward: object
    backward: object
    recompute: object
    attn_linear: object
    mlp_linear: object


@formula("time/layer", "F/(t*c*peak*eff)", Cite("fitplan", "formulas.md#per-layer"), SECONDS,
         ("one layer of the stage, one micro-batch, at the pass's rate",))
def layer_s(*, F, t, c, peak, eff):
    return F / (t * c * peak * eff)


def step_time(ev, setup: Setup, c, *, bucket_bytes: int = DDP_BUCKET_BYTES, stage_index=None) -> dict:
    """Seconds per term of one step, bytes per axis per GPU, and the rates derived from them.
    c: a ParallelConfig, or the search's grid (fitplan.memory.breakdown.stage_memory).
    stage_index: time this pipeline rank instead of the one that paces the step."""
    model, gpu = setup.model, setup.cluster.gpu
    sh = Shapes.of(setup)
    peak = C.peak_flops_per_s(gpu, setup.training.recipe.compute)
    m = ev(PL.num_microbatches, B=setup.training.global_batch, b=c.micro_batch, d=c.dp, p=c.pp)
    pacing = _pacing_rank(setup, c) if stage_index is None else stage_index
    stage = stage_at(ev, model, c, pacing)
    # DualPipe: a rank runs each micro-batch through one of its two stages, half its layers on average
    half = 0.5 if c.schedule == Schedule.DUALPIPE else 1
    L = stage.layers * half   # layers one micro-batch crosses on the slowest stage
    n_dense = None if model.moe is None else stage.n_dense * half
    mb = step_flops(ev, setup, "flops/microbatch", B=c.micro_batch, L=L, recompute=c.recompute, n_dense=n_dense,
                    rho=1 if sh.moe is None else sh.moe.rho, head=select(stage.head, half, 0), mtp=stage.mtp,
                    frac=_recomputed_share(ev, c, stage.layers))
    rates = G.layer_rates(ev, setup, c, L=L, n_dense=n_dense, m=m)
    T_f, T_b, compute = _compute_s(ev, c, m=m, flops=mb, L=L, rates=rates)
    lay = _layer_times(ev, setup, c, L=L, flops=mb, rates=rates)
    place = _placement(ev, setup, c)
    axes = {"tp": _tp_time(ev, setup, c, sh, m=m, L=L, place=place, lay=lay)}
    axes["ep"] = _ep_time(ev, setup, c, sh, m=m, L=L, n_dense=n_dense, like=axes["tp"].exposed_s, lay=lay)
    axes["cp"] = _cp_time(ev, setup, c, sh, m=m, L=L, place=place, F_core=mb["core"], peak=rates.peak,
                          eff=rates.core)
    axes["pp"] = _pp_time(ev, setup, c, sh, m=m, intra=place["pp"][0])
    fraction, bubble = _bubble_s(ev, c, m=m, T_f=T_f, T_b=T_b, T_busy=compute + axes["tp"].exposed_s
                                 + axes["ep"].exposed_s + axes["cp"].exposed_s + axes["pp"].exposed_s)
    axes["dp"], after_step = _dp_time(ev, setup, c, m=m, L=L, place=place, T_f=T_f, T_b=T_b, lay=lay,
                                      bucket_bytes=bucket_bytes)

    parts = {"time/compute": compute, "time/bubble": bubble, "time/dp_after_step": after_step,
             "time/optimizer": _optimizer_s(ev, setup, c, like=compute),
             "time/offload": OFF.offload_s(ev, setup, c, m=m, T_f=T_f, T_b=T_b, stage=stage),
             **{f"time/{axis}_exposed": axes[axis].exposed_s for axis in AXES}}
    out = {"pipeline/microbatches": m, "pipeline/bubble_fraction": fraction, "pipeline/slowest_stage": pacing,
           **{k: parts[k] for k in PARTS}}
    for axis in AXES:
        out[f"comm/{axis}_bytes"] = axes[axis].bytes
        out[f"link/{axis}_intra"] = axes[axis].intra
        out[f"link/{axis}_nodes"] = axes[axis].nodes
        out[f"comm/{axis}_busy_s"] = axes[axis].busy_s
        out[f"layer/{axis}_busy_s"] = axes[axis].layer_busy_s
        out[f"layer/{axis}_exposed_s"] = axes[axis].layer_exposed_s
    out.update({"layer/forward_s": lay.forward, "layer/backward_s": lay.backward, "layer/recompute_s": lay.recompute,
                "layer/count": L, "time/forward_microbatch": T_f, "time/backward_microbatch": T_b})
    out["time/step"] = ev(step_total_s, **dict(zip(
        ("T_compute", "T_tp", "T_ep", "T_cp", "T_pp", "T_bubble", "T_dp", "T_dp_after", "T_opt", "T_offload"),
        (out[k] for k in PARTS))))
    out.update(_rates(ev, setup, c, m=m, T_step=out["time/step"], peak=peak))
    return out


def _compute_s(ev, c, *, m, flops, L, rates: G.LayerRates):
    """One micro-batch's forward and backward through the busiest stage, split over tp and
    cp, and all m of them: each class of GEMM at its sustained efficiency, plus the layers'
    memory-bound kernels (the backward moves twice the forward's bytes, and a recompute
    reruns the forward's for what it did not store)."""
    lin, core, head = flops["linear"], L * flops["core"], flops["logits"]
    kw = dict(peak_lin=rates.peak_linear, peak=rates.peak, eff_lin=rates.linear, eff_core=rates.core,
              eff_head=rates.head, t=c.tp, c=c.cp, l=L)
    T_f = ev(pass_s, key="time/forward_microbatch", F_lin=lin, F_core=core, F_head=head,
             T_mem=rates.mem_s + rates.cast_forward_s, **kw)
    T_b = ev(pass_s, key="time/backward_microbatch", F_lin=2 * lin + flops["rerun_linear"],
             F_core=2 * core + flops["rerun_core"], F_head=2 * head,
             T_mem=G.BACKWARD_TRAFFIC * rates.mem_s + rates.rerun_mem_s + rates.cast_backward_s, **kw)
    return T_f, T_b, ev(PL.microbatches_s, key="time/compute", m=m, T_f=T_f, T_b=T_b)


@formula("time/layer_pass", "T_linear + T_core + k*T_mem", Cite("fitplan", "formulas.md#per-layer"), SECONDS,
         ("a pass of one layer: its linear GEMMs and attention core at their sustained rates, and its "
          "memory-bound kernels (k: the backward moves BACKWARD_TRAFFIC times the forward's bytes)",))
def layer_pass_s(*, T_linear, T_core, T_mem, k=1):
    return T_linear + T_core + k * T_mem


def _layer_times(ev, setup: Setup, c, *, L, flops, rates) -> LayerTimes:
    """The stage's average layer, one micro-batch, at the GEMM classes' sustained rates
    (fitplan.timing.gemm): forward (linears, attention core, memory-bound kernels), backward
    (twice the GEMMs, the backward's traffic), the recompute's share, and the attention and
    MLP blocks' linear GEMMs."""
    model, sh = setup.model, Shapes.of(setup)
    lin_at = lambda key, F: ev(layer_s, key=key, F=F, t=c.tp, c=c.cp, peak=rates.peak_linear, eff=rates.linear)
    core_at = lambda key, F: ev(layer_s, key=key, F=F, t=c.tp, c=c.cp, peak=rates.peak, eff=rates.core)
    n = maximum(L, 1)
    lin = lin_at("time/layer/forward_linear", flops["linear"] / n)
    core = core_at("time/layer/forward_core", flops["core"])
    attn = ev(F.matmul_flops, key="flops/layer/attention_linear", B=c.micro_batch, s=sh.s,
              P=P.attention_matmul_params(model))
    rerun = ev(layer_pass_s, key="time/layer/recompute",
               T_linear=lin_at("time/layer/recompute_linear", flops["rerun_linear"] / n),
               T_core=core_at("time/layer/recompute_core", flops["rerun_core"] / n), T_mem=rates.rerun_mem_s)
    return LayerTimes(forward=ev(layer_pass_s, key="time/layer/forward", T_linear=lin, T_core=core, T_mem=rates.mem_s),
                      backward=ev(layer_pass_s, key="time/layer/backward", T_linear=2 * lin, T_core=2 * core,
                                  T_mem=rates.mem_s, k=G.BACKWARD_TRAFFIC),
                      recompute=rerun, attn_linear=lin_at("time/layer/attention_linear", attn),
                      mlp_linear=lin_at("time/layer/mlp_linear", flops["linear"] / n - attn))


def _optimizer_s(ev, setup: Setup, c, *, like):
    """The optimizer step of the GPU that updates the most parameters: the larger of the first
    and last stages, its 1/n shard under ZeRO (n: dp x cp, or the hybrid shard group), routed
    experts over their expert-data-parallel group. No HBM figure: left out (0)."""
    W = setup.cluster.gpu.hbm_bytes_per_s
    if W is None:
        return 0 * like
    model, recipe, p = setup.model, setup.training.recipe, c.pp
    stages = [stage_at(RAW, model, c, i) for i in (0 * p, p - 1)]
    psi = maximum(*(stage_psi(RAW, model, c, stage=st) for st in stages))
    n = (c.shard_degree + 0 * c.dp if c.shard_degree is not None else c.dp * c.cp) if c.zero >= 1 else 1
    experts = {}
    if model.moe is not None:
        n_ed = maximum(c.tp * c.dp * c.cp // c.ep, 1)
        experts = dict(psi_e=maximum(*(stage_expert_psi(RAW, model, c, stage=st) for st in stages)),
                       n_e=n_ed if c.zero >= 1 else 1)
    return ev(C.optimizer_step_s, psi=psi, g=recipe.grads_bytes, K=recipe.optimizer_bytes, w=recipe.weights_bytes,
              m_b=recipe.master_bytes, master=recipe.master_bytes > 0, n=n, W=W, **experts)


def _placement(ev, setup: Setup, c) -> dict:
    """Each axis's group: (inside one node, nodes it spans); rank order tp-cp-pp-dp, a node
    being the NVLink domain."""
    strides, G = CM.rank_strides(tp=c.tp, cp=c.cp, pp=c.pp), setup.cluster.gpus_per_node
    out = {}
    for axis, n in (("tp", c.tp), ("cp", c.cp), ("pp", c.pp)):
        intra = ev(CM.group_is_intra_node, key=f"link/{axis}_intra", stride=strides[axis], n=n, G=G)
        out[axis] = (intra, ev(CM.group_nodes, key=f"link/{axis}_nodes", stride=strides[axis], n=n, G=G, intra=intra))
    cp_intra, k_cp = out["cp"]

    def dp_group(d, tag):
        dp_intra = ev(CM.group_is_intra_node, key=f"link/{tag}dp_intra", stride=strides["dp"], n=d, G=G)
        intra = ev(CM.dp_cp_group_is_intra_node, key=f"link/{tag}group_intra", cp_intra=cp_intra, dp_intra=dp_intra)
        k_dp = ev(CM.group_nodes, key=f"link/{tag}dp_nodes", stride=strides["dp"], n=d, G=G, intra=dp_intra)
        return intra, ev(CM.dp_cp_group_nodes, key=f"link/{tag}group_nodes", k_dp=k_dp, k_cp=k_cp, dp=d,
                         cp_intra=cp_intra)
    out["dp"] = dp_group(c.dp, "")
    if c.shard_degree is not None:   # a shard group: all cp ranks and shard/cp of the dp ranks
        out["dp_shard"] = dp_group(maximum(c.shard_degree // c.cp, 1), "shard_")
    return out   # the ep group's: _ep_time


def _collective(ev, key, setup, *, count, kind, n, nodes, S):
    return ev(CM.collective_s, key=key, count=count, kind=kind, n=n, k=nodes, S=S, **CM.tiers(setup.cluster.gpu))


def _tp_time(ev, setup: Setup, c, sh: Shapes, *, m, L, place, lay: LayerTimes) -> AxisTime:
    """Tensor parallel: per layer two exchanges forward (attention, MLP), two backward, two more
    under full recompute; each an all-reduce, or under sequence parallel a reduce-scatter and an
    all-gather. --tp-comm-overlap hides each behind its block's linear GEMMs."""
    intra, nodes = place["tp"]
    S_tp = ev(T.tp_message_bytes, b=c.micro_batch, s=sh.s, h=sh.h, e=sh.e, c=c.cp)
    n_tp = ev(T.tp_collectives, m=m, L=L, recompute=c.recompute, sp=c.sequence_parallel)
    if c.sequence_parallel:
        a = (_collective(ev, "comm/tp_exchange_rs_s", setup, count=1, kind="reduce_scatter", n=c.tp, nodes=nodes,
                         S=S_tp)
             + _collective(ev, "comm/tp_exchange_ag_s", setup, count=1, kind="all_gather", n=c.tp, nodes=nodes,
                           S=S_tp))
    else:
        a = _collective(ev, "comm/tp_exchange_s", setup, count=1, kind="all_reduce", n=c.tp, nodes=nodes, S=S_tp)
    full = 1 if c.recompute == Recompute.FULL else 0
    per_layer = (4 + 2 * full) * a
    layer_exposed = ev(T.tp_layer_exposed_s, a=a, W_attn=lay.attn_linear, W_mlp=lay.mlp_linear, full=full,
                       overlap=bool(c.tp_comm_overlap and c.sequence_parallel))
    wire = ev(CM.ring_wire_bytes, key="comm/tp_bytes", count=n_tp, n=c.tp, S=S_tp, kind="all_reduce")
    return AxisTime(wire, ev(T.exposed_s, key="time/tp_exposed", T_comm=m * L * layer_exposed, T_window=0, T_tail=0),
                    intra, m * L * per_layer, per_layer, layer_exposed, nodes)


def _ep_time(ev, setup: Setup, c, sh: Shapes, *, m, L, n_dense, like, lay: LayerTimes) -> AxisTime:
    """Expert parallel: all-to-all dispatch and combine per MoE layer, exposed unless overlapped
    (DualPipe, or --overlap-moe-expert-parallel-comm): then each MoE layer's all-to-alls hide
    behind another micro-batch's forward and backward of a layer. A dense model has nothing to
    dispatch: zero (shaped like `like`), still a Term so every part is explained."""
    if sh.moe is None:
        zero = 0 * like
        return AxisTime(zero, ev(T.exposed_s, key="time/ep_exposed", T_comm=zero, T_window=0, T_tail=0), zero == 0,
                        zero, zero, zero)
    G = setup.cluster.gpus_per_node
    intra = ev(CM.ep_group_is_intra_node, t=c.tp, c=c.cp, p=c.pp, ep=c.ep, G=G)
    nodes = ev(CM.ep_group_nodes, t=c.tp, c=c.cp, p=c.pp, ep=c.ep, G=G, intra=intra)
    extra = {} if sh.e_l is None else {"e_l": sh.e_l}
    route_nodes = setup.model.moe.route_nodes
    if route_nodes is not None:
        extra["k_net"] = select(intra, sh.moe.k, minimum(sh.moe.k, route_nodes))
    S_ep = ev(moe_a2a_bytes, e=sh.e, k=sh.moe.k, rho=sh.moe.rho, s=sh.s, b=c.micro_batch, h=sh.h, t=c.tp, c=c.cp,
              **extra)
    L_moe = L - n_dense
    n_ep = ev(moe_a2a_count, m=m, L_moe=L_moe, recompute=c.recompute)
    secs = _collective(ev, "comm/ep_s", setup, count=n_ep, kind="all_to_all", n=c.ep, nodes=nodes, S=S_ep)
    wire = ev(CM.ring_wire_bytes, key="comm/ep_bytes", count=n_ep, n=c.ep, S=S_ep, kind="all_to_all")
    per_layer = secs / maximum(m * L_moe, 1)
    overlapped = overlaps_ep_comm(c)
    window = (lay.forward + lay.backward + lay.recompute) if overlapped else 0 * per_layer
    layer_exposed = ev(T.exposed_s, key="time/ep_layer_exposed", T_comm=per_layer, T_window=window, T_tail=0)
    exposed = ev(T.exposed_s, key="time/ep_exposed", T_comm=m * L_moe * layer_exposed, T_window=0, T_tail=0)
    return AxisTime(wire, exposed, intra, secs, per_layer, layer_exposed, nodes)


def _cp_time(ev, setup: Setup, c, sh: Shapes, *, m, L, place, F_core, peak, eff) -> AxisTime:
    """Context parallel: ring exchange of K/V, hidden behind the attention core it feeds
    (--cp-comm-overlap, on by default)."""
    intra, nodes = place["cp"]
    passes = ev(T.attention_core_passes, recompute=c.recompute)
    S_cp = ev(T.cp_message_bytes, b=c.micro_batch, s=sh.s, kv=sh.kv, e=sh.e, t=c.tp, c=c.cp)
    n_cp = ev(T.cp_ring_steps, m=m, L=L, c=c.cp, passes=passes)
    secs = ev(CM.p2p_s, key="comm/cp_s", count=n_cp, S=S_cp, **CM.link_inputs(intra, setup.cluster.gpu))
    wire = ev(CM.p2p_wire_bytes, key="comm/cp_bytes", count=n_cp, S=S_cp)
    window_flops = ev(T.cp_window_flops, m=m, L=L, passes=passes, F_core=F_core)
    window = ev(C.compute_s, key="time/cp_window", peak=peak, eff=eff,
                F=ev(C.per_gpu_flops, key="flops/cp_window_per_gpu", F=window_flops, t=c.tp, c=c.cp))
    if not c.cp_comm_overlap:
        window = 0 * window
    exposed = ev(T.exposed_s, key="time/cp_exposed", T_comm=secs, T_window=window, T_tail=0)
    per = maximum(m * L, 1)
    return AxisTime(wire, exposed, intra, secs, secs / per, exposed / per, nodes)


def _pp_time(ev, setup: Setup, c, sh: Shapes, *, m, intra) -> AxisTime:
    """Pipeline parallel: activation and gradient sends between stages, exposed."""
    S_pp = ev(T.pp_message_bytes, b=c.micro_batch, s=sh.s, h=sh.h, e=sh.e, t=c.tp, c=c.cp)
    n_pp = ev(T.pp_sends, m=m, v=c.virtual_stages, p=c.pp)
    secs = ev(CM.p2p_s, key="comm/pp_s", count=n_pp, S=S_pp, **CM.link_inputs(intra, setup.cluster.gpu))
    wire = ev(CM.p2p_wire_bytes, key="comm/pp_bytes", count=n_pp, S=S_pp)
    per_mb = secs / maximum(m, 1)
    return AxisTime(wire, ev(T.exposed_s, key="time/pp_exposed", T_comm=secs, T_window=0, T_tail=0), intra, secs,
                    per_mb, per_mb, select(intra, 1, 2))


def _bubble_s(ev, c, *, m, T_f, T_b, T_busy):
    """The schedule's bubble fraction (fitplan.timing.pipeline), and that share of the pipelined work."""
    if c.schedule in (Schedule.ONE_F_ONE_B, Schedule.GPIPE):
        fraction = ev(PL.bubble_fraction_interleaved, p=c.pp, m=m, v=c.virtual_stages)
    else:
        fraction = ev(PL.bubble_fraction_schedule, p=c.pp, m=m, T_f=T_f, T_b=T_b, schedule=str(c.schedule))
    return fraction, ev(PL.bubble_s, fraction=fraction, T_busy=T_busy)


@formula("flops/recomputed_share", "min(N, l)/l  (block: the first N of the stage's l layers)",
         Cite("megatron", "--recompute-method block --recompute-num-layers N"), "ratio")
def recomputed_share(*, N, l):
    return minimum(N, l) / maximum(l, 1)


def _recomputed_share(ev, c, l):
    """The share of a stage's layers full recompute reruns: all, or --recompute-method block's N."""
    if c.recompute != Recompute.FULL or c.recompute_num_layers is None or str(c.recompute_method) != "block":
        return 1
    return ev(recomputed_share, N=c.recompute_num_layers, l=l)


def _pacing_rank(setup: Setup, c):
    """The pipeline rank whose micro-batch takes longest: of the candidate ranks
    (fitplan.memory.breakdown.candidate_ranks), the one with the most forward FLOPs; the later
    rank among equals (the output layer's sends come last)."""
    best_i, best_f = None, None
    for st in candidate_stages(setup.model, c):
        i = st.index
        f = step_flops(RAW, setup, "", B=1, L=st.layers, recompute=c.recompute, n_dense=st.n_dense,
                       head=select(st.head, 1, 0), mtp=st.mtp)["forward"]
        if best_i is None:
            best_i, best_f = i, f
        else:
            later = f >= best_f
            best_i, best_f = select(later, i, best_i), maximum(f, best_f)
    return best_i


def _dp_time(ev, setup: Setup, c, *, m, L, place, T_f, T_b, lay: LayerTimes, bucket_bytes):
    """Data parallel over dp x cp: gradient reduction and parameter gathers of the larger
    stage (routed experts over their expert-data-parallel group). Hybrid sharding
    (--shard-degree N): reduce-scatter and gathers within groups of N ranks, and an
    all-reduce of each 1/N gradient shard across the dp*cp/N groups.

    Without ZeRO-3 the gradients go in buckets of bucket_bytes, once per step (ZeRO-0/1) or per
    micro-batch (ZeRO-2), hidden behind the backward that produces them (--overlap-grad-reduce)
    but for the last bucket; ZeRO-1/2 gather the updated weights after the optimizer step, or
    during the next forward (--overlap-param-gather). ZeRO-3 gathers and reduce-scatters one
    layer at a time (fitplan.timing.traffic.layer_pipeline_exposed_s).
    Returns the axis and the seconds exposed after the optimizer step."""
    model, recipe, zero = setup.model, setup.training.recipe, int(c.zero)
    p = c.pp
    stages = [stage_at(RAW, model, c, i) for i in (0 * p, p - 1)]
    held = maximum(maximum(stages[0].layers, stages[1].layers), 1)   # layers whose weights psi holds
    psi = maximum(stage_psi(ev, model, c, stage=stages[0], key="params/stage_first"),
                  stage_psi(ev, model, c, stage=stages[1], key="params/stage_last"))
    S_g = ev(S.grads_bytes, key="comm/dp_grad_message", psi=psi, g=recipe.grads_bytes, n_d=1, zero=0)
    S_w = ev(S.weights_bytes, key="comm/dp_param_message", psi=psi, w=recipe.weights_bytes, n_d=1, zero=0)
    if FT.is_lora(setup.training):   # only the adapters' gradients are reduced; ZeRO-3 gathers the frozen base too
        S_g, S_w = FT.dp_messages(ev, setup, c, stages=stages, psi=psi)
    n_all = c.dp * c.cp
    hybrid = c.shard_degree is not None
    n_dp = c.shard_degree + 0 * n_all if hybrid else n_all
    intra, nodes = place["dp_shard"] if hybrid else place["dp"]
    piped = pipelined(c)   # pipeline stages sync ZeRO-2/3 gradients once, after the last micro-batch
    rs = ev(T.dp_grad_reduce_scatters, zero=zero, m=m, piped=piped)
    ag_g = ev(T.dp_grad_all_gathers, zero=zero)
    ag_w = ev(T.dp_param_all_gathers, zero=zero, m=m, reshard=c.reshard_after_forward, piped=piped)
    groups = [("", S_g, S_w, n_dp, nodes)]
    if model.moe is not None:   # routed experts reduce over the expert-data-parallel group, tp*dp*cp/ep ranks
        psi_e = maximum(*(stage_expert_psi(ev, model, c, stage=st, key=f"params/stage_{name}_experts")
                          for st, name in zip(stages, ("first", "last"))))
        n_ed = maximum(c.tp * n_all // c.ep * n_dp // n_all, 1)
        G = setup.cluster.gpus_per_node
        # expert-data-parallel members are ep apart in the stage's tp x cp x dp order: ep*pp ranks apart
        # once ep covers whole tp x cp blocks (the next data-parallel replica), else ep (an approximation)
        stride = select(c.ep >= c.tp * c.cp, c.ep * p, c.ep)
        e_intra = ev(CM.group_is_intra_node, key="link/expert_dp_intra", stride=stride, n=n_ed, G=G)
        groups.append(("expert_",
                       ev(S.grads_bytes, key="comm/dp_expert_grad_message", psi=psi_e, g=recipe.grads_bytes, n_d=1,
                          zero=0),
                       ev(S.weights_bytes, key="comm/dp_expert_param_message", psi=psi_e, w=recipe.weights_bytes,
                          n_d=1, zero=0), n_ed,
                       ev(CM.group_nodes, key="link/expert_dp_nodes", stride=stride, n=n_ed, G=G, intra=e_intra)))
    wire = 0
    for tag, Sg, Sw, n, k in groups:
        wire = wire + (
            ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}grad_rs_bytes", count=rs, n=n, S=Sg, kind="reduce_scatter")
            + ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}grad_ag_bytes", count=ag_g, n=n, S=Sg, kind="all_gather")
            + ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}param_ag_bytes", count=ag_w, n=n, S=Sw, kind="all_gather"))
    # the replicas all-reduce each group's 1/N gradient shard once per step
    replica = 0
    if hybrid:
        cross_intra, cross_nodes = place["dp"]
        for tag, Sg, _, n, _ in groups:
            shard = Sg / n
            n_rep = n_all // n_dp
            replica = replica + _collective(ev, f"comm/dp_{tag}replica_ar_s", setup, count=ceil_div(shard, bucket_bytes),
                                            kind="all_reduce", n=n_rep, nodes=minimum(cross_nodes, n_rep),
                                            S=shard / maximum(ceil_div(shard, bucket_bytes), 1))
            wire = wire + ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}replica_ar_bytes", count=1, n=n_rep, S=shard,
                             kind="all_reduce")
    og, op = bool(c.overlap_grad_reduce), overlaps_param_gather(c)
    if zero == 3:
        out = _zero3_time(ev, setup, c, m=m, L=L, held=held, groups=groups, lay=lay, og=og, op=op,
                          replica=replica, T_b=T_b)
    else:
        out = _bucketed_time(ev, setup, c, m=m, groups=groups, T_f=T_f, T_b=T_b, og=og, op=op, replica=replica,
                             bucket_bytes=bucket_bytes, zero=zero, layers=held)
    exposed, after, busy, layer_busy, layer_exposed = out
    return AxisTime(wire, exposed, intra, busy, layer_busy, layer_exposed, nodes), after


def _bucketed_time(ev, setup, c, *, m, groups, T_f, T_b, og, op, replica, bucket_bytes, zero, layers):
    """ZeRO-0/1/2: gradient buckets per reduction (once per step, or per micro-batch under
    ZeRO-2), and ZeRO-1/2's weight all-gather after the step."""
    red = ag = 0
    buckets_g = buckets_w = 1
    for tag, Sg, Sw, n, k in groups:
        nb_g = maximum(ceil_div(Sg, bucket_bytes), 1)
        red = red + _collective(ev, f"comm/dp_{tag}grad_reduction_s", setup, count=nb_g,
                                kind="all_reduce" if zero == 0 else "reduce_scatter", n=n, nodes=k, S=Sg / nb_g)
        buckets_g = maximum(buckets_g, nb_g)
        if zero in (1, 2):
            nb_w = maximum(ceil_div(Sw, bucket_bytes), 1)
            ag = ag + _collective(ev, f"comm/dp_{tag}param_ag_s", setup, count=nb_w, kind="all_gather", n=n, nodes=k,
                                  S=Sw / nb_w)
            buckets_w = maximum(buckets_w, nb_w)
    reductions = (m - pipelined(c) * (m - 1)) if zero == 2 else 1   # pipelined: once per step
    per_reduction = ev(T.bucketed_exposed_s, key="time/dp_grad_exposed", T_comm=red, T_window=T_b, buckets=buckets_g,
                       overlap=og)
    rep = ev(T.bucketed_exposed_s, key="time/dp_replica_exposed", T_comm=replica, T_window=T_b, buckets=buckets_g,
             overlap=og)
    exposed = ev(T.exposed_s, key="time/dp_exposed", T_comm=reductions * per_reduction + rep, T_window=0, T_tail=0)
    after = ev(T.bucketed_exposed_s, key="time/dp_after_step", T_comm=ag, T_window=T_f, buckets=buckets_w,
               overlap=op and zero in (1, 2))
    busy = reductions * red + replica + ag
    per = maximum(layers, 1) * m   # spread over the stage's layers and the step's micro-batches
    return exposed, after, busy, busy / per, (exposed + after) / per


def _zero3_time(ev, setup, c, *, m, L, held, groups, lay: LayerTimes, og, op, replica, T_b):
    """ZeRO-3: per layer and micro-batch, one weight all-gather in forward, another in backward
    (unless the weights are kept), one gradient reduce-scatter; prefetched and reduced while the
    neighbouring layer computes."""
    t_ag = t_rs = 0
    for tag, Sg, Sw, n, k in groups:
        t_ag = t_ag + _collective(ev, f"comm/dp_{tag}layer_ag_s", setup, count=1, kind="all_gather", n=n, nodes=k,
                                  S=Sw / held)
        t_rs = t_rs + _collective(ev, f"comm/dp_{tag}layer_rs_s", setup, count=1, kind="reduce_scatter", n=n,
                                  nodes=k, S=Sg / held)
    g = t_ag if c.reshard_after_forward else 0 * t_ag
    fwd = ev(T.layer_pipeline_exposed_s, key="time/dp_forward_exposed", L=L, x=0 * t_ag if op else t_ag,
             h_first=t_ag if op else 0 * t_ag, h_last=0 * t_ag, W=lay.forward)
    bwd = ev(T.layer_pipeline_exposed_s, key="time/dp_backward_exposed", L=L,
             x=(0 * g if op else g) + (0 * t_rs if og else t_rs), h_first=g if op else 0 * g,
             h_last=t_rs if og else 0 * t_rs, W=lay.backward + lay.recompute)
    # with pipeline stages (torch.distributed.pipelining) only the first forward gathers and only the last
    # backward reduce-scatters; the other backwards still gather when forward resharded (g)
    piped = pipelined(c)
    n_sync = m - piped * (m - 1)
    bwd_gather = 0 * bwd if not is_array(piped) and not piped else ev(
        T.layer_pipeline_exposed_s, key="time/dp_backward_gather_exposed", L=L, x=0 * g if op else g,
        h_first=g if op else 0 * g, h_last=0 * g, W=lay.backward + lay.recompute)
    rep = ev(T.bucketed_exposed_s, key="time/dp_replica_exposed", T_comm=replica, T_window=T_b,
             buckets=maximum(L, 1), overlap=og)
    exposed = ev(T.exposed_s, key="time/dp_exposed", T_comm=n_sync * (fwd + bwd) + (m - n_sync) * bwd_gather + rep,
                 T_window=0, T_tail=0)
    per_layer = t_ag + g + t_rs
    busy = L * (n_sync * (t_ag + t_rs) + m * g) + replica
    return exposed, 0 * exposed, busy, per_layer, (n_sync * (fwd + bwd) + (m - n_sync) * bwd_gather) / (
        maximum(L, 1) * m)


def _rates(ev, setup: Setup, c, *, m, T_step, peak) -> dict:
    """The whole step's model and hardware FLOPs over all N GPUs, and the tokens per second."""
    model = setup.model
    B = c.dp * m * c.micro_batch
    whole = step_flops(ev, setup, "flops/step", B=B, L=model.num_layers + model.mtp_depth, recompute=c.recompute,
                       mtp=model.mtp_depth,
                       frac=_recomputed_share(RAW, c, ST.stage_layers.fn(L=model.num_layers, p=c.pp, v=c.virtual_stages,
                                                                          i=c.pp - 1, first=c.first_stage_layers,
                                                                          last=c.last_stage_layers)),
                       n_dense=None if model.moe is None else model.moe.first_dense_layers)
    model_f = whole["model"] if "model" in whole else ev(F.model_flops, key="flops/model_step",
                                                          F_forward=whole["forward"])
    causal_f = ev(F.model_flops, key="flops/model_step_causal", F_forward=ev(
        F.causal_forward_flops, key="flops/step/forward_causal", F_forward=whole["forward"], L=model.num_layers,
        F_core=whole["core"]))
    hw_f = ev(F.hardware_flops, key="flops/hardware_step", F_forward=whole["forward"], F_backward=whole["backward"])
    N = c.tp * c.pp * c.dp * c.cp
    return {"flops/model_step": model_f, "flops/hardware_step": hw_f,
            "ratio/mfu": ev(C.flops_utilisation, key="ratio/mfu", F=model_f, T_step=T_step, N=N, peak=peak),
            "ratio/mfu_causal": ev(C.flops_utilisation, key="ratio/mfu_causal", F=causal_f, T_step=T_step, N=N,
                                   peak=peak),
            "ratio/hfu": ev(C.flops_utilisation, key="ratio/hfu", F=hw_f, T_step=T_step, N=N, peak=peak),
            "rate/flops_per_gpu": ev(C.flops_per_gpu_per_s, key="rate/flops_per_gpu", F=hw_f, T_step=T_step, N=N),
            "rate/tokens": ev(C.tokens_per_s, B=B, s=setup.training.seq_len, T_step=T_step)}


@dataclass(frozen=True, slots=True)
class AxisComm:
    """One parallel axis's traffic on one GPU per step."""
    axis: str
    degree: int              # the group size the traffic runs over (dp x cp for dp)
    bytes_per_step: float    # bytes this GPU sends per step (ring wire bytes)
    exposed_s: float         # the part of busy_s on the critical path
    intra_node: bool
    link: str                # the link tier's name, e.g. "NVLink 3"
    busy_s: float = 0.0      # seconds the traffic occupies its link, hidden behind compute or not
    name: str = ""           # how reports name the group: "dp x cp" where the dp group spans cp too
    nodes: int = 1           # nodes (NVLink domains) one group spans

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.axis)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """The step time of one configuration, term by term, with the Terms that explain it."""
    config: ParallelConfig
    parts: dict                  # PARTS key -> seconds; they add up to step_time_s
    terms: tuple[Term, ...]      # every formula evaluated, in call order
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float        # achieved hardware TFLOP/s per GPU (1e12 FLOP/s), recompute included
    mfu: float                   # fractions in [0, 1]; the attention core counted in full (Narayanan et al.)
    hfu: float
    mfu_causal: float            # the attention core counted at half, for a causal mask (FlashAttention's)
    num_microbatches: int
    bubble_fraction: float
    comm: dict                   # axis -> AxisComm, for AXES
    slowest_stage: int = 0       # the pipeline rank that paces the step (most FLOPs per micro-batch)

    @property
    def shares(self) -> dict:
        """Each part as a fraction of the step."""
        return {k: v / self.step_time_s for k, v in self.parts.items()}

    @property
    def exposed_comm_s(self) -> dict:
        return {axis: c.exposed_s for axis, c in self.comm.items()}


def evaluate_step(setup: Setup, config: ParallelConfig, *, bucket_bytes: int = DDP_BUCKET_BYTES) -> StepBreakdown:
    """The step time of one configuration, with its explanation."""
    trace = Trace()
    out = step_time(trace, setup, config, bucket_bytes=bucket_bytes)
    exposed = {"tp": out["time/tp_exposed"], "ep": out["time/ep_exposed"], "cp": out["time/cp_exposed"],
               "pp": out["time/pp_exposed"], "dp": out["time/dp_exposed"] + out["time/dp_after_step"]}
    degree = {"tp": config.tp, "ep": config.ep, "cp": config.cp, "pp": config.pp, "dp": config.dp * config.cp}
    name = {"dp": "dp x cp"} if config.cp > 1 else {}   # gradients and ZeRO shards span the cp ranks too
    comm = {axis: AxisComm(axis=axis, degree=degree[axis], bytes_per_step=out[f"comm/{axis}_bytes"],
                           exposed_s=exposed[axis], intra_node=bool(out[f"link/{axis}_intra"]),
                           link=CM.link_name(bool(out[f"link/{axis}_intra"]), setup.cluster.gpu),
                           busy_s=float(out[f"comm/{axis}_busy_s"]), name=name.get(axis, axis),
                           nodes=int(round(float(out[f"link/{axis}_nodes"])))) for axis in AXES}
    return StepBreakdown(config=config, parts={k: out[k] for k in PARTS}, terms=tuple(trace.terms),
                         step_time_s=out["time/step"], tokens_per_s=out["rate/tokens"],
                         tflops_per_gpu=out["rate/flops_per_gpu"] / 1e12, mfu=out["ratio/mfu"],
                         hfu=out["ratio/hfu"], mfu_causal=out["ratio/mfu_causal"],
                         num_microbatches=out["pipeline/microbatches"],
                         bubble_fraction=out["pipeline/bubble_fraction"], comm=comm,
                         slowest_stage=int(out["pipeline/slowest_stage"]))


@dataclass(frozen=True, slots=True)
class StageLayers:
    """One pipeline rank's layer, one micro-batch (the stage's average layer): compute and each
    axis's traffic, busy on its link and exposed; and the stage's micro-batch and step totals."""
    stage: int
    layers: int                  # layers one micro-batch crosses on this rank (DualPipe: half the rank's)
    dense_layers: int | None     # of them, dense (MoE models)
    forward_s: float
    backward_s: float            # without the recompute
    recompute_s: float
    comm: dict                   # axis -> (busy_s, exposed_s) per layer and micro-batch (pp: per micro-batch)
    microbatch_forward_s: float  # the stage's whole forward of one micro-batch (embedding, head included)
    microbatch_backward_s: float  # and backward, recompute included
    exposed_s: dict              # axis -> the stage's exposed seconds per step
    paces: bool = False          # the rank that paces the step


PER_LAYER_AXES = ("tp", "ep", "cp", "dp", "pp")


def per_layer(setup: Setup, config: ParallelConfig) -> tuple[StageLayers, ...]:
    """Forward, backward, recompute and each axis's traffic per layer, for every pipeline rank
    (Calculon's -l): the same step_time, timed on each rank in turn."""
    pacing = _pacing_rank(setup, config)
    out = []
    for i in range(config.pp):
        r = step_time(RAW, setup, config, stage_index=i)
        stage = stage_at(RAW, setup.model, config, i)
        half = 0.5 if config.schedule == Schedule.DUALPIPE else 1
        comm = {axis: (float(r[f"layer/{axis}_busy_s"]), float(r[f"layer/{axis}_exposed_s"]))
                for axis in PER_LAYER_AXES}
        out.append(StageLayers(
            stage=i, layers=int(round(float(r["layer/count"]))),
            dense_layers=None if stage.n_dense is None else int(round(float(stage.n_dense * half))),
            forward_s=float(r["layer/forward_s"]), backward_s=float(r["layer/backward_s"]),
            recompute_s=float(r["layer/recompute_s"]), comm=comm,
            microbatch_forward_s=float(r["time/forward_microbatch"]),
            microbatch_backward_s=float(r["time/backward_microbatch"]),
            exposed_s={axis: float(r[f"time/{axis}_exposed"]) for axis in PER_LAYER_AXES}, paces=i == pacing))
    return tuple(out)


def step_seconds(setup: Setup, c):
    """Step seconds over arrays of candidates (the search's path)."""
    return step_time(RAW, setup, c)["time/step"]
