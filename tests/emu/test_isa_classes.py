"""The failure classes of issue 11, each from the ISA's definition: operand forms on register
pairs, integer clamp, MODE writes, f64 range-reduction helpers, MFMA f32/i8/f64, real calls
and `.set` descriptor expressions. Expected values come from numpy / Python integers here."""
import math

import numpy as np
import pytest
import torch

import rocke.emu as emu
from rocke.emu import EmulatorError

from .asm_runner import asm_text, compile_ir, run_asm

LANES = np.arange(64)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy references of inf/NaN lanes


def f64_rows(values):
    """float64[64] -> two uint32 rows (low, high)."""
    bits = np.asarray(values, np.float64).view(np.uint64)
    return np.stack([(bits & 0xFFFFFFFF).astype(np.uint32), (bits >> 32).astype(np.uint32)])


def rows_f64(rows):
    return (rows[0].astype(np.uint64) | (rows[1].astype(np.uint64) << np.uint64(32))).view(np.float64)


def f32_row(values):
    return np.asarray(values, np.float32).view(np.uint32)


# --- operand forms ----------------------------------------------------------------------

def test_source_modifiers_on_register_pairs():
    x = np.linspace(-3, 3, 64)
    y = np.linspace(5, -7, 64)
    v = np.concatenate([f64_rows(x), f64_rows(y), np.zeros((6, 64), np.uint32)])
    out = run_asm("""
  v_add_f64 v[4:5], -v[0:1], |v[2:3]|
  v_mul_f64 v[6:7], -|v[0:1]|, v[2:3]
  v_fma_f64 v[8:9], |v[0:1]|, -v[2:3], -v[0:1]""", v).vgprs[0]
    np.testing.assert_array_equal(rows_f64(out[4:6]), -x + np.abs(y))
    np.testing.assert_array_equal(rows_f64(out[6:8]), -np.abs(x) * y)
    from fractions import Fraction
    fused = [float(Fraction(abs(a)) * Fraction(-b) - Fraction(a)) for a, b in zip(x, y)]
    np.testing.assert_array_equal(rows_f64(out[8:10]), fused)


# --- integer clamp ------------------------------------------------------------------------

def test_integer_clamp_saturates():
    a = np.array([0xFFFFFFF0, 5, 0x7FFFFFF0, 0x80000010] * 16, np.uint32)
    b = np.array([0x20, 9, 0x20, 0x20] * 16, np.uint32)
    out = run_asm("""
  v_add_u32_e64 v2, v0, v1 clamp
  v_sub_u32_e64 v3, v1, v0 clamp
  v_add_i32 v4, v0, v1 clamp
  v_sub_i32 v5, v0, v1 clamp
  v_add_co_u32_e64 v6, s[16:17], v0, v1 clamp
  v_sub_u16_e64 v7, v1, v0 clamp
  v_pk_add_u16 v8, v0, v1 clamp
  v_pk_sub_i16 v9, v0, v1 clamp
  v_add_u32 v10, v0, v1""", np.stack([a, b])).vgprs[0]
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    sa, sb = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    np.testing.assert_array_equal(out[2], np.minimum(wide_a + wide_b, 2**32 - 1))
    np.testing.assert_array_equal(out[3], np.maximum(wide_b - wide_a, 0))
    np.testing.assert_array_equal(out[4].view(np.int32), np.clip(sa + sb, -2**31, 2**31 - 1))
    np.testing.assert_array_equal(out[5].view(np.int32), np.clip(sa - sb, -2**31, 2**31 - 1))
    np.testing.assert_array_equal(out[6], np.minimum(wide_a + wide_b, 2**32 - 1))
    np.testing.assert_array_equal(out[7] & 0xFFFF, np.maximum((wide_b & 0xFFFF) - (wide_a & 0xFFFF), 0))
    for half in (0, 16):
        ha, hb = (wide_a >> half) & 0xFFFF, (wide_b >> half) & 0xFFFF
        np.testing.assert_array_equal((out[8] >> half) & 0xFFFF, np.minimum(ha + hb, 0xFFFF))
        sha, shb = ha - ((ha & 0x8000) << 1), hb - ((hb & 0x8000) << 1)
        expect = np.clip(sha - shb, -32768, 32767) & 0xFFFF
        np.testing.assert_array_equal((out[9] >> half) & 0xFFFF, expect)
    np.testing.assert_array_equal(out[10], (wide_a + wide_b) & 0xFFFFFFFF)   # no clamp: wraps


