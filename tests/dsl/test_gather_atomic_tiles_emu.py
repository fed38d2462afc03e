"""Row gathers into LDS (``gather_rows_to_lds``) and atomic tile stores (``atomic_add_fragment`` /
``atomic_store_fragment``), run in the emulator against torch references computed on the host."""

import pytest
import torch

from rocke import dsl, emu
from rocke.compiler import compile_ir
from rocke.dsl.fragment import (atomic_add_fragment, atomic_store_fragment, gather_rows_to_lds,
                                load_fragment_global)

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
         "i32": torch.int32}
SRC_ROWS, LD, COL0, TILE = 40, 48, 8, (16, 32)


def _gather_kernel(with_count: bool, cols_limit):
    k = dsl.Kernel(f"gather_{with_count}_{cols_limit}", workgroup_size=64)
    src = k.arg_ptr("src", "f16", readonly=True)
    idx = k.arg_ptr("idx", "i32", readonly=True)
    count = k.arg_i32("count")
    out = k.arg_ptr("out", "f16")
    tile = k.lds("tile", TILE, "f16")
    tid = k.thread_id(0)
    gather_rows_to_lds(src.buffer(SRC_ROWS * LD), tile, idx, COL0, LD, thread_index=tid, threads=64,
                       valid_rows=count if with_count else None, cols_limit=cols_limit)
    k.barrier()
    r, c = tid // 4, (tid % 4) * 8          # each thread copies 8 elements of the tile out
    out.store(r * TILE[1] + c, tile.load((r, c), width=8))
    return k


@pytest.mark.parametrize("with_count, cols_limit", [(True, None), (False, None), (True, 30)])
def test_gather_rows_into_lds_matches_torch(with_count, cols_limit):
    """Rows picked by an index array (repeats, and one index past the source), a runtime count
    of valid rows (the rest zero, their indices never read: the index tensor is cut short and
    the emulator checks bounds) and optionally a column limit."""
    ck = compile_ir(_gather_kernel(with_count, cols_limit), cache=False)
    gen = torch.Generator().manual_seed(3)
    src = torch.randn(SRC_ROWS, LD, generator=gen).half()
    count = 11 if with_count else TILE[0]
    idx = torch.randint(0, SRC_ROWS, (count,), generator=gen, dtype=torch.int32)
    idx[2] = idx[5]
    idx[7] = SRC_ROWS                          # past the source: reads 0
    out = torch.full(TILE, float("nan"), dtype=torch.float16)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [src, idx, count, out])

    padded = torch.cat([src, torch.zeros(1, LD, dtype=src.dtype)])
    ref = torch.zeros(TILE, dtype=torch.float16)
    ref[:count] = padded[idx.long(), COL0:COL0 + TILE[1]]
    if cols_limit is not None:
        ref[:, cols_limit - COL0:] = 0
    assert torch.equal(out, ref)


# (atom, layout, transposed): which fragment is added, and how it lies in memory
LAYOUTS = {"C": ("16x16x16", "C", False), "C^T": ("16x16x16", "C", True), "A": ("16x16x16", "A", False),
           "B": ("16x16x16", "B", False), "C32": ("32x32x8", "C", False)}
OUT_SHAPE, OUT_LD, ORIGIN = (40, 38), 40, (2, 4)


def _atomic_kernel(dtype: str, layout: str, dest: str, bounds, op: str = "add"):
    atom, which, transposed = LAYOUTS[layout]
    k = dsl.Kernel(f"atomic_{op}_{dtype}_{layout.replace('^', 't')}_{dest}", workgroup_size=64)
    x = k.arg_ptr("x", "f32", readonly=True)
    out = k.arg_ptr("out", dtype)
    lay = getattr(k.mfma(atom, "f16"), which)
    rows, cols = lay.shape
    wg = k.block_id(0)
    frag = load_fragment_global(x.buffer(8 * rows * cols), lay, (wg * rows, 0), cols)   # wg's tile
    frag = frag.to(dtype) if dtype != "f32" else frag
    target = out if dest == "ptr" else out.buffer(OUT_LD * OUT_SHAPE[0])
    atomic_store_fragment(target, frag, ORIGIN, OUT_LD, op=op, bounds=bounds, transposed=transposed)
    return k, (rows, cols)


@pytest.mark.parametrize("dtype, layout, dest", [
    ("f32", "C", "ptr"), ("f32", "C", "buffer"), ("f64", "C^T", "ptr"), ("i32", "A", "buffer"),
    ("f16", "C", "ptr"), ("f16", "C", "buffer"), ("bf16", "C", "ptr"), ("bf16", "C^T", "ptr"),
    ("bf16", "A", "ptr"), ("f16", "B", "ptr"), ("bf16", "C32", "ptr")])
