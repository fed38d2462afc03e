"""gfx942 unified paged attention, 2D: one workgroup per (KV head, query block) walks the whole
KV sequence of its query block (ALGORITHM.md §6-9).

Layout (vLLM's ``unified_attention``, triton_unified_attention.py): q/out ``[total_q, Hq, D]``, caches
``[num_blocks, block_size, Hk, D]``, int32 block table / ``cu_seqlens_q`` / ``seqused_k``.
A workgroup owns KV head ``h`` and ``BLOCK_Q = BLOCK_M // G`` query tokens of one sequence; its
``BLOCK_M`` rows are (token, query head) pairs ``row = token_in_block * G + head_in_group`` so the
group's heads share every K/V tile (GQA packed into M, ALGORITHM.md §7).

Two matmul orientations (ALGORITHM.md §8):
- narrow (default): 16x16x16 MFMA, ``S = Q K^T`` (queries on rows), P goes through LDS as the
  A operand of ``O = P V``;
- transposed-x8 (``regime="transposed_x8"``, f16 and bf16 on the 32x32x8 atom):
  ``S^T = K Q^T`` with 32x32x8, ``P^T`` stays in registers as the B operand of ``O^T = V^T P^T``;
  the output is staged through LDS aliased onto the dead K/V tiles.

Causal, bottom-right aligned (ALGORITHM.md §3): KV tiles wholly in the future of the block's
queries are never visited, tiles wholly in the past run without a mask, only the diagonal tiles
pay it. Keys past the sequence read as 0 (paged copy) and are masked by the causal rule.
fp8 KV caches (``kv_dtype``) are dequantized exactly on their way into LDS, the descales applied
in fp32 to the score scale and the output; head_size 256 runs on the narrow path, the head dim in
16 MFMA K-steps (ALGORITHM.md §11). The score features (softcap, ALiBi, QQ-bias, sliding window
with tile skipping, sinks) are spec fields applied in the tile loop (ALGORITHM.md §12).
The tile loop is shared with the 3D split-KV kernel (``attention_tiled_3d``), which restricts it
to a segment of tiles and writes fp32 partials (ALGORITHM.md §5).

This module holds the spec and its rules, the 2D argument list and the variant tables; the parts
it composes are ``attention_policy`` (geometries, LDS plan), ``attention_pipeline`` (tile loop and
regimes), ``attention_epilogue``, ``attention_kernel`` (``build_tiled``) and ``attention_host``
(shared argument checks, grid); docs/architecture.md maps them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from rocke import dsl
from rocke.arch import get_target
from rocke.dsl.paged import CACHE_POLICIES, rows_per_wave
from rocke.kernels.common.checks import check_bool, check_choice, check_int_range, check_tensor
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942.attention_host import (ARGS_FP8, cache_args, check_common_args,  # noqa: F401
                                                 descale_args, feature_arg_names, feature_args,
                                                 launch_geometry, search_steps_for,
                                                 total_num_q_blocks)
from rocke.kernels.gfx942.attention_kernel import build_tiled
from rocke.kernels.gfx942.attention_policy import FEATURES, STAGING_VECTOR, TRANSPOSED_X8

DTYPES = ("f16", "bf16")
SHIPPED_HEAD_SIZES = policy.SHIPPED_HEAD_SIZES
HEAD_SIZES = SHIPPED_HEAD_SIZES + (512,)   # d512: built on demand (ALGORITHM.md §11.3)
TRANSPOSED_X8_HEAD_SIZES = (64, 128)   # d256: narrow only (ALGORITHM.md §11.2)
KV_DTYPES = ("fp8_e4m3fnuz",)  # kv_dtype values besides None (= the Q dtype); gfx942's fp8
BLOCK_SIZES = (16, 32, 64)
TILE_SIZES = (16, 32, 64)
NUM_WARPS = (1, 2, 4, 8)
MAX_GROUP = 16
MM_RANGE_CAPACITIES = (0, 1, 2, 4, 8, 16)   # mm_prefix_ranges (0 = off); 16 stays spill-free
CAUSAL_FLAG_BYTES = (0, 1, 4)          # per_seq_causal: a flag's bytes (0 = off)
MAX_GROUP_SPLIT = 256                  # q-head blocks one KV head's group may be split into


# The masks beyond the window (ALGORITHM.md §12.8-12.11): each field, what it needs of the rest
# of the spec, and why (spec_problems names the field with the reason)
MASK_RULES = (
    ("non_causal", lambda s: s.interval_mask and not (s.mm_prefix_ranges or s.chunked or
                                                      s.rswa_prefix),
     "a non-causal kernel masks by one interval per row (interval_mask) and takes no mm "
     "ranges, chunks or R-SWA"),
    ("per_seq_causal", lambda s: s.interval_mask and not (s.non_causal or s.mm_prefix_ranges or
                                                          s.chunked or s.rswa_prefix),
     "per-sequence causal flags pick each sequence's newest key (one interval per row: "
     "interval_mask); with non_causal, mm ranges, chunks or R-SWA it is not implemented"),
    ("rswa_prefix", lambda s: s.sliding_window and (s.interval_mask or s.mm_prefix_ranges)
     and not (s.chunked or s.mm_clamp_window),
     "R-SWA adds the prefix to the sliding window's interval: it needs sliding_window and "
     "interval_mask (or mm_prefix_ranges); with chunked attention or clamped mm ranges it is "
     "not implemented"),
    ("chunked", lambda s: s.sliding_window and (s.interval_mask or s.mm_prefix_ranges),
     "chunked attention replaces the sliding window's lower end per query row; it needs "
     "sliding_window and interval_mask (or mm_prefix_ranges, which mask by interval too)"),
    ("mm_clamp_window", lambda s: s.mm_prefix_ranges and s.sliding_window,
     "clamps the mm ranges by the sliding window; it needs mm_prefix_ranges and "
     "sliding_window"),
)


@dataclass(frozen=True)
class UnifiedAttention2DSpec:
    """Every field changes the emitted code and is encoded in ``kernel_name``."""

    target: ClassVar[str] = "gfx942"   # the processor built for (not a field: rocke/kernels/gfx950 subclasses)
    dtype: str = "f16"
    head_size: int = 128
    block_size: int = 16               # KV cache page size
    num_queries_per_kv: int = 1        # GQA group G (any positive int up to 16)
    num_warps: int = 4
    block_m_per_warp: int = 16         # narrow: 16 or 32 rows per warp; transposed-x8: 32
    tile_size: int = 0                 # KV tile T; 0 = min(block_size, 32) (narrow) / 64 (transposed-x8)
    regime: str = policy.NARROW         # policy.NARROW | policy.TRANSPOSED_X8 (ALGORITHM.md §8)
    use_k_single_buffer: bool | None = None   # None: num_warps * 32 <= T (transposed-x8) / BLOCK_M <= T
    waves_per_eu: int = 0              # 0 = no occupancy hint
    iglp: bool = False                 # iglp_opt(0) scheduling hint in the tile loop
    kv_cache_policy: str = "normal"    # "stream": non-temporal K/V loads
    q_direct: bool = False             # Q operands straight from global (no Q LDS stage)
    global_load_lds_k: bool = False    # K tiles by LDS DMA
    q_major_grid: bool = False         # grid (total_num_q_blocks, num_kv_heads)
    cfv_store: bool = False            # V row-major with vector stores (see ALGORITHM.md §9)
    kv_addr_64: bool = False           # 64-bit page base (caches past 2 GiB)
    kv_dtype: str | None = None        # None: caches in `dtype`; "fp8_e4m3fnuz": dequantizing
                                       # copy with k/v descales (ALGORITHM.md §11.1)
    # score features (ALGORITHM.md §12); each adds runtime arguments after the
    # base ones, so a spec with none emits exactly the featureless kernel
    softcap: bool = False              # s <- c tanh(s / c), c a runtime argument
    alibi: bool = False                # s += slope[head] (key - ctx), slopes [Hq] fp32
    qq_bias: bool = False              # s += bias[q_local, key - ctx] inside the query section
    sliding_window: bool = False       # mask keys older than the window; skip tiles outside it
    sinks: bool = False                # per-head sink logit in the softmax denominator
    # fp8 output, per-token-head KV scales, square-root ALiBi (attention_quant, ALGORITHM.md
    # §13): arguments after the features', so the defaults emit exactly the kernels above
    alibi_sqrt: bool = False           # ALiBi term slope * -sqrt(query - key) (needs alibi)
    out_dtype: str | None = None       # None: out in `dtype`; "fp8_e4m3fnuz": / output_scale, saturated
    kv_token_scales: bool = False      # kv_dtype i8/fp8 with [num_blocks, block_size, Hk] f32 scales
    q_fp8: bool = False                # q in the cache's fp8 with a q_descale (fp8 kv_dtype)
    # a GQA group above MAX_GROUP runs as group_split q-head blocks of num_queries_per_kv heads
    # on the grid's head axis, each reading KV head block // group_split (ALGORITHM.md §7.1)
    group_split: int = 1
    # vLLM's mm_prefix_range: bidirectional attention inside [start, end] ranges of each
    # sequence, a runtime [num_seqs, ranges, 2] int32 argument; the field is the kernel's
    # capacity (0 = off; a power of two, at least the call's range count), the ranges being
    # unrolled once per row before the tile loop (ALGORITHM.md §12.8)
    mm_prefix_ranges: int = 0
    # vLLM's mm_prefix_clamp_sliding_window (Gemma 4): the ranges widen the sliding window to the
    # right only, keys older than the window stay masked (needs mm_prefix_ranges and the window)
    mm_clamp_window: bool = False
    # vLLM's chunked attention (chunk_lookback, Llama 4): a query sees the keys of its own
    # window-aligned chunk and the chunk_lookback chunks before it (runtime chunk_size and
    # chunk_lookback), in place of the window's lower end; needs sliding_window and
    # interval_mask or mm_prefix_ranges (ALGORITHM.md §12.9)
    chunked: bool = False
    # vLLM's R-SWA: keys before the sequence's prefix length (a runtime [num_seqs] int32) stay
    # visible besides the sliding window (the R-SWA window); needs sliding_window and
    # interval_mask or mm_prefix_ranges (ALGORITHM.md §12.10)
    rswa_prefix: bool = False
    # non-causal prefill (vLLM's causal=False, embedding / encoder-only models): a query sees its
    # sequence's every key, or those within window_left on either side; needs interval_mask
    # (ALGORITHM.md §12.11)
    non_causal: bool = False
    # vLLM 0.33's per-sequence causal tensor (causal=tensor): a runtime [num_seqs] flag per
    # sequence, nonzero = causal, 0 = non-causal (as non_causal); the field is the flag's bytes,
    # 1 (bool, int8, uint8) or 4 (int32), 0 = off; needs interval_mask (ALGORITHM.md §12.12)
    per_seq_causal: int = 0
    # the tensors' head size when it is not one of HEAD_SIZES (0: head_size): q, the caches and
    # out hold head_cols columns, the kernel computes head_size (the next size up) with the
    # rest zero; a multiple of 8 (ALGORITHM.md §11.3)
    head_cols: int = 0
    # the causal (+ window) mask as one interval per query row, precomputed before the tile
    # loop: one unsigned compare per score and no per-score token division (ALGORITHM.md §12.8)
    interval_mask: bool = False
    # the K/V tile copies look their page up once per tile, not once per copy step: the tile
    # must lie in one page (block_size a multiple of the tile; ALGORITHM.md §10.2)
    one_page_tile: bool = False
    # V_{j+1}'s loads issue before P V_j (registers carried through the loop) and K_{j+1} is
    # stored after P V_j: each round trip is covered by a whole step (ALGORITHM.md §10.2)
    early_v: bool = False

    @property
    def features(self) -> tuple[str, ...]:
        """The score features this kernel applies, in ``FEATURES`` order."""
        return tuple(name for name in FEATURES if getattr(self, name))

    def __post_init__(self):
        problems = spec_problems(self)
        if problems:
            raise ValueError(problems[0])
        object.__setattr__(self, "tile_size", resolved_tile(self))
        if self.use_k_single_buffer is None:
            object.__setattr__(self, "use_k_single_buffer", policy.default_k_single_buffer(
                self.transposed_x8, self.num_warps, self.block_m_per_warp, self.tile_size))

    # ---- derived geometry -------------------------------------------------------------------
    @property
    def transposed_x8(self) -> bool:
        return self.regime == TRANSPOSED_X8

    @property
    def cache_dtype(self) -> str:
        """The element type of k_cache / v_cache (bytes of two codes for int4)."""
        return quant.cache_storage_dtype(self.kv_dtype, self.dtype)

    @property
    def fp8_kv(self) -> bool:
        """An fp8 cache with per-tensor/head/sequence descales (not per-token-head scales)."""
        return self.kv_dtype is not None and not self.kv_token_scales

    @property
    def block_m_rows(self) -> int:
        """BLOCK_M: the workgroup's (token, head) rows."""
        return self.num_warps * self.block_m_per_warp

    @property
    def block_q(self) -> int:
        """Query tokens per workgroup."""
        return self.block_m_rows // self.num_queries_per_kv

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def family(self) -> str:
        return "attention_2d"

    @property
    def kernel_name(self) -> str:
        path = "x8t" if self.transposed_x8 else "narrow"
        name = (f"{self.family}_{self.dtype}_d{self.head_size}_b{self.block_size}_g{self.num_queries_per_kv}"
                f"_{path}_w{self.num_warps}m{self.block_m_per_warp}_t{self.tile_size}"
                f"_k{'1' if self.use_k_single_buffer else '2'}")
        flags = [("wpe", self.waves_per_eu), ("iglp", self.iglp),
                 ("stream", self.kv_cache_policy == "stream"), ("qdirect", self.q_direct),
                 ("kdma", self.global_load_lds_k), ("qmajor", self.q_major_grid),
                 ("cfv", self.cfv_store), ("a64", self.kv_addr_64), ("kvfp8", self.fp8_kv)]
        flags += [(tag, getattr(self, name)) for name, tag in FEATURES.items()]
        flags += [("gs", self.group_split if self.group_split != 1 else False),
                  ("mm", self.mm_prefix_ranges), ("mmcw", self.mm_clamp_window),
                  ("chunk", self.chunked), ("rswa", self.rswa_prefix),
                  ("nc", self.non_causal), ("psc", self.per_seq_causal),
                  ("hc", self.head_cols),
                  ("im", self.interval_mask),
                  ("op", self.one_page_tile), ("ev", self.early_v)]
        for tag, value in flags:
            if value is True:
                name += f"_{tag}"
            elif value and value is not False:
                name += f"_{tag}{value}"
        return name + quant.name_suffix(self)


