"""The reference mixture-of-experts MLP (ModelSpec.moe), dropless, Megatron-LM-shaped.

Per MoE layer, on the LN2 output x (T = s*b tokens, h wide, activation dtype e):

  router     logits = x @ W_r^T computed in fp32 from the e-byte x (RouterGatingFunction,
             as Megatron-LM's router_gating_linear: x is saved, no fp32 copy of it); a router
             z-loss (ST-MoE, Zoph et al. 2022 Eq. 5; Megatron-LM --moe-z-loss-coeff) keeps the
             fp32 logits for its logsumexp backward; softmax over the E experts in fp32 keeps
             its fp32 output: the planner's 8E bytes per token. The z-loss joins the backward
             through AttachAuxLoss (Megatron-LM MoEAuxLossAutoScaler), which saves nothing.
  top-k      probs.topk(k) (softmax, then top-k: Switch / DeepSeek / Megatron pre-softmax
             order, no renormalisation); topk's backward keeps the int64 expert indices.
  permute    the k routed copies of each token, grouped by expert (a stable argsort of the
             expert indices): x.index_select(0, token) keeps the int64 gather index.
  experts    each a dense MLP of expert_ffn_size over its contiguous slice of the copies,
             whose activation function multiplies in each copy's fp32 top-k probability
             (permuted with the copies) and keeps it: WeightedSwiGLU keeps gate, up and the
             probability, fc2 keeps the product (n = 3); WeightedGelu keeps fc1's output and
             the probability, fc2 keeps the product (n = 2). A biased fc2 adds p*bias. This
             is Megatron-LM's TEGroupedMLP (moe/experts.py bias_act_func with
             fusions/fused_bias_swiglu.py WeightedSwiGLUFunction; _apply_bias).
  combine    the weighted expert outputs, put back in (token, slot) order with the int64
             inverse permutation (index_select, which keeps only its index) and summed over
             the k slots in fp32: an unweighted sum keeps nothing (Megatron-LM's unpermute
             without probs).
  shared     num_shared_experts * expert_ffn_size as one dense MLP on x, added.

Per routed copy that is the planner's e*(h + n*f_e) + 4 (permuted input, expert, its fp32
probability), per token its n*e*f_s and 8E, exactly; what torch keeps on top (int64
indices, the logsumexp) is named in fitplan.validate.expected.moe_extras.

Dropless on one rank, the bytes stored do not depend on where the tokens go: every copy is
stored once, and each expert's tensors are its slice (an expert without tokens stores 0 B).
So rho = 1 is exact for a single rank holding every expert, whatever the router does; the
measured load (busiest expert's tokens over the mean) is recorded in tokens_per_expert.

Expert parallelism (ep_group): the rank holds E/ep experts; the copies travel to their
expert's rank and back with all_to_all_single (AllToAll, autograd both ways).
"""
import torch
import torch.nn.functional as F
from torch import nn

from fitplan.specs.model import Mlp, ModelSpec
from fitplan.validate.reference_model import GeluMlp, make_mlp, swiglu_backward

EXPERT_MLPS = (Mlp.GELU, Mlp.SWIGLU)   # the kinds whose weighted activation expert_forward implements

ROUTER_Z_LOSS = 1e-3   # ST-MoE's coefficient (Zoph et al. 2022, Sec. 3.1)


class RouterGatingFunction(torch.autograd.Function):
    """x @ W^T in fp32 from an e-byte x; saves x and W, not an fp32 copy of x
    (Megatron-LM moe/moe_utils.py RouterGatingLinearFunction)."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return F.linear(x.float(), weight.float())

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return (grad @ weight.float()).to(x.dtype), (grad.t() @ x.float()).to(weight.dtype)


class AttachAuxLoss(torch.autograd.Function):
    """Identity on `out`; its backward also gives the auxiliary loss a gradient of 1, so the
    loss trains the router without a separate loss term (Megatron-LM MoEAuxLossAutoScaler).
    Saves nothing."""

    @staticmethod
    def forward(ctx, out, aux):
        ctx.aux_meta = (aux.dtype, aux.device)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        dtype, device = ctx.aux_meta
        return grad, torch.ones((), dtype=dtype, device=device)


class AllToAll(torch.autograd.Function):
    """dist.all_to_all_single with uneven splits; the backward sends the gradients back
    the same way. Saves nothing (the splits are Python lists)."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        import torch.distributed as dist

        ctx.splits, ctx.group = (in_splits, out_splits), group
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        return AllToAll.apply(grad, out_splits, in_splits, ctx.group), None, None, None


def _wide(t):
    """t in fp32 for the weighted activations' math (float64 stays float64, for gradcheck)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


class WeightedSwiGLU(torch.autograd.Function):
    """p * silu(gate) * up, keeping gate, up and p (Megatron-LM WeightedSwiGLUFunction):
    p is each routed copy's fp32 probability, (copies, 1)."""

    @staticmethod
    def forward(ctx, gate, up, p):
        ctx.save_for_backward(gate, up, p)
        return (F.silu(_wide(gate)) * _wide(up) * p).to(gate.dtype)

    @staticmethod
    def backward(ctx, grad):
        gate, up, p = ctx.saved_tensors
        g, up_f = _wide(grad), _wide(up)
        d_gate, d_up, silu = swiglu_backward(_wide(gate), up_f, g * p)
        return d_gate.to(gate.dtype), d_up.to(up.dtype), (g * silu * up_f).sum(-1, keepdim=True)


