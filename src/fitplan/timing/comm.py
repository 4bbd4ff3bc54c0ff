"""Collective times in the alpha-beta model, ring algorithms, and the link each group uses.

n ranks, a buffer of S bytes per rank, per-rank link bandwidth B (bytes/s, one direction),
per-step latency alpha (s):
  all-gather, reduce-scatter   (n-1)*alpha + (n-1)/n * S/B
  all-reduce (RS then AG)      2*(n-1)*alpha + 2*(n-1)/n * S/B
  point-to-point send          alpha + S/B
Source: Thakur, Rabenseifner, Gropp, "Optimization of Collective Communication Operations
in MPICH" (IJHPCA 2005), cited as fitplan until a "thakur" source key exists. B is the
figure nccl-tests calls busbw (for all-reduce busbw = algbw * 2(n-1)/n), not algbw; the
GPU presets give the link's one-direction rate, an upper bound on busbw.

Which link a group uses follows from the rank grid. Ranks are numbered tp innermost, then
cp, then pp, then dp (ParallelConfig), so a group's members are `stride` apart:
  tp: 1    cp: tp    pp: tp*cp    dp: tp*cp*pp
A group of n members `stride` apart lies inside one node of G GPUs iff stride*n <= G and
stride*n divides G (nodes hold whole groups; otherwise some group straddles two nodes).
A ring that leaves the node runs at the per-GPU inter-node rate: one tier per group,
no hierarchical (intra-then-inter) algorithms.

Expert parallelism has no stride of its own: its ep ranks are drawn from one pipeline
stage's tp x cp x dp ranks (expert tensor parallel 1, as in Megatron-LM's expert grid, which
lays ep right after expert-tp and lets it run on into the data-parallel ranks), taken in
that order. Up to tp*cp of them are consecutive ranks; past that, the group continues on
the next data-parallel replica, tp*cp*pp ranks further on, so with pp > 1 a group of more
than tp*cp ranks is not contiguous (ep_group_is_intra_node).
"""
from fitplan.arith import maximum, select
from fitplan.explain import BYTES, COUNT, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.cluster import GpuSpec

THAKUR = Cite("thakur", "Sec. 4 (ring all-gather, reduce-scatter; all-reduce = RS + AG)")
GRID = Cite("fitplan", "formulas.md#link-tier (rank order tp-cp-pp-dp, ParallelConfig)")
# kind -> ring phases: an all-reduce is a reduce-scatter followed by an all-gather; an
# all-to-all (pairwise exchange) sends (n-1)/n of the buffer in n-1 steps, like an all-gather.
PHASES = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}


def _ring_text(*, kind, **_):
    k = "2*" if PHASES[kind] == 2 else ""
    return f"count*({k}(n-1)*alpha + {k}(n-1)/n*S/B)  ({kind.replace('_', '-')})"


@formula("comm/ring_s", _ring_text, THAKUR, SECONDS,
         ("ring algorithm over one link tier; bandwidth B is the per-GPU one-direction rate (busbw)",))
def ring_collective_s(*, count, n, S, B, alpha, kind):
    """Seconds for `count` ring collectives of S bytes per rank over n ranks."""
    k = PHASES[kind]
    return count * (k * (n - 1) * alpha + k * (n - 1) / n * S / B)


@formula("comm/ring_bytes", lambda *, kind, **_: ("2*" if PHASES[kind] == 2 else "") + "count*(n-1)/n*S",
         THAKUR, BYTES)
def ring_wire_bytes(*, count, n, S, kind):
    """Bytes each rank sends (and receives) in `count` ring collectives of S bytes."""
    return count * PHASES[kind] * (n - 1) / n * S


@formula("comm/p2p_s", "count*(alpha + S/B)", THAKUR, SECONDS)
def p2p_s(*, count, S, B, alpha):
    """Seconds for `count` point-to-point sends of S bytes, one after another."""
    return count * (alpha + S / B)


@formula("comm/p2p_bytes", "count*S", THAKUR, BYTES)
def p2p_wire_bytes(*, count, S):
    return count * S


def rank_strides(*, tp, cp, pp) -> dict:
    """Distance between consecutive members of each axis's group, rank order tp-cp-pp-dp."""
    return {"tp": 1 + 0 * tp, "cp": tp, "pp": tp * cp, "dp": tp * cp * pp}


@formula("link/intra_node", "n == 1 or (stride*n <= G and G % (stride*n) == 0)", GRID, COUNT,
         ("ranks numbered tp innermost, then cp, pp, dp; nodes of G consecutive ranks",))
def group_is_intra_node(*, stride, n, G):
    """True where every group of this axis lies inside one node (a group of 1 sends nothing)."""
    span = stride * n
    return (n == 1) | ((span <= G) & (G % span == 0))


@formula("link/dp_intra", "intra(dp group) and intra(cp group)", GRID, COUNT,
         ("gradients are reduced over dp x cp ranks (context-parallel ranks hold the same weights)",))
def dp_cp_group_is_intra_node(*, dp_intra, cp_intra):
    """The dp x cp group (cp members tp apart, dp members tp*cp*pp apart) fits a node iff both do."""
    return dp_intra & cp_intra


@formula("link/ep_intra", "p == 1 or ep within a tp*c block: intra(stride 1, n=ep); else "
         "intra(stride 1, n=t*c) and intra(stride t*c*p, n=ep/(t*c))", GRID, COUNT,
         ("ep ranks are one pipeline stage's tp x cp x dp ranks in that order (expert tensor parallel 1): "
          "consecutive within a tp x cp block, then tp*cp*pp apart across data-parallel replicas",))
def ep_group_is_intra_node(*, t, c, p, ep, G):
    """True where every expert-parallel group lies inside one node. A group that does not
    tile the tp x cp blocks (neither divides the other) counts as leaving the node when
    p > 1: one of its groups steps over the other stages' ranks."""
    inner = t * c
    contiguous = group_is_intra_node(stride=1, n=ep, G=G)
    within = (ep <= inner) & (inner % ep == 0)
    spans = ((ep % inner == 0) & group_is_intra_node(stride=1, n=inner, G=G)
             & group_is_intra_node(stride=inner * p, n=maximum(ep // inner, 1), G=G))
    return select((p == 1) | within, contiguous, spans)


def link_inputs(intra, gpu: GpuSpec) -> dict:
    """B and alpha of the tier a group uses, elementwise over candidates."""
    return {"B": select(intra, gpu.intra_node.bytes_per_s, gpu.inter_node.bytes_per_s),
            "alpha": select(intra, gpu.intra_node.latency_s, gpu.inter_node.latency_s)}


def link_name(intra: bool, gpu: GpuSpec) -> str:
    return gpu.intra_node.name if intra else gpu.inter_node.name
