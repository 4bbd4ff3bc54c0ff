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

from fitplan.arith import select
from fitplan.counts import flops as F
from fitplan.counts import stages as ST
from fitplan.explain import RAW, SECONDS, formula, layout_inputs, once
from fitplan.memory.breakdown import Setup, Shapes, stage_at
from fitplan.parts import TIME, part_keys
from fitplan.sources import Cite
from fitplan.specs.parallel import Schedule
from fitplan.timing import calibration as CAL
from fitplan.timing import compute as C
from fitplan.timing import elementwise as E
from fitplan.timing import layer_rates as LR
from fitplan.timing import offload as OFF
from fitplan.timing import overheads as OV
from fitplan.timing import pipeline as PL
from fitplan.timing.axes import cp_time, placement, pp_time, tp_time
from fitplan.timing.data_parallel import dp_time
from fitplan.timing.expert import ep_time
from fitplan.timing.passes import compute_passes, layer_times, optimizer_time
from fitplan.timing.traffic import DDP_BUCKET_BYTES
from fitplan.timing.work import pacing_rank, recomputed_share_of, step_flops

PARTS = part_keys(TIME)   # the table of parts, fitplan.parts
AXES = ("tp", "ep", "cp", "pp", "dp")


@formula("time/step", lambda **T: " + ".join(T), Cite("fitplan", "formulas.md#step-time"), SECONDS,
         ("exposed parts add; what overlaps is already subtracted in each part",))
def step_total_s(**T):
    return sum(T.values())


