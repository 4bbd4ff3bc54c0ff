"""The end-to-end calibration (docs/calibration.md): the set it is fitted on, the shipped constants, the
error band every time carries, the power cap, and `fitplan calibrate --runs` on one's own runs."""
import io
import json
import math
import sys
from dataclasses import replace

import pytest

from fitplan import presets
from fitplan.calibrate import runs as R
from fitplan.cli import main
from fitplan.specs import ParallelConfig
from fitplan.timing import calibration as CAL
from fitplan.timing import evaluate_step, fitted
from fitplan.timing import overheads as OV
from fitplan.timing import uncertainty as U
from fitplan.timing.expert import deepep_s, ranks_hit, remote_nodes
from fitplan.timing.uncertainty import band
from tests.conftest import make_setup
from tests.scripts import ROOT, load

sys.path.insert(0, str(ROOT / "bench" / "calibration"))
import published as PUB  # noqa: E402


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def calibration_runs():
    return PUB.runs()


# ---------------------------------------------------------------- the set

def test_every_published_row_is_stated_or_says_why():
    """bench/calibration/*.toml: the rows of CALIBRATION.md's sources (357 at the last transcription: 292
    Megatron-Bridge, 27 NeMo, 20 AutoModel, 18 from the two papers), ids unique, each with its system's GPU,
    a family to be left out with, and either the plan's flags or the reason fitplan cannot state it."""
    rows = PUB.rows()
    assert len(rows) >= 350
    assert len({m.id for m in rows}) == len(rows)
    assert {m.source for m in rows} == {"megatron_bridge", "nemo", "automodel", "papers"}
    for m in rows:
        assert m.group, m.id
        assert m.row["system"] in PUB.SYSTEMS, m.id
        assert (m.flags is not None) != bool(m.why_not), m.id
        if m.stated:
            kind, value = m.measured
            assert kind in ("step_s", "tflops_hw") and value > 0, m.id


def test_rows_state_the_layers_their_recipe_keeps_in_bf16():
    """Megatron-Bridge's nemotron_3_super_bf16_with_nvfp4_mixed (mixed_precision.py @51885cf1) keeps the last 14
    layers in bf16, and the earlier releases' configurations set first_last_layers_bf16=True with
    num_layers_at_end_in_bf16=14 explicitly: every Nemotron 3 Super NVFP4 row (15) says --bf16-last-layers 14;
    the MXFP8 and the other NVFP4 presets (bf16_with_nvfp4_mixed alone) keep none."""
    rows = [m for m in PUB.rows() if m.stated]
    kept = {m.id for m in rows if "--bf16-last-layers 14" in m.flags}
    assert kept == {m.id for m in rows if m.id.endswith("nemotron-3-super-nvfp4")} and len(kept) == 15
    assert not any("--bf16-first-layers" in m.flags for m in rows)
    assert PUB._bf16_layers({"mixed_precision": "bf16_with_mxfp8_mixed()"}) == []
    assert PUB._bf16_layers({"mixed_precision": "bf16_with_nvfp4_mixed()", "first_last_layers_bf16": "True",
                             "num_layers_at_start_in_bf16": "1", "num_layers_at_end_in_bf16": "2"}) == [
        "--bf16-first-layers", 1, "--bf16-last-layers", 2]


def test_the_mlp_recompute_module_reruns_no_moe_layer():
    """Megatron-Core's recompute module "mlp" sets recompute_mlp only on layers that are not MoE layers
    (transformer_layer.py @d98e8a6): DeepSeek-V3's rows listing it recompute no MoE layer, so ["mlp"] alone is no
    recompute and ["mla_up_proj", "mlp"] is the norms kind (MLA's up-projections), each saying what it leaves out;
    on a dense model "mlp" still reruns most of a layer's GEMMs, planned as full recompute."""
    cfg = {"recompute_granularity": "selective"}
    for mods, moe, flags in ((["mlp"], True, []), (["mla_up_proj", "mlp"], True, ["--recompute", "norms"]),
                             (["mlp"], False, ["--recompute", "full"])):
        assumed = []
        assert PUB._recompute_modules({**cfg, "recompute_modules": mods}, assumed, moe=moe) == flags, mods
        assert any("mlp" in a for a in assumed), mods
    rows = {m.id: m for m in PUB.rows()}
    assert "--recompute" not in rows["mb-26.04-gb200-deepseek-v3-mxfp8"].flags


def test_the_shipped_constants_are_a_fresh_fit(calibration_runs):
    """src/fitplan/timing/fitted.py is what `bench/fidelity.py --write` wrote for this set and this model: a fit
    started from it moves no constant by more than its 4 printed significant digits allow (5e-4) plus the
    fit's own convergence (together 1e-3), and the band's run counts (in all, by class, by class and architecture) and
    support are this set's."""
    runs, missed = calibration_runs
    fidelity = load("bench/fidelity.py")
    f = R.fit(runs, start=CAL.SHIPPED)
    for name in CAL.NAMES:
        assert f.values[name] == pytest.approx(fitted.VALUES[name], rel=1e-3), name
    assert fitted.BAND["runs"] == len(runs)
    assert fitted.BAND["support"] == fidelity.support(runs)
    kinds = [U.model_class(r.setup.model) for r in runs]
    assert {k: q["runs"] for k, q in fitted.BAND["classes"].items()} == {k: kinds.count(k) for k in set(kinds)}
    cells = [U.cell_of(r.setup) for r in runs]
    assert {c: q["runs"] for c, q in fitted.BAND["cells"].items()} == {c: cells.count(c) for c in set(cells)}


def test_each_constant_is_named_with_a_unit_and_a_prior():
    assert len(CAL.NAMES) <= 15   # "at most about a dozen" (CALIBRATION.md), four of them one clock per generation
    for c in CAL.CONSTANTS:
        assert c.unit and c.meaning and c.prior > 0 and c.prior_sd > 0, c.name
    assert set(fitted.VALUES) == set(CAL.NAMES)


