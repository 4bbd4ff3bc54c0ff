"""Hybrid Mamba models: the layer pattern, each kind's parameters, stored bytes, FLOPs and tensor-parallel
split, their pipeline stages, serving state, and the layouts refused. Numbers derived by hand beside each."""
from dataclasses import replace

import numpy as np
import pytest

from fitplan import presets
from fitplan.counts import flops as F
from fitplan.counts import hybrid as HY
from fitplan.counts import params as P
from fitplan.counts import stages as ST
from fitplan.errors import SpecError
from fitplan.explain import RAW, Trace
from fitplan.memory import activations as A
from fitplan.memory.breakdown import Setup, evaluate, stage_at
from fitplan.serving import plan_serving
from fitplan.specs import ClusterSpec, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.specs.compat import check
from fitplan.specs.model import MambaSpec, Mlp, ModelSpec, MoeSpec, Norm, Position, SsmVersion
from fitplan.timing.step import step_time

NH8B = presets.MODELS["nemotron-h-8b"].model
NANO = presets.MODELS["nemotron-3-nano-30b-a3b"].model


def _setup(model, *, seq_len=4096, gpus=8):
    return Setup(model=model, training=TrainingSpec(seq_len=seq_len, recipe=presets.recipe("mixed-adam"),
                                                    global_batch=64),
                 cluster=ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=gpus, gpus_per_node=8, reserve_bytes=0))


def test_a_mamba2_layer_and_its_tensor_parallel_split():
    """Nemotron-H 8B's Mamba-2 layer (h 4096, 128 heads of 64, 8 groups, state 128, conv 4): in_proj
    4096 x (2*8192 + 2*8*128 + 128) = 76,021,760, conv (8192 + 2048) x 4 + 10240 bias = 51,200, A_log, D, dt_bias
    3 x 128 = 384, gated norm 8192, out_proj 8192 x 4096 = 33,554,432: 109,635,968, all split by t (Megatron-LM
    MambaMixer); the pre-norm 4096 is replicated. At t = 8: 13,704,496 + 4096 per GPU."""
    S, R = HY.block_params(NH8B, "M")
    assert (S, R) == (76_021_760 + 51_200 + 384 + 8192 + 33_554_432, 4096) == (109_635_968, 4096)
    assert HY.in_proj_width(NH8B) == 18560 and HY.conv_channels(NH8B) == 10240
    assert HY.mamba_matmul_params(NH8B) == 4096 * 18560 + 8192 * 4096
    stage = stage_at(RAW, NH8B, ParallelConfig(tp=8), 0)
    kw = dict(t=8, n_M=1, S_M=S, R_M=R, n_A=0, S_A=0, R_A=0, n_D=0, S_D=0, R_D=0, n_E=0, S_E=0, R_E=0)
    assert P.hybrid_layers_params(**kw) == 109_635_968 // 8 + 4096
    assert stage.kinds() == {"M": 24, "*": 4, "-": 24, "E": 0}


def test_an_attention_and_mlp_pattern_is_the_transformer():
    """A hybrid pattern of alternating attention and MLP layers ("*-" x L) is an L-layer transformer: the same
    parameters (one pre-norm each, two per transformer layer), the same FLOPs, activations and step time."""
    base = replace(presets.MODELS["llama3-8b"].model, num_layers=8, name="t8")
    hybrid = replace(base, num_layers=16, layer_pattern="*-" * 8, name="h16")
    assert P.shape_params(hybrid) == P.shape_params(base)
    for recompute in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL):
        c = ParallelConfig(dp=4, tp=2, sequence_parallel=True, recompute=recompute, zero=ZeroStage.OS)
        t, h = _setup(base, gpus=8), _setup(hybrid, gpus=8)
        bt, bh = evaluate(t, c), evaluate(h, c)
        if recompute != Recompute.FULL:   # full keeps each layer's input, a hybrid layer's too: 16 inputs, not 8
            assert bh.parts["activations/layers"] == pytest.approx(bt.parts["activations/layers"], abs=16)
        assert bh.parts["states/weights"] == bt.parts["states/weights"]
        st, sh = step_time(RAW, t, c), step_time(RAW, h, c)
        assert sh["flops/model_step"] == pytest.approx(st["flops/model_step"], rel=1e-12)
        if recompute != Recompute.FULL:
            assert sh["time/step"] == pytest.approx(st["time/step"], rel=1e-9)


