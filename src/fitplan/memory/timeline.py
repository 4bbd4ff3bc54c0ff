"""The peak over one training step, and the memory timeline of one pipeline rank.

A GPU does not hold every term at once. Over a step, each term lives for a phase
(docs/formulas.md#peak):

  always    model states, the CUDA context, the cuBLAS workspace, NCCL buffers, gradient
            buckets, Transformer Engine's fp8 weight copies
  train     the ZeRO-3 weights kept from forward to backward, and ZeRO-2/3's unsharded gradients
            accumulated over a pipeline's micro-batches (freed for the optimizer step)
  stored    the activations stored for backward; they grow with each forward of a micro-batch
            in flight and shrink with each backward
  loss      the loss's logit gradients and FSDP's output unit: the backward's first moment on
            the rank with the output layer
  layer     one layer's backward: its gradients, the recompute workspace, MoE all-to-all and
            pipeline buffers, FSDP's gathered units and unsharded gradients, a quantized base's
            dequantized weight (QLoRA); the micro-batch's logits are freed by then
  step      the optimizer step's temporaries; every activation is freed

The stored activations are largest at a rank's first backward (its most micro-batches in
flight: fitplan.memory.activations.chunks_in_flight), so the peak is the largest of three
moments: that backward's loss, that backward's layers, and the optimizer step. Each moment's
bytes add the caching allocator's share (runtime/allocator). `moments` is that closed form
(ints or the search's arrays); fitplan.memory.events lays out every forward and backward of the
schedule for the one configuration a report draws.
"""

from fitplan.arith import is_array, maximum, total
from fitplan.explain import RAW, formula, once
from fitplan.memory import runtime as RT
from fitplan.record import record
from fitplan.sources import Cite

STATE_KEYS = ("states/weights", "states/grads", "states/master", "states/optimizer")
ALWAYS = STATE_KEYS + ("runtime/cuda_context", "runtime/blas_workspace", "runtime/nccl", "runtime/deepep", "runtime/grad_buckets",
                       "runtime/fp8_weight_cache")
TRAIN = ("runtime/gathered_weights", "runtime/accumulated_grads")
STORED = ("activations/layers", "activations/pipeline_in_flight", "activations/embedding", "activations/output")
LOSS = ("runtime/logits_grad",)
LAYER = ("activations/recompute_workspace", "runtime/layer_backward", "activations/moe_buffers", "runtime/p2p",
         "runtime/fsdp_buffers", "runtime/dequant_workspace")
STEP = ("runtime/optimizer_step",)
OUTSIDE_ALLOCATOR = ("runtime/cuda_context", "runtime/nccl", "runtime/deepep")   # not in torch.cuda.max_memory_reserved
# the moments of the closed form, in the order they happen
LOSS_MOMENT, LAYER_MOMENT, STEP_MOMENT = "loss", "layer", "step"
MOMENTS = (LOSS_MOMENT, LAYER_MOMENT, STEP_MOMENT)
# the aux values stage_memory passes beside the parts (fitplan.memory.breakdown)
OUTPUT_ONE = "aux/output_one"           # one micro-batch's activations/output, freed after its loss backward
FSDP_FORWARD = "aux/fsdp_forward"       # runtime/fsdp_buffers in a forward (no gradients yet)
FSDP_LOSS = "aux/fsdp_loss"             # runtime/fsdp_buffers in the output layer's backward
LOSS_FORWARD = "aux/loss_forward"       # the loss forward's logits beyond activations/output
STREAMS = "aux/streams"                 # CUDA streams that allocate (the allocator's pages)


def _held(parts: dict, moment: str) -> dict:
    """The terms a moment holds, by key (without the allocator)."""
    held = {k: parts[k] for k in ALWAYS}
    if moment == STEP_MOMENT:
        held.update({k: parts[k] for k in STEP})
        return held
    held.update({k: parts[k] for k in TRAIN + STORED})
    if moment == LOSS_MOMENT:
        held.update({k: parts[k] for k in LOSS})
        held["runtime/fsdp_buffers"] = parts[FSDP_LOSS]
    else:
        held["activations/output"] = parts["activations/output"] - parts[OUTPUT_ONE]
        held.update({k: parts[k] for k in LAYER})
    return held


def reserved_bytes(held: dict):
    """What torch.cuda.max_memory_reserved shows at a moment: everything the caching allocator has mapped, i.e. the
    moment's bytes less what lives outside it (the CUDA context, NCCL's and DeepEP's buffers; a paged optimizer's
    managed pages are host/* parts, never here)."""
    return sum(v for k, v in held.items() if k not in OUTSIDE_ALLOCATOR)


def allocated_bytes(held: dict):
    """What torch.cuda.max_memory_allocated shows at a moment: the tensors, without the allocator's cached and
    fragmented pages (runtime/allocator)."""
    return reserved_bytes(held) - held.get("runtime/allocator", 0)


def transient_bytes(held: dict):
    """What the allocator churns at a moment: everything but the persistent terms (states,
    buffers allocated once) and the memory outside the allocator."""
    return sum(v for k, v in held.items() if k not in ALWAYS)


def moments(parts: dict, *, phi) -> dict:
    """Moment -> {key: bytes}, the allocator included; ints or arrays."""
    out = {}
    for moment in MOMENTS:
        held = _held(parts, moment)
        held["runtime/allocator"] = RT.allocator_bytes(phi=phi, D=transient_bytes(held), streams=parts[STREAMS])
        out[moment] = held
    return out


