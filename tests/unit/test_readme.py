"""The README's examples run as written: every command line in its "Use" block (issue 18)
ends in an answer (exit 0 or 1), never an error, from the repository's root."""
import io
import shlex
from pathlib import Path

import pytest

from fitplan.cli import main

ROOT = Path(__file__).resolve().parents[2]


def examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Use", 1)[1].split("\n\n", 2)[1]
    return [line.strip() for line in block.splitlines() if line.startswith("    ")]


def test_the_use_block_was_found():
    assert len(examples()) >= 12


@pytest.mark.parametrize("line", examples())
def test_a_readme_example_runs(line, tmp_path, monkeypatch):
    words = shlex.split(line.split("#")[0].split(">")[0])
    assert words[0] in ("fitplan", "python")
    argv = words[1:] if words[0] == "fitplan" else ["plan", *words[2:]]   # tools/memory_planner.py is plan
    argv = [str(tmp_path / a) if a.endswith(".png") else a for a in argv]   # plots into a scratch folder
    monkeypatch.chdir(ROOT)
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    assert code in (0, 1), (line, err.getvalue())
    assert out.getvalue()
