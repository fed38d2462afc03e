"""Spot checks of rocke.emu.semantics against numpy / hand-derived values."""

from fractions import Fraction

import numpy as np
import torch

from rocke.emu.semantics import SALU_OPS, VALU_CLAMP_OPS, VALU_OPS, AluOp

NAN = np.float32(np.nan)


def v(name, *args):
    return VALU_OPS[name].fn(*args)


def s(name, *args):
    return SALU_OPS[name].fn(*args)


def f32(*values):
    return np.array(values, dtype=np.float32)


def u32(*values):
    return np.array(values, dtype=np.uint64).astype(np.uint32)


def i32(*values):
    return np.array(values, dtype=np.int32)


def bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# --- table shape -----------------------------------------------------------------------

def test_tables_follow_the_contract():
    types = {"f32", "b32", "u32", "i32", "f16", "b16", "u16", "i16", "f64", "b64", "u64", "i64",
             "pk_f16", "pk_i16", "pk_u16", "mask", "u8x4", "pk_f32"}
    for table in (VALU_OPS, SALU_OPS):
        for name, op in table.items():
            assert isinstance(op, AluOp)
            assert not name.endswith(("_e32", "_e64", "_sdwa", "_dpp")), name
            assert set(op.dsts + op.srcs) <= types, name
            assert len(op.implicit_srcs) <= len(op.srcs)
    assert VALU_OPS["v_cndmask_b32"].dsts == ("b32",)
    assert VALU_OPS["v_cndmask_b32"].srcs == ("b32", "b32", "mask")
    assert VALU_OPS["v_cmpx_lt_f32"].dsts == ("mask",)
    assert VALU_OPS["v_add_co_u32"].dsts == ("u32", "mask")
    assert SALU_OPS["s_cmp_lt_i32"].dsts == () and SALU_OPS["s_cmp_lt_i32"].writes_scc
    assert not VALU_OPS["v_and_b32"].float_mods and VALU_OPS["v_add_f32"].float_mods


# --- floating point --------------------------------------------------------------------

def test_min_max_nan_and_signed_zero():
    a = f32(np.nan, 1.0, np.nan, -0.0, 0.0, -np.inf)
    b = f32(2.0, np.nan, np.nan, 0.0, -0.0, 3.0)
    mx = v("v_max_f32", a, b)
    mn = v("v_min_f32", a, b)
    np.testing.assert_array_equal(mx[[0, 1, 5]], f32(2.0, 1.0, 3.0))
    np.testing.assert_array_equal(mn[[0, 1, 5]], f32(2.0, 1.0, -np.inf))
    assert np.isnan(mx[2]) and np.isnan(mn[2])
    assert not np.signbit(mx[3]) and not np.signbit(mx[4])
    assert np.signbit(mn[3]) and np.signbit(mn[4])
    assert mx.dtype == np.float32


def test_min_max_quiet_a_signaling_nan():
    signaling = u32(0x7F800001).view(np.float32)
    for name in ("v_max_f32", "v_min_f32"):
        result = v(name, signaling, f32(1.0))
        assert bits(result)[0] == 0x7FC00001  # the same NaN, made quiet (canonicalize relies on it)
        result = v(name, f32(1.0), signaling)
        assert bits(result)[0] == 0x7FC00001


def test_legacy_multiply_and_pack():
    np.testing.assert_array_equal(v("v_mul_legacy_f32", f32(0, np.inf, 2), f32(np.inf, 0, 3)), f32(0, 0, 6))
    packed = v("v_pack_b32_f16", np.array([1.5], np.float16), np.array([-2], np.float16))
    np.testing.assert_array_equal(packed, u32(0xC0003E00))  # f16 -2.0 = 0xC000, 1.5 = 0x3E00


