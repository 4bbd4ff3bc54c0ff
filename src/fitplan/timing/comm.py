"""Collective times as NCCL runs them, and the link tiers each group uses.

A group of n ranks spans k nodes, r = n/k of its ranks on each. Inside a node the ranks talk
over the intra-node link (NVLink), across nodes each GPU over its own NIC (rail-optimised: one
NIC per GPU, so a node's r ranks of the group drive r NICs). Per GPU, one direction:
  B_in  = intra-node rate x its bus efficiency, B_net = the per-GPU NIC rate x its bus efficiency
(LinkSpec.bus_efficiency: nccl-tests' busbw of a large ring collective over that link, divided by
the link's rate; docs/formulas.md#collectives has the measurements). S is the collective's buffer
(the whole of it: an all-gather's output, a reduce-scatter's input), P = 2 phases for an
all-reduce and 1 for a reduce-scatter or all-gather.

NCCL's cost model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime),
per algorithm and protocol, time = latency + bytes/bandwidth, and NCCL runs the fastest:
  ring (every collective): each channel's ring crosses every node boundary once and NCCL spreads
  the channels over the node's NICs, so a GPU sends (r-1)/r of its ring traffic over the
  intra-node link and 1/r over its NIC:
      bus bandwidth  B_in (k = 1);  min(B_in*r/(r-1), r*B_net) (k > 1; B_net when r = 1)
      time = base + P*(n-k)*hop_in + P*(k-1)*hop_net + P*(n-1)/n*S/(f*bus bandwidth)
  tree (all-reduce): a chain inside each node, a double binary tree across nodes; algbw is half
  the bus bandwidth (0.92 of it, NCCL's refinement), B_in (k = 1), min(B_in, 2*r*B_net) (k = 2:
  the two-node tree sends half a ring's bytes over the network), min(B_in, r*B_net) (k > 2):
      time = base + 2*((r-1)*hop_in + floor(log2 k)*hop_net) + S/(0.5*0.92*f*bus bandwidth)
  protocols LL, LL128, Simple: NCCL's base latencies, per-hop latencies and bandwidth factors f
  (NCCL_TUNING below). The links' `latency` is the per-hop latency of the Simple protocol on a
  ring (NCCL's NVLink 3.4 us, network 14 us); the other algorithms' and protocols' hops scale
  with it in NCCL's proportions. A Simple ring all-reduce across nodes pays 1.4x its latency
  (NCCL's "plateau effect of ring" on sm80 and later).
Left out: NVLink SHARP (NVLS, NVLS-tree), CollNet/SHARP and PAT, which NCCL uses where the switch
or network supports them (NCCL_NVLS_ENABLE=0 and NCCL_ALGO=ring,tree reproduce this model); the
tree's medium-size correction factors; the per-channel bandwidth caps.

An all-to-all (grouped sends, outside NCCL's tuning model) sends to every peer at once:
  time = alpha + max((r-1)/n*S/B_in, (n-r)/n*S/B_net)
each GPU's share for off-node peers leaving through its own NIC (an all-to-all cannot combine
several NICs: nccl-tests#267). Point-to-point sends: alpha + S/B over the tier they cross.

Which link a group uses follows from the rank grid. Ranks are numbered tp innermost, then
cp, then dp, then pp (Megatron-Core's order tp-cp-ep-dp-pp, parallel_state.py
initialize_model_parallel; torchtitan's and DeepSpeed's meshes put pp outermost too), so a
group's members are `stride` apart:
  tp: 1    cp: tp    dp: tp*cp    pp: tp*cp*dp
and the gradient reduction's dp x cp group is cp*dp ranks tp apart. A group of n members
`stride` apart lies inside one node of G GPUs iff stride*n <= G and stride*n divides G
(nodes hold whole groups; otherwise some group straddles two nodes). A "node" is the NVLink
domain: the GPUs one intra-node link joins (8 on an HGX board, the 72 GPUs of a GB200 NVL72 rack).

Expert parallelism has no stride of its own: its ep ranks are consecutive ranks of one
pipeline stage's tp x cp x dp block (expert tensor parallel 1, Megatron-Core's expert grid
etp-ep-dp-pp), and the expert-data-parallel group that reduces the experts' gradients is
the ranks ep apart.
"""
from fitplan.arith import ceil_div, is_array, maximum, minimum, select
from fitplan.explain import BYTES, COUNT, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.cluster import GpuSpec

