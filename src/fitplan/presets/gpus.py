"""GPU presets. Memory from the vendor's figure, in the unit the vendor uses (stated per
preset); peak rates are dense (no 2:4 sparsity). Link bandwidths are per GPU, one
direction (inter-node: each GPU's own NIC). Latencies are NCCL's per-hop ring/Simple figures
(src/graph/tuning.cc: NVLink 3.4 us, PCI 5.7 us, network 14 us). bus_efficiency is a large ring
collective's measured busbw over the link's rate (nccl-tests; docs/formulas.md#collectives).

A GEMM of F FLOPs and B operand bytes takes F/(efficiency*peak) + gemm_overhead +
B/gemm_bandwidth (fitplan.timing.gemm; fp8 GEMMs at efficiency_fp8 of the fp8 peak). CURVES
holds those constants per die, fitted by bench/calibrate.py to the measured GEMM throughput
by shape in bench/gemm_points.csv (component measurements only: OpenXLA's dot tables,
maximum-achievable-matmul tables, AMD's hipBLASLt figures, DeepGEMM); its output gives the
sources and residuals. A100 has no measured table by shape: its ceiling is the one that
reproduces its maximum-achievable-matmul row, with H100's t0 and H100's operand bandwidth
scaled by the HBM ratio (what frameworks add around the GEMMs is fitted end to end:
fitplan.timing.calibration). The cards measured only by square torch.mm (RTX 4090, RTX 3090, RTX A6000,
L40S, L4, A10G) take A100's curve, the ceiling scaled by the benchmark's ratio to A100 and W by
their memory bandwidth. Parts without measurements of their own take their die's curve (said in
their source).
"""
from fitplan.presets.registry import Registry
from fitplan.specs.cluster import GpuSpec, LinkSpec
from fitplan.units import GB, GiB

# PyTorch's BLAS workspace per (handle, stream) (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize):
# ":4096:2:16:8" = 8,519,680 B by default (GpuSpec's), 32 MiB on Hopper and Blackwell; ROCm 128 MiB on gfx94x/gfx95x
# (MI300X, MI325X, MI355X) plus hipBLASLt's own 76 MiB (CUDABlas.cpp _parseChosenWorkspaceSize)
WS_HOPPER = 32 * 2**20
WS_GFX94 = (128 + 76) * 2**20

def _curve(eff, eff_fp8, t0_us, bandwidth_tb_s):
    """A die's GEMM curve: ceilings (bf16, fp8), fixed microseconds per GEMM, operand bandwidth in TB/s."""
    return dict(efficiency=eff, efficiency_fp8=eff_fp8, gemm_overhead_s=t0_us / 1e6,
                gemm_bandwidth_bytes_per_s=bandwidth_tb_s * 1e12)


# bench/calibrate.py prints these (rounded as here) with the fit's residuals
CURVES = {
    "a100": _curve(0.883, None, 6.11, 1.87),
    "h100": _curve(0.799, 0.641, 6.11, 3.07),
    "gh200": _curve(0.833, 0.689, 6.11, 3.07),
    "b200": _curve(0.683, 0.714, 6.38, 5.75),
    "gb200": _curve(0.641, 0.677, 6.38, 5.75),
    "b300": _curve(0.692, 0.697, 6.38, 5.75),
    "mi300x": _curve(0.460, 0.613, 12.0, 2.18),
    "mi325x": _curve(0.544, 0.731, 12.0, 2.18),
    "mi355x": _curve(0.546, 0.345, 6.9, 2.87),
    # parts measured by square torch.mm only: A100's curve, ceiling scaled by the benchmark's ratio, W by memory bandwidth
    "rtx-4090": _curve(1.0, None, 6.11, 0.923),
    "rtx-3090": _curve(1.0, None, 6.11, 0.857),
    "rtx-a6000": _curve(0.829, None, 6.11, 0.703),
    "l40s": _curve(0.774, None, 6.11, 0.791),
    "l4": _curve(0.61, None, 6.11, 0.275),
    "a10g": _curve(1.0, None, 6.11, 0.549),
}

# bus_efficiency: nccl-tests ring busbw at 1-16 GiB over the rate. A100 234.89/300, H200 367.61/450 (H100 ~370,
# nccl-tests#212), B200 682.2/900 (NVLS off), MI300X 312.9/448 (stas00/ml-engineering network/README.md);
# H800 160/200 (DeepSeek's measured NVLink, deepseek-ai/DeepSeek-V3#28); NICs 24 of 25 GB/s (HDR, nccl-tests#119)
# and 48 of 50 (NDR, nccl-tests#267), NVIDIA's figures.
NVLINK3 = LinkSpec(name="NVLink 3", bytes_per_s=300e9, latency_s=3.4e-6, bus_efficiency=0.78)   # 600 GB/s bidirectional
NVLINK4 = LinkSpec(name="NVLink 4", bytes_per_s=450e9, latency_s=3.4e-6, bus_efficiency=0.82)   # 900 GB/s bidirectional
NVLINK5 = LinkSpec(name="NVLink 5", bytes_per_s=900e9, latency_s=3.4e-6, bus_efficiency=0.76)   # 1.8 TB/s bidirectional
XGMI = LinkSpec(name="Infinity Fabric", bytes_per_s=448e9, latency_s=3.4e-6,
                bus_efficiency=0.70)   # 896 GB/s aggregate bidirectional
