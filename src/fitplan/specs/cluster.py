"""The hardware: one GPU type, how many, how they are grouped into nodes and linked."""

from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs._check import positive_int, positive_number
from fitplan.specs.declare import check_ranges, declared

# DeepSpeed's CPU-Adam steps 1 billion parameters in 0.22 s on a DGX-2 host's CPUs [zero-offload Table 3]
# (5-7x PyTorch's CPU Adam: deepspeed.ai/tutorials/zero-offload; DeepSpeed's training docs give 5.1-6.5x)
CPU_ADAM_PARAMS_PER_S = 1e9 / 0.22


@record(slots=True, kw_only=True)
class LinkSpec:
    """One link tier: per-GPU bandwidth (bytes/s, one direction), the per-hop latency (s) of
    NCCL's ring/Simple protocol over it, and the fraction of the bandwidth a large collective's
    bus bandwidth reaches (fitplan.timing.comm). Per GPU: the intra-node tier is one GPU's
    NVLink (or PCIe, Infinity Fabric) rate; the inter-node tier is one GPU's own NIC
    (rail-optimised, one NIC per GPU: 400 Gb/s = 50 GB/s), not the node's total, so a group
    with r ranks on a node crosses the network at r times it."""

    name: str = declared("str", file_only="the link's name in reports; a changed bandwidth appends it")
    bytes_per_s: float = declared("rate", key="bandwidth", flag="--bandwidth", group="cluster", example="100 GB/s", lo="1 MB/s",
                                  hi="100 TB/s",
                                  help="per-GPU link bandwidth, one direction (inter-node: each GPU's own NIC, "
                                       "e.g. \"50 GB/s\" for 400 Gb/s)")
    latency_s: float = declared("seconds", key="latency", flag="--latency", group="cluster", example="5 us", lo="0 s",
                                hi="100 ms",
                                help="per-hop latency of the link (NCCL's ring/Simple protocol: NVLink 3.4 us, "
                                     "network 14 us)")
    bus_efficiency: float = declared("number", default=1.0, key="bus_efficiency", flag="--bus-efficiency",
                                     group="cluster", lo=0.01, hi=1, example=0.8,
                                     help="the fraction of the bandwidth a large collective reaches (nccl-tests "
                                          "busbw / link rate; 1: the bandwidth given is a measured busbw)")

    def __post_init__(self) -> None:
        positive_number("link", "bytes_per_s", self.bytes_per_s)
        if not (0 <= self.latency_s < 1):
            raise SpecError(f"link.latency_s must be in [0, 1) seconds, got {self.latency_s!r}")
        if isinstance(self.bus_efficiency, bool) or not isinstance(self.bus_efficiency, (int, float)) \
                or not (0 < self.bus_efficiency <= 1):
            raise SpecError(f"link.bus_efficiency must be in (0, 1], got {self.bus_efficiency!r}")
        check_ranges(self, "link")


