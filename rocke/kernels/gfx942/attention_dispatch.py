"""gfx942's unified-attention dispatcher: which path (2D or 3D split-KV), which geometry, which
kernel specs, and the launches of a plan (ALGORITHM.md §10).

The rules are small tables, first match wins, each row with the reason beside it. The problem
(``attention_unified.UnifiedAttentionProblem``) is target-free and already validated; this module
adds what gfx942 can run (``CAPABILITIES``) and how it runs it. Another target provides a module of
the same name and functions under ``rocke/kernels/<target>/``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable

from rocke.arch import get_target
from rocke.arch.occupancy_rules import occupancy
from rocke.kernels.common import knobs as knobs_mod
from rocke.kernels.common.attention_problem import (BACKENDS, AttentionCapabilities,
                                                    UnifiedAttentionProblem, cdiv)
from rocke.kernels.common.knobs import AttentionKnobs
from rocke.kernels.gfx942 import attention_launch
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942 import attention_spill
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.kernels.gfx942 import reduce_segments

CAPABILITIES = AttentionCapabilities(head_sizes=a2.HEAD_SIZES, block_sizes=a2.BLOCK_SIZES,
                                     max_group=a2.MAX_GROUP_SPLIT,   # groups above 16: split_group
                                     kv_dtypes=a2.KV_DTYPES,
                                     token_scale_kv_dtypes=quant.TOKEN_SCALE_KV_DTYPES,
                                     out_dtypes=quant.OUT_DTYPES)

# the 2D grid "fills the device" at this many workgroups per CU (ALGORITHM.md §10.1)
WORKGROUPS_PER_CU_TARGET = 4
# at or below this KV length the 2D path is taken regardless of the grid: the walk is short
SHORT_CONTEXT_K = 512
# the q-block granularity the path rule counts in (vLLM/AITER's 2D BLOCK_M, ALGORITHM.md §10.1)
REFERENCE_BLOCK_M = 16
MAX_SEGMENTS = 64                   # bounds the 3D workspace and reduce_segments' walk
# reduce_segments issues pass 2's first trip under pass 1 (spec early_loads, ALGORITHM.md §5.2) at
# these head sizes: those whose classes in the model's table were modelled with it (every 3D time
# of a class is modelled with one reduce); other head sizes keep the rules, modelled without it
REDUCE_EARLY_LOADS_HEAD_SIZES = (64, 128, 256)
# segments per sqrt(KV tiles): the modelled optimum of the walk/merge trade (ALGORITHM.md §10.1)
SEGMENTS_PER_SQRT_TILE = 2
# 3D fills the CUs' resident slots once when that gives every q block at least this many
# segments (fill_segments, ALGORITHM.md §10.1); below it the square-root rule above decides
MIN_FILL_SEGMENTS = 8
# a prefill (not decode) whose KV walks are at most PREFILL_2D_MAX_KV keys runs 2D once its grid
# gives every CU a workgroup (prefill_fills_2d, ALGORITHM.md §10.1)
PREFILL_2D_WORKGROUPS_PER_CU = 1
PREFILL_2D_MAX_KV = 2048
# prefill up to this query length is host-overhead dominated -> graph replay (ALGORITHM.md §10.3)
GRAPH_PREFILL_MAX_Q = 768


def num_sms(target: str = "gfx942") -> int:
    """Compute units of the target (rocke/arch: 304 for MI300X, 256 for MI355X). A call on a GPU
    passes that GPU's own count to ``plan`` (``attention_device.compute_units``)."""
    return get_target(target).cu_count


def total_num_q_blocks(total_q: int, num_seqs: int, block_q: int) -> int:
    """q-blocks of a varlen batch when each sequence starts a new block (vLLM's bound)."""
    return total_q // block_q + num_seqs


