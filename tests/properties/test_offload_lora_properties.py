"""The search with offload tiers and with adapters on a frozen base, against brute force (hypothesis, 'ci'
profile): offload is tried tier by tier (fitplan.specs.parallel.OFFLOAD_ORDER), each only when the ones before
it have no fit; the host memory limit is respected; the lower bound stays below what is found."""
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from fitplan.answers import space_bound, space_for
from fitplan.counts.params import num_params
from fitplan.memory.breakdown import evaluate
from fitplan.request import SearchOptions
from fitplan.search import search
from fitplan.specs.parallel import OFFLOAD_ORDER
from tests.properties.strategies import setups
from tests.properties.test_search_properties import agrees_with_brute_force


@st.composite
def offload_setups(draw):
    s = draw(setups(gpus=st.sampled_from([1, 2, 4, 8])))
    if s.training.recipe.compute == "fp8":
        s = replace(s, training=replace(s.training, recipe=replace(s.training.recipe, compute="bf16")))
    if draw(st.booleans()):
        s = replace(s, training=replace(s.training, finetune=draw(st.sampled_from(["lora", "qlora"])),
                                        lora_rank=draw(st.sampled_from([1, 4, 16])),
                                        lora_targets=draw(st.sampled_from(["qkv", "o,mlp", "qkv,o,mlp"]))))
    state = int(s.training.recipe.total_bytes * num_params(s.model))
    if draw(st.booleans()):   # a GPU too small for the whole state on these GPUs, so that offload is needed
        c = s.cluster
        memory = c.reserve_bytes + max(2**21, state // (c.num_gpus * draw(st.sampled_from([2, 4, 16]))))
        s = replace(s, cluster=replace(c, gpu=replace(c.gpu, memory_bytes=memory)))
    host = draw(st.sampled_from([None, 0.05, 0.5, 4]))
    return replace(s, cluster=replace(s.cluster, host_memory_bytes=None if host is None else
                                      max(2**20, int(host * state))))



@settings(max_examples=40)
@given(offload_setups())
def test_search_with_offload_and_adapters_equals_brute_force(setup):
    space = replace(space_for(setup, 2, SearchOptions(), {}), virtual_stages=(1, 2), cp=(1, 2))
    if setup.cluster.host_memory_bytes is None:
        assert space.offload == (OFFLOAD_ORDER[0],)
    r = search(setup, space, top=3)
    agrees_with_brute_force(setup, space, r)
    for s in r.suggestions:
        b = evaluate(setup, s.config)
        assert b.fits and b.host_fits


@settings(max_examples=40)
@given(offload_setups())
def test_the_lower_bound_stays_below_what_is_found(setup):
    """suggest's search and bound (answers.space_bound), without its scan for the smallest GPU count
    that fits when nothing does (tests/unit/test_search.py checks that scan)."""
    space = space_for(setup, 1, SearchOptions(top=1), {})
    result, bound = search(setup, space, top=1, recommend=True), space_bound(setup, space)
    if result.suggestions:
        assert bound.per_gpu_bytes <= result.suggestions[0].breakdown.per_gpu_bytes
        assert not bound.excludes
    if bound.excludes:
        assert not result.feasible
