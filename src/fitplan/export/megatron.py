"""Megatron-LM command-line arguments for a plan.

Flag names are those of docs/engines.md#megatron-lm-flags (Megatron-LM's argparse parser, dumped at
commit d98e8a6) plus --grad-reduce-in-bf16, --add-qkv-bias, --no-gradient-accumulation-
fusion and --ckpt-format, read from megatron/training/arguments.py. What each part maps to:

  degrees     --tensor-model-parallel-size, --pipeline-model-parallel-size,
              --context-parallel-size, --sequence-parallel
  pipeline    the plan's split (fitplan.counts.stages), written the first way that gives
              exactly its layers per model chunk (megatron/core/transformer/transformer_block.py
              get_num_layers_to_build; the checks in transformer_config.py __post_init__):
              an even split: nothing, or with v > 1 --num-layers-per-virtual-pipeline-stage;
              the default split that counts the embedding and the head as a layer each, where
              pp*v divides L + 2: --account-for-embedding-in-pipeline-split
              --account-for-loss-in-pipeline-split; pinned or uneven ends with even middle
              stages (and, with v > 1, every stage divisible by v):
              --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
              (arguments.py: uneven stages take --num-virtual-stages-per-pipeline-rank);
              any other split: --pipeline-model-parallel-layout, one "|"-separated entry per
              model chunk in pipeline order, E and L for the embedding and the loss
              (megatron/core/transformer/pipeline_parallel_layer_layout.py).
  schedule    1F1B, interleaved with v > 1. Megatron-LM has no other schedule
              (megatron/core/pipeline_parallel/schedules.py get_forward_backward_func picks
              forward_backward_pipelining_with/without_interleaving): gpipe, zero-bubble and
              dualpipe are refused.
  ZeRO        0: plain DDP; 1: --use-distributed-optimizer (shards fp32 main params and
              Adam over dp x cp, keeps the full grad buffer, as fitplan's ZeRO-1);
              2, 3: Megatron-FSDP, --use-megatron-fsdp --data-parallel-sharding-strategy
              optim_grads / optim_grads_params, with the flags its guide requires.
              --shard-degree N: --num-distributed-optimizer-instances dp*cp/N (the
              distributed optimizer shards within dp*cp/instances ranks, parallel_state.py;
              Megatron-FSDP turns HSDP on when it is > 1, mcore_fsdp_adapter.py).
              --no-reshard-after-forward is refused: Megatron-FSDP has no such switch, and
              --torch-fsdp2-no-reshard-after-forward belongs to the separate --use-torch-fsdp2
              path (no PP, no distributed optimizer, untied embeddings only; arguments.py).
  overlap     the plan's overlaps (docs/formulas.md#overlap): --overlap-grad-reduce,
              --overlap-param-gather (ZeRO >= 1), --tp-comm-overlap,
              --overlap-moe-expert-parallel-comm; Megatron defaults them all off
  batch       --micro-batch-size b, --global-batch-size B (Megatron derives dp and the
              number of micro-batches B/(dp*b) itself)
  recompute   selective: --recompute-granularity selective --recompute-modules core_attn
              (Korthikanti's selective recompute: the attention core only, pinned rather
              than left to a default that has changed before); norms: --recompute-modules
              layernorm (input_layernorm and pre_mlp_layernorm) plus mla_up_proj with MLA;
              full: --recompute-granularity full --recompute-method uniform
              --recompute-num-layers 1 (every layer keeps only its input, fitplan's full), or
              the plan's --recompute-method and --recompute-num-layers. Megatron counts those
              per model chunk (megatron/core/recompute.py), so with v > 1 a stage's count is
              translated to the chunks where that gives the same number of kept inputs, and
              refused where it cannot. op (torchtitan's per-op SAC) is refused.
              transformer_config.py lists the --recompute-modules choices.
  precision   bf16 weights: --bf16 (fp32 main params and, by default, fp32 main grads);
              2-byte grads: --grad-reduce-in-bf16; fp8 weights: --fp8-format hybrid
              --fp8-param-gather; mxfp8 compute: --fp8-recipe mxfp8; nvfp4 compute: --fp4-format
              e2m1 --fp4-recipe nvfp4; fp32 weights: no precision flag; SGD: --optimizer sgd;
              layers kept in bf16: --first-last-layers-bf16 --num-layers-at-start-in-bf16 N
              --num-layers-at-end-in-bf16 N
  shapes      --num-layers ... --vocab-size, --swiglu or --squared-relu, --normalization, biases,
              tying

  experts     --num-experts, --moe-router-topk, --moe-ffn-hidden-size, the shared experts as
              --moe-shared-expert-intermediate-size (and --moe-shared-expert-gate), the first
              dense layers as --moe-layer-freq, --expert-model-parallel-size with
              --expert-tensor-parallel-size 1, --moe-grouped-gemm, the dispatcher (allgather
              without EP, alltoall, or flex with DeepEP), the router's balancing (aux_loss, or
              the score bias with sigmoid scores), a capacity factor padded to capacity, and
              node-limited routing as group-limited routing with one group per node
  MLA         --multi-latent-attention, --q-lora-rank, --kv-lora-rank, --qk-head-dim,
              --qk-pos-emb-head-dim, --v-head-dim; --mtp-num-layers
  attention   --attention-backend unfused for eager attention, flash or fused for a named
              kernel, Megatron's auto choice for flash

Megatron's parser is not imported here: the flags are data, and the tests parse every
export with Megatron-LM's own option list at d98e8a6 (tests/data/megatron_flags.json).
"""
import shlex

