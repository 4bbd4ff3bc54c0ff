"""fitplan.timing.gemm, layer_gemms and layer_rates: the GEMM curve by shape, a layer's GEMMs at the
stage's degrees, the
memory-bound terms (elementwise traffic, fp8 casts, the optimizer step), and how the step
uses them. Hand-derived numbers beside each assertion; H100's constants are the preset's
(fitplan.presets.gpus.CURVES["h100"]: eff_max 0.799 bf16 / 0.641 fp8, t0 6.11 us,
W 3.07 TB/s)."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from fitplan import presets
from fitplan.explain import RAW, Trace
from fitplan.memory.breakdown import Setup
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.timing import compute as C
from fitplan.timing import evaluate_step, step_time
from fitplan.timing import gemm as G
from fitplan.timing import layer_gemms as LG

H100 = dict(eff_max=0.799, peak=989e12, t0=6.11e-6, W=3.07e12)


def test_the_preset_carries_the_fitted_curve():
    g = presets.gpu("h100-80gb")
    assert (g.efficiency, g.efficiency_fp8, g.gemm_overhead_s, g.gemm_bandwidth_bytes_per_s) == (
        0.799, 0.641, 6.11e-6, 3.07e12)
    assert g.efficiency_h0 == 0   # the former h-curve is off in every preset


def test_a_large_square_gemm_is_compute_bound():
    """4096^3 bf16: F = 2*4096^3 = 137.4 GFLOP at 0.799 x 989 TFLOP/s = 173.93 us; its operands
    2*(3*4096^2) = 100.7 MB at 3.07 TB/s = 32.8 us, less; plus t0: 180.04 us, eff 0.7719. OpenXLA
    measured 783.3 TFLOP/s = 0.792 (bench/gemm_points.csv), 2.6% faster than the curve."""
    t = G.gemm_s(m=4096, n=4096, k=4096, **H100)
    assert t == pytest.approx(2 * 4096**3 / (0.799 * 989e12) + 6.11e-6, rel=1e-12)
    assert t == pytest.approx(180.04e-6, abs=0.01e-6)
    assert G.gemm_efficiency(m=4096, n=4096, k=4096, **H100) == pytest.approx(0.7719, abs=1e-4)


def test_a_skinny_gemm_is_memory_bound():
    """(4096 x 256)(256 x 256): 0.537 GFLOP take 0.68 us at the ceiling, but its 4.33 MB of
    operands and result take 1.409 us at W; plus t0: eff = 0.537e9/(989e12 x 7.519 us) = 0.0722."""
    B = 2 * (4096 * 256 + 256 * 256 + 4096 * 256)
    t = G.gemm_s(m=4096, n=256, k=256, **H100)
    assert t == pytest.approx(B / 3.07e12 + 6.11e-6, rel=1e-12)
    assert G.gemm_efficiency(m=4096, n=256, k=256, **H100) == pytest.approx(0.0722, abs=1e-4)


def test_efficiency_rises_with_size_and_saturates_at_the_ceiling():
    sizes = [256, 512, 1024, 2048, 4096, 8192, 16384, 65536]
    effs = [G.gemm_efficiency(m=d, n=d, k=d, **H100) for d in sizes]
    assert effs == sorted(effs) and effs[-1] < 0.799 and effs[-1] == pytest.approx(0.799, abs=1e-3)


def test_the_formula_takes_arrays_as_the_search_does():
    m = np.array([1024, 4096, 16384])
    arr = G.gemm_efficiency(m=m, n=4096, k=4096, **H100)
    assert list(arr) == pytest.approx([G.gemm_efficiency(m=int(x), n=4096, k=4096, **H100) for x in m], rel=1e-12)


def test_no_bandwidth_drops_the_operand_term_and_groups_add():
    assert G.gemm_s(m=64, n=64, k=64, eff_max=0.5, peak=1e12, t0=0, W=None) == pytest.approx(2 * 64**3 / 0.5e12)
    # g groups in one kernel: g times the FLOPs and bytes, t0 once
    one = G.gemm_s(m=512, n=1024, k=2048, **H100) - 6.11e-6
    assert G.gemm_s(m=512, n=1024, k=2048, g=8, **H100) == pytest.approx(8 * one + 6.11e-6, rel=1e-12)


def test_the_old_h_curve_scales_the_ceiling():
    """--gemm-efficiency-h0 4500 at h = 4500: the ceiling halves, as eff_max*h/(h + h0) did."""
    assert C.gemm_ceiling(eff_max=0.8, h=4500, h0=4500) == pytest.approx(0.4)
    assert C.gemm_ceiling(eff_max=0.8, h=4500, h0=0) == 0.8


# ---------------------------------------------------------------- a layer's GEMMs

LLAMA_8B = presets.model("llama3.1-8b").model


def test_dense_layer_gemms_at_tp():
    """Llama 3.1 8B (h 4096, 32 heads of 128, 8 kv heads, SwiGLU f 14336), T = 8192 tokens, t = 4:
    QKV 4096 -> (4096 + 2*1024)/4 = 1536, out 1024 -> 4096, gate+up 4096 -> 2*14336/4 = 7168,
    down 3584 -> 4096. Their FLOPs add up to the layer's matmul FLOPs over t."""
    gemms = LG.linear_gemms(LLAMA_8B, T=8192, t=4)
    assert [(g.name, g.m, g.n, g.k) for g in gemms] == [
        ("qkv", 8192, 1536, 4096), ("attention_out", 8192, 4096, 1024), ("mlp_up", 8192, 7168, 4096),
        ("mlp_down", 8192, 4096, 3584)]
    from fitplan.counts import params as P
    assert sum(g.flops for g in gemms) == pytest.approx(2 * 8192 * P.layer_matmul_params(LLAMA_8B, moe_layer=False) / 4)


