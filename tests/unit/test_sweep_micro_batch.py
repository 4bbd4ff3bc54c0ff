"""The largest micro-batch that fits: `fitplan sweep --over micro-batch` (largest_fitting, as
--over seq-len gives) and each suggestion's own largest fitting micro-batch. Each expected
number is derived beside it."""
import io
import json
from dataclasses import replace

import pytest

from fitplan.answers import largest_fitting_micro_batch
from fitplan.cli import main
from fitplan.memory.breakdown import evaluate
from fitplan.request import Request
from fitplan.resolve import config_of, resolve
from fitplan.service import respond
from fitplan.specs import compat
from fitplan.web.schema import build_request

GPT3_16 = ["--preset", "gpt3-175b", "--gpus", "16"]   # gpu-192gib: 192 - 10 GiB reserve = 182 GiB usable
USABLE = 182 * 2**30                                   # 195,421,011,968 B
# From b = 4 the least-loaded layout (tp 8 + SP, cp 2, ZeRO-3, full recompute; below, tp 8, pp 2, ZeRO-0)
# peaks at a layer's backward: A + k*b bytes, with A = 178,472,488,408 B of state and fixed buffers (one
# weight's gradient, w*h*f/t, and the tied head's, w*V*h/t, among them; NCCL's rings for tp, dp x cp and the
# world, 3 x 32 x 9,633,792 B, and cp's p2p pool for its peer on the other node, 128 MiB) and, per sequence,
# k = the 96 stored
# layer inputs
# 96*e*s*h/(t*c) = 301,989,888 + one layer recomputed s*h*(34 + 5as/h)/(t*c) = 179,306,496 + one layer's
# backward gradients (2*e*s*h + 2*e*a*s^2)/(t*c) = 106,954,752 + the embedding's mask and ids 1,581,056
# = 589,832,192 B. b = 16: 187,909,803,480 <= USABLE; b = 32: 197,347,118,552 > USABLE, so 16 is the
# largest power of two that fits (the largest whole b, floor((USABLE - A)/k) = 28, divides no 1,536).
A, K = 178_472_488_408, 589_832_192
assert 3 * 32 * 9_633_792 + 2**27 == 1_059_061_760
assert 96 * 2 * 2048 * 12288 // 16 + 2048 * 12288 * (34 + 5 * 96 * 2048 // 12288) // 16 \
    + (2 * 2 * 2048 * 12288 + 2 * 2 * 96 * 2048**2) // 16 + 1_581_056 == K


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_sweep_over_micro_batch_gives_largest_fitting():
    code, out, _ = run(["sweep", *GPT3_16, "--over", "micro-batch", "--json"])
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"over", "usable_bytes_per_gpu", "points", "largest_fitting"}
    assert data["over"] == "micro-batch" and data["usable_bytes_per_gpu"] == USABLE
    assert data["largest_fitting"] == 16
    points = {p["x"]: p for p in data["points"]}
    assert list(points) == [2**k for k in range(11)]     # powers of two up to the global batch 1,536: 1..1024
    for b in (4, 16, 32, 64, 512):
        assert points[b]["per_gpu_bytes"] == A + K * b
    assert points[16]["fits"] and not points[32]["fits"]
    assert points[1024]["per_gpu_bytes"] is None         # dp x 1024 divides no global batch of 1,536


def test_the_same_key_as_over_seq_len():
    _, out, _ = run(["sweep", *GPT3_16, "--over", "seq-len", "--values", "1024,2048", "--json"])
    assert "largest_fitting" in json.loads(out)


def test_given_values_and_nothing_fitting():
    """24: A + 24k = 192,628,461,016 fits; 32: A + 32k = 197,347,118,552 does not."""
    _, out, _ = run(["sweep", *GPT3_16, "--over", "micro-batch", "--values", "16,24,32", "--json"])
    data = json.loads(out)
    assert [p["fits"] for p in data["points"]] == [True, True, False] and data["largest_fitting"] == 24
    assert data["points"][1]["per_gpu_bytes"] == A + 24 * K == 192_628_461_016
    code, out, _ = run(["sweep", *GPT3_16, "--over", "micro-batch", "--values", "32,64", "--json"])
    assert code == 1 and json.loads(out)["largest_fitting"] is None


def test_text_table_and_bad_values():
    code, out, _ = run(["sweep", *GPT3_16, "--over", "micro-batch", "--values", "1,32,64"])
    assert code == 0 and out.splitlines()[0].split()[:3] == ["micro-batch", "per-GPU", "GiB"]
    code, out, err = run(["sweep", *GPT3_16, "--over", "micro-batch", "--values", str(2**21)])
    assert code == 2 and out == "" and "each 1 to 1,048,576 (the --micro-batch range)" in err
    code, _, err = run(["sweep", *GPT3_16, "--over", "batch"])
    assert code == 2 and "gpus, seq-len, micro-batch" in err


