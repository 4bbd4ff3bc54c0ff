"""One GPU's training step, measured, against fitplan's estimate for the same run; and, with --profile, the step's
CUDA kernels by class against fitplan's parts.

Run on a machine with one CUDA GPU, from the repository's root:

    python bench/gpu_step.py --gpu h200-141gb --out /tmp/step.json
    python bench/gpu_step.py --gpu h200-141gb --profile [--compile] [--runs 4096x4,2048x8] --out /tmp/profile.json

The model is fitplan's reference Llama (fitplan.validate.reference_model: eager PyTorch, RMSNorm and RoPE as
plain autograd functions, its attention through SDPA held to the FlashAttention backend, fp32 logits for the
loss) at TinyLlama's shape
(22 layers, h 2048, 32 heads, 4 KV heads, SwiGLU 5632, V 32000: 1.10B parameters), in bf16 with fused AdamW on
the bf16 weights, no recompute, no dropout, one micro-batch per step (--compile: through torch.compile). For each
(sequence, micro-batch) it times 10 steps after 3 warm-ups with CUDA events (the median) and asks `fitplan plan`
for the same run on one GPU: `--framework hf` (eager kernels, or `--kernels compiled`; FlashAttention-2,
PyTorch's cross-entropy, a fused optimizer), `--precision bf16-adam` (bf16 weights updated in place; fitplan
counts fp32 moments, torch keeps bf16 ones: the optimizer step is a memory-bound sliver of the step either way).
It prints both with fitplan's 80% band and writes them as JSON.

The whole step is evaluation data, never fitted on. The kernel classes of --profile are component measurements,
as `fitplan calibrate`'s GEMMs are: eager's memory-bound kernels measured so on an H200 are what fitplan takes for
`--kernels eager` (fitplan.timing.calibration.EAGER_MEASURED_TRAFFIC), so on that machine the eager step is
no longer an independent check of that constant.
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


def flags(seq_len: int, micro_batch: int, gpu: str, kernels: str = "eager") -> list:
    s = SHAPE
    return ["plan", "--layers", str(s["num_layers"]), "--hidden", str(s["hidden_size"]), "--heads", str(s["num_heads"]),
            "--kv-heads", str(s["num_kv_heads"]), "--ffn", str(s["ffn_hidden_size"]), "--vocab", str(s["vocab_size"]),
            "--mlp", "swiglu", "--norm", "rmsnorm", "--position", "rope", "--untied-embeddings", "--no-linear-bias",
            "--max-seq-len", str(max(r[0] for r in RUNS)), "--seq-len", str(seq_len), "--micro-batch", str(micro_batch),
            "--global-batch", str(micro_batch), "--gpus", "1", "--gpu", gpu, "--framework", "hf", "--kernels", kernels,
            "--precision", "bf16-adam", "--no-dropout", "--tp", "1", "--pp", "1", "--zero", "0", "--json"]


def predicted(seq_len: int, micro_batch: int, gpu: str, kernels: str = "eager") -> dict:
    from fitplan.cli import main
    out, err = io.StringIO(), io.StringIO()
    code = main(flags(seq_len, micro_batch, gpu, kernels), out=out, err=err)
    if code not in (0, 1):
        raise SystemExit(f"gpu_step: fitplan plan failed: {err.getvalue().strip()}")
    t = json.loads(out.getvalue())["time"]
    return {"step_s": t["step_s"], "band_s": [t["uncertainty"]["low_s"], t["uncertainty"]["high_s"]],
            "parts_s": t["parts_s"], "mfu": t["mfu"]}


def _model(seq_len: int, micro_batch: int, compiled: bool = False):
    """The reference Llama at TinyLlama's shape on the GPU in bf16, SDPA attention, fused AdamW, and a batch;
    compiled: the model through torch.compile (its default mode: Inductor's Triton kernels for the memory-bound
    chains, cuBLAS for the GEMMs)."""
    import torch
    from fitplan.specs import Mlp, ModelSpec, Norm, Position
    from fitplan.specs.parallel import Recompute
    from fitplan.validate.reference_model import Attention, build
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
    return (torch.compile(net) if compiled else net), opt, ids, targets


def train_step(net, opt, ids, targets) -> None:
    """One training step: the loss forward and backward, the optimizer step, the gradients dropped."""
    from fitplan.validate.reference_model import lm_loss
    lm_loss(net(ids), targets).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measured(seq_len: int, micro_batch: int, steps: int = 10, warmup: int = 3, compiled: bool = False) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    net, opt, ids, targets = _model(seq_len, micro_batch, compiled)
    times = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for i in range(warmup + steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            train_step(net, opt, ids, targets)
            end.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end) / 1e3)
    params = sum(p.numel() for p in net.parameters())
    del net, opt
    torch.cuda.empty_cache()
    return {"step_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "params": params}


# What each CUDA kernel of the step is, by its name, the first match in this order: SDPA's flash backend flash_*
# (its template arguments name cutlass), cuBLAS/cuBLASLt GEMMs (nvjet_*, *xmma*, cutlass on Hopper), PyTorch's loss
# (log-softmax, nll_loss), fused AdamW (multi_tensor_apply); the rest is the memory-bound work fitplan calls
# elementwise (norms, RoPE, activations, adds, casts, copies, the embedding)
CATEGORIES = (("attention", ("flash", "fmha", "attention")), ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas")),
              ("loss", ("log_softmax", "logsoftmax", "nll_loss", "cross_entropy")), ("optimizer", ("multi_tensor", "adam")))


def category(kernel: str) -> str:
    name = kernel.lower()
    for cat, marks in CATEGORIES:
        if any(mark in name for mark in marks):
            return cat
    return "elementwise"


def predicted_parts(seq_len: int, micro_batch: int, gpu: str, kernels: str = "eager") -> dict:
    """fitplan's step by the same categories: the layers' linear GEMMs and the logits' (gemm), the attention core
    (forward, twice that backward), the memory-bound kernels (the layer's forward traffic, BACKWARD_TRAFFIC times it
    backward), the loss's kernels (its fp32 copy and cast back included, which the profile counts as elementwise),
    the optimizer step; seconds per step."""
    import shlex
    sys.path.insert(0, str(ROOT / "bench" / "calibration"))
    from published import resolve
    from fitplan.explain import Trace
    from fitplan.timing.elementwise import BACKWARD_TRAFFIC
    from fitplan.timing.step import step_time
    setup, config = resolve(shlex.join(flags(seq_len, micro_batch, gpu, kernels)[1:-1]))
    trace = Trace()
    out = step_time(trace, setup, config)
    v = {}
    for t in trace.terms:
        v.setdefault(t.key, t.value)
    m, L = out["pipeline/microbatches"], setup.model.num_layers
    core, mem = v["time/layer/forward_core"], v["time/layer_elementwise"]
    layer_f, layer_b = v["time/layer/forward"], v["time/layer/backward"]
    loss = v["time/loss_traffic_forward"] + v["time/loss_traffic_backward"]
    head = (v["time/forward_microbatch"] - L * layer_f) + (v["time/backward_microbatch"] - L * layer_b) - loss
    return {"gemm": m * (L * (v["time/layer/forward_linear"] + v["time/layer/backward_linear"]) + head),
            "attention": m * L * 3 * core, "elementwise": m * L * (1 + BACKWARD_TRAFFIC) * mem,
            "loss": m * loss, "optimizer": v["time/optimizer"], "step": out["time/step"]}


def profiled(seq_len: int, micro_batch: int, compiled: bool = False) -> dict:
    """One step after three warm-ups under torch.profiler: CUDA kernel time by category (category()), seconds."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile
    net, opt, ids, targets = _model(seq_len, micro_batch, compiled)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(3):
            train_step(net, opt, ids, targets)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            train_step(net, opt, ids, targets)
            torch.cuda.synchronize()
    totals, kernels = {}, {}
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        us = e.cuda_time_total if us is None else us
        if us <= 0 or e.key.startswith("cuda") or e.key == "ProfilerStep*":
            continue
        cat = category(e.key)
        totals[cat] = totals.get(cat, 0.0) + us / 1e6
        kernels.setdefault(cat, []).append((e.key[:120], round(us / 1e6, 6), e.count))
    del net, opt
    torch.cuda.empty_cache()
    return {"seconds": totals, "top": {c: sorted(k, key=lambda x: -x[1])[:12] for c, k in kernels.items()}}


