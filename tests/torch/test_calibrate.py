"""`fitplan calibrate` on the CPU (gloo): the figures mean nothing, the mechanism is tested. The
GPU spec file is written, loads back, and a plan with --gpu-spec uses it: its step time is the
one the file's constants give, and slower than an H100's (the CPU's GEMMs and gloo's links).
No timing is asserted."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from fitplan.cli import main  # noqa: E402
from fitplan.files.load import load_gpu  # noqa: E402

TINY = ["--layers", "2", "--hidden", "256", "--heads", "4", "--vocab", "1000", "--seq-len", "128", "--micro-batch", "2",
        "--device", "cpu", "--iterations", "2"]
ROOT = Path(__file__).resolve().parents[2]


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out=out, err=err), out.getvalue(), err.getvalue()


def _plan_json(*extra):
    code, out, err = run(["plan", "--layers", "2", "--hidden", "256", "--heads", "4", "--vocab", "1000", "--seq-len", "128",
                          "--gpus", "2", "--tp", "2", "--json", *extra])
    assert code == 0, err
    return json.loads(out)


def test_one_process_writes_a_gpu_file_that_plans_load(tmp_path):
    path = tmp_path / "gpu.toml"
    code, out, err = run(["calibrate", *TINY, "--tp", "2", "--output", str(path), "--format", "json"])
    assert code == 0, err
    report = json.loads(out)
    gpu = load_gpu(path)
    # the file is what the report says; on one CPU process the links stay the base GPU's (h100-80gb)
    assert gpu.name == "h100-80gb calibrated" and report["base"] == "h100-80gb"
    assert gpu.efficiency == report["curve"]["efficiency"] and 0 < gpu.efficiency <= 1
    assert gpu.gemm_overhead_s == report["curve"]["gemm_overhead_s"]
    assert gpu.peak_bf16_flops_per_s == report["curve"]["peak_bf16_flops_per_s"]   # the CPU's best measured rate
    assert report["collectives"] == [] and gpu.intra_node.bytes_per_s == 450e9
    # the model's GEMMs at tp = 2: QKV 256 -> 3*256/2 = 384 for 2*128 = 256 tokens, forward and backward shapes
    shapes = {(g["m"], g["n"], g["k"]) for g in report["gemms"]}
    assert {(256, 384, 256), (256, 256, 384), (256, 384, 256)} <= shapes
    assert "# written by fitplan calibrate" in path.read_text()
    # a plan with it: slower than on an H100, and the same as with the file's numbers as flags
    calibrated, h100 = _plan_json("--gpu-spec", str(path)), _plan_json()
    assert calibrated["time"]["step_s"] > h100["time"]["step_s"]
    flags = _plan_json("--peak-tflops", repr(gpu.peak_bf16_flops_per_s / 1e12), "--gemm-efficiency",
                       repr(gpu.efficiency), "--gemm-efficiency-fp8", repr(gpu.efficiency_fp8),
                       "--gemm-overhead", f"{gpu.gemm_overhead_s!r} s",
                       "--gemm-bandwidth", f"{gpu.gemm_bandwidth_bytes_per_s!r} B/s")
    assert calibrated["time"]["step_s"] == pytest.approx(flags["time"]["step_s"], rel=1e-12)


def test_gpu_spec_and_gpu_are_one_source(tmp_path):
    path = tmp_path / "gpu.toml"
    assert run(["calibrate", *TINY, "--output", str(path)])[0] == 0
    code, _, err = run(["plan", "--preset", "gpt3-125m", "--gpus", "1", "--gpu", "a100-80gb", "--gpu-spec", str(path)])
    assert code == 2 and "--gpu-spec" in err and err.count("\n") == 1


def test_torchrun_measures_the_collectives_across_ranks(tmp_path):
    """Two CPU ranks under torchrun with gloo: all-reduce, all-gather and all-to-all over the node,
    and a tiny all-reduce for the latency; the intra-node link is the all-reduce's bus bandwidth
    2(n - 1)/n x bytes/time, and the latency the tiny one's time over its 2(n - 1) ring steps. The
    CPU's peak is given (10 GFLOP/s, this machine's order): the links are what is measured here, and
    a peak measured beside other work can fall below what a GPU spec accepts
    (test_a_measurement_under_load_says_so)."""
    path, report_path = tmp_path / "gpu.toml", tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src")] + sys.path), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "fitplan",
           "calibrate", *TINY, "--peak-tflops", "0.01", "--message", "64 KiB", "--output", str(path), "--format",
           "json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    report_path.write_text(done.stdout)
    ops = {(c["op"], c["group"]) for c in report["collectives"]}
    assert ops == {("all_reduce", "node"), ("all_gather", "node"), ("all_to_all", "node"),
                   ("all_reduce", "node latency")}
    big = next(c for c in report["collectives"] if c["op"] == "all_reduce" and c["group"] == "node")
    tiny = next(c for c in report["collectives"] if c["group"] == "node latency")
    assert big["bytes"] == 64 * 1024 and big["ranks"] == 2
    assert big["busbw_bytes_per_s"] == pytest.approx(big["bytes"] / big["seconds"] * 2 * (2 - 1) / 2)
    gpu = load_gpu(path)
    assert gpu.intra_node.name == "intra-node measured by fitplan calibrate"
    assert gpu.intra_node.bytes_per_s == pytest.approx(big["busbw_bytes_per_s"], rel=5e-3)   # 3 significant digits
    assert gpu.intra_node.latency_s == pytest.approx(min(0.099, tiny["seconds"] / 2), rel=5e-3)
    assert gpu.inter_node.bytes_per_s == 50e9                    # one node: the base GPU's inter-node link
    # the plan's tp traffic now runs over the measured link: slower than NVLink 4's 450 GB/s
    calibrated = _plan_json("--gpu-spec", str(path))
    nvlink = _plan_json("--gpu", "h100-80gb")
    assert calibrated["comm"]["tp"]["link"] == "intra-node measured by fitplan calibrate"
    assert calibrated["time"]["parts_s"]["time/tp_exposed"] > nvlink["time"]["parts_s"]["time/tp_exposed"]


def _gemms(flops_per_s):
    """GEMM times of the TINY model's shapes as if every one ran at flops_per_s (a GEMM's FLOPs 2gmnk)."""
    from fitplan.calibrate.measure import GemmTime
    shapes = [(256, 384, 256), (64, 384, 256), (16, 384, 256), (256, 1024, 256), (256, 256, 1024), (256, 1000, 256)]
    return tuple(GemmTime("linear", 1, m, n, k, False, 2 * m * n * k / flops_per_s) for m, n, k in shapes)


def _build(gemms, busy):
    from fitplan import presets
    from fitplan.calibrate.runner import _build
    return _build(presets.gpu("h100-80gb"), gemms, (), device=torch.device("cpu"), world=1, local=1, notes=[],
                  peak_given=False, model="tiny", tp=1, busy=busy)


def test_a_measurement_under_load_says_so():
    """The issue's case: under load the CPU's best GEMM ran at 0.000723 TFLOP/s, below the 0.001 TFLOP/s
    floor a GPU spec declares (fitplan.specs.cluster); nothing is written, one line says what was
    measured and that the machine was busy. A busy measurement within range is kept, with a note."""
    from fitplan.calibrate.runner import busy_words
    from fitplan.errors import SpecError
    busy = busy_words(9.2, 2)
    assert busy == "the machine was busy while it measured (load average 9.2 on 2 cores)"
    assert busy_words(1.9, 2) == "" and busy_words(None, 2) == ""
    with pytest.raises(SpecError) as refused:
        _build(_gemms(0.000723e12), busy)
    line = str(refused.value)
    assert "\n" not in line and "0.000723 TFLOP/s, below the 0.001 TFLOP/s a GPU spec accepts" in line
    assert "load average 9.2 on 2 cores" in line and "--peak-tflops" in line
    kept = _build(_gemms(0.008e12), busy)   # 8 GFLOP/s, this machine's CPU when idle
    assert kept.gpu.peak_bf16_flops_per_s == pytest.approx(0.008e12)
    assert any(n.startswith(busy) and "likely low" in n for n in kept.notes)
    assert not any("busy" in n for n in _build(_gemms(0.008e12), "").notes)
