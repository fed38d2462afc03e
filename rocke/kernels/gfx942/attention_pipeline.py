"""gfx942 unified attention pipeline: the workgroup's context, Q staging, and the KV tile loop
with its two matmul regimes as strategies (ALGORITHM.md §2-3, §8, §12).

``TileLoop.run(bounds)`` walks the unmasked tiles, then the masked ones (diagonal, window edge),
double- or single-buffering K as the spec says; a strategy supplies the per-tile ``step``:
``NarrowPath`` (16x16x16, S = Q K^T, P staged through LDS) or ``TransposedX8Path`` (32x32x8 fp16,
S^T = K Q^T, P^T kept in registers as the B operand of O^T = V^T P^T). Its LDS comes from the
policy's plan (``attention_policy.lds_plan``).
"""
from __future__ import annotations

import math

from rocke import dsl
from rocke.dsl import rcp
from rocke.dsl.fragment import (AxisVector, COL, ROW, Fragment, lane_affine_value, load_fragment,
                                store_fragment)
from rocke.dsl.magic import udiv_const
from rocke.dsl.paged import (CACHE_POLICIES, BlockTableRow, PagedView, copy_paged_tile, min_dma_loads_per_wave,
                             rows_per_wave)
from rocke.dsl.softmax import (LOG2E, online_softmax_update, transposed_pv_operand,
                               transposed_v_operand)
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942.attention_p_stage import store_p_pairs
from rocke.kernels.gfx942.attention_policy import STAGING_VECTOR


class KernelArgs:
    pass


def declare_args(k, spec, split: bool) -> KernelArgs:
    a = KernelArgs()
    dt = spec.dtype
    # strided=True: the kernel takes these tensors' strides (q/out views of a wider tensor,
    # vLLM's cache views, padded block tables, expanded descales), so a launch accepts views
    a.q = k.arg_ptr("q", quant.q_storage_dtype(spec), readonly=True, strided=True)
    a.k_cache = k.arg_ptr("k_cache", spec.cache_dtype, readonly=True, strided=True)
    a.v_cache = k.arg_ptr("v_cache", spec.cache_dtype, readonly=True, strided=True)
    if split:
        a.segm_output = k.arg_ptr("segm_output", "f32")
        a.segm_max = k.arg_ptr("segm_max", "f32")
        a.segm_expsum = k.arg_ptr("segm_expsum", "f32")
    else:
        a.out = k.arg_ptr("out", spec.out_dtype or dt, strided=True)
    a.block_table = k.arg_ptr("block_table", "i32", readonly=True, strided=True)
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
            setattr(a, f"{which}_descale", k.arg_ptr(f"{which}_descale", "f32", readonly=True,
                                                     strided=True))
            for part in ("seq", "head"):
                name = f"{which}_descale_stride_{part}"
                setattr(a, name, k.arg_i32(name))
    # feature arguments last (feature_arg_names): the featureless kernel is unchanged
    if spec.softcap:
        a.softcap = k.arg_f32("softcap")
    if spec.alibi:
        a.alibi_slopes = k.arg_ptr("alibi_slopes", "f32", readonly=True)
    if spec.qq_bias:
        a.qq_bias = k.arg_ptr("qq_bias", "f32", readonly=True, strided=True)
        a.qq_bias_stride = k.arg_i32("qq_bias_stride")
        a.qq_bias_rows = k.arg_i32("qq_bias_rows")
    if spec.sliding_window:
        a.window_left = k.arg_i32("window_left")
    if spec.sinks:
        a.sinks = k.arg_ptr("sinks", "f32", readonly=True)
    if getattr(spec, "mm_prefix_ranges", 0):
        a.mm_prefix_range = k.arg_ptr("mm_prefix_range", "i32", readonly=True, strided=True)
        a.mm_stride_seq = k.arg_i32("mm_stride_seq")
        a.mm_num_ranges = k.arg_i32("mm_num_ranges")
    if getattr(spec, "chunked", False):
        a.chunk_size = k.arg_i32("chunk_size")
        a.chunk_lookback = k.arg_i32("chunk_lookback")
    if getattr(spec, "rswa_prefix", False):
        a.rswa_prefix_lens = k.arg_ptr("rswa_prefix_lens", "i32", readonly=True)
    if getattr(spec, "per_seq_causal", 0):
        a.causal_flags = k.arg_ptr("causal_flags", "i8" if spec.per_seq_causal == 1 else "i32",
                                   readonly=True)
    quant.declare_args(k, spec, a, split)      # after the features' (attention_quant)
    return a


