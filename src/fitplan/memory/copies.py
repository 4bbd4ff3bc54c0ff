"""What a step holds of the weights and gradients beyond their sharded states: Transformer Engine's
quantized weight copies, the one gradient optimizer-in-backward keeps, a paged optimizer's resident
pages, ZeRO-3's gathered weights while they stay gathered, and the unsharded gradients pipelined
ZeRO-2/3 accumulates (one rule, `pipelined`, that time reads too). Ints or arrays."""
from fitplan.arith import ceil_div, is_array, maximum, select
from fitplan.explain import formula
from fitplan.sources import Cite
from fitplan.specs.training import LOW_PRECISION_BYTES

# Transformer Engine's quantized copies of a weight, each at the precision's bytes per element with its scales
# (fitplan.specs.training.LOW_PRECISION_BYTES): the rowwise data and, for the backward's
# transposed GEMMs, the columnwise (transformer_engine/pytorch/tensor/float8_tensor.py: a separate _transpose
# only where the GPU lacks non-TN fp8 GEMMs, Hopper and Ada; utils.py is_non_tn_fp8_gemm_supported: compute
# capability 10.x and later has them), mxfp8_tensor.py (rowwise and columnwise data, a uint8 scale per 32
# elements each), nvfp4_tensor.py (4-bit data and an fp8 scale per 16 elements, rowwise and columnwise).
TRANSPOSE_FREE = ("blackwell", "blackwell-ultra")   # non-TN fp8 GEMMs: no transposed fp8 copy


def fp8_cache_factor(*, compute: str, weights_bytes, architecture) -> float:
    """c8: bytes per linear weight Transformer Engine keeps quantized across micro-batches. fp8: the cast
    (none with fp8 primary weights, which are the cast) and, on Hopper, its transpose; mxfp8 and nvfp4:
    both directions, each with its block scales."""
    if compute == "fp8":
        rowwise = 0.0 if weights_bytes <= 1 else 1.0
        return rowwise + (0.0 if architecture in TRANSPOSE_FREE else 1.0)
    return 2 * LOW_PRECISION_BYTES[compute]


@formula("runtime/fp8_weight_cache",
         lambda *, zero3, **_: "c8*psi_lin" + ("/l  (ZeRO-3: the gathered layer's)" if zero3 else ""),
         Cite("transformer-engine", "module/base.py: quantized weight workspaces kept across micro-batches "
                                    "(is_first_microbatch); tensor/float8_tensor.py, mxfp8_tensor.py, nvfp4_tensor.py"),
         assumes=("low-precision recipes keep, per linear weight, its quantized copies for the forward and the "
                  "backward GEMMs across micro-batches (--no-fp8-weight-cache: frameworks that cast per use)",))
def fp8_weight_cache_bytes(*, c8, psi_lin, l, zero3):
    """Transformer Engine's quantized copies of the stage's linear weights (psi_lin: the layers'
    tp-split GEMM weights and this rank's experts): c8 bytes per parameter (fp8_cache_factor)."""
    return select(zero3, ceil_div(c8 * psi_lin, maximum(l, 1)), ceil_div(c8 * psi_lin, 1))


@formula("states/grads", "g*P_max/[N_d under ZeRO-2/3]  (the largest parameter's gradient, stepped in its hook)",
         Cite("torchtune", "torchtune/modules/optim.py OptimizerInBackward (post-accumulate-grad hooks step and "
                           "free each parameter's gradient); torch/distributed/optim/apply_optimizer_in_backward.py"))
def optimizer_in_backward_grads_bytes(*, g, P_max, n_d, zero):
    """With the optimizer stepped in each parameter's gradient hook, one parameter's gradient lives
    at a time: the largest's (P_max), its shard under ZeRO-2/3."""
    return ceil_div(g * P_max, select(zero >= 2, n_d, 1))


