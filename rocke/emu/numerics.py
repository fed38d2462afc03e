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
    """bfloat16 bits (uint16) of float32 values, round-to-nearest-even; NaN -> quiet NaN."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding_bias = 0x7FFF + ((bits >> 16) & 1)
    rounded = ((bits + rounding_bias) >> 16).astype(np.uint16)
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    quiet_nan = ((bits >> 16) | 0x0040).astype(np.uint16)
    return np.where(is_nan, quiet_nan, rounded).astype(np.uint16)


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
