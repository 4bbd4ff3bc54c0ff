"""torchtitan configs for a plan, per version (--torchtitan-version; docs/engines.md#torchtitan-configuration):

  0.2     0.2.x: the TOML job config (torchtitan/config/job_config.py at v0.2.2)
  0.3     0.3.x, the current release (the default): Python assignments on the Trainer.Config
          a config function returns (torchtitan/config/configs.py of the 0.3.0 package:
          TrainingConfig still counts samples, local_batch_size and seq_len, and
          ParallelismConfig has pipeline_parallel_microbatch_size)
  main    main at b5bcd76 (2026-08-21): the same Python form with the batch in tokens
          (num_tokens_per_microbatch_per_dp_rank, num_tokens_per_train_step,
          max_context_length) and ParallelismConfig.num_pp_microbatches

--format torchtitan writes what the chosen version reads (TOML for 0.2, Python otherwise);
--format torchtitan-python is the Python form. Each version's field names are checked in
tests against that version's own config classes (tests/data/torchtitan_fields.json). The
model itself (shapes, experts, attention) is chosen in torchtitan's model code, so every file
starts with a comment listing the model the plan is for, one field a line.

Keys were read from pytorch/torchtitan: the files above and
torchtitan/distributed/{pipeline_parallel,activation_checkpoint}.py; schedule names from
torch.distributed.pipelining (schedules.py get_schedule_class).

torchtitan's model states are fixed by its design: FSDP2 (or DDP) over fp32 parameters,
fp32 gradients (mixed_precision_reduce = float32) and fp32 AdamW moments, 16 B/param, with
bf16 only as the gathered compute copy. So it expresses:

  ZeRO        3: data_parallel_shard_degree = dp (FSDP2 over dp x cp, as the plan shards),
              fsdp_reshard_after_forward = "always" ("default" keeps the gathered model
              under PP), or "never" for --no-reshard-after-forward; 0:
              data_parallel_replicate_degree = dp (DDP), only when dp is the only
              parallelism; any stage when dp x cp = 1 (nothing to shard).
              --shard-degree N (HSDP): FSDP2 shards over data_parallel_shard_degree x cp
              ranks, so data_parallel_shard_degree = N/cp and data_parallel_replicate_degree
              = dp*cp/N; N must be a multiple of cp.
              ZeRO-1/2 have no torchtitan form: FSDP2's reshard_after_forward = "never" is
              ZeRO-2-like only at the peak (2P + 16P/N, docs/engines.md#zero-1-fsdp1-and-fsdp2).
  recompute   none, full: [activation_checkpoint] mode (FullAC.Config() / None). op:
              mode = "selective" with selective_ac_option = "op" (SelectiveAC.Config(), per-op
              SAC: keeps matmul and SDPA outputs, reruns every second matmul). torchtitan's
              selective is not the plan's selective (attention core only) and has no
              norms-only policy. --recompute-num-layers: torchtitan checkpoints one layer at a
              time, so uniform N works only as N = 1 (full); block N is the legacy
              selective_ac_option = "k" (every k-th layer checkpointed in full) where that
              reruns as many layers per stage as the plan (a different set of layers); the
              Python config's SelectiveAC has no layer option.
  pipeline    the plan's layers per model chunk, from torchtitan's own split: U = L + first
              + last units (pipeline_parallel_first/last_stage_less_layers count the
              embedding and the head) over the stages, U // stages each, the remainder on
              the first stages; pipeline_parallel_layers_per_stage fixes the stage count
              ceil(U/layers_per_stage). Where no first/last gives the plan's split,
              module_fqns_per_model_part lists each chunk's modules (tok_embeddings,
              layers.i, norm, and output (v0.2.2) or lm_head (HEAD)).
  schedule    1F1B, Interleaved1F1B (v > 1), GPipe. torch's zero-bubble schedules
              (InterleavedZeroBubble, ZBVZeroBubble) are multi-stage, not the plan's ZB-H1
              with one stage per rank, and DualPipeV holds one copy of the parameters over
              2 x pp V-shaped stages, not DualPipe's two: both are refused.
  batch       without PP: local_batch_size = micro-batch (gradient accumulation makes up the
              global batch); with PP: local_batch_size = B/dp, split into micro-batches of b.
  sequence    0.2.x turns sequence parallel on whenever tp > 1.
  experts     expert_parallel_degree (and in 0.2.x expert_tensor_parallel_degree = 1): EP
              borrows FSDP's shard ranks and TP's, so ep > 1 needs ZeRO-3.
"""
from fitplan import toml_text
from fitplan.errors import SpecError
from fitplan.export.fields import card_lines
from fitplan.export.plan import Exported, Plan, Unsupported, adapter_and_offload_reasons, describe
from fitplan.presets import recipes
from fitplan.specs import Mlp, Norm, Position, QkNorm, Recompute, ZeroStage
from fitplan.specs.parallel import RecomputeMethod, Schedule