def test_clamped_carry_out_and_mad_and_dot():
    a = np.array([0xFFFFFFFF, 3] * 32, np.uint32)
    b = np.array([2, 4] * 32, np.uint32)
    c = np.array([0x7F7F7F7F, 0x80808080] * 32, np.uint32)
    res = run_asm("""
  v_add_co_u32_e64 v3, s[16:17], v0, v1 clamp
  v_mad_u64_u32 v[4:5], s[18:19], v0, v0, -1 clamp
  v_dot4_i32_i8 v6, v2, v2, v0 clamp
  v_mov_b32 v7, 0x7ffffff0
  v_dot4_i32_i8 v7, v2, v2, v7 clamp""", np.stack([a, b, c]))
    out = res.vgprs[0]
    np.testing.assert_array_equal(out[3], np.where(a == 0xFFFFFFFF, 0xFFFFFFFF, a + b))
    carry = res.sgprs[0, 0] | (res.sgprs[0, 1].astype(np.uint64) << 32)
    assert carry == int("01" * 32, 2)           # even lanes carried out
    wide = [int(x) * int(x) + 2**64 - 1 for x in a]
    got = out[4].astype(object) | (out[5].astype(object) << 32)
    assert list(got) == [min(w, 2**64 - 1) for w in wide]
    bytes_c = c.view(np.int8).reshape(64, 4).astype(np.int64)
    dot = (bytes_c * bytes_c).sum(1)
    np.testing.assert_array_equal(out[6].view(np.int32), np.clip(dot + a.view(np.int32), -2**31, 2**31 - 1))
    np.testing.assert_array_equal(out[7].view(np.int32), np.minimum(dot + 0x7FFFFFF0, 2**31 - 1))


def test_fp8_pack_clamp_saturates_instead_of_nan():
    x = np.array([1e9, -np.inf, 300.0, 1.0] * 16, np.float32)
    out = run_asm("""
  v_cvt_pk_fp8_f32 v1, v0, v0 clamp
  v_cvt_pk_fp8_f32 v2, v0, v0""", f32_row(x)[None]).vgprs[0]
    low = out[1] & 0xFF
    np.testing.assert_array_equal(low[:4], [0x7F, 0xFF, 0x7F, 0x40])   # +-240; 1.0 = 0x40 (bias 8)
    np.testing.assert_array_equal(out[2][:3] & 0xFF, [0x80, 0x80, 0x80])


# --- MODE register ------------------------------------------------------------------------

def _directed_f32(exact, mode):
    """float(exact Fraction) rounded to f32 in `mode` (1 up, 2 down, 3 toward zero)."""
    from fractions import Fraction
    r = np.float32(float(exact))
    if Fraction(float(r)) == exact:
        return r
    up = Fraction(float(r)) < exact
    if mode == 1 and up or mode == 3 and up and exact < 0:
        return np.nextafter(r, np.float32(np.inf))
    if mode == 2 and not up or mode == 3 and not up and exact > 0:
        return np.nextafter(r, np.float32(-np.inf))
    return r


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_setreg_rounding_mode_changes_f32_arithmetic(mode):
    from fractions import Fraction
    rng = np.random.default_rng(mode)
    a = (rng.standard_normal(64) * 1e3).astype(np.float32)
    b = (rng.standard_normal(64) * 1e-3).astype(np.float32)
    a[:3] = [3.0e38, -3.0e38, 1.0]
    b[:3] = [3.0e38, -3.0e38, 2.0 ** -30]
    out = run_asm(f"""
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 2), {mode}
  v_add_f32 v2, v0, v1
  v_mul_f32 v3, v0, v1
  v_fma_f32 v4, v0, v1, v0
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 2), 0
  v_add_f32 v5, v0, v1""", np.stack([f32_row(a), f32_row(b)])).vgprs[0].view(np.float32)
    for lane in range(64):
        fa, fb = Fraction(float(a[lane])), Fraction(float(b[lane]))
        for row, exact in ((2, fa + fb), (3, fa * fb), (4, fa * fb + fa)):
            expect = _directed_f32(exact, mode) if abs(exact) < Fraction(2) ** 128 else None
            if expect is None:     # overflow: toward-zero / away-from-inf directions stop at max
                big = np.float32(3.4028235e38)
                expect = {1: np.float32(np.inf) if exact > 0 else -big,
                          2: big if exact > 0 else np.float32(-np.inf),
                          3: big if exact > 0 else -big}[mode]
            assert out[row, lane] == expect, (row, lane, mode)
    np.testing.assert_array_equal(out[5], a + b)   # restored to nearest-even


def test_setreg_rounding_mode_16_64_and_getreg():
    x = np.array([1.0 + 2.0 ** -11 + 2.0 ** -20, -(1.0 + 2.0 ** -11 + 2.0 ** -20), 70000.0, 1.0] * 16,
                 np.float32)
    res = run_asm("""
  s_mov_b32 s16, 0xc
  s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s16
  v_cvt_f16_f32 v1, v0
  s_getreg_b32 s17, hwreg(HW_REG_MODE, 0, 8)
  v_add_f32 v2, v0, v0""", f32_row(x)[None])
    half = (res.vgprs[0, 1] & 0xFFFF).astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(half[:4], np.array([1.0, -1.0, 65504.0, 1.0], np.float16))
    assert res.sgprs[0, 1] == 0xC | (0xF << 4)    # round 16/64 = toward zero, denormals on
    np.testing.assert_array_equal(res.vgprs[0, 2].view(np.float32), x + x)   # f32 mode untouched


