"""Fit fitplan's GEMM curves on component measurements; print them with residuals.

1. GEMM curves (fitplan.timing.gemm): a GEMM of F FLOPs and B operand bytes takes
   T = max(F/(eff_max*peak), B/W) + t0. Per die, on the component measurements of
   bench/gemm_points.csv (their sources are in its header): eff_max per dtype (bf16, fp8),
   t0 and W shared, by fitplan.calibrate.fit (time-weighted squared log error: a step is a
   sum of GEMM times, so large GEMMs count most; rows under 1 GFLOP are not in the file).
   Dies with only maximum-achievable points (gb200, gh200, b300, mi325x) take their sibling die's
   curve with each ceiling scaled by the ratio of the two dies' figures in the same benchmark.
2. A100 (no table by shape): its ceiling from its maximum-achievable-matmul row alone (the bf16 eff_max
   that reproduces it), t0 from H100 and H100's W scaled by A100's HBM bandwidth. Component data only:
   what a framework adds around the GEMMs (the sustained clock, the memory-bound kernels' traffic) is
   fitted end to end by bench/fidelity.py (fitplan.timing.calibration), not here.
3. Cards measured only by square torch.mm (RTX 4090, RTX 3090, RTX A6000, L40S, L4, A10G; zzc0721/
   torch-performance-test-data, which also measures A100): A100's curve with its ceiling scaled by the ratio
   of the two fractions of peak in that benchmark, A100's t0, and A100's W scaled by memory bandwidth.
4. A check: the efficiency of a dense layer with h = 2048 and h = 18432 on H100 (Narayanan et al.
   Table 1 and Korthikanti et al. Tables 4 and 5 are end-to-end runs: bench/fidelity.py compares them).
The presets (fitplan.presets.gpus.CURVES) store what this prints,
rounded as shown; tests/unit/test_gemm_fit.py checks that they agree.
Run: python bench/calibrate.py  (seconds)
"""
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fitplan.arith import geometric_mean  # noqa: E402
from fitplan import presets  # noqa: E402
from fitplan.calibrate import fit  # noqa: E402
from fitplan.calibrate.fit import Curve, Points  # noqa: E402
from fitplan.explain import Trace  # noqa: E402
from fitplan.memory.breakdown import Setup  # noqa: E402
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec  # noqa: E402

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
    return geometric_mean(effs)


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
        effs[dtype] = None if not ratios or base is None else base * geometric_mean(ratios)
    d = _arrays(points, gpus)
    pred = fit.predict(d, effs["bf16"], effs["fp8"], die.t0_s, die.W)
    r = np.log(pred / d.t)
    return Curve(effs["bf16"], effs["fp8"], die.t0_s, die.W, float(np.sqrt(np.mean(r ** 2))), fit.residuals(d, pred))


def fit_curves(points) -> dict:
    curves = {die: fit_curve(points, gpus) for die, gpus in DIES.items()}
    for die, (gpus, sibling) in SIBLINGS.items():
        curves[die] = sibling_curve(points, gpus, curves[sibling], DIES[sibling])
    return curves


# ---------------------------------------------------------------- A100 from its maximum-achievable row

def fit_a100(points, h100: Curve) -> dict:
    """A100's bf16 ceiling: the eff_max that reproduces each of its maximum-achievable-matmul rows under
    T = max(F/(eff_max*peak), B/W) + t0 (compute-bound rows: eff = F/(peak*(T - t0))), their geometric
    mean; t0 is H100's and W H100's scaled by the HBM ratio (no A100 table by shape to fit them on)."""
    base = presets.gpu("a100-80gb")
    W = h100.W * base.hbm_bytes_per_s / presets.gpu("h100-80gb").hbm_bytes_per_s
    mamf = _arrays(points, {"a100-80gb"})
    assert np.all(mamf.t - h100.t0_s > mamf.B / W), "an A100 row is bandwidth-bound: it cannot set the ceiling"
    eff = geometric_mean(mamf.F / (mamf.peak * (mamf.t - h100.t0_s)))
    ratio = list(fit.predict(mamf, eff, None, h100.t0_s, W) / mamf.t)
    return dict(eff=eff, t0_s=h100.t0_s, W=W, names=["MAMF row"] * len(ratio), measured=list(mamf.t), ratio=ratio)


# ---------------------------------------------------------------- parts measured by square torch.mm only

# bf16 TFLOP/s of torch.mm on n x n operands, the best n of 1024..10240 (30 iterations after 6 warm-up, host
# timer): zzc0721/torch-performance-test-data database.md @9d82827, every row of the card (RTX 4090: its 24 GB
# rows; A10G: the repository's issue #126), and A100 SXM4 80GB in the same table. These cards have no GEMM
# table by shape and no maximum-achievable row.
SQUARE_MM_BF16 = {
    "a100-80gb": (264.53,),
    "rtx-4090": (170.06, 173.31, 162.39, 163.09, 165.71, 164.81),
    "rtx-3090": (76.34, 76.68, 76.58),
    "rtx-a6000": (123.34,),
    "l40s": (269.15,),
    "l4": (70.89,),
    "a10g": (69.47,),
}


