"""Memory as the frameworks allocate it (issue 25): the loss variants, the optimizers that hold less, the
quantized weight copies, what the logs report (allocated and reserved), the verdict's band, and the three
Llama 3 405B layouts Meta published fitting their 80 GB H100s."""
import io
import json
from dataclasses import replace

import pytest

from fitplan.analysis import LIKELY_OOM, TIGHT, peak_band, risk
from fitplan.cli import main
from fitplan.memory import activations as A
from fitplan.memory import runtime as RT
from fitplan.memory.breakdown import evaluate, fp8_cache_factor
from fitplan.specs import ParallelConfig, Recompute, ZeroStage
from tests.conftest import make_setup

GiB = 2**30
S, V, H = 8192, 128256, 4096   # Llama 3 8B: one sequence of 8K tokens


def plan(argv):
    out = io.StringIO()
    code = main(["plan", *argv, "--json"], out=out, err=io.StringIO())
    return code, json.loads(out.getvalue())


# ---------------------------------------------------------------- the loss

def test_the_losses_by_hand():
    """T = s*b = 8192 tokens, V = 128,256, bf16 (e = 2), t = c = 1.
    pytorch (F.cross_entropy on fp32 logits): saves 4TV; its backward adds nll_loss's and log_softmax's fp32
      gradients, 8TV.
    chunked (torchtune, k = 8, eager): log_softmax still saves every chunk's fp32 output, 4TV; the backward runs
      one chunk at a time, 8TV/k; compiled, the saved set is the bf16 chunks and two fp32 statistics per row,
      2TV + 8T.
    linear (Liger): no logits saved; the output layer's input and weight gradients, 2Th + 2Vh, and 4T of
      per-token losses held from the forward; the backward adds nothing."""
    T = S
    kw = dict(s=S, b=1, h=H, V=V, e=2, t=1, c=1, sp=False)
    assert A.output_bytes(**kw) == 2 * 2 * T * H + 4 * T * V
    assert A.output_bytes(**kw, x=2) == 2 * 2 * T * H + 2 * T * V + 8 * T
    held = 2 * T * H + 2 * V * H + 4 * T
    assert A.output_bytes(**kw, k_in=1, x=0, held=held) == 2 * T * H + held
    grads = dict(s=S, b=1, V=V, e=2, t=1, c=1, h=H, w=2)
    assert RT.logits_grad_bytes(**grads, kernel="pytorch") == 8 * T * V
    assert RT.logits_grad_bytes(**grads, kernel="chunked", k=8) == max(T * V, 2 * V * H + 2 * T * H - 2 * T * V)
    assert RT.logits_grad_bytes(**grads, kernel="linear") == 0
    # Liger's forward: one chunk of next_pow2(ceil(T/ceil(V/h))) = next_pow2(ceil(8192/32)) = 256 rows of logits,
    # and the chunk's weight-gradient product in bf16 and its fp32 copy, 6Vh
    assert RT.lce_chunk_rows(T=T, V=V, h=H) == 256
    assert RT.loss_forward_bytes(s=S, b=1, V=V, e=2, t=1, c=1, kernel="linear", h=H, w=2) == 2 * 256 * V + 6 * V * H


def test_a_plan_takes_its_loss_from_the_flag_and_the_framework():
    """The same Llama 3 8B layout: the fused linear loss keeps, instead of the head's input and the fp32 logits
    (2eTh + 4TV), the head's input gradient, its weight gradient and the losses (2Th + 2Vh + 4T): 4TV - 2Vh - 4T
    fewer bytes, and no logit gradients in the backward; torchtune's profile picks its chunked loss."""
    base = ["--preset", "llama3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--zero", "3", "--seq-len", "8192"]
    _, torch_ce = plan(base)
    _, liger = plan(base + ["--cross-entropy", "linear"])
    _, tune = plan(base + ["--framework", "torchtune"])
    assert liger["breakdown"]["runtime/logits_grad"] == 0
    assert torch_ce["breakdown"]["activations/output"] - liger["breakdown"]["activations/output"] == \
        4 * S * V - 2 * V * H - 4 * S
    assert liger["per_gpu_bytes"] < torch_ce["per_gpu_bytes"]
    assert any("cross entropy chunked" in a for a in tune["assumed"])


# ---------------------------------------------------------------- optimizers that hold less

