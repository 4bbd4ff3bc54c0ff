"""What each parallel axis sends per step, and how much of it hides behind compute.

Symbols: b micro-batch, s sequence length, h hidden size, kv key/value width, e bytes
per activation element, t, c, p tensor-, context-, pipeline-parallel degrees, v model
chunks per pipeline rank, m micro-batches per step per pipeline, L layers held by this
stage (L_model/p), psi parameters on this GPU before ZeRO sharding, w, g bytes per
weight / gradient (the recipe's).

Counts are per GPU per step (all m micro-batches):
  tp  m*L*(4 + 2[full]) all-reduces of b*s*h*e/c: 2 forward, 2 backward per layer, 2 more
      when full recompute reruns the forward [korthikanti Sec. 3, 4.2.2; narayanan Sec. 3.2].
      Sequence parallel turns each into a reduce-scatter plus an all-gather of the same
      volume, each its own NCCL call (fitplan.timing.comm.collective_s).
  pp  2*m*v sends of b*s*h*e/(t*c): one activation forward, one gradient backward per
      micro-batch and model chunk [narayanan Sec. 2.2, 4.1, scatter/gather optimisation].
  cp  ring attention: per layer and micro-batch, (c-1) steps per pass of this rank's K and
      V, 2*b*s*kv*e/(t*c); one pass forward, two backward (K/V, then dK/dV), one more for
      any recompute, which reruns the attention core.
  dp  over n = dp*c ranks [zero Sec. 7]: no ZeRO, one gradient all-reduce (= RS + AG) of
      psi*g; ZeRO-1 one reduce-scatter of psi*g and one all-gather of the updated psi*w;
      ZeRO-2 reduces each micro-batch's gradients (the full gradient is never kept), so m
      reduce-scatters; ZeRO-3 gathers the weights before each micro-batch's forward and
      again in its backward, 2m all-gathers. With m = 1 ZeRO-3 moves 3 psi, 1.5x DP.
      Messages: ZeRO-0/1/2 in buckets of 25 MiB (PyTorch DDP's bucket_cap_mb); ZeRO-3 one
      all-gather and one reduce-scatter per layer and micro-batch (FSDP's unit, a transformer
      block), each paying its latency.

Overlap (docs/formulas.md#overlap), each a ParallelConfig flag with its framework's default; the
exposed part of each axis's traffic is what the compute available to hide it leaves over:
  tp  --tp-comm-overlap (off, Megatron-LM's and PyTorch async TP's default): each layer's
      attention and MLP exchanges hide behind that block's linear GEMMs (twice as long backward).
  cp  --cp-comm-overlap (on): the ring hides behind the attention core it feeds.
  ep  --overlap-moe-expert-parallel-comm (on under DualPipe, DeepSeek-V3 Sec. 3.2.1; off
      otherwise, Megatron-LM's default): each MoE layer's all-to-alls hide behind another
      micro-batch's forward and backward of a layer.
  dp  --overlap-grad-reduce (on: PyTorch DDP and FSDP; Megatron-LM's flag defaults off): gradient
      buckets are reduced during the backward that produces them, all but the last bucket;
      --overlap-param-gather (on with ZeRO-3, as FSDP and DeepSpeed prefetch; off with ZeRO-1/2,
      as Megatron-LM): ZeRO-3 gathers layer i+1 during layer i, ZeRO-1/2 gather the updated
      weights during the next step's forward, else after the optimizer step.
  pp  with virtual stages (the interleaved schedule, whose sends Megatron-Core posts asynchronously)
      the sends hide behind the micro-batches' passes but for the pipeline's fill and drain;
      with one chunk per rank they block, on the critical path (exposed).
"""
from fitplan.arith import ceil_div, is_array, maximum, minimum, select
from fitplan.explain import BYTES, COUNT, FLOPS, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute
from fitplan.units import MiB

