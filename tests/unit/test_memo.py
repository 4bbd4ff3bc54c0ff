"""fitplan.explain.Memo, the search's evaluator across its groups: the same values as RAW, each
formula computed once per distinct set of inputs (arrays told apart by identity), and `sweep`
keeping only what the last group used; and arith.floor_div, which the screening divides with."""
import numpy as np
import pytest

from fitplan.explain import RAW, Memo
from fitplan.memory import activations as A
from fitplan.memory import states as S
from fitplan.specs.parallel import ZeroStage


def _counting(f):
    calls = []

    def fn(**kw):
        calls.append(kw)
        return f.fn(**kw)
    return type(f)(fn, f.key, f.text, f.cite, f.unit, f.assumes), calls


def test_same_values_as_raw_and_once_per_inputs():
    # master weights: 4 bytes per parameter, ZeRO-1 shards them over N_d: ceil(4*psi/n_d)
    master, calls = _counting(S.master_bytes)
    psi, n_d = np.array([1e9, 3e9 + 1]), np.array([8.0, 16.0])
    memo = Memo()
    kw = dict(psi=psi, m=4, n_d=n_d, zero=ZeroStage.OS)
    first = memo(master, **kw)
    again = memo(master, key="states/master", **kw)
    assert again is first and len(calls) == 1
    assert first.tolist() == RAW(S.master_bytes, **kw).tolist() == [5e8, 750000001.0]   # ceil(4*(3e9+1)/16)
    # an equal array that is another object, or another ZeRO stage, is computed again
    assert memo(master, **dict(kw, psi=psi.copy())).tolist() == first.tolist() and len(calls) == 2
    assert memo(master, **dict(kw, zero=ZeroStage.NONE)).tolist() == [4e9, 12000000004.0] and len(calls) == 3


def test_plain_inputs_differ_by_type():
    # True and 1 hash alike; the memo keys them apart (a bool flag is not a count)
    emb, calls = _counting(A.embedding_bytes)
    memo = Memo()
    kw = dict(s=2048, b=1, h=12288, M=1, D=1, t=8, c=1, n_mb=1)
    assert memo(emb, sp=True, **kw) == RAW(A.embedding_bytes, sp=True, **kw)
    memo(emb, sp=1, **kw)
    assert len(calls) == 2


def test_sweep_keeps_what_the_last_group_used():
    weights, calls = _counting(S.weights_bytes)
    memo, psi = Memo(), np.array([7e9])
    used = dict(psi=psi, w=2, n_d=1, zero=ZeroStage.NONE)
    unused = dict(used, zero=ZeroStage.OS_G_P, n_d=4)
    memo(weights, **used)
    memo(weights, **unused)
    memo.sweep()           # group 1 used both
    memo(weights, **used)  # group 2 uses one
    memo.sweep()
    assert len(calls) == 2
    memo(weights, **used)
    memo(weights, **unused)   # forgotten: computed again
    assert len(calls) == 3


