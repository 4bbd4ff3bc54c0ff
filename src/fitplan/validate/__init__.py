"""Predicted versus measured, against real PyTorch (the optional [torch] extra, torch 2.13.0).

`run_validation` builds the reference model (fitplan.validate.reference_model; MoE layers
from fitplan.validate.reference_moe) from a ModelSpec and checks, row by row, the planner's
formulas plus named reference extras against what torch measures: parameter counts (meta
device), bytes saved for backward per layer (none / norms / selective / op / full recompute,
bf16 and fp32; dense and MoE layers apart, op on dense layers only), FLOPs of one step
(FlopCounterMode), and, on 2-4 local gloo ranks, per-rank model states for DDP, ZeRO-1,
FSDP2 (ZeRO-2/3), DTensor tensor and pipeline parallel, expert parallel (MoE), plus
tensor-parallel activations and pipeline activations in flight (GPipe, 1F1B), DDP's and FSDP2's
runtime buffers, and QLoRA's NF4 base under FSDP2.
`fitplan.validate.report.render_text` prints it.

Importing this package does not import torch; run_validation does.
"""
from fitplan.errors import SpecError
from fitplan.specs.model import MambaSpec, Mlp, ModelSpec, MoeSpec, Norm, Position

TINY_GPT = ModelSpec(
    name="tiny-gpt", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
    vocab_size=512, max_seq_len=128,
    source="fitplan validation: GPT-style (LayerNorm, learned positions, biases, GeLU, tied embeddings)")
TINY_LLAMA = ModelSpec(
    name="tiny-llama", num_layers=2, hidden_size=128, num_heads=8, num_kv_heads=2, ffn_hidden_size=352,
    vocab_size=512, max_seq_len=256, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
    tied_embeddings=False, linear_bias=False,
    source="fitplan validation: Llama-style (RMSNorm, RoPE, no biases, SwiGLU, GQA 8/2, untied head)")
TINY_MOE = ModelSpec(
    name="tiny-moe", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=192,
    vocab_size=512, max_seq_len=128, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
    tied_embeddings=False, linear_bias=False,
    moe=MoeSpec(num_experts=4, experts_per_token=2, expert_ffn_size=96, num_shared_experts=1, first_dense_layers=1),
    source="fitplan validation: Llama-style MoE (GQA 4/2, first layer dense, then 4 experts of 96, top-2, "
           "1 shared expert; dropless, as Mixtral / DeepSeek-V3 without biases)")
# A few hundred million parameters (336,118,784) for the GPU check (tools/gpu_check.py): Llama-shaped,
# big enough that the states, activations and runtime buffers are all in the hundreds of MiB.
SMALL_LLAMA = ModelSpec(
    name="small-llama", num_layers=24, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_hidden_size=2816,
    vocab_size=32000, max_seq_len=4096, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
    tied_embeddings=False, linear_bias=False,
    source="fitplan validation on a GPU: Llama-style, 336M parameters (GQA 16/4, SwiGLU 2816, V 32000, untied)")
# A Mamba-2 hybrid (Nemotron-H's layout): Mamba, attention and squared-ReLU MLP layers, one pre-norm each
TINY_HYBRID = ModelSpec(
    name="tiny-hybrid", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
    vocab_size=512, max_seq_len=256, mlp=Mlp.RELU2, norm=Norm.RMSNORM, position=Position.NONE, tied_embeddings=False,
    linear_bias=False, layer_pattern="M*M-",
    mamba=MambaSpec(num_heads=4, head_dim=32, state_size=16, num_groups=2, chunk_size=32),
    source="fitplan validation: a Nemotron-H-style hybrid (Mamba-2 of 4 heads of 32, 2 groups, state 16, chunks of "
           "32; GQA 4/2 attention; squared-ReLU MLP; no position encoding; untied)")
DEFAULT_MODELS = (TINY_GPT, TINY_LLAMA)
DEFAULT_SEQ_LEN = 128       # > h for TINY_GPT: the s^2 term dominates
DEFAULT_MICRO_BATCH = 2
DEVICES = ("cpu", "cuda")


def memory_limit(device: str) -> tuple[int, str]:
    """(bytes, in words) a run on `device` may allocate at most: this machine's physical memory
    (os.sysconf) on the CPU, the largest GPU preset's on CUDA, and the smaller of the two for
    "auto" (which of them torch will pick is known only once torch is imported)."""
    import os

    from fitplan import presets
    host = (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine's memory")
    gpu = (max(g.memory_bytes for g in presets.GPUS.values()), "the largest GPU's memory")
    return host if device == "cpu" else gpu if device == "cuda" else min(host, gpu)


def check_size(model: ModelSpec, *, seq_len: int, micro_batch: int, device: str = "cpu") -> None:
    """Before anything runs: the reference model's activations at this shape, in fp32 without
    recompute (the largest run), by fitplan's own formulas (fitplan.validate.expected: every
    layer plus the embedding and output), must fit the memory the run has (memory_limit). So a --seq-len
    or --micro-batch of millions is one line, not an allocation of hundreds of GiB."""
    from fitplan.specs import Recompute
    from fitplan.validate.expected import planner_block_bytes, planner_layer_bytes, planner_outside_bytes
    kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=4)
    if model.hybrid:
        layers = sum(planner_block_bytes(model, k, **kw) for k in model.layer_pattern)
        moe_layers = 0
    else:
        moe_layers = model.num_layers - model.moe.first_dense_layers if model.moe is not None else 0
        layers = (model.num_layers - moe_layers) * planner_layer_bytes(model, **kw, recompute=Recompute.NONE)
    if moe_layers:
        layers += moe_layers * planner_layer_bytes(model, **kw, recompute=Recompute.NONE, moe_layer=True)
    total = layers + planner_outside_bytes(model, **kw)
    limit, where = memory_limit(device)
    if total > limit:
        raise SpecError(f"--seq-len {seq_len} --micro-batch {micro_batch}: the reference {model.name} would hold "
                        f"{total / 2**30:,.1f} GiB of activations (fitplan's own prediction), more than {where} "
                        f"({limit / 2**30:,.0f} GiB); lower them")


