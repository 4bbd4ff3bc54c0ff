"""`fitplan calibrate`'s body: resolve the model, measure, fit, write the GPU spec file. Imports torch.

Under torchrun every rank runs this. Rank 0 times the model's GEMMs on its device (the other
ranks wait): each layer GEMM of fitplan.timing.layer_gemms at the given --tp, --cp, --ep and
--micro-batch (and the output layer), forward and the two backward shapes, at the micro-batch's
tokens and at a quarter and a sixteenth of them (sizes to separate t0 from the ceiling), in
bf16 and, where the device has fp8 GEMMs, fp8. Every rank then runs the collectives: all-reduce,
all-gather and all-to-all over the ranks of each node, and over the world when the launch spans
nodes. fitplan.calibrate.fit fits the curve; the written [gpu] table is the base GPU (--gpu, or
the preset's) with the measured curve, link rates and, on the CPU, the peak.
"""
import datetime
import json
import os
import platform
from dataclasses import replace

import torch
import torch.distributed as dist

from fitplan.calibrate import fit
from fitplan.calibrate import measure as M
from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.request import CalibrateOptions, Request, options
from fitplan.timing import gemm as G
from fitplan.timing import layer_gemms as LG

WARMUP = 2
LATENCY_BYTES = 8


@record
class Calibration:
    gpu: object                 # the GpuSpec written
    base: str                   # the base GPU's name
    device: str                 # what was measured, in words
    gemms: tuple                # GemmTime, rank 0's
    curve: object               # fit.Curve
    collectives: tuple          # CollectiveTime
    notes: tuple                # what was not measured and what stands in for it


def _distributed(device_kind: str):
    """(rank, world, local world) and an initialised default group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    return rank, world, local


def _device(kind: str):
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise SpecError("--device cuda: torch sees no CUDA device here; use --device cpu or auto")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def layer_shapes(model, *, b: int, s: int, tp: int, cp: int, ep: int):
    """(name, g, m, n, k) of every GEMM to time: the layers' linears and the output layer at b*s/cp
    tokens and at a quarter and a sixteenth of them, forward and the backward's data- and
    weight-gradient shapes, each distinct shape once."""
    if model.num_heads % tp or model.num_kv_heads % tp or model.ffn_hidden_size % tp:
        raise SpecError(f"--tp {tp}: the model's heads ({model.num_heads}), kv heads ({model.num_kv_heads}) and ffn "
                        f"({model.ffn_hidden_size}) must divide by it")
    out, seen = [], set()
    for scale in (1, 4, 16):
        T = max(1, b * s // cp // scale)
        gemms = list(LG.linear_gemms(model, T=T, t=tp)) + list(LG.head_gemms(model, T=T, t=tp))
        if model.moe is not None:
            gemms += [g for g in LG.linear_gemms(model, T=T, t=tp, ep=ep, moe_layer=True) if g.name.startswith("experts")]
        for g in gemms:
            m, n, k, groups = (max(1, int(round(x))) for x in (g.m, g.n, g.k, g.g))
            for shape in ((m, n, k), (m, k, n), (k, n, m)):    # forward, data gradient, weight gradient
                key = (groups,) + shape
                if key not in seen:
                    seen.add(key)
                    out.append((g.name, groups) + shape)
    return out


def _gemm_points(shapes, *, device, iterations, fp8: bool):
    times = [M.gemm_seconds(name=name, g=g, m=m, n=n, k=k, fp8=False, device=device, warmup=WARMUP,
                            iterations=iterations) for name, g, m, n, k in shapes]
    if fp8:   # the layers' linears (not the output layer), forward shapes with k and n multiples of 16
        times += [M.gemm_seconds(name=name, g=g, m=m, n=n, k=k, fp8=True, device=device, warmup=WARMUP,
                                 iterations=iterations)
                  for name, g, m, n, k in shapes if name != "output_layer" and k % 16 == 0 and n % 16 == 0]
    return times


def _collectives(*, device, world: int, local: int, nbytes: int, iterations: int):
    """All-reduce, all-gather and all-to-all over each node's ranks (and over the world when the
    launch spans nodes), and a tiny all-reduce for the per-step latency."""
    if world == 1:
        return ()
    rank = dist.get_rank()
    groups = []
    node_ranks = [list(range(i, i + local)) for i in range(0, world, local)]
    if local > 1:
        node_groups = [dist.new_group(r) for r in node_ranks]   # every rank creates every group
        groups.append(("node", node_groups[rank // local], local))
    if world > local:
        groups.append(("world", None, world))
    out = []
    for name, group, ranks in groups:
        for op in ("all_reduce", "all_gather", "all_to_all"):
            out.append(M.collective_seconds(op, nbytes=nbytes, group=group, ranks=ranks, group_name=name,
                                            device=device, warmup=WARMUP, iterations=iterations))
        out.append(M.collective_seconds("all_reduce", nbytes=LATENCY_BYTES, group=group, ranks=ranks,
                                        group_name=name + " latency", device=device, warmup=WARMUP,
                                        iterations=iterations))
    return tuple(out)


def _link(base_link, collectives, group: str, what: str):
    """The ring model's link (fitplan.timing.comm): bytes/s = the all-reduce's bus bandwidth, latency
    = a tiny all-reduce's time over its 2(n - 1) ring steps."""
    big = next((c for c in collectives if c.group == group and c.op == "all_reduce"), None)
    tiny = next((c for c in collectives if c.group == group + " latency"), None)
    if big is None:
        return base_link
    latency = min(0.099, tiny.seconds / (2 * (tiny.ranks - 1)))
    return replace(base_link, name=f"{what} measured by fitplan calibrate", bytes_per_s=_sig(big.busbw),
                   latency_s=_sig(latency))


