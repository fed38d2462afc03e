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
- transposed-x8 flash (``use_mfma_32x32x8`` + ``use_transposed_qk_32x32``, f16 only):
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from rocke import dsl
from rocke.dsl import rcp
from rocke.dsl.fragment import (AxisVector, COL, ROW, Fragment, load_fragment, store_fragment)
from rocke.dsl.magic import udiv_const
from rocke.dsl.paged import (CACHE_POLICIES, BlockTableRow, PagedView, copy_paged_tile,
                              min_dma_loads_per_wave, rows_per_wave)
from rocke.kernels.common.checks import (check_bool, check_buffer_bytes, check_choice, check_extent,
                                         check_grid_extent, check_int_range, check_tensor, I32_LIMIT)
from rocke.kernels.common.flash import LOG2E, online_softmax_update
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.gfx942.attention_policy import TRANSPOSED_X8

DTYPES = ("f16", "bf16")
HEAD_SIZES = (64, 128, 256)
FLASH_HEAD_SIZES = (64, 128)   # d256: narrow only (ALGORITHM.md §11.2)
KV_DTYPES = ("fp8_e4m3fnuz",)  # kv_dtype values besides None (= the Q dtype); gfx942's fp8
BLOCK_SIZES = (16, 32, 64)
TILE_SIZES = (16, 32, 64)
NUM_WARPS = (1, 2, 4, 8)
# spec field -> kernel-name tag of each score feature, in the order they apply (ALGORITHM.md §12)
FEATURES = {"softcap": "softcap", "alibi": "alibi", "qq_bias": "qqb", "sliding_window": "swa",
            "sinks": "sinks"}
STAGING_VECTOR = 8          # elements per lane per global access of the cooperative copies
MAX_GROUP = 16


@dataclass(frozen=True)
class UnifiedAttention2DSpec:
    """Every field changes the emitted code and is encoded in ``kernel_name``."""

    dtype: str = "f16"
    head_size: int = 128
    block_size: int = 16               # KV cache page size
    num_queries_per_kv: int = 1        # GQA group G (any positive int up to 16)
    num_warps: int = 4
    block_m_per_warp: int = 16         # narrow: 16 or 32 rows per warp; flash: 32
    tile_size: int = 0                 # KV tile T; 0 = min(block_size, 32) (narrow) / 64 (flash)
    use_mfma_32x32x8: bool = False
    use_transposed_qk_32x32: bool = False
    use_k_single_buffer: bool | None = None   # None: num_warps * 32 <= T (flash) / BLOCK_M <= T
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
                self.flash, self.num_warps, self.block_m_per_warp, self.tile_size))

    # ---- derived geometry -------------------------------------------------------------------
    @property
    def flash(self) -> bool:
        return self.use_transposed_qk_32x32

    @property
    def cache_dtype(self) -> str:
        """The element type of k_cache / v_cache."""
        return self.kv_dtype or self.dtype

    @property
    def fp8_kv(self) -> bool:
        return self.kv_dtype is not None

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
        path = "x8t" if self.flash else "narrow"
        name = (f"{self.family}_{self.dtype}_d{self.head_size}_b{self.block_size}_g{self.num_queries_per_kv}"
                f"_{path}_w{self.num_warps}m{self.block_m_per_warp}_t{self.tile_size}"
                f"_k{'1' if self.use_k_single_buffer else '2'}")
        flags = [("wpe", self.waves_per_eu), ("iglp", self.iglp),
                 ("stream", self.kv_cache_policy == "stream"), ("qdirect", self.q_direct),
                 ("kdma", self.global_load_lds_k), ("qmajor", self.q_major_grid),
                 ("cfv", self.cfv_store), ("a64", self.kv_addr_64), ("kvfp8", self.fp8_kv)]
        flags += [(tag, getattr(self, name)) for name, tag in FEATURES.items()]
        for tag, value in flags:
            if value is True:
                name += f"_{tag}"
            elif value and value is not False:
                name += f"_{tag}{value}"
        return name


