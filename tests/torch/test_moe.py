"""The reference mixture-of-experts layer (fitplan.validate.reference_moe) against the planner.

TINY_MOE: L = 2 (layer 0 dense, layer 1 MoE), h = 64, a = 4, g = 2 (d = 16, q = 64, kv = 32),
SwiGLU (n = 3), RMSNorm, RoPE, no biases, untied head, V = 512; E = 4 experts of f_e = 96,
top-k = 2, one shared expert (f_s = 96), dense ffn 192.

Parameters (meta device) = counts.params.shape_params, exactly:
  attention 2*64*64 + 2*64*32 = 12,288 and two RMSNorms 128 per layer;
  dense layer + 3*64*192 = 49,280; MoE layer + router 64*4 + experts 4*3*64*96 + shared 3*64*96 = 104,832;
  embedding and head 2*512*64 + final norm 64: 219,712 (active, 2 of 4 experts: 182,848).

Bytes the MoE layer saves for backward, s = 64, b = 2 (T = 128 tokens), bf16 (e = 2), dropout on:
  planner, activations.per_layer_bytes with breakdown.MoeShapes (k = 2, rho = 1, f_e = f_s = 96, E = 4):
    R = s*b*h*(4e + 2DM)                                        = 128*64*10            =  81,920
    T = s*b*(e*(2q + 2kv) + n*e*f_s + k*rho*(e*(h + n*f_e) + 4) + 8E) = 128*(384+576+1416+32) = 308,224
    S = a*s^2*b*(e + D*(e + M))                                  = 4*4096*2*5            = 163,840
                                                                                    total  553,984
  reference extras (expected.layer_extras, moe_layer=True):
    dense-layer ones: RMSNorm rstd 2*T*4 = 1,024; causal mask s^2 = 4,096; RoPE cos, sin 2*s*d*e = 4,096
    MoE (expected.moe_extras), per token 4 + 8k + 8k + 8k + 8k = 68 B: z-loss logsumexp (fp32), topk's
    int64 indices, the int64 index permuting the probabilities, the int64 gather index of the
    permutation and the int64 inverse permutation: 128*68 = 8,704
                                                                           measured = 571,904
  selective drops S and the causal mask; full keeps only the layer input e*s*b*h = 16,384;
  norms drops the two norm outputs 2*e*s*b*h and the rstd. op is not validated on MoE layers
  (reference_model.MOE_RECOMPUTE: the reference's experts are dense matmuls the op policy counts).
Dropless on one rank the stored bytes do not depend on the routing (every copy is stored once):
a router that sends every token to the same k experts stores exactly as much.
"""
import pytest

torch = pytest.importorskip("torch")

from fitplan.counts.params import active_params, shape_params
from fitplan.errors import SpecError
from fitplan.specs import Recompute
from fitplan.specs.model import Mlp, ModelSpec, MoeSpec, Norm, Position
from fitplan.validate import TINY_GPT, TINY_MOE, run_validation
from fitplan.validate import distributed as D
from fitplan.validate import expected as X
from fitplan.validate.measure import SavedTensorRecorder, count_flops, count_params, param_storages, saved_activations
from fitplan.validate.reference_model import MOE_RECOMPUTE, Block

S, B = 64, 2
# GeLU experts, no shared expert, every layer MoE, LayerNorm, learned positions, tied embeddings
GELU_MOE = ModelSpec(name="tiny-moe-gelu", num_layers=2, hidden_size=32, num_heads=2, num_kv_heads=2,
                     ffn_hidden_size=64, vocab_size=128, max_seq_len=64, mlp=Mlp.GELU, norm=Norm.LAYERNORM,
                     position=Position.LEARNED, tied_embeddings=True, linear_bias=False,
                     moe=MoeSpec(num_experts=8, experts_per_token=3, expert_ffn_size=48))


@pytest.mark.parametrize("spec", [TINY_MOE, GELU_MOE], ids=lambda s: s.name)
def test_meta_count_equals_shape_params(spec):
    assert count_params(spec) == shape_params(spec)


def test_tiny_moe_by_hand():
    assert count_params(TINY_MOE) == 49_280 + 104_832 + 2 * 512 * 64 + 64 == 219_712
    assert active_params(TINY_MOE) == 219_712 - 2 * 3 * 64 * 96 == 182_848


def _predicted(spec, *, moe_layer, **kw):
    return X.planner_layer_bytes(spec, moe_layer=moe_layer, **kw) + sum(
        x.value for x in X.layer_extras(spec, moe_layer=moe_layer, **kw))