def test_moe_layer_experts_are_one_grouped_gemm():
    """Mixtral 8x7B (8 experts, top 2, f_e 14336), T = 4096, t = 2, ep = 4: E/ep = 2 local experts
    each receive k*T*ep/(t*E) = 2*4096*4/(2*8) = 2048 tokens."""
    mixtral = presets.model("mixtral-8x7b").model
    gemms = {g.name: g for g in LG.linear_gemms(mixtral, T=4096, t=2, ep=4, moe_layer=True)}
    up = gemms["experts_up"]
    assert (up.g, up.m, up.n, up.k) == (2, 2048, 2 * 14336, 4096)
    assert gemms["router"].n == 8 and "mlp_up" not in gemms


def test_attention_core_eager_gemms_and_the_flash_rate():
    """b = 2, s = 4096, t = 4, c = 2: 2*32/4 = 16 heads of 2048 queries against 4096 keys, d = 128.
    Eager: scores (2048 x 128)(128 x 4096) and context (2048 x 4096)(4096 x 128), 4*b*s^2*q/(t*c) FLOPs.
    A flash kernel is not a GEMM: it runs at eta of the peak on the causal half of those FLOPs, so its
    efficiency on the counted FLOPs is eta*clock/0.5 (FlashAttention-2 Sec. 3.1.1; docs/calibration.md)."""
    eager = LG.core_gemms(LLAMA_8B, b=2, s=4096, t=4, c=2)
    assert [(g.m, g.n, g.k, g.g) for g in eager] == [(2048, 4096, 128, 16), (2048, 128, 4096, 16)]
    assert sum(g.flops for g in eager) == pytest.approx(4 * 2 * 4096**2 * 4096 / (4 * 2))
    assert G.flash_core_efficiency(eta=0.3, clock=0.9) == pytest.approx(0.54)


# ---------------------------------------------------------------- the step

GPT = ModelSpec(name="gpt", num_layers=2, hidden_size=768, num_heads=12, num_kv_heads=12, ffn_hidden_size=3072,
                vocab_size=50304, max_seq_len=2048)


def _setup(gpu="h100-80gb", recipe="mixed-adam", kernel="flash", dropout=False, **gpu_changes):
    g = dataclasses.replace(presets.gpu(gpu), **gpu_changes)
    return Setup(GPT, TrainingSpec(seq_len=2048, recipe=presets.recipe(recipe), global_batch=4,
                                   attention_kernel=kernel, dropout=dropout),
                 ClusterSpec(gpu=g, num_gpus=1, gpus_per_node=8, reserve_bytes=0))


