"""A plain PyTorch hybrid model built from a ModelSpec with a layer pattern: the measuring stick
for the planner's hybrid counts (fitplan.counts.hybrid, fitplan.memory.activations).

Each layer is one block behind one pre-norm, x + dropout(mixer(norm(x))), the mixer by the
pattern's letter: M a Mamba-2 layer (MambaMixer below), * the reference attention, - the
reference MLP (fitplan.validate.reference_model). No triton, no mamba_ssm: the Mamba-2 layer is
written out in PyTorch as mamba_ssm's modules/mamba2.py lays it out and as Megatron-LM's
MambaMixer trains it:

* in_proj (h -> z, x, B, C, dt), then SsdScanFunction: the causal depthwise conv over x, B, C
  (written as K shifted elementwise products, as the causal_conv1d kernel is elementwise work),
  SiLU, dt = softplus(dt + dt_bias), A = -exp(A_log), the chunked SSD scan with its four
  batched matmuls per chunk (C^T B, the intra-chunk output, the chunk states B^T X, the
  inter-chunk output C h; the state passing between chunks elementwise), D skip, the z gate.
  Like mamba_ssm's MambaSplitConv1dScanCombinedFn it keeps zxBCdt and the scan's output before
  the gate (out_x) and recomputes the rest in backward.
* the gated RMSNorm over groups of d/G (GatedNormFunction: saves its input and an fp32 rstd per
  group), then out_proj.
"""
import torch
import torch.nn.functional as F
from torch import nn

from fitplan.counts import hybrid as HY
from fitplan.specs.model import ModelSpec
from fitplan.specs.parallel import Recompute
from fitplan.validate.reference_model import (DEFAULT_DROPOUT, Attention, dropout, embed_tokens, make_mlp,
                                              make_norm)

NORM_EPS = 1e-5


def _segsum(x):
    """(..., Q) -> (..., Q, Q): sum of x over (j, i] below the diagonal, -inf above it."""
    Q = x.shape[-1]
    cs = torch.cumsum(x, dim=-1)
    out = cs[..., :, None] - cs[..., None, :]
    return out.masked_fill(~torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril(), float("-inf"))


def ssd_scan(x, dtA, B, C, chunk: int):
    """y = the SSD scan (Dao & Gu 2024, Sec. 6) of x (b, s, H, P) with per-step log decays dtA
    (b, s, H) and B, C (b, s, G, N), by chunks of `chunk` tokens; the four GEMM families the
    planner counts (fitplan.counts.flops.ssd_flops) are the four torch.matmul calls."""
    b, s, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    c = s // chunk
    r = H // G
    x = x.reshape(b, c, chunk, H, P).permute(0, 1, 3, 2, 4)            # b c H Q P
    Bc = B.reshape(b, c, chunk, G, N).permute(0, 1, 3, 2, 4)           # b c G Q N
    Cc = C.reshape(b, c, chunk, G, N).permute(0, 1, 3, 2, 4)
    a = dtA.reshape(b, c, chunk, H).permute(0, 1, 3, 2)                 # b c H Q
    a_cs = torch.cumsum(a, dim=-1)
    CB = torch.matmul(Cc, Bc.transpose(-1, -2))                         # b c G Q Q: 2*Q^2*N per group
    L = torch.exp(_segsum(a))                                           # b c H Q Q
    y_diag = torch.matmul(CB.repeat_interleave(r, dim=2) * L, x)        # b c H Q P: 2*Q^2*P per head
    decay = torch.exp(a_cs[..., -1:] - a_cs)                            # b c H Q
    Bh = Bc.repeat_interleave(r, dim=2)
    states = torch.matmul((Bh * decay[..., None]).transpose(-1, -2), x)  # b c H N P: 2*Q*N*P per head
    chunk_decay = torch.exp(a_cs[..., -1])                              # b c H
    prev = torch.zeros_like(states[:, 0])
    entering = []
    for i in range(c):   # the state passing between chunks: elementwise
        entering.append(prev)
        prev = prev * chunk_decay[:, i, :, None, None] + states[:, i]
    h_in = torch.stack(entering, dim=1)                                 # b c H N P
    Ch = Cc.repeat_interleave(r, dim=2)
    y_off = torch.matmul(Ch, h_in) * torch.exp(a_cs)[..., None]         # b c H Q P: 2*Q*N*P per head
    return (y_diag + y_off).permute(0, 1, 3, 2, 4).reshape(b, s, H, P)


def _scan_forward(zxbcdt, conv_w, conv_b, dt_bias, A_log, D, dims):
    """(out_x, out): the scan's output before the gate and after, both (b, s, d)."""
    d, G, N, H, P, K, chunk = dims
    z, xBC, dt = torch.split(zxbcdt, [d, d + 2 * G * N, H], dim=-1)
    s = xBC.shape[1]
    padded = F.pad(xBC, (0, 0, K - 1, 0))
    conv = sum(padded[:, k:k + s] * conv_w[:, 0, k] for k in range(K))   # causal depthwise conv, elementwise
    if conv_b is not None:
        conv = conv + conv_b
    xBC = F.silu(conv)
    x, Bm, Cm = torch.split(xBC, [d, G * N, G * N], dim=-1)
    b = x.shape[0]
    x = x.reshape(b, s, H, P)
    dt = F.softplus(dt + dt_bias)
    A = -torch.exp(A_log)   # in the activation dtype, as every tensor here (the kernels accumulate in fp32)
    y = ssd_scan(x * dt[..., None], dt * A, Bm.reshape(b, s, G, N), Cm.reshape(b, s, G, N), chunk)
    y = y + D[:, None] * x
    out_x = y.reshape(b, s, d)
    return out_x, out_x * F.silu(z)


