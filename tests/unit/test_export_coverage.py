"""No silent drop: for every model preset, in every export format and torchtitan version, over
layouts that exercise each axis, every field of the plan (fitplan.export.fields.plan_fields:
the shapes with the MoE and MLA tables, the training setup, the layout, the global batch and the
GPU count) is read back from what the export wrote, through the framework's own reading of it,
and equals the plan's value; or the export is refused with its reasons (exit 1 from the CLI).

Each reader below is how the framework sees the file: Megatron-LM's parsed arguments (the
option list of tests/data/megatron_flags.json, defaults included), torchtitan's keys with the
defaults of its config classes, DeepSpeed's keys. torchtitan and DeepSpeed build the model in
code, so for them the model's fields are read from the model card the export states (the
file's header comment; DeepSpeed's notes, JSON having no comments)."""
import json
import re
from dataclasses import replace
import tomllib

import pytest

from fitplan.export import export, make_plan
from fitplan.export.fields import plan_fields
from fitplan.presets import MODELS, RECIPES
from fitplan.specs import ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.specs.parallel import overlaps_ep_comm, overlaps_param_gather
from tests.unit.test_export import megatron_chunks, megatron_parser, titan_parts

ADAM, SGD = (("adam_m", 4), ("adam_v", 4)), (("momentum", 4),)


