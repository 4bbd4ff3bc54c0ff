"""Communication overlap, one flag per kind, each defaulting to its framework's default
(docs/formulas.md#overlap), with the exposed part worked by hand; and the per-layer breakdown
(time.per_layer, docs/formulas.md#per-layer)."""
import dataclasses
import math
import io
import json

import pytest

from fitplan.cli import main
from fitplan.errors import SpecError
from fitplan.specs import ParallelConfig, Recompute, ZeroStage, compat
from fitplan.specs.parallel import Schedule, overlaps_ep_comm, overlaps_param_gather
from fitplan.timing import evaluate_step, per_layer
from tests.conftest import make_setup
from tests.unit.test_step import _setup


def _terms(r):
    return {t.key: t.value for t in r.terms}


def test_defaults_are_the_frameworks():
    """Megatron-Core @d98e8a6: overlap_grad_reduce, overlap_param_gather, tp_comm_overlap,
    overlap_moe_expert_parallel_comm all False; PyTorch DDP and FSDP reduce gradients during the
    backward and FSDP prefetches the next layer's weights; TE's p2p ring attention overlaps;
    DualPipe overlaps the all-to-alls (DeepSeek-V3 Sec. 3.2.1). Where frameworks differ the flag
    follows the framework that runs that layout: DDP/FSDP's grad reduce on, Megatron's param
    gather off for ZeRO-1/2, FSDP's on for ZeRO-3."""
    c = ParallelConfig()
    assert (c.overlap_grad_reduce, c.tp_comm_overlap, c.cp_comm_overlap) == (True, False, True)
    assert [overlaps_param_gather(dataclasses.replace(c, zero=z)) for z in ZeroStage] == [False, False, False, True]
    assert overlaps_param_gather(dataclasses.replace(c, zero=ZeroStage.OS, overlap_param_gather=True))
    assert not overlaps_param_gather(dataclasses.replace(c, zero=ZeroStage.OS_G_P, overlap_param_gather=False))
    assert not overlaps_ep_comm(c) and overlaps_ep_comm(dataclasses.replace(c, schedule=Schedule.DUALPIPE))
    assert not overlaps_ep_comm(dataclasses.replace(c, schedule=Schedule.DUALPIPE, ep_comm_overlap=False))


def test_tp_comm_overlap_by_hand():
    """llama3.1-8b on 8 H100s, tp = 8 with sequence parallel, m = 8 micro-batches of 4,096
    tokens, 32 layers. One exchange is a reduce-scatter and an all-gather of b*s*h*e = 32 MiB
    over NVLink (ring/Simple: (32.2 us + 7/8*33.55 MB/369 GB/s)/comm_efficiency + the framework's
    collective_overhead each; both constants fitted end to end, docs/calibration.md), a = the pair.
    The attention block's linear GEMMs take w_a = 2*4096*(4096*6144 + 4096^2)/8 FLOPs at 989
    TFLOP/s x the layer's sustained linear efficiency (fitplan.timing.gemm: under H100's 0.799
    ceiling times the sustained clock); the MLP's 3*2*4096*4096*14336/8 FLOPs at the same rate.
    Per layer:
      no overlap   4a
      overlap      (a - w_a) forward + (a - 2*w_a) backward
    x m*L = 256; the link time is the same. The step saves the exposed difference, less the SMs the
    hidden traffic takes (sm_sharing per hidden second), times the straggler factor 1 + cv*sqrt(2 ln 8)."""
    from fitplan.timing import calibration as CAL
    setup = _setup(num_gpus=8, global_batch=8)
    k = CAL.of_setup(setup)
    plain = evaluate_step(setup, ParallelConfig(tp=8, sequence_parallel=True))
    over = evaluate_step(setup, ParallelConfig(tp=8, sequence_parallel=True, tp_comm_overlap=True))
    t = _terms(over)
    one = (32.2e-6 + 7 / 8 * 33_554_432 / 369e9) / k.comm_efficiency + k.collective_overhead_s
    assert t["comm/tp_exchange_rs_s"] == pytest.approx(one) == t["comm/tp_exchange_ag_s"]
    a, wa, wm = 2 * one, t["time/layer/attention_linear"], t["time/layer/mlp_linear"]
    eff = t["ratio/linear_efficiency"]
    assert 0.8 * 0.799 * k.clock < eff < 0.799 * k.clock          # the fitted H100 curve, under its ceiling
    assert wa == pytest.approx(2 * 4096 * (4096 * 6144 + 4096**2) / 8 / (989e12 * eff), rel=1e-9)
    assert wm == pytest.approx(3 * 2 * 4096 * 4096 * 14336 / 8 / (989e12 * eff), rel=1e-9)
    assert t["time/tp_layer_exposed"] == pytest.approx((a - wa) + (a - 2 * wa))
    assert over.comm["tp"].exposed_s == pytest.approx(256 * ((a - wa) + (a - 2 * wa)))
    assert plain.comm["tp"].exposed_s == pytest.approx(256 * 4 * a)
    assert over.comm["tp"].busy_s == pytest.approx(plain.comm["tp"].busy_s)
    saved = 256 * (4 * a - (a - wa) - (a - 2 * wa))
    straggle = 1 + k.straggler_cv * math.sqrt(2 * math.log(8))
    assert plain.step_time_s - over.step_time_s == pytest.approx(saved * (1 - k.sm_sharing) * straggle, rel=1e-6)


