"""Uneven pipeline stages, schedules, hybrid sharding, kept gathers, partial recompute, MTP and
node-limited routing (issue 13). Each expected number is derived beside it."""
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from fitplan import presets
from fitplan.cli import main
from fitplan.counts import params as P
from fitplan.counts import stages as ST
from fitplan.explain import RAW
from fitplan.memory import activations as A
from fitplan.memory.breakdown import Setup, busiest_total, evaluate
from fitplan.search import SearchSpace, search
from fitplan.specs.parallel import SETTINGS
from fitplan.specs import ClusterSpec, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.specs.parallel import RecomputeMethod, Schedule
from fitplan.timing import evaluate_step
from fitplan.timing import pipeline as PL


def _setup(name, gpus, *, gpu=None, seq=None, batch=None, recipe="mixed-adam"):
    p = presets.MODELS[name]
    t = TrainingSpec(seq_len=seq or p.seq_len, recipe=presets.recipe(recipe),
                     global_batch=batch if batch is not None else p.global_batch,
                     attention_kernel=p.attention_kernel, dropout=p.dropout)
    g = presets.gpu(gpu or p.gpu)
    return Setup(p.model, t, ClusterSpec(gpu=g, num_gpus=gpus, gpus_per_node=g.gpus_per_node,
                                         reserve_bytes=g.default_reserve_bytes))


# ---------------------------------------------------------------- the split

@pytest.mark.parametrize("L, p, v, first, last, expected", [
    (126, 16, 1, None, None, (7,) + (8,) * 14 + (7,)),    # Llama 3 405B: (126 + 2)/16 = 8 units, ends 8 - 1
    (70, 12, 1, None, None, (5,) + (6,) * 10 + (5,)),     # BLOOM-176B: (70 + 2)/12 = 6 units
    (61, 16, 1, None, None, (2,) + (4,) * 14 + (3,)),     # DeepSeek-V3: 63 = 3*16 + 15: 15 extras on 1..14 and 15
    (96, 8, 1, None, None, (12,) * 8),                    # GPT-3: (96 + 2)/8 -> 13 > 12 = 96/8: plain even split
    (126, 16, 1, 5, None, (5,) + (8,) * 12 + (9, 9) + (7,)),   # last gets (121 + 1)//15 - 1 = 7; 114 = 8*14 + 2
    (126, 16, 2, None, None, (7,) + (8,) * 14 + (7,)),    # 128 units over 32 chunks of 4: chunk 0 and 31 hold 3
    (10, 4, 1, 1, 1, (1, 4, 4, 1)),
])
def test_split(L, p, v, first, last, expected):
    got = ST.split(L, p, v, first, last)
    assert got == expected and sum(got) == L


def test_every_chunk_keeps_a_layer_and_the_middle_rises():
    """For every L >= p*v up to 80: chunks sum to L, each holds a layer, chunk_start is the running
    sum, the middle stages hold at most two counts, non-decreasing, and boundary_stage is the first
    of the larger (the property the search's four candidate ranks rest on)."""
    for L in range(1, 81):
        for p in range(1, 18):
            for v in (1, 2, 3, 4):
                P_ = p * v
                if L < P_:
                    continue
                chunks = [int(ST.chunk_layers(L, P_, j)) for j in range(P_)]
                assert sum(chunks) == L and min(chunks) >= 1
                assert [int(ST.chunk_start(L, P_, j)) for j in range(P_)] == [sum(chunks[:j]) for j in range(P_)]
                mid = ST.split(L, p, v)[1:-1]
                assert list(mid) == sorted(mid) and len(set(mid)) <= 2
                if len(set(mid)) == 2:
                    b = ST.boundary_stage(L=L, p=p, v=v)
                    assert ST.split(L, p, v)[b] == max(mid) and ST.split(L, p, v)[b - 1] == min(mid)


def test_dense_layers_follow_the_split():
    """DeepSeek-V3's 3 dense layers: stage 0 holds 2 layers (both dense), stage 1 the third."""
    got = [int(ST.dense_layers_on_stage.fn(L=61, L_d=3, p=16, v=1, i=i)) for i in range(3)]
    assert got == [2, 1, 0]


