"""The peak over the step (fitplan.memory.timeline) and the runtime terms (fitplan.memory.runtime).

The closed form the search evaluates and the event-by-event timeline of one configuration come
from the same terms: the timeline's largest event is the peak, each event's held bytes sum to it,
and the search's float arrays give the exact path's peaks. The runtime terms are checked by hand.
"""
import io
import json
from dataclasses import replace

import pytest

from fitplan.analysis import FITS_WITH_MARGIN, LIKELY_OOM, TIGHT, risk
from fitplan.cli import main
from fitplan.explain import RAW
from fitplan.memory import runtime as RT
from fitplan.memory import timeline as TL
from fitplan.memory.breakdown import busiest_total, evaluate
from fitplan.memory.events import stage_timeline
from fitplan.specs import ParallelConfig
from fitplan.specs.parallel import Recompute, Schedule, ZeroStage
from fitplan.units import GiB, MiB
from fitplan.request import Request
from fitplan.resolve import resolve

CONN = 4 * MiB + 524_288 + 4_915_200   # NCCL's Simple, LL and LL128 buffers per connection and channel


def make_setup(name, gpus):
    """As the CLI resolves it: the preset's kernel, dropout and sequence, the default global batch."""
    return resolve(Request(command="plan", values={"preset": name, "gpus": gpus})).setup


CASES = [
    ("gpt3-175b", 64, ParallelConfig(tp=8, pp=8, dp=1, sequence_parallel=True, recompute=Recompute.SELECTIVE)),
    ("gpt3-175b", 64, ParallelConfig(tp=8, pp=4, dp=2, virtual_stages=3, sequence_parallel=True,
                                     recompute=Recompute.FULL)),
    ("gpt3-175b", 64, ParallelConfig(tp=8, pp=8, dp=1, schedule=Schedule.GPIPE, recompute=Recompute.FULL)),
    ("llama3.1-8b", 16, ParallelConfig(tp=2, pp=1, dp=8, zero=ZeroStage.OS_G_P)),
    ("llama3.1-8b", 16, ParallelConfig(tp=1, pp=2, dp=8, zero=ZeroStage.OS_G_P, reshard_after_forward=False)),
    ("llama3.1-8b", 16, ParallelConfig(tp=2, pp=1, dp=8, zero=ZeroStage.OS_G)),
    ("mixtral-8x7b", 16, ParallelConfig(tp=2, pp=2, dp=4, ep=8, sequence_parallel=True)),
    ("llama3.1-8b", 8, ParallelConfig(tp=1, pp=8, dp=1, schedule=Schedule.DUALPIPE)),
]


@pytest.mark.parametrize(("name", "gpus", "config"), CASES)
def test_the_timelines_largest_event_is_the_peak(name, gpus, config):
    setup = make_setup(name, gpus)
    b = evaluate(setup, config)
    events = stage_timeline(setup, b)
    assert max(e.bytes for e in events) == b.per_gpu_bytes == b.peak.bytes == sum(b.peak.held.values())
    assert all(e.bytes == sum(e.held.values()) == sum(e.by_group().values()) for e in events)
    assert events[-1].phase == "optimizer step"
    assert sum(e.repeat for e in events if e.phase.startswith("forward")) == \
        setup.training.global_batch // (config.dp * config.micro_batch) * (2 if config.schedule == Schedule.DUALPIPE
                                                                            else config.virtual_stages)
    # each term as the breakdown states it is its largest over the step, never below what the peak holds
    assert all(b.parts[k] >= v for k, v in b.peak.held.items())


