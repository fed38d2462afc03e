"""Fragments: build-time errors point at the author's line; MFMA, loads/stores, coordinates,
reductions and in-place operand reuse run in the gfx942 emulator and match torch."""

import sys

import numpy as np
import pytest
import torch

from rocke import dsl
from rocke.compiler import compile_ir
from rocke.dsl.fragment import (COL, ROW, AxisVector, Fragment, Mfma, load_fragment, load_fragment_global,
                                store_fragment, store_fragment_global)
from rocke.runtime import launch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
CASES = [("32x32x8", "f16"), ("32x32x8", "bf16"), ("16x16x16", "f16"), ("16x16x16", "bf16")]


def _here() -> str:
    """``file:line`` two lines below the caller's: the failing DSL call inside ``pytest.raises``."""
    frame = sys._getframe(1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 2}"


def _run(k, args, grid=1):
    ck = compile_ir(k.ir(), name=k.name)
    assert ck.info.vgpr_spills == 0 and ck.info.sgpr_spills == 0
    launch(ck, grid, k.workgroup_size, args)


def _fresh(dtype="f16", atom="32x32x8"):
    k = dsl.Kernel("frag_errors", workgroup_size=64)
    a = k.arg_ptr("a", dtype)
    mma = Mfma(k, atom, dtype)
    buf = a.buffer(4096)
    return k, mma, buf


# ---- build-time errors ----------------------------------------------------------------------

def test_operand_with_wrong_layout_names_operand_and_line():
    k, mma, buf = _fresh()
    a = load_fragment_global(buf, mma.A, (0, 0), 8)
    b = load_fragment_global(buf, mma.B, (0, 0), 8, transposed=True)
    where = _here()
    with pytest.raises(ValueError, match="operand A needs layout 32x32x8_f16.A") as e:
        mma(b, b, mma.zeros())
    assert str(e.value).startswith(where)
    with pytest.raises(ValueError, match="operand C"):
        mma(a, b, Fragment(k.const(0.0, dsl.f32, 16), mma.C.transpose()))


def test_operand_with_wrong_dtype_is_type_error_at_user_line():
    k, mma, buf = _fresh()
    a = load_fragment_global(buf, mma.A, (0, 0), 8)
    b = load_fragment_global(buf, mma.B, (0, 0), 8, transposed=True)
    where = _here()
    with pytest.raises(TypeError, match=r"operand B must be f16, got f32x4") as e:
        mma(a, b.to(dsl.f32), mma.zeros())
    assert str(e.value).startswith(where)
    with pytest.raises(TypeError, match="operand C must be f32"):
        mma(a, b, mma.zeros().to(dsl.f16))
    with pytest.raises(TypeError, match="must be a Fragment"):
        mma(a.value, b, mma.zeros())


def test_elementwise_between_layouts_and_impossible_reuse_are_errors():
    k, mma, buf = _fresh()
    c = mma.zeros()
    a = load_fragment_global(buf, mma.A, (0, 0), 8).to(dsl.f32)
    where = _here()
    with pytest.raises(ValueError, match="different layouts") as e:
        c + a
    assert str(e.value).startswith(where)
    with pytest.raises(ValueError, match="cross-lane shuffle"):
        c.to(dsl.f16).as_operand(mma.A)            # the accumulator is B-shaped, not A-shaped
    row_max = c.reduce(COL, "max")                 # one value per row of C
    with pytest.raises(ValueError, match="cannot broadcast"):
        row_max.broadcast_to(mma.C.transpose())


def test_mfma_rejects_operand_dtype_the_atom_does_not_take():
    k = dsl.Kernel("frag_bad_atom", workgroup_size=64)
    with pytest.raises(ValueError, match="takes bf16 operands, not f16"):
        Mfma(k, "32x32x8_bf16", "f16")
    with pytest.raises(ValueError, match="no MFMA atom"):
        Mfma(k, "8x8x8", "f16")


# ---- numerics in the emulator -----------------------------------------------------------------

