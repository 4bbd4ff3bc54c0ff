"""fitplan.counts.flops: hand-derived exact values; GPT shapes reduce to Korthikanti App. A."""
import numpy as np
import pytest

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.counts import params as P
from fitplan.specs.parallel import Recompute

GPT_SHAPES = [  # (B, s, h, L, V)
    (1, 2048, 12288, 96, 51200),    # GPT-3 175B
    (4, 2048, 6144, 48, 51200),     # Korthikanti 22B
    (3, 1024, 768, 12, 50257),      # GPT-2 small shape
]


def _gpt(B, s, h, L, V, recompute=Recompute.NONE):
    lin = F.matmul_flops(B=B, s=s, P=12 * h * h)   # GPT layer weights: 3h^2 + h^2 + 8h^2
    core = F.attention_core_flops(B=B, s=s, q=h)
    fwd = F.forward_flops(L=L, F_linear=lin, F_core=core, F_logits=F.logits_flops(B=B, s=s, h=h, V=V))
    rec = F.recompute_flops(L=L, F_linear=lin, F_core=core, recompute=recompute)
    bwd = F.backward_flops(F_forward=fwd, F_recompute=rec)
    return lin, core, fwd, rec, bwd


@pytest.mark.parametrize(("B", "s", "h", "L", "V"), GPT_SHAPES)
def test_gpt_layer_is_24Bsh2_plus_4Bs2h(B, s, h, L, V):
    lin, core, *_ = _gpt(B, s, h, L, V)
    assert lin == 24 * B * s * h * h             # Korthikanti App. A
    assert core == 4 * B * s * s * h
    assert F.logits_flops(B=B, s=s, h=h, V=V) == 2 * B * s * h * V


@pytest.mark.parametrize(("B", "s", "h", "L", "V"), GPT_SHAPES)
def test_model_flops_is_eq7_exactly(B, s, h, L, V):
    *_, fwd, _, _ = _gpt(B, s, h, L, V)
    assert F.model_flops(F_forward=fwd) == F.korthikanti_eq7(B=B, L=L, s=s, h=h, V=V)


@pytest.mark.parametrize(("B", "s", "h", "L", "V"), GPT_SHAPES)
def test_full_recompute_hardware_flops_is_narayanan_eq3(B, s, h, L, V):
    """Full recompute reruns every layer's forward, not the logits: Narayanan Eq. 3."""
    _, _, fwd, _, bwd = _gpt(B, s, h, L, V, Recompute.FULL)
    assert F.hardware_flops(F_forward=fwd, F_backward=bwd) == F.narayanan_eq3(B=B, s=s, l=L, h=h, V=V)


@pytest.mark.parametrize(("B", "s", "h", "L", "V"), GPT_SHAPES)
def test_selective_recompute_is_2s_over_9h_not_printed_eq8(B, s, h, L, V):
    """Derived: hardware = 72BLsh^2(1 + 2s/(9h) + V/(12hL)) = 72BLsh^2 + 16BLs^2h + 6BshV.
    Eq. 8 as printed (1 + s/(3h)) counts 8BLs^2h more."""
    _, _, fwd, rec, bwd = _gpt(B, s, h, L, V, Recompute.SELECTIVE)
    hw = F.hardware_flops(F_forward=fwd, F_backward=bwd)
    assert rec == 4 * B * L * s * s * h
    assert hw == 72 * B * L * s * h * h + 16 * B * L * s * s * h + 6 * B * s * h * V
    assert F.korthikanti_eq8_printed(B=B, L=L, s=s, h=h, V=V) - hw == 8 * B * L * s * s * h


def test_backward_is_twice_forward_plus_recompute():
    assert F.backward_flops(F_forward=10, F_recompute=0) == 20
    assert F.backward_flops(F_forward=10, F_recompute=3) == 23
    assert F.recompute_flops(L=5, F_linear=7, F_core=2, recompute=Recompute.NONE) == 0
    assert F.recompute_flops(L=5, F_linear=7, F_core=2, recompute=Recompute.SELECTIVE) == 10
    assert F.recompute_flops(L=5, F_linear=7, F_core=2, recompute=Recompute.FULL) == 45


def test_gqa_swiglu_linear_flops_are_2_per_weight_per_token():
    """Llama 3.1 8B has no biases, so one layer's weight GEMMs are exactly 2 FLOPs per
    weight per token: q = 4096, kv = 8*128 = 1024, f = 14336, three MLP matrices."""
    m = presets.model("llama3.1-8b").model
    B, s = 2, 8192
    lin = F.matmul_flops(B=B, s=s, P=P.layer_matmul_params(m, moe_layer=False))
    assert lin == 2 * B * s * P.layer_sharded_params(m)
    assert lin == 2 * B * s * 4096 * (2 * 4096 + 2 * 1024 + 3 * 14336)   # = 2Bsh(2q + 2kv + 3f)
    assert F.attention_core_flops(B=B, s=s, q=m.q_size) == 4 * B * s * s * 4096


def test_formulas_work_on_arrays():
    B = np.array([1, 2, 4])
    h = np.array([1024, 2048, 4096])
    lin = F.matmul_flops(B=B, s=2048, P=12 * h * h)
    for i in range(3):
        assert lin[i] == F.matmul_flops(B=int(B[i]), s=2048, P=12 * int(h[i]) ** 2)


def test_trace_terms_carry_citations():
    term = F.korthikanti_eq7.term(B=1, L=96, s=2048, h=12288, V=51200)
    assert term.cite.key == "korthikanti" and "Eq. 7" in term.cite.where
    assert F.narayanan_eq3.term(B=1, s=2048, l=96, h=12288, V=51200).cite.key == "narayanan"
    assert any("GEMM" in a for a in F.matmul_flops.term(B=1, s=1, P=12).assumes)
