"""`fitplan infer`: serving memory (weights and KV cache per GPU), the largest batch and context
that fit, and the memory-bound decode step. Each expected number is derived beside its test;
all byte counts are exact (integers), times to a relative 1e-12 (float division)."""
import io
import json

import pytest

from fitplan import presets
from fitplan.cli import main
from fitplan.errors import SpecError
from fitplan.serving import gqa_kv_per_gpu_bytes, mla_kv_per_gpu_bytes, plan_serving
from fitplan.specs import ClusterSpec
from fitplan.units import GiB

CONTRACT = ("weights_bytes_per_gpu", "kv_cache_bytes", "kv_cache_bytes_per_gpu", "max_batch", "max_context",
            "decode_step_s_lower_bound")

# Llama 3.1 70B (Llama 3 Herd Table 3; HF config.json): L 80, h 8192, 64 heads, 8 kv heads of d = 128,
# ffn 28672 (SwiGLU), V 128256, untied, RMSNorm, no biases.
L, H, A, G, D, F, V = 80, 8192, 64, 8, 128, 28672, 128256
ANCHOR_KV = 2 * 80 * 8 * 128 * 131072 * 2   # the anchor: 42,949,672,960 B = 42.9 GB
# One layer's tp-split parameters: q, k, v, o projections h*(q + 2kv) + q*h with q = 8192, kv = g*d = 1024,
# and the SwiGLU MLP 3*h*f: 150,994,944 + 704,643,072 = 855,638,016. Replicated: two RMSNorms, 2h.
S_LAYER = H * (H + 2 * G * D) + H * H + 3 * H * F
R_LAYER = 2 * H
# At tp = 8, pp = 1 a GPU holds L*(S/8 + R) + V*h/8 (embedding) + V*h/8 (head) + h (final norm).
PSI_TP8 = L * (S_LAYER // 8 + R_LAYER) + 2 * (V * H // 8) + H
H100_BYTES = 81_559 * 2**20        # h100-80gb preset: what nvidia-smi reports
H100_USABLE = int(H100_BYTES * 0.9)   # vLLM's gpu_memory_utilization 0.9 (no reserve by default)


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(["infer", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_json(argv):
    code, out, err = run([*argv, "--json"])
    assert code in (0, 1), err
    return code, json.loads(out)


def llama70b(**kw):
    gpu = presets.gpu("h100-80gb")
    gpus = kw.pop("gpus", 8)
    cluster = ClusterSpec(gpu=gpu, num_gpus=gpus, gpus_per_node=8, reserve_bytes=gpu.default_reserve_bytes)
    return plan_serving(presets.model("llama3.1-70b").model, cluster, **{"tp": gpus, "pp": 1, **kw})


def test_the_anchor_llama31_70b_at_128k_holds_42_9_gb_of_kv_cache():
    """2*L*g*d*s*b*e = 2*80*8*128*131072*1*2 B, exactly; split over tp = 8 (one kv head per GPU)."""
    code, j = run_json(["--preset", "llama3.1-70b", "--gpus", "8", "--context", "131072", "--batch", "1",
                        "--kv-precision", "bf16"])
    assert j["kv_cache_bytes"] == ANCHOR_KV == 42_949_672_960
    assert round(j["kv_cache_bytes"] / 1e9, 1) == 42.9
    assert j["kv_cache_bytes_per_gpu"] == ANCHOR_KV // 8
    assert j["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 2 == 327_680
    assert code == 0 and j["fits"]


def test_weights_per_gpu_at_tp8_match_the_hand_derivation():
    """psi = 80*(855,638,016/8 + 16,384) + 2*(128,256*8,192/8) + 8,192 = 8,820,367,360 parameters per
    GPU; bf16 2 B, fp8 and int8 1 B, int4 4 bits + (16-bit scale + 4-bit zero) per group of 128."""
    assert PSI_TP8 == 8_820_367_360
    for precision, expected in (("bf16", 2 * PSI_TP8), ("fp8", PSI_TP8), ("int8", PSI_TP8),
                                ("int4", (4 * PSI_TP8 + 20 * -(-PSI_TP8 // 128)) // 8)):
        _, j = run_json(["--preset", "llama3.1-70b", "--gpus", "8", "--context", "8192",
                         "--weight-precision", precision])
        assert j["weights_bytes_per_gpu"] == expected, precision
    assert (4 * PSI_TP8 + 20 * (PSI_TP8 // 128)) // 8 == 4_582_456_480   # psi is a multiple of 128: exact


def test_mla_caches_the_latent_and_the_rotary_key_on_every_tp_rank():
    """DeepSeek-V3 (config.json): 61 layers, kv_lora_rank 512, qk_rope_head_dim 64. MLA caches
    (512 + 64) elements per token and layer (DeepSeek-V2 Table 1): 61*576*2 = 70,272 B per token in
    bf16, whatever the 128 heads. The latent has no head axis, so each of the tp = 8 ranks holds it all."""
    code, j = run_json(["--preset", "deepseek-v3", "--gpus", "8", "--gpu", "h200-141gb", "--weight-precision",
                        "fp8", "--context", "32768", "--batch", "4"])
    assert j["kv_cache_bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272
    assert j["kv_cache_bytes"] == 70_272 * 32768 * 4
    assert j["kv_cache_bytes_per_gpu"] == j["kv_cache_bytes"] and j["kv_cache_replicas"] == 8
    _, fp8_kv = run_json(["--preset", "deepseek-v3", "--gpus", "8", "--gpu", "h200-141gb", "--weight-precision",
                          "fp8", "--context", "32768", "--batch", "4", "--kv-precision", "fp8"])
    assert fp8_kv["kv_cache_bytes"] == j["kv_cache_bytes"] // 2          # 1 B per element
    # 671B parameters at fp8 over 8 GPUs: about 84 GB each (shape-derived count / 8 plus replicated parts)
    assert 671e9 / 8 < j["weights_bytes_per_gpu"] < 671e9 / 8 * 1.02
    assert code == 0


def test_largest_batch_and_context_are_the_boundary():
    """Llama 3.1 70B, tp 8, H100 (90% of 85,520,809,984 B usable, vLLM's default): free = 76,968,728,985 -
    17,640,734,720 B; one 128K sequence holds 5,368,709,120 B per GPU, so floor(59,327,994,265/5,368,709,120)
    = 11 sequences. At batch 1 one token holds 2*80*1*128*2 = 40,960 B per GPU: floor(59,327,994,265/40,960)
    = 1,448,437.
    One more of either does not fit: checked with the cache formula and through the CLI's exit code."""
    a = llama70b(batch=1, context=131072)
    W, M = a.weights_bytes_per_gpu, a.usable_bytes_per_gpu
    assert (W, M) == (2 * PSI_TP8, H100_USABLE)
    assert a.max_batch == (H100_USABLE - W) // 5_368_709_120 == 11
    assert H100_USABLE == 76_968_728_985
    assert a.max_context == (H100_USABLE - W) // 40_960 == 1_448_437
    kv = lambda s, b: gqa_kv_per_gpu_bytes(L=L, p=1, g=G, t=8, d=D, s=s, b=b, e=2)
    assert W + kv(131072, a.max_batch) <= M < W + kv(131072, a.max_batch + 1)
    assert W + kv(a.max_context, 1) <= M < W + kv(a.max_context + 1, 1)
    base = ["--preset", "llama3.1-70b", "--gpus", "8"]
    assert run([*base, "--context", "131072", "--batch", "11"])[0] == 0
    assert run([*base, "--context", "131072", "--batch", "12"])[0] == 1
    assert run([*base, "--context", "1448437"])[0] == 0
    assert run([*base, "--context", "1448438"])[0] == 1


def test_decode_step_bound_is_bytes_read_over_hbm_bandwidth():
    """(W + KV_gpu)/B = (17,640,734,720 + 5,368,709,120) B / 3.35e12 B/s = 6.868 ms (H100 SXM)."""
    a = llama70b(batch=1, context=131072)
    expected = (2 * PSI_TP8 + ANCHOR_KV // 8) / 3.35e12
    assert a.decode_step_s_lower_bound == pytest.approx(expected, rel=1e-12)
    assert a.decode_step_s_lower_bound == pytest.approx(6.8685e-3, rel=1e-4)


def test_moe_decode_reads_only_the_experts_a_batch_touches():
    """DeepSeek-V3, batch 1, top-8 of 256 routed experts: W_read = W - W_e + ceil(W_e*8/256); with
    b*k >= E (batch 32: 256) every expert is read, W_read = W."""
    gpu = presets.gpu("h200-141gb")
    cluster = ClusterSpec(gpu=gpu, num_gpus=8, gpus_per_node=8, reserve_bytes=gpu.default_reserve_bytes)
    model = presets.model("deepseek-v3").model
    one = plan_serving(model, cluster, tp=8, pp=1, batch=1, context=4096, weight_precision="fp8")
    terms = {t.key: t for t in one.terms}
    W, W_e = one.weights_bytes_per_gpu, terms["serving/weights_experts_per_gpu"].value
    assert one.weights_read_bytes_per_gpu == W - W_e + -(-W_e * 8 // 256)
    assert one.decode_step_s_lower_bound == pytest.approx(
        (one.weights_read_bytes_per_gpu + one.kv_cache_bytes_per_gpu) / 4.8e12, rel=1e-12)
    full = plan_serving(model, cluster, tp=8, pp=1, batch=32, context=4096, weight_precision="fp8")
    assert full.weights_read_bytes_per_gpu == full.weights_bytes_per_gpu


def test_kv_heads_replicate_when_tp_exceeds_them_and_pp_splits_layers():
    """tp 16 > 8 kv heads: each GPU holds one head, 2*80*1*128*s*b*2 B (2 copies of each). tp 4, pp 2:
    2*40*2*128*s*b*2 B, and the last stage (head + final norm) outweighs the first (embedding) by h."""
    s = 32768
    wide = llama70b(gpus=16, batch=2, context=s)
    assert wide.kv_cache_bytes_per_gpu == 2 * 80 * 1 * 128 * s * 2 * 2 and wide.kv_replicas == 2
    gpu = presets.gpu("h100-80gb")
    cluster = ClusterSpec(gpu=gpu, num_gpus=8, gpus_per_node=8, reserve_bytes=gpu.default_reserve_bytes)
    piped = plan_serving(presets.model("llama3.1-70b").model, cluster, tp=4, pp=2, batch=2, context=s)
    assert piped.kv_cache_bytes_per_gpu == 2 * 40 * 2 * 128 * s * 2 * 2
    assert piped.stage == "last"
    assert piped.weights_bytes_per_gpu == 2 * (40 * (S_LAYER // 4 + R_LAYER) + V * H // 4 + H)
    assert mla_kv_per_gpu_bytes(L=61, p=1, r=512, d_r=64, s=1, b=1, e=2) == 70_272


def test_weights_that_do_not_fit_are_an_answer_exit_1():
    """Llama 3.1 70B on one H100: 2*70.55e9 B of bf16 weights > 75 GiB usable; nothing fits."""
    code, j = run_json(["--preset", "llama3.1-70b", "--gpus", "1", "--context", "8192"])
    assert code == 1 and not j["weights_fit"] and not j["fits"]
    assert j["max_batch"] == 0 and j["max_context"] == 0
    code, out, _ = run(["--preset", "llama3.1-70b", "--gpus", "1", "--context", "8192"])
    assert code == 1 and "does not fit" in out and "the weights alone" in out


@pytest.mark.parametrize("argv, message", [
    (["--preset", "llama3.1-70b", "--gpus", "8", "--tp", "3"], "tp x pp"),
    (["--layers", "2", "--hidden", "768", "--heads", "12", "--kv-heads", "4", "--vocab", "100", "--context", "128",
      "--gpus", "6"], "kv heads (4) and tp=6"),
    (["--preset", "llama3.1-70b", "--gpus", "6"], "attention heads (64) must be divisible by tp=6"),
    (["--preset", "llama3.1-70b", "--gpus", "8", "--weight-precision", "int2"], "--weight-precision"),
    (["--preset", "llama3.1-70b", "--gpus", "8", "--batch", "0"], "--batch"),
    (["--preset", "llama3.1-70b", "--gpus", "8", "--pp", "3"], "pp=3"),
    (["--preset", "gpt3-125m", "--gpus", "1", "--context", "4096"], "learned position table"),
    (["--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "100", "--gpus", "1"], "--context"),
])
def test_bad_input_is_one_line_exit_2(argv, message):
    code, out, err = run(argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_text_and_markdown_show_each_number_with_its_formula_and_source():
    for fmt in ("text", "markdown"):
        code, out, _ = run(["--preset", "llama3.1-70b", "--gpus", "8", "--context", "131072", "--format", fmt])
        assert code == 0
        assert "2*L*g*d*s*b*e = 42,949,672,960 B = 42.9 GB" in out
        assert "DeepSeek-V2 Sec. 2.1.4, Table 1" in out and "Pope et al. Sec. 2" in out
        assert "verdict: fits" in out


def test_json_carries_the_contract_keys_and_the_api_answers_the_same():
    from fitplan.service import respond
    from fitplan.web.schema import build_request, fields_payload
    argv = ["--preset", "llama3.1-70b", "--gpus", "8", "--context", "131072", "--batch", "2", "--kv-precision",
            "fp8", "--weight-precision", "int4", "--tp", "8", "--pp", "1"]
    code, j = run_json(argv)
    assert set(CONTRACT) <= set(j)
    assert all(isinstance(j[k], int) for k in CONTRACT[:-1]) and isinstance(j["decode_step_s_lower_bound"], float)
    body = {"preset": "llama3.1-70b", "gpus": 8, "context": 131072, "batch": 2, "kv_precision": "fp8",
            "weight_precision": "int4", "tp": 8, "pp": 1}
    reply = respond(build_request("infer", body))
    assert reply.exit_code == code and json.loads(reply.text) == j
    keys = {f["key"] for f in fields_payload()["infer"]}
    assert {"batch", "context", "weight_precision", "kv_precision", "tp", "pp", "gpus", "reserve"} <= keys
    assert not {"seq_len", "dp", "zero", "micro_batch"} & keys


def test_reserve_is_the_serving_margin():
    """--reserve 20 GiB leaves 85,520,809,984 - 20 GiB = 64,045,973,504 B (below vLLM's 90%):
    floor((64,045,973,504 - W)/5,368,709,120) = 8 sequences at 128K."""
    _, j = run_json(["--preset", "llama3.1-70b", "--gpus", "8", "--context", "131072", "--reserve", "20 GiB"])
    assert j["usable_bytes_per_gpu"] == H100_BYTES - 20 * GiB == 64_045_973_504
    assert j["max_batch"] == (H100_BYTES - 20 * GiB - 2 * PSI_TP8) // 5_368_709_120 == 8


def test_core_refuses_a_layout_that_is_not_the_gpu_count():
    gpu = presets.gpu("h100-80gb")
    cluster = ClusterSpec(gpu=gpu, num_gpus=8, gpus_per_node=8, reserve_bytes=0)
    with pytest.raises(SpecError, match="tp x pp"):
        plan_serving(presets.model("llama3.1-8b").model, cluster, tp=4, pp=1, batch=1, context=8192)