def check_head_cols(spec) -> None:
    """``head_cols``: 0, or a multiple of the copies' vector (8) below head_size; the LDS DMA
    copies whole rows and cannot zero a padded tail."""
    hc = spec.head_cols
    if hc.__class__ is not int or not (hc == 0 or 0 < hc < spec.head_size and hc % STAGING_VECTOR == 0):
        raise ValueError(f"head_cols: must be 0 or a multiple of {STAGING_VECTOR} below head_size "
                         f"{spec.head_size}, got {hc!r}")
    if hc and spec.global_load_lds_k:
        raise ValueError("head_cols: the LDS DMA (global_load_lds_k) copies whole rows; a padded "
                         "head needs the zero-filling copy")


def resolved_tile(spec) -> int:
    """The spec's KV tile: its own, or the regime's default (``attention_policy.default_tile``)."""
    return spec.tile_size or policy.default_tile(spec.transposed_x8, spec.block_size,
                                                 spec.head_size)


def spec_problems(spec) -> list[str]:
    """Every rule a spec breaks, each naming the field; the constructor raises the first, and
    ``supports_tiled_2d`` accepts exactly the specs with none."""
    out = []

    def rule(check, *args, **kw):
        try:
            check(*args, **kw)
        except ValueError as e:
            out.append(str(e))
            return False
        return True

    ok = rule(check_choice, "dtype", spec.dtype, DTYPES)
    ok &= rule(check_choice, "head_size", spec.head_size, HEAD_SIZES)
    ok &= rule(check_choice, "block_size", spec.block_size, BLOCK_SIZES)
    ok &= rule(check_int_range, "num_queries_per_kv", spec.num_queries_per_kv, 1, MAX_GROUP)
    ok &= rule(check_choice, "num_warps", spec.num_warps, NUM_WARPS)
    ok &= rule(check_choice, "block_m_per_warp", spec.block_m_per_warp, (16, 32))
    ok &= rule(check_choice, "tile_size", spec.tile_size, (0,) + TILE_SIZES)
    ok &= rule(check_choice, "regime", spec.regime, (policy.NARROW, TRANSPOSED_X8))
    for name in ("iglp", "q_direct",
                 "global_load_lds_k", "q_major_grid", "cfv_store", "kv_addr_64", *FEATURES):
        ok &= rule(check_bool, name, getattr(spec, name))
    if spec.use_k_single_buffer is not None:
        ok &= rule(check_bool, "use_k_single_buffer", spec.use_k_single_buffer)
    ok &= rule(check_int_range, "waves_per_eu", spec.waves_per_eu, 0, 8)
    ok &= rule(check_int_range, "group_split", spec.group_split, 1, MAX_GROUP_SPLIT)
    ok &= rule(check_choice, "mm_prefix_ranges", spec.mm_prefix_ranges, MM_RANGE_CAPACITIES)
    ok &= rule(check_bool, "interval_mask", spec.interval_mask)
    ok &= rule(check_bool, "mm_clamp_window", spec.mm_clamp_window)
    ok &= rule(check_bool, "chunked", spec.chunked)
    ok &= rule(check_bool, "rswa_prefix", spec.rswa_prefix)
    ok &= rule(check_bool, "non_causal", spec.non_causal)
    ok &= rule(check_choice, "per_seq_causal", spec.per_seq_causal, CAUSAL_FLAG_BYTES)
    ok &= rule(check_head_cols, spec)
    for field, holds, why in MASK_RULES:
        if ok and getattr(spec, field) and not holds(spec):
            out.append(f"{field}: {why}")
            ok = False
    ok &= rule(check_bool, "one_page_tile", spec.one_page_tile)
    ok &= rule(check_bool, "early_v", spec.early_v)
    ok &= rule(check_choice, "kv_cache_policy", spec.kv_cache_policy, tuple(CACHE_POLICIES))
    if spec.kv_dtype is not None:
        ok &= rule(check_choice, "kv_dtype", spec.kv_dtype,
                   quant.on_target(quant.TOKEN_SCALE_KV_DTYPES if spec.kv_token_scales is True
                                   else KV_DTYPES, spec.target))
    out += quant.quant_problems(spec)
    if out:
        return out
    if spec.kv_dtype is not None and spec.global_load_lds_k:
        out.append("global_load_lds_k: the LDS DMA writes the cache's bytes as they are; an fp8 "
                   "cache (kv_dtype) must be dequantized on its way to LDS")
    if spec.head_size not in TRANSPOSED_X8_HEAD_SIZES and spec.transposed_x8:
        out.append(f"head_size: {spec.head_size} has only the narrow path; the transposed-x8 "
                   f"path ships head sizes {TRANSPOSED_X8_HEAD_SIZES}")
    if out:
        return out
    transposed_x8 = spec.transposed_x8
    tile = resolved_tile(spec)
    block_m = spec.num_warps * spec.block_m_per_warp
    if transposed_x8 and spec.block_m_per_warp != 32:
        out.append(f"block_m_per_warp: the transposed-x8 path gives each warp 32 query columns, got "
                   f"{spec.block_m_per_warp}")
    if transposed_x8 and tile % 32:
        out.append(f"tile_size: {tile} must be a multiple of the 32x32x8 atom's M (32)")
    if spec.num_queries_per_kv > block_m:
        out.append(f"num_queries_per_kv: a GQA group of {spec.num_queries_per_kv} does not fit "
                   f"BLOCK_M = {block_m} rows")
    if tile % spec.block_size and spec.block_size % tile:
        out.append(f"tile_size: {tile} and block_size {spec.block_size} must divide one another")
    elif spec.one_page_tile and spec.block_size % tile:
        out.append(f"one_page_tile: a {tile}-key tile spans {tile // spec.block_size} pages of "
                   f"{spec.block_size}; one lookup per tile needs block_size a multiple of the tile")
    run = rows_per_wave(spec.head_size, STAGING_VECTOR, 2, lds_dma=spec.global_load_lds_k)
    if spec.block_size % run:
        out.append(f"block_size: {spec.block_size} is smaller than the {run} rows a wave copies at once")
    if spec.early_v:
        out += early_v_problems(spec, tile, run)
    if out:
        return out
    total = sum(lds_model(spec, tile=tile).values())
    lds_bytes = get_target(spec.target).max_lds_per_workgroup
    if total > lds_bytes:
        out.append(f"tile_size: the {'transposed-x8' if transposed_x8 else 'narrow'} path needs {total} bytes "
                   f"of LDS at head_size {spec.head_size}, BLOCK_M {block_m}, tile {tile} "
                   f"({lds_model(spec, tile=tile)}), {spec.target} has {lds_bytes}; use a smaller "
                   f"tile_size, fewer rows or a single K buffer")
    return out