def test_the_forward_is_its_gemms_plus_the_layers_memory_bound_traffic():
    """One GPU, b = 2: T = 4096 tokens. Per layer the four GEMMs (4096 x 768 -> 2304, 768 -> 768,
    768 -> 3072, 3072 -> 768) each take gemm_s with the ceiling at the sustained clock (eff_max*clock);
    the flash core runs at eta*r_64*clock/0.5 of the peak on its 4*b*s^2*h FLOPs (GPT-2 small's heads are
    768/12 = 64 wide: r_64 is cuDNN's rate at head dim 64 over 128 on H100, 0.790); the output layer
    (4096 x 768 -> 50304) runs once. The layer's memory-bound kernels move elementwise x its stored
    activations (no recompute), 2*s*b*h*(4 + 12) = 201,326,592 B (two norm inputs and outputs, Q, K, V
    and the attention output, the MLP's two 4h tensors; flash keeps a 4*a*s*b logsumexp, 196,608 B), at
    3.35 TB/s. clock, eta and elementwise are the shipped end-to-end constants for H100 with fused
    kernels (fitplan.timing.calibration.of_setup)."""
    from fitplan.timing import calibration as CAL
    setup = _setup()
    e2e = CAL.of_setup(setup)
    r = evaluate_step(setup, ParallelConfig(micro_batch=2))
    term = {t.key: t.value for t in r.terms}
    curve = dict(H100, eff_max=0.799 * e2e.clock)
    gemm = lambda m, n, k, g=1, e_out=2: G.gemm_s(m=m, n=n, k=k, g=g, e_out=e_out, **curve)   # noqa: E731
    lin = gemm(4096, 2304, 768) + gemm(4096, 768, 768) + gemm(4096, 3072, 768) + gemm(4096, 768, 3072)
    assert e2e.attention_d64 == pytest.approx(0.790, abs=5e-4)
    core = 4 * 2 * 2048**2 * 768 / (989e12 * e2e.attention * e2e.attention_d64 * e2e.clock / 0.5)
    head = gemm(4096, 50304, 768)
    stored = 2 * 2048 * 2 * 768 * 16 + 4 * 12 * 2048 * 2
    assert term["bytes/layer_activations"] == stored
    mem = e2e.elementwise * stored / 3.35e12
    assert e2e.elementwise == pytest.approx(1.35 * CAL.SHIPPED["elementwise_scale"])
    assert term["time/layer_elementwise"] == pytest.approx(mem, rel=1e-12)
    # the loss (F.cross_entropy on an fp32 copy, the default --cross-entropy pytorch) over 4096 x 50304 bf16
    # logits: 18 bytes each forward, 26 backward (docs/formulas.md#loss-traffic)
    logits = 4096 * 50304
    assert term["time/loss_traffic_forward"] == pytest.approx(18 * logits / 3.35e12, rel=1e-12)
    assert term["time/loss_traffic_backward"] == pytest.approx(26 * logits / 3.35e12, rel=1e-12)
    assert term["time/forward_microbatch"] == pytest.approx(2 * (lin + core + mem) + head + 18 * logits / 3.35e12,
                                                             rel=1e-9)
    # backward: twice the GEMMs, 1.5 times the memory-bound traffic
    assert term["time/backward_microbatch"] == pytest.approx(2 * (2 * (lin + core) + 1.5 * mem) + 2 * head
                                                              + 26 * logits / 3.35e12, rel=1e-9)


@pytest.mark.parametrize("kernel, forward, backward", [("pytorch", 18, 26), ("chunked", 18, 26), ("fused", 8, 14),
                                                       ("linear", 6, 0)])
