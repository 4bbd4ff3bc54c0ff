"""The fuzz of fitplan's two front ends: the command line's grammar and the JSON API.

Cases are drawn from the grammar itself: the CLI's parser (every subcommand's every option,
its type and choices, read from argparse) and the API's request schema (GET /api/fields),
with hostile values beside valid ones: huge, negative and non-finite numbers, exponents past
any range, unit strings, control characters, long strings, unicode, and paths to devices,
FIFOs, folders and missing files. Each case runs in-process, in a fresh folder, under a time
bound, and is classified:

  CLI  exit0 / exit1 (an answer) | exit2 (bad input: one stderr line, empty stdout) |
       traceback (an exception escaped main, or exit 3) | hang (over TIME_BOUND_S) |
       bad_json (--json output that is not JSON, or holds NaN/Infinity) | bad_error (exit 2
       with other than one line) | stray_file (a file written besides the requested output,
       a temporary file left behind included) | clobbered (an input file, or a symbolic
       link's target, changed)
  API  200 (JSON, no NaN) | 400 (one line) | 5xx (a bug) | hang | bad_json

Every command is drawn, with every output flag. Three have stand-ins for the part that is not
argument handling (`stand_ins()`): validate's runner (torch, minutes per model) returns an
empty report; calibrate's GEMM timer returns a time from the FLOPs (the fit, the file and the
report are real); serve binds its port and returns instead of serving forever. Output paths
stay in the case folder, or are places that cannot be written (devices, /proc): the fuzz runs
as whoever runs it, root included, and must never write outside its folder.

tests/properties/test_fuzz_contract.py asserts the contract on a CI-sized run;
bench/fuzz.py runs thousands and prints the counts by outcome.
"""
import io
import json
import os
import re
import signal
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from hypothesis import strategies as st

TIME_BOUND_S = 30
NON_FINITE = re.compile(r"(?<![A-Za-z])(nan|-?inf)(?![A-Za-z])")   # Python prints a non-finite float so
GOOD = {"exit0", "exit1", "exit2", "200", "400"}

PRESETS = ["gpt3-175b", "gpt3-125m", "llama3.1-8b", "mixtral-8x7b", "deepseek-v3", "dense-100b", "no-such", "",
           "GPT3-175B", "h100-80gb", "mixed-adam", "fp8", "ünïcode", "a\nb", "x" * 3000]
NUMBERS = ["0", "-1", "1", "2", "3", "8", "16", "64", "96", "4096", "1e400", "nan", "inf", "-inf", "10" * 12,
           str(2**63), str(10**30), "2.5", "", "٣", " 8", "0x10", "1_000", "9" * 5000, "1e-300"]
UNIT_STRINGS = ["80 GiB", "80 GIB", "-1 GiB", "1e400 GB", "1e99999999999999999999 GiB", "0.1 GiB", "5 TB",
                "NaN GiB", "∞ GiB", "1e-9 B", "450 GB/s", "1 B/s", "1e-300 GB/s", "400 Gb/s", "3 us", "5 s",
                "1e-999999 ms", "80", "", "x" * 3000]
HOSTILE_TEXT = ["a\nb", "\x1b[31m", "$(touch PWNED)", '"; touch PWNED; "', "é" * 50, "x" * 3000, " ", "--gpus"]
OUTPUT_FLAGS = ("--plot", "--plot-timeline", "--output")   # the flags that name a file fitplan writes
INPUT_FLAGS = ("--spec", "--hf-config", "--gpu-spec")      # the flags that name a file fitplan reads
PREPARED = {"ok.toml": '[training]\nseq_len = 1024\nrecipe = "mixed-adam"\n',
            "deep.json": '{"model": ' + "[" * 50000 + "]" * 50000 + "}",
            "gpu.toml": '[gpu]\nname = "fuzz-gpu"\nmemory = "80 GiB"\n',
            "target.txt": "the target of outlink.txt\n"}


def _paths(folder: Path) -> list[str]:
    """Input paths: anything readable, devices and system files included."""
    return ["/dev/zero", "/dev/null", "/dev/full", str(folder), str(folder / "missing" / "x.png"),
            str(folder / "fifo.toml"), str(folder / "ok.toml"), str(folder / "deep.json"), str(folder / "out.png"),
            str(folder / "out.txt"), "examples/hf/llama-3.1-8b", "/etc/passwd", str(folder / "link.json"),
            str(folder / "gpu.toml"), "outlink.txt"]


