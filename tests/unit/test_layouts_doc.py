"""docs/layouts.md is what tools/published_layouts.py prints: the published runs planned as
written, beside their published figures (compared, never fitted to)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_layouts_doc_is_generated():
    spec = importlib.util.spec_from_file_location("published_layouts", ROOT / "tools" / "published_layouts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "layouts.md").read_text() == module.document(), \
        "rerun: python tools/published_layouts.py > docs/layouts.md"
