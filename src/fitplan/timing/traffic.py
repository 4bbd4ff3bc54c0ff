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
      volume, which costs the same in the alpha-beta model.
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
      All of it shares the dp x cp group's link, so it hides behind one compute window.

Overlap (assumes, per Term): tp and pp traffic is on the critical path (exposed), as in
Megatron-LM without communication overlap; cp's ring hides behind the attention core it
feeds (exposed only where it is longer); dp follows DpOverlap, a named parameter of the
step model: BACKWARD (default) hides the traffic issued during the step behind the
compute it can overlap (dp_window_s) except the last DDP_BUCKET_BYTES bucket, and leaves
ZeRO-1/2's post-step weight all-gather exposed; NONE exposes all of it, as in
[korthikanti] Sec. 6.3.
"""
from enum import StrEnum

from fitplan.arith import ceil_div, maximum, minimum, select
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


class DpOverlap(StrEnum):
    """How data-parallel traffic meets compute."""
    NONE = "none"          # after the backward, fully exposed [korthikanti Sec. 6.3]
    BACKWARD = "backward"  # bucketed, overlapped with the backward (ZeRO-3: prefetched in forward and
                           # backward) except the last bucket; ZeRO-1/2's all-gather after the step stays exposed


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
         EXPOSED + ("the first and last stages send one way only; counted as two-way (the middle stages)",))
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


@formula("comm/dp_grad_rs", lambda *, zero, **_: f"{'m' if zero >= 2 else '1'}  ({_ZT[int(zero)]})", ZERO7, COUNT)
def dp_grad_reduce_scatters(*, zero, m):
    """Reduce-scatters of psi*g gradients per step (an all-reduce's first half without ZeRO)."""
    return select(zero >= 2, m, 1 + 0 * m)


@formula("comm/dp_grad_ag", lambda *, zero, **_: "1" if zero == 0 else "0", ZERO7, COUNT)
def dp_grad_all_gathers(*, zero):
    """All-gathers of gradients: the second half of the all-reduce, without ZeRO only."""
    return select(zero == 0, 1, 0)


@formula("comm/dp_param_ag", lambda *, zero, reshard=True, **_: {0: "0", 1: "1", 2: "1",
                                                                  3: "2*m" if reshard else "m"}[int(zero)],
         ZERO7, COUNT, ("ZeRO-3 gathers each layer's weights in forward and again in backward; without "
                        "resharding after forward (FSDP reshard_after_forward=False) only in forward",))
def dp_param_all_gathers(*, zero, m, reshard=True):
    return select(zero == 3, (2 if reshard else 1) * m, select(zero >= 1, 1 + 0 * m, 0 * m))


@formula("time/dp_window", lambda *, zero, overlap, **_: "0" if overlap == "none" else
         {3: "m*(T_f + T_b)", 2: "m*T_b"}.get(int(zero), "T_b"), OVERLAP, SECONDS,
         ("gradients are reduced during the backward that produces them: the last micro-batch's without "
          "ZeRO-2/3, every micro-batch's with it; ZeRO-3 also prefetches weights during forward and backward",))
def dp_window_s(*, zero, m, T_f, T_b, overlap):
    """Compute time the data-parallel traffic can hide behind (one link, shared by all of it)."""
    window = select(zero == 3, m * (T_f + T_b), select(zero == 2, m * T_b, T_b))
    return window if overlap == DpOverlap.BACKWARD else 0 * window


@formula("comm/dp_overlapped_s", lambda *, zero, **_: "T_grad + T_param" if zero == 3 else "T_grad", OVERLAP,
         SECONDS)
def dp_overlapped_s(*, T_grad, T_param, zero):
    """Data-parallel traffic issued during the step: gradients, and ZeRO-3's weight gathers."""
    return T_grad + select(zero == 3, T_param, 0 * T_param)


@formula("time/dp_after_step", lambda *, zero, **_: "T_param" if zero in (1, 2) else "0", OVERLAP, SECONDS,
         ("ZeRO-1/2 all-gather the updated weights after the optimizer step, exposed (Megatron-LM without "
          "--overlap-param-gather)",))
def dp_after_step_s(*, T_param, zero):
    return select((zero == 1) | (zero == 2), T_param, 0 * T_param)


@formula("comm/dp_tail", "min(S, bucket)", OVERLAP, BYTES,
         ("the last gradient bucket is reduced after the backward ends, so it cannot overlap",))
def dp_tail_bytes(*, S, bucket):
    return minimum(S, bucket)


@formula("time/exposed", "max(T_comm - T_window, min(T_tail, T_comm))", OVERLAP, SECONDS,
         ("communication hides behind compute up to T_window; T_tail (a last bucket) never does",))
def exposed_s(*, T_comm, T_window, T_tail):
    return maximum(T_comm - T_window, minimum(T_tail, T_comm))
