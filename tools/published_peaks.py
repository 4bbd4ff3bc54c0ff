"""Published measured memory peaks of real runs, planned as the runs were configured.

Run: python tools/published_peaks.py > docs/peaks.md   (tests/unit/test_layouts_doc.py checks the
file is what this prints). The measured figures are only compared here, never fitted to:
fitplan's memory terms come from framework source and CPU measurements (docs/formulas.md).

The runs: torchtitan's Llama 3.1 benchmarks on 8 to 512 H100 (benchmarks/llama3_h100_202412_torchtitan.md
in pytorch/torchtitan, torch 1963fc8, torchtitan 9dec370, December 2024). Their "Memory(GiB)" is
torch.cuda.memory_stats()["reserved_bytes.all.peak"] (torchtitan/metrics.py get_peak_stats), which
leaves out the CUDA context and NCCL's buffers, so fitplan's peak is compared less those two terms.
How the runs were configured, from torchtitan at 9dec370:
  - FSDP2 mixed precision: bf16 compute and all-gathers, fp32 sharded parameters, fp32 gradient
    reduce (config_manager.py mixed_precision_param/reduce): fitplan's megatron-fp32-grad recipe
    (w = 2 gathered, g = 4; it also counts a 2 B/param bf16 shard torchtitan does not keep);
  - AdamW with foreach (optimizer.fused off by default), F.cross_entropy on fp32 logits (train.py
    loss_fn; with tensor parallelism the loss is vocab-parallel), SDPA flash attention, no dropout,
    expandable_segments (run_llama_train.sh), sequence 8192 unless the table says otherwise;
  - with pipeline stages, FSDP does not reshard after forward (parallelize_llama.py apply_fsdp) and
    the micro-batches are the pipeline degree (experimental.pipeline_parallel_microbatches default).
torch.compile and torchao's float8 linears, which most rows used, are not modelled: fitplan plans
the eager bf16 run, so those rows compare an eager prediction with a compiled measurement.
"""
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fitplan.cli import main  # noqa: E402
from fitplan.memory.timeline import OUTSIDE_ALLOCATOR  # noqa: E402   (what max_memory_reserved does not see)

SOURCE = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
COMMON = ["--gpu", "h100-80gb", "--gpu-memory", "96 GiB", "--reserve", "0 GiB", "--precision", "megatron-fp32-grad",
          "--optimizer-impl", "foreach", "--cross-entropy", "pytorch", "--fragmentation", "0",
          "--attention-kernel", "flash", "--no-dropout", "--zero", "3"]


def _8b(gpus, *, extra=()):
    return ["--preset", "llama3.1-8b", "--gpus", str(gpus), "--dp", str(gpus), "--micro-batch", "2",
            "--global-batch", str(2 * gpus), "--recompute", "op", "--seq-len", "8192", *extra]


def _8b_cp(fsdp, cp, seq):
    return ["--preset", "llama3.1-8b", "--gpus", "8", "--dp", str(fsdp), "--cp", str(cp), "--micro-batch", "1",
            "--global-batch", str(fsdp), "--recompute", "full", "--seq-len", str(seq)]


