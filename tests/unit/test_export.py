"""fitplan.export: every export is parsed back (argparse for Megatron-LM, json for DeepSpeed,
tomllib and exec for torchtitan) and its values checked against the plan; plans a framework
cannot express come back as Unsupported with the reason."""
import argparse
import json
import re
import shlex
import sys
import tomllib
import types
from pathlib import Path

import pytest

from fitplan.errors import SpecError
from fitplan.export import FORMATS, Plan, export, make_plan
from fitplan.presets import MODELS, RECIPES
from fitplan.specs import ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.specs.parallel import RecomputeMethod, Schedule
from fitplan.files.hf import model_from_hf_config
from tests.unit.test_hf import EXAMPLES

LLAMA = MODELS["llama3.1-8b"].model
LLAMA_405B = MODELS["llama3.1-405b"].model      # 126 layers
DEEPSEEK = MODELS["deepseek-v3"].model          # MLA
GPT2 = model_from_hf_config(EXAMPLES / "gpt2")


def plan(model=LLAMA, *, recipe="mixed-adam", seq_len=8192, global_batch=512, act_bytes=2, dropout=True,
         gpus_per_node=8, attention_kernel="eager", **degrees):
    training = TrainingSpec(seq_len=seq_len, recipe=RECIPES[recipe], act_bytes=act_bytes, dropout=dropout,
                            attention_kernel=attention_kernel)
    return make_plan(model=model, training=training, parallel=ParallelConfig(**degrees), global_batch=global_batch,
                     gpus_per_node=gpus_per_node)


# ---------------------------------------------------------------- Megatron-LM

MEGATRON = json.loads((Path(__file__).parents[1] / "data" / "megatron_flags.json").read_text())
TYPES = {"int": int, "float": float, "str": str, None: str}


def megatron_parser() -> argparse.ArgumentParser:
    """Megatron-LM's own option list, read from megatron/training/arguments.py at the commit that
    tests/data/megatron_flags.json states (877 flags, each with its action, type, nargs, default
    and choices): an exported flag that Megatron does not declare, a missing value or a value
    outside the choices fails the parse. Enum choices are stored as "AttnBackend.flash"; Megatron's
    type function takes the member's name, so the name is the choice."""
    p = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False, add_help=False)
    for flag, a in MEGATRON["flags"].items():
        if a["action"] in ("store_true", "store_false"):
            p.add_argument(flag, action=a["action"], dest=a["dest"])
        elif a["action"] == "store":
            choices = [c.split(".", 1)[1] if c.startswith("AttnBackend.") else c for c in a.get("choices") or []]
            kind, default = TYPES[a["type"]], a["default"]
            if isinstance(default, str) and kind is not str:   # a list default, stored as its text
                default = None
            p.add_argument(flag, dest=a["dest"], nargs=a["nargs"], default=default,
                           type=kind, choices=[kind(c) for c in choices] or None)
    return p


def parse_megatron(result):
    assert result.ok, result
    body = result.text.split("FITPLAN_ARGS=(\n", 1)[1].rsplit("\n)", 1)[0]
    assert shlex.split(body) == result.data          # the script and the argv agree
    return megatron_parser().parse_args(result.data)


def test_megatron_llama_tp_pp_interleaved_zero1_selective():
    p = plan(tp=2, pp=2, dp=16, zero=ZeroStage.OS, sequence_parallel=True, recompute=Recompute.SELECTIVE,
             micro_batch=1, virtual_stages=2)
    a = parse_megatron(export("megatron", p))
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size) == (2, 2, 1)
    # Megatron derives dp = world / (tp*pp*cp) = 64 / 4 = 16, the plan's
    assert p.num_gpus // (a.tensor_model_parallel_size * a.pipeline_model_parallel_size * a.context_parallel_size) == 16
    assert a.sequence_parallel
    assert a.num_layers_per_virtual_pipeline_stage == 8               # L/(pp*v) = 32/(2*2)
    assert a.use_distributed_optimizer and not a.use_megatron_fsdp   # ZeRO-1
    assert (a.micro_batch_size, a.global_batch_size) == (1, 512)     # 512/(1*16) = 32 micro-batches, a multiple of pp
    assert a.recompute_granularity == "selective" and a.recompute_modules == ["core_attn"]
    assert a.recompute_method is None
    assert a.bf16 and a.grad_reduce_in_bf16                           # mixed-adam: 2-byte grads
    assert (a.num_layers, a.hidden_size, a.ffn_hidden_size, a.num_attention_heads) == (32, 4096, 14336, 32)
    assert a.group_query_attention and a.num_query_groups == 8 and a.kv_channels is None
    assert (a.seq_length, a.max_position_embeddings, a.vocab_size) == (8192, 131072, 128256)   # Llama 3.1: 128K
    assert (a.position_embedding_type, a.normalization) == ("rope", "RMSNorm")
    assert a.swiglu and not a.add_bias_linear and a.untie_embeddings_and_output_weights
    assert (a.hidden_dropout, a.attention_dropout) == (0.1, 0.1)      # Megatron's defaults: dropout on


@pytest.mark.parametrize(("zero", "strategy"), [(ZeroStage.OS_G, "optim_grads"),
                                                (ZeroStage.OS_G_P, "optim_grads_params")])
