"""Single-process measurements: parameter counts on the meta device, and the bytes saved
for backward, per layer, by unique storage (parameters excluded).

Method (docs/engines.md#activations-saved-for-backward): a
torch.autograd.graph.saved_tensors_hooks pack hook sees every tensor autograd keeps; it
records the tensor's untyped storage once (by storage identity), skipping parameter
storages, into the bucket of the layer whose forward is running (forward pre/post hooks on
each block) or "outside" (embedding, final norm, head, loss). A storage counts the bytes
it holds when the forward has ended: Megatron-style norm recompute frees a saved norm
output's storage (resize_(0)) during the forward and refills it in backward. Tensors a
selective checkpoint caches (op SAC's MUST_SAVE outputs) bypass the hooks; they are added
from the checkpoint's cache (reference_model.sac_saved_tensors).
A DTensor is measured by its local shard.
"""
from collections import defaultdict

import torch

from fitplan.record import record
from fitplan.specs import ModelSpec, Recompute
from fitplan.validate.reference_model import DEFAULT_DROPOUT, build, lm_loss, sac_saved_tensors

OUTSIDE = "outside"
DTYPES = {2: torch.bfloat16, 4: torch.float32}


def count_params(model: ModelSpec) -> int:
    """Parameters of the reference model, built on the meta device (no memory); tied
    weights are yielded once by parameters()."""
    return sum(p.numel() for p in _build(model, device="meta").parameters())


def _build(model: ModelSpec, *, recompute: Recompute = Recompute.NONE, **kw):
    """The reference model: reference_model's, or a hybrid model's (reference_hybrid; no recompute)."""
    if model.hybrid:
        from fitplan.validate.reference_hybrid import build_hybrid
        assert recompute is Recompute.NONE, recompute
        return build_hybrid(model, **kw)
    return build(model, recompute=recompute, **kw)


def local_tensor(t):
    """The shard a rank holds: a DTensor's local tensor, any other tensor itself."""
    inner = getattr(t, "_local_tensor", None)
    return t if inner is None else inner


def storage_key(t) -> tuple[int, int]:
    st = local_tensor(t).untyped_storage()
    return st.data_ptr(), st.nbytes()


def storage_id(t) -> int:
    """The identity of the storage behind t (its c10::StorageImpl): the same for every view
    of it, and stable when the storage is resized, unlike its data pointer."""
    return local_tensor(t).untyped_storage()._cdata


class SavedTensorRecorder:
    """Pack hook that buckets unique saved storages by the layer running when saved."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.current = OUTSIDE
        self.buckets: dict = defaultdict(dict)

    def add(self, t, bucket=None):
        local = local_tensor(t)
        key = storage_id(local)
        if key not in self.exclude:
            self.buckets[self.current if bucket is None else bucket].setdefault(
                key, (local.untyped_storage(), tuple(local.shape), str(local.dtype)))

    def pack(self, t):
        self.add(t)
        return t

    @staticmethod
    def unpack(t):
        return t

    def bytes(self, bucket) -> int:
        """The bytes the bucket's storages hold now: call it between forward and backward."""
        return sum(v[0].nbytes() for v in self.buckets.get(bucket, {}).values())

    def tensors(self, bucket) -> tuple:
        """(bytes, shape, dtype) of the bucket's storages, sorted, for explanations."""
        return tuple(sorted((v[0].nbytes(), v[1], v[2]) for v in self.buckets.get(bucket, {}).values()))

    def watch(self, modules) -> list:
        """Attribute saves made inside modules[i].forward to bucket i; returns the handles."""
        handles = []
        for i, module in enumerate(modules):
            handles.append(module.register_forward_pre_hook(lambda m, a, i=i: setattr(self, "current", i)))
            handles.append(module.register_forward_hook(lambda m, a, o: setattr(self, "current", OUTSIDE)))
        return handles


class _Held:
    """What LiveSavedRecorder packs: the saved tensor, and a release when autograd drops it
    (after the backward of the node that saved it, or when its graph is freed)."""
    __slots__ = ("t", "key", "recorder")

    def __init__(self, t, key, recorder):
        self.t, self.key, self.recorder = t, key, recorder

    def __del__(self):
        self.recorder.release(self.key)


