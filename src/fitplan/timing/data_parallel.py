"""Data parallel over dp x cp: gradient reductions and parameter gathers, ZeRO 0-3.

ZeRO-0/1/2 reduce gradients in buckets and ZeRO-1/2 gather the updated weights after the optimizer
step; ZeRO-3 gathers and reduce-scatters one layer at a time (fitplan.timing.traffic). Hybrid
sharding reduces within shard groups and all-reduces each shard across them.
"""
from fitplan.arith import ceil_div, is_array, maximum, minimum, select
from fitplan.explain import layout_inputs, once
from fitplan.memory import finetune as FT
from fitplan.memory import states as S
from fitplan.memory.copies import pipelined
from fitplan.memory.shapes import Setup
from fitplan.memory.stages import end_stages, stage_expert_psi, stage_psi
from fitplan.specs.parallel import ZeroStage, overlaps_param_gather
from fitplan.timing import comm as CM
from fitplan.timing import traffic as T
from fitplan.timing.axes import AxisTime, collective
from fitplan.timing.passes import LayerTimes

def dp_time(ev, setup: Setup, c, *, m, L, place, T_f, T_b, lay: LayerTimes, bucket_bytes, e2e, rank=0):
    """Data parallel over dp x cp: gradient reduction and parameter gathers of the larger
    stage (routed experts over their expert-data-parallel group). Hybrid sharding
    (--shard-degree N): reduce-scatter and gathers within groups of N ranks, and an
    all-reduce of each 1/N gradient shard across the dp*cp/N groups.

    Without ZeRO-3 the gradients go in buckets of bucket_bytes, once per step (ZeRO-0/1) or per
    micro-batch (ZeRO-2), hidden behind the backward that produces them (--overlap-grad-reduce)
    but for the last bucket; ZeRO-1/2 gather the updated weights after the optimizer step, or
    during the next forward (--overlap-param-gather). ZeRO-3 gathers and reduce-scatters one
    layer at a time (fitplan.timing.traffic.layer_pipeline_exposed_s).
    Returns the axis and the seconds exposed after the optimizer step. c.zero may be the
    search's array of ZeRO stages (its box's first axis, fitplan.search._Grid.box): the results lie
    side by side on that axis (_per_zero_stage). rank: the pipeline rank timed (its launches of the
    gradient reductions wait rank slots under interleaving, traffic.dp_overlap_window_s)."""
    if is_array(c.zero):
        return _per_zero_stage(ev, setup, c, m=m, L=L, place=place, T_f=T_f, T_b=T_b, lay=lay,
                               bucket_bytes=bucket_bytes, e2e=e2e, rank=rank)
    return _dp_time(ev, setup, c, zero=int(c.zero), m=m, L=L, place=place, T_f=T_f, T_b=T_b, lay=lay,
                    bucket_bytes=bucket_bytes, e2e=e2e, rank=rank)


def _per_zero_stage(ev, setup: Setup, c, **kw):
    """dp_time over the search's array of ZeRO stages (the box's first axis, fitplan.search._Grid.box),
    the results side by side on that axis: the stages below 3, whose gradients and gathers go in buckets,
    in one pass with their zero an array on that axis (_bucketed_time selects each stage's collectives);
    ZeRO-3, which gathers layer by layer, in a pass of its own."""
    import numpy as np
    from dataclasses import fields, replace
    zeros = [int(z) for z in c.zero.ravel()]
    bucketed = [z for z in zeros if z < 3]
    pieces = []   # (stages, (AxisTime, seconds after the step)) in the order computed
    if bucketed:
        # c's zero, where a rule reads it (the gather overlap's default, LoRA's messages), is the first bucketed
        # stage's: those rules say the same for every stage below 3
        pieces.append((bucketed, _dp_time(ev, setup, replace(c, zero=ZeroStage(bucketed[0])),
                                          zero=np.array(bucketed, dtype=np.float64).reshape(-1, 1, 1, 1, 1), **kw)))
    if 3 in zeros:
        pieces.append(([3], _dp_time(ev, setup, replace(c, zero=ZeroStage.OS_G_P), zero=3, **kw)))
    order = [z for stages, _ in pieces for z in stages]
    back = None if order == zeros else [order.index(z) for z in zeros]   # to the box's own order
    joined = lambda values: _on_zero_axis([(len(stages), v) for (stages, _), v in zip(pieces, values)], back)
    return (AxisTime(*(joined([getattr(axis, f.name) for _, (axis, _) in pieces]) for f in fields(AxisTime))),
            joined([after for _, (_, after) in pieces]))


