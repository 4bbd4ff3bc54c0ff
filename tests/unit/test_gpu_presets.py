"""The GPU presets issue 13 asks for: each figure equals the one its source text states (the
source and the arithmetic beside each assert), every preset says where its numbers come from,
and every GPU preset plans and round-trips through `presets show NAME --toml`."""
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.files.load import dump_toml, parse_document, specs_from_document
from fitplan.presets import GPUS
from fitplan.units import GiB

# The names issue 13 contracts, and issue 29's Blackwell Ultra parts.
NEW = ("h800", "a800", "h100-pcie", "h20", "gh200", "gb200", "mi325x", "mi355x")
BLACKWELL_ULTRA = ("b300", "gb300")
FINE_TUNING = ("rtx-4090", "rtx-3090", "rtx-a6000", "l40s", "a10g", "l4")   # issue 25 item 7


def test_the_contracted_names_are_presets():
    assert set(NEW) <= set(GPUS) and set(BLACKWELL_ULTRA) <= set(GPUS) and set(FINE_TUNING) <= set(GPUS)


@pytest.mark.parametrize("name", NEW + BLACKWELL_ULTRA + FINE_TUNING)
def test_presets_list_shows_each_new_name(name):
    out = io.StringIO()
    assert main(["presets", "list"], out=out, err=io.StringIO()) == 0
    assert any(line.split()[:1] == [name] for line in out.getvalue().splitlines()), name


def test_h800():
    g = GPUS["h800"]
    assert g.memory_bytes == 81_559 * 2**20            # H100 SXM5's nvidia-smi total (NVIDIA/nccl#1264): the same
    assert g.memory_bytes == GPUS["h100-80gb"].memory_bytes  # board and HBM3 stacks (issue 25)
    assert g.peak_bf16_flops_per_s == 989e12           # H100 SXM5: 1,979 with sparsity / 2; verl: 989e12
    assert g.peak_fp8_flops_per_s == 1979e12           # H100 SXM5: 3,958 with sparsity / 2
    assert g.hbm_bytes_per_s == 3.35e12                # H100 SXM5: 3.35 TB/s
    assert g.intra_node.bytes_per_s == 200e9           # NVLink 400 GB/s both directions / 2 (not published)
    assert g.inter_node.bytes_per_s == 50e9            # ConnectX-7 400 Gb/s / 8 bits (DeepEP docs/legacy.md)
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0


def test_a800():
    g = GPUS["a800"]
    assert g.memory_bytes == 80 * GiB                  # A100 80GB SXM datasheet: 80GB HBM2e (81,920 MiB)
    assert g.peak_bf16_flops_per_s == 312e12           # A100: 624 with sparsity / 2
    assert g.peak_fp8_flops_per_s is None              # Ampere: no fp8 tensor cores
    assert g.hbm_bytes_per_s == 2039e9                 # A100 80GB SXM: 2,039 GB/s
    assert g.intra_node.bytes_per_s == 200e9           # NVLink 400 GB/s both directions / 2 (NVIDIA via Reuters)
    assert g.inter_node.bytes_per_s == 25e9            # HDR 200 Gb/s / 8 bits (24 GB/s measured, nccl#412)
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0


def test_h100_pcie():
    g = GPUS["h100-pcie"]
    assert g.memory_bytes == 80 * GiB                  # H100 datasheet, PCIe: 80GB HBM2e
    assert g.peak_bf16_flops_per_s == 756e12           # H100 PCIe: 1,513 with sparsity / 2, rounded down
    assert g.peak_fp8_flops_per_s == 1513e12           # H100 PCIe: 3,026 with sparsity / 2
    assert g.hbm_bytes_per_s == 2.0e12                 # H100 PCIe: 2 TB/s
    assert g.intra_node.bytes_per_s == 63e9            # PCIe Gen5 x16: 128 GB/s both directions, 63 each after encoding
    assert g.inter_node.bytes_per_s == 50e9            # 400 Gb/s NDR per GPU, assumed
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0


def test_h20():
    g = GPUS["h20"]
    assert g.memory_bytes == 96 * GiB                  # reported 96GB HBM3: six 16 GiB stacks; nvidia-smi 97,871 MiB
    assert g.peak_bf16_flops_per_s == 148e12           # reported spec sheet; verl flops_counter.py: 148e12
    assert g.peak_fp8_flops_per_s == 296e12            # 2 x 148, Hopper's fp8:bf16 ratio (not published)
    assert g.hbm_bytes_per_s == 4.0e12                 # reported spec sheet: 4.0 TB/s
    assert g.intra_node.bytes_per_s == 450e9           # full NVLink 4: 900 GB/s both directions / 2
    assert g.inter_node.bytes_per_s == 50e9            # ConnectX-7 400 Gb/s / 8 bits
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0


