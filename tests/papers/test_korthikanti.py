"""[korthikanti] Reducing Activation Recomputation, Table 2 at the Table 3 settings.

Table 3: s = 2048, v = 51200; (a, h, L, t, p, b) per model. 16-bit activations, 1-byte
dropout masks. Table 2 per layer: TP sbh(10 + 24/t + 5as/(ht)); TP+SP sbh/t(34 + 5as/h);
TP+selective sbh(10 + 24/t); TP+SP+selective 34sbh/t; full 2sbh. Under 1F1B the first
stage holds p micro-batches of L/p layers = L layers' worth (Sec. 4.2.3, Eq. 5/6).
The GiB figures are REFERENCE.md's check table (recomputed, printed to 0.01 GiB).
"""
from fractions import Fraction

import pytest

from fitplan.memory import activations as A
from fitplan.specs.parallel import Recompute
from fitplan.units import GiB

TABLE3 = {  # a, h, L, t, p, b
    "22B": (64, 6144, 48, 8, 1, 4), "175B": (96, 12288, 96, 8, 8, 1),
    "530B": (128, 20480, 105, 8, 35, 1), "1T": (160, 25600, 128, 8, 64, 1),
}
S = 2048
CHECK_GIB = {  # TP, TP+SP, TP+selective, TP+SP+selective, full
    "22B": (59.25, 39.56, 29.25, 9.56, 4.50), "175B": (51.75, 32.06, 29.25, 9.56, 4.50),
    "530B": (86.13, 50.24, 53.32, 17.43, 8.20), "1T": (131.25, 76.56, 81.25, 26.56, 12.50),
}
MODES = ((False, Recompute.NONE), (True, Recompute.NONE), (False, Recompute.SELECTIVE),
         (True, Recompute.SELECTIVE), (False, Recompute.FULL))


def layer(a, h, t, b, sp, rc, s=S):
    return A.per_layer_bytes(s=s, b=b, h=h, a=a, q=h, kv=h, f=4 * h, n=2, e=2, M=1, D=1, t=t, c=1, sp=sp, recompute=rc)


def paper_table2(a, h, t, b, sp, rc, s=S) -> Fraction:
    sbh = s * b * h
    if rc is Recompute.FULL:
        return Fraction(2 * sbh)
    core = 0 if rc is Recompute.SELECTIVE else Fraction(5 * a * s, h * t)
    if sp:
        return sbh * (Fraction(34, t) + core)
    return sbh * (10 + Fraction(24, t) + core)


@pytest.mark.parametrize("model", TABLE3)
@pytest.mark.parametrize("mode", range(5))
def test_table2_per_layer_exact(model, mode):
    a, h, L, t, p, b = TABLE3[model]
    sp, rc = MODES[mode]
    assert layer(a, h, t, b, sp, rc) == paper_table2(a, h, t, b, sp, rc)   # exact: shapes divide by t


@pytest.mark.parametrize("model", TABLE3)
@pytest.mark.parametrize("mode", range(5))
def test_table3_first_stage_gib(model, mode):
    a, h, L, t, p, b = TABLE3[model]
    sp, rc = MODES[mode]
    chunks = A.chunks_in_flight(p=p, v=1, r=0, m=10**6)    # p micro-batches in flight on the first stage
    first_stage = layer(a, h, t, b, sp, rc) * (L // p) * chunks   # every Table 3 L divides by p
    assert first_stage / GiB == pytest.approx(CHECK_GIB[model][mode], abs=0.005)


def test_one_layer_no_parallelism_eq1():
    """Eq. 1: sbh(34 + 5as/h). GPT-3 175B, b = 1: 5as/h = 80, 2048*12288*114 = 2,868,903,936 B."""
    assert layer(96, 12288, 1, 1, False, Recompute.NONE) == 2_868_903_936


@pytest.mark.parametrize(("p", "v", "factor"), [(8, 3, Fraction(31, 24)), (35, 3, Fraction(139, 105))])
def test_interleaved_first_stage_factor(p, v, factor):
    """Sec. 4.2.3: interleaving multiplies Eq. 5/6 by 1 + (p-1)/(p*m), m = interleaving stages:
    1 + 7/24 = 1.292 (p = 8) and 1 + 34/105 = 1.324 (p = 35)."""
    chunks = A.chunks_in_flight(p=p, v=v, r=0, m=10**6)
    assert Fraction(chunks, p * v) == factor            # layers held / L
    assert float(factor) == pytest.approx({8: 1.292, 35: 1.324}[p], abs=5e-4)


def test_selective_saving_section5():
    """Sec. 5: selective recompute saves 70% (175B, 5as/h = 80) and 65% (530B, 64) of activations."""
    for a, h, saved in ((96, 12288, 0.70), (128, 20480, 0.65)):
        none, selective = layer(a, h, 1, 1, False, Recompute.NONE), layer(a, h, 1, 1, False, Recompute.SELECTIVE)
        assert 1 - selective / none == pytest.approx(saved, abs=0.005)


def test_section_4_3_extras():
    """Sec. 4.3 (SP, p micro-batches): embedding dropout sbhp/t on the first stage; with p = 1,
    final LN 2sbh/t + output-projection input 2sbh/t + fp32 logits 4sbv/t. 22B settings."""
    a, h, L, t, p, b = TABLE3["22B"]
    emb = A.embedding_bytes(s=S, b=b, h=h, M=1, D=1, t=t, c=1, sp=True, n_mb=p)
    assert emb == S * b * h * p // t + 8 * S * b * p            # + int64 token ids (Megatron-LM)
    out = A.output_bytes(s=S, b=b, h=h, V=51200, e=2, t=t, c=1, sp=True)
    assert out == 4 * S * b * h // t * (1 + Fraction(51200, h))  # 4sbh/t * (1 + v/h)


def test_full_recompute_with_sp_keeps_the_sharded_input():
    """Table 2's 2sbh is full recompute without SP. Under SP the layer input itself is
    sequence-sharded (s/t x b x h, Sec. 4.2.2), so checkpointing it keeps 2sbh/t."""
    assert layer(96, 12288, 8, 1, True, Recompute.FULL) == 2 * S * 12288 // 8
