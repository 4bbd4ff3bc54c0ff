"""Fine-tuning with LoRA and QLoRA (fitplan.memory.finetune): adapters, the frozen base's bytes, what a frozen
layer still stores, the FLOPs, the data-parallel traffic, and the command line."""
import io
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from fitplan import presets
from fitplan.cli import main
from fitplan.counts import params as P
from fitplan.explain import RAW
from fitplan.memory import activations as A
from fitplan.memory import finetune as FT
from fitplan.memory.breakdown import Setup, Shapes, busiest_total, evaluate, stage_at
from fitplan.memory.events import stage_timeline
from fitplan.search import SETTINGS, default_space, search
from fitplan.specs import ClusterSpec, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.timing.breakdown import evaluate_step
from fitplan.timing.work import step_flops

MODEL = presets.model("llama2-7b").model        # h 4096, 32 heads (MHA), ffn 11008, SwiGLU, 32 layers
LORA = dict(finetune="lora", lora_rank=8, lora_targets="qkv,o,mlp")


def setup(*, gpus=1, **training):
    t = TrainingSpec(seq_len=2048, recipe=presets.recipe("mixed-adam"), global_batch=16, dropout=False,
                     attention_kernel="flash", **{**LORA, **training})
    return Setup(MODEL, t, ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=gpus, gpus_per_node=8,
                                       reserve_bytes=0))


def test_adapter_parameters_by_target():
    """r*(d_in + d_out) per adapted matrix: q, k, v (h -> h each), o (h -> h), gate, up (h -> f), down (f -> h)."""
    h, f, r = 4096, 11008, 8
    for targets, D in (("qkv", 3 * 2 * h), ("o", 2 * h), ("mlp", 3 * (h + f)), ("qkv,o,mlp", 8 * h + 3 * (h + f))):
        tr = replace(setup().training, lora_targets=targets)
        assert FT.adapter_dims(MODEL, tr)[0] == D
    b = evaluate(setup(), ParallelConfig())
    assert {t.key: t.value for t in b.terms}["params/lora_adapters"] == 32 * r * (8 * h + 3 * (h + f)) == 19_988_480


def test_states_are_the_frozen_base_and_the_adapters():
    b = evaluate(setup(), ParallelConfig())
    P_a = 19_988_480
    lin = 32 * (4 * 4096**2 + 3 * 4096 * 11008)
    assert b.parts["states/weights"] == 2 * (P.num_params(MODEL) + P_a)          # lora: the recipe's bf16 base
    assert (b.parts["states/grads"], b.parts["states/master"], b.parts["states/optimizer"]) == (2 * P_a, 4 * P_a,
                                                                                              8 * P_a)
    q = evaluate(setup(finetune="qlora"), ParallelConfig())
    assert q.parts["states/weights"] == (lin // 2 + lin // 64 + 4 * (lin // 16384)
                                         + 2 * (P.num_params(MODEL) - lin) + 2 * P_a)
    i8 = evaluate(setup(base_precision="int8"), ParallelConfig())
    assert i8.parts["states/weights"] == lin + 2 * (P.num_params(MODEL) - lin) + 2 * P_a
    assert q.parts["runtime/dequant_workspace"] == i8.parts["runtime/dequant_workspace"] == 2 * 4096 * 11008
    assert b.parts["runtime/dequant_workspace"] == 0


def test_zero_shards_the_adapters_and_zero3_the_base():
    P_a = 19_988_480
    z2 = evaluate(setup(gpus=8), ParallelConfig(dp=8, zero=ZeroStage.OS_G))
    assert z2.parts["states/grads"] == 2 * P_a // 8 and z2.parts["states/weights"] == 2 * (P.num_params(MODEL) + P_a)
    z3 = evaluate(setup(gpus=8), ParallelConfig(dp=8, zero=ZeroStage.OS_G_P))
    assert z3.parts["states/weights"] == 2 * (P.num_params(MODEL) + P_a) // 8


def test_a_layer_with_every_target_stores_the_full_layer_plus_the_adapters_intermediates():
    """With adapters on every matrix every input a trained layer keeps is kept again (by the A factors), and each
    of the 7 adapters adds its rank-r intermediate: e*s*b*r per adapter."""
    s = setup()
    sh = Shapes.of(s)
    for rc in (Recompute.NONE, Recompute.SELECTIVE):
        full = A.per_layer_bytes(**sh.kw(), b=2, t=1, c=1, sp=False, recompute=rc)
        lora = FT.lora_layer_bytes(**sh.kw(), **FT.lora_kw(s), b=2, t=1, c=1, sp=False, recompute=rc)
        assert lora - full == 2 * 2048 * 2 * 8 * 7


