"""The fields of a plan that an export must carry, and the model card.

Every leaf field of the plan (the model's shapes with its MoE and MLA tables, the training
setup, the layout, the global batch and the GPU count) is either written by an exporter,
as a flag, a key or a line of its model card, or named by it under "cannot express"; none
is dropped (tests/unit/test_export_coverage.py checks every preset in every format).

A few fields are not settings of a training job but inputs to fitplan's estimate; they are
listed once here, each with the reason, so that nothing is left out by accident:
"""
from dataclasses import fields, is_dataclass

from fitplan.specs import ModelSpec

# field path -> why no framework setting carries it
PLANNER_ONLY = {
    "model.name": "a label",
    "model.source": "prose: where the shapes come from",
    "model.published_params": "the published count the estimate scales to; the shapes build the model",
    "training.moe_imbalance": "the estimate's assumed load on the busiest expert rank, not a setting",
    "parallel.microbatch_grad_sync": "how the estimate's pipelined ZeRO-2/3 syncs gradients (Llama 3's FSDP); "
                                     "the exported frameworks' pipelining syncs once per step",
    "training.framework": "the profile whose defaults the estimate takes; the export's format names the framework",
    "training.kernels": "the step-time model's kernel family (fused, compiled, eager): its speed, not a setting "
                        "the exports write",
    "training.cuda_graphs": "the step-time model's host launch overhead per layer; the exports leave CUDA graphs "
                            "to the framework's default",
    "training.expert_gemm": "the step-time model's host cost per local expert; the exports leave the experts' GEMM "
                            "implementation to the framework's default",
    "training.train_tokens": "the run's length for the time and cost estimate; iterations come with the data "
                             "settings, which no export writes",
    "training.optimizer_impl": "the estimate's model of the optimizer step's temporaries (each framework's "
                               "own default, fused)",
    "training.cross_entropy": "the estimate's model of the loss kernel's buffers",
    "training.grad_bucket_bytes": "the estimate's model of the gradient buckets' size",
    "training.grad_bucket_view": "the estimate's model of the gradient buckets' layout",
    "training.fsdp_prefetch": "the estimate's model of ZeRO-3 prefetching",
    "training.fragmentation": "the estimate's allowance for the caching allocator",
    "training.ce_chunks": "the estimate's model of the chunked loss's buffers (torchtune's num_output_chunks)",
    "training.fp8_weight_cache": "the estimate's model of the quantized weight copies the framework keeps",
    "training.optimizer_in_backward": "the estimate's model of a torchtune recipe setting (optimizer_in_bwd), "
                                      "which no export's framework has",
    "training.paged_optimizer": "the estimate's model of a bitsandbytes optimizer, which no export's framework "
                                "builds",
}
# prose fields of the precision recipe (its bytes are the setting)
_RECIPE_PROSE = ("name", "description", "source")
# fine-tuning fields that mean something only when fine-tuning
_FINETUNE_ONLY = ("lora_rank", "lora_targets", "base_precision")


def leaves(prefix: str, obj) -> dict:
    """Every leaf field of a dataclass as "prefix.field" -> value; a nested table (the
    model's moe and mla) is expanded, an absent one (None) is one leaf."""
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        path = f"{prefix}.{f.name}"
        if is_dataclass(value) and f.name != "recipe":
            out.update(leaves(path, value))
        else:
            out[path] = value
    return out


def plan_fields(plan) -> dict:
    """Every field of the plan that describes the job: path -> value. The recipe is one
    field (its bytes per component and compute precision together)."""
    out = leaves("model", plan.model)
    out.update({k: v for k, v in leaves("training", plan.training).items() if k != "training.global_batch"})
    out.update(leaves("parallel", plan.parallel))
    out["plan.global_batch"] = plan.global_batch
    out["plan.num_gpus"] = plan.num_gpus
    if plan.training.finetune == "full":
        for name in _FINETUNE_ONLY:
            out.pop(f"training.{name}")
    return {k: v for k, v in out.items() if k not in PLANNER_ONLY}


def model_card(model: ModelSpec) -> list[tuple[str, object]]:
    """The model's shape fields as (path, value), for exports whose framework builds the
    model in code (torchtitan, DeepSpeed): the file or its notes state what that code must
    build. Absent tables are written as None (dense MLPs, multi-head attention)."""
    return [(k, v.value if hasattr(v, "value") else v) for k, v in leaves("model", model).items()
            if k not in PLANNER_ONLY]


def card_lines(model: ModelSpec, *, training=None) -> list[str]:
    """`path = value` lines of the model card (and the training settings that live in model
    code: dropout and the attention kernel), one per field."""
    lines = [f"{k} = {_text(v)}" for k, v in model_card(model)]
    if training is not None:
        lines += [f"training.dropout = {_text(training.dropout)}",
                  f"training.attention_kernel = {_text(training.attention_kernel)}"]
    return lines


def _text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
