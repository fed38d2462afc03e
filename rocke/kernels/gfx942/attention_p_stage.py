"""The narrow path's P tile into LDS as 32-bit pairs (ALGORITHM.md §8).

A 16x16x16 accumulator holds, per lane, one key column of four consecutive query rows, so a
row-major P tile takes four 16-bit LDS writes per lane (``ds_write_b16``). Lanes ``l`` and
``l ^ 1`` hold neighbouring columns: after one DPP swap of half their values (quad_perm 1,0,3,2)
the even lane holds rows 0-1 and the odd lane rows 2-3 of both columns, and each writes two
(row, even column) pairs with ``ds_write_b32`` -- half the LDS issues for a few VALU ops.
"""
from __future__ import annotations

from rocke.dsl import select
from rocke.dsl.errors import dsl_value_error
from rocke.dsl.fragment import COL, ROW, Fragment
from rocke.dsl.lanes import exchange_pair_halves


def store_p_pairs(p_lds, frag: Fragment, origin):
    """``store_fragment(p_lds, frag, origin)`` for a 16-bit 16x16 accumulator-layout fragment
    (four consecutive rows of one column per lane, neighbouring columns on lanes l, l ^ 1)."""
    layout = frag.layout
    if (frag.dtype.bits != 16 or frag.value.lanes != 4 or tuple(layout.value_offsets(ROW)) != (0, 1, 2, 3)
            or any(layout.value_offsets(COL))):
        raise dsl_value_error(f"store_p_pairs needs 4 rows x 1 column of 16-bit values per lane, "
                              f"got {layout.name} {frag.value.type_name}")
    k = p_lds.kernel
    rows, cols = frag.coords(origin=origin)
    row0, col = rows[0], cols[0]
    words = frag.value.bitcast("u32")               # [rows 0,1] [rows 2,3] of this column
    w01, w23 = words[0], words[1]
    even = (k.lane_id() & 1) == 0
    # the even lane keeps its column's rows 0-1 and gives rows 2-3; the odd lane the reverse
    first, second = exchange_pair_halves(even, select(even, w01, w23), select(even, w23, w01))
    row = row0 + ((k.lane_id() & 1) << 1)         # even lane: rows 0-1, odd: rows 2-3
    pair_col = col & ~1
    p_lds.store((row, pair_col), first.bitcast(frag.dtype))
    p_lds.store((row + 1, pair_col), second.bitcast(frag.dtype))