def early_v_problems(spec, tile: int, run: int) -> list[str]:
    """Why ``early_v`` does not apply to ``spec`` (empty: it does). It changes the late-V tile
    loop (attention_pipeline.late_v_store: two K buffers, no LDS-DMA) and carries whole copy
    steps of V in the Q dtype through the loop."""
    single = spec.use_k_single_buffer
    if single is None:
        single = policy.default_k_single_buffer(spec.transposed_x8, spec.num_warps,
                                                spec.block_m_per_warp, tile)
    out = []
    if single or spec.global_load_lds_k:
        out.append("early_v: needs two K buffers loaded by the cooperative copy "
                   "(use_k_single_buffer=False, global_load_lds_k=False)")
    if spec.sliding_window and (spec.block_size < tile or
                                (spec.transposed_x8 and not spec.interval_mask)):
        out.append("early_v: a sliding window over pages shorter than the tile, or masked "
                   "without interval_mask on the transposed-x8 path, has no late-V tile loop")
    if spec.kv_dtype is not None:
        out.append("early_v: an fp8 / int8 cache's dequantizing copy is not carried")
    if tile % (run * spec.num_warps):
        out.append(f"early_v: a {tile}-key tile is not whole copy steps of {run} rows x "
                   f"{spec.num_warps} waves")
    return out