def _405b(fsdp, cp, seq, *, local_batch, v=1):
    return ["--preset", "llama3.1-405b", "--gpus", "512", "--dp", str(fsdp), "--cp", str(cp), "--tp", "8",
            "--sequence-parallel", "--pp", "8", "--virtual-stages", str(v), "--no-reshard-after-forward",
            "--micro-batch", str(local_batch // 8), "--global-batch", str(local_batch * fsdp), "--recompute", "full",
            "--seq-len", str(seq)]


# name, flags, measured GiB, what the run used that fitplan does not model ("" for none), the table
RUNS = [
    ("8B, 8 GPUs, FSDP", _8b(8), 82.4, "", "Table 1"),
    ("8B, 8 GPUs, FSDP + compile", _8b(8), 77.0, "compile", "Table 1"),
    ("8B, 8 GPUs, FSDP + compile + Float8", _8b(8), 76.8, "compile, float8", "Table 1"),
    ("8B, 128 GPUs, FSDP", _8b(128), 67.0, "", "Table 3"),
    ("8B, 128 GPUs, FSDP + compile", _8b(128), 62.0, "compile", "Table 3"),
    ("8B, 128 GPUs, FSDP + compile + Float8", _8b(128), 61.8, "compile, float8", "Table 3"),
    ("8B, FSDP 8, CP 1, 32K", _8b_cp(8, 1, 32768), 83.9, "compile, float8", "Table 2"),
    ("8B, FSDP 4, CP 2, 64K", _8b_cp(4, 2, 65536), 84.2, "compile, float8", "Table 2"),
    ("8B, FSDP 2, CP 4, 128K", _8b_cp(2, 4, 131072), 84.0, "compile, float8", "Table 2"),
    ("8B, FSDP 1, CP 8, 256K", _8b_cp(1, 8, 262144), 84.5, "compile, float8", "Table 2"),
    ("70B, 256 GPUs, FSDP 32, TP 8", ["--preset", "llama3.1-70b", "--gpus", "256", "--dp", "32", "--tp", "8",
                                      "--sequence-parallel", "--micro-batch", "16", "--global-batch", "512",
                                      "--recompute", "full", "--seq-len", "8192"], 71.9, "compile, float8", "Table 4"),
    ("405B, 512 GPUs, FSDP 8, TP 8, PP 8, 1F1B", _405b(8, 1, 8192, local_batch=32), 82.5,
     "compile, float8, async TP", "Table 5"),
    ("405B, 512 GPUs, FSDP 8, TP 8, PP 8, interleaved", _405b(8, 1, 8192, local_batch=32, v=2), 72.7,
     "compile, float8, async TP", "Table 5"),
    ("405B, FSDP 8, CP 1, 32K", _405b(8, 1, 32768, local_batch=8), 75.3, "compile, float8, async TP", "Table 6"),
    ("405B, FSDP 4, CP 2, 64K", _405b(4, 2, 65536, local_batch=8), 75.9, "compile, float8, async TP", "Table 6"),
    ("405B, FSDP 2, CP 4, 128K", _405b(2, 4, 131072, local_batch=8), 77.1, "compile, float8, async TP", "Table 6"),
    ("405B, FSDP 1, CP 8, 256K", _405b(1, 8, 262144, local_batch=8), 84.9, "compile, float8, async TP", "Table 6"),
]


def plan(flags: list[str]) -> dict:
    out = io.StringIO()
    main(["plan", *COMMON, *flags, "--json"], out=out)
    return json.loads(out.getvalue())


def rows() -> list[tuple]:
    """(name, predicted reserved GiB, measured GiB, error, unmodelled, table, where the peak is)."""
    out = []
    for name, flags, measured, unmodelled, table in RUNS:
        d = plan(flags)
        peak = d["peak"]
        inside = (peak["bytes"] - sum(peak["held"].get(k, 0) for k in OUTSIDE_ALLOCATOR)) / 2**30
        stage = {"only": "the only stage", "first": "the first stage", "last": "the last stage"}.get(
            peak["stage"], f"pipeline {peak['stage']}")
        out.append((name, inside, measured, inside / measured - 1, unmodelled, table, f"{peak['phase']}, {stage}"))
    return out


def document() -> str:
    lines = ["# Published measured peaks, planned as configured", "",
             "Generated by `tools/published_peaks.py` (see its docstring for how each run was configured and "
             "why); `tests/unit/test_layouts_doc.py` keeps this file current. Measured: torchtitan's "
             f"max_memory_reserved in GiB [{SOURCE}]. Predicted: fitplan's peak less the CUDA context and NCCL's "
             "buffers, which that figure does not see. Never fitted to.", "",
             "| run | predicted GiB | measured GiB | error | not modelled | where the peak is | source |",
             "|---|---|---|---|---|---|---|"]
    errors = {"eager": [], "compiled": []}
    for name, pred, meas, err, unmodelled, table, where in rows():
        errors["compiled" if unmodelled else "eager"].append(err)
        lines.append(f"| {name} | {pred:.1f} | {meas:.1f} | {100 * err:+.1f}% | {unmodelled or '-'} | {where} | "
                     f"{table} |")
    lines += ["", "Mean absolute error: "
              + "; ".join(f"{k} runs {100 * sum(abs(e) for e in v) / len(v):.1f}% over {len(v)}"
                          for k, v in errors.items() if v) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(document())