# ---------------------------------------------------------------- the formulas

def test_the_power_cap_slows_the_clock_by_the_cube_root():
    """P ~ f^3 along the DVFS curve: a 350 W cap on a 700 W H100 sustains 0.5^(1/3) = 0.794 of its clock; a
    figure above the TDP changes nothing. The GEMM ceiling (eff_max x clock) follows."""
    setup = make_setup("llama3-8b", 8, gpu="h100-80gb")
    capped = replace(setup, cluster=replace(setup.cluster, gpu=replace(setup.cluster.gpu, power_watts=350)))
    above = replace(setup, cluster=replace(setup.cluster, gpu=replace(setup.cluster.gpu, power_watts=1000)))
    assert setup.cluster.gpu.tdp_watts == 700
    assert CAL.of_setup(capped).clock / CAL.of_setup(setup).clock == pytest.approx(0.5 ** (1 / 3), rel=1e-12)
    assert CAL.of_setup(above).clock == CAL.of_setup(setup).clock
    c = ParallelConfig(dp=8)
    ceiling = lambda s: next(t.value for t in evaluate_step(s, c).terms if t.key == "ratio/gemm_ceiling")   # noqa
    assert ceiling(capped) / ceiling(setup) == pytest.approx(0.5 ** (1 / 3), rel=1e-12)
    assert evaluate_step(capped, c).step_time_s > evaluate_step(setup, c).step_time_s


def test_a_part_at_a_higher_power_limit_sustains_a_higher_clock():
    """The clock constant is the base part's (B200, B300: 2,250 TFLOP/s bf16 at 1,000 W). GB200 (2,500 at
    1,200 W) sustains (1200/1000)^(1/3) = 1.0627 times B200's clock, the cube law of a power cap the other way:
    its clock fraction is 2250/2500 x 1.0627 = 0.95639 of B200's, its sustained rate 1.0627 times. GB300 (2,500 at
    1,400 W) would sustain 1.1187 times B300's, above its own boost (2500/2250 = 1.111): held at its boost, the
    fraction 1 and the rate 1.111 times. A part rated below its base part (H100 PCIe, 756 TFLOP/s at 350 W) and
    the base parts themselves: 1."""
    k = lambda gpu: CAL.of_setup(make_setup("llama3-8b", 8, gpu=gpu))   # noqa: E731
    rate = lambda gpu: k(gpu).clock * presets.gpu(gpu).peak_bf16_flops_per_s   # noqa: E731
    assert k("gb200").clock / k("b200").clock == pytest.approx(0.9 * 1.2 ** (1 / 3), rel=1e-12)
    assert rate("gb200") / rate("b200") == pytest.approx(1.2 ** (1 / 3), rel=1e-12)
    assert k("gb300").clock == k("b300").clock
    assert rate("gb300") / rate("b300") == pytest.approx(2500 / 2250, rel=1e-12)
    assert k("h100-pcie").clock == k("h100-80gb").clock
    assert CAL.rated_clock(peak=756e12, tdp=350, peak_ref=989e12, tdp_ref=700) == 1.0
    # the constants' reference is each generation's base part as its preset states it, which runs at the constant
    for gpu in ("a100-80gb", "h100-80gb", "b200", "b300"):
        g = presets.gpu(gpu)
        assert CAL.BASE_PART[g.architecture] == (g.peak_bf16_flops_per_s, g.tdp_watts), gpu
        assert k(gpu).clock == CAL.SHIPPED[CAL.CLOCK_OF[g.architecture]], gpu


@pytest.mark.parametrize(("arch", "kernel", "fwd", "bwd"), [
    # NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training results/llama3.1/{gb200,gb300}/llama3.1_20260424_*.csv
    # @60e572b7 (cuDNN 9.22, batch 2, 64/8 heads, causal 8K, non-deterministic backward), TFLOP/s
    ("blackwell", "cudnn", 1574, 1332),          # 1,393 of 2,250 -> 0.619
    ("blackwell-ultra", "cudnn", 1856, 1435),    # 1,534 of 2,250 -> 0.682
    # artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv @bb37575d, flash_attention (2.7.4), 8K causal
    ("blackwell", "flash2", 399.925, 318.004),   # 338 of 2,250 -> 0.150
])
def test_blackwell_attention_is_the_published_kernel_benchmark(arch, kernel, fwd, bwd):
    """ATTENTION_EFFICIENCY: forward and backward together, 3.5/(1/fwd + 2.5/bwd) over the 2,250 TFLOP/s dense
    bf16 peak, rounded to the table's two digits (so within 0.005)."""
    combined = 3.5 / (1 / fwd + 2.5 / bwd)
    assert CAL.ATTENTION_EFFICIENCY[(arch, kernel)] == pytest.approx(combined / 2250, abs=0.005)


