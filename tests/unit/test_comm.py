"""fitplan.timing.comm and traffic: alpha-beta ring times derived by hand, link tiers from
the rank grid (tp innermost, then cp, pp, dp), per-axis traffic counts."""
from types import SimpleNamespace

import numpy as np
import pytest

from fitplan import presets
from fitplan.specs.parallel import Recompute, ZeroStage
from fitplan.timing import comm as CM
from fitplan.timing import traffic as T


H100 = CM.tiers(presets.gpu("h100-80gb"))     # NVLink 4: 0.82 x 450 GB/s, 3.4 us; NDR: 0.96 x 50 GB/s, 14 us
GiB = 2**30


def test_tiers_are_the_links_rates_times_their_bus_efficiency():
    assert H100 == {"B_in": pytest.approx(369e9), "a_in": 3.4e-6, "B_net": pytest.approx(48e9), "a_net": 14e-6}


def test_one_node_all_reduce_by_hand():
    """8 GPUs in one node, S = 1 GiB, B_in = 369 GB/s, NCCL's constants (us):
      ring Simple  8.4 + 2*7*3.4        = 56.0  + 1.75*S/369e9          = 5.1484 ms
      ring LL128   14  + 2*7*3.4*1.9/3.4 = 40.6  + 1.75*S/(0.92*369e9)   = 5.5758 ms
      ring LL      6.6 + 2*7*0.6         = 15.0  + 1.75*S/(0.5*369e9)    = 10.200 ms
      tree Simple  8.4 + 2*7*4.0         = 64.4  + S/(0.5*0.92*369e9)    = 6.3903 ms
    NCCL runs the fastest, the Simple ring: busbw = 1.75*S/t = 365.0 GB/s."""
    kw = dict(kind="all_reduce", n=8, k=1, S=GiB, **H100)
    times = {(a, p): t for a, p, t in CM.algorithm_times(**kw)}
    assert times["ring", "Simple"] == pytest.approx(56.0e-6 + 1.75 * GiB / 369e9)
    assert times["ring", "LL128"] == pytest.approx(40.6e-6 + 1.75 * GiB / (0.92 * 369e9))
    assert times["ring", "LL"] == pytest.approx(15.0e-6 + 1.75 * GiB / (0.5 * 369e9))
    assert times["tree", "Simple"] == pytest.approx(64.4e-6 + GiB / (0.46 * 369e9))
    t = CM.collective_s(count=1, **kw)
    assert t == times["ring", "Simple"] == pytest.approx(5.1484e-3, rel=1e-4)
    assert CM.nccl_choice(**kw) == ("ring", "Simple")
    assert CM.bus_bandwidth(kind="all_reduce", n=8, S=GiB, seconds=t) == pytest.approx(365.0e9, rel=1e-3)
    # small messages: the LL ring (NCCL picks RING/LL up to 1 MiB on 8 H200s, stas00/ml-engineering)
    assert CM.nccl_choice(**{**kw, "S": 2**20}) == ("ring", "LL")


def test_a_ring_across_nodes_runs_at_the_nodes_nics():
    """32 ranks on 4 nodes (r = 8 per node), S = 16 GiB, H100 tiers. Each channel's ring
    crosses every node boundary once and NCCL spreads the channels over the node's 8 NICs:
    bus bandwidth min(369*8/7, 8*48) = 384 GB/s, not one NIC's 48. Simple latency:
    (8.4 + 2*(32-4)*3.4 + 2*(4-1)*14)*1.4 = (8.4 + 190.4 + 84)*1.4 = 395.9 us;
    t = 395.9 us + 1.9375*16 GiB/384e9 = 87.07 ms, busbw 382.3 GB/s."""
    kw = dict(kind="all_reduce", n=32, k=4, S=16 * GiB, **H100)
    times = {(a, p): t for a, p, t in CM.algorithm_times(**kw)}
    assert times["ring", "Simple"] == pytest.approx(395.92e-6 + 1.9375 * 16 * GiB / 384e9)
    t = CM.collective_s(count=1, **kw)
    assert t == times["ring", "Simple"]
    assert CM.bus_bandwidth(kind="all_reduce", n=32, S=16 * GiB, seconds=t) == pytest.approx(382.3e9, rel=1e-3)
    # NVLink slower than r NICs: the intra-node hops bound it, B_in*r/(r-1)
    slow = dict(H100, B_in=100e9)
    t = CM.collective_s(count=1, **{**kw, **slow})
    assert t == pytest.approx(395.92e-6 + 1.9375 * 16 * GiB / (100e9 * 8 / 7))


