"""[narayanan] Eq. 1, 3, 4, Sec. 2.2 bubble, Sec. 3.1 micro-batches, Sec. 3.2 / 4.1 traffic.

Formula reproductions: exact where the paper's inputs determine the number, otherwise to
the rounding the paper prints (REFERENCE.md 2.2).
"""
import pytest

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.counts import params as P
from fitplan.memory.breakdown import Setup
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, Recompute, TrainingSpec
from fitplan.timing import compute as C
from fitplan.timing import evaluate_step
from fitplan.timing import pipeline as PL
from fitplan.timing import traffic as T

DAY_S = 86_400


def test_eq4_gpt3_34_days():
    """GPT-3: P = 175e9, T = 300e9 tokens, n = 1024 GPUs, X = 140 TFLOP/s per GPU:
    8*T*P/(n*X) = 2.93e6 s = 33.9 days; the paper says 34 days."""
    days = C.training_time_s(T=300e9, P=175e9, n=1024, X=140e12) / DAY_S
    assert days == pytest.approx(33.9, abs=0.05)
    assert round(days) == 34


def test_eq4_1t_84_days():
    """1T model: T = 450e9, n = 3072, X = 163 TFLOP/s. The '1T' model has P = 1.008e12
    parameters by Eq. 2 (l = 128, h = 25600, V = 51200, s = 2048; Table 1 prints 1008B):
    83.9 days, the paper's 84. With P = 1e12 flat it would be 83.2."""
    p = P.narayanan_eq2(l=128, h=25600, V=51200, s=2048)
    assert p == pytest.approx(1.008e12, rel=5e-4)
    days = C.training_time_s(T=450e9, P=p, n=3072, X=163e12) / DAY_S
    assert round(days) == 84
    assert C.training_time_s(T=450e9, P=1e12, n=3072, X=163e12) / DAY_S == pytest.approx(83.2, abs=0.05)


@pytest.mark.parametrize(("B", "l", "h"), [(1536, 96, 12288), (3072, 128, 25600)], ids=["GPT-3", "1T"])
def test_eq3_is_full_recompute_hardware_flops(B, l, h):
    """Eq. 3 = 4 forward passes per layer (forward, backward x2, recompute) + 3 x logits."""
    s, V = 2048, 51200
    lin = F.matmul_flops(B=B, s=s, P=12 * h * h)   # GPT layer: 12h^2 weights
    core = F.attention_core_flops(B=B, s=s, q=h)
    fwd = F.forward_flops(L=l, F_linear=lin, F_core=core, F_logits=F.logits_flops(B=B, s=s, h=h, V=V))
    rec = F.recompute_flops(L=l, F_linear=lin, F_core=core, recompute=Recompute.FULL)
    hw = F.hardware_flops(F_forward=fwd, F_backward=F.backward_flops(F_forward=fwd, F_recompute=rec))
    assert hw == F.narayanan_eq3(B=B, s=s, l=l, h=h, V=V)


@pytest.mark.parametrize(("p", "m", "v", "fraction"), [
    (8, 64, 1, 7 / 64), (8, 64, 3, 7 / 192), (35, 280, 3, 34 / 840), (64, 512, 1, 63 / 512), (1, 16, 1, 0.0),
])
def test_bubble_fractions(p, m, v, fraction):
    """Sec. 2.2.1: (p - 1)/m; Sec. 2.2.2: interleaving with v chunks divides it by v."""
    assert PL.bubble_fraction_interleaved(p=p, m=m, v=v) == pytest.approx(fraction)
    if v == 1:   # 1F1B is the v = 1 case: (p - 1)/m
        assert PL.bubble_fraction_interleaved(p=p, m=m, v=1) == (p - 1) / m


def test_eq1_step_without_communication():
    """Eq. 1: (m + p - 1)*(t_f + t_b) for 1F1B; our compute + bubble is the same."""
    m, p, t_f, t_b = 12, 4, 0.3, 0.7
    compute = PL.microbatches_s(m=m, T_f=t_f, T_b=t_b)
    bubble = PL.bubble_s(fraction=PL.bubble_fraction_interleaved(p=p, m=m, v=1), T_busy=compute)
    assert compute + bubble == pytest.approx((m + p - 1) * (t_f + t_b))


def test_sec31_microbatches():
    """Sec. 3.1: m = B/(b*d)."""
    assert PL.num_microbatches(B=1536, b=2, d=48, p=8) == 16


def test_sec41_pipeline_message_is_bsh_over_t():
    """Sec. 4.1, scatter/gather optimisation: b*s*h/t elements per stage boundary."""
    assert T.pp_message_bytes(b=1, s=2048, h=12288, e=2, t=8, c=1) == 2 * 2048 * 12288 // 8


def test_achieved_tflops_is_eq3_over_time_and_gpus():
    """Narayanan count achieved FLOP/s with Eq. 3 (full recompute); so does fitplan's
    tflops_per_gpu: hardware FLOPs / (step time * n), for a full-recompute GPT-3 config."""
    model = presets.model("gpt3-175b").model
    setup = Setup(model=model, training=TrainingSpec(seq_len=2048, recipe=presets.recipe("mixed-adam"),
                                                     global_batch=64),
                  cluster=ClusterSpec(gpu=presets.gpu("a100-80gb"), num_gpus=64, gpus_per_node=8, reserve_bytes=0))
    r = evaluate_step(setup, ParallelConfig(tp=8, pp=8, recompute=Recompute.FULL))
    eq3 = F.narayanan_eq3(B=64, s=2048, l=96, h=12288, V=model.vocab_size)
    assert r.tflops_per_gpu * 1e12 == pytest.approx(eq3 / (r.step_time_s * 64), rel=1e-12)


def test_tp_traffic_per_layer_is_8bsh_times_t_minus_1_over_t():
    """Sec. 3.2: 8*b*s*h*(t-1)/t per layer per device per micro-batch. One layer, one
    micro-batch: m = 1, and the step's tp bytes divided by the stage's layers."""
    model = ModelSpec(name="gpt", num_layers=8, hidden_size=4096, num_heads=32, num_kv_heads=32,
                      ffn_hidden_size=16384, vocab_size=51200, max_seq_len=2048)
    setup = Setup(model=model, training=TrainingSpec(seq_len=2048, recipe=presets.recipe("mixed-adam"),
                                                     global_batch=2),
                  cluster=ClusterSpec(gpu=presets.gpu("a100-80gb"), num_gpus=8, gpus_per_node=8, reserve_bytes=0))
    r = evaluate_step(setup, ParallelConfig(tp=4, pp=2, micro_batch=2))
    b, s, h, t, e, layers = 2, 2048, 4096, 4, 2, 4
    assert r.num_microbatches == 1
    assert r.comm["tp"].bytes_per_step / layers == pytest.approx(8 * b * s * h * (t - 1) / t * e)