def hbm_copy_bytes_per_s() -> float:
    """The GPU's achieved HBM bandwidth on a 4 GiB device-to-device copy (read and write counted), the median of 10."""
    import torch
    a = torch.empty(2**31, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    times = []
    for _ in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del a, b
    return 2 * 2**31 / statistics.median(times[3:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h200-141gb", help="the fitplan GPU preset this GPU is")
    parser.add_argument("--out", default=None)
    parser.add_argument("--profile", action="store_true",
                        help="also profile one step: CUDA kernel time by category against fitplan's parts")
    parser.add_argument("--compile", action="store_true",
                        help="the model through torch.compile, against fitplan's --kernels compiled")
    parser.add_argument("--runs", default=None, help="SEQxMICRO_BATCH[,...] instead of the three default runs")
    args = parser.parse_args(argv)
    runs = RUNS if args.runs is None else parse_runs(args.runs)
    if runs is None:
        print(f"gpu_step: --runs {args.runs!r}: give SEQxMICRO_BATCH pairs, e.g. --runs 4096x4,8192x2", file=sys.stderr)
        return 2
    kernels = "compiled" if args.compile else "eager"
    import torch
    if not torch.cuda.is_available():
        print("gpu_step: no CUDA device here", file=sys.stderr)
        return 2
    rows = []
    for seq_len, micro_batch in runs:
        got = measured(seq_len, micro_batch, compiled=args.compile)
        want = predicted(seq_len, micro_batch, args.gpu, kernels)
        row = {"seq_len": seq_len, "micro_batch": micro_batch, "measured": got, "predicted": want,
               "error": want["step_s"] / got["step_s"] - 1,
               "in_band": want["band_s"][0] <= got["step_s"] <= want["band_s"][1]}
        if args.profile:
            prof = profiled(seq_len, micro_batch, compiled=args.compile)
            parts = predicted_parts(seq_len, micro_batch, args.gpu, kernels)
            row["profile"], row["predicted_parts_s"] = prof, parts
            for cat in ("gemm", "attention", "elementwise", "loss", "optimizer"):
                got_s, want_s = prof["seconds"].get(cat, 0.0), parts.get(cat)
                print(f"  {cat:12} kernels {got_s:.4f} s" + ("" if want_s is None else f", fitplan {want_s:.4f} s"))
        rows.append(row)
        print(f"s={seq_len:>5} b={micro_batch}: measured {got['step_s']:.4f} s (min {got['min_s']:.4f}, max "
              f"{got['max_s']:.4f}), fitplan {want['step_s']:.4f} s (80% band {want['band_s'][0]:.4f}-"
              f"{want['band_s'][1]:.4f}), error {row['error']:+.1%}, {'in' if row['in_band'] else 'outside'} the band")
    record = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              **({"hbm_copy_bytes_per_s": hbm_copy_bytes_per_s()} if args.profile else {}),
              "torch": torch.__version__, "cuda": torch.version.cuda, "fitplan_gpu": args.gpu, "kernels": kernels,
              "flags": " ".join(flags(runs[0][0], runs[0][1], args.gpu, kernels)), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


def parse_runs(text: str):
    """'4096x4,8192x2' -> ((4096, 4), (8192, 2)); None when it does not read so."""
    try:
        runs = tuple(tuple(int(x) for x in part.lower().split("x")) for part in text.split(","))
    except ValueError:
        return None
    return runs if runs and all(len(r) == 2 and min(r) > 0 for r in runs) else None


if __name__ == "__main__":
    sys.exit(main())
