"""Every kernel spec gfx942's unified-attention dispatcher can reach (``rocke report
--reachable``), so that spill-freedom is checked beyond the shipped variants: the dispatcher
builds specs on demand for feature combinations the variant tables do not list.

The enumeration asks the dispatcher itself (``attention_dispatch.plan``) for the specs of one
problem per class: dtype x head size x block size x KV-cache encoding x every subset of the
score features (softcap, ALiBi, QQ-bias, sliding window, sinks, mm_prefix_range) x path (2D, 3D:
both are reachable for every class, 3D by ``backend="3d"`` or vLLM's 3D rule) x the
transposed-x8 geometry lever (HIPDNN_GFX942_FLASH_WIDE), plus ``reduce_segments`` per dtype x
head size. mm_prefix_range's capacity (1..16 ranges, unrolled) is enumerated at its least and
most code (MM_CAPACITIES). Each class is asked at 1 and 1024 KV heads (KV_HEADS): a 2D grid of
one round gets the grown KV tile (attention_dispatch.one_round_tile), a larger one the table's. The GQA group is a compile-time constant that does not change the register plan
(a multiply-by-reciprocal constant), so one group stands for all (REPRESENTATIVE_GROUP), and
one split group (SPLIT_GROUP, a GQA group above 16) per (path, dtype, head size) with every feature.
The other levers (NUM_WARPS, WAVES_PER_EU, IGLP, Q_DIRECT, ...) and 64-bit page bases are out
of this enumeration: they are tuning switches, off by default.
"""
from __future__ import annotations

import itertools
from rocke.kernels.common.attention_unified import UnifiedAttentionProblem
from rocke.kernels.common.knobs import FLASH_GEOMETRIES, AttentionKnobs
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from rocke.kernels.gfx942 import attention_tiled_2d as a2

FEATURES = ("softcap", "alibi", "qq_bias", "sliding_window", "sinks", "mm_prefix")
MM_CAPACITIES = (1, 16)         # the least and the most mm_prefix_range code (16 unrolled ranges)
REPRESENTATIVE_GROUP = 4
SPLIT_GROUP = 32
KV_DTYPES = (None,) + a2.KV_DTYPES
PATHS = ("2d", "3d")
# KV heads of the enumerated problem: 1 puts every 2D grid in one round (the dispatcher grows
# the KV tile, attention_dispatch.one_round_tile), 1024 fills more than a round (the table's tile)
KV_HEADS = (1, 1024)


def problem_of(dtype: str, head_size: int, block_size: int, kv_dtype, features, *,
               group: int = REPRESENTATIVE_GROUP, mm_ranges: int = MM_CAPACITIES[-1],
               kv_heads: int = 1) -> UnifiedAttentionProblem:
    """One problem of the class: a short prefill (the path is forced by the caller)."""
    on = set(features)
    return UnifiedAttentionProblem(
        dtype=dtype, head_size=head_size, num_q_heads=group * kv_heads, num_kv_heads=kv_heads,
        block_size=block_size, num_seqs=1, total_q=4, max_seqlen_q=4, max_seqlen_k=64,
        softcap=1.0 if "softcap" in on else 0.0, alibi="alibi" in on, qq_bias="qq_bias" in on,
        window_left=8 if "sliding_window" in on else -1, sinks="sinks" in on,
        kv_dtype=kv_dtype, mm_ranges=mm_ranges if "mm_prefix" in on else 0)


def problems():
    """(problem, path, knobs) of every class the enumeration covers."""
    for dtype, d, bs, kv in itertools.product(a2.DTYPES, a2.HEAD_SIZES, a2.BLOCK_SIZES, KV_DTYPES):
        for n in range(len(FEATURES) + 1):
            for feats in itertools.combinations(FEATURES, n):
                for mm, heads in itertools.product(
                        MM_CAPACITIES if "mm_prefix" in feats else MM_CAPACITIES[:1], KV_HEADS):
                    p = problem_of(dtype, d, bs, kv, feats, mm_ranges=mm, kv_heads=heads)
                    for path in PATHS:
                        for wide in FLASH_GEOMETRIES:
                            yield p, path, AttentionKnobs(flash_wide=wide)
    for dtype, d, path, heads in itertools.product(a2.DTYPES, a2.HEAD_SIZES, PATHS, KV_HEADS):
        p = problem_of(dtype, d, 16, None, FEATURES, group=SPLIT_GROUP, kv_heads=heads)
        yield p, path, AttentionKnobs()


def reachable_specs() -> dict:
    """kernel name -> spec, every spec the dispatcher plans for the classes of ``problems``
    (duplicates collapse: a lever that does not apply plans the same spec)."""
    out = {}
    for p, path, knobs in problems():
        for spec in dispatch.plan(p, path, knobs, num_segments=None).specs:
            out.setdefault(spec.kernel_name, spec)
    return out


def corner_specs() -> dict:
    """The heaviest specs of each (path, geometry, dtype, head size, block size, cache
    encoding): every feature on, with and without QQ-bias (it pins 2D to narrow) and with and
    without mm ranges (their one-compare mask replaces the causal + window compares, so the
    kernel without them can be the heavier)."""
    out = {}
    for dtype, d, bs, kv in itertools.product(a2.DTYPES, a2.HEAD_SIZES, a2.BLOCK_SIZES, KV_DTYPES):
        for drop, heads in itertools.product(
                ((), ("qq_bias",), ("mm_prefix",), ("qq_bias", "mm_prefix")), KV_HEADS):
            feats = tuple(f for f in FEATURES if f not in drop)
            p = problem_of(dtype, d, bs, kv, feats, kv_heads=heads)
            for path in PATHS:
                for wide in FLASH_GEOMETRIES:
                    for spec in dispatch.plan(p, path, AttentionKnobs(flash_wide=wide)).specs:
                        out.setdefault(spec.kernel_name, spec)
    return out


