"""Megatron-LM command-line arguments for a plan.

Flag names are those of docs/engines.md#megatron-lm-flags (Megatron-LM's argparse parser, dumped at
commit d98e8a6) plus --grad-reduce-in-bf16, --add-qkv-bias, --no-gradient-accumulation-
fusion and --ckpt-format, read from megatron/training/arguments.py. What each part maps to:

  degrees     --tensor-model-parallel-size, --pipeline-model-parallel-size,
              --context-parallel-size, --sequence-parallel, and with v > 1
              --num-layers-per-virtual-pipeline-stage = L/(pp*v)
  ZeRO        0: plain DDP; 1: --use-distributed-optimizer (shards fp32 main params and
              Adam over dp x cp, keeps the full grad buffer, as fitplan's ZeRO-1);
              2, 3: Megatron-FSDP, --use-megatron-fsdp --data-parallel-sharding-strategy
              optim_grads / optim_grads_params, with the flags its guide requires
  batch       --micro-batch-size b, --global-batch-size B (Megatron derives dp and the
              number of micro-batches B/(dp*b) itself)
  recompute   selective: --recompute-granularity selective --recompute-modules core_attn
              (Korthikanti's selective recompute: the attention core only, pinned rather
              than left to a default that has changed before); full: --recompute-granularity
              full --recompute-method uniform --recompute-num-layers 1 (every layer keeps
              only its input, fitplan's full)
  precision   bf16 weights: --bf16 (fp32 main params and, by default, fp32 main grads);
              2-byte grads: --grad-reduce-in-bf16; fp8 weights: --fp8-format hybrid
              --fp8-param-gather; fp32 weights: no precision flag; SGD: --optimizer sgd
  shapes      --num-layers ... --vocab-size, --swiglu, --normalization, biases, tying

Megatron's parser is not imported here: the flags are data, and the tests parse them
back with an argparse parser that declares exactly these names.
"""
import shlex

from fitplan.counts.params import shape_params
from fitplan.export.plan import Exported, Plan, Unsupported, adapter_and_offload_reasons, describe
from fitplan.presets import recipes
from fitplan.specs import Mlp, Norm, Position, QkNorm, Recompute, ZeroStage

FORMAT = "megatron"
ADAM, SGD = dict(recipes.ADAM), dict(recipes.SGD_MOMENTUM)
FSDP_STRATEGY = {ZeroStage.OS_G: "optim_grads", ZeroStage.OS_G_P: "optim_grads_params"}
VOCAB_MULTIPLE = 128   # --make-vocab-size-divisible-by default


def to_megatron(plan: Plan) -> Exported | Unsupported:
    reasons, notes = adapter_and_offload_reasons(plan, "Megatron-LM"), []
    flags = (_degrees(plan) + _zero(plan) + _batch(plan) + _recompute(plan)
             + _precision(plan, reasons, notes) + _shapes(plan, reasons, notes))
    if reasons:
        return Unsupported(format=FORMAT, reasons=tuple(reasons))
    notes += _notes(plan)
    argv = [token for flag in flags for token in flag]
    return Exported(format=FORMAT, filename="megatron_args.sh", text=_script(plan, flags), data=argv,
                    notes=tuple(notes))


def _flag(name: str, *values) -> tuple[str, ...]:
    return (name, *(str(v) for v in values))


def _degrees(plan: Plan) -> list:
    c, L = plan.parallel, plan.model.num_layers
    out = [_flag("--tensor-model-parallel-size", c.tp), _flag("--pipeline-model-parallel-size", c.pp),
           _flag("--context-parallel-size", c.cp)]
    if c.sequence_parallel:
        out.append(_flag("--sequence-parallel"))
    if c.virtual_stages > 1:
        out.append(_flag("--num-layers-per-virtual-pipeline-stage", L // (c.pp * c.virtual_stages)))
    return out


def _zero(plan: Plan) -> list:
    zero = plan.parallel.zero
    if zero == ZeroStage.NONE:
        return []
    if zero == ZeroStage.OS:
        return [_flag("--use-distributed-optimizer")]
    # The Megatron-FSDP guide's flag set; Megatron asserts the fsdp_dtensor checkpoint format.
    return [_flag("--use-megatron-fsdp"), _flag("--data-parallel-sharding-strategy", FSDP_STRATEGY[zero]),
            _flag("--use-distributed-optimizer"), _flag("--no-gradient-accumulation-fusion"),
            _flag("--ckpt-format", "fsdp_dtensor")]


def _batch(plan: Plan) -> list:
    return [_flag("--micro-batch-size", plan.parallel.micro_batch), _flag("--global-batch-size", plan.global_batch)]


def _recompute(plan: Plan) -> list:
    mode = plan.parallel.recompute
    if mode == Recompute.SELECTIVE:
        return [_flag("--recompute-granularity", "selective"), _flag("--recompute-modules", "core_attn")]
    if mode == Recompute.FULL:
        return [_flag("--recompute-granularity", "full"), _flag("--recompute-method", "uniform"),
                _flag("--recompute-num-layers", 1)]
    return []


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
    if r.weights_bytes == 1 or r.compute == "fp8":
        out.append(_flag("--fp8-format", "hybrid"))
        notes.append("--fp8-format hybrid (e4m3 forward, e5m2 backward) chosen for fp8; e4m3 is the alternative")
    if r.weights_bytes == 1:
        out.append(_flag("--fp8-param-gather"))
        if zero == ZeroStage.NONE:
            reasons.append("fp8 primary weights (--fp8-param-gather) need the distributed optimizer or FSDP "
                           "(Megatron asserts it); plan ZeRO-1 or higher")
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
    if not m.linear_bias:
        out.append(_flag("--disable-bias-linear"))
        if m.qkv_bias and not m.linear_bias:   # Qwen2
            out.append(_flag("--add-qkv-bias"))
    if not m.tied_embeddings:
        out.append(_flag("--untie-embeddings-and-output-weights"))
    if not plan.training.dropout:
        out += [_flag("--hidden-dropout", 0.0), _flag("--attention-dropout", 0.0)]
    return out


def _unexpressed(m) -> list:
    """Model features the emitted flags cannot state: Megatron would build a different model."""
    out = []
    if m.mlp == Mlp.GEGLU:
        out.append("a GeGLU MLP (Gemma): Megatron's --swiglu gates with SiLU and the emitted flags have no GeLU gate")
    if m.norms_per_layer != 2:
        out.append(f"{m.norms_per_layer} norms per layer: Megatron's GPT layer has two (before attention and before "
                   f"the MLP)")
    if m.qk_norm != QkNorm.NONE:
        out.append(f"query/key norms ({m.qk_norm.value}): not among the flags fitplan emits")
    if m.sliding_window is not None:
        out.append(f"sliding-window attention ({m.sliding_window:,} tokens): not among the flags fitplan emits")
    if m.moe is not None and (m.moe.shared_expert_gate or m.moe.expert_bias):
        out.append("a shared-expert gate or a routing-score bias: not among the flags fitplan emits")
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
    if c.recompute != Recompute.SELECTIVE:
        notes.append("the plan stores the s^2 attention scores (no flash attention); Megatron's default fused "
                     "attention does not, so real activations are smaller; --attention-backend unfused matches "
                     "the plan exactly")
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