from fitplan.counts.params import shape_params
from fitplan.export.plan import Exported, Plan, Unsupported, adapter_and_offload_reasons, describe
from fitplan.presets import recipes
from fitplan.specs import Mlp, Norm, Position, QkNorm, Recompute, ZeroStage
from fitplan.specs.parallel import RecomputeMethod, Schedule, overlaps_ep_comm, overlaps_param_gather

FORMAT = "megatron"
ADAM, SGD = dict(recipes.ADAM), dict(recipes.SGD_MOMENTUM)
FSDP_STRATEGY = {ZeroStage.OS_G: "optim_grads", ZeroStage.OS_G_P: "optim_grads_params"}
VOCAB_MULTIPLE = 128   # --make-vocab-size-divisible-by default
# --attention-backend (megatron/core/transformer/enums.py AttnBackend) for each attention kernel the plan names
ATTENTION_BACKENDS = {"eager": "unfused", "flash": "auto", "flash2": "flash", "flash3": "flash", "cudnn": "fused"}


def to_megatron(plan: Plan) -> Exported | Unsupported:
    reasons, notes = adapter_and_offload_reasons(plan, "Megatron-LM"), []
    flags = (_degrees(plan) + _pipeline(plan, reasons, notes) + _zero(plan, reasons) + _overlap(plan, reasons)
             + _batch(plan) + _recompute(plan, reasons, notes) + _precision(plan, reasons, notes)
             + _shapes(plan, reasons, notes) + _moe(plan, reasons, notes) + _mla(plan))
    if reasons:
        return Unsupported(format=FORMAT, reasons=tuple(reasons))
    notes += _notes(plan)
    argv = [token for flag in flags for token in flag]
    return Exported(format=FORMAT, filename="megatron_args.sh", text=_script(plan, flags), data=argv,
                    notes=tuple(notes))


def _flag(name: str, *values) -> tuple[str, ...]:
    return (name, *(str(v) for v in values))


def _degrees(plan: Plan) -> list:
    c = plan.parallel
    out = [_flag("--tensor-model-parallel-size", c.tp), _flag("--pipeline-model-parallel-size", c.pp),
           _flag("--context-parallel-size", c.cp)]
    if c.cp > 1 and not c.cp_comm_overlap:
        # p2p (the default) overlaps the K/V ring with attention; all_gather gathers K/V first, unhidden
        out.append(_flag("--cp-comm-type", "all_gather"))
    if c.sequence_parallel:
        out.append(_flag("--sequence-parallel"))
    return out


