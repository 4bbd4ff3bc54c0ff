"""The end-to-end constants: what a whole framework does around the components, fitted on published runs.

The components (GEMMs by shape, NCCL's collectives, HBM traffic) give the shape of a step; what a
framework does around them (clocks that settle below boost in long runs, attention kernels below
their benchmarks, unfused elementwise work, SMs shared with collectives, host overheads per layer,
stragglers) can only be measured end to end. Each constant below has a physical meaning and a unit,
is written once here and applied once in the time model (the module named beside it). Its value is
fitted by bench/fidelity.py on the published runs in bench/calibration/ (the sources
docs/calibration.md lists, and no others) by least squares on log(predicted/published), with a
weak prior toward its component estimate (the pseudo-observation (ln value - ln prior)/prior_sd);
where the calibration set says nothing about a constant, the prior is what applies, and the error
band says how few runs stand behind it (fitplan.timing.uncertainty).

Tables that come from component measurements (the attention kernels' published benchmarks, the
counted elementwise traffic of each kernel family) are data, not fitted: one fitted scale each
corrects them end to end.

Pure: numbers and arithmetic; a field may be a NumPy array (the fit evaluates many values at once).
"""

from fitplan.arith import geometric_mean, maximum, minimum
from fitplan.record import record
from fitplan.timing import fitted


@record(slots=True)
class Constant:
    """One fitted constant: its name, unit, what it is physically, where it acts, and its prior."""
    name: str
    unit: str
    meaning: str
    acts_in: str
    prior: float
    prior_sd: float       # ln-space spread the prior allows (0.7 ~ a factor of 2)


CONSTANTS = (
    Constant("clock_ampere", "ratio", "sustained clock over boost clock of compute-bound kernels in long runs at "
             "the board's power limit, A100-class dies", "fitplan.timing.gemm.rates", 1.0, 0.3),
    Constant("clock_hopper", "ratio", "the same for H100/H200/H800-class dies", "fitplan.timing.gemm.rates", 1.0,
             0.3),
    Constant("clock_blackwell", "ratio", "the same for B200/GB200-class dies", "fitplan.timing.gemm.rates", 1.0, 0.3),
    Constant("clock_blackwell_ultra", "ratio", "the same for B300/GB300-class dies (Blackwell Ultra)",
             "fitplan.timing.gemm.rates", 1.0, 0.3),
    Constant("attention_scale", "ratio", "fused attention kernels as frameworks run them, over their published "
             "benchmark efficiency (ATTENTION_EFFICIENCY)", "fitplan.timing.layer_rates.layer_rates", 1.0, 0.5),
    Constant("elementwise_scale", "ratio", "HBM traffic of a layer's memory-bound kernels over the counted "
             "traffic of its kernel family (ELEMENTWISE_TRAFFIC; fused and compiled, eager's being measured)",
             "fitplan.timing.elementwise", 1.0, 0.7),
    Constant("moe_traffic", "B/B", "HBM bytes an MoE layer's router, permutation and unpermutation move per byte "
             "of its routed token copies", "fitplan.timing.elementwise", 2.0, 1.0),
    Constant("sm_sharing", "s/s", "compute time lost per second of communication overlapped with it (the SMs "
             "and HBM bandwidth collectives take)", "fitplan.timing.step", 0.1, 1.0),
    Constant("layer_overhead", "s", "host time to launch one layer pass's kernels (Python, the framework, the CUDA "
             "driver); a pass takes at least this, the GPU idling when its own work is shorter; none under CUDA "
             "graphs", "fitplan.timing.overheads", 300e-6, 1.0),
    Constant("moe_sync_overhead", "s", "time a dropless MoE layer's forward loses per local expert after reading "
             "its token counts on the host (the stream drains, then the host launches the local experts' GEMMs "
             "while the GPU waits); none under CUDA graphs or drop-and-pad",
             "fitplan.timing.overheads", 300e-6, 1.0),
    Constant("collective_overhead", "s", "framework time per collective issued on top of NCCL's own (stream "
             "synchronisation, bucketing, launch)", "fitplan.timing.axes.collective", 10e-6, 1.0),
    Constant("comm_efficiency", "ratio", "achieved over modelled performance (latency and bandwidth alike) of the "
             "collectives and sends a framework issues (buckets and chunks smaller than nccl-tests', contention "
             "between groups)",
             "fitplan.timing.axes.collective", 0.9, 0.3),
    Constant("a2a_efficiency", "ratio", "achieved over modelled performance of the MoE token all-to-alls on top of "
             "comm_efficiency (dispatch and combine, NCCL or DeepEP; uneven per-peer sizes)",
             "fitplan.timing.expert", 0.7, 0.5),
    Constant("straggler_cv", "ratio", "coefficient of variation of one GPU's time between synchronisations; the "
             "step waits for the slowest of N, cv*sqrt(2 ln N) above the mean", "fitplan.timing.step", 0.01, 1.0),
)
NAMES = tuple(c.name for c in CONSTANTS)
BY_NAME = {c.name: c for c in CONSTANTS}

