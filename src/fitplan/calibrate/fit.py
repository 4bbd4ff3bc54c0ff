"""Fit a GEMM curve T = max(F/(eff_max*peak), B/W) + t0 (fitplan.timing.gemm) to measured GEMMs.

NumPy only (no torch, no files): bench/calibrate.py fits the presets with it from
bench/gemm_points.csv, and `fitplan calibrate` fits the GPU it runs on. The objective is the
time-weighted mean squared log error of the predicted times (a step is a sum of GEMM times,
so large GEMMs count most); eff_max per dtype (bf16, fp8), t0 and W are shared. A coarse grid
(t0 set by weighted least squares at each point) picks the start of a Nelder-Mead simplex.
"""
import math

import numpy as np

from fitplan.record import record


@record
class Points:
    """Measured GEMMs as arrays: FLOPs, seconds, bytes moved, whether fp8, the dense peak of
    their dtype, and a source label per row."""
    F: np.ndarray
    t: np.ndarray
    B: np.ndarray
    fp8: np.ndarray
    peak: np.ndarray
    src: tuple

    @classmethod
    def of(cls, rows) -> "Points":
        """rows: (g, m, n, k, seconds, fp8, out_bytes, peak, source) tuples."""
        g, m, n, k, t, fp8, out, peak = (np.array([r[i] for r in rows], dtype=float) for i in range(8))
        fp8 = fp8.astype(bool)
        B = g * (np.where(fp8, 1, 2) * (m * k + k * n) + out * m * n)
        return cls(F=2 * g * m * n * k, t=t, B=B, fp8=fp8, peak=peak, src=tuple(r[8] for r in rows))

    def select(self, mask) -> "Points":
        return Points(self.F[mask], self.t[mask], self.B[mask], self.fp8[mask], self.peak[mask],
                      tuple(s for s, keep in zip(self.src, mask) if keep))


@record
class Curve:
    eff_bf16: float | None
    eff_fp8: float | None
    t0_s: float
    W: float | None
    rms: float            # time-weighted rms of log(predicted/measured)
    residuals: dict       # source -> (rows, mean log(predicted/measured))


def predict(d: Points, eff_bf16, eff_fp8, t0, W):
    """fitplan.timing.gemm.gemm_s over the rows."""
    compute = d.F / d.peak / np.where(d.fp8, eff_fp8 or 1.0, eff_bf16 or 1.0)
    return (compute if W is None else np.maximum(compute, d.B / W)) + t0


def residuals(d: Points, pred) -> dict:
    r = np.log(pred / d.t)
    return {s: (sum(1 for x in d.src if x == s), float(np.mean([ri for ri, x in zip(r, d.src) if x == s])))
            for s in sorted(set(d.src))}


def _objective(d: Points, x, log10_w=(-math.inf, math.inf)):
    """x = (eff_bf16, eff_fp8, t0 in us, log10 W); W outside log10_w is not a candidate (where no measured GEMM is
    memory-bound the error does not depend on W, and the simplex would wander off to any value)."""
    eb, ef, t0_us, logw = x
    if not (0 < eb <= 1 and 0 < ef <= 1 and t0_us >= 0 and log10_w[0] <= logw <= log10_w[1]):
        return math.inf
    r = np.log(predict(d, eb, ef, t0_us * 1e-6, 10 ** logw) / d.t)
    return float(np.sum(d.t * r ** 2) / np.sum(d.t))


def nelder_mead(f, x0, steps, iterations=600):
    """A plain Nelder-Mead simplex (no SciPy: fitplan's one dependency is NumPy)."""
    pts = [np.array(x0, float)] + [np.array(x0, float) + np.eye(len(x0))[i] * steps[i] for i in range(len(x0))]
    vals = [f(x) for x in pts]
    for _ in range(iterations):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        xr = centre + (centre - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centre + 2 * (centre - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * (pts[-1] - centre)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (x - pts[0]) for x in pts[1:]]
                vals = [vals[0]] + [f(x) for x in pts[1:]]
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def fit_curve(d: Points, *, log10_w=(10.0, 14.0)) -> Curve:
    """eff_max (bf16, fp8), t0 and W of one die from its measured GEMMs; W within 10^log10_w B/s."""
    w = d.t / d.t.sum()
    has_fp8, has_bf16 = bool(d.fp8.any()), bool((~d.fp8).any())
    best = None
    for logw in np.linspace(log10_w[0], log10_w[1], int(round((log10_w[1] - log10_w[0]) * 10)) + 1):
        for eb in (np.arange(0.05, 1.0001, 0.05) if has_bf16 else [1.0]):
            for ef in (np.arange(0.05, 1.0001, 0.05) if has_fp8 else [1.0]):
                core = predict(d, eb, ef, 0.0, 10 ** logw)
                t0 = max(0.0, float(np.sum(w * (d.t - core) / d.t ** 2) / np.sum(w / d.t ** 2)))
                err = _objective(d, (eb, ef, t0 * 1e6, logw))
                if best is None or err < best[0]:
                    best = (err, (eb, ef, t0 * 1e6, logw))
    x, err = nelder_mead(lambda x: _objective(d, x, log10_w), best[1], (0.02, 0.02, 0.5, 0.05))
    eb, ef, t0_us, logw = (float(v) for v in x)
    pred = predict(d, eb, ef, t0_us * 1e-6, 10 ** logw)
    return Curve(eb if has_bf16 else None, ef if has_fp8 else None, t0_us * 1e-6, 10 ** logw, math.sqrt(err),
                 residuals(d, pred))
