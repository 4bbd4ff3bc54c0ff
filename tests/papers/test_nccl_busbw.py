"""fitplan.timing.comm against published nccl-tests bus bandwidths (busbw = algbw x 2(n-1)/n for
an all-reduce, x (n-1)/n for an all-gather or reduce-scatter; nccl-tests doc/PERFORMANCE.md).

The presets' bus efficiencies (docs/formulas.md#collectives) were read off four of these rows:
A100 all-reduce at 16 GiB (0.78), H200 ring all-reduce at 16 GiB (0.82), B200 ring all-reduce at
8 GiB (0.76), MI300X at 4 GiB (0.70). Those reproduce by construction; every other row is a check.
The NIC efficiency (0.96) is NVIDIA's own statement of what a NIC reaches (24 of 25 GB/s per HDR
NIC, nccl-tests#119; 48-49 of 50 per NDR NIC, nccl-tests#267), not fitted to any row here.

Tolerance: 5% at 1 GiB and above, 10% at 512 MiB. At medium sizes the model is optimistic (NCCL
ramps its channel count up with the message; EFA's latency exceeds InfiniBand's): the last test
pins that gap so that it stays visible rather than silently tuned away.
"""
import pytest

from fitplan import presets
from fitplan.timing import comm as CM

GiB, MiB = 2**30, 2**20
MLE = "stas00/ml-engineering network/README.md @744d01e"


def busbw(gpu: str, kind: str, n: int, k: int, S: int) -> float:
    """Predicted nccl-tests busbw in GB/s: n ranks on k nodes, an S-byte buffer."""
    t = CM.collective_s(count=1, kind=kind, n=n, k=k, S=S, **CM.tiers(presets.gpu(gpu)))
    return CM.bus_bandwidth(kind=kind, n=n, S=S, seconds=t) / 1e9


# (what, GPU preset, collective, ranks, nodes, bytes, published busbw GB/s, source)
ONE_NODE = [
    ("8 x A100 all-reduce, 1 GiB", "a100-80gb", "all_reduce", 8, 1, GiB, 229.04,
     f"{MLE}, 'Real network throughput' (all_reduce_perf)"),
    ("8 x A100 all-reduce, 16 GiB (fitted)", "a100-80gb", "all_reduce", 8, 1, 16 * GiB, 234.89, MLE),
    ("8 x H200 ring all-reduce, 16 GiB (fitted)", "h200-141gb", "all_reduce", 8, 1, 16 * GiB, 367.2,
     f"{MLE}, 'SHARP' (NCCL 2.27.7, NCCL_NVLS_ENABLE=0)"),
    ("8 x H200 all-gather, 16 GiB", "h200-141gb", "all_gather", 8, 1, 16 * GiB, 361.4, MLE),
    ("8 x H200 reduce-scatter, 16 GiB", "h200-141gb", "reduce_scatter", 8, 1, 16 * GiB, 362.9, MLE),
    ("8 x H100 ring all-reduce, 4 GiB", "h100-80gb", "all_reduce", 8, 1, 4 * GiB, 370.0,
     "NVIDIA/nccl-tests#212 (maintainer: ~370 GB/s with NCCL_ALGO=RING); NVIDIA/nccl#1455 (365-370 at 2-4 GiB)"),
    ("8 x B200 ring all-reduce, 8 GiB (fitted)", "b200", "all_reduce", 8, 1, 8 * GiB, 682.2,
     f"{MLE}, 'SHARP' (NVLS off)"),
]
ACROSS_NODES = [
    ("4 x 8 B200, 8 x 50 GB/s EFA per node, 16 GiB", "b200", "all_reduce", 32, 4, 16 * GiB, 381.80,
     f"{MLE}, 'Inter-node speed depends on intra-node speed'"),
    ("4 x 8 B200, 4 GiB", "b200", "all_reduce", 32, 4, 4 * GiB, 377.34, MLE),
    ("4 x 8 B200, 1 GiB", "b200", "all_reduce", 32, 4, GiB, 361.99, MLE),
    ("4 x 8 H200 (p5en, EFA), ring, 4 GiB", "h200-141gb", "all_reduce", 32, 4, 4 * GiB, 364.65,
     f"{MLE}, 'Multiple node training' footnote (NCCL_ALGO=allreduce:ring)"),
    ("DGX A100, 8 x 200 Gb/s IB (4 nodes assumed)", "a100-80gb", "all_reduce", 32, 4, 8 * GiB, 192.0,
     "NVIDIA/nccl#812 (maintainer: 192 GB/s all-reduce busbw)"),
]


@pytest.mark.parametrize("case", ONE_NODE + ACROSS_NODES, ids=lambda c: c[0])
def test_large_collectives_match_published_busbw(case):
    """Within 5% at 1 GiB and above. Predicted: A100 232.4 and 233.9; H200 368.7 (all three
    collectives: ring all-reduce, all-gather, reduce-scatter share the ring's bus bandwidth);
    H100 368.0; B200 682.3; across nodes 382.3, 377.1, 357.8 (B200), 377.1 (H200, +3.4%: the
    farthest), 191.1 (DGX A100)."""
    what, gpu, kind, n, k, S, published, source = case
    assert busbw(gpu, kind, n, k, S) == pytest.approx(published, rel=0.05), (what, source)


def test_a_ring_across_nodes_is_bound_by_the_nodes_nics_not_one():
    """4 x 8 B200 at 16 GiB: the naive one-NIC model would give at most 48 GB/s (stas00's
    'model 1', 3.9x off); the ring across nodes runs at 8 NICs x 48 = 384 GB/s of bus bandwidth,
    382.3 with its latency, against 381.80 published."""
    assert busbw("b200", "all_reduce", 32, 4, 16 * GiB) == pytest.approx(382.3, abs=0.1)
    assert busbw("b200", "all_reduce", 32, 4, 16 * GiB) > 7 * 48


def test_half_a_gigabyte_across_nodes():
    """4 x 8 B200 at 512 MiB: 326.90 published, 336.8 predicted (+3.0%); within 10%."""
    assert busbw("b200", "all_reduce", 32, 4, 512 * MiB) == pytest.approx(326.90, rel=0.10)


@pytest.mark.parametrize(("gpu", "n", "k", "S", "published", "low", "high"), [
    ("a100-80gb", 8, 1, 8 * MiB, 109.93, 1.15, 1.30),     # predicted 134.9, +22.7%
    ("a100-80gb", 8, 1, 64 * MiB, 171.54, 1.15, 1.30),    # 210.5, +22.7%
    ("a100-80gb", 8, 1, 256 * MiB, 194.07, 1.10, 1.25),   # 227.6, +17.3%
    ("b200", 32, 4, 256 * MiB, 229.09, 1.30, 1.50),       # 321.7, +40.4%
    ("b200", 32, 4, 16 * MiB, 64.43, 2.5, 3.5),           # 194.9, +202%
])
def test_medium_sizes_are_optimistic(gpu, n, k, S, published, low, high):
    """The gap at medium sizes, pinned: NCCL's cost model (and so fitplan's) has no term for the
    channels it leaves idle below a few hundred MiB, nor for EFA's latency. A tensor-parallel
    all-reduce of b*s*h*e = 64 MiB (s = 4096, h = 8192) is in this range."""
    ratio = busbw(gpu, "all_reduce", n, k, S) / published
    assert low < ratio < high
