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
Overlap: tp and pp fully exposed; cp hidden behind the attention core; dp per DpOverlap
(default BACKWARD; NONE reproduces Korthikanti Sec. 6.3). See fitplan.timing.traffic.
Micro-batches per step: global_batch // (dp*b), or 4*p when no global batch is given
(fitplan.timing.pipeline.DEFAULT_MICROBATCHES_PER_STAGE).
"""
from dataclasses import dataclass

from fitplan.arith import maximum
from fitplan.counts import flops as F
from fitplan.explain import RAW, SECONDS, Term, Trace, formula
from fitplan.memory import states as S
from fitplan.counts import params as P
from fitplan.memory.breakdown import Setup, config_kwargs, moe_inputs, shape_inputs, stage_expert_psi, stage_psi
from fitplan.parts import TIME, part_keys
from fitplan.specs.parallel import Recompute
from fitplan.sources import Cite
from fitplan.specs import ParallelConfig
from fitplan.timing import comm as CM
from fitplan.timing import compute as C
from fitplan.timing import pipeline as PL
from fitplan.timing import traffic as T
from fitplan.timing.traffic import DDP_BUCKET_BYTES, DpOverlap

PARTS = part_keys(TIME)   # the table of parts, fitplan.parts
AXES = ("tp", "ep", "cp", "pp", "dp")


@formula("time/step", "T_compute + T_tp + T_ep + T_cp + T_pp + T_bubble + T_dp + T_dp_after",
         Cite("fitplan", "formulas.md#step-time"), SECONDS,
         ("exposed parts add; what overlaps is already subtracted in each part",))
def step_total_s(*, T_compute, T_tp, T_ep, T_cp, T_pp, T_bubble, T_dp, T_dp_after):
    return T_compute + T_tp + T_ep + T_cp + T_pp + T_bubble + T_dp + T_dp_after


def _flops(ev, prefix, *, setup, B, L, sh, V, recompute, n_dense=None, rho=1):
    """Forward, backward (with recompute) FLOPs of B sequences through L layers and the
    logits. MoE models: n_dense of the L layers are dense; the linear FLOPs are the layers'
    average, with the routed experts' share scaled by rho (the busiest rank's load) when
    the caller times a stage."""
    model = setup.model
    if model.moe is None:
        lin = ev(F.matmul_flops, key=f"{prefix}/layer_linear", B=B, s=sh["s"],
                 P=P.layer_matmul_params(model, moe_layer=False))
    else:
        dense = ev(F.matmul_flops, key=f"{prefix}/dense_layer_linear", B=B, s=sh["s"],
                   P=P.layer_matmul_params(model, moe_layer=False))
        moe = ev(F.matmul_flops, key=f"{prefix}/moe_layer_linear", B=B, s=sh["s"],
                 P=P.layer_matmul_params(model, moe_layer=True, rho=rho))
        lin = ev(average_layer_flops, key=f"{prefix}/layer_linear", F_dense=dense, F_moe=moe, n_dense=n_dense, L=L)
    v_heads = model.kv_size if model.mla is not None else None
    core = ev(F.attention_core_flops, key=f"{prefix}/attention_core", B=B, s=sh["s"], q=sh["q"],
              **({} if v_heads is None else {"v": v_heads}))
    logits = ev(F.logits_flops, key=f"{prefix}/logits", B=B, s=sh["s"], h=sh["h"], V=V)
    fwd = ev(F.forward_flops, key=f"{prefix}/forward", L=L, F_linear=lin, F_core=core, F_logits=logits)
    rec = ev(F.recompute_flops, key=f"{prefix}/recompute", L=L, F_linear=lin, F_core=core, recompute=recompute)
    bwd = ev(F.backward_flops, key=f"{prefix}/backward", F_forward=fwd, F_recompute=rec)
    return {"core": core, "forward": fwd, "backward": bwd}


@formula("flops/average_layer_linear", "(n_dense*F_dense + (L - n_dense)*F_moe)/L",
         Cite("fitplan", "formulas.md#moe"), "flops")
def average_layer_flops(*, F_dense, F_moe, n_dense, L):
    return (n_dense * F_dense + (L - n_dense) * F_moe) / L


@formula("comm/moe_a2a_count", lambda *, recompute, **_: "m*L_moe*" + ("6" if str(recompute) == "full" else "4"),
         Cite("fitplan", "formulas.md#moe (Megatron-LM alltoall token dispatcher)"), "count",
         ("dispatch and combine in forward and again in backward; full recompute reruns the forward's two",
          "exposed: on the critical path (no dispatcher overlap)"))
def moe_a2a_count(*, m, L_moe, recompute):
    return m * L_moe * (6 if recompute == Recompute.FULL else 4)


@formula("comm/moe_a2a_message", "e*k*rho*s*b*h/(t*c)", Cite("fitplan", "formulas.md#moe"), "bytes")
def moe_a2a_bytes(*, e, k, rho, s, b, h, t, c):
    """One all-to-all's buffer per GPU: its sequence-sharded tokens' k routed copies (rho:
    the busiest rank receives rho times the mean)."""
    return e * k * rho * s * b * h / (t * c)


def step_time(ev, setup: Setup, *, tp, pp, dp, cp, b, v, zero, sp, recompute, ep=1,
              dp_overlap: DpOverlap = DpOverlap.BACKWARD, bucket_bytes: int = DDP_BUCKET_BYTES) -> dict:
    """Seconds per term of one step, bytes per axis per GPU, and the rates derived from them."""
    model, training, cluster = setup.model, setup.training, setup.cluster
    gpu, recipe = cluster.gpu, training.recipe
    peak = C.peak_flops_per_s(gpu, recipe.compute)
    sh = shape_inputs(setup)
    eff = ev(C.gemm_efficiency, eff_max=gpu.efficiency, h=sh["h"], h0=gpu.efficiency_h0)
    s, h, e, L = sh["s"], sh["h"], sh["e"], model.num_layers // pp
    m = ev(PL.num_microbatches, B=training.global_batch, b=b, d=dp, p=pp)
    out = {"pipeline/microbatches": m}

    moe = model.moe
    n_dense = None if moe is None else ev(P.dense_layers_on_stage, key="params/dense_layers_last", L=model.num_layers,
                                          L_d=moe.first_dense_layers, p=pp, is_first=False)
    rho = 1 if moe is None else moe_inputs(setup)["rho"]

    # compute: one micro-batch through the busiest (last) stage, split over tp and cp
    mb = _flops(ev, "flops/microbatch", setup=setup, B=b, L=L, sh=sh, V=model.vocab_size, recompute=recompute,
                n_dense=n_dense, rho=rho)
    T_f = ev(C.compute_s, key="time/forward_microbatch", peak=peak, eff=eff,
             F=ev(C.per_gpu_flops, key="flops/forward_per_gpu", F=mb["forward"], t=tp, c=cp))
    T_b = ev(C.compute_s, key="time/backward_microbatch", peak=peak, eff=eff,
             F=ev(C.per_gpu_flops, key="flops/backward_per_gpu", F=mb["backward"], t=tp, c=cp))
    out["time/compute"] = ev(PL.microbatches_s, key="time/compute", m=m, T_f=T_f, T_b=T_b)

    # which link each axis's group crosses
    strides, G = CM.rank_strides(tp=tp, cp=cp, pp=pp), cluster.gpus_per_node
    intra = {axis: ev(CM.group_is_intra_node, key=f"link/{axis}_intra", stride=strides[axis], n=n, G=G)
             for axis, n in (("tp", tp), ("cp", cp), ("pp", pp))}
    intra["dp"] = ev(CM.dp_cp_group_is_intra_node, cp_intra=intra["cp"], dp_intra=ev(
        CM.group_is_intra_node, key="link/dp_group_intra", stride=strides["dp"], n=dp, G=G))
    link = {axis: CM.link_inputs(intra[axis], gpu) for axis in ("tp", "cp", "pp", "dp")}
    out.update({f"link/{axis}_intra": intra[axis] for axis in ("tp", "cp", "pp", "dp")})

    # tensor parallel: activation all-reduces (RS + AG under SP), exposed
    S_tp = ev(T.tp_message_bytes, b=b, s=s, h=h, e=e, c=cp)
    n_tp = ev(T.tp_collectives, m=m, L=L, recompute=recompute, sp=sp)
    tp_s = ev(CM.ring_collective_s, key="comm/tp_s", count=n_tp, n=tp, S=S_tp, kind="all_reduce", **link["tp"])
    out["comm/tp_bytes"] = ev(CM.ring_wire_bytes, key="comm/tp_bytes", count=n_tp, n=tp, S=S_tp, kind="all_reduce")
    out["time/tp_exposed"] = ev(T.exposed_s, key="time/tp_exposed", T_comm=tp_s, T_window=0, T_tail=0)

    # expert parallel: all-to-all dispatch and combine per MoE layer, exposed
    if moe is None:   # no experts: nothing to dispatch (still a Term, so every part is explained)
        out["comm/ep_bytes"] = 0 * out["time/tp_exposed"]
        out["time/ep_exposed"] = ev(T.exposed_s, key="time/ep_exposed", T_comm=out["comm/ep_bytes"], T_window=0,
                                    T_tail=0)
        out["link/ep_intra"] = out["comm/ep_bytes"] == 0
    else:
        mk = moe_inputs(setup)
        intra["ep"] = out["link/ep_intra"] = ev(CM.group_is_intra_node, key="link/ep_intra", stride=1, n=ep, G=G)
        S_ep = ev(moe_a2a_bytes, e=e, k=mk["k"], rho=rho, s=s, b=b, h=h, t=tp, c=cp)
        n_ep = ev(moe_a2a_count, m=m, L_moe=L - n_dense, recompute=recompute)
        ep_s = ev(CM.ring_collective_s, key="comm/ep_s", count=n_ep, n=ep, S=S_ep, kind="all_to_all",
                  **CM.link_inputs(intra["ep"], gpu))
        out["comm/ep_bytes"] = ev(CM.ring_wire_bytes, key="comm/ep_bytes", count=n_ep, n=ep, S=S_ep, kind="all_to_all")
        out["time/ep_exposed"] = ev(T.exposed_s, key="time/ep_exposed", T_comm=ep_s, T_window=0, T_tail=0)

    # context parallel: ring exchange of K/V, hidden behind the attention core
    passes = ev(T.attention_core_passes, recompute=recompute)
    S_cp = ev(T.cp_message_bytes, b=b, s=s, kv=sh["kv"], e=e, t=tp, c=cp)
    n_cp = ev(T.cp_ring_steps, m=m, L=L, c=cp, passes=passes)
    cp_s = ev(CM.p2p_s, key="comm/cp_s", count=n_cp, S=S_cp, **link["cp"])
    out["comm/cp_bytes"] = ev(CM.p2p_wire_bytes, key="comm/cp_bytes", count=n_cp, S=S_cp)
    cp_flops = ev(T.cp_window_flops, m=m, L=L, passes=passes, F_core=mb["core"])
    cp_window = ev(C.compute_s, key="time/cp_window", peak=peak, eff=eff,
                   F=ev(C.per_gpu_flops, key="flops/cp_window_per_gpu", F=cp_flops, t=tp, c=cp))
    out["time/cp_exposed"] = ev(T.exposed_s, key="time/cp_exposed", T_comm=cp_s, T_window=cp_window,
                                T_tail=0)

    # pipeline parallel: activation and gradient sends between stages, exposed
    S_pp = ev(T.pp_message_bytes, b=b, s=s, h=h, e=e, t=tp, c=cp)
    n_pp = ev(T.pp_sends, m=m, v=v, p=pp)
    pp_s = ev(CM.p2p_s, key="comm/pp_s", count=n_pp, S=S_pp, **link["pp"])
    out["comm/pp_bytes"] = ev(CM.p2p_wire_bytes, key="comm/pp_bytes", count=n_pp, S=S_pp)
    out["time/pp_exposed"] = ev(T.exposed_s, key="time/pp_exposed", T_comm=pp_s, T_window=0, T_tail=0)

    # bubble: (p - 1)/(v*m) of the pipelined work
    busy = (out["time/compute"] + out["time/tp_exposed"] + out["time/ep_exposed"] + out["time/cp_exposed"]
            + out["time/pp_exposed"])
    frac = ev(PL.bubble_fraction_interleaved, p=pp, m=m, v=v)
    out["pipeline/bubble_fraction"] = frac
    out["time/bubble"] = ev(PL.bubble_s, fraction=frac, T_busy=busy)

    # data parallel over dp x cp: gradient reduction and parameter gathers of the larger stage
    psi = maximum(stage_psi(ev, setup, tp=tp, pp=pp, first=True, key="params/stage_first"),
                  stage_psi(ev, setup, tp=tp, pp=pp, first=False, key="params/stage_last"))
    S_g = ev(S.grads_bytes, key="comm/dp_grad_message", psi=psi, g=recipe.grads_bytes, n_d=1, zero=0)
    S_w = ev(S.weights_bytes, key="comm/dp_param_message", psi=psi, w=recipe.weights_bytes, n_d=1, zero=0)
    n_dp, dl = dp * cp, link["dp"]
    rs = ev(T.dp_grad_reduce_scatters, zero=zero, m=m)
    ag_g = ev(T.dp_grad_all_gathers, zero=zero)
    ag_w = ev(T.dp_param_all_gathers, zero=zero, m=m)
    groups = [("", S_g, S_w, n_dp)]
    if moe is not None:   # routed experts reduce over the expert-data-parallel group, tp*dp*cp/ep ranks
        psi_e = maximum(*(stage_expert_psi(ev, setup, pp=pp, ep=ep, key=f"params/stage_{'first' if f else 'last'}_experts",
                                           n_dense=ev(P.dense_layers_on_stage, key="params/dense_layers_"
                                                      + ("first" if f else "last"), L=model.num_layers,
                                                      L_d=moe.first_dense_layers, p=pp, is_first=f))
                          for f in (True, False)))
        groups.append(("expert_",
                       ev(S.grads_bytes, key="comm/dp_expert_grad_message", psi=psi_e, g=recipe.grads_bytes, n_d=1, zero=0),
                       ev(S.weights_bytes, key="comm/dp_expert_param_message", psi=psi_e, w=recipe.weights_bytes, n_d=1,
                          zero=0), tp * dp * cp // ep))
    grad_s = param_s = out["comm/dp_bytes"] = 0
    for tag, Sg, Sw, n in groups:
        grad_s = grad_s + (
            ev(CM.ring_collective_s, key=f"comm/dp_{tag}grad_rs_s", count=rs, n=n, S=Sg, kind="reduce_scatter", **dl)
            + ev(CM.ring_collective_s, key=f"comm/dp_{tag}grad_ag_s", count=ag_g, n=n, S=Sg, kind="all_gather", **dl))
        param_s = param_s + ev(CM.ring_collective_s, key=f"comm/dp_{tag}param_ag_s", count=ag_w, n=n, S=Sw,
                               kind="all_gather", **dl)
        out["comm/dp_bytes"] = out["comm/dp_bytes"] + (
            ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}grad_rs_bytes", count=rs, n=n, S=Sg, kind="reduce_scatter")
            + ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}grad_ag_bytes", count=ag_g, n=n, S=Sg, kind="all_gather")
            + ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}param_ag_bytes", count=ag_w, n=n, S=Sw, kind="all_gather"))
    tail = ev(CM.ring_collective_s, key="comm/dp_tail_s", count=1, n=n_dp, **dl,
              S=ev(T.dp_tail_bytes, S=S_g, bucket=bucket_bytes), kind="all_reduce" if zero == 0 else "reduce_scatter")
    window = ev(T.dp_window_s, zero=zero, m=m, T_f=T_f, T_b=T_b, overlap=dp_overlap)
    out["time/dp_exposed"] = ev(T.exposed_s, key="time/dp_exposed", T_window=window, T_tail=tail,
                                T_comm=ev(T.dp_overlapped_s, T_grad=grad_s, T_param=param_s, zero=zero))
    out["time/dp_after_step"] = ev(T.dp_after_step_s, T_param=param_s, zero=zero)

    step = out["time/step"] = ev(step_total_s, **dict(zip(
        ("T_compute", "T_tp", "T_ep", "T_cp", "T_pp", "T_bubble", "T_dp", "T_dp_after"), (out[k] for k in PARTS))))

    # rates: the whole step's model and hardware FLOPs over all N GPUs
    B = dp * m * b
    whole = _flops(ev, "flops/step", setup=setup, B=B, L=model.num_layers, sh=sh, V=model.vocab_size,
                   recompute=recompute, n_dense=None if moe is None else moe.first_dense_layers)
    model_f = out["flops/model_step"] = ev(F.model_flops, key="flops/model_step", F_forward=whole["forward"])
    hw_f = out["flops/hardware_step"] = ev(F.hardware_flops, key="flops/hardware_step", F_forward=whole["forward"],
                                           F_backward=whole["backward"])
    N = tp * pp * dp * cp
    out["ratio/mfu"] = ev(C.flops_utilisation, key="ratio/mfu", F=model_f, T_step=step, N=N, peak=peak)
    out["ratio/hfu"] = ev(C.flops_utilisation, key="ratio/hfu", F=hw_f, T_step=step, N=N, peak=peak)
    out["rate/flops_per_gpu"] = ev(C.flops_per_gpu_per_s, key="rate/flops_per_gpu", F=hw_f, T_step=step, N=N)
    out["rate/tokens"] = ev(C.tokens_per_s, B=B, s=s, T_step=step)
    return out


@dataclass(frozen=True, slots=True)
class AxisComm:
    """One parallel axis's traffic on one GPU per step."""
    axis: str
    degree: int              # the group size the traffic runs over (dp x cp for dp)
    bytes_per_step: float    # bytes this GPU sends per step (ring wire bytes)
    exposed_s: float
    intra_node: bool
    link: str                # the link tier's name, e.g. "NVLink 3"


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """The step time of one configuration, term by term, with the Terms that explain it."""
    config: ParallelConfig
    parts: dict                  # PARTS key -> seconds; they add up to step_time_s
    terms: tuple[Term, ...]      # every formula evaluated, in call order
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float        # achieved hardware TFLOP/s per GPU (1e12 FLOP/s), recompute included
    mfu: float                   # fractions in [0, 1]
    hfu: float
    num_microbatches: int
    bubble_fraction: float
    comm: dict                   # axis -> AxisComm, for AXES
    dp_overlap: DpOverlap

    @property
    def shares(self) -> dict:
        """Each part as a fraction of the step."""
        return {k: v / self.step_time_s for k, v in self.parts.items()}

    @property
    def exposed_comm_s(self) -> dict:
        return {axis: c.exposed_s for axis, c in self.comm.items()}