def test_head_dim_64_runs_at_the_benchmarked_fraction_of_head_dim_128():
    """ATTENTION_D64 (docs/calibration.md#attention). H100, FlashAttention-3 paper Fig. 5/6, non-causal 8K: cuDNN
    412/432 TFLOP/s forward/backward at d 64 against 600/518 at d 128, so 3.5/(1/412 + 2.5/432) = 426.1 over
    3.5/(1/600 + 2.5/518) = 539.1 = 0.7904; FlashAttention-2 296.2/331.3 = 0.8940; FlashAttention-3 478.6/581.4 =
    0.8233. GB200: cuDNN 9.19 runs gpt-oss's shape (d 64, 1,024 window) at 3.5/(1/609 + 2.5/646) = 635.0 and
    Llama 3.1's at 3.5/(1/1598 + 2.5/1311) = 1,381.9 (0.4595); H200 312.5 and 566.9 (0.5513); so Blackwell's
    factor is 0.7904 x 0.4595/0.5513 = 0.6588. Each to 5e-4 (hand arithmetic at four digits)."""
    assert CAL.ATTENTION_D64[("hopper", "cudnn")] == pytest.approx(0.7904, abs=5e-4)
    assert CAL.ATTENTION_D64[("hopper", "flash2")] == pytest.approx(0.8940, abs=5e-4)
    assert CAL.ATTENTION_D64[("hopper", "flash3")] == pytest.approx(0.8233, abs=5e-4)
    assert CAL.ATTENTION_D64[("blackwell", "cudnn")] == pytest.approx(0.6588, abs=5e-4)
    assert CAL.ATTENTION_D64[("blackwell-ultra", "cudnn")] == pytest.approx(0.6519, abs=5e-4)
    assert CAL.ATTENTION_D64[("ampere", "flash2")] == CAL.ATTENTION_D64[("hopper", "flash2")]
    # interpolated in d between 64 and 128: d 96 halfway, 1 at 128 and above (MLA's 192), r_64 below 64
    from fitplan.timing.gemm import head_dim_factor
    r = CAL.ATTENTION_D64[("hopper", "cudnn")]
    assert head_dim_factor.fn(d=96, r_64=r) == pytest.approx((1 + r) / 2, rel=1e-12)
    assert head_dim_factor.fn(d=128, r_64=r) == head_dim_factor.fn(d=192, r_64=r) == 1.0
    assert head_dim_factor.fn(d=32, r_64=r) == pytest.approx(r, rel=1e-12)


def test_a_plans_attention_core_carries_its_head_dim_factor():
    """gpt-oss-120b (64 query heads of 64) on H100 against Llama 3 8B (32 of 128): the core's efficiency is
    eta*r_d*clock/0.5, r_d = 0.7904 for gpt-oss and 1 for Llama (exact: both read the same eta and clock)."""
    from fitplan.explain import Trace
    from fitplan.timing.step import step_time
    flash = lambda name: (lambda s: replace(s, training=replace(s.training, attention_kernel="flash")))(  # noqa
        make_setup(name, 8, gpu="h100-80gb"))
    eff = {}
    for name in ("gpt-oss-120b", "llama3-8b"):
        setup = flash(name)
        t = Trace()
        step_time(t, setup, ParallelConfig(micro_batch=1, ep=8 if name.startswith("gpt") else 1))
        eff[name] = t.get("ratio/core_efficiency").value
    k = CAL.of_setup(flash("llama3-8b"))
    assert k.attention > 0
    assert eff["llama3-8b"] == pytest.approx(k.attention * k.clock / 0.5, rel=1e-12)
    assert eff["gpt-oss-120b"] == pytest.approx(k.attention * CAL.ATTENTION_D64[("hopper", "cudnn")] * k.clock / 0.5,
                                                rel=1e-12)


def test_fp8_attention_runs_at_the_benchmarked_speedup_over_bf16():
    """FP8_ATTENTION_SPEEDUP (docs/calibration.md#fp8-attention): bf16's forward + backward time over fp8's in cuDNN's
    training benchmark. DeepSeek-V3's MLA on GB300 at 4K: bf16 0.864 + 3.127 = 3.991 ms, MXFP8 0.546 + 2.348 =
    2.894 ms: 1.379; Llama 3.1 on GB300 at 8K: 5.017 ms against fp8's 0.759 + 3.087 = 3.846 ms: 1.304; on H200 at 8K
    fp8 is slower, 6.791 against 7.533 ms: 0.902 (each to 5e-4, the table's three digits). Between lengths the
    ratio is linear in log2 s: at 6K, 0.585 of the way from 4K's to 8K's; held below 2K and above 32K."""
    T = CAL.FP8_ATTENTION_SPEEDUP
    assert T[("blackwell-ultra", "mla", "mxfp8")][1] == pytest.approx(3.991 / 2.894, abs=5e-4)
    assert T[("blackwell-ultra", "d128", "fp8")][2] == pytest.approx(5.017 / 3.846, abs=5e-4)
    assert T[("hopper", "d128", "fp8")][2] == pytest.approx(6.791 / 7.533, abs=5e-4)
    from fitplan.timing.gemm import fp8_attention_speedup
    q = T[("blackwell", "mla", "fp8")]
    at = lambda s: fp8_attention_speedup.fn(s=s, seq=CAL.FP8_ATTENTION_SEQ, q=q)   # noqa: E731
    assert at(4096) == pytest.approx(q[1], rel=1e-12)
    assert at(6144) == pytest.approx(q[1] + (math.log2(6144) - 12) * (q[2] - q[1]), rel=1e-12)
    assert at(1024) == pytest.approx(q[0], rel=1e-12) and at(131072) == pytest.approx(q[4], rel=1e-12)
    # the shape classes: MLA, head dim 64 (no fp8 case fitplan uses: None) and 128; Hopper has no MXFP8
    assert CAL.fp8_attention_speedups("blackwell", 192, True, "mxfp8") == T[("blackwell", "mla", "mxfp8")]
    assert CAL.fp8_attention_speedups("blackwell", 64, False, "fp8") is None
    assert CAL.fp8_attention_speedups("hopper", 128, False, "fp8") == T[("hopper", "d128", "fp8")]
    assert CAL.fp8_attention_speedups("hopper", 128, False, "mxfp8") is None