def test_megatron_gpt2_fsdp_full_recompute(zero, strategy):
    p = plan(GPT2, recipe="megatron-fp32-grad", seq_len=1024, global_batch=64, dropout=False, dp=8, zero=zero,
             recompute=Recompute.FULL, micro_batch=4)
    result = export("megatron", p)
    a = parse_megatron(result)
    assert a.use_megatron_fsdp and a.data_parallel_sharding_strategy == strategy
    assert a.use_distributed_optimizer and a.gradient_accumulation_fusion is False and a.ckpt_format == "fsdp_dtensor"
    assert (a.recompute_granularity, a.recompute_method, a.recompute_num_layers) == ("full", "uniform", 1)
    assert a.bf16 and not a.grad_reduce_in_bf16                       # 4-byte main grads, Megatron's default
    assert (a.num_layers, a.hidden_size, a.ffn_hidden_size, a.num_attention_heads) == (12, 768, 3072, 12)
    assert not a.group_query_attention and not a.swiglu
    assert (a.position_embedding_type, a.normalization) == ("learned_absolute", "LayerNorm")
    assert a.add_bias_linear and not a.untie_embeddings_and_output_weights      # biases, tied
    assert (a.hidden_dropout, a.attention_dropout) == (0.0, 0.0)
    # 50257 rows pad to 50304 = 393 x 128; 47 rows x 768 = 36,096 parameters (tied: one matrix)
    assert any("50,257 to 50,304" in n and "36,096 parameters" in n for n in result.notes)


def test_megatron_fp8_and_sgd():
    a = parse_megatron(export("megatron", plan(recipe="fp8", dp=8, zero=ZeroStage.OS)))
    assert a.bf16 and a.fp8 == "hybrid" and a.fp8_param_gather and not a.grad_reduce_in_bf16
    a = parse_megatron(export("megatron", plan(recipe="sgd-momentum", dp=8)))
    assert a.optimizer == "sgd" and a.grad_reduce_in_bf16


def test_megatron_fp32():
    a = parse_megatron(export("megatron", plan(recipe="fp32-adam", act_bytes=4, dp=8)))
    assert not a.bf16 and not a.grad_reduce_in_bf16


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(recipe="bf16-adam", dp=8), "master_bytes = 0"),
    (dict(recipe="adam-8bit", dp=8), "optimizer moments (adam_m 1, adam_v 1 B/param)"),
    (dict(recipe="fp8", dp=8), "--fp8-param-gather) need the distributed optimizer"),
    (dict(recipe="fp32-adam", dp=8), "4-byte activations but the plan has act_bytes = 2"),
    (dict(seq_len=8194, cp=2, dp=4), "multiple of 2 x cp = 4"),   # 8194 % 2 == 0 passes compat, 8194 % 4 != 0
    (dict(model=GPT2, seq_len=2048, dp=8), "longer than the learned position table (1024)"),
])
def test_megatron_cannot_express(kwargs, needle):
    result = export("megatron", plan(**kwargs))
    assert not result.ok
    assert needle in result.message


def test_megatron_rope_past_the_table_raises_max_positions():
    """Llama 2's 4,096-token table trained at 16,384 tokens: RoPE has no table to outgrow, so Megatron is told
    the sequence length (Llama 3.1's own table is 131,072 and needs no raise)."""
    result = export("megatron", plan(MODELS["llama2-7b"].model, seq_len=16384, dp=8))
    assert parse_megatron(result).max_position_embeddings == 16384
    assert parse_megatron(export("megatron", plan(seq_len=16384, dp=8))).max_position_embeddings == 131072


def expand_layout(text: str) -> list[str]:
    """--pipeline-model-parallel-layout as Megatron-LM documents it: "," is cosmetic, "(x)*n"
    and then "c*n" repeat, "|" separates the model chunks."""
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m[1] * int(m[2]), text.replace(",", ""))
    return re.sub(r"(.)\*(\d+)", lambda m: m[1] * int(m[2]), text).split("|")


def megatron_chunks(a, L: int) -> tuple[int, ...]:
    """Transformer layers per model chunk (pipeline order) that Megatron-LM builds from these
    arguments (megatron/core/transformer/transformer_block.py get_num_layers_to_build), with
    its divisibility checks asserted."""
    pp = a.pipeline_model_parallel_size
    if a.pipeline_model_parallel_layout is not None:
        chunks = expand_layout(a.pipeline_model_parallel_layout)
        assert len(chunks) % pp == 0 and "".join(chunks).count("t") == L
        assert chunks[0].startswith("E") and chunks[-1].endswith("L") and "".join(chunks).count("E") == 1
        return tuple(c.count("t") for c in chunks)
    first, last = a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers
    units = L + a.account_for_embedding_in_pipeline_split + a.account_for_loss_in_pipeline_split
    if a.num_layers_per_virtual_pipeline_stage is not None:
        assert first is None and last is None and units % pp == 0
        v = units // pp // a.num_layers_per_virtual_pipeline_stage
    else:
        v = a.num_virtual_stages_per_pipeline_rank or 1
    if first is not None or last is not None:
        assert not (a.account_for_embedding_in_pipeline_split or a.account_for_loss_in_pipeline_split)
        middle = pp - (first is not None) - (last is not None)
        rest = L - (first or 0) - (last or 0)
        assert middle == 0 and rest == 0 or rest % middle == 0
        per = rest // middle if middle else 0
        stages = [per] * pp
        stages[0], stages[-1] = first if first is not None else per, last if last is not None else per
        assert all(n % v == 0 for n in stages)
        return tuple(stages[j % pp] // v for j in range(pp * v))
    assert units % (pp * v) == 0
    each = units // (pp * v)
    return tuple(each - (j == 0) * a.account_for_embedding_in_pipeline_split
                 - (j == pp * v - 1) * a.account_for_loss_in_pipeline_split for j in range(pp * v))


def test_megatron_llama3_405b_default_split_counts_the_embedding_and_the_head():
    """126 layers on 16 stages: 7, 8 x 14, 7 (fitplan's default split, Meta's run); (126 + 2)/16 = 8."""
    p = plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, zero=ZeroStage.OS)
    a = parse_megatron(export("megatron", p))
    assert a.account_for_embedding_in_pipeline_split and a.account_for_loss_in_pipeline_split
    assert a.decoder_first_pipeline_num_layers is None and a.pipeline_model_parallel_layout is None
    assert megatron_chunks(a, 126) == p.chunk_layers == (7,) + (8,) * 14 + (7,)