def resolved_tile(spec) -> int:
    """The spec's KV tile: its own, or the regime's default (``attention_policy.default_tile``)."""
    return spec.tile_size or policy.default_tile(spec.use_transposed_qk_32x32, spec.block_size,
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
    for name in ("use_mfma_32x32x8", "use_transposed_qk_32x32", "iglp", "q_direct",
                 "global_load_lds_k", "q_major_grid", "cfv_store", "kv_addr_64", *FEATURES):
        ok &= rule(check_bool, name, getattr(spec, name))
    if spec.use_k_single_buffer is not None:
        ok &= rule(check_bool, "use_k_single_buffer", spec.use_k_single_buffer)
    ok &= rule(check_int_range, "waves_per_eu", spec.waves_per_eu, 0, 8)
    ok &= rule(check_choice, "kv_cache_policy", spec.kv_cache_policy, tuple(CACHE_POLICIES))
    if spec.kv_dtype is not None:
        ok &= rule(check_choice, "kv_dtype", spec.kv_dtype, KV_DTYPES)
    if not ok:
        return out
    if spec.kv_dtype is not None and spec.global_load_lds_k:
        out.append("global_load_lds_k: the LDS DMA writes the cache's bytes as they are; an fp8 "
                   "cache (kv_dtype) must be dequantized on its way to LDS")
    if spec.head_size not in FLASH_HEAD_SIZES and spec.use_transposed_qk_32x32:
        out.append(f"head_size: {spec.head_size} has only the narrow path; the transposed-x8 "
                   f"path ships head sizes {FLASH_HEAD_SIZES}")
    if spec.use_mfma_32x32x8 and spec.dtype != "f16":
        out.append("use_mfma_32x32x8: use_mfma_32x32x8 is fp16-only")
    if spec.use_transposed_qk_32x32 and not spec.use_mfma_32x32x8:
        out.append("use_transposed_qk_32x32: the transposed S^T = K Q^T path requires the 32x32x8 atom "
                   "(use_mfma_32x32x8=True)")
    if spec.use_mfma_32x32x8 and not spec.use_transposed_qk_32x32:
        out.append("use_mfma_32x32x8: the 32x32x8 atom is wired only in the transposed path "
                   "(use_transposed_qk_32x32=True)")
    if out:
        return out
    flash = spec.use_transposed_qk_32x32
    tile = resolved_tile(spec)
    block_m = spec.num_warps * spec.block_m_per_warp
    if flash and spec.block_m_per_warp != 32:
        out.append(f"block_m_per_warp: the transposed-x8 path gives each warp 32 query columns, got "
                   f"{spec.block_m_per_warp}")
    if flash and tile % 32:
        out.append(f"tile_size: {tile} must be a multiple of the 32x32x8 atom's M (32)")
    if spec.num_queries_per_kv > block_m:
        out.append(f"num_queries_per_kv: a GQA group of {spec.num_queries_per_kv} does not fit "
                   f"BLOCK_M = {block_m} rows")
    if tile % spec.block_size and spec.block_size % tile:
        out.append(f"tile_size: {tile} and block_size {spec.block_size} must divide one another")
    run = rows_per_wave(spec.head_size, STAGING_VECTOR, 2, lds_dma=spec.global_load_lds_k)
    if spec.block_size % run:
        out.append(f"block_size: {spec.block_size} is smaller than the {run} rows a wave copies at once")
    if out:
        return out
    total = sum(lds_model(spec, tile=tile).values())
    if total > dsl.LDS_BYTES:
        out.append(f"tile_size: the {'transposed-x8' if flash else 'narrow'} path needs {total} bytes "
                   f"of LDS at head_size {spec.head_size}, BLOCK_M {block_m}, tile {tile} "
                   f"({lds_model(spec, tile=tile)}), gfx942 has {dsl.LDS_BYTES}; use a smaller "
                   f"tile_size, fewer rows or a single K buffer")
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


def lds_model(spec, *, tile: int | None = None) -> dict[str, int]:
    """Bytes of each LDS region of the tile loop and the aliased stages' excess over them
    (``attention_policy.lds_plan``, ALGORITHM.md §9); ``sum(values)`` is the footprint. An fp8
    cache changes nothing here: its tiles are dequantized into LDS in the Q dtype."""
    return policy.lds_plan(spec, tile=tile).footprint()


# ---- launch -----------------------------------------------------------------------------------

def total_num_q_blocks(spec, num_seqs: int, total_q: int) -> int:
    """q blocks over the whole batch, as vLLM counts them (a sequence may start mid-block)."""
    return total_q // spec.block_q + num_seqs


def launch_geometry(spec, num_seqs: int, total_q: int, num_kv_heads: int):
    """(grid, block): (num_kv_heads, total_num_q_blocks, 1), or query-major with q_major_grid."""
    for name, v in (("num_seqs", num_seqs), ("total_q", total_q), ("num_kv_heads", num_kv_heads)):
        check_extent(name, v)
    blocks = total_num_q_blocks(spec, num_seqs, total_q)
    check_grid_extent("total_num_q_blocks", blocks, axis="x" if spec.q_major_grid else "y")
    grid = (blocks, num_kv_heads, 1) if spec.q_major_grid else (num_kv_heads, blocks, 1)
    return grid, (spec.workgroup_size, 1, 1)


def search_steps_for(num_seqs: int) -> int:
    """Steps of the kernel's binary search for a q block's sequence over ``num_seqs``."""
    return max(1, num_seqs.bit_length())


def check_common_args(spec, q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k):
    """Per-tensor checks shared by the 2D and 3D kernels (cheap; the full problem validation is
    the dispatcher's)."""
    import torch
    check_tensor("q", q, dtype=spec.dtype, dims=("total_q", "num_q_heads", "head_size"), contiguous=False)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, t, dtype=spec.cache_dtype, dims=("num_blocks", "block_size", "num_kv_heads", "head_size"),
                     contiguous=False, one_buffer=False)
        if tuple(t.shape[1:]) != (spec.block_size, k_cache.shape[2], spec.head_size):
            raise ValueError(f"{name}: shape {tuple(t.shape)} does not match block_size "
                             f"{spec.block_size} / head_size {spec.head_size} of the spec")
        span = t.stride(0) * t.shape[0] * t.element_size()
        if not spec.kv_addr_64:
            check_buffer_bytes(name, span, "the cache (use kv_addr_64 for caches past 2 GiB)")
        for i in range(3):
            if t.stride(i) >= I32_LIMIT:
                raise ValueError(f"{name}: stride {t.stride(i)} exceeds the kernel's 32-bit strides")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} differs from k_cache's {tuple(k_cache.shape)}")
    if q.shape[2] != spec.head_size:
        raise ValueError(f"q: head_size {q.shape[2]} differs from the spec's {spec.head_size}")
    hk = k_cache.shape[2]
    if q.shape[1] != hk * spec.num_queries_per_kv:
        raise ValueError(f"q: {q.shape[1]} query heads != num_kv_heads {hk} x num_queries_per_kv "
                         f"{spec.num_queries_per_kv}")
    for name, t, dims in (("block_table", block_table, 2), ("cu_seqlens_q", cu_seqlens_q, 1),
                          ("seqused_k", seqused_k, 1)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != dims:
            raise ValueError(f"{name}: must be a {dims}-D int32 tensor")
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: needs a unit last stride, got {t.stride()}")
    num_seqs = seqused_k.shape[0]
    if cu_seqlens_q.shape[0] != num_seqs + 1 or block_table.shape[0] != num_seqs:
        raise ValueError(f"cu_seqlens_q / block_table: {cu_seqlens_q.shape[0]} prefix sums and "
                         f"{block_table.shape[0]} table rows for {num_seqs} sequences")
    check_extent("num_seqs", num_seqs)
    check_extent("total_q", q.shape[0])
    check_buffer_bytes("q", q.stride(0) * q.shape[0] * q.element_size(), "the q tensor")


def cache_args(t):
    """A paged cache's stride and extent arguments (block, token, head strides; blocks)."""
    return [t.stride(0), t.stride(1), t.stride(2), t.shape[0]]


def feature_arg_names(spec) -> tuple[str, ...]:
    """Names of the runtime arguments the spec's score features append after the base ones."""
    names = {"softcap": ("softcap",), "alibi": ("alibi_slopes",),
             "qq_bias": ("qq_bias", "qq_bias_stride", "qq_bias_rows"),
             "sliding_window": ("window_left",), "sinks": ("sinks",)}
    return tuple(n for f in spec.features for n in names[f])


def feature_args(spec, num_q_heads: int, *, softcap: float = 0.0, alibi_slopes=None, qq_bias=None,
                 window_left: int = -1, sinks=None) -> list:
    """The feature arguments of ``spec`` (``feature_arg_names`` order), each checked against the
    spec: a feature the spec applies needs its value, a value the spec would ignore is refused."""
    import torch
    given = {"softcap": softcap not in (None, 0, 0.0), "alibi": alibi_slopes is not None,
             "qq_bias": qq_bias is not None, "sliding_window": window_left not in (None, -1),
             "sinks": sinks is not None}
    for name in FEATURES:
        if given[name] != getattr(spec, name):
            state = "applies" if getattr(spec, name) else "does not apply"
            raise ValueError(f"{name}: the kernel {spec.kernel_name} {state} it, but the call "
                             f"{'passes' if given[name] else 'omits'} it")
    out = []
    if spec.softcap:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or \
                not math.isfinite(softcap) or softcap <= 0:
            raise ValueError(f"softcap: must be a finite positive float, got {softcap!r}")
        out.append(float(softcap))
    if spec.alibi:
        out.append(_per_head_tensor("alibi_slopes", alibi_slopes, num_q_heads))
    if spec.qq_bias:
        if not isinstance(qq_bias, torch.Tensor) or qq_bias.dtype != torch.float32 or qq_bias.dim() != 2 \
                or qq_bias.stride(1) != 1:
            raise ValueError("qq_bias: must be a 2-D float32 tensor [max_q, max_q] with unit column stride")
        check_buffer_bytes("qq_bias", qq_bias.stride(0) * qq_bias.shape[0] * 4, "the qq_bias tensor")
        out += [qq_bias, qq_bias.stride(0), qq_bias.shape[0]]
    if spec.sliding_window:
        if isinstance(window_left, bool) or not isinstance(window_left, int) or \
                not 0 <= window_left < I32_LIMIT:
            raise ValueError(f"window_left: must be an int in [0, 2**31), got {window_left!r}")
        out.append(window_left)
    if spec.sinks:
        out.append(_per_head_tensor("sinks", sinks, num_q_heads))
    return out


def _per_head_tensor(name, t, num_q_heads):
    import torch
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or tuple(t.shape) != (num_q_heads,) \
            or t.stride(0) != 1:
        raise ValueError(f"{name}: must be a contiguous float32 tensor [num_q_heads = {num_q_heads}]")
    return t


def descale_args(spec, k_descale, v_descale, num_seqs: int, num_kv_heads: int) -> list:
    """The fp8 kernels' trailing arguments (ARGS_FP8): each descale's pointer and its element
    strides over (sequence, kv head). vLLM's shapes: ``[]``/``[1]`` (per tensor: strides 0),
    ``[num_kv_heads]`` (per head) or ``[num_seqs, num_kv_heads]`` (often a stride-0 expand).
    Empty for a spec without an fp8 cache (which takes no descale arguments)."""
    import torch
    if not spec.fp8_kv:
        if k_descale is not None or v_descale is not None:
            raise ValueError("k_descale/v_descale: this kernel reads a 16-bit cache (kv_dtype None) "
                             "and takes no descale arguments")
        return []
    out = []
    for name, t in (("k_descale", k_descale), ("v_descale", v_descale)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise ValueError(f"{name}: an fp8 cache needs an fp32 descale tensor, got "
                             f"{getattr(t, 'dtype', type(t).__name__)}")
        shape = list(t.shape)
        if shape in ([], [1]):
            strides = (0, 0)
        elif shape == [num_kv_heads]:
            strides = (0, t.stride(0))
        elif shape == [num_seqs, num_kv_heads]:
            strides = (t.stride(0), t.stride(1))
        else:
            raise ValueError(f"{name}: shape must be [], [1], [num_kv_heads] or [num_seqs, "
                             f"num_kv_heads] = [{num_seqs}, {num_kv_heads}], got {shape}")
        out += [t, *strides]
    return out


def kernel_args(spec, q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k,
                softmax_scale: float, k_descale=None, v_descale=None, **features) -> list:
    """Ordered kernel arguments (ARGS, then ARGS_FP8 for an fp8 cache, then
    ``feature_arg_names``) for vLLM-layout tensors; cheap per-tensor checks. ``features``:
    ``feature_args``'s keywords."""
    check_common_args(spec, q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k)
    check_tensor("out", out, dtype=spec.dtype, dims=("total_q", "num_q_heads", "head_size"), contiguous=False)
    if out.shape != q.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} differs from q's {tuple(q.shape)}")
    num_seqs = seqused_k.shape[0]
    scales = descale_args(spec, k_descale, v_descale, num_seqs, k_cache.shape[2])
    return [q, k_cache, v_cache, out, block_table, cu_seqlens_q, seqused_k, float(softmax_scale),
            num_seqs, search_steps_for(num_seqs), q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            *cache_args(k_cache), *cache_args(v_cache)[:3], block_table.stride(0), *scales,
            *feature_args(spec, q.shape[1], **features)]


ARGS = ("q", "k_cache", "v_cache", "out", "block_table", "cu_seqlens_q", "seqused_k", "softmax_scale",
        "num_seqs", "search_steps", "q_stride_token", "q_stride_head", "o_stride_token",
        "o_stride_head", "k_stride_block", "k_stride_token", "k_stride_head", "num_blocks",
        "v_stride_block", "v_stride_token", "v_stride_head", "block_table_stride")
# appended (2D and 3D) when the spec has an fp8 cache; a spec without one keeps ARGS exactly
ARGS_FP8 = ("k_descale", "k_descale_stride_seq", "k_descale_stride_head",
            "v_descale", "v_descale_stride_seq", "v_descale_stride_head")


# ---- the kernel ---------------------------------------------------------------------------------

class _Args:
    pass


def _declare_args(k, spec, split: bool) -> _Args:
    a = _Args()
    dt = spec.dtype
    a.q = k.arg_ptr("q", dt, readonly=True)
    a.k_cache = k.arg_ptr("k_cache", spec.cache_dtype, readonly=True)
    a.v_cache = k.arg_ptr("v_cache", spec.cache_dtype, readonly=True)
    if split:
        a.segm_output = k.arg_ptr("segm_output", "f32")
        a.segm_max = k.arg_ptr("segm_max", "f32")
        a.segm_expsum = k.arg_ptr("segm_expsum", "f32")
    else:
        a.out = k.arg_ptr("out", dt)
    a.block_table = k.arg_ptr("block_table", "i32", readonly=True)
    a.cu_seqlens_q = k.arg_ptr("cu_seqlens_q", "i32", readonly=True)
    a.seqused_k = k.arg_ptr("seqused_k", "i32", readonly=True)
    a.softmax_scale = k.arg_f32("softmax_scale")
    for name in ("num_seqs", "search_steps", "q_stride_token", "q_stride_head"):
        setattr(a, name, k.arg_i32(name))
    if split:
        a.num_segments = k.arg_i32("num_segments")
        a.num_q_heads = k.arg_i32("num_q_heads")
    else:
        a.o_stride_token = k.arg_i32("o_stride_token")
        a.o_stride_head = k.arg_i32("o_stride_head")
    for name in ("k_stride_block", "k_stride_token", "k_stride_head", "num_blocks",
                 "v_stride_block", "v_stride_token", "v_stride_head", "block_table_stride"):
        setattr(a, name, k.arg_i32(name))
    if spec.fp8_kv:
        for which in ("k", "v"):
            setattr(a, f"{which}_descale", k.arg_ptr(f"{which}_descale", "f32", readonly=True))
            for part in ("seq", "head"):
                name = f"{which}_descale_stride_{part}"
                setattr(a, name, k.arg_i32(name))
    # feature arguments last (feature_arg_names): the featureless kernel is unchanged
    if spec.softcap:
        a.softcap = k.arg_f32("softcap")
    if spec.alibi:
        a.alibi_slopes = k.arg_ptr("alibi_slopes", "f32", readonly=True)
    if spec.qq_bias:
        a.qq_bias = k.arg_ptr("qq_bias", "f32", readonly=True)
        a.qq_bias_stride = k.arg_i32("qq_bias_stride")
        a.qq_bias_rows = k.arg_i32("qq_bias_rows")
    if spec.sliding_window:
        a.window_left = k.arg_i32("window_left")
    if spec.sinks:
        a.sinks = k.arg_ptr("sinks", "f32", readonly=True)
    return a


def build(spec: UnifiedAttention2DSpec) -> dsl.Kernel:
    return build_tiled(spec, split=False)


def build_tiled(spec, *, split: bool) -> dsl.Kernel:
    """The 2D kernel (``split=False``) or the 3D split-KV kernel (``split=True``): one builder,
    the 3D one restricting the tile loop to its segment and writing fp32 partials."""
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size,
                   waves_per_eu=spec.waves_per_eu or None)
    a = _declare_args(k, spec, split)
    T, BQ = spec.tile_size, spec.block_q
    threads = spec.workgroup_size
    tid = k.thread_id(0)

    if split:
        q_block, kv_head, segment = k.block_id(0), k.block_id(1), k.block_id(2)
    elif spec.q_major_grid:
        q_block, kv_head = k.block_id(0), k.block_id(1)
    else:
        kv_head, q_block = k.block_id(0), k.block_id(1)

    # the sequence of this q block: the last s with cu_seqlens_q[s] // BQ + s <= q_block
    def block_start(s):
        return udiv_const(a.cu_seqlens_q.load(s), BQ) + s
    with k.for_range(0, a.search_steps, carry=(k.const(0, "i32"), a.num_seqs)) as search:
        lo, hi = search.carry
        mid = (lo + hi) >> 1
        go_right = block_start(mid) <= q_block
        searching = lo < hi
        search.yield_(dsl.select(searching & go_right, mid + 1, lo),
                      dsl.select(searching & ~go_right, mid, hi))
    seq = search.results[0] - 1
    q_seq_start = a.cu_seqlens_q.load(seq)
    q_len = a.cu_seqlens_q.load(seq + 1) - q_seq_start
    q_start = (q_block - block_start(seq)) * BQ          # first token of the block in the sequence
    with k.if_(q_start < q_len):
        kv_len = a.seqused_k.load(seq)
        ctx = kv_len - q_len
        q_rows = dsl.minimum(q_len - q_start, BQ)        # valid tokens of the block
        kv_end = dsl.minimum(kv_len, ctx + q_start + q_rows)
        n_tiles = udiv_const(kv_end + (T - 1), T)
        n_full = dsl.minimum(udiv_const(ctx + q_start + 1, T), n_tiles)   # no key in the future
        if spec.sliding_window:
            # ALGORITHM.md §12.6: tiles wholly older than the window of the block's first query
            # are never visited; the left-edge tiles (older than the window of its last query)
            # and the diagonal tiles are masked, the tiles between run unmasked
            w_lo = udiv_const(dsl.maximum(ctx + q_start - a.window_left, 0), T)
            w_full = udiv_const(dsl.maximum(ctx + q_start + q_rows - 1 - a.window_left, 0) + (T - 1), T)
            if split:      # the segments split the window's tiles, not the whole sequence
                per_seg = (n_tiles - w_lo + a.num_segments - 1) // a.num_segments
                lo = dsl.minimum(w_lo + segment * per_seg, n_tiles)
                hi = dsl.minimum(w_lo + (segment + 1) * per_seg, n_tiles)
            else:
                lo, hi = w_lo, n_tiles
            edge = dsl.minimum(dsl.maximum(w_full, lo), hi)
            bounds = (lo, edge, dsl.minimum(dsl.maximum(n_full, edge), hi), hi)
        elif split:
            n_all = udiv_const(kv_len + (T - 1), T)
            per_seg = (n_all + a.num_segments - 1) // a.num_segments
            seg_lo = dsl.minimum(segment * per_seg, n_tiles)
            seg_hi = dsl.minimum((segment + 1) * per_seg, n_tiles)
            bounds = (seg_lo, dsl.maximum(seg_lo, dsl.minimum(n_full, seg_hi)), seg_hi)
        else:
            bounds = (k.const(0, "i32"), n_full, n_tiles)
        wg = _Ctx(k, spec, a, kv_head, seq, q_seq_start, q_len, q_start, kv_len, ctx, tid, threads)
        if split:
            wg.segment = segment
        path = _FlashPath(wg) if spec.flash else _NarrowPath(wg)
        m, l, o = path.run(bounds)
        if split:
            _store_partials(wg, path, m, l, o, segment)
        else:
            path.store_output(l, o)
    return k