def mm_row_bounds(c, layout, row_axis, row_origins) -> list:
    """Per row group (``row_origins``) and score value of ``layout``, the keys its query sees
    (ALGORITHM.md §12.8) as one inclusive interval ``(lo, hi)``: the bidirectional ranges
    holding a query all contain it, and so does its causal (windowed) interval, so the union is
    the interval from the least start to the greatest end. Computed once before the tile loop,
    range by range over every row group; unused ranges (start >= end, vLLM's rule) hold no
    query; range ends are clipped to the last key, so
    padding keys stay masked."""
    k, a = c.k, c.a
    query_pos = [_query_rows(c, layout, row_axis, r0)[1] for r0 in row_origins]
    bounds = [(Fragment.full(k, layout, dsl.i32, 2 ** 31 - 1).value,
               Fragment.full(k, layout, dsl.i32, -1).value) for _ in row_origins]
    # the ranges are staged through LDS and read back into VGPRs: as uniform scalar loads the
    # compiler hoists all 2 x capacity of them into SGPRs, which spilled. Thread t < 2 x capacity
    # copies word t; entries past the call's count repeat its last range (the union is unchanged)
    words = 2 * c.spec.mm_prefix_ranges
    if words:
        with k.if_(c.tid < words):
            t = c.tid
            last = 2 * a.mm_num_ranges - 2 + (t & 1)
            word = a.mm_prefix_range.load(c.seq * a.mm_stride_seq + dsl.minimum(t, last))
            c.mm_lds.store((t >> 1, t & 1), word)
        k.barrier()
    for i in range(c.spec.mm_prefix_ranges):
        pair = c.mm_lds.load((i, 0), width=2)
        start, end = pair[0], pair[1]
        for g, qpos in enumerate(query_pos):
            lo, hi = bounds[g]
            # integer masks, not compares: a compare per value is a 64-bit lane mask in SGPRs,
            # and 16 ranges of them spilled. outside = -1 unless start <= qpos <= end and
            # start < end (positions within +-2**30, checked on the host)
            outside = ((qpos - start) | (end - qpos) | (end - start - 1)) >> 31
            bounds[g] = (dsl.minimum(lo, (start & ~outside) | (outside & (2 ** 31 - 1))),
                         dsl.maximum(hi, end | outside))
    if words:
        k.barrier()  # every wave has read the ranges before the Q stage (aliased) overwrites them
    # merged with the causal mask and the window, whose interval [qpos - window, qpos] also
    # holds the query: one interval per query, one unsigned compare per score
    # (mm_clamp_window: a range's keys older than the window stay masked, so the window's lower
    # end is the interval's)
    out = []
    for (lo, hi), qpos in zip(bounds, query_pos):
        own_lo = oldest_key(c.spec, a, qpos)
        if getattr(c.spec, "mm_clamp_window", False):
            lo = dsl.maximum(lo, qpos - a.window_left)
        own_hi = newest_key(c.spec, a, qpos, c.kv_len, c.seq_causal)
        out.append((dsl.minimum(lo, own_lo), dsl.maximum(dsl.minimum(hi, c.kv_len - 1), own_hi)))
    return out


def newest_key(spec, a, qpos, kv_len, seq_causal=None):
    """The newest key the query at ``qpos`` sees: itself (causal), or non-causal its
    sequence's last key, or the last within ``window_left`` after it (ALGORITHM.md §12.11);
    with per-sequence flags (``per_seq_causal``) the one its sequence's flag
    ``seq_causal`` (an i1) picks (§12.12)."""
    per_seq = getattr(spec, "per_seq_causal", 0)
    if not (getattr(spec, "non_causal", False) or per_seq):
        return qpos
    last = kv_len - 1
    free = dsl.minimum(qpos + a.window_left, last) if spec.sliding_window else last
    return dsl.select(seq_causal, qpos, free) if per_seq else free


def sequence_is_causal(spec, a, seq):
    """The sequence's causal flag (an i1: nonzero reads as causal, as vLLM's kernel reads it),
    or None without per-sequence flags (``per_seq_causal``)."""
    if not getattr(spec, "per_seq_causal", 0):
        return None
    return a.causal_flags.load(seq) != 0


def _query_rows(c, layout, row_axis, row_origin):
    """(row token, absolute query position) per score value of ``layout`` for a row group."""
    rows, _ = _axes(Fragment.full(c.k, layout, dsl.i32, 0), row_axis, row_origin, 0)
    tok, _ = c.row_token(rows)
    return tok, tok + c.ctx


