"""Single-process measurements: parameter counts on the meta device, and the bytes saved
for backward, per layer, by unique storage (parameters excluded).

Method (docs/engines.md#activations-saved-for-backward): a
torch.autograd.graph.saved_tensors_hooks pack hook sees every tensor autograd keeps; it
records the tensor's untyped storage once per data pointer, skipping parameter storages,
into the bucket of the layer whose forward is running (forward pre/post hooks on each
block) or "outside" (embedding, final norm, head, loss).
Storages of saved tensors stay alive until backward, so a data pointer cannot be reused
within one measurement. A DTensor is measured by its local shard.
"""
from collections import defaultdict
from dataclasses import dataclass

import torch

from fitplan.specs import ModelSpec, Recompute
from fitplan.validate.reference_model import DEFAULT_DROPOUT, build, lm_loss

OUTSIDE = "outside"
DTYPES = {2: torch.bfloat16, 4: torch.float32}


def count_params(model: ModelSpec) -> int:
    """Parameters of the reference model, built on the meta device (no memory); tied
    weights are yielded once by parameters()."""
    return sum(p.numel() for p in build(model, device="meta").parameters())


def local_tensor(t):
    """The shard a rank holds: a DTensor's local tensor, any other tensor itself."""
    inner = getattr(t, "_local_tensor", None)
    return t if inner is None else inner


def storage_key(t) -> tuple[int, int]:
    st = local_tensor(t).untyped_storage()
    return st.data_ptr(), st.nbytes()