@pytest.mark.parametrize("atom, dtype", CASES)
def test_mfma_reduce_broadcast_and_masked_store(atom, dtype):
    """C = A @ B from global fragments, minus each row's max; the last 3 columns are masked off."""
    k = dsl.Kernel(f"frag_mfma_{atom.replace('x', '_')}_{dtype}", workgroup_size=64)
    a, bt, c = k.arg_ptr("a", dtype), k.arg_ptr("bt", dtype), k.arg_ptr("c", dsl.f32)
    mma = Mfma(k, atom, dtype)
    M, N, K = mma.atom.m, mma.atom.n, mma.atom.k
    fa = load_fragment_global(a.buffer(M * K), mma.A, (0, 0), K)
    fb = load_fragment_global(bt.buffer(K * N), mma.B, (0, 0), K, transposed=True)   # B^T in memory
    acc = mma(fa, fb, mma.zeros())
    out = acc - acc.reduce(COL, "max").broadcast_to(acc.layout)
    store_fragment_global(c.buffer(M * N), out, (0, 0), N, bounds=(M, N - 3))

    gen = torch.Generator().manual_seed(1)
    A = torch.randn(M, K, generator=gen).to(TORCH[dtype])
    B = torch.randn(K, N, generator=gen).to(TORCH[dtype])
    C = torch.full((M, N), 5.0)
    _run(k, [A, B.t().contiguous(), C])
    ref = A.float() @ B.float()
    ref = ref - ref.max(dim=1, keepdim=True).values
    np.testing.assert_allclose(C[:, :N - 3].numpy(), ref[:, :N - 3].numpy(), atol=1e-5, rtol=1e-5)
    assert torch.equal(C[:, N - 3:], torch.full((M, 3), 5.0))


@pytest.mark.parametrize("atom", ["32x32x8", "16x16x16"])
def test_coords_lds_transpose_round_trip_and_column_sums(atom):
    """Each C value = 1000*row + col from coords(); stored to LDS transposed, read back as a
    fragment of the same layout over the transposed tile, written out; plus column sums."""
    k = dsl.Kernel(f"frag_coords_{atom.replace('x', '_')}", workgroup_size=64)
    out_t, col_sum = k.arg_ptr("out_t", dsl.f32), k.arg_ptr("col_sum", dsl.f32)
    mma = Mfma(k, atom, "f16")
    M, N = mma.atom.m, mma.atom.n
    rows, cols = mma.zeros().coords(origin=(0, 0))
    frag = Fragment((rows * 1000 + cols).to(dsl.f32), mma.C)
    tile = k.lds("tile", (N, M), dsl.f32, pad=4)
    store_fragment(tile, frag, transposed=True)          # tile[c, r] = frag[r, c]
    k.barrier()
    back = load_fragment(tile, mma.C.transpose())         # logical tile = frag^T
    store_fragment_global(out_t.buffer(M * N), back, (0, 0), M)
    sums = frag.reduce(ROW, "sum")                        # one value per column
    assert isinstance(sums, AxisVector)
    # lanes holding the same column all hold its sum; write it from every value (same result)
    store_fragment_global(col_sum.buffer(N), sums.broadcast_to(mma.C), (0, 0), 0)

    out = torch.zeros(N, M)
    sum_out = torch.zeros(N)
    _run(k, [out, sum_out])
    r, c = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    expected = (1000 * r + c).astype(np.float32)
    np.testing.assert_array_equal(out.numpy(), expected.T)
    np.testing.assert_array_equal(sum_out.numpy(), expected.sum(axis=0))


@pytest.mark.parametrize("atom, dtype", CASES)
def test_accumulator_reused_in_place_as_next_b_operand(atom, dtype):
    """E = A2 @ (A @ B): the first product's C registers are the second MFMA's B operands."""
    k = dsl.Kernel(f"frag_reuse_{atom.replace('x', '_')}_{dtype}", workgroup_size=64)
    a, bt, a2, e = (k.arg_ptr(n, dsl.f32 if n == "e" else dtype) for n in ("a", "bt", "a2", "e"))
    mma = Mfma(k, atom, dtype)
    M, N, K = mma.atom.m, mma.atom.n, mma.atom.k
    c = mma(load_fragment_global(a.buffer(M * K), mma.A, (0, 0), K),
            load_fragment_global(bt.buffer(K * N), mma.B, (0, 0), K, transposed=True), mma.zeros())
    c16 = c.to(dtype)
    acc = mma.zeros()
    for step in range(0, M, K):       # E's reduction runs over C's M rows, K at a time
        acc = mma(load_fragment_global(a2.buffer(M * M), mma.A, (0, step), M),
                  c16.as_operand(mma.B, (step, 0)), acc)
    store_fragment_global(e.buffer(M * N), acc, (0, 0), N)

    gen = torch.Generator().manual_seed(2)
    tdt = TORCH[dtype]
    A, B, A2 = (torch.randn(*s, generator=gen).to(tdt) for s in ((M, K), (K, N), (M, M)))
    E = torch.zeros(M, N)
    _run(k, [A, B.t().contiguous(), A2, E])
    ref = A2.float() @ (A.float() @ B.float()).to(tdt).float()
    np.testing.assert_allclose(E.numpy(), ref.numpy(), atol=1e-4, rtol=1e-4)