@pytest.mark.parametrize("bounded", [False, True])
def test_atomic_add_fragment_matches_torch(dtype, layout, dest, bounded):
    """Three workgroups add their tiles into the same place of one matrix. Integer-valued inputs
    keep every partial sum exact in bf16, so the order of the atomics does not matter; an odd
    column bound makes 16-bit pairs straddle it (their second half must stay untouched)."""
    bounds = (17, 19) if bounded else None
    k, (rows, cols) = _atomic_kernel(dtype, layout, dest, bounds)
    ck = compile_ir(k, cache=False)
    if dtype in ("f16", "bf16"):
        assert f"atomic_pk_add_{dtype}" in ck.asm
    gen = torch.Generator().manual_seed(11)
    tiles = torch.randint(-8, 9, (3, rows, cols), generator=gen).float()
    x = torch.zeros(8, rows, cols)
    x[:3] = tiles
    init = torch.randint(-8, 9, OUT_SHAPE, generator=gen).to(TORCH[dtype])
    init[:, [17, 19]] = -0.0 if dtype != "i32" else 0   # -0.0 past a bound a straddling pair keeps
    out = torch.zeros(OUT_SHAPE[0], OUT_LD, dtype=TORCH[dtype])
    out[:, :OUT_SHAPE[1]] = init
    emu.launch(ck.asm, ck.name, (3, 1, 1), (64, 1, 1), [x, out])

    tr, tc = (cols, rows) if LAYOUTS[layout][2] else (rows, cols)
    added = tiles.sum(0).double()
    added = added.t() if LAYOUTS[layout][2] else added
    ref = out.clone().double()
    ref[:, :OUT_SHAPE[1]] = init.double()
    # origin and bounds are in the fragment's coordinates: transposed, they swap in memory
    (r0, c0), (rb, cb) = (ORIGIN[::-1], (bounds or (99, 99))[::-1]) if LAYOUTS[layout][2] \
        else (ORIGIN, bounds or (99, 99))
    r1, c1 = min(r0 + tr, rb), min(c0 + tc, cb)
    ref[r0:r1, c0:c1] += added[:r1 - r0, :c1 - c0]
    assert torch.equal(out.double(), ref)
    assert torch.equal(torch.signbit(out.double()), torch.signbit(ref))


def test_atomic_max_fragment_matches_torch():
    k, (rows, cols) = _atomic_kernel("f32", "C", "ptr", None, op="max")
    ck = compile_ir(k, cache=False)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, rows, cols, generator=gen)
    out = torch.zeros(OUT_SHAPE[0], OUT_LD)
    emu.launch(ck.asm, ck.name, (3, 1, 1), (64, 1, 1), [x, out])
    ref = torch.zeros(OUT_SHAPE[0], OUT_LD)
    r0, c0 = ORIGIN
    ref[r0:r0 + rows, c0:c0 + cols] = x[:3].amax(0).clamp(min=0)
    assert torch.equal(out, ref)


def test_atomic_fragment_refusals():
    k = dsl.Kernel("refusals", workgroup_size=64)
    out = k.arg_ptr("out", "bf16")
    out_f16 = k.arg_ptr("out_f16", "f16")
    bad_rows = k.arg_ptr("bad_rows", "f32")
    mma = k.mfma("16x16x16", "f16")
    frag = mma.zeros().to("bf16")
    with pytest.raises(ValueError, match=r"ld \(37\) must be even"):
        atomic_add_fragment(out, frag, (0, 0), 37)
    with pytest.raises(ValueError, match=r"origin's column \(3\) must be even"):
        atomic_add_fragment(out, frag, (0, 3), 38)
    with pytest.raises(TypeError, match="16-bit atomics are packed adds only"):
        atomic_store_fragment(out, frag, (0, 0), 38, op="max")
    with pytest.raises(TypeError, match="no buffer_atomic_pk_add_bf16"):
        atomic_add_fragment(out.buffer(64), frag, (0, 0), 38)
    with pytest.raises(TypeError, match="convert with .to"):
        atomic_add_fragment(out_f16, frag, (0, 0), 38)
    with pytest.raises(ValueError, match="atomic op must be one of"):
        atomic_store_fragment(out, frag, (0, 0), 38, op="mul")
    with pytest.raises(TypeError, match="rows must be a BufferResource or GlobalPtr of i32/u32"):
        atomic_add_fragment(out, frag, (0, 0), 38, rows=bad_rows)
    one_value = k.mfma("16x16x4", "f32").A          # one value a lane: no pair anywhere
    from rocke.dsl.fragment import Fragment
    with pytest.raises(ValueError, match="neither a lane nor a pair of lanes"):
        atomic_add_fragment(out, Fragment.full(k, one_value, "bf16", 0.0), (0, 0), 38)


def test_gather_refusals():
    k = dsl.Kernel("gather_refusals", workgroup_size=64)
    src = k.arg_ptr("src", "f16", readonly=True)
    idx = k.arg_ptr("idx", "f32", readonly=True)
    tile = k.lds("tile", TILE, "f16")
    with pytest.raises(TypeError, match="i32/u32 row indices"):
        gather_rows_to_lds(src.buffer(64), tile, idx, 0, LD, thread_index=k.thread_id(0), threads=64)
    with pytest.raises(TypeError, match="reads a BufferResource"):
        gather_rows_to_lds(src, tile, idx, 0, LD, thread_index=k.thread_id(0), threads=64)
