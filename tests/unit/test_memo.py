"""fitplan.explain.Memo, the search's evaluator across its groups: the same values as RAW, each
formula computed once per distinct set of inputs (arrays told apart by identity), and `sweep`
keeping only what the last group used; and arith.floor_div, which the screening divides with."""
import numpy as np

from fitplan.explain import RAW, Memo
from fitplan.memory import activations as A
from fitplan.memory import states as S
from fitplan.specs.parallel import ZeroStage


def _counting(f):
    calls = []

    def fn(**kw):
        calls.append(kw)
        return f.fn(**kw)
    return type(f)(fn, f.key, f.text, f.cite, f.unit, f.assumes), calls


def test_same_values_as_raw_and_once_per_inputs():
    # master weights: 4 bytes per parameter, ZeRO-1 shards them over N_d: ceil(4*psi/n_d)
    master, calls = _counting(S.master_bytes)
    psi, n_d = np.array([1e9, 3e9 + 1]), np.array([8.0, 16.0])
    memo = Memo()
    kw = dict(psi=psi, m=4, n_d=n_d, zero=ZeroStage.OS)
    first = memo(master, **kw)
    again = memo(master, key="states/master", **kw)
    assert again is first and len(calls) == 1
    assert first.tolist() == RAW(S.master_bytes, **kw).tolist() == [5e8, 750000001.0]   # ceil(4*(3e9+1)/16)
    # an equal array that is another object, or another ZeRO stage, is computed again
    assert memo(master, **dict(kw, psi=psi.copy())).tolist() == first.tolist() and len(calls) == 2
    assert memo(master, **dict(kw, zero=ZeroStage.NONE)).tolist() == [4e9, 12000000004.0] and len(calls) == 3


def test_plain_inputs_differ_by_type():
    # True and 1 hash alike; the memo keys them apart (a bool flag is not a count)
    emb, calls = _counting(A.embedding_bytes)
    memo = Memo()
    kw = dict(s=2048, b=1, h=12288, M=1, D=1, t=8, c=1, n_mb=1)
    assert memo(emb, sp=True, **kw) == RAW(A.embedding_bytes, sp=True, **kw)
    memo(emb, sp=1, **kw)
    assert len(calls) == 2


def test_sweep_keeps_what_the_last_group_used():
    weights, calls = _counting(S.weights_bytes)
    memo, psi = Memo(), np.array([7e9])
    used = dict(psi=psi, w=2, n_d=1, zero=ZeroStage.NONE)
    unused = dict(used, zero=ZeroStage.OS_G_P, n_d=4)
    memo(weights, **used)
    memo(weights, **unused)
    memo.sweep()           # group 1 used both
    memo(weights, **used)  # group 2 uses one
    memo.sweep()
    assert len(calls) == 2
    memo(weights, **used)
    memo(weights, **unused)   # forgotten: computed again
    assert len(calls) == 3


def test_floor_div_matches_floor_division():
    # arith.floor_div on float arrays (floor of the true quotient) equals NumPy's floor division for
    # whole numbers below 2^53: exact quotients, one below, one above, and the largest degrees' products
    from fitplan.arith import floor_div
    x = np.array([64.0, 63.0, 65.0, 16384 * 8.0, 2.0**52 - 1, 1536.0])
    n = np.array([8.0, 8.0, 8.0, 3.0, 7.0, 16.0 * 3])
    assert floor_div(x, n).tolist() == (x // n).tolist() == [8.0, 7.0, 8.0, 43690.0, 643371375338642.0, 32.0]
    assert floor_div(1536, 48) == 32 and type(floor_div(1536, 48)) is int   # ints stay exact ints
