"""torchtitan job configs for a plan: the legacy TOML (<= v0.2.2) and the Python config
that replaced it (commit 9810191b, "Config System Refactor", docs/engines.md#torchtitan-configuration).

torchtitan's model states are fixed by its design: FSDP2 (or DDP) over fp32 parameters,
fp32 gradients (mixed_precision_reduce = float32) and fp32 AdamW moments, 16 B/param, with
bf16 only as the gathered compute copy. So it expresses:

  ZeRO        3: data_parallel_shard_degree = dp (FSDP2 over dp x cp, as the plan shards),
              fsdp_reshard_after_forward = "always" ("default" keeps the gathered model
              under PP); 0: data_parallel_replicate_degree = dp (DDP), only when dp is the
              only parallelism; any stage when dp x cp = 1 (nothing to shard).
              ZeRO-1/2 have no torchtitan form: FSDP2's reshard_after_forward = "never" is
              ZeRO-2-like only at the peak (2P + 16P/N, docs/engines.md#zero-1-fsdp1-and-fsdp2).
  recompute   none, full: [activation_checkpoint] mode. torchtitan's "selective" is per-op
              SAC (saves matmul and SDPA outputs, recomputes every other matmul) or every
              n-th layer in full, neither of them the plan's selective (attention core only).
  pipeline    pipeline_parallel_layers_per_stage = L/(pp*v) with first/last_stage_less_layers
              = 0, so every stage gets L/(pp*v) layers and the ends carry the embedding and
              the head, as the plan counts; schedule 1F1B or Interleaved1F1B.
  batch       without PP: local_batch_size = micro-batch (gradient accumulation makes up the
              global batch); with PP: local_batch_size = B/dp, split into micro-batches of b.
  sequence    the legacy TOML turns sequence parallel on whenever tp > 1.
"""
from fitplan import toml_text
from fitplan.export.plan import Exported, Plan, Unsupported, adapter_and_offload_reasons, describe
from fitplan.presets import recipes
from fitplan.specs import Mlp, Norm, Position, QkNorm, Recompute, ZeroStage

FORMAT, PYTHON_FORMAT = "torchtitan", "torchtitan-python"
ADAM = dict(recipes.ADAM)


def to_torchtitan(plan: Plan) -> Exported | Unsupported:
    """The legacy job-config TOML."""
    sections, reasons, notes = _settings(plan, legacy=True)
    if reasons:
        return Unsupported(format=FORMAT, reasons=tuple(reasons))
    header = f"# torchtitan (<= v0.2.2) job config written by fitplan for {describe(plan)}\n\n"
    text = header + "\n".join(toml_text.table(name, list(values.items())) for name, values in sections.items())
    return Exported(format=FORMAT, filename="torchtitan.toml", text=text, data=sections, notes=tuple(notes))


def to_torchtitan_python(plan: Plan) -> Exported | Unsupported:
    """Assignments on the Trainer.Config that a post-refactor config function returns."""
    sections, reasons, notes = _settings(plan, legacy=False)
    if reasons:
        return Unsupported(format=PYTHON_FORMAT, reasons=tuple(reasons))
    p, tr = sections["parallelism"], sections["training"]
    assignments = {f"parallelism.{k}": v for k, v in p.items() if k != "pipeline_parallel_microbatch_size"}
    assignments["parallelism.enable_sequence_parallel"] = plan.parallel.sequence_parallel
    if plan.parallel.pp > 1:
        assignments["parallelism.num_pp_microbatches"] = plan.num_microbatches
    assignments["training.num_tokens_per_microbatch_per_dp_rank"] = tr["local_batch_size"] * tr["seq_len"]
    assignments["training.num_tokens_per_train_step"] = tr["global_batch_size"] * tr["seq_len"]
    assignments["training.max_context_length"] = tr["seq_len"]
    ac = sections["activation_checkpoint"]["mode"]
    lines = ["# torchtitan after 9810191b: set on the Trainer.Config your config function returns.",
             f"# Written by fitplan for {describe(plan)}",
             "from torchtitan.distributed.activation_checkpoint import FullAC", ""]
    lines += [f"config.{name} = {_python(value)}" for name, value in assignments.items()]
    lines.append(f"config.activation_checkpoint = {'FullAC.Config()' if ac == 'full' else 'None'}")
    assignments["activation_checkpoint"] = ac
    notes = notes + [f"training.mixed_precision_param = {tr['mixed_precision_param']!r} in the legacy TOML; "
                     f"check where the Python config keeps the FSDP param dtype",
                     "num_tokens_per_microbatch_per_dp_rank is taken as the tokens of one forward-backward "
                     "call per DP rank (local batch x seq_len); check it against the torchtitan you run"]
    return Exported(format=PYTHON_FORMAT, filename="torchtitan_config.py", text="\n".join(lines) + "\n",
                    data=assignments, notes=tuple(notes))


