"""Absurd but valid inputs finish with exact arithmetic; a space too large is refused."""
import io
import json

from fitplan.cli import main
from fitplan.memory.breakdown import evaluate
from fitplan.search import SearchSpace, search
from fitplan.specs.parallel import ParallelConfig, ZeroStage
from tests.conftest import make_setup


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out=out, err=err), out.getvalue(), err.getvalue()


def test_a_quadrillion_parameters_is_exact():
    """--params 10**15 on a custom shape: 16 B x 10**15 = 1.6e16 B of state, an exact int."""
    code, out, _ = run(["plan", "--layers", "1000", "--hidden", "300000", "--heads", "1000", "--vocab", "50000",
                        "--seq-len", "2048", "--params", str(10**15), "--gpus", "1000000", "--json"])
    data = json.loads(out)
    assert data["state"]["total_bytes"] == 16 * 10**15
    assert data["strategies"][3]["state_bytes"] == 16 * 10**15 // 10**6   # ZeRO-3 over a million GPUs: exact


def test_ten_million_tokens_with_rope_finishes():
    code, out, _ = run(["plan", "--preset", "llama3.1-405b", "--seq-len", str(10**7), "--gpus", "1048576",
                        "--suggest", "--json"])
    assert code in (0, 1)
    assert json.loads(out)["lower_bound"]["min_gpus"] > 0


def test_activation_bytes_stay_exact_ints_at_long_sequence():
    setup = make_setup("llama3.1-8b", 8, seq_len=2**22, global_batch=None)
    b = evaluate(setup, ParallelConfig(dp=8, zero=ZeroStage.OS_G_P))
    assert all(isinstance(v, int) for v in b.parts.values())
    # the score term alone: a*s^2*b*(e + D*(e + M)) = 32 * 2^44 * 5 bytes per layer
    assert b.parts["activations/layers"] > 32 * 2**44 * 5 * 32


def test_learned_positions_cap_the_sequence():
    code, _, err = run(["plan", "--preset", "gpt3-175b", "--seq-len", "4096", "--gpus", "8"])
    assert code == 2 and "learned position table (2048)" in err


def test_search_refuses_a_space_too_large():
    setup = make_setup("gpt3-175b", 2**20, global_batch=None)
    space = SearchSpace(tp=tuple(2**k for k in range(21)), pp=tuple(2**k for k in range(21)), cp=(1, 2, 4, 8),
                        micro_batches=tuple(range(1, 257)), virtual_stages=tuple(range(1, 33)))
    try:
        search(setup, space)
    except ValueError as err:
        assert "candidates (limit" in str(err)
    else:
        raise AssertionError("a search over hundreds of millions of candidates should be refused")


def test_absurd_gpu_count_is_a_clear_error():
    code, _, err = run(["plan", "--preset", "gpt3-175b", "--gpus", str(10**12)])
    assert code == 2 and "--gpus = 1,000,000,000,000 is out of range; give 1 to 1,048,576" in err


