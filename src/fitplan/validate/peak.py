"""Live tensor bytes over a training step, measured on CPU (or read from CUDA's counters).

LiveBytes is a TorchDispatchMode that sees every tensor an operator returns, keeps a weak
reference to its storage (keyed by the storage itself, so FSDP's storage resizes count) and,
after each operator, sums the bytes of the storages still alive: the CPU stand-in for
torch.cuda.max_memory_allocated, without the allocator's rounding. The step is split into
phases by hooks (forward, loss forward, loss backward until the logits' gradient exists,
layers backward, optimizer step), and each phase's highest count is kept.

Imports torch: only fitplan.validate's runner and distributed workers use it.
"""
import time
import weakref
from dataclasses import field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fitplan.record import record
from fitplan.specs import ModelSpec, Recompute
from fitplan.validate.reference_model import DEFAULT_DROPOUT, build, lm_loss

PHASES = ("forward", "loss forward", "loss backward", "layers backward", "embedding backward", "optimizer step")
# "loss backward" runs from the loss to the output layer's input gradient: the log-softmax and its
# cast, and the output layer's backward (its weight's gradient); "layers backward" the rest


class LiveBytes(TorchDispatchMode):
    """Bytes of the live storages it has seen, after every operator; the highest per phase."""

    def __init__(self):
        super().__init__()
        self.storages: dict = {}
        self.phase = "start"
        self.peaks: dict = {}
        self.base = 0

    def add(self, t) -> None:
        if t is None:
            return
        inner = getattr(t, "_local_tensor", None)
        t = t if inner is None else inner
        try:
            st = t.untyped_storage()
            key = st._cdata
        except (RuntimeError, NotImplementedError):
            return
        if key and (key not in self.storages or self.storages[key]() is None):
            self.storages[key] = weakref.ref(st)

    def add_all(self, tensors) -> None:
        for t in tensors:
            self.add(t)

    def now(self) -> int:
        total = 0
        for key, ref in list(self.storages.items()):
            st = ref()
            if st is None:
                del self.storages[key]
                continue
            try:
                total += st.nbytes()
            except RuntimeError:
                pass
        return total - self.base

    def settled(self, quiet_s: float = 0.005, timeout_s: float = 1.0) -> int:
        """now(), once it has held still for quiet_s (at most timeout_s). Under gloo a collective's worker thread
        lets go of the collective's buffers a moment after the caller's wait() returns (ProcessGroupGloo's run
        loop marks the work complete, then drops it), so a reading taken at once can count a buffer the
        framework has already freed: FSDP2's all-gather output for the embedding, 262,144 B on tiny-llama, in
        about 1 of 60 runs. Only worker threads release in between: the count can only fall."""
        end = time.monotonic() + timeout_s
        n = self.now()
        while time.monotonic() < end:
            time.sleep(quiet_s)
            m = self.now()
            if m == n:
                break
            n = m
        return n

    def mark(self, phase: str) -> None:
        self.phase = phase
        self._record()

    def _record(self) -> None:
        n = self.now()
        if n > self.peaks.get(self.phase, -1):
            self.peaks[self.phase] = n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.add(t)
        self._record()
        return out


@record(slots=True)
class StepMeasure:
    """Live tensor bytes beyond the model states (weights, grads, optimizer state), per phase."""
    states: int                  # bytes of the states the step starts with
    peaks: dict                  # phase -> highest live bytes beyond the states
    before: dict = field(default_factory=dict)   # phase -> live bytes beyond the states when it began


def mark_head_done(net, live) -> None:
    """The loss's backward ends where the output layer's does: when the final norm's output gets its
    gradient, the layers' backward begins; it ends when the embedding's output gets its gradient
    (hooks on the next forward's outputs): the embedding's own backward is a phase of its own."""
    def on(module, phase):
        def forward_hook(mod, args, out):
            out.register_hook(lambda grad: live.mark(phase))
            handle.remove()
        handle = module.register_forward_hook(forward_hook)
    on(net.norm, "layers backward")
    on(net.embed, "embedding backward")


def states_of(net, opt) -> list:
    tensors = list(net.parameters()) + [p.grad for p in net.parameters() if p.grad is not None]
    tensors += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    return tensors


def measure_step(model: ModelSpec, *, seq_len: int, micro_batch: int, act_bytes: int, recompute: Recompute,
                 optimizer_impl: str = "foreach", dropout_p: float = DEFAULT_DROPOUT, seed: int = 0) -> StepMeasure:
    """One warm-up step (the optimizer's state exists after it; gradients are zeroed, not freed,
    as Megatron-LM's contiguous buffer keeps them), then one measured step of the reference
    model with torch.optim.AdamW (foreach or fused), weights and activations in one dtype."""
    torch.manual_seed(seed)
    dtype = {2: torch.bfloat16, 4: torch.float32}[act_bytes]
    net = build(model, dropout_p=dropout_p, recompute=recompute, dtype=dtype).train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, **{optimizer_impl: True})
    ids = torch.randint(0, model.vocab_size, (micro_batch, seq_len))
    targets = torch.randint(0, model.vocab_size, (micro_batch, seq_len))
    lm_loss(net(ids), targets).backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    live = LiveBytes()
    live.add_all(states_of(net, opt))
    live.base = live.now()
    states = live.base
    live.add_all((ids, targets))   # the batch: the token ids are stored activations (activations.embedding_bytes)
    before = {}
    mark_head_done(net, live)
    with live:
        live.mark("forward")
        before["forward"] = live.now()
        logits = net(ids)
        live.mark("loss forward")
        before["loss forward"] = live.now()
        loss = lm_loss(logits, targets)
        del logits
        live.mark("loss backward")
        before["loss backward"] = live.now()
        loss.backward()
        del loss
        live.mark("optimizer step")
        before["optimizer step"] = live.now()
        opt.step()
    return StepMeasure(states=states, peaks=dict(live.peaks), before=before)
