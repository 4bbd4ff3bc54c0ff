"""fitplan.timing.comm and traffic: alpha-beta ring times derived by hand, link tiers from
the rank grid (tp innermost, then cp, pp, dp), per-axis traffic counts."""
import numpy as np
import pytest

from fitplan import presets
from fitplan.specs.parallel import Recompute, ZeroStage
from fitplan.timing import comm as CM
from fitplan.timing import traffic as T


def test_ring_all_reduce_by_hand():
    """n = 8, S = 1 GB, B = 300 GB/s, alpha = 3 us:
    2*(8-1)*3e-6 + 2*(8-1)/8 * 1e9/3e11 = 4.2e-5 + 5.8333e-3 = 5.875333e-3 s."""
    t = CM.ring_collective_s(count=1, n=8, S=1e9, B=300e9, alpha=3e-6, kind="all_reduce")
    assert t == pytest.approx(4.2e-5 + 1.75e9 / 300e9, rel=1e-12)
    assert t == pytest.approx(5.875333e-3, rel=1e-6)


def test_reduce_scatter_and_all_gather_are_half_an_all_reduce():
    kw = dict(count=3, n=16, S=123_456_789, B=25e9, alpha=8e-6)
    ar = CM.ring_collective_s(kind="all_reduce", **kw)
    rs = CM.ring_collective_s(kind="reduce_scatter", **kw)
    ag = CM.ring_collective_s(kind="all_gather", **kw)
    assert rs == ag == pytest.approx(ar / 2, rel=1e-12)
    # 3 reduce-scatters over 16 ranks: 3*15*8e-6 + 3*15/16*S/B
    assert rs == pytest.approx(3 * 15 * 8e-6 + 3 * 15 / 16 * 123_456_789 / 25e9, rel=1e-12)


def test_wire_bytes_and_singleton_groups():
    assert CM.ring_wire_bytes(count=1, n=4, S=1000, kind="all_reduce") == 1500      # 2*(3/4)*1000
    assert CM.ring_wire_bytes(count=2, n=4, S=1000, kind="all_gather") == 1500      # 2*(3/4)*1000
    assert CM.ring_collective_s(count=5, n=1, S=1e9, B=1e9, alpha=1e-5, kind="all_reduce") == 0
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
    tp, cp, pp = np.array([8, 2, 4, 1]), np.array([1, 2, 1, 1]), np.array([2, 1, 2, 8])
    strides = CM.rank_strides(tp=tp, cp=cp, pp=pp)
    assert strides["tp"].tolist() == [1, 1, 1, 1]
    assert strides["cp"].tolist() == [8, 2, 4, 1]
    assert strides["pp"].tolist() == [8, 4, 4, 1]
    assert strides["dp"].tolist() == [16, 4, 8, 8]
    pp_intra = CM.group_is_intra_node(stride=strides["pp"], n=pp, G=8)
    assert pp_intra.tolist() == [False, True, True, True]
    for i in range(4):
        assert pp_intra[i] == CM.group_is_intra_node(stride=int(strides["pp"][i]), n=int(pp[i]), G=8)
    gpu = presets.gpu("a100-80gb")
    link = CM.link_inputs(pp_intra, gpu)
    assert link["B"].tolist() == [25e9, 300e9, 300e9, 300e9]
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
    kw = dict(m=4, T_f=1.0, T_b=2.0)
    assert T.dp_window_s(zero=ZeroStage.NONE, overlap=T.DpOverlap.BACKWARD, **kw) == 2.0   # last backward
    assert T.dp_window_s(zero=ZeroStage.OS_G, overlap=T.DpOverlap.BACKWARD, **kw) == 8.0   # every backward
    assert T.dp_window_s(zero=ZeroStage.OS_G_P, overlap=T.DpOverlap.BACKWARD, **kw) == 12.0
    assert T.dp_window_s(zero=ZeroStage.OS_G_P, overlap=T.DpOverlap.NONE, **kw) == 0
    assert T.dp_after_step_s(T_param=3.0, zero=ZeroStage.OS) == 3.0
    assert T.dp_after_step_s(T_param=3.0, zero=ZeroStage.OS_G_P) == 0
    assert T.dp_overlapped_s(T_grad=1.0, T_param=3.0, zero=ZeroStage.OS_G_P) == 4.0
    assert T.dp_overlapped_s(T_grad=1.0, T_param=3.0, zero=ZeroStage.OS) == 1.0