IB_HDR = LinkSpec(name="InfiniBand HDR 200 Gb/s", bytes_per_s=25e9, latency_s=14e-6, bus_efficiency=0.96)
IB_NDR = LinkSpec(name="InfiniBand NDR 400 Gb/s", bytes_per_s=50e9, latency_s=14e-6, bus_efficiency=0.96)
# The export parts (A800, H800) keep their NVLink generation at 400 GB/s bidirectional (A800's efficiency: H800's).
NVLINK3_400 = LinkSpec(name="NVLink 3 at 400 GB/s", bytes_per_s=200e9, latency_s=3.4e-6, bus_efficiency=0.80)   # A800
NVLINK4_400 = LinkSpec(name="NVLink 4 at 400 GB/s", bytes_per_s=200e9, latency_s=3.4e-6, bus_efficiency=0.80)   # H800
# PCIe 5.0 x16 per direction (NVIDIA's "128 GB/s" is both directions, 63 after encoding); the latency is
# NCCL's ring/Simple PCI hop (src/graph/tuning.cc hwLat: 5.7 us); efficiency: nvbandwidth's 55.4 of 63 GB/s
# host-to-device on H200 (stas00/ml-engineering network/README.md), no collective measured.
PCIE5 = LinkSpec(name="PCIe 5.0 x16", bytes_per_s=63e9, latency_s=5.7e-6, bus_efficiency=0.88)
XGMI_MI355X = LinkSpec(name="Infinity Fabric (MI355X)", bytes_per_s=535.5e9, latency_s=3.4e-6,
                       bus_efficiency=0.70)  # 7 x 153 GB/s / 2; efficiency: MI300X's
IB_NDR200 = LinkSpec(name="InfiniBand NDR200 200 Gb/s", bytes_per_s=25e9, latency_s=14e-6, bus_efficiency=0.96)
# Blackwell Ultra's NIC: one ConnectX-8 at 800 Gb/s (XDR InfiniBand or Ethernet) per GPU; no collective over it is
# measured in a public source, so NDR's 0.96 is assumed
CX8_800G = LinkSpec(name="ConnectX-8 800 Gb/s", bytes_per_s=100e9, latency_s=14e-6, bus_efficiency=0.96)
# The cards people fine-tune on (issue 25) talk over PCIe 4.0 x16 inside a node: 31.5 GB/s per direction after
# 128b/130b encoding, NCCL's PCI hop latency; efficiency PCIe 5.0's (no Gen4 collective measured)
PCIE4 = LinkSpec(name="PCIe 4.0 x16", bytes_per_s=31.5e9, latency_s=5.7e-6, bus_efficiency=0.88)
# and a node's one Ethernet/EFA port shared by its GPUs (per GPU, one direction; NCCL's network hop latency,
# InfiniBand's efficiency assumed: no public busbw over these): AWS g5.48xlarge (8 A10G) and g6.48xlarge (8 L4)
# 100 Gb/s, g6e.48xlarge (8 L40S) 400 Gb/s; a workstation's 100 GbE for 4 cards
ETH_100G_8 = LinkSpec(name="100 Gb/s Ethernet/EFA for 8 GPUs", bytes_per_s=100e9 / 8 / 8, latency_s=14e-6,
                      bus_efficiency=0.96)
ETH_400G_8 = LinkSpec(name="400 Gb/s Ethernet/EFA for 8 GPUs", bytes_per_s=400e9 / 8 / 8, latency_s=14e-6,
                      bus_efficiency=0.96)
ETH_100G_4 = LinkSpec(name="100 Gb/s Ethernet for 4 GPUs", bytes_per_s=100e9 / 8 / 4, latency_s=14e-6,
                      bus_efficiency=0.96)


def _preset(**fields):
    """(name, how to build it): a preset's datasheet fields, built with its host link, die generation and TDP
    (HOST_LINKS and ARCHITECTURES, below) when first asked for (fitplan.presets.registry)."""
    name = fields["name"]
    return name, lambda: GpuSpec(**{**fields, "source": f"{fields['source']}; {HOST_LINKS[name][1]}"},
                                 host_bytes_per_s=HOST_LINKS[name][0], architecture=ARCHITECTURES[name],
                                 tdp_watts=fields["power_watts"])