def test_a_plan_with_fp8_attention_runs_its_core_at_the_speedup():
    """DeepSeek-V3 on GB300 under MXFP8 at 4K: --attention-precision fp8 multiplies the core's efficiency by the
    table's 1.379 exactly (same eta, head-dim factor and clock); bf16 compute or an eager kernel is refused (exit 2),
    and Megatron-LM's export refuses it (its argument list has no flag for fp8_dot_product_attention)."""
    from fitplan.explain import Trace
    from fitplan.timing.step import step_time
    flags = ["--preset", "deepseek-v3", "--gpu", "gb300", "--gpus", "256", "--pp", "2", "--ep", "32", "--zero", "1",
             "--precision", "fp8", "--compute-precision", "mxfp8", "--seq-len", "4096", "--global-batch", "4096",
             "--virtual-stages", "8", "--framework", "nemo"]
    from fitplan.cli import build_parser, request_from_args
    from fitplan.resolve import config_of, resolve
    eff = {}
    for precision in ("bf16", "fp8"):
        r = resolve(request_from_args(build_parser().parse_args(["plan", *flags, "--attention-precision", precision])))
        t = Trace()
        step_time(t, r.setup, config_of(r))
        eff[precision] = t.get("ratio/core_efficiency").value
    assert eff["fp8"] == pytest.approx(eff["bf16"] * CAL.FP8_ATTENTION_SPEEDUP[("blackwell-ultra", "mla", "mxfp8")][1],
                                       rel=1e-12)
    for bad in (["--preset", "llama3-8b", "--gpus", "8", "--attention-precision", "fp8"],
                ["--preset", "llama3-8b", "--gpus", "8", "--compute-precision", "fp8", "--attention-kernel", "eager",
                 "--attention-precision", "fp8"]):
        err = io.StringIO()
        assert main(["plan", *bad], out=io.StringIO(), err=err) == 2
        assert err.getvalue().count("\n") == 1 and "--attention-precision fp8" in err.getvalue()
    out = io.StringIO()
    assert main(["export", "--format", "megatron", *flags, "--attention-precision", "fp8"], out=out,
                err=io.StringIO()) == 1
    assert out.getvalue().startswith("megatron cannot express this plan: --attention-precision fp8")


def test_a_generation_without_a_clock_sustains_the_fitted_generations_geometric_mean():
    """docs/calibration.md#unseen-generations: an architecture no constant covers (MI300X's cdna3) sustains the
    geometric mean of the clock constants, here (0.8 x 0.9 x 1.0 x 0.9)^(1/4) = 0.6480^(1/4) = 0.89721 (exact
    arithmetic, 1e-9), not its boost clock; a covered one keeps its own."""
    values = dict(CAL.SHIPPED, clock_ampere=0.8, clock_hopper=0.9, clock_blackwell=1.0, clock_blackwell_ultra=0.9)
    k = lambda arch: CAL.resolve(architecture=arch, kernel="flash", kernels="fused", cuda_graphs=False,   # noqa
                                 values=values)
    assert presets.gpu("mi300x").architecture not in CAL.CLOCK_OF
    assert k(presets.gpu("mi300x").architecture).clock == pytest.approx(0.6480 ** 0.25, rel=1e-9)
    assert k("hopper").clock == 0.9
    # the fit's arrays, one column per trial value: elementwise, the first column the same 0.6480^(1/4)
    import numpy as np
    arrays = dict(values, clock_ampere=np.array([0.8, 1.6]))
    got = CAL.resolve(architecture="cdna3", kernel="flash", kernels="fused", cuda_graphs=False, values=arrays).clock
    assert got == pytest.approx([0.6480 ** 0.25, 1.2960 ** 0.25], rel=1e-9)
    setup = make_setup("llama3-8b", 8, gpu="mi300x")
    plan = band(setup, 1.0)
    assert "geometric mean (docs/calibration.md#unseen-generations)" in plan.basis


def test_cross_validation_pools_the_clock_of_a_generation_it_leaves_out(calibration_runs):
    """Leaving the Megatron GPT family out leaves no A100 run: with pooling (what bench/fidelity.py runs) the
    A100 clock is the geometric mean of the three fitted ones, exactly; without it (the default, which
    `fitplan calibrate --runs` keeps), the prior's pseudo-observation alone pulls it from the shipped 0.94 back
    to 1 (to 1e-6 in three steps; no run moves it: sensitivity 0)."""
    runs, _ = calibration_runs
    train = [r for r in runs if r.group != "megatron-gpt"]
    assert not any(r.setup.cluster.gpu.architecture == "ampere" for r in train)
    pooled = R.fit(train, start=CAL.SHIPPED, pool_unseen_clocks=True, iterations=3)
    plain = R.fit(train, start=CAL.SHIPPED, iterations=3)
    seen = ("clock_hopper", "clock_blackwell", "clock_blackwell_ultra")
    assert pooled.sensitivity["clock_ampere"] == 0
    assert pooled.values["clock_ampere"] == pytest.approx(
        math.prod(pooled.values[n] for n in seen) ** (1 / 3), rel=1e-12)
    assert plain.values["clock_ampere"] == pytest.approx(CAL.PRIORS["clock_ampere"], rel=1e-6)   # only its prior


def test_host_overhead_is_a_floor_under_each_pass():
    """m = 4 micro-batches of L = 32 layers, omega = 0.1 ms per layer pass: a 2 ms forward waits for the host's
    3.2 ms (1.2 ms per micro-batch), a 10 ms backward does not; 2 MoE layers of 8 local experts add, per forward
    (the only pass that reads the token counts on the host), 2 x 8 x 0.1 ms; full recompute reruns the forward."""
    t = OV.host_overhead_s(m=4, T_f=2e-3, T_b=10e-3, L=32, L_moe=0, E_local=8, omega=1e-4, sigma_moe=1e-4)
    assert t == pytest.approx(4 * 1.2e-3)
    t_moe = OV.host_overhead_s(m=4, T_f=2e-3, T_b=10e-3, L=32, L_moe=2, E_local=8, omega=1e-4, sigma_moe=1e-4)
    assert t_moe - t == pytest.approx(4 * 2 * 8 * 1e-4)     # one forward per micro-batch without full recompute
    from fitplan.specs.parallel import Recompute
    full = OV.host_overhead_s(m=4, T_f=2e-3, T_b=5e-3, L=32, L_moe=2, E_local=8, omega=1e-4, sigma_moe=1e-4,
                              recompute=Recompute.FULL)     # backward floor 2 x 3.2 ms; the forward twice
    assert full == pytest.approx(4 * ((3.2e-3 - 2e-3) + (6.4e-3 - 5e-3) + 2 * 2 * 8 * 1e-4))


