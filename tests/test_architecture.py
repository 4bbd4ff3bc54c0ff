"""The core (specs, counts, memory, timing, search, explain, units, arith, the answers and the
request with its declarations) is pure: no print, open, input or exit, and no import of torch,
the CLI or the reports. The web server reaches fitplan through the request path only: it
imports neither argparse nor the CLI."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fitplan"
CORE = ["specs", "counts", "memory", "timing", "search.py", "explain.py", "units.py", "arith.py", "sources.py",
        "analysis.py", "presets", "answers.py", "request.py", "parts.py", "compare.py",
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
    tree = ast.parse((SRC / "web" / "server.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {"argparse", "fitplan.cli", "tempfile", "subprocess"} & names, names
