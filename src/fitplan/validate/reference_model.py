"""A plain PyTorch decoder built from a ModelSpec: the measuring stick for the planner.

It stores for backward exactly what fitplan.memory.activations assumes [korthikanti Sec. 4],
plus a few tensors PyTorch cannot avoid, which fitplan.validate.expected names one by one:

* manual attention: Q K^T / sqrt(d), causal masked_fill, softmax, torch.native_dropout
  (a 1-byte bool mask, as on CUDA; CPU F.dropout keeps a mask in the input dtype,
  docs/engines.md#activations-saved-for-backward), then @ V. The s^2 scores are stored,
  as the paper assumes; no SDPA.
* grouped-query attention without expanding K and V: queries are grouped (b*g, r*s, d) so
  one bmm per kv group serves its r = a/g query heads; K and V stay g*d wide.
* separate q, k, v projections (the fused QKV matrix has the same parameters); tensor
  parallelism then splits them column-wise by heads without reshuffling.
* GeLU MLP: fc1 output (the GeLU input) and the GeLU output are stored: n = 2.
  Squared ReLU as Megatron-LM's squared_relu, relu(x)^2 (megatron/core/activations.py): relu
  saves its output, which pow reuses as its input, and fc2 its input: n = 2.
  SwiGLU via SwiGLUFunction, which saves only the gate and up outputs; the down projection
  saves their product: n = 3. GeGLU has no reference MLP (run_validation refuses it).
* RMSNorm via RMSNormFunction, which saves its input and an fp32 rstd (torch 2.13's
  F.rms_norm on CPU is composite and stores fp32 copies of the input instead).
* MoE layers (ModelSpec.moe, after the first first_dense_layers): fitplan.validate.reference_moe,
  a dropless router / top-k / permute / experts / weighted combine with shared experts.
* recompute: none; selective (the attention core, from the scores to @V, under
  torch.utils.checkpoint); full (the whole layer under torch.utils.checkpoint);
  op (torchtitan's op-level selective checkpointing, op_sac_policy: the layer under a
  non-reentrant checkpoint with create_selective_checkpoint_contexts; attention is SDPA,
  as in torchtitan, so its core saves the output and an fp32 logsumexp); norms (DeepSeek-V3
  Sec. 3.2.3 as Megatron-LM's --recompute-modules layernorm does it: NormRecompute, each
  norm's output storage freed after its consumers ran and refilled in backward).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from fitplan.specs.model import Mlp, ModelSpec, Norm, Position
from fitplan.specs.parallel import Recompute

DEFAULT_DROPOUT = 0.1
# The recompute modes the reference implements: the planner's five (fitplan.specs.parallel.
# SEARCHED_RECOMPUTE is only what the search tries). Its MoE layers run op too, but their
# experts are per-expert dense matmuls, which op SAC counts and saves like any aten.mm, where
# torchtitan's grouped expert GEMMs are not in its save list: op is not validated on them.
IMPLEMENTED_RECOMPUTE = (Recompute.NONE, Recompute.NORMS, Recompute.SELECTIVE, Recompute.OP, Recompute.FULL)
MOE_RECOMPUTE = tuple(r for r in IMPLEMENTED_RECOMPUTE if r is not Recompute.OP)
ROPE_THETA = 10000.0
NORM_EPS = 1e-5


def dropout(x, p: float, training: bool):
    """torch.native_dropout: the mask it saves is bool (1 byte), as Korthikanti et al. assume."""
    if p == 0 or not training:
        return x
    return torch.native_dropout(x, p, True)[0]


class SwiGLUFunction(torch.autograd.Function):
    """silu(gate) * up, saving only gate and up (a fused SwiGLU's two f-wide inputs)."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        d_gate, d_up, _ = swiglu_backward(gate, up, grad)
        return d_gate, d_up


def swiglu_backward(gate, up, grad):
    """The gradients of silu(gate) * up with respect to gate and up, given the output's, and
    silu(gate): silu' = sig*(1 + gate*(1 - sig))."""
    sig = torch.sigmoid(gate)
    silu = gate * sig
    return grad * up * (sig * (1 + gate * (1 - sig))), grad * silu, silu


class RMSNormFunction(torch.autograd.Function):
    """x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps) in fp32; saves x and rstd."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        xhat = x.float() * rstd
        gw = (grad * weight).float()
        dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
        dw = (grad.float() * xhat).sum(dim=tuple(range(grad.dim() - 1)))
        return dx.to(x.dtype), dw.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = NORM_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return RMSNormFunction.apply(x, self.weight, self.eps)


def make_norm(spec: ModelSpec) -> nn.Module:
    if spec.norm is Norm.RMSNORM:
        return RMSNorm(spec.hidden_size)
    return nn.LayerNorm(spec.hidden_size, eps=NORM_EPS)


def rope_tables(s: int, d: int, dtype, device):
    """cos and sin of shape (s, 1, d), in the activation dtype, made on every call."""
    inv = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
    angles = torch.outer(torch.arange(s, dtype=torch.float32, device=device), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]


def apply_rope(x, cos, sin):
    """x: (b, s, heads, d). Saves only cos and sin (x*cos keeps cos; rotate-half keeps nothing)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def attention_core(q, k, v, p: float, training: bool):
    """q (b, s, a, d), k and v (b, s, g, d) -> merged heads (b, s, a*d).

    Stored: contiguous Q (a*d) and K (g*d) copies for QK^T, the causal bool mask (s x s),
    the softmax output, the dropout mask and output (a*s^2 each), the contiguous V copy.
    Query head i uses kv head i // r, as in Llama's repeat_kv, without repeating K or V.
    """
    b, s, a, d = q.shape
    g = k.shape[2]
    r = a // g
    q3 = q.view(b, s, g, r, d).permute(0, 2, 3, 1, 4).reshape(b * g, r * s, d)
    kt3 = k.permute(0, 2, 3, 1).reshape(b * g, d, s)
    v3 = v.permute(0, 2, 1, 3).reshape(b * g, s, d)
    scores = torch.bmm(q3, kt3).view(b, g, r, s, s) * (1.0 / math.sqrt(d))
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = dropout(torch.softmax(scores, dim=-1), p, training)
    out = torch.bmm(probs.view(b * g, r * s, s), v3)
    return out.view(b, g, r, s, d).permute(0, 3, 1, 2, 4).reshape(b, s, a * d)


def sdpa_core(q, k, v):
    """torchtitan's attention: F.scaled_dot_product_attention, causal, no attention dropout
    (torchtitan has none; on CPU a dropout would send SDPA to its math path, which upcasts
    bf16 to fp32). On CPU this is aten._scaled_dot_product_flash_attention_for_cpu, which
    returns the output and an fp32 logsumexp; grouped-query attention via enable_gqa."""
    b, s = q.shape[0], q.shape[1]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                         enable_gqa=k.shape[2] != q.shape[2])
    return out.transpose(1, 2).reshape(b, s, -1)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, p: float, recompute: Recompute):
        super().__init__()
        h, q, kv, bias = spec.hidden_size, spec.q_size, spec.kv_size, spec.linear_bias
        qkv_bias = bias or getattr(spec, "qkv_bias", False)   # Qwen2: biases on q, k, v only
        self.head_dim = q // spec.num_heads
        self.q_proj = nn.Linear(h, q, bias=qkv_bias)
        self.k_proj = nn.Linear(h, kv, bias=qkv_bias)
        self.v_proj = nn.Linear(h, kv, bias=qkv_bias)
        self.o_proj = nn.Linear(q, h, bias=bias)
        self.rope = spec.position is Position.ROPE
        self.p = p
        self.selective = recompute is Recompute.SELECTIVE
        self.sdpa = recompute is Recompute.OP

    def forward(self, x):
        b, s, d = x.shape[0], x.shape[1], self.head_dim
        q = self.q_proj(x).view(b, s, -1, d)
        k = self.k_proj(x).view(b, s, -1, d)
        v = self.v_proj(x).view(b, s, -1, d)
        if self.rope:
            cos, sin = rope_tables(s, d, q.dtype, q.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.sdpa:
            out = sdpa_core(q, k, v)
        elif self.selective:
            out = checkpoint(attention_core, q, k, v, self.p, self.training, use_reentrant=False)
        else:
            out = attention_core(q, k, v, self.p, self.training)
        return self.o_proj(out)


class GeluMlp(nn.Module):
    def __init__(self, spec: ModelSpec, ffn: int | None = None):
        super().__init__()
        h, f, bias = spec.hidden_size, ffn or spec.ffn_hidden_size, spec.linear_bias
        self.fc1 = nn.Linear(h, f, bias=bias)
        self.fc2 = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Relu2Mlp(GeluMlp):
    """fc1, squared ReLU, fc2 (Nemotron-4), the activation written as Megatron-LM's squared_relu."""

    def forward(self, x):
        return self.fc2(torch.pow(F.relu(self.fc1(x)), 2))


class SwiGluMlp(nn.Module):
    def __init__(self, spec: ModelSpec, ffn: int | None = None):
        super().__init__()
        h, f, bias = spec.hidden_size, ffn or spec.ffn_hidden_size, spec.linear_bias
        self.gate = nn.Linear(h, f, bias=bias)
        self.up = nn.Linear(h, f, bias=bias)
        self.down = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        return self.down(SwiGLUFunction.apply(self.gate(x), self.up(x)))


MLPS = {Mlp.GELU: GeluMlp, Mlp.RELU2: Relu2Mlp, Mlp.SWIGLU: SwiGluMlp}   # the MLP kinds the reference builds


def make_mlp(spec: ModelSpec, ffn: int | None = None) -> nn.Module:
    """The dense MLP of spec's kind, of width ffn (default spec.ffn_hidden_size)."""
    return MLPS[spec.mlp](spec, ffn)


class Block(nn.Module):
    """Pre-norm layer: x + drop(attn(norm1(x))), then + drop(mlp(norm2(.)))."""

    def __init__(self, spec: ModelSpec, p: float, recompute: Recompute, *, moe_layer: bool = False, ep_group=None):
        super().__init__()
        self.norm1 = make_norm(spec)
        self.attn = Attention(spec, p, recompute)
        self.norm2 = make_norm(spec)
        if moe_layer:
            from fitplan.validate.reference_moe import MoeMlp

            self.mlp = MoeMlp(spec, ep_group=ep_group)
        else:
            self.mlp = make_mlp(spec)
        self.p = p
        self.full = recompute is Recompute.FULL
        self.op = recompute is Recompute.OP
        self.norms = recompute is Recompute.NORMS
        self.sac_storage = None   # op: the selective checkpoint's cache of saved op outputs

    def forward(self, x):
        if self.full:
            return checkpoint(self._layer, x, use_reentrant=False)
        if self.op:
            # preserve_rng_state (the default) so the recomputed dropouts match; torchtitan has no
            # dropout and passes False, which changes nothing stored on the device
            return checkpoint(self._layer, x, use_reentrant=False, context_fn=self._op_contexts)
        return self._layer(x)

    def _op_contexts(self):
        fwd, recompute = create_selective_checkpoint_contexts(op_sac_policy())
        self.sac_storage = fwd.storage
        return fwd, recompute

    def _layer(self, x):
        if self.norms:
            return self._layer_norms_recomputed(x)
        x = x + dropout(self.attn(self.norm1(x)), self.p, self.training)
        return x + dropout(self.mlp(self.norm2(x)), self.p, self.training)

    def _layer_norms_recomputed(self, x):
        """Megatron-LM TransformerLayer with recompute_input_layernorm and
        recompute_pre_mlp_layernorm: the norm runs under CheckpointWithoutOutput, its output
        storage is dropped once the attention (MLP) has saved it, and refilled by a hook on
        the attention (MLP) output's gradient, before the backward that reads it."""
        norm = NormRecompute()
        a = self.attn(norm.run(self.norm1, x))
        norm.discard(a)
        x = x + dropout(a, self.p, self.training)
        norm = NormRecompute()
        m = self.mlp(norm.run(self.norm2, x))
        norm.discard(m)
        return x + dropout(m, self.p, self.training)


# torchtitan's op-level SAC save list (torchtitan/models/llama3/infra/parallelize.py
# _op_sac_save_list) plus SDPA's CPU flash kernel, the CPU twin of
# _scaled_dot_product_flash_attention (torchtitan lists only the CUDA/cuDNN/math variants).
OP_SAC_SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_attention_math.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten.max.default,
}


