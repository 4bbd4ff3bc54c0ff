"""LoRA adapters on the reference model, in plain PyTorch (no peft): the measuring stick for
fitplan.memory.finetune.

Each adapted nn.Linear W becomes y = W x + B(A(x)) * alpha/r with A (d_in -> r) and B (r ->
d_out) trained and everything else frozen. The targets are fitplan's (TrainingSpec.lora_targets):
qkv adapts q_proj, k_proj and v_proj, o adapts o_proj, mlp every MLP matrix (fc1/fc2, or
gate/up/down). As peft's enable_input_require_grads does, the embedding's output is made to
require a gradient, so every layer's activations are stored the same way. No dropout on the
adapters' input (peft's lora_dropout = 0).
"""
import torch
from torch import nn

TARGET_MODULES = {"qkv": ("attn.q_proj", "attn.k_proj", "attn.v_proj"), "o": ("attn.o_proj",),
                  "mlp": ("mlp.fc1", "mlp.fc2", "mlp.gate", "mlp.up", "mlp.down")}
ALPHA = 16


class LoraLinear(nn.Module):
    """A frozen linear layer with a rank-r adapter beside it."""

    def __init__(self, base: nn.Linear, rank: int):
        super().__init__()
        self.base = base
        self.lora_a = nn.Linear(base.in_features, rank, bias=False, device=base.weight.device,
                                dtype=base.weight.dtype)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False, device=base.weight.device,
                                dtype=base.weight.dtype)
        nn.init.normal_(self.lora_b.weight, std=0.02)   # peft zeroes B; any value stores the same tensors
        self.scale = ALPHA / rank

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scale


def add_lora(net: nn.Module, *, rank: int, targets: str) -> nn.Module:
    """Freeze every parameter of net, wrap the targeted linears in adapters (trained), and make
    the embedding's output require a gradient. Returns net."""
    for p in net.parameters():
        p.requires_grad_(False)
    wanted = {path for t in targets.split(",") for path in TARGET_MODULES[t]}
    for layer in net.layers:
        for path in sorted(wanted):
            owner_name, child = path.split(".")
            owner = getattr(layer, owner_name)
            base = getattr(owner, child, None)
            if isinstance(base, nn.Linear):
                setattr(owner, child, LoraLinear(base, rank))
    net.embed.register_forward_hook(lambda module, args, out: out.requires_grad_(True))
    return net


def adapter_tensors(net: nn.Module) -> list:
    return [p for p in net.parameters() if p.requires_grad]


def lora_states(spec, *, rank: int, targets: str, seq_len: int, micro_batch: int, seed: int = 0) -> dict:
    """fp32 weights with adapters, one forward and backward and one torch.optim.Adam step over the
    adapters: bytes of all weights, of the gradients (adapters only) and of Adam's state, and the
    parameter counts."""
    from fitplan.validate.reference_model import build, lm_loss

    torch.manual_seed(seed)
    net = add_lora(build(spec, dtype=torch.float32), rank=rank, targets=targets).train()
    trained = adapter_tensors(net)
    opt = torch.optim.Adam(trained, lr=1e-4)
    ids = torch.randint(0, spec.vocab_size, (micro_batch, seq_len))
    targets_ = torch.randint(0, spec.vocab_size, (micro_batch, seq_len))
    lm_loss(net(ids), targets_).backward()
    opt.step()
    params = list(net.parameters())
    return {"trained_params": sum(p.numel() for p in trained),
            "frozen_params": sum(p.numel() for p in params if not p.requires_grad),
            "adapter_tensors": len(trained),
            "weights": sum(p.numel() * p.element_size() for p in params),
            "grads": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
            "optimizer": sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                             if torch.is_tensor(v))}
