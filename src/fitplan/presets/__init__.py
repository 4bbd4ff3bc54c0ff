"""Named presets: models, GPUs, precision recipes, framework profiles. One registry per kind."""
from fitplan.errors import SpecError
from fitplan.presets.frameworks import FRAMEWORKS
from fitplan.presets.gpus import GPUS
from fitplan.presets.models import MODELS, ModelPreset
from fitplan.presets.recipes import RECIPES


def _find(registry: dict, kind: str, flag: str, name: str):
    if name in registry:
        return registry[name]
    import difflib   # only for the hint: a plan that names its presets never loads it
    # Names the user began ("h100" of "h100-80gb") first, then near spellings ("h800").
    begun = [k for k in registry if name and k.startswith(name)]
    close = list(dict.fromkeys(begun + difflib.get_close_matches(name, list(registry), n=3, cutoff=0.5)))[:3]
    hint = f"did you mean {', '.join(close)}?" if close else f"run 'fitplan presets list' to see all {len(registry)}"
    raise SpecError(f"{flag}: unknown {kind} preset {name!r}; {hint}")


def model(name: str) -> ModelPreset:
    return _find(MODELS, "model", "--preset", name)


def gpu(name: str):
    return _find(GPUS, "GPU", "--gpu", name)


def recipe(name: str):
    return _find(RECIPES, "precision", "--precision", name)


def by_name(name: str):
    """Any preset by name: a model as (ModelSpec, TrainingSpec at its published settings),
    a GpuSpec or a Recipe. An unknown name raises with suggestions."""
    if name in MODELS:
        from fitplan.specs import TrainingSpec
        p = MODELS[name]
        return p.model, TrainingSpec(seq_len=p.seq_len, recipe=RECIPES["mixed-adam"], global_batch=p.global_batch,
                                     attention_kernel=p.attention_kernel, dropout=p.dropout,
                                     moe_dispatcher=p.moe_dispatcher)
    if name in GPUS:
        return GPUS[name]
    if name in RECIPES:
        return RECIPES[name]
    if name in FRAMEWORKS:
        raise SpecError(f"presets show {name} --toml: a framework profile is not a spec table; --framework {name} "
                        f"applies it (fitplan presets show {name} lists its defaults)")
    return model(name)   # unknown: raises with suggestions


__all__ = ["FRAMEWORKS", "GPUS", "MODELS", "RECIPES", "ModelPreset", "by_name", "model", "gpu", "recipe"]