class _Ctx:
    """Per-workgroup values the paths share."""

    def __init__(self, k, spec, a, kv_head, seq, q_seq_start, q_len, q_start, kv_len, ctx, tid, threads):
        self.k, self.spec, self.a = k, spec, a
        self.kv_head, self.seq, self.q_seq_start = kv_head, seq, q_seq_start
        self.q_len, self.q_start, self.kv_len, self.ctx = q_len, q_start, kv_len, ctx
        self.tid, self.threads = tid, threads
        self.segment = None             # the 3D kernel's segment index
        self.G = spec.num_queries_per_kv
        self.total_q = a.cu_seqlens_q.load(a.num_seqs)
        self.q_buf = a.q.buffer(self.total_q * a.q_stride_token)
        self.aux = CACHE_POLICIES[spec.kv_cache_policy]
        self.table = BlockTableRow(a.block_table, seq * a.block_table_stride)
        self.k_view = PagedView(a.k_cache, spec.block_size, a.k_stride_block, a.k_stride_token,
                                kv_head * a.k_stride_head, a.num_blocks, spec.kv_addr_64)
        self.v_view = PagedView(a.v_cache, spec.block_size, a.v_stride_block, a.v_stride_token,
                                kv_head * a.v_stride_head, a.num_blocks, spec.kv_addr_64)

    def descale(self, which: str):
        """This (sequence, kv head)'s k or v descale (fp8 caches), applied in fp32 outside the
        tile loop (ALGORITHM.md §11.1): k's into the score scale, v's into the output."""
        if not self.spec.fp8_kv:
            return None
        a = self.a
        index = (self.seq * getattr(a, f"{which}_descale_stride_seq")
                 + self.kv_head * getattr(a, f"{which}_descale_stride_head"))
        return getattr(a, f"{which}_descale").load(index)

    def row_token(self, rows):
        """(token within the sequence, query head) of workgroup rows (i32 scalar or vector)."""
        if self.G == 1:
            return self.q_start + rows, self.kv_head
        tok = udiv_const(rows, self.G)
        return self.q_start + tok, self.kv_head * self.G + (rows - tok * self.G)

    def row_valid(self, rows):
        tok, _ = self.row_token(rows)
        ok = tok < self.q_len
        if self.spec.block_m_rows % self.G:
            ok = ok & (rows < self.spec.block_q * self.G)
        return ok

    def copy_k(self, lds, first, **kw):
        s = self.spec
        copy_paged_tile(self.k_view, self.table, lds, first_token=first, valid_tokens=self.kv_len,
                        thread_index=self.tid, threads=self.threads, vector=STAGING_VECTOR,
                        lds_dma=s.global_load_lds_k, aux=self.aux, **kw)

    def copy_v(self, lds, first):
        copy_paged_tile(self.v_view, self.table, lds, first_token=first, valid_tokens=self.kv_len,
                        thread_index=self.tid, threads=self.threads, vector=STAGING_VECTOR,
                        transpose=not self.spec.cfv_store, aux=self.aux)