def test_floor_div_matches_floor_division():
    # arith.floor_div on float arrays (floor of the true quotient) equals NumPy's floor division for
    # whole numbers below 2^53: exact quotients, one below, one above, and the largest degrees' products
    from fitplan.arith import floor_div
    x = np.array([64.0, 63.0, 65.0, 16384 * 8.0, 2.0**52 - 1, 1536.0])
    n = np.array([8.0, 8.0, 8.0, 3.0, 7.0, 16.0 * 3])
    assert floor_div(x, n).tolist() == (x // n).tolist() == [8.0, 7.0, 8.0, 43690.0, 643371375338642.0, 32.0]
    assert floor_div(1536, 48) == 32 and type(floor_div(1536, 48)) is int   # ints stay exact ints


def test_once_computes_a_part_once_per_inputs_and_sweeps_like_a_formula():
    """Memo.once(inputs, make): make() once per distinct inputs (plain values by value and type, anything else
    by identity, held so an id is not reused), kept across a sweep when the last group used it; explain.once
    calls make() every time for RAW and a Trace, whose terms must appear in their usual order."""
    from fitplan.explain import Trace, once
    made = []
    memo, box = Memo(), np.array([1.0, 2.0])
    make = lambda: made.append(1) or len(made)   # noqa: E731
    assert memo.once((box, 3, "x"), make) == 1 and memo.once((box, 3, "x"), make) == 1 and len(made) == 1
    assert memo.once((box.copy(), 3, "x"), make) == 2        # an equal array, another object
    assert memo.once((box, 3.0, "x"), make) == 3             # 3.0 is not 3
    memo.sweep()
    assert memo.once((box, 3, "x"), make) == 1 and len(made) == 3   # kept: the last group used it
    memo.sweep()
    assert memo.once((box, 3.0, "x"), make) == 4             # not used by the last group: made again
    assert once(RAW, make, lambda: ()) == 5 and once(Trace(), make, lambda: ()) == 6


SCREENED = [("gpt3-175b", 64), ("deepseek-v3", 256), ("nemotron-3-nano-30b-a3b", 32)]   # dense, MoE + MTP, hybrid


@pytest.mark.parametrize("name,gpus", SCREENED)
def test_the_screens_share_the_data_parallel_costs_and_agree_with_fresh_ones(monkeypatch, name, gpus):
    """The search times its screens (one per recompute mode) through one Memo, and what no
    recompute mode changes (the data-parallel collectives' costs, fitplan.timing.data_parallel._dp_costs; the
    slowest rank's stage, the groups' placement, the GEMMs' efficiencies, the optimizer step) is formed for the
    first screen only, the modes sharing one slowest-rank array (as fitplan.search does: the most forward FLOPs,
    which no mode changes): each screen's step times equal, to the last bit, the step times the same box gets
    through RAW, which computes everything afresh (the search's own box)."""
    from dataclasses import replace

    from fitplan.search import _grid, _legal, default_space
    from fitplan.specs.parallel import Recompute
    from fitplan.timing import data_parallel as DP
    from fitplan.timing.step import step_time
    from fitplan.timing.work import pacing_rank
    from fitplan.memory.stages import end_stages
    from tests.conftest import make_setup
    setup = make_setup(name, gpus)
    space = default_space(gpus)
    base = _grid(gpus, space, setup.model)
    legal = _legal(setup, replace(base, sequence_parallel=True), space, {})
    rows, view = base.box({True: legal})
    view = replace(view, ends=tuple(end_stages(setup.model, view)))
    zeros = np.array([0.0, 1.0, 2.0, 3.0]).reshape(-1, 1, 1, 1, 1)
    memo, made, at = Memo(), [], None
    real = DP._dp_costs
    monkeypatch.setattr(DP, "_dp_costs", lambda *a, **k: made.append(1) or real(*a, **k))
    for rc in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL):
        c = replace(view, zero=zeros, sequence_parallel=True, recompute=rc)
        with np.errstate(all="ignore"):
            at = pacing_rank(setup, c) if at is None else at   # once, as the search: no mode changes it
            assert np.array_equal(pacing_rank(setup, c), at)
            shared = step_time(memo, setup, c, stage_index=at, flops=False)["time/step"]
            fresh = step_time(RAW, setup, c, stage_index=at)["time/step"]
        memo.sweep()
        ok = np.isfinite(fresh)
        assert ok.any() and np.array_equal(shared[ok], fresh[ok])
    # per screen: the stages below 3 in one pass and ZeRO-3 in another; RAW makes both each time (3 x 2), the
    # memo only for the first screen (2)
    assert len(made) == 3 * 2 + 2


@pytest.mark.parametrize("name,gpus", SCREENED)
def test_the_memory_screens_share_the_zero_parts_and_agree_with_fresh_ones(monkeypatch, name, gpus):
    """The search's memory screens (one per recompute mode) share one Memo, and the parts no
    recompute mode changes (the states and the weights' copies, fitplan.memory.breakdown._zero_parts; the runtime's
    buffers, _runtime; the ZeRO side of each moment's peak, fitplan.memory.timeline.peak_bytes) are formed for the
    first screen only: each screen's busiest totals equal, to the last bit, what the same box gets through RAW,
    which computes everything afresh (the search's own box, its stacked candidate ranks)."""
    from dataclasses import replace

    from fitplan.memory import breakdown as MB
    from fitplan.search import _grid, _legal, default_space
    from fitplan.specs.parallel import Recompute
    from tests.conftest import make_setup
    setup = make_setup(name, gpus)
    space = default_space(gpus)
    base = _grid(gpus, space, setup.model)
    legal = _legal(setup, replace(base, sequence_parallel=True), space, {})
    rows, view = base.box({True: legal})
    zeros = np.array([0.0, 1.0, 2.0, 3.0]).reshape(-1, 1, 1, 1, 1)
    memo, comms, made = Memo(), {}, []
    for part in ("_zero_parts", "_runtime"):
        real = getattr(MB, part)
        monkeypatch.setattr(MB, part, lambda *a, _real=real, _part=part, **k: made.append(_part) or _real(*a, **k))
    for rc in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL):
        c = replace(view, zero=zeros, sequence_parallel=True, recompute=rc)
        with np.errstate(all="ignore"):
            shared, _ = MB.busiest_totals(setup, c, memo, comms)
            fresh, _ = MB.busiest_totals(setup, c)
        memo.sweep()
        ok = np.isfinite(fresh)
        assert ok.any() and np.array_equal(shared[ok], fresh[ok])
    # each part: RAW forms it in every screen (3 calls), the memo in the first screen only (1)
    assert made.count("_zero_parts") == made.count("_runtime") == 3 + 1