PRIORS = {c.name: c.prior for c in CONSTANTS}
# The fitted values (fitplan.timing.fitted, written by bench/fidelity.py --write, which prints them with the rows
# each rests on; tests/unit/test_calibration.py checks they equal a fresh fit on bench/calibration/)
SHIPPED = {name: fitted.VALUES.get(name, prior) for name, prior in PRIORS.items()}

# GPU architecture -> its clock constant (fitplan.specs.cluster.GpuSpec.architecture)
CLOCK_OF = {"ampere": "clock_ampere", "hopper": "clock_hopper", "blackwell": "clock_blackwell",
            "blackwell-ultra": "clock_blackwell_ultra"}


def unseen_clock(values, names=tuple(CLOCK_OF.values())):
    """The sustained clock fraction of a generation no run covers: the geometric mean of the generations' that
    runs do (names; default every clock constant). Every generation fitted so far sustains less than its boost
    clock in long runs, so the boost clock (1) would make an unseen one the fastest of all; the mean says "like
    the others", and the error band says that no run stands behind it. Floats or NumPy arrays."""
    return geometric_mean(values[name] for name in names)


# The part each generation's clock constant refers to (A100 SXM, H100 SXM, B200, B300): its dense bf16 FLOP/s and
# power limit in W, as fitplan.presets.gpus cites them; other parts of the die scale from it (rated_clock).
BASE_PART = {"ampere": (312e12, 400), "hopper": (989e12, 700), "blackwell": (2250e12, 1000),
             "blackwell-ultra": (2250e12, 1000)}

