"""Offload: which model states and activations leave the GPU, and what host memory and NVMe
hold instead (ParallelConfig.offload, fitplan.specs.parallel.Offload).

  optimizer         ZeRO-Offload [zero-offload Sec. 4]: the master weights, the optimizer
                    moments and the gradients live in host memory and the CPU runs the
                    optimizer step; the GPU keeps the 16-bit working weights. The host's
                    gradient is at the optimizer's precision, the master weights' (fp32)
                    when there are any: DeepSpeed's CPU-Adam steps fp32 parameters with fp32
                    gradients (stage_1_and_2.py: single_partition_of_fp32_groups[i].grad).
                    Gradients reach the host bucket by bucket as the backward reduces them,
                    so none stays on the GPU. Host copies are sharded as the optimizer state
                    is (ZeRO-1 and up: 1/N_d each).
  optimizer+params  ZeRO-3 with offload_param cpu [zero-infinity Sec. 5]: the working weights
                    too; each layer's shard is fetched for its forward and its backward.
  params-nvme       the same with the weights on NVMe (ZeRO-Infinity's infinity offload
                    engine), the optimizer state in host memory.
  activations       every stored activation goes to host memory in the forward and comes back
                    for the backward (torch.autograd.graph.save_on_cpu); one layer's worth is
                    on the GPU at a time, in transit.

Host memory per node is the busiest GPU's host bytes times the processes per node,
min(G, N): an upper bound where stages differ. Pinned staging buffers are not counted.
"""
from fitplan.arith import ceil_div, minimum
from fitplan.explain import formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Offload

ZO = Cite("zero-offload", "Sec. 4.1 (fp16 weights on the GPU; gradients, fp32 weights and moments on the CPU)")
ZI = Cite("zero-infinity", "Sec. 5 (offload_param: weights in CPU memory or on NVMe)")
ACT = Cite("torch-offload", "save_on_cpu: saved tensors to host memory in forward, back in backward")

HOST_STATES = ("host/weights", "host/grads", "host/master", "host/optimizer")
HOST_PARTS = HOST_STATES + ("host/activations",)
NVME_PARTS = ("nvme/weights",)


@formula("host/moved", lambda *, what, **_: f"{what}  (moved from the GPU)", ZO)
def moved_bytes(*, gpu_bytes, what):
    """A state component the offload moves to host memory (or NVMe) as it is."""
    return gpu_bytes


@formula("host/weights", lambda *, what, **_: f"{what}  (the ZeRO-3 shard, moved from the GPU)", ZI)
def moved_weights_bytes(*, gpu_bytes, what):
    return gpu_bytes


@formula("states/offloaded", lambda *, where, **_: f"0  (offloaded: {where})", ZO)
def offloaded_bytes(*, like, where):
    """What an offloaded state component leaves on the GPU: nothing beyond the transient
    buckets the runtime stages it through."""
    return 0 * like


@formula("host/grads", lambda *, zero, **_: "g_h*psi/N_d" if zero >= 1 else "g_h*psi",
         Cite("zero-offload", "Sec. 4.1; DeepSpeed stage_1_and_2.py (fp32 gradient partitions on the CPU)"))
def host_grads_bytes(*, psi, g_h, n_d, zero, psi_e=0, n_ed=1):
    """The gradients the CPU optimizer reads, at its precision g_h, sharded as the optimizer
    state (dense over N_d, routed experts over N_ed)."""
    d = 1 + (zero >= 1) * (n_d - 1)
    de = 1 + (zero >= 1) * (n_ed - 1)
    return ceil_div(psi * g_h, d) + ceil_div(psi_e * g_h, de)


@formula("activations/layers", "min(A_layer, A_stage)  (one layer in transit; the rest in host memory)", ACT,
         assumes=("activation offload keeps one layer's stored tensors on the GPU while they are copied",))
def in_transit_bytes(*, A_layer, A_stage):
    return minimum(A_layer, A_stage)


@formula("host/activations", "A_stage + A_in_flight  (every stored activation of the stage)", ACT)
def host_activation_bytes(*, A_stage, A_in_flight):
    return A_stage + A_in_flight


@formula("host/per_node", "host_per_gpu*min(G, N)  (the busiest GPU's, for each process on the node)",
         Cite("fitplan", "formulas.md#offload"))
def per_node_bytes(*, per_gpu, G, N):
    return per_gpu * minimum(G, N)


def offload_of(c) -> Offload:
    """A configuration's offload (the search's grids and older callers may not name one)."""
    return getattr(c, "offload", Offload.NONE)


def gradient_precision(recipe) -> int | float:
    """The bytes of the gradient the CPU optimizer reads: the master weights' when there are
    any (fp32 Adam on fp32 master weights), else the gradients' own."""
    return recipe.master_bytes if recipe.master_bytes else recipe.grads_bytes


def place_states(ev, out: dict, offload: Offload, *, trained: dict) -> None:
    """Move the state components `offload` sends away from the GPU: out's states/* keys become
    0 and host/* (or nvme/*) keys hold them. trained: the host_grads_bytes inputs (the trained
    parameters on this GPU and their sharding)."""
    if not offload.optimizer:
        return
    like = out["states/grads"]
    out["host/grads"] = ev(host_grads_bytes, **trained)
    out["states/grads"] = ev(offloaded_bytes, key="states/grads", like=like, where="host/grads")
    for key in ("states/master", "states/optimizer"):
        host = "host/" + key.split("/")[1]
        out[host] = ev(moved_bytes, key=host, gpu_bytes=out[key], what=key)
        out[key] = ev(offloaded_bytes, key=key, like=like, where=host)
    if offload.params:
        where = "nvme/weights" if offload is Offload.PARAMS_NVME else "host/weights"
        out[where] = ev(moved_weights_bytes, key=where, gpu_bytes=out["states/weights"], what="states/weights")
        out["states/weights"] = ev(offloaded_bytes, key="states/weights", like=like, where=where)


def host_total(parts: dict):
    return sum(parts.get(k, 0) for k in HOST_PARTS)


def nvme_total(parts: dict):
    return sum(parts.get(k, 0) for k in NVME_PARTS)
