"""The gfx942 unified attention kernel, composed: the workgroup's q block and sequence (a binary
search over ``cu_seqlens_q``), its KV tile range (causal limit, sliding window, 3D segment), the
pipeline's tile loop and the epilogue. The 2D and 3D modules build through ``build_tiled``."""
from __future__ import annotations

from rocke import dsl
from rocke.dsl.magic import udiv_const
from rocke.kernels.gfx942.attention_epilogue import (store_neutral_partials, store_output,
                                                     store_partials)
from rocke.kernels.gfx942.attention_pipeline import (NarrowPath, TransposedX8Path, WorkgroupContext,
                                                     declare_args, newest_key, oldest_key,
                                                     sequence_is_causal)


def build_tiled(spec, *, split: bool) -> dsl.Kernel:
    """The 2D kernel (``split=False``) or the 3D split-KV kernel (``split=True``): one builder,
    the 3D one restricting the tile loop to its segment and writing fp32 partials."""
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size,
                   waves_per_eu=spec.waves_per_eu or None, target=spec.target)
    a = declare_args(k, spec, split)
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
        mm = getattr(spec, "mm_prefix_ranges", 0)
        # bidirectional ranges may reach keys after the block's queries: walk to the sequence's
        # end, those tiles masked (ALGORITHM.md §12.8)
        # (non-causal, ALGORITHM.md §12.11: the newest key a row sees is its sequence's last, or
        # window_left after it; tiles up to the first query's newest key run unmasked)
        # (per-sequence flags, §12.12: the sequence's flag picks the causal or the non-causal key)
        non_causal = getattr(spec, "non_causal", False) or getattr(spec, "per_seq_causal", 0)
        seq_causal = sequence_is_causal(spec, a, seq)
        if non_causal:
            kv_end = newest_key(spec, a, ctx + q_start + q_rows - 1, kv_len, seq_causal) + 1
        else:
            kv_end = kv_len if mm else dsl.minimum(kv_len, ctx + q_start + q_rows)
        n_tiles = udiv_const(kv_end + (T - 1), T)
        if non_causal:          # no key past the first query's newest
            n_full = dsl.minimum(udiv_const(newest_key(spec, a, ctx + q_start, kv_len,
                                                       seq_causal) + 1, T),
                                 n_tiles)
        else:
            n_full = dsl.minimum(udiv_const(ctx + q_start + 1, T), n_tiles)   # no key in the future
        if spec.sliding_window:
            # ALGORITHM.md §12.6: tiles wholly older than the window of the block's first query
            # are never visited; the left-edge tiles (older than the window of its last query)
            # and the diagonal tiles are masked, the tiles between run unmasked
            # (with mm ranges every tile may hold a range's key: none is skipped)
            # (clamped by the window, mm_clamp_window, the ranges reach no older key; chunked
            # attention's lower end is its first query's chunk, ALGORITHM.md §12.9)
            if (mm and not getattr(spec, "mm_clamp_window", False)) or \
                    getattr(spec, "rswa_prefix", False):     # R-SWA: the prefix's tiles too
                w_lo = k.const(0, "i32")
            elif mm:
                w_lo = udiv_const(dsl.maximum(ctx + q_start - a.window_left, 0), T)
            else:
                w_lo = udiv_const(dsl.maximum(oldest_key(spec, a, ctx + q_start), 0), T)
            w_full = udiv_const(dsl.maximum(oldest_key(spec, a, ctx + q_start + q_rows - 1), 0)
                                + (T - 1), T)
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
        wg = WorkgroupContext(k, spec, a, kv_head, seq, q_seq_start, q_len, q_start, kv_len, ctx, tid, threads)
        wg.seq_causal = seq_causal
        wg.first_tile = bounds[0]         # its K loads may overlap Q's (TileLoop.prefetch_first_k)
        if split:
            wg.segment = segment
        if split:
            # a segment with no tile to visit loads no Q and runs no loop: neutral partials only
            visits = k.if_else(bounds[0] < bounds[-1])
            with visits.then_():
                path = TransposedX8Path(wg) if spec.transposed_x8 else NarrowPath(wg)
                m, l, o = path.run(bounds)
                store_partials(wg, path, m, l, o, segment)
            with visits.else_():
                store_neutral_partials(wg, segment)
        else:
            path = TransposedX8Path(wg) if spec.transposed_x8 else NarrowPath(wg)
            m, l, o = path.run(bounds)
            store_output(path, l, o)
    return k
