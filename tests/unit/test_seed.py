"""The seed drill for GPT-3 175B on 8 x 192 GiB (10 GiB reserved), derived by hand.

psi = 175e9, mixed-precision Adam 16 B/param (2 + 2 + 4 + 4 + 4):
  state 16 * 175e9 = 2.8e12 B = 2607.70 GiB = 13.58 GPUs of 192 GiB
  5as/h = 5*96*2048/12288 = 80; one layer 2048*1*12288*(34 + 80) = 2,868,903,936 B;
  96 layers = 275,414,777,856 B = 256.50 GiB
  DDP 16psi; ZeRO-1 4psi + 12psi/8 = 962.5e9; ZeRO-2 2psi + 14psi/8 = 656.25e9; ZeRO-3 16psi/8 = 350e9
"""
import io
import json

import pytest

from fitplan.analysis import seed_answer
from fitplan.cli import main
from fitplan.units import GiB
from tests.conftest import make_setup

PSI = 175_000_000_000


@pytest.fixture(scope="module")
def answer():
    return seed_answer(make_setup("gpt3-175b", 8), micro_batch=1)


def test_state(answer):
    assert answer.bytes_per_param == {"weights": 2, "grads": 2, "master": 4, "adam_m": 4, "adam_v": 4}
    assert answer.state_total_bytes == 16 * PSI == 2_800_000_000_000
    assert answer.state_total_bytes / GiB == pytest.approx(2607.70, abs=0.005)
    assert answer.gpus_of_pure_state == pytest.approx(13.58, abs=0.005)     # 2.8e12 / (192 * 2**30)


def test_activations(answer):
    assert answer.attention_factor.value == 80
    assert answer.per_layer.value == 2_868_903_936
    assert answer.per_layer.formula == "s*b*h*(34 + 5as/h)"
    assert answer.all_layers_bytes == 275_414_777_856
    assert answer.bigger_problem == "model state"


@pytest.mark.parametrize(("name", "state_bytes", "blocking", "blocking_bytes"), [
    ("ddp", 16 * PSI, "replicated model state", 16 * PSI),
    ("zero1", 4 * PSI + 12 * PSI // 8, "replicated bf16 weights + grads", 4 * PSI),   # 4psi = 651.93 GiB
    ("zero2", 2 * PSI + 14 * PSI // 8, "replicated bf16 weights", 2 * PSI),
    ("zero3", 16 * PSI // 8, "sharded model state", 2 * PSI),
])
def test_cheap_options(answer, name, state_bytes, blocking, blocking_bytes):
    s = next(s for s in answer.strategies if s.name == name)
    assert s.breakdown.state_bytes == state_bytes       # 175e9 shards evenly over 8: no padding
    assert not s.breakdown.fits
    assert s.blocking.name == blocking and s.blocking.bytes == blocking_bytes
    assert s.blocking.alone_exceeds                     # each named term alone exceeds 182 GiB usable


def test_zero1_blocking_term_in_gib(answer):
    zero1 = answer.strategies[1]
    assert f"{zero1.blocking.bytes / GiB:.1f}" == "651.9"       # the "4psi = 651.9 GiB"


def test_seed_command_json():
    out = io.StringIO()
    assert main(["plan", "--preset", "gpt3-175b", "--gpus", "8", "--json"], out=out) == 1   # nothing fits: exit 1
    data = json.loads(out.getvalue())
    assert data["model"] == {**data["model"], "name": "gpt3-175b", "num_params": PSI}
    assert data["state"]["bytes_per_param"]["adam_v"] == 4
    assert data["state"]["total_bytes"] == 16 * PSI
    assert data["activations"]["attention_factor"] == 80
    assert data["activations"]["per_layer_bytes"] == 2_868_903_936
    assert data["activations"]["all_layers_bytes"] == 275_414_777_856
    assert [s["name"] for s in data["strategies"]] == ["ddp", "zero1", "zero2", "zero3"]
    assert data["usable_bytes_per_gpu"] == 182 * GiB
    assert all(not s["fits"] and s["blocking_term"]["bytes"] > 0 for s in data["strategies"])


def test_seed_text_names_the_terms():
    out = io.StringIO()
    main(["plan", "--preset", "gpt3-175b", "--gpus", "8"], out=out)
    text = out.getvalue()
    assert "13.58 GPUs of pure state" in text
    assert "replicated bf16 weights + grads, 4*psi = 651.93" in text
    assert "2 weights + 2 grads + 4 master + 4 adam_m + 4 adam_v = 16" in text