def _load_q_rows_to_lds(c: _Ctx, q_lds):
    """Cooperative copy of the workgroup's BLOCK_M (token, head) rows of Q into ``q_lds``;
    padding rows read 0."""
    k, s = c.k, c.spec
    D = s.head_size
    per_row = D // STAGING_VECTOR
    total = s.block_m_rows * per_row
    for first in range(0, total, c.threads):
        def one(first=first):
            i = c.tid + first if first else c.tid
            r = i >> (per_row.bit_length() - 1)
            col = (i & (per_row - 1)) * STAGING_VECTOR
            tok, head = c.row_token(r)
            index = (c.q_seq_start + tok) * c.a.q_stride_token + head * c.a.q_stride_head + col
            q_lds.store((r, col), c.q_buf.load(index, width=STAGING_VECTOR, mask=c.row_valid(r)))
        if first + c.threads <= total:
            one()
        else:
            with k.if_(c.tid < total - first):
                one()


def _row_runs(k, layout, row_axis: int, origin):
    """For a fragment layout whose ``row_axis`` indexes workgroup rows (the other axis: head
    dim), the runs of values contiguous along the head dim: (first value, length, row Value,
    head-dim Value) per run."""
    from rocke.dsl.fragment import lane_affine_value
    dim_axis = 1 - row_axis
    out = []
    lane_row = lane_affine_value(k, layout.lane_part(row_axis))
    lane_dim = lane_affine_value(k, layout.lane_part(dim_axis))
    for v0, n in layout.value_runs(dim_axis):
        off_r = layout.value_offsets(row_axis)[v0]
        off_d = layout.value_offsets(dim_axis)[v0]
        out.append((v0, n, lane_row + (origin[row_axis] + off_r), lane_dim + (origin[dim_axis] + off_d)))
    return out


