"""LDS views: per-wave slabs at runtime offsets and static sub-tiles work with tile copies,
fragment loads and (bounded) fragment stores in the emulator; a fragment that does not fit its
tile or view is a build-time error at the author's line."""

import sys

import pytest
import torch

from rocke import dsl
from rocke.dsl.fragment import copy_tile_to_lds, load_fragment, store_fragment, store_fragment_global

from .emu_helper import run


def _here() -> str:
    frame = sys._getframe(1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 2}"


def test_per_wave_views_copy_load_and_bounded_store():
    waves, rows, cols = 2, 32, 16
    k = dsl.Kernel("lds_views", workgroup_size=64 * waves)
    x, y = k.arg_ptr("x", dsl.f16), k.arg_ptr("y", dsl.f16)
    mma = k.mfma("16x16x16", dsl.f16)
    stage = k.lds("stage", (waves, rows, cols), dsl.f16, pad=8)
    out_t = k.lds("out_t", (waves, 16, 16), dsl.f16)
    wave, lane = k.wave_id(), k.lane_id()
    slab = stage[wave]                                     # runtime offset, 2-D view
    copy_tile_to_lds(x.buffer(waves * rows * cols), slab, (wave * rows, 0), cols,
                     thread_index=lane, threads=64, vector=8)
    k.barrier()
    lower = slab.view((16, 0), (16, 16))                   # rows 16..31 of this wave's tile
    frag = load_fragment(lower, mma.A)
    mine = out_t[wave]
    store_fragment(mine, dsl.fragment.Fragment.full(k, mma.A, dsl.f16, 0.0))
    store_fragment(mine, frag, bounds=(10, 12))            # rows >= 10 / cols >= 12 stay 0
    back = load_fragment(mine, mma.A)
    store_fragment_global(y.buffer(waves * 16 * 16), back, (wave * 16, 0), 16)

    gen = torch.Generator().manual_seed(3)
    X = torch.randn(waves, rows, cols, generator=gen).half()
    Y = torch.full((waves, 16, 16), 9.0).half()
    run(k, (1,), [X, Y])
    want = torch.zeros(waves, 16, 16).half()
    want[:, :10, :12] = X[:, 16:26, :12]
    assert torch.equal(Y, want)


def test_fragment_wider_than_tile_is_build_error_at_user_line():
    k = dsl.Kernel("lds_fit", workgroup_size=64)
    mma = k.mfma("16x16x16", dsl.f16)
    narrow = k.lds("narrow", (16, 8), dsl.f16, pad=8)      # the pad would have hidden the overrun
    where = _here()
    with pytest.raises(ValueError, match=r"16 x 16 does not fit LDS tile .*narrow.* dim 1") as e:
        load_fragment(narrow, mma.A)
    assert str(e.value).startswith(where)
    tile = k.lds("tile", (32, 16), dsl.f16)
    with pytest.raises(ValueError, match="does not fit"):
        store_fragment(tile.view((8, 0), (16, 16)), mma.zeros().to(dsl.f16), origin=(4, 0))
    with pytest.raises(ValueError, match=r"dim 0 \[24, 40\) does not fit its extent 32"):
        tile.view((24, 0), (16, 16))
    with pytest.raises(ValueError, match="runtime origin; give its extent"):
        tile.view((k.wave_id(), 0))
    with pytest.raises(ValueError, match="static ints"):
        tile[k.wave_id():]
    # a runtime origin is checked by extent: a 16-row fragment in a 16-row view is fine
    load_fragment(tile.view((k.wave_id() * 0, 0), (16, 16)), mma.A)


@pytest.mark.parametrize("rows, cols", [(32, 16), (19, 5), (0, 16)])
def test_runtime_valid_extents_zero_copies_and_mask_stores(rows, cols):
    k = dsl.Kernel("lds_valid", workgroup_size=64)
    x, y, z = k.arg_ptr("x", dsl.f16), k.arg_ptr("y", dsl.f16), k.arg_ptr("z", dsl.f16)
    n_rows, n_cols = k.arg_i32("rows"), k.arg_i32("cols")
    mma = k.mfma("16x16x16", dsl.f16)
    tile = k.lds("tile", (32, 16), dsl.f16, pad=8)
    ragged = tile.view((0, 0), (32, 16), valid=(n_rows, n_cols))
    copy_tile_to_lds(x.buffer(32 * 16), ragged, (0, 0), 16, thread_index=k.lane_id(), threads=64, vector=8)
    k.barrier()
    halves = [load_fragment(tile, mma.A, (16 * h, 0)) for h in range(2)]
    for h, f in enumerate(halves):
        store_fragment_global(y.buffer(32 * 16), f, (16 * h, 0), 16)
    k.barrier()
    for h in range(2):                                     # a sub-view inherits the extents
        store_fragment(tile, dsl.fragment.Fragment.full(k, mma.A, dsl.f16, 0.0), (16 * h, 0))
        store_fragment(ragged[16 * h:16 * h + 16, :], dsl.fragment.Fragment.full(k, mma.A, dsl.f16, 1.0))
    k.barrier()
    for h in range(2):
        store_fragment_global(z.buffer(32 * 16), load_fragment(tile, mma.A, (16 * h, 0)), (16 * h, 0), 16)

    X = torch.randn(32, 16, generator=torch.Generator().manual_seed(rows)).half()
    Y, Z = torch.full((32, 16), 7.0).half(), torch.full((32, 16), 7.0).half()
    run(k, (1,), [X, Y, Z, rows, cols])
    inside = torch.zeros(32, 16, dtype=torch.bool)
    inside[:rows, :cols] = True
    assert torch.equal(Y, torch.where(inside, X, torch.zeros_like(X)))
    assert torch.equal(Z, inside.half())