def test_one_rank_per_node_runs_at_one_nic():
    """dp over 8 nodes with tp = 8 (members 8 apart): r = 1, every hop crosses the network on the
    GPU's own NIC (48 GB/s), and NCCL charges the tree's network latency (Simple 14 us, LL 5 us):
    ring Simple (8.4 + 14*14)*1.4 = 286.2 us + 1.75*S/48e9."""
    kw = dict(kind="all_reduce", n=8, k=8, S=GiB, **H100)
    times = {(a, p): t for a, p, t in CM.algorithm_times(**kw)}
    assert times["ring", "Simple"] == pytest.approx(286.16e-6 + 1.75 * GiB / 48e9)
    assert times["ring", "LL"] == pytest.approx(6.6e-6 + 14 * 5.0e-6 + 1.75 * GiB / (0.5 * 48e9))
    # the tree: 8.4 + 2*(0 + log2(8)*14) = 92.4 us, S/(0.46*48e9)
    assert times["tree", "Simple"] == pytest.approx(92.4e-6 + GiB / (0.46 * 48e9))


def test_the_tree_wins_small_all_reduces_at_scale():
    """1 MiB over 512 ranks on 64 nodes: the ring's 2*511 hops of latency against the tree's
    2*(7 + 6) hops; NCCL's model picks the tree."""
    kw = dict(kind="all_reduce", n=512, k=64, S=2**20, **H100)
    algo, _ = CM.nccl_choice(**kw)
    assert algo == "tree"
    ring = min(t for a, _, t in CM.algorithm_times(**kw) if a == "ring")
    assert CM.collective_s(count=1, **kw) < ring / 5


def test_reduce_scatter_and_all_gather_are_rings_of_one_phase():
    """No tree for them (NCCL tunes RS/AG with the ring, PAT, NVLS, CollNet only): ring Simple,
    8.4 + 7*3.4 = 32.2 us + 7/8*S/369e9, the same for both; an all-reduce's bandwidth term is
    twice theirs."""
    for kind in ("reduce_scatter", "all_gather"):
        kw = dict(kind=kind, n=8, k=1, S=GiB, **H100)
        assert [a for a, _, _ in CM.algorithm_times(**kw)] == ["ring"] * 3
        assert CM.collective_s(count=3, **kw) == pytest.approx(3 * (32.2e-6 + 7 / 8 * GiB / 369e9))


def test_all_to_all_sends_to_every_peer_at_once():
    """16 ranks on 2 nodes (8 each), S = 1 GiB: 7/16 of it over NVLink, 8/16 over the GPU's own
    NIC (an all-to-all cannot combine NICs, nccl-tests#267): 14 us + max(7/16*S/369e9, 8/16*S/48e9)."""
    t = CM.collective_s(count=2, kind="all_to_all", n=16, k=2, S=GiB, **H100)
    assert t == pytest.approx(2 * (14e-6 + 0.5 * GiB / 48e9))
    one_node = CM.collective_s(count=1, kind="all_to_all", n=8, k=1, S=GiB, **H100)
    assert one_node == pytest.approx(3.4e-6 + 7 / 8 * GiB / 369e9)


def test_arrays_give_the_scalar_answers():
    n, k, S = np.array([8, 32, 8, 512, 1]), np.array([1, 4, 8, 64, 1]), np.array([GiB, 16 * GiB, GiB, 2**20, GiB])
    got = CM.collective_s(count=1, kind="all_reduce", n=n, k=k, S=S, **H100)
    for i in range(5):
        one = CM.collective_s(count=1, kind="all_reduce", n=int(n[i]), k=int(k[i]), S=int(S[i]), **H100)
        assert got[i] == pytest.approx(one, rel=1e-12)
    assert got[4] == 0   # a group of one sends nothing


