"""Arithmetic that works the same on Python ints and on NumPy arrays.

Every formula in fitplan is written once with these helpers, so the explanation of one
configuration (exact Python ints) and the vectorized search (float64 arrays over many
candidates) run the same code.
"""
import numpy as np


def ceil_div(x, n):
    """ceil(x / n); exact for ints, elementwise for arrays. Shards are padded up."""
    return -(-x // n)


def select(cond, if_true, if_false):
    """cond ? if_true : if_false, elementwise when cond is an array."""
    if isinstance(cond, np.ndarray):
        return np.where(cond, if_true, if_false)
    return if_true if cond else if_false


def minimum(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return min(a, b)


def maximum(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return max(a, b)
