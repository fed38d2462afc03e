"""gfx950's scaled conversions v_cvt_scalef32_* (rocke.emu.mxcvt), refereed by ml_dtypes' OCP
formats (float8_e4m3fn, float8_e5m2, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn) and by the
CDNA4 guide's rules restated here: every code of each small format, at several scales
including the extremes (E8M0 0 = 2^-127), NaN / inf / subnormal codes, both FP16_OVFL
settings, and each byte / word select. Then the same ops as LLVM emits them for gfx950 from the
llvm.amdgcn.cvt.scalef32.* intrinsics (the asm op_sel spelling of each select)."""
import ml_dtypes
import numpy as np
import pytest

from rocke.emu.errors import EmulatorError

from .asm_runner import run_asm

RNG = np.random.default_rng(950)
SMALL = {"fp8": ml_dtypes.float8_e4m3fn, "bf8": ml_dtypes.float8_e5m2,
         "fp6": ml_dtypes.float6_e2m3fn, "bf6": ml_dtypes.float6_e3m2fn,
         "fp4": ml_dtypes.float4_e2m1fn}
WIDTH = {"fp8": 8, "bf8": 8, "fp6": 6, "bf6": 6, "fp4": 4}


def run(body, v, rows, **kw):
    return run_asm(body, vgprs=v, rows=rows, target="gfx950", **kw).vgprs[0]


def decode(codes, fmt):
    """Small-format codes -> float64 (ml_dtypes)."""
    return np.asarray(codes, np.uint8).view(SMALL[fmt]).astype(np.float64)


def scale_bits(k):
    """An f32 whose exponent field is the E8M0 byte k + 127 (mantissa / sign set too: ignored)."""
    return np.uint32(((k + 127) << 23) | 0x80000000 | 0x2AAAAA)


def wide_bits(values, fmt):
    """Exact float64 values -> bits of f32 / f16 / bf16 (NaN -> the caller checks it)."""
    if fmt == "f32":
        return values.astype(np.float32).view(np.uint32).astype(np.uint32)
    if fmt == "f16":
        return values.astype(np.float16).view(np.uint16).astype(np.uint32)
    return values.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)


def assert_wide(got_bits, want_values, fmt):
    nan = np.isnan(want_values)
    back = {"f32": lambda b: b.astype(np.uint32).view(np.float32),
            "f16": lambda b: b.astype(np.uint16).view(np.float16),
            "bf16": lambda b: b.astype(np.uint16).view(ml_dtypes.bfloat16)}[fmt]
    assert np.all(np.isnan(back(got_bits[nan]).astype(np.float64)))
    assert np.array_equal(got_bits[~nan], wide_bits(want_values[~nan], fmt))



def assert_wide_pair(got, lo, hi, fmt):
    """A packed conversion's two results from v2 on: f32 in v2 / v3, 16-bit halves of v2."""
    if fmt == "f32":
        assert_wide(got[:, 2], lo, fmt)
        assert_wide(got[:, 3], hi, fmt)
    else:
        assert_wide(got[:, 2] & 0xFFFF, lo, fmt)
        assert_wide(got[:, 2] >> 16, hi, fmt)

# ------------------------------------------------------------------------------ up: fp8 / bf8

# scales at which every code of the format has an exact value in the destination (extremes
# included: 2^-127 makes f32 subnormals, 2^-15 / 2^7 the edges of f16's range for fp8)
UP_SCALES = {("f32", "fp8"): (-127, -3, 0, 100), ("f32", "bf8"): (-127, 0, 5, 100),
             ("f16", "fp8"): (-15, -1, 0, 7), ("f16", "bf8"): (-8, -3, 0, 0),
             ("bf16", "fp8"): (-118, 0, 4, 100), ("bf16", "bf8"): (-110, 0, 2, 100)}