def _python(value) -> str:
    return repr(value)


def _settings(plan: Plan, *, legacy: bool):
    reasons, notes = adapter_and_offload_reasons(plan, "torchtitan"), []
    c, m, t = plan.parallel, plan.model, plan.training
    param_dtype = _precision(plan, reasons, notes)
    replicate, shard, fsdp = _data_parallel(plan, reasons)
    if fsdp is False and (c.tp > 1 or c.pp > 1) and param_dtype == "bfloat16":
        reasons.append("without FSDP (dp x cp = 1 here) torchtitan turns mixed precision off when tp or pp > 1 "
                       "('Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is "
                       "enabled'), so it would train in fp32, not the plan's bf16")
    if c.recompute == Recompute.SELECTIVE:
        reasons.append("torchtitan's selective activation checkpointing is per-op SAC (keeps matmul and SDPA "
                       "outputs, recomputes every other matmul) or every n-th layer in full, not the plan's "
                       "selective recompute of the attention core; plan none or full")
    if legacy and c.tp > 1 and not c.sequence_parallel:
        reasons.append("the legacy TOML turns sequence parallel on whenever tp > 1; plan with sequence "
                       "parallel, or export --format torchtitan-python (enable_sequence_parallel = False)")
    parallelism = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
                   "fsdp_reshard_after_forward": "always", "tensor_parallel_degree": c.tp,
                   "pipeline_parallel_degree": c.pp, "context_parallel_degree": c.cp}
    local_batch = c.micro_batch
    if c.pp > 1:
        local_batch = plan.global_batch // c.dp
        parallelism.update(
            pipeline_parallel_schedule="Interleaved1F1B" if c.virtual_stages > 1 else "1F1B",
            pipeline_parallel_layers_per_stage=m.num_layers // (c.pp * c.virtual_stages),
            pipeline_parallel_first_stage_less_layers=0, pipeline_parallel_last_stage_less_layers=0,
            pipeline_parallel_microbatch_size=c.micro_batch)
    sections = {
        "training": {"local_batch_size": local_batch, "global_batch_size": plan.global_batch,
                     "seq_len": t.seq_len, "mixed_precision_param": param_dtype},
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": "full" if c.recompute == Recompute.FULL else "none"},
    }
    notes += _notes(plan)
    return sections, reasons, notes


def _precision(plan: Plan, reasons: list, notes: list) -> str:
    r, act = plan.training.recipe, plan.training.act_bytes
    split = (r.weights_bytes, r.grads_bytes, r.master_bytes)
    if dict(r.moments) != ADAM or split not in ((2, 2, 4), (4, 4, 0)) or r.compute != "bf16":
        reasons.append(f"torchtitan keeps fp32 params, fp32 grads and fp32 AdamW moments (16 B/param, bf16 only "
                       f"as FSDP's gathered copy); recipe {r.name!r} is {r.weights_bytes}/{r.grads_bytes}/"
                       f"{r.master_bytes} B/param with moments {dict(r.moments)} and {r.compute} compute")
        return "bfloat16"
    if split == (2, 2, 4):
        notes.append("torchtitan stores the recipe's 2 (bf16 weights) + 2 (grads) + 4 (master) B/param as 4 "
                     "(fp32 sharded params) + 4 (fp32 grads): the same 16 B/param in total, plus the gathered "
                     "bf16 copy of the layers in use")
    wanted = 2 if split == (2, 2, 4) else 4
    if act != wanted:
        reasons.append(f"{'bf16' if wanted == 2 else 'fp32'} compute stores {wanted}-byte activations but the plan "
                       f"has act_bytes = {act}")
    return "bfloat16" if wanted == 2 else "float32"


