"""A DeepSpeed ds_config.json for a plan.

Keys as in deepspeed.ai/docs/config-json and the 0.19.8 package (docs/engines.md#deepspeed-config-keys):
train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x
data-parallel size; zero_optimization.stage; bf16.enabled; data_types.grad_accum_dtype;
optimizer.type; activation_checkpointing.

What a ds_config cannot say, and this module therefore refuses:
  * tensor, pipeline and context parallelism. DeepSpeed sets them up in code (a Megatron
    mpu, deepspeed.pipe.PipelineModule, Ulysses sequence parallelism), and the config-level
    AutoTP (tensor_parallel.autotp_size) does not shard the vocabulary as the plan does.
    So only tp = pp = cp = 1 plans are exported, where the data-parallel size is the world.
  * precisions DeepSpeed does not have: bf16 weights without an fp32 master copy, fp8,
    8-bit optimizer moments (a client optimizer passed in code).
Recompute is never switched on by the config: `activation_checkpointing` only configures
deepspeed.checkpointing, which the model code must call; the notes say what to wrap.
"""
import json

from fitplan.export.plan import Exported, Plan, Unsupported, adapter_and_offload_reasons, describe
from fitplan.presets import recipes
from fitplan.specs import Offload, Recompute, ZeroStage

FORMAT = "deepspeed"
ADAM, SGD = dict(recipes.ADAM), dict(recipes.SGD_MOMENTUM)


def to_deepspeed(plan: Plan) -> Exported | Unsupported:
    reasons = _parallel_reasons(plan) + adapter_and_offload_reasons(
        plan, "DeepSpeed", ("optimizer", "optimizer+params", "params-nvme"))
    notes = []
    config = {"train_batch_size": plan.global_batch,
              "train_micro_batch_size_per_gpu": plan.parallel.micro_batch,
              "gradient_accumulation_steps": plan.num_microbatches}
    config.update(_precision(plan, reasons, notes))
    config["zero_optimization"] = {"stage": int(plan.parallel.zero), **_offload(plan, reasons, notes)}
    config.update(_optimizer(plan, reasons))
    config.update(_recompute(plan, notes))
    if reasons:
        return Unsupported(format=FORMAT, reasons=tuple(reasons))
    notes += _notes(plan)
    return Exported(format=FORMAT, filename="ds_config.json", text=json.dumps(config, indent=2, allow_nan=False) + "\n",
                    data=config, notes=tuple(notes))


def _parallel_reasons(plan: Plan) -> list:
    c, out = plan.parallel, []
    if c.tp > 1:
        out.append(f"tp = {c.tp}: tensor parallelism is not a ds_config setting in the form the plan uses "
                   f"(Megatron-style column/row shards with a vocabulary-parallel embedding need an mpu from "
                   f"Megatron-DeepSpeed; AutoTP's tensor_parallel.autotp_size does not split the embedding)")
    if c.pp > 1:
        out.append(f"pp = {c.pp}: DeepSpeed pipelines are built in code with deepspeed.pipe.PipelineModule"
                   f"(num_stages={c.pp}); a ds_config only carries pipeline options")
    if c.cp > 1:
        out.append(f"cp = {c.cp}: DeepSpeed has no context-parallel config key; its sequence parallelism "
                   f"(Ulysses) is set up in code and splits attention heads, not the sequence ring the plan models")
    return out


def _precision(plan: Plan, reasons: list, notes: list) -> dict:
    r, zero, act = plan.training.recipe, plan.parallel.zero, plan.training.act_bytes
    if r.compute == "fp8" or r.weights_bytes == 1:
        reasons.append(f"recipe {r.name!r} computes in fp8: a ds_config has no fp8 switch (Transformer Engine "
                       f"layers in the model code provide it)")
        return {}
    if r.weights_bytes == 4:
        if r.grads_bytes != 4 or r.master_bytes != 0:
            reasons.append(f"fp32 weights train with fp32 grads and no master copy (4/4/0 B/param); recipe "
                           f"{r.name!r} has {r.weights_bytes}/{r.grads_bytes}/{r.master_bytes}")
        if act != 4:
            reasons.append(f"fp32 training stores 4-byte activations but the plan has act_bytes = {act}")
        return {"bf16": {"enabled": False}, "fp16": {"enabled": False}}
    if r.weights_bytes != 2:
        reasons.append(f"weights at {r.weights_bytes} B/param: DeepSpeed trains bf16 (2) or fp32 (4) weights")
        return {}
    if r.master_bytes != 4:
        reasons.append(f"bf16 mode keeps fp32 master weights (4 B/param); recipe {r.name!r} has "
                       f"master_bytes = {r.master_bytes}")
    if act != 2:
        reasons.append(f"bf16 training stores 2-byte activations but the plan has act_bytes = {act}")
    out = {"bf16": {"enabled": True}, "fp16": {"enabled": False}}
    if r.grads_bytes == 2 and zero == ZeroStage.NONE:
        reasons.append("bf16 without ZeRO accumulates gradients in fp32 (DeepSpeed raises 'Bfloat16 wrapper must "
                       "use a gradient accumulation type of fp32, enable ZeRO to use Bfloat16 gradient "
                       "accumulation'): plan ZeRO-1 or higher, or a recipe with 4-byte grads")
    elif r.grads_bytes == 2:
        out["data_types"] = {"grad_accum_dtype": "bf16"}
    elif r.grads_bytes == 4 and zero <= ZeroStage.OS:
        out["data_types"] = {"grad_accum_dtype": "fp32"}   # the BF16_Optimizer path
    elif r.grads_bytes == 4:
        reasons.append(f"fp32 gradients with ZeRO-{int(zero)}: DeepSpeed's ZeRO-2/3 accumulate bf16 "
                       f"gradients (2 B/param, plus an fp32 copy of the partition); plan ZeRO-1 or 2-byte grads")
    else:
        reasons.append(f"gradients at {r.grads_bytes} B/param: DeepSpeed keeps bf16 (2) or fp32 (4) gradients")
    return out


