"""GEMM time by shape: the fitted curve, and the rates a recipe's GEMMs run at.

One GEMM multiplies g pairs of an (m x k) by a (k x n) matrix: F = 2*g*m*n*k FLOPs, and
at least B = g*(e_in*(m*k + k*n) + e_out*m*n) bytes of operands read and result written.
Its time (formulas.md#gemm-efficiency), a roofline with a fixed cost:

  T = max(F/(eff_max*peak), B/W) + t0

the FLOPs at a ceiling eff_max of the dense peak (the plateau large GEMMs reach), or the
operands at a bandwidth W if that takes longer, plus a fixed t0 per kernel (launch,
pipeline fill and drain, the last partial wave). Its efficiency F/(peak*T) rises with the
GEMM's size (t0 amortised) and arithmetic intensity F/B, and saturates at eff_max.
eff_max (per dtype), t0 and W are fitted per die by bench/calibrate.py to measured GEMM
throughput by shape (bench/gemm_points.csv) and stored in the GPU presets
(fitplan.presets.gpus); W comes out near each die's HBM bandwidth.

A class of GEMMs (a layer's linears, its attention core, the output layer: fitplan.timing.layer_gemms
lists them) runs at its sustained efficiency, the FLOP-weighted harmonic mean of its GEMMs'
(sum F / (peak * sum T)); fitplan.timing.layer_rates takes a stage's classes so.
"""
from fitplan.arith import maximum, minimum
from fitplan.explain import RATIO, SECONDS, formula
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.specs.training import LOW_PRECISION_BYTES


GEMM = Cite("fitplan", "formulas.md#gemm-efficiency (constants: bench/calibrate.py on bench/gemm_points.csv)")
@formula("time/gemm", "max(2*g*m*n*k/(eff_max*peak), g*(e_in*(m*k + k*n) + e_out*m*n)/W) + t0", GEMM, SECONDS,
         ("a GEMM runs at eff_max of the dense peak unless moving its operands (read once) and result (written "
          "once) at W takes longer; t0 per kernel (no W: the operand term is left out)",))
def gemm_s(*, m, n, k, eff_max, peak, t0, W=None, g=1, e_in=2, e_out=2):
    compute = 2 * g * m * n * k / (eff_max * peak)
    if W is None:
        return compute + t0
    return maximum(compute, g * (e_in * (m * k + k * n) + e_out * m * n) / W) + t0


@formula("ratio/gemm_efficiency", "F/(peak*T_gemm), F = 2*g*m*n*k, T_gemm = max(F/(eff_max*peak), B/W) + t0", GEMM,
         RATIO, ("efficiency rises with the GEMM's size (t0 amortised) and arithmetic intensity F/B, saturating at "
                 "eff_max",))
def gemm_efficiency(*, m, n, k, eff_max, peak, t0, W=None, g=1, e_in=2, e_out=2):
    """The fraction of peak one GEMM sustains: works on ints, floats and NumPy arrays."""
    F = 2 * g * m * n * k
    return F / (peak * gemm_s.fn(m=m, n=n, k=k, eff_max=eff_max, peak=peak, t0=t0, W=W, g=g, e_in=e_in,
                                 e_out=e_out))


@formula("ratio/sustained_efficiency", "sum F/(peak*sum T)  (the FLOP-weighted harmonic mean of the GEMMs')",
         GEMM, RATIO)
def sustained_efficiency(*, F, T, peak):
    return F / (peak * T)


@record(slots=True)
class Gemm:
    """One GEMM of a layer on one GPU: g groups (heads, local experts) of (m x k)(k x n).
    Dimensions are ints for one configuration, arrays over the search's candidates."""
    name: str
    m: object
    n: object
    k: object
    g: object = 1

    @property
    def flops(self):
        return 2 * self.g * self.m * self.n * self.k


@record(slots=True)
class Rate:
    """How one class of GEMMs runs: its ceiling (after the legacy h0 factor), its dense peak
    and its input element's bytes."""
    eff_max: object
    peak: float
    e_in: int



def rates(ev, gpu, *, h, compute: str, clock=1.0) -> dict:
    """The bf16 and linear-GEMM rates of a GPU for a recipe's precision; clock: the fraction of the
    boost clock compute-bound kernels sustain (fitplan.timing.calibration), scaling each ceiling."""
    from fitplan.timing import compute as C
    bf16 = Rate(ev(C.gemm_ceiling, key="ratio/gemm_ceiling", eff_max=gpu.efficiency, h=h, h0=gpu.efficiency_h0,
                   clock=clock), gpu.peak_bf16_flops_per_s, 2)
    if compute == "bf16":
        return {"bf16": bf16, "linear": bf16}
    # a low precision's GEMMs at the fp8 ceiling (no measured MXFP8 or NVFP4 curve: an assumption, said)
    low_max = gpu.efficiency if gpu.efficiency_fp8 is None else gpu.efficiency_fp8
    low = Rate(ev(C.gemm_ceiling, key="ratio/gemm_ceiling_fp8", eff_max=low_max, h=h, h0=gpu.efficiency_h0,
                  clock=clock), C.peak_flops_per_s(gpu, compute), LOW_PRECISION_BYTES[compute])
    out = {"bf16": bf16, "linear": low}
    if compute == "mxfp8" and gpu.architecture in GROUPED_MXFP8_ARCHITECTURES:
        out["grouped"] = Rate(ev(grouped_mxfp8_ceiling, key="ratio/gemm_ceiling_grouped", eff_max=low.eff_max,
                                 scale=GROUPED_MXFP8_SCALE), low.peak, low.e_in)
    return out