def load_average() -> float | None:
    """The 1-minute load average (runnable threads, this run's own included), None where the
    system has none (os.getloadavg is Unix's)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_words(load: float | None, cores: int | None) -> str:
    """'' on a machine with no more runnable threads than cores; else what the measurement ran
    beside, in words: rates measured then are low by an unknown factor."""
    if load is None or not cores or load <= cores:
        return ""
    return f"the machine was busy while it measured (load average {load:.1f} on {cores} cores)"


def calibrate(request: Request) -> Calibration | None:
    """Measure, fit and build the GpuSpec on rank 0 (None on the other ranks)."""
    from fitplan.resolve import resolve
    opts = options(CalibrateOptions, request)
    device = _device(opts.device)
    rank, world, local = _distributed(device.type)
    load_before = load_average()
    values = dict(request.values)
    values.setdefault("gpus", world)
    resolved = resolve(replace(request, values=values))
    setup = resolved.setup
    base = setup.cluster.gpu
    c = resolved.config
    nbytes = opts.message_bytes or (256 * 2**20 if device.type == "cuda" else 4 * 2**20)
    gemms, notes = (), []
    if rank == 0:
        shapes = layer_shapes(setup.model, b=resolved.micro_batch, s=setup.training.seq_len, tp=c.get("tp", 1),
                              cp=c.get("cp", 1), ep=c.get("ep", 1))
        fp8 = M.fp8_available(device)
        gemms = tuple(_gemm_points(shapes, device=device, iterations=opts.iterations, fp8=fp8))
        if not fp8:
            notes.append("no fp8 GEMMs on this device: the fp8 ceiling is the base GPU's")
    if world > 1:
        dist.barrier()
    collectives = _collectives(device=device, world=world, local=local, nbytes=nbytes, iterations=opts.iterations)
    if world > 1:
        dist.barrier()
    if rank != 0:
        return None
    loads = [x for x in (load_before, load_average()) if x is not None]
    busy = busy_words(max(loads) if loads else None, os.cpu_count())
    return _build(base, gemms, collectives, device=device, world=world, local=local, notes=notes,
                  peak_given=request.values.get("peak_tflops") is not None, model=setup.model.name,
                  tp=c.get("tp", 1), busy=busy)


def _sig(x: float, digits: int = 3) -> float:
    """x to `digits` significant digits: the file says what was measured, not the fit's noise."""
    return float(f"{x:.{digits}g}")


