"""Division of 32-bit integers by compile-time constants with multiply-high and shifts.

For a divisor ``d`` and dividends ``0 <= x <= N`` we look for ``m = ceil(2**(32+s) / d)``:
``floor(x * m / 2**(32+s)) == x // d`` whenever ``(m*d - 2**(32+s)) * N < 2**(32+s)`` (write
``x = q*d + r``; the error term ``x*e / 2**(32+s)`` must stay below ``(d - r) / d``, worst at
``r = d-1``). If such an ``m`` fits in 32 bits the quotient is ``mulhi(x, m) >> s``. Otherwise
the 33-bit multiplier ``2**32 + m`` with ``s = ceil(log2 d)`` is exact for every 32-bit x; its
extra ``x`` term is added as ``(t + x) >> s`` when ``N < 2**31`` (no overflow) and as
``(t + ((x - t) >> 1)) >> (s - 1)`` otherwise (``t = mulhi(x, m)``).
Signed division truncates toward zero and runs the unsigned path on ``|x|``.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from . import types as T
from .errors import dsl_type_error, dsl_value_error
from .values import Value, select

U32_MAX = 2 ** 32 - 1


@dataclass(frozen=True)
class UnsignedMagic:
    """How to divide by ``divisor``: kind is "identity" | "shift" | "mulhi" | "mulhi_add_small"
    | "mulhi_add"; ``multiplier`` is the low 32 bits of the magic number."""

    divisor: int
    kind: str
    multiplier: int
    shift: int


def unsigned_magic(divisor: int, max_dividend: int = U32_MAX) -> UnsignedMagic:
    """Magic numbers for ``x // divisor`` over ``0 <= x <= max_dividend`` (both 32-bit)."""
    if not isinstance(divisor, int) or isinstance(divisor, bool) or not 1 <= divisor <= U32_MAX:
        raise ValueError(f"divisor must be an int in [1, 2**32), got {divisor!r}")
    if not isinstance(max_dividend, int) or not 0 <= max_dividend <= U32_MAX:
        raise ValueError(f"max_dividend must be an int in [0, 2**32), got {max_dividend!r}")
    if divisor == 1:
        return UnsignedMagic(divisor, "identity", 0, 0)
    if divisor & (divisor - 1) == 0:
        return UnsignedMagic(divisor, "shift", 0, divisor.bit_length() - 1)
    for s in range(32):
        k = 32 + s
        m = -(-(1 << k) // divisor)
        if m > U32_MAX:
            break
        if (m * divisor - (1 << k)) * max_dividend < (1 << k):
            return UnsignedMagic(divisor, "mulhi", m, s)
    log2_ceil = (divisor - 1).bit_length()
    m = ((1 << 32) * ((1 << log2_ceil) - divisor)) // divisor + 1
    if max_dividend < 2 ** 31:
        return UnsignedMagic(divisor, "mulhi_add_small", m, log2_ceil)
    return UnsignedMagic(divisor, "mulhi_add", m, log2_ceil - 1)


def _splat_const(ty, value: int):
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _wide(ty, bits: int):
    scalar = ir.IntType(bits)
    return ir.VectorType(scalar, ty.count) if isinstance(ty, ir.VectorType) else scalar


def emit_mulhi_u32(builder: ir.IRBuilder, x, multiplier: int):
    """High 32 bits of the unsigned 64-bit product (selected to v_mul_hi_u32 / s_mul_hi_u32)."""
    wide = _wide(x.type, 64)
    product = builder.mul(builder.zext(x, wide), _splat_const(wide, multiplier))
    return builder.trunc(builder.lshr(product, _splat_const(wide, 32)), x.type)


def emit_udiv(builder: ir.IRBuilder, x, magic: UnsignedMagic):
    """``x // divisor`` on an i32 (or vector of i32) IR value treated as unsigned."""
    ty = x.type
    if magic.kind == "identity":
        return x
    if magic.kind == "shift":
        return builder.lshr(x, _splat_const(ty, magic.shift))
    t = emit_mulhi_u32(builder, x, magic.multiplier)
    if magic.kind == "mulhi":
        return builder.lshr(t, _splat_const(ty, magic.shift)) if magic.shift else t
    if magic.kind == "mulhi_add_small":
        return builder.lshr(builder.add(t, x), _splat_const(ty, magic.shift))
    half_gap = builder.lshr(builder.sub(x, t), _splat_const(ty, 1))
    summed = builder.add(t, half_gap)
    return builder.lshr(summed, _splat_const(ty, magic.shift)) if magic.shift else summed


def _check(x, divisor, what: str, signed: bool):
    if not isinstance(x, Value) or x.dtype not in (T.i32, T.u32):
        got = x.type_name if isinstance(x, Value) else type(x).__name__
        raise dsl_type_error(f"{what} divides 32-bit integer values, got {got}")
    limit = 2 ** 31 if signed else 2 ** 32
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor == 0 or not -limit < divisor < limit \
            or (not signed and divisor < 0):
        raise dsl_value_error(f"{what} divisor must be a non-zero {'signed' if signed else 'unsigned'} "
                              f"32-bit Python int, got {divisor!r}")


def udiv_const(x: Value, divisor: int, *, max_value: int = U32_MAX) -> Value:
    """``x // divisor`` with x read as unsigned 32-bit; ``max_value`` (an upper bound on x)
    may allow a shorter sequence."""
    _check(x, divisor, "udiv_const", signed=False)
    k = x.kernel
    magic = unsigned_magic(divisor, max_value)
    return k.wrap(emit_udiv(k.builder, k.ir_of(x), magic), x.dtype, x.lanes)


def umod_const(x: Value, divisor: int, *, max_value: int = U32_MAX) -> Value:
    """``x % divisor`` with x read as unsigned 32-bit."""
    return x - udiv_const(x, divisor, max_value=max_value) * divisor


def sdiv_const(x: Value, divisor: int) -> Value:
    """Signed ``x / divisor`` truncated toward zero (C semantics), x an i32 value."""
    _check(x, divisor, "sdiv_const", signed=True)
    if x.dtype != T.i32:
        raise dsl_type_error(f"sdiv_const needs an i32 value, got {x.type_name}")
    from .math import abs_
    magnitude = abs_(x).bitcast(T.u32)  # |INT_MIN| = 2**31 is exact as u32
    quotient = udiv_const(magnitude, abs(divisor), max_value=2 ** 31).bitcast(T.i32)
    negative = x < 0
    if divisor < 0:
        return select(negative, quotient, -quotient)
    return select(negative, -quotient, quotient)


def smod_const(x: Value, divisor: int) -> Value:
    """Signed remainder with the sign of ``x`` (C ``%``), x an i32 value."""
    return x - sdiv_const(x, divisor) * divisor