# No preset reserves memory: the CUDA context, cuBLAS workspaces, NCCL buffers, the allocator's pages
# and the other runtime buffers are terms of the peak (fitplan.memory.runtime), so --reserve is the
# user's own margin. The exercise's part keeps the 10 GiB its statement reserves. Memory is what the
# device reports where a public reading exists (COMPONENTS' nvidia-smi totals: H100 SXM 81,559 MiB,
# H200 143,771 MiB), else the datasheet's.
_GPUS = (
    _preset(name="gpu-192gib", blas_workspace_bytes=WS_HOPPER, memory_bytes=192 * GiB, peak_bf16_flops_per_s=2250e12, peak_fp8_flops_per_s=4500e12,
            peak_fp4_flops_per_s=9000e12, hbm_bytes_per_s=8e12, power_watts=1000,
            **CURVES["b200"], intra_node=NVLINK5, inter_node=IB_NDR, gpus_per_node=8, default_reserve_bytes=10 * GiB,
            source="the exercise's part: 192 GiB, 10 GiB reserved, 8 per node fully connected; rates (HBM 8 TB/s "
                   "and fp4 9 PFLOP/s included) and links assumed equal to b200's"
                   "; board power 1000 W assumed, b200's TDP"),
    _preset(name="a100-40gb", memory_bytes=40 * GiB, peak_bf16_flops_per_s=312e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=1555e9, power_watts=400,
            **CURVES["a100"], intra_node=NVLINK3, inter_node=IB_HDR,
            source="NVIDIA A100 datasheet: 40GB HBM2 (40,960 MiB) at 1,555 GB/s, 312 TFLOP/s bf16 dense, "
                   "NVLink 600 GB/s"
                   "; max TDP 400 W (SXM4; the PCIe card is 250 W)"),
    _preset(name="a100-80gb", memory_bytes=80 * GiB, peak_bf16_flops_per_s=312e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=2039e9, power_watts=400,
            **CURVES["a100"], intra_node=NVLINK3, inter_node=IB_HDR,
            source="NVIDIA A100 datasheet: 80GB HBM2e (81,920 MiB) at 2,039 GB/s (SXM), 312 TFLOP/s bf16 dense, "
                   "NVLink 600 GB/s"
                   "; max TDP 400 W (SXM4; the PCIe card is 300 W)"),
    _preset(name="h100-80gb", blas_workspace_bytes=WS_HOPPER, memory_bytes=81_559 * 2**20, peak_bf16_flops_per_s=989e12, peak_fp8_flops_per_s=1979e12,
            hbm_bytes_per_s=3.35e12, power_watts=700,
            **CURVES["h100"], intra_node=NVLINK4, inter_node=IB_NDR,
            source="NVIDIA H100 SXM5 datasheet: 80GB HBM3 (nvidia-smi reports 81,559 MiB, NVIDIA/nccl#1264) at 3.35 TB/s, 989 TFLOP/s bf16 dense, 1979 fp8, "
                   "NVLink 900 GB/s"
                   "; max TDP up to 700 W (configurable)"),
    _preset(name="h200-141gb", blas_workspace_bytes=WS_HOPPER, memory_bytes=143_771 * 2**20, peak_bf16_flops_per_s=989e12, peak_fp8_flops_per_s=1979e12,
            hbm_bytes_per_s=4.8e12, power_watts=700,
            **CURVES["h100"], intra_node=NVLINK4, inter_node=IB_NDR,
            source="NVIDIA H200 SXM datasheet: 141 GB HBM3e (nvidia-smi reports 143,771 MiB, 140.4 GiB) at 4.8 TB/s, H100's compute, NVLink 900 GB/s"
                   "; max TDP up to 700 W (configurable; H200 NVL 600 W)"),
    _preset(name="b200", blas_workspace_bytes=WS_HOPPER, memory_bytes=180 * GB, peak_bf16_flops_per_s=2250e12, peak_fp8_flops_per_s=4500e12,
            peak_fp4_flops_per_s=9000e12, hbm_bytes_per_s=8e12, power_watts=1000,
            **CURVES["b200"], intra_node=NVLINK5, inter_node=IB_NDR,
            source="NVIDIA DGX B200 datasheet: 1,440 GB for 8 GPUs = 180 GB (decimal) each, 64 TB/s HBM3e for 8 = "
                   "8 TB/s each, 2.25 PFLOP/s bf16 dense, 4.5 fp8, NVLink 5 1.8 TB/s"
                   "; NVIDIA HGX B200 specifications: max TDP up to 1,000 W per GPU; fp4 9 PFLOP/s dense: HGX B200's "
                   "144 PFLOPS fp4 with sparsity for 8 GPUs / 8 / 2 (pytorch/ao torchao/testing/training/"
                   "roofline_utils.py: 9.0e15)"),
    _preset(name="mi300x", blas_workspace_bytes=WS_GFX94, memory_bytes=192 * GB, peak_bf16_flops_per_s=1307.4e12, peak_fp8_flops_per_s=2614.9e12,
            hbm_bytes_per_s=5.3e12, power_watts=750,
            **CURVES["mi300x"], intra_node=XGMI, inter_node=IB_NDR,
            source="AMD Instinct MI300X datasheet: 192 GB (decimal) HBM3 at 5.3 TB/s, 1307.4 TFLOP/s bf16 dense, "
                   "2614.9 fp8, Infinity Fabric 896 GB/s aggregate"
                   "; 750 W peak total board power (OAM)"),
    # Parts that published large runs used (issue 13). Figures no vendor publishes are said so in the source
    # and listed in docs/hardware.md.
    _preset(name="h800", blas_workspace_bytes=WS_HOPPER, memory_bytes=81_559 * 2**20, peak_bf16_flops_per_s=989e12, peak_fp8_flops_per_s=1979e12,
            hbm_bytes_per_s=3.35e12, power_watts=700,
            **CURVES["h100"], intra_node=NVLINK4_400, inter_node=IB_NDR,
            source="H800 SXM5: no public NVIDIA datasheet; H100 SXM5's die, so its datasheet figures: 80GB HBM3 at "
                   "3.35 TB/s (the same board and five HBM3 stacks as H100 SXM5, so what nvidia-smi reports for H100 "
                   "SXM5: 81,559 MiB, NVIDIA/nccl#1264), 989 TFLOP/s bf16 dense (also volcengine/verl verl/utils/flops_counter.py), 1979 fp8. "
                   "NVLink cut to 400 GB/s bidirectional = 200 GB/s per direction: not officially published (issue "
                   "13's figure; a user in NVIDIA/nccl#1374 reads 200 GB/s peak; deepseek-ai/DeepEP docs/legacy.md: "
                   "~160 GB/s achievable). Inter-node one 400 Gb/s ConnectX-7 per GPU (DeepEP docs/legacy.md, the "
                   "DeepSeek-V3 cluster: ~50 GB/s)"
                   ". TDP 700 W, the H100 SXM5 datasheet's (the same board; not published for H800)"),
    _preset(name="a800", memory_bytes=80 * GiB, peak_bf16_flops_per_s=312e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=2039e9, power_watts=400,
            **CURVES["a100"], intra_node=NVLINK3_400, inter_node=IB_HDR,
            source="A800 SXM4 80GB: no public NVIDIA datasheet; NVIDIA said (Reuters, 2022-11-07) it is A100 with "
                   "NVLink cut from 600 to 400 GB/s, so A100 80GB SXM datasheet figures: 80GB HBM2e at 2,039 GB/s, 312 "
                   "TFLOP/s bf16 dense, no fp8. NVLink 400 GB/s bidirectional = 200 GB/s per direction (not in a "
                   "datasheet). Inter-node one 200 Gb/s HDR NIC per GPU: 24 GB/s measured in NVIDIA/nccl#412"
                   ". TDP 400 W, the A100 SXM datasheet's (not published for A800)"),
    _preset(name="h100-pcie", blas_workspace_bytes=WS_HOPPER, memory_bytes=80 * GiB, peak_bf16_flops_per_s=756e12, peak_fp8_flops_per_s=1513e12,
            hbm_bytes_per_s=2.0e12, power_watts=350,
            **CURVES["h100"], intra_node=PCIE5, inter_node=IB_NDR,
            source="NVIDIA H100 datasheet, PCIe column: 80GB HBM2e at 2 TB/s, 1,513 TFLOP/s bf16 and 3,026 fp8 with "
                   "sparsity = 756 and 1513 dense (torchtitan get_peak_flops: 756e12), PCIe Gen5 128 GB/s both "
                   "directions = 63 GB/s per direction after encoding. 8 cards per node talk over PCIe; the NVLink "
                   "bridge (600 GB/s) joins pairs only and is not modelled. Inter-node 400 Gb/s NDR per GPU assumed"
                   ". Max TDP 350 W (H100 PCIe product brief PB-11133-001)"),
    _preset(name="h20", blas_workspace_bytes=WS_HOPPER, memory_bytes=96 * GiB, peak_bf16_flops_per_s=148e12, peak_fp8_flops_per_s=296e12,
            hbm_bytes_per_s=4.0e12, power_watts=400,
            **CURVES["h100"], intra_node=NVLINK4, inter_node=IB_NDR,
            source="H20: NVIDIA publishes no datasheet; the widely reported spec sheet's figures: 96GB HBM3 at 4.0 "
                   "TB/s, 148 TFLOP/s bf16 dense (also volcengine/verl verl/utils/flops_counter.py; torch.mm bf16 "
                   "measures 142.25, zzc0721/torch-performance-test-data#77), fp8 296 = 2 x bf16 as on every Hopper, "
                   "full NVLink 4 900 GB/s. Memory 96 GiB: six 16 GiB HBM3 stacks, as H100's 80GB is five; "
                   "nvidia-smi shows 97,871 MiB. Inter-node one 400 Gb/s ConnectX-7 per GPU assumed, as H800 "
                   "clusters"
                   ". TDP 400 W (the reported spec sheet)"),
    _preset(name="gh200", blas_workspace_bytes=WS_HOPPER, memory_bytes=96 * GiB, peak_bf16_flops_per_s=989e12, peak_fp8_flops_per_s=1979e12,
            hbm_bytes_per_s=4.0e12, power_watts=1000,
            **CURVES["gh200"], intra_node=NVLINK4, inter_node=IB_NDR200, gpus_per_node=4,
            source="NVIDIA GH200 Grace Hopper Superchip (96GB HBM3 version): 96GB HBM3 at 4 TB/s, H100's 989 TFLOP/s "
                   "bf16 dense and 1979 fp8. Memory 96 GiB: six 16 GiB HBM3 stacks, nvidia-smi shows 97,871 MiB. Node "
                   "as JSC's JUPITER Booster (apps.fz-juelich.de/jsc/hps/jupiter/configuration.html; CSCS Alps, "
                   "eth-cscs/cscs-docs docs/alps/hardware.md, also has 4 per node): 4 superchips, NVLink 4 at 150 GB/s "
                   "per direction to each of 3 peers = 450 GB/s per GPU, one NDR200 (200 Gb/s = 25 GB/s) NIC each. "
                   "A single-superchip server is --gpus-per-node 1; NVLink between nodes (NVL32) is not modelled"
                   ". Power 1000 W: the superchip module's maximum (configurable from 450 to 1000 W), Grace CPU and "
                   "LPDDR5X included, so the energy is an upper bound"),
    _preset(name="gb200", blas_workspace_bytes=WS_HOPPER, memory_bytes=186 * GB, peak_bf16_flops_per_s=2500e12, peak_fp8_flops_per_s=5000e12,
            peak_fp4_flops_per_s=10000e12, hbm_bytes_per_s=8e12, power_watts=1200,
            **CURVES["gb200"], intra_node=NVLINK5, inter_node=IB_NDR, gpus_per_node=72,
            source="NVIDIA GB200 NVL72 specifications, per GPU: 186 GB (decimal) HBM3e at 8 TB/s, 2.5 PFLOP/s bf16 "
                   "dense, 5 fp8, 10 fp4 (1,440 PFLOPS fp4 with sparsity for 72 GPUs / 72 / 2; tabulated in "
                   "stas00/ml-engineering compute/accelerator/README.md). NVLink 5 1.8 TB/s "
                   "= 900 GB/s per direction to any of the rack's 72 GPUs, so the NVLink domain is modelled as one "
                   "72-GPU node. Inter-node one 400 Gb/s ConnectX-7 per GPU (DGX GB200 user guide, networking)"
                   ". Power 1200 W per GPU: NVIDIA quotes GB200's per-GPU peaks at 1,200 W per Blackwell GPU (HGX "
                   "B200: 1,000 W); the NVL72 specifications state no per-GPU power, and the Grace CPUs are not "
                   "counted"),
    # Blackwell Ultra (issue 29): bf16 and fp8 as B200/GB200, 288 GB, faster fp4, ConnectX-8 at 800 Gb/s per GPU.
    _preset(name="b300", blas_workspace_bytes=WS_HOPPER, memory_bytes=288 * GB, peak_bf16_flops_per_s=2250e12,
            peak_fp8_flops_per_s=4500e12, peak_fp4_flops_per_s=13125e12, hbm_bytes_per_s=8e12, power_watts=1000,
            **CURVES["b300"], intra_node=NVLINK5, inter_node=CX8_800G, gpus_per_node=8,
            source="NVIDIA DGX B300 datasheet: 2.3 TB HBM3e for 8 GPUs = 288 GB (decimal) each (NVIDIA's Blackwell "
                   "Ultra figure; its MIG profile 7g.269gb, 269 GiB, aws/sagemaker-hyperpod-cli#403, agrees), 8 TB/s "
                   "each (tabulated in stas00/ml-engineering compute/accelerator/README.md). HGX B300 specifications, "
                   "8 GPUs, with sparsity: 36 PFLOPS bf16, 72 fp8, so 2.25 PFLOP/s bf16 dense and 4.5 fp8 per GPU "
                   "(pytorch/torchtitan get_peak_flops: 2.25e15); fp4 144 PFLOPS with sparsity, 105 dense = 13.125 "
                   "per GPU (the HGX B300 table as glennklockwood.com/garden/processors/B300 copies it; pytorch/ao "
                   "roofline_utils.py uses 14e15, stas00/ml-engineering 12,600: published readings differ). NVLink 5 "
                   "1.8 TB/s = 900 GB/s per direction, 8 per HGX/DGX node. Inter-node one 800 Gb/s ConnectX-8 per "
                   "GPU (DGX B300 datasheet: 8 single-port ConnectX-8, up to 800 Gb/s each)"
                   ". TDP 1000 W: the DGX B300 power-capping guide's maximum TGP (tabulated in stas00/ml-engineering; "
                   "HGX B300 boards may allow more)"),
    _preset(name="gb300", blas_workspace_bytes=WS_HOPPER, memory_bytes=288 * GB, peak_bf16_flops_per_s=2500e12,
            peak_fp8_flops_per_s=5000e12, peak_fp4_flops_per_s=15000e12, hbm_bytes_per_s=8e12, power_watts=1400,
            **CURVES["gb200"], intra_node=NVLINK5, inter_node=CX8_800G, gpus_per_node=72,
            source="NVIDIA GB300 NVL72 specifications, per GPU (72 GPUs, rack figures with sparsity halved): 288 GB "
                   "(decimal) HBM3e (the rack's 20.7 TB), 8 TB/s (576 TB/s / 72), 2.5 PFLOP/s bf16 dense (360 "
                   "PFLOPS with sparsity), 5 fp8 (720), 15 fp4 dense (1,080 PFLOPS dense, 1,440 with sparsity; "
                   "tabulated in stas00/ml-engineering compute/accelerator/README.md; pytorch/torchtitan "
                   "get_peak_flops: 2.5e15). NVLink 5 1.8 TB/s = 900 GB/s per direction to any of the rack's 72 GPUs, "
                   "so the NVLink domain is modelled as one 72-GPU node. Inter-node one 800 Gb/s ConnectX-8 per GPU "
                   "(the NVL72's 72 ConnectX-8 SuperNICs). GEMM curve: gb200's (no GB300 GEMM measurement)"
                   ". Power 1400 W per GPU: NVIDIA Mission Control's power-management FAQ budgets GB300 at 1.4 kW "
                   "per GPU; the Grace CPUs are not counted"),
    # GPUs people fine-tune on (issue 25): GDDR memory (hbm_bytes_per_s is the memory bandwidth), PCIe inside a node.
    # GeForce cards run bf16 tensor ops with fp32 accumulate, what PyTorch uses, at half their fp16-accumulate rate.
    _preset(name="rtx-4090", memory_bytes=24_564 * 2**20, peak_bf16_flops_per_s=165.2e12, peak_fp8_flops_per_s=330.3e12,
            hbm_bytes_per_s=1008e9, power_watts=450,
            **CURVES["rtx-4090"], intra_node=PCIE4, inter_node=ETH_100G_4, gpus_per_node=4,
            source="NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: 24 GB GDDR6X (nvidia-smi reports 24,564 "
                   "MiB, RLinf/RLinf#255) at 1,008 GB/s, 165.2 TFLOP/s bf16 dense with fp32 accumulate (330.3 with "
                   "fp16 accumulate, which PyTorch's bf16 GEMMs do not use), fp8 330.3 dense with fp32 accumulate, no "
                   "fp4. No NVLink: cards talk over PCIe 4.0 x16, 31.5 GB/s per direction (GeForce drivers disable "
                   "peer-to-peer, so NCCL stages through host memory and reaches less; give --intra-node-bandwidth "
                   "from nccl-tests). 4 per node assumed (a 4-card workstation), one 100 GbE port shared = 3.125 GB/s "
                   "per GPU, assumed. Total graphics power 450 W"),
    _preset(name="rtx-3090", memory_bytes=24_576 * 2**20, peak_bf16_flops_per_s=71e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=936e9, power_watts=350,
            **CURVES["rtx-3090"], intra_node=PCIE4, inter_node=ETH_100G_4, gpus_per_node=4,
            source="NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 3090: 24 GB GDDR6X (nvidia-smi "
                   "reports 24,576 MiB, noonghunna/club-3090#390) at 936 GB/s, 71 TFLOP/s bf16 dense with fp32 "
                   "accumulate (142 with fp16 accumulate; PyTorch's bf16 GEMMs accumulate in fp32), no fp8. Cards "
                   "talk over PCIe 4.0 x16, 31.5 GB/s per direction; the NVLink bridge (112.5 GB/s both directions) "
                   "joins pairs only and is not modelled, as h100-pcie. 4 per node assumed (a 4-card workstation), "
                   "one 100 GbE port shared = 3.125 GB/s per GPU, assumed. Total graphics power 350 W"),
    _preset(name="rtx-a6000", memory_bytes=49_140 * 2**20, peak_bf16_flops_per_s=154.85e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=768e9, power_watts=300,
            **CURVES["rtx-a6000"], intra_node=PCIE4, inter_node=ETH_100G_4, gpus_per_node=4,
            source="NVIDIA RTX A6000 datasheet: 48 GB GDDR6 (nvidia-smi reports 49,140 MiB with ECC off, "
                   "noonghunna/club-3090#1047) at 768 GB/s, tensor performance 309.7 TFLOP/s with sparsity = 154.85 "
                   "bf16 dense with fp32 accumulate at full rate on this professional card (pytorch/torchtitan "
                   "get_peak_flops: 154.85e12), no fp8. Cards talk over PCIe 4.0 x16, 31.5 GB/s per direction; the "
                   "NVLink bridge (112.5 GB/s both directions) joins pairs only and is not modelled, as h100-pcie. 4 "
                   "per node assumed (a 4-card workstation), one 100 GbE port shared = 3.125 GB/s per GPU, assumed. "
                   "Max power consumption 300 W"),
    _preset(name="l40s", memory_bytes=46_068 * 2**20, peak_bf16_flops_per_s=362.05e12, peak_fp8_flops_per_s=733e12,
            hbm_bytes_per_s=864e9, power_watts=350,
            **CURVES["l40s"], intra_node=PCIE4, inter_node=ETH_400G_8, gpus_per_node=8,
            source="NVIDIA L40S datasheet: 48 GB GDDR6 (nvidia-smi reports 46,068 MiB with ECC on, "
                   "modal-labs/modal-client#2797) at 864 GB/s, 733 TFLOP/s bf16 with sparsity = 362.05 dense "
                   "(volcengine/verl verl/utils/flops_counter.py: 362.05e12), fp8 1,466 with sparsity = 733 dense, "
                   "no fp4. No NVLink: PCIe Gen4 x16, 64 GB/s both directions = 31.5 per direction after encoding. 8 "
                   "per node as AWS g6e.48xlarge, its 400 Gb/s EFA shared = 6.25 GB/s per GPU, assumed. Max power "
                   "consumption 350 W"),
    _preset(name="l4", memory_bytes=23_034 * 2**20, peak_bf16_flops_per_s=121e12, peak_fp8_flops_per_s=242.5e12,
            hbm_bytes_per_s=300e9, power_watts=72,
            **CURVES["l4"], intra_node=PCIE4, inter_node=ETH_100G_8, gpus_per_node=8,
            source="NVIDIA L4 datasheet: 24 GB GDDR6 (nvidia-smi reports 23,034 MiB with ECC on, "
                   "modal-labs/modal-client#2797) at 300 GB/s, 242 TFLOP/s bf16 with sparsity = 121 dense, fp8 485 "
                   "with sparsity = 242.5 dense, no fp4. No NVLink: PCIe Gen4 x16, 64 GB/s both directions = 31.5 "
                   "per direction after encoding. 8 per node as AWS g6.48xlarge, its 100 Gb/s EFA shared = 1.5625 "
                   "GB/s per GPU, assumed. Max power 72 W"),
    _preset(name="a10g", memory_bytes=23_028 * 2**20, peak_bf16_flops_per_s=70e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=600e9, power_watts=300,
            **CURVES["a10g"], intra_node=PCIE4, inter_node=ETH_100G_8, gpus_per_node=8,
            source="A10G (AWS's variant of A10): NVIDIA publishes no datasheet. 24 GB GDDR6 (nvidia-smi reports "
                   "23,028 MiB, NVIDIA/DCGM#232) at 600 GB/s, A10's; 70 TFLOP/s bf16 dense, the figure reported for "
                   "it (baseten.co's A10 vs A10G comparison; A10's datasheet gives 125), which torch.mm bf16 "
                   "reaches at 69.47 (zzc0721/torch-performance-test-data#126), so not A10's 125; no fp8. No NVLink: "
                   "PCIe Gen4 x16, 31.5 GB/s per direction. 8 per node as AWS g5.48xlarge, its 100 Gb/s EFA shared "
                   "= 1.5625 GB/s per GPU, assumed. Power 300 W: the limit nvidia-smi reports (NVIDIA/DCGM#232; "
                   "A10: 150 W)"),
    _preset(name="mi325x", blas_workspace_bytes=WS_GFX94, memory_bytes=256 * GB, peak_bf16_flops_per_s=1307.4e12, peak_fp8_flops_per_s=2614.9e12,
            hbm_bytes_per_s=6.0e12, power_watts=1000,
            **CURVES["mi325x"], intra_node=XGMI, inter_node=IB_NDR,
            source="AMD Instinct MI325X specifications: 256 GB (decimal) HBM3e at 6 TB/s, MI300X's compute (1307.4 "
                   "TFLOP/s bf16 dense, 2614.9 fp8), Infinity Fabric 7 x 128 GB/s = 896 GB/s aggregate, 8 per "
                   "platform. Inter-node 400 Gb/s per GPU assumed, as mi300x"
                   ". 1000 W peak total board power"),
    _preset(name="mi355x", blas_workspace_bytes=WS_GFX94, memory_bytes=288 * GB, peak_bf16_flops_per_s=2500e12, peak_fp8_flops_per_s=5000e12,
            peak_fp4_flops_per_s=10100e12, hbm_bytes_per_s=8e12, power_watts=1400,
            **CURVES["mi355x"], intra_node=XGMI_MI355X, inter_node=IB_NDR,
            source="AMD Instinct MI355X specifications: 288 GB (decimal) HBM3e at 8 TB/s, 2.5 PFLOP/s bf16 dense "
                   "(2400 MHz x 1024 matrix cores x 1024 FLOP = 2516.6; AMD rounds to 2.5), 5 fp8 dense (10.1 with "
                   "sparsity), MXFP4 10.1 PFLOP/s (no sparsity qualifier: dense; stas00/ml-engineering "
                   "compute/accelerator/README.md reads it so), Infinity Fabric 7 links x 153 GB/s, read as both directions = 535.5 GB/s per "
                   "direction (stas00/ml-engineering network/README.md), 8 per platform. Inter-node 400 Gb/s per GPU "
                   "assumed, as mi300x"
                   ". 1400 W total board power (MI350X: 1000 W)"),
)
# The link to host memory (GpuSpec.host_bytes_per_s, per GPU and direction), what offload moves over. PCIe x16
# raw rates after 128b/130b encoding: Gen4 16 GT/s x 16 = 31.5 GB/s, Gen5 32 GT/s x 16 = 63 GB/s per direction;
# pinned copies reach about 80% of that (NVIDIA's nvbandwidth example: host_to_device 55.6 GB/s on Gen5).
_GEN4 = (25e9, "host link PCIe Gen4 x16: 31.5 GB/s per direction raw, 25 GB/s achievable")
_GEN5 = (50e9, "host link PCIe Gen5 x16: 63 GB/s per direction raw, 50 GB/s achievable")
HOST_LINKS = {
    "gpu-192gib": (50e9, "host link assumed b200's: PCIe Gen5 x16, 50 GB/s achievable"),
    "a100-40gb": _GEN4, "a100-80gb": _GEN4, "a800": _GEN4,
    "rtx-4090": _GEN4, "rtx-3090": _GEN4, "rtx-a6000": _GEN4, "l40s": _GEN4, "l4": _GEN4, "a10g": _GEN4,
    "h100-80gb": _GEN5, "h200-141gb": _GEN5, "h800": _GEN5, "h20": _GEN5, "h100-pcie": _GEN5, "b200": _GEN5,
    "mi300x": _GEN5, "mi325x": _GEN5, "mi355x": _GEN5,
    "gh200": (450e9, "host link NVLink-C2C to the Grace CPU: 900 GB/s both directions = 450 GB/s each way (GH200 "
                     "datasheet)"),
    "gb200": (225e9, "host link NVLink-C2C: 900 GB/s both directions between the Grace CPU and its two Blackwell "
                     "GPUs, read as 225 GB/s per GPU each way (an even split; no per-GPU figure is published)"),
    "gb300": (225e9, "host link NVLink-C2C: 900 GB/s both directions between each Grace CPU and its two Blackwell "
                     "Ultra GPUs, read as 225 GB/s per GPU each way, as gb200 (no per-GPU figure is published)"),
    "b300": (50e9, "host link PCIe Gen5 x16, 50 GB/s achievable, assumed: B300 and its ConnectX-8 speak PCIe Gen6, "
                   "but DGX B300's host CPUs (Xeon 6776P) are Gen5, so host copies run at Gen5's 63 GB/s per "
                   "direction raw"),
}
# The die's generation, which picks its end-to-end clock constant (fitplan.timing.calibration): the exercise's
# part is taken as b200's die, the export parts (A800, H800, H20) as their parents'
ARCHITECTURES = {
    "gpu-192gib": "blackwell", "a100-40gb": "ampere", "a100-80gb": "ampere", "a800": "ampere",
    "h100-80gb": "hopper", "h200-141gb": "hopper", "h800": "hopper", "h20": "hopper", "h100-pcie": "hopper",
    "gh200": "hopper", "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell-ultra", "gb300": "blackwell-ultra",
    "mi300x": "cdna3", "mi325x": "cdna3", "mi355x": "cdna4",
    "rtx-3090": "ampere", "rtx-a6000": "ampere", "a10g": "ampere", "rtx-4090": "ada", "l40s": "ada", "l4": "ada",
}


GPUS = Registry(_GPUS)   # name -> the preset, built when first asked for