# Attention kernels' efficiency: the fraction of the dense bf16 peak a fused attention kernel sustains on
# the FLOPs it executes (a causal mask skips half), forward and backward together at head dim 128 and
# 8K tokens, weighting the backward's 2.5x FLOPs: 3.5/(1/fwd + 2.5/bwd). Read off the published
# benchmarks: FlashAttention-2 on A100 (Dao 2023, arXiv:2307.08691 Fig. 4, causal, head dim 128: fwd+bwd
# about 200 of 312 TFLOP/s); on H100 FlashAttention-2 370 fwd / 300 bwd, cuDNN 600 / 480,
# FlashAttention-3 646 / 530 TFLOP/s of 989 (Shah et al. 2024, arXiv:2407.08608 Fig. 5, 6); Blackwell's:
# cuDNN's own training benchmark at Llama 3.1's shape (batch 2, 64 query and 8 KV heads, causal, 8K, cuDNN 9.22,
# NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/{gb200,gb300}/llama3.1_20260424_*.csv
# @60e572b7), GB200 1,574 / 1,332 and GB300 1,856 / 1,435 TFLOP/s, 1,393 and 1,534 of 2,250; the GB300's
# lead is Blackwell Ultra's doubled exponential units (the softmax, which bounds Blackwell's forward). On B200
# (same repository, artifacts/sdpa_bf16_benchmark_results_NVIDIA_B200.csv @bb37575d: 128 query heads, 8K,
# causal) cuDNN 9.13 measured 1,171 / 943 (0.44) and FlashAttention-2 2.7.4 400 / 318 (0.15: Hopper's kernel on
# Blackwell); FlashAttention-4 1,426 / 1,284 (0.59; Zadouri et al. 2026, arXiv:2603.05451). The calibration
# set's releases (25.09-26.08) ran their containers' cuDNN, most of them 2026's. Entries no benchmark covers take
# the closest one, said.
ATTENTION_EFFICIENCY = {
    ("blackwell-ultra", "flash2"): 0.15, ("blackwell-ultra", "cudnn"): 0.68, ("blackwell-ultra", "flash3"): 0.68,   # FA2: B200's
    ("ampere", "flash2"): 0.64, ("ampere", "cudnn"): 0.64, ("ampere", "flash3"): 0.64,   # FA3 needs Hopper: FA2's
    ("hopper", "flash2"): 0.32, ("hopper", "cudnn"): 0.52, ("hopper", "flash3"): 0.56,
    ("blackwell", "flash2"): 0.15, ("blackwell", "cudnn"): 0.62, ("blackwell", "flash3"): 0.62,   # FA2: B200's
}
# Head dim 64 against 128: the same kernel at d 64 sustains a fraction of its d 128 rate (the softmax's
# exponentials and the rescaling are per score, whatever d, while the matmul FLOPs per score halve). On H100 the
# FlashAttention-3 paper measures each kernel at both (arXiv:2407.08608 Fig. 5a/5b and 6a/6b, non-causal, 8K, BF16:
# forward / backward TFLOP/s at d 64 and d 128): FlashAttention-2 322/287 and 370/318, cuDNN 412/432 and 600/518,
# FlashAttention-3 496/472 and 646/559, weighted as above 3.5/(1/fwd + 2.5/bwd). On Blackwell no benchmark
# separates the head dim; cuDNN 9.19's training benchmark runs gpt-oss's attention (d 64, a 1,024-token window,
# 64 query and 8 KV heads, batch 2) and Llama 3.1's (d 128, causal) on GB200, GB300 and H200 alike
# (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/{gb200,gb300,h200}_919_only_cudnn/
# {gpt_oss,llama3.1}_202602*.csv @df73764, 8K): gpt-oss's shape at 0.459 (GB200), 0.455 (GB300) and 0.551 (H200)
# of Llama's rate. Blackwell's factor is Hopper's cuDNN one times its ratio over H200's (the window costing the
# same share on both): 0.659 and 0.652. FlashAttention-2 on Blackwell and Ampere takes its H100 factor (the same
# kernel). Between 64 and 128 the factor is interpolated in d; at 128 and above it is 1 (the table's own).
FA3_PAPER_D64 = {"flash2": ((322, 287), (370, 318)), "cudnn": ((412, 432), (600, 518)),
                 "flash3": ((496, 472), (646, 559))}   # kernel: ((fwd, bwd) at d 64, (fwd, bwd) at d 128), TFLOP/s
CUDNN_919_8K = {"blackwell": ((609, 646), (1598, 1311)), "blackwell-ultra": ((718, 668), (1887, 1385)),
                "hopper": ((349, 300), (644, 541))}   # ((gpt-oss fwd, bwd), (Llama 3.1 fwd, bwd)), TFLOP/s


def fwd_bwd_rate(fwd, bwd):
    """A kernel's rate over its forward and backward together, the backward doing 2.5x the FLOPs."""
    return 3.5 / (1 / fwd + 2.5 / bwd)


def _ratio(pair):
    return fwd_bwd_rate(*pair[0]) / fwd_bwd_rate(*pair[1])


_HOPPER_D64 = {kernel: _ratio(pair) for kernel, pair in FA3_PAPER_D64.items()}
_BLACKWELL_D64 = {arch: _HOPPER_D64["cudnn"] * _ratio(CUDNN_919_8K[arch]) / _ratio(CUDNN_919_8K["hopper"])
                  for arch in ("blackwell", "blackwell-ultra")}