@record(slots=True, kw_only=True)
class EndToEndSpec:
    """End-to-end constants fitted on one's own measured runs (`fitplan calibrate --runs`): each set one
    replaces the shipped fit's (fitplan.timing.calibration) for this GPU; `runs` and the residual spread
    give the error band its basis."""
    clock: float | None = declared("number", default=None, lo=0.05, hi=2, omitted="the shipped fit's",
                                   file_only="fitted: sustained clock fraction of compute-bound kernels")
    attention_scale: float | None = declared("number", default=None, lo=0.05, hi=5, omitted="the shipped fit's",
                                             file_only="fitted: attention kernels over their benchmarks")
    elementwise_scale: float | None = declared("number", default=None, lo=0.01, hi=50, omitted="the shipped fit's",
                                               file_only="fitted: elementwise traffic over the counted")
    moe_traffic: float | None = declared("number", default=None, lo=0, hi=100, omitted="the shipped fit's",
                                         file_only="fitted: MoE token handling's bytes per routed-copy byte")
    sm_sharing: float | None = declared("number", default=None, lo=0, hi=5, omitted="the shipped fit's",
                                        file_only="fitted: compute lost per second of overlapped communication")
    layer_overhead: float | None = declared("number", default=None, lo=0, hi=0.1, omitted="the shipped fit's",
                                            file_only="fitted: seconds of host time per layer pass")
    moe_sync_overhead: float | None = declared("number", default=None, lo=0, hi=0.1, omitted="the shipped fit's",
                                               file_only="fitted: seconds of host sync per local expert per dropless "
                                                         "MoE layer forward")
    collective_overhead: float | None = declared("number", default=None, lo=0, hi=0.1, omitted="the shipped fit's",
                                                 file_only="fitted: seconds of framework time per collective")
    comm_efficiency: float | None = declared("number", default=None, lo=0.01, hi=1, omitted="the shipped fit's",
                                             file_only="fitted: collective bandwidth over the modelled")
    a2a_efficiency: float | None = declared("number", default=None, lo=0.01, hi=1, omitted="the shipped fit's",
                                            file_only="fitted: MoE all-to-all bandwidth over the modelled")
    straggler_cv: float | None = declared("number", default=None, lo=0, hi=1, omitted="the shipped fit's",
                                          file_only="fitted: coefficient of variation of a GPU's time")
    runs: int = declared("int", default=0, lo=0, hi=10**6, file_only="how many measured runs the fit rests on")
    residual_low: float = declared("number", default=0.0, lo=-5, hi=5,
                                   file_only="10th percentile of ln(measured/predicted) over the runs, after the fit")
    residual_high: float = declared("number", default=0.0, lo=-5, hi=5,
                                    file_only="90th percentile of ln(measured/predicted) over the runs, after the fit")

    def __post_init__(self) -> None:
        check_ranges(self, "gpu.end_to_end")

    def values(self) -> dict:
        """The fitted constants set here, by fitplan.timing.calibration's names (clock: every architecture's)."""
        out = {name: getattr(self, name) for name in ("attention_scale", "elementwise_scale", "moe_traffic", "sm_sharing",
                                                      "layer_overhead", "moe_sync_overhead", "collective_overhead", "comm_efficiency",
                                                      "a2a_efficiency",
                                                      "straggler_cv") if getattr(self, name) is not None}
        if self.clock is not None:
            out.update({name: self.clock for name in ("clock_ampere", "clock_hopper", "clock_blackwell",
                                                      "clock_blackwell_ultra")})
        return out