def test_med3_f32():
    np.testing.assert_array_equal(v("v_med3_f32", f32(1, 5, 3), f32(2, 4, 9), f32(3, 1, 6)), f32(2, 4, 6))
    # Any NaN: the ISA returns min3 with NaN operands ignored.
    np.testing.assert_array_equal(v("v_med3_f32", f32(np.nan), f32(4), f32(2)), f32(2))


def test_fma_f32_rounds_once():
    # (1+2^-12)^2 + 2^-60 = 1 + 2^-11 + 2^-24 + 2^-60: just above a tie in f32 -> rounds up.
    # Computing in plain float64 loses 2^-60 and rounds the tie to even (down).
    a = f32(1 + 2.0 ** -12)
    c = f32(2.0 ** -60)
    expected = f32(1 + 2.0 ** -11 + 2.0 ** -23)
    np.testing.assert_array_equal(v("v_fma_f32", a, a, c), expected)
    np.testing.assert_array_equal(v("v_fmac_f32", a, a, c), expected)
    assert VALU_OPS["v_fmac_f32"].implicit_srcs == ("dst",)
    # Unfused mad rounds the product first: 1 + 2^-11 + 2^-24 -> 1 + 2^-11, + 2^-60 -> 1 + 2^-11.
    np.testing.assert_array_equal(v("v_mad_f32", a, a, c), f32(1 + 2.0 ** -11))
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
    exact = x.astype(np.float64) * y + z
    np.testing.assert_allclose(v("v_fma_f32", x, y, z), exact.astype(np.float32), rtol=0, atol=0)


def _round_to_f32(exact):
    """Fraction -> nearest float32, ties to even, by exact comparison with both neighbours."""
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess,
                  np.nextafter(guess, np.float32(np.inf))]
    best = min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact),
                                          int(np.array(c).view(np.uint32)) & 1))
    return np.float32(best)


def test_fma_f32_exact_on_mixed_lanes():
    """Lanes that need the exact path (ties after an inexact float64 sum, float32 subnormal
    results) next to ordinary lanes, against exact rational arithmetic."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal(512).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    c = rng.standard_normal(512).astype(np.float32)
    # (1 + k 2^-12)^2 + tiny: float64 drops `tiny` and lands on a float32 tie
    k = rng.integers(1, 2 ** 11, 128)
    a[:128] = b[:128] = (1 + k * 2.0 ** -12).astype(np.float32)
    c[:128] = np.float32(2.0 ** -60) * rng.choice([-1, 1], 128).astype(np.float32)
    # results in float32's subnormal range
    a[128:192] = (rng.standard_normal(64) * 2.0 ** -70).astype(np.float32)
    b[128:192] = (rng.standard_normal(64) * 2.0 ** -70).astype(np.float32)
    c[128:192] = (rng.integers(-8, 9, 64) * 2.0 ** -149).astype(np.float32)
    got = v("v_fma_f32", a, b, c)
    for i in range(512):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        if exact == 0:
            continue
        assert bits(got[i]) == bits(_round_to_f32(exact)), i


def test_perm_with_a_different_selector_per_lane():
    s0, s1 = u32(0x44332211, 0x01020304, 0xDEADBEEF), u32(0x88776655, 0x8899AABB, 0x00FF7F80)
    selector = u32(0x03020100, 0x0C0D0400, 0x0B0A0908)
    data = [(int(hi) << 32) | int(lo) for hi, lo in zip(s0, s1)]

    def pick(word, sel):
        if sel < 8:
            return (word >> (8 * sel)) & 0xFF
        if sel < 12:
            return 0xFF if (word >> (16 * (sel - 8) + 15)) & 1 else 0
        return 0 if sel == 12 else 0xFF
    expected = [sum(pick(word, (int(sel) >> (8 * i)) & 0xFF) << (8 * i) for i in range(4))
                for word, sel in zip(data, selector)]
    assert v("v_perm_b32", s0, s1, selector).tolist() == expected


def test_fdiv_expansion_is_correctly_rounded():
    """LLVM's gfx942 fdiv sequence (div_scale, rcp, fma chain, div_fmas, div_fixup) == IEEE division."""
    rng = np.random.default_rng(5)
    size = 20000
    def sample():
        mant = rng.uniform(1, 2, size) * rng.choice([-1, 1], size)
        return (mant * np.exp2(rng.integers(-149, 128, size).astype(np.float64))).astype(np.float32)
    num, den = sample(), sample()
    specials = f32(0, -0.0, 1, np.inf, -np.inf, np.nan, 1e-45, 3e38, 1e-40, 7)
    num = np.concatenate([num, np.repeat(specials, len(specials))])
    den = np.concatenate([den, np.tile(specials, len(specials))])

    den_scaled, _ = v("v_div_scale_f32", den, den, num)
    num_scaled, vcc = v("v_div_scale_f32", num, den, num)
    rcp = v("v_rcp_f32", den_scaled)
    err = v("v_fma_f32", -den_scaled, rcp, np.ones_like(num))
    rcp = v("v_fma_f32", err, rcp, rcp)
    quot = v("v_mul_f32", num_scaled, rcp)
    rem = v("v_fma_f32", -den_scaled, quot, num_scaled)
    quot = v("v_fma_f32", rem, rcp, quot)
    rem = v("v_fma_f32", -den_scaled, quot, num_scaled)
    fmas = v("v_div_fmas_f32", rem, rcp, quot, vcc)
    result = v("v_div_fixup_f32", fmas, den, num)

    with np.errstate(all="ignore"):
        expected = num / den
    both_nan = np.isnan(result) & np.isnan(expected)
    mismatch = ~both_nan & (bits(result) != bits(expected))
    assert not mismatch.any(), list(zip(num[mismatch][:5], den[mismatch][:5], result[mismatch][:5]))


