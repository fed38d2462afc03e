"""Bit-exact numeric format conversions for the gfx942 emulator.

Every function is vectorized over numpy arrays of any shape.

Formats (AMD CDNA3 ISA guide, "FP8 and BF8" data formats; LLVM calls them
Float8E4M3FNUZ / Float8E5M2FNUZ):

* ``e4m3fnuz`` ("fp8"): 1 sign, 4 exponent (bias 8), 3 mantissa bits. Max 240.
* ``e5m2fnuz`` ("bf8"): 1 sign, 5 exponent (bias 16), 2 mantissa bits. Max 57344.

Both have subnormals, no infinities, no negative zero, and exactly one NaN
code, 0x80. Encoding from f32 (V_CVT_PK_FP8_F32 / V_CVT_PK_BF8_F32) rounds to
nearest even. A NaN input gives 0x80. A magnitude that rounds above the format's
maximum (infinity included) gives ±max when the instruction's clamp bit is set
(``saturate=True``). Without clamp it gives the NaN code, because the format
has no infinity.
"""

from __future__ import annotations

import numpy as np

FP8_FORMATS = ("e4m3fnuz", "e5m2fnuz")
FP8_NAN_CODE = 0x80

_FP8_LAYOUT = {  # fmt -> (exponent bits, mantissa bits, exponent bias)
    "e4m3fnuz": (4, 3, 8),
    "e5m2fnuz": (5, 2, 16),
}


def _check_fmt(fmt: str) -> None:
    if fmt not in _FP8_LAYOUT:
        raise ValueError(f"fp8 fmt must be one of {FP8_FORMATS}, got {fmt!r}")


def _fp8_positive_values(fmt: str) -> np.ndarray:
    """float64 value of codes 0x00..0x7f (all non-negative, increasing)."""
    exp_bits, man_bits, bias = _FP8_LAYOUT[fmt]
    codes = np.arange(128)
    exponent = codes >> man_bits
    mantissa = codes & ((1 << man_bits) - 1)
    normal = np.ldexp(1.0 + mantissa / (1 << man_bits), exponent - bias)
    subnormal = np.ldexp(mantissa / (1 << man_bits), 1 - bias)
    return np.where(exponent == 0, subnormal, normal)


_FP8_POSITIVE = {fmt: _fp8_positive_values(fmt) for fmt in _FP8_LAYOUT}
_FP8_DECODE = {}
for _fmt, _pos in _FP8_POSITIVE.items():
    _table = np.concatenate([_pos, -_pos]).astype(np.float32)
    _table[FP8_NAN_CODE] = np.nan
    _FP8_DECODE[_fmt] = _table
FP8_MAX = {fmt: float(values[-1]) for fmt, values in _FP8_POSITIVE.items()}


def fp8_bits_to_f32(bits, fmt: str) -> np.ndarray:
    """Decode fp8 codes (any integer array, low 8 bits used) to float32."""
    _check_fmt(fmt)
    codes = np.asarray(bits).astype(np.uint32) & 0xFF
    return _FP8_DECODE[fmt][codes]


def f32_to_fp8_bits(x, fmt: str, saturate: bool) -> np.ndarray:
    """Encode float32 values to fp8 codes (uint8), RNE, per V_CVT_PK_{FP8,BF8}_F32."""
    _check_fmt(fmt)
    exp_bits, man_bits, bias = _FP8_LAYOUT[fmt]
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    magnitude = np.abs(x64)
    finite = np.isfinite(magnitude)
    safe = np.where(finite, magnitude, 0.0)
    # Quantum of the binade holding |x| (subnormal binade below 2^(1-bias)).
    _, exponent = np.frexp(safe)  # safe = m * 2^exponent, m in [0.5, 1)
    binade = np.maximum(exponent - 1, 1 - bias)
    quantum = np.ldexp(1.0, binade - man_bits)
    rounded = np.rint(safe / quantum) * quantum  # exact: power-of-two scaling, rint is RNE
    overflow = ~finite | (rounded > FP8_MAX[fmt])
    rounded = np.where(overflow, FP8_MAX[fmt], rounded)
    code = np.searchsorted(_FP8_POSITIVE[fmt], rounded).astype(np.uint8)
    negative = np.signbit(x64) & (code != 0)  # fnuz: no negative zero
    code = np.where(negative, code | 0x80, code).astype(np.uint8)
    if not saturate:
        code = np.where(overflow, np.uint8(FP8_NAN_CODE), code)
    return np.where(np.isnan(x64), np.uint8(FP8_NAN_CODE), code).astype(np.uint8)


