"""Bytes saved for backward per layer by the reference model equal the planner's
per_layer_bytes plus the named reference extras, exactly: recompute none / norms /
selective / op / full, bf16 and fp32, GPT and Llama styles, three shapes (one with s > h,
one with GQA and SwiGLU, one with q != h). Also the embedding + output terms and the FLOPs
of one step."""
import pytest

torch = pytest.importorskip("torch")

from fitplan.specs import Recompute
from fitplan.validate import TINY_GPT, TINY_LLAMA
from fitplan.validate import expected as X
from fitplan.validate.measure import count_flops, saved_activations
from fitplan.validate.reference_model import IMPLEMENTED_RECOMPUTE

from tests.torch.shapes import TINY_MIX, TINY_RELU2

SHAPES = [(TINY_GPT, 128, 2),     # s = 128 > h = 64
          (TINY_LLAMA, 64, 2),    # GQA 8/2, SwiGLU, RMSNorm, RoPE
          (TINY_MIX, 48, 1),      # MQA, q = 128 != h = 96, LayerNorm + SwiGLU, biases
          (TINY_RELU2, 64, 2)]    # squared ReLU (n = 2: relu's output, reused by pow, and fc2's input), GQA 4/2
IDS = ["gpt-s128", "llama-s64", "mix-s48", "relu2-s64"]


@pytest.mark.parametrize(("spec", "s", "b"), SHAPES, ids=IDS)
@pytest.mark.parametrize("e", [2, 4], ids=["bf16", "fp32"])
@pytest.mark.parametrize("recompute", IMPLEMENTED_RECOMPUTE, ids=lambda r: r.value)  # the reference model's modes
def test_saved_bytes_per_layer_exact(spec, s, b, e, recompute):
    kw = dict(seq_len=s, micro_batch=b, act_bytes=e, recompute=recompute)
    got = saved_activations(spec, **kw)
    predicted = X.planner_layer_bytes(spec, **kw) + sum(x.value for x in X.layer_extras(spec, **kw))
    assert got.per_layer == (predicted,) * spec.num_layers
    outside = dict(seq_len=s, micro_batch=b, act_bytes=e)
    assert got.outside == X.planner_outside_bytes(spec, **outside) + sum(
        x.value for x in X.outside_extras(spec, **outside))


def test_engine_notes_figures_reproduced():
    """The block of docs/engines.md#activations-saved-for-backward (s=128, b=2, h=256, a=8,
    native_dropout, bf16): 3,557,376 B
    = sbh(34 + 5as/h) + LN stats (4 x sb x 2 B) + causal mask (s^2 x 1 B)."""
    from fitplan.specs.model import ModelSpec
    spec = ModelSpec(name="notes", num_layers=1, hidden_size=256, num_heads=8, num_kv_heads=8, ffn_hidden_size=1024,
                     vocab_size=256, max_seq_len=128)
    s, b, h, a = 128, 2, 256, 8
    paper = s * b * h * 34 + 5 * a * s * s * b
    kw = dict(seq_len=s, micro_batch=b, act_bytes=2, recompute=Recompute.NONE)
    assert X.planner_layer_bytes(spec, **kw) == paper == 3_538_944
    assert saved_activations(spec, **kw).per_layer == (paper + 4 * s * b * 2 + s * s,) == (3_557_376,)


def test_full_recompute_keeps_only_the_layer_input():
    got = saved_activations(TINY_LLAMA, seq_len=64, micro_batch=2, act_bytes=2, recompute=Recompute.FULL)
    assert got.per_layer == (2 * 64 * 2 * 128,) * 2   # e*s*b*h, no extras


@pytest.mark.parametrize(("spec", "s", "b"), SHAPES[:2] + SHAPES[3:], ids=IDS[:2] + IDS[3:])
@pytest.mark.parametrize("recompute", IMPLEMENTED_RECOMPUTE, ids=lambda r: r.value)  # the reference model's modes
def test_flops_exact(spec, s, b, recompute):
    pytest.importorskip("fitplan.counts.flops")
    kw = dict(seq_len=s, micro_batch=b, recompute=recompute)
    predicted = X.planner_flops(spec, **kw) + sum(x.value for x in X.flops_extras(spec, **kw))
    assert count_flops(spec, **kw) == predicted


@pytest.mark.parametrize("spec", [TINY_GPT, TINY_LLAMA], ids=["gpt", "llama"])
@pytest.mark.parametrize("recompute", [Recompute.NORMS, Recompute.OP], ids=lambda r: r.value)
def test_partial_recompute_keeps_the_gradients(spec, recompute):
    """norms and op change what is stored, not what is computed: loss and every gradient match
    the model without recompute (dropout off: op's SDPA has no attention dropout; fp32, SDPA vs
    the eager attention to rounding)."""
    from fitplan.validate.reference_model import build, lm_loss

    ids = torch.randint(0, spec.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    grads = []
    for mode in (Recompute.NONE, recompute):
        torch.manual_seed(0)
        net = build(spec, dropout_p=0.0, recompute=mode).train()
        loss = lm_loss(net(ids), ids)
        loss.backward()
        grads.append((loss.detach(), {n: p.grad for n, p in net.named_parameters()}))
    (loss0, g0), (loss1, g1) = grads
    torch.testing.assert_close(loss1, loss0)
    assert g0.keys() == g1.keys()
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], msg=name)