def _output_paths(folder: Path) -> list[str]:
    """Output paths: files in the case folder (new ones, an input, a link to a file, a link to a
    device, a FIFO, a folder, a missing folder), and places no file can be written."""
    return ["out.png", "out.txt", "out.toml", str(folder / "out2.png"), "ok.toml", "gpu.toml", "outlink.txt",
            "link.json", "fifo.toml", ".", "missing/x.png", "/dev/null", "/dev/full", "/proc/x.toml",
            "x" * 300 + ".png"]


def _prepare(folder: Path) -> None:
    """The files the path values name: a FIFO, small valid spec and GPU files, a deeply nested
    one, a link to a device and a link to a file."""
    os.mkfifo(folder / "fifo.toml")
    for name, text in PREPARED.items():
        (folder / name).write_text(text)
    os.symlink("/dev/zero", folder / "link.json")
    os.symlink("target.txt", folder / "outlink.txt")


def cli_grammar(command: str):
    """(option strings, type, choices, takes a value) for every option of a subcommand, read from
    the parser itself."""
    import argparse

    from fitplan.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    out = []
    for action in parser._actions:
        if not action.option_strings or action.option_strings == ["-h", "--help"]:
            continue
        takes = action.nargs != 0
        out.append((action.option_strings[-1], getattr(action.type, "__name__", "str"),
                    tuple(action.choices) if action.choices else (), takes))
    return out


COMMANDS = ["plan", "plan", "plan", "search", "export", "export", "sweep", "compare", "infer", "presets", "validate",
            "serve", "calibrate"]
CORES = {   # a runnable core for each command, so the deep paths are exercised
    "validate": lambda draw: ["--model", draw(st.sampled_from(["tiny-gpt", "tiny-llama", "tiny-moe", "all"]))]
                             + (["--no-distributed"] if draw(st.booleans()) else []),
    "serve": lambda draw: ["--port", "0"],
    "calibrate": lambda draw: draw(st.sampled_from([["--preset", "gpt3-125m"],
                                                    ["--layers", "2", "--hidden", "256", "--heads", "4", "--vocab",
                                                     "1000", "--seq-len", "128", "--micro-batch", "2"]]))
                              + ["--device", "cpu", "--iterations", "1", "--output", "out.toml"],
}


def _value(draw, flag: str, kind: str, choices: tuple, folder: Path) -> str:
    if choices and draw(st.integers(0, 4)):
        return str(draw(st.sampled_from(choices)))
    if kind == "int" or kind == "float" or flag in ("--gpus",):
        return draw(st.sampled_from(NUMBERS))
    if flag in OUTPUT_FLAGS:
        return draw(st.sampled_from(_output_paths(folder)))
    if flag in INPUT_FLAGS:
        return draw(st.sampled_from(_paths(folder)))
    if flag in ("--preset", "--gpu", "--precision"):
        return draw(st.sampled_from(PRESETS))
    return draw(st.sampled_from(UNIT_STRINGS + NUMBERS[:6] + HOSTILE_TEXT))


@st.composite
def cli_cases(draw, folder: Path):
    command = draw(st.sampled_from(COMMANDS))
    if command == "presets":
        return [command] + draw(st.lists(st.sampled_from(["list", "show", "gpt3-175b", "h100-80gb", "nope",
                                                          "--toml", "x\ny"]), max_size=3))
    grammar = cli_grammar(command)
    argv = [command]
    if command in CORES:
        if draw(st.integers(0, 3)):
            argv += CORES[command](draw)
    elif draw(st.integers(0, 3)):     # usually a runnable core, so the deep paths are exercised
        argv += ["--preset", draw(st.sampled_from(["gpt3-125m", "llama3.1-8b", "gpt3-175b", "mixtral-8x7b"])),
                 "--gpus", str(draw(st.sampled_from([1, 2, 8, 16, 64, 720720])))]
        if command == "sweep":
            argv += ["--values", draw(st.sampled_from(["1,2", "8", "4,16"]))]
    for flag, kind, choices, takes in draw(st.lists(st.sampled_from(grammar), max_size=6,
                                                     unique_by=lambda g: g[0])):
        if flag in ("--plot", "--plot-timeline") and draw(st.integers(0, 5)):
            continue             # drawing PNGs is slow; a few cases keep it
        argv += [flag, _value(draw, flag, kind, choices, folder)] if takes else [flag]
    outputs = [f for f, *_ in grammar if f in OUTPUT_FLAGS]
    if outputs and draw(st.integers(0, 5)) == 0:   # an output on an input, or two outputs on one path
        flag = draw(st.sampled_from(outputs))
        if len(outputs) > 1 and draw(st.booleans()):
            argv += ["--plot", "same.png", "--plot-timeline", "./same.png"]
        elif flag != "--plot-timeline" or draw(st.integers(0, 3)) == 0:
            source = draw(st.sampled_from([f for f, *_ in grammar if f in INPUT_FLAGS]))
            path = draw(st.sampled_from(["ok.toml", "gpu.toml", str(folder / "ok.toml")]))
            argv += [source, path, flag, draw(st.sampled_from([path, "./" + Path(path).name]))]
    if draw(st.integers(0, 20)) == 0:
        argv.append(draw(st.sampled_from(["--bogus", "-x", "--debug", "--"])))
    return argv


