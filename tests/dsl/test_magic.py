"""Magic-number division: the derived constants, and the emitted IR run on the host CPU,
checked against numpy's ``//`` on sampled and edge-case dividends."""

import ctypes

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from rocke import dsl
from rocke.dsl.magic import U32_MAX, emit_udiv, unsigned_magic

from .asm_helper import compile_to_asm

DIVISORS = sorted({1, 2, 3, 5, 6, 7, 9, 10, 12, 16, 25, 48, 60, 64, 100, 125, 127, 641, 1000, 4096, 6700417,
                   2**31 - 1, 2**31, 2**31 + 1, 2**32 - 3, 2**32 - 1}
                  | set(np.random.default_rng(7).integers(2, 2**32 - 1, 12).tolist()))


def dividends(d: int, limit: int = U32_MAX) -> np.ndarray:
    rng = np.random.default_rng(d)
    picks = [rng.integers(0, limit, 40_000, dtype=np.uint64, endpoint=True),
             np.arange(0, min(limit, 5000) + 1, dtype=np.uint64),
             np.arange(max(0, limit - 5000), limit + 1, dtype=np.uint64)]
    # around multiples of d, where a wrong rounding would show first
    multiples = (rng.integers(0, limit // d + 1, 4000, dtype=np.uint64) * np.uint64(d))
    for delta in (-1, 0, 1):
        near = multiples.astype(np.int64) + delta
        picks.append(near[(near >= 0) & (near <= limit)].astype(np.uint64))
    return np.unique(np.concatenate(picks))


def apply_magic(x: np.ndarray, magic) -> np.ndarray:
    """The documented quotient formula, evaluated in uint64 with 32-bit wraparound."""
    mask = np.uint64(U32_MAX)
    if magic.kind == "identity":
        return x
    if magic.kind == "shift":
        return x >> np.uint64(magic.shift)
    t = (x * np.uint64(magic.multiplier)) >> np.uint64(32)
    if magic.kind == "mulhi":
        return t >> np.uint64(magic.shift)
    if magic.kind == "mulhi_add_small":
        return ((t + x) & mask) >> np.uint64(magic.shift)
    return ((t + (((x - t) & mask) >> np.uint64(1))) & mask) >> np.uint64(magic.shift)


@pytest.mark.parametrize("limit", [U32_MAX, 2**31 - 1, 2**20])
def test_magic_numbers_match_floor_division(limit):
    kinds = set()
    for d in DIVISORS:
        magic = unsigned_magic(d, limit)
        kinds.add(magic.kind)
        x = dividends(d, limit)
        np.testing.assert_array_equal(apply_magic(x, magic), x // np.uint64(d), err_msg=f"d={d} {magic}")
    assert {"identity", "shift", "mulhi"} <= kinds
    assert ("mulhi_add" in kinds) == (limit == U32_MAX)


def _host_udiv(divisor: int, max_dividend: int):
    """JIT ``void f(u32* x, u32* q, i64 n)`` built around emit_udiv for the host CPU."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    ptr = ir.PointerType()
    module = ir.Module("host_udiv")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, i64]), "udiv_all")
    src, dst, n = fn.args
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("body"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), body, done)
    b.position_at_end(body)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    x = b.load(b.gep(src, [i], source_etype=i32), typ=i32)
    b.store(emit_udiv(b, x, unsigned_magic(divisor, max_dividend)), b.gep(dst, [i], source_etype=i32))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, body)
    b.cbranch(b.icmp_signed("<", nxt, n), body, done)
    b.position_at_end(done)
    b.ret_void()

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    parsed = llvm.parse_assembly(str(module))
    engine = llvm.create_mcjit_compiler(parsed, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    cfunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("udiv_all"))
    return engine, cfunc


@pytest.mark.parametrize("divisor, limit", [(7, U32_MAX), (48, U32_MAX), (641, 2**31 - 1), (1000, U32_MAX),
                                            (2**31 + 1, U32_MAX), (3, 2**31 - 1), (64, U32_MAX),
                                            (4294967291, U32_MAX)])
def test_emitted_ir_divides_exactly_on_host(divisor, limit):
    engine, run = _host_udiv(divisor, limit)
    x = dividends(divisor, limit).astype(np.uint32)
    q = np.zeros_like(x)
    run(x.ctypes.data, q.ctypes.data, x.size)
    np.testing.assert_array_equal(q, x // np.uint32(divisor))
    del engine


@pytest.mark.parametrize("divisor", [3, 7, -7, 10, -64, 1, -1, 48, 2**31 - 1, -(2**31 - 1)])
def test_signed_division_truncates_like_c(divisor):
    """sdiv_const = sign * (|x| // |d|) with the unsigned magic at max_dividend 2**31."""
    rng = np.random.default_rng(abs(divisor))
    x = np.concatenate([rng.integers(-2**31, 2**31, 100_000), np.arange(-3000, 3000),
                        [-2**31, -2**31 + 1, 2**31 - 1]]).astype(np.int64)
    magnitude = np.abs(x).astype(np.uint64)
    q = apply_magic(magnitude, unsigned_magic(abs(divisor), 2**31)).astype(np.int64)
    q = np.where((x < 0) != (divisor < 0), -q, q)
    expected = np.trunc(x / divisor).astype(np.int64)
    np.testing.assert_array_equal(q, expected)
    np.testing.assert_array_equal(x - q * divisor, np.fmod(x, divisor))


def test_magic_division_compiles_to_mul_hi():
    k = dsl.Kernel("magic", workgroup_size=64)
    out = k.arg_ptr("out", dsl.i32)
    tid = k.thread_id(0)
    full = dsl.udiv_const(tid * 977, 1000)
    small = dsl.udiv_const(tid, 7, max_value=2**31 - 1)
    signed = dsl.sdiv_const(tid - 32, -12)
    out.store(tid, full + small + signed + dsl.umod_const(tid, 5) + dsl.smod_const(tid - 7, 3))
    text = k.ir()
    assert "udiv" not in text and "sdiv" not in text and "urem" not in text and "srem" not in text
    asm = compile_to_asm(text)
    assert asm.count("v_mul_hi_u32") >= 4
    assert "v_rcp_iflag_f32" not in asm  # the generic integer-division expansion is absent


def test_bad_divisors():
    k = dsl.Kernel("magic_bad", workgroup_size=64)
    tid = k.thread_id(0)
    with pytest.raises(ValueError, match="divisor"):
        dsl.udiv_const(tid, 0)
    with pytest.raises(ValueError, match="divisor"):
        dsl.udiv_const(tid, -3)
    with pytest.raises(TypeError, match="32-bit"):
        dsl.udiv_const(tid.to(dsl.i64), 3)