def _offload(plan: Plan, reasons: list, notes: list) -> dict:
    """zero_optimization.offload_optimizer / offload_param (ZeRO-Offload, ZeRO-Infinity)."""
    o, zero = plan.parallel.offload, plan.parallel.zero
    if not o.optimizer:
        return {}
    if zero == ZeroStage.NONE:
        reasons.append(f"--offload {o.value} with ZeRO-0: DeepSpeed offloads the optimizer only under ZeRO 1-3")
        return {}
    out = {"offload_optimizer": {"device": "cpu", "pin_memory": True}}
    if o.params:
        out["offload_param"] = {"device": "nvme" if o is Offload.PARAMS_NVME else "cpu", "pin_memory": True}
        if o is Offload.PARAMS_NVME:
            out["offload_param"]["nvme_path"] = "/local_nvme"
            notes.append("offload_param.nvme_path is a placeholder: point it at a local NVMe mount")
    notes.append("with offload_optimizer DeepSpeed steps the optimizer with its CPU-Adam: keep optimizer.type "
                 "Adam/AdamW")
    return out


def _optimizer(plan: Plan, reasons: list) -> dict:
    r = plan.training.recipe
    moments = dict(r.moments)
    if moments == ADAM:
        return {"optimizer": {"type": "AdamW"}}
    if moments == SGD:
        # torch.optim.SGD by name; ZeRO asks for the flag for optimizers it has not tested
        out = {"optimizer": {"type": "SGD", "params": {"momentum": 0.9}}}
        if plan.parallel.zero > ZeroStage.NONE:
            out["zero_allow_untested_optimizer"] = True
        return out
    reasons.append(f"optimizer moments of recipe {r.name!r} ({', '.join(f'{k} {v}' for k, v in moments.items())} "
                   f"B/param): ds_config selects Adam/AdamW (fp32 moments) or a torch optimizer by name; "
                   f"8-bit moments come from a client optimizer passed to deepspeed.initialize in code")
    return {}


def _recompute(plan: Plan, notes: list) -> dict:
    mode = plan.parallel.recompute
    if mode == Recompute.NONE:
        return {}
    what = ("each transformer layer (deepspeed.checkpointing.checkpoint(layer, hidden), or "
            "model.gradient_checkpointing_enable() on a Hugging Face model)" if mode == Recompute.FULL else
            "only the attention core of each layer (softmax, its dropout and scores x V)")
    notes.append(f"recompute is switched on in model code, not by ds_config: checkpoint {what}; the "
                 f"activation_checkpointing section only configures deepspeed.checkpointing")
    return {"activation_checkpointing": {"partition_activations": False, "cpu_checkpointing": False,
                                         "contiguous_memory_optimization": False, "number_checkpoints": None,
                                         "synchronize_checkpoint_boundary": False, "profile": False}}


def _notes(plan: Plan) -> list:
    zero, r = plan.parallel.zero, plan.training.recipe
    notes = [f"launch on {plan.num_gpus} GPUs: DeepSpeed checks train_batch_size = micro x accumulation x "
             f"world size = {plan.parallel.micro_batch} x {plan.num_microbatches} x {plan.parallel.dp}"]
    if zero >= ZeroStage.OS_G and r.weights_bytes == 2:
        notes.append("DeepSpeed's own estimator also counts an fp32 gradient partition (ZeRO-2: 2P + 18P/N, "
                     f"docs/engines.md#deepspeed-zero-buckets-and-gradient-precision); the plan counts "
                     f"{r.grads_bytes} B/param of gradients")
    if zero == ZeroStage.OS_G_P:
        notes.append("ZeRO-3 also holds gathered parameters up to stage3_max_live_parameters and the prefetch "
                     "bucket (about 4 x the largest layer, "
                     "docs/engines.md#deepspeed-zero-buckets-and-gradient-precision), beyond the plan's sharded states")
    notes.append(f"written for {describe(plan)}; the model code decides the shapes")
    return notes
