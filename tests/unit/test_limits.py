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
