"""Per-row / per-column vectors (AxisVectors) go to and from LDS and global memory, and the
cross-wave split-KV merge (ALGORITHM.md §5) matches its formula, in the gfx942 emulator."""

import math

import numpy as np
import pytest
import torch

from rocke import dsl
from rocke.dsl.fragment import (COL, ROW, load_axis, load_fragment_global, merge_across_waves, store_axis,
                                store_fragment_global)

from .emu_helper import run


@pytest.mark.parametrize("atom", ["16x16x16", "32x32x8"])
def test_axis_vectors_round_trip_through_lds_and_global(atom):
    k = dsl.Kernel("axis_mem", workgroup_size=64)
    x, row_max, col_sum, given, spread = (k.arg_ptr(n, dsl.f32) for n in ("x", "row_max", "col_sum", "given", "spread"))
    mma = k.mfma(atom, dsl.f16)
    rows, cols = mma.C.shape
    frag = load_fragment_global(x.buffer(rows * cols), mma.C, (0, 0), cols)
    per_row = frag.reduce(COL, "max")                         # one entry per row
    stash = k.lds("stash", (2, rows), dsl.f32)
    store_axis(stash[1], per_row)                             # through LDS (a runtime-free view)
    back = load_axis(stash[1], mma.C, COL)
    store_axis(row_max.buffer(rows), back, bound=rows - 3)    # the last 3 entries stay untouched
    store_axis(col_sum.buffer(cols), frag.reduce(ROW, "sum"))
    vec = load_axis(given.buffer(cols), mma.C, ROW)           # a per-column vector from global
    store_fragment_global(spread.buffer(rows * cols), vec.broadcast_to(mma.C), (0, 0), cols)

    gen = torch.Generator().manual_seed(11)
    X = torch.randn(rows, cols, generator=gen)
    R, S, G, P = torch.full((rows,), 5.0), torch.zeros(cols), torch.randn(cols, generator=gen), torch.zeros(rows, cols)
    run(k, (1,), [X, R, S, G, P])
    assert torch.equal(R[:rows - 3], X.max(dim=1).values[:rows - 3])
    assert torch.equal(R[rows - 3:], torch.full((3,), 5.0))
    np.testing.assert_allclose(S.numpy(), X.sum(dim=0).numpy(), rtol=1e-5, atol=1e-5)
    assert torch.equal(P, G.expand(rows, cols))


@pytest.mark.parametrize("atom", ["16x16x16", "32x32x8"])
def test_per_row_and_per_col_say_what_the_vector_holds(atom):
    """reduce(PER_ROW) gives one value per row, reduce(PER_COL) one per column, and
    load_axis(..., PER_COL) a per-column vector that broadcasts down the rows."""
    from rocke.dsl.fragment import PER_COL, PER_ROW
    k = dsl.Kernel("per_row_col", workgroup_size=64)
    x, row_sum, col_max, bias, out = (k.arg_ptr(n, dsl.f32) for n in
                                      ("x", "row_sum", "col_max", "bias", "out"))
    mma = k.mfma(atom, dsl.f16)
    rows, cols = mma.C.shape
    frag = load_fragment_global(x.buffer(rows * cols), mma.C, (0, 0), cols)
    per_row = frag.reduce(PER_ROW, "sum")
    assert "PER_ROW" in repr(per_row)
    store_axis(row_sum.buffer(rows), per_row)
    store_axis(col_max.buffer(cols), frag.reduce(PER_COL, "max"))
    store_fragment_global(out.buffer(rows * cols), frag + load_axis(bias.buffer(cols), mma.C,
                                                                    PER_COL), (0, 0), cols)
    gen = torch.Generator().manual_seed(5)
    X, B = torch.randn(rows, cols, generator=gen), torch.randn(cols, generator=gen)
    R, C, O = torch.zeros(rows), torch.zeros(cols), torch.zeros(rows, cols)
    run(k, (1,), [X, R, C, B, O])
    np.testing.assert_allclose(R.numpy(), X.sum(dim=1).numpy(), rtol=1e-5, atol=1e-5)
    assert torch.equal(C, X.max(dim=0).values)
    assert torch.equal(O, X + B)


def test_store_axis_checks_memory_shape_and_dtype():
    k = dsl.Kernel("axis_bad", workgroup_size=64)
    mma = k.mfma("16x16x16", dsl.f16)
    vec = mma.zeros().reduce(COL, "max")
    with pytest.raises(TypeError, match="1-D LdsTensor"):
        store_axis(k.lds("two_d", (4, 16), dsl.f32), vec)
    with pytest.raises(ValueError, match="16 entries at 8 do not fit"):
        store_axis(k.lds("short", (16,), dsl.f32), vec, origin=8)
    with pytest.raises(TypeError, match="f32 axis vector into f16"):
        store_axis(k.lds("halves", (16,), dsl.f16), vec)


def test_merge_across_waves_matches_split_kv_formula():
    waves, d_frags = 4, 2
    k = dsl.Kernel("merge4", workgroup_size=64 * waves)
    m_in, l_in, o_in, m_out, l_out, o_out = (k.arg_ptr(n, dsl.f32) for n in ("m", "l", "o", "m_out", "l_out", "o_out"))
    mma = k.mfma("16x16x16", dsl.f16)
    q = mma.C.shape[1]                                        # queries along columns (as S^T)
    wave = k.wave_id()
    m = load_axis(m_in.buffer(waves * q), mma.C, ROW, origin=wave * q)
    l = load_axis(l_in.buffer(waves * q), mma.C, ROW, origin=wave * q)
    o = [load_fragment_global(o_in.buffer(waves * 32 * q), mma.C, (wave * 32 + 16 * j, 0), q) for j in range(d_frags)]
    m2, l2, o2 = merge_across_waves(k, m, l, o)
    with k.if_(wave == 3):                                    # any wave holds the merged result
        store_axis(m_out.buffer(q), m2)
        store_axis(l_out.buffer(q), l2)
        for j in range(d_frags):
            store_fragment_global(o_out.buffer(32 * q), o2[j], (16 * j, 0), q)
    assert k.lds_bytes == 2 * waves * q * 4 + d_frags * 16 * q * 4   # one o copy, not one per wave

    gen = torch.Generator().manual_seed(2)
    M = torch.randn(waves, q, generator=gen) * 4
    M[1, :5] = -math.inf                                      # wave 1 saw no keys for queries 0..4
    M[:, 0] = -math.inf                                       # query 0: nobody saw a key
    L = torch.rand(waves, q, generator=gen) + 0.5
    L[M == -math.inf] = 0.0
    O = torch.randn(waves, 32, q, generator=gen)
    O[1, :, :5] = 0.0
    O[:, :, 0] = 0.0
    Mo, Lo, Oo = torch.zeros(q), torch.zeros(q), torch.zeros(32, q)
    run(k, (1,), [M, L, O, Mo, Lo, Oo])
    m_ref = M.max(dim=0).values
    base = torch.where(m_ref == -math.inf, 0.0, m_ref)
    scale = torch.exp2(M - base)
    assert torch.equal(Mo, m_ref)
    np.testing.assert_allclose(Lo.numpy(), (scale * L).sum(0).numpy(), rtol=2e-6)
    np.testing.assert_allclose(Oo.numpy(), (scale[:, None, :] * O).sum(0).numpy(), rtol=2e-5, atol=2e-6)