class SsdScanFunction(torch.autograd.Function):
    """The fused conv, scan and gate: keeps zxBCdt and out_x (as mamba_ssm's
    MambaSplitConv1dScanCombinedFn does), recomputes the rest in backward."""

    @staticmethod
    def forward(ctx, zxbcdt, conv_w, conv_b, dt_bias, A_log, D, dims):
        with torch.no_grad():
            out_x, out = _scan_forward(zxbcdt, conv_w, conv_b, dt_bias, A_log, D, dims)
        ctx.save_for_backward(zxbcdt, out_x, conv_w, conv_b, dt_bias, A_log, D)
        ctx.dims = dims
        return out

    @staticmethod
    def backward(ctx, grad):
        zxbcdt, _out_x, *params = ctx.saved_tensors
        leaves = [None if t is None else t.detach().requires_grad_(True) for t in (zxbcdt, *params)]
        with torch.enable_grad():
            _, out = _scan_forward(*leaves, ctx.dims)
        grads = iter(torch.autograd.grad(out, [t for t in leaves if t is not None], grad))
        return (*(None if t is None else next(grads) for t in leaves), None)


class GatedNormFunction(torch.autograd.Function):
    """RMSNorm over groups of d/G channels (mamba_ssm layernorm_gated, norm_before_gate False, the
    gate already applied): saves its input and an fp32 rstd per group."""

    @staticmethod
    def forward(ctx, y, weight, groups):
        b, s, d = y.shape
        yg = y.float().reshape(b, s, groups, d // groups)
        rstd = torch.rsqrt(yg.pow(2).mean(-1) + NORM_EPS)                # b s G, fp32
        ctx.save_for_backward(y, weight, rstd)
        ctx.groups = groups
        return (yg * rstd[..., None]).reshape(b, s, d).to(y.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        y, weight, rstd = ctx.saved_tensors
        b, s, d = y.shape
        G = ctx.groups
        yhat = y.float().reshape(b, s, G, d // G) * rstd[..., None]
        gw = (grad * weight).float().reshape(b, s, G, d // G)
        dy = rstd[..., None] * (gw - yhat * (gw * yhat).mean(-1, keepdim=True))
        dw = (grad.float() * yhat.reshape(b, s, d)).sum(dim=(0, 1))
        return dy.reshape(b, s, d).to(y.dtype), dw.to(weight.dtype), None


class MambaMixer(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        m, h = spec.mamba, spec.hidden_size
        d, C, K = m.d_inner, HY.conv_channels(spec), m.conv_kernel
        self.dims = (d, m.num_groups, m.state_size, m.num_heads, m.head_dim, K, m.chunk_size)
        self.in_proj = nn.Linear(h, HY.in_proj_width(spec), bias=m.proj_bias)
        self.conv_weight = nn.Parameter(torch.randn(C, 1, K) / K)
        self.conv_bias = nn.Parameter(torch.zeros(C)) if m.conv_bias else None
        self.dt_bias = nn.Parameter(torch.full((m.num_heads,), -2.0))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, m.num_heads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(m.num_heads))
        self.norm_weight = nn.Parameter(torch.ones(d))
        self.out_proj = nn.Linear(d, h, bias=m.proj_bias)

    def forward(self, x):
        y = SsdScanFunction.apply(self.in_proj(x), self.conv_weight, self.conv_bias, self.dt_bias, self.A_log, self.D,
                                  self.dims)
        return self.out_proj(GatedNormFunction.apply(y, self.norm_weight, self.dims[1]))


class HybridBlock(nn.Module):
    """One layer of the pattern: x + dropout(mixer(norm(x)))."""

    def __init__(self, spec: ModelSpec, kind: str, p: float):
        super().__init__()
        self.norm = make_norm(spec)
        self.mixer = (MambaMixer(spec) if kind == "M" else Attention(spec, p, Recompute.NONE) if kind == "*"
                      else make_mlp(spec))
        self.p = p

    def forward(self, x):
        return x + dropout(self.mixer(self.norm(x)), self.p, self.training)


class HybridModel(nn.Module):
    def __init__(self, spec: ModelSpec, *, dropout_p: float = DEFAULT_DROPOUT):
        super().__init__()
        self.spec, self.p = spec, dropout_p
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(HybridBlock(spec, kind, dropout_p) for kind in spec.layer_pattern)
        self.norm = make_norm(spec)
        self.head = None if spec.tied_embeddings else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    def forward(self, ids):
        x = embed_tokens(self.embed, None, ids, self.p, self.training)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return F.linear(x, self.embed.weight) if self.head is None else self.head(x)


def build_hybrid(spec: ModelSpec, *, dropout_p: float = DEFAULT_DROPOUT, dtype=torch.float32,
                 device="cpu") -> HybridModel:
    with torch.device(device):
        model = HybridModel(spec, dropout_p=dropout_p)
    return model.to(dtype)
