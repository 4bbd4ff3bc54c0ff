"""How the L layers are split over the p pipeline stages (and their v model chunks each).

Default split (Megatron-LM --account-for-embedding-in-pipeline-split and
--account-for-loss-in-pipeline-split, megatron/core/transformer/transformer_block.py
`get_num_layers_to_build`): the embedding and the output head with its loss each count as
one layer, so U = L + 2 units are spread over the P = p*v model chunks as evenly as
possible; the first chunk's extra unit is the embedding and the last chunk's the head.
That is used where it balances the load: where it keeps the heaviest chunk at an even
split's ceil(L/P) layers; otherwise (96 layers on 8 stages) the L layers are split evenly.
Megatron asks P to divide U; fitplan spreads the remainder r = U mod P over the chunks
just before the last (chunks P-1-r .. P-2; with r = P-1 the last chunk too), so later
stages, which hold fewer micro-batches in flight under 1F1B, take the heavier chunks. Where
that would leave the first or last chunk without a layer (U < 2P) the L layers alone are
spread the same way. Llama 3 405B (L = 126, p = 16): 7, 8 x 14, 7 as Meta ran it
(Llama 3 report Sec. 3.3.2); BLOOM-176B (L = 70, p = 12): 5, 6 x 10, 5.

Pinned ends (--first-stage-layers, --last-stage-layers; Megatron-LM's
--decoder-first/last-pipeline-num-layers): the pinned stages hold what is asked, the
remaining layers are spread over the other stages the same way (extras to the later ones).
With virtual stages a stage's layers are the sum of its chunks i, i + p, ..., i + (v-1)p.

Every function here is plain arithmetic on ints or NumPy arrays (p, v may be arrays).
"""
from fitplan.arith import ceil_div, floor_div, is_array, maximum, minimum, select
from fitplan.explain import COUNT, formula
from fitplan.sources import Cite

SPLIT = Cite("megatron-split", "get_num_layers_to_build")


def _first_extra(P, r, ends):
    """The lowest chunk taking one of the r extra units: the chunks before the last (ends),
    or the last r chunks (a run of middle stages)."""
    return select(ends, maximum(P - 1 - r, 1), P - r)


def _share(U, P, j, ends=True):
    """Units of chunk j when U units go to P chunks: U // P each and one of the remainder
    r = U mod P on each of chunks P-1-r .. P-2, never chunk 0, and on the last chunk when
    r = P-1 (ends); or on the last r chunks (not ends)."""
    base = floor_div(U, P)
    r = U - base * P   # U mod P (floor_div: on the search's float arrays, exact for these whole numbers)
    lo = _first_extra(P, r, ends)
    top = P - 2 if ends else P - 1
    extra = ((j >= lo) & (j <= top)) | ((j == P - 1) & (r == P - 1) & ends)   # the last chunk's: only with ends
    return base + select(extra, 1, 0)


def _share_before(U, P, j, ends=True):
    """Units on chunks 0 .. j-1 under _share (the last chunk's extra never lies before j)."""
    base = floor_div(U, P)
    r = U - base * P
    lo = _first_extra(P, r, ends)
    top = P - 2 if ends else P - 1
    return base * j + minimum(maximum(j - lo, 0), maximum(top + 1 - lo, 0))


def _embedding_aware(L, P):
    """Whether the default split counts the embedding and head as a layer each: p > 1, every
    chunk keeps at least one layer (or, where fewer layers than chunks leave no other way, one unit),
    and it does not raise the heaviest chunk above an even
    split's ceil(L/P) (so 96 layers on 8 stages stay 12 each, as Narayanan et al. ran GPT-3,
    while 126 on 16 become 7, 8 x 14, 7; and 126 on 16 x 8 chunks give the first chunk the
    embedding alone and the last the head alone, as Megatron-LM's
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split do)."""
    return (P > 1) & ((floor_div(L + 2, P) >= 2) | ((L < P) & (L + 2 >= P))) & (ceil_div(L + 2, P) == ceil_div(L, P))


def chunk_layers(L, P, j):
    """Layers of model chunk j (0 .. P-1) under the default split."""
    aware = _embedding_aware(L, P)
    with_ends = _share(L + 2, P, j) - select(j == 0, 1, 0) - select(j == P - 1, 1, 0)
    plain = _share(L, P, j)
    return select(P == 1, L, select(aware, with_ends, plain))


def chunk_start(L, P, j):
    """The first layer (0-based) of model chunk j under the default split."""
    aware = _embedding_aware(L, P)
    return select(aware, _share_before(L + 2, P, j) - select(j >= 1, 1, 0), _share_before(L, P, j))


def _pinned_middle(L, p, i, first, last):
    """Layers of middle stage i (1 .. p-2) when the ends are pinned."""
    return _share(L - first - last, maximum(p - 2, 1), i - 1, ends=False)


def _pinned_start(L, p, i, first, last):
    return select(i == 0, 0, first + _share_before(L - first - last, maximum(p - 2, 1), i - 1, ends=False))


