"""Fit the end-to-end constants on the published runs, cross-validate, and print how well fitplan predicts them.

For every row of the calibration set (bench/calibration/*.toml, the sources ../shared/CALIBRATION.md
lists, stated as plans by bench/calibration/published.py): the published step time, fitplan's prediction
before calibration (the constants at their component priors), after (the fit on every row) and under
leave-one-model-family-out cross-validation (the fit without the row's family), the last being the error
to quote. A row fitplan cannot state counts as a miss. Then each constant with the rows that determine it,
and the band's coverage under cross-validation.

    python bench/fidelity.py              the table, the constants, the summary
    python bench/fidelity.py --json       {"rows": [...], "summary": {n, cv_median_abs_error, cv_within_15,
                                           fit_median_abs_error, ...}, "constants": {...}}
    python bench/fidelity.py --write      also rewrite src/fitplan/timing/fitted.py with this fit
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "calibration"))

import published as PUB  # noqa: E402
from fitplan.calibrate import runs as R  # noqa: E402
from fitplan.timing import calibration as CAL  # noqa: E402
from fitplan.timing import uncertainty as U  # noqa: E402

FITTED = ROOT / "src" / "fitplan" / "timing" / "fitted.py"
DIMS = ("architecture", "precision", "kernels")


def support(runs) -> dict:
    out = {d: {} for d in DIMS}
    for r in runs:
        for d, v in U.support_tags(r.setup).items():
            out[d][v] = out[d].get(v, 0) + 1
    return out


def quantiles(r) -> tuple[float, float]:
    """The 10th and 90th percentiles of ln(published/predicted) = -r."""
    x = -np.asarray(r)
    return float(np.quantile(x, 0.1)), float(np.quantile(x, 0.9))


def cv_bands(runs, cv_res) -> list:
    """Each row's band as the fit without its family would have drawn it: percentiles and support from the
    other families' rows only. Returns (low, high) multipliers of the row's cross-validated prediction."""
    out = []
    for i, r in enumerate(runs):
        others = [j for j, o in enumerate(runs) if o.group != r.group]
        table = {"runs": len(others), "support": support([runs[j] for j in others])}
        table["q_low"], table["q_high"] = quantiles(cv_res[others])
        b = U.band(r.setup, 1.0, basis_table=table)
        out.append((b.low_s, b.high_s))
    return out


def rel(r):
    """ln(pred/published) -> (pred - published)/published."""
    return math.exp(r) - 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", action="store_true", help="rewrite src/fitplan/timing/fitted.py with this fit")
    args = ap.parse_args(argv)
    t0 = time.process_time()
    runs, missed = PUB.runs()
    measured = np.array([r.measured_step_s for r in runs])
    before = np.log(R.predict(runs, CAL.PRIORS)[:, 0] / measured)
    fit = R.fit(runs, start=CAL.PRIORS)
    cv = R.cross_validate(runs, start=fit.values)
    bands = cv_bands(runs, cv.residuals)
    covered = [lo <= math.exp(-r) <= hi for (lo, hi), r in zip(bands, cv.residuals)]
    n = len(runs) + len(missed)
    cv_abs = sorted([abs(rel(r)) for r in cv.residuals] + [math.inf] * len(missed))
    fit_abs = sorted([abs(rel(r)) for r in fit.residuals] + [math.inf] * len(missed))
    summary = {
        "n": n, "stated": len(runs), "missed": len(missed),
        "cv_median_abs_error": float(np.median(cv_abs)), "cv_within_15": sum(e <= 0.15 for e in cv_abs) / n,
        "fit_median_abs_error": float(np.median(fit_abs)), "fit_within_15": sum(e <= 0.15 for e in fit_abs) / n,
        "before_median_abs_error": float(np.median(sorted([abs(rel(r)) for r in before] + [math.inf] * len(missed)))),
        "band_coverage_cv": sum(covered) / len(runs), "groups": len(cv.fits),
        "cpu_s": round(time.process_time() - t0, 2)}
    band_table = {"runs": len(runs), "support": support(runs)}
    band_table["q_low"], band_table["q_high"] = quantiles(cv.residuals)
    constants = {name: {"value": fit.values[name], "prior": CAL.PRIORS[name], "unit": CAL.BY_NAME[name].unit,
                        "meaning": CAL.BY_NAME[name].meaning, "rows": _determining(runs, fit, name)}
                 for name in CAL.NAMES}
    rows = []
    for r, b, f, c, (lo, hi), ok in zip(runs, before, fit.residuals, cv.residuals, bands, covered):
        rows.append({"id": r.name, "group": r.group, "flags": r.flags, "published_step_s": r.measured_step_s,
                     "before_error": rel(b), "fit_error": rel(f), "cv_error": rel(c),
                     "cv_band": [lo * r.measured_step_s * math.exp(c), hi * r.measured_step_s * math.exp(c)],
                     "band_holds": ok})
    rows += [{"id": m.id, "group": m.group, "flags": m.flags, "missed": why} for m, why in missed]
    if args.write:
        write(fit.values, band_table)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary, "constants": constants,
                          "band": band_table}, indent=1))
        return 0
    print(f"{'row':<52} {'group':<12} {'published s':>11} {'before':>8} {'fit':>8} {'cv':>8}  band")
    for row in rows:
        if "missed" in row:
            print(f"{row['id']:<52} {row['group']:<12} {'':>11} {'miss: ' + row['missed'][:80]}")
            continue
        print(f"{row['id']:<52} {row['group']:<12} {row['published_step_s']:>11.3f} {row['before_error']:>+8.1%} "
              f"{row['fit_error']:>+8.1%} {row['cv_error']:>+8.1%}  {'holds' if row['band_holds'] else 'misses'}")
    print("\nconstants (fitted on every stated row; prior: the component estimate it starts from)")
    for name, c in constants.items():
        print(f"  {name:<20} {c['value']:>10.4g} {c['unit']:<6} prior {c['prior']:<8.4g} rows: {', '.join(c['rows'])}")
    print(f"\nband: 10th/90th percentiles of ln(published/predicted) under cross-validation "
          f"{band_table['q_low']:+.3f} / {band_table['q_high']:+.3f}")
    print("summary " + json.dumps(summary))
    return 0


def _determining(runs, fit, name, k=4) -> list:
    """The rows whose residual moves most with this constant (|d r / d ln value|)."""
    if fit.sensitivity.get(name, 0) == 0:
        return ["none: held at its prior"]
    vals = dict(fit.values)
    base = R.predict(runs, vals)[:, 0]
    vals[name] = fit.values[name] * math.exp(1e-3)
    moved = np.abs(np.log(R.predict(runs, vals)[:, 0] / base)) / 1e-3
    order = np.argsort(-moved)[:k]
    return [f"{runs[i].name} ({moved[i]:.2f})" for i in order if moved[i] > 0]


def write(values: dict, band: dict) -> None:
    lines = [FITTED.read_text().split("\nVALUES")[0], "", "VALUES = {"]
    lines += [f"    {name!r}: {float(f'{values[name]:.4g}')!r}," for name in CAL.NAMES]
    lines += ["}", "", "BAND = {", f"    \"runs\": {band['runs']}, \"q_low\": {round(band['q_low'], 4)!r}, "
              f"\"q_high\": {round(band['q_high'], 4)!r},", "    \"support\": {"]
    for dim, counts in band["support"].items():
        lines.append(f"        {dim!r}: {dict(sorted(counts.items()))!r},")
    lines += ["    },", "}", ""]
    FITTED.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
