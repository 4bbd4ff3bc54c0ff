"""The published runs fitplan can state, planned as written, beside their published figures.

Run: python tools/published_layouts.py > docs/layouts.md   (tests/unit/test_layouts_doc.py checks
the file is what this prints). The published figures here are evaluation data, only compared, never
fitted to: fitplan's time constants are fitted on the calibration set alone (docs/calibration.md), and its
memory model is built from the frameworks' source and measurements (docs/formulas.md).
"""
import functools
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fitplan.cli import main  # noqa: E402

L405 = ["--preset", "llama3.1-405b", "--tp", "8", "--pp", "16", "--sequence-parallel", "--zero", "3",
        "--no-reshard-after-forward", "--micro-batch", "1"]

# name, flags, published figure (text), published hardware TFLOP/s per GPU or None, published MFU or None,
# published step seconds or None, source
RUNS = [
    ("Llama 3 405B, 8,192 H100, 8K", L405 + ["--gpus", "8192", "--global-batch", "2048"],
     "430 TFLOP/s per GPU, BF16 MFU 43%", 430, 0.43, None, "Llama 3 report Table 4"),
    ("Llama 3 405B, 16,384 H100, 8K", L405 + ["--gpus", "16384", "--global-batch", "2048"],
     "400 TFLOP/s per GPU, BF16 MFU 41%", 400, 0.41, None, "Llama 3 report Table 4"),
    ("Llama 3 405B, 16,384 H100, 128K", L405 + ["--gpus", "16384", "--cp", "16", "--seq-len", "131072",
                                                "--global-batch", "128"],
     "380 TFLOP/s per GPU, BF16 MFU 38%", 380, 0.38, None, "Llama 3 report Table 4"),
    ("DeepSeek-V3, 2,048 H800", ["--preset", "deepseek-v3", "--gpu", "h800", "--gpus", "2048", "--pp", "16", "--ep",
                                 "64", "--zero", "1", "--schedule", "dualpipe", "--precision", "deepseek-v3-fp8",
                                 "--recompute", "norms"],
     "180K H800 GPU-hours per trillion tokens: 19.9 s per 15,360 x 4,096-token step", None, None,
     180e3 * 3600 / 2048 * 15360 * 4096 / 1e12, "DeepSeek-V3 report Sec. 1 and Table 1; batch Sec. 4.2"),
    # Jean Zay's nodes: four Omni-Path 100 Gb/s links for eight GPUs = 6.25 GB/s per GPU (BLOOM report Sec. 3.4)
    ("BLOOM-176B, 384 A100 80GB", ["--preset", "bloom-176b", "--gpus", "384", "--tp", "4", "--pp", "12", "--zero",
                                   "1", "--recompute", "full", "--inter-node-bandwidth", "6.25 GB/s"],
     "156 TFLOP/s per GPU", 156, None, None, "BLOOM report (arXiv:2211.05100) Sec. 3.4"),
]


def plan(flags: list[str]) -> dict:
    return json.loads(_plan_json(tuple(flags)))


@functools.lru_cache(maxsize=None)
def _plan_json(flags: tuple) -> str:
    """One plan per flag list: the table and the notes read the same runs."""
    out = io.StringIO()
    main(["plan", *flags, "--json"], out=out)
    return out.getvalue()


def _pct(predicted, published) -> str:
    return "" if published is None else f" ({100 * (predicted / published - 1):+.0f}%)"


def table() -> str:
    lines = ["| run | fits (busiest GPU / usable) | step s | TFLOP/s per GPU | MFU (causal) | published |",
             "|---|---|---|---|---|---|"]
    for name, flags, text, tflops, mfu, step, source in RUNS:
        d = plan(flags)
        t = d["time"]
        fits = f"{'yes' if d['fits'] else 'no'} ({d['per_gpu_bytes'] / 2**30:.1f} / {d['usable_bytes_per_gpu'] / 2**30:.0f} GiB)"
        lines.append(f"| {name} | {fits} | {t['step_s']:.2f}{_pct(t['step_s'], step)} | "
                     f"{t['tflops_per_gpu']:.0f}{_pct(t['tflops_per_gpu'], tflops)} | "
                     f"{100 * t['mfu']:.1f}%{_pct(t['mfu'], mfu)} ({100 * t['mfu_causal']:.1f}%) | {text} [{source}] |")
    return "\n".join(lines)