def oldest_key(spec, a, qpos):
    """The oldest key the query at absolute position ``qpos`` sees by the causal mask and the
    window: ``qpos - window_left``, or with chunked attention the start of the chunk
    ``chunk_lookback`` chunks before its own (ALGORITHM.md §12.9; may be negative), 0 without a
    window."""
    if getattr(spec, "chunked", False):
        size = a.chunk_size
        return (qpos // size - a.chunk_lookback) * size
    return qpos - a.window_left if spec.sliding_window else 0


def cache_head(spec, head_block):
    """The KV head a workgroup reads: its grid head index, or with a split GQA group
    (``group_split`` q-head blocks per KV head, ALGORITHM.md §7.1) the block's KV head."""
    if getattr(spec, "group_split", 1) == 1:
        return head_block
    return udiv_const(head_block, spec.group_split)


class WorkgroupContext:
    """Per-workgroup values the paths share."""

    def __init__(self, k, spec, a, kv_head, seq, q_seq_start, q_len, q_start, kv_len, ctx, tid, threads):
        self.k, self.spec, self.a = k, spec, a
        self.kv_head, self.seq, self.q_seq_start = kv_head, seq, q_seq_start
        self.q_len, self.q_start, self.kv_len, self.ctx = q_len, q_start, kv_len, ctx
        self.tid, self.threads = tid, threads
        self.segment = None             # the 3D kernel's segment index
        self.seq_causal = None          # per_seq_causal's flag (attention_kernel sets it)
        self.v_descale = self.inv_output_scale = None    # read_epilogue_scalars
        self.G = spec.num_queries_per_kv
        self.total_q = a.cu_seqlens_q.load(a.num_seqs)
        self.q_buf = a.q.buffer(self.total_q * a.q_stride_token)
        self.aux = CACHE_POLICIES[spec.kv_cache_policy]
        self.table = BlockTableRow(a.block_table, seq * a.block_table_stride,
                                   a.num_seqs * a.block_table_stride)   # lying lengths stay inside
        self.cache_head = cache_head(spec, kv_head)
        self.k_view = PagedView(a.k_cache, spec.block_size, a.k_stride_block, a.k_stride_token,
                                self.cache_head * a.k_stride_head, a.num_blocks, spec.kv_addr_64)
        self.v_view = PagedView(a.v_cache, spec.block_size, a.v_stride_block, a.v_stride_token,
                                self.cache_head * a.v_stride_head, a.num_blocks, spec.kv_addr_64)

    def descale(self, which: str):
        """This (sequence, kv head)'s k or v descale (fp8 caches), applied in fp32 outside the
        tile loop (ALGORITHM.md §11.1): k's into the score scale, v's into the output."""
        if not self.spec.fp8_kv:
            return None
        a = self.a
        index = (self.seq * getattr(a, f"{which}_descale_stride_seq")
                 + self.cache_head * getattr(a, f"{which}_descale_stride_head"))
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
        return copy_paged_tile(self.k_view, self.table, lds, first_token=first, valid_tokens=self.kv_len,
                        thread_index=self.tid, threads=self.threads, vector=STAGING_VECTOR,
                        lds_dma=s.global_load_lds_k, aux=self.aux,
                        row_scales=quant.scale_view(self, "k"), tile_aligned=one_page_copies(self),
                        packed_int4=quant.packed_int4(s), row_elements=tensor_cols(s), **kw)

    def copy_v(self, lds, first, defer_stores: bool = False, loaded=None):
        return copy_paged_tile(self.v_view, self.table, lds, first_token=first,
                               valid_tokens=self.kv_len, thread_index=self.tid,
                               threads=self.threads, vector=STAGING_VECTOR,
                               transpose=not self.spec.cfv_store, aux=self.aux,
                               row_scales=quant.scale_view(self, "v"), defer_stores=defer_stores,
                               packed_int4=quant.packed_int4(self.spec),
                               row_elements=tensor_cols(self.spec),
                               tile_aligned=one_page_copies(self), loaded=loaded)


def tensor_cols(spec) -> int | None:
    """The head columns q, the caches and out hold when fewer than the kernel's head size (a
    padded head, ``head_cols``), else None."""
    return getattr(spec, "head_cols", 0) or None


def column_valid(spec, col, ok):
    """``ok`` and, for a padded head, the head column ``col`` exists in the tensors."""
    cols = tensor_cols(spec)
    return ok if cols is None else ok & (col < cols)


def one_page_copies(c: WorkgroupContext) -> bool:
    """Whether the KV copies look their page up once per tile (``copy_paged_tile``'s
    ``tile_aligned``; a tile start is a multiple of the tile): in one-wave kernels (3D narrow,
    2D L4) with per-token-head scales whose tile takes 8 or more copy steps (T x D >= 4096),
    where the per-step lookups spilled up to 41 SGPRs (bf16 3D d256 QQ-bias; f16 L4 d128 6).
    Off with fewer steps (3D d64 and d128 at T = 16: one lookup spilled more, up to 35), in
    multi-wave 2D kernels (bf16 narrow d128 block 64 every feature: 0 -> 41, f16 wide4 0 -> 1)
    and without per-token scales (shipped IR unchanged). A 2D spec's ``one_page_tile`` asks for
    it (the dispatcher's plain one-round prefills, attention_dispatch.one_round_body)."""
    s = c.spec
    if getattr(s, "one_page_tile", False):      # 3D specs have no such field
        return True
    return bool(s.kv_token_scales) and c.threads == 64 and s.tile_size * s.head_size >= 4096


def load_q_rows_to_lds(c: WorkgroupContext, q_lds):
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
            q_lds.store((r, col), quant.q_decoded(s, c.q_buf.load(
                index, width=STAGING_VECTOR, mask=column_valid(s, col, c.row_valid(r)))))
        if first + c.threads <= total:
            one()
        else:
            with k.if_(c.tid < total - first):
                one()


def row_runs(k, layout, row_axis: int, origin):
    """For a fragment layout whose ``row_axis`` indexes workgroup rows (the other axis: head
    dim), the runs of values contiguous along the head dim: (first value, length, row Value,
    head-dim Value) per run."""
    dim_axis = 1 - row_axis
    out = []
    lane_row = lane_affine_value(k, layout.lane_part(row_axis))
    lane_dim = lane_affine_value(k, layout.lane_part(dim_axis))
    for v0, n in layout.value_runs(dim_axis):
        off_r = layout.value_offsets(row_axis)[v0]
        off_d = layout.value_offsets(dim_axis)[v0]
        out.append((v0, n, lane_row + (origin[row_axis] + off_r), lane_dim + (origin[dim_axis] + off_d)))
    return out


def load_q_direct(c: WorkgroupContext, layout, row_axis: int, origin) -> Fragment:
    """A Q operand fragment read straight from global memory (``q_direct``)."""
    parts = []
    for v0, n, row, d in row_runs(c.k, layout, row_axis, origin):
        tok, head = c.row_token(row)
        index = (c.q_seq_start + tok) * c.a.q_stride_token + head * c.a.q_stride_head + d
        parts.append(quant.q_decoded(c.spec, c.q_buf.load(
            index, width=n, mask=column_valid(c.spec, d, c.row_valid(row)))))
    return Fragment(dsl.concat(*parts) if len(parts) > 1 else parts[0], layout)


def score_scale(c: WorkgroupContext):
    """softmax_scale * log2(e), times k_descale for an fp8 cache (the exactly dequantized K tile
    is unscaled, so S = (Q K^T) * k_descale * softmax_scale; ALGORITHM.md §11.1), and times
    q_descale for an fp8 query (its tile decoded exactly too)."""
    if not c.spec.fp8_kv:
        return c.a.softmax_scale * LOG2E
    scale = c.a.softmax_scale * c.descale("k")
    q_scale = quant.q_descale(c)
    return (scale if q_scale is None else scale * q_scale) * LOG2E


def read_epilogue_scalars(c: WorkgroupContext):
    """The scalars the epilogue applies, read before the tile loop: v_descale (fp8 cache) and
    1 / output_scale (fp8 output). Read after the loop, their pointers and index terms (2-6
    SGPRs) stayed live through it, and spilled in the heaviest reachable corners; now one
    value each."""
    c.v_descale = c.descale("v")
    if c.spec.out_dtype is not None and hasattr(c.a, "output_scale"):
        c.inv_output_scale = quant.inverse_output_scale(c.a.output_scale)


def inverse_sum(l):
    """1 / l, and 0 for a row that saw no key (l = 0): an empty softmax outputs 0 (ALGORITHM.md
    §2.1), as reduce_segments writes for a row whose every segment is empty."""
    return dsl.select(l > 0.0, rcp(l), 0.0)


def value_scaled(c: WorkgroupContext, frags):
    """Output fragments times v_descale for an fp8 cache (O = P (V * v_descale) = (P V) * v_descale,
    also for the 3D partials, which are linear in V)."""
    if not c.spec.fp8_kv:
        return frags
    vs = c.v_descale if c.v_descale is not None else c.descale("v")
    return [(f * vs, r, d) for f, r, d in frags]


def late_v_store(spec) -> bool:
    """Whether the double-buffered tile loop waits for V_j (and K_{j+1}) after S_j and its
    softmax (``TileLoop._run_late_v``), not before S_j: not with LDS-DMA K (its waits are
    counted in ``run``), nor with a sliding window over pages shorter than the tile (a page
    lookup per copy step), nor with the plain two-compare window mask on the transposed-x8
    path: fp16 d128 wide4 spilled 8 SGPRs at block 16 GQA 1 and block 64 GQA 1."""
    if spec.sliding_window and spec.block_size < spec.tile_size:
        return False
    if spec.sliding_window and spec.transposed_x8 and not getattr(spec, "interval_mask", False):
        return False
    return not spec.global_load_lds_k


class TileLoop:
    row_axis: int      # axis of the score/output fragments that indexes workgroup rows

    def __init__(self, c: WorkgroupContext):
        self.c = c
        self.k = c.k
        self.spec = c.spec

    def _alloc_kv(self):
        s, k = self.spec, self.k
        self.lds_plan = policy.lds_plan(s)
        self.k_lds = self.lds_plan.allocate(k, "k_tile", s.dtype)
        self.v_lds = self.lds_plan.allocate(k, "v_tile" if s.cfv_store else "vt_tile", s.dtype)
        if self.lds_plan.has("mm_ranges"):      # 16-bit units in the plan, i32 pairs here
            r = self.lds_plan.region("mm_ranges")
            self.c.mm_lds = k.lds(r.name, (r.shape[0], 2), dsl.i32)

    def _alloc_q_stage(self):
        return self.lds_plan.allocate(self.k, "q_stage", self.spec.dtype) \
            if self.lds_plan.has("q_stage") else None

    def k_tile_view(self, j):
        """(LDS tile, first row) of K tile ``j`` (double buffering alternates halves)."""
        if self.spec.use_k_single_buffer:
            return self.k_lds, 0
        return self.k_lds, (j & 1) * self.spec.tile_size

    def _copy_k_into(self, j, **kw):
        s = self.spec
        T = s.tile_size
        if s.use_k_single_buffer:
            return self.c.copy_k(self.k_lds, j * T, **kw)
        return self.c.copy_k(self.k_lds, j * T, tokens=T, lds_row0=(j & 1) * T, **kw)

    def prefetch_first_k(self):
        """Issue the first K tile's global loads before Q is staged, so the two round trips
        overlap (a single prefill's last q block walks few tiles: each exposed round trip is a
        large share of its serial path); returns the tile's LDS stores, to call once Q's stage
        (aliased on the K tile) is free. None where run() copies it itself: single-buffered K,
        LDS-DMA (it would write the aliased stage), or a copy with a partial step (stored at
        once). A workgroup with no tile (lo >= hi) loads its masked or unused rows harmlessly."""
        s, c = self.spec, self.c
        lo = getattr(c, "first_tile", None)
        steps = rows_per_wave(s.head_size, STAGING_VECTOR) * (c.threads // 64)
        if lo is None or s.use_k_single_buffer or s.global_load_lds_k or s.tile_size % steps:
            return None
        self.k_prefetched = True
        store_k = self._copy_k_into(lo, defer_stores=True)
        if getattr(s, "early_v", False):
            # the first V tile's loads join them (TileLoop._run_early_v carries the registers)
            self.v_loads = c.copy_v(self.v_lds, lo * s.tile_size, defer_stores=True).values
        return store_k

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
        if double and not getattr(self, "k_prefetched", False):
            with k.if_(lo < hi):
                self._copy_k_into(lo)            # the first K tile; each step prefetches the next
        if double and late_v_store(s) and getattr(s, "early_v", False):
            return self._run_early_v(phases, carry, lo)
        if double and late_v_store(s):
            return self._run_late_v(phases, carry)
        for start, stop, masked in phases:
            with k.for_range(start, stop, carry=carry) as loop:
                j = loop.index
                kv0 = j * s.tile_size
                if double:
                    # current V first: PV waits only on V while next K streams; both loads
                    # issue before any LDS store (one round trip; the scheduler may not hoist
                    # V's pair swaps between them)
                    store_v = c.copy_v(self.v_lds, kv0, defer_stores=True)
                    store_k = self._copy_k_into(j + 1, defer_stores=True)
                    k.sched_barrier(dsl.SchedMask.SALU)      # scalar address math may still move
                    store_v()
                    store_k()
                elif getattr(s, "mm_prefix_ranges", 0):
                    # the range-masked single-buffer kernels hold the ranges' intervals in SGPRs:
                    # both tiles in flight at once spilled (11 SGPRs, L4 f16 d128 every feature)
                    self._copy_k_into(j)
                    c.copy_v(self.v_lds, kv0)
                else:
                    store_k = self._copy_k_into(j, defer_stores=True)
                    store_v = c.copy_v(self.v_lds, kv0, defer_stores=True)
                    k.sched_barrier(dsl.SchedMask.SALU)     # both loads in flight before either is waited on
                    store_k()
                    store_v()
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

    def _run_late_v(self, phases, carry):
        """The double-buffered tile loop with the tile's round trip behind S = Q K^T: step j
        issues V_j and K_{j+1}, computes S_j and its softmax from K_j (already in LDS), and only
        then waits and stores them (``step``'s ``before_pv``), one barrier before P V_j. The V
        tile is free then (P V_{j-1} ended with the step's barrier), and so is K's other half
        (S_{j-1} read it)."""
        k, s, c = self.k, self.spec, self.c
        k.barrier()                              # the first K tile's stores
        for start, stop, masked in phases:
            with k.for_range(start, stop, carry=carry) as loop:
                j = loop.index
                kv0 = j * s.tile_size
                store_v = c.copy_v(self.v_lds, kv0, defer_stores=True)
                store_k = self._copy_k_into(j + 1, defer_stores=True)
                k.sched_barrier(dsl.SchedMask.SALU)

                def before_pv(store_v=store_v, store_k=store_k):
                    # nothing crosses: the stores (and their waits) hoisted into S's MFMAs
                    k.sched_barrier(dsl.SchedMask.NONE)
                    store_v()
                    store_k()
                    k.barrier()
                new = self.step(loop.carry, j, kv0, masked, before_pv)
                k.barrier()                      # the next step overwrites V
                loop.yield_(*new)
            carry = loop.results
        return self.split_carry(carry)

    def _run_early_v(self, phases, carry, lo):
        """``_run_late_v`` with each round trip behind a whole step (spec ``early_v``): step j
        issues K_{j+1}, computes S_j and its softmax, stores V_j from the registers step j-1
        loaded, issues V_{j+1}'s loads before P V_j, and stores K_{j+1} after P V_j. V_{j+1} is
        then waited a step after its issue, K_{j+1} behind S_j, its softmax and P V_j (the late
        loop left ~540 cycles a step exposed on d256, ALGORITHM.md §10.2). The V registers go
        round the loop (one 16-byte value a copy step per lane)."""
        k, s, c = self.k, self.spec, self.c
        T = s.tile_size
        v_loads = getattr(self, "v_loads", None)
        if v_loads is None:     # the first K tile was not prefetched with Q: V_lo issues here
            v_loads = c.copy_v(self.v_lds, lo * T, defer_stores=True).values
        n = len(v_loads)
        k.barrier()                              # the first K tile's stores
        for start, stop, masked in phases:
            with k.for_range(start, stop, carry=[*carry, *v_loads]) as loop:
                state = list(loop.carry)
                v_now = state[len(state) - n:]
                j = loop.index
                kv0 = j * T
                store_k = self._copy_k_into(j + 1, defer_stores=True)
                k.sched_barrier(dsl.SchedMask.SALU)
                v_next = []

                def before_pv(v_now=v_now, kv0=kv0, v_next=v_next):
                    k.sched_barrier(dsl.SchedMask.NONE)
                    c.copy_v(self.v_lds, kv0, loaded=v_now)
                    k.barrier()
                    v_next += c.copy_v(self.v_lds, kv0 + T, defer_stores=True).values
                    k.sched_barrier(dsl.SchedMask.NONE)   # V_{j+1} issues before P V_j
                new = self.step(state[:len(state) - n], j, kv0, masked, before_pv)
                k.sched_barrier(dsl.SchedMask.NONE)       # K_{j+1} lands behind P V_j
                store_k()
                k.barrier()                      # the next step overwrites V and reads K_{j+1}
                loop.yield_(*new, *v_next)
            out = list(loop.results)
            carry, v_loads = out[:len(out) - n], out[len(out) - n:]
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
            offset = quant.alibi_sqrt_offset(tok, c.ctx, keys) if s.alibi_sqrt else rel.to(dsl.f32)
            scaled = scaled + self.alibi_rows[group] * offset
        if s.qq_bias:
            scaled = scaled + _qq_bias_values(c, tok, rel, score.layout.values_per_lane) * LOG2E
        if not masked:
            return scaled
        if getattr(s, "mm_prefix_ranges", 0) or getattr(s, "interval_mask", False):
            # vLLM's (causal AND window) OR in-range, as one interval per query row
            lo, hi = self.mm_rows[group]         # that union, one interval per query
            visible = (keys - lo).bitcast(dsl.u32) <= (hi - lo).bitcast(dsl.u32)
            if getattr(s, "rswa_prefix", False):     # or in the prefix (ALGORITHM.md §12.10)
                visible = visible | (keys < self.prefix_rows[group])
            return scaled.where(visible, -math.inf)
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
        if getattr(s, "mm_prefix_ranges", 0) or getattr(s, "interval_mask", False):
            self.mm_rows = mm_row_bounds(c, C, self.row_axis, row_origins)
        if getattr(s, "rswa_prefix", False):
            # R-SWA: keys before min(prefix, query + 1) are visible too (one signed compare)
            prefix = c.a.rswa_prefix_lens.load(c.seq)
            self.prefix_rows = [dsl.minimum(qpos + 1, prefix) for _, qpos in
                                (_query_rows(c, C, self.row_axis, r0) for r0 in row_origins)]

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
    """``qq_bias[tok, rel]`` per score value, 0 outside the query section (rel < 0 or past the
    sequence's keys; ALGORITHM.md §12.4; vLLM's row = query index in the sequence)."""
    a = c.a
    buf = a.qq_bias.buffer(a.qq_bias_rows * a.qq_bias_stride)
    # one unsigned compare per value; no test of the row (tok < q_len): that loop-invariant
    # compare was hoisted as a 64-bit lane mask per value (16 SGPRs in the narrow 2D kernels,
    # which spilled), and a padding row (tok >= q_len) is never stored (row_valid)
    ok = rel.bitcast(dsl.u32) < c.q_len.bitcast(dsl.u32)
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


class NarrowPath(TileLoop):
    """16x16x16, S = Q K^T (queries on rows), P staged through LDS (ALGORITHM.md §8)."""

    row_axis = ROW

    def __init__(self, c):
        super().__init__(c)
        s, k = self.spec, self.k
        # gfx950 specs may take the wide-K 16x16x32 atom (rocke/kernels/gfx950/attention.py)
        self.mma = k.mfma(getattr(s, "narrow_atom", "16x16x16"), s.dtype)
        kd = self.kd = self.mma.atom.k      # head-dim / key elements one MFMA reduces
        self.mq = s.block_m_per_warp // 16
        D, T = s.head_size, s.tile_size
        self._alloc_kv()
        self.p_lds = self.lds_plan.allocate(k, "p_tile", s.dtype)
        q_lds = self._alloc_q_stage()
        self.warp_row0 = k.wave_id() * s.block_m_per_warp
        self.qk_scale = score_scale(c)
        read_epilogue_scalars(c)
        if s.features or getattr(s, "mm_prefix_ranges", 0) or getattr(s, "interval_mask", False):
            self.prepare_features([self.warp_row0 + i * 16 for i in range(self.mq)])
        self.q_ops = []
        store_k = self.prefetch_first_k()
        if q_lds is not None:
            load_q_rows_to_lds(c, q_lds)
            k.barrier()
        for i in range(self.mq):
            row = self.warp_row0 + i * 16
            if q_lds is None:
                ops = [load_q_direct(c, self.mma.A, ROW, (row, d0)) for d0 in range(0, D, kd)]
            else:
                ops = [load_fragment(q_lds, self.mma.A, (row, d0)) for d0 in range(0, D, kd)]
            self.q_ops.append(ops)
        if q_lds is not None:
            k.barrier()                           # Q's LDS is reused by the K/V tiles
        if store_k is not None:
            store_k()

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

    def step(self, carry, j, kv0, masked, before_pv=None):
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
                for st, d0 in enumerate(range(0, D, self.kd)):
                    kt = load_fragment(k_lds, mma.B, (d0, k_row0 + n * 16), transposed=True)
                    acc = mma(self.q_ops[i][st], kt, acc)
                scores.append(self.masked_scores(acc, kv0, kv0 + n * 16, row, masked, i))
            # keys on lanes 0..15 of a row: DPP row ops instead of ds_swizzle (ALGORITHM.md §8)
            m[i], l[i], probs, alpha = online_softmax_update(m[i], l[i], scores, axis=COL, via="dpp")
            for n in range(nk):
                store_p_pairs(self.p_lds, probs[n].to(s.dtype), (row, n * 16))
            if i == 0 and before_pv is not None:
                before_pv()                      # V_j lands (TileLoop._run_late_v)
            alpha_o = alpha.broadcast_to(mma.C)
            p_ops = [load_fragment(self.p_lds, mma.A, (row, n0)) for n0 in range(0, T, self.kd)]
            for jd in range(nd):
                acc = o[i * nd + jd] * alpha_o
                for n, n0 in enumerate(range(0, T, self.kd)):
                    p_op = p_ops[n]
                    v_op = load_fragment(self.v_lds, mma.B, (n0, jd * 16), transposed=not s.cfv_store)
                    acc = mma(p_op, v_op, acc)
                o[i * nd + jd] = acc
        return [*m, *l, *o]

    def output_fragments(self, l, o, normalise: bool):
        """(fragment, row origin, head-dim origin) of the warp's output accumulators."""
        nd = self.spec.head_size // 16
        out = []
        for i in range(self.mq):
            inv = l[i].map(inverse_sum).broadcast_to(self.mma.C) if normalise else None
            for jd in range(nd):
                f = o[i * nd + jd]
                out.append((f * inv if normalise else f, self.warp_row0 + i * 16, jd * 16))
        return value_scaled(self.c, out)

class TransposedX8Path(TileLoop):
    """Transposed-x8: S^T = K Q^T on 32x32x8 (f16; gfx950: 32x32x16 f16/bf16), P^T
    register-resident (ALGORITHM.md §8)."""

    row_axis = COL

    def __init__(self, c):
        super().__init__(c)
        s, k = self.spec, self.k
        # gfx950 specs may take the wide-K 32x32x16 atom (rocke/kernels/gfx950/attention.py)
        self.mma = k.mfma(getattr(s, "x8t_atom", "32x32x8"), s.dtype)
        kd = self.kd = self.mma.atom.k      # head-dim / key elements one MFMA reduces
        D = s.head_size
        self._alloc_kv()
        q_lds = self._alloc_q_stage()
        self.warp_col0 = k.wave_id() * 32
        self.qk_scale = score_scale(c)
        read_epilogue_scalars(c)
        if s.features or getattr(s, "mm_prefix_ranges", 0) or getattr(s, "interval_mask", False):
            self.prepare_features([self.warp_col0])
        store_k = self.prefetch_first_k()
        if q_lds is not None:
            load_q_rows_to_lds(c, q_lds)
            k.barrier()
            self.q_ops = [load_fragment(q_lds, self.mma.B, (d0, self.warp_col0), transposed=True)
                          for d0 in range(0, D, kd)]
            k.barrier()
        else:
            self.q_ops = [load_q_direct(c, self.mma.B, COL, (d0, self.warp_col0)) for d0 in range(0, D, kd)]
        if store_k is not None:
            store_k()

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

    def step(self, carry, j, kv0, masked, before_pv=None):
        s, mma = self.spec, self.mma
        D, T = s.head_size, s.tile_size
        nk = T // 32
        m, l, o = self.split_carry(carry)
        k_lds, k_row0 = self.k_tile_view(j)
        scores = []
        for i in range(nk):
            acc = mma.zeros()
            for st, d0 in enumerate(range(0, D, self.kd)):
                k_op = load_fragment(k_lds, mma.A, (k_row0 + i * 32, d0))
                acc = mma(k_op, self.q_ops[st], acc)
            scores.append(self.masked_scores(acc, kv0, kv0 + i * 32, self.warp_col0, masked))
        m0, l0, probs, alpha = online_softmax_update(m[0], l[0], scores, axis=ROW)
        # bf16 (no native conversion on gfx942) without the NaN select: a NaN in P already
        # made the row's sum l NaN (it sums the unrounded P), and with it the row's output
        probs = [p.to(s.dtype, nan_check=False) for p in probs]
        if before_pv is not None:
            before_pv()                          # V_j lands (TileLoop._run_late_v)
        alpha_o = alpha.broadcast_to(mma.C)
        o = [x * alpha_o for x in o]
        for i in range(nk):
            for sub in range(0, 32, self.kd):
                p_op = transposed_pv_operand(mma, probs[i], sub)
                for jd in range(D // 32):
                    v_op = transposed_v_operand(mma, self.v_lds, jd * 32, i * 32 + sub,
                                                transposed=s.cfv_store)
                    o[jd] = mma(v_op, p_op, o[jd])
        return [m0, l0, *o]

    def output_fragments(self, l, o, normalise: bool):
        inv = l[0].map(inverse_sum).broadcast_to(self.mma.C) if normalise else None
        return value_scaled(self.c, [(f * inv if normalise else f, self.warp_col0, jd * 32)
                                      for jd, f in enumerate(o)])
