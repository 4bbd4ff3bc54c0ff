"""Framework profiles (fitplan.presets.frameworks): the generated page, and what --framework applies."""
import io
import json
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.presets.frameworks import EFFECTS, FRAMEWORKS, frameworks_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_the_framework_page_is_generated_from_the_profiles():
    """docs/frameworks.md is what `python tools/framework_reference.py` writes; rerun it after a change."""
    assert (ROOT / "docs" / "frameworks.md").read_text() == frameworks_markdown()


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_every_profile_value_is_sourced_and_explained(name):
    """Each value names a repository file at a commit (or torch 2.13.0) and what it changes in the estimate."""
    f = FRAMEWORKS[name]
    for field, d in list(f.training.items()) + list(f.config.items()):
        assert field in EFFECTS, field
        assert "@" in d.source or "torch 2.13.0" in d.source, (field, d.source)


def _plan(argv):
    out = io.StringIO()
    code = main(["plan", "--preset", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--zero", "3", "--json"] + argv,
                out=out, err=io.StringIO())
    return code, json.loads(out.getvalue())


def test_a_framework_fills_what_no_flag_sets_and_says_so():
    """torchtitan: eager kernels and cuDNN attention (its profile); a flag wins field by field, and the
    `assumed` line names only what the profile applied. Eager kernels move 4.0/1.35 times the fused
    traffic per stored byte (ELEMENTWISE_TRAFFIC), so the layer's memory-bound time grows."""
    _, titan = _plan(["--framework", "torchtitan"])
    line = next(a for a in titan["assumed"] if a.startswith("framework torchtitan"))
    assert "kernels eager" in line and "attention kernel cudnn" in line and "docs/frameworks.md" in line
    assert titan["training"]["attention_kernel"] == "cudnn"
    _, compiled = _plan(["--framework", "torchtitan", "--kernels", "compiled", "--attention-kernel", "flash2"])
    line = next(a for a in compiled["assumed"] if a.startswith("framework torchtitan"))
    assert "kernels eager" not in line and "attention kernel" not in line and "cross entropy pytorch" in line
    assert compiled["training"]["attention_kernel"] == "flash2"
    _, plain = _plan(["--kernels", "fused", "--attention-kernel", "cudnn"])
    assert not any(a.startswith("framework") for a in plain["assumed"])
    assert titan["time"]["step_s"] > plain["time"]["step_s"]


def test_eager_kernels_move_their_traffic():
    """A layer's memory-bound time is kappa x its stored bytes over HBM bandwidth: for fused kernels the counted
    1.35 x elementwise_scale, for eager ones the 12.0 measured whole on an H200 (the counted 4.0 x 1.775, the fitted
    scale of that day, x the 1.69 the profile found: docs/calibration.md, Elementwise traffic), whatever the shipped
    fit makes of the scale since; a user's own fit moves it by its scale over the shipped one."""
    from dataclasses import replace

    from fitplan.specs import ParallelConfig
    from fitplan.timing import evaluate_step
    from tests.conftest import make_setup
    setup = make_setup("llama3-8b", 8, gpu="h100-80gb")
    el = {}
    for kernels in ("fused", "eager"):
        r = evaluate_step(replace(setup, training=replace(setup.training, kernels=kernels)), ParallelConfig(dp=8))
        el[kernels] = next(t.value for t in r.terms if t.key == "time/layer_elementwise")
    from fitplan.timing.calibration import SHIPPED, resolve
    assert el["eager"] == pytest.approx(el["fused"] * 12.0 / (1.35 * SHIPPED["elementwise_scale"]), rel=1e-12)
    # a user's fit (fitplan calibrate --runs) with a scale 10% above the shipped one: eager's traffic 10% more too
    mine = {**SHIPPED, "elementwise_scale": SHIPPED["elementwise_scale"] * 1.1}
    kappa = lambda kernels, values: resolve(architecture="hopper", kernel="flash", kernels=kernels, cuda_graphs=False,
                                            values=values).elementwise
    assert kappa("eager", SHIPPED) == pytest.approx(12.0, rel=1e-12)
    assert kappa("eager", mine) == pytest.approx(13.2, rel=1e-12)
    assert kappa("fused", mine) == pytest.approx(1.35 * 1.1 * SHIPPED["elementwise_scale"], rel=1e-12)


def test_the_kernels_effect_names_the_traffic_the_model_uses():
    # what `fitplan presets list` and docs/frameworks.md tell the user must be the figures the time model divides by
    from fitplan.presets.frameworks import EFFECTS
    from fitplan.timing.calibration import ELEMENTWISE_TRAFFIC
    for family, traffic in ELEMENTWISE_TRAFFIC.items():
        assert f"{family} {traffic:g}" in EFFECTS["kernels"], family
