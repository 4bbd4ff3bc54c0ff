"""Fit the end-to-end constants (fitplan.timing.calibration) on measured runs, and cross-validate the fit.

A run is a plan (the flags of `fitplan plan` that state it exactly) and what it measured: its step time,
or its tokens per second per GPU (step = global batch x sequence / (tokens/s/GPU x GPUs)). The fit is
least squares on r_i = ln(predicted_i / measured_i), plus one pseudo-observation per constant,
(ln value - ln prior)/prior_sd, which keeps a constant the runs say nothing about at its prior.
Levenberg-Marquardt in ln-space; the Jacobian by forward differences, all of a run's perturbed values
evaluated in one call (fitplan.timing.step.step_time takes the constants as NumPy arrays).

Cross-validation leaves one group (a model family) out, fits on the rest and predicts the group: the
error to quote, and what the band (fitplan.timing.uncertainty) is built from.

NumPy only; used by bench/fidelity.py (the published set) and `fitplan calibrate --runs` (one's own runs).
"""
import math
from dataclasses import field

import numpy as np

from fitplan.explain import RAW
from fitplan.record import record
from fitplan.timing import calibration as CAL
from fitplan.timing.step import step_time

DELTA = 1e-4           # ln-space step of the finite differences


@record
class Run:
    """One measured run, resolved: its name, the flags that state it, the setup and configuration they give,
    the measured step time, the group it is left out with, and its support tags (GPU architecture,
    precision, framework) for the band."""
    name: str
    flags: str
    setup: object
    config: object
    measured_step_s: float
    group: str = ""
    tags: dict = field(default_factory=dict)


def tokens_to_step_s(*, tokens_per_s_per_gpu, global_batch, seq_len, gpus):
    """The step time a throughput implies: B*s/(tokens/s/GPU * N)."""
    return global_batch * seq_len / (tokens_per_s_per_gpu * gpus)


def predict(runs, values: dict) -> np.ndarray:
    """Predicted step seconds, one row per run; `values` may hold arrays (one column each)."""
    out = []
    for run in runs:
        e2e = CAL.of_setup(run.setup, values)
        out.append(np.asarray(step_time(RAW, run.setup, run.config, k=e2e, flops=False)["time/step"], dtype=float))
    width = max((o.size for o in out), default=1)
    return np.array([np.broadcast_to(o, (width,)) for o in out])


@record
class Fit:
    values: dict              # every constant: fitted, or the prior/start where not free
    free: tuple               # the names fitted
    residuals: np.ndarray     # ln(predicted/measured) per run at the fit
    cost: float               # sum of squared residuals and prior pseudo-residuals
    iterations: int
    sensitivity: dict         # name -> sum over runs of |d residual / d ln value| (what the runs say of it)


def _priors(free, prior_values, prior_scale):
    mu = np.array([math.log(prior_values[n]) for n in free])
    sd = np.array([CAL.BY_NAME[n].prior_sd * prior_scale for n in free])
    return mu, sd


def _residuals_and_jacobian(runs, measured, base: dict, free, u):
    """r (runs) at u and J (runs x free), from one call per run with 1 + len(free) columns."""
    cols = len(free) + 1
    values = dict(base)
    for j, name in enumerate(free):
        col = np.full(cols, math.exp(u[j]))
        col[j + 1] = math.exp(u[j] + DELTA)
        values[name] = col
    pred = predict(runs, values)
    r_all = np.log(pred / measured[:, None])
    return r_all[:, 0], (r_all[:, 1:] - r_all[:, :1]) / DELTA


