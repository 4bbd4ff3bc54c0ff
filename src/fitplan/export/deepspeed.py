"""A DeepSpeed ds_config.json for a plan.

Keys as in deepspeed.ai/docs/config-json and the 0.19.8 package (docs/engines.md#deepspeed-config-keys):
train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x
data-parallel size; zero_optimization.stage; bf16.enabled; data_types.grad_accum_dtype;
optimizer.type; activation_checkpointing. The layout keys were read from microsoft/DeepSpeed
(deepspeed/runtime/zero/config.py, zero/mics.py, zero/partitioned_param_coordinator.py,
runtime/pipe/module.py and pipe/schedule.py, activation_checkpointing/checkpointing.py):

  --shard-degree N     ZeRO-3: zero_optimization.mics_shard_size = N (MiCS partitions
                       parameters, gradients and optimizer states within groups of N and
                       replicates across them; the model is built under
                       deepspeed.zero.MiCS_Init). ZeRO-1/2 have no hierarchical form, and
                       ZeRO++'s zero_hpz_partition_size only adds a secondary ZeRO-3 weight
                       copy within N ranks while every state stays sharded over all of them.
  --no-reshard-after-forward
                       ZeRO-3 frees a gathered parameter after its module unless the
                       recorded trace reuses it within stage3_max_reuse_distance elements:
                       a distance of twice the model keeps every layer from its forward to
                       its backward (from the second step, once the trace is recorded), and
                       stage3_max_live_parameters as large keeps prefetching on.
  pipeline             PipelineModule is built in code, splits layers by partition_method
                       ("parameters", "uniform" or "type:regex"), cannot pin a stage's layer
                       count, and its engine runs only TrainSchedule (1F1B, one stage per
                       rank): uneven pins, gpipe, zero-bubble, dualpipe and virtual stages are
                       refused, as is pp > 1 itself.

What a ds_config cannot say, and this module therefore refuses:
  * tensor, pipeline and context parallelism. DeepSpeed sets them up in code (a Megatron
    mpu, deepspeed.pipe.PipelineModule, Ulysses sequence parallelism), and the config-level
    AutoTP (tensor_parallel.autotp_size) does not shard the vocabulary as the plan does.
    So only tp = pp = cp = 1 plans are exported, where the data-parallel size is the world.
  * precisions DeepSpeed does not have: bf16 weights without an fp32 master copy, fp8,
    MXFP8 or NVFP4 GEMMs, 8-bit optimizer moments (a client optimizer passed in code).
  * recompute that deepspeed.checkpointing.checkpoint(function, *args) cannot do: it keeps
    the checkpointed function's output and takes no per-op policy, so norms (outputs that
    the next projection saves) and op (torchtitan's per-op SAC) are refused.
Recompute is never switched on by the config: `activation_checkpointing` only configures
deepspeed.checkpointing, which the model code must call; the notes say what to wrap
(with --recompute-num-layers: groups of N layers per call, or only the first N layers).
"""
import json

from fitplan.counts.params import shape_params
from fitplan.export.fields import card_lines
from fitplan.export.plan import Exported, Plan, Unsupported, adapter_and_offload_reasons, describe
from fitplan.presets import recipes
from fitplan.specs import Offload, Recompute, ZeroStage
from fitplan.specs.parallel import RecomputeMethod, Schedule, overlaps_ep_comm, overlaps_param_gather

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
    config["zero_optimization"] = {**_zero(plan, reasons, notes), **_overlap(plan, notes),
                                   **_offload(plan, reasons, notes)}
    config.update(_optimizer(plan, reasons))
    config.update(_recompute(plan, reasons, notes))
    config.update(_experts(plan, reasons, notes))
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
    if plan.pinned:
        out.append("--first-stage-layers/--last-stage-layers: DeepSpeed's PipelineModule splits layers by "
                   "partition_method ('parameters', 'uniform' or 'type:regex') and cannot pin a stage's layer count")
    if c.schedule != Schedule.ONE_F_ONE_B:
        out.append(f"--schedule {c.schedule.value}: DeepSpeed's pipeline engine runs only its TrainSchedule, a 1F1B "
                   f"order with one stage per rank (deepspeed/runtime/pipe/schedule.py)")
    if c.virtual_stages > 1:
        out.append(f"--virtual-stages {c.virtual_stages}: DeepSpeed's TrainSchedule is not interleaved; a "
                   f"PipelineModule places one stage on each rank")
    return out


