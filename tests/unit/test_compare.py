"""`fitplan compare`: the seed's second exercise on dense-100b (L=128, h=8192, a=64,
103.5e9 parameters) over 64 H100 80GB, 8 per node.

By hand: pure TP (tp = 64) splits the state 64 ways, 16 B x 103.5e9 / 64 = 24.4 GiB, but its
4 all-reduces per layer cross nodes; pure PP (pp = 64, 2 layers a stage) must keep 64
micro-batches in flight on the first stage, L layers' worth: sbh(34 + 5as/h) x 128 =
229 GiB without recompute, 2sbh x 128 = 5 GiB with full recompute.
"""
import io
import json

import pytest

from fitplan.cli import main
from fitplan.compare import compare
from fitplan.specs.parallel import Recompute
from fitplan.timing import calibration as CAL
from tests.conftest import make_setup


@pytest.fixture(scope="module")
def result():
    return compare(make_setup("dense-100b", 64))


def by_name(result, name):
    return next(l for l in result.layouts if l.name == name)


def test_pure_tp(result):
    tp = by_name(result, "pure TP")
    assert tp.config.tp == 64 and tp.fits
    h, f, V, L = 8192, 32768, 51200, 128
    sharded = h * 3 * h + h * h + 2 * h * f + 3 * h + f      # qkv + proj + fc1 + fc2 weights, column biases
    replicated = 2 * 2 * h + 2 * h                           # two LayerNorms, two row-parallel biases
    psi = L * (sharded // 64 + replicated) + V * h // 64 + 2048 * h + 2 * h   # + positions, final LN
    assert tp.state_bytes == 16 * psi                        # 24.44 GiB: replicated norms/biases/positions add 0.34
    assert not tp.step.comm["tp"].intra_node            # 64 ranks cannot share one 8-GPU node
    # the all-reduces over InfiniBand dominate (the largest part, most of the step), though the ring spreads
    # over the 8 nodes' 8 NICs each
    assert max(tp.step.shares, key=tp.step.shares.get) == "time/tp_exposed"
    assert tp.step.shares["time/tp_exposed"] > 0.5


def test_pure_pp_needs_full_recompute(result):
    pp = by_name(result, "pure PP")
    stored = dict(pp.stored_by_recompute)
    s, h, a, L = 2048, 8192, 64, 128
    assert stored[Recompute.NONE] // 2**20 == (s * h * (34 + 5 * a * s // h) * L + 64 * (s * h + 8 * s)) // 2**20
    assert pp.config.recompute is Recompute.FULL and pp.fits
    assert pp.step.bubble_fraction == pytest.approx(63 / 1024)   # (p - 1)/m, m = 1024 micro-batches


def test_preferred_is_a_hybrid_with_tp_inside_the_node(result):
    best = result.preferred
    assert best.name.startswith("hybrid") and best.config.tp == 8
    assert best.step.comm["tp"].intra_node and not best.step.comm["pp"].intra_node
    assert best.step.step_time_s < by_name(result, "pure PP").step.step_time_s < by_name(result, "pure TP").step.step_time_s
    assert len(result.monitor) == 5 and all(m.value > 0 for m in result.monitor)


def test_reasons_are_data_and_the_report_words_them(result):
    """compare returns each layout's verdict with its numbers; report/sentences writes the sentence."""
    from fitplan.report.sentences import reason
    first, *rest = result.reasons
    assert first.verdict == "preferred" and first.layout is result.preferred and first.cost.kind == "tp"
    assert [r.layout.name for r in rest] == [l.name for l in result.layouts if l is not result.preferred]
    pure_tp = next(r for r in rest if r.layout.name == "pure TP")
    # tp = 64 over 8 nodes: each all-reduce rings through 8 NICs per node (about NVLink's bus bandwidth)
    # but pays 2*63 hops of latency, 14 us each across nodes, 1,024 exchanges per micro-batch
    assert pure_tp.verdict == "slower" and pure_tp.mostly == "time/tp_exposed" and pure_tp.ratio > 4
    assert reason(pure_tp).startswith(f"pure TP: +{pure_tp.slower_s:.0f} s per step ({pure_tp.ratio:.3f}x), mostly "
                                      f"exposed tp traffic (+{pure_tp.mostly_s:.0f} s)")
    assert pure_tp.slower_s == pytest.approx(pure_tp.layout.step.step_time_s - result.preferred.step.step_time_s)
    assert next(r for r in rest if r.layout.name == "hybrid pp2 x dp4").verdict == "does_not_fit"


def test_slow_inter_node_link_changes_the_ranking():
    """GPT-3 175B on 128 GPUs: at 1/10 of NDR (5 GB/s) the dp gradient traffic of pp4 x dp4
    crosses the slow link, so the hybrid with less data parallelism (pp8 x dp2) becomes the
    fastest."""
    out = io.StringIO()
    main(["compare", "--preset", "gpt3-175b", "--gpus", "128", "--json"], out=out)
    base = json.loads(out.getvalue())
    out = io.StringIO()
    main(["compare", "--preset", "gpt3-175b", "--gpus", "128", "--inter-node-bandwidth", "5 GB/s", "--json"], out=out)
    slow = json.loads(out.getvalue())
    assert base["preferred"] == "hybrid pp4 x dp4" and slow["preferred"] == "hybrid pp8 x dp2"
    assert "exposed dp traffic" in slow["reasons"][1]


def test_fp8_what_if():
    """fp8: 17 B/param state (fp8 weights, fp32 grads/master/Adam); only the layers' linear GEMMs
    run at the 1979 TFLOP/s fp8 peak (at the fp8 ceiling of the GEMM curve, 0.641 x the sustained clock), the attention core
    and the output layer at bf16's 989 with their bf16 efficiency."""
    base, fp8 = compare(make_setup("dense-100b", 64)), compare(make_setup("dense-100b", 64, recipe="fp8"))
    b, f = by_name(base, "pure TP"), by_name(fp8, "pure TP")
    assert f.state_bytes / b.state_bytes == pytest.approx(17 / 16, rel=1e-3)
    hb, hf = base.preferred, by_name(fp8, base.preferred.name)
    tb, tf = ({t.key: t.value for t in x.step.terms} for x in (hb, hf))
    assert tf["ratio/core_efficiency"] == tb["ratio/core_efficiency"]
    assert tf["ratio/head_efficiency"] == tb["ratio/head_efficiency"]
    clock = CAL.of_setup(make_setup("dense-100b", 64)).clock   # the sustained clock (docs/calibration.md)
    assert tf["ratio/gemm_ceiling_fp8"] == pytest.approx(0.641 * clock) and "ratio/gemm_ceiling_fp8" not in tb
    # the linears are 0.96 of a layer's FLOPs: faster, by less than the peaks' factor 2
    assert 1 < hb.step.parts["time/compute"] / hf.step.parts["time/compute"] < 2


def test_explicit_config_json_has_time_and_comm():
    out = io.StringIO()
    main(["plan", "--preset", "gpt3-175b", "--gpus", "16", "--tp", "8", "--pp", "2", "--sequence-parallel",
          "--recompute", "selective", "--json"], out=out)
    data = json.loads(out.getvalue())
    assert set(data["time"]) >= {"step_s", "compute_s", "exposed_comm_s", "bubble_s", "tokens_per_s", "mfu", "hfu"}
    assert data["comm"]["tp"]["intra_node"] and not data["comm"]["pp"]["intra_node"]
    assert data["time"]["step_s"] == pytest.approx(sum(data["time"]["parts_s"].values()))


def test_the_simplified_budget_says_what_it_is(result):
    """The 10 B/param column is the exercise-10 recipe: bf16 weights + 8 B of Adam moments, no
    gradients or master copy. The report says so where it prints the column."""
    from fitplan import presets
    r = presets.recipe("exercise-10")
    assert (r.weights_bytes, r.grads_bytes, r.master_bytes, r.optimizer_bytes, r.total_bytes) == (2, 0, 0, 8, 10)
    tp = by_name(result, "pure TP")
    assert tp.simplified_state_bytes * 16 == tp.state_bytes * 10        # same psi, 10 B instead of 16
    out = io.StringIO()
    main(["compare", "--preset", "dense-100b", "--gpus", "64"], out=out)
    text = " ".join(out.getvalue().split())
    assert "10 B/param GiB" in text
    assert ("10 B/param is bf16 weights + 8 B of Adam moments, no gradients or master copy: the exercise's "
            "simplified budget (recipe exercise-10)") in text