def test_drop_and_pad_reads_no_token_counts_on_the_host():
    """Megatron-Core's drop-and-pad dispatch knows every count on the host (a capacity factor): no MoE sync term;
    the dropless layer's grows with the local experts, num_experts/ep."""
    from fitplan.explain import RAW
    from fitplan.timing.step import step_time
    setup = make_setup("mixtral-8x7b", 16)
    host = lambda s, c, k=None: step_time(RAW, s, c, k=k)["time/host_overhead"]
    ep2, ep8 = ParallelConfig(dp=8, tp=1, pp=2, ep=2), ParallelConfig(dp=8, tp=1, pp=2, ep=8)
    no_sync = lambda c: host(setup, c, replace(CAL.of_setup(setup), moe_sync_s=0.0))
    dropless2, dropless8 = host(setup, ep2) - no_sync(ep2), host(setup, ep8) - no_sync(ep8)
    assert dropless2 > 0 and dropless2 == pytest.approx(4 * dropless8)    # 4 local experts against 1
    padded = replace(setup, model=replace(setup.model, moe=replace(setup.model.moe, capacity_factor=1.0)))
    assert host(padded, ep2) == pytest.approx(no_sync(ep2))


def test_one_grouped_kernel_launches_nothing_per_expert():
    """--expert-gemm grouped (torch._grouped_mm, grouped_gemm's gmm: one kernel for a rank's local experts) has no
    host launches per local expert: the step loses exactly the dropless MoE term, L_moe x E_local x sigma_moe per
    forward and micro-batch, and nothing else changes. torchtitan's profile sets it; Megatron-Core's (nemo,
    megatron-lm) runs TE's GroupedLinear, one GEMM per expert, and keeps it."""
    from fitplan.explain import RAW
    from fitplan.timing.step import step_time
    setup = make_setup("mixtral-8x7b", 16)
    c = ParallelConfig(dp=8, tp=1, pp=2, ep=2)
    grouped = replace(setup, training=replace(setup.training, expert_gemm="grouped"))
    assert CAL.of_setup(grouped).moe_sync_s == 0.0
    assert CAL.of_setup(setup).moe_sync_s == fitted.VALUES["moe_sync_overhead"] > 0
    per, one = step_time(RAW, setup, c), step_time(RAW, grouped, c)
    no_sync = step_time(RAW, setup, c, k=replace(CAL.of_setup(setup), moe_sync_s=0.0))
    assert one["time/host_overhead"] == pytest.approx(no_sync["time/host_overhead"], rel=1e-12)
    assert one["time/step"] == pytest.approx(no_sync["time/step"], rel=1e-12) and one["time/step"] < per["time/step"]
    from fitplan.presets.frameworks import FRAMEWORKS
    assert FRAMEWORKS["torchtitan"].training["expert_gemm"].value == "grouped"
    assert FRAMEWORKS["nemo"].training["expert_gemm"].value == "per-expert"


def test_the_straggler_term_is_the_expected_maximum():
    """cv x sqrt(2 ln N) x the rest of the step: 1% spread over 1,024 GPUs adds 3.72%."""
    f = OV.straggler_factor(N=1024)
    assert f == pytest.approx(math.sqrt(2 * math.log(1024))) == pytest.approx(3.723, abs=1e-3)
    assert OV.straggler_s(cv=0.01, factor=f, T_rest=10.0) == pytest.approx(0.3723, abs=1e-4)
    assert OV.straggler_factor(N=1) == 0


def test_deepep_sends_a_token_once_per_remote_node_and_once_per_rank():
    """N = 4 nodes, top-8: a token reaches 3 x (1 - (3/4)^8) = 2.70 other nodes; node-limited to M = 2 nodes,
    2 x 3/4 = 1.5. Over NVLink it reaches each rank holding any of its experts once (DeepEP's is_token_in_rank,
    HybridEP's tokens with any local expert): of ep 8, 8 x (1 - (7/8)^8) = 5.25 ranks, not 8 copies; of ep 32,
    32 x (1 - (31/32)^8) = 7.18. The NIC leg moves D/k of the k copies' bytes, the NVLink leg R/k of them; the
    longer counts (S = 1 GB, 50 and 400 GB/s, ep = 32 over 4 nodes)."""
    assert remote_nodes(N=4, k=8) == pytest.approx(3 * (1 - 0.75 ** 8))
    assert remote_nodes(N=4, k=8, M=2) == pytest.approx(1.5)
    assert remote_nodes(N=1, k=8) == 0
    assert ranks_hit(n=8, k=8) == pytest.approx(5.2511, abs=1e-4)
    assert ranks_hit(n=32, k=8) == pytest.approx(7.1776, abs=1e-4)
    assert ranks_hit(n=64, k=1) == pytest.approx(1.0)        # one expert: one rank, whatever the group
    D, R = remote_nodes(N=4, k=8, M=2), ranks_hit(n=32, k=8)
    t = deepep_s(count=10, S=1e9, k=8, n=32, D=D, R=R, B_in=400e9, B_net=50e9, alpha=14e-6)
    assert t == pytest.approx(10 * (14e-6 + max(R / 8 * 1e9 / 400e9, D / 8 * 1e9 / 50e9)))
    assert deepep_s(count=10, S=1e9, k=8, n=1, D=0, R=1, B_in=400e9, B_net=50e9, alpha=14e-6) == 0


