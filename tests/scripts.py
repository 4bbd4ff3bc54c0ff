"""The repository's scripts (tools/, bench/) as modules, for the tests that check what they print."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(relative: str):
    """tools/published_layouts.py -> its module, executed."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