def _zero(plan: Plan, reasons: list, notes: list) -> dict:
    c, m = plan.parallel, plan.model
    out = {"stage": int(c.zero)}
    if c.shard_degree is not None and c.shard_degree != c.dp:
        if c.zero == ZeroStage.OS_G_P:
            out["mics_shard_size"] = c.shard_degree
            notes.append(f"mics_shard_size = {c.shard_degree}: build the model under "
                         f"deepspeed.zero.MiCS_Init(config_dict_or_path=ds_config) so that its parameters are "
                         f"partitioned over groups of {c.shard_degree} ranks")
        else:
            reasons.append(f"--shard-degree {c.shard_degree} with ZeRO-{int(c.zero)}: DeepSpeed shards only ZeRO-3 "
                           f"state in groups (MiCS mics_shard_size); ZeRO-1/2 partition over every data-parallel "
                           f"rank, and ZeRO++'s zero_hpz_partition_size is a secondary ZeRO-3 weight copy, not "
                           f"hybrid sharding")
    if c.zero == ZeroStage.OS_G_P and not c.reshard_after_forward:
        reach = 2 * max(shape_params(m), m.published_params or 0)
        out["stage3_max_reuse_distance"] = reach
        out["stage3_max_live_parameters"] = reach
        notes.append(f"stage3_max_reuse_distance = {reach:,} (twice the model's parameters): ZeRO-3 keeps a gathered "
                     f"parameter that its recorded trace reuses within that many elements, so every layer stays "
                     f"gathered from its forward to its backward from the second step on")
    elif c.zero == ZeroStage.OS_G_P:
        notes.append("ZeRO-3 keeps a gathered parameter that is reused within stage3_max_reuse_distance elements "
                     "(1e9 by default), so layers reused that soon around the forward-backward turn may stay "
                     "gathered; 0 frees every layer after its forward, as the plan counts")
    return out


def _overlap(plan: Plan, notes: list) -> dict:
    """The plan's data-parallel overlaps (docs/formulas.md#overlap): overlap_comm (DeepSpeed's default:
    on for stage 3 only) reduces gradients during the backward; stage 3 prefetches parameters unless
    stage3_prefetch_bucket_size is 0."""
    c = plan.parallel
    if c.zero == ZeroStage.NONE:
        if c.overlap_grad_reduce:
            notes.append("without ZeRO DeepSpeed all-reduces the gradients after the backward; the plan overlapped "
                         "them (--overlap-grad-reduce, PyTorch DDP's way): plan --no-overlap-grad-reduce to match")
        return {}
    out = {"overlap_comm": bool(c.overlap_grad_reduce)}
    gather = overlaps_param_gather(c)
    if c.zero == ZeroStage.OS_G_P and not gather:
        out["stage3_prefetch_bucket_size"] = 0
    elif c.zero != ZeroStage.OS_G_P and gather:
        notes.append("the plan gathers ZeRO-1/2's updated weights during the next forward (--overlap-param-gather, "
                     "Megatron-LM's); DeepSpeed gathers them after the step")
    return out


def _precision(plan: Plan, reasons: list, notes: list) -> dict:
    r, zero, act = plan.training.recipe, plan.parallel.zero, plan.training.act_bytes
    if r.compute != "bf16" or r.weights_bytes == 1:
        reasons.append(f"recipe {r.name!r} computes in {'fp8' if r.compute == 'bf16' else r.compute}: a ds_config has "
                       f"no low-precision GEMM switch (Transformer Engine layers in the model code provide it)")
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