def test_megatron_pinned_ends():
    p = plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, first_stage_layers=7, last_stage_layers=7)
    result = export("megatron", p)
    assert result.data[result.data.index("--pipeline-model-parallel-size"):][:2] == ["--pipeline-model-parallel-size",
                                                                                    "16"]
    assert "--decoder-first-pipeline-num-layers 7\n    --decoder-last-pipeline-num-layers 7" in result.text
    a = parse_megatron(result)
    assert not a.account_for_embedding_in_pipeline_split
    assert megatron_chunks(a, 126) == p.chunk_layers
    a = parse_megatron(export("megatron", plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, first_stage_layers=6,
                                               last_stage_layers=8)))
    assert (a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers) == (6, 8)   # 112 = 14 x 8


def test_megatron_uneven_middle_is_a_layout():
    """First stage pinned to 5: the last takes the default share 7 and 114 layers remain for 14
    stages, 8 x 12 then 9 x 2, which --decoder-first/last cannot say (Megatron wants equal middles)."""
    p = plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, first_stage_layers=5)
    result = export("megatron", p)
    a = parse_megatron(result)
    assert a.pipeline_model_parallel_layout == "Et*5|(t*8|)*12,(t*9|)*2,t*7L"
    assert a.decoder_first_pipeline_num_layers is None and not a.account_for_loss_in_pipeline_split
    assert megatron_chunks(a, 126) == p.chunk_layers == p.stage_layers == (5,) + (8,) * 12 + (9, 9, 7)
    assert any("--pipeline-model-parallel-layout" in n for n in result.notes)


@pytest.mark.parametrize(("model", "degrees"), [
    (LLAMA, dict(tp=2, pp=2, dp=16, virtual_stages=2)),                 # even: --num-layers-per-virtual-pipeline-stage
    (LLAMA_405B, dict(tp=8, pp=16, virtual_stages=2)),                  # 3, 4 x 30, 3: account-for, 2 per rank
    (LLAMA_405B, dict(tp=8, pp=8, virtual_stages=2)),
    (LLAMA_405B, dict(tp=8, pp=8, virtual_stages=3)),                   # remainder on later chunks: a layout
    (LLAMA_405B, dict(tp=8, pp=4, first_stage_layers=30, last_stage_layers=30, virtual_stages=2)),
    (LLAMA_405B, dict(tp=8, pp=4, first_stage_layers=31, last_stage_layers=31, virtual_stages=2)),  # 31 odd: layout
    (LLAMA, dict(tp=2, pp=3, dp=8)),                                    # 32 on 3 stages
    (DEEPSEEK, dict(tp=8, pp=16)),                                      # 61 on 16: 2, 4 x 14, 3
    (MODELS["llama3.1-70b"].model, dict(tp=8, pp=6)),                   # 80 on 6: 13, 14 x 4, 13
    (MODELS["gpt3-175b"].model, dict(tp=8, pp=8)),                      # 96 on 8: 12 each, no flag
])
def test_megatron_builds_the_plans_layers_per_chunk(model, degrees):
    p = plan(model, seq_len=2048, sequence_parallel=True, **degrees)
    a = parse_megatron(export("megatron", p))
    assert megatron_chunks(a, model.num_layers) == p.chunk_layers
    assert sum(p.chunk_layers) == model.num_layers


def test_megatron_virtual_stages_flags():
    a = parse_megatron(export("megatron", plan(LLAMA_405B, tp=8, pp=16, virtual_stages=2, sequence_parallel=True)))
    assert a.num_virtual_stages_per_pipeline_rank == 2 and a.num_layers_per_virtual_pipeline_stage is None
    a = parse_megatron(export("megatron", plan(LLAMA, tp=2, pp=2, dp=16, virtual_stages=2, sequence_parallel=True)))
    assert a.num_layers_per_virtual_pipeline_stage == 8 and a.num_virtual_stages_per_pipeline_rank is None


@pytest.mark.parametrize(("zero", "instances"), [(ZeroStage.OS, 4), (ZeroStage.OS_G_P, 4)])
def test_megatron_hybrid_sharding(zero, instances):
    """--shard-degree 4 over dp x cp = 8 x 2 = 16 ranks: 16/4 = 4 distributed-optimizer instances."""
    a = parse_megatron(export("megatron", plan(dp=8, cp=2, zero=zero, shard_degree=4)))
    assert a.num_distributed_optimizer_instances == instances and a.use_distributed_optimizer
    a = parse_megatron(export("megatron", plan(dp=8, cp=2, zero=zero, shard_degree=16)))   # one group: the default
    assert a.num_distributed_optimizer_instances == 1   # Megatron's default: one instance


def test_megatron_recompute_norms_and_partial_full():
    a = parse_megatron(export("megatron", plan(dp=8, recompute=Recompute.NORMS)))
    assert (a.recompute_granularity, a.recompute_modules) == ("selective", ["layernorm"])
    a = parse_megatron(export("megatron", plan(DEEPSEEK, tp=8, pp=16, dp=2, zero=ZeroStage.OS,
                                               sequence_parallel=True, recompute=Recompute.NORMS)))
    assert a.recompute_modules == ["layernorm", "mla_up_proj"]
    for method in RecomputeMethod:
        a = parse_megatron(export("megatron", plan(dp=8, recompute=Recompute.FULL, recompute_num_layers=4,
                                                   recompute_method=method)))
        assert (a.recompute_granularity, a.recompute_method, a.recompute_num_layers) == ("full", method.value, 4)