def test_setreg_denormal_mode_flushes():
    tiny = np.float32(1e-40)
    x = np.full(64, tiny, np.float32)
    out = run_asm("""
  v_add_f32 v1, v0, 0
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 0
  v_add_f32 v2, v0, 0
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 3
  v_add_f32 v3, v0, 0""", f32_row(x)[None]).vgprs[0].view(np.float32)
    assert (out[1] == tiny).all() and (out[2] == 0).all() and (out[3] == tiny).all()


def test_mode_writes_the_emulator_does_not_model_are_refused():
    with pytest.raises(EmulatorError, match="IEEE=0"):
        run_asm("  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 9, 1), 0", np.zeros((1, 64)))
    with pytest.raises(EmulatorError, match="not a constant"):
        run_asm("  s_setreg_b32 hwreg(HW_REG_MODE, 0, 2), s20", np.zeros((1, 64)))
    with pytest.raises(EmulatorError, match="v_sqrt_f32 under MODE.FP_ROUND"):
        run_asm("  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 2), 3\n  v_sqrt_f32 v1, v0",
                np.zeros((1, 64)))


# --- f64 helpers --------------------------------------------------------------------------

TWO_OVER_PI_HEX = "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163ABDEBBC561B7246E3A424DD2E006492EEA09D1921CFE1DEB1CB129A73EE88235F52EBB4484E99C7026B45F7E413991D639835339F49C845F8BBDF9283B1FF897FFDE05980FEF2F118B5A0A6D1F6D367ECF27CB09B74F463F669E5FEA2D7527BAC7EBE5F17B3D0739F78A5292EA6BFB5FB11F8D5D0856033046FC7B6BABF0CFBC209AF4361DA9E391615EE61B086599855F14A068408DFFD8804D73273106061556CA73A8C960E27BC08C6B"


def test_trig_preop_f64_walks_the_bits_of_two_over_pi():
    bits = int(TWO_OVER_PI_HEX, 16)
    width = len(TWO_OVER_PI_HEX) * 4
    x = np.array([1.0, 1.0, 1.0, 2.0 ** 200, 2.0 ** 1000] * 13)[:64]
    segment = np.array([0, 1, 2, 0, 1] * 13, np.uint32)[:64]
    v = np.concatenate([f64_rows(x), segment[None], np.zeros((2, 64), np.uint32)])
    out = rows_f64(run_asm("  v_trig_preop_f64 v[3:4], v[0:1], v2", v).vgprs[0, 3:5])
    for lane in range(5):
        exponent = math.frexp(x[lane])[1] - 1 + 1023
        shift = 53 * int(segment[lane]) + max(exponent - 1077, 0)
        chunk = (bits >> (width - 53 - shift)) & ((1 << 53) - 1)
        scale = -53 - shift + (128 if exponent >= 1968 else 0)
        assert out[lane] == math.ldexp(chunk, scale), lane


def test_f64_exponent_helpers_edge_cases():
    x = np.array([0.75, -5e-324, np.inf, np.nan, 0.0, -1e300, 3.0, 2.0 ** -1074 * 3] * 8)
    e = np.array([3, 1074, 1, 0, 5, -2000, 2000, -2] * 8, np.int32)
    v = np.concatenate([f64_rows(x), e.view(np.uint32)[None], np.zeros((8, 64), np.uint32)])
    out = run_asm("""
  v_frexp_mant_f64 v[3:4], v[0:1]
  v_frexp_exp_i32_f64 v5, v[0:1]
  v_ldexp_f64 v[6:7], v[0:1], v2
  v_fract_f64 v[8:9], v[0:1]
  v_rcp_f64 v[10:11], v[0:1]""", v).vgprs[0]
    mant, exp = np.frexp(x)
    finite = np.isfinite(x)
    np.testing.assert_array_equal(rows_f64(out[3:5])[finite], mant[finite])
    assert np.isinf(rows_f64(out[3:5])[2]) and np.isnan(rows_f64(out[3:5])[3])   # inf/NaN pass through
    np.testing.assert_array_equal(out[5].view(np.int32)[finite], exp[finite])
    assert (out[5].view(np.int32)[~finite] == 0).all()
    np.testing.assert_array_equal(rows_f64(out[6:8]), np.ldexp(x, e))
    fract = rows_f64(out[8:10])
    np.testing.assert_array_equal(fract[finite], np.minimum(x - np.floor(x), np.nextafter(1.0, 0))[finite])
    assert np.isnan(fract[2]) and np.isnan(fract[3])
    rcp = rows_f64(out[10:12])
    assert rcp[2] == 0 and np.isinf(rcp[4]) and rcp[0] == 1 / 0.75


F64_MATH = """
declare double @llvm.sqrt.f64(double)
declare double @llvm.ldexp.f64.i32(double, i32)
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @f64math(ptr addrspace(1) %x, ptr addrspace(1) %y, ptr addrspace(1) %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %px = getelementptr double, ptr addrspace(1) %x, i32 %t
  %py = getelementptr double, ptr addrspace(1) %y, i32 %t
  %a = load double, ptr addrspace(1) %px
  %b = load double, ptr addrspace(1) %py
  %q = fdiv double %a, %b
  %s = call double @llvm.sqrt.f64(double %a)
  %i = fptosi double %b to i32
  %l = call double @llvm.ldexp.f64.i32(double %a, i32 %i)
  %base = mul i32 %t, 3
  %p0 = getelementptr double, ptr addrspace(1) %out, i32 %base
  store double %q, ptr addrspace(1) %p0
  %b1 = add i32 %base, 1
  %p1 = getelementptr double, ptr addrspace(1) %out, i32 %b1
  store double %s, ptr addrspace(1) %p1
  %b2 = add i32 %base, 2
  %p2 = getelementptr double, ptr addrspace(1) %out, i32 %b2
  store double %l, ptr addrspace(1) %p2
  ret void
}
"""