def test_a_mamba_layers_stored_bytes():
    """Per token, summed over tp (Megatron-LM's mamba_split_conv1d_scan_combined path): zxBCdt 2 x 18560, out_x
    2 x 8192, the gated output 2 x 8192 (the norm's input), out_proj's input 2 x 8192, the norm's fp32 rstd per group
    4 x 8 = 86,304 B for Nemotron-H 8B. One layer at s = 4096, b = 1, t = 1: the pre-norm's input and output
    4096 x 4 B per token and that, 4096 x (16384 + 86304) B."""
    assert A.mamba_per_token_bytes(W_in=18560, d=8192, G=8, N=128, e=2) == 2 * 18560 + 3 * 2 * 8192 + 32 == 86_304
    b = A.per_block_bytes(kind="M", s=4096, b=1, h=4096, e=2, M=1, D=0, t=1, c=1, sp=False,
                          recompute=Recompute.NONE, T_tok=86_304)
    assert b == 4096 * (4 * 4096 + 86_304)
    full = A.per_block_bytes(kind="M", s=4096, b=1, h=4096, e=2, M=1, D=0, t=2, c=1, sp=True,
                             recompute=Recompute.FULL, T_tok=86_304)
    assert full == 2 * 4096 * 4096 // 2   # the layer's input, sequence-parallel


def test_the_ssd_scans_flops():
    """Per chunk of Q tokens: C^T B per group 2*Q^2*N, the intra-chunk output per head 2*Q^2*P, the chunk state and
    the inter-chunk output per head 2*Q*N*P each: 2*s*(Q*N*G + Q*d + 2*N*d). Nemotron-H 8B, s = 8192:
    2 x 8192 x (128*128*8 + 128*8192 + 2*128*8192) = 55,834,574,848; the backward reruns C^T B and the states."""
    assert F.ssd_flops(B=1, s=8192, Q=128, N=128, G=8, d=8192) == 2 * 8192 * (131072 + 1048576 + 2097152) \
        == 53_687_091_200
    assert F.ssd_backward_rerun_flops(B=1, s=8192, Q=128, N=128, G=8, d=8192) == 2 * 8192 * (131072 + 1048576)


def test_kind_counts_on_every_pipeline_stage_match_the_pattern_slices():
    """A stage's layers by kind equal the kinds in its slice of the pattern (fitplan.counts.stages.split),
    for every pp, with pinned ends too; the stages together hold the pattern once."""
    pattern = NANO.layer_pattern
    cum = HY.prefix_counts(pattern)
    for p in (1, 2, 3, 4, 13):
        for pins in ({}, {"first": 5}, {"first": 3, "last": 7}):
            if p == 1 and pins:
                continue
            split = ST.split(len(pattern), p, 1, pins.get("first"), pins.get("last"))
            start = 0
            for i, n in enumerate(split):
                for k in "M*-E":
                    got = ST.kind_layers_on_stage(L=len(pattern), cum=cum[k], p=p, v=1, i=i, **pins)
                    assert got == pattern[start:start + n].count(k), (p, pins, i, k)
                start += n
    # arrays of candidates, as the search evaluates them
    p = np.array([1, 2, 4]); i = np.array([0, 1, 3])
    got = ST.kind_layers_on_stage(L=52, cum=cum["M"], p=p, v=np.array([1, 1, 1]), i=i)
    assert list(got) == [23, pattern[26:].count("M"), pattern[39:].count("M")]