def _pipeline(plan: Plan, reasons: list, notes: list) -> list:
    """The schedule, and the flags that give Megatron exactly the plan's layers per model chunk."""
    c, L = plan.parallel, plan.model.num_layers
    if c.schedule != Schedule.ONE_F_ONE_B:
        reasons.append(f"--schedule {c.schedule.value}: Megatron-LM runs 1F1B, interleaved with virtual stages, and "
                       f"no other pipeline schedule (pipeline_parallel/schedules.py get_forward_backward_func)")
    if c.pp == 1:
        return []
    v, P, chunks = c.virtual_stages, c.pp * c.virtual_stages, plan.chunk_layers
    virtual = [_flag("--num-virtual-stages-per-pipeline-rank", v)] if v > 1 else []
    if not plan.pinned:
        if chunks == (L // P,) * P:
            return [_flag("--num-layers-per-virtual-pipeline-stage", L // P)] if v > 1 else []
        if (L + 2) % P == 0 and chunks == _account_for_ends(L, P):
            return [_flag("--account-for-embedding-in-pipeline-split"),
                    _flag("--account-for-loss-in-pipeline-split")] + virtual
    stages = plan.stage_layers
    if _first_last_chunks(stages, v) == chunks:
        return [_flag("--decoder-first-pipeline-num-layers", stages[0]),
                _flag("--decoder-last-pipeline-num-layers", stages[-1])] + virtual
    notes.append(f"the plan's split (layers per stage {', '.join(map(str, stages))}) has no first/last or "
                 f"account-for-embedding form in Megatron-LM, so it is written as --pipeline-model-parallel-layout")
    return [_flag("--pipeline-model-parallel-layout", layout(chunks))]


def _account_for_ends(L: int, P: int) -> tuple[int, ...]:
    """Layers per chunk under --account-for-embedding/loss-in-pipeline-split: (L + 2)/P each,
    one fewer on the first chunk (the embedding) and on the last (the loss)."""
    each = (L + 2) // P
    return tuple(each - (j == 0) - (j == P - 1) for j in range(P))


def _first_last_chunks(stages: tuple[int, ...], v: int) -> tuple[int, ...] | None:
    """Layers per chunk under --decoder-first/last-pipeline-num-layers, or None where Megatron
    refuses them: both ends above 0, the middle stages equal, every stage divisible by v."""
    first, last, middle = stages[0], stages[-1], stages[1:-1]
    if first <= 0 or last <= 0 or len(set(middle)) > 1 or any(n % v for n in stages):
        return None
    return tuple(stages[j % len(stages)] // v for j in range(len(stages) * v))


def layout(chunks: tuple[int, ...]) -> str:
    """--pipeline-model-parallel-layout for layers per model chunk: chunks split by "|", the
    embedding E first and the loss L last, t*n for n transformer layers, (x|)*k for k equal
    chunks in a row (pipeline_parallel_layer_layout.py parse_str_to_list)."""
    def body(n):
        return "" if n == 0 else "t" if n == 1 else f"t*{n}"
    first, last = "E" + body(chunks[0]), body(chunks[-1]) + "L"
    if len(chunks) == 1:
        return "E" + body(chunks[0]) + "L"
    parts, middle, j = [first + "|"], chunks[1:-1], 0
    while j < len(middle):
        k = j
        while k < len(middle) and middle[k] == middle[j]:
            k += 1
        run = k - j
        parts.append(f"({body(middle[j])}|)*{run}," if run > 1 else body(middle[j]) + "|")
        j = k
    return "".join(parts) + last


def _zero(plan: Plan, reasons: list) -> list:
    c = plan.parallel
    zero, out = c.zero, []
    if not c.reshard_after_forward:
        reasons.append("--no-reshard-after-forward: Megatron-FSDP (--use-megatron-fsdp) always frees gathered weights "
                       "after forward; --torch-fsdp2-no-reshard-after-forward exists only on the --use-torch-fsdp2 "
                       "path, which refuses pipeline parallelism, the distributed optimizer and tied embeddings")
    if zero == ZeroStage.NONE:
        return out
    if zero == ZeroStage.OS:
        out = [_flag("--use-distributed-optimizer")]
    else:
        # The Megatron-FSDP guide's flag set; Megatron asserts the fsdp_dtensor checkpoint format.
        out = [_flag("--use-megatron-fsdp"), _flag("--data-parallel-sharding-strategy", FSDP_STRATEGY[zero]),
               _flag("--use-distributed-optimizer"), _flag("--no-gradient-accumulation-fusion"),
               _flag("--ckpt-format", "fsdp_dtensor")]
    if c.shard_degree is not None and c.shard_degree != c.dp * c.cp:
        out.append(_flag("--num-distributed-optimizer-instances", c.dp * c.cp // c.shard_degree))
    return out


def _overlap(plan: Plan, reasons: list) -> list:
    """The overlaps the plan's step time assumed (docs/formulas.md#overlap), as Megatron-LM's flags,
    which all default off: the exported run then overlaps what the plan counted as hidden."""
    c = plan.parallel
    out = [_flag("--overlap-grad-reduce")] if c.overlap_grad_reduce else []
    if overlaps_param_gather(c) and c.zero >= ZeroStage.OS:
        if c.overlap_grad_reduce:
            out.append(_flag("--overlap-param-gather"))
        else:
            reasons.append("--overlap-param-gather without --overlap-grad-reduce: Megatron-LM asserts 'Must use "
                           "--overlap-param-gather with --overlap-grad-reduce'; plan both or neither")
    if c.tp_comm_overlap and c.tp > 1:
        out.append(_flag("--tp-comm-overlap"))
    if c.ep > 1 and overlaps_ep_comm(c) and c.schedule != Schedule.DUALPIPE:
        out.append(_flag("--overlap-moe-expert-parallel-comm"))
    return out


def _batch(plan: Plan) -> list:
    return [_flag("--micro-batch-size", plan.parallel.micro_batch), _flag("--global-batch-size", plan.global_batch)]


def _recompute(plan: Plan, reasons: list, notes: list) -> list:
    c, m = plan.parallel, plan.model
    mode = c.recompute
    if mode == Recompute.SELECTIVE:
        return [_flag("--recompute-granularity", "selective"), _flag("--recompute-modules", "core_attn")]
    if mode == Recompute.NORMS:
        if plan.training.recipe.weights_bytes == 1 or plan.training.recipe.compute == "fp8":
            reasons.append("--recompute norms with fp8: Megatron refuses layernorm recompute under its default "
                           "delayed fp8 scaling ('Delayed scaling does not support moe_act and layernorm recompute')")
        notes.append("--recompute-modules layernorm recomputes norms that are modules of their own; Megatron's "
                     "Transformer Engine layer spec fuses a dense layer's norms into the next linear "
                     "(TELayerNormColumnParallelLinear), which keeps the normalized input: there the plan counts "
                     "less than Megatron stores unless you run --transformer-impl local")
        return [_flag("--recompute-granularity", "selective"),
                _flag("--recompute-modules", "layernorm", *(("mla_up_proj",) if m.mla is not None else ()))]
    if mode == Recompute.OP:
        reasons.append("--recompute op is torchtitan's per-op selective checkpointing (keep matmul and attention "
                       "outputs, rerun every second matmul); Megatron recomputes whole submodules "
                       "(--recompute-modules) and has no per-op policy")
        return []
    if mode == Recompute.FULL:
        if c.recompute_num_layers is None:
            return [_flag("--recompute-granularity", "full"), _flag("--recompute-method", "uniform"),
                    _flag("--recompute-num-layers", 1)]
        n = _per_chunk_recompute(plan)
        if n is None:
            reasons.append(f"--recompute-num-layers {c.recompute_num_layers} --recompute-method "
                           f"{c.recompute_method.value} with {c.virtual_stages} virtual stages: Megatron counts "
                           f"recomputed layers per model chunk (megatron/core/recompute.py), and no per-chunk count "
                           f"keeps the plan's inputs per stage (layers per chunk {', '.join(map(str, plan.chunk_layers))})")
            return []
        if n != c.recompute_num_layers:
            notes.append(f"--recompute-num-layers {n}: Megatron counts per model chunk, so the plan's "
                         f"{c.recompute_num_layers} per stage over {c.virtual_stages} chunks is {n} per chunk")
        return [_flag("--recompute-granularity", "full"), _flag("--recompute-method", c.recompute_method.value),
                _flag("--recompute-num-layers", n)]
    return []


def _per_chunk_recompute(plan: Plan) -> int | None:
    """Megatron's --recompute-num-layers for the plan's per-stage one, or None. uniform N keeps
    ceil(l/N) layer inputs on a stage of l layers, block N reruns min(N, l) layers
    (docs/formulas.md#partial-recompute); Megatron applies either to each model chunk."""
    c = plan.parallel
    n, v, chunks, stages = c.recompute_num_layers, c.virtual_stages, plan.chunk_layers, plan.stage_layers
    if v == 1:
        return n
    on = [[chunks[i + k * c.pp] for k in range(v)] for i in range(c.pp)]
    if c.recompute_method == RecomputeMethod.UNIFORM:
        ok = all(sum(-(-x // n) for x in ks) == -(-l // n) for ks, l in zip(on, stages))
        return n if ok else None
    for per in range(1, max(chunks) + 1):
        if all(sum(min(per, x) for x in ks) == min(n, l) for ks, l in zip(on, stages)):
            return per
    return None


def _precision(plan: Plan, reasons: list, notes: list) -> list:
    r, zero, act = plan.training.recipe, plan.parallel.zero, plan.training.act_bytes
    moments = dict(r.moments)
    out = []
    if moments == SGD:
        out.append(_flag("--optimizer", "sgd"))
    elif moments != ADAM:
        reasons.append(f"optimizer moments {_bytes(moments)}: Megatron's optimizers are Adam with fp32 moments "
                       f"(adam_m 4 + adam_v 4 B/param) and SGD with fp32 momentum (4 B/param); other sizes need "
                       f"--use-precision-aware-optimizer with --exp-avg-dtype/--exp-avg-sq-dtype, a different "
                       f"optimizer from recipe {r.name!r}, so it is not emitted")
    if r.weights_bytes == 4:
        if r.grads_bytes != 4 or r.master_bytes != 0:
            reasons.append(f"fp32 weights run without --bf16, with fp32 grads and no separate master copy "
                           f"(4/4/0 B/param); recipe {r.name!r} has {r.weights_bytes}/{r.grads_bytes}/"
                           f"{r.master_bytes}")
        if act != 4:
            reasons.append(f"fp32 training stores 4-byte activations but the plan has act_bytes = {act}")
        return out
    if r.weights_bytes not in (1, 2):
        reasons.append(f"weights at {r.weights_bytes} B/param: Megatron keeps bf16 (2), fp8 (1) or fp32 (4) weights")
        return out
    out.append(_flag("--bf16"))
    if r.master_bytes != 4:
        reasons.append(f"with --bf16 Megatron keeps fp32 main params (4 B/param); recipe {r.name!r} has "
                       f"master_bytes = {r.master_bytes} (--main-params-dtype offers only fp32 and fp16)")
    if r.grads_bytes == 2:
        out.append(_flag("--grad-reduce-in-bf16"))
    elif r.grads_bytes == 4:
        notes.append("--bf16 keeps fp32 main grads (Megatron turns on accumulate-allreduce-grads-in-fp32): "
                     "4 B/param of gradients, as the recipe counts")
    else:
        reasons.append(f"gradients at {r.grads_bytes} B/param: Megatron's grad buffer is fp32 (4) or, with "
                       f"--grad-reduce-in-bf16, bf16 (2)")
    if r.compute == "nvfp4":   # Megatron-Core's fp4 path (megatron/core/fp4_utils.py): NVFP4 blocks, e2m1 elements
        if r.weights_bytes == 1:
            reasons.append("fp8 primary weights with nvfp4 compute: Megatron's fp4 recipe keeps bf16 or fp4 primary "
                           "weights (--fp4-param-gather), not fp8; plan bf16 weights")
        out.append(_flag("--fp4-format", "e2m1"))
        out.append(_flag("--fp4-recipe", "nvfp4"))
    elif r.weights_bytes == 1 or r.compute in ("fp8", "mxfp8"):
        out.append(_flag("--fp8-format", "hybrid"))
        notes.append("--fp8-format hybrid (e4m3 forward, e5m2 backward) chosen for fp8; e4m3 is the alternative")
        if r.compute == "mxfp8":   # 32-element blocks, power-of-two scales (Megatron-Bridge's bf16_with_mxfp8_mixed)
            out.append(_flag("--fp8-recipe", "mxfp8"))
    if r.weights_bytes == 1:
        out.append(_flag("--fp8-param-gather"))
        if zero == ZeroStage.NONE:
            reasons.append("fp8 primary weights (--fp8-param-gather) need the distributed optimizer or FSDP "
                           "(Megatron asserts it); plan ZeRO-1 or higher")
    if plan.training.attention_precision == "fp8":
        reasons.append("--attention-precision fp8: Megatron-LM's argument list (megatron/training/arguments.py at "
                       "d98e8a64) has no flag for TransformerConfig's "
                       "fp8_dot_product_attention, which Megatron-Bridge sets as mixed_precision."
                       "fp8_dot_product_attention; plan --attention-precision bf16 to export")
    first, last = plan.training.bf16_first_layers, plan.training.bf16_last_layers
    if first or last:   # megatron/core/fp8_utils.py is_first_last_bf16_layer (both counts given: their default is 1)
        out += [_flag("--first-last-layers-bf16"), _flag("--num-layers-at-start-in-bf16", first),
                _flag("--num-layers-at-end-in-bf16", last)]
    if act != 2:
        reasons.append(f"--bf16 training stores 2-byte activations but the plan has act_bytes = {act}")
    return out


def _bytes(moments: dict) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in moments.items()) + " B/param)" if moments else "(none)"


def _shapes(plan: Plan, reasons: list, notes: list) -> list:
    m, s = plan.model, plan.training.seq_len
    if plan.parallel.cp > 1 and s % (2 * plan.parallel.cp):
        reasons.append(f"Megatron needs the sequence length ({s}) to be a multiple of 2 x cp = "
                       f"{2 * plan.parallel.cp} for its load-balanced context parallel split")
    positions = m.max_seq_len
    if s > m.max_seq_len:
        if m.position == Position.LEARNED:
            reasons.append(f"sequence length {s} is longer than the learned position table ({m.max_seq_len}); "
                           f"Megatron asserts max_position_embeddings >= seq_length")
        positions = s
        notes.append(f"--max-position-embeddings raised from {m.max_seq_len} to the sequence length {s}: RoPE "
                     f"has no position parameters, so memory is unchanged")
    reasons += _unexpressed(m)
    if m.position == Position.ALIBI:
        reasons.append("ALiBi positions: Megatron-LM's --position-embedding-type takes learned_absolute, rope, mrope, "
                       "relative or none, not alibi (megatron/training/arguments.py); BLOOM's ALiBi lived in the "
                       "Megatron-DeepSpeed fork")
    out = [_flag("--num-layers", m.num_layers), _flag("--hidden-size", m.hidden_size),
           _flag("--ffn-hidden-size", m.ffn_hidden_size), _flag("--num-attention-heads", m.num_heads)]
    if m.num_kv_heads != m.num_heads:
        out += [_flag("--group-query-attention"), _flag("--num-query-groups", m.num_kv_heads)]
    if m.head_dim is not None:
        out.append(_flag("--kv-channels", m.head_dim))
    out += [_flag("--seq-length", s), _flag("--max-position-embeddings", positions),
            _flag("--vocab-size", m.vocab_size),
            _flag("--position-embedding-type", "rope" if m.position == Position.ROPE else "learned_absolute"),
            _flag("--normalization", "RMSNorm" if m.norm == Norm.RMSNORM else "LayerNorm")]
    if m.mlp == Mlp.SWIGLU:
        out.append(_flag("--swiglu"))
    elif m.mlp == Mlp.RELU2:
        out.append(_flag("--squared-relu"))   # megatron/training/arguments.py: activation_func squared_relu
    if not m.linear_bias:
        out.append(_flag("--disable-bias-linear"))
        if m.qkv_bias and not m.linear_bias:   # Qwen2
            out.append(_flag("--add-qkv-bias"))
    if not m.tied_embeddings:
        out.append(_flag("--untie-embeddings-and-output-weights"))
    if m.qk_norm == QkNorm.HEAD:
        out.append(_flag("--qk-layernorm"))
    if m.mtp_depth:
        out.append(_flag("--mtp-num-layers", m.mtp_depth))
    if not plan.training.dropout:
        out += [_flag("--hidden-dropout", 0.0), _flag("--attention-dropout", 0.0)]
    backend = ATTENTION_BACKENDS[plan.training.attention_kernel]
    if backend != "auto":
        # eager: the plan stores the s^2 scores (Korthikanti's eager attention), Megatron's unfused backend;
        # a named kernel: flash (FlashAttention 2 or 3) or fused (cuDNN); flash alone: Megatron's auto choice
        out.append(_flag("--attention-backend", backend))
    return out


def _moe(plan: Plan, reasons: list, notes: list) -> list:
    """Mixture-of-experts flags (megatron/core/transformer/transformer_config.py, the MoE fields;
    arguments.py _add_moe_args): experts of their own size, top-k routing, the shared experts as
    one MLP of their combined size, the first dense layers as a --moe-layer-freq pattern, expert
    parallelism over the tp x dp x cp ranks with expert tensor parallel 1 (fitplan's expert
    grid), grouped GEMMs, the all-to-all dispatcher when experts are split, and the router's
    balancing as the model states it: a routing-score bias (aux-loss free, which Megatron runs
    with sigmoid scores) or an auxiliary loss."""
    m, c = plan.model, plan.parallel
    moe = m.moe
    if moe is None:
        return []
    out = [_flag("--num-experts", moe.num_experts), _flag("--moe-router-topk", moe.experts_per_token),
           _flag("--moe-ffn-hidden-size", moe.expert_ffn_size)]
    if moe.num_shared_experts:
        out.append(_flag("--moe-shared-expert-intermediate-size", moe.num_shared_experts * moe.expert_ffn_size))
        if moe.shared_expert_gate:
            out.append(_flag("--moe-shared-expert-gate"))
    if moe.first_dense_layers:
        dense, sparse = moe.first_dense_layers, m.num_layers - moe.first_dense_layers
        out.append(_flag("--moe-layer-freq", f"([0]*{dense}+[1]*{sparse})"))
    out += [_flag("--expert-model-parallel-size", c.ep), _flag("--expert-tensor-parallel-size", 1),
            _flag("--moe-grouped-gemm")]
    if c.ep == 1:     # no expert all-to-all: the experts are local (the dispatcher choice has nothing to send)
        out.append(_flag("--moe-token-dispatcher-type", "allgather"))
    elif plan.training.moe_dispatcher == "deepep":   # DeepEP: the flex dispatcher with its deepep backend
        out += [_flag("--moe-token-dispatcher-type", "flex"), _flag("--moe-flex-dispatcher-backend", "deepep")]
    else:
        out.append(_flag("--moe-token-dispatcher-type", "alltoall"))
    if moe.expert_bias:
        out += [_flag("--moe-router-enable-expert-bias"), _flag("--moe-router-score-function", "sigmoid"),
                _flag("--moe-router-load-balancing-type", "none")]
    else:
        out.append(_flag("--moe-router-load-balancing-type", "aux_loss"))
        notes.append("--moe-router-load-balancing-type aux_loss: set --moe-aux-loss-coeff, a hyper-parameter "
                     "(Megatron's default 0 turns the loss off; Mixtral's config.json states 0.02)")
    if moe.latent_size is not None:   # LatentMoE (transformer_config.py moe_latent_size)
        out.append(_flag("--moe-latent-size", moe.latent_size))
    if moe.capacity_factor is not None:
        # the plan stores every expert's full capacity (fitplan.memory.activations): pad to it
        out += [_flag("--moe-expert-capacity-factor", moe.capacity_factor), _flag("--moe-pad-expert-input-to-capacity")]
    if moe.route_nodes is not None:
        out += _node_limited_routing(plan, reasons, notes)
    return out


def _node_limited_routing(plan: Plan, reasons: list, notes: list) -> list:
    """Node-limited routing (DeepSeek-V3 Sec. 3.2.2): Megatron's group-limited routing with one
    group per node of the expert-parallel group (transformer_config.py moe_router_num_groups)."""
    moe, ep, per_node = plan.model.moe, plan.parallel.ep, plan.gpus_per_node
    if per_node is None:
        reasons.append(f"--route-nodes {moe.route_nodes}: Megatron limits routing to groups of experts, one group "
                       f"per node of the expert-parallel group, and the plan states no node size")
        return []
    nodes = max(1, ep // per_node)
    if nodes <= moe.route_nodes:
        notes.append(f"--route-nodes {moe.route_nodes}: the {ep} expert-parallel ranks span {nodes} node(s), so "
                     f"every token already reaches at most {nodes}; no group-limited routing is needed")
        return []
    if ep % per_node or moe.num_experts % nodes:
        reasons.append(f"--route-nodes {moe.route_nodes} with ep = {ep} on {per_node}-GPU nodes: Megatron's groups "
                       f"are equal shares of the {moe.num_experts} experts, one per node, which needs whole nodes")
        return []
    return [_flag("--moe-router-num-groups", nodes), _flag("--moe-router-group-topk", moe.route_nodes)]


def _mla(plan: Plan) -> list:
    """Multi-latent attention (arguments.py _add_mla_args): --qk-head-dim is the part without
    rotary embedding, --qk-pos-emb-head-dim the rotary part; a q_lora_rank of 0 (queries not
    compressed) is Megatron's default None."""
    mla = plan.model.mla
    if mla is None:
        return []
    out = [_flag("--multi-latent-attention")]
    if mla.q_lora_rank:
        out.append(_flag("--q-lora-rank", mla.q_lora_rank))
    return out + [_flag("--kv-lora-rank", mla.kv_lora_rank), _flag("--qk-head-dim", mla.qk_nope_head_dim),
                  _flag("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), _flag("--v-head-dim", mla.v_head_dim)]


def _unexpressed(m) -> list:
    """Model features the emitted flags cannot state: Megatron would build a different model."""
    out = []
    if m.mlp == Mlp.GEGLU:
        out.append("a GeGLU MLP (Gemma): Megatron's --swiglu gates with SiLU and the emitted flags have no GeLU gate")
    if m.norms_per_layer != 2:
        out.append(f"{m.norms_per_layer} norms per layer: Megatron's GPT layer has two (before attention and before "
                   f"the MLP)")
    if m.qk_norm == QkNorm.PROJECTION:
        out.append("query/key norms over the whole projection (OLMo 2): Megatron's --qk-layernorm normalizes each "
                   "head (transformer_config.py qk_layernorm)")
    if m.sliding_window is not None:
        out.append(f"sliding-window attention ({m.sliding_window:,} tokens): not among the flags fitplan emits")
    if m.attention_sinks:
        out.append("attention sinks: Megatron-LM's learnable softmax offset (TransformerConfig softmax_type) has no "
                   "command-line flag")
    return out


def _notes(plan: Plan) -> list:
    m, c = plan.model, plan.parallel
    notes = []
    multiple = VOCAB_MULTIPLE * c.tp
    padded = -(-m.vocab_size // multiple) * multiple
    if padded != m.vocab_size:
        extra = (padded - m.vocab_size) * m.hidden_size * (1 if m.tied_embeddings else 2)
        notes.append(f"Megatron pads the vocabulary from {m.vocab_size:,} to {padded:,} rows (a multiple of "
                     f"128 x tp): {extra:,} parameters more than the plan counts; --make-vocab-size-divisible-by "
                     f"changes the multiple")
    if m.published_params is not None and m.published_params != shape_params(m):
        notes.append(f"the plan scales to the published {m.published_params:,} parameters; these shapes build "
                     f"{shape_params(m):,}")
    notes.append("--vocab-size is read with --tokenizer-type NullTokenizer; with a real tokenizer pass its flags "
                 "instead and check that the vocabulary matches")
    if plan.training.attention_kernel == "eager" and c.recompute == Recompute.NONE:
        notes.append("--attention-backend unfused: the plan stores the s^2 attention scores (eager attention, "
                     "Korthikanti et al.); a fused or flash backend would store less and run faster")
    if c.zero >= ZeroStage.OS_G and c.pp > 1:
        notes.append("Megatron-FSDP's guide lists TP, CP and EP as compatible, not PP: check that your Megatron "
                     "version runs --use-megatron-fsdp with --pipeline-model-parallel-size > 1")
    if c.tp > 1 or c.cp > 1:
        notes.append("tp or cp > 1: before Blackwell Megatron wants CUDA_DEVICE_MAX_CONNECTIONS=1 in the "
                     "environment" + ("; Megatron-FSDP prefers it unset and warns" if c.zero >= 2 else ""))
    notes.append("not emitted: data, tokenizer, optimizer hyper-parameters, checkpointing and the launcher "
                 f"(torchrun over {plan.num_gpus} GPUs in total)")
    return notes


def _script(plan: Plan, flags: list) -> str:
    lines = [f"# Megatron-LM arguments written by fitplan for {describe(plan)}",
             "# Use as: torchrun --nproc_per_node GPUS_PER_NODE --nnodes NODES pretrain_gpt.py "
             "\"${FITPLAN_ARGS[@]}\" plus data, tokenizer and optimizer flags",
             "FITPLAN_ARGS=("]
    lines += ["    " + shlex.join(flag) for flag in flags]
    lines.append(")")
    return "\n".join(lines) + "\n"