def test_wire_bytes_and_singleton_groups():
    assert CM.ring_wire_bytes(count=1, n=4, S=1000, kind="all_reduce") == 1500      # 2*(3/4)*1000
    assert CM.ring_wire_bytes(count=2, n=4, S=1000, kind="all_gather") == 1500      # 2*(3/4)*1000
    assert CM.collective_s(count=5, kind="all_reduce", n=1, k=1, S=1e9, **H100) == 0
    assert CM.ring_wire_bytes(count=5, n=1, S=1e9, kind="all_reduce") == 0


def test_p2p_by_hand():
    """4 sends of 6 MiB at 25 GB/s with 8 us latency: 4*(8e-6 + 6291456/25e9)."""
    assert CM.p2p_s(count=4, S=6291456, B=25e9, alpha=8e-6) == pytest.approx(4 * (8e-6 + 2.5165824e-4))
    assert CM.p2p_wire_bytes(count=4, S=6291456) == 4 * 6291456


def test_narayanan_tp_volume_per_layer():
    """Narayanan Sec. 3.2: tensor parallelism moves 8*b*s*h*(t-1)/t elements per layer, per
    device, per micro-batch (2 all-reduces forward, 2 backward)."""
    b, s, h, t, e = 1, 2048, 12288, 8, 2
    count = T.tp_collectives(m=1, L=1, recompute=Recompute.NONE, sp=False)
    S = T.tp_message_bytes(b=b, s=s, h=h, e=e, c=1)
    assert count == 4
    assert CM.ring_wire_bytes(count=count, n=t, S=S, kind="all_reduce") == 8 * b * s * h * (t - 1) / t * e
    assert T.tp_collectives(m=3, L=12, recompute=Recompute.FULL, sp=True) == 3 * 12 * 6   # + 2 rerun


@pytest.mark.parametrize(("name", "stride", "n", "G", "intra"), [
    ("tp=8 on 8 GPUs/node", 1, 8, 8, True),
    ("tp=16 on 8 GPUs/node", 1, 16, 8, False),
    ("dp=2 with stride 8 (tp=8)", 8, 2, 8, False),
    ("cp=2 after tp=2: stride 2", 2, 2, 8, True),
    ("cp=3 after tp=2: ranks 6, 8, 10 straddle", 2, 3, 8, False),
    ("pp=2 after tp=4: stride 4", 4, 2, 8, True),
    ("pp=2 after tp=8: stride 8", 8, 2, 8, False),
    ("dp=4 on 4 GPUs/node, stride 1", 1, 4, 4, True),
    ("a group of one sends nothing", 64, 1, 8, True),
])
def test_link_tier_from_rank_grid(name, stride, n, G, intra):
    assert bool(CM.group_is_intra_node(stride=stride, n=n, G=G)) is intra, name


def test_rank_strides_and_arrays():
    """Rank order tp-cp-dp-pp: cp members tp apart, dp members tp*cp apart, pp members tp*cp*dp apart."""
    tp, cp, dp, pp = np.array([8, 2, 4, 1]), np.array([1, 2, 1, 1]), np.array([2, 1, 2, 8]), np.array([2, 2, 2, 1])
    strides = CM.rank_strides(tp=tp, cp=cp, dp=dp)
    assert strides["tp"].tolist() == [1, 1, 1, 1]
    assert strides["cp"].tolist() == [8, 2, 4, 1]
    assert strides["dp"].tolist() == [8, 4, 4, 1]
    assert strides["pp"].tolist() == [16, 4, 8, 8]
    pp_intra = CM.group_is_intra_node(stride=strides["pp"], n=pp, G=8)
    assert pp_intra.tolist() == [False, True, False, True]
    for i in range(4):
        assert pp_intra[i] == CM.group_is_intra_node(stride=int(strides["pp"][i]), n=int(pp[i]), G=8)
    gpu = presets.gpu("a100-80gb")
    link = CM.link_inputs(pp_intra, gpu)
    assert link["B"] == pytest.approx([24e9, 234e9, 24e9, 234e9])   # rates x bus efficiency (0.96, 0.78)
    assert CM.link_name(False, gpu) == "InfiniBand HDR 200 Gb/s"


