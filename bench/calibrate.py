"""Fit fitplan's GEMM curves and its memory-bound traffic constant; print them with residuals.

1. GEMM curves (fitplan.timing.gemm): a GEMM of F FLOPs and B operand bytes takes
   T = max(F/(eff_max*peak), B/W) + t0. Per die, on the component measurements of
   bench/gemm_points.csv (their sources are in its header): eff_max per dtype (bf16, fp8),
   t0 and W shared, by fitplan.calibrate.fit (time-weighted squared log error: a step is a
   sum of GEMM times, so large GEMMs count most; rows under 1 GFLOP are not in the file).
   Dies with only maximum-achievable points (gb200, gh200, b300, mi325x) take their sibling die's
   curve with each ceiling scaled by the ratio of the two dies' figures in the same benchmark.
2. A100 (no table by shape) and KAPPA, the memory-bound kernels' bytes per stored activation
   byte (fitplan.timing.gemm.KAPPA): fitted together to Korthikanti et al. Table 4 (the 22B
   layer's forward and backward times, 10 numbers) and Table 5 (8 iteration times), with
   A100's maximum-achievable-matmul row, t0 from H100 and H100's W scaled by A100's HBM
   bandwidth. Each predicted time is affine in KAPPA (checked below), so each eff_max of a
   grid needs one model evaluation.
3. Untuned checks: Narayanan et al. Table 1 (TFLOP/s per GPU), and the efficiency of a dense
   layer with h = 2048 and h = 18432 on H100.
The presets (fitplan.presets.gpus.CURVES, fitplan.timing.gemm.KAPPA) store what this prints,
rounded as shown; tests/unit/test_gemm_fit.py checks that they agree.
Run: python bench/calibrate.py  (seconds)
"""
import csv
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fitplan import presets  # noqa: E402
from fitplan.calibrate import fit  # noqa: E402
from fitplan.calibrate.fit import Curve, Points  # noqa: E402
from fitplan.explain import Trace  # noqa: E402
from fitplan.memory.breakdown import Setup  # noqa: E402
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, Recompute, TrainingSpec  # noqa: E402
from fitplan.timing import evaluate_step  # noqa: E402
from fitplan.timing import gemm as G  # noqa: E402

POINTS = ROOT / "bench" / "gemm_points.csv"
# die -> the rows (their gpu column) it is fitted on; for a sibling: (rows, the die whose t0 and W it takes)
DIES = {"h100": {"h100-80gb", "h800", "h200-141gb"}, "b200": {"b200"}, "mi300x": {"mi300x"}, "mi355x": {"mi355x"}}
SIBLINGS = {"gh200": ({"gh200"}, "h100"), "gb200": ({"gb200"}, "b200"), "b300": ({"b300"}, "b200"),
            "mi325x": ({"mi325x"}, "mi300x")}


def load_points(path=POINTS) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def _arrays(points, gpus) -> Points:
    rows = []
    for p in points:
        if p["gpu"] in gpus:
            g = presets.gpu(p["gpu"])
            fp8 = p["dtype"] == "fp8"
            flops = 2 * float(p["g"]) * float(p["m"]) * float(p["n"]) * float(p["k"])
            rows.append((float(p["g"]), float(p["m"]), float(p["n"]), float(p["k"]),
                         flops / (float(p["tflops"]) * 1e12), fp8, float(p["out_bytes"]),
                         g.peak_fp8_flops_per_s if fp8 else g.peak_bf16_flops_per_s, p["source"].split(":")[0]))
    return Points.of(rows)


def fit_curve(points, gpus) -> Curve:
    return fit.fit_curve(_arrays(points, gpus))


def _measured_eff(points, gpus, dtype, kind):
    """Geometric mean of the measured fraction of peak over the rows of one source kind."""
    effs = []
    for p in points:
        if p["gpu"] in gpus and p["dtype"] == dtype and p["source"].split(":")[0] == kind:
            g = presets.gpu(p["gpu"])
            effs.append(float(p["tflops"]) * 1e12 / (g.peak_fp8_flops_per_s if dtype == "fp8" else g.peak_bf16_flops_per_s))
    return fit.geometric_mean(effs)


