"""What the reports say matches what was done: the trade sentence, the sweep's answer in text,
a custom GPU's name, the fine-tuning batch, Llama 3.1's context and the export notes."""
import io
import json
from types import SimpleNamespace

from fitplan.cli import main
from fitplan.export import export, make_plan
from fitplan.presets import MODELS, RECIPES
from fitplan.report import advice
from fitplan.specs import ParallelConfig, Recompute, TrainingSpec, ZeroStage


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _timed(parts):
    comm = {"tp": SimpleNamespace(degree=1, exposed_s=0.0, link="nvlink", intra_node=True, name="tp", axis="tp")}
    return SimpleNamespace(step_time_s=sum(parts.values()), comm=comm, hfu=1.0, mfu=1.0, bubble_fraction=0.0,
                           parts=parts)


def test_no_trade_is_named_when_nothing_costs_more(monkeypatch):
    """Neither layout has TP (its exposed traffic is 0 s in both) and the recommended one is no slower on any
    part: the sentence must not say "exposed tp traffic costs +0 s"."""
    layout = SimpleNamespace(config=ParallelConfig(dp=8), breakdown=SimpleNamespace(per_gpu_bytes=2**30,
                                                                                      headroom_bytes=2**30))
    fast = _timed({"time/compute": 1.0, "time/tp_exposed": 0.0, "time/bubble": 0.2})
    slow = _timed({"time/compute": 1.0, "time/tp_exposed": 0.0, "time/bubble": 0.5})
    monkeypatch.setattr(advice, "steps", lambda setup, s: [fast, slow])
    lines = advice.justify(None, layout, layout)
    assert not any("costs +0" in line for line in lines)
    assert lines[-1].startswith("no trade: no part of the step takes longer here") and "0.3 s less" in lines[-1]
    # a real trade is still named: 0.1 s more compute buys 0.3 s less bubble
    fast = _timed({"time/compute": 1.1, "time/tp_exposed": 0.0, "time/bubble": 0.2})
    monkeypatch.setattr(advice, "steps", lambda setup, s: [fast, slow])
    assert advice.justify(None, layout, layout)[-1].startswith("the trade: compute (recompute included) costs +0.1 s here")


def test_sweep_text_states_the_answer():
    """The text output gives what --json's largest_fitting gives."""
    argv = ["sweep", "--preset", "gpt3-175b", "--gpus", "16", "--over", "micro-batch", "--values", "1,2,4,1024"]
    code, text, _ = run(argv)
    _, js, _ = run(argv + ["--format", "json"])
    best = json.loads(js)["largest_fitting"]
    assert code == 0 and best == 4
    assert text.rstrip().splitlines()[-1] == f"  largest_fitting: {best} (the largest micro-batch that fits)"


def test_a_custom_gpu_memory_says_what_it_kept():
    code, text, _ = run(["plan", "--preset", "llama2-7b", "--gpus", "8", "--gpu-memory", "24GiB", "--tp", "2",
                         "--format", "json"])
    plan = json.loads(text)
    name = "h100-80gb with 24 GiB memory (h100-80gb compute, HBM bandwidth and links kept)"
    assert plan["cluster"]["gpu"] == name
    assert any(a.startswith(f"GPU {name}: 24 GiB memory from the flags") for a in plan["assumed"])


def test_a_fine_tune_takes_a_fine_tuning_batch():
    """llama2-7b's preset batch is its pre-training one, 1024 x 4096 tokens (4M); a LoRA fine-tune runs at
    QLoRA's 16 sequences, said under `assumed`; a given --global-batch still wins."""
    code, text, _ = run(["plan", "--preset", "llama2-7b", "--gpus", "1", "--finetune", "lora", "--format", "json"])
    plan = json.loads(text)
    assert plan["training"]["global_batch"] == 16
    assert any("global batch 16 sequences: a fine-tuning batch" in a and "arXiv:2305.14314" in a
               for a in plan["assumed"])
    _, text, _ = run(["plan", "--preset", "llama2-7b", "--gpus", "1", "--format", "json"])
    assert json.loads(text)["training"]["global_batch"] == 1024          # pre-training keeps the preset's
    _, text, _ = run(["plan", "--preset", "llama2-7b", "--gpus", "1", "--finetune", "qlora", "--global-batch", "64",
                      "--format", "json"])
    assert json.loads(text)["training"]["global_batch"] == 64


def test_llama_3_1_takes_128k_tokens():
    """Llama 3.1 was trained to 131,072 tokens (Llama 3 Herd Sec. 3.4.2; config.json max_position_embeddings):
    serving 32K is no warning, and the default context is 128K; training still defaults to 8,192."""
    assert MODELS["llama3.1-8b"].model.max_seq_len == 131072 and MODELS["llama3.1-8b"].seq_len == 8192
    code, text, _ = run(["infer", "--preset", "llama3.1-8b", "--gpus", "1", "--context", "32768", "--format",
                         "json"])
    assert not any("past the model's max_seq_len" in a for a in json.loads(text)["assumed"])
    _, text, _ = run(["infer", "--preset", "llama3.1-70b", "--gpus", "8", "--format", "json"])
    assert any(a.startswith("context 131,072 tokens: the model's max_seq_len") for a in json.loads(text)["assumed"])