def test_serving_a_hybrid_keeps_a_constant_state_beside_the_attention_layers_cache():
    """Nemotron 3 Nano (6 attention, 23 Mamba-2 layers; 2 kv heads of 128; 64 heads of 64, state 128, 8 groups):
    the KV cache is 2 x 6 x 2 x 128 x 2 B = 6,144 B per token; each Mamba layer keeps per sequence a conv state of
    3 x (4096 + 2*8*128) x 2 B = 36,864 B and an fp32 SSM state of 64 x 64 x 128 x 4 B = 2,097,152 B: 23 x 2,134,016
    = 49,082,368 B, whatever the context."""
    cluster = _setup(NANO, gpus=1).cluster
    short = plan_serving(NANO, cluster, tp=1, pp=1, batch=8, context=8192)
    long = plan_serving(NANO, cluster, tp=1, pp=1, batch=8, context=65536)
    assert (short.attention_layers, short.kv_cache_bytes_per_token) == (6, 6144)
    assert short.ssm_state_bytes_per_sequence == 23 * (3 * 6144 * 2 + 64 * 64 * 128 * 4) == 49_082_368
    assert short.ssm_state_bytes_per_gpu == long.ssm_state_bytes_per_gpu == 8 * 49_082_368
    assert long.kv_cache_bytes_per_gpu == 8 * short.kv_cache_bytes_per_gpu == 8 * 8 * 8192 * 6144
    assert short.per_gpu_bytes == short.weights_bytes_per_gpu + short.kv_cache_bytes_per_gpu + 8 * 49_082_368


@pytest.mark.parametrize(("layout", "rule"), [
    (dict(cp=2, dp=4), "hybrid_cp"),
    (dict(pp=2, virtual_stages=2, dp=4), "hybrid_virtual_stages"),
    (dict(recompute=Recompute.NORMS, dp=8), "hybrid_recompute_mode"),
    (dict(tp=16, dp=1), "mamba_heads_not_divisible_by_tp"),
])
def test_layouts_a_hybrid_cannot_run(layout, rule):
    s = _setup(NH8B, gpus=8)
    assert rule in [v.rule for v in check(NH8B, s.training, s.cluster, ParallelConfig(**layout),
                                          allow_cross_node_tp=True)]


@pytest.mark.parametrize(("change", "message"), [
    (dict(layer_pattern="M*-"), "names 3 layers but num_layers is 52"),
    (dict(mamba=None), "has Mamba layers \\(M\\) but no \\[model.mamba\\] table"),
    (dict(layer_pattern=None), "Mamba layers need a layer_pattern"),
    (dict(layer_pattern="M" * 51 + "E"), "has MoE layers \\(E\\) but no \\[model.moe\\] table"),
])
def test_a_bad_hybrid_spec_names_the_field(change, message):
    with pytest.raises(SpecError, match=message):
        replace(NH8B, **change)


def test_jambas_mamba_layers_refuse_tensor_parallelism():
    """Megatron-LM splits Mamba-2 layers only: a Mamba (mamba1) layer at tp > 1 is not modelled."""
    jamba = ModelSpec(name="j", num_layers=4, hidden_size=256, num_heads=4, num_kv_heads=4, ffn_hidden_size=512,
                      vocab_size=1000, max_seq_len=512, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.NONE,
                      layer_pattern="M-*E", moe=MoeSpec(num_experts=4, experts_per_token=2, expert_ffn_size=512),
                      mamba=MambaSpec(num_heads=512, head_dim=1, state_size=16, version=SsmVersion.MAMBA1))
    s = _setup(jamba, gpus=2)
    assert "mamba1_tp" in [v.rule for v in check(jamba, s.training, s.cluster, ParallelConfig(tp=2))]
    assert HY.dt_rank(jamba) == 16   # mamba_ssm's "auto": ceil(256 / 16)


def test_a_hybrid_plan_explains_each_kind_of_layer():
    s = _setup(NANO, gpus=8)
    trace = Trace()
    from fitplan.memory.breakdown import stage_memory
    c = ParallelConfig(dp=8, ep=8, zero=ZeroStage.OS)
    stage_memory(trace, s, c, stage=stage_at(trace, NANO, c, 0))
    keys = {t.key for t in trace.terms}
    assert {"activations/per_mamba_layer", "activations/per_attention_layer", "activations/per_moe_layer",
            "activations/ssd_scan_workspace", "params/stage_hybrid_layers"} <= keys
    assert "activations/per_layer" not in keys and "params/dense_layers_on_stage" not in keys
