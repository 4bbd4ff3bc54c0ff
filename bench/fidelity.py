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
DIMS = ("architecture", "precision", "kernels", "power limit", "framework")


def support(runs) -> dict:
    out = {d: {} for d in DIMS}
    for r in runs:
        for d, v in U.support_tags(r.setup).items():
            out[d][v] = out[d].get(v, 0) + 1
    return out


def quantiles(r, alpha=0.1) -> tuple[float, float]:
    """The alpha and 1 - alpha quantiles of ln(published/predicted) = -r."""
    x = -np.asarray(r)
    return float(np.quantile(x, alpha)), float(np.quantile(x, 1 - alpha))


def cv_bands(runs, cv_res, alphas: dict, kind: list, unit: list, rows=None) -> list:
    """Each row's band as the fit without its family would have drawn it: quantiles from the other families'
    rows of its class (fitplan.timing.uncertainty.model_class) at its unit's alpha, support from all the other
    families' rows. alphas: {unit: alpha}; kind: each row's class; unit: each row's unit of coverage (its class,
    or its class and GPU architecture); rows: the indices to draw (all by default, (None, None) for the rest).
    Returns (low, high) multipliers of the row's cross-validated prediction."""
    out = []
    for i, r in enumerate(runs):
        if rows is not None and i not in rows:
            out.append((None, None))
            continue
        others = [j for j, o in enumerate(runs) if o.group != r.group]
        alike = [j for j in others if kind[j] == kind[i]]
        if not alike:   # no other family of its class (--only): nothing to draw its band from
            out.append((None, None))
            continue
        q_low, q_high = quantiles(cv_res[alike], alphas[unit[i]])
        table = {"runs": len(others), "support": support([runs[j] for j in others]),
                 "classes": {kind[i]: {"runs": len(alike), "alpha": alphas[unit[i]], "q_low": q_low,
                                       "q_high": q_high}}}
        b = U.band(r.setup, 1.0, basis_table=table)
        out.append((b.low_s, b.high_s))
    return out


# The band's quantiles, unit by unit: the narrowest pair (alpha, 1 - alpha) of its class's cross-validated errors
# whose bands, drawn for each run from the other families' errors in its class, hold at least U.COVERAGE of the
# unit's runs. The 10th/90th percentiles would do for errors alike across families; families err apart, so the band
# may reach further into the tails. The units are the classes (the band of a plan on an architecture the set lacks)
# and each class's runs on one GPU architecture (a plan on one the set has): a class's runs on one architecture can
# spread wider than the class's (the set's dense Hopper runs do), and they need their own tails to be held.
ALPHAS = (0.10, 0.09, 0.08, 0.07, 0.06, 0.05, 0.04, 0.03, 0.02, 0.01)


def band_quantile(runs, cv_res, kind, unit):
    """({unit: alpha}, each row's (low, high), whether each row's band holds its published figure); kind: each
    row's class, unit: each row's unit of coverage."""
    alphas, bands, covered = {}, [None] * len(runs), [False] * len(runs)
    for u in sorted(set(unit)):
        idx = [i for i, k in enumerate(unit) if k == u]
        for alpha in ALPHAS:
            alphas[u] = alpha
            drawn = cv_bands(runs, cv_res, alphas, kind, unit, rows=set(idx))
            held = {i: drawn[i][0] is not None and drawn[i][0] <= math.exp(-cv_res[i]) <= drawn[i][1] for i in idx}
            if sum(held.values()) / len(idx) >= U.COVERAGE:
                break
        for i in idx:
            bands[i], covered[i] = drawn[i], held[i]
    return alphas, bands, covered


def rel(r):
    """ln(pred/published) -> (pred - published)/published."""
    return math.exp(r) - 1