CASES = [
    ("llama3.1-405b", 8192, dict(tp=8, pp=16, dp=64, sequence_parallel=True, zero=ZeroStage.OS_G_P,
                                 reshard_after_forward=False)),
    ("llama3.1-405b", 8192, dict(tp=8, pp=16, dp=64, sequence_parallel=True, zero=ZeroStage.OS, virtual_stages=2)),
    ("bloom-176b", 384, dict(tp=4, pp=12, dp=8, zero=ZeroStage.OS, recompute=Recompute.FULL, micro_batch=2)),
    ("deepseek-v3", 2048, dict(pp=16, dp=128, ep=64, zero=ZeroStage.OS, schedule=Schedule.DUALPIPE,
                               recompute=Recompute.NORMS)),
    ("deepseek-v3", 2048, dict(pp=16, dp=128, ep=64, zero=ZeroStage.OS)),
    ("llama3.1-70b", 80, dict(tp=2, pp=5, dp=8, sequence_parallel=True)),
    ("llama3.1-70b", 64, dict(tp=2, pp=4, dp=8, sequence_parallel=True, first_stage_layers=16, last_stage_layers=22)),
    ("gpt3-175b", 64, dict(tp=8, pp=8, schedule=Schedule.GPIPE, recompute=Recompute.FULL)),
    ("gpt3-175b", 64, dict(tp=8, pp=8, schedule=Schedule.ZERO_BUBBLE, recompute=Recompute.SELECTIVE)),
]


@pytest.mark.parametrize("name, gpus, kw", CASES)
def test_the_search_path_finds_the_busiest_rank(name, gpus, kw):
    """busiest_total (the search's four candidate ranks, float arrays) equals the exact evaluation
    over every rank, to float64 rounding of the screening pass (1 part in 1e12)."""
    setup = _setup(name, gpus)
    config = ParallelConfig(**kw)
    exact = evaluate(setup, config)
    names = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages")
    grid = type("Grid", (), {**{k: np.array([float(getattr(config, k))]) for k in names},
                             **{k: getattr(config, k) for k in ("zero", "sequence_parallel", "recompute") + SETTINGS}})
    assert float(busiest_total(setup, grid)[0]) == pytest.approx(exact.per_gpu_bytes, rel=1e-12)


# ---------------------------------------------------------------- schedules

def test_in_flight_chunks_per_schedule():
    """1F1B rank r holds min(m, p - r) [Narayanan Sec. 2.2.1]; ZB-H1 the same [Qi et al. Sec. 3.1];
    GPipe all m; DualPipe p + 1 half-rank chunks [DeepSeek-V3 Table 2]."""
    assert [A.chunks_in_flight.fn(p=8, v=1, r=r, m=32) for r in (0, 3, 7)] == [8, 5, 1]
    assert A.chunks_in_flight.fn(p=8, v=1, r=0, m=32, schedule="zero-bubble") == 8
    assert A.chunks_in_flight.fn(p=8, v=1, r=5, m=32, schedule="gpipe") == 32
    assert A.chunks_in_flight.fn(p=16, v=2, r=0, m=120, schedule="dualpipe") == 17


def test_bubble_per_schedule():
    """With T_b = 2*T_f: ZB-H1 (p - 1)*T_f/(m*(T_f + T_b)) = (p - 1)/(3m); DualPipe
    (p/2 - 1)(T_f + T_b/2)/(m*(T_f + T_b)) = (p/2 - 1)*2/(3m)."""
    p, m = 16, 64
    assert PL.bubble_fraction_schedule.fn(p=p, m=m, T_f=1.0, T_b=2.0, schedule="zero-bubble") == pytest.approx(
        15 / (3 * 64))
    assert PL.bubble_fraction_schedule.fn(p=p, m=m, T_f=1.0, T_b=2.0, schedule="dualpipe") == pytest.approx(
        7 * 2 / (3 * 64))
    setup = _setup("gpt3-175b", 64)
    one = evaluate_step(setup, ParallelConfig(tp=8, pp=8))
    zb = evaluate_step(setup, ParallelConfig(tp=8, pp=8, schedule=Schedule.ZERO_BUBBLE))
    assert one.bubble_fraction == pytest.approx(7 / 1536)                     # m = 1536/1 micro-batches, (p - 1)/m
    T_f = next(t.value for t in zb.terms if t.key == "time/forward_microbatch")
    T_b = next(t.value for t in zb.terms if t.key == "time/backward_microbatch")
    assert zb.bubble_fraction == pytest.approx(7 * T_f / (1536 * (T_f + T_b)))


