"""Paged tile copy: a ``[tokens x D]`` tile whose rows live in fixed-size pages named by a block
table (vLLM's paged KV cache, ALGORITHM.md §6), copied cooperatively into LDS.

::

    cache = PagedView(k_ptr, page_size=16, page_stride=block_stride, token_stride=token_stride,
                      col_offset=kv_head * head_stride, num_pages=num_blocks)
    table = BlockTableRow(block_table_ptr, row_offset=seq * table_stride)
    copy_paged_tile(cache, table, k_lds, first_token=kv0, valid_tokens=kv_len,
                    thread_index=tid, threads=256)

Rules the copy relies on:

- Token ``t`` is row ``t % page_size`` of page ``table[t // page_size]`` (magic division: a
  shift for the power-of-two page sizes). Each wave moves a run of consecutive rows that lies in
  one page (``first_token`` is a multiple of that run), so the page number is wave-uniform: it is
  read with a scalar load and the page's buffer resource lives in SGPRs.
- Tokens at or past ``valid_tokens`` read as zero: their lanes are sent past the buffer's extent
  and the hardware's range check returns 0 (so stale or uninitialised cache rows never reach the
  math); their table entries are never read (the table index is clamped to the last used page).
- ``addr_64``: the page base ``page * page_stride`` is formed as a 64-bit pointer and only the
  offset inside the page goes in the 32-bit buffer offset, so caches past 2 GiB are addressed
  correctly (a buffer instruction's offset and its resource's ``num_records`` are 32-bit: the CDNA3
  ISA guide's buffer resource descriptor). Without it one buffer spans the whole cache with 32-bit
  offsets (the caller keeps the cache below 2 GiB).
- ``transpose``: the LDS tile is ``[D x tokens]`` (``lds[c, t] = row_t[c]``), e.g. V^T.
- ``lds_dma``: ``buffer_load_dword ... lds`` moves 64 dwords per instruction straight into LDS
  (no VGPR round trip); a wave then owns ``128 / D`` whole rows per instruction (f16/bf16), so
  with more than one row per instruction the LDS rows must be unpadded. The data is in LDS only
  after ``k.wait_vmcnt(0)`` (and a barrier for the other waves): the caller issues both.
- ``aux``: cache-policy bits of the loads (e.g. ``CACHE_STREAM``).
- dequantizing copy (ALGORITHM.md §11.1): when the cache holds fp8 (``fp8_e4m3fnuz``) and the
  LDS tile a 16-bit dtype, each element is decoded to f32 by the hardware conversion, multiplied
  by ``scale`` if one is given (an f32 Value, e.g. a per-head descale) and rounded to the LDS
  dtype, so the MFMAs that read the tile are unchanged. Without a scale the
  conversion is exact (every e4m3fnuz value is an f16 and a bf16 value). Out-of-range tokens read
  code 0, which decodes to 0. Not with ``lds_dma`` (the DMA writes bytes as they are).
- per-row scales (``row_scales``): an int8 or fp8 cache whose every row (token) has its own f32
  scale in a paged scale cache of the same page layout (vLLM's per-token-head KV quantization,
  ``[num_blocks, block_size, heads]``): each lane reads its row's scale from the same page and
  the row is decoded to f32, multiplied by it and rounded to the LDS dtype once. Tokens past
  ``valid_tokens`` read scale 0 and code 0.
- short rows (``row_elements``): a cache row holds fewer elements than the LDS row (a head
  size padded up to the kernel's): lanes past them load nothing and store 0, so the LDS row's
  tail is zero. Not with ``lds_dma``.
- packed int4 rows (``packed_int4``, with ``row_scales``): a ``u8`` cache holding two unsigned
  4-bit codes per byte, element ``2i`` in the low nibble of byte ``i`` (rows of ``D / 2``
  bytes), each row's f32 scale word carrying the row's 4-bit zero point ``z`` in its low four
  mantissa bits (vLLM's INT4_PER_TOKEN_HEAD): element = ``(code - z) * s``, ``s`` the word with
  those bits cleared. A lane loads ``vector / 2`` bytes for its ``vector`` elements.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import types as T
from ..arch.targets import get_target
from .errors import dsl_type_error, dsl_value_error
from .magic import udiv_const
from .math import minimum
from .memory import GlobalPtr, LdsTensor, OUT_OF_RANGE_BYTE
from .values import Value

# gfx942 cache-policy bits of a buffer load's aux operand: nt (non-temporal / streaming).
CACHE_NORMAL = 0
CACHE_STREAM = 2
CACHE_POLICIES = {"normal": CACHE_NORMAL, "stream": CACHE_STREAM}


@dataclass(frozen=True)
class PagedView:
    """One head's view of a paged cache ``[num_pages, page_size, ..., D]``: element strides
    between pages and between tokens of a page, the element offset of column 0 (the head), and
    the page count (bounds the 32-bit buffer's extent)."""

    base: GlobalPtr
    page_size: int
    page_stride: Value
    token_stride: Value
    col_offset: Value
    num_pages: Value
    addr_64: bool = False


@dataclass(frozen=True)
class BlockTableRow:
    """One sequence's row of an int32 block table: ``table[row_offset + i]`` is the page of the
    sequence's ``i``-th page-sized chunk of tokens. ``num_entries`` (optional): the whole
    table's extent, so a lying sequence length never reads past it (its index is clamped into
    the table; the page it reads is then checked like any other)."""

    table: GlobalPtr
    row_offset: Value
    num_entries: Value | None = None


def rows_per_wave(head_dim: int, vector: int, dtype_bytes: int = 2, *, lds_dma: bool = False) -> int:
    """Consecutive rows one wave moves per copy step."""
    if lds_dma:
        return max(1, 256 // (head_dim * dtype_bytes))
    return max(1, 64 * vector // head_dim)


def min_dma_loads_per_wave(tokens: int, head_dim: int, threads: int, dtype_bytes: int = 2) -> int:
    """LDS-DMA instructions every wave issues for one ``lds_dma`` tile copy (a wave may issue one
    more): ``k.wait_vmcnt`` of this count leaves that copy in flight and everything older done."""
    return tokens // (rows_per_wave(head_dim, 8, dtype_bytes, lds_dma=True) * (threads // 64))


def copy_paged_tile(cache: PagedView, table: BlockTableRow, lds: LdsTensor, *, first_token: Value,
                    valid_tokens: Value, thread_index: Value, threads: int, vector: int = 8,
                    transpose: bool = False, lds_dma: bool = False, aux: int = CACHE_NORMAL,
                    tokens: int | None = None, lds_row0=0, scale: Value | None = None,
                    row_scales: PagedView | None = None, defer_stores: bool = False,
                    tile_aligned: bool = False, loaded: list | None = None,
                    packed_int4: bool = False, row_elements: int | None = None):
    """Copy tokens ``[first_token, first_token + tokens)`` of ``cache`` (rows of ``D`` elements)
    into ``lds`` (``[tokens, D]``, or ``[D, tokens]`` with ``transpose``). See the module rules;
    ``first_token`` must be a multiple of ``rows_per_wave(...)`` (a tile start is).
    ``tokens`` / ``lds_row0``: copy into rows (columns with ``transpose``) ``[lds_row0,
    lds_row0 + tokens)`` of a larger tile, e.g. one half of a double buffer. ``scale``: the
    dequantizing copy of an fp8 cache (module rules). ``row_scales``: the f32 paged scale cache
    of a per-row quantized (int8 / fp8) cache (module rules); ``packed_int4``: that cache holds
    packed 4-bit codes with zero points (module rules). ``row_elements``: the elements of a
    cache row, fewer than the LDS row's (module rules). ``defer_stores``: the LDS stores of
    whole copy steps are left to the returned function (call it after issuing other loads, so
    both loads are in flight before either is waited on); otherwise it returns a no-op.
    ``tile_aligned``: the caller promises ``first_token`` is a multiple of ``tokens``; where
    ``tokens`` divides the page size the copy then lies in one page, looked up once.
    With ``defer_stores`` the returned function's ``values`` are the registers each copy step
    loaded (None where a partial step stored at once); ``loaded``: such values, stored into
    ``lds`` with no global load (a copy whose loads were issued earlier, e.g. carried through
    a loop; every step must be whole)."""
    if not isinstance(lds, LdsTensor) or len(lds.shape) != 2:
        raise dsl_type_error("copy_paged_tile needs a 2-D LdsTensor destination")
    if packed_int4 is not False and (packed_int4 is not True or row_scales is None):
        raise dsl_value_error("copy_paged_tile: packed_int4 (a bool) decodes with the rows' "
                              "scales and zero points: it needs row_scales")
    if row_scales is not None:
        _check_row_scales(cache, lds, scale, row_scales, lds_dma, packed_int4)
        dequant = True
    else:
        dequant = _check_dequant(cache, lds, scale, lds_dma)
    k = lds.kernel
    full, dim = (lds.shape[1], lds.shape[0]) if transpose else lds.shape
    if row_elements is not None and (not isinstance(row_elements, int) or
                                     not 0 < row_elements < dim or row_elements % vector or lds_dma):
        raise dsl_value_error(f"copy_paged_tile: row_elements ({row_elements!r}) must be a "
                              f"multiple of the vector ({vector}) below the LDS row's {dim} "
                              f"elements, without lds_dma")
    tokens = full if tokens is None else tokens
    elem = lds.dtype.nbytes
    if threads % 64:
        raise dsl_value_error(f"copy_paged_tile: threads ({threads}) must be whole waves")
    if lds_dma:
        if transpose:
            raise dsl_value_error("copy_paged_tile: lds_dma writes rows as they are; it cannot transpose")
        if (dim * elem) % 4 or 256 % (dim * elem):
            raise dsl_value_error(f"copy_paged_tile: lds_dma needs rows whose size divides 256 "
                                  f"bytes (one instruction's 64 dwords), got {dim * elem}")
        if dim * elem < 256 and lds.pad:
            raise dsl_value_error("copy_paged_tile: lds_dma with several rows per instruction needs "
                                  "unpadded LDS rows (pad=0)")
    elif dim % vector or vector & (vector - 1) or 64 * vector < dim:
        raise dsl_value_error(f"copy_paged_tile: vector {vector} must be a power of two dividing "
                              f"the row length {dim}, with one wave covering at least a row")
    run = rows_per_wave(dim, vector, elem, lds_dma=lds_dma)
    if cache.page_size % run:
        raise dsl_value_error(f"copy_paged_tile: a wave's {run} rows must lie in one page of "
                              f"{cache.page_size}")
    # LDS rows start on a multiple of gcd(row pitch, 16) bytes: vector stores claim no more
    pitch_bytes = lds.strides[0] * elem
    store_align = min(vector * elem, pitch_bytes & -pitch_bytes, 16)
    waves = threads // 64
    wave = k.wave_id()
    lane = k.lane_id()
    pages_used = udiv_const(valid_tokens + (cache.page_size - 1), cache.page_size)
    steps = -(-tokens // (run * waves))
    if loaded is not None:
        return _store_loaded(lds, loaded, lane, wave, waves, dim, vector, run, steps, tokens,
                             lds_row0, transpose, store_align)
    pending, values = [], []
    one_page = None
    if tile_aligned and cache.page_size % tokens == 0:
        # one table load and page offset for every step, not one per step: the steps' loads,
        # issued together, each held their page's scalars (SGPR spills, per-token-head scales)
        first_chunk = udiv_const(first_token, cache.page_size)
        one_page = (_page_of(cache, table, first_token, pages_used),
                    first_token - first_chunk * cache.page_size)
    lane_base = None
    if one_page is not None and not lds_dma and row_scales is None and row_elements is None:
        # one lane index for every step, each step adding its rows' scalar offset: a step's
        # address is then one add and its mask one compare with a scalar
        lane_base = _one_page_lane_base(cache, one_page, lds, lane, dim, vector, run, lds_row0,
                                        transpose)
    for step in range(steps):
        row0 = (wave + step * waves) * run                      # wave-uniform first row

        def copy_run(row0=row0):
            token0 = first_token + row0
            if lane_base is not None:
                rsrc, index0, r, c, paired = lane_base
                loaded = rsrc.load(index0 + row0 * cache.token_stride, width=vector,
                                   mask=r < valid_tokens - token0, aux=aux)
                if dequant:
                    loaded = _dequantize(loaded, scale, lds.dtype)
                return _run_store(lds, loaded, r, c, lds_row0, row0, lane, paired, transpose,
                                  store_align), loaded
            if one_page is not None:
                page, in_page0 = one_page[0], one_page[1] + row0
            else:
                page = _page_of(cache, table, token0, pages_used)
                in_page0 = token0 - udiv_const(token0, cache.page_size) * cache.page_size
            rsrc, page_offset = _page_buffer(cache, page)
            if lds_dma:
                per_row = dim * elem // 4                        # lanes per row
                r = lane // per_row if per_row & (per_row - 1) else lane >> (per_row.bit_length() - 1)
                c = (lane & (per_row - 1)) * (4 // elem)
                index = page_offset + (in_page0 + r) * cache.token_stride + cache.col_offset + c
                ok = token0 + r < valid_tokens
                rsrc.load_to_lds(lds.address(lds_row0 + row0, 0), _masked_elem(rsrc, index, ok), aux=aux)
                return None, None
            r, c, paired = _lane_row_col(lds, lane, dim, vector, run, lds_row0, transpose)

            def valid():        # the row's token exists (and the column, in a short row)
                ok = token0 + r < valid_tokens
                return ok if row_elements is None else ok & (c < row_elements)
            if packed_int4:         # vector elements from vector / 2 bytes
                index = page_offset + (in_page0 + r) * cache.token_stride + cache.col_offset + \
                    (c >> 1)
                codes = rsrc.load(index, width=vector // 2, mask=valid(), aux=aux)
                word = _row_scale(row_scales, page, in_page0 + r, token0 + r < valid_tokens, aux)
                loaded = _dequantize_int4(codes, word, lds.dtype)
                return _run_store(lds, loaded, r, c, lds_row0, row0, lane, paired, transpose,
                                  store_align), loaded
            index = page_offset + (in_page0 + r) * cache.token_stride + cache.col_offset + c
            loaded = rsrc.load(index, width=vector, mask=valid(), aux=aux)
            if row_scales is not None:
                # int8 decode by register pressure, measured on the attention kernels: the
                # sign-extending conversion spilled 7 SGPRs in the bf16 d256 3D kernel, the
                # biased-byte one 1 in the bf16 d64/d128 3D kernels
                loaded = _dequantize(loaded, _row_scale(row_scales, page, in_page0 + r,
                                                        token0 + r < valid_tokens, aux), lds.dtype,
                                     biased_bytes=dim >= 256)
            elif dequant:
                loaded = _dequantize(loaded, scale, lds.dtype)
            return _run_store(lds, loaded, r, c, lds_row0, row0, lane, paired, transpose,
                              store_align), loaded

        if (step + 1) * run * waves <= tokens:
            store, value = copy_run()
            if defer_stores and store is not None:
                pending.append(store)
                if values is not None:
                    values.append(value)
            elif store is not None:
                store()
        else:
            values = None
            with k.if_(wave < (tokens - step * run * waves) // run):
                store, _ = copy_run()
                if store is not None:
                    store()

    def finish():
        for store in pending:
            store()
    finish.values = values if defer_stores and not lds_dma else None
    return finish


def _store_loaded(lds: LdsTensor, loaded: list, lane: Value, wave: Value, waves: int, dim: int,
                  vector: int, run: int, steps: int, tokens: int, lds_row0, transpose: bool,
                  store_align: int):
    """``copy_paged_tile(..., loaded=...)``: the LDS stores of a deferred copy's ``values``."""
    if tokens % (run * waves) or len(loaded) != steps:
        raise dsl_value_error(f"copy_paged_tile: loaded= needs one value per whole copy step "
                              f"({steps} of {run * waves} rows for {tokens} tokens), got "
                              f"{len(loaded)}")
    r, c, paired = _lane_row_col(lds, lane, dim, vector, run, lds_row0, transpose)
    for step, value in enumerate(loaded):
        row0 = (wave + step * waves) * run
        _run_store(lds, value, r, c, lds_row0, row0, lane, paired, transpose, store_align)()

    def finish():
        pass
    finish.values = None
    return finish


def _lane_row_col(lds: LdsTensor, lane: Value, dim: int, vector: int, run: int, lds_row0,
                  transpose: bool):
    """(row within the wave's run, first column, paired) of a lane in a non-DMA copy step."""
    k = lds.kernel
    per_row = dim // vector
    shift = per_row.bit_length() - 1
    paired = transpose and _pairs_transposed(lds, vector, run, lds_row0)
    if paired:      # neighbouring lanes hold neighbouring rows (same bytes per load)
        return lane & (run - 1), (lane >> (run.bit_length() - 1)) * vector, True
    r = lane >> shift if shift else lane
    c = (lane & (per_row - 1)) * vector if per_row > 1 else k.const(0, T.i32)
    return r, c, False


def _one_page_lane_base(cache: PagedView, one_page, lds: LdsTensor, lane: Value, dim: int,
                        vector: int, run: int, lds_row0, transpose: bool):
    """(resource, lane index of the copy's first step, row, column, paired) of a one-page copy."""
    r, c, paired = _lane_row_col(lds, lane, dim, vector, run, lds_row0, transpose)
    rsrc, page_offset = _page_buffer(cache, one_page[0])
    index0 = page_offset + (one_page[1] + r) * cache.token_stride + cache.col_offset + c
    return rsrc, index0, r, c, paired


def _run_store(lds: LdsTensor, loaded: Value, r, c, lds_row0, row0, lane, paired: bool,
               transpose: bool, store_align: int):
    """The LDS store of a copy step's ``loaded`` (its run starts at ``row0``), to call later."""
    def store():
        if paired:
            _store_transposed_pairs(lds, loaded, c, lds_row0 + row0 + r, lane)
        elif transpose:
            for j, e in enumerate(list(loaded) if loaded.lanes > 1 else [loaded]):
                lds.store((c + j, lds_row0 + row0 + r), e)
        else:
            lds.store((lds_row0 + row0 + r, c), loaded, align=store_align)
    return store


def _pairs_transposed(lds: LdsTensor, vector: int, run: int, lds_row0) -> bool:
    """Whether a transposed copy stores 32-bit column pairs (``_store_transposed_pairs``):
    16-bit elements, an even number of rows per wave step starting on an even column, rows
    of whole dwords, and at least two dwords per lane."""
    return (lds.dtype.bits == 16 and vector % 4 == 0 and run >= 2 and lds.strides[0] % 2 == 0
            and isinstance(lds_row0, int) and lds_row0 % 2 == 0)


def _store_transposed_pairs(lds: LdsTensor, loaded: Value, c, row: Value, lane: Value):
    """Row ``row`` (``vector`` 16-bit elements from column ``c``) into the transposed tile as
    32-bit pairs: lanes ``l`` (even row) and ``l ^ 1`` (the next row) swap half their values with
    one DPP quad permute per dword, then the even lane writes the pairs of the first half of the
    elements and the odd lane those of the second half (``vector / 2`` ds_write_b32 per lane
    instead of ``vector`` ds_write_b16; AMD CDNA3 ISA guide, DPP quad_perm)."""
    from .lanes import exchange_pair_halves
    from .values import select
    words = loaded.bitcast(T.u32)
    half = words.lanes // 2
    odd = lane & 1
    even = odd == 0
    col0 = row - odd                                  # the pair's first (even) column
    first = c + odd * (2 * half)                      # this lane's first element
    for i in range(half):
        own, upper = words[i], words[half + i]
        low, high = exchange_pair_halves(even, select(even, own, upper), select(even, upper, own))
        lds.store((first + 2 * i, col0), low.bitcast(lds.dtype))
        lds.store((first + 2 * i + 1, col0), high.bitcast(lds.dtype))


def _dequantize(codes: Value, scale, dtype, biased_bytes: bool = False):
    """fp8 (or int8, always scaled) codes -> ``dtype`` (times ``scale``). Unscaled to bf16 the f32 value is exact in bf16,
    so its high half is the bf16 (no rounding code: fewer registers than the RNE sequence)."""
    if codes.dtype == T.i8 and biased_bytes:
        # int8 c as the unsigned byte c + 128 (one xor a dword): v_cvt_f32_ubyte{0..3} read
        # bytes in place, and (u - 128) * s = u * s - 128 s is one fma
        biased = (codes.bitcast(T.u8) ^ 0x80).to(T.f32)
        wide = biased * scale - scale * 128.0
        # bf16 without the NaN compares: each is a 64-bit SGPR mask (spilled the d256 3D kernels)
        return _to_bf16_without_compares(wide) if dtype == T.bf16 else wide.to(dtype)
    wide = codes.to(T.f32)
    if scale is not None and dtype == T.bf16:
        return _to_bf16_without_compares(wide * scale)
    if scale is not None:
        return (wide * scale).to(dtype)
    if dtype == T.bf16:
        return (wide.bitcast(T.u32) >> 16).to(T.u16).bitcast(T.bf16)
    return wide.to(dtype)


def _dequantize_int4(packed: Value, word: Value, dtype) -> Value:
    """Bytes of two 4-bit codes (low nibble first) -> ``2 x`` their count of ``dtype`` elements
    ``(code - z) * s`` (module rules: ``word`` is the row's scale with its zero point ``z`` in
    the low four bits), as one fma each: ``code * s - z * s``."""
    from .values import shuffle
    bits = word.bitcast(T.u32)
    s = (bits & 0xFFFFFFF0).bitcast(T.f32)
    zs = (bits & 0xF).to(T.f32) * s
    low, high = packed & 0xF, packed >> 4
    n = packed.lanes
    codes = shuffle(low, [i // 2 + (i % 2) * n for i in range(2 * n)], high)   # interleaved
    wide = codes.to(T.f32) * s - zs
    return _to_bf16_without_compares(wide) if dtype == T.bf16 else wide.to(dtype)


def _to_bf16_without_compares(x: Value) -> Value:
    """f32 -> bf16 rounded to nearest even, as ``Value.to`` does, but the NaN case without a
    compare: each compare is a 64-bit lane mask in SGPRs, and a copy step's 8-16 of them in
    flight spilled the bf16 per-token-head kernels. A NaN's rounded bits get the exponent and
    quiet bit or-ed in (0x7fc0), so it stays a NaN; every other value is the RNE result. A
    target with a native conversion (gfx950) uses it: one instruction per pair, no compare."""
    if get_target(x.kernel.target).native_bf16_conversion:
        return x.to(T.bf16)
    bits = x.bitcast(T.i32)
    rounded = (bits.bitcast(T.u32) + 0x7FFF + ((bits.bitcast(T.u32) >> 16) & 1)) >> 16
    nan = ((0x7F800000 - (bits & 0x7FFFFFFF)) >> 31).bitcast(T.u32)    # all ones for a NaN
    return (rounded | (nan & 0x7FC0)).to(T.u16).bitcast(T.bf16)


def _row_scale(row_scales: PagedView, page: Value, in_page: Value, ok: Value, aux: int) -> Value:
    """The f32 scale of row ``in_page`` of ``page`` (0 where ``ok`` is false)."""
    rsrc, page_offset = _page_buffer(row_scales, page)
    return rsrc.load(page_offset + in_page * row_scales.token_stride + row_scales.col_offset,
                     mask=ok, aux=aux)


def _check_row_scales(cache: PagedView, lds: LdsTensor, scale, row_scales: PagedView,
                      lds_dma: bool, packed_int4: bool = False):
    src, dst = cache.base.dtype, lds.dtype
    if packed_int4:
        if src != T.u8 or dst.bits != 16:
            raise dsl_type_error(f"copy_paged_tile: packed_int4 decodes a u8 cache (two codes a "
                                 f"byte) into a 16-bit LDS tile, got cache {src.name} and LDS "
                                 f"{dst.name}")
    elif src.kind != "fp8" and src != T.i8 or dst.bits != 16:
        raise dsl_type_error(f"copy_paged_tile: row_scales dequantize an int8 or fp8 cache into a "
                             f"16-bit LDS tile, got cache {src.name} and LDS {dst.name}")
    if row_scales.base.dtype != T.f32 or row_scales.page_size != cache.page_size:
        raise dsl_type_error("copy_paged_tile: row_scales must be an f32 paged view with the "
                             "cache's page size")
    if scale is not None:
        raise dsl_value_error("copy_paged_tile: pass either scale (one per copy) or row_scales "
                              "(one per row), not both")
    if lds_dma:
        raise dsl_value_error("copy_paged_tile: lds_dma writes the cache's bytes as they are; it "
                              "cannot apply row scales")


def _check_dequant(cache: PagedView, lds: LdsTensor, scale, lds_dma: bool) -> bool:
    """True for a dequantizing copy (fp8 cache -> 16-bit LDS with ``scale``); raises for any
    other dtype mismatch."""
    src, dst = cache.base.dtype, lds.dtype
    if src == dst:
        if scale is not None:
            raise dsl_value_error(f"copy_paged_tile: scale dequantizes an fp8 cache; the cache is "
                                  f"already {src.name}")
        return False
    if src.kind != "fp8" or dst.bits != 16:
        raise dsl_type_error(f"copy_paged_tile: cache {src.name} and LDS {dst.name} differ (only an "
                             "fp8 cache into a 16-bit LDS tile converts, with a scale)")
    if scale is not None and (not isinstance(scale, Value) or scale.dtype != T.f32 or scale.lanes != 1):
        raise dsl_type_error("copy_paged_tile: the dequantization scale must be a scalar f32 Value")
    if lds_dma:
        raise dsl_value_error("copy_paged_tile: lds_dma writes the cache's bytes as they are; it "
                              "cannot dequantize an fp8 cache")
    return True


def _masked_elem(rsrc, index, ok):
    from .values import select
    return select(ok, index, OUT_OF_RANGE_BYTE // rsrc.dtype.nbytes)


def _page_of(cache: PagedView, table: BlockTableRow, token0: Value, pages_used: Value) -> Value:
    """The (wave-uniform) page holding ``token0``; the table index is clamped to the last used
    page so a tile running past the sequence never reads entries beyond its row."""
    chunk = udiv_const(token0, cache.page_size)
    chunk = minimum(chunk, pages_used - 1)
    index = table.row_offset + chunk
    if table.num_entries is not None:
        # clamped into the table, unsigned (an empty sequence's index -1 too): one scalar min,
        # where a bounded buffer held a 4-SGPR resource across the tile loop and spilled
        last = (table.num_entries - 1).bitcast(T.u32)
        index = minimum(index.bitcast(T.u32), last).bitcast(T.i32)
    return table.table.load(index)


def _page_buffer(cache: PagedView, page: Value):
    """(buffer resource, element offset of the page inside it). A page id outside
    ``[0, num_pages)`` (a lying block table) is an empty page: its offset lies past the
    resource's extent (32-bit) or its resource has no records (64-bit), so its tokens read 0
    and nothing outside the cache is dereferenced."""
    from .values import select
    k = cache.page_stride.kernel
    if cache.addr_64:
        inside = page.bitcast(T.u32) < cache.num_pages.bitcast(T.u32)     # negative ids too
        page = select(inside, page, 0)
        base = cache.base.offset(page.to(T.i64) * cache.page_stride.to(T.i64))
        return base.buffer(select(inside, cache.page_stride, 0)), k.const(0, T.i32)
    # ids clamped (unsigned, so negative ones too) to num_pages: an outside id's offset is the
    # extent itself; one scalar min instead of a compare and select (no SGPR spill in the
    # double-buffered window kernels)
    extent = cache.num_pages * cache.page_stride
    clamped = minimum(page.bitcast(T.u32), cache.num_pages.bitcast(T.u32)).bitcast(T.i32)
    return cache.base.buffer(extent), clamped * cache.page_stride
