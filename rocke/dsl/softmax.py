"""The streaming (online) softmax step of flash attention, as a DSL building block.

``online_softmax_update`` folds one tile of log2-domain scores into a running max ``m`` and sum
``l`` (ALGORITHM.md §2) and returns the tile's probabilities and ``alpha``, the factor that
rescales an output accumulator; scale scores by ``softmax_scale * LOG2E`` first so ``exp2``
computes ``exp``. ``finite_base`` keeps ``exp2(x - m)`` NaN-free before any key was seen.
The shipped attention kernels and samples use these (one definition).
"""

from __future__ import annotations

import math
from functools import cache

from ..arch.mfma import get_atom
from .fragment import ROW, AxisVector, Fragment, load_fragment
from .math import exp2
from .tv_layout import TVLayout
from .values import Value, concat, select

LOG2E = 1.4426950408889634       # log2(e): exp(x) = exp2(x * LOG2E)


def finite_base(m: Value) -> Value:
    """``m``, or 0 where ``m`` is -inf (no key seen yet), so ``exp2(x - base)`` is never NaN."""
    return select(m == -math.inf, 0.0, m)


def online_softmax_update(m: AxisVector, l: AxisVector, scores, axis: int = ROW, *,
                          via: str = "swizzle"):
    """One KV tile of the streaming softmax for log2-domain score fragments whose keys run
    along ``axis`` (ROW: S^T tiles, keys on rows; COL: S tiles): the new running max and sum,
    the tile's probabilities, and alpha = 2^(m_old - m_new) for the output accumulator.
    ``via``: how the cross-lane steps of the row reductions move data (Fragment.reduce)."""
    tile_max = scores[0]
    for s in scores[1:]:
        tile_max = tile_max.maximum(s)
    m_new = m.maximum(tile_max.reduce(axis, "max", via=via))
    base = m_new.map(finite_base)
    alpha = (m - base).map(lambda x: exp2(x, fast=True))
    probs = [(s - base).exp2(fast=True) for s in scores]
    tile_sum = probs[0]
    for p in probs[1:]:
        tile_sum = tile_sum + p
    l_new = l * alpha + tile_sum.reduce(axis, "sum", via=via)
    return m_new, l_new, probs, alpha


def transposed_scores(mma, k_tile, q_ops, kv_frags: int):
    """S^T = K Q^T for one KV tile in LDS (ALGORITHM.md §4): ``scores[i][t]`` is the
    [atom.m keys x atom.n queries] fragment of key fragment ``i`` and query fragment ``t``.
    ``q_ops[s][t]`` is query fragment ``t``'s B operand for the ``s``-th atom.k slice of the head
    dimension; each K operand is loaded once and used for every query fragment."""
    am, ak = mma.atom.m, mma.atom.k
    q_frags = len(q_ops[0])
    scores = [[mma.zeros() for _ in range(q_frags)] for _ in range(kv_frags)]
    for i in range(kv_frags):
        for s in range(len(q_ops)):
            k_op = load_fragment(k_tile, mma.A, (i * am, s * ak))
            for t in range(q_frags):
                scores[i][t] = mma(k_op, q_ops[s][t], scores[i][t])
    return scores


# O^T = V^T P^T with P^T the S^T accumulator (32x32, keys on rows). On 32x32x8 P^T's registers
# already have the B layout (``Fragment.as_operand``). On the wide-K 32x32x16 the accumulator
# gives a lane keys {4h..4h+3, 8+4h..8+4h+3} of each 16-key block in registers 0..7 (h = lane //
# 32), where the B operand nominally holds keys 8h..8h+7: P^T's registers are used as the B
# operand as they are, and the V^T A operand is gathered in the same key order -- two half-K
# (32x32x8 layout) reads at keys +0 and +8, each lane's 4 keys at 4h -- so the contraction pairs
# every key's P with its own V row.
def _wide_k_32(mma) -> bool:
    return mma.atom.m == 32 and mma.atom.k_per_lane == 8


@cache
def _half_k_a_layout(key: str) -> TVLayout:
    return TVLayout.mfma_a(get_atom(key))


def transposed_pv_operand(mma, probs, sub: int):
    """P^T (a 32x32 accumulator fragment, keys on rows) of keys [sub, sub + atom.k) as the B
    operand of O^T = V^T P^T, in the key order ``transposed_v_operand`` reads V^T in."""
    if not _wide_k_32(mma):
        return probs.as_operand(mma.B, (sub, 0))
    n = mma.atom.k_per_lane
    first = sub // 16 * n
    return Fragment(probs.value[first:first + n], mma.B)


def transposed_v_operand(mma, vt_tile, d0: int, key0, *, transposed: bool = False):
    """The V^T A operand of head-dim rows [d0, d0 + 32) and keys [key0, key0 + atom.k) from a V^T
    tile (``transposed``: a row-major V tile read transposed), in ``transposed_pv_operand``'s key
    order."""
    if not _wide_k_32(mma):
        return load_fragment(vt_tile, mma.A, (d0, key0), transposed=transposed)
    half = _half_k_a_layout(f"32x32x{mma.atom.k // 2}_{mma.atom.a_type}")
    lo = load_fragment(vt_tile, half, (d0, key0), transposed=transposed)
    hi = load_fragment(vt_tile, half, (d0, key0 + 8), transposed=transposed)
    return Fragment(concat(lo.value, hi.value), mma.A)
