"""Every entry of rocke.emu.semantics' VALU_OPS and SALU_OPS, executed through the emulator
(`run_asm`, many ops per launch) and checked lane by lane against a reference written here from
the ISA text with numpy / Python integers / exact fractions.

VALU: the source registers hold random bit patterns plus the edge values of each type (±0,
±inf, NaN, denormals, extremes); every op reads them in its VOP3 form. SALU: one wave per input
set, the results moved to VGPRs. Ops whose reference is a full algorithm elsewhere (the fdiv
helpers) are checked end to end through LLVM's division expansion in `test_division_helpers`.
"""
import math
from fractions import Fraction

import numpy as np
import pytest

from rocke.emu.semantics import SALU_OPS, VALU_OPS

from .asm_runner import compile_ir, run_asm

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F16, F32, F64 = np.float16, np.float32, np.float64
INF, NAN = np.inf, np.nan
RNG = np.random.default_rng(2026)

# ----------------------------------------------------------------------- input registers

F32_SPECIAL = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 1e-40, -3e-39, 3.4e38, -3.4e38, 0.5, 2.5,
               -2.5, 1.5, 7.0, 1e-30, 16777217.0, -0.75, 100.25]
F16_SPECIAL = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 6e-8, -3e-5, 65504.0, -65504.0, 0.5, 2.5,
               -2.5, 1.5, 7.0, 0.333, 1000.0, -0.75, 100.25]
U32_SPECIAL = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0xFFFF, 0x10000, 31, 32, 33, 0xFF,
               0x00FFFFFF, 0x01000000, 0xFF800000, 12345, 0x80808080, 0x7F7F7F7F, 63, 64]


def _float_row(dtype, specials):
    values = (RNG.standard_normal(64) * 10.0 ** RNG.integers(-3, 4, 64)).astype(dtype)
    values[:len(specials)] = np.array(specials, dtype)
    return values[RNG.permutation(64)] if False else values


def _u32_row():
    row = RNG.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    row[20:20 + len(U32_SPECIAL)] = U32_SPECIAL
    return row


def _f16_pair_row():
    low = _float_row(F16, F16_SPECIAL).view(np.uint16).astype(np.uint32)
    high = np.roll(_float_row(F16, F16_SPECIAL), 7).view(np.uint16).astype(np.uint32)
    return low | (high << 16)


def _f64_pair(specials):
    values = (RNG.standard_normal(64) * 10.0 ** RNG.integers(-30, 30, 64))
    values[:len(specials)] = specials
    bits = values.view(np.uint64)
    return [(bits & 0xFFFFFFFF).astype(np.uint32), (bits >> 32).astype(np.uint32)]


F64_SPECIAL = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 5e-324, -2e-310, 1.7e308, -1.7e308, 0.5,
               2.5, -2.5, 1.5, 7.0, 1e-300, 2.0 ** 53 + 1, -0.75, 100.25]
# register file: name -> rows (lists of uint32[64])
INPUTS = {
    "f32": [F32(_float_row(F32, F32_SPECIAL)).view(np.uint32) for _ in range(3)],
    "u32": [_u32_row() for _ in range(3)],
    "small": [(RNG.integers(-20, 21, 64) & 0xFFFFFFFF).astype(np.uint32)],
    "f16": [_f16_pair_row() for _ in range(3)],
    "f64": [_f64_pair(F64_SPECIAL) for _ in range(3)],
    "u16": [_u32_row() for _ in range(3)],
    "u64": [[_u32_row(), _u32_row()] for _ in range(3)],
}
INPUTS["f32"][1] = np.roll(INPUTS["f32"][1], 3)
INPUTS["f32"][2] = np.roll(INPUTS["f32"][2], 11)
for _k in (1, 2):
    INPUTS["f64"][_k] = [np.roll(r, 5 * _k) for r in INPUTS["f64"][_k]]
# the class-mask source: all ten class bits in turn, then random masks
CLASS_ROW = np.concatenate([1 << np.arange(10), RNG.integers(0, 1024, 54)]).astype(np.uint32)

ROWS = {}          # (kind, k) -> first register
_layout = []


def _place(key, words):
    ROWS[key] = sum(len(w) for _, w in _layout)
    _layout.append((key, words))


for _k in range(3):
    _place(("f32", _k), [INPUTS["f32"][_k]])
    _place(("u32", _k), [INPUTS["u32"][_k]])
    _place(("f16", _k), [INPUTS["f16"][_k]])
    _place(("u16", _k), [INPUTS["u16"][_k]])
    _place(("f64", _k), INPUTS["f64"][_k])
    _place(("u64", _k), INPUTS["u64"][_k])