def supports_tiled_2d(spec=None, **fields) -> bool:
    """The 2D LDS/shape gate: True iff ``UnifiedAttention2DSpec(**fields)`` is accepted (pass a
    spec's fields or keyword fields). For the narrow path this is the LDS budget of its real
    footprint; the transposed-x8 configs are judged by their own (smaller) model."""
    if spec is not None:
        fields = {**{f.name: getattr(spec, f.name) for f in _FIELDS}, **fields}
    return not field_problems(**fields)


def field_problems(**fields) -> list[str]:
    """``spec_problems`` of the spec these keyword fields (defaults for the rest) would build."""
    return spec_problems(_FieldView(**fields))


_FIELDS = fields(UnifiedAttention2DSpec)


class _FieldView:
    """The spec's fields with their defaults, before construction (for the gates)."""

    def __init__(self, **kw):
        for f in _FIELDS:
            setattr(self, f.name, kw.pop(f.name, f.default))
        if kw:
            raise TypeError(f"unknown spec fields: {', '.join(sorted(kw))}")

    transposed_x8 = UnifiedAttention2DSpec.transposed_x8     # the rules read it (one definition)
    target = UnifiedAttention2DSpec.target


def lds_model(spec, *, tile: int | None = None) -> dict[str, int]:
    """Bytes of each LDS region of the tile loop and the aliased stages' excess over them
    (``attention_policy.lds_plan``, ALGORITHM.md §9); ``sum(values)`` is the footprint. An fp8
    cache changes nothing here: its tiles are dequantized into LDS in the Q dtype."""
    return policy.lds_plan(spec, tile=tile).footprint()


