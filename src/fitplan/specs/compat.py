"""Rules that involve two specs. Each rule is one function of plain arithmetic, so it
checks one ParallelConfig (scalars) or a whole batch of search candidates (NumPy arrays,
same attribute names) with the same code.

A broken rule is a Violation, a value: the search counts them by rule, the CLI turns one
for a configuration the user typed into a SpecError.
"""
from typing import Callable

from fitplan.arith import logical_not, select
from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs.parallel import Recompute, Schedule


@record(slots=True)
class Rule:
    id: str
    ok: Callable         # (model, training, cluster, c, allow_cross_node_tp) -> bool or bool array
    message: Callable    # (model, training, cluster, c) -> str, for one scalar config


@record(slots=True)
class Violation:
    rule: str
    message: str


def _layers_fit(L, c):
    """Default split: every one of the p*v chunks keeps a layer, or a unit where the embedding and the head count
    as a layer each (counts.stages._embedding_aware). Pinned ends: pp > 1, the
    pins leave at least one layer per middle stage (exactly none when pp = 2)."""
    first, last = c.first_stage_layers, c.last_stage_layers
    if first is None and last is None:   # the embedding and the head count as a layer each where that fills them
        P = c.pp * c.virtual_stages
        return (L >= P) | ((c.pp > 1) & (L + 2 >= P) & (-(-(L + 2) // P) == -(-L // P)))
    pinned = (first or 0) + (last or 0)
    both = first is not None and last is not None
    middle = L - pinned
    return (c.pp > 1) & select(c.pp == 2, middle == 0 if both else middle >= 1,
                               middle >= (c.pp - 2) + (0 if both else 1))


def _layers_message(L, c) -> str:
    first, last = c.first_stage_layers, c.last_stage_layers
    if first is None and last is None:
        return (f"{L} layers cannot fill pp x virtual stages = {c.pp} x {c.virtual_stages} chunks; "
                f"lower --pp or --virtual-stages")
    if c.pp == 1:
        return "--first-stage-layers/--last-stage-layers pin pipeline stages; they need pp > 1"
    return (f"--first-stage-layers {first} and --last-stage-layers {last} leave {L - (first or 0) - (last or 0)} of "
            f"the {L} layers for the other {c.pp - (first is not None) - (last is not None)} stages, which need at "
            f"least one each (pp = 2 with both pinned: they must add up to {L})")


def _even_at_least_pp(m, p):
    return (m % 2 == 0) & (m >= p)


RULES = (
    Rule("heads_not_divisible_by_tp",
         lambda m, t, k, c, x: (m.num_heads % c.tp == 0) & (m.num_kv_heads % c.tp == 0),
         lambda m, t, k, c: f"attention heads ({m.num_heads}) and kv heads ({m.num_kv_heads}) must be "
                            f"divisible by tp={c.tp}; pick a tp that divides {m.num_kv_heads}"),
    Rule("ffn_not_divisible_by_tp",
         lambda m, t, k, c, x: m.ffn_hidden_size % c.tp == 0,
         lambda m, t, k, c: f"ffn size {m.ffn_hidden_size} must be divisible by tp={c.tp}"),
    Rule("too_few_layers_for_stages",   # every model chunk keeps a layer (fitplan.counts.stages)
         lambda m, t, k, c, x: _layers_fit(m.num_layers, c),
         lambda m, t, k, c: _layers_message(m.num_layers, c)),
    Rule("seq_not_divisible_by_cp",
         lambda m, t, k, c, x: t.seq_len % c.cp == 0,
         lambda m, t, k, c: f"sequence length {t.seq_len} must be divisible by cp={c.cp}"),
    Rule("global_batch_not_divisible",
         lambda m, t, k, c, x: True if t.global_batch is None else t.global_batch % (c.dp * c.micro_batch) == 0,
         lambda m, t, k, c: f"global batch {t.global_batch} must be divisible by dp x micro-batch = "
                            f"{c.dp} x {c.micro_batch}; change --global-batch, --dp or --micro-batch"),
    # Megatron-LM asks m to be a multiple of p when interleaving [narayanan Sec. 2.2.2]; Llama 3 relaxed
    # that to any m >= p, with the bubble that follows (Llama 3 report Sec. 3.3.2): fitplan allows it.
    Rule("interleave_needs_microbatches_at_least_pp",
         lambda m, t, k, c, x: True if t.global_batch is None else
         (c.virtual_stages == 1) | (t.global_batch // (c.dp * c.micro_batch) >= c.pp),
         lambda m, t, k, c: f"the interleaved schedule needs at least pp={c.pp} micro-batches, got "
                            f"{t.global_batch // (c.dp * c.micro_batch)}; raise --global-batch or lower --micro-batch"),
    Rule("schedule_needs_pp",
         lambda m, t, k, c, x: (c.pp > 1) | (c.schedule == Schedule.ONE_F_ONE_B),
         lambda m, t, k, c: f"--schedule {c.schedule} is a pipeline schedule; it needs pp > 1"),
    Rule("schedule_not_interleaved",
         lambda m, t, k, c, x: (c.virtual_stages == 1) | (c.schedule == Schedule.ONE_F_ONE_B),
         lambda m, t, k, c: f"--schedule {c.schedule} has no interleaved form here; use --virtual-stages 1 "
                            f"(interleaving is 1f1b's)"),
    Rule("dualpipe_needs_even_pp_and_microbatches",   # deepseek-ai/DualPipe: two directions, half each
         lambda m, t, k, c, x: True if c.schedule != Schedule.DUALPIPE else (c.pp % 2 == 0) & (
             True if t.global_batch is None else _even_at_least_pp(t.global_batch // (c.dp * c.micro_batch), c.pp)),
         lambda m, t, k, c: f"DualPipe runs half the micro-batches from each end: it needs an even pp (got {c.pp}) "
                            f"and an even number of micro-batches, at least pp"),
    Rule("shard_degree_not_dividing_dp_cp",
         lambda m, t, k, c, x: True if c.shard_degree is None else (c.dp * c.cp) % c.shard_degree == 0,
         lambda m, t, k, c: f"--shard-degree {c.shard_degree} must divide the data-parallel ranks dp x cp = "
                            f"{c.dp * c.cp}: ZeRO state is sharded within groups of that size"),
    Rule("shard_degree_needs_zero",
         lambda m, t, k, c, x: (c.shard_degree is None) | (c.zero >= 1),
         lambda m, t, k, c: "--shard-degree shards ZeRO state; it needs --zero 1, 2 or 3"),
    Rule("keep_gathered_weights_needs_zero3",
         lambda m, t, k, c, x: c.reshard_after_forward | (c.zero == 3),
         lambda m, t, k, c: "--no-reshard-after-forward keeps ZeRO-3/FSDP's gathered weights; it needs --zero 3"),
    Rule("recompute_num_layers_needs_full",
         lambda m, t, k, c, x: (c.recompute_num_layers is None) | (c.recompute == Recompute.FULL),
         lambda m, t, k, c: "--recompute-num-layers picks the layers of full recompute; add --recompute full"),
    Rule("tp_crosses_nodes",
         lambda m, t, k, c, x: x | (c.tp <= k.gpus_per_node),
         lambda m, t, k, c: f"tp={c.tp} is larger than the {k.gpus_per_node} GPUs in a node, so tensor "
                            f"parallel traffic would cross nodes; lower tp or pass --allow-cross-node-tp"),
    Rule("tp_comm_overlap_needs_sequence_parallel",   # Megatron-LM and PyTorch async TP overlap SP's RS/AG
         lambda m, t, k, c, x: logical_not(c.tp_comm_overlap) | (c.tp == 1) | c.sequence_parallel,
         lambda m, t, k, c: "--tp-comm-overlap overlaps sequence parallel's all-gathers and reduce-scatters with the "
                            "GEMMs (Megatron-LM requires it); add --sequence-parallel"),
    Rule("sequence_parallel_needs_tp",
         lambda m, t, k, c, x: (c.tp > 1) | logical_not(c.sequence_parallel),
         lambda m, t, k, c: "sequence parallel splits along the tensor-parallel group; it needs tp > 1"),
    Rule("ep_without_experts",
         lambda m, t, k, c, x: True if m.moe is not None else c.ep == 1,
         lambda m, t, k, c: "expert parallelism needs a mixture-of-experts model; use ep = 1"),
    Rule("experts_not_divisible_by_ep",
         lambda m, t, k, c, x: True if m.moe is None else m.moe.num_experts % c.ep == 0,
         lambda m, t, k, c: f"the {m.moe.num_experts} experts must be divisible by ep={c.ep}"),
    Rule("ep_not_dividing_tp_dp_cp",
         lambda m, t, k, c, x: (c.tp * c.dp * c.cp) % c.ep == 0,
         lambda m, t, k, c: f"ep={c.ep} must divide tp x dp x cp = {c.tp * c.dp * c.cp}: experts are spread over "
                            f"those ranks (Megatron-LM's expert grid)"),
    Rule("moe_tp_needs_sequence_parallel",
         lambda m, t, k, c, x: True if m.moe is None else (c.tp == 1) | c.sequence_parallel,
         lambda m, t, k, c: "mixture-of-experts layers with tp > 1 need sequence parallel (Megatron-LM); add "
                            "--sequence-parallel"),
    Rule("offload_params_needs_zero3",   # DeepSpeed offload_param and FSDP's CPUOffload move ZeRO-3's shards
         lambda m, t, k, c, x: (not c.offload.params) or (c.zero == 3),
         lambda m, t, k, c: f"--offload {c.offload.value} moves the weights' ZeRO-3 shards off the GPU; it needs "
                            f"--zero 3"),
    Rule("lora_recompute_mode",
         lambda m, t, k, c, x: t.finetune == "full" or c.recompute in (Recompute.NONE, Recompute.SELECTIVE,
                                                                       Recompute.FULL),
         lambda m, t, k, c: f"--recompute {c.recompute.value} is not modelled with --finetune {t.finetune}; use none, "
                            f"selective or full"),
    Rule("optimizer_in_backward_needs_one_microbatch",   # torchtune's recipes refuse gradient accumulation with it
         lambda m, t, k, c, x: (not t.optimizer_in_backward) or t.global_batch is None
         or t.global_batch // (c.dp * c.micro_batch) == 1,
         lambda m, t, k, c: f"--optimizer-in-backward steps each parameter as its gradient arrives, so every step is "
                            f"one micro-batch (torchtune refuses gradient accumulation with it); give --global-batch "
                            f"{c.dp * c.micro_batch} (dp x micro-batch) or drop --optimizer-in-backward"),
    Rule("virtual_stages_need_pp",
         lambda m, t, k, c, x: (c.pp > 1) | (c.virtual_stages == 1),
         lambda m, t, k, c: "virtual pipeline stages (interleaving) need pp > 1"),
    # Hybrid Mamba models, as Megatron-LM runs them (megatron/core/ssm/mamba_mixer.py, mamba_block.py)
    Rule("mamba_heads_not_divisible_by_tp",   # MambaMixer: nheads % tp == 0 and ngroups % tp == 0
         lambda m, t, k, c, x: True if m.mamba is None else (m.mamba.num_heads % c.tp == 0) & (
             m.mamba.num_groups % c.tp == 0),
         lambda m, t, k, c: f"the Mamba layers' {m.mamba.num_heads} heads and {m.mamba.num_groups} groups must be "
                            f"divisible by tp={c.tp} (Megatron-LM's MambaMixer splits both); pick a tp that divides "
                            f"{m.mamba.num_groups}"),
    Rule("mamba1_tp",
         lambda m, t, k, c, x: True if m.mamba is None or m.mamba.version.value == "mamba2" else c.tp == 1,
         lambda m, t, k, c: "tensor parallelism of Mamba (mamba1) layers is not modelled (Megatron-LM splits "
                            "Mamba-2 layers only); use tp 1"),
    Rule("hybrid_cp",
         lambda m, t, k, c, x: True if not m.hybrid else c.cp == 1,
         lambda m, t, k, c: "context parallelism of a hybrid model's Mamba layers (Megatron-LM's "
                            "MambaContextParallel, an all-to-all of their heads) is not modelled; use cp 1"),
    Rule("hybrid_virtual_stages",
         lambda m, t, k, c, x: True if not m.hybrid else c.virtual_stages == 1,
         lambda m, t, k, c: "Megatron-LM's hybrid Mamba models have no interleaved pipeline (mamba_block.py asserts "
                            "virtual_pipeline_model_parallel_size is None); use --virtual-stages 1"),
    Rule("hybrid_recompute_mode",
         lambda m, t, k, c, x: True if not m.hybrid else (c.recompute in (Recompute.NONE, Recompute.SELECTIVE,
                                                                          Recompute.FULL))
         & (c.recompute_num_layers is None),
         lambda m, t, k, c: f"--recompute {c.recompute.value}"
                            f"{' with --recompute-num-layers' if c.recompute_num_layers is not None else ''} is not "
                            f"modelled for a hybrid model; use none, selective or full (every layer)"),
)



def check(model, training, cluster, config, *, allow_cross_node_tp: bool = False) -> tuple[Violation, ...]:
    """Every rule one configuration breaks, in rule order."""
    return tuple(Violation(rule.id, rule.message(model, training, cluster, config))
                 for rule in RULES
                 if not bool(rule.ok(model, training, cluster, config, allow_cross_node_tp)))


def require(model, training, cluster, config, *, allow_cross_node_tp: bool = False) -> None:
    """For a configuration the user typed: the first broken rule is a SpecError."""
    if config.world_size != cluster.num_gpus:
        raise SpecError(f"--gpus is {cluster.num_gpus} but tp x pp x dp x cp = {config.tp} x {config.pp} x "
                        f"{config.dp} x {config.cp} = {config.world_size}; make the product equal the GPU count")
    violations = check(model, training, cluster, config, allow_cross_node_tp=allow_cross_node_tp)
    if violations:
        raise SpecError(violations[0].message)
