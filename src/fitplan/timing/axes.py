"""Tensor, context and pipeline parallel traffic, and where each axis's group sits.

Each axis's traffic per step on the busiest GPU: the wire bytes, the seconds it keeps its link
busy, and the part left on the critical path after what overlaps (fitplan.timing.traffic). Groups
are placed on the rank grid (tp innermost, then cp, dp, pp; fitplan.timing.comm.rank_strides).
"""

from fitplan.arith import is_array, maximum, select
from fitplan.memory.breakdown import Setup, Shapes
from fitplan.record import record
from fitplan.specs.parallel import Recompute
from fitplan.timing import comm as CM
from fitplan.timing import compute as C
from fitplan.timing import traffic as T
from fitplan.timing.passes import LayerTimes

@record(slots=True)
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



def placement(ev, setup: Setup, c) -> dict:
    """Each axis's group: (inside one node, nodes it spans); rank order tp-cp-dp-pp, a node being the
    NVLink domain. dp: the gradient reduction's dp x cp group, cp*dp ranks tp apart (dp_shard: a hybrid
    shard group, shard_degree of them; dp_replica: the shard groups' replicas, tp*shard_degree apart);
    ep: ep consecutive ranks of a stage; expert_dp: the ranks ep apart that reduce the experts' gradients.
    DeepEP's ep group is placed on the NVLink domains the job fills (comm.domain_ranks) instead of whole nodes:
    HybridEP, the flex dispatcher's backend on Blackwell, moves tokens across a GB200 rack's trays at NVLink rates
    (714.66 GB/s dispatch at EP 36, NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization image6
    @eb0783b6), so a 64-GPU job's ep 64 is one domain; NCCL's groups inside a rack's domain were tested and not
    kept (docs/calibration.md, the biases). On 8-GPU boards, jobs of whole boards, the two rules agree."""
    strides, G = CM.rank_strides(tp=c.tp, cp=c.cp, dp=c.dp), setup.cluster.gpus_per_node
    sizes = {}
    if setup.model.moe is not None and setup.training.moe_dispatcher == "deepep":
        sizes["ep"] = ev(CM.domain_ranks, key="link/ep_domain_ranks", N=setup.cluster.num_gpus, G=G)
    groups = {"tp": (strides["tp"], c.tp), "cp": (strides["cp"], c.cp), "pp": (strides["pp"], c.pp),
              "dp": (c.tp, c.cp * c.dp), "ep": (1 + 0 * c.ep, c.ep),
              "expert_dp": (c.ep, maximum(c.tp * c.cp * c.dp // c.ep, 1))}
    if c.shard_degree is not None:
        groups["dp_shard"] = (c.tp, c.shard_degree + 0 * c.dp)
        groups["dp_replica"] = (c.tp * c.shard_degree, maximum(c.cp * c.dp // c.shard_degree, 1))
    out = {}
    for axis, (stride, n) in groups.items():
        g = sizes.get(axis, G)
        intra = ev(CM.group_is_intra_node, key=f"link/{axis}_intra", stride=stride, n=n, G=g)
        out[axis] = (intra, ev(CM.group_nodes, key=f"link/{axis}_nodes", stride=stride, n=n, G=g, intra=intra))
    return out


def collective(ev, key, setup, *, count, kind, n, nodes, S, e2e, bandwidth=1.0):
    """count collectives as NCCL runs them, each with the framework's own overhead (e2e.collective_overhead_s), at
    e2e.comm_efficiency of NCCL's modelled performance (times `bandwidth`: the MoE all-to-alls' own fraction)."""
    return ev(CM.collective_s, key=key, count=count, kind=kind, n=n, k=nodes, S=S, a_fw=e2e.collective_overhead_s,
              eff=e2e.comm_efficiency * bandwidth, **CM.tiers(setup.cluster.gpu))


def sends(intra, setup, e2e) -> dict:
    """B and alpha of the tier a point-to-point send crosses, and e2e.comm_efficiency of its modelled time."""
    return dict(CM.link_inputs(intra, setup.cluster.gpu), eff=e2e.comm_efficiency)


def tp_time(ev, setup: Setup, c, sh: Shapes, *, m, L, place, lay: LayerTimes, e2e) -> AxisTime:
    """Tensor parallel: per layer two exchanges forward (attention, MLP), two backward, two more
    under full recompute; each an all-reduce, or under sequence parallel a reduce-scatter and an
    all-gather. --tp-comm-overlap hides each behind its block's linear GEMMs."""
    intra, nodes = place["tp"]
    S_tp = ev(T.tp_message_bytes, b=c.micro_batch, s=sh.s, h=sh.h, e=sh.e, c=c.cp)
    sp = c.sequence_parallel
    n_tp = ev(T.tp_collectives, m=m, L=L, recompute=c.recompute, sp=sp)
    pair = lambda: (collective(ev, "comm/tp_exchange_rs_s", setup, count=1, kind="reduce_scatter", n=c.tp,
                               nodes=nodes, S=S_tp, e2e=e2e)
                    + collective(ev, "comm/tp_exchange_ag_s", setup, count=1, kind="all_gather", n=c.tp, nodes=nodes,
                                 S=S_tp, e2e=e2e))
    reduce = lambda: collective(ev, "comm/tp_exchange_s", setup, count=1, kind="all_reduce", n=c.tp, nodes=nodes,
                                S=S_tp, e2e=e2e)
    # the search's box holds both SP settings (a bool per degree triple): each candidate takes its own exchange
    a = select(sp, pair(), reduce()) if is_array(sp) else pair() if sp else reduce()
    full = 1 if c.recompute == Recompute.FULL else 0
    per_layer = (4 + 2 * full) * a
    layer_exposed = ev(T.tp_layer_exposed_s, a=a, W_attn=lay.attn_linear, W_mlp=lay.mlp_linear, full=full,
                       overlap=(sp if is_array(sp) else bool(sp)) if c.tp_comm_overlap else False)
    wire = ev(CM.ring_wire_bytes, key="comm/tp_bytes", count=n_tp, n=c.tp, S=S_tp, kind="all_reduce")
    return AxisTime(wire, ev(T.exposed_s, key="time/tp_exposed", T_comm=m * L * layer_exposed, T_window=0, T_tail=0),
                    intra, m * L * per_layer, per_layer, layer_exposed, nodes)



def cp_time(ev, setup: Setup, c, sh: Shapes, *, m, L, place, F_core, peak, eff, e2e) -> AxisTime:
    """Context parallel: ring exchange of K/V, hidden behind the attention core it feeds
    (--cp-comm-overlap, on by default)."""
    intra, nodes = place["cp"]
    passes = ev(T.attention_core_passes, recompute=c.recompute)
    S_cp = ev(T.cp_message_bytes, b=c.micro_batch, s=sh.s, kv=sh.kv, e=sh.e, t=c.tp, c=c.cp)
    n_cp = ev(T.cp_ring_steps, m=m, L=L, c=c.cp, passes=passes)
    secs = ev(CM.p2p_s, key="comm/cp_s", count=n_cp, S=S_cp, **sends(intra, setup, e2e))
    wire = ev(CM.p2p_wire_bytes, key="comm/cp_bytes", count=n_cp, S=S_cp)
    window_flops = ev(T.cp_window_flops, m=m, L=L, passes=passes, F_core=F_core)
    window = ev(C.compute_s, key="time/cp_window", peak=peak, eff=eff,
                F=ev(C.per_gpu_flops, key="flops/cp_window_per_gpu", F=window_flops, t=c.tp, c=c.cp))
    if not c.cp_comm_overlap:
        window = 0 * window
    exposed = ev(T.exposed_s, key="time/cp_exposed", T_comm=secs, T_window=window, T_tail=0)
    per = maximum(m * L, 1)
    return AxisTime(wire, exposed, intra, secs, secs / per, exposed / per, nodes)


def pp_time(ev, setup: Setup, c, sh: Shapes, *, m, intra, e2e, T_f, T_b) -> AxisTime:
    """Pipeline parallel: activation and gradient sends between stages; behind the micro-batches' compute
    under the interleaved schedule (fitplan.timing.traffic.pp_window_s), else exposed."""
    S_pp = ev(T.pp_message_bytes, b=c.micro_batch, s=sh.s, h=sh.h, e=sh.e, t=c.tp, c=c.cp)
    n_pp = ev(T.pp_sends, m=m, v=c.virtual_stages, p=c.pp)
    secs = ev(CM.p2p_s, key="comm/pp_s", count=n_pp, S=S_pp, **sends(intra, setup, e2e))
    wire = ev(CM.p2p_wire_bytes, key="comm/pp_bytes", count=n_pp, S=S_pp)
    window = ev(T.pp_window_s, m=m, v=c.virtual_stages, T_f=T_f, T_b=T_b)
    tail = ev(T.pp_tail_s, T_comm=secs, m=m, v=c.virtual_stages, p=c.pp)
    exposed = ev(T.exposed_s, key="time/pp_exposed", T_comm=secs, T_window=window, T_tail=tail)
    per_mb = secs / maximum(m, 1)
    return AxisTime(wire, exposed, intra, secs, per_mb, exposed / maximum(m, 1), select(intra, 1, 2))
