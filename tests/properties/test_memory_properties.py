"""Invariants of the memory model over random valid models and configurations."""
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from fitplan.counts.params import num_params
from fitplan.memory.breakdown import PARTS, STATE_PARTS, evaluate
from fitplan.specs.parallel import ParallelConfig, Recompute, ZeroStage
from tests.properties.strategies import setups


@settings(max_examples=100)
@given(setups(), st.sampled_from(list(Recompute)), st.integers(1, 4))
def test_more_sharding_never_increases_state(setup, rc, mb):
    states = [evaluate(setup, ParallelConfig(dp=setup.cluster.num_gpus, zero=z, recompute=rc, micro_batch=mb)).state_bytes
              for z in ZeroStage]
    assert states == sorted(states, reverse=True)


@settings(max_examples=100)
@given(setups(), st.sampled_from(list(ZeroStage)), st.booleans())
def test_higher_recompute_never_increases_stored_activations(setup, zero, sp):
    n = setup.cluster.num_gpus
    tp = 2 if n % 2 == 0 and setup.model.num_kv_heads % 2 == 0 and setup.model.ffn_hidden_size % 2 == 0 else 1
    base = ParallelConfig(tp=tp, dp=n // tp, zero=zero, sequence_parallel=sp and tp > 1)
    stored = {rc: sum(evaluate(setup, replace(base, recompute=rc)).parts[k] for k in PARTS[4:9] if k !=
                      "activations/recompute_workspace") for rc in Recompute}
    # Korthikanti's chain none >= selective >= full; each partial mode keeps less than none and
    # more than full (norms and op recompute different tensors, so they are not ordered with selective)
    chains = [(Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), (Recompute.NONE, Recompute.NORMS, Recompute.FULL),
              (Recompute.NONE, Recompute.OP, Recompute.FULL)]
    for chain in chains:
        values = [stored[rc] for rc in chain]
        assert values == sorted(values, reverse=True), chain


@settings(max_examples=100)
@given(setups(), st.sampled_from(list(Recompute)), st.integers(1, 3))
def test_larger_micro_batch_or_sequence_never_decreases_activations(setup, rc, mb):
    c = ParallelConfig(dp=setup.cluster.num_gpus, recompute=rc, micro_batch=mb)
    a = evaluate(setup, c).activation_bytes
    assert evaluate(setup, replace(c, micro_batch=mb + 1)).activation_bytes >= a
    longer = replace(setup, training=replace(setup.training, seq_len=setup.training.seq_len * 2))
    assert evaluate(longer, c).activation_bytes >= a


@settings(max_examples=100)
@given(setups(), st.sampled_from(list(ZeroStage)))
def test_parts_sum_and_state_conservation(setup, zero):
    n = setup.cluster.num_gpus
    b = evaluate(setup, ParallelConfig(dp=n, zero=zero))
    assert b.per_gpu_bytes == sum(b.peak.held.values()) <= sum(b.parts[k] for k in PARTS)
    assert all(b.peak.held[k] <= b.parts[k] for k in b.peak.held)
    assert b.state_bytes == sum(b.parts[k] for k in STATE_PARTS)
    # N shards together hold at least the unsharded state
    assert b.state_bytes * n >= num_params(setup.model) * setup.training.recipe.total_bytes


@settings(max_examples=30)
@given(setups())
def test_results_are_identical_across_runs(setup):
    c = ParallelConfig(dp=setup.cluster.num_gpus, zero=ZeroStage.OS)
    assert evaluate(setup, c) == evaluate(setup, c)