def test_the_work_limit_counts_degree_triples_in_closed_form():
    """degree_triples (the search's and the sweep's work count) is the brute-force count of
    (tp, pp, cp) whose product divides n, for full divisor axes, fixed axes and odd subsets."""
    from itertools import product

    from fitplan.search import default_space, degree_triples, divisors
    for n in (1, 2, 7, 12, 64, 96, 360, 1000, 5040, 65536, 720720 // 7):
        d = divisors(n)
        space = default_space(n, max_cp=16)
        for tp, pp, cp in [(space.tp, space.pp, space.cp), (d, (2,), space.cp), ((4,), d, (1, 2, 3)),
                           ((1, 3), (2, 5, 7), (1, 2)), (d, d, (1,)), ((8, 16, 1), d, d[:5])]:
            brute = sum(1 for t, p, c in product(tp, pp, cp) if n % (t * p * c) == 0)
            assert degree_triples(n, tp, pp, cp) == brute, (n, tp, pp, cp)


def test_a_sweep_too_large_is_refused_without_enumerating():
    """The sweep issue 27 reports (64 GPU counts with ~200 divisors each, max_cp 64, micro-batch
    64): its 2,171,966,496 candidates are the sum of the closed-form counts, refused with the
    same figure the enumeration gave, and the enumeration (itertools.product over the degrees)
    is never run for it."""
    from unittest import mock

    import fitplan.search as S
    values = "720720,831600,942480,982800,997920,665280,786240,960960,1028160,554400,655200,776160,856800,887040," \
             "900900,917280,957600,970200,1029600,1048320,907200,498960,589680,771120,861840,926640,1043280,332640," \
             "360360,393120,415800,443520,471240,480480,491400,514080,524160,526680,540540,556920,574560,582120," \
             "600600,604800,617760,622440,628320,637560,642600,685440,687960,693000,695520,702240,706860,718200," \
             "739200,742560,748440,753480,756000,766080,772200,785400"
    with mock.patch.object(S, "product", side_effect=AssertionError("enumerated")):
        code, out, err = run(["sweep", "--preset", "gpt3-175b", "--gpus", "8", "--over", "gpus", "--max-cp", "64",
                              "--micro-batch", "64", "--values", values])
    assert code == 2 and "would search 2,171,966,496 candidates (limit 40,000,000)" in err


def test_a_sweep_point_over_the_search_limit_is_refused_before_any_point_is_searched():
    """Under the sweep's total (40M) but one point over one search's limit (20M): refused up
    front, naming the point; it used to be found only when the sweep reached that point, after
    searching the points before it (seconds of work for an error)."""
    from unittest import mock

    import fitplan.search as S
    with mock.patch.object(S, "search", side_effect=AssertionError("searched")):
        code, out, err = run(["sweep", "--preset", "deepseek-v3", "--gpus", "8", "--over", "gpus", "--values",
                              "20480,10240,40960,30720", "--max-cp", "64", "--micro-batch", "16"])
    assert code == 2 and err.startswith("fitplan: --values 30720: the search space has 20,442,240 candidates "
                                        "(limit 20,000,000)")


def test_validate_refuses_a_shape_too_large_before_running_anything(monkeypatch):
    """`validate --seq-len 100000000` on tiny-llama: fitplan's own prediction of the reference
    run's activations (2,682,212,521 GiB: the s^2 attention scores dominate) is past any
    machine's memory, so it is one line, exit 2, and the runner (torch) is never reached."""
    import sys
    import types
    fake = types.ModuleType("fitplan.validate.runner")
    fake.run = lambda **kw: (_ for _ in ()).throw(AssertionError("ran"))
    monkeypatch.setitem(sys.modules, "fitplan.validate.runner", fake)
    code, out, err = run(["validate", "--model", "tiny-llama", "--seq-len", "100000000", "--no-distributed"])
    assert code == 2 and err.startswith("fitplan: --seq-len 100000000 --micro-batch 2: the reference tiny-llama "
                                        "would hold 2,682,212,521.1 GiB of activations")
    code, out, err = run(["validate", "--model", "tiny-moe", "--micro-batch", "100000000", "--device", "cuda"])
    assert code == 2 and "more than the largest GPU's memory" in err


def test_calibrate_refuses_a_shape_or_message_too_large_before_torch(monkeypatch):
    """calibrate's largest GEMM at --seq-len 1000000 --micro-batch 64 on llama3.1-8b is the output
    layer, (64M x 4096)(4096 x 128256): 4 B x (m k + k n + m n) = 31,557.1 GiB, past any GPU; and
    on a machine with less memory, a 64 GiB --message. One line each; the measuring never starts."""
    import sys
    import types
    fake = types.ModuleType("fitplan.calibrate.runner")
    fake.run_calibrate = lambda request, out: (_ for _ in ()).throw(AssertionError("measured"))
    monkeypatch.setitem(sys.modules, "fitplan.calibrate.runner", fake)
    m, k, n = 64 * 10**6, 4096, 128256
    code, _, err = run(["calibrate", "--preset", "llama3.1-8b", "--seq-len", "1000000", "--micro-batch", "64",
                        "--device", "cuda", "--output", "/tmp/unused-fitplan-gpu.toml"])
    assert code == 2 and f"largest GEMM would take {4 * (m * k + k * n + m * n) / 2**30:,.1f} GiB" in err
    assert "more than the largest GPU's memory" in err
    import os
    if os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") < 64 * 2**30:   # the declared largest --message
        code, _, err = run(["calibrate", "--preset", "llama3.1-8b", "--message", "64 GiB", "--device", "cpu",
                            "--output", "/tmp/unused-fitplan-gpu.toml"])
        assert code == 2 and err.startswith("fitplan: --message 64.0 GiB: more than this machine's memory")