def sibling_curve(points, gpus, die: Curve, die_gpus) -> Curve:
    """A die measured only at its best shapes: its sibling's curve (t0, W) with each ceiling
    scaled by the ratio of the two dies' measured efficiencies in the same benchmark (the
    maximum-achievable tables pick a best shape, so their absolute level is biased high; the
    ratio is not)."""
    effs = {}
    for dtype in ("bf16", "fp8"):
        ratios = [a / b for kind in ("mamf", "maf")
                  for a, b in [(_measured_eff(points, gpus, dtype, kind), _measured_eff(points, die_gpus, dtype, kind))]
                  if a is not None and b is not None]
        base = die.eff_bf16 if dtype == "bf16" else die.eff_fp8
        effs[dtype] = None if not ratios or base is None else base * fit.geometric_mean(ratios)
    d = _arrays(points, gpus)
    pred = fit.predict(d, effs["bf16"], effs["fp8"], die.t0_s, die.W)
    r = np.log(pred / d.t)
    return Curve(effs["bf16"], effs["fp8"], die.t0_s, die.W, float(np.sqrt(np.mean(r ** 2))), fit.residuals(d, pred))


def fit_curves(points) -> dict:
    curves = {die: fit_curve(points, gpus) for die, gpus in DIES.items()}
    for die, (gpus, sibling) in SIBLINGS.items():
        curves[die] = sibling_curve(points, gpus, curves[sibling], DIES[sibling])
    return curves


# ---------------------------------------------------------------- A100 and KAPPA on Korthikanti Table 4/5

S, V = 2048, 51200
#        name    a    h      L   t  p   B    b  v  full_s  sel_s  MFU%
TABLE5 = [("22B", 64, 6144, 48, 8, 1, 4, 4, 1, 1.42, 1.10, 41.5), ("175B", 96, 12288, 96, 8, 8, 64, 1, 3, 18.13, 13.75, 51.4),
          ("530B", 128, 20480, 105, 8, 35, 280, 1, 3, 49.05, 37.83, 56.0), ("1T", 160, 25600, 128, 8, 64, 512, 1, 1, 94.42, 71.49, 56.3)]
# Table 4: one layer of the 22B model (t = 8, b = 4): experiment, recompute, SP, forward ms, backward ms
TABLE4 = [("baseline", Recompute.NONE, False, 7.7, 11.9), ("sequence parallel", Recompute.NONE, True, 7.2, 11.8),
          ("full recompute", Recompute.FULL, False, 7.7, 19.5), ("selective", Recompute.SELECTIVE, False, 7.7, 13.2),
          ("selective + SP", Recompute.SELECTIVE, True, 7.2, 13.1)]
# Narayanan et al. 2021 Table 1 (A100 80GB, Selene): params (B), heads, hidden, layers, t, p, d, batch,
# achieved teraFLOP/s per GPU (hardware FLOPs with full recompute, Eq. 3), micro-batch 1 assumed.
NARAYANAN = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 32, 512, 138),
             (7.5, 32, 4096, 36, 4, 1, 32, 512, 142), (18.4, 48, 6144, 40, 8, 1, 32, 1024, 135),
             (39.1, 64, 8192, 48, 8, 2, 32, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 32, 1792, 140),
             (145.6, 96, 12288, 80, 8, 8, 24, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 15, 2160, 155),
             (529.6, 128, 20480, 105, 8, 35, 9, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 6, 3072, 163)]


def setup_for(a, h, L, n, B, gpu):
    model = ModelSpec(name="row", num_layers=L, hidden_size=h, num_heads=a, num_kv_heads=a, ffn_hidden_size=4 * h,
                      vocab_size=V, max_seq_len=S)
    return Setup(model, TrainingSpec(seq_len=S, recipe=presets.recipe("mixed-adam"), global_batch=B),
                 ClusterSpec(gpu=gpu, num_gpus=n, gpus_per_node=8, reserve_bytes=0))