def test_dp_times_cp_group_is_intra_only_if_both_are():
    """tp=2, cp=2: cp members 2 apart (span 4); dp members tp*cp*pp = 4 apart.
    dp=2 spans 8 (one node of 8); dp=4 spans 16 (two nodes)."""
    cp_intra = CM.group_is_intra_node(stride=2, n=2, G=8)
    for dp, intra in ((2, True), (4, False)):
        dp_intra = CM.group_is_intra_node(stride=4, n=dp, G=8)
        assert bool(CM.dp_cp_group_is_intra_node(dp_intra=dp_intra, cp_intra=cp_intra)) is intra


def _ep_groups_by_rank(tp, cp, pp, dp, ep):
    """The expert-parallel groups by enumeration: global rank t + c*tp + s*tp*cp + d*tp*cp*pp;
    one stage's tp x cp x dp ranks taken in that order, ep consecutive ones to a group."""
    for s in range(pp):
        local = [t + c * tp + s * tp * cp + d * tp * cp * pp for d in range(dp) for c in range(cp) for t in range(tp)]
        for g in range(0, len(local), ep):
            yield local[g:g + ep]


@pytest.mark.parametrize("G", [4, 8, 16])
def test_ep_group_placement_matches_the_rank_grid(G):
    """Every layout of up to 64 GPUs with power-of-two degrees: the formula says "inside a node"
    exactly when every enumerated ep group sits on one node of G consecutive ranks."""
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
                        enumerated = all(len({r // G for r in group}) == 1
                                         for group in _ep_groups_by_rank(tp, cp, pp, dp, ep))
                        formula = CM.ep_group_is_intra_node(t=tp, c=cp, p=pp, ep=ep, G=G)
                        assert bool(formula) is enumerated, (tp, cp, pp, dp, ep, G)
                        checked += 1
    assert checked > 500
    # the search's arrays give the same answers elementwise
    t, c, p, e = (np.array(v) for v in ([4, 4, 8, 1], [1, 1, 1, 1], [2, 1, 2, 2], [8, 8, 8, 8]))
    assert CM.ep_group_is_intra_node(t=t, c=c, p=p, ep=e, G=8).tolist() == [False, True, True, False]


def test_ep_group_that_spans_two_nodes():
    """tp=4, pp=2, dp=2, ep=8 on 8-GPU nodes: a stage's expert group is its tp ranks on both
    data-parallel replicas, ranks 0-3 and 8-11 (dp members tp*pp = 8 apart): two nodes, though
    8 ranks would fit one. ep within one tp x cp block, or pp = 1, stays contiguous."""
    assert list(_ep_groups_by_rank(4, 1, 2, 2, 8))[0] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert not CM.ep_group_is_intra_node(t=4, c=1, p=2, ep=8, G=8)
    assert CM.ep_group_is_intra_node(t=4, c=1, p=1, ep=8, G=8)           # pp = 1: ranks 0-7
    assert CM.ep_group_is_intra_node(t=8, c=1, p=2, ep=8, G=8)           # the tp block itself
    assert CM.ep_group_is_intra_node(t=1, c=1, p=2, ep=4, G=8)           # 4 dp replicas 2 apart: 0, 2, 4, 6
    assert not CM.ep_group_is_intra_node(t=1, c=1, p=2, ep=8, G=8)       # 0, 2, ..., 14