def _build(base, gemms, collectives, *, device, world, local, notes, peak_given, model, tp,
           busy: str = "") -> Calibration:
    """busy: busy_words of the load the measurement ran beside ('' when the machine had a core per
    runnable thread). A figure a GPU spec would refuse is not written: the line says what was
    measured and, when it was, that the machine was busy."""
    from fitplan.specs import GpuSpec
    from fitplan.specs.declare import field_bounds
    if busy:
        notes.append(f"{busy}: the GEMM and link rates measured then are likely low; measure again on an idle machine")
    peak = base.peak_bf16_flops_per_s
    if device.type == "cpu" and not peak_given:
        peak = max(g.flops / g.seconds for g in gemms if not g.fp8)
        lowest = field_bounds(GpuSpec, "peak_bf16_flops_per_s")[0]
        if peak < lowest:
            raise SpecError(f"the best measured GEMM ran at {peak / 1e12:.3g} TFLOP/s, below the {lowest / 1e12:g} "
                            f"TFLOP/s a GPU spec accepts{'; ' + busy if busy else ''}: measure again on an idle "
                            f"machine, or give this device's peak with --peak-tflops")
        notes.append(f"CPU: the bf16 peak is the best measured rate, {peak / 1e12:.4g} TFLOP/s (--peak-tflops sets one)")
    peak_fp8 = base.peak_fp8_flops_per_s
    rows = [(g.g, g.m, g.n, g.k, g.seconds, g.fp8, 2, peak_fp8 if g.fp8 else peak, "measured") for g in gemms]
    points = fit.Points.of(rows)
    best = max(points.F / points.peak / points.t)
    if best > 1:
        notes.append(f"a GEMM ran at {best:.2f} x the stated peak: the peak is too low for this device, so the "
                     f"ceiling is capped at 1")
    bracket = (10.0, 14.0) if device.type == "cuda" else (8.0, 12.0)
    curve = fit.fit_curve(points, log10_w=bracket)
    if curve.W >= 10 ** bracket[1] * 0.99:
        notes.append(f"no measured GEMM was memory-bound enough to set the operand bandwidth: W is the top of the "
                     f"range searched, {10 ** bracket[1] / 1e9:g} GB/s")
    low = curve.eff_bf16 is not None and curve.eff_bf16 < 0.001
    if low:
        raise SpecError(f"the measured GEMMs reach {best:.2g} of the stated peak {peak / 1e12:g} TFLOP/s"
                        f"{'; ' + busy + ': measure again on an idle machine, or' if busy else ':'} give this "
                        f"device's peak with --peak-tflops")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "CPU"
    if world == 1:
        notes.append("one process: link rates are the base GPU's (launch with torchrun to measure them)")
    elif world == local:
        notes.append("one node: the inter-node link is the base GPU's")
    gpu = replace(base, name=f"{base.name} calibrated", peak_bf16_flops_per_s=peak, efficiency=round(curve.eff_bf16, 4),
                  efficiency_fp8=base.efficiency_fp8 if curve.eff_fp8 is None else round(curve.eff_fp8, 4),
                  efficiency_h0=0.0, gemm_overhead_s=_sig(curve.t0_s) if curve.t0_s >= 1e-9 else 0.0,
                  gemm_bandwidth_bytes_per_s=_sig(curve.W),
                  intra_node=_link(base.intra_node, collectives, "node", "intra-node"),
                  inter_node=_link(base.inter_node, collectives, "world", "inter-node"),
                  source=f"fitplan calibrate {datetime.date.today().isoformat()} on {name} (torch {torch.__version__}, "
                         f"{world} rank{'s' if world > 1 else ''}): {len(gemms)} GEMMs at {model}'s shapes, tp {tp}; "
                         f"base {base.name}")
    return Calibration(gpu=gpu, base=base.name, device=name, gemms=gemms, curve=curve, collectives=collectives,
                       notes=tuple(notes))