THAKUR = Cite("thakur", "Sec. 4 (ring all-gather, reduce-scatter; all-reduce = RS + AG)")
NCCL = Cite("nccl", "src/graph/tuning.cc (ncclTunerConstantsDefaults, ncclTopoTuneModel, ncclTopoGetAlgoTime)")
GRID = Cite("fitplan", "formulas.md#link-tier (rank order tp-cp-dp-pp, Megatron-Core parallel_state.py)")
# kind -> ring phases: an all-reduce is a reduce-scatter followed by an all-gather; an
# all-to-all (pairwise exchange) sends (n-1)/n of the buffer, like an all-gather.
PHASES = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}

# NCCL's tuning constants, microseconds, per protocol (LL, LL128, Simple): base latency per
# algorithm; per-hop latency over NVLink and over the network (src/graph/tuning.cc @5067397c).
PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_TUNING = {
    "base": {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)},
    "hop_nvlink": {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)},
    "hop_net": {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)},
    # multi-node rings launch every step through the network proxy: intra-node hops cost at least
    # this (getNetOverhead: 1 us on x86, 3x for Simple)
    "net_overhead": (1.0, 1.0, 3.0),
    # bandwidth factors: ring LL 1/2, LL128 0.92 (120/128); tree all-reduce 0.92 of the bus, then LL
    # 1/3.8, LL128 7/9 inside a node and 120/128 across nodes
    "ring_bw": (0.5, 0.92, 1.0),
    "tree_bw": (0.92 / 3.8, 0.92 * 120 / 128, 0.92),
    "tree_bw_one_node_ll128": 0.92 * 7 / 9,
    "ring_plateau": 1.4,   # Simple ring all-reduce across nodes: latency x1.4 (sm80+)
}
US = 1e-6


def _log2_floor(k):
    if is_array(k):
        import numpy as np
        return np.floor(np.log2(np.maximum(k, 1)))
    return max(int(k), 1).bit_length() - 1


def _ring_times(*, n, k, S, P, B_in, a_in, B_net, a_net, plateau):
    """NCCL's ring, each protocol: [(protocol, seconds)]."""
    r = n / k
    one_node, one_per_node = k == 1, r == 1
    bus = select(one_node, B_in, minimum(B_in * r / maximum(r - 1, 1e-9), r * B_net))
    # what no protocol changes, formed once (the same products, in the same order, as within each protocol's sum)
    hops_in, hops_net, moved = P * (n - k), P * (k - 1), P * (n - 1) / n * S
    out = []
    for i, proto in enumerate(PROTOCOLS):
        hop_in = a_in * NCCL_TUNING["hop_nvlink"]["ring"][i] / NCCL_TUNING["hop_nvlink"]["ring"][2]
        hop_in = select(one_node, hop_in, maximum(hop_in, NCCL_TUNING["net_overhead"][i] * US))
        # one rank per node: NCCL charges the network hops at the tree's latency
        net_table = select(one_per_node, NCCL_TUNING["hop_net"]["tree"][i], NCCL_TUNING["hop_net"]["ring"][i])
        hop_net = a_net * net_table / NCCL_TUNING["hop_net"]["ring"][2]
        lat = NCCL_TUNING["base"]["ring"][i] * US + hops_in * hop_in + hops_net * hop_net
        if proto == "Simple" and plateau:
            lat = lat * select(one_node, 1.0, NCCL_TUNING["ring_plateau"])
        out.append((proto, lat + moved / (NCCL_TUNING["ring_bw"][i] * bus)))
    return out


