"""bench/gpu_step.py times a training step on a GPU (none here); what runs without one is checked: the flags it
gives `fitplan plan` state the model it builds, and the estimate it compares against is the plan's own."""
import io
import json

import pytest

from fitplan.cli import main
from tests.scripts import load

GS = load("bench/gpu_step.py")


def test_the_flags_state_tinyllamas_shape():
    # 22 layers x (q, k, v, o: 2048 x (2048 + 256 + 256 + 2048) = 9,437,184; SwiGLU 3 x 2048 x 5632 = 34,603,008;
    # two RMSNorms 4,096) = 968,974,336, plus untied embedding and output 2 x 32,000 x 2,048 = 131,072,000 and the
    # final norm 2,048: 1,100,048,384, the count the script's reference model had on the H200 (docs/measurements)
    out = io.StringIO()
    assert main(GS.flags(4096, 4, "h200-141gb"), out=out, err=io.StringIO()) == 0
    model = json.loads(out.getvalue())["model"]
    assert model["num_params"] == 1_100_048_384


def test_the_estimate_is_the_plans():
    out = io.StringIO()
    main(GS.flags(2048, 8, "h200-141gb"), out=out, err=io.StringIO())
    plan = json.loads(out.getvalue())["time"]
    got = GS.predicted(2048, 8, "h200-141gb")
    assert got["step_s"] == plan["step_s"]
    assert got["band_s"] == [plan["uncertainty"]["low_s"], plan["uncertainty"]["high_s"]]


def test_kernels_fall_in_the_categories_fitplan_times():
    # names as cuBLASLt, CUTLASS, SDPA's flash backend, PyTorch's log-softmax and fused AdamW launch them on Hopper
    assert GS.category("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NTN") == "gemm"
    assert GS.category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64") == "gemm"
    assert GS.category("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, "
                       "128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t>>") == "attention"   # names cutlass
    assert GS.category("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                       "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>") == "loss"
    assert GS.category("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<...>>") == "optimizer"
    assert GS.category("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>") == \
        "elementwise"


def test_the_predicted_parts_are_the_whole_step():
    # one GPU, no communication, the host ahead of the GPU: the layers' GEMMs and the logits', the attention core,
    # the memory-bound kernels, the loss's and the optimizer step are the step, to rounding
    parts = GS.predicted_parts(4096, 4, "h200-141gb")
    assert parts["gemm"] + parts["attention"] + parts["elementwise"] + parts["loss"] + parts["optimizer"] == \
        pytest.approx(parts["step"], rel=1e-12)
    # the loss: F.cross_entropy on an fp32 copy of 16,384 x 32,000 bf16 logits, 18 + 26 bytes each at 4.8 TB/s
    assert parts["loss"] == pytest.approx(44 * 16384 * 32000 / 4.8e12, rel=1e-12)
    assert parts["step"] == GS.predicted(4096, 4, "h200-141gb")["step_s"]
