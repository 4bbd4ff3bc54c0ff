"""Reference-model parameter counts (meta device) equal fitplan.counts.params.shape_params
exactly; the validation package keeps torch out of `import fitplan.validate`."""
import subprocess
import sys
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from fitplan.counts.params import shape_params
from fitplan.errors import SpecError
from fitplan.presets import model as preset
from fitplan.specs.model import Mlp, ModelSpec, Norm, Position
from fitplan.validate import TINY_GPT, TINY_LLAMA, TINY_MOE, run_validation
from fitplan.validate.measure import count_params
from fitplan.validate.report import Extra, Row, ValidationReport, as_json, render_text

from tests.torch.shapes import TINY_MIX, TINY_RELU2

SPECS = [TINY_GPT, TINY_LLAMA, TINY_MIX, TINY_RELU2, preset("gpt3-125m").model, preset("llama2-7b").model,
         preset("llama3.1-8b").model, preset("llama3.1-70b").model, preset("nemotron4-15b").model]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_meta_count_equals_shape_params(spec):
    assert count_params(spec) == shape_params(spec)


@pytest.mark.skipif("qkv_bias" not in ModelSpec.__dataclass_fields__, reason="ModelSpec has no qkv_bias")
def test_qkv_bias_only_count():
    spec = ModelSpec(name="tiny-qwen", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=160,
                     vocab_size=256, max_seq_len=64, mlp=Mlp.SWIGLU, norm=Norm.RMSNORM, position=Position.ROPE,
                     tied_embeddings=True, linear_bias=False, qkv_bias=True)
    assert count_params(spec) == shape_params(spec)


def test_tiny_gpt_by_hand():
    # L(12h^2 + 13h) + Vh + s_max*h + 2h = 2*49,984 + 32,768 + 8,192 + 128 [narayanan Eq. 2 + final LN]
    assert count_params(TINY_GPT) == 141_056


def test_tiny_llama_by_hand():
    # per layer: q, o 2*128*128; k, v 2*128*32; gate, up, down 3*128*352; two RMSNorms 2*128 = 176,384
    # + embedding and untied head 2*512*128 + final RMSNorm 128
    assert count_params(TINY_LLAMA) == 2 * 176_384 + 2 * 65_536 + 128 == 483_968


def test_llama3_8b_matches_the_published_count():
    assert count_params(preset("llama3.1-8b").model) == 8_030_261_248   # HF meta-llama/Llama-3.1-8B


def test_import_validate_does_not_import_torch():
    code = "import sys, fitplan, fitplan.validate; assert 'torch' not in sys.modules, 'torch imported'"
    # a bare environment, so nothing set outside can import torch; no bytecode written into the checkout (stale
    # .pyc files there made one tree's timings of the commands look faster than another's)
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={"PYTHONPATH": ":".join(sys.path), "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_without_a_gpu_is_a_spec_error():
    with pytest.raises(SpecError, match="--device cuda: no CUDA device here"):
        run_validation(model=TINY_GPT, seq_len=16, micro_batch=1, device="cuda", include_distributed=False)


@pytest.mark.parametrize(("kw", "match"), [
    (dict(device="tpu"), "--device"),
    (dict(seq_len=256), "learned-position table"),
    (dict(world_sizes=(8,)), "world sizes"),
    # what the reference model cannot build: a GeGLU MLP, squared-ReLU experts, attention sinks
    (dict(model=replace(TINY_LLAMA, mlp=Mlp.GEGLU)), "the reference model has no geglu MLP"),
    (dict(model=replace(TINY_MOE, mlp=Mlp.RELU2)), "the reference model has no relu2 experts"),
    (dict(model=replace(TINY_RELU2, attention_sinks=True)), "the reference attention has no sinks"),
])
def test_bad_input_is_a_spec_error(kw, match):
    with pytest.raises(SpecError, match=match):
        run_validation(**{"model": TINY_GPT, "seq_len": 16, "micro_batch": 1, **kw})


def test_render_and_json():
    extra = Extra("causal-mask", 16, "masked_fill saves the mask")
    rows = (Row(section="s", quantity="exact", planner=100, extras=(extra,), measured=116),
            Row(section="s", quantity="bound", planner=100, measured=120, relation=">="),
            Row(section="s", quantity="wrong", planner=100, measured=101))
    report = ValidationReport(model="m", seq_len=4, micro_batch=1, device="cpu", torch_version="x", rows=rows)
    assert [r.ok for r in rows] == [True, True, False] and not report.ok
    text = render_text(report)
    assert "[1] causal-mask: differs from the paper because masked_fill saves the mask" in text
    assert "SOME ROWS FAILED" in text
    data = as_json(report)
    assert data["rows"][0]["predicted"] == 116 and data["rows"][0]["ratio"] == 1.0
    assert data["rows"][0]["exact"] and not data["rows"][1]["exact"] and data["ok"] is False
