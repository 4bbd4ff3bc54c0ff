"""Shared fixtures: setups from presets, the golden-file checker, hypothesis profiles."""
import os

# One thread per process, set before NumPy or torch is imported: the suite runs on two worker processes
# (pytest-xdist, pyproject.toml), and torch's and OpenBLAS's thread pools on top of them oversubscribe the
# cores; beside other work their spinning threads made the torch checks three times slower (validate on
# tiny-llama: 38 s against 13 s). Subprocesses the tests start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from fitplan import presets
from fitplan.memory.breakdown import Setup
from fitplan.specs import ClusterSpec, TrainingSpec

settings.register_profile("ci", max_examples=200, derandomize=True, deadline=None)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def make_setup(model_name: str, num_gpus: int, *, gpu: str | None = None, recipe: str = "mixed-adam",
               reserve_bytes: int | None = None, seq_len: int | None = None, global_batch="preset",
               gpus_per_node: int | None = None) -> Setup:
    preset = presets.model(model_name)
    g = presets.gpu(gpu or preset.gpu)
    training = TrainingSpec(seq_len=seq_len or preset.seq_len, recipe=presets.recipe(recipe),
                            global_batch=preset.global_batch if global_batch == "preset" else global_batch)
    cluster = ClusterSpec(gpu=g, num_gpus=num_gpus, gpus_per_node=gpus_per_node or g.gpus_per_node,
                          reserve_bytes=g.default_reserve_bytes if reserve_bytes is None else reserve_bytes)
    return Setup(preset.model, training, cluster)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/data/*")


@dataclass
class Golden:
    root: Path
    update: bool

    def check(self, name: str, text: str) -> None:
        path = self.root / name
        if self.update:
            path.write_text(text)
            return
        assert path.exists(), f"{path.name} missing: run pytest --update-golden and review it"
        assert text == path.read_text(), f"{path.name} changed: rerun with --update-golden and review the diff"


@pytest.fixture
def golden(request):
    return Golden(Path(__file__).parent / "golden" / "data", update=request.config.getoption("--update-golden"))