@pytest.mark.parametrize("name,gpus", SCREENED)
@pytest.mark.parametrize("overlap", [False, True])
def test_one_box_screens_both_sp_settings_as_a_box_of_each_would(name, gpus, overlap):
    """The search screens both SP settings in one box (_Grid.box: each setting's degree triples in turn along the
    degree axis, sequence_parallel a bool per triple): each setting's stretch of that box's busiest totals, host
    bytes and step times equals, to the last bit, what a box of that setting alone gets, whose sequence_parallel is
    the scalar (the tp exchanges all-reduces or reduce-scatter + all-gather pairs, the activations sharded by t or
    not; with --tp-comm-overlap, hidden behind the GEMMs only under SP)."""
    from dataclasses import replace

    from fitplan.memory.breakdown import busiest_totals
    from fitplan.memory.stages import end_stages
    from fitplan.search import _grid, _legal, default_space
    from fitplan.timing.step import step_time
    from fitplan.timing.work import pacing_rank
    from tests.conftest import make_setup
    setup = make_setup(name, gpus)
    space = default_space(gpus)
    space = replace(space, settings=replace(space.settings, tp_comm_overlap=overlap))
    base = _grid(gpus, space, setup.model)
    legal = {sp: _legal(setup, replace(base, sequence_parallel=sp), space, {}) for sp in (False, True)}
    zeros = np.array([0.0, 1.0, 2.0, 3.0]).reshape(-1, 1, 1, 1, 1)

    def screen(view):
        view = replace(view, ends=tuple(end_stages(setup.model, view)), zero=zeros)
        with np.errstate(all="ignore"):
            totals, host = busiest_totals(setup, view)
            step = step_time(RAW, setup, view, stage_index=pacing_rank(setup, view))["time/step"]
        full = (len(zeros),) + view.shape[1:] + view.shape[:1]
        return [np.broadcast_to(a, full) for a in (totals, host, step)]

    rows, both = base.box(legal)
    assert both.sequence_parallel.dtype == bool and both.sequence_parallel.shape == (1, 1, 1, 1, both.shape[0])
    merged, start = screen(both), 0
    for sp in (False, True):
        alone_rows, alone = base.box({sp: legal[sp]})
        assert alone.sequence_parallel is sp and np.array_equal(alone_rows[sp], rows[sp])
        d = alone.shape[0]
        assert d > 0 and np.array_equal(both.sequence_parallel[..., start:start + d], np.full((1, 1, 1, 1, d), sp))
        for got, want in zip(merged, screen(alone)):
            assert np.array_equal(got[..., start:start + d], want, equal_nan=True)
        start += d
    assert start == both.shape[0]


def test_the_exact_path_forms_each_stage_once_and_as_fresh():
    """stage_at under RAW on one configuration keeps each rank's Stage (memory.stages._EXACT): asked again, the same
    object; equal to _stage_at computed afresh for an even split, interleaving, pinned ends, DualPipe and a hybrid
    model; and a field the split reads (pp, the pinned last stage) is a key of its own."""
    from dataclasses import replace

    from fitplan import presets
    from fitplan.memory import stages as MS
    from fitplan.specs import ParallelConfig
    from fitplan.specs.parallel import Schedule
    cases = [("llama3.1-405b", ParallelConfig(tp=8, pp=16, dp=8, virtual_stages=8)),
             ("llama3.1-405b", ParallelConfig(tp=8, pp=16, dp=8, first_stage_layers=7, last_stage_layers=6)),
             ("deepseek-v3", ParallelConfig(pp=16, dp=64, ep=64, schedule=Schedule.DUALPIPE)),
             ("nemotron-3-nano-30b-a3b", ParallelConfig(pp=4, dp=8, ep=8))]
    for name, c in cases:
        model = presets.model(name).model
        for i in range(c.pp):
            got = MS.stage_at(RAW, model, c, i)
            assert MS.stage_at(RAW, model, c, i) is got
            assert got == MS._stage_at(RAW, model, c, i)
    model, c = presets.model("llama3.1-405b").model, cases[1][1]
    pinned = MS.stage_at(RAW, model, c, c.pp - 1)
    assert pinned.layers == 6   # the pinned last stage (126 layers, the head's stage holds 6)
    assert MS.stage_at(RAW, model, replace(c, last_stage_layers=9), c.pp - 1).layers == 9
    assert MS.stage_at(RAW, model, replace(c, pp=8, first_stage_layers=None, last_stage_layers=None), 7).layers == 15