TP = Cite("korthikanti", "Sec. 3 and 4.2.2 (f, g operators)")
PP = Cite("narayanan", "Sec. 2.2 and 4.1")
CP = Cite("fitplan", "formulas.md#cp (ring attention, Megatron-LM context parallel)")
ZERO7 = Cite("zero", "Sec. 7")
OVERLAP = Cite("fitplan", "formulas.md#overlap")
EXPOSED = ("exposed: blocking collective on the critical path, no overlap with compute",)


# PyTorch DistributedDataParallel's bucket_cap_mb default: the tail that cannot overlap.
DDP_BUCKET_BYTES = 25 * MiB


@formula("comm/tp_message", "b*s*h*e/c", TP, BYTES)
def tp_message_bytes(*, b, s, h, e, c):
    return ceil_div(b * s * h * e, c)


@formula("comm/tp_collectives", lambda *, sp, recompute, **_: "m*L*" + ("(4 + 2)" if recompute == "full" else "4")
         + (" reduce-scatter + all-gather pairs" if sp else " all-reduces"), TP, COUNT, EXPOSED)
def tp_collectives(*, m, L, recompute, sp):
    """All-reduces per step. Sequence parallel (sp) changes each into an RS + AG pair of
    the same volume and alpha-beta cost, so it changes the text, not the count."""
    return m * L * (6 if recompute == Recompute.FULL else 4)


@formula("comm/pp_message", "b*s*h*e/(t*c)", PP, BYTES)
def pp_message_bytes(*, b, s, h, e, t, c):
    return ceil_div(b * s * h * e, t * c)


@formula("comm/pp_sends", "2*m*v if p > 1 else 0", PP, COUNT,
         ("blocking with one chunk per rank; behind the passes with virtual stages (time/pp_window)",
          "the first and last stages send one way only; counted as two-way (the middle stages)"))
def pp_sends(*, m, v, p):
    return select(p > 1, 2 * m * v, 0 * m)


@formula("comm/attention_passes", lambda *, recompute, **_: "3 + 1" if recompute != "none" else "3", CP, COUNT)
def attention_core_passes(*, recompute):
    """Passes over the attention core per layer and micro-batch: forward 1, backward 2
    (its FLOPs and ring attention's K/V-then-dK/dV traffic), a rerun for any recompute."""
    return 3 if recompute == Recompute.NONE else 4


@formula("comm/cp_message", "2*b*s*kv*e/(t*c)", CP, BYTES)
def cp_message_bytes(*, b, s, kv, e, t, c):
    return ceil_div(2 * b * s * kv * e, t * c)


@formula("comm/cp_steps", "m*L*(c-1)*passes", CP, COUNT)
def cp_ring_steps(*, m, L, c, passes):
    return m * L * (c - 1) * passes


@formula("flops/cp_window", "m*L*passes*F_core", CP, FLOPS,
         ("ring attention overlaps each K/V transfer with the attention core on the block in hand",))
def cp_window_flops(*, m, L, passes, F_core):
    return m * L * passes * F_core


