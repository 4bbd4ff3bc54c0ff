"""The GEMM curves in the presets are what bench/calibrate.py fits from bench/gemm_points.csv,
and the fitting code (fitplan.calibrate.fit) recovers a curve it is given."""
import numpy as np
import pytest

from fitplan import presets
from fitplan.calibrate import fit
from fitplan.timing import gemm as G

from tests.scripts import ROOT, load


def _bench():
    return load("bench/calibrate.py")


def test_every_point_names_its_source_and_none_is_end_to_end():
    bench = _bench()
    points = bench.load_points()
    assert len(points) == 2212
    header = [line for line in (ROOT / "bench" / "gemm_points.csv").read_text().splitlines() if line.startswith("#")]
    keys = {p["source"].split(":")[0] for p in points}
    assert keys == {"xla-sm_90", "xla-sm_100_B200", "xla-gfx942", "xla-gfx950", "mamf", "maf", "deepgemm",
                    "pyptx-cublas"}
    for key in ("xla-<key>", "mamf: <note>", "maf ", "deepgemm ", "pyptx-cublas "):
        assert any(key in line for line in header), key
    assert all(2 * float(p["g"]) * float(p["m"]) * float(p["n"]) * float(p["k"]) >= 1e9 for p in points)


def test_the_presets_store_the_fit():
    """Refit everything (a few seconds) and compare with fitplan.presets.gpus.CURVES, rounded as they are
    stored. A100's ceiling reproduces its one maximum-achievable row (1024 x 10240 x 5120 at 271.2 TFLOP/s):
    F = 2*1024*10240*5120, eff = F/(312e12*(F/271.2e12 - 6.11 us)) = 0.883."""
    bench = _bench()
    points = bench.load_points()
    curves = bench.fit_curves(points)
    a100 = bench.fit_a100(points, curves["h100"])
    fitted = bench.stored_form(curves, a100)
    assert {die: tuple(c.values()) for die, c in presets.gpus.CURVES.items()} == fitted["curves"]
    F = 2 * 1024 * 10240 * 5120
    assert a100["eff"] == pytest.approx(F / (312e12 * (F / 271.2e12 - 6.11e-6)), rel=1e-3)
    assert curves["h100"].rms < 0.1 and abs(curves["h100"].residuals["xla-sm_90"][1]) < 0.02


def test_the_fit_recovers_a_curve_it_is_given():
    """Times made by the curve itself (eff_max 0.7 bf16 / 0.6 fp8, t0 5 us, W 4 TB/s, peak 1e15)
    over a spread of shapes come back to three digits."""
    rows = []
    for m, n, k in [(256, 4096, 4096), (1024, 1024, 1024), (2048, 8192, 4096), (4096, 4096, 16384), (8192, 512, 512),
                    (16384, 16384, 8192), (512, 512, 8192), (4096, 256, 256)]:
        for fp8 in (False, True):
            e_in = 1 if fp8 else 2
            t = G.gemm_s(m=m, n=n, k=k, eff_max=0.6 if fp8 else 0.7, peak=1e15, t0=5e-6, W=4e12, e_in=e_in)
            rows.append((1, m, n, k, t, fp8, 2, 1e15, "made"))
    c = fit.fit_curve(fit.Points.of(rows))
    assert (c.eff_bf16, c.eff_fp8) == (pytest.approx(0.7, abs=2e-3), pytest.approx(0.6, abs=2e-3))
    assert c.t0_s == pytest.approx(5e-6, rel=2e-2) and c.W == pytest.approx(4e12, rel=2e-2)
    assert c.rms < 1e-3


def test_points_count_operand_bytes_by_dtype():
    p = fit.Points.of([(2, 64, 32, 16, 1e-6, False, 2, 1e15, "a"), (1, 64, 32, 16, 1e-6, True, 2, 2e15, "b")])
    assert list(p.F) == [2 * 2 * 64 * 32 * 16, 2 * 64 * 32 * 16]
    assert list(p.B) == [2 * (2 * (64 * 16 + 16 * 32) + 2 * 64 * 32), 1 * (64 * 16 + 16 * 32) + 2 * 64 * 32]
    assert np.array_equal(p.fp8, [False, True])


def test_w_stays_in_the_bracket_it_was_searched_in():
    """The simplex that refines the grid's best point keeps W inside the bracket (log10_w): where the data would
    take it further (here GEMMs made at W = 1e13 B/s, skinny ones memory-bound at a 1e15 peak, fitted in a bracket
    up to 1e12) the fit stops at the bracket's end instead of leaving it. Unbounded, the simplex follows the error
    wherever it falls (a loaded CPU's calibrate wrote W = 6.9e178 B/s, which its own range check then refused)."""
    rows = [(1, m, n, k, G.gemm_s(m=m, n=n, k=k, eff_max=0.5, peak=1e15, t0=5e-6, W=1e13), False, 2, 1e15, "made")
            for m, n, k in [(8192, 64, 64), (16384, 128, 64), (32768, 64, 128), (8192, 8192, 8192), (4096, 4096, 4096)]]
    assert fit.fit_curve(fit.Points.of(rows), log10_w=(10.0, 14.0)).W == pytest.approx(1e13, rel=2e-2)
    assert 1e8 <= fit.fit_curve(fit.Points.of(rows), log10_w=(8.0, 12.0)).W <= 1e12
