"""What the GPU holds beyond the model states and the stored activations: the runtime's
buffers, each a formula with its source and a default a declared flag changes.

Symbols as in fitplan.memory.activations (s, b, h, a, q, kv, f, n, e, t, c, V) and
fitplan.memory.states (psi, N_d, w, g, m). Per GPU:

  cuda_context    X_ctx                       the CUDA context and loaded kernels (outside the allocator)
  blas_workspace  W_blas * streams            PyTorch's cuBLAS workspace per (handle, stream)
  nccl            B3*(C*rings + p2p peers)    NCCL buffers of every communicator the layout creates
  deepep          DeepEP's NVLink and RDMA buffers (--moe-dispatcher deepep)
  grad_buckets    g*psi (no bucket views) or 2*min(B_bucket, g*psi) (ZeRO-2 reduce-scatter)
  fsdp_buffers    (1 + k)*W_layer + G_layer   ZeRO-3's gathered layers and unsharded gradients
  layer_backward  the gradients one layer's backward holds at once (an upper bound)
  logits_grad     the loss's logit gradients beyond the saved fp32 logits
  p2p             pipeline gradient send and receive buffers
  optimizer_step  the optimizer step's temporaries (foreach scratch, fp32 gradient casts)
  allocator       the caching allocator's rounding and fragmentation

Each works on ints (one configuration, explained) and NumPy arrays (the search).
"""
from fitplan.arith import ceil_div, is_array, maximum, minimum, select
from fitplan.explain import formula
from fitplan.sources import Cite

MiB = 2**20
# NCCL's per-connection buffers besides NCCL_BUFFSIZE's Simple one (src/init.cc, src/include/device.h):
# LL = NCCL_LL_LINES_PER_THREAD * NCCL_LL_MAX_NTHREADS * NCCL_STEPS * 16 B = 8*512*8*16,
# LL128 = NCCL_LL128_ELEMS_PER_THREAD * NCCL_LL128_MAX_NTHREADS * NCCL_STEPS * 8 B = 120*640*8*8.
NCCL_LL_BYTES = 8 * 512 * 8 * 16            # 524,288
NCCL_LL128_BYTES = 120 * 640 * 8 * 8        # 4,915,200
# With expandable segments the allocator maps 20 MiB pages (large pool) and 2 MiB pages (small pool)
# into one range per stream (c10/cuda/CUDACachingAllocator.cpp): at most a page of each unused at the top.
PAGE_BYTES = 20 * MiB + 2 * MiB


@formula("runtime/cuda_context", "X_ctx  (the CUDA context and loaded kernels, outside PyTorch's allocator)",
         Cite("pytorch-runtime", "pytorch#109888 (~400 MB with lazy loading); PR #86509 (287,047,680 B after one "
                                 "small tensor, CUDA_MODULE_LOADING=LAZY)"),
         assumes=("the CUDA context is a per-process constant (--cuda-context); it is outside "
                  "torch.cuda.max_memory_reserved",))
def cuda_context_bytes(*, X_ctx):
    return X_ctx


@formula("runtime/blas_workspace", "W_blas*streams  (one cuBLAS workspace per handle and stream that runs GEMMs)",
         Cite("pytorch-runtime", "aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize "
                                 "(CUBLAS_WORKSPACE_CONFIG :4096:2:16:8; 32 MiB on Hopper and Blackwell)"))
def blas_workspace_bytes(*, W_blas, streams=1):
    return W_blas * streams


# NCCL's p2p constants (NVIDIA/nccl @5067397c): the network's shared p2p buffers hold NCCL_SHARED_STEPS chunks of
# NCCL_P2P_NET_CHUNKSIZE per p2p channel and direction (src/transport/net.cc sharedNetBuffersInit; src/init.cc);
# a peer over the network gets max(NICs, ceil(NIC GB/s / NCCL_P2P_PER_CHANNEL_NET_BW)) channels, halved while
# they times ceil(peers/NCCL_MAX_DEV_WORK_P2P_PER_BATCH) exceed the p2p channels (src/graph/paths.cc).
NCCL_SHARED_STEPS = 16
NCCL_P2P_NET_CHUNK_BYTES = 128 * 2**10
NCCL_P2P_PER_CHANNEL_NET_GBPS = 14
NCCL_P2P_PER_BATCH = 8
NCCL_MAX_CHANNELS = 64