def test_an_8b_full_fine_tune_on_a_24_gb_card():
    """Llama 3.1 8B, every weight trained, on one RTX 4090 (23.99 GiB): bf16 weights (14.96 GiB) and
    bitsandbytes' paged 8-bit AdamW stepped in the gradient hooks (torchtune's single-device recipe): one
    parameter's gradient and one parameter's optimizer pages on the GPU, the embedding's 128,256 x 4,096 (0.98 GiB
    each), the rest of the 6.03 B/param state on the host. Without them (gradients of every weight, the state
    resident) it cannot fit."""
    argv = ["--preset", "llama3.1-8b", "--gpus", "1", "--gpu", "rtx-4090", "--global-batch", "1", "--seq-len",
            "2048", "--recompute", "full", "--precision", "bnb-adamw-8bit", "--framework", "torchtune"]
    code, data = plan(argv + ["--optimizer-in-backward", "--paged-optimizer"])
    assert code == 0 and data["fits"]
    P_max = 128256 * 4096
    assert data["breakdown"]["states/grads"] == 2 * P_max
    assert data["breakdown"]["states/optimizer"] == int(2 * (1 + 4 / 256) * P_max)
    assert data["host"]["parts_per_gpu"]["host/optimizer"] > 14 * GiB
    code, plain = plan(argv)
    assert code == 1 and not plain["fits"]


def test_optimizer_in_backward_refuses_accumulation():
    code = main(["plan", "--preset", "llama3-8b", "--gpus", "8", "--zero", "3", "--global-batch", "16",
                 "--optimizer-in-backward"], out=io.StringIO(), err=(err := io.StringIO()))
    assert code == 2 and "one micro-batch" in err.getvalue() and err.getvalue().count("\n") == 1


# ---------------------------------------------------------------- quantized weight copies

@pytest.mark.parametrize(("compute", "w", "arch", "c8"), [
    ("fp8", 2, "hopper", 2.0),                    # the cast and its transpose (Hopper lacks non-TN fp8 GEMMs)
    ("fp8", 2, "blackwell", 1.0),                 # the cast only
    ("fp8", 1, "hopper", 1.0),                    # fp8 primary weights are the cast: the transpose
    ("mxfp8", 2, "blackwell", 2 * (1 + 1 / 32)),  # rowwise and columnwise, a uint8 scale per 32
    ("nvfp4", 2, "blackwell", 2 * (0.5 + 1 / 16)),   # 4-bit data and an fp8 scale per 16, both directions
])
def test_quantized_weight_copies_per_recipe_and_architecture(compute, w, arch, c8):
    assert fp8_cache_factor(compute=compute, weights_bytes=w, architecture=arch) == pytest.approx(c8)


def test_deepseek_keeps_no_fp8_weight_copies():
    """DeepSeek-V3 as published (2,048 H800, pp 16, ep 64, DualPipe): its DeepGEMM kernels quantize per use (the
    preset says so), and its tokens travel by DeepEP, whose 64-rank buffers are 713,725,120 B."""
    code, data = plan(["--preset", "deepseek-v3", "--gpu", "h800", "--gpus", "2048", "--pp", "16", "--ep", "64",
                       "--zero", "1", "--schedule", "dualpipe", "--precision", "deepseek-v3-fp8", "--recompute",
                       "norms"])
    assert data["breakdown"]["runtime/fp8_weight_cache"] == 0
    assert data["breakdown"]["runtime/deepep"] == RT.deepep_bytes(ep=64, h=7168, e=2) == 713_725_120
    code, cached = plan(["--preset", "deepseek-v3", "--gpu", "h800", "--gpus", "2048", "--pp", "16", "--ep", "64",
                         "--zero", "1", "--schedule", "dualpipe", "--precision", "deepseek-v3-fp8", "--recompute",
                         "norms", "--fp8-weight-cache"])
    assert cached["breakdown"]["runtime/fp8_weight_cache"] > 5 * GiB


# ---------------------------------------------------------------- the Llama 3 405B layouts

L405 = ["--preset", "llama3.1-405b", "--tp", "8", "--pp", "16", "--sequence-parallel", "--zero", "3",
        "--no-reshard-after-forward", "--micro-batch", "1", "--precision", "megatron-fp32-grad"]
# one layer's parameters on a tp rank: q and the grouped k, v (8 kv heads of 128), o, the SwiGLU's three
# matrices, all split over tp 8, and two RMSNorm weights
LAYER = (16384 * (16384 + 2 * 1024) + 16384 * 16384 + 3 * 16384 * 53248) // 8 + 2 * 16384


@pytest.mark.parametrize("extra", [["--gpus", "8192", "--global-batch", "2048"],
                                   ["--gpus", "16384", "--global-batch", "2048"],
                                   ["--gpus", "16384", "--cp", "16", "--seq-len", "131072", "--global-batch", "128"]],
                         ids=["8K-8192", "8K-16384", "128K-16384"])