def test_gpipe_holds_every_microbatch():
    """GPipe's first stage holds m micro-batches: activations/layers + in-flight = m x one micro-batch."""
    setup = _setup("gpt3-175b", 64, batch=64)   # tp 8 x pp 8 on 64 GPUs: dp 1, so m = 64/(1*1) = 64
    b = evaluate(setup, ParallelConfig(tp=8, pp=8, schedule=Schedule.GPIPE, recompute=Recompute.FULL))
    one = b.parts["activations/layers"]
    assert b.parts["activations/pipeline_in_flight"] == 63 * one


def test_dualpipe_holds_two_stages_and_both_ends():
    """DualPipe rank 0 runs stage 0 and stage p-1: 2 + 3 layers of DeepSeek-V3 (+ the MTP layer),
    the embedding and the head; weights count both stages (the report's "2x parameters")."""
    from fitplan.memory.breakdown import stage_at
    setup = _setup("deepseek-v3", 2048, gpu="h800")
    c = ParallelConfig(pp=16, dp=128, ep=64, zero=ZeroStage.OS, schedule=Schedule.DUALPIPE)
    assert evaluate(setup, c).stage_layers == (2,) + (4,) * 14 + (3,)
    rank0 = stage_at(RAW, setup.model, c, 0)
    assert (rank0.layers, rank0.mtp, rank0.embedding, rank0.head) == (2 + 3 + 1, 1, True, True)
    mid = stage_at(RAW, setup.model, c, 5)       # stages 5 and 10: 4 + 4 layers, no ends
    assert (mid.layers, mid.embedding, mid.head) == (8, False, False)
    one = stage_at(RAW, setup.model, replace(c, schedule=Schedule.ONE_F_ONE_B), 5)
    assert one.layers == 4                        # 1F1B: one stage per rank


# ---------------------------------------------------------------- sharding