@pytest.mark.parametrize("dst, src", list(UP_SCALES), ids=lambda x: str(x))
def test_pk_up_from_fp8_every_code_and_word_select(dst, src):
    codes = np.arange(256, dtype=np.uint32).reshape(4, 64)     # every code once over 4 waves x 2
    for k in UP_SCALES[dst, src]:
        for word in (0, 1):
            v = np.zeros((4, 4, 64), np.uint32)
            v[:, 0] = (codes << (16 * word + 8)) | (codes[::-1] << (16 * word))   # lo, hi codes
            v[:, 0] |= np.uint32(0xA5) << (16 * (1 - word))                       # the other word
            v[:, 1] = scale_bits(k)
            sel = " op_sel:[1,0,0]" if word else ""
            d = "v[2:3]" if dst == "f32" else "v2"
            got = run_asm(f"  v_cvt_scalef32_pk_{dst}_{src} {d}, v0, v1{sel}", vgprs=v, rows=4,
                          target="gfx950").vgprs
            lo = decode(codes[::-1], src) * 2.0 ** k
            hi = decode(codes, src) * 2.0 ** k
            assert_wide_pair(got, lo, hi, dst)


@pytest.mark.parametrize("dst, src", [("f32", "fp8"), ("f32", "bf8"), ("f16", "fp8"),
                                      ("f16", "bf8")])
def test_single_up_from_fp8_byte_select_and_half(dst, src):
    codes = np.arange(256, dtype=np.uint32).reshape(4, 64)
    k = UP_SCALES[dst, src][1]
    for byte in range(4):
        for high in ((0, 1) if dst == "f16" else (0,)):
            v = np.zeros((4, 4, 64), np.uint32)
            v[:, 0] = RNG.integers(0, 2 ** 32, (4, 64), dtype=np.uint64).astype(np.uint32)
            v[:, 0] = (v[:, 0] & ~np.uint32(0xFF << (8 * byte))) | (codes << (8 * byte))
            v[:, 1] = scale_bits(k)
            v[:, 2] = 0xDEADBEEF
            sel = f" op_sel:[{byte & 1},{byte >> 1},{high}]"
            got = run_asm(f"  v_cvt_scalef32_{dst}_{src} v2, v0, v1{sel}", vgprs=v, rows=4,
                          target="gfx950").vgprs[:, 2]
            want = decode(codes, src) * 2.0 ** k
            if dst == "f32":
                assert_wide(got, want, dst)
            else:   # the other half of the destination is kept
                assert_wide((got >> (16 * high)) & 0xFFFF, want, dst)
                assert np.all((got >> (16 * (1 - high))) & 0xFFFF ==
                              (0xDEAD if not high else 0xBEEF))


def test_up_conversion_refuses_what_it_would_have_to_round():
    v = np.zeros((4, 64), np.uint32)
    v[0] = 0x7E                      # fp8 448
    v[1] = scale_bits(8)             # 448 * 256 overflows f16
    with pytest.raises(EmulatorError, match="cannot hold exactly"):
        run("  v_cvt_scalef32_pk_f16_fp8 v2, v0, v1", v, 4)
    v[1] = 0x7F800000                # exponent 0xFF: E8M0 NaN
    with pytest.raises(EmulatorError, match="E8M0 NaN"):
        run("  v_cvt_scalef32_pk_f32_fp8 v[2:3], v0, v1", v, 4)


# ------------------------------------------------------------------------------ up: fp4 / fp6

@pytest.mark.parametrize("dst", ["f32", "f16", "bf16"])
def test_pk_up_from_fp4_every_code_pair_and_byte(dst):
    pairs = np.arange(256, dtype=np.uint32).reshape(4, 64)     # all (lo, hi) nibble pairs
    for k in (-14 if dst == "f16" else -127, 0, 13 if dst == "f16" else 100):
        for byte in range(4):
            v = np.zeros((4, 4, 64), np.uint32)
            v[:, 0] = (np.uint32(0x5A5A5A5A) & ~np.uint32(0xFF << (8 * byte))) | (pairs << (8 * byte))
            v[:, 1] = scale_bits(k)
            d = "v[2:3]" if dst == "f32" else "v2"
            got = run_asm(f"  v_cvt_scalef32_pk_{dst}_fp4 {d}, v0, v1 "
                          f"op_sel:[{byte & 1},{byte >> 1},0]", vgprs=v, rows=4,
                          target="gfx950").vgprs
            lo, hi = decode(pairs & 0xF, "fp4") * 2.0 ** k, decode(pairs >> 4, "fp4") * 2.0 ** k
            assert_wide_pair(got, lo, hi, dst)