def _dp_time(ev, setup: Setup, c, *, zero, m, L, place, T_f, T_b, lay: LayerTimes, bucket_bytes, e2e, rank=0):
    """dp_time of one ZeRO stage (an int), or of an array of stages below 3 (_per_zero_stage): what the
    collectives cost (_dp_costs: no recompute mode changes it, so the search's screens (one per recompute mode)
    compute it once, fitplan.explain.once), then how much of it the passes hide."""
    costs = once(ev, lambda: _dp_costs(ev, setup, c, zero=zero, m=m, place=place, bucket_bytes=bucket_bytes,
                                       e2e=e2e),
                 lambda: _costs_inputs(setup, c, zero=zero, bucket_bytes=bucket_bytes, e2e=e2e))
    og, op = bool(c.overlap_grad_reduce), overlaps_param_gather(c)
    if not is_array(zero) and zero == 3:
        # --fsdp-prefetch 0: no layer's gather is issued before the layer needs it, so none hides behind compute
        # (FSDP2's set_modules_to_forward_prefetch / set_modules_to_backward_prefetch with no modules); a deeper
        # prefetch cannot shorten a link-bound step, so depths >= 1 time alike (memory holds k gathered layers)
        op = op and setup.training.fsdp_prefetch > 0
        out = _zero3_time(ev, c, costs, m=m, L=L, lay=lay, og=og, op=op, T_b=T_b)
    else:
        out = _bucketed_time(ev, costs, m=m, T_f=T_f, T_b=T_b, og=og, op=op, zero=zero, v=c.virtual_stages, p=c.pp,
                             rank=rank)
    exposed, after, busy, layer_busy, layer_exposed = out
    return AxisTime(costs["wire"], exposed, costs["intra"], busy, layer_busy, layer_exposed, costs["nodes"]), after


def _costs_inputs(setup, c, *, zero, bucket_bytes, e2e) -> tuple:
    """What _dp_costs depends on: the setup, the layout but its recompute mode, the ZeRO stage(s), the bucket
    size and the end-to-end constants. The micro-batch count and the groups' placement it also reads are
    functions of the setup and the layout (step_time derives them), so they are not keys of their own: the
    arrays they come as are new in every screen, which would make every screen a miss."""
    from dataclasses import fields
    return layout_inputs("dp_costs", setup, c, bucket_bytes, *(zero.ravel().tolist() if is_array(zero) else (zero,)),
                         *(getattr(e2e, f.name) for f in fields(e2e)))


def _dp_costs(ev, setup: Setup, c, *, zero, m, place, bucket_bytes, e2e) -> dict:
    """The data-parallel collectives of the larger stage: their bytes on the wire and their seconds, which no
    recompute mode changes (routed experts over their expert-data-parallel group)."""
    model, recipe = setup.model, setup.training.recipe
    stages = end_stages(model, c)
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
        # expert-data-parallel members are ep apart in the stage's tp x cp x dp block (fitplan.timing.axes.placement)
        stride = c.ep
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
        cross_intra, cross_nodes = place["dp_replica"]
        for tag, Sg, _, n, _ in groups:
            shard = Sg / n
            n_rep = n_all // n_dp
            replica = replica + collective(ev, f"comm/dp_{tag}replica_ar_s", setup, count=ceil_div(shard, bucket_bytes),
                                            kind="all_reduce", n=n_rep, nodes=minimum(cross_nodes, n_rep),
                                            S=shard / maximum(ceil_div(shard, bucket_bytes), 1), e2e=e2e)
            wire = wire + ev(CM.ring_wire_bytes, key=f"comm/dp_{tag}replica_ar_bytes", count=1, n=n_rep, S=shard,
                             kind="all_reduce")
    costs = {"wire": wire, "intra": intra, "nodes": nodes, "replica": replica, "held": held}
    if not is_array(zero) and zero == 3:
        costs.update(_zero3_costs(ev, setup, e2e=e2e, groups=groups, held=held))
    else:
        costs.update(_bucketed_costs(ev, setup, c, e2e=e2e, m=m, groups=groups, bucket_bytes=bucket_bytes,
                                     zero=zero))
    return costs


def _on_zero_axis(pieces: list, back: list | None = None):
    """(n, value) pieces, each value n ZeRO stages on the search box's ZeRO axis (the fifth from the last;
    a value that does not depend on the stage has length 1 there, or is a scalar), as one array with the
    pieces' stages side by side on that axis; back: the positions that put them in the box's order."""
    import numpy as np
    shapes = [np.shape(v) for _, v in pieces]
    full = np.broadcast_shapes(*(s[:-5] + (1,) + s[-4:] if len(s) >= 5 else s for s in shapes), (1, 1, 1, 1, 1))
    out = np.concatenate([np.broadcast_to(np.asarray(v, dtype=np.float64), full[:-5] + (n,) + full[-4:])
                          for n, v in pieces], axis=-5)
    return out if back is None else np.take(out, back, axis=-5)