def test_gh200():
    g = GPUS["gh200"]
    assert g.memory_bytes == 96 * GiB                  # GH200 96GB HBM3: six 16 GiB stacks; nvidia-smi 97,871 MiB
    assert g.peak_bf16_flops_per_s == 989e12           # GH200: H100's 989 dense
    assert g.peak_fp8_flops_per_s == 1979e12           # GH200: H100's 1979 dense
    assert g.hbm_bytes_per_s == 4.0e12                 # GH200 96GB HBM3: 4 TB/s (JUPITER: "96 GB HBM3 at 4 TB/s")
    assert g.intra_node.bytes_per_s == 3 * 150e9       # JUPITER node: NVLink 4, 150 GB/s per direction to 3 peers
    assert g.inter_node.bytes_per_s == 25e9            # JUPITER node: one NDR200 NIC per GPU, 200 Gb/s / 8 bits
    assert g.gpus_per_node == 4 and g.default_reserve_bytes == 0   # 4 superchips per node


def test_gb200():
    g = GPUS["gb200"]
    assert g.memory_bytes == 186 * 10**9              # GB200 NVL72, per GPU: 186 GB (decimal) HBM3e
    assert g.peak_bf16_flops_per_s == 2500e12          # GB200 NVL72, per GPU: 2.5 PFLOP/s dense
    assert g.peak_fp8_flops_per_s == 5000e12           # GB200 NVL72, per GPU: 5 PFLOP/s dense
    assert g.hbm_bytes_per_s == 8e12                   # GB200 NVL72, per GPU: 8 TB/s
    assert g.intra_node.bytes_per_s == 900e9           # NVLink 5: 1.8 TB/s both directions / 2
    assert g.inter_node.bytes_per_s == 50e9            # DGX GB200: one 400 Gb/s ConnectX-7 per GPU
    assert g.gpus_per_node == 72                       # the NVL72 NVLink domain as one node
    assert g.default_reserve_bytes == 0


def test_b300():
    g = GPUS["b300"]
    assert g.memory_bytes == 288 * 10**9              # DGX B300 datasheet: 2.3 TB for 8 GPUs = 288 GB (decimal) each
    assert g.peak_bf16_flops_per_s == 36e15 / 8 / 2    # HGX B300: 36 PFLOPS bf16 with sparsity for 8 GPUs = 2,250
    assert g.peak_fp8_flops_per_s == 72e15 / 8 / 2     # HGX B300: 72 PFLOPS fp8 with sparsity for 8 GPUs = 4,500
    assert g.peak_fp4_flops_per_s == 105e15 / 8        # HGX B300: 105 PFLOPS fp4 dense for 8 GPUs = 13,125
    assert g.hbm_bytes_per_s == 8e12                   # DGX B300 datasheet: 8 TB/s per GPU
    assert g.intra_node.bytes_per_s == 900e9           # NVLink 5: 1.8 TB/s both directions / 2
    assert g.inter_node.bytes_per_s == 800e9 / 8       # DGX B300: one 800 Gb/s ConnectX-8 per GPU = 100 GB/s
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0   # 8 per HGX/DGX node
    assert g.blas_workspace_bytes == 32 * 2**20        # PyTorch's Hopper/Blackwell cuBLAS workspace
    assert {k: getattr(g, f) for k, f in (("eff", "efficiency"), ("fp8", "efficiency_fp8"))} == \
        {"eff": 0.692, "fp8": 0.697}                   # bench/calibrate.py: b200's curve x B300's MAMF rows


def test_gb300():
    g = GPUS["gb300"]
    assert g.memory_bytes == 288 * 10**9              # GB300 NVL72, per GPU: 288 GB (decimal) HBM3e
    assert g.peak_bf16_flops_per_s == 360e15 / 72 / 2  # GB300 NVL72: 360 PFLOPS bf16 with sparsity = 2,500 per GPU
    assert g.peak_fp8_flops_per_s == 720e15 / 72 / 2   # GB300 NVL72: 720 PFLOPS fp8 with sparsity = 5,000 per GPU
    assert g.peak_fp4_flops_per_s == 1080e15 / 72      # GB300 NVL72: 1,080 PFLOPS fp4 dense = 15,000 per GPU
    assert g.hbm_bytes_per_s == 576e12 / 72            # GB300 NVL72: 576 TB/s for 72 GPUs = 8 TB/s
    assert g.intra_node.bytes_per_s == 900e9           # NVLink 5: 1.8 TB/s both directions / 2
    assert g.inter_node.bytes_per_s == 100e9           # GB300 NVL72: 72 ConnectX-8 at 800 Gb/s, one per GPU
    assert g.gpus_per_node == 72                       # the NVL72 NVLink domain as one node
    assert g.efficiency == GPUS["gb200"].efficiency    # gb200's curve: no GB300 GEMM measurement