def evaluate_step(setup: Setup, config: ParallelConfig, *, dp_overlap: DpOverlap = DpOverlap.BACKWARD,
                  bucket_bytes: int = DDP_BUCKET_BYTES) -> StepBreakdown:
    """The step time of one configuration, with its explanation."""
    trace = Trace()
    out = step_time(trace, setup, dp_overlap=dp_overlap, bucket_bytes=bucket_bytes, **config_kwargs(config))
    exposed = {"tp": out["time/tp_exposed"], "ep": out["time/ep_exposed"], "cp": out["time/cp_exposed"],
               "pp": out["time/pp_exposed"], "dp": out["time/dp_exposed"] + out["time/dp_after_step"]}
    degree = {"tp": config.tp, "ep": config.ep, "cp": config.cp, "pp": config.pp, "dp": config.dp * config.cp}
    comm = {axis: AxisComm(axis=axis, degree=degree[axis], bytes_per_step=out[f"comm/{axis}_bytes"],
                           exposed_s=exposed[axis], intra_node=bool(out[f"link/{axis}_intra"]),
                           link=CM.link_name(bool(out[f"link/{axis}_intra"]), setup.cluster.gpu)) for axis in AXES}
    return StepBreakdown(config=config, parts={k: out[k] for k in PARTS}, terms=tuple(trace.terms),
                         step_time_s=out["time/step"], tokens_per_s=out["rate/tokens"],
                         tflops_per_gpu=out["rate/flops_per_gpu"] / 1e12, mfu=out["ratio/mfu"],
                         hfu=out["ratio/hfu"], num_microbatches=out["pipeline/microbatches"],
                         bubble_fraction=out["pipeline/bubble_fraction"], comm=comm, dp_overlap=dp_overlap)


def step_seconds(setup: Setup, **kw):
    """Step seconds over arrays of candidates (the search's path)."""
    return step_time(RAW, setup, **kw)["time/step"]