class LiveSavedRecorder:
    """Saved-for-backward bytes alive at each moment (unique storages, parameters
    excluded) and their peak: a pack hook that counts a storage in when the first tensor on
    it is saved and out when autograd has released the last one."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.refs: dict = {}
        self.live = 0
        self.peak = 0
        self.trace: list = []    # live bytes after each storage enters or leaves

    def pack(self, t):
        local = local_tensor(t)
        key = storage_id(local)
        if key in self.exclude:
            return t
        entry = self.refs.get(key)
        if entry is None:
            entry = self.refs[key] = [0, local.untyped_storage().nbytes()]
            self.live += entry[1]
            self.peak = max(self.peak, self.live)
            self.trace.append(self.live)
        entry[0] += 1
        return _Held(t, key, self)

    @staticmethod
    def unpack(held):
        return held.t if isinstance(held, _Held) else held

    def release(self, key) -> None:
        entry = self.refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            del self.refs[key]
            self.live -= entry[1]
            self.trace.append(self.live)


def param_storages(module) -> set[int]:
    return {storage_id(p) for p in module.parameters()}


def add_sac_saved(recorder: SavedTensorRecorder, blocks) -> None:
    """Put each block's selective-checkpoint cache (op SAC) into its bucket."""
    for i, block in enumerate(blocks):
        for t in sac_saved_tensors(getattr(block, "sac_storage", None)):
            recorder.add(t, bucket=i)


@record(slots=True)
class SavedActivations:
    per_layer: tuple[int, ...]     # bytes saved by each block's forward
    outside: int                   # embedding, final norm, head, loss
    layer0_tensors: tuple          # (bytes, shape, dtype) of layer 0's storages, for explanations
    expert_tokens: tuple = ()      # per layer: tokens routed to each expert (() for a dense layer)


def saved_activations(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int,
                      recompute: Recompute, dropout_p: float = DEFAULT_DROPOUT, device: str = "cpu",
                      seed: int = 0, lora: tuple[int, str] | None = None) -> SavedActivations:
    """One forward (and the loss) in training mode under the recorder, then a backward to
    check the graph is usable. Weights are in the activation dtype (no autocast: autocast
    saves bf16 weight copies, docs/engines.md#activations-saved-for-backward). lora: (rank,
    targets) freezes the model and adds adapters (fitplan.validate.reference_lora)."""
    torch.manual_seed(seed)
    net = _build(model, dropout_p=dropout_p, recompute=recompute, dtype=DTYPES[act_bytes], device=device)
    if lora is not None:
        from fitplan.validate.reference_lora import add_lora
        add_lora(net, rank=lora[0], targets=lora[1])
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
    add_sac_saved(recorder, net.layers)
    per_layer = tuple(recorder.bytes(i) for i in range(model.num_layers))
    layer0 = recorder.tensors(0)
    outside = recorder.bytes(OUTSIDE)
    loss.backward()
    loads = tuple(getattr(getattr(layer, "mlp", None), "tokens_per_expert", ()) for layer in net.layers)
    return SavedActivations(per_layer=per_layer, outside=outside, layer0_tensors=layer0, expert_tokens=loads)


def count_flops(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute,
                dropout_p: float = DEFAULT_DROPOUT, seed: int = 0, lora: tuple[int, str] | None = None) -> int:
    """torch.utils.flop_counter.FlopCounterMode over one forward + backward (fp32, CPU):
    matmul FLOPs (mm, addmm, bmm: 2xyz), recomputed forwards included. SDPA's CPU flash
    kernel (op recompute's attention) is counted with torch's own SDPA formulas, which
    FlopCounterMode registers for the CUDA kernels only: 4*b*a*s^2*d forward (the two GEMMs,
    the causal mask not discounted, like the eager bmm's), twice that backward. lora: (rank,
    targets) for a frozen base with adapters."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    cpu_sdpa = {aten._scaled_dot_product_flash_attention_for_cpu:
                lambda q, k, v, *_, out_shape=None, **__: fc.sdpa_flop_count(q, k, v),
                aten._scaled_dot_product_flash_attention_for_cpu_backward:
                lambda grad, q, k, v, *_, out_shape=None, **__: fc.sdpa_backward_flop_count(grad, q, k, v)}
    torch.manual_seed(seed)
    net = _build(model, dropout_p=dropout_p, recompute=recompute).train()
    if lora is not None:
        from fitplan.validate.reference_lora import add_lora
        add_lora(net, rank=lora[0], targets=lora[1])
    ids = torch.randint(0, model.vocab_size, (micro_batch, seq_len))
    targets = torch.randint(0, model.vocab_size, (micro_batch, seq_len))
    with fc.FlopCounterMode(display=False, custom_mapping=cpu_sdpa) as counter:
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
    import gc
    import os
    # what an earlier measurement in this process left cached stays reserved, and reset_peak_memory_stats starts
    # the reserved peak from it: on an H200 the selective and full recompute steps measured after the one without
    # recompute read its 16.77 GB as their own (2026-12-04, docs/measurements). Free that cache first.
    gc.collect()
    torch.cuda.empty_cache()
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
