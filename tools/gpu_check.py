"""The GPU check, in one short run: fitplan's predicted peak against what a real training step holds.

Run on a machine with one CUDA GPU, from the repository's root (PYTHONPATH=src, or pip install -e .):

    python tools/gpu_check.py                       # writes docs/measurements/gpu-<date>-<gpu>.json
    python tools/gpu_check.py --seq-len 2048 --micro-batch 1 --out /tmp/check.json

For SMALL_LLAMA (336M parameters, fitplan.validate) in fp32 with fused AdamW it runs one warm-up
and one measured step for each recompute mode (none, selective, full) and compares
torch.cuda.max_memory_allocated and max_memory_reserved with the planner's peak for the same
one-GPU run (fitplan.validate.runner.judged_cuda_rows: within 5%), and the memory outside the
allocator with --cuda-context's default. It also checks the states as CUDA tensors. It sets
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (fitplan's default allocator model) unless the
caller set it. It prints the rows and writes them with the date, the machine and the versions.
Exit 0 when every judged row is within its tolerance, 1 otherwise, 2 without a GPU.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")   # before torch initialises CUDA


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--out", default=None, help="the JSON to write (default docs/measurements/gpu-DATE-GPU.json)")
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here", file=sys.stderr)
        return 2
    from fitplan import __version__
    from fitplan.validate import SMALL_LLAMA
    from fitplan.validate.report import ValidationReport, as_json, render_text
    from fitplan.validate.runner import cuda_rows
    start = time.perf_counter()
    rows = cuda_rows(SMALL_LLAMA, seq_len=args.seq_len, micro_batch=args.micro_batch, device="cuda")
    report = ValidationReport(model=SMALL_LLAMA.name, seq_len=args.seq_len, micro_batch=args.micro_batch,
                              device="cuda", torch_version=torch.__version__, rows=tuple(rows))
    print(render_text(report))
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name()
    record = {
        "date": datetime.date.today().isoformat(), "fitplan_version": __version__,
        "machine": {"gpu": name, "capability": list(torch.cuda.get_device_capability()),
                    "total_memory_bytes": props.total_memory, "torch": torch.__version__,
                    "cuda": torch.version.cuda, "python": platform.python_version(), "host": platform.platform(),
                    "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")},
        "seconds": round(time.perf_counter() - start, 1), **as_json(report)}
    out = Path(args.out) if args.out else ROOT / "docs" / "measurements" / (
        f"gpu-{record['date']}-{''.join(c if c.isalnum() else '-' for c in name.lower()).strip('-')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    from fitplan.files.write import write_file
    write_file(out, json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