def spec_text(cal: Calibration) -> str:
    """The [gpu] table, headed by what was measured (comments)."""
    from fitplan.files.load import dump_toml
    lines = [f"# written by fitplan calibrate on {cal.device}; every measured GEMM and collective below",
             "# GEMM g x (m x k)(k x n) dtype: measured TFLOP/s (fraction of peak) / the fitted curve's"]
    g = cal.gpu
    for t in cal.gemms:
        peak = g.peak_fp8_flops_per_s if t.fp8 else g.peak_bf16_flops_per_s
        pred = t.flops / G.gemm_s(m=t.m, n=t.n, k=t.k, g=t.g, e_in=1 if t.fp8 else 2, peak=peak,
                                  eff_max=g.efficiency_fp8 if t.fp8 and g.efficiency_fp8 else g.efficiency,
                                  t0=g.gemm_overhead_s, W=g.gemm_bandwidth_bytes_per_s)
        lines.append(f"#   {t.name} {t.g} x ({t.m} x {t.k})({t.k} x {t.n}) {'fp8' if t.fp8 else 'bf16'}: "
                     f"{t.flops / t.seconds / 1e12:.4g} ({t.flops / t.seconds / peak:.3f}) / {pred / 1e12:.4g}")
    for c in cal.collectives:
        lines.append(f"#   {c.op} over {c.ranks} ranks ({c.group}), {c.bytes:,} B: {c.seconds * 1e6:.1f} us, "
                     f"bus bandwidth {c.busbw / 1e9:.3g} GB/s")
    lines += [f"# note: {n}" for n in cal.notes]
    return "\n".join(lines) + "\n" + dump_toml(cal.gpu)


def report(cal: Calibration, output: str, fmt: str) -> str:
    g, c = cal.gpu, cal.curve
    if fmt == "json":
        return json.dumps({"output": output, "base": cal.base, "device": cal.device,
                           "curve": {"efficiency": g.efficiency, "efficiency_fp8": g.efficiency_fp8,
                                     "gemm_overhead_s": g.gemm_overhead_s,
                                     "gemm_bandwidth_bytes_per_s": g.gemm_bandwidth_bytes_per_s,
                                     "peak_bf16_flops_per_s": g.peak_bf16_flops_per_s, "rms_log_error": c.rms},
                           "gemms": [{"name": t.name, "g": t.g, "m": t.m, "n": t.n, "k": t.k,
                                      "dtype": "fp8" if t.fp8 else "bf16", "seconds": t.seconds} for t in cal.gemms],
                           "collectives": [{"op": x.op, "group": x.group, "ranks": x.ranks, "bytes": x.bytes,
                                            "seconds": x.seconds, "busbw_bytes_per_s": x.busbw}
                                           for x in cal.collectives],
                           "links": {"intra_node": {"bytes_per_s": g.intra_node.bytes_per_s,
                                                    "latency_s": g.intra_node.latency_s},
                                     "inter_node": {"bytes_per_s": g.inter_node.bytes_per_s,
                                                    "latency_s": g.inter_node.latency_s}},
                           "notes": list(cal.notes)}, indent=2) + "\n"
    fp8 = "" if g.efficiency_fp8 is None else f", fp8 ceiling {g.efficiency_fp8:g}"
    lines = [f"fitplan calibrate on {cal.device} (base {cal.base}): {len(cal.gemms)} GEMMs, "
             f"{len(cal.collectives)} collectives",
             f"  GEMM curve: max(F/({g.efficiency:g} x {g.peak_bf16_flops_per_s / 1e12:.4g} TFLOP/s), "
             f"B/{g.gemm_bandwidth_bytes_per_s / 1e9:.4g} GB/s) + {g.gemm_overhead_s * 1e6:.3g} us{fp8}; rms log "
             f"error {c.rms:.3f}"]
    for x in cal.collectives:
        lines.append(f"  {x.op:<10} {x.group:<14} {x.ranks} ranks {x.bytes:>13,} B  {x.seconds * 1e6:>10.1f} us  "
                     f"bus {x.busbw / 1e9:.3g} GB/s")
    lines += [f"  intra-node link {g.intra_node.bytes_per_s / 1e9:.4g} GB/s, {g.intra_node.latency_s * 1e6:.3g} us; "
              f"inter-node {g.inter_node.bytes_per_s / 1e9:.4g} GB/s, {g.inter_node.latency_s * 1e6:.3g} us"]
    lines += [f"  note: {n}" for n in cal.notes]
    lines.append(f"wrote {output}: plan with it by 'fitplan plan ... --gpu-spec {output}'")
    return "\n".join(lines) + "\n"


def run_calibrate(request: Request, out) -> int:
    opts = options(CalibrateOptions, request)
    try:
        cal = calibrate(request)
        if cal is not None:
            from fitplan.files.write import write_output
            write_output(opts.output, spec_text(cal), "--output")
            out.write(report(cal, opts.output, opts.format))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