HEADER = """# Published layouts, planned as written

`python tools/published_layouts.py` writes this file. The flags are in README.md ("Published
layouts fitplan can state"). The published figures are compared here and never fitted to.

Conventions:
- fitplan's "TFLOP/s per GPU" counts hardware FLOPs, recompute included, as Megatron-LM and BLOOM report.
- MFU counts the attention core in full (Narayanan et al.). The causal count, in brackets, halves it.
- Meta does not state which convention its BF16 MFU uses. The two differ by 4% at 8K and by 40% at 128K.
- DeepSeek-V3 publishes GPU-hours per token, not MFU. Its step time follows from them and the batch.
- In brackets after a figure: fitplan's error against the published one.

"""

NOTES = """

Assumptions behind these rows:
- **Llama 3.** The paper gives TP, CP, PP and DP, the batch per DP rank and "interleaved" pipelining. It does not give the number of virtual stages, so the rows use none (`--virtual-stages 1`).
  - Two virtual stages: {v2}.
  - Interleaving keeps (1 + (p-1)/(p*v)) times the layers in flight, so it needs more memory.
- **DeepSeek-V3.** The paper states its micro-batch neither in sequences nor in tokens; fitplan plans one 4,096-token sequence.
  - The busiest rank holds two pipeline stages (DualPipe), and 17 of their half-rank chunks are in flight (Table 2's PP+1).
  - {ds}
  - Each routed copy of a token keeps its fp8 dispatched input, its fp8 SwiGLU inputs and its fp32 routing probability. The expert output is not kept: the probability is multiplied in at the activation function, as Megatron-LM's experts do since its "memory efficient token permutation" change (`moe/experts.py`, `fusions/fused_bias_swiglu.py`). Before fitplan read that, it kept the bf16 output for a weighted combine, and predicted 109.3 GiB: does not fit.
  - The margin is thin: the prediction is within 1% of capacity. fitplan has not been tuned to this run.
"""


def _deepseek() -> str:
    """Where DeepSeek-V3's busiest rank spends its memory, from the plan's peak."""
    d = plan(RUNS[3][1])
    held, gib = d["peak"]["held"], 2 ** 30
    part = {k: sum(v for n, v in held.items() if n.startswith(k)) / gib for k in ("states/", "activations/", "runtime/")}
    return (f"At the peak ({d['peak']['phase']}, {d['peak']['stage']}) it holds {d['peak']['bytes'] / gib:.1f} GiB: "
            f"{part['states/']:.1f} GiB of weights, gradients and optimizer, {part['activations/']:.1f} GiB of "
            f"activations and {part['runtime/']:.1f} GiB of runtime buffers (fp8 weight copies "
            f"{held['runtime/fp8_weight_cache'] / gib:.1f}, NCCL {held['runtime/nccl'] / gib:.1f}). "
            f"Risk: {d['risk']['level']}, {100 * d['risk']['peak_fraction_of_capacity']:.1f}% of capacity.")


def _two_virtual_stages() -> str:
    out = []
    for name, flags, *_ in RUNS[:3]:
        d = plan(flags + ["--virtual-stages", "2"])
        fits = "fits" if d["fits"] else f"does not fit ({d['per_gpu_bytes'] / 2**30:.0f} GiB without recompute)"
        out.append(f"{name.split(', ', 1)[1]}: MFU {100 * d['time']['mfu']:.1f}%, {fits}")
    return "; ".join(out)


def document() -> str:
    return HEADER + table() + "\n" + NOTES.format(v2=_two_virtual_stages(), ds=_deepseek())


if __name__ == "__main__":
    sys.stdout.write(document())