def _check_hybrid(model: ModelSpec, seq_len: int) -> None:
    """What the reference hybrid model builds: Mamba-2, attention and MLP layers."""
    if "E" in model.layer_pattern or model.mtp_depth:
        raise SpecError(f"model {model.name}: the reference hybrid model has no MoE layers or multi-token-prediction "
                        f"modules; validate a pattern of M, * and - layers")
    if model.mamba is not None and model.mamba.version.value != "mamba2":
        raise SpecError(f"model {model.name}: the reference hybrid model builds Mamba-2 layers; validate a mamba2 model")
    if model.mamba is not None and seq_len % model.mamba.chunk_size:
        raise SpecError(f"--seq-len {seq_len}: the reference scan runs whole chunks of {model.mamba.chunk_size} "
                        f"tokens; give a multiple of {model.mamba.chunk_size}")


def run_validation(*, model: ModelSpec = TINY_GPT, seq_len: int = DEFAULT_SEQ_LEN,
                   micro_batch: int = DEFAULT_MICRO_BATCH, world_sizes=(2,), device: str = "cpu",
                   include_distributed: bool = True):
    """Every check for one model and shape; returns a fitplan.validate.report.ValidationReport.

    Raises SpecError for bad input: an unknown device, --device cuda without a GPU, a
    sequence longer than the learned-position table, world sizes outside 2..4, or torch
    missing."""
    if device not in DEVICES:
        raise SpecError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise SpecError(f"--seq-len must be an int >= 1, got {seq_len!r}")
    if not isinstance(micro_batch, int) or micro_batch < 1:
        raise SpecError(f"--micro-batch must be an int >= 1, got {micro_batch!r}")
    if getattr(model, "mla", None) is not None:   # the reference attention is (grouped-query) multi-head only
        raise SpecError(f"model {model.name}: the reference model has no MLA layers; validate a model with "
                        f"multi-head or grouped-query attention")
    if model.mlp not in (Mlp.GELU, Mlp.RELU2, Mlp.SWIGLU) or (model.moe is not None and model.mlp is Mlp.RELU2):
        raise SpecError(f"model {model.name}: the reference model has no {model.mlp.value} "
                        f"{'experts' if model.moe is not None else 'MLP'}; validate a gelu, relu2 (dense) or swiglu "
                        f"model")
    if model.attention_sinks:
        raise SpecError(f"model {model.name}: the reference attention has no sinks; validate a model without "
                        f"attention_sinks")
    if model.moe is not None and model.linear_bias:
        raise SpecError(f"model {model.name}: MoE with linear biases is not validated: the planner's expert_params "
                        f"counts no bias on the experts' down projections, which Megatron-LM's experts have; "
                        f"validate an MoE model without biases")
    if model.moe is not None and model.moe.capacity_factor is not None:
        raise SpecError(f"model {model.name}: the reference MoE layer is dropless; validate a spec without "
                        f"moe.capacity_factor (the planner then uses rho = training.moe_imbalance)")
    if model.hybrid:
        _check_hybrid(model, seq_len)
    if model.position is Position.LEARNED and seq_len > model.max_seq_len:
        raise SpecError(f"--seq-len {seq_len} is longer than the model's learned-position table "
                        f"({model.max_seq_len}); lower it")
    if model.position is Position.ROPE and (model.q_size // model.num_heads) % 2:
        raise SpecError(f"RoPE needs an even head size, got {model.q_size // model.num_heads}")
    world_sizes = tuple(world_sizes)
    if any(not isinstance(w, int) or not 2 <= w <= 4 for w in world_sizes):
        raise SpecError(f"world sizes must be ints in 2..4 (local CPU processes), got {world_sizes!r}")
    check_size(model, seq_len=seq_len, micro_batch=micro_batch, device=device)
    try:
        from fitplan.validate import runner
    except ImportError as exc:   # torch is an optional extra
        raise SpecError(f"fitplan validate needs torch: pip install -e '.[torch]' (torch==2.13.0); {exc}") from exc
    return runner.run(model=model, seq_len=seq_len, micro_batch=micro_batch, world_sizes=world_sizes,
                      device=device, include_distributed=include_distributed)


__all__ = ["TINY_GPT", "TINY_LLAMA", "TINY_MOE", "TINY_HYBRID", "SMALL_LLAMA", "DEFAULT_MODELS", "DEFAULT_SEQ_LEN", "DEFAULT_MICRO_BATCH",
           "run_validation"]
