"""[korthikanti] App. A FLOPs, Sec. 5 recompute overhead, Table 5 MFU/HFU and iteration times.

Settings from Table 3 (REFERENCE.md 1.6): s = 2048, v = 51200, A100 peak 312 TFLOP/s,
tp = 8, no data parallelism, SP + selective recompute ("present work"), interleaving
with 3 chunks for 175B and 530B. Two kinds of test, kept apart:
  formula reproductions   exact, or to the rounding the paper prints;
  predicted vs measured   fitplan's step model against Table 5's times, with wide,
                          written-down bands (no tuning to these rows).
"""
import dataclasses

import pytest

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.memory.breakdown import Setup
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, Recompute, TrainingSpec
from fitplan.timing import compute as C
from fitplan.timing import evaluate_step
from fitplan.timing.uncertainty import band

S, V, PEAK = 2048, 51200, 312e12
#        name    a    h      L   t  p   B    b  v  full_s  sel_s  MFU%  HFU%  MFU check  HFU check
TABLE5 = [
    ("22B", 64, 6144, 48, 8, 1, 4, 4, 1, 1.42, 1.10, 41.5, 43.7, 41.65, 43.81),
    ("175B", 96, 12288, 96, 8, 8, 64, 1, 3, 18.13, 13.75, 51.4, 52.8, 51.39, 52.77),
    ("530B", 128, 20480, 105, 8, 35, 280, 1, 3, 49.05, 37.83, 56.0, 57.0, 56.05, 56.96),
    ("1T", 160, 25600, 128, 8, 64, 512, 1, 1, 94.42, 71.49, 56.3, 57.0, 56.27, 57.01),
]
IDS = [row[0] for row in TABLE5]


def _utilisation(flops, time_s, n):
    return 100 * C.flops_utilisation(F=flops, T_step=time_s, N=n, peak=PEAK)


def _time_rounding(time_s, value_pct):
    """Table 5 prints times to 0.01 s: +-0.005 s moves a utilisation by value * 0.005/time."""
    return value_pct * 0.005 / time_s


@pytest.mark.parametrize("row", TABLE5, ids=IDS)
def test_table5_mfu_from_eq7(row):
    """MFU = Eq. 7 / (time * N * 312 TFLOP/s), B = global batch, N = t*p. Matches the check
    table of REFERENCE.md 1.9 (printed to 0.01 points) and the paper's MFU to its 0.05-point
    rounding plus what the 0.01 s rounding of the time allows."""
    name, a, h, L, t, p, B, b, v, full_s, sel_s, mfu, hfu, mfu_check, hfu_check = row
    got = _utilisation(F.korthikanti_eq7(B=B, L=L, s=S, h=h, V=V), sel_s, t * p)
    assert got == pytest.approx(mfu_check, abs=0.005)
    assert got == pytest.approx(mfu, abs=0.05 + _time_rounding(sel_s, mfu))


@pytest.mark.parametrize("row", TABLE5, ids=IDS)
def test_table5_hfu_follows_printed_eq8(row):
    """Arithmetic check, not fitplan's model: the published HFU values follow Eq. 8 *as
    printed* (factor 1 + s/(3h)), which adds 12Bs^2h per layer to Eq. 7, three times the
    4Bs^2h that rerunning the two attention GEMMs costs. So do the ratios HFU/MFU ~ 1 + s/(6h) (Eq. 9). fitplan's
    hardware_flops uses the derived 1 + 2s/(9h) instead (see the next test)."""
    name, a, h, L, t, p, B, b, v, full_s, sel_s, mfu, hfu, mfu_check, hfu_check = row
    got = _utilisation(F.korthikanti_eq8_printed(B=B, L=L, s=S, h=h, V=V), sel_s, t * p)
    assert got == pytest.approx(hfu_check, abs=0.005)
    assert got == pytest.approx(hfu, abs=0.05 + _time_rounding(sel_s, hfu))
    assert hfu / mfu == pytest.approx(1 + S / (6 * h), abs=0.003)       # Eq. 9, to the printed digits


