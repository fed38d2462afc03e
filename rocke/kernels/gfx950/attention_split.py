"""gfx950's 3D split-KV rule: which path a call takes and how many segments 3D splits it into
(ALGORITHM.md §14.2). Decided from a sweep of the model of MI355X time over decode and prefill-mix
problems run in the emulator as gfx950 (``benchmarks/dispatch_sweep.py --target gfx950``; every
figure there is a modelled MI355X time, not a GPU time: there is no MI355X here).

gfx942's rule (ALGORITHM.md §10.1) took 3D only below a 2D grid of ``num_sms * 4`` workgroups and
``2 * sqrt(tiles)`` segments cut to whole rounds of ``num_sms * 4``. Over gfx950's 256 CUs the sweep
found it up to 1.6x the modelled-fastest option: decode batches whose 2D grid passes 1024
workgroups still run faster split (every 2D q-block of a decode batch holds one token), and the
segment grid is fastest when it fills the CUs' resident slots about once, not a fixed 4 a CU.
"""
from __future__ import annotations

import math
from typing import Callable

from rocke.kernels.common.attention_problem import UnifiedAttentionProblem, cdiv
from rocke.kernels.gfx942 import attention_dispatch as gfx942

# workgroups of the narrow 3D kernel (1 warp x 16 rows) resident on one gfx950 CU: 8 for d128 at
# block 64 (20224 B of LDS each in 160 KiB; `rocke report --target gfx950`), the decode default
RESIDENT_WORKGROUPS_PER_CU = 8
# a segment walks at least this many KV tiles: one-tile segments modelled slower than two-tile
# ones (1 x 2048 KV, 64 tiles: 64 segments 21.1 us, 32 segments 19.3)
MIN_TILES_PER_SEGMENT = 2


def num_segments(p: UnifiedAttentionProblem, geo: gfx942.Geometry, sms: int) -> int:
    """gfx950's 3D segment count: the power of two nearest (in ratio) the count whose segment grid
    fills every CU's resident slots once (``sms * RESIDENT_WORKGROUPS_PER_CU`` workgroups over one
    segment's grid of q blocks x KV heads x group split), at most MAX_SEGMENTS and at most a
    power of two of MIN_TILES_PER_SEGMENT tiles each. Powers of two split a power-of-two KV
    length into equal segments; the sweep modelled unequal ones (19 segments of 128 tiles: six
    workgroups' work in one) 1.6x slower than 16."""
    base = gfx942.grid_2d(p, geo)            # one segment's workgroups (the 2D grid's formula)
    fill = sms * RESIDENT_WORKGROUPS_PER_CU / base
    by_fill = 1 << max(0, round(math.log2(fill)))
    tiles = cdiv(p.max_seqlen_k, geo.tile_size)
    by_tiles = 1 << max(0, (tiles // MIN_TILES_PER_SEGMENT).bit_length() - 1)
    return min(by_fill, by_tiles, gfx942.MAX_SEGMENTS)


# (applies(problem, num_sms), path, reason): gfx942's first two PATH_RULES, the decode row, then
# AITER's grid rows (gfx942 itself now splits prefills by its own rows), first match wins
DECODE_SPLITS: tuple[Callable, str, str] = (
    lambda p, sms: p.is_decode, "3d",
    "decode (one query token a sequence) with a long context: split whatever the 2D grid -- each "
    "2D q-block holds one token of its rows, so the 2D grid's size says nothing of its work; "
    "modelled MI355X (fp16 / bf16 d128, 32/8 heads, 2048 and 8192 KV): 128-512 sequences, whose "
    "2D grid passes num_sms * 4, run 1.15-1.6x faster split (ALGORITHM.md §14.2)")
PATH_RULES: tuple[tuple[Callable, str, str], ...] = (
    gfx942.PATH_RULES[:2] + (DECODE_SPLITS,) + gfx942.AITER_GRID_RULES)


def select_path(p: UnifiedAttentionProblem, sms: int) -> tuple[str, str]:
    """(path, reason): the first rule of gfx950's PATH_RULES that applies."""
    for applies, path, reason in PATH_RULES:
        if applies(p, sms):
            return path, reason
    raise AssertionError("PATH_RULES ends with a rule that always applies")