def test_gb300_plans_over_two_nvl72_racks():
    """--gpus-per-node 72 (gb300's default) on 144 GPUs: two NVLink domains joined by ConnectX-8."""
    out = io.StringIO()
    code = main(["plan", "--preset", "llama3.1-70b", "--gpu", "gb300", "--gpus", "144", "--gpus-per-node", "72",
                 "--suggest", "--json"], out=out, err=io.StringIO())
    assert code == 0
    data = json.loads(out.getvalue())
    assert (data["cluster"]["gpu"], data["cluster"]["gpus_per_node"], data["cluster"]["num_gpus"]) == ("gb300", 72, 144)


# fp4 dense peaks (GpuSpec.peak_fp4_flops_per_s, --peak-fp4-tflops): stated, not yet read by the time model.
FP4 = {
    "b200": 144e15 / 8 / 2,        # HGX B200: 144 PFLOPS fp4 with sparsity for 8 GPUs = 9,000 (pytorch/ao: 9.0e15)
    "gpu-192gib": 9000e12,          # the exercise's part: b200's, assumed
    "gb200": 1440e15 / 72 / 2,      # GB200 NVL72: 1,440 PFLOPS fp4 with sparsity for 72 GPUs = 10,000
    "b300": 13125e12,               # HGX B300: 105 PFLOPS dense / 8
    "gb300": 15000e12,              # GB300 NVL72: 1,080 PFLOPS dense / 72
    "mi355x": 10.1e15,              # AMD MI355X: MXFP4 10.1 PFLOP/s (no sparsity qualifier: dense)
}


@pytest.mark.parametrize("name", sorted(GPUS))
def test_fp4_peaks(name):
    assert GPUS[name].peak_fp4_flops_per_s == FP4.get(name)   # None: no fp4 tensor cores (Hopper, Ampere, CDNA3)


def test_fp4_is_at_least_the_fp8_peak_where_both_are_stated():
    for name, g in GPUS.items():
        if g.peak_fp4_flops_per_s is not None:
            assert g.peak_fp4_flops_per_s >= 2 * g.peak_fp8_flops_per_s, name   # every vendor: fp4 >= 2 x fp8


def test_peak_fp4_tflops_parses():
    g = _resolved_gpu("--peak-fp4-tflops", "9000")
    assert g.peak_fp4_flops_per_s == 9000e12   # TFLOP/s x 1e12
    # the name says what the flag changed and what the preset still gives
    assert g.name == "h100-80gb with its own --peak-fp4-tflops (h100-80gb HBM bandwidth, memory and links kept)"


@pytest.mark.parametrize("value", ["0", "-5", "1e9", "nan", "abc"])
def test_bad_peak_fp4_is_a_one_line_error(value):
    err = io.StringIO()
    code = main(["plan", "--preset", "llama3.1-8b", "--gpus", "8", f"--peak-fp4-tflops={value}"], out=io.StringIO(),
                err=err)
    assert code == 2
    message = err.getvalue().strip()
    assert "--peak-fp4-tflops" in message and "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), True, "9000"])
def test_a_spec_files_bad_fp4_peak_is_refused(value):
    from fitplan.errors import SpecError
    with pytest.raises(SpecError, match="peak_fp4"):
        replace(GPUS["b200"], peak_fp4_flops_per_s=value)


# Issue 25 item 7: the GPUs people fine-tune on. Memory is nvidia-smi's total (MiB); GeForce bf16 is the
# fp32-accumulate rate PyTorch uses, half the fp16-accumulate one; PCIe 4.0 x16 inside a node.
MiB = 2**20