# ---- kernel conveniences: k.mfma, const_vector, tiles as carried values, masked buffer access ----

def test_kernel_mfma_resolves_shapes_keys_and_mixed_fp8_operands():
    k = dsl.Kernel("frag_kernel_mfma", workgroup_size=64)
    assert k.mfma("4x4x4_16b", "bf16").atom.key == "4x4x4_16b_bf16"
    mixed = k.mfma("16x16x32", "fp8_e5m2fnuz", b_dtype="fp8_e4m3fnuz")
    assert mixed.atom.key == "16x16x32_bf8_fp8" and mixed.b_dtype == dsl.fp8_e4m3fnuz
    with pytest.raises(ValueError, match=r"takes fp8 x bf8 operands, not fp8_e4m3fnuz"):
        k.mfma("16x16x32_fp8_bf8", "fp8_e4m3fnuz")


def test_const_vector_rejects_non_numbers():
    k = dsl.Kernel("frag_const_vector", workgroup_size=64)
    with pytest.raises(TypeError, match="non-empty list"):
        k.const_vector([], dsl.i32)
    with pytest.raises(TypeError, match="does not fit in u8"):
        k.const_vector([1, 256], dsl.u8)
    assert k.const_vector([7], dsl.i32).lanes == 1


def test_tile_carry_yield_of_another_layout_is_an_error():
    k, mma, buf = _fresh()
    with k.for_range(0, 4, 1, carry=[mma.zeros()]) as loop:
        (acc,) = loop.carry
        assert isinstance(acc, Fragment) and acc.layout is mma.C
        message = r"item #0 is Fragment of 32x32x8_f16.C\^T but the carried item is Fragment of 32x32x8_f16.C"
        where = _here()
        with pytest.raises(ValueError, match=message) as e:
            loop.yield_(Fragment(acc.value, mma.C.transpose()))
        assert str(e.value).startswith(where)
        loop.yield_(acc)


@pytest.mark.parametrize("atom", ["16x16x16", "4x4x4_16b"])
def test_tiles_carried_through_loop_and_branch(atom):
    """acc = n * (A @ B) accumulated in a runtime loop carrying the fragment and a running row
    max (an AxisVector); an if_ carrying the fragment doubles it when flag != 0, an if_else
    halves the running max when flag == 0."""
    k = dsl.Kernel(f"frag_carry_{atom.replace('x', '_')}", workgroup_size=64)
    a, bt = k.arg_ptr("a", "f16"), k.arg_ptr("bt", "f16")
    out, row_max = k.arg_ptr("out", "f32"), k.arg_ptr("row_max", "f32")
    n, flag = k.arg_i32("n"), k.arg_i32("flag")
    mma = k.mfma(atom, "f16")
    (rows, kk), cols = mma.A.shape, mma.B.shape[1]
    fa = load_fragment_global(a.buffer(rows * kk), mma.A, (0, 0), kk)
    fb = load_fragment_global(bt.buffer(cols * kk), mma.B, (0, 0), kk, transposed=True)
    start_max = AxisVector.full(k, mma.C, COL, dsl.f32, -1e30)
    with k.for_range(0, n, 1, carry=[mma.zeros(), start_max]) as loop:
        acc, best = loop.carry
        acc = mma(fa, fb, acc)
        loop.yield_(acc, best.maximum(acc.reduce(COL, "max")))
    acc, best = loop.results
    with k.if_(flag != 0, carry=[acc]) as br:
        br.yield_(acc * 2.0)
    (acc,) = br.results
    halve = k.if_else(flag == 0)                  # an AxisVector through both arms of an if_else
    with halve.then_():
        halve.yield_(best * 0.5)
    with halve.else_():
        halve.yield_(best)
    (best,) = halve.results
    store_fragment_global(out.buffer(rows * mma.C.shape[1]), acc, (0, 0), mma.C.shape[1])
    store_fragment_global(row_max.buffer(rows), best.broadcast_to(mma.C), (0, 0), 0, transposed=True)

    gen = torch.Generator().manual_seed(5)
    A, B = torch.randn(rows, kk, generator=gen).half(), torch.randn(kk, cols, generator=gen).half()
    m, n_ = mma.atom.m, mma.atom.n          # block b: rows b*m.. of A with columns b*n.. of B
    ref = torch.cat([A[b * m:(b + 1) * m].float() @ B[:, b * n_:(b + 1) * n_].float()
                     for b in range(mma.atom.blocks)])
    ck = compile_ir(k.ir(), name=k.name)
    for n_iter, f in ((3, 1), (2, 0)):
        O, R = torch.zeros(rows, mma.C.shape[1]), torch.zeros(rows)
        launch(ck, 1, 64, [A, B.t().contiguous(), O, R, n_iter, f])
        np.testing.assert_allclose(O.numpy(), (ref * n_iter * (2 if f else 1)).numpy(), rtol=1e-5, atol=1e-4)
        row_max = ref.max(dim=1).values                  # running max over iterations 1..n
        running = torch.maximum(row_max, n_iter * row_max) * (1.0 if f else 0.5)
        np.testing.assert_allclose(R.numpy(), running.numpy(), rtol=1e-5, atol=1e-4)


