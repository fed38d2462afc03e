"""Flash-attention pieces shared by the dense sample and the gfx942 paged kernels: the online
softmax step of ALGORITHM.md §2 on score fragments, in the log2 domain."""

from __future__ import annotations

import math

from rocke import dsl
from rocke.dsl import exp2, select
from rocke.dsl.fragment import AxisVector, ROW

LOG2E = 1.4426950408889634


def finite_base(m: dsl.Value) -> dsl.Value:
    """``m``, or 0 where ``m`` is -inf (no key seen yet), so ``exp2(x - base)`` is never NaN."""
    return select(m == -math.inf, 0.0, m)


def online_softmax_update(m: AxisVector, l: AxisVector, scores, axis: int = ROW):
    """One KV tile of the streaming softmax (ALGORITHM.md §2) for log2-domain score fragments
    whose keys run along ``axis`` (ROW: S^T tiles, keys on rows; COL: S tiles): new running max
    and sum, the tile's probabilities, and alpha = 2^(m_old - m_new) for the output accumulator."""
    tile_max = scores[0]
    for s in scores[1:]:
        tile_max = tile_max.maximum(s)
    m_new = m.maximum(tile_max.reduce(axis, "max"))
    base = m_new.map(finite_base)
    alpha = (m - base).map(lambda x: exp2(x, fast=True))
    probs = [(s - base).exp2(fast=True) for s in scores]
    tile_sum = probs[0]
    for p in probs[1:]:
        tile_sum = tile_sum + p
    l_new = l * alpha + tile_sum.reduce(axis, "sum")
    return m_new, l_new, probs, alpha