_place(("small", 0), INPUTS["small"])
_place(("class", 0), [CLASS_ROW])
MASK_WORDS = (0x9E3779B9, 0x7F4A7C15)   # s[20:21]: the mask source
VCC_WORDS = (0x0F0F00FF, 0xF0F0FF00)    # s[22:23]: copied into vcc for implicit-VCC ops
INPUT_WORDS = np.concatenate([w for _, ws in _layout for w in [np.stack(ws)]])
FIRST_FREE = INPUT_WORDS.shape[0]
MASK = np.array([(MASK_WORDS[lane // 32] >> (lane % 32)) & 1 for lane in range(64)], bool)
VCC_IN = np.array([(VCC_WORDS[lane // 32] >> (lane % 32)) & 1 for lane in range(64)], bool)

# ----------------------------------------------------------------------- typed views


def as_f32(words):
    return np.asarray(words, np.uint32).view(F32)


def as_f16(words, high=False):
    return ((np.asarray(words, np.uint32) >> (16 if high else 0)) & 0xFFFF).astype(np.uint16).view(F16)


def as_f64(pair):
    return (pair[0].astype(np.uint64) | (pair[1].astype(np.uint64) << np.uint64(32))).view(F64)


def as_int(words, bits, signed):
    x = np.asarray(words).astype(np.int64) & ((1 << bits) - 1)
    return np.where(x >= (1 << (bits - 1)), x - (1 << bits), x) if signed else x


def as_u64(pair):
    return [int(a) | (int(b) << 32) for a, b in zip(pair[0], pair[1])]


# ----------------------------------------------------------------------- operand spellings

def src_text(kind, k):
    row = ROWS[(kind, k)]
    return f"v[{row}:{row + 1}]" if kind in ("f64", "u64") else f"v{row}"


def src_value(typ, k):
    """(asm operand, typed numpy values) of the k-th source of type `typ`."""
    if typ == "f32":
        return src_text("f32", k), as_f32(INPUTS["f32"][k])
    if typ in ("u32", "b32", "i32"):
        words = INPUTS["u32"][k]
        return src_text("u32", k), as_int(words, 32, typ == "i32")
    if typ == "f16":
        return src_text("f16", k), as_f16(INPUTS["f16"][k])
    if typ in ("u16", "i16", "b16"):
        return src_text("u16", k), as_int(INPUTS["u16"][k], 16, typ == "i16")
    if typ == "f64":
        return src_text("f64", k), as_f64(INPUTS["f64"][k])
    if typ in ("u64", "b64", "i64"):
        values = as_u64(INPUTS["u64"][k])
        if typ == "i64":
            values = [v - (1 << 64) if v >> 63 else v for v in values]
        return src_text("u64", k), np.array(values, dtype=object)
    if typ == "mask":
        return "s[20:21]", MASK
    if typ == "pk_f16":
        words = INPUTS["f16"][k]
        return src_text("f16", k), np.stack([as_f16(words), as_f16(words, True)], -1)
    if typ in ("pk_u16", "pk_i16", "pk_b16"):
        words = INPUTS["u16"][k]
        lo, hi = as_int(words, 16, typ == "pk_i16"), as_int(words >> 16, 16, typ == "pk_i16")
        return src_text("u16", k), np.stack([lo, hi], -1)
    if typ in ("pk_f32", "pk_b32"):
        pair = INPUTS["f64"][k]   # two f32 registers
        return src_text("f64", k), np.stack([as_f32(pair[0]), as_f32(pair[1])], -1)
    if typ == "u8x4":
        words = INPUTS["u32"][k]
        return src_text("u32", k), np.stack([(words >> (8 * b)) & 0xFF for b in range(4)], -1).astype(np.int64)
    raise KeyError(typ)


# ----------------------------------------------------------------------- references

def fr(x):
    return Fraction(float(x))


def round_to(values, dtype):
    """Exact Fractions / floats -> dtype, rounded once (nearest even)."""
    out = []
    for v in values:
        if isinstance(v, float) or isinstance(v, np.floating):
            out.append(dtype(v))
            continue
        if v == 0:
            out.append(dtype(0.0))
            continue
        try:
            f = v.numerator / v.denominator   # correctly rounded to float64
        except OverflowError:
            out.append(dtype(INF if v > 0 else -INF))
            continue
        if dtype == F64:
            out.append(F64(f))
            continue
        r = dtype(f)
        # f64 rounding then dtype rounding: fix the double-rounding ties exactly
        if np.isfinite(r):
            lower = r if fr(r) <= v else np.nextafter(r, dtype(-INF))
            upper = np.nextafter(lower, dtype(INF))
            if np.isfinite(upper):
                dl, du = v - fr(lower), fr(upper) - v
                if dl < du:
                    r = lower
                elif du < dl:
                    r = upper
                else:
                    r = lower if (int(np.array(lower).view({F16: np.uint16, F32: np.uint32}[dtype])) & 1) == 0 else upper
        out.append(r)
    return np.array(out, dtype)


def fused(a, b, c, dtype):
    """a*b+c rounded once; non-finite operands by IEEE rules in float64."""
    res = []
    for x, y, z in zip(np.broadcast_to(a, (64,)), np.broadcast_to(b, (64,)), np.broadcast_to(c, (64,))):
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            res.append(float(x) * float(y) + float(z))
        else:
            exact = fr(x) * fr(y) + fr(z)
            res.append(exact if exact != 0 else float(x) * float(y) + float(z))
    return round_to(res, dtype)


def fmin(a, b):
    """IEEE min: a quiet NaN yields the other operand; -0 < +0."""
    a, b = np.broadcast_arrays(a, b)
    less = (a < b) | ((a == b) & np.signbit(a))
    pick = np.where(less, a, b)
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, pick))


def fmax(a, b):
    a, b = np.broadcast_arrays(a, b)
    greater = (a > b) | ((a == b) & ~np.signbit(a))
    pick = np.where(greater, a, b)
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, pick))


def fmed3(a, b, c):
    nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    return np.where(nan, fmin(fmin(a, b), c), fmax(fmin(a, b), fmin(fmax(a, b), c)))


def fract(x):
    below_one = np.nextafter(x.dtype.type(1), x.dtype.type(0))
    return np.where(np.isinf(x), x.dtype.type(NAN), np.minimum(x - np.floor(x), below_one))


def float_class(x, mask):
    tiny = np.finfo(x.dtype).tiny
    quiet = {F16: 0x200, F32: 0x400000, F64: 1 << 51}[x.dtype.type]
    ints = x.view({F16: np.uint16, F32: np.uint32, F64: np.uint64}[x.dtype.type]).astype(np.uint64)
    neg, mag = np.signbit(x), np.abs(x)
    classes = [np.isnan(x) & ((ints & np.uint64(quiet)) == 0), np.isnan(x) & ((ints & np.uint64(quiet)) != 0),
               np.isneginf(x), neg & np.isfinite(x) & (mag >= tiny), neg & (mag > 0) & (mag < tiny),
               neg & (mag == 0), ~neg & (mag == 0), ~neg & (mag > 0) & (mag < tiny),
               ~neg & np.isfinite(x) & (mag >= tiny), np.isposinf(x)]
    return np.any([c & ((np.asarray(mask).astype(np.int64) >> i) & 1 == 1) for i, c in enumerate(classes)], axis=0)


def flush32(x):
    x = np.asarray(x, F32)
    return np.where(np.abs(x) < np.finfo(F32).tiny, np.copysign(F32(0), x), x).astype(F32)


def cvt_int(x, lo, hi):
    t = np.trunc(np.asarray(x, F64))
    return np.clip(np.where(np.isnan(t), 0, t), lo, hi).astype(np.int64)


def sat(x, lo, hi):
    return np.clip(np.asarray(x, np.int64), lo, hi)


def wrap(x, bits, signed=False):
    x = np.array([int(v) & ((1 << bits) - 1) for v in np.ravel(x)], dtype=object).reshape(np.shape(x))
    if signed:
        x = np.array([v - (1 << bits) if v >> (bits - 1) else v for v in np.ravel(x)], dtype=object).reshape(np.shape(x))
    return x


def leading_zeros(x, width):
    return np.array([width - int(v).bit_length() for v in np.ravel(x)])


def trailing_zeros(x, width):
    return np.array([(int(v) & -int(v)).bit_length() - 1 if v else width for v in np.ravel(x)])


def popcount(x):
    return np.array([bin(int(v) & 0xFFFFFFFFFFFFFFFF).count("1") for v in np.ravel(x)])


def bitreverse(x, width):
    return np.array([int(format(int(v) & ((1 << width) - 1), f"0{width}b")[::-1], 2) for v in np.ravel(x)], dtype=object)


def sext(v, bits):
    v = int(v) & ((1 << bits) - 1)
    return v - (1 << bits) if v >> (bits - 1) else v


def perm_byte(s0, s1, sel):
    data = (int(s0) << 32) | int(s1)
    out = 0
    for b in range(4):
        s = (int(sel) >> (8 * b)) & 0xFF
        if s < 8:
            byte = (data >> (8 * s)) & 0xFF
        elif s < 12:
            byte = 0xFF if (data >> (16 * (s - 8) + 15)) & 1 else 0
        elif s == 12:
            byte = 0
        else:
            byte = 0xFF
        out |= byte << (8 * b)
    return out


def lanes(fn, *arrays):
    return np.array([fn(*vals) for vals in zip(*(np.broadcast_to(np.asarray(a, dtype=object), (64,)) for a in arrays))], dtype=object)


def fp8_value(code, exp_bits, man_bits, bias):
    code = int(code) & 0xFF
    if code == 0x80:
        return NAN
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> man_bits) & ((1 << exp_bits) - 1), code & ((1 << man_bits) - 1)
    if e == 0:
        return sign * math.ldexp(m / (1 << man_bits), 1 - bias)
    return sign * math.ldexp(1 + m / (1 << man_bits), e - bias)


FP8 = {"fp8": (4, 3, 8), "bf8": (5, 2, 16)}


def fp8_encode(x, fmt, saturate=False):
    exp_bits, man_bits, bias = FP8[fmt]
    codes = [fp8_value(c, exp_bits, man_bits, bias) for c in range(128)]
    out = []
    for v in np.ravel(x):
        v = float(v)
        if math.isnan(v):
            out.append(0x80)
            continue
        mag = abs(v)
        best = min(range(128), key=lambda c: (abs(codes[c] - mag), c & 1))
        if mag > codes[127] and (mag - codes[127]) >= (codes[127] - codes[126]) / 2 or math.isinf(mag):
            best = 127 if saturate else None
        if best is None:
            out.append(0x80)
            continue
        out.append(best | (0x80 if v < 0 and best != 0 else 0))
    return np.array(out)


def rtz_f16(x):
    x = np.asarray(x, F32)
    h = x.astype(F16)
    over = np.abs(h.astype(F32)) > np.abs(x)
    return np.where(over & ~np.isnan(x), np.nextafter(h, F16(0)), h).astype(F16)


def mbcnt(mask, base, offset):
    return np.array([bin(int(mask[l]) & ((1 << max(0, min(32, l - offset))) - 1)).count("1") + int(base[l])
                     for l in range(64)])


def mul_float(a, b):
    return a * b


def transcendental(fn, dtype):
    def apply(x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(np.asarray(x, F64)), F64).astype(dtype)
    return apply


# name -> (reference(*typed sources) -> result(s), comparison tolerance in ulps or None)
REF = {}


def ref(names, fn, ulps=0):
    for name in names.split():
        REF[name] = (fn, ulps)


for _t, _dt in (("f32", F32), ("f16", F16), ("f64", F64)):
    ref(f"v_add_{_t}", lambda a, b: a + b)
    ref(f"v_sub_{_t} ", lambda a, b: a - b)
    ref(f"v_subrev_{_t}", lambda a, b: b - a)
    ref(f"v_mul_{_t}", lambda a, b: a * b)
    ref(f"v_min_{_t}", fmin)
    ref(f"v_max_{_t}", fmax)
    ref(f"v_min3_{_t}", lambda a, b, c: fmin(fmin(a, b), c))
    ref(f"v_max3_{_t}", lambda a, b, c: fmax(fmax(a, b), c))
    ref(f"v_med3_{_t}", fmed3)
    ref(f"v_trunc_{_t}", np.trunc)
    ref(f"v_ceil_{_t}", np.ceil)
    ref(f"v_floor_{_t}", np.floor)
    ref(f"v_rndne_{_t}", np.rint)
    ref(f"v_fract_{_t}", fract)
    ref(f"v_frexp_mant_{_t}", lambda x: np.where(np.isfinite(x), np.frexp(x)[0], x))
    ref(f"v_ldexp_{_t}", lambda x, e: np.ldexp(x.astype(F64), np.clip(np.asarray(e, np.int64), -3000, 3000)).astype(x.dtype))
    ref(f"v_cmp_class_{_t} v_cmpx_class_{_t}", float_class)
ref("v_frexp_exp_i32_f32 v_frexp_exp_i32_f64 v_frexp_exp_i16_f16",
    lambda x: np.where(np.isfinite(x), np.frexp(np.where(np.isfinite(x), x, 0))[1], 0))
ref("v_fma_f32 v_fmac_f32 v_fmaak_f32 v_fma_mix_f32", lambda a, b, c: fused(a, b, c, F32))
ref("v_fmamk_f32", lambda a, k, b: fused(a, k, b, F32))
ref("v_fma_f64 v_fmac_f64", lambda a, b, c: fused(a, b, c, F64))
ref("v_fma_f16 v_fmac_f16 v_fma_legacy_f16", lambda a, b, c: fused(a, b, c, F16))
ref("v_mad_f32 v_mac_f32 v_madak_f32 v_mad_f16 v_mac_f16 v_mad_legacy_f16", lambda a, b, c: a * b + c)
ref("v_madmk_f32", lambda a, k, b: a * k + b)
ref("v_mul_legacy_f32", lambda a, b: np.where((a == 0) | (b == 0), F32(0), a * b))
ref("v_mad_legacy_f32", lambda a, b, c: np.where((a == 0) | (b == 0), F32(0), a * b) + c)
ref("v_exp_f32", lambda x: flush32(transcendental(np.exp2, F32)(x)), 1)
ref("v_log_f32", lambda x: transcendental(np.log2, F32)(flush32(x)), 1)
ref("v_rcp_f32 v_rcp_iflag_f32", lambda x: transcendental(lambda v: 1 / v, F32)(flush32(x)), 1)
ref("v_rsq_f32", lambda x: transcendental(lambda v: 1 / np.sqrt(v), F32)(flush32(x)), 1)
ref("v_sqrt_f32", lambda x: transcendental(np.sqrt, F32)(flush32(x)), 1)


def _sin_turns(v):
    """sin(2 pi v) with whole turns removed exactly (inputs are in revolutions), 0 at half turns."""
    r = v - np.rint(v)
    return np.where(2 * r == np.rint(2 * r), 0.0, np.sin(2 * np.pi * r))


def _cos_turns(v):
    """cos(2 pi v) with whole turns removed exactly, 0 at odd quarter turns."""
    r = np.abs(v - np.rint(v))
    return np.where(r == 0.25, 0.0, np.cos(2 * np.pi * r))


ref("v_sin_f32", transcendental(_sin_turns, F32), 2)
ref("v_cos_f32", transcendental(_cos_turns, F32), 2)
for _name, _fn in (("exp", np.exp2), ("log", np.log2), ("rcp", lambda v: 1 / v), ("rsq", lambda v: 1 / np.sqrt(v)),
                   ("sqrt", np.sqrt), ("sin", lambda v: np.sin(2 * np.pi * v)), ("cos", lambda v: np.cos(2 * np.pi * v))):
    ref(f"v_{_name}_f16", transcendental(_fn, F16), 1)
ref("v_rcp_f64", transcendental(lambda v: 1 / v, F64), 1)
ref("v_rsq_f64", transcendental(lambda v: 1 / np.sqrt(v), F64), 1)
ref("v_sqrt_f64", np.sqrt)
ref("v_cvt_f32_i32 v_cvt_f32_u32 v_cvt_f16_u16 v_cvt_f16_i16 v_cvt_f64_i32 v_cvt_f64_u32", lambda x: x)
ref("v_cvt_i32_f32 v_cvt_i32_f64", lambda x: cvt_int(x, -2**31, 2**31 - 1))
ref("v_cvt_u32_f32 v_cvt_u32_f64", lambda x: cvt_int(x, 0, 2**32 - 1))
ref("v_cvt_rpi_i32_f32", lambda x: cvt_int(np.floor(x.astype(F64) + 0.5), -2**31, 2**31 - 1))
ref("v_cvt_flr_i32_f32", lambda x: cvt_int(np.floor(x), -2**31, 2**31 - 1))
ref("v_cvt_f16_f32 v_cvt_f32_f16 v_cvt_f64_f32 v_cvt_f32_f64", lambda x: x)
ref("v_cvt_u16_f16", lambda x: cvt_int(x, 0, 65535))
ref("v_cvt_i16_f16", lambda x: cvt_int(x, -32768, 32767))
for _b in range(4):
    ref(f"v_cvt_f32_ubyte{_b}", lambda x, b=_b: ((np.asarray(x, np.int64) & 0xFFFFFFFF) >> (8 * b)) & 0xFF)
ref("v_cvt_pkrtz_f16_f32", lambda a, b: np.stack([rtz_f16(a), rtz_f16(b)], -1))
ref("v_pack_b32_f16", lambda a, b: a.view(np.uint16).astype(np.int64) | (b.view(np.uint16).astype(np.int64) << 16))
ref("v_cvt_pk_u16_u32", lambda a, b: np.stack([np.minimum(a, 65535), np.minimum(b, 65535)], -1))
ref("v_cvt_pk_i16_i32", lambda a, b: np.stack([sat(a, -32768, 32767), sat(b, -32768, 32767)], -1))
ref("v_cvt_pk_fp8_f32", lambda a, b: fp8_encode(a, "fp8") | (fp8_encode(b, "fp8") << 8))
ref("v_cvt_pk_bf8_f32", lambda a, b: fp8_encode(a, "bf8") | (fp8_encode(b, "bf8") << 8))
ref("v_cvt_f32_fp8", lambda x: np.array([fp8_value(v, *FP8["fp8"]) for v in x], F32))
ref("v_cvt_f32_bf8", lambda x: np.array([fp8_value(v, *FP8["bf8"]) for v in x], F32))
ref("v_cvt_pk_f32_fp8", lambda x: np.array([[fp8_value(v, *FP8["fp8"]), fp8_value(int(v) >> 8, *FP8["fp8"])] for v in x], F32))
ref("v_cvt_pk_f32_bf8", lambda x: np.array([[fp8_value(v, *FP8["bf8"]), fp8_value(int(v) >> 8, *FP8["bf8"])] for v in x], F32))
ref("v_div_fixup_f32 v_div_fixup_f16 v_div_fixup_f64", None)   # see test_division_helpers
ref("v_div_scale_f32 v_div_fmas_f32 v_div_scale_f64 v_div_fmas_f64", None)
ref("v_trig_preop_f64", None)   # tests/emu/test_isa_classes.py checks it against the bits of 2/pi

# integer
ref("v_add_u32 v_add_i32", lambda a, b: a + b)
ref("v_sub_u32 v_sub_i32", lambda a, b: a - b)
ref("v_subrev_u32", lambda a, b: b - a)
ref("v_add_co_u32", lambda a, b: (a + b, a + b > 0xFFFFFFFF))
ref("v_addc_co_u32", lambda a, b, c: (a + b + c, a + b + c > 0xFFFFFFFF))
ref("v_sub_co_u32", lambda a, b: (a - b, b > a))
ref("v_subrev_co_u32", lambda a, b: (b - a, a > b))
ref("v_subb_co_u32", lambda a, b, c: (a - b - c, b + c > a))
ref("v_subbrev_co_u32", lambda a, b, c: (b - a - c, a + c > b))
ref("v_add3_u32", lambda a, b, c: a + b + c)
ref("v_sad_u32", lambda a, b, c: np.abs(a - b) + c)
ref("v_mul_lo_u32 v_mul_lo_i32", lambda a, b: lanes(lambda x, y: int(x) * int(y), a, b))
ref("v_mul_hi_u32 v_mul_hi_i32", lambda a, b: lanes(lambda x, y: (int(x) * int(y)) >> 32, a, b))
ref("v_mul_u32_u24", lambda a, b: (a & 0xFFFFFF) * (b & 0xFFFFFF))
ref("v_mul_hi_u32_u24", lambda a, b: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) >> 32)
ref("v_mul_i32_i24", lambda a, b: lanes(lambda x, y: sext(x, 24) * sext(y, 24), a, b))
ref("v_mul_hi_i32_i24", lambda a, b: lanes(lambda x, y: (sext(x, 24) * sext(y, 24)) >> 32, a, b))
ref("v_mad_u32_u24", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c)
ref("v_mad_i32_i24", lambda a, b, c: lanes(lambda x, y, z: sext(x, 24) * sext(y, 24) + int(z), a, b, c))
ref("v_mad_u64_u32", lambda a, b, c: (lanes(lambda x, y, z: int(x) * int(y) + int(z), a, b, c),
                                      lanes(lambda x, y, z: int(x) * int(y) + int(z) >= 1 << 64, a, b, c)))
ref("v_mad_i64_i32", lambda a, b, c: (lanes(lambda x, y, z: int(x) * int(y) + int(z), a, b, c),
                                      lanes(lambda x, y, z: not -(1 << 63) <= int(x) * int(y) + int(z) < (1 << 63), a, b, c)))
for _t in ("u32", "i32", "u16", "i16"):
    ref(f"v_min_{_t}", np.minimum)
    ref(f"v_max_{_t}", np.maximum)
    ref(f"v_min3_{_t}", lambda a, b, c: np.minimum(np.minimum(a, b), c))
    ref(f"v_max3_{_t}", lambda a, b, c: np.maximum(np.maximum(a, b), c))
    ref(f"v_med3_{_t}", lambda a, b, c: np.median(np.stack([a, b, c]), axis=0).astype(np.int64))
ref("v_and_b32", lambda a, b: a & b)
ref("v_or_b32", lambda a, b: a | b)
ref("v_xor_b32", lambda a, b: a ^ b)
ref("v_xnor_b32", lambda a, b: ~(a ^ b))
ref("v_not_b32", lambda a: ~a)
ref("v_bfrev_b32", lambda a: bitreverse(a, 32))
ref("v_mov_b32 v_mov_b64 v_accvgpr_read_b32 v_accvgpr_write_b32 v_accvgpr_mov_b32", lambda a: a)
ref("v_lshlrev_b32", lambda s, a: a << (s & 31))
ref("v_lshrrev_b32", lambda s, a: a >> (s & 31))
ref("v_ashrrev_i32", lambda s, a: a >> (s & 31))
ref("v_lshl_add_u32", lambda a, s, c: (a << (s & 31)) + c)
ref("v_add_lshl_u32", lambda a, b, s: ((a + b) & 0xFFFFFFFF) << (s & 31))
ref("v_lshl_or_b32", lambda a, s, c: (a << (s & 31)) | c)
ref("v_and_or_b32", lambda a, b, c: (a & b) | c)
ref("v_or3_b32", lambda a, b, c: a | b | c)
ref("v_xor3_b32", lambda a, b, c: a ^ b ^ c)
ref("v_xad_u32", lambda a, b, c: (a ^ b) + c)
ref("v_alignbit_b32", lambda a, b, s: ((a << 32) | b) >> (s & 31))
ref("v_alignbyte_b32", lambda a, b, s: ((a << 32) | b) >> (8 * (s & 3)))
ref("v_bfe_u32", lambda v, o, w: (v >> (o & 31)) & ((1 << (w & 31)) - 1))
ref("v_bfe_i32", lambda v, o, w: lanes(lambda x, oo, ww: sext((int(x) & 0xFFFFFFFF) >> (int(oo) & 31), int(ww) & 31) if int(ww) & 31 else 0, v, o, w))
ref("v_bfi_b32", lambda m, a, b: (m & a) | (~m & b))
ref("v_bfm_b32", lambda w, o: ((1 << (w & 31)) - 1) << (o & 31))
ref("v_perm_b32", lambda a, b, s: lanes(perm_byte, a, b, s))
ref("v_bcnt_u32_b32", lambda a, b: popcount(a) + b)
ref("v_ffbh_u32", lambda a: np.where(a == 0, -1, leading_zeros(a, 32)))
ref("v_ffbl_b32", lambda a: np.where(a == 0, -1, trailing_zeros(a, 32)))
ref("v_ffbh_i32", lambda a: np.where((a == 0) | (a == -1), -1, leading_zeros(np.where(a < 0, ~a, a), 32)))
ref("v_mbcnt_lo_u32_b32", lambda m, b: mbcnt(m, b, 0))
ref("v_mbcnt_hi_u32_b32", lambda m, b: mbcnt(m, b, 32))
ref("v_cndmask_b32", lambda a, b, m: np.where(m, b, a))
ref("v_lshlrev_b64", lambda s, a: lanes(lambda x, y: int(y) << (int(x) & 63), s, a))
ref("v_lshrrev_b64", lambda s, a: lanes(lambda x, y: (int(y) & (2**64 - 1)) >> (int(x) & 63), s, a))
ref("v_ashrrev_i64", lambda s, a: lanes(lambda x, y: int(y) >> (int(x) & 63), s, a))
ref("v_lshl_add_u64", lambda a, s, c: lanes(lambda x, y, z: (int(x) << (int(y) & 7)) + int(z), a, s, c))
ref("v_add_u16 v_add_i16", lambda a, b: a + b)
ref("v_sub_u16 v_sub_i16", lambda a, b: a - b)
ref("v_subrev_u16", lambda a, b: b - a)
ref("v_mul_lo_u16", lambda a, b: a * b)
ref("v_mad_u16 v_mad_i16 v_mad_legacy_u16 v_mad_legacy_i16", lambda a, b, c: a * b + c)
ref("v_lshlrev_b16", lambda s, a: a << (s & 15))
ref("v_lshrrev_b16", lambda s, a: a >> (s & 15))
ref("v_ashrrev_i16", lambda s, a: a >> (s & 15))
# packed
ref("v_pk_add_f16 v_pk_add_f32", lambda a, b: a + b)
ref("v_pk_mul_f16 v_pk_mul_f32", lambda a, b: a * b)
ref("v_pk_min_f16", lambda a, b: fmin(a, b))
ref("v_pk_max_f16", lambda a, b: fmax(a, b))
ref("v_pk_fma_f16", lambda a, b, c: np.stack([fused(a[:, h], b[:, h], c[:, h], F16) for h in (0, 1)], -1))
ref("v_pk_fma_f32", lambda a, b, c: np.stack([fused(a[:, h], b[:, h], c[:, h], F32) for h in (0, 1)], -1))
ref("v_pk_mov_b32", lambda a, b: np.stack([a[:, 0], b[:, 0]], -1))
ref("v_pk_add_u16 v_pk_add_i16", lambda a, b: a + b)
ref("v_pk_sub_u16 v_pk_sub_i16", lambda a, b: a - b)
ref("v_pk_max_u16 v_pk_max_i16", np.maximum)
ref("v_pk_min_u16 v_pk_min_i16", np.minimum)
ref("v_pk_mad_u16 v_pk_mad_i16", lambda a, b, c: a * b + c)
ref("v_pk_mul_lo_u16", lambda a, b: a * b)
ref("v_pk_lshlrev_b16", lambda s, a: a << (s & 15))
ref("v_pk_lshrrev_b16", lambda s, a: (a & 0xFFFF) >> (s & 15))
ref("v_pk_ashrrev_i16", lambda s, a: a >> (s & 15))
ref("v_fma_mixlo_f16", lambda a, b, c, d: (d & 0xFFFF0000) | fused(a, b, c, F32).astype(F16).view(np.uint16))
ref("v_fma_mixhi_f16", lambda a, b, c, d: (d & 0xFFFF) | (fused(a, b, c, F32).astype(F16).view(np.uint16).astype(np.int64) << 16))
ref("v_dot2_f32_f16 v_dot2c_f32_f16", lambda a, b, c: round_to(
    [fr(x0) * fr(y0) + fr(x1) * fr(y1) + fr(z) if np.isfinite([x0, y0, x1, y1, z]).all() else float(x0) * float(y0) + float(x1) * float(y1) + float(z)
     for (x0, x1), (y0, y1), z in zip(a, b, c)], F32))
ref("v_dot4_i32_i8 v_dot4c_i32_i8", lambda a, b, c: (np.where(a >= 128, a - 256, a) * np.where(b >= 128, b - 256, b)).sum(-1) + c)
ref("v_dot4_u32_u8", lambda a, b, c: (a * b).sum(-1) + c)

_FLOAT_CMP = {"f": lambda a, b: np.zeros(a.shape, bool), "lt": np.less, "eq": np.equal, "le": np.less_equal,
              "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
              "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b), "u": lambda a, b: np.isnan(a) | np.isnan(b),
              "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
              "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
              "tru": lambda a, b: np.ones(a.shape, bool)}
_INT_CMP = {"f": _FLOAT_CMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
            "ne": np.not_equal, "ge": np.greater_equal, "t": _FLOAT_CMP["tru"]}
for _p in ("v_cmp", "v_cmpx"):
    for _t in ("f16", "f32", "f64"):
        for _c, _f in _FLOAT_CMP.items():
            ref(f"{_p}_{_c}_{_t}", _f)
    for _t in ("i16", "u16", "i32", "u32", "i64", "u64"):
        for _c, _f in _INT_CMP.items():
            ref(f"{_p}_{_c}_{_t}", lambda a, b, f=_f: f(np.asarray(a, dtype=object), np.asarray(b, dtype=object)).astype(bool))

def _bytes(x):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    return [(x >> (8 * k)) & 0xFF for k in range(4)]


def _halves(x, signed):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    return [as_int(x, 16, signed), as_int(x >> 16, 16, signed)]


def _nibbles(x, signed):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    return [as_int(x >> (4 * k), 4, signed) for k in range(8)]


ref("v_mad_u32_u16 v_mad_i32_i16", lambda a, b, c: a * b + c)
ref("v_sad_u8", lambda a, b, c: sum(abs(x - y) for x, y in zip(_bytes(a), _bytes(b))) + c)
ref("v_sad_hi_u8", lambda a, b, c: (sum(abs(x - y) for x, y in zip(_bytes(a), _bytes(b))) << 16) + c)
ref("v_sad_u16", lambda a, b, c: sum(abs(x - y) for x, y in zip(_halves(a, False), _halves(b, False))) + c)
ref("v_msad_u8", lambda a, b, c: sum(np.where(y == 0, 0, abs(x - y)) for x, y in zip(_bytes(a), _bytes(b))) + c)
ref("v_lerp_u8", lambda a, b, c: sum(((x + y + (z & 1)) >> 1) << (8 * k)
                                     for k, (x, y, z) in enumerate(zip(_bytes(a), _bytes(b), _bytes(c)))))
ref("v_sat_pk_u8_i16", lambda a: np.clip(_halves(a, True)[0], 0, 255) | (np.clip(_halves(a, True)[1], 0, 255) << 8))
ref("v_cvt_off_f32_i4", lambda a: np.array([F32(v / 16) for v in as_int(a, 4, True)]))
ref("v_madak_f16", lambda a, b, k: a * b + k)
ref("v_madmk_f16", lambda a, k, b: a * k + b)
ref("v_pk_fmac_f16", lambda a, b, c: np.stack([fused(a[:, h], b[:, h], c[:, h], F16) for h in (0, 1)], -1))
ref("v_dot2_i32_i16 v_dot2c_i32_i16", lambda a, b, c: sum(x * y for x, y in zip(_halves(a, True), _halves(b, True))) + c)
ref("v_dot2_u32_u16", lambda a, b, c: sum(x * y for x, y in zip(_halves(a, False), _halves(b, False))) + c)
ref("v_dot8_i32_i4 v_dot8c_i32_i4", lambda a, b, c: sum(x * y for x, y in zip(_nibbles(a, True), _nibbles(b, True))) + c)
ref("v_dot8_u32_u4", lambda a, b, c: sum(x * y for x, y in zip(_nibbles(a, False), _nibbles(b, False))) + c)

# ops whose source rows differ from the default (k-th source of its type)
SOURCE_OVERRIDE = {
    "v_ldexp_f32": [("f32", 0), ("small_signed", 0)], "v_ldexp_f64": [("f64", 0), ("small_signed", 0)],
    "v_ldexp_f16": [("f16", 0), ("small_signed", 0)],
}
for _t in ("f32", "f16", "f64"):
    SOURCE_OVERRIDE[f"v_cmp_class_{_t}"] = [(_t, 0), ("class", 0)]
    SOURCE_OVERRIDE[f"v_cmpx_class_{_t}"] = [(_t, 0), ("class", 0)]
LITERAL_FORMS = {  # VOP2 forms with a literal K, as LLVM prints them
    "v_fmaak_f32": "{d}, {s0}, {s1}, 0x40490fdb", "v_madak_f32": "{d}, {s0}, {s1}, 0x40490fdb",
    "v_fmamk_f32": "{d}, {s0}, 0x40490fdb, {s1}", "v_madmk_f32": "{d}, {s0}, 0x40490fdb, {s1}",
    "v_madak_f16": "{d}, {s0}, {s1}, 0x4248", "v_madmk_f16": "{d}, {s0}, 0x4248, {s1}",
}
K_LITERAL = F32(np.array(0x40490FDB, np.uint32).view(F32))
K_LITERAL_F16 = np.array(0x4248, np.uint16).view(F16)
VOP2_ONLY = {"v_fmaak_f32", "v_madak_f32", "v_fmamk_f32", "v_madmk_f32", "v_dot2c_f32_f16",
             "v_dot4c_i32_i8", "v_madak_f16", "v_madmk_f16", "v_dot2c_i32_i16", "v_dot8c_i32_i4",
             "v_pk_fmac_f16"}


def _source(typ, kind_k, name):
    kind, k = kind_k
    if kind == "small_signed":
        row = ROWS[("small", 0)]
        return f"v{row}", as_int(INPUTS["small"][0], 32, True)
    if kind == "class":
        return f"v{ROWS[('class', 0)]}", CLASS_ROW.astype(np.int64)
    return src_value(typ, k)


def _plan(name):
    """(asm lines, expected-result builder) for VALU op `name`; results land in fresh rows."""
    op = VALU_OPS[name]
    implicit = op.implicit_srcs
    explicit = op.srcs[:len(op.srcs) - len(implicit)]
    sources = list(SOURCE_OVERRIDE.get(name, []))
    counts = {}
    if not sources:
        for typ in explicit:
            kind = {"f32": "f32", "f16": "f16", "f64": "f64", "pk_f16": "f16", "pk_f32": "f64"}.get(typ, typ)
            counts[kind] = counts.get(kind, -1) + 1
            sources.append((typ, counts[kind] % 3))
    operands, values = [], []
    for typ, spec in zip(explicit, sources):
        if spec[0] in ("small_signed", "class"):
            text, value = _source(typ, spec, name)
        else:
            text, value = src_value(typ, spec[1])
        operands.append(text)
        values.append(value)
    return op, explicit, operands, values


def _valu_batches():
    names = sorted(n for n in VALU_OPS if REF.get(n, (None,))[0] is not None)
    batch, used = [], FIRST_FREE
    for name in names:
        op = VALU_OPS[name]
        need = sum(2 if t in ("f64", "b64", "u64", "i64", "pk_f32", "pk_b32") else 1 for t in op.dsts if t != "mask")
        need += 1 if "mask" in op.dsts else 0
        if used + need > 250:
            yield batch
            batch, used = [], FIRST_FREE
        batch.append((name, used))
        used += need
    if batch:
        yield batch


def _emit(name, first_row, mask_sgpr):
    """asm lines for op `name` writing rows from first_row; returns (lines, expected, dst kinds)."""
    op, explicit, operands, values = _plan(name)
    lines = []
    dst_texts, row = [], first_row
    for typ in op.dsts:
        if typ == "mask":
            dst_texts.append(f"s[{mask_sgpr}:{mask_sgpr + 1}]")
        elif typ in ("f64", "b64", "u64", "i64", "pk_f32", "pk_b32"):
            dst_texts.append(f"v[{row}:{row + 1}]")
            row += 2
        else:
            dst_texts.append(f"v{row}")
            row += 1
    implicit_values = []
    for imp in op.implicit_srcs:
        if imp == "dst":   # tied accumulator: start it from a copy of a source of its type
            typ = op.srcs[len(explicit)]
            text, value = src_value(typ if typ != "b32" else "u32", 2)
            if typ in ("f64",):
                lines.append(f"  v_mov_b64 {dst_texts[0]}, {text}")
            else:
                lines.append(f"  v_mov_b32 {dst_texts[0]}, {text}")
            implicit_values.append(value)
        elif imp == "vcc":
            lines.append("  s_mov_b64 vcc, s[22:23]")
            implicit_values.append(VCC_IN)
    mnemonic = name if name in VOP2_ONLY or name.startswith("v_accvgpr") else name + "_e64"
    if name in LITERAL_FORMS:
        text = LITERAL_FORMS[name].format(d=dst_texts[0], s0=operands[0], s1=operands[1])
        values = [values[0], values[1]]
        k = K_LITERAL_F16 if name.endswith("_f16") else K_LITERAL
        values.insert(2 if "ak_" in name else 1, np.full(64, k))
        lines.append(f"  {name} {text}")
    elif name == "v_accvgpr_write_b32":
        lines.append(f"  v_accvgpr_write_b32 a{row}, {operands[0]}")
        lines.append(f"  v_accvgpr_read_b32 {dst_texts[0]}, a{row}")
    elif name == "v_accvgpr_read_b32":
        lines.append(f"  v_accvgpr_write_b32 a{row}, {operands[0]}")
        lines.append(f"  v_accvgpr_read_b32 {dst_texts[0]}, a{row}")
    elif name == "v_accvgpr_mov_b32":
        lines.append(f"  v_accvgpr_write_b32 a{row}, {operands[0]}")
        lines.append(f"  v_accvgpr_mov_b32 a{row + 1}, a{row}")
        lines.append(f"  v_accvgpr_read_b32 {dst_texts[0]}, a{row + 1}")
    elif name.startswith("v_fma_mix"):
        lines.append(f"  {name} {dst_texts[0]}, {', '.join(operands)}")
    else:
        lines.append(f"  {mnemonic} {', '.join(dst_texts + operands)}")
    if name.startswith("v_cmpx"):
        lines.append(f"  s_mov_b64 s[{mask_sgpr}:{mask_sgpr + 1}], exec")
        lines.append("  s_mov_b64 exec, -1")
    if "mask" in op.dsts:
        # the mask result, spread into one more row as 0/1
        lines.append(f"  v_cndmask_b32_e64 v{row}, 0, 1, s[{mask_sgpr}:{mask_sgpr + 1}]")
    return lines, op, values + implicit_values, first_row


def _check(name, op, args, out, first_row, mask_row):
    fn, ulps = REF[name]
    expected = fn(*args)
    if len(op.dsts) == 1:
        expected = (expected,)
    row = first_row
    for typ, exp in zip(op.dsts, expected):
        if typ == "mask":
            got = out[mask_row] == 1
            np.testing.assert_array_equal(got, np.broadcast_to(np.asarray(exp, bool), (64,)), err_msg=name)
            continue
        words = out[row:row + (2 if typ in ("f64", "b64", "u64", "i64", "pk_f32", "pk_b32") else 1)]
        row += len(words)
        _compare(name, typ, words, exp, ulps)


def _compare(name, typ, words, exp, ulps):
    if typ in ("f32", "f16", "f64", "pk_f16", "pk_f32"):
        if typ == "f32":
            got = as_f32(words[0])
        elif typ == "f16":
            got = as_f16(words[0])
        elif typ == "f64":
            got = as_f64(words)
        elif typ == "pk_f16":
            got = np.stack([as_f16(words[0]), as_f16(words[0], True)], -1)
        else:
            got = np.stack([as_f32(words[0]), as_f32(words[1])], -1)
        dtype = got.dtype.type
        exp = np.broadcast_to(np.asarray(exp).astype(dtype), got.shape)
        both_nan = np.isnan(got) & np.isnan(exp)
        if ulps:
            close = (got == exp) | both_nan
            spacing = np.abs(np.spacing(exp.astype(dtype)))
            close |= np.abs(got.astype(F64) - exp.astype(F64)) <= ulps * spacing
            assert close.all(), f"{name}: lanes {np.nonzero(~close)[0][:8]} got {got[~close][:4]} want {exp[~close][:4]}"
        else:
            bits = {F16: np.uint16, F32: np.uint32, F64: np.uint64}[dtype]
            same = (got.view(bits) == exp.view(bits)) | both_nan
            assert same.all(), f"{name}: lanes {np.nonzero(~same)[0][:8]} got {got[~same][:4]} want {exp[~same][:4]}"
        return
    bits = {"u32": 32, "i32": 32, "b32": 32, "u16": 16, "i16": 16, "b16": 16, "u64": 64, "i64": 64,
            "b64": 64, "pk_u16": 32, "pk_i16": 32, "pk_b16": 32}[typ]
    if bits == 64:
        got = np.array(as_u64(words), dtype=object)
    else:
        got = np.asarray(words[0]).astype(np.int64) & ((1 << bits) - 1)
    exp = np.asarray(exp, dtype=object)
    if typ.startswith("pk_"):
        exp = (wrap(exp[..., 0], 16) | (wrap(exp[..., 1], 16) << 16))
    exp = wrap(np.broadcast_to(exp, (64,)), bits)
    mismatch = [l for l in range(64) if int(got[l]) != int(exp[l])]
    assert not mismatch, f"{name}: lanes {mismatch[:8]} got {[hex(int(got[l])) for l in mismatch[:4]]} want {[hex(int(exp[l])) for l in mismatch[:4]]}"


def test_every_valu_entry_has_a_reference_or_an_end_to_end_test():
    missing = sorted(set(VALU_OPS) - set(REF))
    assert not missing, f"VALU entries without a reference: {missing}"


@pytest.mark.parametrize("batch_index", range(len(list(_valu_batches()))))
def test_valu_ops_against_references(batch_index):
    batch = list(_valu_batches())[batch_index]
    lines, plans = [], []
    mask_sgpr = 24
    for name, first in batch:
        emitted, op, args, first_row = _emit(name, first, mask_sgpr)
        width = sum(2 if t in ("f64", "b64", "u64", "i64", "pk_f32", "pk_b32") else 1 for t in op.dsts if t != "mask")
        lines += emitted
        plans.append((name, op, args, first_row, first_row + width))
    needed = max(p[4] + (1 if "mask" in p[1].dsts else 0) for p in plans)
    v = np.zeros((needed, 64), np.uint32)
    v[:FIRST_FREE] = INPUT_WORDS
    sgprs = np.zeros(32, np.uint32)
    sgprs[4:8] = [MASK_WORDS[0], MASK_WORDS[1], VCC_WORDS[0], VCC_WORDS[1]]
    out = run_asm("\n".join(lines), v, sgprs=sgprs[None]).vgprs[0]
    failures = []
    for name, op, args, first_row, mask_row in plans:
        try:
            _check(name, op, args, out, first_row, mask_row)
        except AssertionError as err:
            detail = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
            failures.append(f"{name}: {detail[:300]}")
    assert not failures, "\n".join(failures)


# ======================================================================= SALU

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
K16 = 0x8765          # the 16-bit immediate of the s_*k_* forms
SALU_WAVES = 48


def s32(v):
    return sext(v, 32)


def s64(v):
    return sext(v, 64)


def bfe(value, control, width_bits, signed):
    offset = control & (width_bits - 1)
    width = min((control >> 16) & 0x7F, width_bits)
    field = (value >> offset) & ((1 << width) - 1)
    if signed and width:
        field = sext(field, width)
    return field


_S_BITWISE = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
              "andn2": lambda a, b: a & ~b, "orn2": lambda a, b: a | ~b, "nand": lambda a, b: ~(a & b),
              "nor": lambda a, b: ~(a | b), "xnor": lambda a, b: ~(a ^ b)}
_S_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
          "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}

# name -> (operand spelling, reference(a, b, c, A, B, scc, dst32, dst64) -> (result, scc))
# a, b, c: 32-bit inputs s16, s17, s18 (unsigned); A, B: 64-bit s[20:21], s[22:23]; dst: the
# tied destination's starting value (s18 / s[22:23]).
SREF = {}


def sref(name, operands, fn):
    SREF[name] = (operands, fn)


def _nz(v, bits=32):
    return (v & ((1 << bits) - 1)) != 0


sref("s_add_u32", "s16, s17", lambda a, b, c, A, B, scc: (a + b, a + b > M32))
sref("s_sub_u32", "s16, s17", lambda a, b, c, A, B, scc: (a - b, b > a))
sref("s_addc_u32", "s16, s17", lambda a, b, c, A, B, scc: (a + b + scc, a + b + scc > M32))
sref("s_subb_u32", "s16, s17", lambda a, b, c, A, B, scc: (a - b - scc, b + scc > a))
sref("s_add_i32", "s16, s17", lambda a, b, c, A, B, scc: (s32(a) + s32(b), not -2**31 <= s32(a) + s32(b) < 2**31))
sref("s_sub_i32", "s16, s17", lambda a, b, c, A, B, scc: (s32(a) - s32(b), not -2**31 <= s32(a) - s32(b) < 2**31))
sref("s_addk_i32", f"{K16:#x}", lambda a, b, c, A, B, scc: (s32(c) + sext(K16, 16), not -2**31 <= s32(c) + sext(K16, 16) < 2**31))
sref("s_mulk_i32", f"{K16:#x}", lambda a, b, c, A, B, scc: (s32(c) * sext(K16, 16), None))
sref("s_mul_i32", "s16, s17", lambda a, b, c, A, B, scc: (a * b, None))
sref("s_mul_hi_u32", "s16, s17", lambda a, b, c, A, B, scc: ((a * b) >> 32, None))
sref("s_mul_hi_i32", "s16, s17", lambda a, b, c, A, B, scc: ((s32(a) * s32(b)) >> 32, None))
for _n in range(1, 5):
    # ISA: tmp = (64-bit S0 << n) + S1; SCC = tmp >= 2^32 (bits shifted out of S0 count)
    sref(f"s_lshl{_n}_add_u32", "s16, s17", lambda a, b, c, A, B, scc, n=_n: ((a << n) + b, (a << n) + b > M32))
sref("s_lshl_b32", "s16, s17", lambda a, b, c, A, B, scc: (a << (b & 31), _nz(a << (b & 31))))
sref("s_lshr_b32", "s16, s17", lambda a, b, c, A, B, scc: (a >> (b & 31), _nz(a >> (b & 31))))
sref("s_ashr_i32", "s16, s17", lambda a, b, c, A, B, scc: (s32(a) >> (b & 31), _nz(s32(a) >> (b & 31))))
sref("s_lshl_b64", "s[20:21], s17", lambda a, b, c, A, B, scc: (A << (b & 63), _nz(A << (b & 63), 64)))
sref("s_lshr_b64", "s[20:21], s17", lambda a, b, c, A, B, scc: (A >> (b & 63), _nz(A >> (b & 63), 64)))
sref("s_ashr_i64", "s[20:21], s17", lambda a, b, c, A, B, scc: (s64(A) >> (b & 63), _nz(s64(A) >> (b & 63), 64)))
for _name, _f in _S_BITWISE.items():
    sref(f"s_{_name}_b32", "s16, s17", lambda a, b, c, A, B, scc, f=_f: (f(a, b), _nz(f(a, b))))
    sref(f"s_{_name}_b64", "s[20:21], s[22:23]", lambda a, b, c, A, B, scc, f=_f: (f(A, B), _nz(f(A, B), 64)))
sref("s_not_b32", "s16", lambda a, b, c, A, B, scc: (~a, _nz(~a)))
sref("s_not_b64", "s[20:21]", lambda a, b, c, A, B, scc: (~A, _nz(~A, 64)))
sref("s_mov_b32", "s16", lambda a, b, c, A, B, scc: (a, None))
sref("s_mov_b64", "s[20:21]", lambda a, b, c, A, B, scc: (A, None))
sref("s_cselect_b32", "s16, s17", lambda a, b, c, A, B, scc: (a if scc else b, None))
sref("s_cselect_b64", "s[20:21], s[22:23]", lambda a, b, c, A, B, scc: (A if scc else B, None))
sref("s_cmov_b32", "s16", lambda a, b, c, A, B, scc: (a if scc else c, None))
sref("s_cmov_b64", "s[20:21]", lambda a, b, c, A, B, scc: (A if scc else B, None))
sref("s_bcnt1_i32_b32", "s16", lambda a, b, c, A, B, scc: (bin(a).count("1"), a != 0))
sref("s_bcnt0_i32_b32", "s16", lambda a, b, c, A, B, scc: (32 - bin(a).count("1"), a != M32))
sref("s_bcnt1_i32_b64", "s[20:21]", lambda a, b, c, A, B, scc: (bin(A).count("1"), A != 0))
sref("s_bcnt0_i32_b64", "s[20:21]", lambda a, b, c, A, B, scc: (64 - bin(A).count("1"), A != M64))
sref("s_movk_i32", f"{K16:#x}", lambda a, b, c, A, B, scc: (sext(K16, 16), None))
sref("s_cmovk_i32", f"{K16:#x}", lambda a, b, c, A, B, scc: (sext(K16, 16) if scc else c, None))
sref("s_brev_b32", "s16", lambda a, b, c, A, B, scc: (int(format(a, "032b")[::-1], 2), None))
sref("s_brev_b64", "s[20:21]", lambda a, b, c, A, B, scc: (int(format(A, "064b")[::-1], 2), None))
sref("s_ff1_i32_b32", "s16", lambda a, b, c, A, B, scc: ((a & -a).bit_length() - 1 if a else -1, None))
sref("s_ff1_i32_b64", "s[20:21]", lambda a, b, c, A, B, scc: ((A & -A).bit_length() - 1 if A else -1, None))
sref("s_flbit_i32_b32", "s16", lambda a, b, c, A, B, scc: (32 - a.bit_length() if a else -1, None))
sref("s_flbit_i32_b64", "s[20:21]", lambda a, b, c, A, B, scc: (64 - A.bit_length() if A else -1, None))
sref("s_flbit_i32", "s16", lambda a, b, c, A, B, scc: (
    -1 if a in (0, M32) else 32 - ((a ^ M32) if a >> 31 else a).bit_length(), None))
sref("s_sext_i32_i8", "s16", lambda a, b, c, A, B, scc: (sext(a, 8), None))
sref("s_sext_i32_i16", "s16", lambda a, b, c, A, B, scc: (sext(a, 16), None))
sref("s_abs_i32", "s16", lambda a, b, c, A, B, scc: (abs(s32(a)), _nz(abs(s32(a)))))
sref("s_absdiff_i32", "s16, s17", lambda a, b, c, A, B, scc: (abs(s32(a) - s32(b)), _nz(abs(s32(a) - s32(b)))))
sref("s_min_i32", "s16, s17", lambda a, b, c, A, B, scc: (min(s32(a), s32(b)), s32(a) < s32(b)))
sref("s_min_u32", "s16, s17", lambda a, b, c, A, B, scc: (min(a, b), a < b))
sref("s_max_i32", "s16, s17", lambda a, b, c, A, B, scc: (max(s32(a), s32(b)), s32(a) > s32(b)))
sref("s_max_u32", "s16, s17", lambda a, b, c, A, B, scc: (max(a, b), a > b))
sref("s_bfe_u32", "s16, s17", lambda a, b, c, A, B, scc: (bfe(a, b, 32, False), bfe(a, b, 32, False) != 0))
sref("s_bfe_i32", "s16, s17", lambda a, b, c, A, B, scc: (bfe(a, b, 32, True), bfe(a, b, 32, True) != 0))
sref("s_bfe_u64", "s[20:21], s17", lambda a, b, c, A, B, scc: (bfe(A, b, 64, False), bfe(A, b, 64, False) != 0))
sref("s_bfe_i64", "s[20:21], s17", lambda a, b, c, A, B, scc: (bfe(A, b, 64, True), bfe(A, b, 64, True) != 0))
sref("s_bfm_b32", "s16, s17", lambda a, b, c, A, B, scc: (((1 << (a & 31)) - 1) << (b & 31), None))
sref("s_bfm_b64", "s16, s17", lambda a, b, c, A, B, scc: (((1 << (a & 63)) - 1) << (b & 63), None))
sref("s_pack_ll_b32_b16", "s16, s17", lambda a, b, c, A, B, scc: ((a & 0xFFFF) | ((b & 0xFFFF) << 16), None))
sref("s_pack_lh_b32_b16", "s16, s17", lambda a, b, c, A, B, scc: ((a & 0xFFFF) | (b & 0xFFFF0000), None))
sref("s_pack_hh_b32_b16", "s16, s17", lambda a, b, c, A, B, scc: ((a >> 16) | (b & 0xFFFF0000), None))
sref("s_bitset0_b32", "s16", lambda a, b, c, A, B, scc: (c & ~(1 << (a & 31)), None))
sref("s_bitset1_b32", "s16", lambda a, b, c, A, B, scc: (c | (1 << (a & 31)), None))
sref("s_bitset0_b64", "s16", lambda a, b, c, A, B, scc: (B & ~(1 << (a & 63)), None))
sref("s_bitset1_b64", "s16", lambda a, b, c, A, B, scc: (B | (1 << (a & 63)), None))
for _cond, _f in _S_CMP.items():
    sref(f"s_cmp_{_cond}_u32", "s16, s17", lambda a, b, c, A, B, scc, f=_f: (None, f(a, b)))
    sref(f"s_cmp_{_cond}_i32", "s16, s17", lambda a, b, c, A, B, scc, f=_f: (None, f(s32(a), s32(b))))
    sref(f"s_cmpk_{_cond}_u32", f"{K16:#x}", lambda a, b, c, A, B, scc, f=_f: (None, f(a, K16)))
    sref(f"s_cmpk_{_cond}_i32", f"{K16:#x}", lambda a, b, c, A, B, scc, f=_f: (None, f(s32(a), sext(K16, 16))))
sref("s_ff0_i32_b32", "s16", lambda a, b, c, A, B, scc: (((~a & M32) & -(~a & M32)).bit_length() - 1 if a != M32 else -1, None))
sref("s_ff0_i32_b64", "s[20:21]", lambda a, b, c, A, B, scc: (((~A & M64) & -(~A & M64)).bit_length() - 1 if A != M64 else -1, None))
sref("s_flbit_i32_i64", "s[20:21]", lambda a, b, c, A, B, scc: (
    -1 if A in (0, M64) else 64 - ((A ^ M64) if A >> 63 else A).bit_length(), None))


def _wqm_ref(v, width):
    out = 0
    for k in range(width // 4):
        if (v >> (4 * k)) & 0xF:
            out |= 0xF << (4 * k)
    return out


def _quadmask_ref(v, width):
    return sum(1 << k for k in range(width // 4) if (v >> (4 * k)) & 0xF)


sref("s_wqm_b32", "s16", lambda a, b, c, A, B, scc: (_wqm_ref(a, 32), _wqm_ref(a, 32) != 0))
sref("s_wqm_b64", "s[20:21]", lambda a, b, c, A, B, scc: (_wqm_ref(A, 64), _wqm_ref(A, 64) != 0))
sref("s_quadmask_b32", "s16", lambda a, b, c, A, B, scc: (_quadmask_ref(a, 32), _quadmask_ref(a, 32) != 0))
sref("s_quadmask_b64", "s[20:21]", lambda a, b, c, A, B, scc: (_quadmask_ref(A, 64), _quadmask_ref(A, 64) != 0))
sref("s_bitreplicate_b64_b32", "s16", lambda a, b, c, A, B, scc: (
    sum(3 << (2 * k) for k in range(32) if (a >> k) & 1), None))
sref("s_cmp_eq_u64", "s[20:21], s[22:23]", lambda a, b, c, A, B, scc: (None, A == B))
sref("s_cmp_lg_u64", "s[20:21], s[22:23]", lambda a, b, c, A, B, scc: (None, A != B))
sref("s_bitcmp0_b32", "s16, s17", lambda a, b, c, A, B, scc: (None, (a >> (b & 31)) & 1 == 0))
sref("s_bitcmp1_b32", "s16, s17", lambda a, b, c, A, B, scc: (None, (a >> (b & 31)) & 1 == 1))
sref("s_bitcmp0_b64", "s[20:21], s17", lambda a, b, c, A, B, scc: (None, (A >> (b & 63)) & 1 == 0))
sref("s_bitcmp1_b64", "s[20:21], s17", lambda a, b, c, A, B, scc: (None, (A >> (b & 63)) & 1 == 1))


def _salu_inputs():
    rng = np.random.default_rng(42)
    words = rng.integers(0, 2**32, (SALU_WAVES, 32), dtype=np.uint64).astype(np.uint32)
    specials = [0, 1, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 31, 32, 63, 64, 0x8765, 0xFFFF8765]
    for w in range(SALU_WAVES):   # edge values in turn, pairs of equal operands too
        words[w, 0] = specials[w % len(specials)] if w < 2 * len(specials) else words[w, 0]
        words[w, 1] = specials[(w // 3) % len(specials)] if w % 2 else words[w, 1]
        if w % 7 == 0:
            words[w, 1] = words[w, 0]
            words[w, 6:8] = words[w, 4:6]
        words[w, 9] = w % 2          # s25: the incoming SCC
    words[:, 1] = np.where(np.arange(SALU_WAVES) % 3 == 0, words[:, 1] & 0x3F003F, words[:, 1])
    return words


def test_every_salu_entry_has_a_reference():
    assert not sorted(set(SALU_OPS) - set(SREF))


@pytest.mark.parametrize("half", [0, 1])
def test_salu_ops_against_references(half):
    names = sorted(SALU_OPS)[half::2]
    lines, rows = [], {}
    for index, name in enumerate(names):
        op = SALU_OPS[name]
        operands, _ = SREF[name]
        wide = bool(op.dsts) and op.dsts[0] in ("b64", "u64", "i64")
        dst = "s[40:41]" if wide else "s40"
        if op.implicit_srcs:   # tied destination starts from s18 / s[22:23]
            lines.append("  s_mov_b64 s[40:41], s[22:23]" if wide else "  s_mov_b32 s40, s18")
        lines.append("  s_cmp_lg_u32 s25, 0")
        lines.append("  s_mov_b32 s41, 0" if not wide else "")
        if name.startswith(("s_cmpk_", "s_cmp_", "s_bitcmp")):
            lines.append(f"  {name} {operands}")
        elif name in ("s_addk_i32", "s_mulk_i32", "s_cmovk_i32", "s_movk_i32"):
            lines.append(f"  {name} s40, {operands}")
        else:
            lines.append(f"  {name} {dst}, {operands}")
        lines += ["  s_cselect_b32 s42, 1, 0", f"  v_mov_b32 v{3 * index}, s40",
                  f"  v_mov_b32 v{3 * index + 1}, s41", f"  v_mov_b32 v{3 * index + 2}, s42"]
        rows[name] = 3 * index
    words = _salu_inputs()
    # s_cmpk_* compare s16 with the immediate: operands are printed as `s16, imm`
    text = "\n".join(lines)
    for name in names:
        if name.startswith("s_cmpk_"):
            text = text.replace(f"  {name} {K16:#x}", f"  {name} s16, {K16:#x}")
    out = run_asm(text, sgprs=words, rows=3 * len(names)).vgprs[:, :, 0]
    failures = []
    for name in names:
        op = SALU_OPS[name]
        _, fn = SREF[name]
        wide = bool(op.dsts) and op.dsts[0] in ("b64", "u64", "i64")
        for w in range(SALU_WAVES):
            a, b, c = (int(words[w, i]) for i in range(3))
            A = int(words[w, 4]) | (int(words[w, 5]) << 32)
            B = int(words[w, 6]) | (int(words[w, 7]) << 32)
            scc = int(words[w, 9] != 0)
            result, scc_out = fn(a, b, c, A, B, scc)
            r = rows[name]
            got = int(out[w, r]) | (int(out[w, r + 1]) << 32 if wide else 0)
            if result is not None and got != result & (M64 if wide else M32):
                failures.append(f"{name} wave {w}: got {got:#x} want {result & (M64 if wide else M32):#x}")
                break
            expect_scc = scc if scc_out is None else int(bool(scc_out))
            if int(out[w, r + 2]) != expect_scc:
                failures.append(f"{name} wave {w}: SCC {int(out[w, r + 2])} want {expect_scc}")
                break
    assert not failures, "\n".join(failures)


DIVISION_IR = """
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @divide(ptr addrspace(1) %f, ptr addrspace(1) %h, ptr addrspace(1) %d) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %pf = getelementptr <2 x float>, ptr addrspace(1) %f, i32 %t
  %ph = getelementptr <2 x half>, ptr addrspace(1) %h, i32 %t
  %pd = getelementptr <2 x double>, ptr addrspace(1) %d, i32 %t
  %vf = load <2 x float>, ptr addrspace(1) %pf
  %vh = load <2 x half>, ptr addrspace(1) %ph
  %vd = load <2 x double>, ptr addrspace(1) %pd
  %nf = extractelement <2 x float> %vf, i32 0
  %df = extractelement <2 x float> %vf, i32 1
  %nh = extractelement <2 x half> %vh, i32 0
  %dh = extractelement <2 x half> %vh, i32 1
  %nd = extractelement <2 x double> %vd, i32 0
  %dd = extractelement <2 x double> %vd, i32 1
  %qf = fdiv float %nf, %df
  %qh = fdiv half %nh, %dh
  %qd = fdiv double %nd, %dd
  %rf = insertelement <2 x float> %vf, float %qf, i32 0
  %rh = insertelement <2 x half> %vh, half %qh, i32 0
  %rd = insertelement <2 x double> %vd, double %qd, i32 0
  store <2 x float> %rf, ptr addrspace(1) %pf
  store <2 x half> %rh, ptr addrspace(1) %ph
  store <2 x double> %rd, ptr addrspace(1) %pd
  ret void
}
"""


def test_division_helpers():
    """v_div_scale/fmas/fixup (f32, f64) and v_div_fixup_f16, checked end to end: LLVM's IEEE
    division expansions must give the correctly rounded quotient on every edge case."""
    import torch
    import rocke.emu as emu
    asm = compile_ir(DIVISION_IR)
    for op in ("v_div_scale_f32", "v_div_fmas_f32", "v_div_fixup_f32", "v_div_scale_f64",
               "v_div_fmas_f64", "v_div_fixup_f64", "v_div_fixup_f16"):
        assert op in asm, op
    num = np.array([1.0, -1.0, 0.0, INF, NAN, 1e-40, 3e38, 1.0, 0.0, -INF, 7.0, 1e-45] * 6)[:64]
    den = np.array([3.0, 0.0, 0.0, INF, 2.0, 3e38, 1e-40, -0.0, 5.0, 2.0, 1e-30, 0.5] * 6)[:64]
    rng = np.random.default_rng(3)
    num[40:] = rng.standard_normal(24) * 10.0 ** rng.integers(-30, 30, 24)
    den[40:] = rng.standard_normal(24) * 10.0 ** rng.integers(-30, 30, 24)
    f = torch.tensor(np.stack([num, den], 1).astype(F32))
    h = torch.tensor(np.stack([num, den], 1).astype(F16))
    d = torch.tensor(np.stack([num * 1e280 ** np.sign(np.arange(64) % 3 - 1), den], 1))
    inputs = [f.clone(), h.clone(), d.clone()]
    emu.launch(asm, "divide", 1, 64, [f, h, d])
    for got, src, dtype in ((f, inputs[0], F32), (h, inputs[1], F16), (d, inputs[2], F64)):
        n, q = src[:, 0].numpy(), src[:, 1].numpy()
        want = (n.astype(F64) / q.astype(F64)).astype(dtype) if dtype != F64 else n / q
        if dtype == F64:
            want = np.array([round_to([Fraction(float(a)) / Fraction(float(b))], F64)[0]
                             if b != 0 and a != 0 and np.isfinite(a) and np.isfinite(b) else a / b
                             for a, b in zip(n, q)])
        g = got[:, 0].numpy()
        same = (g.view({F32: np.uint32, F16: np.uint16, F64: np.uint64}[dtype]) ==
                want.astype(dtype).view({F32: np.uint32, F16: np.uint16, F64: np.uint64}[dtype])) | (np.isnan(g) & np.isnan(want))
        assert same.all(), (dtype, np.nonzero(~same)[0], g[~same], want[~same])