ATTENTION_D64 = {
    **{("hopper", kernel): r for kernel, r in _HOPPER_D64.items()},
    **{("ampere", kernel): _HOPPER_D64["flash2"] for kernel in FA3_PAPER_D64},   # FlashAttention-2 on Ampere
    **{(arch, kernel): (_HOPPER_D64["flash2"] if kernel == "flash2" else r)
       for arch, r in _BLACKWELL_D64.items() for kernel in FA3_PAPER_D64},
}

# fp8 attention (Transformer Engine's fp8 dot-product attention on cuDNN): the bf16 kernel's forward + backward
# time over the fp8 one's, by sequence length (2K, 4K, 8K, 16K, 32K), as cuDNN's training benchmark measures the
# three attention shapes it runs (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/, causal,
# non-deterministic backward): Llama 3.1's (d 128, 64 query and 8 KV heads) and DeepSeek-V3's MLA (d 192/128,
# 128 heads) on GB200 and GB300 with cuDNN 9.22 (llama3.1/, dsv3/ @60e572b7), and Llama 3.1's fp8 on H200 with
# cuDNN 9.19 (h200_919_only_cudnn/ @df73764; Hopper has no MXFP8, and its fp8 kernels refuse d 64 and ran no MLA
# case). Under an MXFP8 recipe the attention is MXFP8, else per-tensor fp8. Any other shape keeps bf16's rate:
# the benchmark's one fp8 case at d 64 (gpt_oss/, its 128-token window) has an fp8 backward that grows as s^2
# (0.46 of bf16's speed at 2K, 0.06 at 32K), about a full causal layer's cost, which is how fitplan already times
# gpt-oss's windowed layers (docs/calibration.md#fp8-attention).
FP8_ATTENTION_SEQ = (2048, 4096, 8192, 16384, 32768)
FP8_ATTENTION_SPEEDUP = {   # (architecture, shape, format): bf16 time / fp8 time at FP8_ATTENTION_SEQ
    ("blackwell", "d128", "fp8"): (1.006, 1.079, 1.138, 1.236, 1.371),
    ("blackwell", "d128", "mxfp8"): (0.911, 0.974, 1.018, 1.101, 1.184),
    ("blackwell-ultra", "d128", "fp8"): (1.051, 1.185, 1.304, 1.402, 1.463),
    ("blackwell-ultra", "d128", "mxfp8"): (0.907, 0.985, 1.051, 1.109, 1.133),
    ("blackwell", "mla", "fp8"): (1.551, 1.575, 1.611, 1.676, 1.653),
    ("blackwell", "mla", "mxfp8"): (1.277, 1.308, 1.283, 1.376, 1.406),
    ("blackwell-ultra", "mla", "fp8"): (1.680, 1.738, 1.773, 1.842, 1.829),
    ("blackwell-ultra", "mla", "mxfp8"): (1.327, 1.379, 1.412, 1.437, 1.454),
    ("hopper", "d128", "fp8"): (1.133, 1.075, 0.902, 0.756, 0.747),
}


def fp8_attention_format(compute: str) -> str:
    """The fp8 attention a recipe runs: MXFP8 under an MXFP8 recipe, per-tensor fp8 otherwise."""
    return "mxfp8" if compute == "mxfp8" else "fp8"


def fp8_attention_speedups(architecture: str, d_qk: int, mla: bool, compute: str):
    """FP8_ATTENTION_SPEEDUP's row for a GPU generation, a model's query-key width and the recipe, or None where
    the benchmark ran no such case (bf16's rate kept)."""
    shape = "mla" if mla else ("d64" if d_qk <= 96 else "d128")
    return FP8_ATTENTION_SPEEDUP.get((architecture, shape, fp8_attention_format(compute)))


# The flash kernel each generation runs when none is named (--attention-kernel flash): the framework's
# (fitplan.specs.framework), else these
DEFAULT_FLASH = {"ampere": "flash2", "hopper": "cudnn", "blackwell": "cudnn", "blackwell-ultra": "cudnn"}