_ZT = {0: "no ZeRO", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


PIPELINED_SYNC = Cite("fitplan", "formulas.md#runtime (torch.distributed.pipelining stage.py "
                                 "backward_maybe_with_nosync: gradient sync and resharding only after the last "
                                 "micro-batch)")


@formula("comm/dp_grad_rs", lambda *, zero, piped=0, **_: (
    f"{'1  (pipelined: once, after the last micro-batch)' if piped else 'm'}" if zero >= 2 else "1")
    + f"  ({_ZT[int(zero)]})", ZERO7, COUNT)
def dp_grad_reduce_scatters(*, zero, m, piped=0):
    """Reduce-scatters of psi*g gradients per step (an all-reduce's first half without ZeRO):
    ZeRO-2/3 once per micro-batch, or once per step with pipeline stages (piped = 1), whose
    stages accumulate unsharded gradients (runtime/accumulated_grads)."""
    per_mb = m - piped * (m - 1)
    return select(zero >= 2, per_mb, 1 + 0 * m)


@formula("comm/dp_grad_ag", lambda *, zero, **_: "1" if zero == 0 else "0", ZERO7, COUNT)
def dp_grad_all_gathers(*, zero):
    """All-gathers of gradients: the second half of the all-reduce, without ZeRO only."""
    return select(zero == 0, 1, 0)


def _param_ag_text(*, zero, reshard=True, piped=0, **_):
    if int(zero) != 3:
        return {0: "0", 1: "1", 2: "1"}[int(zero)]
    if piped:
        return "1 + m  (pipelined: the first forward, then each backward)" if reshard else "1  (pipelined: kept)"
    return "2*m" if reshard else "m"


@formula("comm/dp_param_ag", _param_ag_text, ZERO7, COUNT,
         ("ZeRO-3 gathers each layer's weights in forward and again in backward; without resharding after forward "
          "(FSDP reshard_after_forward=False) only in forward; with pipeline stages the weights stay gathered after "
          "each backward until the step's last, so forwards after the first gather nothing",))
def dp_param_all_gathers(*, zero, m, reshard=True, piped=0):
    plain = (2 if reshard else 1) * m
    pipelined = (1 + m) if reshard else 1 + 0 * m
    return select(zero == 3, plain + piped * (pipelined - plain), select(zero >= 1, 1 + 0 * m, 0 * m))


@formula("time/exposed", "max(T_comm - T_window, min(T_tail, T_comm))", OVERLAP, SECONDS,
         ("communication hides behind compute up to T_window; T_tail (a last bucket) never does",))
def exposed_s(*, T_comm, T_window, T_tail):
    return maximum(T_comm - T_window, minimum(T_tail, T_comm))


# Megatron-Core's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py@d98e8a64dd,
# backward_step_helper_postprocess and forward_step_helper_preprocess): a model chunk's gradient reduction is
# launched once the last micro-batch's backward of that chunk has run, r slots later on pipeline rank r (the
# launches aligned across the pipeline, align_grad_reduce); the next chunk's weight gather as the first
# micro-batch's forward of a chunk begins. Micro-batches run in groups of p per chunk (model_parallel_config.py:
# microbatch_group_size_per_vp_stage defaults to the pipeline size), so after chunk j's last backward come the
# backwards of chunks j-1 .. 0 over the last group. Chunk 0's reduction, launched after the last backward, hides
# behind nothing: the tail is a chunk's share of the traffic.
@formula("time/dp_overlap_window", "T*max(1, 1 + (v - 1)*min(p, m) - r)/v",
         Cite("megatron-schedules", "interleaved 1F1B: each model chunk's gradients reduced after its last "
                                    "micro-batch's backward (r slots later on pipeline rank r), its weights gathered "
                                    "before its first forward"),
         SECONDS,
         ("the compute a data-parallel collective can hide behind: one micro-batch's pass T over the stage's "
          "layers (its buckets go while it runs); with v > 1 model chunks per rank, each chunk's collectives also "
          "behind the later chunks' passes over the last (first) group of min(p, m) micro-batches, less the r "
          "slots pipeline rank r waits before it launches a reduction (r = 0 for the gathers)",))
def dp_overlap_window_s(*, T, v, p, m, r=0):
    return T * maximum(1 + (v - 1) * minimum(p, m) - select(v > 1, r, 0 * r), 1) / v


# Megatron-Core's interleaved 1F1B posts each send and receive between pipeline stages asynchronously and waits
# for it only where the next model chunk needs it (overlap_p2p_comm, megatron/core/pipeline_parallel/schedules.py
# @d98e8a64dd forward_backward_pipelining_with_interleaving); Megatron-Bridge and NeMo turn it on whenever
# virtual stages are used and batch the blocking sends otherwise (megatron/bridge/training/comm_overlap.py
# _get_model_comm_overlap_cfgs: overlap_p2p_comm = vp > 1, batch_p2p_comm = vp == 1). What no schedule hides is
# the chain of sends that fills the pipeline and drains it: p - 1 hops each way.
PP_OVERLAP = Cite("megatron-schedules", "interleaved 1F1B with overlap_p2p_comm")


def _pp_window_text(*, v, **_):
    if is_array(v):
        return "m*(T_f + T_b) if v > 1 else 0"
    return ("m*(T_f + T_b)  (interleaved: sends overlap the passes)" if v > 1 else
            "0  (one chunk per rank: blocking batched sends)")


@formula("time/pp_window", _pp_window_text, PP_OVERLAP, SECONDS)
def pp_window_s(*, m, v, T_f, T_b):
    return select(v > 1, m * (T_f + T_b), 0 * T_f)


@formula("time/pp_tail", "T_comm*(p - 1)/(m*v) if v > 1 else 0",
         PP_OVERLAP, SECONDS,
         ("of the 2*m*v sends a rank makes, the 2*(p - 1) that fill and drain the pipeline wait on each other",))
def pp_tail_s(*, T_comm, m, v, p):
    return select(v > 1, T_comm * (p - 1) / maximum(m * v, 1), 0 * T_comm)


@formula("time/bucketed_exposed", lambda *, overlap, **_: "max(T_comm - T_window, T_comm/buckets)" if overlap
         else "T_comm  (no overlap)", OVERLAP, SECONDS,
         ("buckets are reduced (or gathered) while the compute that produces (or needs) the next ones runs; the "
          "last bucket cannot overlap",))
def bucketed_exposed_s(*, T_comm, T_window, buckets, overlap):
    """The exposed part of traffic sent in `buckets` equal messages behind a T_window of compute."""
    if not overlap:
        return T_comm + 0 * T_window
    return maximum(T_comm - T_window, T_comm / maximum(buckets, 1))


@formula("time/layer_pipeline_exposed", "L*x + h_first + h_last + (L-1)*max(0, h_first + h_last - W)", OVERLAP,
         SECONDS, ("per-layer traffic: what is prefetched (h_first: the next layer's) or reduced later (h_last: the "
                   "previous layer's) hides behind one layer's compute W, except the first gather and the last "
                   "reduction; x is traffic that does not overlap",))
def layer_pipeline_exposed_s(*, L, x, h_first, h_last, W):
    """One micro-batch's pass over L layers whose per-layer traffic overlaps the neighbouring
    layer's compute (FSDP's prefetch and its reduce-scatter during the next layer's backward)."""
    return L * x + h_first + h_last + maximum(L - 1, 0) * maximum(h_first + h_last - W, 0)


@formula("time/tp_layer_exposed", lambda *, overlap, **_: (
    "(1 + full)*(max(0, a - W_attn) + max(0, a - W_mlp)) + max(0, a - 2*W_attn) + max(0, a - 2*W_mlp)"
    if overlap else "(4 + 2*full)*a/2  (no overlap)"), Cite("megatron-overlap", "tp_comm_overlap"), SECONDS,
    ("each block's two exchanges (all-gather in, reduce-scatter out) hide behind that block's linear GEMMs "
     "(Transformer Engine's userbuffers; backward GEMMs take twice as long); a = one block's exchange",))
def tp_layer_exposed_s(*, a, W_attn, W_mlp, full, overlap):
    """Exposed tensor-parallel seconds of one layer and micro-batch: forward (and its rerun under
    full recompute) and backward, each with an attention and an MLP exchange of a seconds. overlap: a bool, or
    one per candidate where the search's box holds both SP settings (overlap needs SP)."""
    plain = lambda: (2 + 2 * full + 2) * a + 0 * W_attn
    if not is_array(overlap) and not overlap:
        return plain()
    fwd = maximum(a - W_attn, 0) + maximum(a - W_mlp, 0)
    bwd = maximum(a - 2 * W_attn, 0) + maximum(a - 2 * W_mlp, 0)
    hidden = (1 + full) * fwd + bwd
    return select(overlap, hidden, plain()) if is_array(overlap) else hidden