def test_export_notes_follow_the_attention_kernel():
    """A flash-attention plan is not told it has no flash attention; an eager one is exported as such."""
    model = MODELS["llama3.1-8b"].model
    for kernel in ("flash", "eager"):
        p = make_plan(model=model, training=TrainingSpec(seq_len=8192, recipe=RECIPES["mixed-adam"], dropout=False,
                                                         attention_kernel=kernel),
                      parallel=ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.NONE),
                      global_batch=64)
        for fmt in ("megatron", "torchtitan"):
            notes = " ".join(export(fmt, p).notes)
            assert ("no flash attention" not in notes) and (("s^2 attention scores" in notes) == (kernel == "eager"))
        args = export("megatron", p).data
        assert ("--attention-backend" in args) == (kernel == "eager")


def test_the_header_says_the_gemm_precision_and_the_layers_kept_in_bf16():
    """A low-precision recipe's GEMMs and the layers it keeps in bf16 are on the training line (they change the
    step time); a bf16 plan's line says neither."""
    base = ["plan", "--preset", "llama3.1-8b", "--gpus", "8", "--tp", "1", "--pp", "1"]
    code, out, _ = run(base + ["--compute-precision", "nvfp4", "--bf16-first-layers", "1", "--bf16-last-layers", "2"])
    assert code in (0, 1) and ", nvfp4 GEMMs (the first 1 and last 2 layers' in bf16), activations" in out
    code, out, _ = run(base + ["--compute-precision", "fp8"])
    assert ", fp8 GEMMs, activations" in out
    code, out, _ = run(base)
    assert "GEMMs" not in out.splitlines()[3]


def test_a_job_inside_one_node_says_which_groups_the_placement_sends_over_the_network():
    """fitplan.timing.comm.group_is_intra_node keeps a group inside a node only where its span divides the node's G
    GPUs, so 64 GPUs of an NVL72 rack (G = 72) time their groups spanning 16, 32 or 64 ranks over the network: the
    plan says so (resolve._placement_note), and the links line agrees. Where the spans all divide G (8 GPUs of 72),
    or the job needs several nodes (16 of 8), nothing is said."""
    code, text, _ = run(["plan", "--preset", "gpt-oss-120b", "--gpus", "64", "--ep", "64", "--gpu", "gb300",
                         "--format", "json"])
    plan = json.loads(text)
    note = [a for a in plan["assumed"] if a.startswith("rank placement")]
    assert note == ["rank placement: a tp, cp, ep or dp group spanning 16, 32 or 64 consecutive ranks is taken as "
                    "crossing nodes (timed over ConnectX-8 800 Gb/s) because 72 is not a multiple of its span, though "
                    "the job's 64 GPUs fit in one 72-GPU node (docs/calibration.md#where-the-fit-is-biased-and-what-"
                    "was-ruled-out: the constants were fitted with this rule)"]
    _, text, _ = run(["plan", "--preset", "gpt-oss-120b", "--gpus", "64", "--ep", "64", "--gpu", "gb300"])
    assert "ep 64 across nodes over ConnectX-8 800 Gb/s" in text   # what the note explains
    for argv in (["--gpus", "8", "--gpu", "gb200"], ["--gpus", "16", "--gpu", "h100-80gb"]):
        _, text, _ = run(["plan", "--preset", "llama3.1-8b", *argv, "--format", "json"])
        assert not [a for a in json.loads(text)["assumed"] if a.startswith("rank placement")]
    _, text, _ = run(["plan", "--preset", "llama3.1-8b", "--gpus", "6", "--format", "json"])
    assert any("spanning 3 or 6 consecutive ranks" in a for a in json.loads(text)["assumed"])   # 6 of 8: 3 and 6


def test_deepep_says_it_is_placed_on_the_jobs_nvlink_domains():
    """DeepEP's dispatch is placed on the NVLink domains the job fills (fitplan.timing.axes.placement), so
    the node rule's line no longer names ep, a second line says where DeepEP's group is, and the links line agrees.
    256 GPUs on racks of 72 fill four domains of 64: only the DeepEP line (the job needs several racks)."""
    argv = ["plan", "--preset", "gpt-oss-120b", "--gpus", "64", "--ep", "64", "--gpu", "gb300",
            "--moe-dispatcher", "deepep"]
    _, text, _ = run(argv + ["--format", "json"])
    note = [a for a in json.loads(text)["assumed"] if a.startswith("rank placement")]
    assert note == ["rank placement: a tp, cp or dp group spanning 16, 32 or 64 consecutive ranks is taken as crossing "
                    "nodes (timed over ConnectX-8 800 Gb/s) because 72 is not a multiple of its span, though the "
                    "job's 64 GPUs fit in one 72-GPU node (docs/calibration.md#where-the-fit-is-biased-and-what-was-"
                    "ruled-out: the constants were fitted with this rule)",
                    "rank placement: DeepEP's expert dispatch is timed on NVLink domains of 64 GPUs, the job's 64 "
                    "filling them evenly, so an ep group spanning 16, 32 or 64 consecutive ranks stays on NVLink 5 "
                    "(HybridEP's measured rates across a rack's trays; docs/formulas.md#link-tier)"]
    _, text, _ = run(argv)
    assert "ep 64 inside a node over NVLink 5" in text
    _, text, _ = run(["plan", "--preset", "deepseek-v3", "--gpus", "256", "--ep", "64", "--pp", "4", "--gpu",
                      "gb200", "--moe-dispatcher", "deepep", "--format", "json"])
    note = [a for a in json.loads(text)["assumed"] if a.startswith("rank placement")]
    assert len(note) == 1 and note[0].startswith("rank placement: DeepEP's expert dispatch is timed on NVLink domains "
                                                 "of 64 GPUs, the job's 256 filling them evenly")