def test_megatron_counts_recomputed_layers_per_chunk():
    """126 layers on 8 x 2 chunks: 7, 8 x 14, 7 per chunk, so a stage holds 15 or 16. Block 4 per
    stage is 2 per chunk. Uniform 4 keeps ceil(7/4) + ceil(8/4) = 4 = ceil(15/4) inputs (and 2 + 2 on
    16 layers), so it carries over; uniform 3 would keep 3 + 3 = 6 against the plan's ceil(15/3) = 5."""
    kw = dict(model=LLAMA_405B, tp=8, pp=8, virtual_stages=2, sequence_parallel=True, recompute=Recompute.FULL,
              recompute_num_layers=4)
    result = export("megatron", plan(**kw, recompute_method=RecomputeMethod.BLOCK))
    assert parse_megatron(result).recompute_num_layers == 2
    assert any("2 per chunk" in n for n in result.notes)
    assert parse_megatron(export("megatron", plan(**kw, recompute_method=RecomputeMethod.UNIFORM))
                          ).recompute_num_layers == 4
    result = export("megatron", plan(**{**kw, "recompute_num_layers": 3}, recompute_method=RecomputeMethod.UNIFORM))
    assert not result.ok and "Megatron counts recomputed layers per model chunk" in result.message


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(tp=8, pp=16, schedule=Schedule.GPIPE), "--schedule gpipe: Megatron-LM runs 1F1B"),
    (dict(tp=8, pp=16, schedule=Schedule.ZERO_BUBBLE), "--schedule zero-bubble: Megatron-LM runs 1F1B"),
    (dict(tp=8, pp=16, schedule=Schedule.DUALPIPE), "--schedule dualpipe: Megatron-LM runs 1F1B"),
    (dict(dp=8, zero=ZeroStage.OS_G_P, reshard_after_forward=False),
     "--no-reshard-after-forward: Megatron-FSDP (--use-megatron-fsdp) always frees gathered weights"),
    (dict(dp=8, recompute=Recompute.OP), "--recompute op is torchtitan's per-op selective checkpointing"),
    (dict(recipe="fp8", dp=8, zero=ZeroStage.OS, recompute=Recompute.NORMS), "--recompute norms with fp8"),
])
def test_megatron_cannot_express_layouts(kwargs, needle):
    kwargs.setdefault("model", LLAMA_405B if "pp" in kwargs else LLAMA)
    result = export("megatron", plan(sequence_parallel="tp" in kwargs, **kwargs))
    assert not result.ok and needle in result.message


# ---------------------------------------------------------------- DeepSpeed

def parse_deepspeed(result) -> dict:
    assert result.ok, result
    config = json.loads(result.text)
    assert config == result.data
    return config


@pytest.mark.parametrize("zero", [ZeroStage.OS, ZeroStage.OS_G, ZeroStage.OS_G_P])
def test_deepspeed_zero_mixed_adam(zero):
    p = plan(seq_len=4096, global_batch=64, dp=8, zero=zero, micro_batch=2)
    c = parse_deepspeed(export("deepspeed", p))
    assert c["train_batch_size"] == 64 and c["train_micro_batch_size_per_gpu"] == 2
    assert c["gradient_accumulation_steps"] == 4                  # 64 / (8 dp x 2)
    # DeepSpeed's rule: train_batch_size = micro x accumulation x data-parallel size
    assert c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"] * p.parallel.dp == 64
    # the plan overlaps gradient reduction (--overlap-grad-reduce, on by default): overlap_comm says so
    assert c["zero_optimization"] == {"stage": int(zero), **({"overlap_comm": True} if zero else {})}
    assert c["bf16"] == {"enabled": True} and c["fp16"] == {"enabled": False}
    assert c["data_types"] == {"grad_accum_dtype": "bf16"}       # 2-byte grads
    assert c["optimizer"] == {"type": "AdamW"}
    assert "activation_checkpointing" not in c


def test_deepspeed_recompute_is_configured_but_switched_on_in_code():
    result = export("deepspeed", plan(dp=8, zero=ZeroStage.OS_G, recompute=Recompute.FULL))
    c = parse_deepspeed(result)
    assert c["activation_checkpointing"]["partition_activations"] is False
    assert any("switched on in model code" in n for n in result.notes)


def test_deepspeed_fp32_grads_without_zero_and_fp32():
    c = parse_deepspeed(export("deepspeed", plan(recipe="megatron-fp32-grad", dp=8)))
    assert c["zero_optimization"]["stage"] == 0 and c["data_types"] == {"grad_accum_dtype": "fp32"}
    c = parse_deepspeed(export("deepspeed", plan(recipe="fp32-adam", act_bytes=4, dp=8, zero=ZeroStage.OS_G_P)))
    assert c["bf16"] == {"enabled": False} and "data_types" not in c


def test_deepspeed_sgd_under_zero_allows_the_untested_optimizer():
    c = parse_deepspeed(export("deepspeed", plan(recipe="sgd-momentum", dp=8, zero=ZeroStage.OS)))
    assert c["optimizer"]["type"] == "SGD" and c["zero_allow_untested_optimizer"] is True


def test_deepspeed_cannot_express_model_parallelism():
    result = export("deepspeed", plan(tp=2, pp=2, cp=2, dp=2, sequence_parallel=True, zero=ZeroStage.OS))
    assert not result.ok and len(result.reasons) == 3
    assert [r.split(":")[0] for r in result.reasons] == ["tp = 2", "pp = 2", "cp = 2"]