def _recompute(plan: Plan, reasons: list, notes: list) -> dict:
    c = plan.parallel
    mode = c.recompute
    if mode == Recompute.NONE:
        return {}
    if mode == Recompute.NORMS:
        reasons.append("--recompute norms: deepspeed.checkpointing.checkpoint keeps the checkpointed function's "
                       "output, and the next projection saves the norm's output, so the norms alone cannot be "
                       "recomputed without output-discarding checkpoints, which DeepSpeed lacks")
        return {}
    if mode == Recompute.OP:
        reasons.append("--recompute op is torchtitan's per-op selective checkpointing; "
                       "deepspeed.checkpointing.checkpoint(function, *args) takes no per-op save policy")
        return {}
    n = c.recompute_num_layers
    if mode != Recompute.FULL:
        what = "only the attention core of each layer (softmax, its dropout and scores x V)"
    elif n is not None and c.recompute_method == RecomputeMethod.BLOCK:
        what = f"only the first {n} transformer layers, one deepspeed.checkpointing.checkpoint(layer, hidden) each"
    elif n is not None and n > 1:
        what = (f"groups of {n} consecutive transformer layers, one deepspeed.checkpointing.checkpoint call running "
                f"all {n}")
    else:
        what = ("each transformer layer (deepspeed.checkpointing.checkpoint(layer, hidden), or "
                "model.gradient_checkpointing_enable() on a Hugging Face model)")
    notes.append(f"recompute is switched on in model code, not by ds_config: checkpoint {what}; the "
                 f"activation_checkpointing section only configures deepspeed.checkpointing")
    return {"activation_checkpointing": {"partition_activations": False, "cpu_checkpointing": False,
                                         "contiguous_memory_optimization": False, "number_checkpoints": None,
                                         "synchronize_checkpoint_boundary": False, "profile": False}}


def _experts(plan: Plan, reasons: list, notes: list) -> dict:
    """AutoEP, DeepSpeed 0.19's config-level expert parallelism (deepspeed/runtime/config.py
    "expert_parallel", module_inject/auto_ep_config.py parse_autoep_config): it swaps a Hugging
    Face model's MoE blocks, found by model_type, for its own dropless layer over autoep_size
    ranks, with the experts' tensor parallelism 1 as in fitplan's expert grid. Node-limited
    routing is its num_expert_groups / num_limited_groups; a routing-score bias
    (load_balance_coeff) and a capacity factor it does not have."""
    moe, c = plan.model.moe, plan.parallel
    if moe is None:
        return {}
    if moe.expert_bias:
        reasons.append("--expert-bias: DeepSpeed's AutoEP refuses load_balance_coeff, the auxiliary-loss-free "
                       "routing bias (auto_ep_presets/base.py)")
    if moe.capacity_factor is not None:
        reasons.append(f"--capacity-factor {moe.capacity_factor}: DeepSpeed's AutoEP layer is dropless (no "
                       f"capacity), and its older deepspeed.moe.layer.MoE is not configured from a ds_config")
    if c.ep > 1 and overlaps_ep_comm(c):
        reasons.append("--overlap-moe-expert-parallel-comm: DeepSpeed's AutoEP has no setting that hides the expert "
                       "all-to-alls behind other compute")
    out = {"enabled": True, "autoep_size": c.ep, "expert_tensor_parallel_size": 1, "top_k": moe.experts_per_token}
    if c.ep > 1:   # AutoEP's comm_backend: "comm" (torch all-to-all) or "deepep"
        out["comm_backend"] = "deepep" if plan.training.moe_dispatcher == "deepep" else "comm"
        if out["comm_backend"] == "deepep":   # DeepEP's buffers: the tokens one rank routes (AutoEP requires it)
            out["comm_max_tokens_per_rank"] = c.micro_batch * plan.training.seq_len
    if moe.route_nodes is not None:
        nodes = max(1, c.ep // plan.gpus_per_node) if plan.gpus_per_node else None
        if nodes is None:
            reasons.append(f"--route-nodes {moe.route_nodes}: AutoEP limits routing to groups of experts "
                           f"(num_expert_groups), one per node, and the plan states no node size")
        elif nodes > moe.route_nodes:
            out.update(num_expert_groups=nodes, num_limited_groups=moe.route_nodes)
        else:
            notes.append(f"--route-nodes {moe.route_nodes}: the {c.ep} expert-parallel ranks span {nodes} node(s), "
                         f"so no group-limited routing is needed")
    notes.append("expert_parallel (AutoEP) replaces the MoE blocks of a Hugging Face model it recognizes by "
                 "model_type (mixtral, qwen3_moe, deepseek_v2/v3, ...); other models need its moe_layer_pattern, "
                 "router_pattern and expert_pattern keys")
    return {"expert_parallel": out}


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
    notes.append(f"written for {describe(plan)}; the model code decides the shapes, and must build: "
                 + "; ".join(card_lines(plan.model, training=plan.training)))
    return notes