def _load_q_direct(c: _Ctx, layout, row_axis: int, origin) -> Fragment:
    """A Q operand fragment read straight from global memory (``q_direct``)."""
    parts = []
    for v0, n, row, d in _row_runs(c.k, layout, row_axis, origin):
        tok, head = c.row_token(row)
        index = (c.q_seq_start + tok) * c.a.q_stride_token + head * c.a.q_stride_head + d
        parts.append(c.q_buf.load(index, width=n, mask=c.row_valid(row)))
    return Fragment(dsl.concat(*parts) if len(parts) > 1 else parts[0], layout)


def _score_scale(c: _Ctx):
    """softmax_scale * log2(e), times k_descale for an fp8 cache (the exactly dequantized K tile
    is unscaled, so S = (Q K^T) * k_descale * softmax_scale; ALGORITHM.md §11.1)."""
    if not c.spec.fp8_kv:
        return c.a.softmax_scale * LOG2E
    return c.a.softmax_scale * c.descale("k") * LOG2E


def _inverse_sum(l):
    """1 / l, and 0 for a row that saw no key (l = 0): an empty softmax outputs 0 (ALGORITHM.md
    §2.1), as reduce_segments writes for a row whose every segment is empty."""
    return dsl.select(l > 0.0, rcp(l), 0.0)


def _value_scaled(c: _Ctx, frags):
    """Output fragments times v_descale for an fp8 cache (O = P (V * v_descale) = (P V) * v_descale,
    also for the 3D partials, which are linear in V)."""
    if not c.spec.fp8_kv:
        return frags
    vs = c.descale("v")
    return [(f * vs, r, d) for f, r, d in frags]


class _PathBase:
    row_axis: int      # axis of the score/output fragments that indexes workgroup rows

    def __init__(self, c: _Ctx):
        self.c = c
        self.k = c.k
        self.spec = c.spec

    def _alloc_kv(self):
        s, k = self.spec, self.k
        self.lds_plan = policy.lds_plan(s)
        self.k_lds = self.lds_plan.allocate(k, "k_tile", s.dtype)
        self.v_lds = self.lds_plan.allocate(k, "v_tile" if s.cfv_store else "vt_tile", s.dtype)

    def _alloc_q_stage(self):
        return self.lds_plan.allocate(self.k, "q_stage", self.spec.dtype) \
            if self.lds_plan.has("q_stage") else None

    def k_tile_view(self, j):
        """(LDS tile, first row) of K tile ``j`` (double buffering alternates halves)."""
        if self.spec.use_k_single_buffer:
            return self.k_lds, 0
        return self.k_lds, (j & 1) * self.spec.tile_size

    def _copy_k_into(self, j):
        s = self.spec
        T = s.tile_size
        if s.use_k_single_buffer:
            self.c.copy_k(self.k_lds, j * T)
        else:
            self.c.copy_k(self.k_lds, j * T, tokens=T, lds_row0=(j & 1) * T)

    def run(self, bounds):
        """The tile loop (ALGORITHM.md §2-3): unmasked tiles, then the diagonal ones. With a
        sliding window ``bounds`` is (lo, edge, mid, hi): masked left-edge tiles first."""
        k, s, c = self.k, self.spec, self.c
        if len(bounds) == 4:
            lo, edge, mid, hi = bounds
            phases = ((lo, edge, True), (edge, mid, False), (mid, hi, True))
        else:
            lo, mid, hi = bounds
            phases = ((lo, mid, False), (mid, hi, True))
        carry = self.init_carry()
        double = not s.use_k_single_buffer
        if double:
            with k.if_(lo < hi):
                self._copy_k_into(lo)            # the first K tile; each step prefetches the next
        for start, stop, masked in phases:
            with k.for_range(start, stop, carry=carry) as loop:
                j = loop.index
                kv0 = j * s.tile_size
                if double:
                    c.copy_v(self.v_lds, kv0)    # current V first: PV waits only on V while next K streams
                    self._copy_k_into(j + 1)
                else:
                    self._copy_k_into(j)
                    c.copy_v(self.v_lds, kv0)
                if s.global_load_lds_k:
                    # this tile's K and V are in; a double buffer's next-K DMAs (the newest
                    # loads) stay in flight through this step
                    k.wait_vmcnt(min_dma_loads_per_wave(s.tile_size, s.head_size, c.threads) if double else 0)
                k.barrier()
                if s.iglp:
                    k.iglp_opt(0)       # strategy 1 trips an LLVM assertion with DS writes in the loop
                new = self.step(loop.carry, j, kv0, masked)
                k.barrier()                      # the next step overwrites V (and K)
                loop.yield_(*new)
            carry = loop.results
        if double and s.global_load_lds_k:
            k.wait_vmcnt(0)                      # the last prefetch lands before LDS is reused
        return self.split_carry(carry)

    def masked_scores(self, score, kv0, key_origin, row_origin, masked: bool, group: int = 0):
        """Log2-domain scores with the spec's features applied in the order of ALGORITHM.md §12
        (scale, softcap, ALiBi, QQ-bias), then -inf where the key is in the future of the
        row's query or older than its window (masked tiles only)."""
        s, c = self.spec, self.c
        if s.softcap:
            # c tanh(x) = c - 2c / (e^(2x) + 1), in the log2 domain: four VALU ops per score
            # (exp2, add, rcp, fma); error budget in ALGORITHM.md §12.2
            e = (score * self.softcap_in).exp2(fast=True)
            scaled = (e + 1.0).map(rcp) * self.softcap_out2 + self.softcap_out
        else:
            scaled = score * self.qk_scale
        if not (masked or s.alibi or s.qq_bias):
            return scaled
        rows, keys = _axes(score, self.row_axis, row_origin, key_origin)
        tok, _ = c.row_token(rows)
        rel = keys - c.ctx if s.alibi or s.qq_bias else None   # key position in the query section
        if s.alibi:
            scaled = scaled + self.alibi_rows[group] * rel.to(dsl.f32)
        if s.qq_bias:
            scaled = scaled + _qq_bias_values(c, tok, rel, score.layout.values_per_lane) * LOG2E
        if not masked:
            return scaled
        visible = keys <= tok + c.ctx
        if s.sliding_window:
            visible = visible & (keys >= tok + c.ctx - c.a.window_left)
        return scaled.where(visible, -math.inf)

    def prepare_features(self, row_origins):
        """Per-workgroup feature values, once before the tile loop: the softcap factors, and
        per-row fragments (one per row group, in the score layout) of the ALiBi slopes (log2
        domain) and sink logits (log2 domain)."""
        s, c = self.spec, self.c
        if s.softcap:
            self.softcap_in = self.qk_scale * (2.0 / c.a.softcap)   # k_descale included (fp8)
            self.softcap_out = c.a.softcap * LOG2E
            self.softcap_out2 = c.a.softcap * (-2 * LOG2E)
        C = self.mma.C
        if s.alibi:
            self.alibi_rows = [_per_head_rows(c, C, self.row_axis, r0, c.a.alibi_slopes, LOG2E)
                               for r0 in row_origins]
        if s.sinks:
            self.sink_rows = [_per_head_rows(c, C, self.row_axis, r0, c.a.sinks, LOG2E)
                              for r0 in row_origins]

    def initial_state(self, group: int, key_axis: int):
        """(m, l) a row starts from: (-inf, 0), or (sink, 1) with sinks (ALGORITHM.md §12.7). In
        the 3D kernel only segment 0 carries the sink, so reduce_segments counts it once."""
        C = self.mma.C
        m0 = AxisVector.full(self.k, C, key_axis, dsl.f32, -math.inf)
        l0 = AxisVector.full(self.k, C, key_axis, dsl.f32, 0.0)
        if not self.spec.sinks:
            return m0, l0
        sink = self.sink_rows[group].reduce(key_axis, "max")
        one = AxisVector.full(self.k, C, key_axis, dsl.f32, 1.0)
        if self.c.segment is None:
            return sink, one
        first = self.c.segment == 0
        return (sink.map(lambda v: dsl.select(first, v, -math.inf)),
                one.map(lambda v: dsl.select(first, v, 0.0)))


