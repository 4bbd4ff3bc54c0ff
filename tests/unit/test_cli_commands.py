"""The subcommands around `plan`: presets show --toml, export, sweep, --plot, --spec, --hf-config."""
import io
import json
from pathlib import Path

import pytest

from fitplan import presets
from fitplan.cli import main
from fitplan.presets import by_name as preset_object
from fitplan.files.load import parse_document, specs_from_document

ROOT = Path(__file__).resolve().parents[2]


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", sorted(presets.MODELS) + sorted(presets.GPUS) + sorted(presets.RECIPES))
def test_presets_show_toml_loads_back_identically(name):
    code, out, _ = run(["presets", "show", name, "--toml"])
    assert code == 0
    spec = specs_from_document(parse_document(out, where=name), where=name)
    obj = preset_object(name)
    if isinstance(obj, tuple):
        assert (spec.model, spec.training) == obj
    else:
        assert obj in (spec.gpu, spec.recipe)


def test_export_megatron_of_the_recommendation():
    """16 x gpu-192gib: the recommendation is tp 8, pp 2, SP, selective (tests/unit/test_search.py)."""
    code, out, err = run(["export", "--preset", "gpt3-175b", "--gpus", "16", "--format", "megatron"])
    assert code == 0
    args = out.split()
    assert args[args.index("--tensor-model-parallel-size") + 1] == "8"
    assert args[args.index("--pipeline-model-parallel-size") + 1] == "2"
    assert "--sequence-parallel" in args and args[args.index("--recompute-granularity") + 1] == "selective"
    assert all(line.startswith("fitplan: note: ") for line in err.splitlines())


def test_export_unexpressible_is_an_answer():
    code, out, _ = run(["export", "--preset", "gpt3-175b", "--gpus", "16", "--format", "deepspeed"])
    assert code == 1 and "tp" in out


def test_export_nothing_fits():
    code, out, _ = run(["export", "--preset", "gpt3-175b", "--gpus", "8", "--format", "megatron"])
    assert code == 1 and "nothing fits" in out


def test_sweep_json_marks_the_smallest_count():
    """The least-loaded configuration needs (16 psi + activations)/N; 16 is the first power of two that fits."""
    code, out, _ = run(["sweep", "--preset", "gpt3-175b", "--gpus", "8", "--values", "4,8,16,32", "--format", "json"])
    data = json.loads(out)
    assert code == 0 and data["smallest_fitting"] == 16
    assert [p["fits"] for p in data["points"]] == [False, False, True, True]
    used = [p["per_gpu_bytes"] for p in data["points"]]
    assert used == sorted(used, reverse=True)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plan.png"
    code, _, _ = run(["plan", "--preset", "gpt3-175b", "--gpus", "16", "--suggest", "--top", "3", "--plot", str(path)])
    assert code == 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_spec_file_and_hf_config_give_the_preset_answer():
    """examples/specs/llama3.1-8b-64xh100.toml holds the llama3.1-8b shapes, 64 H100s and global batch 512."""
    spec = ["plan", "--spec", str(ROOT / "examples/specs/llama3.1-8b-64xh100.toml"), "--tp", "2", "--json"]
    code, out, _ = run(spec)
    from_file = json.loads(out)
    code2, out2, _ = run(["plan", "--preset", "llama3.1-8b", "--gpus", "64", "--global-batch", "512", "--tp", "2",
                          "--json"])
    preset = json.loads(out2)
    assert code == code2 and from_file["breakdown"] == preset["breakdown"]
    code3, out3, _ = run(["plan", "--hf-config", str(ROOT / "examples/hf/llama-3.1-8b"), "--seq-len", "8192",
                          "--gpus", "64", "--global-batch", "512", "--tp", "2", "--json"])
    assert json.loads(out3)["breakdown"] == preset["breakdown"]


def test_two_model_sources_is_an_error():
    code, _, err = run(["plan", "--preset", "gpt3-175b", "--hf-config", str(ROOT / "examples/hf/gpt2"), "--gpus", "8"])
    assert code == 2 and "one model source" in err


EXPLICIT = ["plan", "--preset", "gpt3-175b", "--gpus", "16", "--tp", "8", "--pp", "2", "--sequence-parallel",
            "--recompute", "selective"]


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_one_configuration_shows_its_step_time(fmt):
    """The single-configuration report carries what --json and --suggest say about time: step,
    tokens/s, MFU, the parts of the step in seconds, and each axis's bytes, link and tier."""
    code, out, _ = run(EXPLICIT + ["--format", fmt])
    _, js, _ = run(EXPLICIT + ["--json"])
    t, comm = json.loads(js)["time"], json.loads(js)["comm"]
    assert code == 0 and "Estimated step time" in out
    assert f"{t['step_s']:,.3f}" in out and f"{t['tokens_per_s']:,.0f}" in out and f"{t['mfu']:.1%}" in out
    for key, label in (("time/compute", "compute (recompute included)"), ("time/tp_exposed", "exposed tp traffic"),
                       ("time/pp_exposed", "exposed pp traffic"), ("time/bubble", "the pipeline bubble")):
        assert label in out and f"{t['parts_s'][key]:,.3f}" in out
    assert f"tp 8 inside a node over {comm['tp']['link']} ({comm['tp']['bytes_per_step'] / 1e9:,.1f} GB/step/GPU" in out
    assert f"pp 2 across nodes over {comm['pp']['link']}" in out
    assert "exposed cp traffic" not in out and "exposed dp traffic" not in out     # degree 1: nothing sent


@pytest.mark.parametrize("argv", [EXPLICIT, ["plan", "--preset", "gpt3-175b", "--gpus", "64", "--suggest"]])
def test_no_time_on_a_gpu_without_the_recipes_precision_is_said(argv):
    """fp8 on an A100: both reports keep their time heading and say in one line why there is no time."""
    code, out, _ = run(argv + ["--gpu", "a100-80gb", "--precision", "fp8"])
    assert code in (0, 1)
    lines = [line for line in out.splitlines() if "not estimated" in line]
    assert len(lines) == 1 and "a100-80gb has no fp8 peak rate" in lines[0]
    assert "Estimated step time" in out
