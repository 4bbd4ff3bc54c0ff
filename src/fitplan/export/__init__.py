"""Framework configurations from one plan.

    plan = make_plan(model=m, training=t, parallel=c, global_batch=1024, num_gpus=64)
    result = export("megatron", plan)      # or "deepspeed", "torchtitan", "torchtitan-python"
    if result.ok: write result.text to result.filename, show result.notes
    else: show result.message (every reason the framework cannot express the plan)

Exporters return values and write nothing; the CLI decides where the text goes.
"""
from fitplan.errors import SpecError
from fitplan.export.deepspeed import to_deepspeed
from fitplan.export.megatron import to_megatron
from fitplan.export.plan import Exported, Plan, Unsupported, make_plan
from fitplan.export.torchtitan import DEFAULT_VERSION, to_torchtitan, to_torchtitan_python

EXPORTERS = {"megatron": to_megatron, "deepspeed": to_deepspeed, "torchtitan": to_torchtitan,
             "torchtitan-python": to_torchtitan_python}
FORMATS = tuple(EXPORTERS)


def export(fmt: str, plan: Plan, *, torchtitan_version: str = DEFAULT_VERSION) -> Exported | Unsupported:
    """torchtitan_version: "0.2", "0.3" (the current release) or "main" (fitplan.export.torchtitan)."""
    if fmt not in EXPORTERS:
        raise SpecError(f"--format: unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt.startswith("torchtitan"):
        return EXPORTERS[fmt](plan, torchtitan_version)
    return EXPORTERS[fmt](plan)


__all__ = ["EXPORTERS", "FORMATS", "Exported", "Plan", "Unsupported", "export", "make_plan", "to_deepspeed",
           "to_megatron", "to_torchtitan", "to_torchtitan_python"]