def test_zero_volumes_sec7():
    """ZeRO Sec. 7, one micro-batch: DP and ZeRO-1/2 move 2 psi, ZeRO-3 3 psi (1.5x)."""
    psi, n = 1_000_000, 64

    def volume(zero):
        rs = T.dp_grad_reduce_scatters(zero=zero, m=1)
        ag = T.dp_grad_all_gathers(zero=zero) + T.dp_param_all_gathers(zero=zero, m=1)
        return (CM.ring_wire_bytes(count=rs, n=n, S=psi, kind="reduce_scatter")
                + CM.ring_wire_bytes(count=ag, n=n, S=psi, kind="all_gather"))
    base = volume(ZeroStage.NONE)
    assert base == pytest.approx(2 * psi * (n - 1) / n)
    assert volume(ZeroStage.OS) == volume(ZeroStage.OS_G) == pytest.approx(base)
    assert volume(ZeroStage.OS_G_P) == pytest.approx(1.5 * base)
    # over m micro-batches ZeRO-2 reduces each one's gradients, ZeRO-3 gathers twice per micro-batch
    assert T.dp_grad_reduce_scatters(zero=ZeroStage.OS_G, m=8) == 8
    assert T.dp_grad_reduce_scatters(zero=ZeroStage.OS, m=8) == 1
    assert T.dp_param_all_gathers(zero=ZeroStage.OS_G_P, m=8) == 16
    # with pipeline stages (torch.distributed.pipelining) ZeRO-2/3 reduce once, after the last micro-batch;
    # ZeRO-3 gathers in the first forward and in every backward (forward resharded), or only once (kept)
    assert T.dp_grad_reduce_scatters(zero=ZeroStage.OS_G, m=8, piped=1) == 1
    assert T.dp_grad_reduce_scatters(zero=ZeroStage.OS, m=8, piped=1) == 1
    assert T.dp_param_all_gathers(zero=ZeroStage.OS_G_P, m=8, piped=1) == 9
    assert T.dp_param_all_gathers(zero=ZeroStage.OS_G_P, m=8, reshard=False, piped=1) == 1
    assert T.dp_param_all_gathers(zero=ZeroStage.OS_G, m=8, piped=1) == 1


def test_pipeline_and_context_traffic_counts():
    assert T.pp_sends(m=16, v=1, p=1) == 0
    assert T.pp_sends(m=16, v=3, p=4) == 96                                # 2*m*v
    assert T.pp_message_bytes(b=1, s=2048, h=12288, e=2, t=8, c=1) == 2048 * 12288 * 2 // 8   # bsh/t
    assert T.cp_ring_steps(m=4, L=10, c=1, passes=3) == 0
    assert T.cp_ring_steps(m=4, L=10, c=4, passes=3) == 4 * 10 * 3 * 3
    assert T.attention_core_passes(recompute=Recompute.NONE) == 3
    assert T.attention_core_passes(recompute=Recompute.SELECTIVE) == 4
    # K and V of s/c tokens, kv heads split over tp: 2*b*(s/c)*kv*e/t
    assert T.cp_message_bytes(b=1, s=8192, kv=1024, e=2, t=2, c=4) == 2 * 2048 * 1024 * 2 // 2


def test_exposed_and_windows():
    assert T.exposed_s(T_comm=2.0, T_window=0.0, T_tail=0.1) == 2.0       # nothing to hide behind
    assert T.exposed_s(T_comm=2.0, T_window=1.5, T_tail=0.1) == pytest.approx(0.5)
    assert T.exposed_s(T_comm=2.0, T_window=9.0, T_tail=0.1) == 0.1       # the last bucket stays exposed
    assert T.exposed_s(T_comm=0.05, T_window=9.0, T_tail=0.1) == 0.05
    # buckets: 10 of them, 2 s in all, behind a 1.5 s backward: 0.5 s stick out; behind 9 s, the last one
    assert T.bucketed_exposed_s(T_comm=2.0, T_window=1.5, buckets=10, overlap=True) == pytest.approx(0.5)
    assert T.bucketed_exposed_s(T_comm=2.0, T_window=9.0, buckets=10, overlap=True) == pytest.approx(0.2)
    assert T.bucketed_exposed_s(T_comm=2.0, T_window=9.0, buckets=10, overlap=False) == 2.0


