"""Expert parallel: the MoE layers' all-to-all dispatch and combine.

Megatron-LM's alltoall token dispatcher: each MoE layer sends every local token's k routed copies
to the ranks holding their experts and back, in forward and backward (fitplan.timing.comm.collective_s
times an all-to-all). Exposed unless overlapped (DualPipe, --overlap-moe-expert-parallel-comm).
"""
from fitplan.arith import maximum, minimum, select
from fitplan.explain import formula
from fitplan.memory.breakdown import Setup, Shapes
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute, overlaps_ep_comm
from fitplan.timing import comm as CM
from fitplan.timing import traffic as T
from fitplan.timing.axes import AxisTime, collective
from fitplan.timing.passes import LayerTimes

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



def ep_time(ev, setup: Setup, c, sh: Shapes, *, m, L, n_dense, like, lay: LayerTimes, e2e) -> AxisTime:
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
    secs = collective(ev, "comm/ep_s", setup, count=n_ep, kind="all_to_all", n=c.ep, nodes=nodes, S=S_ep,
                      e2e=e2e, bandwidth=e2e.a2a_efficiency)
    wire = ev(CM.ring_wire_bytes, key="comm/ep_bytes", count=n_ep, n=c.ep, S=S_ep, kind="all_to_all")
    per_layer = secs / maximum(m * L_moe, 1)
    overlapped = overlaps_ep_comm(c)
    window = (lay.forward + lay.backward + lay.recompute) if overlapped else 0 * per_layer
    layer_exposed = ev(T.exposed_s, key="time/ep_layer_exposed", T_comm=per_layer, T_window=window, T_tail=0)
    exposed = ev(T.exposed_s, key="time/ep_exposed", T_comm=m * L_moe * layer_exposed, T_window=0, T_tail=0)
    return AxisTime(wire, exposed, intra, secs, per_layer, layer_exposed, nodes)