def test_the_three_llama3_405b_layouts_fit(extra):
    """Llama 3 report Table 4: 126 layers in stages of 7, 8 x 14, 7; TP 8, PP 16, SP; FSDP without resharding
    after forward; fp32 gradient accumulation (megatron-fp32-grad: bf16 weights, fp32 gradients), each micro-batch's
    gradients reduce-scattered into the sharded fp32 accumulator (--microbatch-grad-sync; the Ultra-Scale
    Playbook's 4*psi/N_d for fp32 accumulation under ZeRO-2/3). They ran on 80 GB H100s: fitplan says they fit.
    The layer's unsharded fp32 gradient before its reduce-scatter is runtime/fsdp_buffers, 4 B x its parameters."""
    code, data = plan(L405 + extra + ["--microbatch-grad-sync"])
    assert code == 0 and data["fits"] and data["risk"]["level"] != LIKELY_OOM
    assert data["stage_layers"] == [7] + [8] * 14 + [7]
    assert data["peak"]["held"]["runtime/fsdp_buffers"] == 4 * LAYER
    assert data["peak"]["held"]["runtime/accumulated_grads"] == 0


def test_pipelining_holds_the_gradients_unsharded_once():
    """torch.distributed.pipelining's default (sync once per step): the stage's 8 layers' gradients accumulate
    unsharded in fp32 (runtime/accumulated_grads, 4 x 8 x LAYER x 63/64 beside the shard), and the computing
    layer's own gradient is only its bf16 one before the add (2 x LAYER), not a second fp32 copy (issue 25's
    double count: 1.48 GiB). That layout is 11 GiB heavier and over the 79.65 GiB."""
    code, data = plan(L405 + ["--gpus", "8192", "--global-batch", "2048"])
    held = data["peak"]["held"]
    assert held["runtime/fsdp_buffers"] == 2 * LAYER
    assert held["runtime/accumulated_grads"] == -(-4 * 8 * LAYER * 63 // 64)
    assert code == 1 and not data["fits"]


# ---------------------------------------------------------------- the verdict's band

def test_the_band_spans_what_the_model_cannot_pin():
    """low: the peak without the allocator's pages and fragmentation and with half the layer backward's
    buffers (an upper bound); high: 15% more of the moment's transient bytes lost to fragmentation (GMLake's
    average). A layout a little over usable memory whose band reaches below it is tight, not likely_oom."""
    setup = make_setup("llama3.1-8b", 8, gpu="h100-80gb", global_batch=64)
    b = evaluate(setup, ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL))
    assert b.fits
    held = b.peak.held
    lo, hi = peak_band(b)
    assert lo == b.per_gpu_bytes - held["runtime/allocator"] - held.get("runtime/layer_backward", 0) // 2
    from fitplan.memory.timeline import ALWAYS
    D = sum(v for k, v in held.items() if k not in ALWAYS and k != "runtime/allocator")
    assert hi == b.per_gpu_bytes + -(-0.15 * D // 1)
    # usable memory just under the peak, but above the band's low end: tight, with no margin
    squeezed = replace(setup, cluster=replace(setup.cluster, reserve_bytes=setup.cluster.gpu.memory_bytes
                                              - b.per_gpu_bytes + 2**20))
    tight = evaluate(squeezed, ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL))
    assert not tight.fits and risk(tight).level == TIGHT
    far = replace(setup, cluster=replace(setup.cluster, reserve_bytes=setup.cluster.gpu.memory_bytes - lo + 2**30))
    assert risk(evaluate(far, ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL))).level == LIKELY_OOM


def test_fp8_with_lora_adapters():
    """NeMo publishes FP8 LoRA runs: the frozen base's linears run in fp8 (Transformer Engine keeps each one's
    fp8 transpose for the input gradient on Hopper: 1 B/param with fp8 primary weights), the adapters in the
    activations' precision; a frozen linear keeps no input, so the stored activations equal the bf16 plan's.
    QLoRA dequantizes to bf16 for its GEMMs: fp8 with it is refused."""
    base = ["--preset", "llama3-70b", "--gpus", "8", "--gpu", "h100-80gb", "--finetune", "lora", "--tp", "4",
            "--pp", "2", "--sequence-parallel", "--lora-rank", "16"]
    code, fp8 = plan(base + ["--precision", "fp8"])
    _, bf16 = plan(base)
    assert code == 0 and fp8["breakdown"]["runtime/fp8_weight_cache"] > 0
    assert fp8["breakdown"]["activations/layers"] == bf16["breakdown"]["activations/layers"]
    assert fp8["time"]["step_s"] < bf16["time"]["step_s"]
    code = main(["plan", *base[:7], "qlora", "--precision", "fp8", "--tp", "4"], out=io.StringIO(),
                err=(err := io.StringIO()))
    assert code == 2 and "qlora" in err.getvalue()
