"""GPU presets. Memory from the vendor's figure, in the unit the vendor uses (stated per
preset); peak rates are dense (no 2:4 sparsity). Link bandwidths are per GPU, one
direction; latencies are typical NCCL per-step figures, fitplan's estimate.

A step sustains efficiency * h / (h + efficiency_h0) of peak (fitplan.timing.compute.
gemm_efficiency). EFF and EFF_H0 were fitted by bench/calibrate.py to the 8 iteration times
of Korthikanti et al. Table 5 (A100 80GB, tp = 8): 0.83 and 4500, rms error 1.3% in time,
MFU within 1.2 points on every row. They are carried over unmeasured to the other parts:
a visible assumption (newer GPUs have a different compute-to-bandwidth balance).
"""
from fitplan.specs.cluster import GpuSpec, LinkSpec
from fitplan.units import GB, GiB

EFF, EFF_H0 = 0.83, 4500.0   # bench/calibrate.py on Korthikanti Table 5

NVLINK3 = LinkSpec(name="NVLink 3", bytes_per_s=300e9, latency_s=3e-6)     # 600 GB/s bidirectional
NVLINK4 = LinkSpec(name="NVLink 4", bytes_per_s=450e9, latency_s=3e-6)     # 900 GB/s bidirectional
NVLINK5 = LinkSpec(name="NVLink 5", bytes_per_s=900e9, latency_s=3e-6)     # 1.8 TB/s bidirectional
XGMI = LinkSpec(name="Infinity Fabric", bytes_per_s=448e9, latency_s=3e-6)  # 896 GB/s aggregate bidirectional
IB_HDR = LinkSpec(name="InfiniBand HDR 200 Gb/s", bytes_per_s=25e9, latency_s=8e-6)
IB_NDR = LinkSpec(name="InfiniBand NDR 400 Gb/s", bytes_per_s=50e9, latency_s=8e-6)

_GPUS = (
    GpuSpec(name="gpu-192gib", memory_bytes=192 * GiB, peak_bf16_flops_per_s=2250e12, peak_fp8_flops_per_s=4500e12,
            hbm_bytes_per_s=8e12,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=NVLINK5, inter_node=IB_NDR, gpus_per_node=8, default_reserve_bytes=10 * GiB,
            source="the exercise's part: 192 GiB, 10 GiB reserved, 8 per node fully connected; rates (HBM 8 TB/s "
                   "included) and links assumed equal to b200's"),
    GpuSpec(name="a100-40gb", memory_bytes=40 * GiB, peak_bf16_flops_per_s=312e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=1555e9,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=NVLINK3, inter_node=IB_HDR, default_reserve_bytes=3 * GiB,
            source="NVIDIA A100 datasheet: 40GB HBM2 (40,960 MiB) at 1,555 GB/s, 312 TFLOP/s bf16 dense, "
                   "NVLink 600 GB/s"),
    GpuSpec(name="a100-80gb", memory_bytes=80 * GiB, peak_bf16_flops_per_s=312e12, peak_fp8_flops_per_s=None,
            hbm_bytes_per_s=2039e9,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=NVLINK3, inter_node=IB_HDR, default_reserve_bytes=5 * GiB,
            source="NVIDIA A100 datasheet: 80GB HBM2e (81,920 MiB) at 2,039 GB/s (SXM), 312 TFLOP/s bf16 dense, "
                   "NVLink 600 GB/s"),
    GpuSpec(name="h100-80gb", memory_bytes=80 * GiB, peak_bf16_flops_per_s=989e12, peak_fp8_flops_per_s=1979e12,
            hbm_bytes_per_s=3.35e12,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=NVLINK4, inter_node=IB_NDR, default_reserve_bytes=5 * GiB,
            source="NVIDIA H100 SXM5 datasheet: 80GB HBM3 at 3.35 TB/s, 989 TFLOP/s bf16 dense, 1979 fp8, "
                   "NVLink 900 GB/s"),
    GpuSpec(name="h200-141gb", memory_bytes=141 * GB, peak_bf16_flops_per_s=989e12, peak_fp8_flops_per_s=1979e12,
            hbm_bytes_per_s=4.8e12,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=NVLINK4, inter_node=IB_NDR, default_reserve_bytes=10 * GiB,
            source="NVIDIA H200 SXM datasheet: 141 GB (decimal) HBM3e at 4.8 TB/s, H100's compute, NVLink 900 GB/s"),
    GpuSpec(name="b200", memory_bytes=180 * GB, peak_bf16_flops_per_s=2250e12, peak_fp8_flops_per_s=4500e12,
            hbm_bytes_per_s=8e12,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=NVLINK5, inter_node=IB_NDR, default_reserve_bytes=10 * GiB,
            source="NVIDIA DGX B200 datasheet: 1,440 GB for 8 GPUs = 180 GB (decimal) each, 64 TB/s HBM3e for 8 = "
                   "8 TB/s each, 2.25 PFLOP/s bf16 dense, 4.5 fp8, NVLink 5 1.8 TB/s"),
    GpuSpec(name="mi300x", memory_bytes=192 * GB, peak_bf16_flops_per_s=1307.4e12, peak_fp8_flops_per_s=2614.9e12,
            hbm_bytes_per_s=5.3e12,
            efficiency=EFF, efficiency_h0=EFF_H0, intra_node=XGMI, inter_node=IB_NDR, default_reserve_bytes=10 * GiB,
            source="AMD Instinct MI300X datasheet: 192 GB (decimal) HBM3 at 5.3 TB/s, 1307.4 TFLOP/s bf16 dense, "
                   "2614.9 fp8, Infinity Fabric 896 GB/s aggregate"),
)
GPUS = {g.name: g for g in _GPUS}