def peak_bytes(parts: dict, *, phi, ev=RAW, over_ranks=None):
    """The step's peak on this rank: the largest moment's bytes (the search's path). The same sums
    as `moments`, grouped by what changes them: the stored activations with the loss's logit
    gradients, or with a layer's backward buffers (no ZeRO stage changes these: with the search's
    Memo as ev they are computed once per recompute mode, not once per ZeRO stage), and the ZeRO
    stage's states and buffers, added last. The allocator's share (runtime/allocator) is each
    moment's; at phi = 0 it is the streams' pages alone, the same at every moment, so it is added
    with the always-held terms to each moment's ZeRO-stage terms. over_ranks: where the search
    stacks its candidate ranks on a leading axis (fitplan.memory.breakdown.busiest_totals), a
    function taking two addends of one moment's bytes to the most of their sum over that axis. The
    most over the moments and the most over the ranks commute, so each moment is reduced first and
    the moments are compared on arrays without the ranks axis: the full-box comparisons were a sixth
    of a Llama 3.1 405B search. A moment's two addends are its activations (no ZeRO axis) and its
    ZeRO stage's terms (no micro-batch axis): handed over apart, their sum is formed one rank at a
    time instead of over the whole box."""
    over = over_ranks or (lambda a, b=0: a + b)
    stored = ev(stored_bytes, **{_KW[k]: parts[k] for k in STORED})
    step = parts["runtime/optimizer_step"]
    streams = parts[STREAMS]
    # at phi = 0 what every moment holds joins the loss's and the layer's ZeRO terms before they meet the
    # activations: on the search's box those terms have no micro-batch axis, so one sum spanning the box fewer
    no_fragmentation = not is_array(phi) and phi == 0

    def zero_side():
        train, always = total(parts[k] for k in TRAIN), total(parts[k] for k in ALWAYS)
        base = total((always, RT.allocator_bytes(phi=0, D=0, streams=streams))) if no_fragmentation else 0
        return (always, total((train, parts[FSDP_LOSS], base)), total((train, parts["runtime/fsdp_buffers"], base)),
                over(step, base) if no_fragmentation else None)
    # the ZeRO stage's side of the moments, which no recompute mode changes: the search's screens (one
    # per recompute mode) hand over the same arrays for it (fitplan.memory.breakdown's once), so they form it once
    always, loss_zero, layer_zero, step_most = once(
        ev, zero_side, lambda: ("peak/zero_side", phi, over_ranks is None, *(parts[k] for k in ZERO_SIDE)))
    loss = (ev(plus_bytes, a=stored, b=parts["runtime/logits_grad"]), loss_zero)
    layer = (ev(layer_base_bytes, stored=stored, output_one=parts[OUTPUT_ONE],
                **{_KW[k]: parts[k] for k in LAYER if k != "runtime/fsdp_buffers"}), layer_zero)
    if no_fragmentation:
        return maximum(maximum(over(*loss), over(*layer)), step_most)
    loss, layer = loss[0] + loss[1], layer[0] + layer[1]
    return maximum(maximum(over(always + loss + RT.allocator_bytes(phi=phi, D=loss, streams=streams)),
                           over(always + layer + RT.allocator_bytes(phi=phi, D=layer, streams=streams))),
                   over(always + step + RT.allocator_bytes(phi=phi, D=step, streams=streams)))


ZERO_SIDE = ALWAYS + TRAIN + (FSDP_LOSS, "runtime/fsdp_buffers", "runtime/optimizer_step", STREAMS)
_KW = {**dict(zip(STORED, ("layers", "in_flight", "embedding", "output"))),
       **dict(zip(LAYER, ("workspace", "backward", "moe", "p2p", "fsdp", "dequant")))}


@formula("aux/stored", "sum of the stored activations (activations/layers, pipeline_in_flight, embedding, output)",
         Cite("fitplan", "formulas.md#peak"))
def stored_bytes(*, layers, in_flight, embedding, output):
    return total((layers, in_flight, embedding, output))


@formula("aux/layer_base", "stored - output_one + workspace + backward + moe + p2p + dequant  (a layer's backward "
                           "but for the ZeRO stage's buffers)", Cite("fitplan", "formulas.md#peak"))
def layer_base_bytes(*, stored, output_one, workspace, backward, moe, p2p, dequant):
    return total((stored, workspace, backward, moe, p2p, dequant)) - output_one


@formula("aux/sum", "a + b", Cite("fitplan", "formulas.md#peak"))
def plus_bytes(*, a, b):
    return a + b


@record(slots=True)
class Peak:
    bytes: int
    moment: str          # LOSS_MOMENT, LAYER_MOMENT or STEP_MOMENT
    phase: str           # "backward of micro-batch 1 (loss)", "backward of micro-batch 1", "optimizer step"
    held: dict           # key -> bytes at that moment (sums to bytes)


PHASES = {LOSS_MOMENT: "backward of micro-batch 1 (loss)", LAYER_MOMENT: "backward of micro-batch 1",
          STEP_MOMENT: "optimizer step"}


def peak(parts: dict, *, phi) -> Peak:
    """The peak of one configuration's rank (ints), with the moment and what it holds; the
    first of equal moments in step order."""
    assert not any(is_array(v) for v in parts.values())
    best = None
    for moment, held in moments(parts, phi=phi).items():
        total = int(sum(held.values()))
        if best is None or total > best.bytes:
            best = Peak(total, moment, PHASES[moment], {k: int(v) for k, v in held.items()})
    return best