def layouts(preset):
    """Layouts over each axis that exist for this model: plain data parallel, ZeRO-3 with full
    recompute, tp + sp with pp (the MoE models with ep), and cp."""
    m = preset.model
    ep = 8 if m.moe is not None and m.moe.num_experts % 8 == 0 else 1
    pp = 2 if m.num_layers >= 4 else 1
    cp = [] if m.hybrid else [dict(cp=2, dp=8, zero=ZeroStage.OS_G_P, cp_comm_overlap=False)]   # Mamba: cp 1
    return [dict(dp=16, zero=ZeroStage.OS),
            dict(dp=16, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL),
            dict(tp=2, pp=pp, dp=8 // pp, sequence_parallel=True, zero=ZeroStage.OS_G_P, ep=ep),
            *cp,
            dict(dp=16, zero=ZeroStage.OS, ep=ep)]


TRAINING_VARIANTS = {4: dict(moe_dispatcher="deepep", attention_kernel="cudnn")}   # layout index -> training


def plans():
    for name, preset in sorted(MODELS.items()):
        training = TrainingSpec(seq_len=preset.seq_len, recipe=RECIPES["mixed-adam"], dropout=preset.dropout,
                                attention_kernel=preset.attention_kernel, global_batch=preset.global_batch or 1024)
        for i, degrees in enumerate(layouts(preset)):
            t = replace(training, **TRAINING_VARIANTS.get(i, {}))
            yield pytest.param(make_plan(model=preset.model, training=t, parallel=ParallelConfig(**degrees),
                                         global_batch=training.global_batch, num_gpus=16, gpus_per_node=8),
                               id=f"{name}-{i}")


FORMATS = [("megatron", None), ("deepspeed", None), ("torchtitan", "0.2"), ("torchtitan", "0.3"),
           ("torchtitan", "main")]


def text(value) -> str:
    """A field's value as the model card writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(getattr(value, "value", value))


def card(lines) -> dict:
    out = {}
    for line in lines:
        m = re.search(r"((?:model|training)\.[\w.]+) = (.*)$", line)
        if m:
            out[m[1]] = m[2]
    return out


def megatron_view(plan, result) -> dict:
    """The plan's fields as Megatron-LM reads the arguments back."""
    a = megatron_parser().parse_args(result.data)
    m, c, L = plan.model, plan.parallel, plan.model.num_layers
    world = int(re.search(r"on (\d+) GPUs", result.text)[1])   # the header's launcher line
    view = {"model.num_layers": a.num_layers, "model.hidden_size": a.hidden_size,
            "model.num_heads": a.num_attention_heads,
            "model.num_kv_heads": a.num_query_groups if a.group_query_attention else a.num_attention_heads,
            "model.ffn_hidden_size": a.ffn_hidden_size, "model.vocab_size": a.vocab_size,
            "model.mlp": "swiglu" if a.swiglu else "relu2" if a.squared_relu else "gelu",
            "model.norm": a.normalization.lower(), "model.attention_sinks": False,
            "model.position": {"rope": "rope", "learned_absolute": "learned"}[a.position_embedding_type],
            "model.tied_embeddings": not a.untie_embeddings_and_output_weights,
            "model.linear_bias": a.add_bias_linear, "model.head_dim": a.kv_channels, "model.norms_per_layer": 2,
            "model.qk_norm": "head" if a.qk_layernorm else "none", "model.sliding_window": a.window_size,
            "model.full_attention_every": None, "model.mtp_depth": a.mtp_num_layers or 0,
            "training.seq_len": a.seq_length, "training.act_bytes": 2 if a.bf16 else 4,
            "training.dropout": a.hidden_dropout > 0, "training.finetune": "full",
            "training.attention_kernel": {"unfused": "eager", "auto": "flash", "fused": "cudnn"}.get(
                a.attention_backend.removeprefix("AttnBackend."), plan.training.attention_kernel if plan.training.attention_kernel in (
                    "flash2", "flash3") else "other"),
            "parallel.tp": a.tensor_model_parallel_size, "parallel.pp": a.pipeline_model_parallel_size,
            "parallel.cp": a.context_parallel_size, "parallel.ep": a.expert_model_parallel_size,
            "parallel.sequence_parallel": a.sequence_parallel, "parallel.micro_batch": a.micro_batch_size,
            "parallel.schedule": "1f1b", "parallel.reshard_after_forward": True, "parallel.offload": "none",
            "parallel.overlap_grad_reduce": a.overlap_grad_reduce, "plan.global_batch": a.global_batch_size,
            "plan.num_gpus": world}
    # qkv biases: Megatron's --add-qkv-bias, or every linear's bias
    view["model.qkv_bias"] = m.qkv_bias if m.linear_bias else a.add_qkv_bias
    # positions: the table Megatron builds holds the sequence (raised past a RoPE model's length)
    view["model.max_seq_len"] = m.max_seq_len if a.max_position_embeddings == max(m.max_seq_len,
                                                                                   plan.training.seq_len) else None
    compute = ("nvfp4" if a.fp4 == "e2m1" and a.fp4_recipe == "nvfp4" else "mxfp8" if a.fp8 and a.fp8_recipe == "mxfp8"
               else "fp8" if a.fp8 else "bf16")
    view["training.recipe"] = (1 if a.fp8_param_gather else 2 if a.bf16 else 4, 2 if a.grad_reduce_in_bf16 else 4,
                               4 if a.bf16 else 0, SGD if a.optimizer == "sgd" else ADAM, compute)
    # megatron/core/fp8_utils.py is_first_last_bf16_layer: the counts apply only under --first-last-layers-bf16
    view["training.attention_precision"] = "bf16"   # fp8 attention is refused (no flag at the pinned commit)
    view["training.bf16_first_layers"] = a.num_layers_at_start_in_bf16 if a.first_last_layers_bf16 else 0
    view["training.bf16_last_layers"] = a.num_layers_at_end_in_bf16 if a.first_last_layers_bf16 else 0
    dp = world // (a.tensor_model_parallel_size * a.pipeline_model_parallel_size * a.context_parallel_size)
    view["parallel.dp"] = dp
    view["parallel.zero"] = (0 if not a.use_distributed_optimizer else 1 if not a.use_megatron_fsdp else
                             {"optim_grads": 2, "optim_grads_params": 3}[a.data_parallel_sharding_strategy])
    instances = a.num_distributed_optimizer_instances
    view["parallel.shard_degree"] = c.shard_degree if (c.shard_degree or dp * c.cp) == dp * a.context_parallel_size \
        // instances else "other"
    view["parallel.recompute"] = ("none" if a.recompute_granularity is None else "full"
                                  if a.recompute_granularity == "full" else
                                  "selective" if a.recompute_modules == ["core_attn"] else "norms")
    full = a.recompute_granularity == "full"
    view["parallel.recompute_method"] = a.recompute_method if full and c.recompute_num_layers else c.recompute_method
    view["parallel.recompute_num_layers"] = (None if not full or (a.recompute_method, a.recompute_num_layers) ==
                                             ("uniform", 1) and c.recompute_num_layers is None else
                                             c.recompute_num_layers if a.recompute_num_layers else "other")
    chunks = megatron_chunks(a, L)
    view["parallel.virtual_stages"] = len(chunks) // a.pipeline_model_parallel_size
    same_split = chunks == plan.chunk_layers
    view["parallel.first_stage_layers"] = c.first_stage_layers if same_split else "other"
    view["parallel.last_stage_layers"] = c.last_stage_layers if same_split else "other"
    view["parallel.overlap_param_gather"] = (c.overlap_param_gather if a.overlap_param_gather ==
                                             (overlaps_param_gather(c) and c.zero >= 1) else "other")
    view["parallel.tp_comm_overlap"] = a.tp_comm_overlap if c.tp > 1 else c.tp_comm_overlap
    view["parallel.cp_comm_overlap"] = (a.cp_comm_type == ["p2p"] or a.cp_comm_type == "p2p") if c.cp > 1 \
        else c.cp_comm_overlap
    view["parallel.ep_comm_overlap"] = (c.ep_comm_overlap if c.ep == 1 or a.overlap_moe_expert_parallel_comm ==
                                        overlaps_ep_comm(c) else "other")
    view["model.moe"] = None if a.num_experts is None else m.moe
    dispatch = {"alltoall": "alltoall", "flex": "deepep" if a.moe_flex_dispatcher_backend == "deepep" else "other"}
    view["training.moe_dispatcher"] = (plan.training.moe_dispatcher if a.num_experts is None or c.ep == 1
                                       else dispatch.get(a.moe_token_dispatcher_type, "other"))
    if a.num_experts is not None:
        pattern = re.match(r"\(\[0\]\*(\d+)\+", str(a.moe_layer_freq))   # ([0]*3+[1]*58): 3 dense first
        dense = int(pattern[1]) if pattern else 0
        nodes = max(1, c.ep // plan.gpus_per_node)
        view.update({"model.moe.num_experts": a.num_experts, "model.moe.experts_per_token": a.moe_router_topk,
                     "model.moe.expert_ffn_size": a.moe_ffn_hidden_size,
                     "model.moe.num_shared_experts": (a.moe_shared_expert_intermediate_size or 0)
                     // a.moe_ffn_hidden_size,
                     "model.moe.first_dense_layers": dense,
                     "model.moe.route_nodes": m.moe.route_nodes if a.moe_router_group_topk == m.moe.route_nodes
                     or m.moe.route_nodes is not None and nodes <= m.moe.route_nodes else a.moe_router_group_topk,
                     "model.moe.shared_expert_gate": a.moe_shared_expert_gate,
                     "model.moe.expert_bias": a.moe_router_enable_expert_bias,
                     "model.moe.capacity_factor": a.moe_expert_capacity_factor,
                     "model.moe.latent_size": a.moe_latent_size})
        assert a.expert_tensor_parallel_size == 1      # fitplan's expert grid
    # pretrain_gpt.py's transformer layers: no hybrid pattern, Mamba table or MTP pattern (hybrids are refused)
    view.update({"model.layer_pattern": a.hybrid_override_pattern, "model.mamba": None, "model.mtp_pattern": None})
    view["model.mla"] = m.mla if a.multi_latent_attention else None
    if a.multi_latent_attention:
        view.update({"model.mla.q_lora_rank": a.q_lora_rank or 0, "model.mla.kv_lora_rank": a.kv_lora_rank,
                     "model.mla.qk_nope_head_dim": a.qk_head_dim, "model.mla.qk_rope_head_dim": a.qk_pos_emb_head_dim,
                     "model.mla.v_head_dim": a.v_head_dim})
    return view


def recipe_key(r):
    return (r.weights_bytes, r.grads_bytes, r.master_bytes, tuple(r.moments), r.compute)


TITAN_DEFAULTS = {"data_parallel_replicate_degree": 1, "tensor_parallel_degree": 1, "pipeline_parallel_degree": 1,
                  "context_parallel_degree": 1, "expert_parallel_degree": 1, "fsdp_reshard_after_forward": "default",
                  "pipeline_parallel_first_stage_less_layers": 1, "pipeline_parallel_last_stage_less_layers": 1,
                  "pipeline_parallel_schedule": "1F1B", "pipeline_parallel_microbatch_size": 1,
                  "num_pp_microbatches": 1, "enable_sequence_parallel": True}


def titan_view(plan, result, version) -> dict:
    """The plan's fields as torchtitan reads the config (its class defaults where a key is absent)."""
    if version == "0.2":
        doc = tomllib.loads(result.text)
        par, tr = {**TITAN_DEFAULTS, **doc["parallelism"]}, doc["training"]
        ac = doc["activation_checkpoint"]
        par["enable_sequence_parallel"] = par["tensor_parallel_degree"] > 1   # 0.2.x: on with TP
        cp_overlap = par.get("context_parallel_rotate_method", "allgather") == "alltoall"
    else:
        d = result.data
        par = {**TITAN_DEFAULTS, **{k.split(".", 1)[1]: v for k, v in d.items() if k.startswith("parallelism.")}}
        tr = {k.split(".", 1)[1]: v for k, v in d.items() if k.startswith("training.")}
        ac = {"mode": d["activation_checkpoint"], "selective_ac_option": "op"}
        cp_overlap = False
        if version == "main":
            s = tr["max_context_length"]
            tr = {**tr, "seq_len": s, "global_batch_size": tr["num_tokens_per_train_step"] // s}
            if par["pipeline_parallel_degree"] > 1:
                par["pipeline_parallel_microbatch_size"] = tr["num_tokens_per_microbatch_per_dp_rank"] // s
            else:
                tr["local_batch_size"] = tr["num_tokens_per_microbatch_per_dp_rank"] // s
    c, m = plan.parallel, plan.model
    model = card(result.text.splitlines())
    view = {k: v for k, v in model.items()}
    pp, shard, rep = par["pipeline_parallel_degree"], par["data_parallel_shard_degree"], \
        par["data_parallel_replicate_degree"]
    cp = par["context_parallel_degree"]
    view.update({"parallel.tp": par["tensor_parallel_degree"], "parallel.pp": pp, "parallel.cp": cp,
                 "parallel.dp": shard * rep, "parallel.ep": par["expert_parallel_degree"],
                 "parallel.sequence_parallel": par["enable_sequence_parallel"] if par["tensor_parallel_degree"] > 1
                 else c.sequence_parallel,
                 "parallel.reshard_after_forward": par["fsdp_reshard_after_forward"] != "never",
                 "parallel.schedule": {"1F1B": "1f1b", "Interleaved1F1B": "1f1b", "GPipe": "gpipe"}[
                     par["pipeline_parallel_schedule"]] if pp > 1 else c.schedule.value,
                 "parallel.micro_batch": par["pipeline_parallel_microbatch_size"] if pp > 1 else tr["local_batch_size"],
                 "parallel.offload": "none", "training.finetune": "full", "training.seq_len": tr["seq_len"],
                 "plan.global_batch": tr["global_batch_size"],
                 "plan.num_gpus": pp * shard * rep * cp * par["tensor_parallel_degree"]})
    sharded = shard * cp > 1
    view["parallel.zero"] = 3 if sharded else 0 if rep > 1 else int(c.zero)   # dp x cp = 1: nothing to shard
    view["parallel.shard_degree"] = c.shard_degree if (c.shard_degree or c.dp * c.cp) == shard * cp else "other"
    dtype = tr["mixed_precision_param"]
    view["training.recipe"] = recipe_key(plan.training.recipe) if recipe_key(plan.training.recipe) in (
        (2, 2, 4, ADAM, "bf16"), (4, 4, 0, ADAM, "bf16")) and dtype == ("bfloat16" if plan.training.recipe.weights_bytes
                                                                         == 2 else "float32") else "other"
    view["training.act_bytes"] = 2 if dtype == "bfloat16" else 4
    # every GEMM at the training dtype (low-precision compute is refused): no layer kept apart in bf16
    view["training.bf16_first_layers"] = view["training.bf16_last_layers"] = 0
    view["training.attention_precision"] = "bf16"   # fp8 attention needs low-precision GEMMs (refused)
    mode = ac["mode"]
    view["parallel.recompute"] = {"none": "none", "full": "full"}.get(mode, "op" if ac.get("selective_ac_option")
                                                                        == "op" else "full")
    view["parallel.recompute_num_layers"] = c.recompute_num_layers if mode in ("full", "selective") or \
        c.recompute_num_layers is None else "other"
    view["parallel.recompute_method"] = c.recompute_method
    if pp > 1:
        chunks = titan_parts(par, m.num_layers, "output" if version == "0.2" else "lm_head")
        same = chunks == plan.chunk_layers
        view["parallel.virtual_stages"] = len(chunks) // pp
    else:
        same, view["parallel.virtual_stages"] = True, 1
    view["parallel.first_stage_layers"] = c.first_stage_layers if same else "other"
    view["parallel.last_stage_layers"] = c.last_stage_layers if same else "other"
    # FSDP2/DDP always overlap the gradient reduction and prefetch; async TP is never written
    view["parallel.overlap_grad_reduce"] = True if shard * rep * cp > 1 else c.overlap_grad_reduce
    view["parallel.overlap_param_gather"] = c.overlap_param_gather if not sharded or overlaps_param_gather(c) \
        else "other"
    view["parallel.tp_comm_overlap"] = False if c.tp > 1 else c.tp_comm_overlap
    view["parallel.cp_comm_overlap"] = cp_overlap if cp > 1 else c.cp_comm_overlap
    view["parallel.ep_comm_overlap"] = c.ep_comm_overlap if c.ep == 1 or not overlaps_ep_comm(c) else "other"
    backend = par.get("expert_parallel_comm_backend", "standard")
    view["training.moe_dispatcher"] = (plan.training.moe_dispatcher if m.moe is None or c.ep == 1 else
                                       {"standard": "alltoall", "deepep": "deepep"}[backend])
    return view


def deepspeed_view(plan, result) -> dict:
    d, c = json.loads(result.text), plan.parallel
    model = card(line for note in result.notes for line in note.split("; "))
    world = d["train_batch_size"] // (d["train_micro_batch_size_per_gpu"] * d["gradient_accumulation_steps"])
    z = d["zero_optimization"]
    view = dict(model)
    bf16 = d["bf16"]["enabled"]
    grads = {"bf16": 2, "fp32": 4}[d.get("data_types", {}).get("grad_accum_dtype", "bf16" if z["stage"] >= 2
                                                                   else "fp32")]
    moments = ADAM if d["optimizer"]["type"] == "AdamW" else SGD
    view.update({"parallel.tp": 1, "parallel.pp": 1, "parallel.cp": 1, "parallel.dp": world,
                 "parallel.zero": z["stage"], "parallel.micro_batch": d["train_micro_batch_size_per_gpu"],
                 "plan.global_batch": d["train_batch_size"], "plan.num_gpus": world,
                 "parallel.sequence_parallel": c.sequence_parallel if c.tp == 1 else "other",
                 "parallel.virtual_stages": 1, "parallel.schedule": "1f1b", "parallel.first_stage_layers": None,
                 "parallel.last_stage_layers": None, "training.finetune": "full", "training.seq_len": plan.training.seq_len
                 if f"x {plan.training.seq_len} tokens" in " ".join(result.notes) else "other",
                 "training.recipe": (2 if bf16 else 4, grads if bf16 else 4, 4 if bf16 else 0, moments, "bf16"),
                 "training.act_bytes": 2 if bf16 else 4,
                 # no low-precision GEMMs (refused): no layer kept apart in bf16
                 "training.bf16_first_layers": 0, "training.bf16_last_layers": 0,
                 "training.attention_precision": "bf16",   # needs low-precision GEMMs (refused)
                 "parallel.overlap_grad_reduce": z.get("overlap_comm", c.overlap_grad_reduce),
                 "parallel.offload": {None: "none", "cpu": "optimizer"}[z.get("offload_optimizer", {}).get("device")],
                 "parallel.ep": d.get("expert_parallel", {}).get("autoep_size", 1)})
    view["parallel.recompute"] = c.recompute.value if ("activation_checkpointing" in d) == (
        c.recompute != Recompute.NONE) else "other"
    view["parallel.recompute_num_layers"] = c.recompute_num_layers
    view["parallel.recompute_method"] = c.recompute_method
    view["parallel.shard_degree"] = z.get("mics_shard_size", c.shard_degree)
    view["parallel.reshard_after_forward"] = "stage3_max_reuse_distance" not in z
    gather = z["stage"] < 3 or z.get("stage3_prefetch_bucket_size") != 0
    view["parallel.overlap_param_gather"] = c.overlap_param_gather if gather == (overlaps_param_gather(c) or
                                                                                z["stage"] < 3) else "other"
    for name in ("tp_comm_overlap", "cp_comm_overlap"):
        view[f"parallel.{name}"] = getattr(c, name)       # no tp or cp to overlap: DeepSpeed exports only dp
    view["parallel.ep_comm_overlap"] = c.ep_comm_overlap if c.ep == 1 or not overlaps_ep_comm(c) else "other"
    ep = d.get("expert_parallel", {})
    view["training.moe_dispatcher"] = (plan.training.moe_dispatcher if not ep or c.ep == 1 else
                                       {"comm": "alltoall", "deepep": "deepep"}[ep["comm_backend"]])
    return view


@pytest.mark.parametrize("fmt,version", FORMATS, ids=[f"{f}-{v}" if v else f for f, v in FORMATS])
@pytest.mark.parametrize("plan", list(plans()))
def test_every_field_is_written_or_the_export_is_refused(plan, fmt, version):
    result = export(fmt, plan, **({"torchtitan_version": version} if version else {}))
    if not result.ok:
        assert result.reasons and all(len(r) > 20 for r in result.reasons)
        return
    view = (megatron_view(plan, result) if fmt == "megatron" else deepspeed_view(plan, result)
            if fmt == "deepspeed" else titan_view(plan, result, version))
    missing = []
    for path, value in plan_fields(plan).items():
        wrote = view.get(path, "(not written)")
        if path == "training.recipe":
            wrote, value = wrote, recipe_key(value)
        if text(wrote) != text(value):
            missing.append(f"{path}: wrote {wrote!r}, the plan has {value!r}")
    assert not missing, missing


# low-precision GEMMs and the layers kept in bf16 beside them (--bf16-first-layers, --bf16-last-layers)
LOW_PRECISION = [("fp8", 0, 0), ("mxfp8", 1, 2), ("nvfp4", 0, 4)]


@pytest.mark.parametrize("fmt,version", FORMATS, ids=[f"{f}-{v}" if v else f for f, v in FORMATS])
@pytest.mark.parametrize("compute,first,last", LOW_PRECISION)
def test_low_precision_compute_is_written_or_refused(compute, first, last, fmt, version):
    """A low-precision recipe's compute precision and its bf16 layers are written (Megatron: --fp8-format with
    --fp8-recipe mxfp8, --fp4-format e2m1 --fp4-recipe nvfp4, --first-last-layers-bf16 with both counts) or the
    export is refused (torchtitan and DeepSpeed: their configs have no such switch); Megatron writes all three."""
    preset = MODELS["llama3.1-8b"]
    training = TrainingSpec(seq_len=preset.seq_len, recipe=replace(RECIPES["mixed-adam"], compute=compute),
                            dropout=preset.dropout, attention_kernel=preset.attention_kernel, global_batch=1024,
                            bf16_first_layers=first, bf16_last_layers=last)
    plan = make_plan(model=preset.model, training=training, parallel=ParallelConfig(dp=16, zero=ZeroStage.OS),
                     global_batch=1024, num_gpus=16, gpus_per_node=8)
    assert export(fmt, plan, **({"torchtitan_version": version} if version else {})).ok == (fmt == "megatron")
    test_every_field_is_written_or_the_export_is_refused(plan, fmt, version)


def test_the_moe_flags_of_mixtral_and_deepseek_v3():
    """The issue's command: Mixtral on 16 GPUs, tp 2, pp 2, ep 8, SP, ZeRO-1, full recompute."""
    mix = MODELS["mixtral-8x7b"]
    p = make_plan(model=mix.model, training=TrainingSpec(seq_len=4096, recipe=RECIPES["mixed-adam"], dropout=False,
                                                         attention_kernel="flash"),
                  parallel=ParallelConfig(tp=2, pp=2, dp=4, ep=8, sequence_parallel=True, zero=ZeroStage.OS,
                                          recompute=Recompute.FULL), global_batch=1024, gpus_per_node=8)
    a = megatron_parser().parse_args(export("megatron", p).data)
    assert (a.num_experts, a.moe_router_topk, a.moe_ffn_hidden_size, a.expert_model_parallel_size) == (8, 2, 14336, 8)
    assert a.moe_grouped_gemm and a.moe_token_dispatcher_type == "alltoall"
    assert a.moe_router_load_balancing_type == ["aux_loss"]
    ds = MODELS["deepseek-v3"]
    p = make_plan(model=ds.model, training=TrainingSpec(seq_len=4096, recipe=RECIPES["mixed-adam"], dropout=False,
                                                        attention_kernel="flash"),
                  parallel=ParallelConfig(pp=16, dp=128, ep=64, zero=ZeroStage.OS), global_batch=15360,
                  gpus_per_node=8)
    a = megatron_parser().parse_args(export("megatron", p).data)
    assert (a.num_experts, a.moe_router_topk, a.moe_ffn_hidden_size) == (256, 8, 2048)
    assert a.moe_shared_expert_intermediate_size == 2048                       # 1 shared expert of 2048
    assert a.moe_layer_freq == "([0]*3+[1]*58)"                                 # 3 dense layers of 61
    # node-limited routing: ep 64 over 8-GPU nodes is 8 groups, 4 of them per token (DeepSeek-V3 Sec. 3.2.2)
    assert (a.moe_router_num_groups, a.moe_router_group_topk) == (8, 4)
    assert a.multi_latent_attention and (a.q_lora_rank, a.kv_lora_rank, a.qk_head_dim, a.qk_pos_emb_head_dim,
                                         a.v_head_dim) == (1536, 512, 128, 64, 128)
    assert a.mtp_num_layers == 1


def test_the_cli_refuses_with_exit_1_or_writes(tmp_path):
    """Through the request path: every format either exits 0 or exits 1 naming what it cannot express."""
    from fitplan.request import Request
    from fitplan.service import respond
    for fmt in ("megatron", "deepspeed", "torchtitan"):
        reply = respond(Request(command="export", values={"preset": "deepseek-v3", "gpus": 2048, "pp": 16, "ep": 64, "zero": 1,
                                           "format": fmt}))
        assert reply.exit_code in (0, 1)
        if reply.exit_code == 1:
            assert reply.text.startswith(f"{fmt} cannot express this plan: ")


@pytest.mark.parametrize("pick,key", [(None, "recommended"), ("minimum-viable", "minimum_viable")])
def test_export_without_a_layout_is_the_layout_plan_suggest_names(pick, key):
    """Llama 3.1 70B on 64 H100 at 8K (the README's example): `export` writes the layout `plan --suggest`
    prints as recommended (tp 2 + SP, pp 8, cp 4, ZeRO-1), or with --pick minimum-viable the other one,
    and its header says which."""
    from fitplan.request import Request
    from fitplan.service import respond
    base = {"preset": "llama3.1-70b", "gpus": 64, "seq_len": 8192}
    suggested = json.loads(respond(Request(command="plan", values={**base, "suggest": True,
                                                                   "format": "json"})).text)[key]
    reply = respond(Request(command="export", values={**base, "format": "megatron",
                                                      **({"pick": pick} if pick else {})}))
    assert reply.exit_code == 0
    a = megatron_parser().parse_args(reply.answer.data)
    zero = 0 if not a.use_distributed_optimizer else 1 if not a.use_megatron_fsdp else \
        {"optim_grads": 2, "optim_grads_params": 3}[a.data_parallel_sharding_strategy]
    recompute = "none" if a.recompute_granularity is None else a.recompute_granularity
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size,
            a.expert_model_parallel_size, zero, recompute, a.sequence_parallel) == \
        (suggested["tp"], suggested["pp"], suggested["cp"], suggested["ep"], suggested["zero"], suggested["recompute"],
         suggested["sequence_parallel"])
    assert f"the {key.replace('_', ' ')} layout of 'fitplan plan --suggest'" in reply.text.splitlines()[0]
    if key == "recommended":
        assert (suggested["tp"], suggested["pp"], suggested["cp"], suggested["zero"]) == (2, 8, 4, 1)
