"""LoRA adapters on the reference model, in plain PyTorch (no peft): the measuring stick for
fitplan.memory.finetune.

Each adapted nn.Linear W becomes y = W x + B(A(x)) * alpha/r with A (d_in -> r) and B (r ->
d_out) trained and everything else frozen. The targets are fitplan's (TrainingSpec.lora_targets):
qkv adapts q_proj, k_proj and v_proj, o adapts o_proj, mlp every MLP matrix (fc1/fc2, or
gate/up/down). As peft's enable_input_require_grads does, the embedding's output is made to
require a gradient, so every layer's activations are stored the same way. No dropout on the
adapters' input (peft's lora_dropout = 0).

QLoRA's frozen base (quantize_base): each adapted matrix's weight becomes 4-bit NormalFloat
with double quantization [QLoRA Sec. 3], laid out as FSDP-QLoRA stores it (bitsandbytes
Params4bit with quant_storage): the packed codes, two a byte, are one frozen parameter of the
model's dtype, (n/2 bytes)/itemsize elements in a column, so FSDP shards and gathers them like
any other parameter; the block constants are plain attributes, outside what FSDP shards.
Written here from the paper's definition; only the bytes matter to the checks.
"""
import torch
import torch.nn.functional as F
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


# The 16 NF4 levels: quantiles of N(0, 1) scaled to [-1, 1], with an exact zero [QLoRA Sec. 3, Appendix E].
NF4_LEVELS = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
              -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
              0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
              0.7229568362236023, 1.0)
BLOCK, BLOCK2 = 64, 256   # weights per absmax; absmax values per second-level constant [QLoRA Sec. 3]


class Nf4Linear(nn.Module):
    """A frozen linear layer whose weight is NF4 with double quantization: `packed` (the codes,
    a parameter in the model's dtype), per 64 weights an 8-bit code of its absmax (`absmax_q`,
    uint8), per 256 of those an fp32 scale (`absmax_scale`) and one fp32 mean (`absmax_mean`);
    the bias, if any, stays as it was. forward dequantizes the whole weight to x's dtype."""

    def __init__(self, base: nn.Linear):
        super().__init__()
        w = base.weight.detach().float().reshape(-1)
        n = w.numel()
        if n % (2 * base.weight.element_size()) or n % BLOCK:
            raise ValueError(f"a {tuple(base.weight.shape)} weight does not pack into whole blocks")
        self.shape, self.dtype = tuple(base.weight.shape), base.weight.dtype
        blocks = w.reshape(-1, BLOCK)
        absmax = blocks.abs().amax(dim=1).clamp_min(1e-12)
        levels = torch.tensor(NF4_LEVELS)
        codes = ((blocks / absmax[:, None]).reshape(-1, 1) - levels).abs().argmin(dim=1).to(torch.uint8)
        packed = codes[0::2] | (codes[1::2] << 4)                              # n/2 bytes
        self.packed = nn.Parameter(packed.view(self.dtype).reshape(-1, 1), requires_grad=False)
        self.absmax_mean = absmax.mean()                                       # double quantization
        centred = F.pad(absmax - self.absmax_mean, (0, -absmax.numel() % BLOCK2)).reshape(-1, BLOCK2)
        self.absmax_scale = centred.abs().amax(dim=1).clamp_min(1e-12)          # fp32, one per 256
        q = torch.round(centred / self.absmax_scale[:, None] * 127).reshape(-1)[:absmax.numel()]
        self.absmax_q = (q.to(torch.int16) + 128).to(torch.uint8)              # 8 bits per absmax
        self.bias = base.bias

    def constant_tensors(self) -> tuple:
        return self.absmax_q, self.absmax_scale, self.absmax_mean

    def weight(self) -> torch.Tensor:
        codes = self.packed.reshape(-1).view(torch.uint8)
        codes = torch.stack((codes & 15, codes >> 4), dim=1).reshape(-1).long()
        q = F.pad(self.absmax_q.float() - 128, (0, -self.absmax_q.numel() % BLOCK2)).reshape(-1, BLOCK2)
        absmax = (q / 127 * self.absmax_scale[:, None]).reshape(-1)[:self.absmax_q.numel()] + self.absmax_mean
        w = torch.tensor(NF4_LEVELS)[codes].reshape(-1, BLOCK) * absmax[:, None]
        return w.reshape(self.shape)

    def forward(self, x):
        return F.linear(x, self.weight().to(x.dtype), self.bias)


def quantize_base(net: nn.Module) -> nn.Module:
    """QLoRA: every adapted matrix's frozen weight in NF4 (Nf4Linear), in place. Returns net."""
    for module in list(net.modules()):
        if isinstance(module, LoraLinear):
            module.base = Nf4Linear(module.base)
    return net


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