def test_tp_comm_overlap_needs_sequence_parallel():
    setup = _setup(num_gpus=8)
    with pytest.raises(SpecError, match="--sequence-parallel"):
        compat.require(setup.model, setup.training, setup.cluster, ParallelConfig(tp=8, tp_comm_overlap=True))


def test_no_cp_comm_overlap_exposes_the_ring():
    """cp = 4: with the default the K/V ring hides behind the attention core; without, all of it shows."""
    setup, cfg = _setup(model="llama3.1-8b", num_gpus=8, seq_len=32768, global_batch=8), ParallelConfig(cp=4, tp=2)
    hidden, shown = evaluate_step(setup, cfg), evaluate_step(setup, dataclasses.replace(cfg, cp_comm_overlap=False))
    assert hidden.comm["cp"].exposed_s < shown.comm["cp"].exposed_s == pytest.approx(shown.comm["cp"].busy_s)


def test_dualpipe_hides_the_expert_all_to_alls():
    """DeepSeek-V3 on 2048 GPUs, pp 16, ep 64: under 1F1B the all-to-alls are exposed (Megatron's
    default); DualPipe overlaps them with the other direction's compute (on by default there), and
    --no-overlap-moe-expert-parallel-comm exposes them again; the flag also hides them under 1F1B."""
    setup = make_setup("deepseek-v3", 2048)
    base = ParallelConfig(pp=16, ep=64, dp=128, zero=ZeroStage.OS)
    one_f = evaluate_step(setup, base).comm["ep"]
    assert one_f.exposed_s == pytest.approx(one_f.busy_s) and one_f.busy_s > 0
    dual = evaluate_step(setup, dataclasses.replace(base, schedule=Schedule.DUALPIPE)).comm["ep"]
    assert dual.exposed_s == 0 < dual.busy_s
    off = evaluate_step(setup, dataclasses.replace(base, schedule=Schedule.DUALPIPE, ep_comm_overlap=False))
    assert off.comm["ep"].exposed_s == pytest.approx(off.comm["ep"].busy_s)
    assert evaluate_step(setup, dataclasses.replace(base, ep_comm_overlap=True)).comm["ep"].exposed_s < one_f.exposed_s


def test_zero1_param_gather_during_the_next_forward():
    """ZeRO-1 after the optimizer step all-gathers the updated weights: exposed by default (Megatron's
    --overlap-param-gather off); with it, hidden behind the first micro-batch's forward but for the
    last bucket: max(T_ag - T_f, T_ag/buckets)."""
    setup, cfg = _setup(), ParallelConfig(tp=2, dp=32, zero=ZeroStage.OS)
    off, on = evaluate_step(setup, cfg), evaluate_step(setup, dataclasses.replace(cfg, overlap_param_gather=True))
    t = _terms(on)
    T_ag, T_f = t["comm/dp_param_ag_s"], t["time/forward_microbatch"]
    buckets = dict(next(x for x in on.terms if x.key == "comm/dp_param_ag_s").inputs)["count"]
    assert off.parts["time/dp_after_step"] == pytest.approx(T_ag)
    assert on.parts["time/dp_after_step"] == pytest.approx(max(T_ag - T_f, T_ag / buckets))


def test_zero3_without_prefetch_exposes_every_gather():
    """--no-overlap-param-gather with ZeRO-3: every layer's gather waits. With pipeline stages (pp 8)
    the first forward gathers, every backward regathers and the last reduce-scatters
    (torch.distributed.pipelining): L*(t_ag) + L*t_ag + t_rs overhang once, and L*t_ag for each of
    the other m - 1 backwards."""
    setup = _setup(model="llama3.1-70b", seq_len=8192, global_batch=512)
    cfg = ParallelConfig(tp=1, pp=8, cp=8, dp=1, zero=ZeroStage.OS_G_P, recompute=Recompute.SELECTIVE,
                         overlap_param_gather=False)
    r = evaluate_step(setup, cfg)
    t = _terms(r)
    t_ag, t_rs = t["comm/dp_layer_ag_s"], t["comm/dp_layer_rs_s"]
    f = t["time/layer/forward"]
    b = t["time/layer/backward"] + t["time/layer/recompute"]
    assert t["time/dp_forward_exposed"] == pytest.approx(10 * t_ag)
    assert t["time/dp_backward_exposed"] == pytest.approx(10 * t_ag + t_rs + 9 * max(t_rs - b, 0))
    assert t["time/dp_backward_gather_exposed"] == pytest.approx(10 * t_ag)
    assert f > 0 and r.comm["dp"].exposed_s == pytest.approx(20 * t_ag + t_rs + 9 * max(t_rs - b, 0) + 511 * 10 * t_ag)