def test_deepep_is_placed_on_the_nvlink_domains_the_job_fills():
    """64 GPUs of a 72-GPU GB200 rack, ep 64: the node rule (a span inside a node only where it divides 72) sends an
    NCCL group of 64 over the network, but DeepEP's group is placed on the job's NVLink domain (comm.domain_ranks:
    64) and timed as deepep_s with no remote node: count*(alpha_in + a_fw + R/k*S/B_in), R = 64 x (1 - (63/64)^8)
    = 7.58 ranks a token of Qwen3's top-8 reaches, NVLink 5 at 900 GB/s x its bus efficiency. The same job with
    NCCL's all-to-all still crosses "nodes"."""
    setup = make_setup("qwen3-30b-a3b", 64, gpu="gb200")
    c = ParallelConfig(tp=1, pp=1, dp=64, ep=64, micro_batch=1)
    deepep = replace(setup, training=replace(setup.training, moe_dispatcher="deepep"))
    terms = {t.key: t.value for t in evaluate_step(deepep, c).terms}
    assert terms["link/ep_domain_ranks"] == 64 and bool(terms["link/ep_intra"])
    gpu, k = deepep.cluster.gpu, CAL.of_setup(deepep)
    count, S = terms["comm/moe_a2a_count"], terms["comm/moe_a2a_message"]
    B_in = gpu.intra_node.bytes_per_s * gpu.intra_node.bus_efficiency
    assert terms["comm/moe_ranks_hit"] == pytest.approx(7.5759, abs=1e-4)
    want = count * (gpu.intra_node.latency_s + k.collective_overhead_s + terms["comm/moe_ranks_hit"] / 8 * S / B_in)
    assert terms["comm/ep_s"] == pytest.approx(want, rel=1e-12)
    # the bytes that leave each GPU: the deliveries to the 63 other ranks, (n-1)/n of R/k of the copies
    assert terms["comm/ep_bytes"] == pytest.approx(count * 63 / 64 * terms["comm/moe_ranks_hit"] / 8 * S, rel=1e-12)
    nccl = replace(setup, training=replace(setup.training, moe_dispatcher="alltoall"))
    assert not bool({t.key: t.value for t in evaluate_step(nccl, c).terms}["link/ep_intra"])


# ---------------------------------------------------------------- the band

def test_every_time_carries_its_band():
    """Each suggestion, the recommended and the minimum viable layout: time.uncertainty holds the step between
    low_s and high_s, at 80% coverage, the basis naming the runs behind it; the factors are the shipped dense
    class's quantiles exp(q_low), exp(q_high) at the alpha its Hopper runs need (Llama 3 8B is a dense model, here
    on H100s: the dense/hopper cell), widened by sqrt(1 + N0/(n + 1)) for the n runs that share the plan's
    least-represented tag."""
    dense = dict(fitted.BAND["cells"]["dense/hopper"], runs=fitted.BAND["classes"]["dense"]["runs"])
    code, out, _ = run(["plan", "--preset", "llama3-8b", "--gpus", "64", "--gpu", "h100-80gb", "--suggest",
                        "--json"])
    data = json.loads(out)
    plans = data["suggestions"] + [data["recommended"], data["minimum_viable"]]
    for p in plans:
        t = p["time"]
        u = t["uncertainty"]
        assert u["low_s"] < t["step_s"] < u["high_s"] and u["coverage"] == 0.8
        assert f"over {dense['runs']} published dense runs" in u["basis"]
        lo, hi = u["low_s"] / t["step_s"], u["high_s"] / t["step_s"]
        w = math.log(lo) / dense["q_low"]
        assert math.log(hi) / dense["q_high"] == pytest.approx(w, rel=1e-9) and w >= 1


def test_the_band_is_drawn_from_the_plans_class():
    """The set's dense runs err about a third as much as its MoE and hybrid ones (docs/calibration.md#the-band),
    so each class has its own quantiles: a Mixtral or Nemotron-H plan takes the MoE-or-hybrid class's, a Llama
    plan the dense class's, on the same GPU (so the same support and widening w): log(high/T) = w*q_high, the
    quantiles those of the class's cell on H100s (hopper)."""
    classes, cells = fitted.BAND["classes"], fitted.BAND["cells"]
    plans = {"llama3-8b": "dense", "mixtral-8x7b": "moe_or_hybrid", "nemotron-h-8b": "moe_or_hybrid"}
    for preset, kind in plans.items():
        setup = make_setup(preset, 8, gpu="h100-80gb")
        assert U.model_class(setup.model) == kind and U.cell_of(setup) == f"{kind}/hopper"
        b = band(setup, 1.0)
        w = math.log(b.high_s) / cells[f"{kind}/hopper"]["q_high"]
        assert math.log(b.low_s) == pytest.approx(w * cells[f"{kind}/hopper"]["q_low"], rel=1e-9) and 1 <= w < 1.1
        assert f"published {U.CLASSES[kind]} runs" in b.basis
    assert classes["dense"]["q_high"] - classes["dense"]["q_low"] < classes["moe_or_hybrid"]["q_high"] \
        - classes["moe_or_hybrid"]["q_low"]