def test_geforce_cards():
    g = GPUS["rtx-4090"]
    assert g.memory_bytes == 24_564 * MiB             # nvidia-smi, RLinf/RLinf#255
    assert g.peak_bf16_flops_per_s == 165.2e12         # Ada whitepaper: bf16 with fp32 accumulate 165.2 dense,
    assert g.peak_bf16_flops_per_s == pytest.approx(330.3e12 / 2, abs=0.05e12)   # half of fp16-accumulate 330.3
    assert g.peak_fp8_flops_per_s == 330.3e12          # Ada whitepaper: fp8 with fp32 accumulate 330.3 dense
    assert g.peak_fp4_flops_per_s is None              # Ada: no fp4 tensor cores
    assert g.hbm_bytes_per_s == 21e9 * 384 / 8         # GDDR6X 21 Gb/s x 384 bits = 1,008 GB/s
    assert g.power_watts == 450                        # total graphics power (nvidia-smi cap 450 W, RLinf#255)
    g = GPUS["rtx-3090"]
    assert g.memory_bytes == 24_576 * MiB             # nvidia-smi, noonghunna/club-3090#390
    assert g.peak_bf16_flops_per_s == 142e12 / 2       # GA102 whitepaper: 142 fp16-accumulate, 71 fp32-accumulate
    assert g.peak_fp8_flops_per_s is None              # Ampere: no fp8
    assert g.hbm_bytes_per_s == 19.5e9 * 384 / 8       # GDDR6X 19.5 Gb/s x 384 bits = 936 GB/s
    assert g.power_watts == 350                        # GA102 whitepaper: 350 W
    for name in ("rtx-4090", "rtx-3090"):
        g = GPUS[name]
        assert g.intra_node.bytes_per_s == 31.5e9          # PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 bits
        assert g.intra_node.bytes_per_s == pytest.approx(16e9 * 16 * 128 / 130 / 8, rel=1e-3)   # = 31.51 GB/s
        assert g.inter_node.bytes_per_s == 100e9 / 8 / 4   # one 100 GbE port for 4 cards, assumed
        assert g.gpus_per_node == 4 and g.default_reserve_bytes == 0   # a 4-card workstation, assumed
        assert g.blas_workspace_bytes == 8_519_680     # PyTorch's default cuBLAS workspace (not Hopper)


def test_workstation_and_datacenter_ada_ampere_cards():
    g = GPUS["rtx-a6000"]
    assert g.memory_bytes == 49_140 * MiB             # nvidia-smi, noonghunna/club-3090#1047
    assert g.peak_bf16_flops_per_s == 309.7e12 / 2     # A6000 datasheet: 309.7 with sparsity (torchtitan 154.85e12)
    assert g.hbm_bytes_per_s == 768e9                  # A6000 datasheet: 768 GB/s
    assert (g.power_watts, g.gpus_per_node) == (300, 4)   # datasheet 300 W; 4 per workstation assumed
    g = GPUS["l40s"]
    assert g.memory_bytes == 46_068 * MiB             # nvidia-smi, modal-labs/modal-client#2797
    assert g.peak_bf16_flops_per_s == 362.05e12        # L40S datasheet: 733 with sparsity; verl 362.05e12
    assert g.peak_fp8_flops_per_s == 1466e12 / 2       # L40S datasheet: 1,466 with sparsity
    assert g.hbm_bytes_per_s == 864e9                  # L40S datasheet: 864 GB/s
    assert g.inter_node.bytes_per_s == 400e9 / 8 / 8   # AWS g6e.48xlarge: 400 Gb/s for 8 L40S, assumed
    assert (g.power_watts, g.gpus_per_node) == (350, 8)
    g = GPUS["l4"]
    assert g.memory_bytes == 23_034 * MiB             # nvidia-smi, modal-labs/modal-client#2797
    assert g.peak_bf16_flops_per_s == 242e12 / 2       # L4 datasheet: 242 with sparsity
    assert g.peak_fp8_flops_per_s == 485e12 / 2        # L4 datasheet: 485 with sparsity
    assert g.hbm_bytes_per_s == 300e9                  # L4 datasheet: 300 GB/s
    assert g.inter_node.bytes_per_s == 100e9 / 8 / 8   # AWS g6.48xlarge: 100 Gb/s for 8 L4, assumed
    assert (g.power_watts, g.gpus_per_node) == (72, 8)
    g = GPUS["a10g"]
    assert g.memory_bytes == 23_028 * MiB             # nvidia-smi, NVIDIA/DCGM#232
    assert g.peak_bf16_flops_per_s == 70e12            # not published by NVIDIA; torch.mm measures 69.47 (#126)
    assert g.hbm_bytes_per_s == 600e9                  # A10's 600 GB/s
    assert g.inter_node.bytes_per_s == 100e9 / 8 / 8   # AWS g5.48xlarge: 100 Gb/s for 8 A10G, assumed
    assert (g.power_watts, g.gpus_per_node) == (300, 8)   # nvidia-smi's limit, NVIDIA/DCGM#232
    for name in FINE_TUNING:
        assert GPUS[name].intra_node.name == "PCIe 4.0 x16" and GPUS[name].host_bytes_per_s == 25e9   # PCIe Gen4


