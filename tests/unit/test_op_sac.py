"""torchtitan's op-level SAC (Recompute.OP), derived by hand, pure Python.

The policy saves every odd-numbered aten.mm of a layer, counted in the order q, k, v, o,
w1, w3, w2 (SwiGLU) or q, k, v, o, fc1, fc2 (GeLU). A linear with a bias is an aten.addmm,
which it neither saves nor counts. The figures below are the ones tests/torch measures on
the reference model (torch 2.13, CPU), so these hand derivations and the measurement agree.
"""
import pytest

from fitplan.counts.params import op_sac_saved, rerun_matmul_params
from fitplan.memory import activations as A
from fitplan.specs import Recompute
from fitplan.validate import TINY_GPT, TINY_LLAMA


@pytest.mark.parametrize(("n", "bias", "saved"), [
    (3, "none", ("q", "v", "w1", "w2")),   # Llama: wq, wv, w1, w2
    (2, "none", ("q", "v", "w1")),         # GeLU without biases: wq, wv, fc1
    (3, "all", ()),                        # every linear an addmm: only SDPA and the input
    (2, "all", ()),
    (3, "qkv", ("o", "w3")),               # Qwen2: mm order wo, w1, w3, w2
    (2, "qkv", ("o", "w2")),               # mm order wo, fc1, fc2
])
def test_saved_linears(n, bias, saved):
    assert op_sac_saved(n=n, bias=bias) == saved


def test_moe_layers_count_only_the_attention():
    assert op_sac_saved(n=3, bias="none", moe=True) == ("q", "v")


def _layer(spec, *, s, b, e, t=1, sp=False, bias="none"):
    n = 3 if spec.mlp.value == "swiglu" else 2
    return A.per_layer_bytes(s=s, b=b, h=spec.hidden_size, a=spec.num_heads, q=spec.q_size, kv=spec.kv_size,
                             f=spec.ffn_hidden_size, n=n, e=e, M=1, D=1, t=t, c=1, sp=sp, recompute=Recompute.OP,
                             bias=bias)


def test_llama_by_hand():
    # s=64, b=2, h=q=128, kv=32, f=352, a=8, bf16: input + w2 out 2*e*s*b*h, wq + SDPA out 2*e*s*b*q,
    # wv e*s*b*kv, w1 e*s*b*f, logsumexp 4*a*s*b
    sb = 64 * 2
    assert _layer(TINY_LLAMA, s=64, b=2, e=2) == sb * (2 * (2 * 128 + 2 * 128 + 32 + 352) + 4 * 8) == 233_472


def test_gpt_with_biases_by_hand():
    # every linear has a bias: the input and SDPA's output and logsumexp only
    sb = 128 * 2
    assert _layer(TINY_GPT, s=128, b=2, e=2, bias="all") == sb * (2 * (64 + 64) + 4 * 4) == 69_632
    assert _layer(TINY_GPT, s=128, b=2, e=2) == sb * (2 * (64 + 2 * 64 + 64 + 256) + 4 * 4) == 266_240


def test_tensor_and_sequence_parallel_by_hand():
    # t=2, Llama, bf16, s=64, b=2. TP: the input whole, the w2 mm output whole (the rank's partial sum),
    # the column-parallel outputs and SDPA over t. SP: the input sharded, the w2 partial sum still whole,
    # plus the two reduce-scatter outputs (wo, w2) the policy saves, sbh/t each.
    e, sb, h, t = 2, 128, 128, 2
    split = sb * (e * (128 + 128 + 32 + 352) + 4 * 8) // t
    assert _layer(TINY_LLAMA, s=64, b=2, e=e, t=t) == e * sb * h * 2 + split == 149_504
    assert _layer(TINY_LLAMA, s=64, b=2, e=e, t=t, sp=True) == e * sb * h // t * 3 + e * sb * h + split == 165_888


def test_rerun_matmuls():
    h = 128
    assert rerun_matmul_params(TINY_LLAMA, Recompute.OP) == h * 32 + 128 * h + h * 352     # wk, wo, w3
    g = 64
    assert rerun_matmul_params(TINY_GPT, Recompute.OP) == 4 * g * g + 2 * g * 256        # every linear (addmm)
