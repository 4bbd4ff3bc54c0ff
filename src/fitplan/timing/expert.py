"""Expert parallel: the MoE layers' all-to-all dispatch and combine.

Each MoE layer sends every local token's k routed copies to the ranks holding their experts and back,
in forward and backward. With Megatron-LM's alltoall dispatcher (and torchtitan's) that is an NCCL
all-to-all of every copy (fitplan.timing.comm.collective_s); DeepEP (--moe-dispatcher deepep, Megatron-LM's
flex dispatcher, and its HybridEP backend) sends a token once over the network to each other node its experts
are on and once over NVLink to each GPU holding any of them. Exposed unless overlapped (DualPipe,
--overlap-moe-expert-parallel-comm).
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


def _a2a_text(*, e_l=None, **_):
    e = "e" if e_l is None else "(e_l + e)/2"
    return f"{e}*k*rho*s*b*h/(t*c)"


@formula("comm/moe_a2a_message", _a2a_text,
         Cite("fitplan", "formulas.md#moe (fp8 dispatch: DeepSeek-V3 Sec. 3.3.3)"), "bytes")
def moe_a2a_bytes(*, e, k, rho, s, b, h, t, c, e_l=None):
    """One all-to-all's buffer per GPU: its sequence-sharded tokens' k routed copies (rho: the busiest rank
    receives rho times the mean). An fp8 dispatch sends e_l-byte elements and the combine e-byte ones: their
    mean per all-to-all."""
    e_eff = e if e_l is None else (e_l + e) / 2
    return e_eff * k * rho * s * b * h / (t * c)


def hit_chance(n, k):
    """The chance that one of n equal members (a node, a rank) holds at least one of a token's k experts, the
    experts falling on the members uniformly (balanced routing): 1 - (1 - 1/n)^k."""
    return 1 - (1 - 1 / maximum(n, 1)) ** k


def _remote_text(*, M=None, **_):
    return "(N-1)*(1 - (1 - 1/N)^k)" + ("" if M is None else ", at most M*(N-1)/N (node-limited routing)")


@formula("comm/moe_remote_nodes", _remote_text,
         Cite("fitplan", "formulas.md#moe (DeepEP: one RDMA send per destination node, forwarded over NVLink; "
                         "node-limited routing: DeepSeek-V3 Sec. 3.2.2)"), "count",
         ("a token's k experts fall on the group's N nodes uniformly (balanced routing): each other node is hit "
          "with probability 1 - (1 - 1/N)^k",))
def remote_nodes(*, N, k, M=None):
    """The distinct other nodes a token's k routed copies reach: what DeepEP sends over the network per token."""
    hit = (N - 1) * hit_chance(N, k)
    return hit if M is None else minimum(hit, M * (N - 1) / maximum(N, 1))


@formula("comm/moe_ranks_hit", "n*(1 - (1 - 1/n)^k)",
         Cite("fitplan", "formulas.md#moe (DeepEP get_dispatch_layout: is_token_in_rank, one copy per rank; "
                         "HybridEP: the tokens with any expert on the rank)"), "count",
         ("a token's k experts fall on the group's n ranks uniformly (balanced routing): each rank, its own "
          "included, receives it once with probability 1 - (1 - 1/n)^k, however many of its experts it holds",))
def ranks_hit(*, n, k):
    """The distinct ranks of the ep group a token's k routed copies reach: what DeepEP and HybridEP deliver over
    NVLink per token (their benchmarks' algorithm bandwidth counts these received tokens, the sender's own
    included)."""
    return n * hit_chance(n, k)


@formula("comm/moe_deepep_s", "count*(alpha + max(R/k*S/B_in, D/k*S/B_net) + a_fw)  (S: the k copies' bytes; "
         "R distinct ranks, D distinct remote nodes per token)",
         Cite("fitplan", "formulas.md#moe (deepseek-ai/DeepEP: one copy per rank, NVLink forwarding of "
                         "RDMA-received tokens)"), "s",
         ("DeepEP sends each token once to every other node its experts are on, over that GPU's NIC, and once to "
          "each GPU that holds any of them over NVLink (forwarded inside the destination node)",))
def deepep_s(*, count, S, k, n, D, R, B_in, B_net, alpha, a_fw=0):
    t = alpha + maximum(R / k * S / B_in, D / k * S / B_net) + a_fw
    return select(n > 1, count * t, 0 * t)