def test_flags_reach_the_configuration_from_the_command_line():
    out = io.StringIO()
    code = main(["plan", "--preset", "llama3.1-8b", "--gpus", "16", "--tp", "2", "--sequence-parallel",
                 "--tp-comm-overlap", "--no-overlap-grad-reduce", "--zero", "1", "--overlap-param-gather",
                 "--json"], out=out)
    assert code == 0
    config = json.loads(out.getvalue())["config"]
    assert (config["tp_comm_overlap"], config["overlap_grad_reduce"], config["overlap_param_gather"]) == (True, False,
                                                                                                          True)
    assert config["cp_comm_overlap"] is True and config["ep_comm_overlap"] is False


def test_per_layer_adds_up_to_the_stage():
    """llama3.1-8b, pp = 4 (8 layers each: formulas.md#pipeline-split), tp = 2: a middle
    stage has no embedding or head, so its micro-batch forward is layers x the layer's forward,
    and its backward layers x (backward + recompute). The tp traffic per layer, times m*L, is the
    stage's; the paced stage is the one step_time reports."""
    setup, cfg = _setup(), ParallelConfig(tp=2, pp=4, dp=8, recompute=Recompute.SELECTIVE)
    stages = per_layer(setup, cfg)
    assert [s.layers for s in stages] == [8, 8, 8, 8] and sum(s.paces for s in stages) == 1
    mid = stages[1]
    assert mid.microbatch_forward_s == pytest.approx(mid.layers * mid.forward_s)
    assert mid.microbatch_backward_s == pytest.approx(mid.layers * (mid.backward_s + mid.recompute_s))
    # the GEMMs take twice the forward's time, the memory-bound kernels 1.5 times (gemm.BACKWARD_TRAFFIC)
    assert 1.5 * mid.forward_s < mid.backward_s < 2 * mid.forward_s
    r = evaluate_step(setup, cfg)
    m = r.num_microbatches
    paced = next(s for s in stages if s.paces)
    assert paced.stage == r.slowest_stage
    assert m * paced.layers * paced.comm["tp"][0] == pytest.approx(r.comm["tp"].busy_s)
    assert paced.exposed_s["tp"] == pytest.approx(r.comm["tp"].exposed_s)


def test_per_layer_in_text_markdown_and_json():
    argv = ["plan", "--preset", "llama3.1-8b", "--gpus", "16", "--tp", "2", "--pp", "2"]
    out = io.StringIO()
    assert main(argv, out=out) == 0
    text = out.getvalue()
    assert "Per layer, one micro-batch, each pipeline stage" in text
    assert "stage  layers  forward  backward  recompute  tp (exposed)" in text
    assert "overlap with compute: grad reduce on, tp off" in text
    assert "MFU" in text and "exposed tp traffic" in text          # the step, MFU and exposed traffic
    out = io.StringIO()
    assert main(argv + ["--format", "markdown"], out=out) == 0
    assert "| stage | layers | forward | backward | recompute | tp (exposed) |" in out.getvalue()
    out = io.StringIO()
    assert main(argv + ["--json"], out=out) == 0
    per = json.loads(out.getvalue())["time"]["per_layer"]
    assert [s["stage"] for s in per["stages"]] == [0, 1]
    one = per["stages"][1]
    assert set(one) == {"stage", "layers", "dense_layers", "paces", "forward_s", "backward_s", "recompute_s", "comm",
                        "microbatch_forward_s", "microbatch_backward_s", "exposed_s"}
    assert set(one["comm"]) == {"tp", "ep", "cp", "dp", "pp"} and set(one["comm"]["tp"]) == {"busy_s", "exposed_s"}


def test_zero3_with_fsdp_prefetch_0_exposes_every_forward_gather():
    """--fsdp-prefetch 0: each layer's all-gather starts when the layer needs it, so the forward's gathers are
    all exposed (L per micro-batch) rather than only the first one; a depth of 2 times like 1 (the link, not the
    queue, bounds a link-bound step)."""
    setup = _setup(num_gpus=8, global_batch=8)
    c = ParallelConfig(dp=8, zero=ZeroStage.OS_G_P)
    at = lambda k: evaluate_step(dataclasses.replace(setup, training=dataclasses.replace(   # noqa: E731
        setup.training, fsdp_prefetch=k)), c)
    none, one, two = at(0), at(1), at(2)
    t = _terms(none)
    L = setup.model.num_layers
    assert t["time/dp_forward_exposed"] == pytest.approx(L * t["comm/dp_layer_ag_s"])
    assert _terms(one)["time/dp_forward_exposed"] < t["time/dp_forward_exposed"]
    assert none.comm["dp"].exposed_s > one.comm["dp"].exposed_s == pytest.approx(two.comm["dp"].exposed_s)