@pytest.mark.parametrize("e", [2, 4], ids=["bf16", "fp32"])
@pytest.mark.parametrize("recompute", MOE_RECOMPUTE, ids=lambda r: r.value)  # the modes its MoE layers represent
def test_saved_bytes_per_layer_exact(e, recompute):
    kw = dict(seq_len=S, micro_batch=B, act_bytes=e, recompute=recompute)
    got = saved_activations(TINY_MOE, **kw)
    assert got.per_layer == (_predicted(TINY_MOE, moe_layer=False, **kw), _predicted(TINY_MOE, moe_layer=True, **kw))
    assert got.expert_tokens[0] == () and sum(got.expert_tokens[1]) == 2 * S * B   # dropless: k*s*b copies


def test_moe_layer_by_hand():
    kw = dict(seq_len=S, micro_batch=B, act_bytes=2)
    assert X.planner_layer_bytes(TINY_MOE, moe_layer=True, recompute=Recompute.NONE, **kw) == 553_984
    moe = X.moe_extras(TINY_MOE, tokens=S * B)
    assert sum(x.value for x in moe) == 128 * 68
    got = saved_activations(TINY_MOE, recompute=Recompute.NONE, **kw)
    assert got.per_layer[1] == 553_984 + 1_024 + 4_096 + 4_096 + 8_704 == 571_904
    assert saved_activations(TINY_MOE, recompute=Recompute.FULL, **kw).per_layer[1] == 2 * S * B * 64


def test_gelu_moe_every_layer_exact():
    kw = dict(seq_len=32, micro_batch=1, act_bytes=2, recompute=Recompute.NONE)
    got = saved_activations(GELU_MOE, **kw)
    assert got.per_layer == (_predicted(GELU_MOE, moe_layer=True, **kw),) * 2