def test_deepspeed_hybrid_sharding_is_mics():
    result = export("deepspeed", plan(dp=8, zero=ZeroStage.OS_G_P, shard_degree=4))
    c = parse_deepspeed(result)
    # overlap_comm: the plan's gradient overlap (on by default), docs/formulas.md#overlap
    assert c["zero_optimization"] == {"stage": 3, "mics_shard_size": 4, "overlap_comm": True}
    assert any("deepspeed.zero.MiCS_Init" in n for n in result.notes)
    assert parse_deepspeed(export("deepspeed", plan(dp=8, zero=ZeroStage.OS_G_P, shard_degree=8))
                           )["zero_optimization"] == {"stage": 3, "overlap_comm": True}


def test_deepspeed_keeps_gathered_weights_by_reuse_distance():
    """Llama 3.1 8B builds 8,030,261,248 parameters; twice that keeps every layer gathered."""
    c = parse_deepspeed(export("deepspeed", plan(dp=8, zero=ZeroStage.OS_G_P, reshard_after_forward=False)))
    assert c["zero_optimization"] == {"stage": 3, "stage3_max_reuse_distance": 16_060_522_496,
                                      "stage3_max_live_parameters": 16_060_522_496, "overlap_comm": True}


@pytest.mark.parametrize(("method", "needle"), [(RecomputeMethod.BLOCK, "only the first 4 transformer layers"),
                                                (RecomputeMethod.UNIFORM, "groups of 4 consecutive transformer layers")])
def test_deepspeed_partial_recompute_is_a_note(method, needle):
    result = export("deepspeed", plan(dp=8, zero=ZeroStage.OS, recompute=Recompute.FULL, recompute_num_layers=4,
                                      recompute_method=method))
    assert parse_deepspeed(result)["activation_checkpointing"]["partition_activations"] is False
    assert any(needle in n for n in result.notes)


def test_deepspeed_cannot_express_pipeline_layouts():
    result = export("deepspeed", plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, zero=ZeroStage.OS,
                                      first_stage_layers=7, last_stage_layers=7))
    assert "--first-stage-layers/--last-stage-layers: DeepSpeed's PipelineModule splits layers by partition_method" \
        in result.message
    result = export("deepspeed", plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, zero=ZeroStage.OS,
                                      schedule=Schedule.ZERO_BUBBLE))
    assert "--schedule zero-bubble: DeepSpeed's pipeline engine runs only its TrainSchedule" in result.message
    result = export("deepspeed", plan(LLAMA_405B, tp=8, pp=16, sequence_parallel=True, zero=ZeroStage.OS,
                                      virtual_stages=2))
    assert "--virtual-stages 2: DeepSpeed's TrainSchedule is not interleaved" in result.message


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(dp=8), "Bfloat16 wrapper must use a gradient accumulation type of fp32"),   # mixed-adam, ZeRO-0
    (dict(dp=8, zero=ZeroStage.OS, shard_degree=4), "--shard-degree 4 with ZeRO-1: DeepSpeed shards only ZeRO-3"),
    (dict(dp=8, zero=ZeroStage.OS, recompute=Recompute.NORMS), "--recompute norms: deepspeed.checkpointing"),
    (dict(dp=8, zero=ZeroStage.OS, recompute=Recompute.OP), "takes no per-op save policy"),
    (dict(recipe="fp8", dp=8, zero=ZeroStage.OS), "computes in fp8"),
    (dict(recipe="bf16-adam", dp=8, zero=ZeroStage.OS), "master_bytes = 0"),
    (dict(recipe="adam-8bit", dp=8, zero=ZeroStage.OS), "client optimizer"),
    (dict(recipe="megatron-fp32-grad", dp=8, zero=ZeroStage.OS_G), "fp32 gradients with ZeRO-2"),
])
def test_deepspeed_cannot_express(kwargs, needle):
    result = export("deepspeed", plan(**kwargs))
    assert not result.ok and needle in result.message


# ---------------------------------------------------------------- torchtitan

def titan_export(fmt: str, p):
    """The 0.2.x TOML for "torchtitan", main's Python form for "torchtitan-python" (the forms these tests
    were written for; tests/unit/test_torchtitan_versions.py covers 0.3.x, the default)."""
    return export(fmt, p, torchtitan_version="0.2" if fmt == "torchtitan" else "main")


def parse_titan(result) -> dict:
    assert result.ok, result
    config = tomllib.loads(result.text)
    assert config == result.data
    return config


def test_torchtitan_fsdp_tp_pp_interleaved():
    p = plan(tp=2, pp=2, dp=16, zero=ZeroStage.OS_G_P, sequence_parallel=True, recompute=Recompute.FULL,
             virtual_stages=2, micro_batch=1)
    c = parse_titan(titan_export("torchtitan", p))
    par = c["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (1, 16)
    assert par["fsdp_reshard_after_forward"] == "always"          # ZeRO-3 also under PP
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (2, 2, 1)
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] == 8          # 32 / (2 x 2) stages
    assert par["pipeline_parallel_first_stage_less_layers"] == par["pipeline_parallel_last_stage_less_layers"] == 0
    assert par["pipeline_parallel_microbatch_size"] == 1
    # with PP the local batch is the rank's share of the global batch: 512 / 16 = 32 micro-batches of 1
    assert c["training"] == {"local_batch_size": 32, "global_batch_size": 512, "seq_len": 8192,
                             "mixed_precision_param": "bfloat16"}
    assert c["activation_checkpoint"] == {"mode": "full"}
    degrees = par["data_parallel_shard_degree"] * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]
    assert degrees == p.num_gpus == 64