def _per_head_rows(c, layout, row_axis, row_origin, ptr, factor) -> Fragment:
    """A fragment of ``layout`` whose every value is ``ptr[head of its row] * factor``."""
    frag = Fragment.full(c.k, layout, dsl.f32, 0.0)
    rows, _ = _axes(frag, row_axis, row_origin, 0)
    _, head = c.row_token(rows)          # always a real head, padding rows included
    n = layout.values_per_lane
    vals = [ptr.load(_lane(head, v)) for v in range(n)]
    return Fragment((dsl.concat(*vals) if n > 1 else vals[0]) * factor, layout)


def _qq_bias_values(c, tok, rel, n):
    """``qq_bias[tok, rel]`` per score value, 0 outside the query section (rel < 0) and past
    the sequence's queries (ALGORITHM.md §12.4; vLLM's row = query index in the sequence)."""
    a = c.a
    buf = a.qq_bias.buffer(a.qq_bias_rows * a.qq_bias_stride)
    ok = (rel >= 0) & (rel < c.q_len) & (tok < c.q_len)
    index = tok * a.qq_bias_stride + rel
    vals = [buf.load(_lane(index, v), mask=_lane(ok, v)) for v in range(n)]
    return dsl.concat(*vals) if n > 1 else vals[0]


def _lane(x, v):
    """Value ``v`` of a per-value vector, or ``x`` itself when it is uniform (a scalar)."""
    return x[v] if isinstance(x, dsl.Value) and x.lanes > 1 else x


def _axes(frag, row_axis, row_origin, key_origin):
    origin = (row_origin, key_origin) if row_axis == ROW else (key_origin, row_origin)
    a, b = frag.coords(origin=origin)
    return (a, b) if row_axis == ROW else (b, a)


class _NarrowPath(_PathBase):
    """16x16x16, S = Q K^T (queries on rows), P staged through LDS (ALGORITHM.md §8)."""

    row_axis = ROW

    def __init__(self, c):
        super().__init__(c)
        s, k = self.spec, self.k
        self.mma = k.mfma("16x16x16", s.dtype)
        self.mq = s.block_m_per_warp // 16
        D, T = s.head_size, s.tile_size
        self._alloc_kv()
        self.p_lds = self.lds_plan.allocate(k, "p_tile", s.dtype)
        q_lds = self._alloc_q_stage()
        self.warp_row0 = k.wave_id() * s.block_m_per_warp
        self.qk_scale = _score_scale(c)
        if s.features:
            self.prepare_features([self.warp_row0 + i * 16 for i in range(self.mq)])
        self.q_ops = []
        if q_lds is not None:
            _load_q_rows_to_lds(c, q_lds)
            k.barrier()
        for i in range(self.mq):
            row = self.warp_row0 + i * 16
            if q_lds is None:
                ops = [_load_q_direct(c, self.mma.A, ROW, (row, d0)) for d0 in range(0, D, 16)]
            else:
                ops = [load_fragment(q_lds, self.mma.A, (row, d0)) for d0 in range(0, D, 16)]
            self.q_ops.append(ops)
        if q_lds is not None:
            k.barrier()                           # Q's LDS is reused by the K/V tiles

    def init_carry(self):
        C = self.mma.C
        nd = self.spec.head_size // 16
        if self.spec.sinks:
            m0, l0 = zip(*(self.initial_state(i, COL) for i in range(self.mq)))
            return [*m0, *l0] + [self.mma.zeros()] * (self.mq * nd)
        m0 = AxisVector.full(self.k, C, COL, dsl.f32, -math.inf)
        l0 = AxisVector.full(self.k, C, COL, dsl.f32, 0.0)
        return [m0] * self.mq + [l0] * self.mq + [self.mma.zeros()] * (self.mq * nd)

    def split_carry(self, carry):
        mq = self.mq
        return list(carry[:mq]), list(carry[mq:2 * mq]), list(carry[2 * mq:])

    def step(self, carry, j, kv0, masked):
        s, mma = self.spec, self.mma
        D, T = s.head_size, s.tile_size
        nd, nk = D // 16, T // 16
        m, l, o = self.split_carry(carry)
        k_lds, k_row0 = self.k_tile_view(j)
        for i in range(self.mq):
            row = self.warp_row0 + i * 16
            scores = []
            for n in range(nk):
                acc = mma.zeros()
                for st, d0 in enumerate(range(0, D, 16)):
                    kt = load_fragment(k_lds, mma.B, (d0, k_row0 + n * 16), transposed=True)
                    acc = mma(self.q_ops[i][st], kt, acc)
                scores.append(self.masked_scores(acc, kv0, kv0 + n * 16, row, masked, i))
            m[i], l[i], probs, alpha = online_softmax_update(m[i], l[i], scores, axis=COL)
            for n in range(nk):
                store_fragment(self.p_lds, probs[n].to(s.dtype), (row, n * 16))
            alpha_o = alpha.broadcast_to(mma.C)
            p_ops = [load_fragment(self.p_lds, mma.A, (row, n * 16)) for n in range(nk)]
            for jd in range(nd):
                acc = o[i * nd + jd] * alpha_o
                for n in range(nk):
                    p_op = p_ops[n]
                    v_op = load_fragment(self.v_lds, mma.B, (n * 16, jd * 16), transposed=not s.cfv_store)
                    acc = mma(p_op, v_op, acc)
                o[i * nd + jd] = acc
        return [*m, *l, *o]

    def output_fragments(self, l, o, normalise: bool):
        """(fragment, row origin, head-dim origin) of the warp's output accumulators."""
        nd = self.spec.head_size // 16
        out = []
        for i in range(self.mq):
            inv = l[i].map(_inverse_sum).broadcast_to(self.mma.C) if normalise else None
            for jd in range(nd):
                f = o[i * nd + jd]
                out.append((f * inv if normalise else f, self.warp_row0 + i * 16, jd * 16))
        return _value_scaled(self.c, out)

    def store_output(self, l, o):
        c = self.c
        out_buf = c.a.out.buffer(c.total_q * c.a.o_stride_token)
        for frag, row0, d0 in self.output_fragments(l, o, True):
            _store_rows(c, out_buf, frag.to(self.spec.dtype), self.row_axis, row0, d0,
                        c.a.o_stride_token, c.a.o_stride_head)