def breakdown(cv_res, cell, covered, alphas, kind, quantiles_of) -> dict:
    """Where the set's errors lie: for each band class and GPU architecture, the stated rows, their
    cross-validated median |error|, the share within 15%, the band's alpha and quantiles there (its class's
    errors) and the share whose band holds the published figure."""
    cells = {}
    for c, u, k, ok in zip(cv_res, cell, kind, covered):
        cells.setdefault(u, (k, []))[1].append((abs(rel(c)), ok))
    out = {}
    for u, (k, v) in sorted(cells.items()):
        q_low, q_high = quantiles_of(k, alphas[u])
        out[u] = {"runs": len(v), "cv_median_abs_error": float(np.median([e for e, _ in v])),
                  "cv_within_15": sum(e <= 0.15 for e, _ in v) / len(v), "alpha": alphas[u],
                  "q_low": q_low, "q_high": q_high, "band_coverage_cv": sum(ok for _, ok in v) / len(v)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", action="store_true", help="rewrite src/fitplan/timing/fitted.py and docs/calibration.md's "
                                                          "tables with this fit")
    ap.add_argument("--only", default="", help="rows whose id contains this text (a quick look; never --write)")
    args = ap.parse_args(argv)
    if args.only and args.write:
        ap.error("--write refits on the whole set: drop --only")
    t0 = time.process_time()
    runs, missed = PUB.runs([m for m in PUB.rows() if args.only in m.id])
    measured = np.array([r.measured_step_s for r in runs])
    before = np.log(R.predict(runs, CAL.PRIORS)[:, 0] / measured)
    fit = R.fit(runs, start=CAL.PRIORS, pool_unseen_clocks=True)
    cv = R.cross_validate(runs, start=fit.values, pool_unseen_clocks=True)
    kind = [U.model_class(r.setup.model) for r in runs]
    cell = [U.cell_of(r.setup) for r in runs]
    # by class (a plan on an architecture the set lacks), and by class and architecture (what the set's plans draw)
    alphas, _, class_covered = band_quantile(runs, cv.residuals, kind, kind)
    cell_alphas, bands, covered = band_quantile(runs, cv.residuals, kind, cell)
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
    band_table = {"runs": len(runs), "support": support(runs), "classes": {}}
    of_class = {cls: cv.residuals[[i for i, k in enumerate(kind) if k == cls]] for cls in alphas}
    for cls, alpha in alphas.items():
        res = of_class[cls]
        q_low, q_high = quantiles(res, alpha)
        band_table["classes"][cls] = {"runs": len(res), "alpha": alpha, "q_low": q_low, "q_high": q_high,
                                      "coverage_cv": sum(c for c, k in zip(class_covered, kind) if k == cls) / len(res)}
    cells = breakdown(cv.residuals, cell, covered, cell_alphas, kind, lambda k, alpha: quantiles(of_class[k], alpha))
    constants = {name: {"value": fit.values[name], "prior": CAL.PRIORS[name], "unit": CAL.BY_NAME[name].unit,
                        "meaning": CAL.BY_NAME[name].meaning, "rows": _determining(runs, fit, name)}
                 for name in CAL.NAMES}
    rows = []
    for r, b, f, c, (lo, hi), ok in zip(runs, before, fit.residuals, cv.residuals, bands, covered):
        rows.append({"id": r.name, "group": r.group, "flags": r.flags, "published_step_s": r.measured_step_s,
                     "before_error": rel(b), "fit_error": rel(f), "cv_error": rel(c),
                     "cv_band": None if lo is None else [lo * r.measured_step_s * math.exp(c),
                                                         hi * r.measured_step_s * math.exp(c)],
                     "band_holds": ok})
    rows += [{"id": m.id, "group": m.group, "flags": m.flags, "missed": why} for m, why in missed]
    if args.write:
        write(fit.values, band_table, cells)
        write_doc(rows, summary, constants, band_table, cells)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary, "constants": constants,
                          "band": band_table, "by_class_architecture": cells}, indent=1))
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
    for cls, q in band_table["classes"].items():
        print(f"\nband, {U.CLASSES[cls]} runs ({q['runs']}): the {q['alpha']:.0%} and {1 - q['alpha']:.0%} quantiles of "
              f"ln(published/predicted) under cross-validation {q['q_low']:+.3f} / {q['q_high']:+.3f} (the narrowest "
              f"pair that holds {U.COVERAGE:.0%} of the class's runs, each band drawn from the other families' runs of "
              f"the class; holds {q['coverage_cv']:.1%})")
    print("\nby class and GPU architecture (cross-validated): " + "; ".join(
        f"{cell} {c['runs']} runs, median |error| {c['cv_median_abs_error']:.1%}, within 15% {c['cv_within_15']:.0%}, "
        f"band holds {c['band_coverage_cv']:.0%}" for cell, c in cells.items()))
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


DOC = ROOT / "docs" / "calibration.md"
BEGIN, END = "<!-- fidelity: generated by bench/fidelity.py --write -->", "<!-- end of generated tables -->"