def layer_times(gpu, recompute, sp):
    """Table 4's quantities as fitplan models them: one 22B layer's forward and backward on one
    GPU (t = 8, b = 4), compute and its exposed tensor-parallel collectives: the difference of
    a two-layer and a one-layer model (the output layer cancels)."""
    out = []
    for L in (1, 2):
        setup = setup_for(64, 6144, L, 8, 4, gpu)
        r = evaluate_step(setup, ParallelConfig(tp=8, micro_batch=4, sequence_parallel=sp, recompute=recompute))
        term = {t.key: t.value for t in r.terms}
        # one layer exchange: an all-reduce, or under SP a reduce-scatter and an all-gather
        per_collective = (term["comm/tp_exchange_s"] if "comm/tp_exchange_s" in term else
                          term["comm/tp_exchange_rs_s"] + term["comm/tp_exchange_ag_s"])
        rerun = 2 if recompute is Recompute.FULL else 0
        out.append((term["time/forward_microbatch"] + 2 * L * per_collective,
                    term["time/backward_microbatch"] + (2 + rerun) * L * per_collective))
    return out[1][0] - out[0][0], out[1][1] - out[0][1]


def a100_rows(gpu):
    """(name, measured seconds, predicted seconds) for every Table 4 and Table 5 number."""
    rows = []
    for name, rc, sp, fwd_ms, bwd_ms in TABLE4:
        f, b = layer_times(gpu, rc, sp)
        rows += [(f"T4 {name} fwd", fwd_ms / 1e3, f), (f"T4 {name} bwd", bwd_ms / 1e3, b)]
    for name, a, h, L, t, p, B, b, v, full_s, sel_s, mfu in TABLE5:
        setup = setup_for(a, h, L, t * p, B, gpu)
        for rc, sp, measured in ((Recompute.FULL, False, full_s), (Recompute.SELECTIVE, True, sel_s)):
            config = ParallelConfig(tp=t, pp=p, micro_batch=b, virtual_stages=v, sequence_parallel=sp, recompute=rc)
            rows.append((f"T5 {name} {rc.value}", measured, evaluate_step(setup, config).step_time_s))
    return rows


def _with(gpu, eff, kappa):
    G.KAPPA = kappa   # the module constant the step reads (fitplan.timing.gemm.KAPPA); restored by the caller
    return dataclasses.replace(gpu, efficiency=eff)


def fit_a100(points, h100: Curve):
    """eff_max of A100 and KAPPA, on Table 4/5 and A100's maximum-achievable row: every number
    counts once in the squared log error. A time is affine in KAPPA (the memory-bound term adds),
    so each eff_max of a grid needs the model at KAPPA = 0 only, plus one slope."""
    base = presets.gpu("a100-80gb")
    W = h100.W * base.hbm_bytes_per_s / presets.gpu("h100-80gb").hbm_bytes_per_s
    base = dataclasses.replace(base, gemm_overhead_s=h100.t0_s, gemm_bandwidth_bytes_per_s=W)
    mamf = _arrays(points, {"a100-80gb"})
    kappa0 = G.KAPPA
    try:
        rows0 = a100_rows(_with(base, 0.8, 0.0))
        names, measured = [r[0] for r in rows0], np.array([r[1] for r in rows0])
        slope = np.array([r[2] for r in a100_rows(_with(base, 0.8, 1.0))]) - np.array([r[2] for r in rows0])
        check = np.array([r[2] for r in a100_rows(_with(base, 0.8, 3.0))])
        assert np.allclose(check, np.array([r[2] for r in rows0]) + 3 * slope, rtol=1e-9), "not affine in KAPPA"
        at = {}

        def best_kappa(e):
            if e not in at:
                at[e] = np.array([r[2] for r in a100_rows(_with(base, e, 0.0))])
            mamf_r = np.log(fit.predict(mamf, e, None, h100.t0_s, W) / mamf.t)
            fits = [(float(np.sum(np.log((at[e] + k * slope) / measured) ** 2) + float(np.sum(mamf_r ** 2))), k)
                    for k in np.arange(0.0, 8.0001, 0.05)]
            return min(fits)
        grid = {round(e, 3): best_kappa(round(e, 3)) for e in np.arange(0.60, 1.0001, 0.02)}
        e0 = min(grid, key=lambda e: grid[e][0])
        grid.update({round(e, 3): best_kappa(round(e, 3)) for e in np.arange(e0 - 0.02, e0 + 0.0201, 0.005)
                     if 0 < e <= 1})
        e = min(grid, key=lambda e: grid[e][0])
        err, kappa = grid[e]
    finally:
        G.KAPPA = kappa0
    pred = at[e] + kappa * slope
    ratio = list(pred / measured) + list(fit.predict(mamf, e, None, h100.t0_s, W) / mamf.t)
    return dict(eff=e, kappa=float(kappa), t0_s=h100.t0_s, W=W, rms=math.sqrt(err / len(ratio)),
                names=names + ["MAMF row"], measured=list(measured) + list(mamf.t), ratio=ratio)