def test_fine_tuning_cards_curves_are_a100s_scaled_by_square_torch_mm():
    """bench/calibrate.py: A100's ceiling 0.883 x (card's torch.mm best / peak) / (A100's 264.53 / 312), capped
    at 1 (a card that beats its rated peak: A10G 69.47 of 70 puts it at 1.03); W = A100's 1.87 TB/s (unrounded
    in the fit) x memory bandwidth / 2,039 GB/s; zzc0721/torch-performance-test-data."""
    a100 = 264.53 / 312
    assert GPUS["l40s"].efficiency == pytest.approx(0.883 * (269.15 / 362.05) / a100, abs=5e-4)
    assert 0.883 * (69.47 / 70) / a100 > 1 and GPUS["a10g"].efficiency == 1.0
    assert GPUS["l4"].gemm_bandwidth_bytes_per_s == pytest.approx(1.87e12 * 300 / 2039, rel=0.01)
    assert all(GPUS[n].efficiency_fp8 is None and GPUS[n].gemm_overhead_s == 6.11e-6 for n in FINE_TUNING)


def test_mi325x():
    g = GPUS["mi325x"]
    assert g.memory_bytes == 256 * 10**9              # AMD MI325X: 256 GB (decimal) HBM3e
    assert g.peak_bf16_flops_per_s == 1307.4e12        # AMD MI325X: MI300X's 1307.4 dense
    assert g.peak_fp8_flops_per_s == 2614.9e12         # AMD MI325X: 2614.9 dense
    assert g.hbm_bytes_per_s == 6.0e12                 # AMD MI325X: 6 TB/s
    assert g.intra_node.bytes_per_s == 448e9           # Infinity Fabric 7 x 128 GB/s = 896 aggregate / 2
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0


def test_mi355x():
    g = GPUS["mi355x"]
    assert g.memory_bytes == 288 * 10**9              # AMD MI355X: 288 GB (decimal) HBM3e
    assert g.peak_bf16_flops_per_s == 2500e12          # AMD MI355X: 2.5 PFLOP/s dense (formula 2516.6)
    assert g.peak_fp8_flops_per_s == 5000e12           # AMD MI355X: 5 PFLOP/s dense (10.1 with sparsity)
    assert g.hbm_bytes_per_s == 8e12                   # AMD MI355X: 8 TB/s
    assert g.intra_node.bytes_per_s == 7 * 153e9 / 2   # 7 links x 153 GB/s, read as both directions = 535.5
    assert g.gpus_per_node == 8 and g.default_reserve_bytes == 0


def test_the_existing_presets_hbm_bandwidth():
    assert GPUS["a100-40gb"].hbm_bytes_per_s == 1555e9    # A100 datasheet: 1,555 GB/s
    assert GPUS["a100-80gb"].hbm_bytes_per_s == 2039e9    # A100 datasheet: 2,039 GB/s (SXM)
    assert GPUS["h100-80gb"].hbm_bytes_per_s == 3.35e12   # H100 SXM5 datasheet: 3.35 TB/s
    assert GPUS["h200-141gb"].hbm_bytes_per_s == 4.8e12   # H200 datasheet: 4.8 TB/s
    assert GPUS["b200"].hbm_bytes_per_s == 64e12 / 8      # DGX B200 datasheet: 64 TB/s for 8 GPUs
    assert GPUS["mi300x"].hbm_bytes_per_s == 5.3e12       # MI300X datasheet: 5.3 TB/s
    assert GPUS["gpu-192gib"].hbm_bytes_per_s == GPUS["b200"].hbm_bytes_per_s   # assumed b200's


