"""Compute time and utilisation: FLOPs over the GPU's peak rate times an efficiency.

Symbols: F FLOPs, peak the GPU's dense peak rate for the recipe's GEMM precision
(FLOP/s), eff the fraction of peak a GEMM-heavy step sustains (GpuSpec.efficiency, a
named preset value), t, c tensor- and context-parallel degrees, N GPUs, T_step seconds.
MFU and HFU as [korthikanti] Sec. 6 / Table 5 use them: model FLOPs (no recompute) or
hardware FLOPs (with recompute) per second, over N * peak.

The efficiency is one number per GPU for now; calculon-style curves over GEMM size would
replace `gpu.efficiency` in compute_s's caller without touching this formula.
"""
from fitplan.errors import SpecError
from fitplan.explain import FLOPS, RATIO, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.cluster import GpuSpec

TABLE5 = Cite("korthikanti", "Table 5 (MFU, HFU)")


def peak_flops_per_s(gpu: GpuSpec, compute: str) -> float:
    """The GPU's dense peak for a recipe's GEMM precision ("bf16" or "fp8")."""
    if compute == "fp8":
        if gpu.peak_fp8_flops_per_s is None:
            raise SpecError(f"gpu {gpu.name} has no fp8 peak rate (no fp8 tensor cores); "
                            f"use a bf16 recipe such as --precision mixed-adam, or an fp8 GPU such as h100-80gb")
        return gpu.peak_fp8_flops_per_s
    return gpu.peak_bf16_flops_per_s


@formula("rate/fp8_mixed_peak", "1/(phi/peak_fp8 + (1 - phi)/peak_bf16)  (phi: the FLOPs in the layers' linears)",
         Cite("fp8", "Sec. 4 (GEMMs in fp8; Transformer Engine keeps attention, softmax, norms and the output "
                     "layer in 16-bit)"), "flop/s",
         ("fp8 recipes run only the transformer layers' linear GEMMs in fp8; the attention core (its s^2 "
          "matmuls), the output layer and everything else run at the bf16 rate",))
def fp8_mixed_peak(*, phi, peak_fp8, peak_bf16):
    """The rate of a pass whose share phi of FLOPs is fp8 GEMMs and the rest bf16: the time
    adds, so the rates combine harmonically."""
    return 1 / (phi / peak_fp8 + (1 - phi) / peak_bf16)


@formula("ratio/efficiency", "eff_max*h/(h + h0)", Cite("fitplan", "formulas.md#efficiency (fitted to Korthikanti "
                                                              "Table 5 by bench/calibrate.py)"), RATIO,
         ("GEMM work per layer grows like s*b*h^2 and the memory-bound rest (norms, activations, dropout, "
          "softmax) like s*b*h, so the sustained fraction of peak rises with h towards eff_max",))
def gemm_efficiency(*, eff_max, h, h0):
    return eff_max * h / (h + h0)


@formula("flops/per_gpu", "F/(t*c)", Cite("fitplan", "formulas.md#flops (Megatron column/row-parallel GEMMs)"),
         FLOPS, ("tensor parallel splits every GEMM evenly over t; context parallel splits the tokens over c, "
                 "with load-balanced causal chunks",))
def per_gpu_flops(*, F, t, c):
    return F / (t * c)


@formula("time/compute_pass", "F/(peak*eff)", Cite("fitplan", "formulas.md#compute-time"), SECONDS,
         ("every GEMM runs at eff x the dense peak of the recipe's precision; non-GEMM kernels are "
          "folded into eff",))
def compute_s(*, F, peak, eff):
    return F / (peak * eff)


@formula("ratio/utilisation", "F/(T_step*N*peak)", TABLE5, RATIO,
         ("peak is the dense rate of the recipe's GEMM precision",))
def flops_utilisation(*, F, T_step, N, peak):
    """A fraction in [0, 1]. MFU with model FLOPs (Eq. 7), HFU with hardware FLOPs."""
    return F / (T_step * N * peak)


@formula("rate/flops_per_gpu", "F/(T_step*N)", Cite("narayanan", "Sec. 5.1 (teraFLOP/s per GPU)"), "flops/s",
         ("hardware FLOPs, recompute included, as Narayanan et al. count achieved throughput",))
def flops_per_gpu_per_s(*, F, T_step, N):
    return F / (T_step * N)


@formula("time/training", "8*T*P/(n*X)", Cite("narayanan", "Eq. 4"), SECONDS,
         ("6 FLOPs per parameter per token for forward and backward, 2 more for full recompute",))
def training_time_s(*, T, P, n, X):
    """End-to-end training time for T tokens on n GPUs sustaining X FLOP/s each."""
    return 8 * T * P / (n * X)


@formula("rate/tokens", "B*s/T_step", Cite("fitplan", "formulas.md#throughput"), "tokens/s")
def tokens_per_s(*, B, s, T_step):
    """Training tokens per second: B sequences of s tokens every T_step seconds."""
    return B * s / T_step
