"""What the validation expects to measure: the planner's formulas, called with the same
keyword inputs the planner uses, plus each reference extra, named, sized and cited.

Pure Python (no torch): the figures here are predictions, made before anything runs.
docs/engines.md holds the project's measured facts about torch 2.13 on CPU (sections
activations-saved-for-backward, tensor-and-sequence-parallel-under-dtensor,
zero-1-fsdp1-and-fsdp2, pipeline-parallel-on-cpu).
"""
from fitplan.arith import ceil_div
from fitplan.counts import flops as F
from fitplan.explain import RAW
from fitplan.memory import activations as A
from fitplan.memory.breakdown import Setup, Shapes, stage_memory
from fitplan.presets import gpu, recipe
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.specs.model import Norm, Position
from fitplan.timing.work import step_flops
from fitplan.validate.report import Extra

RECIPE = "fp32-adam"         # the distributed checks train fp32 weights with torch.optim.Adam
ADAM_STEP_BYTES = 4          # torch.optim.Adam: state["step"] is a float32 scalar tensor per parameter
PARAM_BYTES = 4              # fp32


def setup_for(model: ModelSpec, *, seq_len: int, act_bytes: int, world: int = 1,
              global_batch: int | None = None, lora: tuple[int, str] | None = None) -> Setup:
    """A planner Setup for the reference run: fp32-Adam states, dropout on (1-byte masks);
    lora: (rank, targets) for adapters on a frozen base at the recipe's (fp32) weights."""
    extra = {} if lora is None else dict(finetune="lora", lora_rank=lora[0], lora_targets=lora[1])
    training = TrainingSpec(seq_len=seq_len, recipe=recipe(RECIPE), act_bytes=act_bytes, dropout=True,
                            global_batch=global_batch, **extra)
    cluster = ClusterSpec(gpu=gpu("h100-80gb"), num_gpus=world, gpus_per_node=max(8, world), reserve_bytes=0)
    return Setup(model=model, training=training, cluster=cluster)


# ---------------------------------------------------------------- activations per layer

def planner_layer_bytes(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int,
                        recompute: Recompute, t: int = 1, sp: bool = False, moe_layer: bool = False) -> int:
    """fitplan.memory.activations.per_layer_bytes with breakdown.Shapes' keywords (and its
    MoeShapes' for an MoE layer, as stage_memory's activations/per_moe_layer)."""
    sh = Shapes.of(setup_for(model, seq_len=seq_len, act_bytes=act_bytes, world=t))
    moe = sh.moe.kw() if moe_layer else {}
    value = A.per_layer_bytes(**sh.kw(recompute), **moe, b=micro_batch, t=t, c=1, sp=sp, recompute=recompute)
    return int(value) if float(value).is_integer() else value   # rho (a float) makes a whole float


def norm_stats_bytes(model: ModelSpec, *, tokens: int, act_bytes: int, device: str) -> int:
    """One norm's saved statistics for `tokens` = s*b rows: LayerNorm keeps mean and rstd
    (input dtype on CPU, fp32 on CUDA); the reference RMSNorm keeps an fp32 rstd."""
    if model.norm is Norm.RMSNORM:
        return tokens * 4
    return 2 * tokens * (act_bytes if device == "cpu" else 4)


_NORM_CITE = {Norm.LAYERNORM: "docs/engines.md#activations-saved-for-backward (LN stats: input dtype on CPU, "
                              "fp32 on CUDA)",
              Norm.RMSNORM: "reference_model.RMSNormFunction"}


