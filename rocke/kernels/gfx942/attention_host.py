"""gfx942 unified attention, host side: argument checks and packing shared by the 2D and 3D
kernels, and the grid as a tile partitioner (one workgroup per q block x KV head [x segment])."""
from __future__ import annotations

import math

from rocke.kernels.common.attention_problem import (CAUSAL_FLAG_BYTES, cache_row_lengths,
                                                   codes_per_element)
from rocke.kernels.common.checks import (I32_LIMIT, check_buffer_bytes, check_extent,
                                         check_grid_extent, check_tensor)
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942.attention_policy import FEATURES


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
    check_tensor("q", q, dtype=quant.q_storage_dtype(spec), dims=("total_q", "num_q_heads", "head_size"),
                 contiguous=False)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, t, dtype=spec.cache_dtype, dims=("num_blocks", "block_size", "num_kv_heads", "head_size"),
                     one_buffer=False, paged_cache=True)    # NHD, or vLLM's HND viewed as NHD
        rows = cache_row_lengths(getattr(spec, "head_cols", 0) or spec.head_size,
                                 bool(getattr(spec, "kv_token_scales", False)),
                                 t.element_size(), codes_per_element(spec.kv_dtype))
        if tuple(t.shape[1:3]) != (spec.block_size, k_cache.shape[2]) or t.shape[3] not in rows:
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
    head_cols = getattr(spec, "head_cols", 0) or spec.head_size     # a padded head's tensors'
    if q.shape[2] != head_cols:
        raise ValueError(f"q: head_size {q.shape[2]} differs from the spec's {head_cols}")
    hk = k_cache.shape[2]
    split = getattr(spec, "group_split", 1)
    if q.shape[1] != hk * spec.num_queries_per_kv * split:
        raise ValueError(f"q: {q.shape[1]} query heads != num_kv_heads {hk} x num_queries_per_kv "
                         f"{spec.num_queries_per_kv}" + (f" x group_split {split}" if split != 1 else ""))
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
    mm = ("mm_prefix_range", "mm_stride_seq", "mm_num_ranges") \
        if getattr(spec, "mm_prefix_ranges", 0) else ()
    chunk = ("chunk_size", "chunk_lookback") if getattr(spec, "chunked", False) else ()
    rswa = ("rswa_prefix_lens",) if getattr(spec, "rswa_prefix", False) else ()
    flags = ("causal_flags",) if getattr(spec, "per_seq_causal", 0) else ()
    return tuple(n for f in spec.features for n in names[f]) + mm + chunk + rswa + flags


def feature_args(spec, num_q_heads: int, *, softcap: float = 0.0, alibi_slopes=None, qq_bias=None,
                 window_left: int = -1, sinks=None, mm_prefix_range=None, chunk=None,
                 rswa_prefix_lens=None, causal_flags=None) -> list:
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
    return (out + mm_prefix_args(spec, mm_prefix_range) + chunk_args(spec, chunk) +
            rswa_args(spec, rswa_prefix_lens) + causal_flag_args(spec, causal_flags))


def given_exactly_when(spec, on: bool, given: bool, name: str, what: str) -> None:
    """A feature's argument is passed exactly when the spec applies the feature: else a
    ValueError naming the argument, the kernel and which side is missing."""
    if given != on:
        state = "applies" if on else "does not apply"
        raise ValueError(f"{name}: the kernel {spec.kernel_name} {state} {what}, but the call "
                         f"{'passes' if given else 'omits'} it")


def rswa_args(spec, prefix_lens) -> list:
    """R-SWA's argument (after chunked attention's): the int32 [num_seqs] prefix lengths, given
    exactly when the spec is ``rswa_prefix``."""
    import torch
    on = getattr(spec, "rswa_prefix", False)
    given_exactly_when(spec, on, prefix_lens is not None, "rswa_prefix_lens", "R-SWA")
    if not on:
        return []
    if not isinstance(prefix_lens, torch.Tensor) or prefix_lens.dtype != torch.int32 or \
            prefix_lens.dim() != 1 or prefix_lens.stride(0) != 1:
        raise ValueError("rswa_prefix_lens: must be a contiguous 1-D int32 tensor [num_seqs]")
    return [prefix_lens]


def causal_flag_args(spec, flags) -> list:
    """The per-sequence causal flags (after R-SWA's): a contiguous [num_seqs] tensor whose
    element size is the spec's ``per_seq_causal``, given exactly when the spec reads them."""
    import torch
    width = getattr(spec, "per_seq_causal", 0)
    given_exactly_when(spec, bool(width), flags is not None, "causal", "per-sequence causal flags")
    if not width:
        return []
    names = [name for name, size in CAUSAL_FLAG_BYTES.items() if size == width]
    if not isinstance(flags, torch.Tensor) or str(flags.dtype).removeprefix("torch.") not in names \
            or flags.dim() != 1 or flags.stride(0) != 1:
        raise ValueError(f"causal: the kernel {spec.kernel_name} reads a contiguous 1-D "
                         f"[num_seqs] tensor of {' / '.join(names)} flags, got "
                         f"{getattr(flags, 'dtype', type(flags).__name__)}")
    # a bool or uint8 flag is a byte as int8 reads it (a view: nothing copied or synchronised)
    return [flags if width == 4 else flags.view(torch.int8)]


def chunk_args(spec, chunk) -> list:
    """Chunked attention's arguments (after the mm ranges'): ``chunk`` = (chunk_size,
    chunk_lookback), given exactly when the spec is ``chunked``."""
    on = getattr(spec, "chunked", False)
    given_exactly_when(spec, on, chunk is not None, "chunk_lookback", "chunked attention")
    if not on:
        return []
    size, lookback = chunk
    for name, v, low in (("chunk_size", size, 1), ("chunk_lookback", lookback, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v < I32_LIMIT:
            raise ValueError(f"{name}: must be an int in [{low}, 2**31), got {v!r}")
    return [size, lookback]


def mm_prefix_args(spec, t) -> list:
    """The ``mm_prefix_range`` arguments (after the score features): the int32 tensor, its
    sequence stride and its range count (at most the spec's capacity ``mm_prefix_ranges``)."""
    import torch
    capacity = getattr(spec, "mm_prefix_ranges", 0)
    given_exactly_when(spec, bool(capacity), t is not None, "mm_prefix_range", "it")
    if not capacity:
        return []
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 3 or \
            t.shape[2] != 2 or not 1 <= t.shape[1] <= capacity or t.stride(2) != 1 or \
            t.stride(1) != 2:
        raise ValueError(f"mm_prefix_range: must be an int32 tensor [num_seqs, 1..{capacity}, 2] "
                         f"with packed [start, end] pairs, got {getattr(t, 'dtype', type(t).__name__)} "
                         f"{list(getattr(t, 'shape', []))}")
    check_buffer_bytes("mm_prefix_range", t.stride(0) * t.shape[0] * 4, "the mm_prefix_range tensor")
    return [t, t.stride(0), t.shape[1]]


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


# appended (2D and 3D) when the spec has an fp8 cache; a spec without one keeps ARGS exactly
ARGS_FP8 = ("k_descale", "k_descale_stride_seq", "k_descale_stride_head",
            "v_descale", "v_descale_stride_seq", "v_descale_stride_head")