# ---- host side: the 2D kernel's arguments (attention_host has the shared checks) --------

def kernel_args(spec, q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k,
                softmax_scale: float, k_descale=None, v_descale=None, output_scale=None,
                k_scale_cache=None, v_scale_cache=None, q_descale=None, **features) -> list:
    """Ordered kernel arguments (ARGS, then ARGS_FP8 for an fp8 cache, then
    ``feature_arg_names``) for vLLM-layout tensors; cheap per-tensor checks. ``features``:
    ``feature_args``'s keywords."""
    check_common_args(spec, q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k)
    check_tensor("out", out, dtype=spec.out_dtype or spec.dtype, dims=("total_q", "num_q_heads", "head_size"),
                 contiguous=False)
    if out.shape != q.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} differs from q's {tuple(q.shape)}")
    num_seqs = seqused_k.shape[0]
    scales = descale_args(spec, k_descale, v_descale, num_seqs, k_cache.shape[2])
    return [q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k, float(softmax_scale),
            num_seqs, search_steps_for(num_seqs), q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            *cache_args(k_cache), *cache_args(v_cache)[:3], block_table.stride(0), *scales,
            *feature_args(spec, q.shape[1], **features),
            *quant.quant_args(spec, split=False, k_cache=k_cache, output_scale=output_scale,
                              k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache,
                              q_descale=q_descale)]


