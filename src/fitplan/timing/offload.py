"""The time offload adds to a step: traffic over the GPU's host link (GpuSpec.host_bytes_per_s,
per GPU and direction), NVMe reads and writes (ClusterSpec.nvme_bytes_per_s, per node), and
the CPU optimizer step (ClusterSpec.cpu_optimizer_params_per_s, per node).

What moves, per GPU (bytes from fitplan.memory.offload's host parts):
  optimizer  each micro-batch's reduced gradient shard goes down during the backward (at the
             gradients' precision g; the CPU accumulates it at g_h), hidden behind the
             backward except what exceeds it [zero-offload Sec. 4.1]; after the last one the
             CPU steps its shard, P_opt parameters, with the node's CPUs shared by its
             processes; the updated 16-bit shard comes back up, exposed.
  params     the weights' shard comes up for each forward and (resharded after forward) each
             backward, prefetched behind that pass's compute [zero-infinity Sec. 6]; on NVMe it
             is read at the node's NVMe rate shared by its processes, and the updated shard is
             written back after the step.
  activations every micro-batch's stored bytes go down in its forward and come back in its
             backward, each hidden behind that pass's compute except the excess.
Nothing here overlaps the CPU step with the next forward (DeepSpeed's one-step delayed update
is not modelled).
"""
from dataclasses import replace

from fitplan.arith import maximum, minimum
from fitplan.explain import RAW, SECONDS, formula
from fitplan.memory.offload import gradient_precision, offload_of
from fitplan.sources import Cite
from fitplan.specs.parallel import Offload

OFFLOAD_TIME = Cite("fitplan", "formulas.md#offload")


@formula("time/cpu_optimizer", "P_opt*procs/R_cpu  (the node's CPUs step every process's shard)",
         Cite("zero-offload", "Table 3: CPU-Adam, 1B parameters in 0.22 s"), SECONDS)
def cpu_step_s(*, P_opt, procs, R_cpu):
    return P_opt * procs / R_cpu


@formula("time/host_transfer", "S/B", Cite("pcie", "x16 link, per direction (GpuSpec.host_bytes_per_s)"), SECONDS)
def transfer_s(*, S, B):
    return S / B


@formula("time/overlapped_excess", "count*max(0, T_xfer - T_window)", OFFLOAD_TIME, SECONDS,
         ("a transfer runs alongside the compute it feeds; only what outlasts it is exposed",))
def excess_s(*, T_xfer, T_window, count):
    return count * maximum(T_xfer - T_window, 0)


@formula("time/offload", "T_grads + T_cpu + T_update + T_params + T_acts", OFFLOAD_TIME, SECONDS)
def offload_total_s(*, T_grads, T_cpu, T_update, T_params, T_acts):
    return T_grads + T_cpu + T_update + T_params + T_acts


def offload_s(ev, setup, c, *, m, T_f, T_b, stage):
    """Seconds offload adds to one step on the pacing stage's GPU (0 without offload)."""
    from fitplan.memory.breakdown import stage_memory   # the host bytes, as the memory model places them
    o = offload_of(c)
    zero = 0 * T_f
    if o is Offload.NONE:
        return ev(offload_total_s, T_grads=zero, T_cpu=zero, T_update=zero, T_params=zero, T_acts=zero)
    cluster, recipe = setup.cluster, setup.training.recipe
    B = cluster.gpu.host_bytes_per_s
    procs = minimum(cluster.gpus_per_node, cluster.num_gpus)
    parts = stage_memory(RAW, setup, c, stage=stage)
    T_grads = T_cpu = T_update = T_params = T_acts = zero
    if o.optimizer:
        g_h = gradient_precision(recipe)
        P_opt = parts["host/grads"] / g_h if g_h else zero
        down = ev(transfer_s, key="time/gradients_to_host", S=P_opt * recipe.grads_bytes, B=B)
        T_grads = ev(excess_s, key="time/gradients_exposed", T_xfer=down, T_window=T_b, count=m)
        T_cpu = ev(cpu_step_s, P_opt=P_opt, procs=procs, R_cpu=cluster.cpu_optimizer_params_per_s)
        if not o.params:   # the updated working weights return to the GPU
            T_update = ev(transfer_s, key="time/weights_to_gpu", S=P_opt * recipe.weights_bytes, B=B)
    if o.params:
        shard = parts["nvme/weights"] if o is Offload.PARAMS_NVME else parts["host/weights"]
        rate = minimum(B, cluster.nvme_bytes_per_s / procs) if o is Offload.PARAMS_NVME else B
        fetch = ev(transfer_s, key="time/weights_fetch", S=shard, B=rate)
        passes = 2 if c.reshard_after_forward else 1
        T_params = ev(excess_s, key="time/weights_fetch_exposed_forward", T_xfer=fetch, T_window=T_f, count=m)
        if passes == 2:
            T_params = T_params + ev(excess_s, key="time/weights_fetch_exposed_backward", T_xfer=fetch,
                                     T_window=T_b, count=m)
        if o is Offload.PARAMS_NVME:
            T_update = ev(transfer_s, key="time/weights_to_nvme", S=shard, B=cluster.nvme_bytes_per_s / procs)
    if o.activations:
        stored = stage_memory(RAW, setup, replace(c, offload=Offload.NONE), stage=stage)["activations/layers"]
        each = ev(transfer_s, key="time/activations_transfer", S=stored, B=B)
        T_acts = (ev(excess_s, key="time/activations_exposed_forward", T_xfer=each, T_window=T_f, count=m)
                  + ev(excess_s, key="time/activations_exposed_backward", T_xfer=each, T_window=T_b, count=m))
    return ev(offload_total_s, T_grads=T_grads, T_cpu=T_cpu, T_update=T_update, T_params=T_params, T_acts=T_acts)