def step_time(ev, setup: Setup, c, *, bucket_bytes: int = DDP_BUCKET_BYTES, stage_index=None, k=None,
              flops: bool = True) -> dict:
    """Seconds per term of one step, bytes per axis per GPU, and the rates derived from them.
    c: a ParallelConfig, or the search's grid (fitplan.memory.breakdown.stage_memory).
    stage_index: time this pipeline rank instead of the one that paces the step.
    k: the end-to-end constants (fitplan.timing.calibration.EndToEnd; default: the setup's).
    flops=False: of the rates, the tokens per second alone (the search's screens and the fit read no
    FLOP count or utilisation: the whole step's FLOPs were a tenth of a screen)."""
    model, gpu = setup.model, setup.cluster.gpu
    k = CAL.of_setup(setup) if k is None else k
    sh = Shapes.of(setup)
    peak = C.peak_flops_per_s(gpu, setup.training.recipe.compute)
    m = ev(PL.num_microbatches, B=setup.training.global_batch, b=c.micro_batch, d=c.dp, p=c.pp)
    pacing = pacing_rank(setup, c) if stage_index is None else stage_index
    stage = stage_at(ev, model, c, pacing)
    # DualPipe: a rank runs each micro-batch through one of its two stages, half its layers on average
    half = 0.5 if c.schedule == Schedule.DUALPIPE else 1
    # (nor multiplied by 1 otherwise: the stage's own arrays are what the search's memo knows from another screen)
    halved = (lambda x: x * half) if half != 1 else (lambda x: x)
    L = halved(stage.layers)   # layers one micro-batch crosses on the slowest stage
    n_dense = None if model.moe is None or model.hybrid else halved(stage.n_dense)
    kinds = None if not model.hybrid else {kind: halved(n) for kind, n in stage.kinds().items()}
    head = select(stage.head, half, 0)   # the output layers a micro-batch crosses here (DualPipe: half)
    mb = step_flops(ev, setup, "flops/microbatch", B=c.micro_batch, L=L, recompute=c.recompute, n_dense=n_dense,
                    rho=1 if sh.moe is None else sh.moe.rho, head=head, mtp=stage.mtp,
                    frac=recomputed_share_of(ev, c, stage.layers), kinds=kinds)
    first, last = setup.training.bf16_first_layers, setup.training.bf16_last_layers   # resolve: low precision only
    kept = None if not (first or last) else {
        name: halved(n) for name, n in LR.bf16_layers_on_stage(model, c, pacing, first=first, last=last).items()}
    rates = LR.layer_rates(ev, setup, c, L=L, n_dense=n_dense, m=m, e2e=k, kinds=kinds, kept=kept)
    loss = E.loss_traffic(ev, setup, c, sh, n=head * (1 + stage.mtp))   # each MTP module adds its own loss
    T_f, T_b, compute = compute_passes(ev, c, m=m, flops=mb, L=L, rates=rates, loss=loss)
    lay = layer_times(ev, setup, c, L=L, flops=mb, rates=rates, kinds=kinds)
    # no recompute mode changes the groups' placement or the optimizer step: the search's screens form them once
    place = once(ev, lambda: placement(ev, setup, c), lambda: layout_inputs("placement", setup, c))
    # a hybrid model's layer is one block (a mixer, or an MLP or MoE): one tensor-parallel exchange per pass, half a
    # transformer layer's two; the tp and host terms count its L layers as L/2 transformer layers
    L_pairs = L if kinds is None else L / 2
    axes = {"tp": tp_time(ev, setup, c, sh, m=m, L=L_pairs, place=place, lay=lay, e2e=k)}
    if kinds is not None and model.moe is not None:
        n_dense = L - kinds["E"]
    axes["ep"] = ep_time(ev, setup, c, sh, m=m, L=L, n_dense=n_dense, like=axes["tp"].exposed_s, lay=lay,
                         place=place, e2e=k)
    axes["cp"] = cp_time(ev, setup, c, sh, m=m, L=L, place=place, F_core=mb["core"], peak=rates.peak,
                         eff=rates.core, e2e=k)
    axes["pp"] = pp_time(ev, setup, c, sh, m=m, intra=place["pp"][0], e2e=k, T_f=T_f, T_b=T_b)
    # a dropless MoE layer's host read of its token counts (fitplan.timing.overheads): none under drop-and-pad
    dropless = model.moe is not None and model.moe.capacity_factor is None
    host = ev(OV.host_overhead_s, m=m, T_f=T_f, T_b=T_b, L=L_pairs,
              L_moe=0 if n_dense is None or not dropless else L - n_dense,
              E_local=0 if model.moe is None else model.moe.num_experts / c.ep,
              omega=k.layer_overhead_s, sigma_moe=k.moe_sync_s, recompute=c.recompute)
    fraction, bubble = bubble_time(ev, c, m=m, T_f=T_f, T_b=T_b, T_busy=compute + host + axes["tp"].exposed_s
                                   + axes["ep"].exposed_s + axes["cp"].exposed_s + axes["pp"].exposed_s)
    axes["dp"], after_step = dp_time(ev, setup, c, m=m, L=L, place=place, T_f=T_f, T_b=T_b, lay=lay,
                                     bucket_bytes=bucket_bytes, e2e=k, rank=pacing)
    hidden = sum(axes[a].busy_s - axes[a].exposed_s for a in ("tp", "ep", "cp", "dp")) - after_step

    parts = {"time/compute": compute, "time/bubble": bubble, "time/dp_after_step": after_step,
             "time/optimizer": once(ev, lambda: optimizer_time(ev, setup, c, like=compute),
                                    lambda: layout_inputs("optimizer", setup, c)),
             "time/offload": OFF.offload_s(ev, setup, c, m=m, T_f=T_f, T_b=T_b, stage=stage),
             "time/overlap_slowdown": ev(OV.overlap_slowdown_s, sigma=k.sm_sharing, hidden=hidden),
             "time/host_overhead": host,
             **{f"time/{axis}_exposed": axes[axis].exposed_s for axis in AXES}}
    parts["time/straggler"] = ev(OV.straggler_s, cv=k.straggler_cv,
                                 factor=ev(OV.straggler_factor, N=c.tp * c.pp * c.dp * c.cp),
                                 T_rest=sum(v for key, v in parts.items()))
    out = {"pipeline/microbatches": m, "pipeline/bubble_fraction": fraction, "pipeline/slowest_stage": pacing,
           **{key: parts[key] for key in PARTS}}
    for axis in AXES:
        out[f"comm/{axis}_bytes"] = axes[axis].bytes
        out[f"link/{axis}_intra"] = axes[axis].intra
        out[f"link/{axis}_nodes"] = axes[axis].nodes
        out[f"comm/{axis}_busy_s"] = axes[axis].busy_s
        out[f"layer/{axis}_busy_s"] = axes[axis].layer_busy_s
        out[f"layer/{axis}_exposed_s"] = axes[axis].layer_exposed_s
    out.update({"layer/forward_s": lay.forward, "layer/backward_s": lay.backward, "layer/recompute_s": lay.recompute,
                "layer/count": L, "time/forward_microbatch": T_f, "time/backward_microbatch": T_b})
    out["time/step"] = ev(step_total_s, **{"T_" + key.split("/", 1)[1]: parts[key] for key in PARTS})
    out.update(rates_of_step(ev, setup, c, m=m, T_step=out["time/step"], peak=peak, flops=flops))
    return out