@pytest.mark.parametrize(("name", "gpus", "config"), CASES)
def test_the_search_path_gives_the_exact_peaks(name, gpus, config):
    """busiest_total over float64 arrays (the search) equals evaluate's exact peak."""
    import numpy as np
    from fitplan.search import _Grid
    setup = make_setup(name, gpus)
    arrays = {k: np.array([getattr(config, k)], dtype=np.float64)
              for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages")}
    grid = _Grid(**arrays, zero=config.zero, sequence_parallel=config.sequence_parallel, recompute=config.recompute,
                 settings=config, offload=config.offload)
    assert float(busiest_total(setup, grid)[0]) == evaluate(setup, config).per_gpu_bytes


def test_the_three_moments_and_their_phases():
    """Llama 3.1 8B, pp 2, full recompute, flash: the last stage holds one micro-batch (1F1B) and
    peaks at its loss's backward, where the fp32 logits' gradients (8*s*b*V: nll_loss's and
    log_softmax's) come on top of the saved fp32 logits; by a layer's backward that micro-batch's
    logits are freed. The first stage peaks at a layer's backward, two micro-batches held."""
    from fitplan.explain import RAW
    from fitplan.memory.breakdown import stage_memory
    setup = make_setup("llama3.1-8b", 16)
    config = ParallelConfig(tp=1, pp=2, dp=8, recompute=Recompute.FULL)
    last = stage_memory(RAW, setup, config, first=False)
    moments = TL.moments(last, phi=0)
    totals = {k: sum(v.values()) for k, v in moments.items()}
    assert max(totals, key=totals.get) == TL.LOSS_MOMENT
    assert last["runtime/logits_grad"] == 8 * 8192 * 128256
    assert moments[TL.LOSS_MOMENT]["activations/output"] - moments[TL.LAYER_MOMENT]["activations/output"] \
        == last[TL.OUTPUT_ONE] == moments[TL.LOSS_MOMENT]["activations/output"]
    first = TL.peak(stage_memory(RAW, setup, config, first=True), phi=0)
    assert first.moment == TL.LAYER_MOMENT and first.phase == "backward of micro-batch 1"
    b = evaluate(setup, config)
    assert b.per_gpu_bytes == max(*totals.values(), first.bytes)


def test_nccl_buffers_by_hand():
    """tp 8, pp 4, dp 2 on 64 H100s in 8-GPU nodes: rings for tp, the dp x cp group and the world (64, larger than
    each), one connection's buffers (Simple + LL + LL128 = 9,633,792 B) per channel each: 3 x 32 x 9,633,792 B.
    The pipeline's neighbours are 16 ranks apart, on other nodes: no node-local peer, one shared network pool of
    2 directions x 32 p2p channels x 16 steps x 128 KiB = 128 MiB (NCCL src/transport/net.cc)."""
    assert CONN == 9_633_792
    got = RT.nccl_bytes(C=32, buffsize=4 * MiB, rings=3, p2p_groups=((0, 4, 1),))
    assert got == 3 * 32 * CONN + 2 * 32 * 16 * 128 * 2**10 == 924_844_032 + 134_217_728
    # an NCCL all-to-all over ep 16 in two 8-GPU nodes: 7 node-local peers on 4 channels each (the network
    # peers' max(1 NIC, ceil(50 GB/s / 14 GB/s)) = 4, the fewest any peer allows), and the shared pool
    assert RT.nccl_bytes(C=32, buffsize=4 * MiB, rings=0, p2p_groups=((7, 4, 1),)) == 7 * 4 * CONN + 2**27


def test_p2p_channels_per_peer_follow_ncclTopoComputeP2pChannels():
    """A communicator inside an NVSwitch node: 2 x floor(path/link bandwidth) is over the 32 p2p channels, so 32;
    over PCIe 2. Across nodes: pow2Up(net_ch) = 4, halved while 4 x ceil(n/8) exceeds 32 (NCCL src/graph/paths.cc):
    n = 16 keeps 4, n = 128 gets 2, n = 512 gets 1."""
    ch = lambda **kw: RT.p2p_channels_per_peer(P2P=32, **kw)   # noqa: E731
    assert ch(n=8, spans=False, net_ch=4, nvlink=True) == 32
    assert ch(n=8, spans=False, net_ch=4, nvlink=False) == 2
    assert [ch(n=n, spans=True, net_ch=4, nvlink=True) for n in (16, 128, 512)] == [4, 2, 1]
    assert ch(n=16, spans=True, net_ch=7, nvlink=True) == 8   # pow2Up(7)


def test_deepep_buffers_by_hand():
    """DeepEP's normal mode as Megatron-LM sizes it (h = 7168, bf16: 14,336 hidden bytes; 10 channels): ep 8, all
    over NVLink: 10 x 8 x (2 + 3) x 4 + 10 x 8 x 256 x (14,336 + 2,056) = 335,709,760 B; ep 64: 8 NVLink peers
    with 288 receive tokens, 8 RDMA ranks with 128: 10 x 8 x 19 x 4 + 10 x 8 x 288 x 16,392 + 10 x 8 x 36 x 4 +
    2 x 10 x 8 x 128 x 16,408 = 713,725,120 B (DeepEP csrc/legacy/config.hpp)."""
    assert RT.deepep_bytes(ep=8, h=7168, e=2) == 1_600 + 335_708_160 == 335_709_760
    assert RT.deepep_bytes(ep=64, h=7168, e=2) == 6_080 + 377_671_680 + 11_520 + 336_035_840 == 713_725_120
    assert RT.deepep_bytes(ep=1, h=7168, e=2) == 0


def test_runtime_terms_by_hand():
    s, b, V, t, c = 8192, 1, 128256, 8, 1
    # pytorch's loss at t = 8 is loss_parallel: 12 B per local logit (1.47 GiB); F.cross_entropy at t = 1: 8 B
    assert RT.logits_grad_bytes(s=s, b=b, V=V, e=2, t=t, c=c, kernel="pytorch") == 12 * s * V // t
    assert RT.logits_grad_bytes(s=s, b=b, V=V, e=2, t=1, c=c, kernel="pytorch") == 8 * s * V
    assert RT.logits_grad_bytes(s=s, b=b, V=V, e=2, t=t, c=c, kernel="fused") == 2 * s * V // t
    assert RT.logits_grad_bytes(s=s, b=b, V=V, e=4, t=t, c=c, kernel="fused") == 0
    # foreach AdamW: the sqrt of the fp32 second moment, and bf16 grads cast for the fp32 master; fused: none
    assert RT.optimizer_step_bytes(psi_opt=10**9, v=4, g=2, m=4, impl="foreach") == 8 * 10**9
    assert RT.optimizer_step_bytes(psi_opt=10**9, v=4, g=4, m=4, impl="foreach") == 4 * 10**9
    assert RT.optimizer_step_bytes(psi_opt=10**9, v=4, g=2, m=4, impl="fused") == 0
    # ZeRO-2 buckets: two in flight; no bucket views: a second copy of the gradients
    assert RT.grad_buckets_bytes(psi=10**9, g=2, zero=2, view=True, bucket=25 * MiB) == 50 * MiB
    assert RT.grad_buckets_bytes(psi=10**9, g=2, zero=0, view=False, bucket=25 * MiB) == 2 * 10**9
    assert RT.grad_buckets_bytes(psi=10**9, g=2, zero=1, view=True, bucket=25 * MiB) == 0
    # FSDP2: a layer computing and one prefetched, and its unsharded gradients in the backward
    # (full training: W = w*P and every parameter trained, w = g = 2, P_layer = 10^8, P_head = 5*10^7)
    units = dict(RT.fsdp_units(RAW, w=2, P_layer=10**8, P_head=5 * 10**7), w=2, g=2)
    assert units == {"W_layer": 2 * 10**8, "W_head": 10**8, "T_layer": 10**8, "T_head": 5 * 10**7, "w": 2, "g": 2}
    assert RT.fsdp_buffers_bytes(**units, k=1, keep=0, moment="forward") == 4 * 10**8
    assert RT.fsdp_buffers_bytes(**units, k=1, keep=0) == 6 * 10**8
    assert RT.fsdp_buffers_bytes(**units, k=1, keep=0, moment="loss") == 4 * 5 * 10**7 + 2 * 10**8
    assert RT.fsdp_buffers_bytes(**units, k=1, keep=1) == 2 * 10**8
    # the allocator: pages only with expandable segments; phi of the moment's transient bytes without
    assert RT.allocator_bytes(phi=0, D=10 * GiB, streams=1) == 22 * MiB
    assert RT.allocator_bytes(phi=0.15, D=10 * GiB, streams=3) == -(-15 * GiB // 10) + 66 * MiB


def test_flags_change_their_terms():
    base = make_setup("llama3.1-8b", 16)
    config = ParallelConfig(tp=2, dp=8, zero=ZeroStage.OS)
    b0 = evaluate(base, config)
    more = replace(base, cluster=replace(base.cluster, cuda_context_bytes=GiB, nccl_channels=16))
    b1 = evaluate(more, config)
    assert b1.parts["runtime/cuda_context"] == GiB and b1.parts["runtime/nccl"] * 2 == b0.parts["runtime/nccl"]
    foreach = replace(base, training=replace(base.training, optimizer_impl="foreach", cross_entropy="fused",
                                             fragmentation=0.15))
    b2 = evaluate(foreach, config)
    assert b2.parts["runtime/optimizer_step"] > 0 == b0.parts["runtime/optimizer_step"]
    assert b2.parts["runtime/logits_grad"] == b0.parts["runtime/logits_grad"] // 6   # 2 B instead of loss_parallel's 12
    assert b2.parts["runtime/allocator"] > b0.parts["runtime/allocator"]


def test_risk_levels_and_rule():
    """80% of the H100's 81,559 MiB (85,520,809,984 B) is 68,416,647,987 B; usable is all of it (no reserve
    by default: the runtime buffers are terms of the peak). Peaks 41.5, 64.8 and 95.2 GiB."""
    setup = make_setup("llama3.1-70b", 64)
    cases = {ParallelConfig(tp=8, pp=8, dp=1, sequence_parallel=True): FITS_WITH_MARGIN,
             ParallelConfig(tp=4, pp=16, dp=1, sequence_parallel=True): TIGHT,
             ParallelConfig(tp=4, pp=16, dp=1): LIKELY_OOM}
    for config, level in cases.items():
        b = evaluate(setup, config)
        r = risk(b)
        assert r.level == level and "Fujii" in r.rule and r.limit_bytes == 85_520_809_984 * 4 // 5 == 68_416_647_987
        assert (b.per_gpu_bytes <= r.limit_bytes) == (level == FITS_WITH_MARGIN)
        assert (b.per_gpu_bytes > b.usable_bytes == 85_520_809_984) == (level == LIKELY_OOM)


def test_json_contract_and_timeline_plot(tmp_path):
    out = io.StringIO()
    png = tmp_path / "t.png"
    assert main(["plan", "--preset", "llama3.1-70b", "--gpus", "64", "--tp", "8", "--pp", "8",
                 "--sequence-parallel", "--json", "--plot-timeline", str(png)], out=out) == 0
    data = json.loads(out.getvalue())
    assert set(data["peak"]) == {"bytes", "allocated_bytes", "reserved_bytes", "stage", "stage_index", "phase",
                                 "held"}
    held = data["peak"]["held"]
    assert data["peak"]["bytes"] == data["per_gpu_bytes"] == sum(held.values())
    # reserved: what the caching allocator maps (the device's bytes less the CUDA context, NCCL's and DeepEP's
    # buffers); allocated: that less the allocator's free pages and fragmentation
    outside = held["runtime/cuda_context"] + held["runtime/nccl"] + held["runtime/deepep"]
    assert data["peak"]["reserved_bytes"] == data["peak"]["bytes"] - outside
    assert data["peak"]["allocated_bytes"] == data["peak"]["reserved_bytes"] - held["runtime/allocator"]
    assert data["risk"]["level"] in ("fits_with_margin", "tight", "likely_oom") and data["risk"]["rule"]
    assert {k for k in data["breakdown"] if k.startswith("runtime/")} >= {
        "runtime/cuda_context", "runtime/blas_workspace", "runtime/nccl", "runtime/logits_grad",
        "runtime/optimizer_step", "runtime/allocator", "runtime/fsdp_buffers", "runtime/layer_backward"}
    assert max(e["bytes"] for e in data["timeline"]) == data["per_gpu_bytes"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_issue_example():
    """Llama 3.1 70B on 64 H100 at 8K: the layout fitplan recommended before (tp 2 + SP, pp 4 x 3,
    cp 4, dp 2, ZeRO-1; 69.86 GiB without the runtime) peaks at 72.47 GiB, tight (73.78 GiB before NCCL's
    buffers were sized per communicator: rings for tp, dp x cp and the world, 3 x 32 x 9,633,792 B; cp's p2p
    ring with its 2 node-local peers on 32 channels each; the pipeline's shared network pool, 128 MiB: 1.31 GiB
    less than 5 rings of 2 peers); the new recommendation fits with margin and carries no out-of-memory warning."""
    setup = make_setup("llama3.1-70b", 64)
    old = ParallelConfig(tp=2, pp=4, virtual_stages=3, cp=4, dp=2, zero=ZeroStage.OS, sequence_parallel=True)
    b = evaluate(setup, old)
    assert b.parts["runtime/nccl"] == 3 * 32 * CONN + 2 * 32 * CONN + 2**27
    assert risk(b).level == TIGHT and b.per_gpu_bytes / GiB == pytest.approx(72.47, abs=0.005)
    out = io.StringIO()
    main(["plan", "--preset", "llama3.1-70b", "--gpus", "64", "--seq-len", "8192", "--suggest", "--json"], out=out)
    rec = json.loads(out.getvalue())["recommended"]
    assert rec["risk"]["level"] == FITS_WITH_MARGIN and rec["headroom_bytes"] > 0
    assert (rec["tp"], rec["pp"], rec["cp"], rec["zero"]) != (2, 4, 4, 1)


@pytest.mark.parametrize("zero", [ZeroStage.OS, ZeroStage.OS_G, ZeroStage.OS_G_P])
def test_pipelined_zero_keeps_gradients_and_weights_unsharded(zero):
    """Llama 3.1 8B on 16 GPUs, pp 2, dp 8, mixed-adam (w = g = 2): torch.distributed.pipelining turns
    off FSDP2's gradient sync and resharding after backward until the last micro-batch, so with
    ZeRO-2/3 the stage's gradients accumulate unsharded, g*psi*(1 - 1/8) beyond the shard (g*psi in
    all), and with ZeRO-3 its weights stay gathered, a whole w*psi copy beside the shard, whatever
    reshard_after_forward says (fitplan validate's fsdp2-nosync rows measure both). Both are
    held at the backward's moments and freed for the optimizer step. ZeRO-1 keeps its full
    gradients as states (nothing extra); pp 1 syncs every micro-batch (nothing extra)."""
    from fitplan.explain import Trace
    from fitplan.memory.breakdown import stage_at, stage_memory, stage_psi
    setup = make_setup("llama3.1-8b", 16)
    config = ParallelConfig(tp=1, pp=2, dp=8, zero=zero)
    psi = stage_psi(Trace(), setup.model, config, stage=stage_at(Trace(), setup.model, config, 0))
    parts = stage_memory(Trace(), setup, config, first=True)
    rest = lambda b: -(-psi * b * 7 // 8)
    assert parts["runtime/accumulated_grads"] == (rest(2) if zero >= 2 else 0)
    assert parts["runtime/gathered_weights"] == (psi * 2 if zero == 3 else 0)
    moments = TL.moments(parts, phi=0)
    for key in ("runtime/accumulated_grads", "runtime/gathered_weights"):
        assert moments[TL.LAYER_MOMENT][key] == moments[TL.LOSS_MOMENT][key] == parts[key]
        assert key not in moments[TL.STEP_MOMENT]
    flat = stage_memory(Trace(), setup, ParallelConfig(tp=1, pp=1, dp=16, zero=zero), first=True)
    assert flat["runtime/accumulated_grads"] == flat["runtime/gathered_weights"] == 0


def test_each_event_holds_its_own_moments_fsdp_buffers():
    """Llama 3.1 8B, ZeRO-3 over 8: the output unit (final norm and head, P_head = 4096 + 128256*4096 =
    525,340,672) is larger than a layer (P_layer = 218,112,000), so FSDP's buffers are largest in the loss's
    backward, (w + g)*P_head + k*w*P_layer = 4*525,340,672 + 2*218,112,000 = 2,537,586,688 B, and the breakdown
    states that. A layer's backward holds (1 + k)*w*P_layer + g*P_layer = 6*218,112,000 = 1,308,672,000 B, and
    the timeline's layer-backward event must show that, not the loss's (it did, 1.23 GB too high)."""
    setup = make_setup("llama3.1-8b", 8)
    b = evaluate(setup, ParallelConfig(dp=8, zero=ZeroStage.OS_G_P))
    assert b.parts["runtime/fsdp_buffers"] == 4 * 525_340_672 + 2 * 218_112_000 == 2_537_586_688
    by_phase = {e.phase: e.held for e in stage_timeline(setup, b)}
    assert by_phase["backward of micro-batch 1 (loss)"]["runtime/fsdp_buffers"] == 2_537_586_688
    assert by_phase["backward of micro-batch 1"]["runtime/fsdp_buffers"] == 6 * 218_112_000 == 1_308_672_000
    assert by_phase["forward of micro-batch 1"]["runtime/fsdp_buffers"] == 4 * 218_112_000


def test_the_most_over_ranks_is_the_whole_sums_most():
    """busiest_totals' reduction over the stacked ranks (fitplan.memory.breakdown._most_over_ranks) forms a + b one
    rank at a time; it must give exactly (a + b).max(axis=0, keepdims=True), the whole box's sum reduced, for
    addends that span the ranks axis or not, and a + b where nothing spans it. Exact: the same float64 additions
    and maxima, only in another order of the ranks (max is exact)."""
    import numpy as np
    from fitplan.memory.breakdown import _most_over_ranks
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2**40, size=(4, 1, 16, 3, 1, 5)).astype(np.float64)   # activations: no ZeRO axis
    z = rng.integers(0, 2**40, size=(4, 4, 1, 3, 1, 5)).astype(np.float64)    # ZeRO terms: no micro-batch axis
    flat = rng.integers(0, 2**40, size=(4, 1, 3, 1, 5)).astype(np.float64)    # no ranks axis (ndim 5)
    one = rng.integers(0, 2**40, size=(1, 4, 1, 3, 1, 5)).astype(np.float64)  # a ranks axis of one
    for x, y in ((a, z), (a, flat), (flat, z), (a, 7.0), (one, a), (a, one)):
        got = _most_over_ranks(x, y, 6)
        want = (x + y).max(axis=0, keepdims=True) if np.ndim(x + y) == 6 else x + y
        assert got.shape == want.shape and np.array_equal(got, want)
    assert np.array_equal(_most_over_ranks(one, flat, 6), one + flat)   # nothing to reduce: the sum itself
