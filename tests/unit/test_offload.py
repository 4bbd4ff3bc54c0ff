"""Offload (fitplan.memory.offload, fitplan.timing.offload): what leaves the GPU, what host memory and
NVMe hold instead, the --host-memory limit, the search's tiers, and the time it costs."""
import io
import json

import numpy as np
import pytest

from fitplan import presets
from fitplan.cli import main
from fitplan.memory.breakdown import Setup, busiest_totals, evaluate
from fitplan.search import default_space, rank_key, search, space_size
from fitplan.specs import ClusterSpec, Offload, ParallelConfig, Recompute, TrainingSpec, ZeroStage, compat
from fitplan.specs.parallel import OFFLOAD_ORDER
from fitplan.timing.breakdown import evaluate_step
from fitplan.units import GiB

MODEL = presets.model("llama2-7b").model
P = 6_738_415_616


def setup(*, gpus=8, host=None, recipe="mixed-adam", gpu="h100-80gb", seq=4096, batch=64):
    g = presets.gpu(gpu)
    return Setup(MODEL, TrainingSpec(seq_len=seq, recipe=presets.recipe(recipe), global_batch=batch, dropout=False,
                                     attention_kernel="flash"),
                 ClusterSpec(gpu=g, num_gpus=gpus, gpus_per_node=8, reserve_bytes=g.default_reserve_bytes,
                             host_memory_bytes=host))


def test_optimizer_offload_keeps_only_the_16_bit_weights():
    """ZeRO-Offload Sec. 4.1: fp16 weights on the GPU; gradients, fp32 weights and moments on the CPU. The host
    gradient is fp32 (the master weights' precision): 4 + 4 + 8 = 16 B per parameter of the shard."""
    b = evaluate(setup(), ParallelConfig(dp=8, zero=ZeroStage.OS_G, offload=Offload.OPTIMIZER))
    assert b.parts["states/weights"] == 2 * P
    assert b.parts["states/grads"] == b.parts["states/master"] == b.parts["states/optimizer"] == 0
    assert b.host == {"host/weights": 0, "host/grads": 4 * P // 8, "host/master": 4 * P // 8,
                      "host/optimizer": 8 * P // 8, "host/activations": 0, "nvme/weights": 0}
    assert b.host_per_node_bytes == 16 * P and b.nvme_per_node_bytes == 0


def test_the_host_gradient_is_at_the_gradients_precision_without_a_master_copy():
    b = evaluate(setup(recipe="bf16-adam"), ParallelConfig(dp=8, zero=ZeroStage.OS, offload=Offload.OPTIMIZER))
    assert b.host["host/grads"] == 2 * P // 8 and b.host["host/master"] == 0


def test_params_offload_to_host_or_nvme():
    c = ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, offload=Offload.OPTIMIZER_PARAMS)
    b = evaluate(setup(), c)
    assert b.state_bytes == 0 and b.host["host/weights"] == 2 * P // 8
    assert b.host_per_node_bytes == 18 * P
    n = evaluate(setup(), ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, offload=Offload.PARAMS_NVME))
    assert n.host["host/weights"] == 0 and n.host["nvme/weights"] == 2 * P // 8
    assert n.host_per_node_bytes == 16 * P and n.nvme_per_node_bytes == 2 * P


def test_params_offload_needs_zero3():
    s = setup()
    problems = compat.check(s.model, s.training, s.cluster, ParallelConfig(dp=8, zero=ZeroStage.OS_G,
                                                                             offload=Offload.OPTIMIZER_PARAMS))
    assert [v.rule for v in problems] == ["offload_params_needs_zero3"]


def test_activation_offload_keeps_one_layer_on_the_gpu():
    c = ParallelConfig(dp=1, pp=2, micro_batch=1, offload=Offload.ACTIVATIONS)
    s = setup(gpus=2)
    on = evaluate(s, ParallelConfig(dp=1, pp=2, micro_batch=1))
    off = evaluate(s, c)
    layer = {t.key: t.value for t in off.terms}["activations/per_layer"]
    assert off.parts["activations/layers"] == layer and off.parts["activations/pipeline_in_flight"] == 0
    assert off.host["host/activations"] == (on.parts["activations/layers"]
                                            + on.parts["activations/pipeline_in_flight"])
    assert off.per_gpu_bytes < on.per_gpu_bytes and off.host_per_node_bytes == 2 * off.host["host/activations"]