def test_the_loss_moves_its_kernels_bytes_per_logit_on_the_stage_with_the_output_layer(kernel, forward, backward):
    """Bytes per bf16 logit, counted from each loss's source (docs/formulas.md#loss-traffic): F.cross_entropy on
    an fp32 copy 2 + 4 + 12 forward, 4 + 16 + 4 + 2 backward (torchtune's chunks the same); Transformer Engine's
    parallel cross-entropy 2 + 2 + 4 forward, 4 + 4 + 4 + 2 backward; Liger's fused linear loss 2 + 2 + 2, all in
    the forward. tp 2 splits the vocabulary: 2048 tokens x 50304/2 logits per micro-batch. Pipeline stage 0 of 2
    holds no output layer and pays nothing; a multi-token-prediction module pays its own loss."""
    setup = _setup()
    setup = dataclasses.replace(setup, training=dataclasses.replace(setup.training, cross_entropy=kernel),
                                cluster=dataclasses.replace(setup.cluster, num_gpus=4))
    c = ParallelConfig(micro_batch=1, tp=2, pp=2, sequence_parallel=True)
    logits = 2048 * 50304 / 2

    def terms(setup, stage_index):
        trace = Trace()
        step_time(trace, setup, c, stage_index=stage_index)
        return {t.key: t.value for t in trace.terms}
    last, first = terms(setup, 1), terms(setup, 0)
    assert last["time/loss_traffic_forward"] == pytest.approx(forward * logits / 3.35e12, rel=1e-12)
    assert last["time/loss_traffic_backward"] == pytest.approx(backward * logits / 3.35e12, rel=1e-12)
    assert first["time/loss_traffic_forward"] == first["time/loss_traffic_backward"] == 0
    mtp = dataclasses.replace(setup, model=dataclasses.replace(GPT, mtp_depth=1))
    two = terms(mtp, 1)
    assert two["time/loss_traffic_forward"] == pytest.approx(2 * forward * logits / 3.35e12, rel=1e-12)


def test_fp32_logits_make_no_copy_for_the_pytorch_loss():
    """F.cross_entropy(logits.float()): with fp32 logits (e = 4) `.float()` returns the tensor itself and its
    backward passes the gradient through, so the copy (e + 4 forward) and its cast back (4 + e backward) vanish:
    12 and 20 bytes per logit, log_softmax's and nll_loss's kernels alone; bf16 (e = 2) keeps 18 and 26. The same
    on a NumPy array of element sizes (the search evaluates a column per configuration)."""
    import numpy as np
    from fitplan.timing.elementwise import loss_traffic_per_logit
    assert loss_traffic_per_logit("pytorch", 4) == (12, 20) == loss_traffic_per_logit("chunked", 4)
    assert loss_traffic_per_logit("pytorch", 2) == (18, 26)
    f, b = loss_traffic_per_logit("pytorch", np.array([2, 4, 1]))
    assert f.tolist() == [18, 12, 17] and b.tolist() == [26, 20, 25]


def test_eager_attention_writes_its_scores_and_reruns_their_traffic_under_selective_recompute():
    """Eager with dropout stores the s^2 scores, their mask and dropout output, a*s^2*b*(2e + M)
    = 12*2048^2*2*5 = 503,316,480 B per layer, which selective recompute reruns in the backward, at
    the eager kernels' traffic (12.0 bytes per byte, measured whole on an H200: --kernels eager)."""
    flash = evaluate_step(_setup(), ParallelConfig(micro_batch=2, recompute=Recompute.SELECTIVE))
    setup = _setup(kernel="eager", dropout=True)
    setup = dataclasses.replace(setup, training=dataclasses.replace(setup.training, kernels="eager"))
    eager = evaluate_step(setup, ParallelConfig(micro_batch=2, recompute=Recompute.SELECTIVE))
    term = {t.key: t.value for t in eager.terms}
    assert term["time/layer_elementwise_rerun"] == pytest.approx(12.0 * 503_316_480 / 3.35e12, rel=1e-12)
    assert term["ratio/core_efficiency"] < {t.key: t.value for t in flash.terms}["ratio/core_efficiency"]
    assert eager.step_time_s > flash.step_time_s


