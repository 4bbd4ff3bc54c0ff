"""Named presets: models, GPUs, precision recipes. One registry per kind."""
import difflib

from fitplan.errors import SpecError
from fitplan.presets.gpus import GPUS
from fitplan.presets.models import MODELS, ModelPreset
from fitplan.presets.recipes import RECIPES


def _find(registry: dict, kind: str, flag: str, name: str):
    if name in registry:
        return registry[name]
    close = difflib.get_close_matches(name, list(registry), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"run 'fitplan presets list' to see all {len(registry)}"
    raise SpecError(f"{flag}: unknown {kind} preset {name!r}; {hint}")


def model(name: str) -> ModelPreset:
    return _find(MODELS, "model", "--preset", name)


def gpu(name: str):
    return _find(GPUS, "GPU", "--gpu", name)


def recipe(name: str):
    return _find(RECIPES, "precision", "--precision", name)


__all__ = ["GPUS", "MODELS", "RECIPES", "ModelPreset", "model", "gpu", "recipe"]