def test_hybrid_sharding_divides_state_by_the_shard_group():
    """ZeRO-3 over groups of 8 of the 64 dp ranks: master and optimizer per GPU = ceil(psi*12/8)."""
    setup = _setup("llama3.1-8b", 64)
    full = evaluate(setup, ParallelConfig(dp=64, zero=ZeroStage.OS_G_P))
    hsdp = evaluate(setup, ParallelConfig(dp=64, zero=ZeroStage.OS_G_P, shard_degree=8))
    psi = next(t.value for t in hsdp.terms if t.key == "params/stage")
    assert hsdp.parts["states/optimizer"] == -(-psi * 8 // 8)
    assert full.parts["states/optimizer"] == -(-psi * 8 // 64)
    st = evaluate_step(setup, ParallelConfig(dp=64, zero=ZeroStage.OS_G_P, shard_degree=8))
    assert any(t.key == "comm/dp_replica_ar_s" for t in st.terms)


def test_no_reshard_keeps_the_gathered_stage_and_gathers_once():
    """FSDP reshard_after_forward=False: w*psi held (the gathered copy is whole, beside the shard: fitplan
    validate's fsdp2-nosync rows measure it), and m weight all-gathers instead of 2m."""
    setup = _setup("llama3.1-8b", 64)
    c = ParallelConfig(dp=64, zero=ZeroStage.OS_G_P, reshard_after_forward=False)
    b = evaluate(setup, c)
    psi = next(t.value for t in b.terms if t.key == "params/stage")
    assert b.parts["runtime/gathered_weights"] == psi * 2
    kept = evaluate_step(setup, c)
    freed = evaluate_step(setup, replace(c, reshard_after_forward=True))
    gathers = lambda st: next(t.value for t in st.terms if t.key == "comm/dp_param_ag")
    assert 2 * gathers(kept) == gathers(freed)


# ---------------------------------------------------------------- partial recompute

def test_block_and_uniform_recompute_by_hand():
    """Megatron --recompute-num-layers 2 on a stage of l layers. block: 2 inputs + (l - 2) whole
    layers; uniform: ceil(l/2) group inputs, and a workspace of 2 whole layers."""
    setup = _setup("llama3.1-8b", 8)
    base = ParallelConfig(dp=8, recompute=Recompute.FULL)
    none = evaluate(setup, replace(base, recompute=Recompute.NONE)).parts
    full = evaluate(setup, base).parts
    a_in = full["activations/layers"] // 32      # the layer input, 2*s*b*h (32 layers)
    a_keep = none["activations/layers"] // 32
    block = evaluate(setup, replace(base, recompute_num_layers=2, recompute_method=RecomputeMethod.BLOCK)).parts
    assert block["activations/layers"] == 2 * a_in + 30 * a_keep
    assert block["activations/recompute_workspace"] == a_keep
    uniform = evaluate(setup, replace(base, recompute_num_layers=2)).parts
    assert uniform["activations/layers"] == 16 * a_in and uniform["activations/recompute_workspace"] == 2 * a_keep
    share = next(t.value for t in evaluate_step(setup, replace(base, recompute_num_layers=2,
                 recompute_method=RecomputeMethod.BLOCK)).terms if t.key == "flops/recomputed_share")
    assert share == pytest.approx(2 / 32)


# ---------------------------------------------------------------- MoE details

def test_mtp_module_parameters():
    """DeepSeek-V3's MTP module beyond its layer: the 2h -> h projection and three RMSNorms,
    2*7168^2 + 3*7168 = 102,781,952 at t = 1."""
    assert P.mtp_extra_params.fn(D=1, h=7168, t=1) == 2 * 7168**2 + 3 * 7168 == 102_781_952


def test_node_limited_routing_caps_the_network_copies():
    """DeepEP (the deepseek-v3 preset's dispatcher, --moe-dispatcher deepep) sends a token once to each other node its experts are on.
    ep=64 on 8-GPU H800 nodes: each expert group is 64 consecutive ranks, N = 8 nodes. Top-8 over 8 nodes,
    uniformly: 7 * (1 - (7/8)^8) = 4.595 other nodes per token; limited to 4 nodes (DeepSeek-V3 Sec. 3.2.2)
    the 4 are uniform over the 8, 4 * 7/8 = 3.5 of them remote. The message itself is unchanged."""
    setup = _setup("deepseek-v3", 2048, gpu="h800")
    setup = replace(setup, training=replace(setup.training, moe_dispatcher="deepep"))
    c = ParallelConfig(pp=16, dp=128, ep=64, zero=ZeroStage.OS)
    limited = evaluate_step(setup, c)
    model = replace(setup.model, moe=replace(setup.model.moe, route_nodes=None))
    free = evaluate_step(replace(setup, model=model), c)
    term = lambda st, key: next(t.value for t in st.terms if t.key == key)   # noqa: E731
    assert limited.comm["ep"].nodes == 8
    assert term(limited, "comm/moe_remote_nodes") == pytest.approx(3.5)
    assert term(free, "comm/moe_remote_nodes") == pytest.approx(7 * (1 - (7 / 8) ** 8))
    assert term(limited, "comm/moe_a2a_message") == term(free, "comm/moe_a2a_message")
    assert limited.comm["ep"].busy_s < free.comm["ep"].busy_s


# ---------------------------------------------------------------- the contract

def test_pp16_with_126_layers_gives_stage_layers_summing_to_126():
    import io
    out = io.StringIO()
    main(["plan", "--preset", "llama3.1-405b", "--gpus", "8192", "--tp", "8", "--pp", "16", "--sequence-parallel",
          "--zero", "3", "--no-reshard-after-forward", "--json"], out=out)
    data = json.loads(out.getvalue())
    assert data["stage_layers"] == [7] + [8] * 14 + [7] and sum(data["stage_layers"]) == 126
    assert data["busiest_stage"] == 1 and data["time"]["slowest_stage"] == 1 and data["fits"]


def test_the_16384_gpu_search_considers_pp16_for_405b():
    """No candidate is rejected for its layer count at pp 16 (126 layers, 16 stages of 7-8)."""
    setup = _setup("llama3.1-405b", 16384)
    space = SearchSpace(tp=(8,), pp=(16,), cp=(1,), micro_batches=(1,), virtual_stages=(1, 2),
                        sequence_parallel=(True,), zero=(ZeroStage.OS, ZeroStage.OS_G_P))
    r = search(setup, space, top=3)
    assert "too_few_layers_for_stages" not in r.rejected_by_reason and r.fit > 0
    assert all(s.config.pp == 16 for s in r.suggestions)


@pytest.mark.parametrize("dense", [0, 1, 3])
def test_candidate_ranks_hold_the_busiest_for_every_small_layout(dense):
    """A small MoE model with 0, 1 or 3 dense layers first, 13 layers, over pp 2..8, v 1..3, every
    schedule that takes them, with and without a global batch that limits the micro-batches:
    the candidate ranks' maximum equals the exact maximum over every rank."""
    from fitplan.specs.model import Mlp, ModelSpec, MoeSpec, Norm, Position
    model = ModelSpec(name="small-moe", num_layers=13, hidden_size=256, num_heads=8, num_kv_heads=8,
                      ffn_hidden_size=1024, vocab_size=1000, max_seq_len=512, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
                      position=Position.ROPE, tied_embeddings=False, linear_bias=False,
                      moe=MoeSpec(num_experts=8, experts_per_token=2, expert_ffn_size=512, first_dense_layers=dense))
    names = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages")
    checked = 0
    for batch in (None, 12):
        for p in range(2, 9):
            g = presets.gpu("h100-80gb")
            setup = Setup(model, TrainingSpec(seq_len=256, recipe=presets.recipe("mixed-adam"), global_batch=batch),
                          ClusterSpec(gpu=g, num_gpus=p, gpus_per_node=8, reserve_bytes=g.default_reserve_bytes))
            for v in (1, 2, 3):
                for sched in Schedule:
                    if p * v > 13 or (sched != Schedule.ONE_F_ONE_B and v > 1) or (sched == Schedule.DUALPIPE and p % 2):
                        continue
                    c = ParallelConfig(pp=p, virtual_stages=v, schedule=sched)
                    grid = type("Grid", (), {**{k: np.array([float(getattr(c, k))]) for k in names},
                                             **{k: getattr(c, k) for k in ("zero", "sequence_parallel", "recompute")
                                                + SETTINGS}})
                    exact = evaluate(setup, c).per_gpu_bytes
                    assert float(busiest_total(setup, grid)[0]) == pytest.approx(exact, rel=1e-12), (p, v, sched)
                    checked += 1
    assert checked > 50


def test_a_stage_without_layers_is_timed():
    """--first-stage-layers 0 leaves stage 0 the embedding alone: 61 layers and the head's unit,
    62, over three stages are 21, 21, 20, and the head's stage drops its unit: (0, 21, 21, 19);
    the last stage's micro-batch also crosses the preset's MTP block (depth 1, DeepSeek-V3
    Sec. 2.2), so the per-stage table counts 20 there. The table times every rank; with MoE layers a stage's average layer mixes the
    dense and MoE rates over its layer count, which was 0/0 on stage 0 (bench/fuzz.py found the
    ZeroDivisionError). Stage 0's micro-batch is the embedding lookup only: under a tenth of a
    21-layer stage's, and it does not pace the step."""
    from fitplan.timing.breakdown import per_layer
    setup = _setup("deepseek-v3", 64)
    config = ParallelConfig(pp=4, dp=16, first_stage_layers=0)
    assert ST.split(61, 4, 1, 0, None) == (0, 21, 21, 19)
    rows = per_layer(setup, config)
    assert [r.layers for r in rows] == [0, 21, 21, 19 + 1]
    assert 0 <= rows[0].microbatch_forward_s < rows[1].microbatch_forward_s / 10
    assert not rows[0].paces and any(r.paces for r in rows[1:])


@pytest.mark.parametrize(("L", "p", "first", "last", "split"), [
    (52, 3, 5, None, (5, 24, 23)),   # one middle stage: the 24 left by the ends, not 25 (the last-chunk extra is the
    (52, 3, None, 5, (23, 24, 5)),   # default split's, with its embedding and head units, never a middle run's)
    (10, 3, 2, None, (2, 5, 3)),
])
def test_one_middle_stage_takes_what_the_pinned_ends_leave(L, p, first, last, split):
    assert ST.split(L, p, 1, first, last) == split and sum(split) == L


def test_layers_kept_in_bf16_are_counted_on_the_ranks_that_hold_them():
    """--bf16-first-layers 1 --bf16-last-layers 2 on Llama 3.1 8B's 32 layers (fitplan.timing.layer_rates
    .bf16_layers_on_stage): pp 4 puts layer 0 on rank 0 and layers 30-31 on rank 3; with 2 virtual stages the
    chunks are 4 layers, rank 0 holding layers 0-3 and 16-19 (1 kept), rank 3 layers 12-15 and 28-31 (2); under
    DualPipe rank 0 runs stages 0 and 3 (1 + 2). Nemotron 3 Super's last 14 pattern layers (Megatron-Bridge's NVFP4
    recipe keeps them) are EMEM*EMEMEMEME: 7 MoE, 6 Mamba, 1 attention, all on the one rank at pp 1."""
    from fitplan.timing.layer_rates import bf16_layers_on_stage
    model = presets.MODELS["llama3.1-8b"].model
    counts = lambda **c: [bf16_layers_on_stage(model, ParallelConfig(**c), i, first=1, last=2)["dense"]
                          for i in range(c["pp"])]
    assert counts(pp=4) == [1, 0, 0, 2]
    assert counts(pp=4, virtual_stages=2) == [1, 0, 0, 2]
    assert counts(pp=4, schedule=Schedule.DUALPIPE) == [3, 0, 0, 3]
    over = SimpleNamespace(pp=np.array([1, 2, 4, 8]), virtual_stages=1, first_stage_layers=None,
                           last_stage_layers=None)   # the fields it reads, as the search's arrays over candidates
    grid = bf16_layers_on_stage(model, over, 0, first=1, last=2)["dense"]
    assert list(grid) == [3, 1, 1, 1]   # rank 0 of pp 1 holds all three
    super_ = presets.MODELS["nemotron-3-super-120b-a12b"].model
    assert super_.layer_pattern[-14:] == "EMEM*EMEMEMEME"
    assert bf16_layers_on_stage(super_, ParallelConfig(), 0, first=0, last=14) == {"M": 6, "*": 1, "-": 0, "E": 7}
    moe = presets.MODELS["deepseek-v3"].model   # 3 dense layers first: the first kept one is dense
    assert bf16_layers_on_stage(moe, ParallelConfig(), 0, first=1, last=2) == {"dense": 1, "moe": 2}


def test_the_split_on_arrays_is_the_split_on_ints():
    """The search's arrays (stacked ranks ahead of the grid's axes, mixed virtual-stage counts) give, element by
    element, the ints' split: stage_layers and dense_layers_on_stage take every chunk at once on a leading axis
    there, a loop over the chunks here. 126 and 61 layers (3 dense), p in {1, 2, 4, 8, 16}, v in {1, 2, 3, 4, 8}."""
    for L, L_d in ((126, 3), (61, 3)):
        p = np.array([1, 2, 4, 8, 16], dtype=np.float64).reshape(1, 1, 1, 5)
        v = np.array([1, 2, 3, 4, 8], dtype=np.float64).reshape(1, 5, 1, 1)
        ranks = np.array([0, 1, 3, 7], dtype=np.float64).reshape(4, 1, 1, 1, 1)   # stacked, one more axis
        i = np.minimum(ranks, p - 1)
        got = ST.stage_layers.fn(L=L, p=p, v=v, i=i)
        dense = ST.dense_layers_on_stage.fn(L=L, L_d=L_d, p=p, v=v, i=i)
        assert got.shape == dense.shape == (4, 1, 5, 1, 5)
        for r, vi, pi in np.ndindex(4, 5, 5):
            pp, vv = int(p.ravel()[pi]), int(v.ravel()[vi])
            ii = min(int(ranks.ravel()[r]), pp - 1)
            assert got[r, 0, vi, 0, pi] == ST.stage_layers.fn(L=L, p=pp, v=vv, i=ii)
            assert dense[r, 0, vi, 0, pi] == ST.dense_layers_on_stage.fn(L=L, L_d=L_d, p=pp, v=vv, i=ii)