def test_fp8_linears_run_at_the_fp8_curve_and_pay_their_casts():
    """fp8: the layers' linears at 0.641*clock of 1979 TFLOP/s with 1-byte inputs; the core and the
    output layer keep bf16's efficiency; the casts move (e + 1)*X forward and (e + 1)*Y + X + Y backward
    (X, Y: the linears' input and output elements), the weights once per step."""
    from fitplan.timing import calibration as CAL
    clock = CAL.of_setup(_setup()).clock
    bf16 = {t.key: t.value for t in evaluate_step(_setup(), ParallelConfig(micro_batch=2)).terms}
    fp8 = {t.key: t.value for t in evaluate_step(_setup(recipe="fp8"), ParallelConfig(micro_batch=2)).terms}
    gemm8 = lambda m, n, k: G.gemm_s(m=m, n=n, k=k, eff_max=0.641 * clock, peak=1979e12, t0=6.11e-6,   # noqa: E731
                                     W=3.07e12, e_in=1)
    lin8 = gemm8(4096, 2304, 768) + gemm8(4096, 768, 768) + gemm8(4096, 3072, 768) + gemm8(4096, 768, 3072)
    flops = 2 * 4096 * (2304 + 768 + 3072) * 768 + 2 * 4096 * 768 * 3072
    assert fp8["ratio/linear_efficiency"] == pytest.approx(flops / (1979e12 * lin8), rel=1e-12)
    assert fp8["ratio/core_efficiency"] == bf16["ratio/core_efficiency"]
    assert fp8["ratio/head_efficiency"] == bf16["ratio/head_efficiency"]
    X = 4096 * (768 + 768 + 768 + 3072)
    Y = 4096 * (2304 + 768 + 3072 + 768)
    W_el = 768 * (2304 + 768 + 3072) + 3072 * 768
    m = 2   # micro-batches per step: global batch 4 / b 2
    assert fp8["bytes/fp8_casts_forward"] == pytest.approx(3 * X + (4 * W_el + 2 * 4 * 1024 * 3 * 4) / m)
    assert fp8["bytes/fp8_casts_backward"] == pytest.approx(3 * Y + X + Y)
    assert fp8["time/fp8_casts_forward"] == pytest.approx(fp8["bytes/fp8_casts_forward"] / 3.35e12)
    assert fp8["time/forward_microbatch"] < bf16["time/forward_microbatch"]


def test_nvfp4_quantization_costs_what_transformer_engine_measured_against_mxfp8():
    """Transformer Engine's GEMM profiling page (gemm_profiling.rst@33294178, the 5B example on a B300: h 4096, ffn
    16384, 15,872 tokens, one layer's 12 GEMMs) measures quantizing at autocast minus pre-quantized per layer:
    NVFP4 6.439 - 3.754 = 2.685 ms, MXFP8 8.507 - 7.324 = 1.183 ms. fitplan's cast count for that layer (weights
    cast every call, m = 1) gives NVFP4 (0.5 + 1/16 bytes written) 0.769 of MXFP8's (1 + 1/32) bytes; q scales NVFP4's
    so the two stand as measured, 2.270 = q*0.769, q = 2.95. Counted by hand for the layer: X = 15872*(3*4096 +
    16384), Y = 15872*(5*4096 + 16384), W = 4096*(3*4096 + 4096 + 2*16384); forward (2 + e)X + (2 + 2e)W (the amax
    history's 2*4*1024*3*4 B too), backward (2 + e)Y + e(X + Y)."""
    from fitplan.timing import elementwise as E
    X, Y, W = 15872 * (3 * 4096 + 16384), 15872 * (5 * 4096 + 16384), 4096 * (3 * 4096 + 4096 + 2 * 16384)
    counted = {r: (2 + e) * X + (2 + 2 * e) * W + 2 * 4 * 1024 * 3 * 4 + (2 + e) * Y + e * (X + Y)
               for r, e in (("mxfp8", 1 + 1 / 32), ("nvfp4", 0.5 + 1 / 16))}
    for r in counted:
        assert E._layer_cast_bytes(r, E.TE_5B_LAYER) == pytest.approx(counted[r], rel=1e-12)
    assert counted["nvfp4"] / counted["mxfp8"] == pytest.approx(0.769, abs=5e-4)
    assert E.NVFP4_CAST_TRAFFIC * counted["nvfp4"] / counted["mxfp8"] == pytest.approx(2.685 / 1.183, rel=1e-12)
    assert E.NVFP4_CAST_TRAFFIC == pytest.approx(2.95, abs=5e-3)
    # in a plan: NVFP4's cast seconds are q times its counted bytes at HBM bandwidth; MXFP8's are their bytes'
    c = ParallelConfig(micro_batch=2)
    base = _setup(gpu="b200", recipe="fp8")
    nv, mx = ({t.key: t.value for t in evaluate_step(dataclasses.replace(base, training=dataclasses.replace(
        base.training, recipe=dataclasses.replace(base.training.recipe, compute=r))), c).terms}
              for r in ("nvfp4", "mxfp8"))
    for key in ("forward", "backward"):
        assert nv[f"time/fp8_casts_{key}"] == pytest.approx(
            E.NVFP4_CAST_TRAFFIC * nv[f"bytes/fp8_casts_{key}"] / 8e12, rel=1e-12)
        assert mx[f"time/fp8_casts_{key}"] == pytest.approx(mx[f"bytes/fp8_casts_{key}"] / 8e12, rel=1e-12)
        assert nv[f"time/fp8_casts_{key}"] > mx[f"time/fp8_casts_{key}"]