FORMAT, PYTHON_FORMAT = "torchtitan", "torchtitan-python"
ADAM = dict(recipes.ADAM)
VERSIONS = ("0.2", "0.3", "main")
DEFAULT_VERSION = "0.3"   # the current release on the package index (0.3.0)
# What each version's config calls the batch, the pipeline's micro-batches and the FSDP dtype
# (docs/engines.md#torchtitan-configuration): 0.3.x keeps 0.2.x's sample counts in its Python
# TrainingConfig; main counts tokens and pipeline micro-batches instead.
VERSION_NAMES = {"0.2": "0.2.x (TOML job config)", "0.3": "0.3.x (Python config)",
                 "main": "main after the token-count batch change (Python config)"}


def to_torchtitan(plan: Plan, version: str = DEFAULT_VERSION) -> Exported | Unsupported:
    """The config the chosen torchtitan reads: the TOML job config for 0.2.x, the Python
    Trainer.Config assignments for 0.3.x and main."""
    _check_version(version)
    if version != "0.2":
        return _python_config(plan, version, FORMAT)
    sections, reasons, notes = _settings(plan, legacy=True)
    if reasons:
        return Unsupported(format=FORMAT, reasons=tuple(reasons))
    header = (f"# torchtitan 0.2.x job config written by fitplan for {describe(plan)}\n"
              + _card_comment(plan) + "\n")
    text = header + "\n".join(toml_text.table(name, list(values.items())) for name, values in sections.items())
    return Exported(format=FORMAT, filename="torchtitan.toml", text=text, data=sections, notes=tuple(notes))


def to_torchtitan_python(plan: Plan, version: str = DEFAULT_VERSION) -> Exported | Unsupported:
    """Assignments on the Trainer.Config that a 0.3.x or main config function returns."""
    _check_version(version)
    if version == "0.2":
        raise SpecError("--format torchtitan-python: torchtitan 0.2.x reads a TOML job config, not a Python one; "
                        "use --format torchtitan, or --torchtitan-version 0.3 or main")
    return _python_config(plan, version, PYTHON_FORMAT)


def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise SpecError(f"--torchtitan-version: unknown version {version!r}; use one of {', '.join(VERSIONS)}")


def _card_comment(plan: Plan) -> str:
    """The model the config function (or the [model] flavor) must build, one comment line per
    field: torchtitan takes shapes, experts and attention from the model's code, not the job
    config."""
    lines = ["# The model this plan is for; pick or register a torchtitan model with exactly these "
             "(fitplan's field names):"]
    return "\n".join(lines + [f"#   {line}" for line in card_lines(plan.model, training=plan.training)]) + "\n"


