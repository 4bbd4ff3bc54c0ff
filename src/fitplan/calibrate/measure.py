"""Time GEMMs and collectives with torch on this machine. Imports torch (shell side).

GEMMs: each shape is run `warmup` times, then `iterations` times back to back; CUDA times
with events around the timed loop, the CPU with a wall clock; seconds per GEMM are the
loop's time over iterations. fp8 (CUDA, compute capability 8.9 and up) runs through
torch._scaled_mm with per-tensor scales, as Transformer Engine's fp8 GEMMs do.

Collectives: torch.distributed over the launched ranks (gloo on CPU, NCCL on CUDA). Each
op runs `warmup` times, then `iterations` times, each between barriers; its time is the
median over iterations of the slowest rank's. Bus bandwidth as nccl-tests defines it
(doc/PERFORMANCE.md): all-reduce algbw * 2(n-1)/n, all-gather and all-to-all algbw *
(n-1)/n, algbw = bytes / time with bytes the per-rank buffer (the gathered output for
all-gather).
"""
import statistics
import time

import torch
import torch.distributed as dist

from fitplan.record import record


@record
class GemmTime:
    name: str
    g: int
    m: int
    n: int
    k: int
    fp8: bool
    seconds: float

    @property
    def flops(self) -> float:
        return 2.0 * self.g * self.m * self.n * self.k


@record
class CollectiveTime:
    op: str
    group: str          # "node" (the ranks of one node) or "world"
    ranks: int
    bytes: int
    seconds: float

    @property
    def busbw(self) -> float:
        n = self.ranks
        factor = 2 * (n - 1) / n if self.op == "all_reduce" else (n - 1) / n
        return self.bytes / self.seconds * factor


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(run, device, *, warmup: int, iterations: int) -> float:
    for _ in range(warmup):
        run()
    _sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            run()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3 / iterations
    t0 = time.perf_counter()
    for _ in range(iterations):
        run()
    return (time.perf_counter() - t0) / iterations


def fp8_available(device) -> bool:
    return (device.type == "cuda" and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
            and torch.cuda.get_device_capability(device) >= (8, 9))


def gemm_seconds(*, name, g, m, n, k, fp8, device, warmup, iterations) -> GemmTime:
    """Seconds of one GEMM of g groups of (m x k)(k x n), bf16 in and out (fp8 in, bf16 out)."""
    if fp8:
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()   # column-major, as _scaled_mm wants
        one = torch.ones((), device=device)
        run = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        seconds = _timed(run, device, warmup=warmup, iterations=iterations) * g
    elif g == 1:
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        seconds = _timed(lambda: torch.matmul(a, b), device, warmup=warmup, iterations=iterations)
    else:
        a = torch.randn(g, m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(g, k, n, device=device, dtype=torch.bfloat16)
        seconds = _timed(lambda: torch.bmm(a, b), device, warmup=warmup, iterations=iterations)
    return GemmTime(name, g, m, n, k, fp8, seconds)


def collective_seconds(op: str, *, nbytes: int, group, ranks: int, group_name: str, device, warmup: int,
                       iterations: int) -> CollectiveTime:
    """Median over iterations of the slowest rank's time for one collective of nbytes per rank."""
    elements = max(ranks, nbytes // 2 // ranks * ranks)   # bf16, divisible among the ranks
    buf = torch.ones(elements, device=device, dtype=torch.bfloat16)
    if op == "all_reduce":
        run = lambda: dist.all_reduce(buf, group=group)
    elif op == "all_gather":
        shard = buf[: elements // ranks].clone()
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor   # renamed in torch 2.13
        run = lambda: gather(buf, shard, group=group)
    elif op == "all_to_all":
        out = torch.empty_like(buf)
        run = lambda: dist.all_to_all_single(out, buf, group=group)
    else:
        raise ValueError(op)
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iterations):
        dist.barrier(group=group)
        _sync(device)
        t0 = time.perf_counter()
        run()
        _sync(device)
        elapsed = torch.tensor([time.perf_counter() - t0], device=device, dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
        times.append(float(elapsed.item()))
    return CollectiveTime(op, group_name, ranks, elements * 2, statistics.median(times))