def test_host_memory_per_node_counts_the_processes_on_a_node():
    one = evaluate(setup(gpus=1), ParallelConfig(offload=Offload.OPTIMIZER))
    assert one.host_per_node_bytes == 16 * P            # one process on the node
    two_nodes = evaluate(setup(gpus=16), ParallelConfig(dp=16, zero=ZeroStage.OS, offload=Offload.OPTIMIZER))
    assert two_nodes.host_per_node_bytes == 8 * (4 * P // 16 + 4 * P // 16 + 8 * P // 16) == 8 * P   # 8 of 16 shards


def test_the_host_limit_is_part_of_fits():
    c = ParallelConfig(dp=8, zero=ZeroStage.OS_G, offload=Offload.OPTIMIZER)
    assert evaluate(setup(host=16 * P), c).fits
    small = evaluate(setup(host=16 * P - 1), c)
    assert not small.fits and not small.host_fits and small.per_gpu_bytes <= small.usable_bytes


def test_without_host_memory_the_search_does_not_offload():
    """Llama 2 7B on 1 H100 needs 108 GB of state: nothing fits on the GPU, and without --host-memory the
    search has nowhere to offload to."""
    from fitplan.answers import space_for
    from fitplan.request import SearchOptions
    s = setup(gpus=1)
    space = space_for(s, 1, SearchOptions(), {})
    assert space.offload == (Offload.NONE,)
    assert not search(s, space).feasible
    with_host = space_for(setup(gpus=1, host=2 * 2**40), 1, SearchOptions(), {})
    assert with_host.offload == OFFLOAD_ORDER


def test_the_search_offloads_only_when_nothing_else_fits():
    from fitplan.answers import space_for
    from fitplan.request import SearchOptions
    fits_on_gpus = setup(gpus=8, host=2 * 2**40)
    r = search(fits_on_gpus, space_for(fits_on_gpus, 1, SearchOptions(), {}), top=3)
    assert r.feasible and all(s.config.offload is Offload.NONE for s in r.suggestions)
    assert r.considered == space_size(8, default_space(8)) // 1   # one tier searched
    one_gpu = setup(gpus=1, host=2 * 2**40)
    space = space_for(one_gpu, 1, SearchOptions(), {})
    r = search(one_gpu, space, top=3)
    assert r.feasible
    assert {s.config.offload for s in r.suggestions} == {Offload.OPTIMIZER}    # the first tier with a fit
    assert r.considered == 2 * space_size(1, space) // len(OFFLOAD_ORDER)    # none, then optimizer
    assert r.suggestions[0].rank_reason.startswith("offload optimizer needed")


def test_the_search_respects_the_host_limit():
    """A host too small for the optimizer's 16 B/param: the tier is rejected for host memory, and the next tiers
    (weights too; activations; NVMe) are tried in order."""
    from fitplan.answers import space_for
    from fitplan.request import SearchOptions
    s = setup(gpus=1, host=100 * GiB)
    r = search(s, space_for(s, 1, SearchOptions(), {}), top=1)
    assert r.rejected_by_reason.get("exceeds_host_memory", 0) > 0
    assert not r.feasible


def test_a_fixed_offload_is_the_only_tier():
    from fitplan.answers import space_for
    from fitplan.request import SearchOptions
    s = setup(gpus=1, host=2 * 2**40)
    space = space_for(s, 1, SearchOptions(), {"offload": Offload.OPTIMIZER})
    assert space.offload == (Offload.OPTIMIZER,)
    r = search(s, space, top=2)
    assert r.feasible and r.considered == space_size(1, space)


def test_rank_key_puts_offload_first():
    base = dict(cp=1, recompute_level=2, zero=3, tp=8, pp=8, v=1, mb=1, requested_mb=1, sp=1, total=1)
    assert rank_key(**base) < rank_key(**{**base, "recompute_level": 0, "zero": 0, "tp": 1, "pp": 1},
                                       offload_level=1)


def test_vectorized_equals_exact_with_offload():
    s = setup(gpus=8, host=2 * 2**40)
    for o in (Offload.OPTIMIZER, Offload.OPTIMIZER_PARAMS, Offload.ACTIVATIONS, Offload.PARAMS_NVME):
        configs = [ParallelConfig(tp=t, pp=p, dp=8 // (t * p), zero=ZeroStage.OS_G_P, offload=o,
                                  recompute=Recompute.FULL) for t, p in ((1, 1), (2, 1), (1, 2), (2, 2))]
        from types import SimpleNamespace
        from fitplan.search import SETTINGS
        arrays = {k: np.array([getattr(c, k) for c in configs], dtype=np.float64)
                  for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages")}
        grid = SimpleNamespace(**arrays, **{n: getattr(configs[0], n) for n in SETTINGS}, zero=ZeroStage.OS_G_P,
                               sequence_parallel=False, recompute=Recompute.FULL, offload=o)
        gpu, host = busiest_totals(s, grid)
        assert list(gpu) == [evaluate(s, c).per_gpu_bytes for c in configs]
        assert list(host) == [evaluate(s, c).host_per_node_bytes for c in configs]


def test_offload_time():
    """Optimizer offload on one H100 (PCIe Gen5, 50 GB/s): the CPU steps 6.7e9 parameters at 1e9/0.22 a second,
    1.48 s; the updated bf16 weights come back, 2P/50e9 = 0.27 s; each micro-batch's 2P of gradients (0.27 s)
    hides behind its backward."""
    s = setup(gpus=1, batch=8)
    st = evaluate_step(s, ParallelConfig(offload=Offload.OPTIMIZER, recompute=Recompute.FULL))
    by_key = {t.key: t.value for t in st.terms}
    assert by_key["time/cpu_optimizer"] == pytest.approx(P * 0.22 / 1e9)
    assert by_key["time/weights_to_gpu"] == pytest.approx(2 * P / 50e9)
    assert by_key["time/gradients_to_host"] == pytest.approx(2 * P / 50e9)
    assert by_key["time/gradients_exposed"] == 0
    assert st.parts["time/offload"] == pytest.approx(P * 0.22 / 1e9 + 2 * P / 50e9)
    assert st.step_time_s == pytest.approx(sum(st.parts.values()))
    none = evaluate_step(s, ParallelConfig(recompute=Recompute.FULL))
    assert none.parts["time/offload"] == 0


def test_activation_offload_time_is_the_transfer_beyond_the_compute():
    s = setup(gpus=1, batch=8)
    st = evaluate_step(s, ParallelConfig(offload=Offload.ACTIVATIONS))
    by_key = {t.key: t.value for t in st.terms}
    stored = evaluate(s, ParallelConfig())
    assert by_key["time/activations_transfer"] == pytest.approx(stored.parts["activations/layers"] / 50e9)
    T_f, T_b = by_key["time/forward_microbatch"], by_key["time/backward_microbatch"]
    xfer = by_key["time/activations_transfer"]
    assert st.parts["time/offload"] == pytest.approx(8 * (max(0, xfer - T_f) + max(0, xfer - T_b)))


def test_nvme_is_shared_by_the_node():
    s = setup(gpus=8, batch=64)
    st = evaluate_step(s, ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, offload=Offload.PARAMS_NVME,
                                         recompute=Recompute.FULL))
    by_key = {t.key: t.value for t in st.terms}
    assert by_key["time/weights_fetch"] == pytest.approx((2 * P // 8) / (10e9 / 8))
    assert by_key["time/weights_to_nvme"] == pytest.approx((2 * P // 8) / (10e9 / 8))


def test_cli_json_and_the_host_limit_exit_code():
    out = io.StringIO()
    code = main(["plan", "--preset", "llama2-7b", "--gpus", "1", "--offload", "optimizer", "--host-memory", "1 TiB",
                 "--json"], out=out, err=io.StringIO())
    data = json.loads(out.getvalue())
    assert data["config"]["offload"] == "optimizer"
    assert data["host"]["bytes_per_node"] == 16 * P and data["host"]["limit_bytes_per_node"] == 2**40
    assert data["cluster"]["host_memory_bytes_per_node"] == 2**40
    assert data["time"]["parts_s"]["time/offload"] > 0
    out = io.StringIO()
    code = main(["plan", "--preset", "llama2-7b", "--gpus", "1", "--offload", "optimizer", "--host-memory", "64 GiB",
                 "--json"], out=out, err=io.StringIO())
    data = json.loads(out.getvalue())
    assert code == 1 and not data["fits"] and not data["host"]["fits"]


def test_cli_refuses_params_offload_without_zero3():
    err = io.StringIO()
    assert main(["plan", "--preset", "llama2-7b", "--gpus", "8", "--zero", "2", "--offload", "optimizer+params"],
                out=io.StringIO(), err=err) == 2
    assert "--zero 3" in err.getvalue() and err.getvalue().count("\n") == 1


def test_suggest_with_host_memory_finds_a_single_gpu_layout():
    out = io.StringIO()
    code = main(["plan", "--preset", "llama2-7b", "--gpus", "1", "--host-memory", "1 TiB", "--suggest", "--json"],
                out=out, err=io.StringIO())
    data = json.loads(out.getvalue())
    assert code == 0 and data["feasible"]
    assert data["suggestions"][0]["offload"] == "optimizer"
    assert data["lower_bound"]["excludes"] is False


def test_the_lower_bound_allows_offload():
    """With offload searched the bound keeps what the least-offloading tier leaves on the GPUs: here nothing
    of the state (the weights may leave) and, as activations may leave too, no activation term."""
    from fitplan.answers import suggest
    from fitplan.request import SearchOptions
    answer = suggest(setup(gpus=1, host=2 * 2**40), 1, SearchOptions(top=1), {})
    assert not answer.bound.excludes and answer.bound.min_gpus == 1
    fixed = suggest(setup(gpus=1, host=2 * 2**40), 1, SearchOptions(top=1), {"offload": Offload.OPTIMIZER})
    assert dict(fixed.bound.inputs)["S"] == 2 * P    # the bf16 weights stay
    assert fixed.bound.per_gpu_bytes <= fixed.result.suggestions[0].breakdown.per_gpu_bytes
