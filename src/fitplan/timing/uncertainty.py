"""How far a step time can be trusted: an 80% band from the calibration's cross-validated errors.

bench/fidelity.py fits the end-to-end constants leaving one model family out at a time and records,
for every published run, r = ln(published/predicted) from the fit that did not see its family
(fitplan.timing.fitted.BAND: for each class of model, dense or MoE-or-hybrid, the alpha and 1 - alpha
quantiles of that class's r, alpha the largest that lets bands drawn from the other families' runs of the
class hold 80% of them; the same for each class's runs on one GPU architecture ("cells": the class's
quantiles at the alpha that holds 80% of the cell's runs, which a plan on that architecture takes); and how many
runs each GPU architecture, GEMM precision, kernel family and framework has). The classes err apart: the set's
dense runs are predicted about three times as closely (median |error| 5% against 14%) as its runs with routed
experts or Mamba layers, so one pooled band would be too wide for the first and too narrow for the second. A
plan's band is

    [T*exp(w*q_low), T*exp(w*q_high)],  w = sqrt(1 + N0/(n + 1))

n being the fewest calibration runs that share its architecture, precision, kernel family, power limit (the
board's TDP, or a --gpu-power below it) or framework (--framework, where given): where the
set has many runs like it, w is near 1; where it has none, the band is sqrt(1 + N0) times wider. N0 = 4,
a prior weight of four runs (docs/calibration.md#the-band says how well the band covers the set under
cross-validation). A GPU spec fitted on one's own runs (`fitplan calibrate --runs`) carries its own
residual percentiles and run count instead.
"""
import math

from fitplan.record import record
from fitplan.timing import fitted
from fitplan.timing.calibration import CLOCK_OF

COVERAGE = 0.8
N0 = 4   # runs of prior weight: the band widens by sqrt(1 + N0/(n + 1)) where n runs support the plan


@record(slots=True)
class Band:
    low_s: float
    high_s: float
    coverage: float
    basis: str
    runs: int

    @property
    def factors(self) -> tuple[float, float]:
        """(low, high) over the point estimate: what a quantity proportional to the step (days, cost) takes."""
        return self.low_s, self.high_s


def support_tags(setup) -> dict:
    """The dimensions the band's support is counted over: GPU architecture, GEMM precision, kernel family, the
    board's power limit (a --gpu-power below the TDP runs at the clock fitplan.timing.calibration.power_clock
    assumes, a law no calibration run, each at its board's TDP, tests), and the framework where the plan names
    one (--framework)."""
    gpu = setup.cluster.gpu
    capped = gpu.power_watts is not None and gpu.tdp_watts is not None and gpu.power_watts < gpu.tdp_watts
    tags = {"architecture": architecture_of(gpu), "precision": setup.training.recipe.compute,
            "kernels": setup.training.kernels, "power limit": "below the TDP" if capped else "the TDP"}
    if setup.training.framework is not None:
        tags["framework"] = setup.training.framework
    return tags


CLASSES = {"dense": "dense", "moe_or_hybrid": "MoE or hybrid"}   # BAND["classes"] keys -> the text's words


def model_class(model) -> str:
    """The band's class of a model: "moe_or_hybrid" with routed experts or Mamba layers, else "dense"."""
    return "moe_or_hybrid" if model.moe is not None or model.mamba is not None else "dense"


def architecture_of(gpu) -> str:
    return gpu.architecture or "unknown"


def cell_of(setup) -> str:
    """The band's finer unit: the model's class and the GPU's architecture, e.g. "dense/hopper"."""
    return f"{model_class(setup.model)}/{architecture_of(setup.cluster.gpu)}"


def widening(n: int) -> float:
    return math.sqrt(1 + N0 / (n + 1))


def band(setup, step_s: float, basis_table: dict | None = None) -> Band | None:
    """The 80% band around step_s; None where there is no fit to build it from."""
    own = setup.cluster.gpu.end_to_end
    if own is not None and own.runs > 0:
        w = widening(own.runs)
        lo, hi = own.residual_low, own.residual_high
        basis = (f"your {own.runs} measured runs (fitplan calibrate --runs: the fit's residual 10th and 90th "
                 f"percentiles, widened x{w:.2f} for {own.runs} runs)")
        runs = own.runs
    else:
        table = fitted.BAND if basis_table is None else basis_table
        if not table.get("runs"):
            return None
        tags = support_tags(setup)
        counts = {dim: table["support"].get(dim, {}).get(value, 0) for dim, value in tags.items()}
        dim = min(counts, key=lambda d: counts[d])
        n = counts[dim]
        w = widening(n)
        cls = model_class(setup.model)
        q = table["classes"].get(cls)
        if q is None:
            return None
        cell = table.get("cells", {}).get(cell_of(setup))
        runs = q["runs"]
        if cell is None:   # an architecture the set lacks: the class's quantiles, at the alpha its runs need
            lo, hi, alpha = q["q_low"], q["q_high"], q["alpha"]
            held = ""
        else:   # the class's quantiles, at the alpha its runs on this architecture need (bench/fidelity.py)
            lo, hi, alpha = cell["q_low"], cell["q_high"], cell["alpha"]
            held = (f", the narrowest pair whose bands held {COVERAGE:.0%} of the set's {cell['runs']} {CLASSES[cls]} "
                    f"runs on {tags['architecture']} GPUs under cross-validation (they held {cell['holds']:.0%})")
        basis = (f"cross-validated errors over {runs} published {CLASSES[cls]} runs (leave one model family out; "
                 f"their {alpha:.0%}-{1 - alpha:.0%} quantiles{held}); {n} of the set's {table['runs']} runs share "
                 f"this plan's {dim} ({tags[dim]}), so the band is x{w:.2f} wider")
        if setup.cluster.gpu.architecture not in CLOCK_OF:
            basis += ("; no clock constant for its architecture: it sustains the fitted generations' geometric "
                      "mean (docs/calibration.md#unseen-generations)")
    return Band(low_s=step_s * math.exp(w * min(lo, 0.0)), high_s=step_s * math.exp(w * max(hi, 0.0)),
                coverage=COVERAGE, basis=basis, runs=runs)