def test_the_band_takes_the_alpha_its_class_needs_on_the_plans_architecture():
    """A plan on an architecture the set has takes its class's quantiles at the alpha that held 80% of the set's
    runs of its class there under cross-validation (fitted.BAND["cells"], written by bench/fidelity.py --write),
    and its basis says so: the dense runs on Hopper spread wider than the class (docs/calibration.md#the-band), so
    their cell's pair reaches further than the class's (q_low lower, q_high higher); a dense plan on Blackwell keeps
    the class's pair. Without the cells (or on an architecture the set lacks, mi300x) the class's own pair."""
    classes, cells = fitted.BAND["classes"], fitted.BAND["cells"]
    hopper, dense = cells["dense/hopper"], classes["dense"]
    assert hopper["alpha"] < dense["alpha"] and hopper["q_low"] < dense["q_low"] and hopper["q_high"] > dense["q_high"]
    assert hopper["holds"] >= 0.8
    for preset, gpu, cell in (("llama3-8b", "h100-80gb", "dense/hopper"),
                              ("mixtral-8x7b", "gb200", "moe_or_hybrid/blackwell")):
        setup = make_setup(preset, 8, gpu=gpu)
        kind, arch = cell.split("/")
        b = band(setup, 1.0)
        w = math.log(b.high_s) / cells[cell]["q_high"]
        assert math.log(b.low_s) == pytest.approx(w * cells[cell]["q_low"], rel=1e-9)
        assert (f"the narrowest pair whose bands held 80% of the set's {cells[cell]['runs']} {U.CLASSES[kind]} runs "
                f"on {arch} GPUs under cross-validation (they held {cells[cell]['holds']:.0%})") in b.basis
        bare = band(setup, 1.0, basis_table={k: v for k, v in fitted.BAND.items() if k != "cells"})
        assert math.log(bare.high_s) == pytest.approx(w * classes[kind]["q_high"], rel=1e-9)
        assert "narrowest pair" not in bare.basis
    assert "narrowest pair" not in band(make_setup("llama3-8b", 8, gpu="mi300x"), 1.0).basis
    assert sum(c["runs"] for c in cells.values()) == fitted.BAND["runs"]   # every stated run in one cell


def test_a_plan_far_from_the_set_gets_a_wider_band():
    """An AMD part has no run in the set: its band widens by sqrt(1 + N0) (no run shares its architecture)."""
    setup = make_setup("llama3-8b", 8, gpu="mi300x")
    nvidia = make_setup("llama3-8b", 8, gpu="h100-80gb")
    wide, narrow = band(setup, 1.0), band(nvidia, 1.0)
    assert wide.high_s > narrow.high_s and wide.low_s < narrow.low_s
    assert f"0 of the set's {fitted.BAND['runs']} runs share" in wide.basis


def test_a_power_cap_no_run_tests_gets_a_wider_band():
    """Every calibration run ran at its board's TDP, so the clock a --gpu-power below it assumes
    (calibration.power_clock, (P/TDP)^(1/3)) has no run behind it: n = 0 for the power limit, and the band is
    exp(sqrt(1 + N0) q) = exp(sqrt(5) q) at each end. At the TDP itself (700 W on an H100) nothing changes."""
    def at(watts):
        s = make_setup("llama3-8b", 8, gpu="h100-80gb")
        return replace(s, cluster=replace(s.cluster, gpu=replace(s.cluster.gpu, power_watts=watts)))
    wide, narrow, same = band(at(500.0), 1.0), band(at(None), 1.0), band(at(700.0), 1.0)
    dense = fitted.BAND["cells"]["dense/hopper"]   # the class's quantiles at its Hopper runs' alpha
    assert math.log(wide.high_s) == pytest.approx(math.sqrt(5) * dense["q_high"], rel=1e-12)
    assert math.log(wide.low_s) == pytest.approx(math.sqrt(5) * dense["q_low"], rel=1e-12)
    assert f"0 of the set's {fitted.BAND['runs']} runs share this plan's power limit (below the TDP)" in wide.basis
    assert same == narrow and narrow.high_s < wide.high_s


# ---------------------------------------------------------------- calibrate --runs

LAYOUTS = ["--zero 3 --dp 8", "--tp 2 --zero 1", "--tp 4 --sequence-parallel", "--tp 8 --sequence-parallel",
           "--pp 2 --zero 1", "--pp 4 --tp 2", "--tp 2 --pp 2 --sequence-parallel", "--zero 2 --dp 8 --micro-batch 2",
           "--tp 2 --recompute full", "--tp 4 --recompute selective --sequence-parallel",
           "--zero 3 --dp 8 --recompute full", "--cp 2 --tp 2", "--pp 8", "--tp 4 --pp 2 --sequence-parallel"]
BASE = "--preset llama3-8b --gpu h100-80gb --gpus 8 --seq-len 4096 --global-batch 64"


def _synthetic(tmp_path, layouts, truth, slowdown=1.0):
    """Runs whose 'measured' step is fitplan's own prediction at `truth`, times `slowdown`."""
    runs = [R.Run(name=l, flags=f"{BASE} {l}", setup=s, config=c, measured_step_s=1.0)
            for l in layouts for s, c in [PUB.resolve(f"{BASE} {l}")]]
    steps = R.predict(runs, truth)[:, 0] * slowdown
    lines = []
    for r, t in zip(runs, steps):
        lines += ["[[run]]", f'name = "{r.name}"', f'flags = "{r.flags}"', f"step_s = {float(t)!r}", ""]
    path = tmp_path / "runs.toml"
    path.write_text("\n".join(lines))
    return path


def test_calibrate_runs_recovers_a_slower_clock_and_predicts_a_held_out_run(tmp_path):
    """13 runs made at 0.8 x the shipped Hopper clock: the fit reproduces every run to 1%, and a 14th layout,
    not among them, planned with the written spec is within 3% of its 'measured' time. The clock itself comes
    back within 3%: the same runs also free the attention and elementwise scales, which trade against it on
    compute-bound layouts (the report's per-run errors are what the fit is judged by)."""
    truth = dict(CAL.SHIPPED, clock_hopper=0.8 * CAL.SHIPPED["clock_hopper"])
    runs_file = _synthetic(tmp_path, LAYOUTS[:-1], truth)
    spec = tmp_path / "h100-mine.toml"
    code, out, err = run(["calibrate", "--runs", str(runs_file), "--output", str(spec)])
    assert code == 0, err
    assert "13 runs on h100-80gb" in out and f"wrote {spec}" in out
    written = spec.read_text()
    clock = float(next(l for l in written.splitlines() if l.startswith("clock =")).split("=")[1])
    assert clock == pytest.approx(truth["clock_hopper"], rel=0.03)
    after = [float(l.split("->")[1].strip().rstrip("%")) for l in written.splitlines() if l.startswith("#   ")]
    assert len(after) == 13 and max(abs(a) for a in after) <= 1.0
    held = LAYOUTS[-1]
    s, c = PUB.resolve(f"{BASE} {held}")
    expected = R.predict([R.Run("held", "", s, c, 1.0)], truth)[0, 0]
    argv = f"{BASE} {held}".replace("--gpu h100-80gb", "--gpu-spec " + str(spec)).split()
    code, out, err = run(["plan"] + argv + ["--json"])
    assert code in (0, 1), err
    got = json.loads(out)["time"]
    assert got["step_s"] == pytest.approx(expected, rel=0.03)
    assert "your 13 measured runs" in got["uncertainty"]["basis"]