# What each preset's source must say: where its memory, bf16 peak and HBM rate come from, as written
# there. A figure changed without its source fails here.
SOURCE_TEXT = {
    "gpu-192gib": ("192 GiB", "b200's", "8 TB/s"),
    "a100-40gb": ("A100 datasheet", "40GB", "312 TFLOP/s", "1,555 GB/s"),
    "a100-80gb": ("A100 datasheet", "80GB", "312 TFLOP/s", "2,039 GB/s"),
    "h100-80gb": ("H100 SXM5 datasheet", "80GB", "989 TFLOP/s", "1979", "3.35 TB/s"),
    "h200-141gb": ("H200 SXM datasheet", "141 GB", "H100's compute", "4.8 TB/s"),
    "b200": ("DGX B200 datasheet", "180 GB", "2.25 PFLOP/s", "4.5", "64 TB/s", "8 TB/s"),
    "mi300x": ("MI300X datasheet", "192 GB", "1307.4", "2614.9", "5.3 TB/s", "896 GB/s"),
    "h800": ("no public NVIDIA datasheet", "80GB", "81,559 MiB", "NVIDIA/nccl#1264", "989 TFLOP/s", "1979", "3.35 TB/s", "400 GB/s",
             "not officially published", "400 Gb/s"),
    "a800": ("no public NVIDIA datasheet", "80GB", "312", "2,039 GB/s", "400 GB/s", "200 Gb/s"),
    "h100-pcie": ("H100 datasheet, PCIe", "80GB", "1,513", "3,026", "756", "2 TB/s", "128 GB/s", "63 GB/s"),
    "h20": ("publishes no datasheet", "96GB", "148 TFLOP/s", "296", "4.0 TB/s", "900 GB/s", "400 Gb/s"),
    "gh200": ("GH200", "96GB", "989 TFLOP/s", "1979", "4 TB/s", "JUPITER", "4 superchips", "150 GB/s",
              "NDR200"),
    "gb200": ("GB200 NVL72", "186 GB", "2.5 PFLOP/s", "5 fp8", "8 TB/s", "1.8 TB/s", "72-GPU node", "400 Gb/s"),
    "mi325x": ("MI325X", "256 GB", "1307.4", "2614.9", "6 TB/s", "896 GB/s"),
    "mi355x": ("MI355X", "288 GB", "2.5 PFLOP/s", "5 fp8", "8 TB/s", "153 GB/s", "535.5", "MXFP4 10.1"),
    "b300": ("DGX B300 datasheet", "2.3 TB", "288 GB", "36 PFLOPS bf16", "72 fp8", "2.25 PFLOP/s", "105 dense",
             "13.125", "8 TB/s", "1.8 TB/s", "800 Gb/s ConnectX-8"),
    "gb300": ("GB300 NVL72", "288 GB", "2.5 PFLOP/s", "5 fp8", "15 fp4", "1,080 PFLOPS", "8 TB/s", "1.8 TB/s",
              "72-GPU node", "800 Gb/s ConnectX-8"),
    "rtx-4090": ("Ada GPU architecture whitepaper", "24,564 MiB", "RLinf/RLinf#255", "1,008 GB/s", "165.2",
                 "fp32 accumulate", "330.3", "PCIe 4.0 x16", "4 per node assumed", "3.125 GB/s"),
    "rtx-3090": ("GA102 GPU architecture whitepaper", "24,576 MiB", "noonghunna/club-3090#390", "936 GB/s", "71 TFLOP/s",
                 "fp32 accumulate", "NVLink bridge", "not modelled", "4 per node assumed"),
    "rtx-a6000": ("RTX A6000 datasheet", "49,140 MiB", "noonghunna/club-3090#1047", "768 GB/s", "309.7", "154.85",
                  "NVLink bridge", "not modelled", "4 per node assumed"),
    "l40s": ("L40S datasheet", "46,068 MiB", "modal-labs/modal-client#2797", "864 GB/s", "362.05", "733", "1,466",
             "g6e.48xlarge", "400 Gb/s"),
    "l4": ("L4 datasheet", "23,034 MiB", "modal-labs/modal-client#2797", "300 GB/s", "242", "121", "485", "242.5",
           "g6.48xlarge", "100 Gb/s"),
    "a10g": ("publishes no datasheet", "23,028 MiB", "NVIDIA/DCGM#232", "600 GB/s", "70 TFLOP/s", "69.47",
             "zzc0721/torch-performance-test-data#126", "g5.48xlarge", "100 Gb/s"),
}


def test_every_preset_is_listed_here():
    assert set(SOURCE_TEXT) == set(GPUS)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_preset_names_where_its_numbers_come_from(name):
    g = GPUS[name]
    assert g.source.strip()
    assert g.hbm_bytes_per_s is not None, f"{name}: no HBM bandwidth"
    for text in SOURCE_TEXT[name]:
        assert text in g.source, f"{name}: the source does not say {text!r}"


@pytest.mark.parametrize("name", sorted(GPUS))
def test_llama_70b_on_64_plans_on_every_gpu(name):
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", "--preset", "llama3.1-70b", "--gpus", "64", "--gpu", name, "--suggest", "--json"],
                out=out, err=err)
    assert code in (0, 1), err.getvalue()
    data = json.loads(out.getvalue())
    assert data["cluster"]["gpu"] == name


