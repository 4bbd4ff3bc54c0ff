"""Compute time and utilisation: FLOPs over the GPU's peak rate times an efficiency.

Symbols: F FLOPs, peak the GPU's dense peak rate for a GEMM's precision (FLOP/s), eff the
fraction of peak it sustains (fitplan.timing.gemm: by GEMM shape, from the GPU's fitted
curve), t, c tensor- and context-parallel degrees, N GPUs, T_step seconds. MFU and HFU as
[korthikanti] Sec. 6 / Table 5 use them: model FLOPs (no recompute) or hardware FLOPs (with
recompute) per second, over N * peak.
"""
from fitplan.errors import SpecError
from fitplan.explain import FLOPS, RATIO, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.cluster import GpuSpec
from fitplan.specs.training import PEAK_OF

TABLE5 = Cite("korthikanti", "Table 5 (MFU, HFU)")


def peak_flops_per_s(gpu: GpuSpec, compute: str) -> float:
    """The GPU's dense peak for a recipe's GEMM precision (bf16, fp8, mxfp8 at the fp8 rate, nvfp4 at the fp4)."""
    kind = PEAK_OF[compute]
    peak = {"bf16": gpu.peak_bf16_flops_per_s, "fp8": gpu.peak_fp8_flops_per_s,
            "fp4": gpu.peak_fp4_flops_per_s}[kind]
    if peak is None:
        raise SpecError(f"gpu {gpu.name} has no {kind} peak rate (no {kind} tensor cores) for --compute-precision "
                        f"{compute}; use a bf16 recipe such as --precision mixed-adam, or a GPU with {kind} tensor "
                        f"cores (fitplan presets list)")
    return peak


@formula("ratio/gemm_ceiling", lambda *, h0, **_: "eff_max*clock" if h0 == 0 else "eff_max*clock*h/(h + h0)",
         Cite("fitplan", "formulas.md#gemm-efficiency (--gemm-efficiency-h0: fitplan's former curve, fitted to "
                         "Korthikanti Table 5; clock: docs/calibration.md)"), RATIO,
         ("the GPU's fitted ceiling at the clock long runs sustain (fitplan.timing.calibration); a given "
          "--gemm-efficiency-h0 scales it by h/(h + h0), as the former one-number curve did",))
def gemm_ceiling(*, eff_max, h, h0, clock=1.0):
    return eff_max * clock * h / (h + h0)


@formula("flops/per_gpu", "F/(t*c)", Cite("fitplan", "formulas.md#flops (Megatron column/row-parallel GEMMs)"),
         FLOPS, ("tensor parallel splits every GEMM evenly over t; context parallel splits the tokens over c, "
                 "with load-balanced causal chunks",))
def per_gpu_flops(*, F, t, c):
    return F / (t * c)


@formula("time/compute_pass", "F/(peak*eff)", Cite("fitplan", "formulas.md#compute-time"), SECONDS,
         ("the GEMMs run at eff x the dense peak of their precision (eff: fitplan.timing.gemm)",))
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


def _update_text(*, master, **_):
    return "(g + 2*K + " + ("2*m_b + w" if master else "2*w") + ")*(psi/n + psi_e/n_e)/W_hbm  (n: the ZeRO shard group)"


@formula("time/optimizer", _update_text, Cite("fitplan", "formulas.md#optimizer-step"), SECONDS,
         ("the update is memory-bound: it reads each parameter's gradient, master copy (or the weight) and "
          "optimizer moments and writes them back with the weight, once, at HBM bandwidth",
          "ZeRO-1 and above: each rank updates its 1/n shard"))
def optimizer_step_s(*, psi, g, K, w, m_b, n, W, master, psi_e=0, n_e=1):
    """Seconds of one optimizer step on one GPU: bytes per updated parameter (g + 2K + 2m_b + w
    with a master copy, g + 2K + 2w without) over the parameters this GPU updates."""
    per_param = g + 2 * K + (2 * m_b + w if master else 2 * w)
    return per_param * (psi / n + psi_e / n_e) / W