def test_f64_fdiv_expansion_is_correctly_rounded():
    """LLVM's gfx942 f64 fdiv sequence == IEEE float64 division, including huge/tiny quotients."""
    rng = np.random.default_rng(8)
    size = 600
    num = rng.uniform(1, 2, size) * rng.choice([-1, 1], size) * np.exp2(rng.integers(-1074, 1024, size).astype(float))
    den = rng.uniform(1, 2, size) * np.exp2(rng.integers(-1074, 1024, size).astype(float))
    den_scaled, _ = v("v_div_scale_f64", den, den, num)
    num_scaled, vcc = v("v_div_scale_f64", num, den, num)
    rcp = v("v_rcp_f64", den_scaled)
    for _ in range(2):
        err = v("v_fma_f64", -den_scaled, rcp, np.ones_like(num))
        rcp = v("v_fmac_f64", rcp, err, rcp)
    quot = v("v_mul_f64", num_scaled, rcp)
    rem = v("v_fma_f64", -den_scaled, quot, num_scaled)
    result = v("v_div_fixup_f64", v("v_div_fmas_f64", rem, rcp, quot, vcc), den, num)
    with np.errstate(all="ignore"):
        expected = num / den
    np.testing.assert_array_equal(result.view(np.uint64), expected.view(np.uint64))


def test_transcendentals():
    np.testing.assert_array_equal(v("v_exp_f32", f32(3, -1, 0)), f32(8, 0.5, 1))
    np.testing.assert_array_equal(v("v_log_f32", f32(8, 1, 0)), f32(3, 0, -np.inf))
    np.testing.assert_array_equal(v("v_rcp_f32", f32(4, 0, -0.0)), f32(0.25, np.inf, -np.inf))
    np.testing.assert_array_equal(v("v_rsq_f32", f32(16)), f32(0.25))
    np.testing.assert_array_equal(v("v_sqrt_f32", f32(2.25)), f32(1.5))
    np.testing.assert_allclose(v("v_sin_f32", f32(0.25, 0.5)), f32(1, 0), atol=1e-7)  # revolutions
    np.testing.assert_allclose(v("v_cos_f32", f32(0.5)), f32(-1), atol=1e-7)
    assert v("v_exp_f32", f32(-130))[0] == 0.0  # subnormal result flushed
    np.testing.assert_array_equal(v("v_exp_f16", np.array([2.0], np.float16)), np.array([4.0], np.float16))


