"""Per-rank model states after one fp32 Adam step on 2 gloo CPU ranks, and tensor-parallel
activations, against the planner. One launch of 2 processes serves the whole module.

Expected relations (P = shape_params, N = 2, n = parameter tensors, 4 B step counter each):
  DDP          params 4P, grads 4P (gradient_as_bucket_view), Adam 8P + 4n        exact
  ZeRO-1       params 4P, grads 4P; Adam moments = 8 x (whole tensors packed on the rank),
               so the planner's 8P/N (12P/N with a master copy) is a lower bound     exact + bound
  FSDP2 ZeRO-3 params, grads 4P/N, Adam 8P/N + 4n, also between forward and backward exact
  FSDP2 ZeRO-2 between forward and backward 4P (planner) + 4P/N (FSDP2's shard)      exact
  TP (DTensor) params = 4 x stage_params(t=2); grads + 4Vh/2 when the embedding is
               untied (DTensor's embedding backward is Replicate)                     exact
  PP           each stage 4 x stage_params(p=2, first/last)                          exact
  PP in flight L = 2p + 1 layers on split(5, 2) = (2, 3), m = 4 micro-batches, bf16: each rank's
               peak of live saved bytes = chunks_in_flight x one micro-batch's stage terms
               (GPipe m; 1F1B min(m, p - r)) + named extras                        exact
"""
import pytest

torch = pytest.importorskip("torch")

from fitplan.arith import ceil_div
from fitplan.counts import params as C
from fitplan.validate import TINY_GPT, TINY_LLAMA
from fitplan.validate import distributed as D
from fitplan.validate import expected as X
from fitplan.validate.reference_model import IMPLEMENTED_RECOMPUTE

MODELS = [TINY_GPT, TINY_LLAMA]
S, B, N = 64, 2, 2


@pytest.fixture(scope="module")
def records():
    return D.measure_distributed(MODELS, seq_len=S, micro_batch=B, world_size=N)


def _recs(records, spec, check):
    out = sorted((r for r in records if r["model"] == spec.name and r["check"] == check), key=lambda r: r["rank"])
    assert [r["rank"] for r in out] == list(range(N))
    return out