def _pins(first, last, L, p):
    """The pinned ends; an unpinned end takes what an even split of the rest over the other
    p - 1 stages gives it, its embedding or head still counting as a unit (at least 1)."""
    if first is None and last is None:
        return None
    if first is not None and last is not None:
        return first, last
    rest = L - (first if first is not None else last)
    share = maximum((rest + 1) // maximum(p - 1, 1) - 1, 1)
    return (first, share) if first is not None else (share, last)


def _split_text(*, L, p, v, first=None, last=None, **_):
    if first is not None or last is not None:
        return "first, last pinned; the rest spread evenly over the middle stages, extras on the later ones"
    if is_array(p) or not _embedding_aware(L, p * v):
        return "the L layers spread evenly over the p*v chunks, extras on the later ones; the stage's chunks i + k*p"
    return ("L + 2 units (the embedding and the head count as a layer each) spread evenly over the p*v chunks; "
            "the stage's chunks i + k*p")


@formula("pipeline/stage_layers", _split_text, SPLIT, COUNT)
def stage_layers(*, L, p, v, i, first=None, last=None):
    """Layers on pipeline stage i (all its chunks)."""
    pins = _pins(first, last, L, p)
    if pins is not None:
        f, l = pins
        return select(p == 1, L, select(i == 0, f, select(i == p - 1, l, _pinned_middle(L, p, i, f, l))))
    P = p * v
    return _over_chunks(v, p, i, lambda j, inside: select(inside, chunk_layers(L, P, j), 0))


def _over_chunks(v, p, i, per_chunk):
    """The sum over stage i's chunks j = i + k*p of per_chunk(j, inside), inside = k < v (what per_chunk gives where
    it is false, 0, is its own to mask). On the search's arrays every chunk at once, k on a new leading axis ahead of
    every axis of v, p and i (the stacked ranks' too), then summed; on ints a loop."""
    if is_array(v):
        import numpy as np
        k = np.arange(int(v.max()), dtype=np.float64).reshape((-1,) + (1,) * max(np.ndim(x) for x in (v, p, i)))
        return per_chunk(i + k * p, k < v).sum(axis=0)
    total = 0
    for k in range(int(maximum(v, 1))):
        total = total + per_chunk(i + k * p, k < v)
    return total


@formula("params/dense_layers_on_stage",
         "sum over the stage's chunks of min(max(L_d - start, 0), layers)  (the first L_d layers are dense)",
         Cite("fitplan", "formulas.md#moe (dense layers first, as DeepSeek-V3)"), COUNT)
def dense_layers_on_stage(*, L, L_d, p, v, i, first=None, last=None):
    """Dense-MLP layers among stage i's when the first L_d of the L layers are dense."""
    clip = lambda start, n: minimum(maximum(L_d - start, 0), n)
    pins = _pins(first, last, L, p)
    if pins is not None:
        f, l = pins
        n = stage_layers.fn(L=L, p=p, v=v, i=i, first=first, last=last)
        return select(p == 1, minimum(L_d, L), clip(_pinned_start(L, p, i, f, l), n))
    P = p * v
    return _over_chunks(v, p, i, lambda j, inside: select(inside, clip(chunk_start(L, P, j), chunk_layers(L, P, j)), 0))


def _at(cum, j):
    """cum[j] for an int or an array of indices j."""
    if is_array(j):
        import numpy as np
        return np.asarray(cum, dtype=np.int64)[np.asarray(j).astype(np.int64)]
    return cum[int(j)]


def kind_layers_on_stage(*, L, cum, p, v, i, first=None, last=None):
    """Layers of one kind among stage i's, a hybrid model's pattern being split like any
    model's layers (each chunk a contiguous slice of it, as Megatron-LM's MambaBlock
    _select_layers_for_pipeline_parallel takes its rank's slice): the sum over the stage's
    chunks of cum[start + n] - cum[start], cum[j] being the kind's count among the first j
    layers (fitplan.counts.hybrid.prefix_counts). Ints or arrays."""
    pins = _pins(first, last, L, p)
    if pins is not None:
        f, l = pins
        n = stage_layers.fn(L=L, p=p, v=v, i=i, first=first, last=last)
        start = select(p == 1, 0, _pinned_start(L, p, i, f, l))
        n = select(p == 1, L, n)
        return _at(cum, start + n) - _at(cum, start)
    P = p * v

    def per_chunk(j, inside):   # a chunk past the stage's v indexes cum at 0
        start, n = select(inside, chunk_start(L, P, j), 0), select(inside, chunk_layers(L, P, j), 0)
        return _at(cum, start + n) - _at(cum, start)
    return _over_chunks(v, p, i, per_chunk)


def boundary_stage(*, L, p, v, first=None, last=None):
    """The lowest middle stage (1 .. p-2) holding the larger of the two middle layer counts
    (1 when they are all equal). Layer counts do not decrease from there, so stages 0, 1,
    this one and p-1 hold every (count, ends) combination at its most micro-batches in
    flight: the search evaluates those four (fitplan.memory.breakdown)."""
    pins = _pins(first, last, L, p)
    if pins is not None:
        f, l = pins
        n_mid = maximum(p - 2, 1)
        r = (L - f - l) % n_mid
        return minimum(1 + select(r == 0, 0, n_mid - r), n_mid)
    P = p * v
    aware = _embedding_aware(L, P)
    U = select(aware, L + 2, L)
    T = _first_extra(P, U % P, True)
    return minimum(maximum(select(U % P == 0, 1, T % p), 1), maximum(p - 2, 1))


def split(L: int, p: int, v: int = 1, first: int | None = None, last: int | None = None) -> tuple[int, ...]:
    """Layers per stage, stage 0 first (for reports and the JSON's stage_layers)."""
    return tuple(int(stage_layers.fn(L=L, p=p, v=v, i=i, first=first, last=last)) for i in range(p))