# Megatron-Core's MXFP8 grouped GEMM (--moe-grouped-gemm: one cuBLAS GEMM per local expert over several streams)
# reaches 2,672 TFLOP/s on GB200 at K = 7,168, N = 2,048 with L2 flushed (NVIDIA/Megatron-LM
# docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md, Sec. 1 item 3, @eb0783b6).
# The page gives no M or group count: taken as its own baseline's (DeepSeek-V3 at EP 32, micro-batch 1, 4,096
# tokens: 8 local experts of 4,096 tokens each), where gb200's fp8 curve (fitplan.presets.gpus CURVES: 0.677 of
# 5 PFLOP/s, t0 6.38 us, W 5.75 TB/s) gives 3,311 TFLOP/s. Their ratio scales the ceiling of the local experts'
# grouped GEMMs under MXFP8 on every Blackwell die (GB200's the only measurement; tests/unit check the ratio).
GROUPED_MXFP8_FLOPS_PER_S = 2672e12
GROUPED_MXFP8_SHAPE = dict(g=8, m=4096, n=2048, k=7168)
GROUPED_MXFP8_CURVE_FLOPS_PER_S = 3311e12
GROUPED_MXFP8_SCALE = GROUPED_MXFP8_FLOPS_PER_S / GROUPED_MXFP8_CURVE_FLOPS_PER_S
GROUPED_MXFP8_ARCHITECTURES = ("blackwell", "blackwell-ultra")


GROUPED = Cite("megatron-gb200", "Sec. 1 item 3: MXFP8 grouped GEMM, 2,672 TFLOP/s at K=7168, N=2048 on GB200")


@formula("ratio/gemm_ceiling_grouped", "eff_max*scale", GROUPED, RATIO,
         ("the local experts' MXFP8 grouped GEMMs on Blackwell at the measured grouped rate over what the fp8 curve "
          "gives its shape (8 experts x 4,096 tokens assumed: the page's EP 32 DeepSeek-V3 baseline)",))
def grouped_mxfp8_ceiling(*, eff_max, scale):
    return eff_max * scale


# A causal mask: a flash kernel skips the blocks above the diagonal, about half the s^2 FLOPs the attention
# core counts (FlashAttention-2, Dao 2023, Sec. 3.1.1; the benchmarks count causal FLOPs at half)
CAUSAL_FRACTION = 0.5


@formula("ratio/attention_head_dim", "r_64 + (1 - r_64)*(min(max(d, 64), 128) - 64)/64",
         Cite("fitplan", "docs/calibration.md#attention (head dim 64 against 128: FlashAttention-3 paper Fig. 5, 6; "
                         "cuDNN 9.19's training benchmark)"),
         RATIO, ("a flash kernel at head dim d sustains this fraction of its rate at 128: r_64 at 64 (the same "
                 "kernel measured at both), 1 at 128 and above, linear between",))
def head_dim_factor(*, d, r_64):
    return r_64 + (1 - r_64) * (minimum(maximum(d, 64), 128) - 64) / 64


@formula("ratio/attention_fp8_speedup", "q(s): the benchmark's bf16/fp8 time ratio, linear in log2 s between its "
                                        "lengths, held beyond",
         Cite("fitplan", "docs/calibration.md#fp8-attention (cuDNN's training benchmark, fp8 against bf16)"),
         RATIO, ("fp8 attention (--attention-precision fp8) runs q times bf16's rate at its shape and length",))
def fp8_attention_speedup(*, s, seq, q):
    import numpy as np
    return np.interp(np.log2(s), np.log2(seq), q)


@formula("ratio/flash_core_efficiency", "eta*r*clock/causal  (of the counted, full-mask FLOPs)",
         Cite("fitplan", "docs/calibration.md#attention (the kernels' published benchmarks, fitted end to end)"),
         RATIO, ("a causal flash kernel executes about half the counted s^2 FLOPs, at eta*r of the bf16 peak (r: the "
                 "head dim's factor, times fp8 attention's speedup where it runs in fp8)",))
def flash_core_efficiency(*, eta, clock, r=1.0, causal=CAUSAL_FRACTION):
    return eta * r * clock / causal


def operand_bandwidth(gpu):
    """W: the GPU's fitted GEMM operand bandwidth, else its HBM bandwidth, else none."""
    return gpu.gemm_bandwidth_bytes_per_s if gpu.gemm_bandwidth_bytes_per_s is not None else gpu.hbm_bytes_per_s


def class_flops_and_s(ev, gemms, rate: Rate, gpu, *, prefix: str = "", grouped: Rate = None):
    """Sum F and sum T over GEMMs, each T = F/(peak*eff) at the GEMM's own efficiency; grouped: the rate of
    the local experts' grouped GEMMs where it differs from the other linears'."""
    F_sum = T_sum = 0
    W = operand_bandwidth(gpu)
    for gm in gemms:
        rt = grouped if grouped is not None and gm.name.startswith("experts_") else rate
        eff = ev(gemm_efficiency, key=f"ratio/gemm/{prefix}{gm.name}", m=gm.m, n=gm.n, k=gm.k, g=gm.g,
                 eff_max=rt.eff_max, peak=rt.peak, t0=gpu.gemm_overhead_s, W=W, e_in=rt.e_in)
        F_sum = F_sum + gm.flops
        T_sum = T_sum + gm.flops / (rt.peak * eff)
    return F_sum, T_sum