# HBM bytes a layer's memory-bound kernels move per byte of activation the layer stores for backward, by kernel
# family, counted op by op for a Llama layer in its forward (docs/calibration.md#elementwise-traffic): a stored
# A = 17*e*h per token (norm inputs and outputs, q/k/v and the MLP's inputs, flash) against 23*e*h moved by fused
# kernels (Transformer Engine: norm 2, RoPE 2.5, each residual add 3, the other norm 2, SwiGLU 10.5) and 68*e*h
# by eager PyTorch (RMSNorm in fp32 16 each, complex RoPE in fp32 12.5, SwiGLU as two kernels 17.5, adds 3 each);
# torch.compile fuses the chains back to about the fused count. One fitted scale (elementwise_scale) carries what
# the tally leaves out (casts, amax, bias and dropout kernels, the backward's own chains). No published run in the set
# is eager, so eager's figure is measured instead, whole: on one H200 (2026-12-04), fitplan's eager reference Llama
# spent 0.1333-0.1350 s of its 16K-token step in memory-bound kernels (torch.profiler, bench/gpu_step.py --profile)
# against the 0.0793 s that the counted 4.0 gave at the elementwise_scale of that day, 1.775: 1.69 times as much, so
# 4.0 x 1.775 x 1.69 = 12.0 HBM bytes per stored byte at the datasheet bandwidth
# (docs/measurements/gpu-step-profile-2026-12-04-nvidia-h200.json; the RMSNorm in fp32 and its backward, RoPE's
# concatenations and the dtype copies are the largest kernels). Being measured whole, the shipped fit does not scale
# it: a refit of the published runs that moves elementwise_scale leaves it where the measurement put it, while a
# user's own fit (`fitplan calibrate --runs`) moves it by that fit's scale over the shipped one.
EAGER_MEASURED_OVER_COUNTED = 1.69
EAGER_COUNTED, SCALE_WHEN_MEASURED = 4.0, 1.775   # the op-by-op tally, and elementwise_scale on the day measured
EAGER_MEASURED_TRAFFIC = round(EAGER_COUNTED * SCALE_WHEN_MEASURED * EAGER_MEASURED_OVER_COUNTED, 1)   # 12.0
ELEMENTWISE_TRAFFIC = {"fused": 1.35, "compiled": 1.5, "eager": EAGER_MEASURED_TRAFFIC}
COUNTED_FAMILIES = ("fused", "compiled")   # their traffic times elementwise_scale; eager's is measured whole


@record(slots=True)
class EndToEnd:
    """The constants that apply to one setup, resolved: floats for a plan, NumPy arrays in the fit."""
    clock: object              # fraction of the boost clock compute-bound kernels sustain (power cap included)
    attention: object          # a flash kernel's efficiency, fraction of the bf16 peak (0: eager, the GEMM curve)
    attention_d64: object      # the same kernel's rate at head dim 64 over its rate at 128 (ATTENTION_D64)
    elementwise: object        # HBM bytes per stored activation byte of the memory-bound kernels
    moe_traffic: object        # HBM bytes per routed-copy byte of an MoE layer's token handling
    sm_sharing: object         # compute seconds lost per second of overlapped communication
    layer_overhead_s: object   # host time to launch one layer pass
    moe_sync_s: object         # a dropless MoE layer forward's host sync, per local expert
    collective_overhead_s: object
    comm_efficiency: object    # achieved fraction of the modelled collective and send bandwidth
    a2a_efficiency: object     # the MoE all-to-alls', on top of comm_efficiency
    straggler_cv: object


def clock_at_power(power, reference):
    """The sustained clock at a power over the clock at a reference power, (P/P_ref)^(1/3): dynamic power goes as
    C*V^2*f with the voltage following the clock along the DVFS curve, so P ~ f^3 (an assumption, printed)."""
    return (power / reference) ** (1 / 3)


def power_clock(*, power, tdp):
    """The clock fraction a power cap leaves: (min(P, P_tdp)/P_tdp)^(1/3)."""
    return clock_at_power(minimum(power, tdp), tdp)