ARGS = ("q", "k_cache", "v_cache", "out", "block_table", "cu_seqlens_q", "seqused_k", "softmax_scale",
        "num_seqs", "search_steps", "q_stride_token", "q_stride_head", "o_stride_token",
        "o_stride_head", "k_stride_block", "k_stride_token", "k_stride_head", "num_blocks",
        "v_stride_block", "v_stride_token", "v_stride_head", "block_table_stride")


# ---- the kernel: the pipeline and the output epilogue (attention_kernel) ---------------------

def build(spec: UnifiedAttention2DSpec) -> dsl.Kernel:
    return build_tiled(spec, split=False)


# ---- shipped variants ---------------------------------------------------------------------------

# GQA groups pinned in the table: every (path, geometry, dtype, head size, block size) ships once,
# its group rotating through GROUPS, so each path meets MHA, power-of-two and non-power-of-two
# packing (the group is a compile-time constant; the dispatcher builds other groups on demand).
GROUPS = (1, 4, 5, 8)


def rotated_group(*indices: int) -> int:
    return GROUPS[sum(indices) % len(GROUPS)]


def narrow_geometry(dtype: str, head_size: int) -> dict:
    """The spec fields of the 2D narrow geometry of a head size (``attention_policy``)."""
    return policy.narrow_2d_geometry(head_size).spec_fields(head_size)


