"""Every part of a per-GPU memory breakdown and of a step time, declared once: its key,
the label the reports and the page show, its colour in charts, and its group.

fitplan.memory.breakdown.PARTS and fitplan.timing.step.PARTS are this table's keys, in
its order: the order rows appear in tables and segments stack in charts. States are blues
and activations warm colours, so the two groups read as blocks in a stacked bar. Pure data.
"""
from fitplan.record import record

STATES, ACTIVATIONS, RUNTIME, RESERVE, TIME = "states", "activations", "runtime", "reserve", "time"
HOST, NVME = "host", "nvme"   # per GPU, held off the GPU under offload (fitplan.memory.offload)


@record(slots=True)
class Part:
    key: str        # slash path, as in a Term: "states/weights", "time/bubble"
    label: str
    color: str      # "#rrggbb"
    group: str      # STATES, ACTIVATIONS, RUNTIME (buffers the runtime holds), RESERVE, TIME, HOST or NVME


TABLE = (
    Part("states/weights", "weights", "#08519c", STATES),
    Part("states/grads", "grads", "#3182bd", STATES),
    Part("states/master", "master weights", "#6baed6", STATES),
    Part("states/optimizer", "optimizer", "#bdd7e7", STATES),
    Part("activations/layers", "activations", "#a63603", ACTIVATIONS),
    Part("activations/pipeline_in_flight", "pipeline extras (in flight)", "#e6550d", ACTIVATIONS),
    Part("activations/embedding", "embedding extras", "#fd8d3c", ACTIVATIONS),
    Part("activations/output", "output-layer extras", "#fdae6b", ACTIVATIONS),
    Part("activations/recompute_workspace", "recompute workspace", "#969696", ACTIVATIONS),
    Part("activations/moe_buffers", "MoE all-to-all buffers", "#54278f", ACTIVATIONS),
    Part("runtime/gathered_weights", "ZeRO-3 weights kept from forward to backward", "#74a9cf", RUNTIME),
    Part("runtime/accumulated_grads", "ZeRO-2/3 gradients accumulated unsharded over micro-batches", "#a6bddb",
         RUNTIME),
    Part("runtime/fp8_weight_cache", "fp8 weight copies and transposes (Transformer Engine)", "#2b8cbe", RUNTIME),
    Part("runtime/dequant_workspace", "dequantized weight matrix (QLoRA/int8 base)", "#6a51a3", RUNTIME),
    Part("runtime/cuda_context", "CUDA context (outside PyTorch's allocator)", "#3b3b3b", RUNTIME),
    Part("runtime/blas_workspace", "cuBLAS workspace", "#525252", RUNTIME),
    Part("runtime/nccl", "NCCL communicator buffers (outside PyTorch's allocator)", "#737373", RUNTIME),
    Part("runtime/deepep", "DeepEP dispatch buffers (outside PyTorch's allocator)", "#9e9ac8", RUNTIME),
    Part("runtime/grad_buckets", "gradient buckets", "#66c2a4", RUNTIME),
    Part("runtime/fsdp_buffers", "ZeRO-3/FSDP gathered layers and unsharded gradients", "#2ca25f", RUNTIME),
    Part("runtime/layer_backward", "one layer's gradients during its backward", "#fc9272", RUNTIME),
    Part("runtime/logits_grad", "the loss's logit gradients", "#de2d26", RUNTIME),
    Part("runtime/p2p", "pipeline send/receive buffers", "#fdd0a2", RUNTIME),
    Part("runtime/optimizer_step", "optimizer-step temporaries", "#756bb1", RUNTIME),
    Part("runtime/allocator", "caching-allocator pages and fragmentation", "#8c6d31", RUNTIME),
    Part("reserve", "reserve (capacity minus usable)", "#cfcfcf", RESERVE),
    Part("time/compute", "compute (recompute included)", "#2e75b6", TIME),
    Part("time/tp_exposed", "exposed tp traffic", "#c55a11", TIME),
    Part("time/ep_exposed", "exposed ep traffic", "#7b3294", TIME),
    Part("time/cp_exposed", "exposed cp traffic", "#8a6d1f", TIME),
    Part("time/pp_exposed", "exposed pp traffic", "#f0a868", TIME),
    Part("time/bubble", "the pipeline bubble", "#b3261e", TIME),
    Part("time/dp_exposed", "exposed dp traffic", "#8fbc5a", TIME),
    Part("time/dp_after_step", "the dp weight all-gather after the step", "#4e8a2e", TIME),
    Part("time/optimizer", "the optimizer step (memory-bound)", "#bcbddc", TIME),
    Part("time/offload", "offload: host-link traffic and the CPU optimizer step, exposed", "#7f7f7f", TIME),
    Part("time/overlap_slowdown", "compute slowed by the communication it hides", "#9ecae1", TIME),
    Part("time/host_overhead", "host time per layer pass (launches, framework)", "#d9d9d9", TIME),
    Part("time/straggler", "waiting for the slowest GPU", "#d4b9da", TIME),
    Part("host/weights", "weights in host memory", "#1b7837", HOST),
    Part("host/grads", "gradients in host memory", "#5aae61", HOST),
    Part("host/master", "master weights in host memory", "#a6dba0", HOST),
    Part("host/optimizer", "optimizer moments in host memory", "#d9f0d3", HOST),
    Part("host/activations", "activations in host memory", "#c2a5cf", HOST),
    Part("nvme/weights", "weights on NVMe", "#252525", NVME),
)
BY_KEY = {p.key: p for p in TABLE}


def part_keys(*groups: str) -> tuple[str, ...]:
    """The keys of the parts in these groups, in table order."""
    return tuple(p.key for p in TABLE if p.group in groups)


def label(key: str) -> str:
    return BY_KEY[key].label


def color(key: str) -> str:
    return BY_KEY[key].color


def payload() -> list[dict]:
    """The table as JSON-ready objects, for the page (GET /api/presets, key "parts")."""
    return [{"key": p.key, "label": p.label, "color": p.color, "group": p.group} for p in TABLE]