@pytest.mark.parametrize("row", TABLE5, ids=IDS)
def test_derived_hfu_is_below_the_published(row):
    """fitplan's hardware FLOPs: Eq. 7 + 4Bs^2h per layer (the recomputed attention core)."""
    name, a, h, L, t, p, B, b, v, full_s, sel_s, mfu, hfu, mfu_check, hfu_check = row
    fwd = F.forward_flops(L=L, F_linear=F.matmul_flops(B=B, s=S, P=12 * h * h),
                          F_core=F.attention_core_flops(B=B, s=S, q=h), F_logits=F.logits_flops(B=B, s=S, h=h, V=V))
    assert F.model_flops(F_forward=fwd) == F.korthikanti_eq7(B=B, L=L, s=S, h=h, V=V)
    rec = F.recompute_flops(L=L, F_linear=0, F_core=F.attention_core_flops(B=B, s=S, q=h),
                            recompute=Recompute.SELECTIVE)
    hw = F.hardware_flops(F_forward=fwd, F_backward=F.backward_flops(F_forward=fwd, F_recompute=rec))
    derived = _utilisation(hw, sel_s, t * p)
    assert mfu_check < derived < hfu_check
    # Eq. 8 printed adds 12BLs^2h to Eq. 7, the derived count 4BLs^2h: the gap is 8BLs^2h
    gap = _utilisation(F.korthikanti_eq8_printed(B=B, L=L, s=S, h=h, V=V) - hw, sel_s, t * p)
    assert gap == pytest.approx(_utilisation(8 * B * L * S * S * h, sel_s, t * p))


@pytest.mark.parametrize(("h", "published"), [(12288, 0.027), (20480, 0.016)], ids=["GPT-3", "MT-NLG"])
def test_selective_recompute_overhead(h, published):
    """Sec. 5: 2.7% (GPT-3 175B) and 1.6% (MT-NLG 530B) FLOPs overhead. The recomputed
    attention core over a layer's forward, 4s^2h/(24sh^2 + 4s^2h) = 2.70% and 1.64%,
    matches to the printed 0.1 point (REFERENCE.md 1.5)."""
    lin = F.matmul_flops(B=1, s=S, P=12 * h * h)   # GPT layer: 12h^2 weights
    core = F.attention_core_flops(B=1, s=S, q=h)
    extra = F.recompute_flops(L=1, F_linear=lin, F_core=core, recompute=Recompute.SELECTIVE)
    assert extra / F.forward_flops(L=1, F_linear=lin, F_core=core, F_logits=0) == pytest.approx(published, abs=0.0005)


def test_sec63_data_parallel_mfu():
    """Sec. 6.3: 530B on 2240 GPUs (dp = 8, B = 8 * 280), 39.15 s per iteration: MFU 54.2%."""
    got = _utilisation(F.korthikanti_eq7(B=2240, L=105, s=S, h=20480, V=V), 39.15, 2240)
    assert got == pytest.approx(54.2, abs=0.05 + _time_rounding(39.15, 54.2))


def _setup(row):
    name, a, h, L, t, p, B, *_ = row
    model = ModelSpec(name=name, num_layers=L, hidden_size=h, num_heads=a, num_kv_heads=a, ffn_hidden_size=4 * h,
                      vocab_size=V, max_seq_len=S)
    return Setup(model=model, training=TrainingSpec(seq_len=S, recipe=presets.recipe("mixed-adam"), global_batch=B),
                 cluster=ClusterSpec(gpu=presets.gpu("a100-80gb"), num_gpus=t * p, gpus_per_node=8, reserve_bytes=0))


def _config(row, recompute, sp):
    t, p, b, v = row[4], row[5], row[7], row[8]
    return ParallelConfig(tp=t, pp=p, micro_batch=b, virtual_stages=v, sequence_parallel=sp, recompute=recompute)