@pytest.mark.parametrize("name", NEW)
def test_presets_show_toml_round_trips_with_the_hbm_rate(name):
    """tests/unit/test_cli_commands.py and test_load.py round-trip every preset; this names the new ones."""
    out = io.StringIO()
    assert main(["presets", "show", name, "--toml"], out=out, err=io.StringIO()) == 0
    spec = specs_from_document(parse_document(out.getvalue(), where=name), where=name)
    assert spec.gpu == GPUS[name] and spec.gpu.hbm_bytes_per_s == GPUS[name].hbm_bytes_per_s


def test_hbm_bandwidth_is_written_with_its_unit():
    assert 'hbm_bandwidth = "3.35 TB/s"' in dump_toml(GPUS["h100-80gb"])
    assert 'hbm_bandwidth = "2039 GB/s"' in dump_toml(GPUS["a800"])
    assert 'memory = "186 GB"' in dump_toml(GPUS["gb200"]) and 'memory = "96 GiB"' in dump_toml(GPUS["h20"])


def test_docs_hardware_has_a_row_for_every_preset():
    page = (Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text()
    for name in GPUS:
        assert f"| `{name}` |" in page, name


# Board power (--gpu-power's default): the vendor's TDP, and the words in the preset's source that state it.
POWER = {
    "a100-40gb": (400, "max TDP 400 W (SXM4"),          # A100 datasheet: SXM 400 W, PCIe 250 W
    "a100-80gb": (400, "max TDP 400 W (SXM4"),          # A100 80GB SXM: 400 W (PCIe 300 W)
    "a800": (400, "TDP 400 W, the A100 SXM"),           # no datasheet: the A100 SXM's
    "h100-80gb": (700, "up to 700 W"),                  # H100 SXM5 datasheet: up to 700 W (configurable)
    "h800": (700, "TDP 700 W, the H100 SXM5"),          # no datasheet: the H100 SXM5's
    "h100-pcie": (350, "Max TDP 350 W"),                # H100 PCIe product brief PB-11133-001: 350 W
    "h200-141gb": (700, "up to 700 W"),                 # H200 SXM datasheet: up to 700 W (NVL 600 W)
    "h20": (400, "TDP 400 W"),                          # the reported spec sheet
    "gh200": (1000, "450 to 1000 W"),                   # module, CPU + GPU + memory: 450-1000 W configurable
    "b200": (1000, "1,000 W per GPU"),                  # HGX B200: up to 1,000 W per GPU
    "gb200": (1200, "1,200 W per Blackwell GPU"),       # GB200's per-GPU figures are at 1,200 W
    "gpu-192gib": (1000, "b200's TDP"),                 # the exercise's part: b200's, assumed
    "mi300x": (750, "750 W peak total board power"),    # AMD MI300X datasheet (OAM)
    "mi325x": (1000, "1000 W peak total board power"),  # AMD MI325X
    "mi355x": (1400, "1400 W total board power"),       # AMD MI355X (MI350X 1000 W)
    "b300": (1000, "TDP 1000 W: the DGX B300"),         # DGX B300 power-capping guide: max TGP 1000 W
    "gb300": (1400, "1.4 kW per GPU"),                  # NVIDIA Mission Control power FAQ: GB300 at 1.4 kW
    "rtx-4090": (450, "Total graphics power 450 W"),    # Ada whitepaper: RTX 4090 TGP 450 W
    "rtx-3090": (350, "Total graphics power 350 W"),    # GA102 whitepaper: RTX 3090 TGP 350 W
    "rtx-a6000": (300, "Max power consumption 300 W"),  # RTX A6000 datasheet
    "l40s": (350, "Max power consumption 350 W"),       # L40S datasheet
    "l4": (72, "Max power 72 W"),                       # L4 datasheet
    "a10g": (300, "Power 300 W: the limit nvidia-smi"),  # NVIDIA/DCGM#232 (no datasheet)
}


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_preset_states_its_board_power(name):
    watts, words = POWER[name]
    assert GPUS[name].power_watts == watts and words in GPUS[name].source


def test_power_is_written_with_its_unit_and_loads_back():
    assert 'power = "700 W"' in dump_toml(GPUS["h100-80gb"]) and 'power = "1.2 kW"' in dump_toml(GPUS["gb200"])


# The link to host memory (--host-bandwidth's default, what offload moves over), per GPU and direction, and the
# words in the preset's source that state it.
GEN4, GEN5 = (25e9, "PCIe Gen4 x16: 31.5 GB/s per direction raw, 25 GB/s achievable"), (
    50e9, "PCIe Gen5 x16: 63 GB/s per direction raw, 50 GB/s achievable")
HOST_LINK = {
    "a100-40gb": GEN4, "a100-80gb": GEN4, "a800": GEN4,           # Ampere SXM4: PCIe Gen4 to the host
    "h100-80gb": GEN5, "h200-141gb": GEN5, "h800": GEN5, "h20": GEN5, "h100-pcie": GEN5, "b200": GEN5,
    "mi300x": GEN5, "mi325x": GEN5, "mi355x": GEN5,
    "gpu-192gib": (50e9, "assumed b200's"),
    "gh200": (450e9, "900 GB/s both directions = 450 GB/s each way"),       # GH200 datasheet: NVLink-C2C 900 GB/s
    "gb200": (225e9, "read as 225 GB/s per GPU each way"),               # one C2C for two GPUs, split evenly
    "gb300": (225e9, "read as 225 GB/s per GPU each way"),               # as gb200
    "b300": (50e9, "DGX B300's host CPUs (Xeon 6776P) are Gen5"),       # a Gen6 GPU behind Gen5 hosts, assumed
    "rtx-4090": GEN4, "rtx-3090": GEN4, "rtx-a6000": GEN4, "l40s": GEN4, "l4": GEN4, "a10g": GEN4,   # PCIe Gen4 x16
}


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_preset_states_its_host_link(name):
    rate, words = HOST_LINK[name]
    assert GPUS[name].host_bytes_per_s == rate and words in GPUS[name].source


def test_host_bandwidth_is_written_with_its_unit():
    assert 'host_bandwidth = "50 GB/s"' in dump_toml(GPUS["h100-80gb"])
    assert 'host_bandwidth = "450 GB/s"' in dump_toml(GPUS["gh200"])


# Issue 25: --hbm-bandwidth reaches the GEMM operand bandwidth W (fitplan.timing.gemm.operand_bandwidth) when
# --gemm-bandwidth is not given, by the ratio new/old HBM bandwidth (docs/formulas.md#gemm-efficiency).
def _resolved_gpu(*argv):
    from fitplan.cli import build_parser, request_from_args
    from fitplan.resolve import resolve
    args = build_parser().parse_args(["plan", "--preset", "llama3.1-8b", "--gpus", "8", *argv])
    return resolve(request_from_args(args)).setup.cluster.gpu


def test_hbm_bandwidth_scales_the_fitted_gemm_bandwidth():
    from fitplan.timing.gemm import operand_bandwidth
    h100 = GPUS["h100-80gb"]
    assert operand_bandwidth(h100) == 3.07e12                       # CURVES["h100"]: W 3.07 TB/s of 3.35
    g = _resolved_gpu("--hbm-bandwidth", "6.7 TB/s")
    assert g.hbm_bytes_per_s == 6.7e12
    assert operand_bandwidth(g) == pytest.approx(3.07e12 * 6.7 / 3.35, rel=1e-12)   # 6.14 TB/s: the same 91.6%
    g = _resolved_gpu("--hbm-bandwidth", "1 TB/s")
    assert operand_bandwidth(g) == pytest.approx(3.07e12 / 3.35, rel=1e-12)        # 0.916 TB/s


def test_hbm_bandwidth_equal_to_the_presets_changes_nothing():
    assert _resolved_gpu("--hbm-bandwidth", "3.35 TB/s").gemm_bandwidth_bytes_per_s == 3.07e12   # ratio exactly 1


def test_gemm_bandwidth_given_wins_over_the_scaling():
    g = _resolved_gpu("--hbm-bandwidth", "6.7 TB/s", "--gemm-bandwidth", "3 TB/s")
    assert (g.hbm_bytes_per_s, g.gemm_bandwidth_bytes_per_s) == (6.7e12, 3e12)


def test_a_faster_hbm_speeds_up_memory_bound_steps():
    """TP 8 on an 8B model: small GEMMs at the memory bound. Doubling the HBM bandwidth shortens compute;
    the same figure as the preset's leaves it exactly as it was."""
    def compute_s(*argv):
        out = io.StringIO()
        assert main(["plan", "--preset", "llama3.1-8b", "--gpus", "8", "--tp", "8", "--json", *argv], out=out,
                    err=io.StringIO()) == 0
        return json.loads(out.getvalue())["time"]["compute_s"]
    base = compute_s()
    assert compute_s("--hbm-bandwidth", "3.35 TB/s") == base
    assert compute_s("--hbm-bandwidth", "6.7 TB/s") < base < compute_s("--hbm-bandwidth", "1 TB/s")