def layer_extras(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int, recompute: Recompute,
                 t: int = 1, sp: bool = False, device: str = "cpu", moe_layer: bool = False) -> tuple[Extra, ...]:
    """Per layer and rank, what the reference stores beyond per_layer_bytes. Full and op
    recompute keep nothing beyond it: the checkpoint recomputes the norms' statistics, RoPE's
    tables and the masks (op runs SDPA: no causal mask). Norms recompute (Megatron-style)
    also recomputes the norms' statistics."""
    if recompute in (Recompute.FULL, Recompute.OP):
        return ()
    if moe_layer:
        dense = layer_extras(model, seq_len=seq_len, micro_batch=micro_batch, act_bytes=act_bytes,
                             recompute=recompute, t=t, sp=sp, device=device)
        return dense + moe_extras(model, tokens=(seq_len // t if sp else seq_len) * micro_batch)
    s, b, e = seq_len, micro_batch, act_bytes
    s_local = s // t if sp else s
    norm = "LayerNorm mean and rstd" if model.norm is Norm.LAYERNORM else "RMSNorm rstd (fp32)"
    out = []
    if recompute is not Recompute.NORMS:
        out.append(Extra("norm-stats", 2 * norm_stats_bytes(model, tokens=s_local * b, act_bytes=e, device=device),
                         f"each of the two norms saves its {norm} for backward, (b, s, 1) per tensor "
                         f"(Korthikanti Sec. 4 ignores them)", _NORM_CITE[model.norm]))
    if recompute in (Recompute.NONE, Recompute.NORMS):
        out.append(Extra("causal-mask", s * s,
                         "masked_fill saves the s x s bool causal mask (1 B/element) it is given"))
    if model.position is Position.ROPE:
        d = model.q_size // model.num_heads
        out.append(Extra("rope-tables", 2 * s * d * e,
                         "RoPE's x*cos and rotate_half(x)*sin save the (s, d) cos and sin tables in the "
                         "activation dtype (the paper's GPT has learned positions)",
                         "reference_model.apply_rope"))
    if sp and t > 1 and recompute is Recompute.NORMS:
        full = e * s * b * model.hidden_size
        out.append(Extra("dtensor-sp-ln-output", 2 * full,
                         "under DTensor sequence parallel the column-parallel linears save the all-gathered "
                         "(full) norm outputs, 2sbh each, a copy the norm recompute cannot free: it frees only "
                         "the norm's own sbh/t output, which nothing saves here (Megatron keeps that shard and "
                         "gathers it again in backward, so there the recompute frees it)",
                         "docs/engines.md#tensor-and-sequence-parallel-under-dtensor (TP / TP+SP activations)"))
    elif sp and t > 1:
        full = e * s * b * model.hidden_size
        out.append(Extra("dtensor-sp-ln-output", 2 * (full - full // t),
                         "under DTensor sequence parallel the column-parallel linears save the all-gathered "
                         "(full) norm outputs, 2sbh each, where Megatron keeps the sbh/t shard and gathers "
                         "it again in backward",
                         "docs/engines.md#tensor-and-sequence-parallel-under-dtensor (TP / TP+SP activations)"))
    return tuple(out)


_MOE = "reference_moe.MoeMlp"


def moe_extras(model: ModelSpec, *, tokens: int) -> tuple[Extra, ...]:
    """What the reference MoE layer stores beyond the planner's Megatron-style accounting
    (formulas.md#moe: per routed copy the permuted input, the expert's n*f_e and its probability,
    per token the shared experts' n*f_s and the fp32 router logits and probabilities, 8E),
    for `tokens` = s*b tokens. Each is a tensor an autograd backward needs; none depends on
    where the tokens are routed (dropless, one rank)."""
    k = model.moe.experts_per_token
    return (
        Extra("moe-zloss-logsumexp", 4 * tokens,
              "the router z-loss's logsumexp keeps its fp32 output (4 B per token) next to the logits it keeps "
              "(the logits are the planner's 4E; without a z-loss only the softmax output would be kept)",
              f"{_MOE}: logsumexp backward (derivatives.yaml), ST-MoE Eq. 5"),
        Extra("moe-topk-indices", 8 * k * tokens,
              "topk's backward keeps the int64 expert indices of each token's k choices (8k B per token); "
              "Megatron's accounting has no routing indices",
              f"{_MOE}: topk backward value_selecting_reduction_backward (derivatives.yaml)"),
        Extra("moe-probs-permute-index", 8 * k * tokens,
              "permuting the top-k probabilities with their copies, index_select keeps its int64 index, one per "
              "routed copy (8k B per token)", f"{_MOE}: index_select backward (derivatives.yaml)"),
        Extra("moe-permute-index", 8 * k * tokens,
              "the token permutation x.index_select(0, token) keeps its int64 gather index, one per routed copy "
              "(8k B per token)", f"{_MOE}: index_select backward (derivatives.yaml)"),
        Extra("moe-unpermute-index", 8 * k * tokens,
              "putting the expert outputs back in (token, slot) order, index_select keeps the int64 inverse "
              "permutation, one per routed copy (8k B per token)", f"{_MOE}: index_select backward (derivatives.yaml)"),
    )


def planner_outside_bytes(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int) -> int:
    """Embedding (dropout mask, token ids) + output (final-norm input, head input, fp32
    logits) for one micro-batch, pp = tp = 1: activations.embedding_bytes + output_bytes."""
    sh, b = Shapes.of(setup_for(model, seq_len=seq_len, act_bytes=act_bytes)), micro_batch
    emb = A.embedding_bytes(s=sh.s, b=b, h=sh.h, M=sh.M, D=sh.D, t=1, c=1, sp=False, n_mb=1)
    out = A.output_bytes(s=sh.s, b=b, h=sh.h, V=model.vocab_size, e=sh.e, t=1, c=1, sp=False)
    return emb + out


def outside_extras(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int,
                   device: str = "cpu") -> tuple[Extra, ...]:
    s, b = seq_len, micro_batch
    out = []
    if model.position is Position.LEARNED:
        out.append(Extra("position-ids", 8 * s, "the learned-position lookup saves its int64 position ids (8s)",
                         "embedding backward (derivatives.yaml), measured here"))
    out.append(Extra("final-norm-stats", norm_stats_bytes(model, tokens=s * b, act_bytes=act_bytes, device=device),
                     "the final norm saves its statistics, like the layer norms", _NORM_CITE[model.norm]))
    out.append(Extra("loss-targets", 8 * s * b + 4,
                     "cross_entropy's nll_loss saves the int64 targets (8sb) and a 4-byte fp32 total_weight",
                     "nll_loss backward (derivatives.yaml), measured here"))
    return tuple(out)


# ---------------------------------------------------------------- a hybrid model's layers

def planner_block_bytes(model: ModelSpec, kind: str, *, seq_len: int, micro_batch: int, act_bytes: int) -> int:
    """One layer of a hybrid model (kind M, *, -; no recompute, one GPU): activations.per_block_bytes
    as fitplan.memory.breakdown.hybrid_block_bytes calls it."""
    from fitplan.memory.breakdown import hybrid_block_bytes
    sh = Shapes.of(setup_for(model, seq_len=seq_len, act_bytes=act_bytes))
    layer = dict(sh.kw(), b=micro_batch, t=1, c=1, sp=False, recompute=Recompute.NONE)
    return int(hybrid_block_bytes(RAW, setup_for(model, seq_len=seq_len, act_bytes=act_bytes), layer)[kind])


def block_extras(model: ModelSpec, kind: str, *, seq_len: int, micro_batch: int, act_bytes: int,
                 device: str = "cpu") -> tuple[Extra, ...]:
    """What the reference hybrid layer stores beyond per_block_bytes: its one norm's statistics,
    and an attention layer's causal mask (the reference attention's, layer_extras)."""
    s, b = seq_len, micro_batch
    out = [Extra("norm-stats", norm_stats_bytes(model, tokens=s * b, act_bytes=act_bytes, device=device),
                 "the layer's pre-norm saves its statistics (Korthikanti Sec. 4 ignores them)", _NORM_CITE[model.norm])]
    if kind == "*":
        out.append(Extra("causal-mask", s * s, "masked_fill saves the s x s bool causal mask (1 B/element) it is given"))
    return tuple(out)


def hybrid_flops_extras(model: ModelSpec, *, seq_len: int, micro_batch: int) -> tuple[Extra, ...]:
    """The reference Mamba layer's backward reruns its whole scan (autograd through a recomputed
    forward), where mamba_ssm's backward kernels rerun only C^T B and the chunk states: the
    intra- and inter-chunk outputs' GEMMs once more, 2*B*s*(Q*d + N*d) per Mamba layer."""
    m = model.mamba
    if m is None or "M" not in model.layer_pattern:
        return ()
    per_layer = 2 * micro_batch * seq_len * (m.chunk_size * m.d_inner + m.state_size * m.d_inner)
    return (Extra("scan-rerun-outputs", model.layer_pattern.count("M") * per_layer,
                  "the reference SsdScanFunction recomputes the whole scan in backward, its two output GEMM families "
                  "((C^T B o L) X and C h) too; mamba_ssm's _mamba_chunk_scan_combined_bwd reruns only C^T B and the "
                  "chunk states (counts.flops.ssd_backward_rerun_flops)",
                  "reference_hybrid.SsdScanFunction; mamba_ssm ssd_combined.py"),)


# ---------------------------------------------------------------- FLOPs of one step

def planner_flops(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute,
                  lora: tuple[int, str] | None = None) -> int:
    """fitplan.counts.flops.hardware_flops for one micro-batch's forward and backward
    (recompute included) through the whole model: timing.work.step_flops, the assembly the
    step time uses (MoE: the dense and MoE layers' average, rho = 1, the model's FLOPs;
    a hybrid model: its layers by kind)."""
    kinds = None
    if model.hybrid:
        from fitplan.counts.hybrid import kind_counts
        kinds = kind_counts(model.layer_pattern)
    f = step_flops(RAW, setup_for(model, seq_len=seq_len, act_bytes=2, lora=lora), "flops/microbatch", B=micro_batch,
                   L=model.num_layers, recompute=recompute,
                   n_dense=None if model.moe is None or model.hybrid else model.moe.first_dense_layers, kinds=kinds)
    value = F.hardware_flops(F_forward=f["forward"], F_backward=f["backward"])
    return int(value) if float(value).is_integer() else value   # the MoE average makes a whole float


def flops_extras(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute) -> tuple[Extra, ...]:
    if recompute is Recompute.OP:
        rerun = 2 * micro_batch * seq_len * seq_len * model.q_size * model.num_layers
        return (Extra("sdpa-backward-scores", rerun,
                      "op recompute's attention is SDPA (torchtitan's), whose flash backward recomputes the scores "
                      "Q K^T from the saved logsumexp before its four gradient GEMMs (2Bs^2q per layer); the "
                      "planner's backward is twice the forward, the eager attention the other modes run",
                      "torch/utils/flop_counter.py sdpa_backward_flop_count (Step 1); Dao et al. 2022 Alg. 4"),)
    if recompute is not Recompute.SELECTIVE:
        return ()
    skipped = 2 * micro_batch * seq_len * seq_len * model.q_size * model.num_layers
    return (Extra("checkpoint-early-stop", -skipped,
                  "non-reentrant torch.utils.checkpoint stops recomputing once every saved tensor is back; the "
                  "scores x V GEMM (2Bs^2q per layer) saves nothing the backward needs, so it is not rerun "
                  "(Megatron's reentrant checkpoint reruns the whole core, 4Bs^2q)",
                  "torch/utils/checkpoint.py set_checkpoint_early_stop"),)


# ---------------------------------------------------------------- model states per rank

def planner_states(model: ModelSpec, *, seq_len: int, config: ParallelConfig, first: bool = True) -> dict:
    """The planner's states/* bytes for one GPU of the first (or last) pipeline stage."""
    setup = setup_for(model, seq_len=seq_len, act_bytes=4, world=config.world_size)
    parts = stage_memory(RAW, setup, config, first=first)
    return {"params": parts["states/weights"], "grads": parts["states/grads"],
            "optimizer": parts["states/master"] + parts["states/optimizer"]}


def adam_steps(n_tensors: int) -> Extra:
    return Extra("adam-step-counters", ADAM_STEP_BYTES * n_tensors,
                 "torch.optim.Adam keeps a 4-byte fp32 'step' tensor per parameter tensor (capturable=False); "
                 "the ZeRO paper's K counts only the two moments", "torch/optim/adam.py _init_group")


def dtensor_embedding_grad(model: ModelSpec, t: int) -> Extra:
    """The vocabulary-parallel (RowwiseParallel, Shard(0)) embedding's weight gradient is a
    full V x h Replicate tensor on every rank: DTensor's embedding_dense_backward has no
    Shard(0) strategy, only Shard(1), Partial and Replicate. With tied embeddings the head's
    Shard(0) gradient arrives first and the lookup's is added into it, so no extra."""
    full = PARAM_BYTES * model.vocab_size * model.hidden_size
    return Extra("dtensor-embedding-grad-replicated", full - ceil_div(full, t),
                 "DTensor's embedding backward has no vocabulary-sharded strategy, so the embedding's gradient "
                 "is materialised as a full V x h Replicate tensor on every tp rank (Megatron's "
                 "VocabParallelEmbedding keeps it V/t x h)",
                 "torch/distributed/tensor/_ops/_embedding_ops.py embedding_dense_backward_strategy")


def zero1_partition(numels: list[int], world: int) -> list[list[int]]:
    """Indices of the parameters torch's ZeroRedundancyOptimizer gives each rank: sorted by
    size (largest first, stable), each to the rank with the fewest elements so far
    (zero_redundancy_optimizer._partition_parameters). Whole tensors, never split."""
    sizes = [0] * world
    ranks = [[] for _ in range(world)]
    for i in sorted(range(len(numels)), key=lambda j: numels[j], reverse=True):
        r = sizes.index(min(sizes))
        ranks[r].append(i)
        sizes[r] += numels[i]
    return ranks


def zero1_packing(numels: list[int], world: int, rank: int, bytes_per_param: int) -> Extra:
    """The rank's optimizer bytes minus the planner's ceil(K*P/N) ideal share."""
    mine = sum(numels[i] for i in zero1_partition(numels, world)[rank])
    ideal = ceil_div(bytes_per_param * sum(numels), world)
    return Extra("zero1-whole-tensor-packing", bytes_per_param * mine - ideal,
                 "torch ZeroRedundancyOptimizer assigns whole parameter tensors to ranks (greedy, largest "
                 "first), so a rank's optimizer share is not K*P/N; the planner's K*P/N is a lower bound on "
                 "the busiest rank", "docs/engines.md#zero-1-fsdp1-and-fsdp2")


def fsdp2_rows(dim0: int, world: int, rank: int) -> tuple[int, int]:
    """(rows this rank holds, rows of its padded shard): FSDP2 shards dim 0 in chunks of
    ceil(dim0/N) (torch.chunk), each rank's shard padded to that size."""
    chunk = ceil_div(dim0, world)
    return max(0, min(chunk, dim0 - rank * chunk)), chunk


def fsdp2_padding(shapes: list[tuple[int, ...]], world: int, rank: int, *, per_rank_bytes: int,
                  what: str) -> Extra:
    """Padded shard bytes minus the planner's ceil(B*P/N) for params or grads at rest."""
    padded = sum(fsdp2_rows(s[0], world, rank)[1] * _row(s) for s in shapes)
    total = sum(_numel(s) for s in shapes)
    return Extra("fsdp2-shard-padding", per_rank_bytes * padded - ceil_div(per_rank_bytes * total, world),
                 f"FSDP2 shards every tensor along dim 0 in ceil(dim0/N)-row chunks and pads each {what} "
                 "shard to that size (0 when N divides every dim 0)", "docs/engines.md#zero-1-fsdp1-and-fsdp2")


def fsdp2_local_numel(shapes: list[tuple[int, ...]], world: int, rank: int) -> int:
    return sum(fsdp2_rows(s[0], world, rank)[0] * _row(s) for s in shapes)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _row(shape) -> int:
    return _numel(shape[1:])


# ---------------------------------------------------------------- pipeline activations in flight

PP_TERMS = ("activations/layers", "activations/pipeline_in_flight", "activations/embedding", "activations/output")


def planner_pp_stage(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int, world: int, rank: int,
                     schedule: str, microbatches: int) -> dict:
    """The planner's activation terms for pipeline rank `rank` of `world` (tp = dp = 1, no
    recompute, m = microbatches): breakdown.stage_memory on the default split, plus its
    layers and chunks_in_flight."""
    from fitplan.memory.breakdown import stage_at
    from fitplan.specs.parallel import Schedule

    setup = setup_for(model, seq_len=seq_len, act_bytes=act_bytes, world=world,
                      global_batch=microbatches * micro_batch)
    config = ParallelConfig(pp=world, micro_batch=micro_batch, schedule=Schedule(schedule))
    stage = stage_at(RAW, model, config, rank)
    parts = stage_memory(RAW, setup, config, stage=stage)
    chunks = A.chunks_in_flight(p=world, v=1, r=rank, m=microbatches, schedule=schedule)
    return {"bytes": sum(parts[k] for k in PP_TERMS), "layers": int(stage.layers), "chunks": int(chunks)}


def pp_extras(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int, world: int, rank: int,
              schedule: str, microbatches: int) -> tuple[Extra, ...]:
    """What the pipeline rank keeps at its peak beyond the planner's terms: each in-flight
    micro-batch's layer extras (layer_extras), the first stage's position ids, the last
    stage's final-norm statistics and loss bookkeeping (outside_extras), and the whole
    batch's token ids or targets: torch.distributed.pipelining splits the batch with
    tensor_split, so a micro-batch's ids are a view, and the embedding (or the loss) keeps
    the whole batch's storage alive while any of its micro-batches is in flight."""
    p = planner_pp_stage(model, seq_len=seq_len, micro_batch=micro_batch, act_bytes=act_bytes, world=world,
                         rank=rank, schedule=schedule, microbatches=microbatches)
    s, b, m, chunks = seq_len, micro_batch, microbatches, p["chunks"]
    kw = dict(seq_len=s, micro_batch=b, act_bytes=act_bytes, recompute=Recompute.NONE)
    out = [Extra(f"layer-{x.key}", x.value * p["layers"] * chunks,
                 f"{x.reason}; for each of the stage's layers and micro-batches in flight", x.cite)
           for x in layer_extras(model, **kw)]
    view = ("torch.distributed.pipelining splits the batch with tensor_split, so each micro-batch's {what} is a "
            "view and the whole batch's int64 storage (8*m*s*b) stays alive while any micro-batch is in flight: "
            "8*s*b*(m - in flight) more than the planner's 8*s*b per micro-batch")
    src = "torch/distributed/pipelining/microbatch.py split_args_kwargs_into_chunks (tensor_split)"
    if rank == 0:
        if model.position is Position.LEARNED:
            out.append(Extra("position-ids", 8 * s * chunks, "each micro-batch's learned-position lookup saves its "
                             "int64 position ids (8s)", "embedding backward (derivatives.yaml), measured here"))
        out.append(Extra("pp-token-ids-view", 8 * s * b * (m - chunks), view.format(what="token ids"), src))
    if rank == world - 1:
        n_out = m if schedule == "gpipe" else 1
        out.append(Extra("final-norm-stats", n_out * norm_stats_bytes(model, tokens=s * b, act_bytes=act_bytes,
                                                                      device="cpu"),
                         "the final norm saves its statistics, per micro-batch whose loss awaits its backward",
                         _NORM_CITE[model.norm]))
        out.append(Extra("loss-targets", n_out * (8 * s * b + 4),
                         "cross_entropy's nll_loss saves the int64 targets (8sb) and a 4-byte fp32 total_weight, "
                         "per micro-batch whose loss awaits its backward",
                         "nll_loss backward (derivatives.yaml), measured here"))
        out.append(Extra("pp-targets-view", 8 * s * b * (m - n_out), view.format(what="target"), src))
    return tuple(x for x in out if x.value)


# ---------------------------------------------------------------- LoRA adapters on a frozen base

def planner_lora(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int, recompute: Recompute,
                 lora: tuple[int, str]) -> dict:
    """The planner's stage_memory for the reference run with adapters (pp = tp = 1): its
    states, one layer's stored bytes (activations/per_layer), and the embedding and output
    extras; and the adapter count."""
    from fitplan.explain import Trace
    setup = setup_for(model, seq_len=seq_len, act_bytes=act_bytes, lora=lora)
    trace = Trace()
    parts = stage_memory(trace, setup, ParallelConfig(micro_batch=micro_batch, recompute=recompute), first=True)
    by_key = {t.key: t.value for t in trace.terms}
    return {"params": by_key["params/lora_adapters"], "weights": parts["states/weights"],
            "grads": parts["states/grads"], "optimizer": parts["states/master"] + parts["states/optimizer"],
            "layer": by_key["activations/per_layer"],
            "outside": parts["activations/embedding"] + parts["activations/output"]}


def planner_qlora_fsdp(model: ModelSpec, *, seq_len: int, micro_batch: int, world: int,
                       lora: tuple[int, str]) -> dict:
    """The planner's FSDP terms for the fsdp2-qlora check: QLoRA (an NF4 base) at the reference's
    fp32 recipe, ZeRO-3 over `world`, reshard_after_forward off (every unit kept gathered, so
    runtime/fsdp_buffers is a layer's unsharded gradients alone): a layer's gathered unit
    (runtime/fsdp_layer_weights), its gradients (runtime/fsdp_buffers) and the model's sharded
    bytes (states/frozen_sharded), by key."""
    from dataclasses import replace

    from fitplan.explain import Trace
    setup = setup_for(model, seq_len=seq_len, act_bytes=4, world=world, lora=lora)
    setup = replace(setup, training=replace(setup.training, finetune="qlora"))
    trace = Trace()
    stage_memory(trace, setup, ParallelConfig(dp=world, zero=ZeroStage.OS_G_P, micro_batch=micro_batch,
                                              reshard_after_forward=False), first=True)
    return {t.key: int(t.value) for t in trace.terms}


def lora_outside_extras(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int,
                        device: str = "cpu") -> tuple[Extra, ...]:
    """outside_extras less the position ids: a frozen position table keeps no indices."""
    return tuple(x for x in outside_extras(model, seq_len=seq_len, micro_batch=micro_batch, act_bytes=act_bytes,
                                           device=device) if x.key != "position-ids")


# ---------------------------------------------------------------- the peak over one step (validate.peak)

PURE_BF16_ADAM = "bf16 weights, grads and Adam moments (the reference trained in bf16, no master copy)"


def step_setup(model: ModelSpec, *, seq_len: int, act_bytes: int, optimizer_impl: str) -> Setup:
    """The planner's Setup for validate.peak.measure_step: its weights, gradients and AdamW moments
    all in the activation dtype (fp32-adam, or 2 B each in bf16), torch.optim's loss
    (F.cross_entropy on fp32 logits), the optimizer implementation measured, one process."""
    from dataclasses import replace
    from fitplan.specs.training import Recipe
    rec = recipe(RECIPE) if act_bytes == 4 else Recipe(
        name="bf16-pure-adam", weights_bytes=2, grads_bytes=2, master_bytes=0, moments=(("adam_m", 2), ("adam_v", 2)),
        description=PURE_BF16_ADAM)
    setup = setup_for(model, seq_len=seq_len, act_bytes=act_bytes)
    return replace(setup, training=replace(setup.training, recipe=rec, optimizer_impl=optimizer_impl,
                                           cross_entropy="pytorch", fragmentation=0.0))


# what a CPU process holds that the planner's runtime terms put on a GPU: nothing of these exists on CPU
GPU_ONLY = ("runtime/cuda_context", "runtime/blas_workspace", "runtime/nccl", "runtime/allocator")


def planner_moments(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int, recompute: Recompute,
                    optimizer_impl: str) -> dict:
    """The planner's three moments for the one-process reference (fitplan.memory.timeline), as the
    bytes beyond the model states that a CPU process can hold (GPU_ONLY left out), and the states."""
    from fitplan.memory import timeline as TL
    from fitplan.memory.breakdown import evaluate
    setup = step_setup(model, seq_len=seq_len, act_bytes=act_bytes, optimizer_impl=optimizer_impl)
    b = evaluate(setup, ParallelConfig(micro_batch=micro_batch, recompute=recompute))
    moments = TL.moments({**b.parts, **b.aux}, phi=0)
    beyond = {m: sum(v for k, v in held.items() if k not in TL.STATE_KEYS + GPU_ONLY) for m, held in moments.items()}
    return {"states": b.state_bytes, **beyond, "logits_grad": b.parts["runtime/logits_grad"],
            "optimizer_step": b.parts["runtime/optimizer_step"]}


def step_extras(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int,
                recompute: Recompute) -> tuple[Extra, ...]:
    """What the reference holds beyond the planner's stored activations at its loss's backward:
    each layer's extras (layer_extras, for all L layers), the outside extras and the loss value."""
    kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=act_bytes)
    moe = 0 if model.moe is None else model.num_layers - model.moe.first_dense_layers
    out = ()
    for count, moe_layer in ((model.num_layers - moe, False), (moe, True)):
        if count:
            out += tuple(Extra(x.key, x.value * count, f"{x.reason} (x {count} {'MoE ' if moe_layer else ''}layers)",
                               x.cite) for x in layer_extras(model, recompute=recompute, moe_layer=moe_layer, **kw))
    return out + outside_extras(model, **kw) + (Extra(
        "loss-value", 4, "the fp32 loss the backward starts from (one scalar)", "measured here"),)


def batch_extra(*, seq_len: int, micro_batch: int) -> Extra:
    return Extra("batch", 16 * seq_len * micro_batch, "the step's int64 token ids and targets (8sb each), alive "
                 "through the optimizer step", "measured here")


def planner_runtime(model: ModelSpec, *, seq_len: int, config: ParallelConfig, grad_bucket_view: bool = True) -> dict:
    """The planner's terms (and aux values) for one GPU of the first stage, fp32-adam, one dtype."""
    from dataclasses import replace
    setup = setup_for(model, seq_len=seq_len, act_bytes=4, world=config.world_size)
    setup = replace(setup, training=replace(setup.training, grad_bucket_view=grad_bucket_view))
    return stage_memory(RAW, setup, config, first=True)


def fsdp2_root_params(model: ModelSpec) -> tuple[Extra, ...]:
    """FSDP2 keeps the root module's own parameters gathered from its forward to its backward: those
    in no unit of torchtitan's wrapping (learned positions; the final norm when the head is tied,
    so no [norm, output] unit exists). The planner's units are the layers and the output."""
    from fitplan.counts import params as P
    own = P.position_params(model) + (P.norm_params(model) if model.tied_embeddings else 0)
    return (Extra("fsdp2-root-params", PARAM_BYTES * own,
                  "the root module's own parameters (learned positions; the final norm with a tied head) stay "
                  "gathered through the step (FSDP2 does not reshard the root after forward)",
                  "torch/distributed/fsdp/_fully_shard/_fully_shard.py"),) if own else ()
