#!/usr/bin/env python3
"""Write docs/spec-files.md from the field declarations (fitplan.files.load.reference_markdown)."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fitplan.files.load import reference_markdown  # noqa: E402
from fitplan.files.write import write_file  # noqa: E402

if __name__ == "__main__":
    write_file(ROOT / "docs" / "spec-files.md", reference_markdown())
    print("wrote docs/spec-files.md")