def test_torchtitan_ddp():
    c = parse_titan(titan_export("torchtitan", plan(dp=8, micro_batch=2, global_batch=64)))
    par = c["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (8, 1)
    assert "pipeline_parallel_schedule" not in par
    # no PP: local batch = micro-batch; torchtitan accumulates 64 / (2 x 8) = 4 steps
    assert (c["training"]["local_batch_size"], c["training"]["global_batch_size"]) == (2, 64)
    assert c["activation_checkpoint"] == {"mode": "none"}


def test_torchtitan_python_snippet(monkeypatch):
    p = plan(tp=4, dp=2, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL, micro_batch=2, global_batch=64)
    result = titan_export("torchtitan-python", p)
    assert result.ok
    fake = types.ModuleType("torchtitan.distributed.activation_checkpoint")
    fake.FullAC = types.SimpleNamespace(Config=lambda: "FullAC.Config()")
    for name in ("torchtitan", "torchtitan.distributed"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    config = types.SimpleNamespace(parallelism=types.SimpleNamespace(), training=types.SimpleNamespace())
    exec(result.text, {"config": config})
    par, tr = vars(config.parallelism), vars(config.training)
    assert (par["data_parallel_shard_degree"], par["tensor_parallel_degree"]) == (2, 4)
    assert par["enable_sequence_parallel"] is False                # the plan has no SP; the Python config says so
    assert tr["num_tokens_per_microbatch_per_dp_rank"] == 2 * 8192   # micro-batch x seq_len
    assert tr["num_tokens_per_train_step"] == 64 * 8192
    assert tr["max_context_length"] == 8192
    assert config.activation_checkpoint == "FullAC.Config()"
    assert {k: v for k, v in result.data.items() if k != "activation_checkpoint"} == \
        {**{f"parallelism.{k}": v for k, v in par.items()}, **{f"training.{k}": v for k, v in tr.items()}}


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(dp=8, zero=ZeroStage.OS), "ZeRO-1: torchtitan shards with FSDP2"),
    (dict(dp=8, zero=ZeroStage.OS_G), "not the plan's ZeRO-2"),
    (dict(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.SELECTIVE), "per-op SAC"),
    (dict(tp=2, dp=4, zero=ZeroStage.OS_G_P), "turns sequence parallel on whenever tp > 1"),
    (dict(cp=2, dp=4), "shards parameters with FSDP over the context-parallel ranks"),
    (dict(tp=2, dp=4, sequence_parallel=True), "DDP (data_parallel_replicate_degree) is for data parallelism alone"),
    (dict(tp=8, sequence_parallel=True), "turns mixed precision off when tp or pp > 1"),
    (dict(recipe="megatron-fp32-grad", dp=8, zero=ZeroStage.OS_G_P), "16 B/param"),
])
def test_torchtitan_cannot_express(kwargs, needle):
    result = titan_export("torchtitan", plan(**kwargs))
    assert not result.ok and needle in result.message


SINGLE_STAGE = {"1F1B", "GPipe"}


def titan_parts(par: dict, L: int, head: str = "output") -> tuple[int, ...]:
    """Transformer layers per model chunk torchtitan builds from a [parallelism] table
    (torchtitan/distributed/pipeline_parallel.py): the listed module FQNs, or U = L + first +
    last units, U // S per chunk, one more on the first U mod S, less first/last on the ends,
    S = ceil(U / layers_per_stage) or pp per stage of the schedule."""
    if "module_fqns_per_model_part" in par:
        parts = par["module_fqns_per_model_part"]
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", head]
        names = [n for part in parts for n in part if n.startswith("layers.")]
        assert names == [f"layers.{i}" for i in range(L)]
        return tuple(sum(n.startswith("layers.") for n in part) for part in parts)
    pp, first, last = (par["pipeline_parallel_degree"], par["pipeline_parallel_first_stage_less_layers"],
                       par["pipeline_parallel_last_stage_less_layers"])
    units = L + first + last
    single = par["pipeline_parallel_schedule"] in SINGLE_STAGE
    per = par.get("pipeline_parallel_layers_per_stage")
    S = -(-units // per) if per else pp * (1 if single else 2)
    assert S % pp == 0 and (S == pp if single else S >= 2 * pp)
    base, extra = divmod(units, S)
    assert base >= max(first, last, 1)
    out = [base + (j < extra) for j in range(S)]
    out[0] -= first
    out[-1] -= last
    return tuple(out)


def test_torchtitan_llama3_405b_less_layers():
    """7, 8 x 14, 7: torchtitan's own default (first/last_stage_less_layers = 1) at 8 per stage."""
    p = plan(LLAMA_405B, tp=8, pp=16, dp=2, sequence_parallel=True, zero=ZeroStage.OS_G_P)
    par = parse_titan(titan_export("torchtitan", p))["parallelism"]
    assert (par["pipeline_parallel_layers_per_stage"], par["pipeline_parallel_first_stage_less_layers"],
            par["pipeline_parallel_last_stage_less_layers"]) == (8, 1, 1)
    assert titan_parts(par, 126) == p.chunk_layers
    par = parse_titan(titan_export("torchtitan", plan(LLAMA_405B, tp=8, pp=16, dp=2, sequence_parallel=True,
                                                zero=ZeroStage.OS_G_P, first_stage_layers=6, last_stage_layers=8)))[
        "parallelism"]
    assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) == (2, 0)