def _store_rows(c, buf, frag, row_axis, row0, d0, stride_token, stride_head):
    """Scatter a fragment whose ``row_axis`` indexes workgroup rows to ``[token, head, D]``
    memory; padding rows are dropped."""
    origin = (row0, d0) if row_axis == ROW else (d0, row0)
    for v0, n, row, d in _row_runs(c.k, frag.layout, row_axis, origin):
        tok, head = c.row_token(row)
        index = (c.q_seq_start + tok) * stride_token + head * stride_head + d
        part = frag.value if n == frag.value.lanes else (frag.value[v0] if n == 1 else frag.value[v0:v0 + n])
        buf.store(index, part, mask=c.row_valid(row))


class _FlashPath(_PathBase):
    """Transposed-x8: S^T = K Q^T on 32x32x8 (f16), P^T register-resident (ALGORITHM.md §8)."""

    row_axis = COL

    def __init__(self, c):
        super().__init__(c)
        s, k = self.spec, self.k
        self.mma = k.mfma("32x32x8", s.dtype)
        D = s.head_size
        self._alloc_kv()
        q_lds = self._alloc_q_stage()
        self.warp_col0 = k.wave_id() * 32
        self.qk_scale = _score_scale(c)
        if s.features:
            self.prepare_features([self.warp_col0])
        if q_lds is not None:
            _load_q_rows_to_lds(c, q_lds)
            k.barrier()
            self.q_ops = [load_fragment(q_lds, self.mma.B, (d0, self.warp_col0), transposed=True)
                          for d0 in range(0, D, 8)]
            k.barrier()
        else:
            self.q_ops = [_load_q_direct(c, self.mma.B, COL, (d0, self.warp_col0)) for d0 in range(0, D, 8)]

    def init_carry(self):
        C = self.mma.C
        if self.spec.sinks:
            m0, l0 = self.initial_state(0, ROW)
            return [m0, l0] + [self.mma.zeros()] * (self.spec.head_size // 32)
        m0 = AxisVector.full(self.k, C, ROW, dsl.f32, -math.inf)
        l0 = AxisVector.full(self.k, C, ROW, dsl.f32, 0.0)
        return [m0, l0] + [self.mma.zeros()] * (self.spec.head_size // 32)

    def split_carry(self, carry):
        return [carry[0]], [carry[1]], list(carry[2:])

    def step(self, carry, j, kv0, masked):
        s, mma = self.spec, self.mma
        D, T = s.head_size, s.tile_size
        nk = T // 32
        m, l, o = self.split_carry(carry)
        k_lds, k_row0 = self.k_tile_view(j)
        scores = []
        for i in range(nk):
            acc = mma.zeros()
            for st, d0 in enumerate(range(0, D, 8)):
                k_op = load_fragment(k_lds, mma.A, (k_row0 + i * 32, d0))
                acc = mma(k_op, self.q_ops[st], acc)
            scores.append(self.masked_scores(acc, kv0, kv0 + i * 32, self.warp_col0, masked))
        m0, l0, probs, alpha = online_softmax_update(m[0], l[0], scores, axis=ROW)
        probs = [p.to(s.dtype) for p in probs]
        alpha_o = alpha.broadcast_to(mma.C)
        o = [x * alpha_o for x in o]
        for i in range(nk):
            for sub in range(0, 32, 8):
                p_op = probs[i].as_operand(mma.B, (sub, 0))
                for jd in range(D // 32):
                    v_op = load_fragment(self.v_lds, mma.A, (jd * 32, i * 32 + sub), transposed=s.cfv_store)
                    o[jd] = mma(v_op, p_op, o[jd])
        return [m0, l0, *o]

    def output_fragments(self, l, o, normalise: bool):
        inv = l[0].map(_inverse_sum).broadcast_to(self.mma.C) if normalise else None
        return _value_scaled(self.c, [(f * inv if normalise else f, self.warp_col0, jd * 32)
                                      for jd, f in enumerate(o)])

    def store_output(self, l, o):
        """O^T -> LDS (aliased onto the dead K/V tiles) -> coalesced row stores."""
        c, k, s = self.c, self.k, self.spec
        D = s.head_size
        acc_lds = self.lds_plan.allocate(k, "acc_stage", s.dtype)
        k.barrier()     # every warp is done with K/V (the loop's last barrier may be skipped)
        for frag, col0, d0 in self.output_fragments(l, o, True):
            store_fragment(acc_lds, frag.to(s.dtype), (d0, col0), transposed=True)
        k.barrier()
        out_buf = c.a.out.buffer(c.total_q * c.a.o_stride_token)
        per_row = D // STAGING_VECTOR
        total = s.block_m_rows * per_row
        for first in range(0, total, c.threads):
            i = c.tid + first if first else c.tid
            r = i >> (per_row.bit_length() - 1)
            col = (i & (per_row - 1)) * STAGING_VECTOR
            tok, head = c.row_token(r)
            index = (c.q_seq_start + tok) * c.a.o_stride_token + head * c.a.o_stride_head + col
            out_buf.store(index, acc_lds.load((r, col), width=STAGING_VECTOR), mask=c.row_valid(r))


def _store_partials(c: _Ctx, path, m, l, o, segment):
    """3D: this segment's (m, l, o) of every row it owns, fp32, unnormalised (ALGORITHM.md §5)."""
    a = c.a
    D = c.spec.head_size

    def entry(row):
        tok, head = c.row_token(row)
        return ((c.q_seq_start + tok) * a.num_q_heads + head) * a.num_segments + segment

    total_rows = c.total_q * a.num_q_heads * a.num_segments
    out_buf = a.segm_output.buffer(total_rows * D)
    max_buf = a.segm_max.buffer(total_rows)
    sum_buf = a.segm_expsum.buffer(total_rows)
    for frag, row0, d0 in path.output_fragments(l, o, False):
        origin = (row0, d0) if path.row_axis == ROW else (d0, row0)
        for v0, n, row, d in _row_runs(c.k, frag.layout, path.row_axis, origin):
            part = frag.value if n == frag.value.lanes else (frag.value[v0] if n == 1 else frag.value[v0:v0 + n])
            out_buf.store(entry(row) * D + d, part, mask=c.row_valid(row))
    # m and l: one store per row, from the lane holding it at head-dim/key coordinate 0
    C = path.mma.C
    groups = len(m)
    for g in range(groups):
        mf, lf = m[g].broadcast_to(C), l[g].broadcast_to(C)
        row0 = path.warp_row0 + g * 16 if path.row_axis == ROW else path.warp_col0
        origin = (row0, 0) if path.row_axis == ROW else (0, row0)
        a0, b0 = mf.coords(origin=origin)
        rows, other = (a0, b0) if path.row_axis == ROW else (b0, a0)
        vals = C.values_per_lane
        for v in range(vals):
            r = rows[v] if vals > 1 else rows
            first = (other[v] if vals > 1 else other) == 0
            ok = c.row_valid(r) & first
            e = entry(r)
            max_buf.store(e, mf.value[v] if vals > 1 else mf.value, mask=ok)
            sum_buf.store(e, lf.value[v] if vals > 1 else lf.value, mask=ok)


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


def flash_geometry(name: str, head_size: int) -> dict:
    """The spec fields of transposed-x8 geometry ``name`` at ``head_size`` (``attention_policy``)."""
    return policy.geometry(name).spec_fields(head_size)


FLASH_GEOMETRIES = policy.geometries_of(TRANSPOSED_X8)


def _variants() -> dict[str, UnifiedAttention2DSpec]:
    out = {}
    for di, dtype in enumerate(DTYPES):
        for hi, d in enumerate(HEAD_SIZES):
            for bi, bs in enumerate(BLOCK_SIZES):
                g = rotated_group(di, hi, bi)
                out[f"narrow_{dtype}_d{d}_b{bs}_g{g}"] = UnifiedAttention2DSpec(
                    dtype=dtype, head_size=d, block_size=bs, num_queries_per_kv=g, **narrow_geometry(dtype, d))
    for hi, d in enumerate(FLASH_HEAD_SIZES):
        for bi, bs in enumerate(BLOCK_SIZES):
            for gi, geometry in enumerate(FLASH_GEOMETRIES):
                g = rotated_group(hi, bi, gi)
                out[f"{geometry}_f16_d{d}_b{bs}_g{g}"] = UnifiedAttention2DSpec(
                    dtype="f16", head_size=d, block_size=bs, num_queries_per_kv=g, **flash_geometry(geometry, d))
    out.update(feature_variants(UnifiedAttention2DSpec, narrow_geometry, flash="wide4"))
    out.update(fp8_variants(UnifiedAttention2DSpec, flash_geometries=FLASH_GEOMETRIES))
    return out


def feature_variants(cls, narrow_geometry_of, *, flash: str | None,
                     features=tuple(FEATURES)) -> dict:
    """One variant per score feature (ALGORITHM.md §12) for every dtype x head size on the
    narrow path and, for fp16, the ``flash`` geometry (the dispatcher's default; not for QQ-bias,
    which the dispatcher always runs narrow), at block size
    16 with the group rotating as above; other block sizes, geometries and feature combinations
    are the same code with other constants, built on demand."""
    out = {}
    for fi, feature in enumerate(features):
        tag = FEATURES[feature]
        for di, dtype in enumerate(DTYPES):
            for hi, d in enumerate(FLASH_HEAD_SIZES):     # d64 / d128
                g = rotated_group(fi, di, hi)
                out[f"narrow_{dtype}_d{d}_b16_g{g}_{tag}"] = cls(
                    dtype=dtype, head_size=d, block_size=16, num_queries_per_kv=g,
                    **narrow_geometry_of(dtype, d), **{feature: True})
                # QQ-bias always runs narrow (attention_unified.GEOMETRY_RULES)
                if flash and dtype == "f16" and (flash != "L4" or d == 128) and feature != "qq_bias":
                    out[f"{flash}_f16_d{d}_b16_g{g}_{tag}"] = cls(
                        dtype="f16", head_size=d, block_size=16, num_queries_per_kv=g,
                        **flash_geometry(flash, d), **{feature: True})
    return out


FP8_BLOCK_SIZES = (16, 64)


def fp8_variants(cls, *, flash_geometries, narrow_geometry_of=None,
                 flash_head_sizes=FLASH_HEAD_SIZES) -> dict:
    """fp8 KV caches (kv_dtype fp8_e4m3fnuz): the narrow path for each Q dtype x d64/d128 x
    block 16/64 and the fp16 flash geometries named (every one the dispatcher may pick), groups
    rotating as in the 16-bit table."""
    narrow_geometry_of = narrow_geometry_of or narrow_geometry
    out = {}
    for di, dtype in enumerate(DTYPES):
        for hi, d in enumerate(FLASH_HEAD_SIZES):
            for bi, bs in enumerate(FP8_BLOCK_SIZES):
                g = rotated_group(di, hi, bi, 1)
                out[f"narrow_{dtype}_d{d}_b{bs}_g{g}_kvfp8"] = cls(
                    dtype=dtype, head_size=d, block_size=bs, num_queries_per_kv=g,
                    kv_dtype="fp8_e4m3fnuz", **narrow_geometry_of(dtype, d))
    for hi, d in enumerate(flash_head_sizes):
        for bi, bs in enumerate(FP8_BLOCK_SIZES):
            for gi, geometry in enumerate(flash_geometries):
                g = rotated_group(hi, bi, gi, 2)
                out[f"{geometry}_f16_d{d}_b{bs}_g{g}_kvfp8"] = cls(
                    dtype="f16", head_size=d, block_size=bs, num_queries_per_kv=g,
                    kv_dtype="fp8_e4m3fnuz", **flash_geometry(geometry, d))
    return out


VARIANTS: dict[str, UnifiedAttention2DSpec] = _variants()
GOLDEN_PERTURBATION = ("kv_cache_policy", {"normal": "stream", "stream": "normal"})     # see rocke.kernels.registry