def reference_block_q(num_queries_per_kv: int) -> int:
    """Query tokens per q-block at the reference granularity: BLOCK_M rows hold the GQA group."""
    block_m = REFERENCE_BLOCK_M if num_queries_per_kv <= REFERENCE_BLOCK_M else \
        1 << (num_queries_per_kv - 1).bit_length()
    return max(1, block_m // num_queries_per_kv)


@dataclass(frozen=True)
class Geometry:
    """How one path is mapped onto the device (ALGORITHM.md §10.2)."""
    path: str                   # "2d" | "3d"
    regime: str                 # attention_policy.NARROW | TRANSPOSED_X8
    name: str                   # the attention_policy.GEOMETRIES row (or "w<N>": NUM_WARPS override)
    num_warps: int
    block_m_per_warp: int
    tile_size: int
    k_single_buffer: bool
    num_segments: int = 1       # 3D only
    reason: str = ""
    one_page_tile: bool = False     # 2D: one page lookup per K/V tile (one_round_body)
    early_v: bool = False           # 2D: V_{j+1} loads before P V_j (one_round_body)

    @property
    def block_m(self) -> int:
        return self.num_warps * self.block_m_per_warp




def grid_2d_reference(p: UnifiedAttentionProblem) -> int:
    """The q-block x kv-head grid the path rule compares with the device (ALGORITHM.md §10.1)."""
    block_q = reference_block_q(p.num_queries_per_kv)
    return total_num_q_blocks(p.total_q, p.num_seqs, block_q) * p.num_kv_heads


def select_path(p: UnifiedAttentionProblem, sms: int | None = None) -> tuple[str, str]:
    """(path, reason): the first rule of PATH_RULES that applies."""
    sms = num_sms() if sms is None else sms
    for applies, path, reason in PATH_RULES:
        if applies(p, sms):
            return path, reason
    raise AssertionError("PATH_RULES ends with a rule that always applies")


def geometry(p: UnifiedAttentionProblem, path: str, knobs: AttentionKnobs | None = None,
         sms: int | None = None) -> Geometry:
    """The kernel geometry of ``path`` for this problem: the table's (``table_geometry``), its
    2D KV tile grown when the grid runs in one round on gfx942 (``one_round_tile``)."""
    knobs = AttentionKnobs() if knobs is None else knobs
    geo = table_geometry(p, path, knobs, sms)
    return one_round_tile(p, geo, knobs, sms) if path == "2d" else geo


def table_geometry(p: UnifiedAttentionProblem, path: str, knobs: AttentionKnobs | None = None,
                   sms: int | None = None) -> Geometry:
    """The first matching GEOMETRY_RULES row of ``path``, with 3D's segment count (another
    target's dispatcher builds its own rules on this, rocke/kernels/gfx950)."""
    knobs = AttentionKnobs() if knobs is None else knobs
    for rule_path, applies, make, reason in GEOMETRY_RULES:
        if rule_path == path and applies(p):
            geo = replace(make(p, knobs), reason=reason)
            if path == "3d":
                geo = replace(geo, num_segments=num_segments(p, geo, sms))
            return geo
    raise AssertionError(f"GEOMETRY_RULES has no default row for path {path!r}")


def num_segments(p: UnifiedAttentionProblem, geo: Geometry, sms: int | None = None) -> int:
    """3D's segment count (ALGORITHM.md §10.1): where one resident round holds at least
    MIN_FILL_SEGMENTS segments, the count that fills it (fill_segments); else about
    2 * sqrt(KV tiles) -- a segment's walk
    shrinks as 1/segments while reduce_segments waits once per segment, so the sum is least near
    sqrt(tiles) x a constant, which benchmarks/dispatch_sweep.py's modelled times put at 2 --
    at most MAX_SEGMENTS and the KV tiles; and where the grid passes a round of the device target
    (num_sms * 4 workgroups), cut to whole rounds: a few workgroups past a round cost a round."""
    sms = num_sms() if sms is None else sms
    base = segment_workgroups(p, geo)
    tiles = cdiv(p.max_seqlen_k, geo.tile_size)
    filled = fill_segments(p, geo, base, tiles, sms)
    if filled:
        return filled
    wanted = max(1, min(SEGMENTS_PER_SQRT_TILE * math.isqrt(tiles), tiles, MAX_SEGMENTS))
    round_size = sms * WORKGROUPS_PER_CU_TARGET
    rounds = wanted * base // round_size
    if rounds:          # whole rounds only: a few workgroups past a round cost a whole round
        return max(1, rounds * round_size // base)
    return wanted


@functools.lru_cache(maxsize=4096)
def rule_specs(p: UnifiedAttentionProblem, geo: Geometry):
    """The specs of ``geo`` at the default knobs, the kernels the segment rules size; None when
    the spec refuses the problem. Memoised (problem and geometry are frozen, and the answer is
    theirs alone): each segment rule asks it, num_segments twice."""
    try:
        return make_specs(p, geo, AttentionKnobs())
    except (ValueError, NotImplementedError):
        return None


def segment_workgroups(p: UnifiedAttentionProblem, geo: Geometry) -> int:
    """Workgroups of one segment of ``geo``'s 3D launch: q blocks x head blocks of the grid
    ``attention_launch.launch_geometries`` gives the launch itself, so the segment rules
    (num_segments, fill_segments, rounds_segments) count the grid that runs -- KV heads x
    ``group_split`` head blocks for a GQA group above MAX_GROUP (split_group, ALGORITHM.md
    §7.1). Where the spec refuses the problem (no such launch), grid_2d's count, the same
    q blocks x KV heads x split."""
    specs = rule_specs(p, geo)
    if specs is not None:
        try:
            (grid, _), _ = attention_launch.launch_geometries(p, specs, 1)
            return grid[0] * grid[1]
        except ValueError:      # a grid extent the launch refuses
            pass
    return grid_2d(p, geo)


def resident_3d_workgroups(p: UnifiedAttentionProblem, geo: Geometry) -> int:
    """3D workgroups of ``geo`` one CU holds at once, by their LDS (the narrow 3D kernels are
    LDS-bound: d64 11008 B -> 5 a CU, d128 20224 B -> 3; one warp each, so the wave slots allow
    more); 0 when the spec refuses the problem (the caller keeps the square-root rule)."""
    specs = rule_specs(p, geo)
    if specs is None:
        return 0
    spec = specs[0]
    lds = sum(policy.lds_plan(spec).footprint().values())
    return occupancy(vgprs=1, lds_bytes=lds, workgroup_size=64 * geo.num_warps,
                     target=get_target("gfx942")).workgroups_per_cu


def fill_segments(p: UnifiedAttentionProblem, geo: Geometry, base: int, tiles: int,
                  sms: int) -> int:
    """3D's segment count when the segment grid can fill every CU's resident slots once with
    at least MIN_FILL_SEGMENTS segments (small decode batches); else 0. The count is the most
    segments whose grid (``base`` workgroups a segment: segment_workgroups, the launch's) fits
    ``sms`` x the resident workgroups, at most the KV tiles and MAX_SEGMENTS, then the fewest
    segments with the same longest walk
    (``cdiv(tiles, cdiv(tiles, n))``: the extra ones would only add workgroups). Since
    reduce_segments waits once per 32 segments a segment costs little, and the walk is set by
    the longest segment: benchmarks/dispatch_sweep.py (modelled MI300X, 1/2/4 decode sequences,
    32/8 heads, 1024-8192 KV) put the best count where the grid fills the resident slots about
    once -- 1 x 2048 KV fp16 d128: 16 segments (the square-root rule) 23.5 us, 64 18.0
    (ALGORITHM.md §10.1)."""
    resident = resident_3d_workgroups(p, geo)
    fill = sms * resident // base
    if fill < MIN_FILL_SEGMENTS:
        return 0
    wanted = min(fill, tiles, MAX_SEGMENTS)
    return cdiv(tiles, cdiv(tiles, wanted))


def prefill_fills_2d(p: UnifiedAttentionProblem, sms: int) -> bool:
    """Whether a prefill (not decode) runs 2D below AITER's num_sms * 4 grid: its 2D grid gives
    every CU a workgroup and no KV walk passes PREFILL_2D_MAX_KV keys. 2D's time is about its
    longest q block's walk (one sequence's 2D decode: 41 / 77 us at 1024 / 2048 keys, fp16 d128,
    modelled MI300X), and 3D writes and reduces fp32 partials for every query row: at most 2048
    keys 2D won from 528 workgroups; with 4096-key decode rows in the batch (a 512-workgroup
    mix) the longest walk made 2D 1.27x slower than split (ALGORITHM.md §10.1)."""
    return (not p.is_decode and p.max_seqlen_k <= PREFILL_2D_MAX_KV
            and grid_2d_reference(p) >= sms * PREFILL_2D_WORKGROUPS_PER_CU)


# a 2D grid of at most num_sms workgroups runs in one round, one workgroup per CU: the KV tile
# then grows to the largest of these the LDS admits (ALGORITHM.md §10.2)
ONE_ROUND_TILES = (64, 32)


def grid_2d(p: UnifiedAttentionProblem, geo: Geometry) -> int:
    """Workgroups of the 2D launch of ``geo``: q blocks (a sequence starts a new block) x KV heads
    x the GQA group's split."""
    group, split = split_group(p.num_queries_per_kv)
    block_q = max(1, geo.block_m // group)
    return total_num_q_blocks(p.total_q, p.num_seqs, block_q) * p.num_kv_heads * split


def one_round_tile(p: UnifiedAttentionProblem, geo: Geometry, knobs: AttentionKnobs,
                   sms: int | None = None) -> Geometry:
    """The 2D geometry with its KV tile grown to the largest of ONE_ROUND_TILES that the spec
    accepts (LDS), when its grid fits the device in one round (<= num_sms workgroups): every
    workgroup then has a CU to itself, so the workgroups per CU a small tile's LDS buys are
    unused, and a tile twice as long halves the KV walk's tiles and its exposed round trips.
    benchmarks/profile.py, modelled MI300X: a single 128-token prefill f16 d128 wide4
    15.73 -> 13.64 us, bf16 d128 14.80 -> 12.43, bf16 d64 16.83 -> 14.12, f16 d256 (32-key tile)
    24.54 -> 17.76; a single 640-token prefill f16 d128 52.64 -> 40.88. The geometry levers (NUM_WARPS, FLASH_WIDE: an explicit geometry; L4 with a
    64-key tile and every feature spills 4 SGPRs), batch invariance (the tile must not depend on
    the batch) and QQ-bias (its per-score bias gather over a 64-key tile spills
    SGPRs on bf16 d128: `rocke report --reachable --corners`) keep the table's tile;
    per-token-head KV scales grow it to 32 keys at most (a 64-key tile's per-row scale loads
    spilled 1-7 SGPRs on bf16 d64/d128; the 32-key tile none). A transposed-x8 kernel with the
    plain window mask (a window alone: needs_interval_mask) keeps the table's tile too: f16 d128
    wide4 with a 64-key tile spilled 9-10 SGPRs at blocks 16 and 64, GQA 1 and 4; 32 keys none."""
    sms = num_sms() if sms is None else sms
    levers = knobs.num_warps is not None or knobs.flash_wide != AttentionKnobs().flash_wide
    plain_window_x8 = (p.window_left >= 0 and not needs_interval_mask(p)
                       and geo.regime == policy.TRANSPOSED_X8)
    window_one_page = plain_window_x8 and x8_window_interval(p, geo)
    if p.batch_invariant or levers or p.qq_bias or (plain_window_x8 and not window_one_page) \
            or grid_2d(p, geo) > sms:
        return geo
    for tile in ONE_ROUND_TILES:
        if p.kv_token_scales and tile > 32:
            continue
        if window_one_page and p.block_size % tile:     # a window grows only to one page's tile
            continue
        if tile <= geo.tile_size:
            break
        buffers = one_round_k_buffers(p, geo, tile)
        for single in buffers:
            grown = replace(geo, tile_size=tile, k_single_buffer=single,
                            reason=geo.reason + f"; one round ({grid_2d(p, geo)} workgroups <= "
                                                f"{sms} CUs): the {tile}-key tile"
                                                + (", two K buffers" if len(buffers) > 1 and not single
                                                   else ""))
            try:
                make_specs(p, grown, knobs)
            except ValueError:      # the spec refuses it (LDS): fewer K buffers, or the next tile
                continue
            return one_round_body(p, grown, knobs)
    return geo


def plain_one_round(p: UnifiedAttentionProblem, geo: Geometry) -> bool:
    """No score feature (or, on the transposed-x8 path, a sliding window alone, masked by
    interval: x8_window_interval), the cache and output in the Q dtype."""
    window_alone = p.features == frozenset({"sliding_window"}) and x8_window_interval(p, geo)
    return (not p.features or window_alone) and p.kv_dtype is None and p.out_dtype is None


def one_round_body(p: UnifiedAttentionProblem, geo: Geometry, knobs: AttentionKnobs) -> Geometry:
    """A plain one-round prefill's grown geometry (plain_one_round; else ``geo`` as it is),
    from the model's breakdown of its slowest workgroup (ALGORITHM.md §10.2):
    - one page lookup per K/V tile (spec ``one_page_tile``) where the page holds the tile: the
      copy's per-step lookups (a scalar load, its wait and ~12 SALU per 16-byte row step) were
      a fifth of the d256 kernel's serial path;
    - d256 narrow takes 4 warps x 16 rows (not 2): the K/V copy steps, split over the
      workgroup's waves, halve per wave, while each wave's MFMA and softmax work is the same.
    The specs are built here so that one the spec refuses keeps ``geo``."""
    if not plain_one_round(p, geo):
        return geo
    body = geo
    if p.block_size % geo.tile_size == 0:
        body = replace(body, one_page_tile=True, reason=body.reason + ", one page per tile")
    if geo.regime == policy.NARROW and p.head_size == 256 and geo.num_warps == 2:
        body = replace(body, name="narrow_w4m16", num_warps=4,
                       reason=body.reason + ", 4 warps x 16 rows")
    if early_v_body(p, body):
        body = replace(body, early_v=True, reason=body.reason + ", V loads a step ahead")
    try:
        make_specs(p, body, knobs)
    except ValueError:
        return geo
    return body


def early_v_body(p: UnifiedAttentionProblem, geo: Geometry) -> bool:
    """Whether a plain one-round prefill takes ``early_v`` (V_{j+1} issued before P V_j, K_{j+1}
    stored after it): d256 narrow with two K buffers, whose steps left ~540 cycles of each round
    trip exposed behind S_j and its softmax (ALGORITHM.md §10.2)."""
    return (geo.regime == policy.NARROW and p.head_size == 256 and not geo.k_single_buffer)


def one_round_k_buffers(p: UnifiedAttentionProblem, geo: Geometry, tile: int) -> tuple[bool, ...]:
    """The K buffering (k_single_buffer values) one_round_tile tries for ``tile``, best first.
    One K buffer when the workgroup's rows fit the tile (policy.default_k_single_buffer) -- but
    in one round LDS buys no extra workgroups, so a plain prefill (no score feature, the cache
    and output in the Q dtype) takes two where they fit: the first K tile then loads with Q and
    V_j / K_{j+1} land after S_j's softmax (attention_pipeline.TileLoop), which one K buffer
    cannot do. benchmarks/profile.py single 128-token prefill, modelled MI300X: bf16 d128 narrow
    12.43 -> 11.36 us, f16 d256 narrow 17.76 -> 15.35. Features and fp8 keep one buffer (their
    thousands of reachable specs are not all compiled spill-free with two)."""
    single = policy.default_k_single_buffer(geo.regime == policy.TRANSPOSED_X8, geo.num_warps,
                                            geo.block_m_per_warp, tile)
    plain = not p.features and p.kv_dtype is None and p.out_dtype is None
    return (False, True) if single and plain else (single,)


# ---- the dispatcher's rules (ALGORITHM.md §10). First match wins; the reason is the why. ----
# (applies(problem, num_sms), path, reason)
# AITER's use_2d_kernel grid rows (ALGORITHM.md §10.1): gfx942 reads them after its decode and
# prefill rows, gfx950 after its decode row (rocke/kernels/gfx950/attention_split.py)
AITER_GRID_RULES: tuple[tuple[Callable, str, str], ...] = (
    (lambda p, sms: grid_2d_reference(p) >= sms * WORKGROUPS_PER_CU_TARGET, "2d",
     "the q-block x kv-head grid reaches num_sms * 4 workgroups: 2D already fills the device"),
    (lambda p, sms: True, "3d",
     "long context with too few 2D workgroups: split the KV walk into segments to fill the device"),
)
PATH_RULES: tuple[tuple[Callable, str, str], ...] = (
    (lambda p, sms: p.window_left >= 0, "2d",
     "sliding window: the walk is at most the window's tiles, so segments would only add a "
     "launch and workspace traffic"),
    (lambda p, sms: p.max_seqlen_k <= SHORT_CONTEXT_K, "2d",
     "short context (max_seqlen_k <= 512): the KV walk is short, segments would only add a "
     "launch and workspace traffic"),
    (lambda p, sms: p.is_decode, "3d",
     "decode (one query token a sequence) with a long context: split whatever the 2D grid -- a "
     "2D q-block holds one token's rows and walks its whole KV alone; modelled MI300X (fp16/bf16 "
     "d64/d128, 32/8 heads, 1024-8192 KV): 128 sequences, whose 2D grid passes num_sms * 4, run "
     "1.06-1.7x faster split (ALGORITHM.md §10.1)"),
    (lambda p, sms: prefill_fills_2d(p, sms), "2d",
     "a prefill with KV walks of at most 2048 keys whose q-block x kv-head grid gives every CU a "
     "workgroup: 2D's time is then about its longest walk, while split every query row writes "
     "fp32 partials per segment for reduce_segments -- modelled MI300X, prefill mixes and chunked "
     "prefills of 528-1128 2D workgroups ran 1.3-2.5x slower split (ALGORITHM.md §10.1)"),
) + AITER_GRID_RULES


def _transposed_x8_geometry(path: str, name: str, warps: int | None,
                            p: UnifiedAttentionProblem) -> Geometry:
    """A transposed-x8 geometry of the registry (attention_policy.GEOMETRIES), ``warps``
    overriding its warp count (HIPDNN_GFX942_NUM_WARPS)."""
    row = policy.geometry(name)
    if warps is not None and warps != row.num_warps:
        same_width = policy.geometry_with_warps(policy.TRANSPOSED_X8, warps)
        name = same_width.name if same_width else f"w{warps}"
    else:
        warps = row.num_warps
    tile = row.spec_fields(p.head_size)["tile_size"]
    return Geometry(path, policy.TRANSPOSED_X8, name, warps, row.block_m_per_warp, tile,
                    k_single_buffer=policy.default_k_single_buffer(True, warps, row.block_m_per_warp,
                                                                   tile))


def _transposed_x8_2d(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    return _transposed_x8_geometry("2d", k.flash_geometry, k.num_warps, p)


def _narrow_geometry(path: str, row: policy.GeometryRow, p: UnifiedAttentionProblem) -> Geometry:
    tile = policy.default_tile(False, p.block_size, p.head_size)
    return Geometry(path, policy.NARROW, row.name, row.num_warps, row.block_m_per_warp, tile,
                    k_single_buffer=policy.default_k_single_buffer(
                        False, row.num_warps, row.block_m_per_warp, tile))


def _narrow_2d(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    return _narrow_geometry("2d", policy.narrow_2d_geometry(p.head_size), p)


def _narrow_3d(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    return _narrow_geometry("3d", policy.NARROW_3D, p)


def _narrow_2d_per_token_qq_bias(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    """d64 with QQ-bias and per-token-head scales: 2 warps x 16 rows, T = 16 (ALGORITHM.md §12)."""
    geo = _narrow_geometry("2d", policy.geometry("narrow_w2m16"), p)
    return replace(geo, tile_size=16, k_single_buffer=policy.default_k_single_buffer(
        False, geo.num_warps, geo.block_m_per_warp, 16))


def _narrow_3d_per_token_qq_bias(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    """3D d64 with QQ-bias and per-token-head scales: T = 16, K double-buffered (ALGORITHM.md
    §10.2)."""
    return replace(_narrow_3d(p, k), tile_size=16, k_single_buffer=False)


def _narrow_3d_double_k(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    return replace(_narrow_3d(p, k), k_single_buffer=False)


def _narrow_3d_two_warps(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    return _narrow_geometry("3d", policy.geometry("narrow_w2m16"), p)


def _narrow_2d_single_k(p: UnifiedAttentionProblem, k: AttentionKnobs) -> Geometry:
    return replace(_narrow_2d(p, k), k_single_buffer=True)


def _f16_transposed_x8_row(p: UnifiedAttentionProblem) -> bool:
    return p.dtype == "f16" and p.head_size in a2.TRANSPOSED_X8_HEAD_SIZES


def _narrow_2d_row(p: UnifiedAttentionProblem) -> bool:
    return True


# (path, applies(problem), make(problem, knobs) -> Geometry, reason). The numbers (warps, rows,
# tile) come from the kernel's shipped geometry table, so the dispatcher picks shipped variants.
GEOMETRY_RULES: tuple[tuple[str, Callable, Callable, str], ...] = (
    ("2d", lambda p: p.qq_bias and p.kv_token_scales and p.head_size == 64, _narrow_2d_per_token_qq_bias,
     "QQ-bias with per-token-head KV scales at d64: narrow 2 warps x 16 rows, T = 16; d64's 4 x 32 "
     "rows spilled 1-6 SGPRs with every feature on (its two bias row groups plus the scale caches' "
     "resources; rocke report --reachable --corners, ALGORITHM.md §12)"),
    ("2d", lambda p: p.kv_token_scales and p.head_size == 256 and p.block_size == 16,
     _narrow_2d_single_k,
     "per-token-head KV scales at d256, block 16: narrow with one K buffer; the double buffer's "
     "two tiles in flight spilled 2 SGPRs with every feature on (at blocks 32/64 one K buffer "
     "is the one that spills, 2-3; ALGORITHM.md §12)"),
    ("2d", lambda p: p.qq_bias, _narrow_2d,
     "QQ-bias: narrow, whatever the dtype: the bias is one gathered load per score value, and the "
     "transposed-x8 layout's 16 score values per lane (x T/32 subtiles) exhaust the registers (SGPR/VGPR "
     "spills), while the narrow layout holds 4 per 16x16 subtile (ALGORITHM.md §12.4)"),
    ("3d", lambda p: p.qq_bias and p.kv_token_scales and p.head_size == 64, _narrow_3d_per_token_qq_bias,
     "QQ-bias with per-token-head KV scales at d64: narrow 1 warp x 16 rows, T = 16 with two K "
     "buffers; the 32-key tile spilled 1-2 SGPRs with most features on, the 16-key one with one K "
     "buffer 2 (ALGORITHM.md §10.2)"),
    ("3d", lambda p: p.qq_bias and p.kv_token_scales and p.head_size == 128 and p.block_size >= 32,
     _narrow_3d_double_k,
     "QQ-bias with per-token-head KV scales at d128, blocks 32/64: narrow 1 warp x 16 rows, "
     "T = 32 with two K buffers; one K buffer spilled up to 3 SGPRs (16 mm ranges, fp8) "
     "(ALGORITHM.md §10.2)"),
    ("3d", lambda p: p.qq_bias, _narrow_3d,
     "QQ-bias: narrow 1 warp x 16 rows, as in 2D (the transposed-x8 L4 geometry spills with the "
     "per-score bias gather, ALGORITHM.md §12.4)"),
    ("2d", _f16_transposed_x8_row, _transposed_x8_2d,
     "fp16 at d64 / d128: transposed-x8 (S^T = K Q^T on the 32x32x8 atom keeps P^T in "
     "registers, ALGORITHM.md §8); wide4 is the analytic default, FLASH_WIDE picks "
     "wide2/L4, NUM_WARPS overrides; d128 walks T = 32 so K + V^T + the aliased stages fit "
     "32 KiB, 2 WG/CU (ALGORITHM.md §9)"),
    ("2d", _narrow_2d_row, _narrow_2d,
     "bf16: narrow 16x16x16, P through LDS; d64 4 warps x 32 rows, d128 2 warps x 16 rows; T = "
     "min(block_size, 32) (gfx942's 32x32x8 atom has bf16 too: the model's dispatch table picks "
     "transposed-x8 for the classes where it models faster, REGIME_GEOMETRIES). d256 (fp16 and "
     "bf16) is narrow only: 2 warps x 16 rows, the head dim split over 16 K-steps, LDS checked by "
     "the spec (ALGORITHM.md §11.2)"),
    ("3d", lambda p: p.head_size > 256, _narrow_3d_two_warps,
     "d512: narrow 2 warps x 16 rows, T = 16, one K buffer: one warp of 16 rows spilled 1-3 "
     "registers (f16/bf16, block 16: its 16 x 512 fp32 output next to the K/V staging), two "
     "warps none (ALGORITHM.md §11.2)"),
    ("3d", lambda p: True, _narrow_3d,
     "split-KV, every dtype and head size: one warp of 16 rows (a decode token's GQA group) per "
     "segment workgroup, T = min(block_size, 32): small LDS, several workgroups per CU; the "
     "segment grid fills the device (ALGORITHM.md §5). fp16 d128 too: the transposed-x8 L4 "
     "geometry (32 query columns, ~200 VGPRs) models 2-4x slower on decode at every round-trip "
     "assumption (benchmarks/dispatch_sweep.py, ALGORITHM.md §10.2)"),
)


# the two generic 2D regimes at d64 / d128: where the rules' 2D row is one of these, the model's
# dispatch table (tools/dispatch_tables.py) may name the other for a class ("regime")
REGIME_GEOMETRIES = {policy.TRANSPOSED_X8: _transposed_x8_2d, policy.NARROW: _narrow_2d}


def regime_geometry(p: UnifiedAttentionProblem, regime: str, knobs: AttentionKnobs | None = None,
                    sms: int | None = None) -> Geometry | None:
    """``p``'s 2D geometry in ``regime`` (attention_policy.NARROW / TRANSPOSED_X8), its KV tile
    grown as ``geometry`` grows it; None where the rules' 2D row is not one of the two generic
    regimes (d256, QQ-bias, the per-token-head corners: a regime the rules pin)."""
    if regime not in REGIME_GEOMETRIES:
        raise ValueError(f"regime: must be one of {', '.join(REGIME_GEOMETRIES)}, got {regime!r}")
    knobs = AttentionKnobs() if knobs is None else knobs
    if p.head_size not in a2.TRANSPOSED_X8_HEAD_SIZES:
        return None
    for rule_path, applies, make, _ in GEOMETRY_RULES:
        if rule_path == "2d" and applies(p):
            if applies not in (_f16_transposed_x8_row, _narrow_2d_row):
                return None          # a feature's or corner's own row pins the regime
            break
    geo = REGIME_GEOMETRIES[regime](p, knobs)
    reason = (f"{regime} 2D, chosen over the rules' regime" if make is not REGIME_GEOMETRIES[regime]
              else "the rules' 2D regime")
    return one_round_tile(p, replace(geo, reason=reason), knobs, sms)


def recommend_graph_replay(problem: UnifiedAttentionProblem, knobs: AttentionKnobs | None = None,
                            *, path: str | None = None, capturing: bool | None = None) -> bool:
    """Whether replaying a captured graph pays off for ``problem`` (ALGORITHM.md §10.3): decode and
    prefill up to 768 query tokens are host-overhead dominated, longer prefill is kernel-bound.
    Never for feature-flagged problems, never when the caller is already capturing (its graph
    takes precedence), and never for a path whose HIPDNN_GFX942_{2D,3D}_GRAPH lever is off."""
    knobs = AttentionKnobs() if knobs is None else knobs
    if problem.features or problem.kv_dtype is not None:     # fp8: never graph-replayed
        return False
    path = select_path(problem)[0] if path is None else path
    if not (knobs.graph_2d if path == "2d" else knobs.graph_3d):
        return False
    if problem.max_seqlen_q > GRAPH_PREFILL_MAX_Q:      # decode (== 1) included below
        return False
    # asked last: the device and torch lookups are most of a plan's cost in an enumeration
    return not (_caller_is_capturing() if capturing is None else capturing)


def _caller_is_capturing() -> bool:
    from rocke.kernels.common.attention_device import caller_is_capturing
    return caller_is_capturing()


@dataclass(frozen=True)
class Plan:
    """What one call launches: the path, its geometry and the kernel specs."""
    problem: UnifiedAttentionProblem
    path: str
    reason: str
    geometry: Geometry
    specs: tuple                # (main spec,) or (3D spec, reduce spec)
    graph_replay: bool
    # attention_spill.SpillFallback when the planned kernel's code spilled (spill_free_plan)
    spill_fallback: object = None


def spill_free_plan(the_plan: Plan, spills_of: Callable) -> Plan:
    """The plan to launch: ``the_plan``, its attention kernel replaced by the first spill-free
    geometry of a short chain when the planned kernel's code spills (``spills_of(spec)`` ->
    (VGPR, SGPR) spills of its compiled code; attention_spill, ALGORITHM.md §10.5)."""
    return attention_spill.spill_free_plan(the_plan, spills_of)


def kernel_module(path: str):
    return {"2d": a2, "3d": a3}[path]


def make_specs(problem: UnifiedAttentionProblem, geo: Geometry, knobs: AttentionKnobs,
               *, spec_classes: tuple | None = None) -> tuple:
    """The kernel specs of ``geo`` for ``problem``, with the levers' spec fields applied;
    ``spec_classes``: another target's (2D, 3D, reduce) spec classes (rocke/kernels/gfx950)."""
    cls2, cls3, cls_r = spec_classes or (a2.UnifiedAttention2DSpec, a3.UnifiedAttention3DSpec,
                                         reduce_segments.ReduceSegmentsSpec)
    cls = cls2 if geo.path == "2d" else cls3
    have = knobs_mod.spec_field_names(cls)
    group, split = split_group(problem.num_queries_per_kv)
    wanted = dict(dtype=problem.dtype, head_size=problem.head_size, block_size=problem.block_size,
                  num_queries_per_kv=group,
                  num_warps=geo.num_warps, block_m_per_warp=geo.block_m_per_warp,
                  tile_size=geo.tile_size, use_k_single_buffer=geo.k_single_buffer,
                  kv_addr_64=problem.kv_addr_64, kv_dtype=problem.kv_dtype,
                  **problem.spec_features())
    if geo.regime == policy.TRANSPOSED_X8:
        wanted.update(regime=policy.TRANSPOSED_X8)
    if split != 1:
        wanted.update(group_split=split)
    if needs_interval_mask(problem) or x8_window_interval(problem, geo):
        wanted.update(interval_mask=True)
    if geo.one_page_tile:
        wanted.update(one_page_tile=True)
    if geo.early_v:
        wanted.update(early_v=True)
    missing = sorted(set(wanted) - have)
    if missing:      # never drop a geometry field silently: the kernel would run another geometry
        raise NotImplementedError(f"{cls.__name__} lacks the dispatcher's fields {missing}")
    kwargs = dict(wanted)
    kwargs.update(knobs_mod.spec_overrides(knobs, cls))
    out_dtype = kwargs.pop("out_dtype", None) if geo.path == "3d" else None
    if geo.path == "3d":
        kwargs.pop("q_major_grid", None)     # a 2D grid lever: the 3D grid has no query-major form
    spec = built_spec(cls, kwargs)
    if geo.path == "2d":
        return (spec,)
    # an fp8 output is quantized by the reduction (the 3D kernel writes fp32 partials)
    reduce = built_spec(cls_r, dict(
        dtype=problem.dtype, head_size=problem.head_size, head_cols=problem.head_cols,
        early_loads=problem.head_size in REDUCE_EARLY_LOADS_HEAD_SIZES,
        **({"vector_width": 8} if problem.head_size > 256 else {})))
    if out_dtype is not None:
        reduce = replace(reduce, out_dtype=out_dtype)
    return (spec, reduce)


def built_spec(cls, kwargs: dict):
    """``cls(**kwargs)``, one instance per distinct field set: a spec is frozen, and its checks
    (__post_init__) are most of the cost of planning (the reachable enumeration plans ~10 times
    as many specs as there are distinct ones). A spec that refuses raises every time."""
    fields_key = tuple(sorted(kwargs.items()))
    try:
        hash(fields_key)
    except TypeError:       # an unhashable field value: build it uncached
        return cls(**kwargs)
    return _built_spec(cls, fields_key)


@functools.lru_cache(maxsize=65536)
def _built_spec(cls, items: tuple):
    return cls(**dict(items))


def needs_interval_mask(p: UnifiedAttentionProblem) -> bool:
    """A sliding window combined with another feature or an fp8 cache masks with one interval
    per query row (spec ``interval_mask``): the two window compares and the per-score token
    division of the plain mask filled the SGPRs (lane masks) and spilled, up to 110 SGPRs on
    fp16 wide4 with an fp8 cache (``rocke report --reachable --corners``). A window alone does
    on the transposed-x8 path (x8_window_interval); mm ranges already mask by interval. So do
    chunked attention, R-SWA, non-causal prefill and per-sequence causal flags (ALGORITHM.md
    §12.9-12)."""
    windowed = p.window_left >= 0 and not p.mm_ranges and (
        len(p.features) > 1 or p.kv_dtype is not None or p.chunk_lookback >= 0 or p.rswa)
    return windowed or ((not p.causal or p.causal_flags) and p.max_seqlen_q > 1)


def few_warp_x8_window(p: UnifiedAttentionProblem, geo: Geometry) -> bool:
    """A window alone on a d128 transposed-x8 kernel of fewer than four warps (wide2, L4: the
    FLASH_WIDE lever) masks by interval too: the plain mask spilled 9 (wide2) and 17-19 (L4)
    SGPRs at blocks 16/32/64, the interval mask none. wide4 and d64 did not spill with the plain
    mask; they mask by interval for the late V store (x8_window_interval)."""
    return (p.window_left >= 0 and not p.mm_ranges and geo.regime == policy.TRANSPOSED_X8
            and p.head_size == 128 and geo.num_warps < 4)


def x8_window_interval(p: UnifiedAttentionProblem, geo: Geometry) -> bool:
    """A window alone on any transposed-x8 kernel masks by interval (as gfx950 does): with the
    plain two-compare mask the tile loop cannot wait for V_j after S_j's softmax
    (attention_pipeline.late_v_store: wide4 d128 spilled 8 SGPRs); with the interval mask it can,
    spill-free. benchmarks/profile.py "window 128" (f16 d128 wide4, block 64 GQA 4), modelled
    MI300X: see ALGORITHM.md §10.2. Covers few_warp_x8_window's kernels too."""
    return (p.window_left >= 0 and not p.mm_ranges and geo.regime == policy.TRANSPOSED_X8) \
        or few_warp_x8_window(p, geo)


def split_group(group: int) -> tuple[int, int]:
    """(heads per q-head block, blocks per KV head) of a GQA group: the group itself when it
    fits one workgroup's rows (MAX_GROUP), else its largest divisor <= MAX_GROUP, so every block
    holds whole heads of one KV head (ALGORITHM.md §7.1; vLLM packs such groups into BLOCK_M =
    next_pow2(group) rows, which gfx942's 16-row MFMA tiles cannot hold for groups above 16)."""
    if group <= a2.MAX_GROUP:
        return group, 1
    heads = max(d for d in range(1, a2.MAX_GROUP + 1) if group % d == 0)
    return heads, group // heads


# a forced 3D call in batch-invariant mode splits every sequence into this many segments,
# whatever the batch (the dispatcher's count follows the batch's grid)
BATCH_INVARIANT_SEGMENTS = 8


def batch_invariant_path(path: str, reason: str, num_segments: int | None):
    """(path, reason, num_segments) in batch-invariant mode (ALGORITHM.md §10.4): the path rule
    and the segment count read the batch (its grid, its longest sequence), so the auto path is
    always 2D, where a sequence's q blocks, tile walk and reduction order are its own; a forced
    3D call gets a fixed segment count unless the caller gives one (as vLLM, which never takes
    3D in this mode)."""
    if path == "3d" and reason.startswith("backend="):
        return path, reason + "; batch-invariant: fixed segment count", \
            BATCH_INVARIANT_SEGMENTS if num_segments is None else num_segments
    return "2d", ("batch-invariant (ROCKE_BATCH_INVARIANT / VLLM_BATCH_INVARIANT): 2D, whose "
                  "per-sequence work does not depend on the rest of the batch"), num_segments


# ---- the model's table (issue 41): the modelled-fastest plan per problem class ----
# tools/dispatch_tables.py models, per problem of its sweep, the 2D path and the 3D path at a set
# of segment counts (rocke/perf over the emulator's counters, modelled MI300X time at the
# 2000-cycle round trip) and writes the fastest per problem class here; plan() follows it on
# gfx942 (304 CUs) and keeps the rule tables above for classes the sweep did not reach.
# tests/kernels/test_dispatch_table.py checks the committed file against the tool's output.
MODEL_TABLE_FILE = "dispatch_table.json"


def problem_class(p: UnifiedAttentionProblem) -> str:
    """The class a problem's plan is tabulated under: what the kernels and specs depend on
    (dtype, head size, cache and output dtype, GQA group, block size, score features and window,
    decode or not) and, exactly, the 2D q-block x KV-head grid, the longest KV walk and the
    longest query. Exact, not rounded: the modelled time is a jagged function of the segment
    count (whole rounds of resident workgroups), and problems off the sweep's points that shared
    a rounded class with a swept one modelled up to 1.6x slower at its count (ALGORITHM.md
    §10.0); so the table holds the swept problems themselves and the rules decide the rest."""
    feats = ",".join(sorted(p.features)) or "-"
    window = f"/w{p.window_left}" if p.window_left >= 0 else ""
    # the fields the sweep leaves at their defaults join the key when set, so such a problem
    # never takes a plan modelled without them (its kernels may not exist on that path: a
    # non-causal prefill has no 3D kernel)
    extra = [f"{name}={getattr(p, name)}" for name, default in UNSWEPT_FIELDS
             if getattr(p, name) != default]
    return (f"{p.dtype}/d{p.head_size}/kv:{p.kv_dtype or '-'}/out:{p.out_dtype or '-'}"
            f"/g{p.num_queries_per_kv}/bs{p.block_size}/{'decode' if p.is_decode else 'prefill'}"
            f"/f:{feats}{window}/grid{grid_2d_reference(p)}"
            f"/k{p.max_seqlen_k}/q{p.max_seqlen_q}" + (f"/x:{','.join(extra)}" if extra else ""))


# problem fields tools/dispatch_tables.py's sweep keeps at these defaults (its per-token-head
# int8 / fp8 caches are keyed by kv: and the feature kv_token_scales)
UNSWEPT_FIELDS = (("causal", True), ("causal_flags", 0), ("head_cols", 0), ("mm_ranges", 0),
                  ("mm_clamp_window", False), ("chunk_lookback", -1), ("rswa", False),
                  ("q_fp8", False), ("alibi_sqrt", False))


_MODEL_TABLE: dict | None = None


def model_table() -> dict:
    """{problem class: entry} of the committed table (read once)."""
    global _MODEL_TABLE
    if _MODEL_TABLE is None:
        import json
        from pathlib import Path
        path = Path(__file__).with_name(MODEL_TABLE_FILE)
        _MODEL_TABLE = json.loads(path.read_text())["classes"] if path.is_file() else {}
    return _MODEL_TABLE


def table_segments(n: int, tiles: int) -> int:
    """A tabulated segment count applied to a problem of ``tiles`` KV tiles: at most the tiles
    and MAX_SEGMENTS, then the fewest segments with the same longest walk."""
    n = max(1, min(n, tiles, MAX_SEGMENTS))
    return cdiv(tiles, cdiv(tiles, n))


def rounds_segments(p: UnifiedAttentionProblem, geo: Geometry, rounds: int,
                    sms: int | None = None) -> int:
    """The segment count whose 3D grid fills the CUs' resident slots ``rounds`` times (the fill
    of fill_segments without its MIN_FILL_SEGMENTS floor; the grid of the launch,
    segment_workgroups a segment), cut by table_segments; 0 when even one segment's grid passes
    them. A table entry may name it ("3d/fill1", "3d/fill2") instead of a fixed count: the count
    then follows the problem's own grid inside its class."""
    sms = num_sms() if sms is None else sms
    base = segment_workgroups(p, geo)
    n = rounds * sms * resident_3d_workgroups(p, geo) // base
    return table_segments(n, cdiv(p.max_seqlen_k, geo.tile_size)) if n >= 1 else 0


def entry_segments(p: UnifiedAttentionProblem, geo: Geometry, segments) -> int:
    """A table entry's segment count for ``p``: a fixed count (cut to its tiles) or
    "fill<R>" (rounds_segments)."""
    if isinstance(segments, str) and segments.startswith("fill"):
        return max(1, rounds_segments(p, geo, int(segments[4:])))
    return table_segments(int(segments), cdiv(p.max_seqlen_k, geo.tile_size))


def model_choice(p: UnifiedAttentionProblem):
    """The table's entry for ``p``'s class, or None (the rules decide)."""
    return model_table().get(problem_class(p))


def plan(problem: UnifiedAttentionProblem, backend: str = "auto",
         knobs: AttentionKnobs | None = None, *, with_specs: bool = True,
         num_segments: int | None = None, sms: int | None = None, capabilities=CAPABILITIES,
         spec_classes: tuple | None = None, geometry_of: Callable | None = None,
         regime: str | None = None) -> Plan:
    """Path, geometry and kernel specs of ``problem`` (refused if gfx942 has no kernel for it).
    ``num_segments``: the caller's 3D segment count (vLLM's ``num_par_softmax_segments``), used
    as given instead of the dispatcher's. ``regime``: the 2D regime (attention_policy.NARROW /
    TRANSPOSED_X8) where both apply (``regime_geometry``); default: the table's for a
    tabulated class, else the rules'. ``sms``, ``capabilities``, ``spec_classes``,
    ``geometry_of``: another target's facts, kernels and geometry rules
    (rocke/kernels/gfx950/attention_dispatch.py)."""
    capabilities.check(problem)
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    knobs = knobs_mod.read_knobs() if knobs is None else knobs
    # the model's table is gfx942's at its 304 CUs (another target or CU count: the rules)
    entry = None
    if geometry_of is None and capabilities is CAPABILITIES and (sms is None or sms == num_sms()) \
            and not problem.batch_invariant:
        entry = model_choice(problem)
    if backend == "auto" and entry is not None:
        path = entry["path"]
        reason = (f"the model's fastest plan for class {problem_class(problem)} "
                  f"(tools/dispatch_tables.py: {entry['best']} modelled "
                  f"{entry['us'][entry['best']]:.1f} us at a 2000-cycle round trip)")
    elif backend == "auto":
        path, reason = select_path(problem, sms)
    else:
        path, reason = backend, f"backend={backend!r} forced by the caller"
    if problem.batch_invariant:
        path, reason, num_segments = batch_invariant_path(path, reason, num_segments)
    geo = (geometry_of or geometry)(problem, path, knobs, sms)
    if regime is not None:
        if geometry_of is not None or path != "2d":
            raise ValueError(f"regime: only gfx942's 2D path has a choice of regime, this call "
                             f"takes {path} ({reason})")
        chosen = regime_geometry(problem, regime, knobs, sms)
        if chosen is None:
            raise ValueError(f"regime: {regime!r} does not apply to this problem (its 2D "
                             f"geometry is pinned: {geo.reason})")
        geo = chosen
    elif path == "2d" and entry is not None and entry.get("regime") and geometry_of is None:
        chosen = regime_geometry(problem, entry["regime"], knobs, sms)
        if chosen is not None:
            geo = replace(chosen, reason=chosen.reason + "; regime from the model's table")
    if path == "3d" and entry is not None and entry.get("segments") and num_segments is None:
        geo = replace(geo, num_segments=entry_segments(problem, geo, entry["segments"]),
                      reason=geo.reason + "; segments from the model's table")
    if num_segments is not None:
        if path != "3d":
            raise ValueError(f"num_segments: only the 3D path has segments, this call takes "
                             f"{path} ({reason})")
        if isinstance(num_segments, bool) or not isinstance(num_segments, int) or \
                not 1 <= num_segments <= MAX_SEGMENTS:
            raise ValueError(f"num_segments: must be an int in [1, {MAX_SEGMENTS}] (the "
                             f"reduction's bound), got {num_segments!r}")
        geo = replace(geo, num_segments=num_segments)
    specs = make_specs(problem, geo, knobs, spec_classes=spec_classes) if with_specs else ()
    return Plan(problem, path, reason, geo, specs,
                recommend_graph_replay(problem, knobs, path=path))


# the packing of a plan into launches is attention_launch.launches (no rule lives there)
launches = attention_launch.launches