@contextmanager
def _time_bound(seconds: int):
    def alarm(*_):
        raise TimeoutError(f"over {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _json_ok(text: str) -> bool:
    try:
        json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
        return True
    except ValueError:
        return False


@contextmanager
def case_folder():
    """A fresh working folder holding the files the path values name; the repo's examples are
    reachable as examples/ through a link."""
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="fitplan-fuzz-") as tmp:
        folder = Path(tmp)
        _prepare(folder)
        os.symlink(root / "examples", folder / "examples")
        old = os.getcwd()
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(old)


@contextmanager
def stand_ins():
    """validate's runner, calibrate's GEMM timer and serve's loop replaced (see the docstring),
    and put back afterwards, so the other tests in this process see the real ones."""
    import sys
    import types

    from fitplan.web.server import FitplanServer
    try:
        from fitplan.web.lanes import Lanes
    except ImportError:      # an older checkout (bench/fuzz.py --src): one pool
        from fitplan.web.server import AnalysisPool as Lanes
    from fitplan.validate.report import ValidationReport
    runner = types.ModuleType("fitplan.validate.runner")
    runner.run = lambda *, model, seq_len, micro_batch, device, **_: ValidationReport(
        model=model.name, seq_len=seq_len, micro_batch=micro_batch, device=device, torch_version="stand-in", rows=())
    import fitplan.validate as V
    saved = {"runner": sys.modules.get("fitplan.validate.runner"), "attribute": getattr(V, "runner", None),
             "serve_forever": FitplanServer.serve_forever, "start": Lanes.start}
    sys.modules["fitplan.validate.runner"] = V.runner = runner   # `from fitplan.validate import runner` reads both
    FitplanServer.serve_forever = lambda self, *a, **k: None
    Lanes.start = lambda self: None
    try:
        import fitplan.calibrate.measure as M
    except ImportError:      # no torch: calibrate answers with its one line
        M = None
    if M is not None:
        saved["gemm_seconds"] = M.gemm_seconds
        M.gemm_seconds = lambda *, name, g, m, n, k, fp8, device, warmup, iterations: M.GemmTime(
            name, g, m, n, k, fp8, 2.0 * g * m * n * k / 1e11 + 1e-5)   # 100 GFLOP/s plus 10 us
    try:
        yield
    finally:
        if saved["runner"] is None:
            sys.modules.pop("fitplan.validate.runner", None)
        else:
            sys.modules["fitplan.validate.runner"] = saved["runner"]
        if saved["attribute"] is None:
            del V.runner
        else:
            V.runner = saved["attribute"]
        FitplanServer.serve_forever, Lanes.start = saved["serve_forever"], saved["start"]
        if M is not None:
            M.gemm_seconds = saved["gemm_seconds"]


