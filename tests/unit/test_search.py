"""The search on the seed cases, derived by hand where it matters.

GPT-3 175B, 192 GiB GPUs, 10 GiB reserved (182 GiB usable), 8 per node, global batch 1536.
16 GPUs: no configuration without CP fits with no recompute (tp=8 x pp=2 leaves 16psi/16 =
163 GiB of state and 32 GiB of activations), so the first suggestion needs selective
recompute: TP 8 + SP, PP 2, ZeRO-0 = 163.0 GiB state + 9.56 GiB (34sbhL/t) + extras. Its peak
is the first stage's first backward, where the runtime adds the CUDA context (400 MiB), the
cuBLAS workspace (32 MiB), NCCL (tp 8, pp 2 and the world group: 6 ring peers x 32 channels x
9,633,792 B), one layer's backward gradients (2*e*s*b*h/t + 2*e*a*s^2*b/t, and one weight's
gradient before it is accumulated, w*h*f/t), the pipeline's gradient buffers (2*e*s*b*h/t) and
the allocator's pages (22 MiB): 176.28 GiB, 92% of the 192 GiB capacity, so tight by Fujii et
al.'s 80% rule and nothing is recommended.
"""
import io
import json

import pytest

from fitplan.cli import main
from fitplan.memory.breakdown import evaluate
from fitplan.search import default_space, search
from fitplan.specs import compat
from fitplan.specs.parallel import Recompute, ZeroStage
from fitplan.units import GiB
from tests.conftest import make_setup


@pytest.fixture(scope="module")
def result16():
    setup = make_setup("gpt3-175b", 16)
    return setup, search(setup, default_space(16), top=4)