def test_layer_pipeline_by_hand():
    """ZeRO-3 forward over L = 10 layers, a 5 ms gather per layer, 4 ms of compute per layer:
    the first gather (5) and nine 1 ms overhangs = 14 ms; without prefetch all ten, 50 ms.
    Backward, a 5 ms gather and a 5 ms reduce-scatter per layer behind 8 ms of compute:
    5 + 5 + 9*(10 - 8) = 28 ms."""
    assert T.layer_pipeline_exposed_s(L=10, x=0, h_first=5, h_last=0, W=4) == 14
    assert T.layer_pipeline_exposed_s(L=10, x=5, h_first=0, h_last=0, W=4) == 50
    assert T.layer_pipeline_exposed_s(L=10, x=0, h_first=5, h_last=5, W=8) == 28
    assert T.layer_pipeline_exposed_s(L=10, x=0, h_first=5, h_last=5, W=20) == 10   # hidden but the ends


def test_interleaved_dp_window_by_hand():
    """Megatron-Core's interleaved 1F1B (schedules.py, backward_step_helper_postprocess) launches a model chunk's
    gradient reduction once its last backward has run, r slots later on pipeline rank r, while the later chunks
    still run the last group of min(p, m) micro-batches. T_b = 0.24 s over v = 20 chunks is 0.012 s a chunk-pass;
    p = m = 2, rank 1: 1 + 19*2 - 1 = 38 passes = 0.456 s; the gather (r = 0): 39 = 0.468 s. A plain schedule
    (v = 1): the one backward, 0.24 s, whatever the rank. v = 2, p = 8, m = 1, rank 7 (1 + 1 - 7 < 1): never less
    than the chunk's own pass, 0.12 s."""
    assert T.dp_overlap_window_s(T=0.24, v=20, p=2, m=2, r=1) == pytest.approx(0.456)
    assert T.dp_overlap_window_s(T=0.24, v=20, p=2, m=2) == pytest.approx(0.468)
    assert T.dp_overlap_window_s(T=0.24, v=1, p=8, m=32, r=7) == pytest.approx(0.24)
    assert T.dp_overlap_window_s(T=0.24, v=2, p=8, m=1, r=7) == pytest.approx(0.12)
    # the search's arrays: element by element the same
    np.testing.assert_allclose(T.dp_overlap_window_s(T=0.24, v=np.array([1.0, 20.0]), p=2, m=2, r=1), [0.24, 0.456])


def test_interleaved_pipeline_sends_by_hand():
    """Megatron-Core's interleaved 1F1B posts the sends between stages asynchronously (overlap_p2p_comm, on with
    virtual stages in Megatron-LM, Megatron-Bridge and NeMo): they hide behind the m*(T_f + T_b) of compute, all but
    the 2*(p - 1) that fill and drain the pipeline. p = 8, v = 3, m = 256: 1,536 sends, 1.2 s of them; the tail is
    14 of them, 1.2*7/768 = 0.0109375 s, and the window 256*(0.02 + 0.04) = 15.36 s hides the rest. One chunk per
    rank (v = 1): batched blocking sends, no window, all 1.2 s exposed. A window shorter than the traffic leaves
    the difference: 2.0 s of sends (v = 2, m = 5: 20 of them) behind 5*(0.1 + 0.2) = 1.5 s of compute, 0.5 s, unless
    the fill and drain take more (p = 4: 6 of the 20 sends, 0.6 s)."""
    assert T.pp_window_s(m=256, v=3, T_f=0.02, T_b=0.04) == pytest.approx(15.36)
    assert T.pp_tail_s(T_comm=1.2, m=256, v=3, p=8) == pytest.approx(0.0109375)
    assert T.pp_window_s(m=256, v=1, T_f=0.02, T_b=0.04) == 0
    assert T.pp_tail_s(T_comm=1.2, m=256, v=1, p=8) == 0
    exposed = lambda T_comm, v, m, T_f, T_b, p: T.exposed_s(T_comm=T_comm, T_window=T.pp_window_s(
        m=m, v=v, T_f=T_f, T_b=T_b), T_tail=T.pp_tail_s(T_comm=T_comm, m=m, v=v, p=p))
    assert exposed(1.2, 3, 256, 0.02, 0.04, 8) == pytest.approx(0.0109375)
    assert exposed(1.2, 1, 256, 0.02, 0.04, 8) == pytest.approx(1.2)
    assert exposed(2.0, 2, 5, 0.1, 0.2, 2) == pytest.approx(0.5)   # the tail, 2.0*1/10 = 0.2, is less
    assert exposed(2.0, 2, 5, 0.1, 0.2, 4) == pytest.approx(0.6)   # p = 4: the tail, 2.0*3/10, is more
    # the search's arrays: element by element the same
    np.testing.assert_allclose(T.pp_tail_s(T_comm=1.2, m=256, v=np.array([1.0, 3.0]), p=8), [0.0, 0.0109375])