def pack6(codes):
    """(..., 32) 6-bit codes -> (..., 6) words, item i at bits 6i+5:6i (the guide's layout)."""
    out = np.zeros(codes.shape[:-1] + (6,), np.uint64)
    for i in range(32):
        word, offset = divmod(6 * i, 32)
        c = codes[..., i].astype(np.uint64)
        out[..., word] |= (c << np.uint64(offset)) & np.uint64(0xFFFFFFFF)
        if offset > 26:
            out[..., word + 1] |= c >> np.uint64(32 - offset)
    return out.astype(np.uint32)


@pytest.mark.parametrize("src", ["fp6", "bf6"])
@pytest.mark.parametrize("dst", ["f32", "f16", "bf16"])
def test_pk32_up_from_fp6_every_code(dst, src):
    codes = (np.arange(64 * 32).reshape(64, 32) * 7 + np.arange(64)[:, None]) % 64   # all 64
    assert set(codes.ravel()) == set(range(64))
    k = -10 if dst == "f16" else -127
    v = np.zeros((40, 64), np.uint32)
    v[0:6] = pack6(codes).T
    v[6] = scale_bits(k)
    out_regs = 32 if dst == "f32" else 16
    got = run(f"  v_cvt_scalef32_pk32_{dst}_{src} v[8:{7 + out_regs}], v[0:5], v6", v, 40)
    want = decode(codes, src) * 2.0 ** k                       # (lane, item)
    if dst == "f32":
        items = got[8:40].T
    else:
        words = got[8:24].T
        items = np.stack([words & 0xFFFF, words >> 16], -1).reshape(64, 32)
    assert np.array_equal(items, wide_bits(want, dst))


# ------------------------------------------------------------------------------ down

def specials(fmt_max):
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -140, -2.0 ** -140, 1.0, -1.0,
                     fmt_max, -fmt_max, 3 * fmt_max, -1e30, 2.0 ** -126, 1.4e-45], np.float64)


def down_inputs(src, fmt, n=64 * 8):
    """Random values around the format's range (in units of the scale) plus the specials."""
    big = float(ml_dtypes.finfo(SMALL[fmt]).max)
    x = RNG.normal(size=n) * big * np.exp2(RNG.uniform(-12, 1.5, n))
    x[:15] = specials(big)
    if src == "f16":
        x = np.clip(x, -65504, 65504)
    ty = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[src]
    return x.astype(ty).astype(np.float64), ty


def ambiguous(y, fmt):
    """|y| above max but rounding back to max: refused with FP16_OVFL clear."""
    big = float(ml_dtypes.finfo(SMALL[fmt]).max)
    return (np.abs(y) > big) & (np.abs(y).astype(SMALL[fmt]).astype(np.float64) == big)


def want_small(y, fmt, saturate):
    big = float(ml_dtypes.finfo(SMALL[fmt]).max)
    if saturate or fmt in ("fp6", "bf6", "fp4"):     # Table 31 / §7.3: ±max, ±inf included
        y = np.where(np.isnan(y), y, np.clip(y, -big, big))
    return y.astype(SMALL[fmt]).view(np.uint8).astype(np.uint32) & ((1 << WIDTH[fmt]) - 1)


OVFL = """  .amdhsa_fp16_overflow 1"""


# fp4 has no FP16_OVFL variant (§7.3: conversions to F4/F6 always saturate)
@pytest.mark.parametrize("dst, saturate", [("fp8", False), ("fp8", True), ("bf8", False),
                                           ("bf8", True), ("fp4", False)],
                         ids=["fp8-ovfl0", "fp8-ovfl1", "bf8-ovfl0", "bf8-ovfl1", "fp4"])