class WeightedGelu(torch.autograd.Function):
    """p * gelu(x), keeping x and p (the weighted activation of Megatron-LM's TEGroupedMLP)."""

    @staticmethod
    def forward(ctx, x, p):
        ctx.save_for_backward(x, p)
        return (F.gelu(_wide(x)) * p).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, p = ctx.saved_tensors
        g, xf = _wide(grad), _wide(x)
        cdf = 0.5 * (1 + torch.erf(xf * 0.5 ** 0.5))                 # gelu(x) = x*Phi(x)
        d_gelu = cdf + xf * torch.exp(-0.5 * xf * xf) * (2 * torch.pi) ** -0.5   # Phi(x) + x*phi(x)
        return (g * p * d_gelu).to(x.dtype), (g * xf * cdf).sum(-1, keepdim=True)


def expert_forward(mlp: nn.Module, x, p):
    """A routed expert (make_mlp's module) on its copies x with their probabilities p: the
    probability enters at the activation function, and weights fc2's bias."""
    if hasattr(mlp, "gate"):
        h, fc2 = WeightedSwiGLU.apply(mlp.gate(x), mlp.up(x), p), mlp.down
    elif type(mlp) is GeluMlp:
        h, fc2 = WeightedGelu.apply(mlp.fc1(x), p), mlp.fc2
    else:
        raise ValueError(f"the reference experts' weighted activations are {', '.join(EXPERT_MLPS)}, "
                         f"not {type(mlp).__name__}")
    out = F.linear(h, fc2.weight)
    return out if fc2.bias is None else out + (p * fc2.bias).to(out.dtype)


class MoeMlp(nn.Module):
    """Router, E routed experts (E/ep with an ep group: this rank's), shared experts."""

    def __init__(self, spec: ModelSpec, *, ep_group=None):
        super().__init__()
        moe = spec.moe
        self.k, self.num_experts = moe.experts_per_token, moe.num_experts
        self.ep_group = ep_group
        ep, rank = (1, 0) if ep_group is None else (ep_group.size(), ep_group.rank())
        self.ep, self.local = ep, moe.num_experts // ep
        self.first_expert = rank * self.local
        self.router = nn.Linear(spec.hidden_size, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(make_mlp(spec, moe.expert_ffn_size) for _ in range(self.local))
        f_s = moe.num_shared_experts * moe.expert_ffn_size
        self.shared = make_mlp(spec, f_s) if f_s else None
        self.tokens_per_expert: tuple[int, ...] = ()

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        logits = RouterGatingFunction.apply(x2, self.router.weight)        # (T, E) fp32
        z_loss = ROUTER_Z_LOSS * torch.logsumexp(logits, dim=-1).pow(2).mean()
        probs = torch.softmax(logits, dim=-1)                                # fp32
        top_p, top_i = probs.topk(self.k, dim=-1)                            # (T, k)
        with torch.no_grad():
            flat = top_i.flatten()
            order = torch.argsort(flat, stable=True)     # copy slots grouped by expert
            token = order // self.k                      # the token each grouped copy comes from
            restore = torch.argsort(order)               # grouped position of each (token, slot)
            counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        xp = x2.index_select(0, token)                                       # (T*k, h), grouped by expert
        pp = top_p.reshape(-1).index_select(0, order).unsqueeze(-1)          # (T*k, 1) fp32, the same order
        y = self._experts(xp, pp, counts).index_select(0, restore)           # back to (token, slot) order
        out = y.view(-1, self.k, shape[-1]).sum(1, dtype=torch.float32).to(x.dtype)   # combine in fp32
        if self.shared is not None:
            out = out + self.shared(x2)
        return AttachAuxLoss.apply(out, z_loss).view(shape)

    def _experts(self, xp, pp, counts: list[int]):
        if self.ep_group is None:
            self.tokens_per_expert = tuple(counts)
            return torch.cat([expert_forward(expert, part, p)
                              for expert, part, p in zip(self.experts, xp.split(counts), pp.split(counts))])
        return self._experts_ep(xp, pp, counts)

    def _experts_ep(self, xp, pp, counts: list[int]):
        """Send each copy to its expert's rank, run the local experts, send the outputs back.
        Received rows come by source rank, then local expert; they are regrouped by local
        expert (a stable sort) for the experts and put back before the return trip."""
        import torch.distributed as dist

        ep, local = self.ep, self.local
        send = torch.tensor(counts, dtype=torch.int64)          # copies for each global expert
        recv = torch.empty_like(send)                           # [source rank][local expert]
        dist.all_to_all_single(recv, send, group=self.ep_group)
        in_splits = [sum(counts[r * local:(r + 1) * local]) for r in range(ep)]
        recv_rows = recv.view(ep, local)
        out_splits = recv_rows.sum(1).tolist()
        got = AllToAll.apply(xp, out_splits, in_splits, self.ep_group)
        got_p = AllToAll.apply(pp, out_splits, in_splits, self.ep_group)
        with torch.no_grad():
            expert_of_row = torch.repeat_interleave(torch.arange(local).repeat(ep), recv.flatten())
            regroup = torch.argsort(expert_of_row, stable=True)
            restore = torch.argsort(regroup)
        per_expert = recv_rows.sum(0).tolist()
        self.tokens_per_expert = tuple(per_expert)
        grouped, grouped_p = got.index_select(0, regroup), got_p.index_select(0, regroup)
        y = torch.cat([expert_forward(expert, part, p) for expert, part, p in
                       zip(self.experts, grouped.split(per_expert), grouped_p.split(per_expert))])
        return AllToAll.apply(y.index_select(0, restore), in_splits, out_splits, self.ep_group)