@pytest.mark.parametrize(("model", "degrees"), [
    (LLAMA, dict(tp=2, pp=2, dp=16, virtual_stages=2)),
    (LLAMA_405B, dict(tp=8, pp=16, dp=2)),
    (LLAMA_405B, dict(tp=8, pp=16, dp=2, virtual_stages=2)),
    (LLAMA_405B, dict(tp=8, pp=16, dp=2, virtual_stages=3)),            # middles rise: module FQNs
    (LLAMA_405B, dict(tp=8, pp=16, dp=2, virtual_stages=4)),
    (LLAMA_405B, dict(tp=8, pp=16, dp=2, first_stage_layers=5)),
    (LLAMA_405B, dict(tp=8, pp=4, dp=2, first_stage_layers=30, last_stage_layers=30, virtual_stages=2)),
    (LLAMA, dict(tp=2, pp=3, dp=8)),
])
@pytest.mark.parametrize("fmt", ["torchtitan", "torchtitan-python"])
def test_torchtitan_builds_the_plans_layers_per_chunk(model, degrees, fmt):
    p = plan(model, sequence_parallel=True, zero=ZeroStage.OS_G_P, **degrees)
    result = titan_export(fmt, p)
    assert result.ok, result
    if fmt == "torchtitan":
        par = parse_titan(result)["parallelism"]
    else:
        par = {k.split(".", 1)[1]: v for k, v in result.data.items() if k.startswith("parallelism.")}
    assert titan_parts(par, model.num_layers, "output" if fmt == "torchtitan" else "lm_head") == p.chunk_layers


def test_torchtitan_module_fqns_where_less_layers_cannot():
    p = plan(LLAMA_405B, tp=8, pp=16, dp=2, sequence_parallel=True, zero=ZeroStage.OS_G_P, first_stage_layers=5)
    result = titan_export("torchtitan", p)
    parts = parse_titan(result)["parallelism"]["module_fqns_per_model_part"]
    assert parts[0] == ["tok_embeddings"] + [f"layers.{i}" for i in range(5)]
    assert parts[-1] == [f"layers.{i}" for i in range(119, 126)] + ["norm", "output"]
    assert "pipeline_parallel_layers_per_stage" not in parse_titan(result)["parallelism"]
    assert titan_export("torchtitan-python", p).data["parallelism.module_fqns_per_model_part"][-1][-1] == "lm_head"


def test_torchtitan_schedules_sharding_and_resharding():
    base = dict(model=LLAMA_405B, tp=8, pp=16, sequence_parallel=True, zero=ZeroStage.OS_G_P)
    par = parse_titan(titan_export("torchtitan", plan(dp=2, schedule=Schedule.GPIPE, **base)))["parallelism"]
    assert par["pipeline_parallel_schedule"] == "GPipe"
    par = parse_titan(titan_export("torchtitan", plan(dp=4, shard_degree=2, reshard_after_forward=False,
                                                **base)))["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (2, 2)
    assert par["fsdp_reshard_after_forward"] == "never"
    # FSDP shards over data_parallel_shard_degree x cp: a group of 4 over dp 4 x cp 2 is shard 2, replicate 2
    par = parse_titan(titan_export("torchtitan", plan(dp=4, cp=2, zero=ZeroStage.OS_G_P, shard_degree=4)))["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"],
            par["context_parallel_degree"]) == (2, 2, 2)


def test_torchtitan_op_recompute(monkeypatch):
    c = parse_titan(titan_export("torchtitan", plan(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.OP)))
    assert c["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    result = titan_export("torchtitan-python", plan(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.OP))
    fake = types.ModuleType("torchtitan.distributed.activation_checkpoint")
    fake.SelectiveAC = types.SimpleNamespace(Config=lambda: "SelectiveAC.Config()")
    for name in ("torchtitan", "torchtitan.distributed"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    config = types.SimpleNamespace(parallelism=types.SimpleNamespace(), training=types.SimpleNamespace())
    exec(result.text, {"config": config})
    assert config.activation_checkpoint == "SelectiveAC.Config()"


def test_torchtitan_block_recompute_is_every_kth_layer():
    """Block 16 of 32 layers reruns 16: selective_ac_option = "2" checkpoints layers 2, 4, ..., 32."""
    kw = dict(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL, recompute_num_layers=16,
              recompute_method=RecomputeMethod.BLOCK)
    result = titan_export("torchtitan", plan(**kw))
    assert parse_titan(result)["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert any("not the first 16" in n for n in result.notes)
    result = titan_export("torchtitan-python", plan(**kw))
    assert not result.ok and "SelectiveAC.Config() is per-op SAC only" in result.message
    for method, n in ((RecomputeMethod.UNIFORM, 1), (RecomputeMethod.BLOCK, 32)):   # every layer: full
        c = parse_titan(titan_export("torchtitan", plan(**{**kw, "recompute_num_layers": n, "recompute_method": method})))
        assert c["activation_checkpoint"] == {"mode": "full"}


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(schedule=Schedule.ZERO_BUBBLE), "--schedule zero-bubble: torch.distributed.pipelining's zero-bubble "
                                          "schedules (InterleavedZeroBubble, ZBVZeroBubble) run two or more stages"),
    (dict(schedule=Schedule.DUALPIPE), "--schedule dualpipe: torchtitan's DualPipeV splits the model into 2 x pp"),
    (dict(recompute=Recompute.NORMS), "--recompute norms: torchtitan has no policy that reruns only the norms"),
    (dict(recompute=Recompute.FULL, recompute_num_layers=2),
     "--recompute-num-layers 2 --recompute-method uniform: torchtitan checkpoints one layer at a time"),
    (dict(recompute=Recompute.FULL, recompute_num_layers=4, recompute_method=RecomputeMethod.BLOCK),
     "no k reruns 4 of each stage's layers (7, 8, 8,"),
])
@pytest.mark.parametrize("fmt", ["torchtitan", "torchtitan-python"])
def test_torchtitan_cannot_express_layouts(kwargs, needle, fmt):
    if fmt == "torchtitan-python" and "no k reruns" in needle:
        needle = "per-op SAC only"
    result = titan_export(fmt, plan(LLAMA_405B, tp=8, pp=16, dp=2, sequence_parallel=True, zero=ZeroStage.OS_G_P, **kwargs))
    assert not result.ok and needle in result.message