@pytest.mark.parametrize("src", ["f32", "f16", "bf16"])
def test_pk_down_against_ml_dtypes(src, dst, saturate):
    x, _ = down_inputs(src, dst)
    k = {"f32": -5, "f16": -3, "bf16": 7}[src]
    x = x * 2.0 ** k
    x = x.astype({"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[src])
    x = x.astype(np.float64)
    y = x / 2.0 ** k
    keep = ~(ambiguous(y, dst) if dst != "fp4" and not saturate else np.zeros_like(y, bool))
    if dst == "fp4":
        keep &= ~np.isnan(y)
    x, y = x[keep][:256], y[keep][:256]
    x = x.reshape(2, 128)
    lanes = x.reshape(-1, 2, 64).transpose(0, 2, 1).reshape(-1, 64, 2)   # (waves, 64, pair)
    waves = lanes.shape[0]
    v = np.zeros((waves, 4, 64), np.uint32)
    if src == "f32":
        v[:, 0] = lanes[..., 0].astype(np.float32).view(np.uint32)
        v[:, 1] = lanes[..., 1].astype(np.float32).view(np.uint32)
    else:
        ty = np.float16 if src == "f16" else ml_dtypes.bfloat16
        halves = lanes.astype(ty).view(np.uint16).astype(np.uint32)
        v[:, 0] = halves[..., 0] | (halves[..., 1] << 16)
    v[:, 2] = scale_bits(k)
    v[:, 3] = 0x12345678
    for sel in (0, 1) if dst != "fp4" else (0, 1, 2, 3):
        if dst == "fp4":
            ops = "v0, v1, v2" if src == "f32" else "v0, v2"
            body = f"  v_cvt_scalef32_pk_fp4_{src} v3, {ops} op_sel:[0,0,{sel & 1},{sel >> 1}]"
        elif src == "f32":
            body = f"  v_cvt_scalef32_pk_{dst}_f32 v3, v0, v1, v2 op_sel:[0,0,0,{sel}]"
        else:
            body = f"  v_cvt_scalef32_pk_{dst}_{src} v3, v0, v2 op_sel:[0,0,{sel}]"
        got = run_asm(body, vgprs=v, rows=4, target="gfx950",
                      descriptor_extra=OVFL if saturate else "").vgprs[:, 3]
        width = 4 if dst == "fp4" else 8
        shift = (8 if dst == "fp4" else 16) * sel
        pair = lanes / 2.0 ** k
        want = want_small(pair[..., 0], dst, saturate) | (want_small(pair[..., 1], dst, saturate) << width)
        field = ((1 << (2 * width)) - 1) << shift
        assert np.array_equal((got & field) >> shift, want), (body, sel)
        assert np.all((got & ~np.uint32(field)) == (0x12345678 & ~field))   # the rest kept


def test_down_fp8_overflow_follows_the_fp16_ovfl_table():
    """§7.3 Table 31: NaN -> NaN; ±inf and beyond max -> ±max with FP16_OVFL, else NaN (fp8) /
    ±inf (bf8); the window above max that rounds back to max is refused with FP16_OVFL clear."""
    v = np.zeros((4, 64), np.uint32)
    vals = np.array([np.inf, -np.inf, 1e6, -1e6], np.float32)
    v[0, :4], v[1, :4] = vals.view(np.uint32), vals[::-1].view(np.uint32)
    v[2] = scale_bits(0)
    for ovfl, fp8, bf8 in ((0, [0x7F, 0xFF, 0x7F, 0xFF], [0x7C, 0xFC, 0x7C, 0xFC]),
                           (1, [0x7E, 0xFE, 0x7E, 0xFE], [0x7B, 0xFB, 0x7B, 0xFB])):
        for fmt, want in (("fp8", fp8), ("bf8", bf8)):
            got = run_asm(f"  v_cvt_scalef32_pk_{fmt}_f32 v3, v0, v1, v2", vgprs=v, rows=4,
                          target="gfx950", descriptor_extra=OVFL if ovfl else "").vgprs[0, 3]
            assert [int(g) & 0xFF for g in got[:4]] == want
            assert [(int(g) >> 8) & 0xFF for g in got[:4]] == want[::-1]
    v[0, :] = np.float32(450.0).view(np.uint32)       # 448 < 450 rounds to 448
    with pytest.raises(EmulatorError, match="rounds back to it"):
        run("  v_cvt_scalef32_pk_fp8_f32 v3, v0, v0, v2", v, 4)
    got = run_asm("  v_cvt_scalef32_pk_fp8_f32 v3, v0, v0, v2", vgprs=v, rows=4,
                  target="gfx950", descriptor_extra=OVFL).vgprs[0, 3]
    assert np.all(got & 0xFFFF == 0x7E7E)


def test_down_fp4_refuses_nan_and_saturates_inf():
    v = np.zeros((4, 64), np.uint32)
    v[0] = np.float32(np.inf).view(np.uint32)
    v[1] = np.float32(-1e9).view(np.uint32)
    v[2] = scale_bits(0)
    got = run("  v_cvt_scalef32_pk_fp4_f32 v3, v0, v1, v2", v, 4)[3]
    assert np.all(got & 0xFF == 0xF7)                 # +6 low, -6 high
    v[0] = np.float32(np.nan).view(np.uint32)
    with pytest.raises(EmulatorError, match="NaN has no fp4 code"):
        run("  v_cvt_scalef32_pk_fp4_f32 v3, v0, v1, v2", v, 4)


@pytest.mark.parametrize("dst", ["fp6", "bf6"])
@pytest.mark.parametrize("src", ["f16", "bf16", "f32"])
def test_pk32_down_to_fp6(src, dst):
    x, ty = down_inputs(src, dst, 64 * 32)
    x = x[~np.isnan(x)][:64 * 32]
    x = np.resize(x, 64 * 32).reshape(64, 32)
    k = -2
    scaled = (x * 2.0 ** k).astype(ty).astype(np.float64)
    y = scaled / 2.0 ** k
    v = np.zeros((40, 64), np.uint32)
    if src == "f32":
        v[0:16] = scaled[:, 0::2].astype(np.float32).view(np.uint32).T
        v[16:32] = scaled[:, 1::2].astype(np.float32).view(np.uint32).T
        v[32] = scale_bits(k)
        body = f"  v_cvt_scalef32_2xpk16_{dst}_f32 v[34:39], v[0:15], v[16:31], v32"
    else:
        halves = scaled.astype(ty).view(np.uint16).astype(np.uint32)
        v[0:16] = (halves[:, 0::2] | (halves[:, 1::2] << 16)).T
        v[32] = scale_bits(k)
        body = f"  v_cvt_scalef32_pk32_{dst}_{src} v[34:39], v[0:15], v32"
    got = run(body, v, 40)[34:40].T                   # (lane, 6)
    want = want_small(y, dst, saturate=False)
    assert np.array_equal(got, pack6(want))


def test_scaled_conversions_refuse_modifiers_and_unread_op_sel_bits():
    v = np.zeros((4, 64), np.uint32)
    for body, why in (("v_cvt_scalef32_pk_fp8_f32 v3, -v0, v1, v2", "neg / abs"),
                      ("v_cvt_scalef32_pk_f16_fp8 v3, v0, v2 op_sel:[0,1,0]", "not read"),):
        with pytest.raises(EmulatorError, match=why):
            run("  " + body, v, 4)


def test_f32_sources_honour_modes_input_denormal_flush():
    """§7.3: "Conversion from F32 supports MODE-based denormal control": an f32 denormal input
    scaled by 2^127 is 0.125 with denormals kept, and +-0 when MODE flushes f32 inputs."""
    v = np.zeros((4, 64), np.uint32)
    v[0] = np.float32(2.0 ** -130).view(np.uint32)
    v[1] = np.float32(-2.0 ** -130).view(np.uint32)
    v[2] = scale_bits(-127)
    body = "  v_cvt_scalef32_pk_fp8_f32 v3, v0, v1, v2"
    kept = run(body, v, 4)[3] & 0xFFFF
    flushed = run_asm(body, vgprs=v, rows=4, target="gfx950",
                      descriptor_extra="  .amdhsa_float_denorm_mode_32 0").vgprs[0, 3] & 0xFFFF
    assert np.all(kept == 0xA020) and np.all(flushed == 0x8000)   # 0.125 / -0.125; +0 / -0


def test_f16_sources_under_a_flushing_mode_are_refused():
    with pytest.raises(EmulatorError, match="flushes f16 input denormals"):
        run_asm("  v_cvt_scalef32_pk_fp8_f16 v3, v0, v2", vgprs=np.zeros((4, 64), np.uint32),
                rows=4, target="gfx950", descriptor_extra="  .amdhsa_float_denorm_mode_16_64 0")
