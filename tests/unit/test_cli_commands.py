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


def test_export_megatron_of_the_minimum_viable_layout():
    """16 x gpu-192gib: the minimum viable layout is tp 8, pp 2, SP, selective (tests/unit/test_search.py);
    without --pick, export writes the recommended one (tests/unit/test_export_coverage.py)."""
    code, out, err = run(["export", "--preset", "gpt3-175b", "--gpus", "16", "--format", "megatron",
                          "--pick", "minimum-viable"])
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


@pytest.mark.parametrize("name", sorted(presets.MODELS) + sorted(presets.GPUS) + sorted(presets.RECIPES))
def test_presets_show_is_a_readable_summary(name):
    """Without --toml: a report (headings, words, the preset's numbers and source), not a dataclass repr."""
    code, out, _ = run(["presets", "show", name])
    assert code == 0 and "Spec(" not in out and "Recipe(" not in out and "=" not in out.splitlines()[0]
    source = out.split("\nsource\n", 1)[1].strip()
    if name in presets.MODELS:
        p = presets.MODELS[name]
        m = p.model
        assert out.startswith(f"model preset {name}\n")
        assert f"layers {m.num_layers}, hidden {m.hidden_size}, {m.num_heads} attention heads" in out
        assert f"sequence length                {p.seq_len:,}" in out and p.gpu in out
        assert f"{(m.published_params or 0):,}" in out or "(from shapes)" in out
        assert ("mixture of experts" in out) is (m.moe is not None)
        assert ("multi-head latent attention" in out) is (m.mla is not None)
        assert source == m.source
    elif name in presets.GPUS:
        g = presets.GPUS[name]
        assert out.startswith(f"GPU preset {name}\n") and g.intra_node.name in out and g.inter_node.name in out
        assert f"{g.peak_bf16_flops_per_s / 1e12:,g} TFLOP/s bf16" in out and f"{g.gpus_per_node} GPUs" in out
        assert ("no fp8 tensor cores" in out) is (g.peak_fp8_flops_per_s is None)
        assert source == g.source
    else:
        r = presets.RECIPES[name]
        assert out.startswith(f"precision recipe {name}\n") and f"compute precision (GEMMs): {r.compute}" in out
        total = next(line for line in out.splitlines() if line.strip().startswith("total"))
        assert total.split() == ["total", f"{r.total_bytes:g}"]
        assert source == r.source


def test_presets_show_examples():
    _, out, _ = run(["presets", "show", "gpt3-175b"])
    assert "parameters 175,000,000,000 (published; shape-derived 174,604,259,328)" in out
    assert "global batch                   1,536 sequences (3,145,728 tokens)" in out
    assert "GPU (when --gpu is not given)  gpu-192gib" in out
    _, out, _ = run(["presets", "show", "deepseek-v3"])
    assert "256 routed experts of ffn 2048, 8 per token, 1 shared, the first 3 layers dense" in out
    assert "kv_lora_rank 512" in out
    _, out, _ = run(["presets", "show", "a100-80gb"])
    assert "312 TFLOP/s bf16 dense, no fp8 tensor cores" in out and "HBM            2.039 TB/s" in out
    _, out, _ = run(["presets", "show", "mixed-adam"])
    assert "optimizer: adam_m        4" in out and "total                   16" in out


def test_gpu_spec_loads_a_gpu_table_that_flags_still_override(tmp_path):
    """--gpu-spec takes the GPU from a file's [gpu] table (what 'fitplan calibrate' writes): the
    H100 preset's table with a ceiling of 0.4 plans as --gemm-efficiency 0.4 does, slower than the
    preset; a flag on top still wins."""
    code, toml, _ = run(["presets", "show", "h100-80gb", "--toml"])
    path = tmp_path / "gpu.toml"
    path.write_text(toml.replace("\nefficiency = 0.799\n", "\nefficiency = 0.4\n"))
    base = ["plan", "--preset", "llama3.1-8b", "--gpus", "8", "--tp", "2", "--json"]
    step = lambda *extra: json.loads(run(base + list(extra))[1])["time"]["step_s"]
    from_file, preset = step("--gpu-spec", str(path)), step()
    assert from_file == pytest.approx(step("--gemm-efficiency", "0.4", "--gemm-efficiency-fp8", "0.641"), rel=1e-12)
    assert from_file > preset
    assert step("--gpu-spec", str(path), "--gemm-efficiency", "0.799") == pytest.approx(preset, rel=1e-12)


@pytest.mark.parametrize("flags", [["--hf-config", "x" * 3000], ["--preset", "gpt3-175b", "--plot", "x" * 3000 + ".png"],
                                   ["--preset", "gpt3-175b", "--plot-timeline", "x" * 3000 + ".png"]],
                         ids=["hf-config", "plot", "plot-timeline"])
def test_a_path_longer_than_the_file_system_allows_is_bad_input(flags):
    """A 3,000-character name is over Linux's 255-byte NAME_MAX: the OS says ENAMETOOLONG, and that
    is a one-line error naming the flag's path with exit 2, not an internal error (bench/fuzz.py found it)."""
    code, out, err = run(["plan", *flags, "--gpus", "8"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "File name too long" in err and "internal error" not in err


def test_the_parser_builds_only_the_command_argv_names():
    """main() builds the subparser argv names and no other (each costs argparse's gettext lookups); without one, or
    with an unknown one, all of them, for the top-level --help and the unknown command's message; the command's
    arguments parse the same either way."""
    import argparse

    from fitplan.cli import COMMANDS, build_parser
    choices = lambda p: next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert sorted(choices(build_parser())) == sorted(choices(build_parser("bogus"))) == sorted(COMMANDS)
    for name in COMMANDS:
        assert list(choices(build_parser(name))) == [name]
    argv = ["plan", "--preset", "gpt3-175b", "--gpus", "8", "--suggest", "--top", "4"]
    assert vars(build_parser("plan").parse_args(argv)) == vars(build_parser().parse_args(argv))