def markdown(rows, summary, constants, band, cells) -> str:
    """The generated part of docs/calibration.md: the summary, where the errors lie, the constants and every row."""
    pct = lambda x: f"{x:+.1%}"
    out = [BEGIN, "",
           f"{summary['n']} published runs, {summary['stated']} stated as plans, {summary['missed']} that fitplan cannot "
           f"state (counted as misses). Median |error|: {summary['before_median_abs_error']:.1%} before calibration "
           f"(the constants at their priors), {summary['fit_median_abs_error']:.1%} fitted on every row, "
           f"**{summary['cv_median_abs_error']:.1%} under leave-one-family-out cross-validation**; within 15%: "
           f"{summary['fit_within_15']:.0%} fitted, **{summary['cv_within_15']:.0%} cross-validated**. The 80% band "
           f"holds the published figure for {summary['band_coverage_cv']:.0%} of the stated rows under "
           f"cross-validation (each drawn at its class and architecture's quantiles, below). Band, class by class "
           f"(a plan on an architecture the set lacks): " + "; ".join(
               f"{U.CLASSES[cls]} runs ({q['runs']}), the {q['alpha']:.0%} and {1 - q['alpha']:.0%} quantiles of "
               f"ln(published/predicted) under cross-validation, {q['q_low']:+.3f} and {q['q_high']:+.3f} (holds "
               f"{q['coverage_cv']:.0%})" for cls, q in band["classes"].items()) + ".", "",
           "| band class / GPU architecture | stated runs | cross-validated median \\|error\\| | within 15% "
           "| band: the class's quantiles | band holds |",
           "|---|---|---|---|---|---|"]
    out += [f"| {cell} | {c['runs']} | {c['cv_median_abs_error']:.1%} | {c['cv_within_15']:.0%} | "
            f"{c['alpha']:.0%}/{1 - c['alpha']:.0%}: {c['q_low']:+.3f}/{c['q_high']:+.3f} | "
            f"{c['band_coverage_cv']:.0%} |" for cell, c in cells.items()]
    out += ["", "| constant | value | unit | prior | what it is | the rows that move it most |",
            "|---|---|---|---|---|---|"]
    for name, c in constants.items():
        out.append(f"| `{name}` | {c['value']:.4g} | {c['unit']} | {c['prior']:.4g} | {c['meaning']} | "
                   f"{'; '.join(c['rows'])} |")
    out += ["", "| run | family | published step s | before | fitted | cross-validated | band holds |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "missed" in r:
            out.append(f"| {r['id']} | {r['group']} | | | | miss: {r['missed'][:120]} | |")
        else:
            out.append(f"| {r['id']} | {r['group']} | {r['published_step_s']:.3f} | {pct(r['before_error'])} | "
                       f"{pct(r['fit_error'])} | {pct(r['cv_error'])} | {'yes' if r['band_holds'] else 'no'} |")
    return "\n".join(out + ["", END])


def write_doc(rows, summary, constants, band, cells) -> None:
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + markdown(rows, summary, constants, band, cells) + tail)


def write(values: dict, band: dict, cells: dict) -> None:
    lines = [FITTED.read_text().split("\nVALUES")[0].rstrip("\n"), "", "", "VALUES = {"]   # the docstring, kept once
    lines += [f"    {name!r}: {float(f'{values[name]:.4g}')!r}," for name in CAL.NAMES]
    lines += ["}", "", "BAND = {", f"    \"runs\": {band['runs']},", "    \"classes\": {"]
    for cls, q in band["classes"].items():
        lines.append(f"        {cls!r}: {{\"runs\": {q['runs']}, \"alpha\": {q['alpha']!r}, "
                     f"\"q_low\": {round(q['q_low'], 4)!r}, \"q_high\": {round(q['q_high'], 4)!r}}},")
    lines += ["    },", "    \"support\": {"]
    for dim, counts in band["support"].items():
        lines.append(f"        {dim!r}: {dict(sorted(counts.items()))!r},")
    lines += ["    },", "    \"cells\": {"]
    for cell, c in cells.items():
        lines.append(f"        {cell!r}: {{\"runs\": {c['runs']}, \"alpha\": {c['alpha']!r}, \"q_low\": "
                     f"{round(c['q_low'], 4)!r}, \"q_high\": {round(c['q_high'], 4)!r}, \"holds\": "
                     f"{round(c['band_coverage_cv'], 3)!r}}},")
    lines += ["    },", "}", ""]
    FITTED.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