def bubble_time(ev, c, *, m, T_f, T_b, T_busy):
    """The schedule's bubble fraction (fitplan.timing.pipeline), and that share of the pipelined work."""
    if c.schedule in (Schedule.ONE_F_ONE_B, Schedule.GPIPE):
        fraction = ev(PL.bubble_fraction_interleaved, p=c.pp, m=m, v=c.virtual_stages)
    else:
        fraction = ev(PL.bubble_fraction_schedule, p=c.pp, m=m, T_f=T_f, T_b=T_b, schedule=str(c.schedule))
    return fraction, ev(PL.bubble_s, fraction=fraction, T_busy=T_busy)



def rates_of_step(ev, setup: Setup, c, *, m, T_step, peak, flops: bool = True) -> dict:
    """The tokens per second, and (flops) the whole step's model and hardware FLOPs over all N GPUs."""
    model = setup.model
    B = c.dp * m * c.micro_batch
    tokens = ev(C.tokens_per_s, B=B, s=setup.training.seq_len, T_step=T_step)
    if not flops:
        return {"rate/tokens": tokens}
    kinds, L_all = None, model.num_layers + model.mtp_depth
    if model.hybrid:   # every layer of the pattern, and the multi-token-prediction modules' layers
        from fitplan.counts import hybrid as HY
        main, extra = HY.kind_counts(model.layer_pattern), HY.kind_counts(model.mtp_pattern or "")
        kinds = {kind: main[kind] + model.mtp_depth * extra[kind] for kind in main}
        L_all = model.num_layers + model.mtp_depth * len(model.mtp_pattern or "")
    last_layers = lambda: ST.stage_layers.fn(L=model.num_layers, p=c.pp, v=c.virtual_stages, i=c.pp - 1,
                                             first=c.first_stage_layers, last=c.last_stage_layers)
    whole = step_flops(ev, setup, "flops/step", B=B, L=L_all, recompute=c.recompute, mtp=model.mtp_depth, kinds=kinds,
                       frac=recomputed_share_of(RAW, c, last_layers),
                       n_dense=None if model.moe is None or model.hybrid else model.moe.first_dense_layers)
    model_f = whole["model"] if "model" in whole else ev(F.model_flops, key="flops/model_step",
                                                          F_forward=whole["forward"])
    causal_f = ev(F.model_flops, key="flops/model_step_causal", F_forward=ev(
        F.causal_forward_flops, key="flops/step/forward_causal", F_forward=whole["forward"],
        L=L_all if model.hybrid else model.num_layers,
        F_core=whole["core"]))
    hw_f = ev(F.hardware_flops, key="flops/hardware_step", F_forward=whole["forward"], F_backward=whole["backward"])
    N = c.tp * c.pp * c.dp * c.cp
    return {"flops/model_step": model_f, "flops/hardware_step": hw_f,
            "ratio/mfu": ev(C.flops_utilisation, key="ratio/mfu", F=model_f, T_step=T_step, N=N, peak=peak),
            "ratio/mfu_causal": ev(C.flops_utilisation, key="ratio/mfu_causal", F=causal_f, T_step=T_step, N=N,
                                   peak=peak),
            "ratio/hfu": ev(C.flops_utilisation, key="ratio/hfu", F=hw_f, T_step=T_step, N=N, peak=peak),
            "rate/flops_per_gpu": ev(C.flops_per_gpu_per_s, key="rate/flops_per_gpu", F=hw_f, T_step=T_step, N=N),
            "rate/tokens": tokens}
