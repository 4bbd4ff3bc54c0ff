"""The hardware: one GPU type, how many, how they are grouped into nodes and linked."""
from dataclasses import dataclass

from fitplan.errors import SpecError
from fitplan.specs._check import positive_int, positive_number


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One link tier in the alpha-beta model: per-GPU bandwidth (bytes/s, one direction)
    and per-message latency (s)."""

    name: str
    bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        positive_number("link", "bytes_per_s", self.bytes_per_s)
        if not (0 <= self.latency_s < 1):
            raise SpecError(f"link.latency_s must be in [0, 1) seconds, got {self.latency_s!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One accelerator. Peak rates are dense (no sparsity). A step's sustained fraction of
    peak is efficiency * h / (h + efficiency_h0) (fitplan.timing.compute.gemm_efficiency):
    named, visible assumptions, calibrated in bench/calibrate.py."""

    name: str
    memory_bytes: int
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float | None
    efficiency: float
    intra_node: LinkSpec
    inter_node: LinkSpec
    gpus_per_node: int = 8
    default_reserve_bytes: int = 0
    efficiency_h0: float = 0.0   # hidden size at which GEMM efficiency halves; 0: constant efficiency
    source: str = ""

    def __post_init__(self) -> None:
        positive_int("gpu", "memory_bytes", self.memory_bytes, maximum=2**60)
        if isinstance(self.efficiency_h0, bool) or not isinstance(self.efficiency_h0, (int, float)) \
                or not (0 <= self.efficiency_h0 < 1e7):
            raise SpecError(f"gpu.efficiency_h0 must be a hidden size in [0, 1e7), got {self.efficiency_h0!r}")
        positive_number("gpu", "peak_bf16_flops_per_s", self.peak_bf16_flops_per_s)
        if self.peak_fp8_flops_per_s is not None:
            positive_number("gpu", "peak_fp8_flops_per_s", self.peak_fp8_flops_per_s)
        if not (0 < self.efficiency <= 1):
            raise SpecError(f"gpu.efficiency must be in (0, 1], got {self.efficiency!r}")
        positive_int("gpu", "gpus_per_node", self.gpus_per_node, maximum=4096)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    gpu: GpuSpec
    num_gpus: int
    gpus_per_node: int
    reserve_bytes: int   # held back per GPU: CUDA context, NCCL buffers, allocator fragmentation

    def __post_init__(self) -> None:
        positive_int("cluster", "num_gpus", self.num_gpus, maximum=10**9)
        positive_int("cluster", "gpus_per_node", self.gpus_per_node, maximum=4096)
        if isinstance(self.reserve_bytes, bool) or not isinstance(self.reserve_bytes, int) or self.reserve_bytes < 0:
            raise SpecError(f"cluster.reserve must be >= 0 bytes, got {self.reserve_bytes!r}")
        if self.reserve_bytes >= self.gpu.memory_bytes:
            raise SpecError(f"cluster.reserve ({self.reserve_bytes} B) leaves no usable memory on a "
                            f"{self.gpu.memory_bytes} B GPU; lower --reserve")

    @property
    def usable_bytes(self) -> int:
        return self.gpu.memory_bytes - self.reserve_bytes