def test_calibrate_runs_recovers_a_known_scale(tmp_path):
    """The issue's check: 13 runs whose measured throughput is fitplan's own prediction x 0.8 (every step
    1/0.8 = 1.25 x longer, communication included, so no single constant explains it). After calibrating,
    fitplan predicts each of them within 3%, and a 14th layout not in the file within 3% of 1.25 x its
    shipped prediction."""
    runs_file = _synthetic(tmp_path, LAYOUTS[:-1], CAL.SHIPPED, slowdown=1 / 0.8)
    spec = tmp_path / "h100-mine.toml"
    code, out, err = run(["calibrate", "--runs", str(runs_file), "--output", str(spec)])
    assert code == 0, err
    after = [float(l.split("->")[1].strip().rstrip("%")) for l in spec.read_text().splitlines() if l.startswith("#   ")]
    assert len(after) == 13 and max(abs(a) for a in after) <= 3.0
    held = LAYOUTS[-1]
    s, c = PUB.resolve(f"{BASE} {held}")
    expected = R.predict([R.Run("held", "", s, c, 1.0)], CAL.SHIPPED)[0, 0] / 0.8
    argv = f"{BASE} {held}".replace("--gpu h100-80gb", "--gpu-spec " + str(spec)).split()
    code, out, err = run(["plan"] + argv + ["--json"])
    assert code in (0, 1), err
    assert json.loads(out)["time"]["step_s"] == pytest.approx(expected, rel=0.03)


def test_a_few_runs_fit_the_clock_only_and_say_so(tmp_path):
    truth = dict(CAL.SHIPPED, clock_hopper=0.9 * CAL.SHIPPED["clock_hopper"])
    runs_file = _synthetic(tmp_path, LAYOUTS[:3], truth)
    code, out, err = run(["calibrate", "--runs", str(runs_file), "--output", str(tmp_path / "o.toml")])
    assert code == 0, err
    assert "3 runs, fewer than the 11 constants: only the sustained clock fraction (clock_hopper) is fitted" in out


@pytest.mark.parametrize(("text", "says"), [
    ("", "no [[run]] tables"),
    ("[[run]]\nflags = '--preset llama3-8b --gpus 8 --zero 3'\n", "give exactly one of tokens_per_s_per_gpu and step_s"),
    ("[[run]]\nflags = '--preset llama3-8b --gpus 8 --zero 3'\nstep_s = -1\n", "step_s must be a positive number"),
    ("[[run]]\nflags = '--preset llama3-8b --gpus 8'\nstep_s = 1\n", "state the layout it ran"),
    ("[[run]]\nflags = '--preset llama3-8b --gpus 8 --zero 3 --suggest'\nstep_s = 1\n", "without the command or --suggest"),
    ("[[run]]\nflags = '--preset llama3-8b --gpus 8 --zero 3'\nstep_s = 1\nspeed = 2\n", "unknown key 'speed'"),
    ("not toml [", "not TOML"),
])
def test_bad_runs_files_exit_2_with_one_line(tmp_path, text, says):
    path = tmp_path / "runs.toml"
    path.write_text(text)
    code, out, err = run(["calibrate", "--runs", str(path), "--output", str(tmp_path / "o.toml")])
    assert code == 2 and says in err and err.count("\n") == 1 and not (tmp_path / "o.toml").exists()


def test_fidelity_json_reports_its_summary():
    """bench/fidelity.py --json --only: the rows asked for, each with its three errors, and the summary's keys."""
    fidelity = load("bench/fidelity.py")
    out = io.StringIO()
    sys_stdout, sys.stdout = sys.stdout, out
    try:
        assert fidelity.main(["--json", "--only", "korthikanti22-t5-22b"]) == 0
    finally:
        sys.stdout = sys_stdout
    data = json.loads(out.getvalue())
    assert {"n", "stated", "missed", "cv_median_abs_error", "cv_within_15", "fit_median_abs_error",
            "band_coverage_cv"} <= set(data["summary"])
    assert data["summary"]["n"] == 2 and [r["id"] for r in data["rows"]] == [
        "korthikanti22-t5-22b-full-recompute", "korthikanti22-t5-22b-sp-selective"]
    for r in data["rows"]:
        assert {"before_error", "fit_error", "cv_error", "cv_band", "band_holds"} <= set(r)
    # where the errors lie: both rows are a dense model on A100s, so one cell, its figures the rows' own
    cell = data["by_class_architecture"]["dense/ampere"]
    errors = [abs(r["cv_error"]) for r in data["rows"]]
    assert list(data["by_class_architecture"]) == ["dense/ampere"] and cell["runs"] == 2
    assert cell["cv_median_abs_error"] == pytest.approx(sum(errors) / 2, rel=1e-12)   # the median of two
    assert cell["cv_within_15"] == sum(e <= 0.15 for e in errors) / 2
    assert cell["band_coverage_cv"] == sum(r["band_holds"] for r in data["rows"]) / 2
