"""The hardware: one GPU type, how many, how they are grouped into nodes and linked."""
from dataclasses import dataclass

from fitplan.errors import SpecError
from fitplan.specs._check import positive_int, positive_number
from fitplan.specs.declare import check_ranges, declared


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One link tier in the alpha-beta model: per-GPU bandwidth (bytes/s, one direction)
    and per-message latency (s)."""

    name: str = declared("str", file_only="the link's name in reports; a changed bandwidth appends it")
    bytes_per_s: float = declared("rate", key="bandwidth", flag="--bandwidth", group="cluster", example="100 GB/s", lo="1 MB/s",
                                  hi="100 TB/s",
                                  help="per-GPU link bandwidth, one direction")
    latency_s: float = declared("seconds", key="latency", flag="--latency", group="cluster", example="5 us", lo="0 s",
                                hi="100 ms",
                                help="per-message latency of the link")

    def __post_init__(self) -> None:
        positive_number("link", "bytes_per_s", self.bytes_per_s)
        if not (0 <= self.latency_s < 1):
            raise SpecError(f"link.latency_s must be in [0, 1) seconds, got {self.latency_s!r}")
        check_ranges(self, "link")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One accelerator. Peak rates are dense (no sparsity). A step's sustained fraction of
    peak is efficiency * h / (h + efficiency_h0) (fitplan.timing.compute.gemm_efficiency):
    named, visible assumptions, calibrated in bench/calibrate.py."""

    name: str = declared("str", file_only="a preset's name; a changed memory or link appends it")
    memory_bytes: int = declared("size", key="memory", flag="--gpu-memory", group="cluster", example="96 GiB",
                                 lo="1 MiB", hi="64 TiB",
                                 help='memory per GPU, e.g. "192 GiB"')
    peak_bf16_flops_per_s: float = declared("number", flag="--peak-tflops", scale=1e12, group="cluster", lo=0.001,
                                            hi=1e6, unit="TFLOP/s", example=500,
                                            help="dense bf16 peak of one GPU in TFLOP/s (H100 SXM: 989)")
    peak_fp8_flops_per_s: float | None = declared("number", default=None, flag="--peak-fp8-tflops", scale=1e12,
                                                  group="cluster", lo=0.001, hi=1e6, unit="TFLOP/s", example=1000,
                                                  omitted="no fp8 tensor cores",
                                                  help="dense fp8 peak of one GPU in TFLOP/s (H100 SXM: 1979)")
    hbm_bytes_per_s: float | None = declared("rate", default=None, key="hbm_bandwidth", flag="--hbm-bandwidth",
                                             group="cluster", example="4 TB/s", omitted="unknown", lo="1 GB/s",
                                             hi="1000 TB/s", help='peak HBM bandwidth of one GPU, e.g. "3.35 TB/s" (H100 SXM)')
    efficiency: float = declared("number", flag="--gemm-efficiency", group="cluster", lo=0.001, hi=1, example=0.6,
                                 help="the sustained fraction of peak at large hidden sizes (calibrated: "
                                      "bench/calibrate.py)")
    intra_node: LinkSpec = declared("table", table=LinkSpec, prefix="intra-node-")
    inter_node: LinkSpec = declared("table", table=LinkSpec, prefix="inter-node-")
    gpus_per_node: int = declared("int", default=8, file_only="the GPU's usual node size; the cluster's "
                                                              "--gpus-per-node sets the planned one")
    default_reserve_bytes: int = declared("size", default=0, key="default_reserve",
                                          file_only="the GPU's usual reserve; --reserve sets the planned one")
    # PyTorch's cuBLAS workspace per (handle, stream), allocated through the caching allocator
    # (aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize): ":4096:2:16:8" = 8,519,680 B by
    # default, 32 MiB on Hopper and Blackwell; ROCm 32 MiB, 128 MiB on gfx94x/gfx95x, plus hipBLASLt's 76 MiB
    blas_workspace_bytes: int = declared("size", default=8_519_680, key="blas_workspace", flag="--blas-workspace",
                                         group="runtime", example="16 MiB", lo="0 B", hi="16 GiB",
                                         help="the BLAS library's workspace PyTorch keeps per stream (default: the "
                                              "GPU preset's, CUBLAS_WORKSPACE_CONFIG's default for its architecture)")
    efficiency_h0: float = declared("number", default=0.0, flag="--gemm-efficiency-h0", group="cluster", lo=0,
                                    hi=1e7, example=2000.0,
                                    help="hidden size at which GEMM efficiency halves (0: constant efficiency)")
    # the board's power while training: the preset's TDP (its source cites it), a ceiling on the average draw
    power_watts: float | None = declared("power", default=None, key="power", flag="--gpu-power", group="to train",
                                         lo="1 W", hi="100 kW", example="500 W", omitted="not stated (no energy to train)",
                                         help='power one GPU draws while training, e.g. "700 W" (default: the GPU '
                                              'preset\'s TDP, the board\'s maximum)')
    source: str = declared("str", default="", file_only="prose, not a setting")

    def __post_init__(self) -> None:
        positive_int("gpu", "memory_bytes", self.memory_bytes, maximum=2**60)
        if isinstance(self.efficiency_h0, bool) or not isinstance(self.efficiency_h0, (int, float)) \
                or not (0 <= self.efficiency_h0 < 1e7):
            raise SpecError(f"gpu.efficiency_h0 must be a hidden size in [0, 1e7), got {self.efficiency_h0!r}")
        positive_number("gpu", "peak_bf16_flops_per_s", self.peak_bf16_flops_per_s)
        if self.peak_fp8_flops_per_s is not None:
            positive_number("gpu", "peak_fp8_flops_per_s", self.peak_fp8_flops_per_s)
        if self.hbm_bytes_per_s is not None:
            positive_number("gpu", "hbm_bytes_per_s", self.hbm_bytes_per_s)
        if self.power_watts is not None:
            positive_number("gpu", "power_watts", self.power_watts)
        if not (0 < self.efficiency <= 1):
            raise SpecError(f"gpu.efficiency must be in (0, 1], got {self.efficiency!r}")
        positive_int("gpu", "gpus_per_node", self.gpus_per_node, maximum=4096)
        check_ranges(self, "gpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    gpu: GpuSpec = declared("gpu", table=GpuSpec, flag="--gpu", group="cluster", example="a100-80gb",
                            help="GPU preset (default: the model preset's, else h100-80gb)")
    num_gpus: int = declared("int", flag="--gpus", group="cluster", lo=1, hi=2**20, example=64, help="number of GPUs")
    gpus_per_node: int = declared("int", flag="--gpus-per-node", group="cluster", lo=1, hi=4096, example=4,
                                  help="GPUs per node (default: the GPU's)")
    reserve_bytes: int = declared("size", key="reserve", flag="--reserve", group="cluster", example="3 GiB", lo="0 B",
                                  hi="64 TiB",
                                  help='memory held back per GPU, e.g. "10 GiB" (default: the GPU\'s)')
    gpu_hour_price: float | None = declared("number", default=None, flag="--gpu-hour-price", group="to train", lo=0,
                                            hi=1e6, unit="per GPU-hour", example=2.5, omitted="no cost",
                                            help="price of one GPU for one hour, in any currency (cost = GPU-hours "
                                                 "x price; needed by --rank cost)")
    pue: float = declared("number", default=1.0, flag="--pue", group="to train", lo=1, hi=5, example=1.3,
                          help="power usage effectiveness, facility energy over IT energy (1, the default: the GPU "
                               "boards alone, no host, network or cooling)")
    # what each GPU's process holds outside PyTorch's caching allocator (fitplan.memory.runtime)
    cuda_context_bytes: int = declared("size", default=400 * 2**20, key="cuda_context", flag="--cuda-context",
                                       group="runtime", example="600 MiB", lo="0 B", hi="64 GiB",
                                       help="the CUDA context and loaded kernels per GPU process (default 400 MiB: "
                                            "PyTorch maintainers' figure with lazy module loading)")
    nccl_buffsize_bytes: int = declared("size", default=4 * 2**20, key="nccl_buffsize", flag="--nccl-buffsize",
                                        group="runtime", example="2 MiB", lo="64 KiB", hi="1 GiB",
                                        help="NCCL_BUFFSIZE, the Simple protocol's buffer per connection and channel "
                                             "(NCCL's default 4 MiB)")
    nccl_channels: int = declared("int", default=32, flag="--nccl-channels", group="runtime", lo=1, hi=128,
                                  example=16, help="NCCL channels per communicator (default 32, what NCCL opens on "
                                                   "NVLink H100 nodes; NCCL_MAX_NCHANNELS caps it)")

    def __post_init__(self) -> None:
        positive_int("cluster", "num_gpus", self.num_gpus, maximum=10**9)
        positive_int("cluster", "gpus_per_node", self.gpus_per_node, maximum=4096)
        if isinstance(self.reserve_bytes, bool) or not isinstance(self.reserve_bytes, int) or self.reserve_bytes < 0:
            raise SpecError(f"cluster.reserve must be >= 0 bytes, got {self.reserve_bytes!r}")
        if self.reserve_bytes >= self.gpu.memory_bytes:
            raise SpecError(f"cluster.reserve ({self.reserve_bytes} B) leaves no usable memory on a "
                            f"{self.gpu.memory_bytes} B GPU; lower --reserve")
        if self.gpu_hour_price is not None and (isinstance(self.gpu_hour_price, bool) or not isinstance(
                self.gpu_hour_price, (int, float)) or not 0 <= self.gpu_hour_price < float("inf")):
            raise SpecError(f"cluster.gpu_hour_price must be a number >= 0, got {self.gpu_hour_price!r}")
        if isinstance(self.pue, bool) or not isinstance(self.pue, (int, float)):
            raise SpecError(f"cluster.pue must be a number >= 1, got {self.pue!r}")
        check_ranges(self, "cluster")

    @property
    def usable_bytes(self) -> int:
        return self.gpu.memory_bytes - self.reserve_bytes