def test_ldexp_frexp_fract():
    np.testing.assert_array_equal(v("v_ldexp_f32", f32(1.5), i32(4)), f32(24))
    x = f32(24, -0.75, np.inf)
    np.testing.assert_array_equal(v("v_frexp_mant_f32", x)[:2], f32(0.75, -0.75))
    np.testing.assert_array_equal(v("v_frexp_exp_i32_f32", x), i32(5, 0, 0))
    fr = v("v_fract_f32", f32(2.75, -0.25, -1e-10))
    np.testing.assert_array_equal(fr[:2], f32(0.75, 0.75))
    assert bits(fr[2]) == 0x3F7FFFFF  # clamped below 1.0


def test_cmp_float_ordered_unordered():
    a, b = f32(1, np.nan, 2), f32(2, 1, 2)
    np.testing.assert_array_equal(v("v_cmp_lt_f32", a, b), [True, False, False])
    np.testing.assert_array_equal(v("v_cmp_nge_f32", a, b), [True, True, False])
    np.testing.assert_array_equal(v("v_cmp_u_f32", a, b), [False, True, False])
    np.testing.assert_array_equal(v("v_cmp_neq_f32", a, b), [True, True, False])
    np.testing.assert_array_equal(v("v_cmp_lg_f32", a, b), [True, False, False])
    np.testing.assert_array_equal(v("v_cmpx_le_i32", i32(-1, 3), i32(0, 2)), [True, False])


def test_cmp_class():
    x = np.concatenate([u32(0x7F800001).view(np.float32), f32(np.nan, -np.inf, -1, -1e-40, -0.0, 0.0,
                                                               1e-40, 1, np.inf)])
    for index in range(10):
        got = v("v_cmp_class_f32", x, np.full(x.shape, 1 << index, np.uint32))
        assert list(np.flatnonzero(got)) == [index], index


def test_float_to_int_conversions_saturate():
    x = f32(3e9, -3e9, np.nan, -1.7, 1.7, np.inf)
    np.testing.assert_array_equal(v("v_cvt_i32_f32", x), i32(2**31 - 1, -2**31, 0, -1, 1, 2**31 - 1))
    np.testing.assert_array_equal(v("v_cvt_u32_f32", f32(-1, 5e9, np.nan, 7.9)), u32(0, 2**32 - 1, 0, 7))
    np.testing.assert_array_equal(v("v_cvt_f32_u32", u32(2**32 - 1)), f32(4294967296.0))
    np.testing.assert_array_equal(v("v_cvt_f32_i32", i32(-16777217)), f32(-16777216.0))


def test_cvt_pkrtz_rounds_toward_zero():
    x = f32(1 + 2.0 ** -11 + 2.0 ** -13, -(1 + 2.0 ** -11 + 2.0 ** -13), 1e6, np.inf)
    packed = v("v_cvt_pkrtz_f16_f32", x, x)
    assert packed.shape == (4, 2) and packed.dtype == np.float16
    np.testing.assert_array_equal(packed[:, 0], np.array([1, -1, 65504, np.inf], np.float16))
    # Round-to-nearest would give 1 + 2^-10.
    assert np.float16(x[0]) == np.float16(1 + 2.0 ** -10)