def test_layers_kept_in_bf16_run_their_linears_at_the_bf16_curve():
    """--bf16-last-layers 1 of GPT's 2 layers (Megatron-Core's first_last_layers_bf16: that layer runs outside the
    fp8 autocast, megatron/core/fp8_utils.py): one layer's linears run as the bf16 recipe's and one as the fp8
    recipe's, at equal FLOPs, so their seconds average: 1/(peak8*eff) = (1/(peak8*eff8) + 1/(peak16*eff16))/2
    (eff8, eff16: the linear efficiencies of the all-fp8 and the bf16 plans). The core, the output layer and the
    FLOPs do not move; the kept layer casts nothing (it runs outside the autocast), so the casts' bytes per layer
    are the fp8 plan's over half the layers: 3*X/2 forward with the weights' 4*W_el/2 once per step (the amax
    histories' 2*4*1024*3*4 B stay), (3*Y + X + Y)/2 backward (X, Y, W_el as in the fp8 test above)."""
    c = ParallelConfig(micro_batch=2)
    fp8_setup = _setup(recipe="fp8")
    kept_setup = dataclasses.replace(fp8_setup, training=dataclasses.replace(fp8_setup.training, bf16_last_layers=1))
    bf16, fp8, kept = ({t.key: t.value for t in evaluate_step(s, c).terms}
                       for s in (_setup(), fp8_setup, kept_setup))
    assert kept["layer/bf16_kept/dense"] == 1
    seconds = (1 / (1979e12 * fp8["ratio/linear_efficiency"]) + 1 / (989e12 * bf16["ratio/linear_efficiency"])) / 2
    assert 1 / (1979e12 * kept["ratio/linear_efficiency"]) == pytest.approx(seconds, rel=1e-12)
    for key in ("ratio/core_efficiency", "ratio/head_efficiency", "flops/microbatch/forward"):
        assert kept[key] == fp8[key], key
    X = 4096 * (768 + 768 + 768 + 3072)
    Y = 4096 * (2304 + 768 + 3072 + 768)
    W_el = 768 * (2304 + 768 + 3072) + 3072 * 768
    m = 2
    assert kept["bytes/fp8_casts_forward"] == pytest.approx(3 * X / 2 + (4 * W_el / 2 + 2 * 4 * 1024 * 3 * 4) / m)
    assert kept["bytes/fp8_casts_backward"] == pytest.approx((3 * Y + X + Y) / 2)
    assert fp8["time/forward_microbatch"] < kept["time/forward_microbatch"] < bf16["time/forward_microbatch"]


def test_mxfp8_grouped_gemms_run_at_the_measured_grouped_rate():
    """Megatron-LM's GB200 guide (@eb0783b6): the MXFP8 grouped GEMM reaches 2,672 TFLOP/s at K=7168, N=2048;
    the constant's 3,311 TFLOP/s is gb200's fp8 curve at that shape (8 experts x 4,096 tokens), so the local
    experts' ceiling is 2672/3311 of the fp8 one on Blackwell dies, and only under MXFP8."""
    g = presets.gpu("gb200")
    curve = G.gemm_efficiency(**G.GROUPED_MXFP8_SHAPE, eff_max=g.efficiency_fp8, peak=g.peak_fp8_flops_per_s,
                              t0=g.gemm_overhead_s, W=g.gemm_bandwidth_bytes_per_s, e_in=1) * g.peak_fp8_flops_per_s
    assert curve == pytest.approx(G.GROUPED_MXFP8_CURVE_FLOPS_PER_S, rel=1e-3)
    assert G.GROUPED_MXFP8_SCALE == pytest.approx(2672 / 3311)
    r = G.rates(RAW, g, h=7168, compute="mxfp8")
    assert r["grouped"].eff_max == pytest.approx(r["linear"].eff_max * 2672 / 3311)
    assert "grouped" not in G.rates(RAW, g, h=7168, compute="fp8")
    assert "grouped" not in G.rates(RAW, presets.gpu("h100-80gb"), h=7168, compute="fp8")