def _pow2_up(x):
    """The smallest power of two >= x (x >= 1; ints or arrays)."""
    if is_array(x):
        import numpy as np
        return (2 ** np.ceil(np.log2(np.maximum(x, 1)))).astype(np.int64)
    return 1 << (max(int(x), 1) - 1).bit_length()


def p2p_channels_per_peer(*, P2P, n, spans, net_ch, nvlink):
    """Channels NCCL gives each p2p peer of a communicator of n ranks: the fewest any peer allows
    (ncclTopoComputeP2pChannelsPerPeer: the minimum over the ranks), rounded up to a power of two.
    A peer across nodes allows net_ch; on NVLink 2*floor(path/link bandwidth), which on NVSwitch
    boards exceeds P2P (capped there); over PCIe 2. Across nodes they halve while ch*ceil(n/8)
    exceeds P2P (ncclTopoComputeP2pChannels)."""
    intra = select(nvlink, P2P, 2)
    ch = select(spans, _pow2_up(net_ch), minimum(P2P, intra))
    for _ in range(6):   # at most log2(64) halvings
        ch = select(spans & (ch * ceil_div(n, NCCL_P2P_PER_BATCH) > P2P) & (ch > 1), ch // 2, ch)
    return ch


def _nccl_text(**_):
    return ("B3*(C*rings + sum over p2p groups of peers_intra*ch_peer) + 2*P2P*16*128 KiB*(p2p groups across nodes), "
            "B3 = NCCL_BUFFSIZE + LL + LL128, P2P = pow2Up(C)")


@formula("runtime/nccl", _nccl_text,
         Cite("nccl", "src/init.cc DEFAULT_BUFFSIZE, DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, computeBuffSizes; "
                      "src/transport/p2p.cc (a connection's receiver holds the LL and LL128 buffers, the sender the "
                      "Simple one in read mode); src/graph/paths.cc ncclTopoGetNchannels, "
                      "ncclTopoComputeP2pChannels; src/transport/net.cc sharedNetBuffersInit (@5067397c)"),
         assumes=("a ring collective's communicator (tp, the data-parallel reduction group, the world group when it "
                  "is larger than every other, cp without its p2p ring) holds one connection's buffers per channel",
                  "a p2p communicator (pipeline sends, cp's K/V ring, an NCCL all-to-all) holds each node-local peer's "
                  "buffers on ch_peer channels, and one shared pool for all its remote peers "
                  "(NCCL_NET_SHARED_BUFFERS default)",
                  "tree and NVLS buffers are not counted (NCCL connects them lazily, only when it picks them); "
                  "NCCL's memory is outside torch.cuda.max_memory_reserved"))
def nccl_bytes(*, C, buffsize, rings, p2p_groups=()):
    """NCCL's buffers on one GPU. rings: the ring communicators (ints or arrays); p2p_groups:
    (peers on this node, channels per peer, 1 where the group has peers on other nodes) per p2p
    communicator."""
    b3 = buffsize + NCCL_LL_BYTES + NCCL_LL128_BYTES
    P2P = _pow2_up(minimum(C, NCCL_MAX_CHANNELS))
    total = C * b3 * rings
    for intra_peers, ch, spans in p2p_groups:
        total = total + intra_peers * ch * b3 + spans * 2 * P2P * NCCL_SHARED_STEPS * NCCL_P2P_NET_CHUNK_BYTES
    return total


# DeepEP's buffers (deepseek-ai/DeepEP csrc/legacy/config.hpp Config, deep_ep/buffers/legacy.py get_dispatch_config;
# Megatron-LM megatron/core/transformer/moe/fused_a2a.py get_buffer sizes them for max(dispatch, combine)): 20 SMs,
# 10 channels; receive tokens per channel 256 for 8 ranks, 288 beyond (NVLink), 128 over RDMA; each token carries
# its hidden bytes (max(e, 2)*h, fused_a2a.py get_hidden_bytes), its source metadata (8 B), top-k indices and
# weights and scales (128*8 + 128*4 + 128*4 B); counters 4 B each.
DEEPEP_CHANNELS = 10


def _deepep_text(**_):
    return ("ch*R_nvl*(2*R_rdma + 3)*4 + ch*R_nvl*T_nvl*(H_b + 2056) + [ep > 8]*(ch*R_rdma*36*4 + 2*ch*R_rdma*128*"
            "(H_b + 2072)), R_nvl = min(ep, 8), R_rdma = max(ep/8, 1), H_b = max(e, 2)*h, ch = 10")


@formula("runtime/deepep", _deepep_text,
         Cite("deepep", "csrc/legacy/config.hpp Config::get_nvl_buffer_size_hint, get_rdma_buffer_size_hint "
                        "(@dd758caf45); NVIDIA/Megatron-LM megatron/core/transformer/moe/fused_a2a.py get_buffer"),
         assumes=("DeepEP's normal-mode buffers, sized as Megatron-LM asks for them: NVLink buffers by cudaMalloc and "
                  "IPC, RDMA buffers in the NVSHMEM heap; both outside PyTorch's allocator",))
def deepep_bytes(*, ep, h, e):
    """DeepEP's NVLink and RDMA buffers on one GPU of an expert-parallel group of ep ranks; its kernels
    reach at most 8 peers over NVLink (LEGACY_NUM_MAX_NVL_PEERS), the rest over RDMA, whatever the node."""
    r_nvl = minimum(ep, 8)
    r_rdma = maximum(ep // 8, 1)
    hb = maximum(e, 2) * h
    t_nvl = select(ep <= 8, 256, 288)
    nvl = DEEPEP_CHANNELS * r_nvl * (2 * r_rdma + 3) * 4 + DEEPEP_CHANNELS * r_nvl * t_nvl * (hb + 8 + 128 * 16)
    rdma = DEEPEP_CHANNELS * r_rdma * 36 * 4 + 2 * DEEPEP_CHANNELS * r_rdma * 128 * (hb + 8 + 128 * 16 + 16)
    return select(ep > 1, nvl + select(ep > 8, rdma, 0 * rdma), 0 * nvl)


@formula("runtime/grad_buckets",
         lambda *, zero, view, **_: ("2*min(B_bucket, g*psi)  (ZeRO-2: a bucket reduce-scattering while the next "
                                     "fills)" if zero == 2 else "0  (ZeRO-3: fsdp_buffers)" if zero >= 3 else
                                     "0  (gradients are the buckets' views)" if view else
                                     "g*psi  (DDP's buckets beside the gradients)"),
         Cite("pytorch-ddp", "torch/csrc/distributed/c10d/reducer.hpp kDefaultBucketBytesCap 25 MiB; "
                             "gradient_as_bucket_view (distributed.py)"))
def grad_buckets_bytes(*, psi, g, zero, view, bucket):
    """Gradient buckets beyond the gradients themselves. ZeRO-0/1: none when the gradients are
    views into the buckets (Megatron-LM's contiguous grad buffer, DDP gradient_as_bucket_view),
    else a second copy of every gradient (PyTorch DDP's default). ZeRO-2: the unsharded grads of
    the bucket being reduce-scattered and of the one filling. ZeRO-3: counted in fsdp_buffers."""
    full = ceil_div(g * psi, 1)
    return select(zero >= 3, 0, select(zero == 2, 2 * minimum(bucket, full), 0 if view else full))


def _fsdp_text(*, keep, moment="layer", acc=0, **_):
    unit = "T_head" if moment == "loss" else "T_layer"
    grad = (f"[g != w]*w*{unit}  (the unit's gradient in the weights' dtype before it is added into the unsharded "
            f"accumulator: accumulated_grads)" if acc else f"g*{unit}  (the unit's unsharded gradients)")
    if moment == "loss":
        return (f"{grad}; its weights stay gathered: gathered_weights" if keep else
                f"W_head + k*W_layer + {grad}  (the output unit kept gathered from its forward, k layers "
                f"prefetched)")
    if moment == "forward":
        return "0  (every layer stays gathered: gathered_weights)" if keep else \
            "(1 + k)*W_layer  (the computing layer and k prefetched)"
    return (f"{grad}; its weights stay gathered: gathered_weights" if keep else
            f"(1 + k)*W_layer + {grad}  (the computing and k prefetched layers gathered)")


FSDP_WRAP = Cite("torchtitan", "apply_fsdp: fully_shard on the embedding, each block and [norm, output], the last kept "
                               "gathered after forward; FSDP2's implicit forward and explicit backward prefetch")


@formula("runtime/fsdp_buffers", _fsdp_text, FSDP_WRAP,
         assumes=("ZeRO-3 gathers one unit per layer, one for the embedding and one for the final norm and output "
                  "layer (torchtitan's wrapping); the output unit stays gathered from its forward to its backward",
                  "W_layer, W_head: a unit's parameters as FSDP gathers them, in bytes; T_layer, T_head: its trained "
                  "parameters (w*P and P in full training; a frozen base: fitplan.memory.finetune.fsdp_units)"))
def fsdp_buffers_bytes(*, W_layer, W_head, T_layer, T_head, w, g, k, keep, moment="layer", acc=0):
    """ZeRO-3/FSDP all-gather and reduce-scatter buffers at one moment of the step. forward: the
    layer computing and k prefetched (W_layer bytes each, a layer's parameters as gathered).
    layer (a layer's backward): those and the unsharded gradients of the layer's T_layer trained
    parameters before their reduce-scatter. loss (the output layer's backward): the output unit,
    kept gathered since its forward, its unsharded gradients and k layers prefetched. keep:
    reshard_after_forward off, every unit already gathered (runtime/gathered_weights): only the
    unsharded gradients remain. acc: 1 where the gradients accumulate unsharded over the
    micro-batches (pipelined; runtime/accumulated_grads holds them): the unit's gradient is then
    only the one autograd makes in the weights' dtype before FSDP2 adds it into a wider
    accumulator (torch/distributed/fsdp/_fully_shard/_fsdp_param.py to_accumulated_grad_if_needed,
    accumulate_unsharded_grad_if_needed), none when the dtypes match."""
    gather = 1 - keep   # keep, acc: 1 or 0 (ints or the search's arrays)
    trained = T_head if moment == "loss" else T_layer
    grad = select(acc, select(g != w, ceil_div(w * trained, 1), 0 * trained), ceil_div(g * trained, 1))
    if moment == "forward":
        return gather * (1 + k) * W_layer
    if moment == "loss":
        return grad + gather * (W_head + k * W_layer)
    return grad + gather * (1 + k) * W_layer


@formula("runtime/fsdp_unit", "c*P  (a unit's P parameters at c bytes each)", FSDP_WRAP)
def fsdp_unit_bytes(*, c, P):
    return ceil_div(c * P, 1)


def fsdp_units(ev, *, w, P_layer, P_head) -> dict:
    """fsdp_buffers_bytes's units in full training: every parameter gathered at w bytes and
    trained."""
    return {"W_layer": ev(fsdp_unit_bytes, key="runtime/fsdp_layer_weights", c=w, P=P_layer),
            "W_head": ev(fsdp_unit_bytes, key="runtime/fsdp_head_weights", c=w, P=P_head),
            "T_layer": P_layer, "T_head": P_head}


def _layer_backward_text(*, kernel="eager", tied=0, **_):
    attn = ("2*e*a*s^2*b/(t*c)  (the probabilities' and scores' gradients)" if kernel == "eager" else
            "s*b*(e*(q + 2kv) + 4q)/(t*c)  (dQ, dK, dV and the fp32 dQ accumulator)")
    tied = " + w*V*h/t  (the tied output layer's weight gradient, waiting for the embedding's)" if tied else ""
    return f"2*e*s*b*h/([t if SP]*c) + max({attn}, 2n*e*s*b*f_w/(t*c)) + w*h*f_w/t{tied}"


@formula("runtime/layer_backward", _layer_backward_text,
         Cite("fitplan", "formulas.md#runtime (measured on CPU: tests/torch/test_runtime.py)"),
         assumes=("one layer's backward holds its input and output gradients and the wider of the attention's and "
                  "the MLP's gradients (2n f-wide tensors: the activation's gradients and an unfused elementwise "
                  "backward's temporaries); an upper bound on CPU measurements (fitplan validate)",))
def layer_backward_bytes(*, s, b, h, a, q, kv, f, n, e, t, c, sp, w=0, kernel="eager", k=0, rho=1, f_e=0, f_s=0,
                         V=0, tied=0):
    """The gradients one layer's backward holds at once, on top of what it stores: the layer's
    input and output gradients, and the wider of the attention's (eager: the probabilities' and
    the scores' gradients, a*s^2*b each; flash: dQ, dK, dV and FlashAttention-2's fp32 dQ
    accumulator) and the MLP's (2n f-wide tensors: the n gradients and as many temporaries of an
    unfused elementwise backward, as PyTorch's SiLU-times-up runs; MoE: the shared experts' and the
    routed copies'), and one weight's gradient before autograd adds it into .grad (w bytes, the
    layer's widest matrix, h*f/t). tied: a rank that holds both ends of tied embeddings keeps the
    output layer's weight gradient from the loss's backward until the embedding's adds to it
    (autograd accumulates a parameter's gradients before AccumulateGrad)."""
    edges = 2 * ceil_div(e * s * b * h, select(sp, t, 1) * c)
    if kernel == "flash":
        attn = ceil_div(s * b * (e * (q + 2 * kv) + 4 * q), t * c)
    else:
        attn = ceil_div(2 * e * a * s * s * b, t * c)
    width = f if k == 0 else f_s + k * rho * f_e
    mlp = ceil_div(2 * n * e * s * b * width, t * c)
    weight_grad = ceil_div(w * h * maximum(f if k == 0 else maximum(f_s, f_e), q), t)
    return edges + maximum(attn, mlp) + weight_grad + tied * ceil_div(w * V * h, t)


@formula("runtime/mamba_backward", "2*e*s*b*h/([t if SP]*c) + e*s*b*(W_in + 2d)/(t*c) + w*h*W_in/t",
         Cite("fitplan", "formulas.md#hybrid-models (mamba_ssm ssd_combined.py MambaSplitConv1dScanCombinedFn."
                         "backward: dzxbcdt, the scan's and the gate's output gradients)"),
         assumes=("a Mamba layer's backward holds its input and output gradients, in_proj's output gradient "
                  "(zxBCdt) and the gradients of the scan's and the gate's outputs, and in_proj's weight gradient; "
                  "an estimate in the manner of runtime/layer_backward, not measured",))
def mamba_backward_bytes(*, s, b, h, e, t, c, sp, W_in, d, w=0):
    """The gradients one Mamba layer's backward holds at once, on top of what it stores."""
    edges = 2 * ceil_div(e * s * b * h, select(sp, t, 1) * c)
    return edges + ceil_div(e * s * b * (W_in + 2 * d), t * c) + ceil_div(w * h * W_in, t)


def _logits_text(*, kernel, t=1, **_):
    if kernel == "linear":
        return "0  (a fused linear cross-entropy made the gradients in its forward; the backward scales them)"
    if kernel == "chunked":
        first = ("8*s*b*V/(k*t*c)  (torchtune's chunked loss: one chunk's nll_loss and log_softmax gradients at a "
                 "time)")
    elif kernel == "pytorch" and t > 1:
        first = ("12*s*b*V/(t*c)  (torch's loss_parallel on vocab-sharded logits: its backward's zeros, exp and "
                 "their sum beside the saved fp32 log-probabilities)")
    elif kernel == "pytorch":
        first = ("8*s*b*V/(t*c)  (F.cross_entropy: nll_loss's and log_softmax's fp32 gradients beside the saved "
                 "fp32 log-probabilities)")
    else:
        first = "[e < 4]*e*s*b*V/(t*c)  (Megatron-LM: the gradient in place of the saved softmax, cast to e bytes)"
    return (f"max({first}, w*V*h/t + e*s*b*h/c - (4 - e)*s*b*V/(t*c)  (then the output layer's weight and input "
            f"gradients beside the e-byte logits' gradient, the fp32 one freed))")


@formula("runtime/logits_grad", _logits_text,
         Cite("megatron-loss", "megatron/core/tensor_parallel/cross_entropy.py (in-place softmax and gradient); "
                               "torch log_softmax/nll_loss backward (derivatives.yaml); torch "
                               "distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward; torchtune "
                               "modules/loss/ce_chunked_output_loss.py; Liger-Kernel ops/fused_linear_cross_entropy.py"),
         assumes=("the loss's saved logits (activations/output) are held; this is what its backward adds on the "
                  "stage with the output layer, once per micro-batch",))
def logits_grad_bytes(*, s, b, V, e, t, c, kernel, h=0, w=0, k=8):
    """What the loss's backward adds to the saved logits (activations/output), at the larger
    of its two moments. First the log-softmax: pytorch's F.cross_entropy on fp32 logits makes
    nll_loss's fp32 gradient and log_softmax's, 8*s*b*V/(t*c); on vocab-sharded logits (t > 1) it
    runs as torch's loss_parallel, whose backward holds zeros_like(x), exp(x) and their sum at once,
    12*s*b*V/(t*c) (measured on CPU: tests/torch/test_runtime.py); torchtune's chunked loss the same
    for one of its k chunks at a time; Megatron-LM's fused loss computes the gradient in place of the
    saved softmax and autograd casts it to the e-byte logits' dtype, e*s*b*V/(t*c) (none in fp32).
    Then the output layer's backward: its weight's gradient (w*V*h/t, before autograd adds it into
    .grad) and its input's, beside the e-byte logits' gradient, the fp32 logits and their gradient
    freed: (e - 4)*s*b*V/(t*c) against the saved fp32 logits. A fused linear cross-entropy (Liger)
    made both in its forward (activations/output holds them): its backward adds nothing."""
    head = ceil_div(w * V * h, t) + ceil_div(e * s * b * h, c) + ceil_div((e - 4) * s * b * V, t * c)
    if kernel == "linear":
        return 0 * s
    if kernel == "chunked":
        return maximum(ceil_div(8 * s * b * V, k * t * c), head)
    if kernel == "pytorch":
        return maximum(ceil_div(select(t > 1, 12, 8) * s * b * V, t * c), head)
    return maximum(select(e < 4, ceil_div(e * s * b * V, t * c), 0 * s), head)


@formula("runtime/p2p", "2*e*s*b*h/([t if SP]*c)  (the received and the sent activation gradient)",
         Cite("narayanan", "Sec. 4.1 (scatter/gather: b*s*h/t per send)"))
def p2p_bytes(*, e, s, b, h, t, c, sp, pp):
    """Pipeline ranks receive the gradient of their output and send the gradient of their input
    during a backward (the forward's received input is the stored layer input)."""
    return select(pp > 1, 2 * ceil_div(e * s * b * h, select(sp, t, 1) * c), 0 * b)


@formula("runtime/optimizer_step",
         lambda *, impl, **_: ("v*psi_opt + [g < m]*m*psi_opt  (foreach's sqrt of the second moment; the "
                               "gradients cast to the master's dtype)" if impl == "foreach" else
                               "0  (fused: the multi-tensor kernel reads the gradients as they are)"),
         Cite("pytorch-runtime", "torch/optim/adam.py _multi_tensor_adam (exp_avg_sq_sqrt = _foreach_sqrt: a "
                                 "tensor list the size of the second moment); torch.optim docs (foreach: ~sizeof(params) "
                                 "more peak memory than for-loop)"),
         assumes=("the gradient-norm clip keeps one scalar per tensor (negligible)",
                  "fused optimizers (apex/Transformer Engine FusedAdam, torch fused=True) keep no temporaries and "
                  "read 16-bit gradients for fp32 master weights directly"))
def optimizer_step_bytes(*, psi_opt, v, g, m, impl):
    """The optimizer step's temporaries over the parameters this rank updates (psi_opt, the
    shard under ZeRO). foreach: a list shaped like the second moment (v bytes per parameter,
    torch's exp_avg_sq_sqrt), and, where the master weights are wider than the gradients, the
    gradients cast to the master's dtype (torch.optim needs them in the parameters' dtype).
    fused: none."""
    if impl != "foreach":
        return 0 * psi_opt
    return ceil_div(v * psi_opt, 1) + select(g < m, ceil_div(m * psi_opt, 1), 0 * psi_opt)


@formula("runtime/allocator", "ceil(phi*D) + streams*22 MiB  (D: the moment's activations and buffers)",
         Cite("pytorch-runtime", "c10/cuda/CUDACachingAllocator.cpp (expandable segments: 20 MiB large and 2 MiB "
                                 "small pages per stream); phi: GMLake, Guo et al. 2024 (15% average fragmentation "
                                 "of the default allocator over eight LLMs)"),
         assumes=("phi = 0 (--fragmentation) models expandable_segments, as torchtitan launches "
                  "(PYTORCH_ALLOC_CONF=expandable_segments:True); PyTorch's default allocator fragments more",))
def allocator_bytes(*, phi, D, streams):
    """The caching allocator holds more than the live tensors: at most a page of each pool per
    stream at the top of its expandable segment, and phi of the moment's transient bytes when
    segments do not expand (freed blocks too small for the next request)."""
    frag = ceil_div(phi * D, 1)
    return (frag if is_array(frag) else int(frag)) + streams * PAGE_BYTES


def lce_chunk_rows(*, T, V, h):
    """Liger's fused linear cross-entropy chunk: next_pow2(ceil(T/ceil(V/h))) rows, a logits chunk about the
    size of the T x h input (Liger-Kernel ops/fused_linear_cross_entropy.py fused_linear_cross_entropy_forward)."""
    rows = ceil_div(T, ceil_div(V, h))
    if is_array(rows):
        import numpy as np
        return (2 ** np.ceil(np.log2(np.maximum(rows, 1)))).astype(np.int64)
    return 1 << (max(int(rows), 1) - 1).bit_length()


def loss_forward_bytes(*, s, b, V, e, t, c, kernel, h=0, w=2, k=8):
    """The loss forward's logits beyond what activations/output counts (the timeline's forward events
    only; the backward's logits_grad is never smaller). pytorch: the e-byte logits and, when e < 4,
    their fp32 copy while log_softmax writes its output; fused: the e-byte logits while their fp32
    copy becomes the softmax in place (none in fp32); chunked: every chunk's e-byte logits (the model
    returns them all) and one chunk's fp32 copy; linear (Liger): one chunk's logits (the gradient
    written in place) and, on its default path, the chunk's weight-gradient product in the weights'
    dtype and its fp32 copy, w*V*h/t + 4*V*h/t."""
    if kernel == "linear":
        rows = lce_chunk_rows(T=ceil_div(s * b, c), V=ceil_div(V, t), h=h)
        return ceil_div(e * rows * V, t) + ceil_div((w + 4) * V * h, t)
    if kernel == "chunked":
        return ceil_div(e * s * b * V, t * c) + ceil_div(4 * s * b * V, k * t * c)
    if kernel == "pytorch":
        return ceil_div((e + select(e < 4, 4, 0)) * s * b * V, t * c)
    return select(e < 4, ceil_div(e * s * b * V, t * c), 0 * s)
