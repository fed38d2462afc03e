"""gfx942 unified attention epilogues: what a workgroup writes after its tile loop.

``store_output`` (2D): the normalised output ``o / l`` in the query dtype, an empty softmax as 0
(ALGORITHM.md §2.1): straight from the accumulators on the narrow path, staged through LDS
(aliased onto the dead K/V tiles) for coalesced rows on the transposed-x8 path.
``store_partials`` (3D): the segment's unnormalised fp32 ``(m, l, o)`` for ``reduce_segments``
(ALGORITHM.md §5).
"""
from __future__ import annotations

from rocke import dsl
from rocke.dsl.fragment import ROW, store_fragment
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942.attention_pipeline import (TransposedX8Path, WorkgroupContext,
                                                     column_valid, row_runs)
from rocke.kernels.gfx942.attention_policy import STAGING_VECTOR


def store_output(path, l, o):
    """The 2D epilogue of ``path`` (a pipeline strategy) for its final (l, o)."""
    if isinstance(path, TransposedX8Path):
        _store_transposed_x8_output(path, l, o)
    else:
        _store_narrow_output(path, l, o)


def _store_narrow_output(path, l, o):
    """O -> rows of ``out`` straight from the accumulators (queries on rows)."""
    c = path.c
    out_buf = c.a.out.buffer(c.total_q * c.a.o_stride_token)
    convert = _output_conversion(path)
    for frag, row0, d0 in path.output_fragments(l, o, True):
        _store_rows(c, out_buf, convert(frag), path.row_axis, row0, d0,
                    c.a.o_stride_token, c.a.o_stride_head)


def _output_conversion(path):
    """f32 output fragment -> ``out``'s dtype: q's, or fp8 quantized with 1 / output_scale
    (``attention_quant``, ALGORITHM.md §13.1)."""
    s = path.spec
    if s.out_dtype is None:
        return lambda frag: frag.to(s.dtype)
    inv = path.c.inv_output_scale
    if inv is None:
        inv = quant.inverse_output_scale(path.c.a.output_scale)
    return lambda frag: quant.quantised(frag, inv, s.out_dtype)


def _store_rows(c, buf, frag, row_axis, row0, d0, stride_token, stride_head):
    """Scatter a fragment whose ``row_axis`` indexes workgroup rows to ``[token, head, D]``
    memory; padding rows are dropped."""
    origin = (row0, d0) if row_axis == ROW else (d0, row0)
    for v0, n, row, d in row_runs(c.k, frag.layout, row_axis, origin):
        tok, head = c.row_token(row)
        index = (c.q_seq_start + tok) * stride_token + head * stride_head + d
        part = frag.value if n == frag.value.lanes else (frag.value[v0] if n == 1 else frag.value[v0:v0 + n])
        buf.store(index, part, mask=column_valid(c.spec, d, c.row_valid(row)))


def _store_transposed_x8_output(path, l, o):
    """O^T -> LDS (aliased onto the dead K/V tiles) -> coalesced row stores."""
    c, k, s = path.c, path.k, path.spec
    D = s.head_size
    acc_lds = path.lds_plan.allocate(k, "acc_stage", s.out_dtype or s.dtype)
    convert = _output_conversion(path)
    k.barrier()     # every warp is done with K/V (the loop's last barrier may be skipped)
    for frag, col0, d0 in path.output_fragments(l, o, True):
        store_fragment(acc_lds, convert(frag), (d0, col0), transposed=True)
    k.barrier()
    out_buf = c.a.out.buffer(c.total_q * c.a.o_stride_token)
    per_row = D // STAGING_VECTOR
    total = s.block_m_rows * per_row
    # the rows' validity as one compare with the block's row count, not row_valid: the Q stage
    # tested the same rows with row_valid, and LLVM kept those tests (64-bit masks when the
    # rows are wave-uniform) live through the tile loop for this store (spilled SGPRs, f16
    # d128 L4 softcap + ALiBi + window + sinks)
    valid_rows = dsl.minimum(c.q_len - c.q_start, s.block_q) * c.G
    for first in range(0, total, c.threads):
        i = c.tid + first if first else c.tid
        r = i >> (per_row.bit_length() - 1)
        col = (i & (per_row - 1)) * STAGING_VECTOR
        tok, head = c.row_token(r)
        index = (c.q_seq_start + tok) * c.a.o_stride_token + head * c.a.o_stride_head + col
        out_buf.store(index, acc_lds.load((r, col), width=STAGING_VECTOR),
                      mask=column_valid(s, col, r < valid_rows))


def store_partials(c: WorkgroupContext, path, m, l, o, segment):
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
        for v0, n, row, d in row_runs(c.k, frag.layout, path.row_axis, origin):
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


def store_neutral_partials(c: WorkgroupContext, segment):
    """3D: the partial of a segment that sees no key (m = -inf, l = 0, o = 0) for every row the
    workgroup owns, without loading Q or setting up the tile loop (segments past a short
    sequence's end, or past a q block's causal limit)."""
    import math
    from rocke.dsl import splat
    k, a = c.k, c.a
    D, rows = c.spec.head_size, c.spec.block_m_rows
    total_rows = c.total_q * a.num_q_heads * a.num_segments
    out_buf = a.segm_output.buffer(total_rows * D)
    max_buf = a.segm_max.buffer(total_rows)
    sum_buf = a.segm_expsum.buffer(total_rows)

    def entry(row):
        tok, head = c.row_token(row)
        return ((c.q_seq_start + tok) * a.num_q_heads + head) * a.num_segments + segment

    zero, width = k.const(0.0, "f32"), 4          # 16-byte fp32 stores
    per_row = D // width
    for first in range(0, rows * per_row, c.threads):
        i = c.tid + first if first else c.tid
        r = i >> (per_row.bit_length() - 1)
        col = (i & (per_row - 1)) * width
        out_buf.store(entry(r) * D + col, splat(zero, width),
                      mask=c.row_valid(r) & (r < rows))
    for first in range(0, rows, c.threads):
        r = c.tid + first if first else c.tid
        ok = c.row_valid(r) & (r < rows)
        max_buf.store(entry(r), k.const(-math.inf, "f32"), mask=ok)
        sum_buf.store(entry(r), zero, mask=ok)