def _block_bytes(spec, *, recompute, skew: bool) -> tuple[int, tuple]:
    """Bytes one MoE block saves for a (B, S, h) bf16 input; skew: a zero router (all
    logits tie), so topk sends every token to the same k experts."""
    torch.manual_seed(0)
    block = Block(spec, 0.1, recompute, moe_layer=True).to(torch.bfloat16).train()
    if skew:
        torch.nn.init.zeros_(block.mlp.router.weight)
    x = torch.randn(B, S, spec.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    recorder = SavedTensorRecorder(param_storages(block))
    recorder.current = 0
    with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
        y = block(x)
    y.float().sum().backward()
    return recorder.bytes(0), block.mlp.tokens_per_expert


@pytest.mark.parametrize("recompute", [Recompute.NONE, Recompute.SELECTIVE], ids=lambda r: r.value)
def test_stored_bytes_do_not_depend_on_routing(recompute):
    balanced, loads = _block_bytes(TINY_MOE, recompute=recompute, skew=False)
    skewed, skewed_loads = _block_bytes(TINY_MOE, recompute=recompute, skew=True)
    k, E = TINY_MOE.moe.experts_per_token, TINY_MOE.moe.num_experts
    assert max(skewed_loads) == S * B and skewed_loads.count(0) == E - k   # busiest/mean = E/k
    assert max(loads) < S * B
    assert balanced == skewed == _predicted(TINY_MOE, moe_layer=True, seq_len=S, micro_batch=B, act_bytes=2,
                                            recompute=recompute)


def test_moe_output_is_the_weighted_sum_of_its_experts():
    """The permute / experts / combine path computes sum_j p_j * expert_j(x) + shared(x) per token."""
    torch.manual_seed(0)
    block = Block(TINY_MOE, 0.0, Recompute.NONE, moe_layer=True).double()
    moe = block.mlp
    x = torch.randn(5, 64, dtype=torch.float64)
    probs = torch.softmax(x @ moe.router.weight.t(), dim=-1)
    top_p, top_i = probs.topk(2, dim=-1)
    want = torch.stack([sum(top_p[t, j] * moe.experts[int(top_i[t, j])](x[t:t + 1])[0] for j in range(2))
                        for t in range(5)]) + moe.shared(x)
    torch.testing.assert_close(moe(x), want)


def test_weighted_activations_have_the_gradients_of_their_formulas():
    """WeightedSwiGLU (p*silu(gate)*up) and WeightedGelu (p*gelu(x)) keep only their inputs and
    the probability, and write their own backward; torch.autograd.gradcheck compares it with
    finite differences in float64 (its default tolerances: atol 1e-5, rtol 1e-3)."""
    from fitplan.validate.reference_moe import WeightedGelu, WeightedSwiGLU
    torch.manual_seed(0)
    gate, up, x = (torch.randn(6, 5, dtype=torch.float64, requires_grad=True) for _ in range(3))
    p = torch.rand(6, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(WeightedSwiGLU.apply, (gate, up, p))
    assert torch.autograd.gradcheck(WeightedGelu.apply, (x, p))


@pytest.mark.parametrize("recompute", MOE_RECOMPUTE, ids=lambda r: r.value)  # the modes its MoE layers represent
def test_flops_exact(recompute):
    kw = dict(seq_len=32, micro_batch=1, recompute=recompute)
    predicted = X.planner_flops(TINY_MOE, **kw) + sum(x.value for x in X.flops_extras(TINY_MOE, **kw))
    assert count_flops(TINY_MOE, **kw) == predicted


def test_expert_parallel_states_exact():
    """dp = ep = 2 on gloo: each rank holds 2 of the 4 experts; params and grads 4*(P - 2*3*h*f_e)
    (the other rank's experts of the one MoE layer), Adam 8x that + 4 B per local tensor,
    against breakdown.stage_memory for ParallelConfig(dp=2, ep=2)."""
    records = D.measure_distributed([TINY_MOE], seq_len=32, micro_batch=1, world_size=2, checks=("ep",))
    rows = D.state_rows(TINY_MOE, records, seq_len=32, world=2)
    assert [r.quantity for r in rows] == [f"ep {q}" for q in ("params after step", "grads after step",
                                                              "optimizer state after step")]
    assert all(r.ok for r in rows)
    local = shape_params(TINY_MOE) - 2 * 3 * 64 * 96
    assert [r.measured for r in rows[:2]] == [4 * local] * 2
    # dropless: the routed copies of both ranks' tokens (k*s*b each) all arrive at some expert
    assert sum(sum(t) for r in records for t in r["expert_tokens"]) == 2 * (2 * 32 * 1)


def test_fsdp2_nosync_keeps_the_experts_too():
    """FSDP2 at dp = 2, ep = 1, after a backward with set_requires_gradient_sync(False) and
    set_reshard_after_backward(False) (a pipeline stage's every micro-batch but the last).
    fully_shard(layer) makes the MoE layer's 4 experts FSDPParams of the layer's group, and
    FSDPParamGroup.post_backward, with reduce_grads off, keeps every one of them unsharded with
    its gradient (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward).
    So both rows are 4 B x all parameters: dense psi = 219,712 - 73,728 = 145,984 plus routed
    experts psi_e = 4*3*64*96 = 73,728: 4*219,712 = 878,848 B, exact (every expert runs, on
    its possibly empty slice, so each gets a gradient whatever the routing). Counting the
    dense part alone (the harness before this test) gave 4*145,984 = 583,936.
    A dense model in the same run (psi_e = 0): TINY_GPT, 4*141,056 = 564,224 B."""
    records = D.measure_distributed([TINY_MOE, TINY_GPT], seq_len=32, micro_batch=1, world_size=2,
                                    checks=("fsdp2-nosync",))
    psi_e = 4 * 3 * 64 * 96
    assert psi_e == 73_728 and shape_params(TINY_MOE) - psi_e == 145_984 and shape_params(TINY_GPT) == 141_056
    for spec, expected in ((TINY_MOE, 4 * (145_984 + psi_e)), (TINY_GPT, 4 * 141_056)):
        rows = D.runtime_rows(spec, records, seq_len=32, micro_batch=1, world=2)
        assert [r.quantity for r in rows] == ["fsdp2 no-sync: gathered weights kept",
                                              "fsdp2 no-sync: unsharded gradients"]
        for row in rows:
            assert row.relation == "==" and row.ok
            assert row.planner == row.measured == expected
            assert row.per_rank_measured == (expected, expected)
    assert 4 * (145_984 + psi_e) == 878_848


def test_run_validation_rows_exact():
    report = run_validation(model=TINY_MOE, seq_len=32, micro_batch=1, include_distributed=False)
    assert report.ok
    quantities = [r.quantity for r in report.rows]
    assert "moe layer bf16 none" in quantities and "layer bf16 none" in quantities


@pytest.mark.parametrize(("bias", "capacity", "match"), [(True, None, "down projections"), (False, 1.25, "dropless")])
def test_unvalidated_moe_specs_are_refused(bias, capacity, match):
    spec = ModelSpec(name="moe", num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=2, ffn_hidden_size=64,
                     vocab_size=128, max_seq_len=64, linear_bias=bias,
                     moe=MoeSpec(num_experts=2, experts_per_token=1, expert_ffn_size=32, capacity_factor=capacity))
    with pytest.raises(SpecError, match=match):
        run_validation(model=spec, seq_len=16, micro_batch=1, include_distributed=False)