def test_frozen_matrices_keep_no_input():
    """Adapters on q, k, v only: LN2's output (e*sbh), the output projection's input (e*sb*q) and the down
    projection's input (e*sbf) are not kept."""
    s = setup(lora_targets="qkv")
    sh = Shapes.of(s)
    full = A.per_layer_bytes(**sh.kw(), b=1, t=1, c=1, sp=False, recompute=Recompute.NONE)
    lora = FT.lora_layer_bytes(**sh.kw(), **FT.lora_kw(s), b=1, t=1, c=1, sp=False, recompute=Recompute.NONE)
    assert full - lora == 2 * 2048 * (4096 + 4096 + 11008) - 2 * 2048 * 8 * 3


def test_full_recompute_keeps_the_layer_input():
    b = evaluate(setup(), ParallelConfig(recompute=Recompute.FULL))
    assert b.parts["activations/layers"] == 32 * 2 * 2048 * 4096
    assert b.parts["activations/output"] == 2 * 2048 * 4096 + 4 * 2048 * 32000   # the frozen head keeps no input
    assert b.parts["activations/embedding"] == 0                                  # no dropout, no token ids


def test_lora_flops_skip_the_frozen_weight_gradients():
    s, full = setup(), replace(setup(), training=replace(setup().training, finetune="full"))
    f = step_flops(RAW, s, "x", B=1, L=32, recompute=Recompute.NONE)
    g = step_flops(RAW, full, "x", B=1, L=32, recompute=Recompute.NONE)
    adapters = 32 * 2 * 2048 * 8 * FT.adapter_dims(MODEL, s.training)[0]
    logits = 2 * 2048 * 4096 * 32000
    assert f["forward"] == g["forward"] + adapters
    base_linear = 32 * 2 * 2048 * FT.linear_params(MODEL)
    assert f["backward"] == 2 * f["forward"] - base_linear - logits
    assert f["model"] == f["forward"] + f["backward"]


def test_data_parallel_reduces_only_the_adapters():
    st = evaluate_step(setup(gpus=8), ParallelConfig(dp=8, zero=ZeroStage.OS))
    full = evaluate_step(replace(setup(gpus=8), training=replace(setup(gpus=8).training, finetune="full")),
                         ParallelConfig(dp=8, zero=ZeroStage.OS))
    assert st.comm["dp"].bytes_per_step < full.comm["dp"].bytes_per_step / 100