def transposed_x8_geometry(name: str, head_size: int) -> dict:
    """The spec fields of transposed-x8 geometry ``name`` at ``head_size`` (``attention_policy``)."""
    return policy.geometry(name).spec_fields(head_size)


TRANSPOSED_X8_GEOMETRIES = policy.geometries_of(TRANSPOSED_X8)


def _variants() -> dict[str, UnifiedAttention2DSpec]:
    out = {}
    for di, dtype in enumerate(DTYPES):
        for hi, d in enumerate(SHIPPED_HEAD_SIZES):
            for bi, bs in enumerate(BLOCK_SIZES):
                g = rotated_group(di, hi, bi)
                out[f"narrow_{dtype}_d{d}_b{bs}_g{g}"] = UnifiedAttention2DSpec(
                    dtype=dtype, head_size=d, block_size=bs, num_queries_per_kv=g, **narrow_geometry(dtype, d))
    for hi, d in enumerate(TRANSPOSED_X8_HEAD_SIZES):
        for bi, bs in enumerate(BLOCK_SIZES):
            for gi, geometry in enumerate(TRANSPOSED_X8_GEOMETRIES):
                g = rotated_group(hi, bi, gi)
                out[f"{geometry}_f16_d{d}_b{bs}_g{g}"] = UnifiedAttention2DSpec(
                    dtype="f16", head_size=d, block_size=bs, num_queries_per_kv=g, **transposed_x8_geometry(geometry, d))
            # bf16: the default geometry (the model's table picks the regime for bf16 classes)
            g = rotated_group(hi, bi, 1)
            out[f"wide4_bf16_d{d}_b{bs}_g{g}"] = UnifiedAttention2DSpec(
                dtype="bf16", head_size=d, block_size=bs, num_queries_per_kv=g,
                **transposed_x8_geometry("wide4", d))
    out.update(feature_variants(UnifiedAttention2DSpec, narrow_geometry, transposed_x8="wide4"))
    out.update(fp8_variants(UnifiedAttention2DSpec, transposed_x8_geometries=TRANSPOSED_X8_GEOMETRIES))
    return out