def op_sac_policy():
    """torchtitan's _custom_policy: save the outputs of the listed ops, except every second
    aten.mm (counted separately in the forward and in the recompute). A Linear with a bias on
    a contiguous 3-D input dispatches to aten.addmm (ATen Linear.cpp _flatten_nd_linear),
    which the list neither saves nor counts."""
    counts = {False: 0, True: 0}

    def policy(ctx, func, *args, **kwargs):
        if func == torch.ops.aten.mm.default:
            counts[ctx.is_recompute] += 1
        save = func in OP_SAC_SAVE and not (func == torch.ops.aten.mm.default and counts[ctx.is_recompute] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def sac_saved_tensors(storage) -> list:
    """The tensors a selective checkpoint's cache holds between forward and backward (its
    MUST_SAVE op outputs); they bypass saved_tensors_hooks."""
    from torch.utils._pytree import tree_leaves

    out = []
    for entries in (storage or {}).values():
        for entry in entries.values():   # an op's output (tuple) of _VersionWrapper, or the recompute marker
            for leaf in tree_leaves(entry):
                if isinstance(getattr(leaf, "val", None), torch.Tensor):
                    out.append(leaf.val)
    return out


def _local(t):
    """A DTensor's local shard (sequence-parallel norms), any other tensor itself."""
    return getattr(t, "_local_tensor", t)


class _NormForward(torch.autograd.Function):
    """Megatron-LM CheckpointWithoutOutputFunction: the norm runs without grad, only its
    input is saved; the backward replays the recomputed graph NormRecompute built."""

    @staticmethod
    def forward(ctx, run, holder, x):
        with torch.no_grad():
            out = run(x)
        ctx.save_for_backward(x.detach())
        holder.ctx = ctx
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.recomputed
        ctx.recomputed = None
        torch.autograd.backward(out, grad)
        return None, None, x.grad


class NormRecompute:
    """Megatron-LM tensor_parallel.CheckpointWithoutOutput for one norm: run() keeps only
    the input, discard(consumer_output) frees the output's storage after its consumers
    saved it and registers the recompute on consumer_output's gradient, which fills the same
    storage again before any of their backwards reads it."""

    def run(self, norm, x):
        self.norm = norm
        self.out = _NormForward.apply(norm, self, x)
        return self.out

    def discard(self, consumer_output):
        _local(self.out).untyped_storage().resize_(0)
        consumer_output.register_hook(self._recompute)

    def _recompute(self, _grad):
        (x,) = self.ctx.saved_tensors
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            out = self.norm(x)
        storage, fresh = _local(self.out).untyped_storage(), _local(out).untyped_storage()
        storage.resize_(fresh.nbytes())
        with torch.no_grad():
            storage.copy_(fresh)
        self.ctx.recomputed = (x, out)


class ReferenceModel(nn.Module):
    """Embedding (+ learned positions), embedding dropout, L blocks, final norm, head.
    With tied embeddings the head is the embedding matrix; no head bias."""

    def __init__(self, spec: ModelSpec, *, dropout_p: float = DEFAULT_DROPOUT,
                 recompute: Recompute = Recompute.NONE, ep_group=None):
        super().__init__()
        self.spec = spec
        self.p = dropout_p
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.pos = nn.Embedding(spec.max_seq_len, spec.hidden_size) if spec.position is Position.LEARNED else None
        self.layers = nn.ModuleList(Block(spec, dropout_p, recompute, moe_layer=is_moe_layer(spec, i),
                                          ep_group=ep_group) for i in range(spec.num_layers))
        self.norm = make_norm(spec)
        self.head = None if spec.tied_embeddings else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    def logits(self, x):
        x = self.norm(x)
        if self.head is not None:
            return self.head(x)
        return tied_logits(x, self.embed.weight)

    def forward(self, ids):
        x = embed_tokens(self.embed, self.pos, ids, self.p, self.training)
        for layer in self.layers:
            x = layer(x)
        return self.logits(x)


def is_moe_layer(spec: ModelSpec, index: int) -> bool:
    """Layer `index` has an MoE MLP: the model has experts and the layer is past the first
    first_dense_layers (formulas.md#moe)."""
    return spec.moe is not None and index >= spec.moe.first_dense_layers


def embed_tokens(embed, pos, ids, p: float, training: bool):
    """Token embedding (+ learned positions), then the embedding dropout [korthikanti Sec. 4.3]."""
    x = embed(ids)
    if pos is not None:
        x = x + pos(torch.arange(ids.shape[1], device=ids.device))
    return dropout(x, p, training)


def tied_logits(x, weight):
    """x @ E^T. Under tensor parallelism E is a vocabulary-sharded DTensor: the logits are
    computed vocabulary-parallel and gathered."""
    from torch.distributed.tensor import DTensor, Replicate

    if isinstance(weight, DTensor):
        x = DTensor.from_local(x, weight.device_mesh, [Replicate()], run_check=False)
        return F.linear(x, weight).full_tensor()
    return F.linear(x, weight)


def lm_loss(logits, targets):
    """Cross-entropy on fp32 logits (Korthikanti Sec. 4.3 keeps the logits in fp32)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def build(spec: ModelSpec, *, dropout_p: float = DEFAULT_DROPOUT, recompute: Recompute = Recompute.NONE,
          dtype=torch.float32, device="cpu", ep_group=None) -> ReferenceModel:
    """The reference model; with ep_group (MoE models) each MoE layer holds only this rank's
    E/ep experts."""
    with torch.device(device):
        model = ReferenceModel(spec, dropout_p=dropout_p, recompute=recompute, ep_group=ep_group)
    return model.to(dtype)