@formula("states/optimizer", "K*P_max/[N_d under ZeRO-1+]  (the pages of the parameter being stepped)",
         Cite("bnb-code", "bitsandbytes/optim/optimizer.py get_state_buffer (paged when numel >= 1e5: "
                              "cudaMallocManaged), functional.py prefetch_tensor"),
         assumes=("a paged optimizer's state lives in CUDA managed memory: the driver moves its pages to the host "
                  "while the GPU needs the room and back for the update; on the GPU at least the state of the "
                  "parameter being stepped",))
def paged_resident_bytes(*, K, P_max, n_d, zero):
    x = ceil_div(K * P_max, select(zero >= 1, n_d, 1))
    return x if is_array(x) else int(x)


@formula("runtime/gathered_weights", "w*(psi + psi_e)  (the stage's weights, gathered beside their shards)",
         Cite("fitplan", "formulas.md#hybrid-sharding (FSDP2 reshard_after_forward=False; with pipeline stages, "
                         "torch.distributed.pipelining's stage.py sets reshard_after_backward False until the last "
                         "micro-batch)"),
         assumes=("with reshard_after_forward off every gathered layer stays until its backward; with pipeline "
                  "stages every layer stays gathered from its first backward to the step's last",))
def gathered_weights_bytes(*, psi, psi_e, w, keep):
    """ZeRO-3/FSDP without resharding after forward, or under pipeline parallelism: each layer's
    gathered weights are held through the step's backwards; at the turn all of them. The gather
    fills a buffer of its own, the whole layer, beside the rank's shard (FSDP2's all-gather
    outputs; measured on CPU: fitplan validate's fsdp2-nosync rows), whole whatever the sharding.
    keep: 1 where that holds (ints or arrays)."""
    return keep * (psi * w + psi_e * w)


def pipelined(c):
    """1 where sharded data parallelism runs inside pipeline stages (pp > 1; ints or arrays) and syncs once per
    step: torch.distributed.pipelining's stage (backward_maybe_with_nosync) turns off gradient sync and
    resharding after backward until the last micro-batch, so ZeRO-2/3 gradients accumulate unsharded, ZeRO-3
    weights stay gathered and both sync once per step. --microbatch-grad-sync (Llama 3's FSDP: each micro-batch
    reduce-scattered into a sharded fp32 accumulator; the Ultra-Scale Playbook's 4*psi/N_d) turns it off. The one
    rule the memory (here) and the time (fitplan.timing.data_parallel) read."""
    return select(c.pp > 1, 0 if getattr(c, "microbatch_grad_sync", False) else 1, 0)


def kept_gathered(c):
    """1 where ZeRO-3's gathered weights stay through the backwards (ints or arrays): with
    reshard_after_forward off, or pipelined."""
    return maximum(int(not c.reshard_after_forward), pipelined(c))


@formula("runtime/accumulated_grads", "g*(psi + psi_e)*(1 - 1/N_d)  (the stage's gradients, unsharded until the "
                                      "last micro-batch's reduce-scatter)",
         Cite("fitplan", "formulas.md#runtime (torch.distributed.pipelining stage.py backward_maybe_with_nosync: "
                         "set_requires_gradient_sync(False); FSDP2 _fsdp_param.py to_accumulated_grad_if_needed)"),
         assumes=("ZeRO-2/3 with pipeline stages accumulates each micro-batch's gradients unsharded, at the "
                  "recipe's gradient precision, and reduce-scatters them once after the last backward "
                  "(torchtitan's FSDP2 with torch.distributed.pipelining; neither Megatron-LM nor DeepSpeed runs "
                  "ZeRO-2/3 with pipeline stages)",))
def accumulated_grads_bytes(*, psi, psi_e, g, n_d, n_ed, pipelined):
    """Beyond the gradient shard (states/grads), the rest of the stage's unsharded gradients,
    held from the first backward until the last micro-batch's reduce-scatter: g*psi in all, the
    shard itself not yet made (the optimizer's zero_grad set it to None; measured on CPU: fitplan
    validate's fsdp2-nosync rows). pipelined: 1 where pp > 1 (ints or arrays)."""
    return pipelined * (ceil_div(psi * g * (n_d - 1), n_d) + ceil_div(psi_e * g * (n_ed - 1), n_ed))