def _tree_times(*, n, k, S, B_in, a_in, B_net, a_net):
    """NCCL's tree all-reduce, each protocol: [(protocol, seconds)]."""
    r = n / k
    bus = select(k == 1, B_in, minimum(B_in, select(k == 2, 2, 1) * r * B_net))
    levels = _log2_floor(k)
    out = []
    for i, proto in enumerate(PROTOCOLS):
        hop_in = a_in * NCCL_TUNING["hop_nvlink"]["tree"][i] / NCCL_TUNING["hop_nvlink"]["ring"][2]
        hop_net = a_net * NCCL_TUNING["hop_net"]["tree"][i] / NCCL_TUNING["hop_net"]["ring"][2]
        lat = NCCL_TUNING["base"]["tree"][i] * US + 2 * ((r - 1) * hop_in + levels * hop_net)
        f = NCCL_TUNING["tree_bw"][i]
        if proto == "LL128":
            f = select(k == 1, NCCL_TUNING["tree_bw_one_node_ll128"], f)
        out.append((proto, lat + S / (0.5 * f * bus)))
    return out


def algorithm_times(*, kind, n, k, S, B_in, a_in, B_net, a_net) -> list:
    """Every (algorithm, protocol, seconds) NCCL's model weighs for one collective."""
    kw = dict(n=n, k=k, S=S, B_in=B_in, a_in=a_in, B_net=B_net, a_net=a_net)
    out = [("ring", proto, t) for proto, t in _ring_times(P=PHASES[kind], plateau=kind == "all_reduce", **kw)]
    if kind == "all_reduce":
        out += [("tree", proto, t) for proto, t in _tree_times(**kw)]
    return out


def nccl_choice(*, kind, n, k, S, B_in, a_in, B_net, a_net) -> tuple:
    """(algorithm, protocol) NCCL's model picks for one collective (scalars)."""
    algo, proto, _ = min(algorithm_times(kind=kind, n=n, k=k, S=S, B_in=B_in, a_in=a_in, B_net=B_net, a_net=a_net),
                         key=lambda x: x[2])
    return algo, proto


def _collective_text(*, kind, a_fw=0, eff=1, **_):
    fw = " + a_fw" if a_fw is not None and not (isinstance(a_fw, (int, float)) and a_fw == 0) else ""
    by = "/eff" if eff is not None and not (isinstance(eff, (int, float)) and eff == 1) else ""
    if kind == "all_to_all":
        return (f"count*((alpha + max((r-1)/n*S/B_in, (n-r)/n*S/B_net)){by}{fw}), r = n/k  (all-to-all, every "
                f"peer at once)")
    algos = "ring, tree" if kind == "all_reduce" else "ring"
    return (f"count*(min over NCCL's {algos} x LL/LL128/Simple of (latency + bytes/bandwidth){by}{fw}), n ranks "
            f"over k nodes  ({kind.replace('_', '-')}; formulas.md#collectives)")


@formula("comm/collective_s", _collective_text, NCCL, SECONDS,
         ("NCCL picks the algorithm and protocol its cost model says is fastest; NVLink SHARP, CollNet and PAT "
          "are not modelled",
          "B_in, B_net: the links' per-GPU rates times their bus efficiency; one NIC per GPU (rail-optimised)"))
def collective_s(*, count, kind, n, k, S, B_in, a_in, B_net, a_net, a_fw=0, eff=1):
    """Seconds for `count` collectives of an S-byte buffer over n ranks on k nodes; eff: the achieved fraction of
    NCCL's modelled performance, latency and bandwidth alike; a_fw: the framework's own time per collective
    (both fitplan.timing.calibration)."""
    r = n / k
    if kind == "all_to_all":
        t = select(k == 1, a_in, a_net) + maximum((r - 1) / n * S / B_in, (n - r) / n * S / B_net)
    else:
        t = None
        for _, _, x in algorithm_times(kind=kind, n=n, k=k, S=S, B_in=B_in, a_in=a_in, B_net=B_net, a_net=a_net):
            t = x if t is None else minimum(t, x)
    t = t / eff + a_fw
    return select(n > 1, count * t, 0 * t)


def bus_bandwidth(*, kind, n, S, seconds):
    """nccl-tests' busbw: algbw = S/t times 2(n-1)/n (all-reduce) or (n-1)/n (the others)."""
    return S / seconds * PHASES[kind] * (n - 1) / n


@formula("comm/ring_bytes", lambda *, kind, **_: ("2*" if PHASES[kind] == 2 else "") + "count*(n-1)/n*S",
         THAKUR, BYTES)
