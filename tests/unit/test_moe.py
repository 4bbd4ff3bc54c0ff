"""Mixture of experts, expert parallelism, MLA and flash attention, derived by hand.

Published totals: Mixtral 8x7B 46.7B (13B active; Jiang et al. 2024 print "47B" and "13B"),
Mixtral 8x22B 141B total, 39B active (Mistral's release notes), DeepSeek-V3 671B total,
37B active (DeepSeek-V3 report, Sec. 4.2; its MTP module is not counted).
"""
import pytest

from fitplan.counts.params import active_params, shape_params
from fitplan.memory import activations as A
from fitplan.memory.breakdown import Setup, evaluate
from fitplan.presets import MODELS, gpu, recipe
from fitplan.search import default_space, search
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec, compat
from fitplan.specs.model import Mlp, MoeSpec, Norm, Position
from fitplan.specs.parallel import Recompute, ZeroStage
from fitplan.timing import evaluate_step
from fitplan.units import GiB
from tests.conftest import make_setup


@pytest.mark.parametrize(("name", "total", "active", "total_b", "active_b"), [
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248, 46.7, 12.9),
    ("mixtral-8x22b", 140_630_071_296, 39_161_468_928, 141, 39),
    ("deepseek-v3", 671_026_404_352, 37_552_282_624, 671, 37),
])
def test_published_totals(name, total, active, total_b, active_b):
    m = MODELS[name].model
    assert shape_params(m) == total and active_params(m) == active
    digits = 0.05 if total_b != int(total_b) else 0.5           # the precision the source prints
    assert total / 1e9 == pytest.approx(total_b, abs=digits)
    assert active / 1e9 == pytest.approx(active_b, abs=0.05 if active_b != int(active_b) else 0.6)


# A tiny MoE: L = 2 (both MoE), h = 64, a = 4, SwiGLU experts of 128, E = 4, top-2, no biases.
TINY = ModelSpec(name="tiny-moe", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                 vocab_size=100, max_seq_len=32, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
                 tied_embeddings=False, linear_bias=False,
                 moe=MoeSpec(num_experts=4, experts_per_token=2, expert_ffn_size=128))
SETUP = Setup(TINY, TrainingSpec(seq_len=32, recipe=recipe("mixed-adam"), dropout=False),
              ClusterSpec(gpu=gpu("a100-80gb"), num_gpus=4, gpus_per_node=8, reserve_bytes=GiB))


def test_tiny_moe_state_by_hand():
    """dp = 4, ep = 2, ZeRO-1. Dense per layer: attention 4*64^2 = 16384, router 64*4 = 256,
    norms 2*64 -> 16768, x2 layers + embedding 6400 + head 6400 + final norm 64 = 46400.
    Experts per layer 4 x 3 x 64 x 128 = 98304; each GPU holds 2 of 4: 49152 x 2 layers = 98304.
    ZeRO-1: weights and grads whole (4 B/param), master and Adam (12 B) over dp*cp = 4 for the
    dense part and over the expert-data-parallel group tp*dp*cp/ep = 2 for the experts."""
    b = evaluate(SETUP, ParallelConfig(dp=4, ep=2, zero=ZeroStage.OS))
    dense, experts = 46400, 98304
    assert b.parts["states/weights"] + b.parts["states/grads"] == 4 * (dense + experts)
    assert b.parts["states/master"] + b.parts["states/optimizer"] == 12 * dense // 4 + 12 * experts // 2


def test_tiny_moe_activations_by_hand():
    """s = 32, b = 1, no dropout, bf16: per MoE layer R = 4e*sbh = 8*2048, T = sb*(e*(2q + 2kv)
    + k*rho*(e*(h + n*f_e) + 4) + 8E) = 32*(2*256 + 2*(2*(64 + 384) + 4) + 32), S = a*s^2*e = 4*1024*2
    (each routed copy keeps its input, the expert's three f_e-wide tensors and its fp32 probability).
    Two layers; the all-to-all buffers hold 2*e*k*s*b*h = 2*2*2*32*64."""
    b = evaluate(SETUP, ParallelConfig(dp=4, ep=2))
    per_layer = 8 * 2048 + 32 * (2 * 256 + 2 * (2 * (64 + 384) + 4) + 32) + 4 * 1024 * 2
    assert b.parts["activations/layers"] == 2 * per_layer
    assert b.parts["activations/moe_buffers"] == 2 * 2 * 2 * 32 * 64


def test_ep_rules():
    assert compat.check(TINY, SETUP.training, SETUP.cluster, ParallelConfig(dp=4, ep=3))     # 4 experts % 3
    dense = MODELS["llama3.1-8b"].model
    assert any(v.rule == "ep_without_experts" for v in
               compat.check(dense, SETUP.training, SETUP.cluster, ParallelConfig(dp=4, ep=2)))
    assert any(v.rule == "moe_tp_needs_sequence_parallel" for v in
               compat.check(TINY, SETUP.training, SETUP.cluster, ParallelConfig(tp=2, dp=2)))