@record(slots=True, kw_only=True)
class GpuSpec:
    """One accelerator. Peak rates are dense (no sparsity). A GEMM of FLOPs F and operand bytes
    B takes F/(efficiency*peak) + gemm_overhead + B/gemm_bandwidth (fitplan.timing.gemm; fp8
    GEMMs at efficiency_fp8 of the fp8 peak): named, visible constants, fitted per GPU by
    bench/calibrate.py to measured GEMM throughput by shape."""

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
    # the dense fp4 (NVFP4/MXFP4) tensor-core peak: --compute-precision nvfp4's GEMMs run at it (fitplan.timing.compute)
    peak_fp4_flops_per_s: float | None = declared("number", default=None, flag="--peak-fp4-tflops", scale=1e12,
                                                  group="cluster", lo=0.001, hi=1e6, unit="TFLOP/s", example=9000,
                                                  omitted="no fp4 tensor cores",
                                                  help="dense fp4 peak of one GPU in TFLOP/s (B200: 9000)")
    hbm_bytes_per_s: float | None = declared("rate", default=None, key="hbm_bandwidth", flag="--hbm-bandwidth",
                                             group="cluster", example="4 TB/s", omitted="unknown", lo="1 GB/s",
                                             hi="1000 TB/s", help='peak HBM bandwidth of one GPU, e.g. "3.35 TB/s" (H100 SXM); '
                                                                  "without --gemm-bandwidth it scales the preset's "
                                                                  "GEMM operand bandwidth by the same ratio")
    efficiency: float = declared("number", flag="--gemm-efficiency", group="cluster", lo=0.001, hi=1, example=0.6,
                                 help="the GEMM curve's ceiling eff_max: the fraction of the bf16 peak a GEMM "
                                      "approaches as it grows (calibrated: bench/calibrate.py)")
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
                                    help="scales the GEMM ceilings by h/(h + h0), fitplan's former curve: the "
                                         "hidden size at which they halve (0, the presets': no scaling)")
    efficiency_fp8: float | None = declared("number", default=None, flag="--gemm-efficiency-fp8", group="cluster",
                                            lo=0.001, hi=1, example=0.7, omitted="the bf16 ceiling (efficiency)",
                                            help="the GEMM curve's ceiling for fp8 GEMMs, a fraction of the fp8 "
                                                 "peak (default: --gemm-efficiency)")
    gemm_overhead_s: float = declared("seconds", default=0.0, key="gemm_overhead", flag="--gemm-overhead",
                                      group="cluster", lo="0 s", hi="999 ms", example="6 us",
                                      help='fixed time per GEMM kernel: launch, pipeline fill and the last partial '
                                           'wave, e.g. "6 us"')
    gemm_bandwidth_bytes_per_s: float | None = declared("rate", default=None, key="gemm_bandwidth",
                                                        flag="--gemm-bandwidth", group="cluster", lo="1 MB/s",
                                                        hi="1000 TB/s", example="9 TB/s",
                                                        omitted="the HBM bandwidth",
                                                        help='effective bandwidth at which a GEMM reads its operands '
                                                             'and writes its result, e.g. "9 TB/s" (default: the '
                                                             "preset's fitted value, times new/old HBM bandwidth "
                                                             'under --hbm-bandwidth; else the HBM bandwidth)')
    # the board's power while training: the preset's TDP (its source cites it), a ceiling on the average draw
    power_watts: float | None = declared("power", default=None, key="power", flag="--gpu-power", group="to train",
                                         lo="1 W", hi="100 kW", example="500 W", omitted="not stated (no energy to train)",
                                         help='power one GPU draws while training, e.g. "700 W" (default: the GPU '
                                              'preset\'s TDP, the board\'s maximum)')
    # the board's power limit (TDP): what the preset's clocks are fitted at; a --gpu-power below it slows the
    # compute-bound kernels (fitplan.timing.calibration.power_clock)
    tdp_watts: float | None = declared("power", default=None, key="tdp", lo="1 W", hi="100 kW", omitted="not stated",
                                       file_only="the board's power limit, the preset's; --gpu-power sets the power "
                                                 "drawn")
    # the die's generation, which picks its end-to-end clock constant (fitplan.timing.calibration)
    architecture: str = declared("str", default="", file_only="the die's generation (ampere, hopper, blackwell, "
                                                              "blackwell-ultra, ada, cdna3, cdna4), the preset's")
    end_to_end: EndToEndSpec | None = declared("table", table=EndToEndSpec, default=None,
                                               omitted="the shipped end-to-end fit (fitplan.timing.calibration)")
    # the GPU's link to host memory, per GPU and direction: what offloaded state and activations cross
    # (fitplan.timing.offload); the presets cite theirs, the default is PCIe Gen4 x16's achievable rate
    host_bytes_per_s: float = declared("rate", default=25e9, key="host_bandwidth", flag="--host-bandwidth",
                                       group="offload", example="100 GB/s", lo="100 MB/s", hi="10 TB/s",
                                       help='GPU-to-host link of one GPU, one direction, e.g. "25 GB/s" (PCIe Gen4 '
                                            'x16 achievable), "50 GB/s" (Gen5), "450 GB/s" (GH200 NVLink-C2C)')
    source: str = declared("str", default="", file_only="prose, not a setting")

    def __post_init__(self) -> None:
        positive_int("gpu", "memory_bytes", self.memory_bytes, maximum=2**60)
        positive_number("gpu", "host_bytes_per_s", self.host_bytes_per_s)
        if isinstance(self.efficiency_h0, bool) or not isinstance(self.efficiency_h0, (int, float)) \
                or not (0 <= self.efficiency_h0 < 1e7):
            raise SpecError(f"gpu.efficiency_h0 must be a hidden size in [0, 1e7), got {self.efficiency_h0!r}")
        positive_number("gpu", "peak_bf16_flops_per_s", self.peak_bf16_flops_per_s)
        for name in ("peak_fp8_flops_per_s", "peak_fp4_flops_per_s"):
            if getattr(self, name) is not None:
                positive_number("gpu", name, getattr(self, name))
        if self.hbm_bytes_per_s is not None:
            positive_number("gpu", "hbm_bytes_per_s", self.hbm_bytes_per_s)
        if self.power_watts is not None:
            positive_number("gpu", "power_watts", self.power_watts)
        for name in ("efficiency", "efficiency_fp8"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 < value <= 1):
                raise SpecError(f"gpu.{name} must be in (0, 1], got {value!r}")
        if self.gemm_bandwidth_bytes_per_s is not None:
            positive_number("gpu", "gemm_bandwidth_bytes_per_s", self.gemm_bandwidth_bytes_per_s)
        if isinstance(self.gemm_overhead_s, bool) or not isinstance(self.gemm_overhead_s, (int, float)) \
                or not 0 <= self.gemm_overhead_s < 1:
            raise SpecError(f"gpu.gemm_overhead must be in [0, 1) seconds, got {self.gemm_overhead_s!r}")
        positive_int("gpu", "gpus_per_node", self.gpus_per_node, maximum=4096)
        check_ranges(self, "gpu")