def _n_tensors(spec):
    return len(D._param_shapes(spec))


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_every_row_exact(records, spec):
    rows = D.state_rows(spec, records, seq_len=S, world=N)
    rows += D.tp_activation_rows(spec, records, seq_len=S, micro_batch=B, world=N)
    rows += D.pp_activation_rows(spec, records, seq_len=S, micro_batch=B, world=N)
    # ddp 3, zero1 3 + the bound, fsdp2 2 x 4 (with forward->backward), tp 3, pp 2 stages x 3, tp-act 2 x 5 modes,
    # pp-act 2 schedules x 2 stages
    assert len(rows) == 3 + 4 + 8 + 3 + 6 + 10 + 4
    bad = [(r.quantity, r.per_rank_predicted, r.per_rank_measured, r.planner, r.measured) for r in rows if not r.ok]
    assert not bad


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_ddp(records, spec):
    P, n = C.shape_params(spec), _n_tensors(spec)
    for r in _recs(records, spec, "ddp"):
        assert (r["params"], r["grads"], r["optimizer"]) == (4 * P, 4 * P, 8 * P + 4 * n)


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_zero1_packs_whole_tensors(records, spec):
    P = C.shape_params(spec)
    numels = [X._numel(s) for s in D._param_shapes(spec)]
    parts = X.zero1_partition(numels, N)
    moments = []
    for r in _recs(records, spec, "zero1"):
        mine = parts[r["rank"]]
        assert (r["params"], r["grads"]) == (4 * P, 4 * P)
        assert r["optimizer"] == 8 * sum(numels[i] for i in mine) + 4 * len(mine)
        moments.append(r["optimizer"] - 4 * len(mine))
    assert sum(moments) == 8 * P
    assert max(moments) >= ceil_div(8 * P, N)   # the planner's K*P/N is a lower bound for torch ZeRO-1


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_fsdp2_zero3(records, spec):
    P, n = C.shape_params(spec), _n_tensors(spec)   # every dim 0 here is even: no padding at N = 2
    for r in _recs(records, spec, "fsdp2-zero3"):
        assert (r["params"], r["params_fwd_bwd"], r["grads"]) == (4 * P // N,) * 3
        assert r["optimizer"] == 8 * P // N + 4 * n


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_fsdp2_zero2(records, spec):
    P, n = C.shape_params(spec), _n_tensors(spec)
    for r in _recs(records, spec, "fsdp2-zero2"):
        assert r["params_fwd_bwd"] == 4 * P + 4 * P // N   # unsharded (planner ZeRO-2) + FSDP2's own shard
        assert (r["params"], r["grads"], r["optimizer"]) == (4 * P // N, 4 * P // N, 8 * P // N + 4 * n)


def _stage(spec, *, t=1, p=1, first=True):
    # the test's tiny models have a layer count p divides: each stage holds L/p of them
    return C.stage_params(l=spec.num_layers // p, S=C.layer_sharded_params(spec), R=C.layer_replicated_params(spec),
                          Vh=C.embedding_params(spec), P_pos=C.position_params(spec), N_f=C.norm_params(spec),
                          head=C.head_params(spec), tied=spec.tied_embeddings, t=t, p=p, emb=first or p == 1,
                          out=not first or p == 1)


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_tensor_parallel_states(records, spec):
    psi, n = _stage(spec, t=N), _n_tensors(spec)
    grad_extra = 0 if spec.tied_embeddings else 4 * spec.vocab_size * spec.hidden_size // N
    for r in _recs(records, spec, "tp"):
        assert (r["params"], r["grads"], r["optimizer"]) == (4 * psi, 4 * psi + grad_extra, 8 * psi + 4 * n)


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
def test_pipeline_stages(records, spec):
    for r in _recs(records, spec, "pp"):
        psi = _stage(spec, p=N, first=r["rank"] == 0)
        assert (r["params"], r["grads"]) == (4 * psi, 4 * psi)


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
@pytest.mark.parametrize("recompute", IMPLEMENTED_RECOMPUTE, ids=lambda r: r.value)  # the reference model's modes
def test_tensor_parallel_activations(records, spec, sp, recompute):
    kw = dict(seq_len=S, micro_batch=B, act_bytes=2, recompute=recompute, t=N, sp=sp)
    predicted = X.planner_layer_bytes(spec, **kw) + sum(x.value for x in X.layer_extras(spec, **kw))
    key = f"{'sp' if sp else 'tp'}/{recompute.value}"
    assert [r["act"][key] for r in _recs(records, spec, "tp-act")] == [predicted] * N


@pytest.mark.parametrize("spec", MODELS, ids=lambda s: s.name)
@pytest.mark.parametrize("schedule", D.PP_SCHEDULES)
def test_pipeline_activations_in_flight(records, spec, schedule):
    """torch.distributed.pipelining, one stage per rank, uneven stages from the planner's split:
    GPipe holds all m micro-batches on every rank, 1F1B min(m, p - r), and at that peak each
    rank's live saved bytes are the planner's stage terms plus the named extras, exactly."""
    from fitplan.counts.stages import split

    model = D.pp_act_model(spec, N)
    assert split(model.num_layers, N) == (2, 3)
    m = D.PP_MICROBATCHES
    for r in _recs(records, spec, "pp-act"):
        kw = dict(seq_len=S, micro_batch=B, act_bytes=2, world=N, rank=r["rank"], schedule=schedule, microbatches=m)
        planner = X.planner_pp_stage(model, **kw)
        assert r["layers"] == planner["layers"] == (2, 3)[r["rank"]]
        assert planner["chunks"] == (m if schedule == "gpipe" else min(m, N - r["rank"]))
        assert r[schedule] == planner["bytes"] + sum(x.value for x in X.pp_extras(model, **kw))
        assert r[f"{schedule}_left"] == 0


def test_pipeline_activations_three_stages():
    """p = 3: 7 layers split (2, 3, 2); the middle rank holds 2 micro-batches under 1F1B."""
    records = D.measure_distributed([TINY_LLAMA], seq_len=S, micro_batch=B, world_size=3, checks=("pp-act",))
    rows = D.pp_activation_rows(TINY_LLAMA, records, seq_len=S, micro_batch=B, world=3)
    assert len(rows) == 6 and all(r.ok for r in rows)
    assert "7 layers split 2/3/2" in rows[0].section
    assert [r.quantity for r in rows if r.quantity.startswith("1f1b")] == [
        "1f1b stage 0 (2 layers, 3 micro-batches in flight)", "1f1b stage 1 (3 layers, 2 micro-batches in flight)",
        "1f1b stage 2 (2 layers, 1 micro-batch in flight)"]