def ring_wire_bytes(*, count, n, S, kind):
    """Bytes each rank sends (and receives) in `count` ring collectives of S bytes."""
    return count * PHASES[kind] * (n - 1) / n * S


@formula("comm/p2p_s", lambda *, eff=1, **_: "count*(alpha + S/B)" + ("" if eff == 1 else "/eff"), THAKUR, SECONDS)
def p2p_s(*, count, S, B, alpha, eff=1):
    """Seconds for `count` point-to-point sends of S bytes, one after another, at eff of the modelled rate."""
    return count * (alpha + S / B) / eff


@formula("comm/p2p_bytes", "count*S", THAKUR, BYTES)
def p2p_wire_bytes(*, count, S):
    return count * S


def rank_strides(*, tp, cp, dp) -> dict:
    """Distance between consecutive members of each axis's group, rank order tp-cp-dp-pp."""
    return {"tp": 1 + 0 * tp, "cp": tp, "dp": tp * cp, "pp": tp * cp * dp}


@formula("link/intra_node", "n == 1 or (stride*n <= G and G % (stride*n) == 0)", GRID, COUNT,
         ("ranks numbered tp innermost, then cp, dp, pp; nodes of G consecutive ranks",))
def group_is_intra_node(*, stride, n, G):
    """True where every group of this axis lies inside one node (a group of 1 sends nothing)."""
    span = stride * n
    return (n == 1) | ((span <= G) & (G % span == 0))


@formula("link/nodes", "1 if intra else (n if stride >= G else max(2, ceil(n/floor(G/stride))))", GRID, COUNT,
         ("a group that leaves the node spreads over as few nodes as the rank grid allows",))
def group_nodes(*, stride, n, G, intra):
    """Nodes one group of this axis spans: its members `stride` apart, G GPUs per node."""
    per_node = maximum(G // maximum(stride, 1), 1)
    return select(intra, 1 + 0 * n, select(stride >= G, n, maximum(2, ceil_div(n, per_node))))


@formula("link/domain_ranks", "G if N % G == 0 else max{d <= G : N % d == 0}",
         Cite("megatron-gb200", "image6 (HybridEP at NVLink rates across a GB200 rack's trays); Megatron-Bridge "
              "scripts/performance/utils/executors.py @023219ed (Slurm --segment)"), COUNT,
         ("a job fills the NVLink domains it spans evenly: whole domains where its GPU count is a multiple of "
          "their size, else the largest divisor of its GPU count that fits one (64 GPUs of a 72-GPU rack: all 64)",))
def domain_ranks(*, N, G):
    """GPUs of an N-GPU job in each NVLink domain of G it spans. Megatron-Bridge's launcher asks Slurm for equal
    segments of a GB200/GB300 rack's 4-GPU trays (the whole job up to 18 trays, else the largest divisor of its
    trays up to 18), so a 64- or 256-GPU job sits in domains of 64; an 8-GPU board holds 8 of any multiple of 8.
    N and G are the job's and the domain's sizes, plain ints even in the search (every candidate spans the job)."""
    if N % G == 0:
        return G
    return max(d for d in range(1, min(N, G) + 1) if N % d == 0)


def tiers(gpu: GpuSpec) -> dict:
    """The two tiers' per-GPU bus bandwidths and per-hop latencies, for collective_s."""
    return {"B_in": gpu.intra_node.bytes_per_s * gpu.intra_node.bus_efficiency, "a_in": gpu.intra_node.latency_s,
            "B_net": gpu.inter_node.bytes_per_s * gpu.inter_node.bus_efficiency, "a_net": gpu.inter_node.latency_s}


def link_inputs(intra, gpu: GpuSpec) -> dict:
    """B (rate x bus efficiency) and alpha of the tier a point-to-point send crosses, elementwise."""
    t = tiers(gpu)
    return {"B": select(intra, t["B_in"], t["B_net"]), "alpha": select(intra, t["a_in"], t["a_net"])}


def link_name(intra: bool, gpu: GpuSpec) -> str:
    return gpu.intra_node.name if intra else gpu.inter_node.name