def test_vectorized_equals_exact():
    s = setup(gpus=8, finetune="qlora")
    configs = [ParallelConfig(tp=t, pp=p, dp=8 // (t * p), zero=ZeroStage.OS_G_P, recompute=Recompute.SELECTIVE)
               for t, p in ((1, 1), (2, 1), (1, 2), (2, 2), (8, 1))]
    arrays = {k: np.array([getattr(c, k) for c in configs], dtype=np.float64)
              for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages")}
    grid = SimpleNamespace(**arrays, **{n: getattr(configs[0], n) for n in SETTINGS}, zero=ZeroStage.OS_G_P,
                           sequence_parallel=False, recompute=Recompute.SELECTIVE)
    assert list(busiest_total(s, grid)) == [evaluate(s, c).per_gpu_bytes for c in configs]


def test_the_search_plans_a_single_gpu_qlora_fine_tune():
    r = search(setup(finetune="qlora"), default_space(1, micro_batch=4), top=1)
    assert r.feasible and r.suggestions[0].config.recompute is Recompute.NONE


@pytest.mark.parametrize("argv, words", [
    (["--lora-rank", "16"], "--lora-rank: adapters need --finetune lora or qlora"),
    (["--preset", "mixtral-8x7b", "--finetune", "lora"], "mixture-of-experts"),
    (["--finetune", "lora", "--lora-targets", "qkv,ffn"], "not a comma-separated list of qkv, o, mlp"),
    (["--finetune", "lora", "--recompute", "op"], "--recompute op is not modelled with --finetune lora"),
])
def test_cli_refusals(argv, words):
    base = ["plan", "--gpus", "8"] + ([] if "--preset" in argv else ["--preset", "llama2-7b"])
    err = io.StringIO()
    assert main(base + argv, out=io.StringIO(), err=err) == 2
    assert words in err.getvalue() and err.getvalue().count("\n") == 1


def test_cli_seed_report_and_json():
    out = io.StringIO()
    assert main(["plan", "--preset", "llama2-7b", "--gpus", "1", "--finetune", "qlora", "--lora-rank", "16"],
                out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    assert "finetune qlora: frozen base (linear weights nf4), LoRA rank 16 on qkv, o, mlp" in text
    assert "frozen base: " in text and "adapters: 39,976,960 parameters" in text
    out = io.StringIO()
    main(["plan", "--preset", "llama2-7b", "--gpus", "8", "--finetune", "lora", "--suggest", "--json"], out=out,
         err=io.StringIO())
    data = json.loads(out.getvalue())
    assert data["training"]["finetune"] == {"mode": "lora", "lora_rank": 8, "lora_targets": ["qkv", "o", "mlp"],
                                            "base_precision": "recipe"}
    assert data["feasible"] and data["lower_bound"]["per_gpu_bytes"] <= data["suggestions"][0]["per_gpu_bytes"]


def test_exporters_refuse_adapters():
    for fmt in ("megatron", "deepspeed", "torchtitan"):
        out = io.StringIO()
        code = main(["export", "--preset", "llama2-7b", "--gpus", "8", "--zero", "1", "--finetune", "lora",
                     "--format", fmt], out=out, err=io.StringIO())
        assert code == 1 and "--finetune lora: the adapters and the frozen base are set up in code" in out.getvalue()


def test_qlora_405b_under_fsdp_gathers_the_packed_base():
    """Llama 3.1 405B, QLoRA (NF4 base, rank 8 on qkv, o, mlp), ZeRO-3 over 8 H100s, s = 2048, b = 1, full
    recompute. FSDP-QLoRA stores the packed 4-bit data in a float dtype (bitsandbytes quant_storage), so FSDP
    shards and all-gathers it as it is; the quantization constants are not a parameter (Params4bit.quant_state):
    every GPU keeps them whole (fitplan.memory.finetune, docs/formulas.md#lora-and-qlora).

    One layer (t = 1): P_layer = 3,187,703,808 base parameters, of them P_lin = 2*16384^2 + 2*16384*1024 +
    3*16384*53248 = 3,187,671,040 linear weights and 32,768 norm weights; adapters P_a = 8*(3*16384 + 16384 +
    2*1024 + 16384 + 16384 + 3*(16384 + 53248)) = 8*309,248 = 2,473,984.
      W_layer = P_lin/2 + 2*(P_layer - P_lin) + 2*P_a = 1,593,835,520 + 65,536 + 4,947,968 = 1,598,849,024
      T_layer = P_a: only the adapters are trained, g*P_a = 4,947,968 B of gradients (the base has none)
    runtime/fsdp_buffers, a layer's backward: 2*W_layer + G_layer = 3,202,646,016 B (2.98 GiB); before, bf16
    weights and gradients of every parameter: 3*2*P_layer = 19,126,222,848 B (17.81 GiB, the issue's figure).
    The output unit (final norm + head, 2,101,362,688, frozen, at w = 2): the loss's backward holds
    W_head + k*W_layer = 4,202,725,376 + 1,598,849,024 = 5,801,574,400 B (5.40 GiB; before 14,780,858,368),
    now the larger of the two moments, so the breakdown shows it.
    states/weights: the 126 layers' P_lin = 401,646,551,040 weights keep C_q = P_lin/64 + 4*P_lin/16384 =
    6,275,727,360 + 98,058,240 = 6,373,785,600 B of constants whole; the rest is sharded over 8:
    (P_lin/2 + 2*(405,853,388,800 - P_lin) + 2*311,721,984)/8 = 209,860,395,008/8 = 26,232,549,376, so
    32,606,334,976 B (30.37 GiB; before 27,029,272,576, every byte sharded).
    Peak: 56.10 GiB (a layer's backward) before, 47.92 GiB (the loss's backward: 51,458,740,224 B) now."""
    model = presets.model("llama3.1-405b").model
    t = TrainingSpec(seq_len=2048, recipe=presets.recipe("mixed-adam"), global_batch=16, dropout=False,
                     attention_kernel="flash", finetune="qlora", lora_rank=8, lora_targets="qkv,o,mlp")
    s = Setup(model, t, ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=8, gpus_per_node=8, reserve_bytes=0))
    c = ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, micro_batch=1, recompute=Recompute.FULL)
    b = evaluate(s, c)
    terms = {term.key: term.value for term in b.terms}
    P_layer, P_lin, P_a, P_head = 3_187_703_808, 3_187_671_040, 2_473_984, 2_101_362_688
    assert (terms["params/fsdp_layer_unit"], terms["params/linear_weights_layer"],
            terms["params/lora_adapters_layer"], terms["params/fsdp_output_unit"]) == (P_layer, P_lin, P_a, P_head)
    assert P_lin == 2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 and P_a == 8 * 309_248
    W_layer = P_lin // 2 + 2 * (P_layer - P_lin) + 2 * P_a
    assert terms["runtime/fsdp_layer_weights"] == W_layer == 1_598_849_024
    assert terms["runtime/fsdp_buffers"] == 2 * W_layer + 2 * P_a == 3_202_646_016
    assert terms["runtime/fsdp_buffers_loss"] == 2 * P_head + W_layer == 5_801_574_400
    assert b.parts["runtime/fsdp_buffers"] == 5_801_574_400          # the larger moment's
    assert 3 * 2 * P_layer == 19_126_222_848 and round(19_126_222_848 / 2**30, 2) == 17.81   # before
    lin = 126 * P_lin
    C_q = lin // 64 + 4 * (lin // 16384)
    assert terms["states/base_quant_constants"] == C_q == 6_373_785_600
    shard = lin // 2 + 2 * (P.num_params(model) - lin) + 2 * 126 * P_a
    assert terms["states/frozen_sharded"] == shard == 209_860_395_008
    assert b.parts["states/weights"] == shard // 8 + C_q == 32_606_334_976
    # ZeRO-3's data-parallel messages: the all-gather sends W_shard (no constants), the reduction the adapters'
    grads, weights = FT.dp_messages(RAW, s, c, stages=[stage_at(RAW, model, c, 0)], psi=P.num_params(model))
    assert weights == shard and grads == 2 * 126 * P_a
    # the peak: the loss's backward, states + the other terms as before + these FSDP buffers
    held = b.peak.held
    assert b.peak.phase == "backward of micro-batch 1 (loss)"
    assert held["runtime/fsdp_buffers"] == 5_801_574_400 and held["states/weights"] == 32_606_334_976
    assert b.per_gpu_bytes == sum(held.values()) == 51_458_740_224 and round(b.per_gpu_bytes / 2**30, 2) == 47.92
    assert max(e.bytes for e in stage_timeline(s, b)) == b.per_gpu_bytes


def test_qlora_under_fsdp_keeps_the_packed_base_gathered_and_sends_it():
    """With pipeline stages ZeRO-3 keeps every layer gathered (runtime/gathered_weights): the stage's frozen
    base as sharded, packed, not w*psi (63 of the 126 layers on the first stage, the embedding)."""
    model = presets.model("llama3.1-405b").model
    t = TrainingSpec(seq_len=2048, recipe=presets.recipe("mixed-adam"), global_batch=16, dropout=False,
                     attention_kernel="flash", finetune="qlora", lora_rank=8, lora_targets="qkv,o,mlp")
    s = Setup(model, t, ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=16, gpus_per_node=8, reserve_bytes=0))
    b = evaluate(s, ParallelConfig(dp=8, pp=2, zero=ZeroStage.OS_G_P, micro_batch=1, recompute=Recompute.FULL))
    terms = {term.key: term.value for term in b.terms}
    assert b.parts["runtime/gathered_weights"] == terms["states/frozen_sharded"] == 104_930_181_120
    lin, P_a = 63 * 3_187_671_040, 63 * 2_473_984
    assert terms["params/stage_linear_weights"] == lin
    assert 104_930_181_120 == lin // 2 + 2 * (terms["params/stage"] - lin) + 2 * P_a
    # pipelined: the adapters' gradients accumulate unsharded (runtime/accumulated_grads, g*P_a*(1 - 1/8) beyond
    # their shard), and with g = w = 2 autograd's gradient is the accumulator: FSDP's buffers hold nothing more
    assert b.parts["runtime/accumulated_grads"] == 2 * P_a * 7 // 8 and b.parts["runtime/fsdp_buffers"] == 0
