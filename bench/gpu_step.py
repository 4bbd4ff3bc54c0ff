"""One GPU's training step, measured, against fitplan's estimate for the same run: evaluation data, never fitted on.

Run on a machine with one CUDA GPU, from the repository's root:

    python bench/gpu_step.py --gpu h200-141gb --out /tmp/step.json

The model is fitplan's reference Llama (fitplan.validate.reference_model: eager PyTorch, RMSNorm and RoPE as
plain autograd functions, its attention through SDPA held to the FlashAttention backend, fp32 logits for the
loss) at TinyLlama's shape
(22 layers, h 2048, 32 heads, 4 KV heads, SwiGLU 5632, V 32000: 1.10B parameters), in bf16 with fused AdamW on
the bf16 weights, no recompute, no dropout, one micro-batch per step. For each (sequence, micro-batch) it times
10 steps after 3 warm-ups with CUDA events (the median) and asks `fitplan plan` for the same run on one GPU:
`--framework hf` (eager kernels, FlashAttention-2, PyTorch's cross-entropy, a fused optimizer), `--precision
bf16-adam` (bf16 weights updated in place; fitplan counts fp32 moments, torch keeps bf16 ones: the optimizer step
is a memory-bound sliver of the step either way). It prints both with fitplan's 80% band and writes them as JSON.
"""
import argparse
import datetime
import io
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SHAPE = dict(num_layers=22, hidden_size=2048, num_heads=32, num_kv_heads=4, ffn_hidden_size=5632, vocab_size=32000)
RUNS = ((4096, 4), (8192, 2), (2048, 8))   # (sequence, micro-batch): 16,384 tokens a step each


def flags(seq_len: int, micro_batch: int, gpu: str) -> list:
    s = SHAPE
    return ["plan", "--layers", str(s["num_layers"]), "--hidden", str(s["hidden_size"]), "--heads", str(s["num_heads"]),
            "--kv-heads", str(s["num_kv_heads"]), "--ffn", str(s["ffn_hidden_size"]), "--vocab", str(s["vocab_size"]),
            "--mlp", "swiglu", "--norm", "rmsnorm", "--position", "rope", "--untied-embeddings", "--no-linear-bias",
            "--max-seq-len", str(max(r[0] for r in RUNS)), "--seq-len", str(seq_len), "--micro-batch", str(micro_batch),
            "--global-batch", str(micro_batch), "--gpus", "1", "--gpu", gpu, "--framework", "hf",
            "--precision", "bf16-adam", "--no-dropout", "--tp", "1", "--pp", "1", "--zero", "0", "--json"]


def predicted(seq_len: int, micro_batch: int, gpu: str) -> dict:
    from fitplan.cli import main
    out, err = io.StringIO(), io.StringIO()
    code = main(flags(seq_len, micro_batch, gpu), out=out, err=err)
    if code not in (0, 1):
        raise SystemExit(f"gpu_step: fitplan plan failed: {err.getvalue().strip()}")
    t = json.loads(out.getvalue())["time"]
    return {"step_s": t["step_s"], "band_s": [t["uncertainty"]["low_s"], t["uncertainty"]["high_s"]],
            "parts_s": t["parts_s"], "mfu": t["mfu"]}


def measured(seq_len: int, micro_batch: int, steps: int = 10, warmup: int = 3) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from fitplan.specs import Mlp, ModelSpec, Norm, Position
    from fitplan.specs.parallel import Recompute
    from fitplan.validate.reference_model import Attention, build, lm_loss
    spec = ModelSpec(name="tinyllama-shape", mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
                     tied_embeddings=False, linear_bias=False, max_seq_len=max(r[0] for r in RUNS), **SHAPE)
    torch.manual_seed(0)
    net = build(spec, dropout_p=0.0, recompute=Recompute.NONE, dtype=torch.bfloat16, device="cuda").train()
    for module in net.modules():   # SDPA, as torchtitan's attention, in place of the reference's eager softmax
        if isinstance(module, Attention):
            module.sdpa = True
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, spec.vocab_size, (micro_batch, seq_len), device="cuda")
    targets = torch.randint(0, spec.vocab_size, (micro_batch, seq_len), device="cuda")
    times = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for i in range(warmup + steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            lm_loss(net(ids), targets).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            end.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end) / 1e3)
    params = sum(p.numel() for p in net.parameters())
    del net, opt
    torch.cuda.empty_cache()
    return {"step_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "params": params}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h200-141gb", help="the fitplan GPU preset this GPU is")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_step: no CUDA device here", file=sys.stderr)
        return 2
    rows = []
    for seq_len, micro_batch in RUNS:
        got, want = measured(seq_len, micro_batch), predicted(seq_len, micro_batch, args.gpu)
        row = {"seq_len": seq_len, "micro_batch": micro_batch, "measured": got, "predicted": want,
               "error": want["step_s"] / got["step_s"] - 1,
               "in_band": want["band_s"][0] <= got["step_s"] <= want["band_s"][1]}
        rows.append(row)
        print(f"s={seq_len:>5} b={micro_batch}: measured {got['step_s']:.4f} s (min {got['min_s']:.4f}, max "
              f"{got['max_s']:.4f}), fitplan {want['step_s']:.4f} s (80% band {want['band_s'][0]:.4f}-"
              f"{want['band_s'][1]:.4f}), error {row['error']:+.1%}, {'in' if row['in_band'] else 'outside'} the band")
    record = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "cuda": torch.version.cuda, "fitplan_gpu": args.gpu,
              "flags": " ".join(flags(RUNS[0][0], RUNS[0][1], args.gpu)), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
