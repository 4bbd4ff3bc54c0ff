"""Search soundness over random models and clusters (hypothesis, 'ci' profile: derandomized).

- every suggestion passes the rules and fits when evaluated alone, exactly;
- on these small spaces the number that fit and the best suggestion equal a brute-force
  enumeration that evaluates every candidate one at a time with Python ints;
- every rejection has a reason: rejected + fit = considered;
- the lower bound never exceeds the best configuration found, and when it excludes a GPU
  count nothing is found there.
"""
from itertools import product

from hypothesis import given, settings

from fitplan.counts.params import num_params
from fitplan.memory.bound import lower_bound
from fitplan.memory.breakdown import busiest_totals, evaluate
from fitplan.search import default_space, rank_key, search
from fitplan.specs import compat
from fitplan.specs.parallel import ParallelConfig
from tests.properties.strategies import setups


def brute_force(setup, space):
    """Every legal candidate that fits, tier by tier of offload (only the first tier with a fit
    counts, as the search does), with its RANK_ORDER key: one configuration at a time, on exact
    Python ints."""
    n = setup.cluster.num_gpus
    for tier in space.offload:
        fitting = []
        for tp, pp, cp, mb, v, zero, sp, rc in product(space.tp, space.pp, space.cp, space.micro_batches,
                                                       space.virtual_stages, space.zero, space.sequence_parallel,
                                                       space.recompute):
            if n % (tp * pp * cp):
                continue
            c = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=n // (tp * pp * cp), zero=zero, sequence_parallel=sp,
                               recompute=rc, micro_batch=mb, virtual_stages=v, offload=tier)
            if compat.check(setup.model, setup.training, setup.cluster, c) or (zero > 0 and c.dp * c.cp == 1):
                continue
            # evaluate(setup, c)'s per_gpu_bytes and host_per_node_bytes without the explanation (test_search.py)
            peak, host = busiest_totals(setup, c)
            limit = setup.cluster.host_memory_bytes
            if peak <= setup.cluster.usable_bytes and (limit is None or host <= limit):   # Breakdown.fits
                fitting.append((rank_key(cp=cp, recompute_level=rc.level, zero=int(zero), tp=tp, pp=pp, v=v, mb=mb,
                                         requested_mb=space.requested_micro_batch, sp=int(sp),
                                         total=peak, offload_level=tier.level), c))
        if fitting:
            return fitting
    return []


def agrees_with_brute_force(setup, space, r):
    """The search's count of fits, its accounting of rejections and its first suggestion equal
    brute force's."""
    fitting = brute_force(setup, space)
    assert r.fit == len(fitting)
    assert r.fit + sum(r.rejected_by_reason.values()) == r.considered
    if fitting:
        assert r.suggestions[0].config == min(fitting, key=lambda kc: kc[0])[1]


@settings(max_examples=60)
@given(setups())
def test_search_equals_brute_force(setup):
    space = default_space(setup.cluster.num_gpus, micro_batch=2, max_virtual_stages=2)
    r = search(setup, space, top=3)
    agrees_with_brute_force(setup, space, r)
    for s in r.suggestions:
        assert not compat.check(setup.model, setup.training, setup.cluster, s.config)
        assert evaluate(setup, s.config).fits


@settings(max_examples=60)
@given(setups())
def test_lower_bound_is_sound(setup):
    space = default_space(setup.cluster.num_gpus, micro_batch=1, max_virtual_stages=2)
    r = search(setup, space, top=1)
    t, m = setup.training, setup.model
    bound = lower_bound(B=t.recipe.total_bytes, psi=num_params(m), e=t.act_bytes, s=t.seq_len, b_min=1,
                        h=m.hidden_size, L=m.num_layers, N=setup.cluster.num_gpus, U=setup.cluster.usable_bytes)
    if r.suggestions:
        assert bound.per_gpu_bytes <= r.suggestions[0].breakdown.per_gpu_bytes
        assert not bound.excludes
    if bound.excludes:
        assert not r.feasible