class SavedTensorRecorder:
    """Pack hook that buckets unique saved storages by the layer running when saved."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.current = OUTSIDE
        self.buckets: dict = defaultdict(dict)

    def pack(self, t):
        ptr, nbytes = storage_key(t)
        if ptr and ptr not in self.exclude:
            local = local_tensor(t)
            self.buckets[self.current].setdefault(ptr, (nbytes, tuple(local.shape), str(local.dtype)))
        return t

    @staticmethod
    def unpack(t):
        return t

    def bytes(self, bucket) -> int:
        return sum(v[0] for v in self.buckets.get(bucket, {}).values())

    def watch(self, modules) -> list:
        """Attribute saves made inside modules[i].forward to bucket i; returns the handles."""
        handles = []
        for i, module in enumerate(modules):
            handles.append(module.register_forward_pre_hook(lambda m, a, i=i: setattr(self, "current", i)))
            handles.append(module.register_forward_hook(lambda m, a, o: setattr(self, "current", OUTSIDE)))
        return handles


def param_storages(module) -> set[int]:
    return {storage_key(p)[0] for p in module.parameters()}


@dataclass(frozen=True, slots=True)
class SavedActivations:
    per_layer: tuple[int, ...]     # bytes saved by each block's forward
    outside: int                   # embedding, final norm, head, loss
    layer0_tensors: tuple          # (bytes, shape, dtype) of layer 0's storages, for explanations
    expert_tokens: tuple = ()      # per layer: tokens routed to each expert (() for a dense layer)


def saved_activations(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int,
                      recompute: Recompute, dropout_p: float = DEFAULT_DROPOUT, device: str = "cpu",
                      seed: int = 0) -> SavedActivations:
    """One forward (and the loss) in training mode under the recorder, then a backward to
    check the graph is usable. Weights are in the activation dtype (no autocast: autocast
    saves bf16 weight copies, docs/engines.md#activations-saved-for-backward)."""
    torch.manual_seed(seed)
    net = build(model, dropout_p=dropout_p, recompute=recompute, dtype=DTYPES[act_bytes], device=device)
    net.train()
    ids = torch.randint(0, model.vocab_size, (micro_batch, seq_len), device=device)
    targets = torch.randint(0, model.vocab_size, (micro_batch, seq_len), device=device)
    recorder = SavedTensorRecorder(param_storages(net))
    handles = recorder.watch(net.layers)
    try:
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
            loss = lm_loss(net(ids), targets)
    finally:
        for handle in handles:
            handle.remove()
    loss.backward()
    per_layer = tuple(recorder.bytes(i) for i in range(model.num_layers))
    layer0 = tuple(sorted(recorder.buckets.get(0, {}).values()))
    loads = tuple(getattr(layer.mlp, "tokens_per_expert", ()) for layer in net.layers)
    return SavedActivations(per_layer=per_layer, outside=recorder.bytes(OUTSIDE), layer0_tensors=layer0,
                            expert_tokens=loads)


def count_flops(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute,
                dropout_p: float = DEFAULT_DROPOUT, seed: int = 0) -> int:
    """torch.utils.flop_counter.FlopCounterMode over one forward + backward (fp32, CPU):
    matmul FLOPs (mm, addmm, bmm: 2xyz), recomputed forwards included."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(seed)
    net = build(model, dropout_p=dropout_p, recompute=recompute).train()
    ids = torch.randint(0, model.vocab_size, (micro_batch, seq_len))
    targets = torch.randint(0, model.vocab_size, (micro_batch, seq_len))
    with FlopCounterMode(display=False) as counter:
        lm_loss(net(ids), targets).backward()
    return counter.get_total_flops()


def cuda_peak(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute,
              dropout_p: float = DEFAULT_DROPOUT, steps: int = 2, seed: int = 0) -> dict:
    """fp32 weights and activations, torch.optim.Adam: torch.cuda.max_memory_allocated()
    and the reserved peak over `steps` steps (the first has no optimizer state yet), plus
    the model-state bytes after the last step."""
    torch.manual_seed(seed)
    net = build(model, dropout_p=dropout_p, recompute=recompute, dtype=torch.float32, device="cuda")
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    ids = torch.randint(0, model.vocab_size, (micro_batch, seq_len), device="cuda")
    targets = torch.randint(0, model.vocab_size, (micro_batch, seq_len), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        lm_loss(net(ids), targets).backward()
        opt.step()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    return {"max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": stats.get("reserved_bytes.all.peak", 0),
            "params": sum(p.numel() * p.element_size() for p in net.parameters()),
            "grads": sum(p.grad.numel() * p.grad.element_size() for p in net.parameters() if p.grad is not None),
            "optimizer": sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                             if torch.is_tensor(v) and v.is_cuda),   # Adam's step counters stay on the CPU
            "device_name": torch.cuda.get_device_name()}


def cuda_step(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute, optimizer_impl: str = "fused",
              dropout_p: float = DEFAULT_DROPOUT, seed: int = 0, device: str = "cuda") -> dict:
    """One measured training step after a warm-up one (fp32 weights and activations, AdamW; the
    gradients zeroed, not freed): the peak tensor bytes the step allocates and the allocator
    reserves, and what the process holds outside the allocator (the CUDA context and loaded
    kernels: used device memory minus reserved). device "cpu" is the stand-in the tests run: live
    tensor bytes (fitplan.validate.peak) for both peaks, no context."""
    from fitplan.validate.peak import measure_step
    if device == "cpu":
        got = measure_step(model, seq_len=seq_len, micro_batch=micro_batch, act_bytes=4, recompute=recompute,
                           optimizer_impl=optimizer_impl, dropout_p=dropout_p, seed=seed)
        peak = got.states + max(got.peaks.values())
        return {"max_allocated": peak, "max_reserved": peak, "outside_allocator": 0, "device_name": "cpu stand-in",
                "capability": None, "expandable_segments": True}
    import os
    torch.manual_seed(seed)
    net = build(model, dropout_p=dropout_p, recompute=recompute, dtype=torch.float32, device="cuda").train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, **{optimizer_impl: True})
    ids = torch.randint(0, model.vocab_size, (micro_batch, seq_len), device="cuda")
    targets = torch.randint(0, model.vocab_size, (micro_batch, seq_len), device="cuda")
    lm_loss(net(ids), targets).backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    lm_loss(net(ids), targets).backward()
    opt.step()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
    return {"max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.memory_stats().get("reserved_bytes.all.peak", 0),
            "outside_allocator": total - free - torch.cuda.memory_reserved(),
            "device_name": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
            "total_memory": total, "expandable_segments": "expandable_segments:True" in conf}