def run_cli(argv: list[str], folder: Path) -> tuple[str, str]:
    """(outcome, detail) of one command line (under stand_ins() for validate, calibrate, serve)."""
    from contextlib import redirect_stderr, redirect_stdout

    from fitplan.cli import main
    before = set(os.listdir(folder))
    out, err = io.StringIO(), io.StringIO()
    try:
        with _time_bound(TIME_BOUND_S), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            code = main(list(argv), out=out, err=err)
    except TimeoutError:
        return "hang", repr(argv)[:300]
    except BaseException as error:  # noqa: BLE001 - an escaped exception is the finding
        return "traceback", f"{type(error).__name__}: {error}"[:300]
    requested = {Path(argv[i + 1]).name for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS}
    stray = set(os.listdir(folder)) - before - requested
    for name in set(os.listdir(folder)) - before:
        p = folder / name
        if p.is_file():
            p.unlink()
    inputs = {Path(argv[i + 1]).name for i, a in enumerate(argv[:-1]) if a in INPUT_FLAGS}
    changed = [name for name, text in PREPARED.items() if (folder / name).read_text() != text]
    for name in changed:
        (folder / name).write_text(PREPARED[name])
    if not (folder / "outlink.txt").is_symlink():      # replaced by a file: put the link back
        (folder / "outlink.txt").unlink()
        os.symlink("target.txt", folder / "outlink.txt")
        changed.append("outlink.txt (replaced)")
    clobbered = [n for n in changed if n in inputs or n == "target.txt" or n.startswith("outlink.txt")]
    if clobbered:
        return "clobbered", f"{clobbered} by {argv!r}"[:300]
    if stray:
        return "stray_file", f"{sorted(stray)} from {argv!r}"[:300]
    if code == 3:
        return "traceback", err.getvalue()[:300]
    if code == 2:
        lines = err.getvalue()
        if lines.count("\n") != 1 or not lines.startswith("fitplan: ") or out.getvalue():
            return "bad_error", f"{argv!r}: {lines[:200]!r}"
        return "exit2", ""
    if code not in (0, 1):
        return f"exit{code}", repr(argv)[:300]
    text = out.getvalue()
    if ("--json" in argv or "json" in argv) and text.lstrip().startswith("{") and not _json_ok(text):
        return "bad_json", repr(argv)[:300]
    if NON_FINITE.search(text):   # a text report prints a non-finite float as nan or inf
        return "bad_json", f"non-finite number in the output of {argv!r}"[:300]
    return f"exit{code}", ""


# ---------------------------------------------------------------- the JSON API

def api_schema() -> dict:
    """endpoint -> [(request key, kind)], from the server's own schema."""
    try:
        from fitplan.web.schema import fields_payload
    except ImportError:   # an older checkout (bench/fuzz.py --src), before the server was split
        from fitplan.web.server import fields_payload
    return {e: [(f["key"], f["kind"]) for f in fields] for e, fields in fields_payload().items()}


JSON_VALUES = [0, -1, 1, 2, 8, 16, 2**31, 2**63, 10**30, 1.5, -0.0, 1e308, "8", "", "x" * 3000, "a\nb", True, False,
               None, [], {}, [1, 2], "80 GiB", "1 B/s", "nan", "gpt3-175b", "$(touch PWNED)", "1e99999 GiB"]


@st.composite
def api_cases(draw):
    schema = api_schema()
    endpoint = draw(st.sampled_from(sorted(schema)))
    body = {}
    if draw(st.integers(0, 3)):
        body.update(preset=draw(st.sampled_from(["gpt3-125m", "llama3.1-8b", "gpt3-175b"])),
                    gpus=draw(st.sampled_from([1, 8, 16, 64])))
        if endpoint == "sweep":
            body["values"] = [4, 8]
        if endpoint == "export":
            body["format"] = draw(st.sampled_from(["megatron", "deepspeed", "torchtitan", "torchtitan-python"]))
    for key, _kind in draw(st.lists(st.sampled_from(schema[endpoint]), max_size=5, unique_by=lambda f: f[0])):
        body[key] = draw(st.sampled_from(JSON_VALUES))
    if draw(st.integers(0, 15)) == 0:
        body[draw(st.sampled_from(["bogus", "spec", "plot", "hf_config", "hf_name"]))] = draw(
            st.sampled_from(JSON_VALUES + ['{"model_type": "llama"}', "../etc"]))
    return endpoint, body


def run_api(endpoint: str, body) -> tuple[str, str]:
    from fitplan.web import handle
    raw = json.dumps(body).encode()
    try:
        with _time_bound(TIME_BOUND_S):
            r = handle("POST", f"/api/{endpoint}", {"Content-Type": "application/json"}, raw)
    except TimeoutError:
        return "hang", repr(body)[:300]
    except BaseException as error:  # noqa: BLE001
        return "traceback", f"{type(error).__name__}: {error}"[:300]
    if r.status >= 500:
        return "5xx", f"{endpoint} {body!r}: {r.body[:200]!r}"[:400]
    if r.status == 400:
        message = json.loads(r.body)["error"]
        return ("400", "") if "\n" not in message else ("bad_error", message[:200])
    if r.status == 200 and r.content_type.startswith("application/json") and not _json_ok(r.body.decode()):
        return "bad_json", f"{endpoint} {body!r}"[:300]
    return str(r.status), ""


def tally(outcomes) -> Counter:
    return Counter(o for o, _ in outcomes)
