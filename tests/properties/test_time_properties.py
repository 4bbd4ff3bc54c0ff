"""Invariants of the step-time model over random valid models, clusters and configurations."""
from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fitplan.specs import compat
from fitplan.specs.parallel import ParallelConfig, Recompute, ZeroStage
from fitplan.timing import evaluate_step
from tests.properties.strategies import setups


@st.composite
def configured(draw):
    setup = draw(setups(gpus=st.sampled_from([2, 4, 8, 16])))
    assume(setup.training.recipe.compute == "bf16")   # the drawn GPU (A100) has no fp8 rate
    n = setup.cluster.num_gpus
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if n % t == 0]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if (n // tp) % p == 0]))
    config = ParallelConfig(tp=tp, pp=pp, dp=n // (tp * pp), zero=draw(st.sampled_from(list(ZeroStage))),
                            sequence_parallel=tp > 1 and draw(st.booleans()),
                            recompute=draw(st.sampled_from(list(Recompute))))
    assume(not compat.check(setup.model, setup.training, setup.cluster, config, allow_cross_node_tp=True))
    return setup, config


def _faster_links(setup, k):
    gpu = setup.cluster.gpu
    gpu = replace(gpu, intra_node=replace(gpu.intra_node, bytes_per_s=gpu.intra_node.bytes_per_s * k),
                  inter_node=replace(gpu.inter_node, bytes_per_s=gpu.inter_node.bytes_per_s * k))
    return replace(setup, cluster=replace(setup.cluster, gpu=gpu))


@settings(max_examples=150)
@given(configured(), st.floats(1.0, 100.0))
def test_more_bandwidth_never_makes_a_step_slower(sc, k):
    setup, config = sc
    assert evaluate_step(_faster_links(setup, k), config).step_time_s <= evaluate_step(setup, config).step_time_s * (1 + 1e-12)


@settings(max_examples=150)
@given(configured())
def test_a_larger_bubble_never_raises_throughput(sc):
    """Halving the global batch halves m, so the bubble fraction (p - 1)/(v*m) doubles;
    tokens per second never rise."""
    setup, config = sc
    b = setup.training.global_batch
    assume(b is not None and b % (2 * config.dp * config.micro_batch) == 0)
    small = replace(setup, training=replace(setup.training, global_batch=b // 2))
    big_r, small_r = evaluate_step(setup, config), evaluate_step(small, config)
    assert small_r.bubble_fraction >= big_r.bubble_fraction
    assert small_r.tokens_per_s <= big_r.tokens_per_s * (1 + 1e-12)


@settings(max_examples=150)
@given(configured())
def test_parts_add_up_to_the_step(sc):
    setup, config = sc
    r = evaluate_step(setup, config)
    assert abs(sum(r.parts.values()) - r.step_time_s) <= 1e-12 * r.step_time_s
    assert all(v >= 0 for v in r.parts.values()) and 0 < r.mfu <= r.hfu