def test_all_to_all_by_hand():
    """ep = 4 over 4 GPUs, one micro-batch (global batch 4, dp 4): 2 layers x 4 all-to-alls
    (dispatch, combine, and both again in backward) of e*k*s*b*h = 2*2*32*64 = 8192 B, each
    sending (n - 1)/n of it: 2 * 4 * 8192 * 3/4 = 49152 B per step."""
    setup = Setup(TINY, TrainingSpec(seq_len=32, recipe=recipe("mixed-adam"), dropout=False, global_batch=4),
                  SETUP.cluster)
    r = evaluate_step(setup, ParallelConfig(dp=4, ep=4))
    assert r.comm["ep"].bytes_per_step == pytest.approx(49152)
    assert r.comm["ep"].intra_node and r.parts["time/ep_exposed"] > 0


def test_search_includes_expert_parallelism():
    setup = make_setup("mixtral-8x7b", 16)
    r = search(setup, default_space(16, num_experts=8), top=3)
    assert r.feasible and r.suggestions[0].config.ep > 1
    for s in r.suggestions:
        assert not compat.check(setup.model, setup.training, setup.cluster, s.config)


def test_flash_attention_replaces_the_score_term():
    """Eager keeps a*s^2*b*(e + D*(e + M)); flash an fp32 logsumexp, 4*a*s*b."""
    kw = dict(s=4096, b=1, h=4096, a=32, q=4096, kv=1024, f=14336, n=3, e=2, M=1, D=1, t=1, c=1, sp=False,
              recompute=Recompute.NONE)
    eager, flash = A.per_layer_bytes(**kw), A.per_layer_bytes(**kw, kernel="flash")
    assert eager - flash == 32 * 4096**2 * 5 - 4 * 32 * 4096


def test_mla_stores_decompressed_heads_and_latents():
    """DeepSeek-V3's q_size = 128*(128 + 64) = 24576 and kv_size = 128*128 = 16384 (V and the
    output-projection input), with latents 2*(1536 + 512 + 64) replicated over tp."""
    m = MODELS["deepseek-v3"].model
    assert (m.q_size, m.kv_size) == (24576, 16384)
    s = make_setup("deepseek-v3", 8)
    from fitplan.memory.breakdown import Shapes
    assert Shapes.of(s).r_extra == Shapes.of(s).kw()["r_extra"] == 2 * (1536 + 512 + 64)


def test_biased_experts_count_their_down_projection_bias():
    """GeLU experts with biases: fc1 h*f_e + f_e, fc2 f_e*h + h per expert (the down bias was
    missing until the torch reference showed it): E * (2*64*128 + 128 + 64) per MoE layer."""
    from dataclasses import replace

    from fitplan.counts.params import expert_params
    biased = replace(TINY, mlp=Mlp.GELU, linear_bias=True)
    assert expert_params(biased) == 4 * (2 * 64 * 128 + 128 + 64)


def test_expert_group_across_two_nodes_is_timed_on_the_inter_node_link():
    """mixtral-8x7b on 16 H100s in nodes of 4, dp=4 tp=2 pp=2 ep=8: a stage's tp x dp ranks are 8
    consecutive ranks (Megatron-Core's order tp-cp-dp-pp), so each expert group is ranks 0-7, two nodes,
    and its all-to-alls run over InfiniBand. Each all-to-all sends to every peer at once: 3/8 of the
    buffer to the 3 peers on its node over NVLink, 4/8 to the 4 on the other node through the GPU's own
    NIC, the longer: (alpha + S/2/B)/eff + a_fw, B the NIC's 50 GB/s x bus efficiency 0.96, eff the fitted
    comm_efficiency x a2a_efficiency and a_fw the collective_overhead (fitplan.timing.calibration)."""
    from fitplan.timing import calibration as CAL
    setup = make_setup("mixtral-8x7b", 16, gpus_per_node=4)
    st = evaluate_step(setup, ParallelConfig(dp=4, tp=2, pp=2, ep=8, sequence_parallel=True))
    ep = st.comm["ep"]
    assert ep.degree == 8 and not ep.intra_node and ep.nodes == 2
    assert ep.link == setup.cluster.gpu.inter_node.name
    n_a2a = next(t for t in st.terms if t.key == "comm/moe_a2a_count").value
    S = next(t for t in st.terms if t.key == "comm/moe_a2a_message").value
    e2e = CAL.of_setup(setup)
    net = setup.cluster.gpu.inter_node
    B, eff = net.bytes_per_s * 0.96, e2e.comm_efficiency * e2e.a2a_efficiency
    assert net.bus_efficiency == 0.96
    assert ep.busy_s == pytest.approx(n_a2a * ((net.latency_s + 4 / 8 * S / B) / eff + e2e.collective_overhead_s))
    # in nodes of 8 the same layout's expert group is one node
    one_node = evaluate_step(make_setup("mixtral-8x7b", 16), ParallelConfig(dp=4, tp=2, pp=2, ep=8,
                                                                           sequence_parallel=True)).comm["ep"]
    assert one_node.intra_node and one_node.link == setup.cluster.gpu.intra_node.name