@record(slots=True, kw_only=True)
class ClusterSpec:
    gpu: GpuSpec = declared("gpu", table=GpuSpec, flag="--gpu", group="cluster", example="a100-80gb",
                            help="GPU preset (default: the model preset's, else h100-80gb)")
    num_gpus: int = declared("int", flag="--gpus", group="cluster", lo=1, hi=2**20, example=64, help="number of GPUs")
    gpus_per_node: int = declared("int", flag="--gpus-per-node", group="cluster", lo=1, hi=4096, example=4,
                                  help="GPUs per node, i.e. per NVLink domain: the GPUs the intra-node link joins "
                                       "(72 for a GB200 NVL72 rack; default: the GPU's)")
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
    # offload (fitplan.memory.offload, fitplan.timing.offload): the host's memory, its CPU optimizer, its NVMe
    host_memory_bytes: int | None = declared(
        "size", default=None, key="host_memory", flag="--host-memory", group="offload", lo="1 MiB", hi="1024 TiB",
        example="2 TiB", omitted="not limited; the search does not offload",
        help='CPU memory per node for offloaded state, e.g. "2 TiB"; a limit every plan must respect, and with '
             '--suggest it lets the search offload when nothing fits on the GPUs alone')
    cpu_optimizer_params_per_s: float = declared(
        "number", default=CPU_ADAM_PARAMS_PER_S, flag="--cpu-optimizer-rate", scale=1e9, group="offload",
        lo=0.001, hi=1e4, unit="billion parameters/s per node", example=10,
        help="billions of parameters one node's CPUs step per second under optimizer offload (default 4.55: "
             "DeepSpeed's CPU-Adam, 1B parameters in 0.22 s, Ren et al. 2021 Table 3)")
    nvme_bytes_per_s: float = declared(
        "rate", default=10e9, key="nvme_bandwidth", flag="--nvme-bandwidth", group="offload", lo="10 MB/s",
        hi="10 TB/s", example="48 GB/s",
        help='NVMe bandwidth of one node, shared by its GPUs, e.g. "10 GB/s" (4 PCIe Gen4 SSDs in RAID 0, '
             'DeepNVMe reads; writes are taken at the same rate)')
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
        positive_number("cluster", "cpu_optimizer_params_per_s", self.cpu_optimizer_params_per_s)
        positive_number("cluster", "nvme_bytes_per_s", self.nvme_bytes_per_s)
        if self.host_memory_bytes is not None:
            positive_int("cluster", "host_memory_bytes", self.host_memory_bytes, maximum=2**60)
        check_ranges(self, "cluster")

    @property
    def usable_bytes(self) -> int:
        return self.gpu.memory_bytes - self.reserve_bytes