def fit(runs, *, free=None, start=None, prior_values=None, prior_scale=1.0, iterations=40,
        pool_unseen_clocks=False) -> Fit:
    """Least squares on ln(predicted/measured) with the priors' pseudo-observations, by Levenberg-Marquardt.
    pool_unseen_clocks: a free clock constant no run depends on (a GPU generation the runs leave out) takes
    the geometric mean of the clocks they fit (calibration.unseen_clock), the rule a plan on an architecture
    without a constant follows; off, it stays at its prior (one's own runs: the shipped value)."""
    start = dict(CAL.SHIPPED if start is None else start)
    prior_values = CAL.PRIORS if prior_values is None else prior_values
    free = tuple(CAL.NAMES if free is None else free)
    measured = np.array([r.measured_step_s for r in runs], dtype=float)
    mu, sd = _priors(free, prior_values, prior_scale)
    if not runs:   # nothing to fit on (a cross-validation that leaves out the only family): the priors
        values = dict(start)
        values.update({n: prior_values[n] for n in free})
        return Fit(values=values, free=free, residuals=np.zeros(0), cost=0.0, iterations=0,
                   sensitivity={n: 0.0 for n in free})
    u = np.array([math.log(start[n]) for n in free])
    lam, done = 1e-2, 0
    r, J = _residuals_and_jacobian(runs, measured, start, free, u)

    def total(r, u):
        return float(np.sum(r ** 2) + np.sum(((u - mu) / sd) ** 2))

    cost = total(r, u)
    for done in range(1, iterations + 1):
        g = J.T @ r + (u - mu) / sd ** 2
        H = J.T @ J + np.diag(1 / sd ** 2)
        step = np.linalg.solve(H + lam * np.diag(np.diag(H)), -g)
        u_new = u + step
        r_new, J_new = _residuals_and_jacobian(runs, measured, start, free, u_new)
        cost_new = total(r_new, u_new)
        if cost_new < cost:
            improved = cost - cost_new
            u, r, J, cost, lam = u_new, r_new, J_new, cost_new, max(lam / 3, 1e-7)
            if improved < 1e-10 * max(cost, 1e-12) or np.max(np.abs(step)) < 1e-7:
                break
        else:
            lam *= 4
            if lam > 1e8:
                break
    values = dict(start)
    values.update({n: math.exp(x) for n, x in zip(free, u)})
    sensitivity = {n: float(np.sum(np.abs(J[:, j]))) for j, n in enumerate(free)}
    if pool_unseen_clocks:
        clocks = [n for n in free if n in CAL.CLOCK_OF.values()]
        seen = [n for n in clocks if sensitivity[n] > 0]
        if seen:
            values.update({n: CAL.unseen_clock(values, seen) for n in clocks if sensitivity[n] == 0})
    return Fit(values=values, free=free, residuals=r, cost=cost, iterations=done, sensitivity=sensitivity)


def gradient(runs, values: dict, *, free=None, prior_values=None, prior_scale=1.0) -> dict:
    """d cost / d ln value at `values` (cost as in fit): ~0 for every free constant at a fitted point."""
    free = tuple(CAL.NAMES if free is None else free)
    prior_values = CAL.PRIORS if prior_values is None else prior_values
    measured = np.array([r.measured_step_s for r in runs], dtype=float)
    mu, sd = _priors(free, prior_values, prior_scale)
    u = np.array([math.log(values[n]) for n in free])
    r, J = _residuals_and_jacobian(runs, measured, values, free, u)
    g = 2 * (J.T @ r + (u - mu) / sd ** 2)
    return dict(zip(free, g))


@record
class CrossValidation:
    residuals: np.ndarray     # ln(predicted/measured) per run, from the fit without its group
    fits: dict                # group -> Fit on the other groups


def cross_validate(runs, *, start=None, **kw) -> CrossValidation:
    """Leave one group out: fit on the other groups' runs, predict the group's."""
    groups = sorted({r.group for r in runs})
    out = np.zeros(len(runs))
    fits = {}
    for g in groups:
        train = [r for r in runs if r.group != g]
        test = [i for i, r in enumerate(runs) if r.group == g]
        f = fit(train, start=start, **kw)
        pred = predict([runs[i] for i in test], f.values)[:, 0]
        for i, p in zip(test, pred):
            out[i] = math.log(p / runs[i].measured_step_s)
        fits[g] = f
    return CrossValidation(residuals=out, fits=fits)