def feature_variants(cls, narrow_geometry_of, *, transposed_x8: str | None,
                     features=tuple(FEATURES)) -> dict:
    """One variant per score feature (ALGORITHM.md §12) for every dtype x head size on the
    narrow path and, for fp16, the ``transposed_x8`` geometry (the dispatcher's default; not for QQ-bias,
    which the dispatcher always runs narrow), at block size
    16 with the group rotating as above; other block sizes, geometries and feature combinations
    are the same code with other constants, built on demand."""
    out = {}
    for fi, feature in enumerate(features):
        tag = FEATURES[feature]
        for di, dtype in enumerate(DTYPES):
            for hi, d in enumerate(TRANSPOSED_X8_HEAD_SIZES):     # d64 / d128
                g = rotated_group(fi, di, hi)
                out[f"narrow_{dtype}_d{d}_b16_g{g}_{tag}"] = cls(
                    dtype=dtype, head_size=d, block_size=16, num_queries_per_kv=g,
                    **narrow_geometry_of(dtype, d), **{feature: True})
                # QQ-bias always runs narrow (attention_unified.GEOMETRY_RULES)
                # a window alone masks by interval there (attention_dispatch.x8_window_interval)
                if transposed_x8 and dtype == "f16" and (transposed_x8 != "L4" or d == 128) and feature != "qq_bias":
                    out[f"{transposed_x8}_f16_d{d}_b16_g{g}_{tag}"] = cls(
                        dtype="f16", head_size=d, block_size=16, num_queries_per_kv=g,
                        **transposed_x8_geometry(transposed_x8, d), **{feature: True},
                        **({"interval_mask": True} if feature == "sliding_window" else {}))
    return out


FP8_BLOCK_SIZES = (16, 64)


def fp8_variants(cls, *, transposed_x8_geometries, narrow_geometry_of=None,
                 transposed_x8_head_sizes=TRANSPOSED_X8_HEAD_SIZES) -> dict:
    """fp8 KV caches (kv_dtype fp8_e4m3fnuz): the narrow path for each Q dtype x d64/d128 x
    block 16/64 and the fp16 transposed-x8 geometries named (every one the dispatcher may pick), groups
    rotating as in the 16-bit table."""
    narrow_geometry_of = narrow_geometry_of or narrow_geometry
    out = {}
    for di, dtype in enumerate(DTYPES):
        for hi, d in enumerate(TRANSPOSED_X8_HEAD_SIZES):
            for bi, bs in enumerate(FP8_BLOCK_SIZES):
                g = rotated_group(di, hi, bi, 1)
                out[f"narrow_{dtype}_d{d}_b{bs}_g{g}_kvfp8"] = cls(
                    dtype=dtype, head_size=d, block_size=bs, num_queries_per_kv=g,
                    kv_dtype="fp8_e4m3fnuz", **narrow_geometry_of(dtype, d))
    for hi, d in enumerate(transposed_x8_head_sizes):
        for bi, bs in enumerate(FP8_BLOCK_SIZES):
            for gi, geometry in enumerate(transposed_x8_geometries):
                g = rotated_group(hi, bi, gi, 2)
                out[f"{geometry}_f16_d{d}_b{bs}_g{g}_kvfp8"] = cls(
                    dtype="f16", head_size=d, block_size=bs, num_queries_per_kv=g,
                    kv_dtype="fp8_e4m3fnuz", **transposed_x8_geometry(geometry, d))
    return out


VARIANTS: dict[str, UnifiedAttention2DSpec] = _variants()
GOLDEN_PERTURBATION = ("kv_cache_policy", {"normal": "stream", "stream": "normal"})     # see rocke.kernels.registry