def rated_clock(*, peak, tdp, peak_ref, tdp_ref):
    """A part's sustained fraction of its boost clock over its generation's base part's (the clock constant's):
    its boost is peak/peak_ref times the base part's, its sustained clock (tdp/tdp_ref)^(1/3) times, within its
    boost: min(1, (peak_ref/peak)*(tdp/tdp_ref)^(1/3)). The base part: 1; a card rated at its peak with less power
    sustains less (an A100 PCIe at 300 W: 0.91), one whose rating is already lower, usually 1 (H100 PCIe)."""
    return minimum(1.0, peak_ref / peak * clock_at_power(tdp, tdp_ref))


def resolve(*, architecture: str, kernel: str, kernels: str, cuda_graphs: bool, power=None, tdp=None,
            peak=None, values=None, expert_gemm: str = "per-expert") -> EndToEnd:
    """The constants for one GPU architecture, attention kernel ("eager" or a flash variant), kernel family
    and CUDA-graph choice; values: name -> number or array (default SHIPPED). An architecture without a
    clock constant (AMD, or unknown) sustains the fitted generations' geometric mean (unseen_clock), the band
    saying no run stands behind it."""
    v = SHIPPED if values is None else values
    clock = v[CLOCK_OF[architecture]] if architecture in CLOCK_OF else unseen_clock(v)
    if peak is not None and architecture in BASE_PART:
        ref_peak, ref_tdp = BASE_PART[architecture]
        clock = clock * rated_clock(peak=peak, tdp=ref_tdp if tdp is None else tdp, peak_ref=ref_peak, tdp_ref=ref_tdp)
    if power is not None and tdp is not None:
        clock = clock * power_clock(power=power, tdp=tdp)
    if kernel == "eager":
        attention, d64 = 0.0, 1.0
    else:
        impl = DEFAULT_FLASH.get(architecture, "flash2") if kernel == "flash" else kernel
        base = ATTENTION_EFFICIENCY.get((architecture, impl), ATTENTION_EFFICIENCY[("hopper", impl)])
        attention = minimum(base * v["attention_scale"], 1.0)
        d64 = ATTENTION_D64.get((architecture, impl), ATTENTION_D64[("hopper", impl)])
    return EndToEnd(clock=clock, attention=attention, attention_d64=d64,
                    elementwise=ELEMENTWISE_TRAFFIC[kernels] * v["elementwise_scale"] / (
                        1.0 if kernels in COUNTED_FAMILIES else SHIPPED["elementwise_scale"]),
                    moe_traffic=v["moe_traffic"],
                    sm_sharing=maximum(v["sm_sharing"], 0.0),
                    layer_overhead_s=0.0 if cuda_graphs else v["layer_overhead"],
                    # per local expert: none where one grouped kernel runs them all, or CUDA graphs replay the launches
                    moe_sync_s=0.0 if cuda_graphs or expert_gemm == "grouped" else v["moe_sync_overhead"],
                    collective_overhead_s=v["collective_overhead"],
                    comm_efficiency=minimum(v["comm_efficiency"], 1.0),
                    a2a_efficiency=minimum(v["a2a_efficiency"], 1.0),
                    straggler_cv=v["straggler_cv"])


def of_setup(setup, values=None) -> EndToEnd:
    """The constants for a Setup: its GPU's architecture, power and TDP, its training's attention kernel,
    kernel family and CUDA graphs; the GPU spec's own fitted values (`fitplan calibrate --runs`) over
    `values` (default SHIPPED)."""
    gpu, tr = setup.cluster.gpu, setup.training
    v = dict(SHIPPED if values is None else values)
    if gpu.end_to_end is not None:
        v.update(gpu.end_to_end.values())
    return resolve(architecture=gpu.architecture, kernel=tr.attention_kernel, kernels=tr.kernels,
                   cuda_graphs=tr.cuda_graphs, power=gpu.power_watts, tdp=gpu.tdp_watts,
                   peak=gpu.peak_bf16_flops_per_s, values=v, expert_gemm=tr.expert_gemm)