def test_16_gpus_recommendation(result16):
    setup, r = result16
    best = r.suggestions[0].config
    assert (best.dp, best.tp, best.pp, best.cp) == (1, 8, 2, 1)
    assert best.sequence_parallel and best.recompute is Recompute.SELECTIVE and best.zero is ZeroStage.NONE
    b = r.suggestions[0].breakdown
    s, h, a, t = 2048, 12288, 96, 8
    # NCCL: rings for tp and the world (16 > 8), 32 channels of 9,633,792 B each; the pipeline's neighbour on the
    # other node: no node-local peer, the shared network pool of 2 x 32 x 16 x 128 KiB
    runtime = 400 * 2**20 + 32 * 2**20 + 2 * 32 * 9_633_792 + 2**27 + (2 * 2 * s * h // t + 2 * 2 * a * s * s // t
                                                                 + 2 * h * 4 * h // t) + 2 * 2 * s * h // t + 22 * 2**20
    assert b.per_gpu_bytes - sum(b.peak.held[k] for k in b.peak.held if not k.startswith("runtime/")) == runtime
    assert b.per_gpu_bytes / GiB == pytest.approx(175.25, abs=0.005)
    assert b.headroom_bytes / GiB == pytest.approx(6.75, abs=0.005)
    tight = search(setup, default_space(16), top=4, recommend=True)
    # every fitting layout is tight (above 80% of 192 GiB): the fastest of them is recommended, said so
    assert tight.recommended.breakdown.per_gpu_bytes > 0.8 * 192 * GiB and "tight" in tight.recommend_note
    # Eq. 6 with the first stage's 2 micro-batches in flight of L/2 layers: 34*s*b*h*L/t
    assert b.parts["activations/layers"] + b.parts["activations/pipeline_in_flight"] == 34 * 2048 * 12288 * 96 // 8


def test_candidates_add_up(result16):
    setup, r = result16
    assert r.fit + sum(r.rejected_by_reason.values()) == r.considered
    assert r.considered == 3264   # (tp, pp, cp) triples dividing 16 x 1 micro-batch x 4 virtual x 24 mode groups


def test_every_suggestion_fits_alone(result16):
    setup, r = result16
    for s in r.suggestions:
        assert not compat.check(setup.model, setup.training, setup.cluster, s.config)
        assert evaluate(setup, s.config).fits


def test_8_gpus_nothing_fits_with_proof():
    out = io.StringIO()
    assert main(["plan", "--preset", "gpt3-175b", "--gpus", "8", "--suggest", "--json"], out=out) == 1
    data = json.loads(out.getvalue())
    assert not data["feasible"] and data["suggestions"] == [] and data["recommended"] is None
    lb = data["lower_bound"]
    # (16*175e9 + 2*2048*1*12288*96) / (182 * 2**30) = 14.36 -> 15 GPUs; 16 as a power of two
    assert lb["min_gpus"] == 15 and lb["min_gpus_power_of_two"] == 16 and lb["excludes"]
    assert lb["per_gpu_bytes"] == -(-(16 * 175 * 10**9 + 2 * 2048 * 12288 * 96) // 8)
    assert "> usable 182.00 GiB" in lb["inequality"]
    assert lb["smallest_fitting_gpus"] == 16 and lb["smallest_fitting_gpus_power_of_two"] == 16


def test_32_gpus_no_recompute_needed():
    setup = make_setup("gpt3-175b", 32)
    r = search(setup, default_space(32), top=5)
    assert all(s.config.recompute is Recompute.NONE for s in r.suggestions)
    assert [(s.config.tp, s.config.pp) for s in r.suggestions[:2]] == [(4, 8), (8, 4)]


def test_fixed_axis_restricts_space():
    out = io.StringIO()
    assert main(["plan", "--preset", "gpt3-175b", "--gpus", "16", "--suggest", "--pp", "1", "--json"], out=out) == 0
    assert all(s["pp"] == 1 for s in json.loads(out.getvalue())["suggestions"])


def test_a_fixed_degree_that_divides_no_layout_is_an_empty_search():
    """--tp 3 on 8 GPUs: no degree triple divides the GPU count, so the grid is empty; the search
    answers (0 candidates, nothing fits, exit 1) instead of failing on the empty box."""
    out = io.StringIO()
    assert main(["plan", "--preset", "llama3.1-8b", "--gpus", "8", "--suggest", "--tp", "3", "--json"], out=out) == 1
    answer = json.loads(out.getvalue())
    assert answer["candidates"]["considered"] == 0 and answer["candidates"]["fit"] == 0
    assert answer["feasible"] is False and answer["suggestions"] == []


def _legal_configs(setup, step=7):
    """Every step-th legal configuration of a small space: all ZeRO stages, recompute modes, sp, v,
    and each offload where the cluster names host memory."""
    from itertools import product
    from fitplan.search import divisors
    from fitplan.specs import Offload, ParallelConfig
    n = setup.cluster.num_gpus
    offloads = tuple(Offload) if setup.cluster.host_memory_bytes is not None else (Offload.NONE,)
    out = []
    for t, p, c, z, rc, sp, v, mb, o in product(divisors(n), divisors(n), (1, 2), ZeroStage, Recompute,
                                                (False, True), (1, 2), (1, 2), offloads):
        if n % (t * p * c):
            continue
        config = ParallelConfig(tp=t, pp=p, cp=c, dp=n // (t * p * c), zero=z, recompute=rc, sequence_parallel=sp,
                                virtual_stages=v, micro_batch=mb, offload=o)
        if not compat.check(setup.model, setup.training, setup.cluster, config, allow_cross_node_tp=True):
            out.append(config)
    return out[::step]


@pytest.mark.parametrize("name,gpus,host", [("gpt3-175b", 16, None), ("mixtral-8x7b", 16, None),
                                            ("llama3.1-8b", 8, None), ("llama2-70b", 8, 2**40)])
def test_the_exact_check_is_evaluate_without_the_explanation(name, gpus, host):
    """What the search checks exactly (busiest_totals on one configuration's ints, breakdown.fits) is
    the peak, host bytes and verdict evaluate gives with its explanation, to the byte (llama2-70b:
    every offload, 1 TiB of host memory per node)."""
    from dataclasses import replace
    from fitplan.memory.breakdown import busiest_totals, fits
    setup = make_setup(name, gpus)
    setup = replace(setup, cluster=replace(setup.cluster, host_memory_bytes=host))
    configs = _legal_configs(setup)
    assert len(configs) >= 20
    for config in configs:
        b = evaluate(setup, config)
        assert busiest_totals(setup, config) == (b.per_gpu_bytes, b.host_per_node_bytes), config
        assert fits(setup, config) is b.fits


def test_the_fit_check_stops_at_the_first_rank_over(monkeypatch):
    """breakdown.fits forms the candidate ranks in turn and answers at the first over the usable memory:
    DeepSeek-V3 on 2,048 H100s at tp 2 + SP, pp 8, ep 128, ZeRO-0 fits a micro-batch of 1 with 1.55 GiB
    headroom (the search's first layout); at 2 its first rank (the most micro-batches in flight) is over,
    so one of its ranks is formed instead of all of them, and the verdict is busiest_totals' (and evaluate's)."""
    from dataclasses import replace
    from fitplan.memory import breakdown as MB
    from fitplan.memory.stages import candidate_stages
    from fitplan.request import Request
    from fitplan.resolve import resolve
    from fitplan.specs import ParallelConfig
    setup = resolve(Request(command="plan", values={"preset": "deepseek-v3", "gpus": 2048})).setup   # as the CLI
    config = ParallelConfig(tp=2, pp=8, dp=128, ep=128, sequence_parallel=True, micro_batch=2)
    peaks = [peak for peak, _ in MB._rank_totals(setup, config, MB.RAW, None)]
    usable = setup.cluster.usable_bytes
    first_over = next(i for i, p in enumerate(peaks) if p > usable)
    assert len(peaks) == len(candidate_stages(setup.model, config)) > 1 and first_over == 0
    assert MB.busiest_totals(setup, config)[0] == max(peaks) > usable
    formed = []
    real = MB.stage_memory
    monkeypatch.setattr(MB, "stage_memory", lambda *a, **k: formed.append(1) or real(*a, **k))
    assert MB.fits(setup, config) is False and len(formed) == first_over + 1
    formed.clear()
    assert MB.fits(setup, replace(config, micro_batch=1)) is True and len(formed) == len(peaks)   # every rank


@pytest.mark.parametrize("name,gpus,extra", [("gpt3-175b", 32, {}), ("llama3.1-405b", 1024, {}),
                                             ("mixtral-8x7b", 16, {}), ("deepseek-v3", 2048, {}),
                                             ("llama3.1-8b", 8, {"fragmentation": 0.15})])
def test_the_screened_peak_is_the_exact_peak(monkeypatch, name, gpus, extra):
    """The float64 screen's peak of every candidate the search looks at (the ranked, minimum viable,
    recommended and scanned ones) equals the exact path's ints to within a byte, far inside
    SCREEN_TOLERANCE_BYTES (1 MiB), the distance from a limit beyond which _exact takes the screen
    as it is. The fragmentation case multiplies by 0.15, a factor floats round."""
    from dataclasses import replace
    import fitplan.search as S
    from fitplan.memory.breakdown import busiest_totals
    setup = make_setup(name, gpus)
    if extra:
        setup = replace(setup, training=replace(setup.training, **extra))
    seen, exact = [], S._exact

    def spy(setup, members, group_of, index_of, margin_limit, screened):
        get = exact(setup, members, group_of, index_of, margin_limit, screened)

        def checked(pos):
            config = S._config(members[group_of[pos]][0], index_of[pos])
            seen.append((float(screened[pos]), busiest_totals(setup, config)[0], config))
            return get(pos)
        return checked
    monkeypatch.setattr(S, "_exact", spy)
    search(setup, default_space(gpus), top=5, recommend=True)
    assert len(seen) >= 5
    for got, want, config in seen:
        assert abs(got - want) <= 1, (got, want, config)


def test_the_lazy_order_is_lexsort():
    """_Order reads out np.lexsort's order (most significant key first, ties by position) however far
    it is read, with a mask, with ties straddling every prefix cut and with NaN first keys (last, as
    lexsort puts them): 5,000 candidates, first keys from 40 values, so each cut at 64 and 1,024
    falls inside a run of ties."""
    import numpy as np
    from itertools import islice
    from fitplan.search import _Order
    rng = np.random.default_rng(7)
    n = 5000
    first = rng.integers(0, 40, n).astype(np.float64)
    first[rng.random(n) < 0.01] = np.nan
    second, third = rng.integers(0, 3, n), rng.random(n)
    keys = [first, second, third]
    want = np.lexsort(keys[::-1])
    assert list(_Order(keys)) == want.tolist()
    assert list(islice(_Order(keys), 10)) == want[:10].tolist()
    mask = rng.random(n) < 0.3
    assert list(_Order(keys, where=mask)) == want[mask[want]].tolist()
    assert list(islice(_Order(keys, where=mask), 70)) == want[mask[want]][:70].tolist()
    all_nan = [np.full(100, np.nan), rng.random(100)]
    assert list(_Order(all_nan)) == np.lexsort(all_nan[::-1]).tolist()


@pytest.mark.parametrize("name,gpus", [("gpt3-175b", 16), ("gpt3-175b", 32), ("llama3.1-70b", 64)])
def test_the_largest_micro_batch_starts_from_what_the_search_knows(name, gpus):
    """Each printed layout's largest micro-batch takes "the layout fits" from the search (its screen,
    exact where it is near the limit: _exact) instead of checking it again; the answer is the one a
    fresh check from scratch gives, for the ranked, minimum viable, recommended and alternative layouts."""
    from fitplan.answers import largest_fitting_micro_batch
    setup = make_setup(name, gpus)
    r = search(setup, default_space(gpus), top=4, recommend=True)
    shown = [*r.suggestions, r.minimum_viable, r.recommended, *r.alternatives]
    assert len(shown) >= 4
    for s in shown:
        assert s.exact.largest_micro_batch == largest_fitting_micro_batch(setup, s.config)
        assert s.exact.largest_micro_batch >= s.config.micro_batch   # each fits at its own micro-batch