def _data_parallel(plan: Plan, reasons: list):
    """(replicate degree, shard degree, FSDP applied?)."""
    c = plan.parallel
    if c.dp * c.cp == 1:
        return 1, 1, False
    if c.zero == ZeroStage.OS_G_P:
        return 1, c.dp, True
    if c.zero == ZeroStage.NONE:
        if c.cp > 1:
            reasons.append("with cp > 1 torchtitan always shards parameters with FSDP over the context-parallel "
                           "ranks (ZeRO-3 over dp x cp), not the plan's ZeRO-0")
        elif c.tp > 1 or c.pp > 1:
            reasons.append("torchtitan's DDP (data_parallel_replicate_degree) is for data parallelism alone: older "
                           "releases raise 'DDP has not supported > 1D parallelism', and without FSDP mixed "
                           "precision is off with tp or pp; plan ZeRO-3 for torchtitan")
        return c.dp, 1, False
    reasons.append(f"ZeRO-{int(c.zero)}: torchtitan shards with FSDP2 (ZeRO-3) or replicates (DDP); "
                   f"fsdp_reshard_after_forward = \"never\" keeps the gathered bf16 model between forward and "
                   f"backward, a ZeRO-2-like peak of 2P + 16P/N (docs/engines.md#zero-1-fsdp1-and-fsdp2), which "
                   f"is not the plan's "
                   f"ZeRO-{int(c.zero)}")
    return 1, c.dp, True


def _notes(plan: Plan) -> list:
    c, m, t = plan.parallel, plan.model, plan.training
    notes = ["torchtitan's models use SDPA (flash) attention: the plan's s^2 attention scores are not stored, "
             "so the plan's activations are an upper bound"]
    if c.tp > 1 and c.sequence_parallel:
        extra = 2 * t.act_bytes * t.seq_len * c.micro_batch * m.hidden_size * (c.tp - 1) // (c.tp * c.cp)
        notes.append(f"DTensor sequence parallel saves the all-gathered LayerNorm outputs "
                     f"(docs/engines.md#tensor-and-sequence-parallel-under-dtensor): "
                     f"{extra:,} B more per layer and micro-batch than the plan's Megatron-style SP")
    if ((m.mlp, m.norm, m.position) != (Mlp.SWIGLU, Norm.RMSNORM, Position.ROPE) or m.norms_per_layer != 2
            or m.qk_norm != QkNorm.NONE or m.sliding_window is not None):
        notes.append("torchtitan ships Llama-style models (RMSNorm, SwiGLU, RoPE, two norms per layer, full "
                     "attention); this model needs a custom model registered with torchtitan")
    if t.dropout:
        notes.append("torchtitan's models have no dropout: the plan's dropout masks are not stored (re-plan "
                     "without dropout for an exact match)")
    if c.pp > 1:
        notes.append("pipeline_parallel_first/last_stage_less_layers need a torchtitan that has them (mid 2025 "
                     "on); older ones count the embedding and head as layers when splitting")
        if plan.num_microbatches < c.pp:
            notes.append(f"{plan.num_microbatches} micro-batches for {c.pp} stages: torch's pipeline schedules "
                         f"may refuse fewer micro-batches than stages")
    notes.append("[model] name/flavor and the tokenizer are not emitted: pick the registered model with these "
                 "shapes")
    return notes
