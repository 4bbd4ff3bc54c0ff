"""fitplan.timing.step: the assembler, scalar (Trace) and vectorized (RAW) paths agree;
parts add up; hand-derived single-GPU case; fp8 peak; link tiers; monotonicity."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.errors import SpecError
from fitplan.explain import RAW
from fitplan.memory.breakdown import Setup
from fitplan.specs import ClusterSpec, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.timing import calibration as CAL
from fitplan.timing import evaluate_step, step_time
from fitplan.timing.step import PARTS
from fitplan.specs.parallel import SETTINGS

SETTING_DEFAULTS = {name: getattr(ParallelConfig(), name) for name in SETTINGS}


def _setup(model="llama3.1-8b", gpu="h100-80gb", num_gpus=64, seq_len=4096, global_batch=256,
           recipe="mixed-adam", **gpu_changes):
    g = dataclasses.replace(presets.gpu(gpu), **gpu_changes) if gpu_changes else presets.gpu(gpu)
    return Setup(model=presets.model(model).model,
                 training=TrainingSpec(seq_len=seq_len, recipe=presets.recipe(recipe), global_batch=global_batch),
                 cluster=ClusterSpec(gpu=g, num_gpus=num_gpus, gpus_per_node=8, reserve_bytes=0))


CONFIGS = [dict(tp=1, pp=1, dp=64, cp=1, micro_batch=1, virtual_stages=1),
           dict(tp=8, pp=1, dp=8, cp=1, micro_batch=2, virtual_stages=1),
           dict(tp=2, pp=2, dp=8, cp=2, micro_batch=1, virtual_stages=2),
           dict(tp=4, pp=4, dp=4, cp=1, micro_batch=1, virtual_stages=1),
           dict(tp=2, pp=8, dp=4, cp=1, micro_batch=1, virtual_stages=4)]


OVERLAPS = [{}, dict(overlap_grad_reduce=False, overlap_param_gather=False, cp_comm_overlap=False),
            dict(overlap_param_gather=True, tp_comm_overlap=True),
            dict(reshard_after_forward=False, overlap_grad_reduce=False, tp_comm_overlap=True)]


@pytest.mark.parametrize("zero", list(ZeroStage))
@pytest.mark.parametrize("recompute", list(Recompute))
@pytest.mark.parametrize("overlap", OVERLAPS, ids=lambda o: ",".join(o) or "defaults")
def test_raw_arrays_equal_scalar_evaluation(zero, recompute, overlap):
    if overlap.get("reshard_after_forward") is False and zero != ZeroStage.OS_G_P:
        return   # keeping gathered weights is ZeRO-3's
    setup = _setup()
    arrays = {k: np.array([c[k] for c in CONFIGS]) for k in CONFIGS[0]}
    grid = SimpleNamespace(**arrays, **{**SETTING_DEFAULTS, **overlap}, ep=1, zero=zero, sequence_parallel=True,
                           recompute=recompute)
    out = step_time(RAW, setup, grid)
    for i, c in enumerate(CONFIGS):
        one = evaluate_step(setup, ParallelConfig(zero=zero, recompute=recompute, sequence_parallel=True, **c,
                                                  **overlap))
        assert out["time/step"][i] == pytest.approx(one.step_time_s, rel=1e-12)
        for key in PARTS:
            assert out[key][i] == pytest.approx(one.parts[key], rel=1e-12, abs=1e-15)
        for axis, comm in one.comm.items():
            assert out[f"comm/{axis}_bytes"][i] == pytest.approx(comm.bytes_per_step, rel=1e-12)
            assert bool(out[f"link/{axis}_intra"][i]) is comm.intra_node
        assert out["ratio/mfu"][i] == pytest.approx(one.mfu, rel=1e-12)


@pytest.mark.parametrize("c", CONFIGS)
def test_parts_add_up_and_shares_sum_to_one(c):
    r = evaluate_step(_setup(), ParallelConfig(zero=ZeroStage.OS, recompute=Recompute.SELECTIVE, **c))
    assert sum(r.parts.values()) == pytest.approx(r.step_time_s, rel=1e-12)
    assert sum(r.shares.values()) == pytest.approx(1.0)
    assert all(v >= 0 for v in r.parts.values())
    assert r.hfu >= r.mfu > 0


@pytest.mark.parametrize("c", CONFIGS)
def test_the_terms_recorded_when_read_are_the_untraced_step(c):
    """evaluate_step times the step untraced and records its Terms only when .terms is read, by timing it again
    with a Trace (fitplan.timing.breakdown): the recorded values are the ones the breakdown holds, exactly."""
    r = evaluate_step(_setup(), ParallelConfig(zero=ZeroStage.OS, recompute=Recompute.SELECTIVE, **c))
    term = {t.key: t.value for t in r.terms}
    assert term["time/step"] == r.step_time_s and term["rate/tokens"] == r.tokens_per_s
    assert term["pipeline/bubble_fraction"] == r.bubble_fraction and term["ratio/mfu"] == r.mfu
    assert r.terms == r.terms and len(r.terms) > 50   # the same record each time it is read


def test_single_gpu_step_is_compute_and_the_optimizer():
    """One GPU, no parallelism: nothing to communicate, no bubble; the step is m = 4 micro-batches
    of forward and backward (fitplan.timing.gemm's per-GEMM times: tests/unit/test_gemm.py) and
    the optimizer step. MFU and TFLOP/s divide the FLOPs by that step."""
    setup = _setup(model="gpt3-125m", num_gpus=1, seq_len=2048, global_batch=8)
    r = evaluate_step(setup, ParallelConfig(micro_batch=2, recompute=Recompute.FULL))
    term = {t.key: t.value for t in r.terms}
    hw = F.narayanan_eq3(B=8, s=2048, l=12, h=768, V=50257)   # full recompute, GPT shapes: Eq. 3
    assert r.num_microbatches == 4
    assert r.parts["time/compute"] == pytest.approx(4 * (term["time/forward_microbatch"]
                                                         + term["time/backward_microbatch"]), rel=1e-12)
    assert r.step_time_s == pytest.approx(r.parts["time/compute"] + r.parts["time/optimizer"], rel=1e-12)
    assert r.mfu == pytest.approx(F.korthikanti_eq7(B=8, L=12, s=2048, h=768, V=50257) / (r.step_time_s * 989e12))
    assert r.tokens_per_s == pytest.approx(8 * 2048 / r.step_time_s)
    assert r.tflops_per_gpu == pytest.approx(hw / r.step_time_s / 1e12)


def test_fp8_uses_fp8_peak_and_needs_one():
    """Only the layers' linears run at the fp8 rate (tests/unit/test_gemm.py derives them): the
    pass is faster, but by less than the peak ratio of 2."""
    bf16 = evaluate_step(_setup(num_gpus=8), ParallelConfig(tp=8))
    fp8 = evaluate_step(_setup(num_gpus=8, recipe="fp8"), ParallelConfig(tp=8))
    ratio = bf16.parts["time/compute"] / fp8.parts["time/compute"]
    assert 1 < ratio < 2
    linear = {t.key: t.value for t in fp8.terms}
    clock = CAL.of_setup(_setup(num_gpus=8)).clock   # the sustained clock (docs/calibration.md)
    assert linear["ratio/gemm_ceiling_fp8"] == pytest.approx(presets.gpu("h100-80gb").efficiency_fp8 * clock)
    with pytest.raises(SpecError) as err:
        evaluate_step(_setup(gpu="a100-80gb", num_gpus=8, recipe="fp8"), ParallelConfig(tp=8))
    message = str(err.value)
    assert "a100-80gb" in message and "\n" not in message and "bf16" in message


def test_default_microbatches_without_global_batch():
    r = evaluate_step(_setup(global_batch=None), ParallelConfig(tp=2, pp=4, dp=8, virtual_stages=2))
    assert r.num_microbatches == 16                                # 4*p, fitplan's default
    assert r.bubble_fraction == pytest.approx(3 / (2 * 16))        # (p - 1)/(v*m)


def test_links_and_bytes_per_axis():
    r = evaluate_step(_setup(), ParallelConfig(tp=8, pp=2, dp=4))
    assert r.comm["tp"].intra_node and r.comm["tp"].link == "NVLink 4"
    assert not r.comm["pp"].intra_node and r.comm["pp"].link == "InfiniBand NDR 400 Gb/s"
    assert not r.comm["dp"].intra_node and r.comm["dp"].degree == 4
    assert r.comm["cp"].bytes_per_step == 0
    # pp: 2 sends per micro-batch of b*s*h*e/t bytes; m = 256/(4*1) = 64
    assert r.comm["pp"].bytes_per_step == 2 * 64 * (4096 * 4096 * 2 // 8)


def test_sequence_parallel_keeps_tp_cost_full_recompute_adds_half():
    """Sequence parallel sends the same bytes as a reduce-scatter and an all-gather: two NCCL
    calls per exchange instead of one all-reduce, so one more base latency (ring/Simple 8.4 us, over the
    fitted comm_efficiency) and one more framework overhead per call (collective_overhead; both fitted end to
    end: docs/calibration.md) for each of the m*L*4 = 32*16*4 = 2,048 exchanges."""
    setup, base = _setup(), dict(tp=4, pp=2, dp=8)
    plain = evaluate_step(setup, ParallelConfig(**base))
    sp = evaluate_step(setup, ParallelConfig(sequence_parallel=True, **base))
    full = evaluate_step(setup, ParallelConfig(recompute=Recompute.FULL, **base))
    assert sp.comm["tp"].bytes_per_step == plain.comm["tp"].bytes_per_step
    k = CAL.of_setup(setup)
    assert sp.parts["time/tp_exposed"] == pytest.approx(plain.parts["time/tp_exposed"] + 2048 * (
        8.4e-6 / k.comm_efficiency + k.collective_overhead_s))
    assert full.comm["tp"].bytes_per_step == pytest.approx(1.5 * plain.comm["tp"].bytes_per_step)   # 6 vs 4


def test_more_bandwidth_never_slower_and_bigger_bubble_never_faster():
    cfgs = [ParallelConfig(zero=z, recompute=Recompute.SELECTIVE, **c) for c in CONFIGS for z in ZeroStage]
    slow, fast = _setup(), _setup(inter_node=dataclasses.replace(presets.gpu("h100-80gb").inter_node,
                                                                  bytes_per_s=500e9))
    cut = _setup(inter_node=dataclasses.replace(presets.gpu("h100-80gb").inter_node, bytes_per_s=5e9))
    for cfg in cfgs:
        assert evaluate_step(fast, cfg).step_time_s <= evaluate_step(slow, cfg).step_time_s
        assert evaluate_step(cut, cfg).step_time_s >= evaluate_step(slow, cfg).step_time_s
    cfg = ParallelConfig(tp=2, pp=8, dp=4)
    times = [evaluate_step(_setup(global_batch=gb), cfg).step_time_s / gb for gb in (32, 64, 128, 256)]
    assert times == sorted(times, reverse=True)   # per-sequence time falls as the bubble (p-1)/m shrinks


def test_no_overlap_exposes_every_gradient_bucket():
    """--no-overlap-grad-reduce: the gradient all-reduce is all exposed; on (the default) only the
    last 25 MiB bucket is, the backward being longer than the reduction."""
    setup, cfg = _setup(), ParallelConfig(dp=64, zero=ZeroStage.NONE)
    hidden = evaluate_step(setup, cfg)
    exposed = evaluate_step(setup, dataclasses.replace(cfg, overlap_grad_reduce=False))
    red = next(t for t in exposed.terms if t.key == "comm/dp_grad_reduction_s")
    assert exposed.parts["time/dp_exposed"] == pytest.approx(red.value)
    assert hidden.parts["time/dp_exposed"] == pytest.approx(red.value / dict(red.inputs)["count"])


def test_interleaving_hides_the_gradient_reduction_behind_the_later_chunks():
    """Llama 3.1 70B at 1K tokens, tp 8, pp 4 (the pacing stage is rank 3), dp 2 across nodes, 16 micro-batches:
    the stage's gradient reduction outlasts one micro-batch's backward, so without interleaving the excess is
    exposed. With v = 5 chunks per rank each chunk's reduction also hides behind the later chunks' backwards over
    the last group of 4 micro-batches, (1 + 4*4 - 3)/5 = 2.8 backwards (traffic.dp_overlap_window_s), and what
    sticks out is the last chunk's fifth, launched after the last backward."""
    setup = _setup(model="llama3.1-70b", seq_len=1024, global_batch=32)
    base = ParallelConfig(tp=8, pp=4, dp=2, zero=ZeroStage.OS)
    exposed = {}
    for v, slots in ((1, 1.0), (5, 2.8)):
        terms = {t.key: t for t in evaluate_step(setup, dataclasses.replace(base, virtual_stages=v)).terms}
        window, red = terms["time/dp_grad_window"], terms["comm/dp_grad_reduction_s"]
        T_b = terms["time/backward_microbatch"].value
        assert dict(window.inputs)["r"] == 3
        assert window.value == pytest.approx(slots * T_b)
        exposed[v] = terms["time/dp_grad_exposed"].value
    assert red.value > T_b   # the case: one backward cannot hide the reduction
    assert exposed[1] == pytest.approx(red.value - T_b)
    assert exposed[5] == pytest.approx(red.value / 5) and exposed[5] < exposed[1]


def test_interleaving_hides_the_pipeline_sends_but_the_fill_and_drain():
    """Llama 3.1 70B at 1K tokens, tp 8, pp 4, dp 2, 16 micro-batches. One chunk per rank: the batched sends
    block, every one exposed (time/pp_exposed is comm/pp_s). v = 5: Megatron-Core's overlap_p2p_comm posts them
    behind the 16 micro-batches' passes, and what stays is the fill and drain, 2*(p - 1) = 6 of the 2*m*v = 160
    sends: comm/pp_s*3/80 (traffic.pp_tail_s)."""
    setup = _setup(model="llama3.1-70b", seq_len=1024, global_batch=32)
    base = ParallelConfig(tp=8, pp=4, dp=2, zero=ZeroStage.OS)
    for v in (1, 5):
        terms = {t.key: t for t in evaluate_step(setup, dataclasses.replace(base, virtual_stages=v)).terms}
        sends, exposed = terms["comm/pp_s"].value, terms["time/pp_exposed"].value
        assert terms["comm/pp_sends"].value == 2 * 16 * v
        assert sends > 0
        if v == 1:
            assert exposed == pytest.approx(sends)
        else:
            assert terms["time/pp_window"].value == pytest.approx(
                16 * (terms["time/forward_microbatch"].value + terms["time/backward_microbatch"].value))
            assert exposed == pytest.approx(sends * 3 / 80)


def test_trace_explains_every_part_with_a_source():
    r = evaluate_step(_setup(), ParallelConfig(tp=2, pp=2, dp=8, cp=2, sequence_parallel=True))
    keys = {t.key for t in r.terms}
    assert set(PARTS) <= keys and "time/step" in keys
    assert all(t.cite is not None for t in r.terms)
    tp_count = next(t for t in r.terms if t.key == "comm/tp_collectives")
    assert "reduce-scatter + all-gather" in tp_count.formula and any("exposed" in a for a in tp_count.assumes)


def test_gradient_group_spans_dp_and_cp():
    r = evaluate_step(_setup(num_gpus=8), ParallelConfig(tp=2, cp=2, dp=2))
    assert r.comm["cp"].intra_node and r.comm["dp"].intra_node and r.comm["dp"].degree == 4
    r = evaluate_step(_setup(), ParallelConfig(tp=2, cp=2, dp=16))
    assert r.comm["cp"].intra_node and not r.comm["dp"].intra_node


def test_a_dp_group_over_cp_ranks_is_named_dp_x_cp():
    """With cp > 1 the data-parallel group is dp x cp ranks (gradients and ZeRO shards span the
    cp ranks); the reports name it so, not "dp 8" where dp = 1."""
    from fitplan.report.advice import _links, time_table
    r = evaluate_step(_setup(), ParallelConfig(tp=8, cp=8, dp=1, sequence_parallel=True))
    dp = r.comm["dp"]
    assert dp.degree == 8 and dp.name == "dp x cp"
    assert "dp x cp 8 " in _links(r) and "; dp 8" not in _links(r)
    assert "dp x cp " in time_table([None], [r]).rows[0][-1]
    plain = evaluate_step(_setup(), ParallelConfig(tp=8, dp=8)).comm["dp"]
    assert plain.name == "dp" and plain.degree == 8


def test_zero3_gathers_one_layer_at_a_time_and_pay_what_compute_cannot_hide():
    """llama3.1-70b, 64 H100s, global batch 512, tp=1 pp=8 cp=8 ZeRO-3: m = 512 micro-batches over
    the last stage's 10 layers, whose 9.6e9 bf16 weights (S = 19.2 GB, head included) are
    gathered one layer at a time, S/10 = 1.92 GB per call, over the dp x cp group of 8 inside a
    node (NVLink 4 at NCCL's 0.82 x 450 = 369 GB/s; NCCL's modelled time over the fitted comm_efficiency, plus
    the fitted collective_overhead per call; docs/calibration.md):
      one all-gather = reduce-scatter = (8.4 + 7 x 3.4 us (ring/Simple) + 7/8 x 1.92 GB / 369 GB/s)/eff + a_fw
                     (4.589 ms with eff = 1 and a_fw = 0).
    With pipeline stages the step runs as torch.distributed.pipelining does: gradients sync (and
    the weights reshard) only after the last micro-batch, so the first forward gathers, every
    backward regathers (forward resharded) and the last backward reduce-scatters:
      link time      = L*((1 + m) gathers + 1 reduce-scatter) = 10 x 514 x t_ag;
      bytes          = (m + 2) x 7/8 x S.
    Each prefetch hides behind its neighbour's compute (f: one layer's forward, b: its backward with
    recompute, fitplan.timing.gemm) and only the ends stick out:
      first forward   t_ag + 9 x max(0, t_ag - f)
      last backward   2 t_ag + 9 x max(0, 2 t_ag - b)
      other backwards t_ag + 9 x max(0, t_ag - b)
    The report prints both the link time and what is exposed."""
    from fitplan.report.advice import _links
    setup = _setup(model="llama3.1-70b", seq_len=8192, global_batch=512)
    r = evaluate_step(setup, ParallelConfig(tp=1, pp=8, cp=8, dp=1, zero=ZeroStage.OS_G_P,
                                            recompute=Recompute.SELECTIVE))
    dp, term = r.comm["dp"], {t.key: t.value for t in r.terms}
    S = term["comm/dp_param_message"]                                # psi*w, the larger stage
    assert S == term["comm/dp_grad_message"] == pytest.approx(19.2e9, rel=1e-3)
    assert dp.bytes_per_step == pytest.approx((512 + 2) * 7 / 8 * S)   # 1 + m gathers, 1 reduce-scatter
    k = CAL.of_setup(setup)
    t_ag = (8.4e-6 + 7 * 3.4e-6 + 7 / 8 * S / 10 / (450e9 * 0.82)) / k.comm_efficiency + k.collective_overhead_s
    assert 8.4e-6 + 7 * 3.4e-6 + 7 / 8 * S / 10 / (450e9 * 0.82) == pytest.approx(4.589e-3, rel=1e-3)
    assert term["comm/dp_layer_ag_s"] == pytest.approx(t_ag)
    assert term["comm/dp_layer_rs_s"] == pytest.approx(t_ag)
    assert dp.busy_s == pytest.approx(10 * 514 * t_ag)
    f, b = term["time/layer/forward"], term["time/layer/backward"] + term["time/layer/recompute"]
    fwd, bwd = t_ag + 9 * max(0, t_ag - f), 2 * t_ag + 9 * max(0, 2 * t_ag - b)
    regather = t_ag + 9 * max(0, t_ag - b)
    assert b > 2 * t_ag                                              # the backward hides its gathers
    assert term["time/dp_forward_exposed"] == pytest.approx(fwd)
    assert term["time/dp_backward_exposed"] == pytest.approx(bwd) == pytest.approx(2 * t_ag)
    assert term["time/dp_backward_gather_exposed"] == pytest.approx(regather) == pytest.approx(t_ag)
    assert dp.exposed_s == pytest.approx(fwd + bwd + 511 * regather)
    assert dp.exposed_s < dp.busy_s / 8
    assert "dp x cp 8 inside a node over NVLink 4" in _links(r) and \
        f"{dp.busy_s:.3g} s on the link, {dp.exposed_s:.3g} s of it exposed" in _links(r)
    for axis in r.comm.values():           # what is exposed is part of the link time, never more
        assert axis.exposed_s <= axis.busy_s * (1 + 1e-12)