# Since the end-to-end calibration (docs/calibration.md) these eight Table 5 times are part of the set the
# constants are fitted on (bench/calibration/papers.toml), with Narayanan Table 1 the only A100 rows in it;
# the Hopper and Blackwell tables outnumber them 16 to 1, so the fit does not bend to them: the model comes
# out 2-13% fast on them (bench/fidelity.py prints each row). What it leaves out for these rows: the
# present-work rows pay SP's all-gathers repeated in the backward and the slower RS + AG pair (Sec. 6.2),
# the full-recompute rows save the backward all-reduce overlapped with the weight-gradient GEMM (Sec. 6.2).
# The assertions: each published time inside the 80% band fitplan prints around its prediction, and the
# measured speed-up's size and direction.


@pytest.mark.parametrize("row", TABLE5, ids=IDS)
def test_predicted_speedup_of_selective_over_full_recompute(row):
    """Predicted vs measured, Table 5 "throughput increase" (full / present-work time):
    1.291, 1.319, 1.297, 1.321; fitplan predicts 1.33-1.35 at the shipped constants (the reasons
    above). Asserted: selective recompute with SP saves between a fifth and 2/7 of the full-recompute
    step, in the paper and in the model."""
    setup = _setup(row)
    full = evaluate_step(setup, _config(row, Recompute.FULL, sp=False)).step_time_s
    present = evaluate_step(setup, _config(row, Recompute.SELECTIVE, sp=True)).step_time_s
    assert 1.25 < full / present < 1.40 and 1.25 < row[9] / row[10] < 1.40


@pytest.mark.parametrize("row", TABLE5, ids=IDS)
def test_published_times_fall_inside_the_printed_band(row):
    """Predicted vs published, Table 5 with the a100-80gb preset, both recompute settings: each published
    time lies inside the 80% band fitplan prints (time.uncertainty: the dense runs' cross-validated errors'
    10%/90% quantiles, fitplan.timing.fitted.BAND), and the model's MFU is above the published (it runs
    fast on these rows) by less than the band's upper factor."""
    for recompute, sp, published in ((Recompute.SELECTIVE, True, row[10]), (Recompute.FULL, False, row[9])):
        setup = _setup(row)
        r = evaluate_step(setup, _config(row, recompute, sp=sp))
        b = band(setup, r.step_time_s)
        assert b.low_s < published < b.high_s, (recompute, r.step_time_s, published)
    assert row[11] < 100 * evaluate_step(_setup(row), _config(row, Recompute.SELECTIVE, sp=True)).mfu \
        < row[11] * b.high_s / r.step_time_s


def test_sec63_data_parallel_cost_is_underpredicted():
    """Predicted vs measured, Sec. 6.3: 8-way DP of the 530B model, gradient all-reduce not
    overlapped, raises the iteration from 37.83 s to 39.15 s (+1.32 s). fitplan, with fp32
    main gradients (megatron-fp32-grad, Megatron-LM's default then) and --no-overlap-grad-reduce,
    predicts about +1.0 s at the shipped constants: 315 buckets of 25 MiB (8.24 GB of fp32 gradients
    per GPU) all-reduced over 8 ranks on 8 nodes, one HDR NIC each at NCCL's 24 of 25 GB/s times the
    fitted comm_efficiency: per bucket 1.75 x 26.2 MB / 24 GB/s = 1.91 ms of bandwidth at efficiency 1,
    (8.4 + 14 x 14) x 1.4 = 286 us of ring latency, and the fitted per-collective overhead; the straggler
    term grows with the 8x more GPUs. It leaves out the embedding all-reduce and data-parallel
    synchronisation skew. Band: between 0.3x and 1x of the measured increase."""
    row = TABLE5[2]
    times = []
    for dp in (1, 8):
        name, a, h, L, t, p, B, *_ = row
        setup = _setup(row)
        setup = dataclasses.replace(
            setup, training=TrainingSpec(seq_len=S, recipe=presets.recipe("megatron-fp32-grad"), global_batch=B * dp),
            cluster=dataclasses.replace(setup.cluster, num_gpus=t * p * dp))
        config = dataclasses.replace(_config(row, Recompute.SELECTIVE, sp=True), dp=dp)
        times.append(evaluate_step(setup, dataclasses.replace(config, overlap_grad_reduce=False)).step_time_s)
    increase = times[1] - times[0]
    assert 0.3 * 1.32 < increase < 1.32