def test_f64_division_and_sqrt_expansions_are_correctly_rounded():
    rng = np.random.default_rng(7)
    a = np.abs(rng.standard_normal(64)) * 10.0 ** rng.integers(-300, 300, 64)
    b = rng.standard_normal(64) * 10.0 ** rng.integers(-5, 5, 64)
    a[:4] = [1e-310, 4.9e-324, 1.7e308, 0.0]
    b[:4] = [3.0, 0.5, 1e-300, 0.0]
    x, y = torch.tensor(a), torch.tensor(b)
    out = torch.zeros(64, 3, dtype=torch.float64)
    emu.launch(compile_ir(F64_MATH), "f64math", 1, 64, [x, y, out])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[:, 0].numpy()[4:], (a / b)[4:])
        np.testing.assert_array_equal(out[:, 1].numpy(), np.sqrt(a))
        ints = np.trunc(np.clip(b, -2**31, 2**31 - 1)).astype(np.int32)
        np.testing.assert_array_equal(out[:, 2].numpy(), np.ldexp(a, ints))
    np.testing.assert_array_equal(out[:3, 0].numpy(), a[:3] / b[:3])
    assert np.isnan(out[3, 0].item())


# --- MFMA f32 / i8 / f64 ------------------------------------------------------------------

def _place_a(op_m, op_k, blocks, per_reg, regs, matrix):
    """A[b, i, k] -> element positions: lane = group * M + i, register/element from p."""
    k_per_lane = blocks * op_m * op_k // 64
    out = np.zeros((regs * per_reg, 64), matrix.dtype)
    for lane in range(64):
        group, row = lane // op_m, lane % op_m
        for p in range(k_per_lane):
            b, k = (group, p) if blocks > 1 else (0, group * k_per_lane + p)
            out[p, lane] = matrix[b, row, k]
    return out


