"""Fuzz the command line: any argument vector ends in exit 0/1 with an answer on stdout, or
exit 2 with exactly one line on stderr. Never a traceback, never another exit code.

The 'ci' profile runs these derandomized; bench/fuzz.py runs many more.
"""
import io
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitplan.cli import main

NUMBERS = st.one_of(st.integers(-5, 300).map(str), st.sampled_from(
    ["0", "-1", "1e400", "nan", "inf", "-inf", "10" * 12, "2.5", "", "٣", "8 ", " 8", "0x10", "1_000"]))
SIZES = st.sampled_from(["80 GiB", "80 GIB", "-1 GiB", "1e400 GB", "", "80", "0.1 GiB", "192 GiB", "5 TB",
                         "NaN GiB", "10 GiB", "∞ GiB", "1e-9 B", "3 MiB"])
NAMES = st.sampled_from(["gpt3-175b", "gpt3-125m", "llama3.1-8b", "llama2-70b", "no-such", "", "GPT3-175B",
                         "h100-80gb", "a100-40gb", "mixed-adam", "fp8", "adam-8bit", "ünïcode"])
FLAGS = {
    "--preset": NAMES, "--gpus": NUMBERS, "--tp": NUMBERS, "--pp": NUMBERS, "--dp": NUMBERS, "--cp": NUMBERS,
    "--zero": NUMBERS, "--recompute": st.sampled_from(["none", "selective", "full", "half", ""]),
    "--micro-batch": NUMBERS, "--global-batch": NUMBERS, "--virtual-stages": NUMBERS, "--gpu": NAMES,
    "--gpu-memory": SIZES, "--reserve": SIZES, "--gpus-per-node": NUMBERS, "--layers": NUMBERS,
    "--hidden": NUMBERS, "--heads": NUMBERS, "--kv-heads": NUMBERS, "--ffn": NUMBERS, "--vocab": NUMBERS,
    "--seq-len": NUMBERS, "--params": NUMBERS, "--precision": NAMES, "--top": NUMBERS,
    "--mlp": st.sampled_from(["gelu", "swiglu", "relu"]), "--act-bytes": NUMBERS, "--weight-bytes": NUMBERS,
    "--max-cp": NUMBERS, "--format": st.sampled_from(["text", "markdown", "json", "xml"]),
}
# CI runs this many; bench/fuzz.py runs more by setting the variable.
EXAMPLES = int(os.environ.get("FITPLAN_FUZZ_EXAMPLES", "3000"))
SWITCHES = ["--suggest", "--sequence-parallel", "--json", "--tied-embeddings", "--untied-embeddings",
            "--no-dropout", "--allow-cross-node-tp", "--bogus", "-x"]


@st.composite
def argvs(draw):
    argv = [draw(st.sampled_from(["plan", "search", "presets", "plan", "plan", "bogus", "export", "compare",
                                  "sweep"]))]
    if argv[0] == "presets":
        return argv + draw(st.lists(st.sampled_from(["list", "show", "gpt3-175b", "h100-80gb", "nope", "--toml"]),
                                    max_size=3))
    if argv[0] == "export":
        argv += ["--format", draw(st.sampled_from(["megatron", "deepspeed", "torchtitan", "torchtitan-python", "x"]))]
    if argv[0] == "sweep":   # a few small x values keep each case fast
        argv += ["--values", draw(st.sampled_from(["1,2", "8", "0", "a,b", "", "16,3000000000"])),
                 "--over", draw(st.sampled_from(["gpus", "seq-len", "both"]))]
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=7, unique=True)):
        argv += [flag] if draw(st.integers(0, 15)) == 0 else [flag, draw(FLAGS[flag])]
    argv += draw(st.lists(st.sampled_from(SWITCHES), max_size=2, unique=True))
    if draw(st.booleans()):   # usually a runnable core, so deeper paths get exercised
        argv += ["--preset", draw(st.sampled_from(["gpt3-125m", "llama3.1-8b", "gpt3-175b"])),
                 "--gpus", str(draw(st.sampled_from([1, 2, 8, 16, 64])))]
    return argv


def check(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    assert code in (0, 1, 2), (argv, code)
    if code == 2:
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("fitplan: "), (argv, err.getvalue())
        assert out.getvalue() == ""
    else:   # an answer; stderr holds nothing but export notes
        assert out.getvalue(), argv
        assert all(line.startswith("fitplan: note: ") for line in err.getvalue().splitlines()), argv


@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck))
@given(argvs())
def test_cli_never_crashes(argv):
    check(argv)