def test_masked_buffer_load_and_store_and_const_vector():
    """Lanes with lane % 3 == 0 read 0 (masked load) and lanes with lane % 4 == 0 write nothing
    (masked store); each lane adds const_vector([10, 20, 30, 40]) to its 4-wide row."""
    k = dsl.Kernel("frag_masked_access", workgroup_size=64)
    x, y = k.arg_ptr("x", dsl.f32), k.arg_ptr("y", dsl.f32)
    lane = k.lane_id()
    xb, yb = x.buffer(256), y.buffer(256)
    row = xb.load(lane * 4, width=4, mask=lane % 3 != 0)
    yb.store(lane * 4, row + k.const_vector([10.0, 20.0, 30.0, 40.0], dsl.f32), mask=lane % 4 != 0)
    with pytest.raises(TypeError, match="mask must be a scalar i1"):
        yb.store(lane, 1.0, mask=lane)

    X = torch.randn(64, 4)
    Y = torch.full((64, 4), -7.0)
    _run(k, [X, Y])
    lanes = torch.arange(64)
    expected = torch.where((lanes % 3 != 0)[:, None], X, 0.0) + torch.tensor([10.0, 20.0, 30.0, 40.0])
    expected = torch.where((lanes % 4 != 0)[:, None], expected, -7.0)
    assert torch.equal(Y, expected)


@pytest.mark.parametrize("atom", ["16x16x16", "32x32x8"])
def test_row_reductions_through_dpp_match_torch(atom):
    """reduce(COL, via="dpp"): row max and row sum of a C fragment equal torch's; on 16x16x16
    (a row's 16 columns on lanes 0..15 of a DPP row) no ds_swizzle is left, on 32x32x8 only the
    xor-16 step (across DPP rows) still is one."""
    k = dsl.Kernel(f"frag_dpp_reduce_{atom.replace('x', '_')}", workgroup_size=64)
    a, bt = k.arg_ptr("a", "f16"), k.arg_ptr("bt", "f16")
    mx, sm = k.arg_ptr("mx", dsl.f32), k.arg_ptr("sm", dsl.f32)
    mma = Mfma(k, atom, "f16")
    M, N, K = mma.atom.m, mma.atom.n, mma.atom.k
    acc = mma(load_fragment_global(a.buffer(M * K), mma.A, (0, 0), K),
              load_fragment_global(bt.buffer(K * N), mma.B, (0, 0), K, transposed=True), mma.zeros())
    for ptr, op in ((mx, "max"), (sm, "sum")):
        store_fragment_global(ptr.buffer(M * N), acc.reduce(COL, op, via="dpp").broadcast_to(mma.C),
                              (0, 0), N)
    ck = compile_ir(k.ir(), name=k.name)
    assert ("ds_swizzle_b32" in ck.asm) == (atom == "32x32x8") and "_dpp" in ck.asm
    gen = torch.Generator().manual_seed(3)
    A, B = torch.randn(M, K, generator=gen).half(), torch.randn(K, N, generator=gen).half()
    got_max, got_sum = torch.zeros(M, N), torch.zeros(M, N)
    launch(ck, 1, 64, [A, B.t().contiguous(), got_max, got_sum])
    ref = A.float() @ B.float()
    np.testing.assert_allclose(got_max.numpy(), ref.max(1, keepdim=True).values.expand(M, N).numpy(),
                               atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got_sum.numpy(), ref.sum(1, keepdim=True).expand(M, N).numpy(),
                               atol=1e-4, rtol=1e-5)


def test_butterfly_rejects_unknown_via():
    k, mma, _ = _fresh()
    with pytest.raises(ValueError, match="butterfly via must be 'swizzle' or 'dpp'"):
        mma.zeros().reduce(COL, "max", via="permute")