def test_the_api_sweeps_micro_batches_as_the_cli_does():
    _, out, _ = run(["sweep", *GPT3_16, "--over", "micro-batch", "--values", "16,32,64", "--json"])
    body = {"preset": "gpt3-175b", "gpus": 16, "over": "micro-batch", "values": [16, 32, 64]}
    assert respond(build_request("sweep", body)).text == out


# ------------------------------------------------------------------ each suggestion's largest micro-batch

def test_each_suggestion_states_its_largest_fitting_micro_batch():
    """16 x gpu-192gib, #1: tp 8 + SP, pp 2, selective, micro-batch 1, 7,244,118,496 B of headroom.
    A second sequence adds 34*s*h/t = 106,954,752 B per layer (Korthikanti Table 2, SP + selective)
    for 48 layers, twice (2 micro-batches in flight on the first stage) = 10,267,656,192 B, plus
    embedding and workspace: more than the headroom, so 1 is its largest."""
    _, out, _ = run(["plan", *GPT3_16, "--suggest", "--json"])
    data = json.loads(out)
    first = data["suggestions"][0]
    assert (first["tp"], first["pp"], first["recompute"], first["headroom_bytes"]) == (8, 2, "selective",
                                                                                        7_244_118_496)
    assert 2 * 48 * 34 * 2048 * 12288 // 8 == 10_267_656_192 > first["headroom_bytes"]
    assert first["largest_fitting_micro_batch"] == 1
    assert data["recommended"]["risk"]["level"] == "tight"   # every layout is: above 80% of the 192 GiB
    for s in data["suggestions"] + [data["minimum_viable"]]:
        assert s["largest_fitting_micro_batch"] >= s["micro_batch"]
    _, text, _ = run(["plan", *GPT3_16, "--suggest", "--top", "2"])
    assert "max mb" in text and "largest micro-batch that fits: 1" in text


def _brute_force(setup, config):
    """The largest legal micro-batch that fits, trying every one the global batch allows."""
    per_rank = setup.training.global_batch // config.dp
    ok = [b for b in range(1, per_rank + 1) if per_rank % b == 0
          and not compat.check(setup.model, setup.training, setup.cluster, replace(config, micro_batch=b),
                               allow_cross_node_tp=True)
          and evaluate(setup, replace(config, micro_batch=b)).fits]
    return max(ok) if ok else None


@pytest.mark.parametrize("argv", [["--preset", "gpt3-175b", "--gpus", "32"],
                                  ["--preset", "mixtral-8x7b", "--gpus", "16"],
                                  ["--preset", "llama3.1-70b", "--gpus", "64"]])
def test_largest_fitting_micro_batch_matches_brute_force(argv):
    """gpt3-175b on 32: a layout with tp 8, pp 4, dp 1 fits 3 sequences (1,536 = 2^9 x 3 allows 3)."""
    _, out, _ = run(["plan", *argv, "--suggest", "--top", "5", "--json"])
    data = json.loads(out)
    values = {"preset": argv[1], "gpus": int(argv[3])}
    setup = resolve(Request(command="plan", values=values)).setup
    seen = set()
    for s in data["suggestions"]:
        given = {k: s[k] for k in ("tp", "pp", "dp", "cp", "ep", "zero", "recompute", "micro_batch",
                                   "virtual_stages")}
        r = resolve(Request(command="plan", values={**values, **given,
                                                    "sequence_parallel": s["sequence_parallel"] or None}))
        config = config_of(r)
        assert largest_fitting_micro_batch(setup, config) == _brute_force(setup, config) \
            == s["largest_fitting_micro_batch"]
        seen.add(s["largest_fitting_micro_batch"])
    if argv[1] == "gpt3-175b":
        assert 3 in seen


def test_without_a_global_batch_it_doubles_then_bisects():
    """No batch to divide: the largest b whose memory fits, found by doubling and bisection, and
    b + 1 does not fit."""
    r = resolve(Request(command="plan", values={"preset": "llama3.1-8b", "gpus": 8, "zero": 3,
                                                "recompute": "full"}))
    setup = replace(r.setup, training=replace(r.setup.training, global_batch=None))
    config = config_of(r)
    b = largest_fitting_micro_batch(setup, config)
    assert b >= 1 and evaluate(setup, replace(config, micro_batch=b)).fits
    assert not evaluate(setup, replace(config, micro_batch=b + 1)).fits
