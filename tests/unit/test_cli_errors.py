"""Bad input: one line on stderr naming the field and the fix, exit 2, never a traceback."""
import io
import subprocess
import sys
from pathlib import Path

import pytest

from fitplan.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASE = ["plan", "--preset", "gpt3-175b", "--gpus", "16"]


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("argv", "needle"), [
    (["plan", "--preset", "gpt3-175", "--gpus", "8"], "did you mean gpt3-175b"),
    (["plan", "--preset", "gpt3-175b", "--gpus", "40", "--tp", "5"], "divisible by tp=5"),
    (BASE + ["--tp", "5"], "not divisible by tp x pp x cp = 5"),
    (BASE + ["--tp", "8", "--dp", "3"], "tp x pp x dp x cp"),
    (["plan", "--preset", "gpt3-175b", "--gpus", "0"], "--gpus = 0 is out of range; give 1 to 1,048,576"),
    (["plan", "--preset", "gpt3-175b", "--gpus", "-4"], "--gpus = -4 is out of range; give 1 to 1,048,576"),
    (BASE + ["--gpu-memory", "80 GIB"], "unknown unit 'GIB'"),
    (BASE + ["--gpu-memory", "-1 GiB"], "--gpu-memory: cannot read"),
    (BASE + ["--reserve", "500 GiB"], "leaves no usable memory"),
    (BASE + ["--gpu", "h100"], "did you mean"),
    (BASE + ["--tp", "16"], "pass --allow-cross-node-tp"),
    (BASE + ["--micro-batch", "0"], "--micro-batch = 0 is out of range; give 1 to 1,048,576"),
    (["plan", "--preset", "gpt3-175b", "--gpus", "128", "--pp", "128"], "96 layers cannot fill pp x virtual"),
    (["plan", "--preset", "gpt3-175b", "--gpus", "32", "--pp", "4", "--first-stage-layers", "50",
      "--last-stage-layers", "50"], "need at least one each"),
    (BASE + ["--schedule", "dualpipe"], "it needs pp > 1"),
    (BASE + ["--sequence-parallel"], "needs tp > 1"),
    (BASE + ["--zero", "7"], "invalid choice"),
    (BASE + ["--bf16-last-layers", "2"], "--bf16-last-layers: every GEMM is bf16 already; give --compute-precision"),
    (BASE + ["--compute-precision", "fp8", "--bf16-first-layers", "50", "--bf16-last-layers", "50"],
     "--bf16-last-layers: 50 first + 50 last layers kept in bf16 exceed the model's 96; give at most 96 in all"),
    (BASE + ["--bf16-first-layers", "-1"], "--bf16-first-layers = -1 is out of range"),
    (["plan", "--gpus", "8"], "--preset: no model given"),
    (["plan", "--preset", "gpt3-175b"], "--gpus"),
    (BASE + ["--bogus"], "unrecognized arguments"),
    (BASE + ["--suggest", "--top", "0"], "--top = 0 is out of range; give 1 to 100"),
    (BASE + ["--layers", "0"], "--layers = 0 is out of range; give 1 to 100,000"),
    (BASE + ["--precision", "fp7"], "unknown precision preset"),
])
def test_bad_input_is_one_line_exit_2(argv, needle):
    code, out, err = run(argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("fitplan: ")
    assert needle in err


def test_wrapper_unknown_preset_subprocess():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "memory_planner.py"), "--preset", "no-such-model",
                           "--gpus", "8"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