def test_torchtitan_shard_group_must_cover_cp():
    result = titan_export("torchtitan", plan(dp=3, cp=2, zero=ZeroStage.OS_G_P, shard_degree=3, global_batch=96))
    assert not result.ok and "--shard-degree 3 with cp = 2: torchtitan's FSDP always shards over" in result.message


def test_torchtitan_python_can_turn_sequence_parallel_off():
    assert titan_export("torchtitan-python", plan(tp=2, dp=4, zero=ZeroStage.OS_G_P)).ok


# ---------------------------------------------------------------- the plan

def test_plan_checks_its_degrees():
    training = TrainingSpec(seq_len=8192, recipe=RECIPES["mixed-adam"])
    with pytest.raises(SpecError, match="= 8 ranks but 16 GPUs"):
        Plan(model=LLAMA, training=training, parallel=ParallelConfig(dp=8), global_batch=64, num_gpus=16)
    with pytest.raises(SpecError, match="global batch 100 must be divisible by dp x micro-batch = 8 x 1"):
        make_plan(model=LLAMA, training=training, parallel=ParallelConfig(dp=8), global_batch=100)
    with pytest.raises(SpecError, match="divisible by tp=3"):
        make_plan(model=LLAMA, training=training, parallel=ParallelConfig(tp=3), global_batch=8)
    with pytest.raises(SpecError, match="needs a global batch"):
        make_plan(model=LLAMA, training=training, parallel=ParallelConfig(dp=8))


def test_plan_takes_the_training_global_batch():
    training = TrainingSpec(seq_len=8192, recipe=RECIPES["mixed-adam"], global_batch=256)
    p = make_plan(model=LLAMA, training=training, parallel=ParallelConfig(dp=8, micro_batch=2))
    assert (p.global_batch, p.num_gpus, p.num_microbatches) == (256, 8, 16)


def test_unknown_format():
    with pytest.raises(SpecError, match="unknown export format 'nemo'"):
        export("nemo", plan(dp=8))
    assert FORMATS == ("megatron", "deepspeed", "torchtitan", "torchtitan-python")


def test_megatron_refuses_alibi():
    """BLOOM's ALiBi: Megatron-LM's --position-embedding-type has no alibi choice (arguments.py:
    learned_absolute, rope, mrope, relative, none), so the export says it cannot."""
    import io
    from fitplan.cli import main
    err = io.StringIO()
    out = io.StringIO()
    code = main(["export", "--preset", "bloom-176b", "--gpus", "384", "--tp", "4", "--pp", "12", "--zero", "1",
                 "--recompute", "full", "--format", "megatron"], out=out, err=err)
    assert "ALiBi positions" in out.getvalue() + err.getvalue() and code != 0


def test_the_plans_overlaps_are_exported():
    """The step time assumed these overlaps (docs/formulas.md#overlap); the exported run must
    set them. Megatron-LM defaults all four off, so each is emitted when the plan has it; it
    asserts --overlap-param-gather only with --overlap-grad-reduce. DeepSpeed's overlap_comm
    carries the gradient overlap; stage 3 without prefetch sets stage3_prefetch_bucket_size 0."""
    a = parse_megatron(export("megatron", plan(tp=2, dp=32, zero=ZeroStage.OS, sequence_parallel=True)))
    assert a.overlap_grad_reduce and not a.overlap_param_gather and not a.tp_comm_overlap
    a = parse_megatron(export("megatron", plan(tp=2, dp=32, zero=ZeroStage.OS, sequence_parallel=True,
                                               overlap_param_gather=True, tp_comm_overlap=True)))
    assert a.overlap_grad_reduce and a.overlap_param_gather and a.tp_comm_overlap
    a = parse_megatron(export("megatron", plan(dp=64, overlap_grad_reduce=False)))
    assert not a.overlap_grad_reduce
    refused = export("megatron", plan(dp=64, zero=ZeroStage.OS, overlap_grad_reduce=False, overlap_param_gather=True))
    assert not refused.ok and any("--overlap-grad-reduce" in r for r in refused.reasons)
    c = parse_deepspeed(export("deepspeed", plan(seq_len=4096, global_batch=64, dp=8, zero=ZeroStage.OS_G_P,
                                                 micro_batch=2, overlap_param_gather=False)))
    assert c["zero_optimization"] == {"stage": 3, "overlap_comm": True, "stage3_prefetch_bucket_size": 0}


def test_megatron_squared_relu_and_what_gpt_oss_needs():
    """Nemotron-4's squared-ReLU MLP is Megatron-LM's --squared-relu (arguments.py; activation_func
    squared_relu), with LayerNorm, RoPE, no linear bias and untied embeddings. gpt-oss's learned attention
    sinks (TransformerConfig softmax_type "learnable") have no command-line flag: the export says so."""
    a = parse_megatron(export("megatron", plan(MODELS["nemotron4-15b"].model, seq_len=4096, tp=4, dp=16,
                                               sequence_parallel=True, dropout=False)))
    assert a.squared_relu and not a.swiglu and not a.add_bias_linear and a.untie_embeddings_and_output_weights
    assert (a.normalization, a.position_embedding_type, a.num_query_groups, a.ffn_hidden_size) == (
        "LayerNorm", "rope", 8, 24576)
    refused = export("megatron", plan(MODELS["gpt-oss-20b"].model, seq_len=4096, dp=64))
    assert not refused.ok and any(r.startswith("attention sinks") for r in refused.reasons)
    titan = export("torchtitan", plan(MODELS["nemotron4-15b"].model, seq_len=4096, dp=64))
    assert any("custom model registered with torchtitan" in n for n in titan.notes)
