#!/usr/bin/env python3
"""Write docs/frameworks.md from the framework profiles (fitplan.presets.frameworks.frameworks_markdown)."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fitplan.files.write import write_file  # noqa: E402
from fitplan.presets.frameworks import frameworks_markdown  # noqa: E402

if __name__ == "__main__":
    write_file(ROOT / "docs" / "frameworks.md", frameworks_markdown())
    print("wrote docs/frameworks.md")