def _d_positions(m, n, blocks, c_regs):
    pos = {}
    if n == 4:
        for lane in range(64):
            for r in range(m):
                pos[(lane // 4, r, lane % 4)] = (r, lane)
        return pos
    groups = 64 // n
    for r in range(c_regs):
        for lane in range(64):
            q, b = r % (m // groups), r // (m // groups)
            pos[(b, 4 * groups * (q // 4) + 4 * (lane // n) + q % 4, lane % n)] = (r, lane)
    return pos


@pytest.mark.parametrize("name,m,n,k,blocks,kind", [
    ("v_mfma_f32_32x32x2_f32", 32, 32, 2, 1, "f32"),
    ("v_mfma_f32_16x16x1_4b_f32", 16, 16, 1, 4, "f32"),
    ("v_mfma_f32_4x4x1_16b_f32", 4, 4, 1, 16, "f32"),
    ("v_mfma_i32_16x16x32_i8", 16, 16, 32, 1, "i8"),
    ("v_mfma_i32_32x32x4_2b_i8", 32, 32, 4, 2, "i8"),
])
def test_mfma_f32_and_i8_families(name, m, n, k, blocks, kind):
    rng = np.random.default_rng(len(name))
    per_reg = 1 if kind == "f32" else 4
    in_regs = blocks * m * k // 64 // per_reg
    c_regs = blocks * m * n // 64
    if kind == "f32":
        A = rng.standard_normal((blocks, m, k)).astype(np.float32)
        B = rng.standard_normal((blocks, k, n)).astype(np.float32)
        C = rng.standard_normal((blocks, m, n)).astype(np.float32)
    else:
        A = rng.integers(-128, 128, (blocks, m, k)).astype(np.int8)
        B = rng.integers(-128, 128, (blocks, k, n)).astype(np.int8)
        C = rng.integers(-2**31, 2**31, (blocks, m, n)).astype(np.int32)
    a_el = _place_a(m, k, blocks, per_reg, in_regs, A)
    b_el = _place_a(n, k, blocks, per_reg, in_regs, B.transpose(0, 2, 1))
    def words(el):
        if kind == "f32":
            return el.view(np.uint32)
        return np.ascontiguousarray(el.reshape(in_regs, per_reg, 64).transpose(0, 2, 1)).view(np.uint32)[..., 0]
    pos = _d_positions(m, n, blocks, c_regs)
    c_rows = np.zeros((c_regs, 64), np.uint32)
    for (b, i, j), (r, lane) in pos.items():
        c_rows[r, lane] = C[b, i, j].view(np.uint32)
    a0, b0, c0 = 0, in_regs, 2 * in_regs
    v = np.concatenate([words(a_el), words(b_el), c_rows])
    body = (f"  {name} a[0:{c_regs - 1}], v[{a0}:{a0 + in_regs - 1}], v[{b0}:{b0 + in_regs - 1}], "
            f"v[{c0}:{c0 + c_regs - 1}]\n" + "\n".join(
                f"  v_accvgpr_read_b32 v{c0 + r}, a{r}" for r in range(c_regs)))
    body = body.replace(f"v[{a0}:{a0}]", f"v{a0}").replace(f"v[{b0}:{b0}]", f"v{b0}")
    out = run_asm(body, v).vgprs[0, c0:c0 + c_regs]
    if kind == "f32":
        D = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)
    else:
        D = ((A.astype(np.int64) @ B.astype(np.int64) + C) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    for (b, i, j), (r, lane) in pos.items():
        assert out[r, lane] == D[b, i, j].view(np.uint32), (b, i, j)


@pytest.mark.parametrize("name,blocks", [("v_mfma_f64_16x16x4_f64", 1), ("v_mfma_f64_4x4x4_4b_f64", 4)])
def test_mfma_f64(name, blocks):
    m = n = 16 if blocks == 1 else 4
    rng = np.random.default_rng(blocks)
    A = rng.standard_normal((blocks, m, 4))
    B = rng.standard_normal((blocks, 4, n))
    C = rng.standard_normal((blocks, m, n))
    a = np.zeros(64)
    b = np.zeros(64)
    for bl in range(blocks):
        for kk in range(4):
            for i in range(m):
                a[16 * kk + m * bl + i] = A[bl, i, kk]
                b[16 * kk + n * bl + i] = B[bl, kk, i]
    pairs = blocks * m * n // 64
    c = np.zeros((pairs, 64))
    where = {}
    for bl in range(blocks):
        for i in range(m):
            for j in range(n):
                spot = (i // 4, 16 * (i % 4) + j) if blocks == 1 else (0, 16 * i + 4 * bl + j)
                c[spot] = C[bl, i, j]
                where[(bl, i, j)] = spot
    v = np.concatenate([f64_rows(a), f64_rows(b)] + [f64_rows(row) for row in c])
    out = run_asm(f"  {name} v[4:{3 + 2 * pairs}], v[0:1], v[2:3], v[4:{3 + 2 * pairs}]", v).vgprs[0]
    got = [rows_f64(out[4 + 2 * p:6 + 2 * p]) for p in range(pairs)]
    for (bl, i, j), (p, lane) in where.items():
        from fractions import Fraction
        exact = sum(Fraction(A[bl, i, kk]) * Fraction(B[bl, kk, j]) for kk in range(4)) + Fraction(C[bl, i, j])
        assert got[p][lane] == float(exact)   # rounded once


# --- calls and `.set` descriptors ---------------------------------------------------------

CALL_IR = """
declare i32 @llvm.amdgcn.workitem.id.x()
define internal float @square_plus_one(float %x) noinline norecurse nounwind {
  %y = fmul float %x, %x
  %z = fadd float %y, 1.0
  ret float %z
}
define amdgpu_kernel void @caller(ptr addrspace(1) %p) norecurse nounwind {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %q = getelementptr float, ptr addrspace(1) %p, i32 %t
  %x = load float, ptr addrspace(1) %q
  %r = call float @square_plus_one(float %x)
  %r2 = call float @square_plus_one(float %r)
  store float %r2, ptr addrspace(1) %q
  ret void
}
"""


def test_real_call_with_swappc_and_setpc_return():
    asm = compile_ir(CALL_IR)
    assert "s_swappc_b64" in asm and "@rel32@lo" in asm
    x = torch.linspace(-2, 2, 64)
    expect = (x * x + 1) ** 2 + 1
    emu.launch(asm, "caller", 1, 64, [x])
    torch.testing.assert_close(x, expect, rtol=0, atol=0)


def test_descriptor_written_as_set_symbol_expressions():
    text = asm_text("  v_add_u32 v0, v0, 1", 1)
    text = text.replace("  .amdhsa_next_free_vgpr 512", "  .amdhsa_next_free_vgpr max(totalnumvgprs(run_asm.num_agpr, run_asm.num_vgpr), 1, 0)")
    text = text.replace("  .amdhsa_accum_offset 256",
                        "  .amdhsa_accum_offset ((((((alignto(max(1, run_asm.num_vgpr), 4))/4)-1)&(~65536))&63)+1)*4")
    text += "\n  .set run_asm.num_vgpr, max(255, .Lhelper.num_vgpr)\n  .set .Lhelper.num_vgpr, 256\n  .set run_asm.num_agpr, 256\n"
    from rocke.emu.asm import parse_program
    kernel = parse_program(text).kernels["run_asm"]
    assert kernel.descriptor["amdhsa_next_free_vgpr"] == 512
    assert kernel.descriptor["amdhsa_accum_offset"] == 256
    v = torch.zeros(64, dtype=torch.int32)
    s = torch.zeros(64, dtype=torch.int32)
    emu.launch(text, "run_asm", 1, 64, [v, s])
    assert (v == 1).all()
    with pytest.raises(ValueError, match="undefined symbol 'run_asm.num_sgpr'"):
        parse_program(text.replace("  .amdhsa_next_free_sgpr 48", "  .amdhsa_next_free_sgpr run_asm.num_sgpr"))


# Values of LLVM's MC expressions as llvm-mc 19 computes them (each assembled as
# `.set e, <expression>` for gfx942 and read back from the object's symbol table): GNU
# precedence (|| < && < comparisons < + - < | & ^ ! < * / % << >>), comparisons -1 for true,
# && / || 1 for true, C division, logical >>, infix `!` = or-not.
LLVM_MC_VALUES = [
    ('3 > 2', -1),
    ('2 > 3', 0),
    ('1 + 2 > 2', -1),
    ('0 || 5', 1),
    ('0 && 5', 0),
    ('3 && 0 || 2', 1),
    ('!0', 1),
    ('!7', 0),
    ('!0 + 1', 2),
    ('1 | 2 + 4', 7),
    ('6 & 3 + 1', 3),
    ('1 + 2 * 3', 7),
    ('2 * 3 << 1', 12),
    ('1 << 2 + 1', 5),
    ('5 - 3 - 1', 1),
    ('-7 / 2', -3),
    ('-7 % 2', -1),
    ('7 / -2', -3),
    ('~0 & 255', 255),
    ('1 == 1', -1),
    ('1 != 1', 0),
    ('2 <= 2', -1),
    ('2 >= 3', 0),
    ('1 < 2 == -1', -1),
    ('(16 > 0) || 0', 1),
    ('((0 > 0) || 0) || 1', 1),
    ('1 ^ 3 | 4', 6),
    ('5 !2', -3),
    ('-1 >> 60', 15),
    ('3 < 5 && 5 < 3', 0),
    ('max(1, 3 > 2) + 1', 2),
    ('1 <> 2', -1),
    ('or(2, 4)', 6),
    ('max(-1, 1)', 1),
    ('or(0, 0, 8)', 8),
    ('alignto(5, 4)', 8),
]


@pytest.mark.parametrize("expression, value", LLVM_MC_VALUES)
def test_set_expressions_evaluate_as_llvm_mc_does(expression, value):
    from rocke.emu.asm import evaluate_expression
    assert evaluate_expression(expression, {}) == value


@pytest.mark.parametrize("expression, message", [
    ("1 / 0", "division by zero"), ("3 % (2 - 2)", "division by zero"),
    ("1 <<", "malformed expression"), ("(1 + 2", "expected '\\)'"), ("1 2", "unexpected 2"),
    ("a.b + 1", "undefined symbol 'a.b'"), ("1 << 64", "shift by 64"), ("1 @ 2", "cannot read"),
])
def test_bad_set_expressions_are_refused_with_the_reason(expression, message):
    from rocke.emu.asm import evaluate_expression
    with pytest.raises(ValueError, match=message):
        evaluate_expression(expression, {})


def test_descriptor_with_comparison_and_logical_operators_runs():
    """A descriptor in the form LLVM prints for kernels with calls / a dynamic stack
    (ScratchEnable = (scratch blocks > 0) || dynamic call stack; AMDGPUAsmPrinter), over `.set`
    symbols defined after the descriptor: parsed, and the kernel runs."""
    from rocke.emu.asm import parse_program
    text = asm_text("  v_add_u32 v0, v0, 1", 1)
    text = text.replace(
        "  .amdhsa_next_free_vgpr 512",
        "  .amdhsa_next_free_vgpr 512\n"
        "  .amdhsa_uses_dynamic_stack ((run_asm.has_dyn_sized_stack|run_asm.has_recursion))&1\n"
        "  .amdhsa_enable_private_segment (((run_asm.private_seg_size+3)/4>0)||"
        "(run_asm.has_dyn_sized_stack|run_asm.has_recursion))&&!run_asm.uses_flat_scratch")
    symbols = ("\n  .set run_asm.private_seg_size, 0+max(.Lhelper.private_seg_size)"
               "\n  .set .Lhelper.private_seg_size, {size}"
               "\n  .set run_asm.has_dyn_sized_stack, or(0, 0)"
               "\n  .set run_asm.has_recursion, 0\n  .set run_asm.uses_flat_scratch, 0\n")
    kernel = parse_program(text + symbols.format(size=0)).kernels["run_asm"]
    assert kernel.descriptor["amdhsa_enable_private_segment"] == 0
    assert kernel.descriptor["amdhsa_uses_dynamic_stack"] == 0
    kernel = parse_program(text + symbols.format(size=16)).kernels["run_asm"]
    assert kernel.descriptor["amdhsa_enable_private_segment"] == 1
    v = torch.zeros(64, dtype=torch.int32)
    s = torch.zeros(64, dtype=torch.int32)
    emu.launch(text + symbols.format(size=0), "run_asm", 1, 64, [v, s])
    assert (v == 1).all()


def test_llvm_22_descriptor_of_an_indirect_call_parses():
    """Real LLVM 22 output (llvmlite): a kernel calling through a function pointer gets its
    register counts as expressions over `.set` symbols defined after the descriptor."""
    from rocke.emu.asm import parse_program
    asm = compile_ir("""
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @ind(ptr addrspace(1) %out, ptr addrspace(1) %fp, i32 %n) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %f = load ptr, ptr addrspace(1) %fp
  %v = call i32 %f(i32 %n)
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %p
  ret void
}
define i32 @twice(i32 %n) noinline {
  %x = mul i32 %n, 2
  ret i32 %x
}
""")
    assert "max(totalnumvgprs(ind.num_agpr, ind.num_vgpr)" in asm
    import re
    num_vgpr = int(re.search(r"\.set ind\.num_vgpr, max\((\d+), amdgpu\.max_num_vgpr\)", asm)[1])
    callee = int(re.search(r"\.set amdgpu\.max_num_vgpr, (\d+)", asm)[1])
    d = parse_program(asm).kernels["ind"].descriptor
    vgprs = max(num_vgpr, callee)
    assert d["amdhsa_next_free_vgpr"] == vgprs
    assert d["amdhsa_accum_offset"] == -(-vgprs // 4) * 4
    assert d["amdhsa_uses_dynamic_stack"] == 1 and d["amdhsa_enable_private_segment"] == 1


def test_f32_i8_f64_mfma_names_match_what_llvm_prints():
    from rocke.emu.mfma import MFMA_OPS
    families = [("f32.32x32x1f32", "float", "<32 x float>"), ("f32.16x16x1f32", "float", "<16 x float>"),
                ("f32.4x4x1f32", "float", "<4 x float>"), ("f32.32x32x2f32", "float", "<16 x float>"),
                ("f32.16x16x4f32", "float", "<4 x float>"), ("i32.32x32x4i8", "i32", "<32 x i32>"),
                ("i32.16x16x4i8", "i32", "<16 x i32>"), ("i32.4x4x4i8", "i32", "<4 x i32>"),
                ("i32.32x32x16.i8", "i64", "<16 x i32>"), ("i32.16x16x32.i8", "i64", "<4 x i32>"),
                ("f64.16x16x4f64", "double", "<4 x double>"), ("f64.4x4x4f64", "double", "double")]
    lines = []
    for index, (suffix, operand, acc) in enumerate(families):
        lines.append(f"declare {acc} @llvm.amdgcn.mfma.{suffix}({operand}, {operand}, {acc}, i32, i32, i32)")
        lines.append(f"define amdgpu_kernel void @k{index}(ptr addrspace(1) %p, {operand} %a, {operand} %b) {{\n"
                     f"  %c = load {acc}, ptr addrspace(1) %p\n"
                     f"  %d = call {acc} @llvm.amdgcn.mfma.{suffix}({operand} %a, {operand} %b, {acc} %c,"
                     f" i32 0, i32 0, i32 0)\n  store {acc} %d, ptr addrspace(1) %p\n  ret void\n}}")
    import re
    asm = compile_ir("\n".join(lines))
    printed = re.findall(r"\b(v_mfma_\w+) [av]\[(\d+):(\d+)\], [av]\[?(\d+)(?::(\d+))?", asm)
    assert len({p[0] for p in printed}) == len(families)
    for name, first, last, a_first, a_last in printed:
        op = MFMA_OPS[name]
        assert int(last) - int(first) + 1 == op.c_regs, name
        assert (int(a_last) - int(a_first) + 1 if a_last else 1) == op.a_regs, name


def test_fp16_ovfl_mode_saturates_fp8_and_f16_overflow():
    x = np.array([1e9, -1e9, np.inf, np.nan, 250.0, 1.0, 70000.0, -70000.0] * 8, np.float32)
    out = run_asm("""
  v_cvt_pk_fp8_f32 v1, v0, v0
  v_cvt_f16_f32 v2, v0
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 23, 1), 1
  v_cvt_pk_fp8_f32 v3, v0, v0
  v_cvt_pk_bf8_f32 v4, v0, v0
  v_cvt_f16_f32 v5, v0
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 23, 1), 0
  v_cvt_f16_f32 v6, v0""", f32_row(x)[None]).vgprs[0]
    # without FP16_OVFL: fp8 overflow is the NaN code, f16 overflow is inf
    np.testing.assert_array_equal(out[1][:8] & 0xFF, [0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x80, 0x80])
    np.testing.assert_array_equal(as_f16(out[2][:8]), np.array([np.inf, -np.inf, np.inf, np.nan, 250, 1,
                                                                  np.inf, -np.inf], np.float16))
    # with it: finite overflow saturates to +-max; infinity and NaN stay non-finite
    np.testing.assert_array_equal(out[3][:8] & 0xFF, [0x7F, 0xFF, 0x80, 0x80, 0x7F, 0x40, 0x7F, 0xFF])
    # bf8 (e5m2 fnuz, bias 16): 250 rounds to 256 = 0x60; max 57344 = 0x7F
    np.testing.assert_array_equal(out[4][:8] & 0xFF, [0x7F, 0xFF, 0x80, 0x80, 0x60, 0x40, 0x7F, 0xFF])
    np.testing.assert_array_equal(as_f16(out[5][:8]), np.array([65504, -65504, np.inf, np.nan, 250, 1,
                                                                  65504, -65504], np.float16))
    np.testing.assert_array_equal(as_f16(out[6][:8]), as_f16(out[2][:8]))   # bit cleared again


def as_f16(words):
    return (np.asarray(words) & 0xFFFF).astype(np.uint16).view(np.float16)


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_round_mode_16_64_on_f64_and_f16_arithmetic(mode):
    from fractions import Fraction
    rng = np.random.default_rng(10 + mode)
    a = rng.standard_normal(64) * 1e3
    b = rng.standard_normal(64) * 1e-9
    h = rng.standard_normal(64).astype(np.float16)
    g = (rng.standard_normal(64) * 1e-3).astype(np.float16)
    v = np.concatenate([f64_rows(a), f64_rows(b), (h.view(np.uint16).astype(np.uint32) |
                                                   (g.view(np.uint16).astype(np.uint32) << 16))[None],
                        np.zeros((6, 64), np.uint32)])
    out = run_asm(f"""
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 2, 2), {mode}
  v_add_f64 v[6:7], v[0:1], v[2:3]
  v_mul_f64 v[8:9], v[0:1], v[2:3]
  v_lshrrev_b32 v5, 16, v4
  v_add_f16 v10, v4, v5""", v).vgprs[0]

    def directed(exact, dtype):
        r = dtype(float(exact))
        if Fraction(float(r)) == exact:
            return r
        low = r if Fraction(float(r)) < exact else np.nextafter(r, dtype(-np.inf))
        high = np.nextafter(low, dtype(np.inf))
        if mode == 1:
            return high
        if mode == 2:
            return low
        return low if exact > 0 else high
    for lane in range(64):
        fa, fb = Fraction(a[lane]), Fraction(b[lane])
        assert rows_f64(out[6:8])[lane] == directed(fa + fb, np.float64)
        assert rows_f64(out[8:10])[lane] == directed(fa * fb, np.float64)
        exact16 = Fraction(float(h[lane])) + Fraction(float(g[lane]))
        assert as_f16(out[10])[lane] == directed(exact16, np.float16)


def test_s_call_b64_and_return_through_setpc():
    v = np.arange(64, dtype=np.uint32)[None]
    res = run_asm("""
  s_call_b64 s[30:31], .Lfn
  v_add_u32 v0, v0, 100
  s_branch .Ldone
.Lfn:
  v_add_u32 v0, v0, 5
  s_setpc_b64 s[30:31]
.Ldone:
  s_getpc_b64 s[32:33]""", v)
    np.testing.assert_array_equal(res.vgprs[0, 0], np.arange(64) + 105)
    ret = int(res.sgprs[0, 14]) | (int(res.sgprs[0, 15]) << 32)
    here = int(res.sgprs[0, 16]) | (int(res.sgprs[0, 17]) << 32)
    assert 0 < here - ret < 64    # both are code addresses of this kernel, the return one earlier


FDIV_FTZ_IR = """
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @fdiv_ftz(ptr addrspace(1) %p) #0 {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %q = getelementptr float, ptr addrspace(1) %p, i32 %t
  %x = load float, ptr addrspace(1) %q
  %y = fdiv float 3.0, %x
  store float %y, ptr addrspace(1) %q
  ret void
}
attributes #0 = { "denormal-fp-math-f32"="preserve-sign,preserve-sign" }
"""


def test_fdiv_under_flush_mode_switches_denormals_on_around_the_expansion():
    """LLVM's IEEE f32 division in a flush-denormals kernel turns MODE.FP_DENORM on with
    s_setreg_imm32_b32 for the div_scale/fmas steps and off again: quotients stay correctly
    rounded, and a denormal divisor is flushed (3 / 0 = inf)."""
    asm = compile_ir(FDIV_FTZ_IR)
    assert asm.count("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2)") == 2
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(64) * 10.0 ** rng.integers(-30, 30, 64)).astype(np.float32)
    x[:3] = [1e-40, 3.0, -7.0]
    data = torch.tensor(x)
    emu.launch(asm, "fdiv_ftz", 1, 64, [data])
    expected = (np.float64(3.0) / x[3:].astype(np.float64)).astype(np.float32)
    expected = np.where(np.abs(expected) < np.finfo(np.float32).tiny, np.float32(0) * expected, expected)
    np.testing.assert_array_equal(data.numpy()[3:], expected)
    assert data[0].item() == float("inf") and data[1].item() == 1.0 and data[2].item() == np.float32(3 / -7.0)


def test_mode_saved_with_getreg_and_restored_with_setreg():
    x = np.full(64, 1e-40, np.float32)
    out = run_asm("""
  s_getreg_b32 s20, hwreg(HW_REG_MODE, 4, 2)
  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 0
  v_add_f32 v1, v0, 0
  s_setreg_b32 hwreg(HW_REG_MODE, 4, 2), s20
  v_add_f32 v2, v0, 0""", f32_row(x)[None])
    got = out.vgprs[0].view(np.float32)
    assert (got[1] == 0).all() and (got[2] == np.float32(1e-40)).all()
    assert out.sgprs[0, 4] == 3   # denormals were on before the switch