def f32_to_f16_bits(x) -> np.ndarray:
    """IEEE binary16 bits (uint16) of float32 values: RNE, overflow -> inf, NaN stays quiet NaN."""
    x32 = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        half = x32.astype(np.float16)
    bits = half.view(np.uint16)
    return np.where(np.isnan(x32), bits | np.uint16(0x0200), bits).astype(np.uint16)


def f16_bits_to_f32(bits) -> np.ndarray:
    """float32 values of IEEE binary16 bit patterns (any integer array, low 16 bits used)."""
    half_bits = (np.asarray(bits).astype(np.uint32) & 0xFFFF).astype(np.uint16)
    return half_bits.view(np.float16).astype(np.float32)


def f32_to_bf16_bits(x) -> np.ndarray:
    """bfloat16 bits (uint16) of float32 values, round-to-nearest-even; NaN -> quiet NaN (the
    definition every array backend shares: rocke/emu/backend.py)."""
    from .backend import NUMPY, f32_to_bf16_bits as shared
    return shared(NUMPY, np.asarray(x, dtype=np.float32)).astype(np.uint16)


def bf16_bits_to_f32(bits) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (any integer array, low 16 bits used)."""
    wide = (np.asarray(bits).astype(np.uint32) & 0xFFFF) << 16
    return wide.astype(np.uint32).view(np.float32)


def flush_f32_denormals(x) -> np.ndarray:
    """float32 with subnormal values replaced by zero of the same sign."""
    x32 = np.asarray(x, dtype=np.float32)
    bits = x32.view(np.uint32)
    subnormal = ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
    return np.where(subnormal, (bits & 0x80000000).view(np.float32), x32).astype(np.float32)


def flush_f16_denormals(x) -> np.ndarray:
    """float16 with subnormal values replaced by zero of the same sign."""
    x16 = np.asarray(x, dtype=np.float16)
    bits = x16.view(np.uint16)
    subnormal = ((bits & 0x7C00) == 0) & ((bits & 0x03FF) != 0)
    return np.where(subnormal, (bits & 0x8000).view(np.float16), x16).astype(np.float16)


# ---------------------------------------------------------------------------------------
# OCP FP8 (gfx950 / CDNA4): the OCP 8-bit Floating Point Specification (OFP8, rev. 1.0)
# formats E4M3 ("fp8", LLVM Float8E4M3FN) and E5M2 ("bf8", LLVM Float8E5M2). CDNA4 uses these
# in place of CDNA3's FNUZ formats (AMD CDNA4 ISA guide, "Data formats"; Triton refuses the
# FNUZ types on gfx950 for the same reason).
#
# * ``e4m3fn``: bias 7, subnormals, no infinity, NaN = S.1111.111 (0x7f / 0xff), max 448.
# * ``e5m2``:   bias 15, IEEE-like: ±inf = S.11111.00, NaN = S.11111.{01,10,11}, max 57344.
# Both have a negative zero (0x80).
# ---------------------------------------------------------------------------------------

OCP_FP8_FORMATS = ("e4m3fn", "e5m2")
_OCP_LAYOUT = {"e4m3fn": (4, 3, 7), "e5m2": (5, 2, 15)}


def _ocp_decode_table(fmt: str) -> np.ndarray:
    exp_bits, man_bits, bias = _OCP_LAYOUT[fmt]
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = codes & ((1 << man_bits) - 1)
    value = np.where(exponent == 0, np.ldexp(mantissa / (1 << man_bits), 1 - bias),
                     np.ldexp(1.0 + mantissa / (1 << man_bits), exponent - bias)) * sign
    top = exponent == (1 << exp_bits) - 1
    if fmt == "e4m3fn":   # only the all-ones code is NaN; the rest of the top binade is finite
        value = np.where(top & (mantissa == (1 << man_bits) - 1), np.nan, value)
    else:                 # IEEE: top binade is inf (mantissa 0) or NaN
        value = np.where(top, np.where(mantissa == 0, sign * np.inf, np.nan), value)
    return value.astype(np.float32)


_OCP_DECODE = {fmt: _ocp_decode_table(fmt) for fmt in OCP_FP8_FORMATS}
OCP_FP8_MAX = {"e4m3fn": 448.0, "e5m2": 57344.0}


# OCP fp4 E2M1 (gfx950's f8f6f4 MFMAs and scaled conversions): sign, 2 exponent bits with bias
# 1, 1 mantissa bit; exponent 0 is subnormal (0, ±0.5); no infinity and no NaN, max 6.
def _e2m1_table() -> np.ndarray:
    codes = np.arange(16)
    exponent, mantissa = (codes >> 1) & 3, codes & 1
    magnitude = np.where(exponent == 0, mantissa * 0.5, np.ldexp(1.0 + mantissa / 2, exponent - 1))
    return np.where(codes & 8, -magnitude, magnitude)


E2M1_VALUES = _e2m1_table()   # float64 value of each 4-bit code


def minifloat_values(exp_bits: int, man_bits: int, bias: int) -> np.ndarray:
    """float64 value of every code of a sign / exponent / mantissa format with subnormals and
    no infinity or NaN (the OCP MX fp6 formats; the CDNA4 guide's Table 30)."""
    width = 1 + exp_bits + man_bits
    codes = np.arange(1 << width)
    exponent = (codes >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = codes & ((1 << man_bits) - 1)
    magnitude = np.where(exponent == 0, np.ldexp(mantissa / (1 << man_bits), 1 - bias),
                         np.ldexp(1.0 + mantissa / (1 << man_bits), exponent - bias))
    return np.where(codes >> (width - 1), -magnitude, magnitude)


E2M3_VALUES = minifloat_values(2, 3, 1)   # OCP fp6 E2M3: max 7.5
E3M2_VALUES = minifloat_values(3, 2, 3)   # OCP fp6 E3M2 ("bf6"): max 28


def ocp_fp8_bits_to_f32(bits, fmt: str) -> np.ndarray:
    """Decode OCP fp8 codes (any integer array, low 8 bits used) to float32."""
    if fmt not in _OCP_DECODE:
        raise ValueError(f"OCP fp8 fmt must be one of {OCP_FP8_FORMATS}, got {fmt!r}")
    return _OCP_DECODE[fmt][np.asarray(bits).astype(np.uint32) & 0xFF]


def f32_to_ocp_fp8_bits(x, fmt: str, saturate: bool) -> tuple[np.ndarray, np.ndarray]:
    """(codes uint8, overflowed bool): float32 -> OCP fp8, round to nearest even, NaN -> the
    format's NaN (sign kept). A finite magnitude rounding above max, or an infinity, gives ±max
    when `saturate`; otherwise the `overflowed` mask marks it (callers decide what it means:
    the ISA text does not pin the non-saturating overflow code, see rocke.emu.gfx950)."""
    if fmt not in _OCP_DECODE:
        raise ValueError(f"OCP fp8 fmt must be one of {OCP_FP8_FORMATS}, got {fmt!r}")
    exp_bits, man_bits, bias = _OCP_LAYOUT[fmt]
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    magnitude = np.abs(x64)
    finite = np.isfinite(magnitude)
    safe = np.where(finite, magnitude, 0.0)
    _, exponent = np.frexp(safe)
    binade = np.maximum(exponent - 1, 1 - bias)
    quantum = np.ldexp(1.0, binade - man_bits)
    rounded = np.rint(safe / quantum) * quantum
    fmax = OCP_FP8_MAX[fmt]
    overflow = (~finite | (rounded > fmax)) & ~np.isnan(x64)
    rounded = np.where(overflow, fmax, rounded)
    positive = _OCP_DECODE[fmt][:128].astype(np.float64)
    finite_codes = np.nonzero(np.isfinite(positive))[0]
    code = finite_codes[np.searchsorted(positive[finite_codes], rounded)].astype(np.uint8)
    code = np.where(np.signbit(x64), code | 0x80, code).astype(np.uint8)
    nan_code = np.uint8(0x7F if fmt == "e4m3fn" else 0x7E)
    code = np.where(np.isnan(x64), nan_code | (np.signbit(x64).astype(np.uint8) << 7), code)
    return code.astype(np.uint8), (overflow if not saturate else np.zeros_like(overflow))