def test_a_gpu_without_fp8_refuses_an_fp8_recipe():
    from fitplan.errors import SpecError
    with pytest.raises(SpecError, match="no fp8 peak"):
        evaluate_step(_setup(gpu="a100-80gb", recipe="fp8"), ParallelConfig(micro_batch=2))


def test_the_optimizer_step_is_its_state_traffic():
    """mixed-adam: each parameter's grad (2 B), master (4) and moments (8) read, master, moments and
    the bf16 weight (2) written: 2 + 16 + 8 + 2 = 28 B/param at 3.35 TB/s; ZeRO-1 over 4 ranks
    updates a quarter."""
    setup = _setup()
    one = evaluate_step(setup, ParallelConfig(micro_batch=2))
    psi = next(t.value for t in one.terms if t.key == "time/optimizer") * 3.35e12 / 28
    assert psi == pytest.approx(GPT.num_layers * (12 * 768**2 + 13 * 768) + 50304 * 768 + 2048 * 768 + 2 * 768,
                                rel=1e-12)   # layers, tied embedding, positions, the final norm
    four = dataclasses.replace(setup, cluster=dataclasses.replace(setup.cluster, num_gpus=4),
                               training=dataclasses.replace(setup.training, global_batch=16))
    sharded = evaluate_step(four, ParallelConfig(dp=4, micro_batch=2, zero=ZeroStage.OS))
    assert sharded.parts["time/optimizer"] == pytest.approx(one.parts["time/optimizer"] / 4, rel=1e-12)


def test_gemm_flags_change_the_step_as_documented():
    """A lower ceiling is slower; a larger t0 is slower; --gemm-efficiency-h0 lowers the ceilings."""
    base = evaluate_step(_setup(), ParallelConfig(micro_batch=2)).step_time_s
    assert evaluate_step(_setup(efficiency=0.5), ParallelConfig(micro_batch=2)).step_time_s > base
    assert evaluate_step(_setup(gemm_overhead_s=50e-6), ParallelConfig(micro_batch=2)).step_time_s > base
    assert evaluate_step(_setup(efficiency_h0=4500.0), ParallelConfig(micro_batch=2)).step_time_s > base


def test_arrays_over_candidates_equal_one_at_a_time():
    """The search's RAW path over arrays of tp, cp, micro-batch and ep gives each candidate's
    efficiencies exactly (MoE: the grouped expert GEMMs vary with ep)."""
    mixtral = presets.model("mixtral-8x7b").model
    setup = Setup(mixtral, TrainingSpec(seq_len=4096, recipe=presets.recipe("fp8"), global_batch=64,
                                        attention_kernel="flash", dropout=False),
                  ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=64, gpus_per_node=8, reserve_bytes=0))
    configs = [dict(tp=2, pp=2, dp=16, cp=1, ep=8, micro_batch=1, virtual_stages=1),
               dict(tp=4, pp=1, dp=8, cp=2, ep=4, micro_batch=2, virtual_stages=1),
               dict(tp=1, pp=4, dp=16, cp=1, ep=2, micro_batch=1, virtual_stages=2)]
    from fitplan.search import SETTINGS
    grid = SimpleNamespace(**{k: np.array([c[k] for c in configs]) for k in configs[0]},
                           **{name: getattr(ParallelConfig(), name) for name in SETTINGS},
                           zero=ZeroStage.OS, sequence_parallel=True, recompute=Recompute.SELECTIVE)
    out = step_time(RAW, setup, grid)
    for i, c in enumerate(configs):
        one = evaluate_step(setup, ParallelConfig(zero=ZeroStage.OS, sequence_parallel=True,
                                                  recompute=Recompute.SELECTIVE, **c))
        assert out["time/step"][i] == pytest.approx(one.step_time_s, rel=1e-12)