def _bucketed_costs(ev, setup, c, *, e2e, m, groups, bucket_bytes, zero) -> dict:
    """ZeRO-0/1/2's collectives: gradient buckets per reduction (once per step, or per micro-batch under
    ZeRO-2), and ZeRO-1/2's weight all-gather after the step. zero: an int, or the search's array of the stages
    below 3 on the box's ZeRO axis (_per_zero_stage)."""
    red = ag = 0
    buckets_g = buckets_w = 1
    stages = is_array(zero)   # the search's stages below 3 side by side (_per_zero_stage): each one's collectives
    for tag, Sg, Sw, n, k in groups:
        nb_g = maximum(ceil_div(Sg, bucket_bytes), 1)
        reduce = lambda kind: collective(ev, f"comm/dp_{tag}grad_reduction_s", setup, count=nb_g, kind=kind, n=n,
                                         nodes=k, S=Sg / nb_g, e2e=e2e)
        red = red + (select(zero == 0, reduce("all_reduce"), reduce("reduce_scatter")) if stages else
                     reduce("all_reduce" if zero == 0 else "reduce_scatter"))
        buckets_g = maximum(buckets_g, nb_g)
        if stages or zero in (1, 2):
            nb_w = maximum(ceil_div(Sw, bucket_bytes), 1)
            gather = collective(ev, f"comm/dp_{tag}param_ag_s", setup, count=nb_w, kind="all_gather", n=n, nodes=k,
                                S=Sw / nb_w, e2e=e2e)
            ag = ag + (select(zero >= 1, gather, 0) if stages else gather)
            buckets_w = maximum(buckets_w, select(zero >= 1, nb_w, 1) if stages else nb_w)
    reductions = select(zero == 2, m - pipelined(c) * (m - 1), 1)   # pipelined: once per step
    return {"red": red, "ag": ag, "buckets_g": buckets_g, "buckets_w": buckets_w, "reductions": reductions}


def _bucketed_time(ev, costs, *, m, T_f, T_b, og, op, zero, v, p, rank):
    """How much of ZeRO-0/1/2's collectives (_bucketed_costs) the backward and the next forward hide: all but
    the last bucket of each reduction, and of the weight gather (with --overlap-param-gather); with v model chunks
    per pipeline rank, behind the later chunks' passes too, all but the last chunk's share of the reduction
    (traffic.dp_overlap_window_s)."""
    stages = is_array(zero)
    red, ag, replica, reductions = costs["red"], costs["ag"], costs["replica"], costs["reductions"]
    W_b = ev(T.dp_overlap_window_s, key="time/dp_grad_window", T=T_b, v=v, p=p, m=m, r=rank)
    tail = select(v > 1, minimum(costs["buckets_g"], v), costs["buckets_g"])   # chunk 0's share goes last, whole
    per_reduction = ev(T.bucketed_exposed_s, key="time/dp_grad_exposed", T_comm=red, T_window=W_b, buckets=tail,
                       overlap=og)
    rep = ev(T.bucketed_exposed_s, key="time/dp_replica_exposed", T_comm=replica, T_window=W_b, buckets=tail,
             overlap=og)
    exposed = ev(T.exposed_s, key="time/dp_exposed", T_comm=reductions * per_reduction + rep, T_window=0, T_tail=0)
    W_f = ev(T.dp_overlap_window_s, key="time/dp_gather_window", T=T_f, v=v, p=p, m=m)
    after = ev(T.bucketed_exposed_s, key="time/dp_after_step", T_comm=ag, T_window=W_f, buckets=costs["buckets_w"],
               overlap=op and (stages or zero in (1, 2)))   # ZeRO-0's entries: ag = 0, nothing exposed
    busy = reductions * red + replica + ag
    per = maximum(costs["held"], 1) * m   # spread over the stage's layers and the step's micro-batches
    return exposed, after, busy, busy / per, (exposed + after) / per


def _zero3_costs(ev, setup, *, e2e, groups, held) -> dict:
    """ZeRO-3's collectives per layer: one weight all-gather and one gradient reduce-scatter of a layer's share."""
    t_ag = t_rs = 0
    for tag, Sg, Sw, n, k in groups:
        t_ag = t_ag + collective(ev, f"comm/dp_{tag}layer_ag_s", setup, count=1, kind="all_gather", n=n, nodes=k,
                                  S=Sw / held, e2e=e2e)
        t_rs = t_rs + collective(ev, f"comm/dp_{tag}layer_rs_s", setup, count=1, kind="reduce_scatter", n=n,
                                  nodes=k, S=Sg / held, e2e=e2e)
    return {"t_ag": t_ag, "t_rs": t_rs}


def _zero3_time(ev, c, costs, *, m, L, lay: LayerTimes, og, op, T_b):
    """ZeRO-3: per layer and micro-batch, one weight all-gather in forward, another in backward
    (unless the weights are kept), one gradient reduce-scatter (_zero3_costs); prefetched and reduced while the
    neighbouring layer computes."""
    t_ag, t_rs, replica = costs["t_ag"], costs["t_rs"], costs["replica"]
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