def test_fp8_pack_and_unpack():
    a, b = f32(1.0, 300.0, np.nan), f32(-2.0, 0.5, 1.0)
    packed = v("v_cvt_pk_fp8_f32", a, b)
    expected_lo = torch.from_numpy(a).to(torch.float8_e4m3fnuz).view(torch.uint8).numpy()
    expected_hi = torch.from_numpy(b).to(torch.float8_e4m3fnuz).view(torch.uint8).numpy()
    np.testing.assert_array_equal(packed, expected_lo.astype(np.uint16) | (expected_hi.astype(np.uint16) << 8))
    assert packed[1] & 0xFF == 0x80  # overflow without clamp -> NaN code
    assert VALU_CLAMP_OPS["v_cvt_pk_fp8_f32"].fn(a, b)[1] & 0xFF == 0x7F  # clamp saturates to 240
    bf8 = v("v_cvt_pk_bf8_f32", f32(1e6), f32(-1.0))
    assert bf8[0] == (0x80 | (torch.tensor([-1.0]).to(torch.float8_e5m2fnuz).view(torch.uint8).item() << 8))
    codes = np.arange(256, dtype=np.uint32)
    ref = torch.from_numpy(codes.astype(np.uint8)).view(torch.float8_e4m3fnuz).float().numpy()
    np.testing.assert_array_equal(v("v_cvt_f32_fp8", codes | 0xABCD00), ref)
    pair = v("v_cvt_pk_f32_bf8", u32(0x3C40))
    ref_bf8 = torch.tensor([0x40, 0x3C], dtype=torch.uint8).view(torch.float8_e5m2fnuz).float().numpy()
    np.testing.assert_array_equal(pair[0], ref_bf8)


def test_packed_f16_and_f32():
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal((4, 64, 2)).astype(np.float16) for _ in range(3))
    np.testing.assert_array_equal(v("v_pk_add_f16", a, b), (a.astype(np.float32) + b).astype(np.float16))
    np.testing.assert_array_equal(v("v_pk_mul_f16", a, b), (a.astype(np.float32) * b).astype(np.float16))
    np.testing.assert_array_equal(v("v_pk_fma_f16", a, b, c), (a.astype(np.float64) * b + c).astype(np.float16))
    x, y = (rng.standard_normal((4, 64, 2)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(v("v_pk_mul_f32", x, y), x * y)
    # Element 0 of each source is its op_sel-selected register: D = (src0[op_sel[0]], src1[op_sel[1]]).
    np.testing.assert_array_equal(v("v_pk_mov_b32", x, y), np.stack([x[..., 0], y[..., 0]], -1))
    dot = v("v_dot2_f32_f16", a, b, x[..., 0])
    np.testing.assert_allclose(dot, (a.astype(np.float64) * b).sum(-1) + x[..., 0], rtol=1e-6)


# --- integer VALU ----------------------------------------------------------------------

def test_mul_hi_and_mad_u64():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2**64, 500, dtype=np.uint64)
    hi = v("v_mul_hi_u32", a, b)
    assert all(int(h) == (int(x) * int(y)) >> 32 for h, x, y in zip(hi, a, b))
    shi = v("v_mul_hi_i32", a.view(np.int32), b.view(np.int32))
    assert all(int(h) == (int(x) * int(y)) >> 32 for h, x, y in zip(shi, a.view(np.int32), b.view(np.int32)))
    lo, carry = v("v_mad_u64_u32", a, b, c)
    for l, k, x, y, z in zip(lo, carry, a, b, c):
        total = int(x) * int(y) + int(z)
        assert int(l) == total % 2**64 and bool(k) == (total >= 2**64)


def test_carry_chain_adds_64_bit_values():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 2**64, 200, dtype=np.uint64)
    y = rng.integers(0, 2**64, 200, dtype=np.uint64)
    lo, carry = v("v_add_co_u32", x.astype(np.uint32), y.astype(np.uint32))
    hi, _ = v("v_addc_co_u32", (x >> np.uint64(32)).astype(np.uint32), (y >> np.uint64(32)).astype(np.uint32), carry)
    np.testing.assert_array_equal((hi.astype(np.uint64) << np.uint64(32)) | lo, x + y)
    lo, borrow = v("v_sub_co_u32", x.astype(np.uint32), y.astype(np.uint32))
    hi, _ = v("v_subb_co_u32", (x >> np.uint64(32)).astype(np.uint32), (y >> np.uint64(32)).astype(np.uint32), borrow)
    np.testing.assert_array_equal((hi.astype(np.uint64) << np.uint64(32)) | lo, x - y)


