"""`fitplan infer --server vllm|sglang`: the KV cache each server sets aside at start-up, by its
own rule, worked by hand beside each test. All byte and block counts are exact integers; a
concurrency is a float division, compared to 1e-12.

vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory; kv_cache_utils.py): pool =
floor(u*C) - W - A with A the profile run's activation peak; blocks = pool // (16 * KV_tok).
SGLang (model_runner.py profile_max_num_token): pool = floor(f*M0) - W with M0 the free memory
before the weights; tokens = pool // KV_tok. docs/engines.md#serving-servers derives both."""
import io
import json

import pytest

from fitplan.cli import main

# Llama 3.1 8B (HF config.json): L 32, h 4096, 32 heads, 8 kv heads of 128, ffn 14336 (SwiGLU), V 128256.
L, H, G, D, F, V = 32, 4096, 8, 128, 14336, 128256
PSI = 8_030_261_248                   # fitplan's shape count (tests/unit/test_infer.py derives the 70B's)
W = 2 * PSI                           # bf16 weights: 16,060,522,496 B
KV_TOK = 2 * L * G * D * 2            # one token's keys and values, all layers, bf16: 131,072 B
H100 = 81_559 * 2**20                 # h100-80gb: what nvidia-smi reports, 85,520,809,984 B
CTX = 400 * 2**20                     # --cuda-context's default


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(["infer", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def server_json(*argv):
    code, out, err = run(*argv, "--json")
    assert code in (0, 1), err
    return code, json.loads(out)["server"]


LLAMA_H100 = ("--preset", "llama3.1-8b", "--gpus", "1", "--gpu", "h100-80gb", "--context", "8192", "--batch", "16")


def test_vllm_llama31_8b_on_one_h100_by_hand():
    """vllm serve's defaults on a GPU of >= 70 GiB that is no A100 (arg_utils.py): T = 8192 batched
    tokens, R = 1024 sequences. The profile's peak is the sampler warm-up's, not the forward's:
      forward = T*2*(2h + max(q + 2kv + o + h, 3f)) = 8192*2*(8192 + max(16384, 43008)) = 838,860,800 B
      sampler = (T + 2R)*h*2 + R*V*28 = 83,886,080 + 3,677,356,032 = 3,761,242,112 B (3.50 GiB)
      pool    = floor(0.9*85,520,809,984) - 16,060,522,496 - 3,761,242,112 = 57,146,964,377 B (53.22 GiB)
      blocks  = 57,146,964,377 // (16*131,072) = 27,249; 435,984 tokens
    Maximum concurrency for 8,192 tokens per request: 27,249 / 512 = 53.22x, so 53 requests fit."""
    code, s = server_json(*LLAMA_H100, "--server", "vllm")
    assert s["settings"] == {"gpu_memory_utilization": 0.9, "block_size": 16, "max_num_batched_tokens": 8192,
                             "max_num_seqs": 1024}
    forward = 8192 * 2 * (2 * H + max(H + 2 * G * D + H + H, 3 * F))
    sampler = (8192 + 2 * 1024) * H * 2 + 1024 * V * 28
    assert (forward, sampler) == (838_860_800, 3_761_242_112)
    terms = {t["key"]: t["value"] for t in s["terms"]}
    assert terms["servers/vllm/forward_peak"] == forward and terms["servers/vllm/sampler_peak"] == sampler
    assert s["activation_peak_bytes"] == sampler
    pool = int(0.9 * H100) - W - sampler
    assert s["kv_pool_bytes"] == pool == 57_146_964_377
    assert s["kv_token_bytes"] == KV_TOK == 131_072 and s["block_tokens"] == 16
    assert s["kv_blocks"] == pool // (16 * KV_TOK) == 27_249
    assert s["kv_tokens"] == s["max_context"] == 27_249 * 16 == 435_984
    assert s["max_concurrency"] == pytest.approx(27_249 / 512, rel=1e-12)
    assert s["max_batch"] == 53 and code == 0 and s["fits"]
    assert s["log"] == ["Available KV cache memory: 53.22 GiB", "GPU KV cache size: 435,984 tokens",
                        "Maximum concurrency for 8,192 tokens per request: 53.22x"]


def test_sglang_llama31_8b_on_one_h100_by_hand():
    """SGLang's defaults for 81,559 MiB (server_args.py, H100 row): chunked prefill 8192, CUDA-graph
    batch 256, reserved = max(512 + 1.5*8192 + 2*256 + 1*1/8*1024, 10240) = 13,440 MiB, so
    f = round((81,559 - 13,440)/81,559, 3) = 0.835. Free before the weights M0 = C - 400 MiB context
    = 85,101,379,584 B; pool = floor(0.835*M0) - W; tokens = pool // 131,072, one token a page."""
    code, s = server_json(*LLAMA_H100, "--server", "sglang")
    assert round((81_559 - 13_440) / 81_559, 3) == 0.835
    assert s["settings"] == {"mem_fraction_static": 0.835, "page_size": 1, "chunked_prefill_size": 8192,
                             "cuda_graph_max_bs": 256}
    M0 = H100 - CTX
    pool = int(0.835 * M0) - W
    assert M0 == 85_101_379_584 and s["kv_pool_bytes"] == pool
    assert round(pool / 2**30, 2) == 51.22
    tokens = pool // KV_TOK
    assert s["kv_blocks"] == s["kv_tokens"] == s["max_context"] == tokens == 419_610
    assert s["block_tokens"] == 1 and s["max_batch"] == tokens // 8192 == 51 and code == 0
    half = tokens * KV_TOK / 2 / 2**30   # K and V, each half of the cache
    assert s["log"] == [f"KV Cache is allocated. #tokens: {tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB"]


def test_settings_given_replace_the_defaults():
    """--gpu-memory-utilization 0.8 --max-num-batched-tokens 2048 --max-num-seqs 128: the sampler
    warm-up is (2048 + 256)*4096*2 + 128*128256*28 = 18,874,368 + 459,669,504 = 478,543,872 B; the
    forward 2048*2*51200 = 209,715,200 B. SGLang's --mem-fraction-static 0.7: floor(0.7*M0) - W."""
    _, s = server_json(*LLAMA_H100, "--server", "vllm", "--gpu-memory-utilization", "0.8",
                       "--max-num-batched-tokens", "2048", "--max-num-seqs", "128")
    A = (2048 + 256) * H * 2 + 128 * V * 28
    assert A == 478_543_872 and s["activation_peak_bytes"] == A
    assert s["kv_pool_bytes"] == int(0.8 * H100) - W - A
    assert s["kv_blocks"] == s["kv_pool_bytes"] // (16 * KV_TOK)
    _, s = server_json(*LLAMA_H100, "--server", "sglang", "--mem-fraction-static", "0.7")
    assert s["kv_pool_bytes"] == int(0.7 * (H100 - CTX)) - W


def test_vllm_defaults_are_smaller_on_an_a100():
    """arg_utils.py keeps A100s (and GPUs under 70 GiB) at T = 2048, max_num_seqs 256: the sampler
    warm-up (2048 + 512)*4096*2 + 256*128256*28 = 20,971,520 + 919,339,008 = 940,310,528 B."""
    _, s = server_json("--preset", "llama3.1-8b", "--gpus", "1", "--gpu", "a100-80gb", "--context", "8192",
                       "--server", "vllm")
    assert (s["settings"]["max_num_batched_tokens"], s["settings"]["max_num_seqs"]) == (2048, 256)
    assert s["activation_peak_bytes"] == 940_310_528
    assert s["kv_pool_bytes"] == int(0.9 * 80 * 2**30) - W - 940_310_528


def test_a_pipeline_takes_the_stage_with_the_fewest_blocks():
    """Llama 3.1 70B, tp 4 pp 2: each stage holds 40 layers; the first stage the embedding, the last
    the output head and the sampler warm-up. vLLM gives every rank the smallest block count, so the
    last stage binds; its KV_tok = 2*40*(8/4)*128*2 = 40,960 B."""
    _, s = server_json("--preset", "llama3.1-70b", "--gpus", "8", "--tp", "4", "--pp", "2", "--context", "131072",
                       "--server", "vllm")
    assert s["stage"] == "last" and s["kv_token_bytes"] == 2 * 40 * 2 * 128 * 2 == 40_960
    terms = {t["key"]: t["value"] for t in s["terms"]}
    assert terms["servers/vllm/sampler_peak"] > 0
    assert s["kv_blocks"] == s["kv_pool_bytes"] // (16 * 40_960)


def test_mla_caches_one_latent_per_token_as_serving_does():
    """DeepSeek-V3: 61 layers of (512 + 64) bf16 elements, the same on every tp rank: 70,272 B per token
    (fitplan.serving's MLA cache; vLLM's MLAAttentionSpec and SGLang's MLA cell size hold no factor 2)."""
    for server in ("vllm", "sglang"):
        _, s = server_json("--preset", "deepseek-v3", "--gpus", "8", "--gpu", "h200-141gb", "--weight-precision",
                           "fp8", "--context", "32768", "--batch", "4", "--server", server)
        assert s["kv_token_bytes"] == 61 * 576 * 2 == 70_272
        assert s["kv_tokens"] == s["kv_pool_bytes"] // 70_272 // s["block_tokens"] * s["block_tokens"]


def test_a_context_past_the_pool_is_an_answer_not_an_error():
    """vLLM refuses to start when one request of max_model_len needs more blocks than it has: exit 1,
    with the longest it could take. Llama 3.1 70B on 2 x H100 at 1M tokens needs 1M/16 blocks."""
    code, out, err = run("--preset", "llama3.1-70b", "--gpus", "2", "--gpu", "h100-80gb", "--context", "1048576",
                         "--server", "vllm")
    assert code == 1 and err == ""
    assert "vLLM would refuse to start" in out
    _, s = server_json("--preset", "llama3.1-70b", "--gpus", "2", "--gpu", "h100-80gb", "--context", "1048576",
                       "--server", "vllm")
    assert not s["fits"] and s["max_context"] == s["kv_blocks"] * 16 < 1_048_576


def test_without_server_infer_is_unchanged():
    """No --server: no "server" key, and every key infer printed before is there as it was."""
    code, out, _ = run(*LLAMA_H100, "--json")
    j = json.loads(out)
    assert code == 0 and "server" not in j and j["max_batch"] == 56 and j["max_context"] == 29_043


@pytest.mark.parametrize("argv,needle", [
    (("--server", "tgi"), "--server: invalid choice 'tgi'"),
    (("--server", "vllm", "--kv-precision", "int8"), "vllm has no int8 KV cache"),
    (("--server", "sglang", "--kv-precision", "int8"), "sglang has no int8 KV cache"),
    (("--gpu-memory-utilization", "0.8"), "add --server vllm"),
    (("--mem-fraction-static", "0.8"), "add --server sglang"),
    (("--server", "sglang", "--max-num-seqs", "64"), "--max-num-seqs is vLLM's setting"),
    (("--server", "vllm", "--mem-fraction-static", "0.8"), "--mem-fraction-static is SGLang's setting"),
    (("--server", "vllm", "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization"),
    (("--server", "vllm", "--max-num-batched-tokens", "64", "--max-num-seqs", "128"), "max_num_batched_tokens >= "),
])
def test_bad_server_input_is_one_line_exit_2(argv, needle):
    code, out, err = run("--preset", "llama3.1-8b", "--gpus", "1", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_the_text_report_prints_the_budget_and_the_log_lines():
    code, out, _ = run(*LLAMA_H100, "--server", "vllm")
    assert code == 0
    assert "vLLM's KV cache budget per GPU" in out
    assert "27,249 blocks of 16 tokens" in out
    assert "log      Maximum concurrency for 8,192 tokens per request: 53.22x" in out
    assert "servers/vllm/kv_pool = 57,146,964,377 B" in out