def _python_config(plan: Plan, version: str, fmt: str) -> Exported | Unsupported:
    sections, reasons, notes = _settings(plan, legacy=False)
    if reasons:
        return Unsupported(format=fmt, reasons=tuple(reasons))
    p, tr, c = sections["parallelism"], sections["training"], plan.parallel
    assignments = {f"parallelism.{k}": v for k, v in p.items() if k != "pipeline_parallel_microbatch_size"}
    assignments["parallelism.enable_sequence_parallel"] = c.sequence_parallel
    if version == "0.3":
        # 0.3.0's TrainingConfig and ParallelismConfig (torchtitan/config/configs.py): samples, as in 0.2.x
        if c.pp > 1:
            assignments["parallelism.pipeline_parallel_microbatch_size"] = c.micro_batch
        assignments.update({f"training.{k}": tr[k] for k in ("local_batch_size", "global_batch_size", "seq_len")})
    else:
        # main: one model forward per DP rank takes micro-batch x seq_len tokens; with PP, the local batch
        # is num_pp_microbatches of them (configs.py TrainingConfig, ParallelismConfig.num_pp_microbatches)
        if c.pp > 1:
            assignments["parallelism.num_pp_microbatches"] = plan.num_microbatches
        assignments["training.num_tokens_per_microbatch_per_dp_rank"] = c.micro_batch * tr["seq_len"]
        assignments["training.num_tokens_per_train_step"] = tr["global_batch_size"] * tr["seq_len"]
        assignments["training.max_context_length"] = tr["seq_len"]
    assignments["training.mixed_precision_param"] = tr["mixed_precision_param"]
    ac = sections["activation_checkpoint"]["mode"]
    policy = {"full": "FullAC", "selective": "SelectiveAC"}.get(ac)   # selective is "op" here
    lines = [f"# torchtitan {VERSION_NAMES[version]}: set on the Trainer.Config your config function returns.",
             f"# Written by fitplan for {describe(plan)}", _card_comment(plan).rstrip("\n")]
    if policy:
        lines.append(f"from torchtitan.distributed.activation_checkpoint import {policy}")
    lines.append("")
    lines += [f"config.{name} = {_python(value)}" for name, value in assignments.items()]
    lines.append(f"config.activation_checkpoint = {policy + '.Config()' if policy else 'None'}")
    assignments["activation_checkpoint"] = ac
    return Exported(format=fmt, filename="torchtitan_config.py", text="\n".join(lines) + "\n",
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
    checkpointing = _activation_checkpoint(plan, legacy, reasons, notes)
    if legacy and c.tp > 1 and not c.sequence_parallel:
        reasons.append("torchtitan 0.2.x turns sequence parallel on whenever tp > 1; plan with sequence "
                       "parallel, or export for --torchtitan-version 0.3 or main (enable_sequence_parallel = False)")
    parallelism = {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
                   "fsdp_reshard_after_forward": "always" if c.reshard_after_forward else "never",
                   "tensor_parallel_degree": c.tp, "pipeline_parallel_degree": c.pp, "context_parallel_degree": c.cp}
    if m.moe is not None:
        parallelism.update(_experts(plan, legacy, reasons))
    parallelism.update(_overlaps(plan, legacy, reasons))
    local_batch = c.micro_batch
    parallelism.update(_pipeline(plan, legacy, reasons, notes))
    if c.pp > 1:
        local_batch = plan.global_batch // c.dp
    sections = {
        "training": {"local_batch_size": local_batch, "global_batch_size": plan.global_batch,
                     "seq_len": t.seq_len, "mixed_precision_param": param_dtype},
        "parallelism": parallelism,
        "activation_checkpoint": checkpointing,
    }
    notes += _notes(plan)
    return sections, reasons, notes


def _overlaps(plan: Plan, legacy: bool, reasons: list) -> dict:
    """The overlaps the plan's step time assumed (docs/formulas.md#overlap), where torchtitan has
    them: FSDP2 and DDP always reduce gradients during the backward and FSDP2 always prefetches
    the next layer's weights; asynchronous TP needs torch.compile (not written); context parallel
    overlaps its K/V exchange only with the alltoall rotation, a 0.2.x setting (0.3.x and main
    keep torch's default all-gather, which gathers K/V before attention)."""
    from fitplan.specs.parallel import overlaps_ep_comm, overlaps_param_gather
    c, out = plan.parallel, {}
    if c.dp * c.cp > 1 and not c.overlap_grad_reduce:
        reasons.append("--no-overlap-grad-reduce: torchtitan's FSDP2 and DDP always reduce gradients during the "
                       "backward; plan with --overlap-grad-reduce")
    if c.zero == ZeroStage.OS_G_P and c.dp * c.cp > 1 and not overlaps_param_gather(c):
        reasons.append("--no-overlap-param-gather: torchtitan's FSDP2 always prefetches the next layer's weights")
    if c.tp > 1 and c.tp_comm_overlap:
        reasons.append("--tp-comm-overlap: torchtitan's asynchronous TP runs only under torch.compile "
                       "(compile.enable_async_tensor_parallel), which fitplan does not plan")
    if c.cp > 1:
        if legacy:
            out["context_parallel_rotate_method"] = "alltoall" if c.cp_comm_overlap else "allgather"
        elif c.cp_comm_overlap:
            reasons.append("--cp-comm-overlap: torchtitan 0.3.x and main all-gather K/V before attention (torch's "
                           "default rotation; no setting), so nothing hides it; plan --no-cp-comm-overlap, or export "
                           "for --torchtitan-version 0.2 (context_parallel_rotate_method = \"alltoall\")")
    if c.ep > 1 and overlaps_ep_comm(c):
        reasons.append("--overlap-moe-expert-parallel-comm: torchtitan overlaps expert all-to-alls only inside "
                       "DualPipeV (pipeline_parallel_expert_parallel_overlap), which it cannot run as the plan's "
                       "schedule")
    return out


def _experts(plan: Plan, legacy: bool, reasons: list) -> dict:
    """Expert parallelism (ParallelismConfig.expert_parallel_degree in every version): EP borrows
    the FSDP and TP ranks, dp_shard x cp x tp = efsdp x ep, with the experts' own tensor
    parallelism 1 (0.2.x: expert_tensor_parallel_degree = 1, "partial dp + all tp -> ep";
    0.3.x and main have no expert TP), as fitplan's expert grid (tp x dp x cp ranks)."""
    c = plan.parallel
    out = {"expert_parallel_degree": c.ep}
    if legacy:
        out["expert_tensor_parallel_degree"] = 1
        if c.ep > 1:   # "standard" (torch all-to-all) or "deepep"
            out["expert_parallel_comm_backend"] = "deepep" if plan.training.moe_dispatcher == "deepep" else "standard"
    elif c.ep > 1 and plan.training.moe_dispatcher == "deepep":
        reasons.append("--moe-dispatcher deepep: torchtitan 0.3.x and main choose DeepEP in the model's MoE "
                       "config, not in the job config; export for --torchtitan-version 0.2 "
                       "(expert_parallel_comm_backend = \"deepep\") or plan --moe-dispatcher alltoall")
    if c.ep > 1 and c.zero != ZeroStage.OS_G_P and c.dp * c.cp > 1:
        reasons.append(f"ep = {c.ep} without FSDP: torchtitan's expert parallelism borrows the FSDP shard ranks "
                       f"(dp_shard x cp x tp = efsdp x ep); plan ZeRO-3")
    return out


def _activation_checkpoint(plan: Plan, legacy: bool, reasons: list, notes: list) -> dict:
    """The [activation_checkpoint] section: mode, and selective_ac_option when selective."""
    c, mode = plan.parallel, plan.parallel.recompute
    if mode == Recompute.SELECTIVE:
        reasons.append("torchtitan's selective activation checkpointing is per-op SAC (keeps matmul and SDPA "
                       "outputs, recomputes every other matmul) or every n-th layer in full, not the plan's "
                       "selective recompute of the attention core; plan none, op or full")
    elif mode == Recompute.NORMS:
        reasons.append("--recompute norms: torchtitan has no policy that reruns only the norms (and MLA "
                       "up-projections); its checkpointing is full, per-op SAC (op) or every n-th layer")
    elif mode == Recompute.OP:
        return {"mode": "selective", "selective_ac_option": "op"}
    if mode != Recompute.FULL:
        return {"mode": "none"}
    n, stages = c.recompute_num_layers, plan.stage_layers
    if n is None or (c.recompute_method == RecomputeMethod.UNIFORM and n == 1) or \
            (c.recompute_method == RecomputeMethod.BLOCK and n >= max(stages)):
        return {"mode": "full"}
    if c.recompute_method == RecomputeMethod.UNIFORM:
        reasons.append(f"--recompute-num-layers {n} --recompute-method uniform: torchtitan checkpoints one layer at "
                       f"a time (FullAC); it has no groups of {n} layers that keep one input between them")
        return {"mode": "full"}
    # block: the legacy "k" checkpoints every k-th layer a rank builds (a count kept across its chunks)
    every = next((k for k in range(2, max(stages) + 1) if all(l // k == min(n, l) for l in stages)), None)
    if not legacy or every is None:
        where = ("the Python config's SelectiveAC.Config() is per-op SAC only (the layer option is gone)"
                 if not legacy else
                 f"its selective_ac_option = \"k\" checkpoints every k-th layer, and no k reruns {n} of each "
                 f"stage's layers ({', '.join(map(str, stages))})")
        reasons.append(f"--recompute-num-layers {n} --recompute-method block: torchtitan cannot checkpoint a set "
                       f"number of layers per stage; {where}")
        return {"mode": "full"}
    notes.append(f"selective_ac_option = \"{every}\" checkpoints every {every}th layer in full: as many layers "
                 f"per stage as the plan's block recompute of {n}, though not the first {n}")
    return {"mode": "selective", "selective_ac_option": str(every)}


def _pipeline(plan: Plan, legacy: bool, reasons: list, notes: list) -> dict:
    c = plan.parallel
    if c.schedule == Schedule.ZERO_BUBBLE:
        reasons.append("--schedule zero-bubble: torch.distributed.pipelining's zero-bubble schedules "
                       "(InterleavedZeroBubble, ZBVZeroBubble) run two or more stages per rank, not the plan's "
                       "ZB-H1 with one stage per rank")
    elif c.schedule == Schedule.DUALPIPE:
        reasons.append("--schedule dualpipe: torchtitan's DualPipeV splits the model into 2 x pp V-shaped stages "
                       "with one copy of the parameters; the plan's DualPipe holds two stages' parameters per rank")
    if c.pp == 1:
        return {}
    out = {"pipeline_parallel_schedule": "GPipe" if c.schedule == Schedule.GPIPE else
           "Interleaved1F1B" if c.virtual_stages > 1 else "1F1B"}
    split = _stage_split(plan)
    if split is not None:
        first, last, per_stage = split
        if per_stage is not None:
            out["pipeline_parallel_layers_per_stage"] = per_stage
        out.update(pipeline_parallel_first_stage_less_layers=first, pipeline_parallel_last_stage_less_layers=last)
    else:
        out["module_fqns_per_model_part"] = _module_fqns(plan.chunk_layers, "output" if legacy else "lm_head")
        notes.append("module_fqns_per_model_part lists each model chunk's modules under the names of torchtitan's "
                     "Llama models: torchtitan's own split (first/last_stage_less_layers) cannot give the plan's "
                     f"layers per stage ({', '.join(map(str, plan.stage_layers))})")
    out["pipeline_parallel_microbatch_size"] = c.micro_batch
    return out


def titan_chunks(L: int, S: int, first: int, last: int) -> tuple[int, ...] | None:
    """Transformer layers per model chunk under torchtitan's split (pipeline_parallel.py,
    generate_llm_fqn_per_model_part): U = L + first + last units, U // S per chunk and one
    more on each of the first U mod S chunks, the first chunk giving `first` units to the
    embedding and the last `last` to the head; None where torchtitan refuses (a chunk
    without a unit, or first/last above U // S)."""
    units = L + first + last
    base, extra = divmod(units, S)
    if base == 0 or first > base or last > base:
        return None
    out = [base + (j < extra) for j in range(S)]
    out[0] -= first
    out[-1] -= last
    return tuple(out)


def _stage_split(plan: Plan):
    """(first_stage_less_layers, last_stage_less_layers, layers_per_stage or None) giving the
    plan's layers per chunk, or None. layers_per_stage sets the stage count to
    ceil(U/layers_per_stage); without it torchtitan takes pp stages (single-stage schedules)
    or 2 x pp (looped ones)."""
    c, L = plan.parallel, plan.model.num_layers
    S, target = c.pp * c.virtual_stages, plan.chunk_layers
    top = max(target) + 2
    tries = [(0, 0), (1, 1)] + sorted(((a, b) for a in range(top) for b in range(top)), key=lambda ab: (sum(ab), ab))
    for first, last in tries:
        if titan_chunks(L, S, first, last) != target:
            continue
        units = L + first + last
        per_stage = -(-units // S)
        if -(-units // per_stage) == S:
            return first, last, per_stage
        if c.virtual_stages <= 2:
            return first, last, None
    return None


def _module_fqns(chunks: tuple[int, ...], head: str) -> list:
    out, start = [], 0
    for j, n in enumerate(chunks):
        part = ["tok_embeddings"] if j == 0 else []
        part += [f"layers.{i}" for i in range(start, start + n)]
        if j == len(chunks) - 1:
            part += ["norm", head]
        out.append(part)
        start += n
    return out


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
        if c.shard_degree is None or c.shard_degree == c.dp * c.cp:
            return 1, c.dp, True
        if c.shard_degree % c.cp:
            reasons.append(f"--shard-degree {c.shard_degree} with cp = {c.cp}: torchtitan's FSDP always shards over "
                           f"the context-parallel ranks (data_parallel_shard_degree x cp), so the shard group must "
                           f"be a multiple of cp")
            return 1, c.dp, True
        shard = c.shard_degree // c.cp
        return c.dp // shard, shard, True
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
    notes = []
    if t.attention_kernel == "eager":
        notes.append("torchtitan's models use SDPA (flash) attention: the plan's s^2 attention scores (eager "
                     "attention) are not stored, so the plan's activations are an upper bound")
    if c.tp > 1 and c.sequence_parallel:
        extra = 2 * t.act_bytes * t.seq_len * c.micro_batch * m.hidden_size * (c.tp - 1) // (c.tp * c.cp)
        notes.append(f"DTensor sequence parallel saves the all-gathered LayerNorm outputs "
                     f"(docs/engines.md#tensor-and-sequence-parallel-under-dtensor): "
                     f"{extra:,} B more per layer and micro-batch than the plan's Megatron-style SP")
    if ((m.mlp, m.norm, m.position) != (Mlp.SWIGLU, Norm.RMSNORM, Position.ROPE) or m.norms_per_layer != 2
            or m.qk_norm != QkNorm.NONE or m.sliding_window is not None or m.attention_sinks):
        notes.append("torchtitan ships Llama-style models (RMSNorm, SwiGLU, RoPE, two norms per layer, full "
                     "attention without sinks); this model needs a custom model registered with torchtitan")
    if t.dropout:
        notes.append("torchtitan's models have no dropout: the plan's dropout masks are not stored (re-plan "
                     "without dropout for an exact match)")
    if c.pp > 1:
        notes.append("pipeline_parallel_first/last_stage_less_layers and module_fqns_per_model_part need a "
                     "torchtitan that has them (mid 2025 on); older ones count the embedding and head as layers "
                     "when splitting")
        if plan.num_microbatches < c.pp:
            notes.append(f"{plan.num_microbatches} micro-batches for {c.pp} stages: torch's pipeline schedules "
                         f"may refuse fewer micro-batches than stages")
    notes.append("the model (0.2.x: [model] name and flavor) and the tokenizer are chosen in torchtitan: the file's "
                 "header lists the shapes the model must have; pick the registered model with these "
                 "shapes")
    return notes