def test_bfe_bfi_alignbit_perm():
    value = u32(0xF0F0A5C3)
    assert v("v_bfe_u32", value, u32(4), u32(8))[0] == 0x5C
    assert v("v_bfe_i32", value.view(np.int32), u32(4), u32(8))[0] == 0x5C  # top field bit clear
    assert v("v_bfe_i32", value.view(np.int32), u32(0), u32(8))[0] == 0xC3 - 256  # top field bit set
    assert v("v_bfe_u32", value, u32(0), u32(0))[0] == 0
    assert v("v_bfi_b32", u32(0xFFFF0000), u32(0x12345678), u32(0x9ABCDEF0))[0] == 0x1234DEF0
    assert v("v_alignbit_b32", u32(0x11223344), u32(0x55667788), u32(8))[0] == 0x44556677
    s0, s1 = u32(0x44332211), u32(0x88776655)
    assert v("v_perm_b32", s0, s1, u32(0x03020100))[0] == 0x88776655
    assert v("v_perm_b32", s0, s1, u32(0x07060504))[0] == 0x44332211
    assert v("v_perm_b32", s0, s1, u32(0x0C0D0400))[0] == 0x00FF1155
    # Selectors 8..11 replicate the sign bit of bytes 1, 3, 5, 7 (0x66, 0x88, 0x22, 0x44).
    assert v("v_perm_b32", s0, s1, u32(0x0B0A0908))[0] == 0x0000FF00
    assert v("v_lshl_or_b32", u32(3), u32(4), u32(1))[0] == 0x31
    assert v("v_lshlrev_b32", u32(33), u32(1))[0] == 2  # shift amount uses 5 bits
    assert v("v_lshlrev_b64", u32(65), np.array([1], np.uint64))[0] == 2  # 6 bits
    assert v("v_ashrrev_i32", u32(4), i32(-64))[0] == -4
    assert v("v_bcnt_u32_b32", u32(0xF0F0), u32(3))[0] == 11
    np.testing.assert_array_equal(v("v_ffbh_u32", u32(1, 0, 0x80000000)), u32(31, 0xFFFFFFFF, 0))
    np.testing.assert_array_equal(v("v_ffbl_b32", u32(8, 0)), u32(3, 0xFFFFFFFF))


def test_bfe_i32_sign_extends():
    # bits [11:8] of 0xF0F0A5C3 are 0x5 -> positive; bits [15:12] are 0xA -> -6 as a 4-bit field.
    value = u32(0xF0F0A5C3).view(np.int32)
    assert v("v_bfe_i32", value, u32(12), u32(4))[0] == -6
    assert v("v_bfe_i32", value, u32(8), u32(4))[0] == 5


def test_mbcnt_counts_lower_lanes():
    mask_lo = np.full((1, 64), 0xFFFFFFFF, np.uint32)
    mask_hi = np.full((1, 64), 0x0000000F, np.uint32)
    lo = v("v_mbcnt_lo_u32_b32", mask_lo, np.zeros((1, 64), np.uint32))
    total = v("v_mbcnt_hi_u32_b32", mask_hi, lo)
    expected = [min(lane, 32) + min(max(lane - 32, 0), 4) for lane in range(64)]
    np.testing.assert_array_equal(total[0], expected)


def test_integer_packs_saturate():
    np.testing.assert_array_equal(v("v_cvt_pk_u16_u32", u32(70000, 5), u32(1, 2**32 - 1)),
                                  np.array([[65535, 1], [5, 65535]], np.uint16))
    np.testing.assert_array_equal(v("v_cvt_pk_i16_i32", i32(-70000), i32(40000)),
                                  np.array([[-32768, 32767]], np.int16))