def square_mm_curves(a100: dict) -> dict:
    """Each card takes A100's curve: its bf16 ceiling scaled by the ratio of the two cards' fractions of
    peak in the same benchmark (as the sibling dies are, sibling_curve), A100's t0, and A100's W scaled by
    the ratio of the memory bandwidths (as A100's is H100's). No fp8 measurement: fp8 GEMMs take the bf16
    ceiling. A card boosted above its rated clock measures above its rated peak (RTX 3090: 76.5 of 71); its
    ceiling is capped at 1, the rated peak (the spec field's range), which understates such a card."""
    def frac(name):
        g = presets.gpu(name)
        return geometric_mean([t * 1e12 / g.peak_bf16_flops_per_s for t in SQUARE_MM_BF16[name]]), g
    f_a100, g_a100 = frac("a100-80gb")
    out = {}
    for name in SQUARE_MM_BF16:
        if name != "a100-80gb":
            f, g = frac(name)
            out[name] = (min(1.0, a100["eff"] * f / f_a100), None, a100["t0_s"], a100["W"] * g.hbm_bytes_per_s / g_a100.hbm_bytes_per_s)
    return out


def stored_form(curves: dict, a100: dict) -> dict:
    """The fit rounded as the presets store it: ceilings to 3 decimals, t0 to 0.01 us, W to
    0.01 TB/s; as GpuSpec field values (efficiency, efficiency_fp8, seconds, B/s)."""
    r3 = lambda x: None if x is None else round(x, 3)
    out = {"a100": (r3(a100["eff"]), None, round(a100["t0_s"] * 1e6, 2) / 1e6, round(a100["W"] / 1e12, 2) * 1e12)}
    for die in ("h100", "gh200", "b200", "gb200", "b300", "mi300x", "mi325x", "mi355x"):
        c = curves[die]
        out[die] = (r3(c.eff_bf16), r3(c.eff_fp8), round(c.t0_s * 1e6, 2) / 1e6, round(c.W / 1e12, 2) * 1e12)
    for name, (eb, ef, t0, w) in square_mm_curves(a100).items():   # W to 1 GB/s: these are 0.3 to 1 TB/s
        out[name] = (r3(eb), ef, round(t0 * 1e6, 2) / 1e6, round(w / 1e12, 3) * 1e12)
    return {"curves": out}


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
    print(f"\nA100 from its maximum-achievable-matmul row: eff_max {a100['eff']:.3f}, t0 {a100['t0_s'] * 1e6:.2f} us "
          f"(H100's), W {a100['W'] / 1e12:.2f} TB/s (H100's x HBM ratio)")
    print(f"{'row':<28} {'measured':>9} {'predicted/measured':>19}")
    for name, measured, ratio in zip(a100["names"], a100["measured"], a100["ratio"]):
        print(f"{name:<28} {measured:>9.4g} {ratio:>19.3f}")
    print(f"\nsquare torch.mm only ({', '.join(n for n in SQUARE_MM_BF16 if n != 'a100-80gb')}): A100's curve, "
          f"ceiling x the ratio of fractions of peak, W x the memory-bandwidth ratio")
    for name, (eb, _, t0, w) in square_mm_curves(a100).items():
        print(f"  {name:<10} best/peak {geometric_mean(SQUARE_MM_BF16[name]) * 1e12 / presets.gpu(name).peak_bf16_flops_per_s:.3f}"
              f"  eff_max {eb:.3f}, t0 {t0 * 1e6:.2f} us, W {w / 1e12:.3f} TB/s")
    fitted = stored_form(curves, a100)
    stored = {die: tuple(curve.values()) for die, curve in presets.gpus.CURVES.items()}
    print(f"\npresets (fitplan.presets.gpus.CURVES) {'agree with' if stored == fitted['curves'] else 'DIFFER from'} "
          f"this fit")
    for die, (eb, ef, t0, w) in fitted["curves"].items():
        print(f"  {die:<8} eff_max {float(eb)}, fp8 {ef if ef is None else float(ef)}, t0 {t0 * 1e6:.2f} us, "
              f"W {w / 1e12:.3g} TB/s")
    print("\nH100 bf16, a dense layer of 4096 tokens (b = 1, s = 4096), flash attention: sustained efficiency")
    for h, heads, ffn, tp in ((2048, 16, 8192, 1), (18432, 96, 73728, 1), (18432, 96, 73728, 8)):
        e = dense_layer_efficiency("h100-80gb", h=h, heads=heads, ffn=ffn, tp=tp)
        print(f"  h = {h:>5}, ffn {ffn}, tp = {tp}: linear GEMMs {e['linear_efficiency']:.3f}, attention core "
              f"{e['core_efficiency']:.3f}, output layer {e['head_efficiency']:.3f}; the layer's forward with its "
              f"memory-bound kernels {e['layer']:.3f}")


if __name__ == "__main__":
    main()
