"""Every file fitplan writes (issue 27): checked before any work, written all or nothing
(fitplan.files.write), never over an input, never through a link, never twice on one path; and
under a file-size limit (a full disk, as RLIMIT_FSIZE makes it) no existing file changes and no
partial file is left, for every output flag."""
import io
import os
import resource
import subprocess
import sys
import types
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.files import write as W

ROOT = Path(__file__).resolve().parents[2]
EXPORT = ["export", "--preset", "gpt3-125m", "--gpus", "8", "--format", "megatron"]
PLAN = ["plan", "--preset", "gpt3-125m", "--gpus", "8"]
SWEEP = ["sweep", "--preset", "gpt3-125m", "--gpus", "8", "--values", "1,8"]
OLD = b"# the file as it was before fitplan ran\n"


def run(argv, cwd=None):
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return main(argv, out=out, err=err), out.getvalue(), err.getvalue()
    finally:
        os.chdir(old)


def refused(argv, cwd, *words) -> str:
    code, out, err = run(argv, cwd)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("fitplan: "), err
    for w in words:
        assert w in err, err
    return err


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path):
    spec = tmp_path / "in.toml"
    spec.write_text('[training]\nseq_len = 1024\n')
    before = spec.read_bytes()
    refused([*EXPORT, "--spec", "in.toml", "--output", "in.toml"], tmp_path, "--output in.toml", "the --spec input")
    # the same file by another name: a link to it, and a path through ".."
    (tmp_path / "sub").mkdir()
    os.symlink("in.toml", tmp_path / "link.toml")
    refused([*EXPORT, "--spec", "link.toml", "--output", "in.toml"], tmp_path, "the --spec input")
    refused([*EXPORT, "--spec", "in.toml", "--output", "sub/../in.toml"], tmp_path, "the --spec input")
    refused([*PLAN, "--gpu-spec", "in.toml", "--plot", "in.toml"], tmp_path, "--plot in.toml", "the --gpu-spec input")
    assert spec.read_bytes() == before