def test_cndmask_selects_src1_when_set():
    np.testing.assert_array_equal(v("v_cndmask_b32", u32(1, 1), u32(2, 2), np.array([True, False])), u32(2, 1))


# --- SALU ------------------------------------------------------------------------------

def test_salu_scc_results():
    result, scc = s("s_add_u32", u32(0xFFFFFFFF, 1), u32(1, 1))
    np.testing.assert_array_equal(result, u32(0, 2))
    np.testing.assert_array_equal(scc, [True, False])
    result, scc = s("s_addc_u32", u32(0, 5), u32(0, 5), np.array([True, False]))
    np.testing.assert_array_equal(result, u32(1, 10))
    result, scc = s("s_sub_u32", u32(1), u32(2))
    assert result[0] == 0xFFFFFFFF and scc[0]
    result, scc = s("s_add_i32", i32(2**31 - 1), i32(1))
    assert result[0] == -2**31 and scc[0]
    result, scc = s("s_and_b32", u32(0xF0, 0xF0), u32(0x0F, 0x10))
    np.testing.assert_array_equal(scc, [False, True])
    (scc,) = s("s_cmp_lt_i32", i32(-1, 1), i32(0, 0))
    np.testing.assert_array_equal(scc, [True, False])
    (scc,) = s("s_cmp_lt_u32", u32(0xFFFFFFFF), u32(0))
    assert not scc[0]
    result, scc = s("s_min_i32", i32(-5, 5), i32(3, 3))
    np.testing.assert_array_equal(result, i32(-5, 3))
    np.testing.assert_array_equal(scc, [True, False])
    result, scc = s("s_lshl2_add_u32", u32(0x40000000, 1), u32(0, 1))
    np.testing.assert_array_equal(result, u32(0, 5))
    np.testing.assert_array_equal(scc, [True, False])
    np.testing.assert_array_equal(s("s_cselect_b32", u32(1, 1), u32(2, 2), np.array([True, False])), u32(1, 2))
    (scc,) = s("s_bitcmp1_b32", u32(0b100), u32(2))
    assert scc[0]


def test_salu_bit_ops():
    result, scc = s("s_bfe_u32", u32(0xABCD1234), u32((8 << 16) | 4))
    assert result[0] == 0x23 and scc[0]
    result, _ = s("s_bfe_i32", i32(0x00000F00), u32((4 << 16) | 8))
    assert result[0] == -1
    result, _ = s("s_bfe_u64", np.array([0xAB00000000000000], np.uint64), u32((8 << 16) | 56))
    assert result[0] == 0xAB
    assert s("s_bfm_b32", u32(4), u32(8))[0] == 0xF00
    assert s("s_brev_b32", u32(1))[0] == 0x80000000
    np.testing.assert_array_equal(s("s_ff1_i32_b32", u32(8, 0)), i32(3, -1))
    np.testing.assert_array_equal(s("s_flbit_i32_b32", u32(1, 0)), i32(31, -1))
    assert s("s_sext_i32_i16", u32(0x8001))[0] == -32767
    assert s("s_pack_ll_b32_b16", u32(0x1111AAAA), u32(0x2222BBBB))[0] == 0xBBBBAAAA
    assert s("s_pack_hh_b32_b16", u32(0x1111AAAA), u32(0x2222BBBB))[0] == 0x22221111
    assert s("s_bitset1_b32", u32(4), u32(1))[0] == 0x11
    result, scc = s("s_bcnt1_i32_b64", np.array([0xFF000000000000FF], np.uint64))
    assert result[0] == 16 and scc[0]
    result, scc = s("s_lshl_b64", np.array([1], np.uint64), u32(64 + 40))
    assert result[0] == 1 << 40 and scc[0]
    assert s("s_mul_hi_u32", u32(0xFFFFFFFF), u32(0xFFFFFFFF))[0] == 0xFFFFFFFE