def test_tp_overlap_by_hand():
    """One layer, a = 3 ms per block exchange, attention GEMMs 1 ms, MLP GEMMs 4 ms: forward
    (3-1) + 0, backward (3-2) + 0 = 3 ms exposed of the 12 ms; without overlap all 12; full
    recompute reruns the forward: +2 ms (+6 ms without overlap)."""
    kw = dict(a=3.0, W_attn=1.0, W_mlp=4.0)
    assert T.tp_layer_exposed_s(full=0, overlap=True, **kw) == 3.0
    assert T.tp_layer_exposed_s(full=0, overlap=False, **kw) == 12.0
    assert T.tp_layer_exposed_s(full=1, overlap=True, **kw) == 5.0
    assert T.tp_layer_exposed_s(full=1, overlap=False, **kw) == 18.0


def _groups_by_rank(tp, cp, dp, pp, ep):
    """Every axis's groups by enumeration, Megatron-Core's order tp-cp-dp-pp (megatron/core/parallel_state.py,
    RankGenerator order "tp-cp-ep-dp-pp" with ep folded into dp): global rank t + tp*(c + cp*(d + dp*s)).
    The experts' grid keeps a stage's tp*cp*dp ranks in order and cuts them into ep consecutive ranks
    (expert tensor parallel 1); expert_dp takes the ranks ep apart."""
    rank = lambda t, c, d, s: t + tp * (c + cp * (d + dp * s))   # noqa: E731
    R = range
    out = {"tp": [[rank(t, c, d, s) for t in R(tp)] for c in R(cp) for d in R(dp) for s in R(pp)],
           "cp": [[rank(t, c, d, s) for c in R(cp)] for t in R(tp) for d in R(dp) for s in R(pp)],
           "pp": [[rank(t, c, d, s) for s in R(pp)] for t in R(tp) for c in R(cp) for d in R(dp)],
           "dp": [[rank(t, c, d, s) for d in R(dp) for c in R(cp)] for t in R(tp) for s in R(pp)]}
    block = tp * cp * dp
    out["ep"] = [list(range(s * block + g, s * block + g + ep)) for s in R(pp) for g in R(0, block, ep)]
    out["expert_dp"] = [list(range(s * block + e, (s + 1) * block, ep)) for s in R(pp) for e in R(ep)]
    return out


def _placement(tp, cp, dp, pp, ep, G):
    from fitplan.timing.axes import placement
    c = SimpleNamespace(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, shard_degree=None)
    setup = SimpleNamespace(cluster=SimpleNamespace(gpus_per_node=G), model=SimpleNamespace(moe=None),
                            training=SimpleNamespace(moe_dispatcher="alltoall"))   # NCCL's groups: whole nodes
    return placement(lambda f, key=None, **kw: f(**kw), setup, c)


