"""Rules that involve two specs. Each rule is one function of plain arithmetic, so it
checks one ParallelConfig (scalars) or a whole batch of search candidates (NumPy arrays,
same attribute names) with the same code.

A broken rule is a Violation, a value: the search counts them by rule, the CLI turns one
for a configuration the user typed into a SpecError.
"""
from dataclasses import dataclass
from typing import Callable

from fitplan.arith import logical_not
from fitplan.errors import SpecError


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    ok: Callable         # (model, training, cluster, c, allow_cross_node_tp) -> bool or bool array
    message: Callable    # (model, training, cluster, c) -> str, for one scalar config


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    message: str


RULES = (
    Rule("heads_not_divisible_by_tp",
         lambda m, t, k, c, x: (m.num_heads % c.tp == 0) & (m.num_kv_heads % c.tp == 0),
         lambda m, t, k, c: f"attention heads ({m.num_heads}) and kv heads ({m.num_kv_heads}) must be "
                            f"divisible by tp={c.tp}; pick a tp that divides {m.num_kv_heads}"),
    Rule("ffn_not_divisible_by_tp",
         lambda m, t, k, c, x: m.ffn_hidden_size % c.tp == 0,
         lambda m, t, k, c: f"ffn size {m.ffn_hidden_size} must be divisible by tp={c.tp}"),
    Rule("layers_not_divisible_by_pp_x_v",
         lambda m, t, k, c, x: m.num_layers % (c.pp * c.virtual_stages) == 0,
         lambda m, t, k, c: f"layers ({m.num_layers}) must be divisible by pp x virtual stages = "
                            f"{c.pp} x {c.virtual_stages}; pick degrees that divide {m.num_layers}"),
    Rule("seq_not_divisible_by_cp",
         lambda m, t, k, c, x: t.seq_len % c.cp == 0,
         lambda m, t, k, c: f"sequence length {t.seq_len} must be divisible by cp={c.cp}"),
    Rule("global_batch_not_divisible",
         lambda m, t, k, c, x: True if t.global_batch is None else t.global_batch % (c.dp * c.micro_batch) == 0,
         lambda m, t, k, c: f"global batch {t.global_batch} must be divisible by dp x micro-batch = "
                            f"{c.dp} x {c.micro_batch}; change --global-batch, --dp or --micro-batch"),
    Rule("interleave_needs_microbatches_multiple_of_pp",   # [narayanan Sec. 2.2.2]
         lambda m, t, k, c, x: True if t.global_batch is None else
         (c.virtual_stages == 1) | ((t.global_batch // (c.dp * c.micro_batch)) % c.pp == 0),
         lambda m, t, k, c: f"the interleaved schedule needs the number of micro-batches "
                            f"({t.global_batch // (c.dp * c.micro_batch)}) to be a multiple of pp={c.pp}"),
    Rule("tp_crosses_nodes",
         lambda m, t, k, c, x: x | (c.tp <= k.gpus_per_node),
         lambda m, t, k, c: f"tp={c.tp} is larger than the {k.gpus_per_node} GPUs in a node, so tensor "
                            f"parallel traffic would cross nodes; lower tp or pass --allow-cross-node-tp"),
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
    Rule("virtual_stages_need_pp",
         lambda m, t, k, c, x: (c.pp > 1) | (c.virtual_stages == 1),
         lambda m, t, k, c: "virtual pipeline stages (interleaving) need pp > 1"),
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