def test_fused_integer_ops_by_hand():
    assert v("v_lshl_add_u32", u32(3), u32(4), u32(5))[0] == 53
    assert v("v_add_lshl_u32", u32(3), u32(1), u32(4))[0] == 64
    assert v("v_xad_u32", u32(0b1100), u32(0b1010), u32(1))[0] == 0b0111
    assert v("v_or3_b32", u32(1), u32(2), u32(4))[0] == 7
    assert v("v_and_or_b32", u32(0xFF), u32(0x0F), u32(0x100))[0] == 0x10F
    assert v("v_alignbyte_b32", u32(0x11223344), u32(0x55667788), u32(1))[0] == 0x44556677
    assert v("v_bfm_b32", u32(4), u32(8))[0] == 0xF00
    assert v("v_mul_u32_u24", u32(0xFF000002), u32(3))[0] == 6  # high byte ignored
    assert v("v_mul_i32_i24", i32(0x00FFFFFF), i32(2))[0] == -2  # 24-bit -1
    np.testing.assert_array_equal(v("v_ffbh_i32", i32(1, -1, 0, -2**31)), i32(31, -1, -1, 1))
    total, overflow = v("v_mad_i64_i32", i32(-3), i32(5), np.array([2**63 - 1], np.int64))
    assert total[0] == 2**63 - 1 - 15 and not overflow[0]
    assert v("v_cvt_f32_ubyte2", u32(0x00AB0000))[0] == 171.0
    np.testing.assert_array_equal(v("v_cvt_flr_i32_f32", f32(-1.5, 2.7)), i32(-2, 2))
    np.testing.assert_array_equal(v("v_cvt_rpi_i32_f32", f32(-1.5, 2.5)), i32(-1, 3))
    a = np.array([[1, 2, 3, 255]], np.uint8)  # 255 is -1 as i8
    b = np.array([[4, 5, 6, 2]], np.uint8)
    assert v("v_dot4_i32_i8", a, b, i32(10))[0] == 10 + 4 + 10 + 18 - 2
    assert v("v_dot4_u32_u8", a, b, u32(0))[0] == 4 + 10 + 18 + 510


def test_fma_mix_writes_one_half():
    old = u32(0xAAAABBBB)
    lo = v("v_fma_mixlo_f16", f32(1.5), f32(2.0), f32(0.25), old)
    hi = v("v_fma_mixhi_f16", f32(1.5), f32(2.0), f32(0.25), old)
    assert lo[0] == 0xAAAA0000 | 0x4280  # f16 3.25 = 0x4280
    assert hi[0] == 0x4280BBBB
    assert VALU_OPS["v_fma_mixlo_f16"].implicit_srcs == ("dst",)


def test_salu_tied_and_scc_reading_ops():
    assert s("s_cmov_b32", u32(7), u32(9), np.array([True]))[0] == 7
    assert s("s_cmov_b32", u32(7), u32(9), np.array([False]))[0] == 9
    assert s("s_cmovk_i32", np.array([-2], np.int16), i32(9), np.array([True]))[0] == -2
    result, scc = s("s_addk_i32", np.array([-1], np.int16), i32(-2**31))
    assert result[0] == 2**31 - 1 and scc[0]  # signed overflow sets SCC
    assert s("s_movk_i32", np.array([-32768], np.int16))[0] == -32768
    (scc,) = s("s_cmpk_lt_u32", u32(5), np.array([0xFFFF], np.uint16))
    assert scc[0]
    result, scc = s("s_subb_u32", u32(5), u32(5), np.array([True]))
    assert result[0] == 0xFFFFFFFF and scc[0]
    result, scc = s("s_absdiff_i32", i32(-5), i32(7))
    assert result[0] == 12 and scc[0]
    for name, op in SALU_OPS.items():
        if op.implicit_srcs:
            assert op.implicit_srcs == ("dst",), name
