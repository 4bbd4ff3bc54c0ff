"""The core (specs, counts, memory, timing, search, explain, units, arith, the answers and the
request with its declarations) is pure: no print, open, input or exit, and no import of torch,
the CLI or the reports. The web server reaches fitplan through the request path only: it
imports neither argparse nor the CLI."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fitplan"
CORE = ["specs", "counts", "memory", "timing", "search.py", "explain.py", "units.py", "arith.py", "sources.py",
        "analysis.py", "presets", "answers.py", "sweep.py", "request.py", "parts.py", "compare.py",
        "serving.py"]
FORBIDDEN_CALLS = {"print", "open", "input", "exit", "quit"}
FORBIDDEN_IMPORTS = ("torch", "fitplan.cli", "fitplan.report", "fitplan.validate", "fitplan.web", "matplotlib", "sys")


def core_files():
    for entry in CORE:
        path = SRC / entry
        yield from ([path] if path.suffix == ".py" else sorted(path.rglob("*.py")))


def test_core_is_pure():
    files = list(core_files())
    assert len(files) > 15
    for path in files:
        tree = ast.parse(path.read_text())
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert not calls & FORBIDDEN_CALLS, path
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(FORBIDDEN_IMPORTS), f"{path} imports {name}"


def test_the_server_does_not_go_through_the_command_line():
    files = [p for p in sorted((SRC / "web").glob("*.py")) if p.name != "__main__.py"]   # that one is `fitplan serve`
    assert len(files) >= 8      # server, connection, app, schema, lanes, pool, worker, limits
    for path in files:
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
            n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {"argparse", "fitplan.cli", "tempfile", "subprocess", "fitplan.files.write"} & names, (path, names)


def test_the_server_is_split_by_idea():
    """No module of the web server over ~300 lines (issue 27: server.py was 980)."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (SRC / "web").glob("*.py")}
    assert max(sizes.values()) <= 300, sizes


def test_the_time_model_is_split_by_idea():
    """No module of timing/ over ~300 lines, one per part of the step (issue 24: step.py was 731; gemm.py, 405,
    is the GEMM curve, layer_gemms.py a layer's GEMMs and layer_rates.py a stage's rates since the ninth session)."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (SRC / "timing").glob("*.py")}
    assert len(sizes) >= 20 and max(sizes.values()) <= 300, sizes


# Scratch files in a private temporary folder (the job, the logs and the ranks' records of
# `fitplan validate`'s gloo processes) are not outputs: nobody names them and they vanish with the folder.
SCRATCH_WRITERS = {"validate/distributed.py"}


def _writes(tree) -> list[str]:
    """Calls that write a file: .write_text/.write_bytes/.savefig, and open() with a w, a, x or + mode."""
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if name in ("write_text", "write_bytes"):
            found.append(name)
        elif name == "savefig" and not (n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "png"):
            found.append("savefig to a path")
        elif name in ("open", "fdopen"):
            mode = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
                found.append(f"{name}(..., {mode.value!r})")
    return found


def test_every_file_fitplan_writes_goes_through_files_write():
    """One writer (fitplan.files.write: temporary file, fsync, rename): nothing else in src/ or
    tools/ writes a file, so no output can be left half written."""
    tools = SRC.parents[1] / "tools"
    offenders = {}
    for path in sorted(SRC.rglob("*.py")) + sorted(tools.glob("*.py")):
        rel = path.relative_to(SRC).as_posix() if SRC in path.parents else f"tools/{path.name}"
        if rel in ("files/write.py",) or rel in SCRATCH_WRITERS:
            continue
        found = _writes(ast.parse(path.read_text()))
        if found:
            offenders[rel] = found
    assert offenders == {}
    assert _writes(ast.parse((SRC / "files" / "write.py").read_text())) == ["fdopen(..., 'wb')"]


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running code (this checkout's sources), read from
    its stderr (the code's own output goes to stdout)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(SRC.parent)!r}); {code}; "
                          "print(' '.join(sorted(sys.modules)), file=sys.stderr)"], capture_output=True, text=True)
    return set(out.stderr.split())


def test_the_command_line_imports_what_its_command_needs():
    """Lazy imports on the CLI path (issue 26): parsing a request loads neither NumPy nor the models
    (serving, counts, memory); a search's report loads its own report module and not the others';
    nothing loads numpy.ma (np.unique does)."""
    parsed = _modules_after("from fitplan.cli import build_parser; from fitplan.request import Request")
    assert not {m for m in parsed if m.startswith(("numpy", "fitplan.serving", "fitplan.counts", "fitplan.memory",
                                                   "fitplan.timing", "fitplan.report"))}, parsed
    searched = _modules_after("from fitplan.cli import main; "
                              "main(['plan', '--preset', 'gpt3-175b', '--gpus', '16', '--suggest', '--top', '4'])")
    assert "fitplan.report.suggestions" in searched and "fitplan.search" in searched
    assert not searched & {"numpy.ma", "fitplan.serving", "fitplan.report.jsonout", "fitplan.report.comparison",
                           "fitplan.report.sweep", "fitplan.report.seed", "fitplan.files.write"}, searched
