"""Arithmetic that works the same on Python ints and on NumPy arrays.

Every formula in fitplan is written once with these helpers, so the explanation of one
configuration (exact Python ints) and the vectorized search (float64 arrays over many
candidates) run the same code. NumPy is imported only when an array is met, so the
explaining commands start without it.
"""


# The exact path calls these helpers millions of times per search on plain Python numbers (a
# brute-force check, millions): a type test answers those before hasattr, which raises and
# catches an AttributeError inside for every int.
_SCALARS = frozenset((int, float, bool))


def is_array(x) -> bool:
    if type(x) in _SCALARS:
        return False
    return hasattr(x, "__array__") and not isinstance(x, (int, float, bool))


def ceil_div(x, n):
    """ceil(x / n); exact for ints, elementwise for arrays. Shards are padded up.
    On float arrays (the search's screening pass) ceil(x / n) is several times faster than
    floor division; the search re-checks what it returns with exact ints."""
    if type(x) is int and type(n) is int:
        return -(-x // n)
    if is_array(x) or is_array(n):
        import numpy as np
        q = np.true_divide(x, n)
        return np.ceil(q, out=q) if type(q) is np.ndarray else np.ceil(q)   # in place: one temporary, not two
    return -(-x // n)


def floor_div(x, n):
    """floor(x / n); exact for ints, elementwise for arrays. As ceil_div: on float arrays
    floor(x / n) is tens of times faster than NumPy's floor division, and equal to it for the
    whole numbers below 2^53 the search's degrees and counts are (the quotient of two such
    numbers is at least 1/n from the next whole number, more than the division's rounding)."""
    if type(x) is int and type(n) is int:
        return x // n
    if is_array(x) or is_array(n):
        import numpy as np
        q = np.true_divide(x, n)
        return np.floor(q, out=q) if type(q) is np.ndarray else np.floor(q)
    return x // n


def select(cond, if_true, if_false):
    """cond ? if_true : if_false, elementwise when cond is an array."""
    if type(cond) in _SCALARS:
        return if_true if cond else if_false
    if is_array(cond):
        import numpy as np
        return np.where(cond, if_true, if_false)
    return if_true if cond else if_false


def minimum(a, b):
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return min(a, b)
    if is_array(a) or is_array(b):
        import numpy as np
        return np.minimum(a, b)
    return min(a, b)


def maximum(a, b):
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return max(a, b)
    if is_array(a) or is_array(b):
        import numpy as np
        return np.maximum(a, b)
    return max(a, b)


def logical_not(x):
    """not x, elementwise for arrays (~ on a Python bool is -2)."""
    return ~x if is_array(x) else not x


def total(values):
    """sum(values), the smallest first: on the search's arrays, whose axes broadcast (a term
    spans only the axes it depends on, fitplan.search._Grid.box), each addition then costs no
    more than its result. Whole numbers below 2^53 (bytes) sum exactly in any order; other
    floats differ from the left-to-right sum by rounding only."""
    values = list(values)
    if all(type(v) in _SCALARS for v in values):
        return sum(values)
    import numpy as np
    values.sort(key=np.size)
    out = values[0]
    for v in values[1:]:
        out = out + v
    return out


def geometric_mean(values):
    """(v_1 * ... * v_n)^(1/n): floats or NumPy arrays alike (elementwise over arrays); None for no values."""
    values = list(values)
    if not values:
        return None
    product = 1.0
    for v in values:
        product = product * v
    return product ** (1.0 / len(values))