def ep_time(ev, setup: Setup, c, sh: Shapes, *, m, L, n_dense, like, lay: LayerTimes, place, e2e) -> AxisTime:
    """Expert parallel: all-to-all dispatch and combine per MoE layer, exposed unless overlapped
    (DualPipe, or --overlap-moe-expert-parallel-comm): then each MoE layer's all-to-alls hide
    behind another micro-batch's forward and backward of a layer. A dense model has nothing to
    dispatch: zero (shaped like `like`), still a Term so every part is explained."""
    if sh.moe is None:
        zero = 0 * like
        return AxisTime(zero, ev(T.exposed_s, key="time/ep_exposed", T_comm=zero, T_window=0, T_tail=0), zero == 0,
                        zero, zero, zero)
    intra, nodes = place["ep"]   # DeepEP's: on the NVLink domains the job fills (axes.placement)
    deepep = setup.training.moe_dispatcher == "deepep"
    extra = {} if sh.e_l is None else {"e_l": sh.e_l}
    # LatentMoE dispatches the tokens' latents (Nemotron 3 Super, Ultra: moe_latent_size), not their h-wide states
    S_ep = ev(moe_a2a_bytes, e=sh.e, k=sh.moe.k, rho=sh.moe.rho, s=sh.s, b=c.micro_batch, h=sh.moe.w or sh.h, t=c.tp,
              c=c.cp, **extra)
    L_moe = L - n_dense
    n_ep = ev(moe_a2a_count, m=m, L_moe=L_moe, recompute=c.recompute)
    if deepep:
        route = setup.model.moe.route_nodes
        D = ev(remote_nodes, N=nodes, k=sh.moe.k, **({} if route is None else {"M": route}))
        # DeepEP's kernels reach the links' large-message bus bandwidth (deepseek-ai/DeepEP README: 153-158 of
        # H800's ~160 GB/s NVLink, 43-58 GB/s RDMA per 50 GB/s NIC): no collective efficiency applies. HybridEP (the
        # flex dispatcher's backend in Megatron-Bridge's Blackwell configurations) measures the same: 714.66 GB/s
        # dispatch, 657.72 combine on GB200 at EP 36 (B_in: 0.76 x 900 = 684), 368.9 and 368.87 on one DGX H100
        # (0.82 x 450 = 369) (NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/images/image6.png
        # @eb0783b6). Its 400 and 190 GB/s for DeepEP at EP 32 on GB200 are DeepEP's through a community patch,
        # before HybridEP: not what those runs use (docs/calibration.md, the biases)
        tiers = CM.tiers(setup.cluster.gpu)
        R = ev(ranks_hit, n=c.ep, k=sh.moe.k)
        secs = ev(deepep_s, key="comm/ep_s", count=n_ep, S=S_ep, k=sh.moe.k, n=c.ep, D=D, R=R,
                  B_in=tiers["B_in"], B_net=tiers["B_net"], alpha=select(intra, tiers["a_in"], tiers["a_net"]),
                  a_fw=e2e.collective_overhead_s)
    else:
        secs = collective(ev, "comm/ep_s", setup, count=n_ep, kind="all_to_all", n=c.ep, nodes=nodes, S=S_ep,
                          e2e=e2e, bandwidth=e2e.a2a_efficiency)
    # what leaves each GPU: (n-1)/n of its all-to-all's copies; DeepEP's deliveries, R/k of them, the own rank's not
    wire = ev(CM.ring_wire_bytes, key="comm/ep_bytes", count=n_ep, n=c.ep, S=S_ep * R / sh.moe.k if deepep else S_ep,
              kind="all_to_all")
    per_layer = secs / maximum(m * L_moe, 1)
    overlapped = overlaps_ep_comm(c)
    window = (lay.forward + lay.backward + lay.recompute) if overlapped else 0 * per_layer
    layer_exposed = ev(T.exposed_s, key="time/ep_layer_exposed", T_comm=per_layer, T_window=window, T_tail=0)
    exposed = ev(T.exposed_s, key="time/ep_exposed", T_comm=m * L_moe * layer_exposed, T_window=0, T_tail=0)
    return AxisTime(wire, exposed, intra, secs, per_layer, layer_exposed, nodes)