def test_an_hf_config_folder_counts_its_config_json_as_the_input(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    src = ROOT / "examples" / "hf" / "llama-3.1-8b" / "config.json"
    (folder / "config.json").write_bytes(src.read_bytes())
    refused(["plan", "--hf-config", "m", "--gpus", "8", "--seq-len", "1024", "--plot", "m/config.json"], tmp_path,
            "--plot m/config.json", "the --hf-config input")
    assert (folder / "config.json").read_bytes() == src.read_bytes()


def test_two_outputs_on_one_path_are_refused(tmp_path):
    refused([*PLAN, "--plot", "a.png", "--plot-timeline", "./a.png"], tmp_path,
            "--plot-timeline ./a.png", "the same file as --plot")
    assert list(tmp_path.iterdir()) == []


def test_a_symlinked_output_is_refused_and_its_target_kept(tmp_path):
    target = tmp_path / "target.sh"
    target.write_bytes(OLD)
    os.symlink("target.sh", tmp_path / "out.sh")
    refused([*EXPORT, "--output", "out.sh"], tmp_path, "--output out.sh", "a symbolic link (to target.sh)")
    assert target.read_bytes() == OLD and (tmp_path / "out.sh").is_symlink()


@pytest.mark.parametrize("path,words", [
    ("/proc/x.toml", ("cannot create a file in '/proc'",)),
    ("/dev/null", ("not a regular file",)),
    ("missing/x.sh", ("the folder 'missing' does not exist",)),
    (".", ("that is a folder",)),
])
def test_a_place_that_cannot_take_the_file_is_refused_before_any_work(tmp_path, path, words):
    refused([*EXPORT, "--output", path], tmp_path, f"--output {path}", *words)


def test_a_file_without_write_permission_is_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write any file; the permission check cannot be seen")
    out = tmp_path / "ro.sh"
    out.write_bytes(OLD)
    out.chmod(0o444)
    refused([*EXPORT, "--output", "ro.sh"], tmp_path, "not writable")
    assert out.read_bytes() == OLD


def test_a_written_file_replaces_the_old_one_whole_and_keeps_its_mode(tmp_path):
    out = tmp_path / "x.sh"
    out.write_bytes(OLD)
    out.chmod(0o640)
    code, stdout, err = run([*EXPORT, "--output", "x.sh"], tmp_path)
    assert code == 0 and stdout == "wrote x.sh\n"
    assert out.read_text() == run(EXPORT)[1]          # exactly what stdout would have been
    assert (out.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sh"]      # no temporary file left


def test_a_new_file_gets_the_mode_open_would_give(tmp_path):
    umask = os.umask(0o027)
    try:
        W.write_file(tmp_path / "new.txt", "text\n")
    finally:
        os.umask(umask)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o640          # 0o666 less the umask 0o027


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "x.txt"
    out.write_bytes(OLD)

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(W.os, "fsync", no_space)
    with pytest.raises(OSError):
        W.write_file(out, "new text " * 1000)
    assert out.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == ["x.txt"]


# ---------------------------------------------------------------- a full disk: RLIMIT_FSIZE in a child process

LIMIT_BYTES = 100    # every output below is larger (an export is ~800 B, a PNG tens of KB, a GPU file ~2 KB)
CALIBRATE_STUB = """
import sys
import fitplan.calibrate.measure as M
# no measuring: each GEMM takes its FLOPs at 100 GFLOP/s plus 10 us (the file's numbers do not matter here)
M.gemm_seconds = lambda *, name, g, m, n, k, fp8, device, warmup, iterations: M.GemmTime(
    name, g, m, n, k, fp8, 2.0 * g * m * n * k / 1e11 + 1e-5)
from fitplan.cli import main
sys.exit(main(sys.argv[1:]))
"""
CASES = {
    "export --output": ([*EXPORT, "--output", "out.txt"], "--output"),
    "plan --plot": ([*PLAN, "--plot", "out.txt"], "--plot"),
    "plan --plot-timeline": ([*PLAN, "--plot-timeline", "out.txt"], "--plot-timeline"),
    "sweep --plot": ([*SWEEP, "--plot", "out.txt"], "--plot"),
    "calibrate --output": (["calibrate", "--layers", "2", "--hidden", "256", "--heads", "4", "--vocab", "1000",
                            "--seq-len", "128", "--micro-batch", "2", "--device", "cpu", "--iterations", "1",
                            "--output", "out.txt"], "--output"),
}


def run_limited(argv, cwd: Path, limit_bytes: int | None):
    """`python -m fitplan ARGV` in cwd, its files limited to limit_bytes (None: no limit). Python
    ignores SIGXFSZ, so a write past the limit is an OSError (EFBIG) rather than a killed process."""
    def limit():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-c", CALIBRATE_STUB] if argv[0] == "calibrate" else [sys.executable, "-m", "fitplan"]
    return subprocess.run(cmd + list(argv), cwd=cwd, env=env, preexec_fn=limit, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("existing", [True, False], ids=["over-a-file", "new-file"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_full_disk_changes_nothing_and_leaves_no_part(tmp_path, case, existing):
    argv, flag = CASES[case]
    if argv[0] == "calibrate":
        pytest.importorskip("torch")
    if existing:
        (tmp_path / "out.txt").write_bytes(OLD)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    p = run_limited(argv, tmp_path, LIMIT_BYTES)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines()[-1] == f"fitplan: {flag} out.txt: cannot write it (File too large); pick another path"
    assert {q.name: q.read_bytes() for q in tmp_path.iterdir()} == before
    if existing:
        return
    # and without the limit the same command writes the file whole (so the limit is what refused it)
    ok = run_limited(argv, tmp_path, None)
    assert ok.returncode == 0, ok.stderr
    assert sorted(q.name for q in tmp_path.iterdir()) == ["out.txt"]
    assert (tmp_path / "out.txt").stat().st_size > LIMIT_BYTES and (tmp_path / "out.txt").read_bytes() != OLD


# ---------------------------------------------------------------- calibrate checks before it measures

def test_calibrate_refuses_an_unwritable_output_before_measuring(monkeypatch, tmp_path):
    """`fitplan calibrate --output /proc/x.toml` is refused by its argument check: the measuring
    module (which imports torch and measures for minutes) is never reached."""
    reached = []
    fake = types.ModuleType("fitplan.calibrate.runner")
    fake.run_calibrate = lambda request, out: reached.append(request) or 0
    monkeypatch.setitem(sys.modules, "fitplan.calibrate.runner", fake)
    code, out, err = run(["calibrate", "--preset", "gpt3-125m", "--output", "/proc/x.toml"])
    assert code == 2 and err.startswith("fitplan: --output /proc/x.toml: cannot create a file in '/proc'")
    assert reached == []
    spec = Path(__file__)     # an input given as the output: refused the same way
    code, _, err = run(["calibrate", "--preset", "gpt3-125m", "--gpu-spec", str(spec), "--output", str(spec)])
    assert code == 2 and "the --gpu-spec input" in err and reached == []
    assert run(["calibrate", "--preset", "gpt3-125m", "--output", str(tmp_path / "gpu.toml")])[0] == 0
    assert len(reached) == 1       # the fake stands in for the measuring: a good output reaches it


def test_presets_list_takes_no_extra_argument():
    code, out, err = run(["presets", "list", "extra"])
    assert code == 2 and out == "" and "unexpected argument 'extra'" in err
    assert run(["presets", "list"])[0] == 0
