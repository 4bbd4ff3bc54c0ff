"""A tiny GPT worked by hand: L=4, h=64, a=4, f=256, V=1000, s=128, tied, biases, 16 B/param.
tp = 2, pp = 2, dp = 1, no SP, no recompute, global batch unset (pipeline full).

Parameters per layer: sharded h(q+2kv) + qh + 2hf + (q+2kv) + f = 12288 + 4096 + 32768 + 192 + 256
= 49600; replicated 2*(2h) norms + 2h row biases = 384; 49984 = 12h^2 + 13h.
First stage: 2 layers * (49600/2 + 384) + V*h/2 + s_max*h = 50368 + 32000 + 8192 = 90560.
Last stage: 50368 + final LN 128 + its own copy of the tied embedding 32000 = 82496.
Activations per layer: sbh(10 + 24/t + 5as/(ht)) = 8192 * (10 + 12 + 20) = 344064 B.
First stage holds 2 micro-batches of 2 layers; embedding mask + int64 ids: 2 * (8192 + 1024).
Last stage: 1 micro-batch; 2*e*sbh + 4sbV/t = 32768 + 256000.

The peak over the step (docs/formulas.md#peak) adds the runtime, at their defaults: the CUDA
context 400 MiB; A100's cuBLAS workspace 8,519,680 B; NCCL: tp, pp and the world group (4 > 2),
2 ring peers each, 32 channels x (4 MiB + 524,288 + 4,915,200) = 6 * 32 * 9,633,792 B; one layer's
backward: 2*e*sbh + max(2*e*a*s^2*b/t, 2n*e*s*b*f/t) + w*h*f/t = 32768 + max(131072, 131072) + 16384
(the first stage holds the tied embedding but not the head: no tied gradient waits); pipeline
gradients 2*e*sbh = 32768; the allocator's pages, one stream, 22 MiB. The first stage's peak is
its first backward, every stored micro-batch held.
"""

from fitplan.explain import RAW
from fitplan.memory.breakdown import Setup, busiest_total, evaluate, stage_memory
from fitplan.memory.timeline import STATE_KEYS, STORED
from fitplan.presets import gpu, recipe
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from fitplan.units import GiB

TINY = ModelSpec(name="tiny", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
                 vocab_size=1000, max_seq_len=128)
SETUP = Setup(TINY, TrainingSpec(seq_len=128, recipe=recipe("mixed-adam")),
              ClusterSpec(gpu=gpu("a100-80gb"), num_gpus=4, gpus_per_node=8, reserve_bytes=GiB))
CONFIG = ParallelConfig(tp=2, pp=2, dp=1)


def test_first_stage_by_hand():
    """The first stage's peak, by hand (above). The busiest GPU is the last stage by 8,192 B: its loss's
    backward (tp 2: torch's loss_parallel, 12 B per local logit, 12*128*1000/2 = 768,000 B) on one micro-batch
    of 2 layers, 16*82496 + 2*344064 + 288,768 + 768,000 = 3,064,832 B beside the same runtime buffers
    without the layer's backward terms (400 MiB + 8,519,680 + 3*32*9,633,792 + 22 MiB). NCCL: rings for tp and the
    world (4 ranks, more than each group), and the pipeline's one neighbour inside the node on 32 p2p channels:
    3 x 32 connections' buffers."""
    from fitplan.memory.timeline import peak
    b = evaluate(SETUP, CONFIG)
    runtime_always = 400 * 2**20 + 8_519_680 + 3 * 32 * 9_633_792 + 22 * 2**20
    assert b.stage == "last" and b.peak.phase == "backward of micro-batch 1 (loss)"
    assert b.per_gpu_bytes == 16 * 82496 + 2 * 344064 + 288_768 + 768_000 + runtime_always == 1_378_927_616
    first = stage_memory(RAW, SETUP, CONFIG, first=True)
    pk = peak(first, phi=0)
    parts = first
    assert sum(parts[k] for k in STATE_KEYS) == 16 * 90560
    assert parts["activations/layers"] == 2 * 344064
    assert parts["activations/pipeline_in_flight"] == 2 * 344064
    assert parts["activations/embedding"] == 2 * (8192 + 1024)
    assert parts["activations/output"] == 0
    assert sum(parts[k] for k in STATE_KEYS + STORED) == 16 * 90560 + 4 * 344064 + 18432 == 2_843_648
    runtime = 400 * 2**20 + 8_519_680 + 3 * 32 * 9_633_792 + (32768 + 131072 + 16384) + 32768 + 22 * 2**20
    assert pk.phase == "backward of micro-batch 1"
    assert pk.bytes == 2_843_648 + runtime == 1_378_919_424
    assert sum(pk.held.values()) == pk.bytes


def test_last_stage_by_hand():
    last = stage_memory(RAW, SETUP, CONFIG, first=False)
    assert sum(last[k] for k in ("states/weights", "states/grads", "states/master", "states/optimizer")) == 16 * 82496
    assert last["activations/pipeline_in_flight"] == 0
    assert last["activations/output"] == 32768 + 256000
    assert sum(last[k] for k in STATE_KEYS + STORED) == 16 * 82496 + 2 * 344064 + 288768


def test_vectorized_equals_scalar():
    """The search's NumPy path gives the same numbers as the exact path (float64, here exact):
    the candidates are read by ParallelConfig's attribute names, degrees as arrays."""
    from types import SimpleNamespace

    from fitplan.specs.parallel import SETTINGS
    SETTING_DEFAULTS = {name: getattr(ParallelConfig(), name) for name in SETTINGS}

    import numpy as np
    configs = [ParallelConfig(tp=t, pp=p, dp=4 // (t * p)) for t, p in ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1))]
    arrays = {k: np.array([getattr(c, k) for c in configs], dtype=np.float64)
              for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages")}
    grid = SimpleNamespace(**arrays, **SETTING_DEFAULTS, zero=CONFIG.zero, sequence_parallel=False, recompute=CONFIG.recompute)
    got = busiest_total(SETUP, grid)
    assert list(got) == [evaluate(SETUP, c).per_gpu_bytes for c in configs]


def _layouts():
    from fitplan.specs.parallel import Offload, ZeroStage
    from tests.conftest import make_setup
    big = make_setup("gpt3-175b", 64)
    return [(SETUP, CONFIG), (SETUP, ParallelConfig(tp=1, pp=4, dp=1)),
            (big, ParallelConfig(tp=8, pp=8, dp=1, sequence_parallel=True)),
            (big, ParallelConfig(tp=4, pp=4, dp=4, zero=ZeroStage.OS_G_P, offload=Offload.OPTIMIZER))]


def test_the_terms_recorded_when_read_are_the_untraced_breakdown():
    """evaluate compares the candidate ranks untraced and records the busiest rank's Terms only when .terms is
    read, by evaluating that rank again with a Trace (fitplan.memory.breakdown.evaluate): every term the peak's
    moment holds is recorded with the value the breakdown holds, exactly, and so are the host bytes per node."""
    for setup, config in _layouts():
        b = evaluate(setup, config)
        term = {t.key: t.value for t in b.terms}
        held = [k for k in b.peak.held if k in term]
        assert len(held) >= 10, config
        assert {k: term[k] for k in held} == {k: b.peak.held[k] for k in held}, config
        assert b.terms == b.terms   # the same record each time it is read
        if config.offload.value != "none":
            assert term["host/per_node"] == b.host_per_node_bytes > 0