def stored_form(curves: dict, a100: dict) -> dict:
    """The fit rounded as the presets store it: ceilings to 3 decimals, t0 to 0.01 us, W to
    0.01 TB/s, KAPPA to 0.1; as GpuSpec field values (efficiency, efficiency_fp8, seconds, B/s)."""
    r3 = lambda x: None if x is None else round(x, 3)
    out = {"a100": (r3(a100["eff"]), None, round(a100["t0_s"] * 1e6, 2) / 1e6, round(a100["W"] / 1e12, 2) * 1e12)}
    for die in ("h100", "gh200", "b200", "gb200", "b300", "mi300x", "mi325x", "mi355x"):
        c = curves[die]
        out[die] = (r3(c.eff_bf16), r3(c.eff_fp8), round(c.t0_s * 1e6, 2) / 1e6, round(c.W / 1e12, 2) * 1e12)
    return {"curves": out, "kappa": round(a100["kappa"], 1)}


# ---------------------------------------------------------------- checks

def dense_layer_efficiency(gpu_name, *, h, heads, ffn, tp, s=4096, b=1):
    """A dense GPT-style layer's sustained efficiency on one GPU: its linear GEMMs, attention core
    (flash), and the whole layer with its memory-bound kernels (model FLOPs over peak x time)."""
    gpu = presets.gpu(gpu_name)
    model = ModelSpec(name="layer", num_layers=2, hidden_size=h, num_heads=heads, num_kv_heads=heads,
                      ffn_hidden_size=ffn, vocab_size=32000, max_seq_len=s)
    setup = Setup(model, TrainingSpec(seq_len=s, recipe=presets.recipe("mixed-adam"), global_batch=8 * b,
                                      attention_kernel="flash", dropout=False),
                  ClusterSpec(gpu=gpu, num_gpus=8, gpus_per_node=8, reserve_bytes=0))
    trace = Trace()
    from fitplan.timing.step import step_time
    step_time(trace, setup, ParallelConfig(tp=tp, dp=8 // tp, micro_batch=b))
    term = {t.key: t.value for t in trace.terms}
    out = {k.split("/")[1]: term[k] for k in ("ratio/linear_efficiency", "ratio/core_efficiency",
                                               "ratio/head_efficiency")}
    # the whole layer's forward on one GPU, its memory-bound kernels included: its FLOPs over peak x time
    lin, core, peak = term["flops/microbatch/layer_linear"] / tp, term["flops/microbatch/attention_core"] / tp, gpu.peak_bf16_flops_per_s
    layer_s = lin / (peak * out["linear_efficiency"]) + core / (peak * out["core_efficiency"]) + term["time/layer_elementwise"]
    out["layer"] = (lin + core) / (peak * layer_s)
    return out


def main() -> None:
    points = load_points()
    curves = fit_curves(points)
    print(f"GEMM curves: T = max(F/(eff_max*peak), B/W) + t0, fitted to {POINTS.relative_to(ROOT)} "
          f"({len(points)} rows); residuals are mean log(predicted/measured) per source")
    print(f"{'die':<8} {'eff_max bf16':>12} {'fp8':>6} {'t0 us':>6} {'W TB/s':>7} {'w. rms':>7}  residuals")
    for die, c in curves.items():
        fmt = lambda x: "-" if x is None else f"{x:.3f}"
        res = ", ".join(f"{s} {n}: {m:+.3f}" for s, (n, m) in c.residuals.items())
        print(f"{die:<8} {fmt(c.eff_bf16):>12} {fmt(c.eff_fp8):>6} {c.t0_s * 1e6:>6.2f} "
              f"{'-' if c.W is None else f'{c.W / 1e12:.2f}':>7} {c.rms:>7.3f}  {res}")
    a100 = fit_a100(points, curves["h100"])
    print(f"\nA100 and KAPPA on Korthikanti Table 4/5 and the A100 MAMF row: eff_max {a100['eff']:.3f}, "
          f"KAPPA {a100['kappa']:.2f}, t0 {a100['t0_s'] * 1e6:.2f} us (H100's), W {a100['W'] / 1e12:.2f} TB/s "
          f"(H100's x HBM ratio); rms log error {a100['rms']:.3f}")
    print(f"{'row':<28} {'measured':>9} {'predicted/measured':>19}")
    for name, measured, ratio in zip(a100["names"], a100["measured"], a100["ratio"]):
        print(f"{name:<28} {measured:>9.4g} {ratio:>19.3f}")
    fitted = stored_form(curves, a100)
    stored = {die: tuple(curve.values()) for die, curve in presets.gpus.CURVES.items()}
    print(f"\npresets (fitplan.presets.gpus.CURVES, KAPPA {G.KAPPA} in fitplan.timing.gemm) "
          f"{'agree with' if stored == fitted['curves'] and G.KAPPA == fitted['kappa'] else 'DIFFER from'} this fit")
    for die, (eb, ef, t0, w) in fitted["curves"].items():
        print(f"  {die:<8} eff_max {float(eb)}, fp8 {ef if ef is None else float(ef)}, t0 {t0 * 1e6:.2f} us, "
              f"W {w / 1e12:.2f} TB/s")
    gpu = presets.gpu("a100-80gb")
    print("\nuntuned: Narayanan et al. Table 1 (full recompute, interleaving off, micro-batch 1), with the presets")
    print(f"{'params B':>8} {'t':>2} {'p':>3} {'d':>3} {'TFLOP/s pub.':>12} {'pred.':>7} {'ratio':>6}")
    for size, a, h, L, t, p, d, B, published in NARAYANAN:
        setup = setup_for(a, h, L, t * p * d, B, gpu)
        r = evaluate_step(setup, ParallelConfig(tp=t, pp=p, dp=d, recompute=Recompute.FULL))
        print(f"{size:>8} {t:>2} {p:>3} {d:>3} {published:>12} {r.tflops_per_gpu:>7.1f} {r.tflops_per_gpu / published:>6.3f}")
    print("\nH100 bf16, a dense layer of 4096 tokens (b = 1, s = 4096), flash attention: sustained efficiency")
    for h, heads, ffn, tp in ((2048, 16, 8192, 1), (18432, 96, 73728, 1), (18432, 96, 73728, 8)):
        e = dense_layer_efficiency("h100-80gb", h=h, heads=heads, ffn=ffn, tp=tp)
        print(f"  h = {h:>5}, ffn {ffn}, tp = {tp}: linear GEMMs {e['linear_efficiency']:.3f}, attention core "
              f"{e['core_efficiency']:.3f}, output layer {e['head_efficiency']:.3f}; the layer's forward with its "
              f"memory-bound kernels {e['layer']:.3f}")


if __name__ == "__main__":
    main()