@pytest.mark.parametrize("G", [4, 8, 16])
def test_every_group_placement_matches_the_rank_grid(G):
    """Every layout of up to 64 GPUs with power-of-two degrees: for each axis, "inside one node" and the
    nodes one group spans are what enumerating the groups on nodes of G consecutive ranks gives."""
    degrees = (1, 2, 4, 8, 16)
    checked = 0
    for tp in degrees:
        for cp in degrees:
            for pp in degrees:
                for dp in degrees:
                    if tp * cp * pp * dp > 64:
                        continue
                    for ep in degrees:
                        if (tp * cp * dp) % ep:
                            continue
                        place = _placement(tp, cp, dp, pp, ep, G)
                        for axis, groups in _groups_by_rank(tp, cp, dp, pp, ep).items():
                            spans = {len({r // G for r in g}) for g in groups}
                            intra, nodes = place[axis]
                            assert bool(intra) is (spans == {1}), (axis, tp, cp, dp, pp, ep, G)
                            assert int(nodes) == max(spans), (axis, tp, cp, dp, pp, ep, G, spans)
                        checked += 1
    assert checked > 500


def test_groups_that_leave_the_node():
    """tp=4, cp=2, dp=2, pp=2 on 8-GPU nodes: the gradient group (dp x cp) is ranks 0, 4, 8, 12 (tp apart:
    two nodes); pp members 16 apart (one rank per node, 2 nodes); ep=8 is a stage's ranks 0-7 (one node),
    ep=16 the whole stage (two)."""
    assert _groups_by_rank(4, 2, 2, 2, 8)["dp"][0] == [0, 4, 8, 12]
    place = _placement(4, 2, 2, 2, 8, 8)
    assert (bool(place["dp"][0]), int(place["dp"][1])) == (False, 2)
    assert (bool(place["pp"][0]), int(place["pp"][1])) == (False, 2)
    assert (bool(place["ep"][0]), int(place["ep"][1])) == (True, 1)
    place = _placement(4, 2, 2, 2, 16, 8)
    assert (bool(place["ep"][0]), int(place["ep"][1])) == (False, 2)


@pytest.mark.parametrize(("name", "stride", "n", "G", "nodes"), [
    ("tp=8 on 8 GPUs/node", 1, 8, 8, 1),
    ("tp=16 on 8 GPUs/node: two nodes of 8", 1, 16, 8, 2),
    ("dp=4 with stride 8 (tp=8): one rank per node", 8, 4, 8, 4),
    ("dp=8 with stride 4 (tp=4): two ranks per node", 4, 8, 8, 4),
    ("dp=64 with stride 1: eight nodes of 8", 1, 64, 8, 8),
    ("cp=3 after tp=2 straddles two nodes", 2, 3, 8, 2),
    ("dp=24 in a 72-GPU NVL72 domain", 1, 24, 72, 1),
    ("dp=16 in NVL72 domains: ranks 64-79 straddle two", 1, 16, 72, 2),
])
def test_nodes_a_group_spans(name, stride, n, G, nodes):
    intra = CM.group_is_intra_node(stride=stride, n=n, G=G)
    assert CM.group_nodes(stride=stride, n=n, G=G, intra=intra) == nodes, name


@pytest.mark.parametrize("name, N, G, ranks", [
    ("64 GPUs of a 72-GPU rack: one domain of 64", 64, 72, 64),
    ("256 GPUs on racks of 72: four of 64 (Megatron-Bridge's --segment 16 trays)", 256, 72, 64),
    ("1,024 GPUs: sixteen of 64", 1024, 72, 64),
    ("96 GPUs: two of 48 (24 trays, segments of 12)", 96, 72, 48),
    ("whole racks stay whole", 144, 72, 72),
    ("whole 8-GPU boards stay whole", 64, 8, 8),
    ("a job smaller than its board is one domain", 6, 8, 6),
])
def test_a_job_fills_its_nvlink_domains_evenly(name, N, G, ranks):
    """comm.domain_ranks: whole domains of G where N is a multiple of G, else the largest divisor of N not above G
    (Megatron-Bridge scripts/performance/utils/executors.py asks Slurm for the whole job up to 18 trays of 4 GPUs,
    else the largest divisor of its trays up to 18: 256 GPUs = 64 trays -> 16, 64 GPUs per domain)."""
    assert CM.domain_ranks(N=N, G=G) == ranks, name
