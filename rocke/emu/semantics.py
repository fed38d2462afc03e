"""gfx942 VALU and SALU instruction semantics, written from AMD's CDNA3 ISA definitions.

``VALU_OPS`` and ``SALU_OPS`` map a mnemonic as LLVM prints it for gfx942, without
encoding suffixes, to an :class:`AluOp`. The tables cover what LLVM and Triton emit
for gfx942 compute kernels:

* VALU: f32/f16/f64 arithmetic (add/sub/subrev/mul, fma/fmac/mad/mac, min/max/min3/max3/med3);
  integer arithmetic (add/sub/subrev with and without carry, mul_lo/hi, the 24-bit
  multiplies, mad_u64_u32/mad_i64_i32); bitwise ops and shifts, including the fused
  three-operand forms (lshl_add, add_lshl, lshl_or, and_or, or3, xad, add3) plus alignbit,
  alignbyte, bfe, bfi, bfm, perm, bcnt, ffbh/ffbl, brev, mbcnt; 16- and 64-bit shifts; every
  VOPC compare (v_cmp_*/v_cmpx_* over f16/f32/f64/i16/u16/i32/u32/i64/u64, and
  v_cmp_class); v_cndmask_b32; int/float, f16/f32/f64, fp8/bf8 and pkrtz conversions;
  transcendentals (exp, log, rcp, rsq, sqrt, sin/cos in revolutions); ldexp, frexp,
  fract, trunc/ceil/floor/rndne; the fdiv helpers div_scale/div_fmas/div_fixup; packed
  VOP3P f16/i16/u16 ops and the 64-bit packed f32 ops; fma_mix; dot2/dot4.
* SALU: 32/64-bit add/sub with carry, multiplies, shifts, shift-add, bitwise ops, bit-field
  ops, min/max, cselect/cmov, compares, bit scans, sign extension, pack, bitset.

Each op's ``fn`` computes in the type's own precision. Where the ISA defines a fused
result (fma, div_fmas) it is rounded once, exactly: f32 via an error-free float64 sum,
f64 via exact rational arithmetic per lane (slow, but f64 is rare in these kernels).
Transcendentals are computed in float64 and rounded once to the result type. That is
at least as accurate as the hardware's ~1 ulp, so it can differ from it in the last bit.
v_exp/log/sqrt/sin/cos_f32 use the definitions every array backend shares
(rocke/emu/backend.py: float64 series over correctly rounded operations only; sin/cos remove
whole revolutions exactly first, so integer and half-integer inputs give exact zeros).
v_exp_f32 flushes subnormal results. v_log/rcp/rsq/sqrt_f32 flush subnormal inputs to
zero, as their hardware does. LLVM's lowering scales those ranges itself.

Variants the decoder picks per instruction (rocke/emu/valu.py `_numeric_variant`):
``VALU_CLAMP_OPS`` (fp8 packs saturating under `clamp`), ``VALU_INT_CLAMP_OPS`` (integer
`clamp` saturates instead of wrapping; carry-outs stay the unclamped ones), ``rounded_op`` (MODE
FP_ROUND toward +inf/-inf/zero, applied to the add/sub/mul/fma/mad families and float
down-conversions; other float results refuse a non-default mode unless exact, see
``rounding_is_exact``) and ``fp16_overflow_op`` (MODE FP16_OVFL: finite overflow of f16 results
and f32->fp8/bf8 packs saturates to the format's max; an infinite input stays non-finite, the
NaN code for the fnuz formats — a reading the ISA text leaves implicit). v_trig_preop_f64 returns
the 53-bit chunk of 2/pi starting `53 * segment + max(exponent - 1077, 0)` bits in; with it the
device library's Payne-Hanek reduction reproduces glibc's sin/cos for arguments up to 2^1000
(tests/emu/test_triton_kernels.py f64_math).

Operand types (``AluOp.dsts`` / ``srcs``; their widths are ``operands.TYPE_BITS``): ``f16`` /
``f32`` / ``f64`` floats; ``i16`` / ``i32`` / ``i64`` signed and ``u16`` / ``u32`` / ``u64``
unsigned integers; ``b16`` / ``b32`` / ``b64`` raw bits; ``pk_f16`` / ``pk_i16`` / ``pk_u16`` two
16-bit values of one 32-bit register (a trailing axis of 2, element 0 = the low half); ``u8x4``
its four bytes (a trailing axis of 4); ``mask`` a 64-bit lane mask (one bit per lane, as VCC
or an SGPR pair holds it); and ``pk_f32``, a 64-bit register pair of two f32 (float32 with a
trailing axis of 2, element 0 = the op_sel-selected register). ``AluOp.implicit_srcs`` names
sources that are not asm operands (the tied destination, VCC). ``VALU_CLAMP_OPS`` holds the
versions of ops whose ``clamp`` bit is not a float clamp: v_cvt_pk_{fp8,bf8}_f32 saturate.
SALU ops that write only SCC return a 1-tuple ``(scc,)``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from dataclasses import replace as dataclasses_replace
from fractions import Fraction
from typing import Callable

import numpy as np

from . import backend, numerics


@dataclass(frozen=True)
class AluOp:
    """One scalar or vector ALU instruction (operand types: the module docstring).

    ``implicit_srcs`` lists sources appended after the asm operands, in order, whose
    types are the trailing entries of ``srcs``: ``"dst"`` is the current value of the
    destination register (tied accumulators such as v_fmac_f32, s_cmov_b32),
    ``"vcc"`` the implicit VCC mask (v_div_fmas_*).
    """

    dsts: tuple[str, ...]
    srcs: tuple[str, ...]
    fn: Callable
    reads_scc: bool = False
    writes_scc: bool = False
    float_mods: bool = True
    implicit_srcs: tuple[str, ...] = ()


FLOAT_TYPES = frozenset({"f16", "f32", "f64", "pk_f16", "pk_f32"})
VALU_OPS: dict[str, AluOp] = {}
SALU_OPS: dict[str, AluOp] = {}

# Lane index broadcastable against (n, 64) VALU arrays.
_LANE = np.arange(64, dtype=np.uint64)


def _quiet(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        with np.errstate(all="ignore"):
            return fn(*args)

    return wrapper


def _valu(name, dsts, srcs, fn, *, float_mods=None, implicit=()):
    src_types = tuple(srcs.split())
    if float_mods is None:
        float_mods = any(t in FLOAT_TYPES for t in src_types)
    VALU_OPS[name] = AluOp(tuple(dsts.split()), src_types, _quiet(fn),
                           float_mods=float_mods, implicit_srcs=tuple(implicit))


def _salu(name, dsts, srcs, fn, *, reads_scc=False, writes_scc=False, implicit=()):
    SALU_OPS[name] = AluOp(tuple(dsts.split()), tuple(srcs.split()), _quiet(fn),
                           reads_scc=reads_scc, writes_scc=writes_scc, float_mods=False,
                           implicit_srcs=tuple(implicit))


# ---------------------------------------------------------------------------------------
# Float helpers
# ---------------------------------------------------------------------------------------

def _f32(x):
    return np.asarray(x, dtype=np.float32)


_flush_f32 = numerics.flush_f32_denormals


def _two_sum(a, b):
    """s + err == a + b exactly (float64, finite inputs)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def _round_to_odd(hi, lo):
    """hi + lo rounded to float64 with round-to-odd, so a later rounding to f32 is exact."""
    inexact = np.isfinite(hi) & np.isfinite(lo) & (lo != 0)
    even = (hi.view(np.uint64) & 1) == 0
    bump = inexact & even
    toward = np.where(lo > 0, np.inf, -np.inf)
    return np.where(bump, np.nextafter(hi, toward), hi)


def _fma_f32_scaled(a, b, c, scale=None):
    """fma(a, b, c) * scale (scale a power of two), rounded once to float32."""
    product = a.astype(np.float64) * b.astype(np.float64)  # exact: 24x24-bit
    hi, lo = _two_sum(product, c.astype(np.float64))
    if scale is not None:
        hi, lo = hi * scale, lo * scale
    exact_path = _round_to_odd(hi, lo)
    plain = product + c.astype(np.float64) if scale is None else (product + c) * scale
    return np.where(np.isfinite(hi), exact_path, plain).astype(np.float32)


def _fma_f32(a, b, c):
    """fma rounded once to float32. The float64 sum a*b + c (a*b exact) is within half a float64
    ulp of the exact value, so rounding it to float32 is correct unless the sum was inexact and
    landed exactly on a float32 midpoint (low 29 mantissa bits 0x10000000), or lies in float32's
    subnormal range; only those lanes take the exact path. Subnormal sums are found on the
    float32 result: |result| <= 2**-126 covers every one (and a few lanes the exact path rounds
    the same)."""
    a, b, c = np.broadcast_arrays(_f32(a), _f32(b), _f32(c))
    # a lane-uniform factor (an SGPR) widened once per wave: the product keeps its operand
    # order (a * b), so its NaN payloads too
    product = _lane_compact(a).astype(np.float64) * _lane_compact(b).astype(np.float64)
    # exactly the expression _fma_f32_scaled rounds for non-finite sums: numpy's choice of NaN
    # payload depends on the expression's form (temporary elision)
    total = product + c.astype(np.float64)
    result = total.astype(np.float32)
    boundary = (total.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    if boundary.any():
        # keep the ties whose float64 sum was inexact: a sum of two floats lands on a float32
        # midpoint often (a*b exact in float32, e.g. by a power of two), so every lane is tested
        # (beats gathering the tie lanes). Subtracting the larger operand from the rounded sum
        # is exact (Fast2Sum), so the sum was exact iff both subtractions give the other one
        addend = c.astype(np.float64)
        boundary &= ~((total - product == addend) & (total - addend == product))
    boundary |= (result.view(np.uint32) & np.uint32(0x7FFFFFFF)) <= np.uint32(0x00800000)
    if boundary.any():
        result[boundary] = _fma_f32_scaled(a[boundary], b[boundary], c[boundary])
    return result


def _lane_compact(x):
    """`x` without its broadcast lane axis ((n, 64) of stride 0 -> (n, 1)): converting the
    compact column costs a 64th of converting the stride-0 view."""
    if x.ndim == 2 and x.shape[1] > 1 and x.strides[1] == 0:
        return x[:, :1]
    return x


def _exact_fma_f64_scalar(a: float, b: float, c: float, scale_exponent: int) -> float:
    """(a * b + c) * 2^scale_exponent rounded once to float64 (finite inputs)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # IEEE sign rules for an exact zero sum
    exact *= Fraction(2) ** scale_exponent
    try:
        return exact.numerator / exact.denominator  # int division is correctly rounded
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


_exact_fma_f64_vector = np.vectorize(_exact_fma_f64_scalar, otypes=[np.float64])


def _fma_f64(a, b, c, scale_exponent=None):
    """float64 fma (times 2^scale_exponent), rounded once. Exact rational arithmetic per lane:
    slow, but f64 fma is rare in GPU kernels."""
    a, b, c = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (a, b, c)))
    scale = np.zeros(a.shape, dtype=np.int64) if scale_exponent is None else np.broadcast_to(scale_exponent, a.shape)
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    unfused = a * b + c
    if scale_exponent is not None:
        unfused = np.ldexp(unfused, scale)
    if not finite.any():
        return unfused
    result = unfused.copy()
    result[finite] = _exact_fma_f64_vector(a[finite], b[finite], c[finite], scale[finite])
    return result


_FLOAT_BITS = {np.float16: (np.uint16, 1 << 9), np.float32: (np.uint32, 1 << 22),
               np.float64: (np.uint64, 1 << 51)}


def _ieee_min_max(a, b, pick):
    """IEEE-mode NaN rules of V_MIN/V_MAX: a signaling NaN operand gives that NaN made quiet,
    otherwise a quiet NaN operand yields the other operand."""
    a_nan, b_nan = np.isnan(a), np.isnan(b)
    if not (a_nan.any() or b_nan.any()):
        return pick.astype(a.dtype, copy=False)
    uint, quiet_bit = _FLOAT_BITS[a.dtype.type]
    a_bits, b_bits = a.view(uint), b.view(uint)
    a_signaling = a_nan & ((a_bits & uint(quiet_bit)) == 0)
    b_signaling = b_nan & ((b_bits & uint(quiet_bit)) == 0)
    pick = np.where(b_nan, a, pick)
    pick = np.where(a_nan, b, pick)
    pick = np.where(b_signaling, (b_bits | uint(quiet_bit)).view(a.dtype), pick)
    return np.where(a_signaling, (a_bits | uint(quiet_bit)).view(a.dtype), pick).astype(a.dtype)


def _fmin(a, b):
    """V_MIN_*: -0 < +0; NaN rules of _ieee_min_max."""
    a, b = np.broadcast_arrays(a, b)
    fast = _min_max_without_nan(a, b, np.minimum, np.bitwise_or)
    if fast is not None:
        return fast
    less = (a < b) | ((a == b) & np.signbit(a))
    return _ieee_min_max(a, b, np.where(less, a, b))


def _fmax(a, b):
    """V_MAX_*: +0 > -0; NaN rules of _ieee_min_max."""
    a, b = np.broadcast_arrays(a, b)
    fast = _min_max_without_nan(a, b, np.maximum, np.bitwise_and)
    if fast is not None:
        return fast
    greater = (a > b) | ((a == b) & ~np.signbit(a))
    return _ieee_min_max(a, b, np.where(greater, a, b))


def _min_max_without_nan(a, b, extreme, merge_equal):
    """np.minimum / np.maximum of float arrays, or None if a lane holds a NaN (numpy's pick
    propagates NaN; the ISA's rules are _ieee_min_max's). Equal operands differ only as -0 and
    +0 (equal nonzero values have one bit pattern): where the result is a zero of equal
    operands, their sign bits or'ed (min: -0) or and'ed (max: +0) give the ISA's choice."""
    if a.dtype != b.dtype or a.dtype.type not in _FLOAT_BITS:
        return None
    out = extreme(a, b)
    if np.isnan(out).any():
        return None
    zero = out == 0
    if zero.any():
        bits = _FLOAT_BITS[out.dtype.type][0]
        np.copyto(out, merge_equal(a.view(bits), b.view(bits)).view(out.dtype),
                  where=zero & (a == b))
    return out


def _fmed3(a, b, c):
    """V_MED3_F*: median; if any input is NaN the ISA returns min3."""
    any_nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    median = _fmax(_fmin(a, b), _fmin(_fmax(a, b), c))
    return np.where(any_nan, _fmin(_fmin(a, b), c), median)


def _via_f64(func, out_dtype):
    def apply(x):
        return func(np.asarray(x).astype(np.float64)).astype(out_dtype)

    return apply


def _fract(x):
    """V_FRACT: x - floor(x), kept below 1.0 (largest value under one); NaN/inf -> NaN."""
    dtype = x.dtype
    below_one = np.nextafter(np.array(1, dtype), np.array(0, dtype))
    frac = np.minimum(x - np.floor(x), below_one)
    return np.where(np.isinf(x), np.array(np.nan, dtype), frac).astype(dtype)


def _frexp_mant(x):
    mant, _ = np.frexp(x)
    return np.where(np.isfinite(x), mant, x).astype(x.dtype)


def _frexp_exp(x, out_dtype):
    _, exp = np.frexp(np.where(np.isfinite(x), x, 0))
    return exp.astype(out_dtype)


def _ldexp(x, e):
    return np.ldexp(x, np.clip(np.asarray(e).astype(np.int64), -2000, 2000)).astype(x.dtype)


def _cvt_int_from_float(x, dtype):
    """V_CVT_{I32,U32}_F*: truncate, saturate to the integer range, NaN -> 0."""
    info = np.iinfo(dtype)
    truncated = np.trunc(np.asarray(x, dtype=np.float64))
    clipped = np.clip(np.nan_to_num(truncated, nan=0.0), info.min, info.max)
    return clipped.astype(dtype)


def _f32_to_f16_rtz(x):
    """f32 -> f16 rounded toward zero (V_CVT_PKRTZ_F16_F32)."""
    nearest = x.astype(np.float16)
    overshoot = np.abs(nearest.astype(np.float32)) > np.abs(x)
    bits = nearest.view(np.uint16)
    stepped = np.where(overshoot & ~np.isnan(x), bits - np.uint16(1), bits).astype(np.uint16)
    return stepped.view(np.float16)


def _float_class_mask(x, classes):
    """V_CMP_CLASS_*: bit i of classes tests class i of x (ISA order)."""
    classes = np.asarray(classes).astype(np.uint32)
    bits = x.view({np.float16: np.uint16, np.float32: np.uint32,
                   np.float64: np.uint64}[x.dtype.type])
    mantissa_bits = {np.float16: 10, np.float32: 23, np.float64: 52}[x.dtype.type]
    quiet_bit = bits.dtype.type(1) << bits.dtype.type(mantissa_bits - 1)
    finfo = np.finfo(x.dtype)
    neg = np.signbit(x)
    mag = np.abs(x)
    is_nan = np.isnan(x)
    tests = [
        is_nan & ((bits & quiet_bit) == 0),          # 0 signaling NaN
        is_nan & ((bits & quiet_bit) != 0),          # 1 quiet NaN
        np.isinf(x) & neg,                            # 2 -inf
        neg & (mag >= finfo.tiny) & np.isfinite(x),   # 3 -normal
        neg & (mag > 0) & (mag < finfo.tiny),         # 4 -denormal
        neg & (mag == 0),                             # 5 -0
        ~neg & (mag == 0),                            # 6 +0
        ~neg & (mag > 0) & (mag < finfo.tiny),        # 7 +denormal
        ~neg & (mag >= finfo.tiny) & np.isfinite(x),  # 8 +normal
        np.isinf(x) & ~neg,                           # 9 +inf
    ]
    result = np.zeros(np.broadcast(x, classes).shape, dtype=bool)
    for index, test in enumerate(tests):
        result |= test & (((classes >> np.uint32(index)) & 1) == 1)
    return result


# ---------------------------------------------------------------------------------------
# Float VALU ops
# ---------------------------------------------------------------------------------------

def _register_float_ops(suffix, t):
    _valu(f"v_add_{suffix}", t, f"{t} {t}", lambda a, b: a + b)
    _valu(f"v_sub_{suffix}", t, f"{t} {t}", lambda a, b: a - b)
    _valu(f"v_subrev_{suffix}", t, f"{t} {t}", lambda a, b: b - a)
    _valu(f"v_mul_{suffix}", t, f"{t} {t}", lambda a, b: a * b)
    _valu(f"v_min_{suffix}", t, f"{t} {t}", _fmin)
    _valu(f"v_max_{suffix}", t, f"{t} {t}", _fmax)
    _valu(f"v_min3_{suffix}", t, f"{t} {t} {t}", lambda a, b, c: _fmin(_fmin(a, b), c))
    _valu(f"v_max3_{suffix}", t, f"{t} {t} {t}", lambda a, b, c: _fmax(_fmax(a, b), c))
    _valu(f"v_med3_{suffix}", t, f"{t} {t} {t}", _fmed3)
    _valu(f"v_trunc_{suffix}", t, t, np.trunc)
    _valu(f"v_ceil_{suffix}", t, t, np.ceil)
    _valu(f"v_floor_{suffix}", t, t, np.floor)
    _valu(f"v_rndne_{suffix}", t, t, np.rint)
    _valu(f"v_fract_{suffix}", t, t, _fract)
    _valu(f"v_frexp_mant_{suffix}", t, t, _frexp_mant)
    _valu(f"v_ldexp_{suffix}", t, f"{t} {'i16' if t == 'f16' else 'i32'}", _ldexp)
    _valu(f"v_cmp_class_{suffix}", "mask", f"{t} u32", _float_class_mask)
    _valu(f"v_cmpx_class_{suffix}", "mask", f"{t} u32", _float_class_mask)


for _suffix, _t in (("f32", "f32"), ("f16", "f16"), ("f64", "f64")):
    _register_float_ops(_suffix, _t)
for _name in ("v_min3_f64", "v_max3_f64", "v_med3_f64", "v_sub_f64", "v_subrev_f64"):
    del VALU_OPS[_name]  # no such gfx942 instructions

_valu("v_frexp_exp_i32_f32", "i32", "f32", lambda x: _frexp_exp(x, np.int32))
_valu("v_frexp_exp_i32_f64", "i32", "f64", lambda x: _frexp_exp(x, np.int32))
_valu("v_frexp_exp_i16_f16", "i16", "f16", lambda x: _frexp_exp(x, np.int16))

_valu("v_fma_f32", "f32", "f32 f32 f32", _fma_f32)
# Legacy multiply: 0 times anything (inf and NaN included) is +0.
_valu("v_mul_legacy_f32", "f32", "f32 f32",
      lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b).astype(np.float32))
_valu("v_mad_legacy_f32", "f32", "f32 f32 f32",
      lambda a, b, c: np.where((a == 0) | (b == 0), np.float32(0), a * b).astype(np.float32) + c)
_valu("v_fmac_f32", "f32", "f32 f32 f32", _fma_f32, implicit=("dst",))
_valu("v_fmaak_f32", "f32", "f32 f32 f32", _fma_f32)
_valu("v_fmamk_f32", "f32", "f32 f32 f32", lambda a, k, b: _fma_f32(a, k, b))
# mad/mac round the product before the add (unfused).
_valu("v_mad_f32", "f32", "f32 f32 f32", lambda a, b, c: a * b + c)
_valu("v_mac_f32", "f32", "f32 f32 f32", lambda a, b, c: a * b + c, implicit=("dst",))
_valu("v_madak_f32", "f32", "f32 f32 f32", lambda a, b, k: a * b + k)
_valu("v_madmk_f32", "f32", "f32 f32 f32", lambda a, k, b: a * k + b)
_valu("v_fma_f64", "f64", "f64 f64 f64", _fma_f64)
_valu("v_fmac_f64", "f64", "f64 f64 f64", _fma_f64, implicit=("dst",))
# f16 products are exact in f32, and f32 -> f16 rounding of the exact f32 fma is a
# single rounding except when the f32 sum itself rounded; float64 keeps it exact.
_valu("v_fma_f16", "f16", "f16 f16 f16",
      lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float16))
_valu("v_fmac_f16", "f16", "f16 f16 f16",
      lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float16), implicit=("dst",))
_valu("v_mad_f16", "f16", "f16 f16 f16", lambda a, b, c: a * b + c)
_valu("v_mac_f16", "f16", "f16 f16 f16", lambda a, b, c: a * b + c, implicit=("dst",))

# exp/log/sqrt/sin/cos: the definitions every array backend shares (rocke/emu/backend.py)
_valu("v_exp_f32", "f32", "f32", lambda x: backend.exp2_f32(backend.NUMPY, x))
_valu("v_log_f32", "f32", "f32", lambda x: backend.log2_f32(backend.NUMPY, x))
_valu("v_rcp_f32", "f32", "f32", lambda x: (1.0 / _flush_f32(x).astype(np.float64)).astype(np.float32))
_valu("v_rcp_iflag_f32", "f32", "f32",
      lambda x: (1.0 / _flush_f32(x).astype(np.float64)).astype(np.float32))
_valu("v_rsq_f32", "f32", "f32",
      lambda x: (1.0 / np.sqrt(_flush_f32(x).astype(np.float64))).astype(np.float32))
_valu("v_sqrt_f32", "f32", "f32", lambda x: backend.sqrt_f32(backend.NUMPY, x))
_valu("v_sin_f32", "f32", "f32", lambda x: backend.sin_rev_f32(backend.NUMPY, x))
_valu("v_cos_f32", "f32", "f32", lambda x: backend.cos_rev_f32(backend.NUMPY, x))
for _name, _func in (("v_exp_f16", np.exp2), ("v_log_f16", np.log2), ("v_rcp_f16", lambda v: 1.0 / v),
                     ("v_rsq_f16", lambda v: 1.0 / np.sqrt(v)), ("v_sqrt_f16", np.sqrt),
                     ("v_sin_f16", lambda v: np.sin(2 * np.pi * v)),
                     ("v_cos_f16", lambda v: np.cos(2 * np.pi * v))):
    _valu(_name, "f16", "f16", _via_f64(_func, np.float16))
_valu("v_rcp_f64", "f64", "f64", lambda x: 1.0 / x)
_valu("v_rsq_f64", "f64", "f64", lambda x: 1.0 / np.sqrt(x))
_valu("v_sqrt_f64", "f64", "f64", np.sqrt)

# --- fdiv helpers -------------------------------------------------------------------------

def _exponent_f32(x):
    return ((x.view(np.uint32) >> 23) & 0xFF).astype(np.int32)


def _is_denorm_f32(x):
    bits = x.view(np.uint32)
    return ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)


def _div_scale_f32(s0, s1, s2):
    """V_DIV_SCALE_F32: s0 = value to scale, s1 = denominator, s2 = numerator.

    Returns (scaled s0, vcc). VCC tells V_DIV_FMAS_F32 to undo a 2^64 scaling.
    """
    s0, s1, s2 = _f32(s0), _f32(s1), _f32(s2)
    # scaled values, computed only when some lane needs them (most divisions need none)
    up = lambda: np.ldexp(s0, 64).astype(np.float32)   # noqa: E731
    down = lambda: np.ldexp(s0, -64).astype(np.float32)   # noqa: E731
    # "== DENORM" tests the f32 result: 1/S1 and S2/S1 as the rounded float32 values.
    reciprocal_denorm = _is_denorm_f32(np.float32(1.0) / s1)
    quotient_denorm = _is_denorm_f32(s2 / s1)
    result, vcc = s0.copy(), np.zeros(s0.shape, dtype=bool)
    undecided = np.ones(s0.shape, dtype=bool)

    def case(cond, value, flag):
        nonlocal result, vcc, undecided
        hit = undecided & cond
        if hit.any():
            result = np.where(hit, value(), result)
            if flag:
                vcc = vcc | hit
        undecided = undecided & ~cond

    case((s2 == 0) | (s1 == 0), lambda: np.float32(np.nan), False)
    case(_exponent_f32(s2) - _exponent_f32(s1) >= 96, lambda: np.where(s0 == s1, up(), s0), True)
    case(_is_denorm_f32(s1), up, False)
    # Huge denominator and tiny quotient: scaling the denominator down by 2^64 both keeps its
    # reciprocal normal and lifts the quotient by 2^64, which V_DIV_FMAS_F32 then undoes.
    case(reciprocal_denorm & quotient_denorm, lambda: np.where(s0 == s1, down(), s0), True)
    case(reciprocal_denorm, down, False)
    case(quotient_denorm, lambda: np.where(s0 == s2, up(), s0), True)
    case(_exponent_f32(s2) <= 23, up, False)
    return result.astype(np.float32), vcc


def _div_fmas_f32(a, b, c, vcc):
    """V_DIV_FMAS_F32: fma, rescaled by 2^+-64 when VCC is set (direction from exponent(c))."""
    a, b, c = _f32(a), _f32(b), _f32(c)
    if not np.any(vcc):   # no lane rescales: the plain fma (same bits, fewer passes)
        return _fma_f32(a, b, c)
    scale = np.where(vcc, np.where(_exponent_f32(c) > 127, 2.0 ** 64, 2.0 ** -64), 1.0)
    return _fma_f32_scaled(a, b, c, scale)


_UNDERFLOW_EXPONENT_GAP = {np.float16: 25, np.float32: 150, np.float64: 1075}


def _exponent(x):
    """Biased exponent field of a float16/32/64 array."""
    layout = {np.float16: (np.uint16, 10, 0x1F), np.float32: (np.uint32, 23, 0xFF),
              np.float64: (np.uint64, 52, 0x7FF)}
    uint, shift, mask = layout[x.dtype.type]
    return ((x.view(uint) >> uint(shift)) & uint(mask)).astype(np.int64)


def _div_fixup(quotient, den, num):
    """V_DIV_FIXUP_F*: special cases of num / den, else |quotient| with the right sign."""
    dtype = quotient.dtype.type
    negative = np.signbit(den) ^ np.signbit(num)
    signed_inf = np.where(negative, dtype(-np.inf), dtype(np.inf))
    signed_zero = np.where(negative, dtype(-0.0), dtype(0.0))
    # A NaN quotient from finite operands means the scaled quotient overflowed: +-inf.
    magnitude = np.where(np.isnan(quotient), dtype(np.inf), np.abs(quotient))
    result = np.where(negative, -magnitude, magnitude).astype(dtype)

    def override(where, value):   # most divisions have no special lane: skip the select
        return np.where(where, value, result) if where.any() else result
    result = override(_exponent(num) - _exponent(den) < -_UNDERFLOW_EXPONENT_GAP[dtype], signed_zero)
    result = override(np.isinf(den) | (num == 0), signed_zero)
    result = override((den == 0) | np.isinf(num), signed_inf)
    result = override(((den == 0) & (num == 0)) | (np.isinf(den) & np.isinf(num)), dtype(np.nan))
    result = override(np.isnan(den), den)
    return override(np.isnan(num), num).astype(dtype)


def _div_scale_f64(s0, s1, s2):
    """V_DIV_SCALE_F64, same structure as the f32 form with 2^128 and f64 limits."""
    tiny = np.finfo(np.float64).tiny
    exp = lambda v: ((v.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    denorm = lambda v: (np.abs(v) < tiny) & (v != 0)
    up, down = np.ldexp(s0, 128), np.ldexp(s0, -128)
    reciprocal_denorm = denorm(1.0 / s1)
    quotient_denorm = denorm(s2 / s1)
    conditions = [
        ((s2 == 0) | (s1 == 0), np.nan, False),
        (exp(s2) - exp(s1) >= 768, np.where(s0 == s1, up, s0), True),
        (denorm(s1), up, False),
        (reciprocal_denorm & quotient_denorm, np.where(s0 == s1, down, s0), True),
        (reciprocal_denorm, down, False),
        (quotient_denorm, np.where(s0 == s2, up, s0), True),
        (exp(s2) <= 53, up, False),
    ]
    result, vcc = s0.copy(), np.zeros(s0.shape, dtype=bool)
    undecided = np.ones(s0.shape, dtype=bool)
    for cond, value, flag in conditions:
        hit = undecided & cond
        result = np.where(hit, value, result)
        vcc |= hit & flag
        undecided &= ~cond
    return result, vcc


def _div_fmas_f64(a, b, c, vcc):
    exp_c = ((c.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    return _fma_f64(a, b, c, np.where(vcc, np.where(exp_c > 1023, 128, -128), 0))


_valu("v_div_scale_f32", "f32 mask", "f32 f32 f32", _div_scale_f32)
_valu("v_div_fmas_f32", "f32", "f32 f32 f32 mask", _div_fmas_f32, implicit=("vcc",))
_valu("v_div_fixup_f32", "f32", "f32 f32 f32", _div_fixup)
_valu("v_div_fixup_f16", "f16", "f16 f16 f16", _div_fixup)
_valu("v_div_scale_f64", "f64 mask", "f64 f64 f64", _div_scale_f64)
_valu("v_div_fmas_f64", "f64", "f64 f64 f64 mask", _div_fmas_f64, implicit=("vcc",))
_valu("v_div_fixup_f64", "f64", "f64 f64 f64", _div_fixup)

# --- compares -----------------------------------------------------------------------------

_FLOAT_COMPARES = {
    "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, dtype=bool),
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "lg": lambda a, b: (a < b) | (a > b), "ge": lambda a, b: a >= b,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
    "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b),
    "nlt": lambda a, b: ~(a < b),
    "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, dtype=bool),
}
_INT_COMPARES = {
    "f": _FLOAT_COMPARES["f"], "lt": _FLOAT_COMPARES["lt"], "eq": _FLOAT_COMPARES["eq"],
    "le": _FLOAT_COMPARES["le"], "gt": _FLOAT_COMPARES["gt"], "ne": lambda a, b: a != b,
    "ge": _FLOAT_COMPARES["ge"], "t": _FLOAT_COMPARES["tru"],
}
# Spelled out so each compare is greppable by its mnemonic: <prefix>_<condition>_<type>.
VOPC_COMPARES = (
    "v_cmp_f_f16", "v_cmp_lt_f16", "v_cmp_eq_f16", "v_cmp_le_f16", "v_cmp_gt_f16", "v_cmp_lg_f16",
    "v_cmp_ge_f16", "v_cmp_o_f16", "v_cmp_u_f16", "v_cmp_nge_f16", "v_cmp_nlg_f16",
    "v_cmp_ngt_f16", "v_cmp_nle_f16", "v_cmp_neq_f16", "v_cmp_nlt_f16", "v_cmp_tru_f16",
    "v_cmp_f_f32", "v_cmp_lt_f32", "v_cmp_eq_f32", "v_cmp_le_f32", "v_cmp_gt_f32", "v_cmp_lg_f32",
    "v_cmp_ge_f32", "v_cmp_o_f32", "v_cmp_u_f32", "v_cmp_nge_f32", "v_cmp_nlg_f32",
    "v_cmp_ngt_f32", "v_cmp_nle_f32", "v_cmp_neq_f32", "v_cmp_nlt_f32", "v_cmp_tru_f32",
    "v_cmp_f_f64", "v_cmp_lt_f64", "v_cmp_eq_f64", "v_cmp_le_f64", "v_cmp_gt_f64", "v_cmp_lg_f64",
    "v_cmp_ge_f64", "v_cmp_o_f64", "v_cmp_u_f64", "v_cmp_nge_f64", "v_cmp_nlg_f64",
    "v_cmp_ngt_f64", "v_cmp_nle_f64", "v_cmp_neq_f64", "v_cmp_nlt_f64", "v_cmp_tru_f64",
    "v_cmp_f_i16", "v_cmp_lt_i16", "v_cmp_eq_i16", "v_cmp_le_i16", "v_cmp_gt_i16", "v_cmp_ne_i16",
    "v_cmp_ge_i16", "v_cmp_t_i16",
    "v_cmp_f_u16", "v_cmp_lt_u16", "v_cmp_eq_u16", "v_cmp_le_u16", "v_cmp_gt_u16", "v_cmp_ne_u16",
    "v_cmp_ge_u16", "v_cmp_t_u16",
    "v_cmp_f_i32", "v_cmp_lt_i32", "v_cmp_eq_i32", "v_cmp_le_i32", "v_cmp_gt_i32", "v_cmp_ne_i32",
    "v_cmp_ge_i32", "v_cmp_t_i32",
    "v_cmp_f_u32", "v_cmp_lt_u32", "v_cmp_eq_u32", "v_cmp_le_u32", "v_cmp_gt_u32", "v_cmp_ne_u32",
    "v_cmp_ge_u32", "v_cmp_t_u32",
    "v_cmp_f_i64", "v_cmp_lt_i64", "v_cmp_eq_i64", "v_cmp_le_i64", "v_cmp_gt_i64", "v_cmp_ne_i64",
    "v_cmp_ge_i64", "v_cmp_t_i64",
    "v_cmp_f_u64", "v_cmp_lt_u64", "v_cmp_eq_u64", "v_cmp_le_u64", "v_cmp_gt_u64", "v_cmp_ne_u64",
    "v_cmp_ge_u64", "v_cmp_t_u64",
    "v_cmpx_f_f16", "v_cmpx_lt_f16", "v_cmpx_eq_f16", "v_cmpx_le_f16", "v_cmpx_gt_f16",
    "v_cmpx_lg_f16", "v_cmpx_ge_f16", "v_cmpx_o_f16", "v_cmpx_u_f16", "v_cmpx_nge_f16",
    "v_cmpx_nlg_f16", "v_cmpx_ngt_f16", "v_cmpx_nle_f16", "v_cmpx_neq_f16", "v_cmpx_nlt_f16",
    "v_cmpx_tru_f16",
    "v_cmpx_f_f32", "v_cmpx_lt_f32", "v_cmpx_eq_f32", "v_cmpx_le_f32", "v_cmpx_gt_f32",
    "v_cmpx_lg_f32", "v_cmpx_ge_f32", "v_cmpx_o_f32", "v_cmpx_u_f32", "v_cmpx_nge_f32",
    "v_cmpx_nlg_f32", "v_cmpx_ngt_f32", "v_cmpx_nle_f32", "v_cmpx_neq_f32", "v_cmpx_nlt_f32",
    "v_cmpx_tru_f32",
    "v_cmpx_f_f64", "v_cmpx_lt_f64", "v_cmpx_eq_f64", "v_cmpx_le_f64", "v_cmpx_gt_f64",
    "v_cmpx_lg_f64", "v_cmpx_ge_f64", "v_cmpx_o_f64", "v_cmpx_u_f64", "v_cmpx_nge_f64",
    "v_cmpx_nlg_f64", "v_cmpx_ngt_f64", "v_cmpx_nle_f64", "v_cmpx_neq_f64", "v_cmpx_nlt_f64",
    "v_cmpx_tru_f64",
    "v_cmpx_f_i16", "v_cmpx_lt_i16", "v_cmpx_eq_i16", "v_cmpx_le_i16", "v_cmpx_gt_i16",
    "v_cmpx_ne_i16", "v_cmpx_ge_i16", "v_cmpx_t_i16",
    "v_cmpx_f_u16", "v_cmpx_lt_u16", "v_cmpx_eq_u16", "v_cmpx_le_u16", "v_cmpx_gt_u16",
    "v_cmpx_ne_u16", "v_cmpx_ge_u16", "v_cmpx_t_u16",
    "v_cmpx_f_i32", "v_cmpx_lt_i32", "v_cmpx_eq_i32", "v_cmpx_le_i32", "v_cmpx_gt_i32",
    "v_cmpx_ne_i32", "v_cmpx_ge_i32", "v_cmpx_t_i32",
    "v_cmpx_f_u32", "v_cmpx_lt_u32", "v_cmpx_eq_u32", "v_cmpx_le_u32", "v_cmpx_gt_u32",
    "v_cmpx_ne_u32", "v_cmpx_ge_u32", "v_cmpx_t_u32",
    "v_cmpx_f_i64", "v_cmpx_lt_i64", "v_cmpx_eq_i64", "v_cmpx_le_i64", "v_cmpx_gt_i64",
    "v_cmpx_ne_i64", "v_cmpx_ge_i64", "v_cmpx_t_i64",
    "v_cmpx_f_u64", "v_cmpx_lt_u64", "v_cmpx_eq_u64", "v_cmpx_le_u64", "v_cmpx_gt_u64",
    "v_cmpx_ne_u64", "v_cmpx_ge_u64", "v_cmpx_t_u64",
)
for _name in VOPC_COMPARES:
    _, _cond, _t = _name.rsplit("_", 2)
    _valu(_name, "mask", f"{_t} {_t}", (_FLOAT_COMPARES if _t[0] == "f" else _INT_COMPARES)[_cond])

# --- conversions --------------------------------------------------------------------------

_valu("v_cvt_f32_i32", "f32", "i32", lambda x: x.astype(np.float32))
_valu("v_cvt_f32_u32", "f32", "u32", lambda x: x.astype(np.float32))
_valu("v_cvt_i32_f32", "i32", "f32", lambda x: _cvt_int_from_float(x, np.int32))
_valu("v_cvt_u32_f32", "u32", "f32", lambda x: _cvt_int_from_float(x, np.uint32))
_valu("v_cvt_rpi_i32_f32", "i32", "f32", lambda x: _cvt_int_from_float(np.floor(x + np.float32(0.5)), np.int32))
_valu("v_cvt_flr_i32_f32", "i32", "f32", lambda x: _cvt_int_from_float(np.floor(x), np.int32))
_valu("v_cvt_f16_f32", "f16", "f32", lambda x: x.astype(np.float16))
_valu("v_cvt_f32_f16", "f32", "f16", lambda x: x.astype(np.float32))
_valu("v_cvt_f16_u16", "f16", "u16", lambda x: x.astype(np.float16))
_valu("v_cvt_f16_i16", "f16", "i16", lambda x: x.astype(np.float16))
_valu("v_cvt_u16_f16", "u16", "f16", lambda x: _cvt_int_from_float(x, np.uint16))
_valu("v_cvt_i16_f16", "i16", "f16", lambda x: _cvt_int_from_float(x, np.int16))
_valu("v_cvt_f64_f32", "f64", "f32", lambda x: x.astype(np.float64))
_valu("v_cvt_f32_f64", "f32", "f64", lambda x: x.astype(np.float32))
_valu("v_cvt_f64_i32", "f64", "i32", lambda x: x.astype(np.float64))
_valu("v_cvt_f64_u32", "f64", "u32", lambda x: x.astype(np.float64))
_valu("v_cvt_i32_f64", "i32", "f64", lambda x: _cvt_int_from_float(x, np.int32))
_valu("v_cvt_u32_f64", "u32", "f64", lambda x: _cvt_int_from_float(x, np.uint32))
_valu("v_cvt_f32_ubyte0", "f32", "u32", lambda x: (x & 0xFF).astype(np.float32), float_mods=False)
_valu("v_cvt_f32_ubyte1", "f32", "u32", lambda x: ((x >> 8) & 0xFF).astype(np.float32), float_mods=False)
_valu("v_cvt_f32_ubyte2", "f32", "u32", lambda x: ((x >> 16) & 0xFF).astype(np.float32), float_mods=False)
_valu("v_cvt_f32_ubyte3", "f32", "u32", lambda x: ((x >> 24) & 0xFF).astype(np.float32), float_mods=False)
_valu("v_cvt_pkrtz_f16_f32", "pk_f16", "f32 f32",
      lambda a, b: np.stack([_f32_to_f16_rtz(a), _f32_to_f16_rtz(b)], axis=-1))
# VOP3 (not VOP3P): two f16 sources (op_sel picks their halves) packed into one b32, src0 low.
_valu("v_pack_b32_f16", "b32", "f16 f16",
      lambda a, b: a.view(np.uint16).astype(np.uint32) | (b.view(np.uint16).astype(np.uint32) << np.uint32(16)))
# Integer packs saturate to the 16-bit range.
_valu("v_cvt_pk_u16_u32", "pk_u16", "u32 u32",
      lambda a, b: np.stack([np.minimum(a, 0xFFFF), np.minimum(b, 0xFFFF)], axis=-1).astype(np.uint16))
_valu("v_cvt_pk_i16_i32", "pk_i16", "i32 i32",
      lambda a, b: np.stack([np.clip(a, -32768, 32767), np.clip(b, -32768, 32767)], axis=-1).astype(np.int16))


def _pack_fp8_pair(fmt, saturate):
    def pack(a, b):
        low = numerics.f32_to_fp8_bits(a, fmt, saturate).astype(np.uint16)
        high = numerics.f32_to_fp8_bits(b, fmt, saturate).astype(np.uint16)
        return (low | (high << np.uint16(8))).astype(np.uint16)

    return pack


# 16-bit result: op_sel[3] picks D[31:16] vs D[15:0]; the other half of D is preserved.
_valu("v_cvt_pk_fp8_f32", "b16", "f32 f32", _pack_fp8_pair("e4m3fnuz", saturate=False))
_valu("v_cvt_pk_bf8_f32", "b16", "f32 f32", _pack_fp8_pair("e5m2fnuz", saturate=False))
# Versions used when the instruction carries `clamp` (saturate to the format's max).
VALU_CLAMP_OPS: dict[str, AluOp] = {
    "v_cvt_pk_fp8_f32": AluOp(("b16",), ("f32", "f32"), _quiet(_pack_fp8_pair("e4m3fnuz", True))),
    "v_cvt_pk_bf8_f32": AluOp(("b16",), ("f32", "f32"), _quiet(_pack_fp8_pair("e5m2fnuz", True))),
}
# The byte (SDWA src0_sel BYTE_n) / word (WORD_n) selection is applied by the engine.
_valu("v_cvt_f32_fp8", "f32", "b32", lambda x: numerics.fp8_bits_to_f32(x, "e4m3fnuz"))
_valu("v_cvt_f32_bf8", "f32", "b32", lambda x: numerics.fp8_bits_to_f32(x, "e5m2fnuz"))
_valu("v_cvt_pk_f32_fp8", "pk_f32", "b32",
      lambda x: np.stack([numerics.fp8_bits_to_f32(x, "e4m3fnuz"),
                          numerics.fp8_bits_to_f32(x >> 8, "e4m3fnuz")], axis=-1))
_valu("v_cvt_pk_f32_bf8", "pk_f32", "b32",
      lambda x: np.stack([numerics.fp8_bits_to_f32(x, "e5m2fnuz"),
                          numerics.fp8_bits_to_f32(x >> 8, "e5m2fnuz")], axis=-1))

# ---------------------------------------------------------------------------------------
# Integer and bitwise VALU ops
# ---------------------------------------------------------------------------------------

_U32 = np.uint32


def _u32(x):
    return np.asarray(x).astype(np.uint32)


def _sh5(x):
    return _u32(x) & _U32(31)


def _add_co(a, b):
    total = a.astype(np.uint64) + b
    return total.astype(np.uint32), total > 0xFFFFFFFF


def _addc_co(a, b, carry):
    total = a.astype(np.uint64) + b + carry.astype(np.uint64)
    return total.astype(np.uint32), total > 0xFFFFFFFF


def _sub_co(a, b):
    return (a - b).astype(np.uint32), b > a


def _subb_co(a, b, borrow):
    wide_b = b.astype(np.uint64) + borrow.astype(np.uint64)
    return (a.astype(np.uint64) - wide_b).astype(np.uint32), wide_b > a


def _mul_hi_u32(a, b):
    return ((a.astype(np.uint64) * b) >> np.uint64(32)).astype(np.uint32)


def _mul_hi_i32(a, b):
    return ((a.astype(np.int64) * b) >> np.int64(32)).astype(np.int32)


def _sext(x, bits):
    """Sign-extend the low `bits` bits of x to int32 (bits in 1..32)."""
    shift = (32 - np.asarray(bits)).astype(np.uint32)
    return ((_u32(x) << shift).view(np.int32) >> shift.astype(np.int32)).astype(np.int32)


def _u24(x):
    return (_u32(x) & _U32(0xFFFFFF)).astype(np.uint64)


def _i24(x):
    return _sext(x, 24).astype(np.int64)


def _bfe_u32(value, offset, width):
    offset, width = _sh5(offset), _sh5(width)
    mask = ((np.uint64(1) << width.astype(np.uint64)) - np.uint64(1)).astype(np.uint32)
    return (value >> offset) & mask


def _bfe_i32(value, offset, width):
    width = _sh5(width)
    field = _bfe_u32(_u32(value), offset, width)
    return np.where(width == 0, np.int32(0), _sext(field, np.maximum(width, 1))).astype(np.int32)


def _alignbit(hi, lo, shift):
    wide = (hi.astype(np.uint64) << np.uint64(32)) | lo
    return (wide >> (shift & _U32(31)).astype(np.uint64)).astype(np.uint32)


def _alignbyte(hi, lo, shift):
    wide = (hi.astype(np.uint64) << np.uint64(32)) | lo
    return (wide >> ((shift & _U32(3)) * _U32(8)).astype(np.uint64)).astype(np.uint32)


def _perm(s0, s1, selector):
    """V_PERM_B32: each selector byte picks a byte of {S0, S1} (S1 = bytes 0-3) or a constant."""
    # an SGPR selector is broadcast over the lanes (stride 0): compare one lane per wave
    distinct = selector[..., 0] if selector.ndim and selector.strides[-1] == 0 else selector
    if selector.size and (distinct == distinct.flat[0]).all():
        s0, s1, _ = np.broadcast_arrays(s0, s1, selector)
        return _perm_uniform(s0, s1, int(selector.flat[0]))
    data = (s0.astype(np.uint64) << np.uint64(32)) | s1
    result = np.zeros(np.broadcast(s0, s1, selector).shape, dtype=np.uint32)
    for lane_byte in range(4):
        sel = ((selector >> _U32(8 * lane_byte)) & _U32(0xFF)).astype(np.uint64)
        picked = (data >> (np.minimum(sel, 7) * np.uint64(8))) & np.uint64(0xFF)
        sign_bit_index = np.uint64(16) * (np.clip(sel, 8, 11) - np.uint64(8)) + np.uint64(15)
        sign_fill = np.where((data >> sign_bit_index) & np.uint64(1), 0xFF, 0x00)
        byte = np.where(sel < 8, picked, np.where(sel < 12, sign_fill, np.where(sel == 12, 0x00, 0xFF)))
        result |= (byte.astype(np.uint32) << _U32(8 * lane_byte))
    return result


def _perm_uniform(s0, s1, selector: int):
    """_perm with one selector for every lane (the common, constant-operand case), on the
    32-bit sources directly: byte k of {S0, S1} is byte k % 4 of S1 (k < 4) or of S0. Result
    bytes moved by the same shift out of the same source are moved together (one shift and
    one mask: a half-word pack is two)."""
    s0, s1 = np.asarray(s0, np.uint32), np.asarray(s1, np.uint32)
    moves, constant, signs = _perm_plan(selector)
    result = None
    for from_s0, shift, mask in moves:
        source = s0 if from_s0 else s1
        moved = source << _U32(8 * shift) if shift > 0 else \
            source >> _U32(-8 * shift) if shift < 0 else source
        # a shift already clears the bytes it moves in: no mask when it keeps all the others
        term = moved if mask == _SHIFT_KEEPS.get(shift) else moved & _U32(mask)
        result = term if result is None else result | term
    if result is None:
        result = np.zeros(s0.shape, dtype=np.uint32)
    if constant:
        result = result | _U32(constant)
    for lane_byte, bit in signs:
        byte = ((s0 if bit >= 32 else s1) >> _U32(bit & 31)) & _U32(1)
        result = result | ((byte * _U32(0xFF)) << _U32(8 * lane_byte))
    return np.asarray(result, np.uint32)


# byte shift -> the result bytes a 32-bit shift by it leaves (a nonzero shift only)
_SHIFT_KEEPS = {k: (0xFFFFFFFF << (8 * k)) & 0xFFFFFFFF for k in (1, 2, 3)} | \
    {-k: 0xFFFFFFFF >> (8 * k) for k in (1, 2, 3)}


@functools.lru_cache(maxsize=1024)
def _perm_plan(selector: int):
    """(moves (from S0, byte shift, result byte mask), constant bytes, sign-fill bytes) of a
    V_PERM_B32 selector: worked out once per selector value."""
    moves: dict[tuple[int, int], int] = {}   # (source, byte shift) -> mask of result bytes
    constant = 0
    signs = []
    for lane_byte in range(4):
        sel = (selector >> (8 * lane_byte)) & 0xFF
        if sel < 8:
            key = (sel >= 4, lane_byte - (sel & 3))
            moves[key] = moves.get(key, 0) | (0xFF << (8 * lane_byte))
        elif sel < 12:   # sign bit 15 / 31 of S1 (8, 9) or of S0 (10, 11), replicated
            signs.append((lane_byte, 16 * (sel - 8) + 15))
        elif sel > 12:
            constant |= 0xFF << (8 * lane_byte)
    return tuple((from_s0, shift, mask) for (from_s0, shift), mask in moves.items()), \
        constant, tuple(signs)


def _popcount(x):
    x = np.asarray(x).astype(np.uint64)
    count = np.zeros(x.shape, dtype=np.uint32)
    for shift in range(0, 64, 8):
        count += _POPCOUNT_BYTE[(x >> np.uint64(shift)) & np.uint64(0xFF)]
    return count


_POPCOUNT_BYTE = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint32)


def _leading_zeros(x, width):
    """Count of leading zero bits in a `width`-bit unsigned value; width when zero."""
    x = np.asarray(x).astype(np.uint64)
    count = np.full(x.shape, width, dtype=np.int64)
    for bit in range(width):
        count = np.where((x >> np.uint64(bit)) & np.uint64(1), width - 1 - bit, count)
    return count


def _trailing_zeros(x, width):
    x = np.asarray(x).astype(np.uint64)
    count = np.full(x.shape, width, dtype=np.int64)
    for bit in reversed(range(width)):
        count = np.where((x >> np.uint64(bit)) & np.uint64(1), bit, count)
    return count


def _ffbh_u32(x):
    lz = _leading_zeros(x, 32)
    return np.where(lz == 32, -1, lz).astype(np.int32).view(np.uint32)


def _ffbl_b32(x):
    tz = _trailing_zeros(x, 32)
    return np.where(tz == 32, -1, tz).astype(np.int32).view(np.uint32)


def _ffbh_i32(x):
    """V_FFBH_I32: index (from the MSB) of the first bit that differs from the sign bit; -1 if none."""
    x = np.asarray(x).astype(np.int32)
    flipped = np.where(x < 0, ~x, x).view(np.uint32)
    lz = _leading_zeros(flipped, 32)
    return np.where(lz == 32, -1, lz).astype(np.int32)


_BIT_SWAPS = ((1, 0x5555555555555555), (2, 0x3333333333333333), (4, 0x0F0F0F0F0F0F0F0F),
              (8, 0x00FF00FF00FF00FF), (16, 0x0000FFFF0000FFFF))


def _bitreverse(x, width):
    """The low `width` bits (32 or 64) of x in reverse order, as uint64: neighbouring bits,
    pairs, nibbles, bytes and half-words swapped in turn (a few passes instead of one per bit)."""
    dtype = np.uint32 if width == 32 else np.uint64
    v = np.asarray(x).astype(np.uint64).astype(dtype)
    for shift, mask in _BIT_SWAPS[:4 if width == 32 else 5]:
        m, k = dtype(mask & ((1 << width) - 1)), dtype(shift)
        v = ((v >> k) & m) | ((v & m) << k)
    half = dtype(width // 2)
    return ((v >> half) | (v << half)).astype(np.uint64)


def _mbcnt(mask_bits, base, lane_offset):
    """Count of set bits of mask_bits below this lane (lanes lane_offset..lane_offset+31)."""
    below = np.clip(_LANE.astype(np.int64) - lane_offset, 0, 32).astype(np.uint64)
    lane_mask = ((np.uint64(1) << below) - np.uint64(1)).astype(np.uint64)
    return (_popcount(mask_bits.astype(np.uint64) & lane_mask) + base).astype(np.uint32)


_valu("v_add_u32", "u32", "u32 u32", lambda a, b: a + b)
_valu("v_sub_u32", "u32", "u32 u32", lambda a, b: a - b)
_valu("v_subrev_u32", "u32", "u32 u32", lambda a, b: b - a)
_valu("v_add_i32", "i32", "i32 i32", lambda a, b: a + b)
_valu("v_sub_i32", "i32", "i32 i32", lambda a, b: a - b)
_valu("v_add_co_u32", "u32 mask", "u32 u32", _add_co)
_valu("v_addc_co_u32", "u32 mask", "u32 u32 mask", _addc_co)
_valu("v_sub_co_u32", "u32 mask", "u32 u32", _sub_co)
_valu("v_subrev_co_u32", "u32 mask", "u32 u32", lambda a, b: _sub_co(b, a))
_valu("v_subb_co_u32", "u32 mask", "u32 u32 mask", _subb_co)
_valu("v_subbrev_co_u32", "u32 mask", "u32 u32 mask", lambda a, b, c: _subb_co(b, a, c))
_valu("v_add3_u32", "u32", "u32 u32 u32", lambda a, b, c: a + b + c)
_valu("v_sad_u32", "u32", "u32 u32 u32", lambda a, b, c: np.maximum(a, b) - np.minimum(a, b) + c)
_valu("v_mul_lo_u32", "u32", "u32 u32", lambda a, b: a * b)
_valu("v_mul_lo_i32", "i32", "i32 i32", lambda a, b: a * b)
_valu("v_mul_hi_u32", "u32", "u32 u32", _mul_hi_u32)
_valu("v_mul_hi_i32", "i32", "i32 i32", _mul_hi_i32)
_valu("v_mul_u32_u24", "u32", "u32 u32", lambda a, b: (_u24(a) * _u24(b)).astype(np.uint32))
_valu("v_mul_hi_u32_u24", "u32", "u32 u32",
      lambda a, b: ((_u24(a) * _u24(b)) >> np.uint64(32)).astype(np.uint32))
_valu("v_mul_i32_i24", "i32", "i32 i32", lambda a, b: (_i24(a) * _i24(b)).astype(np.int32))
_valu("v_mul_hi_i32_i24", "i32", "i32 i32",
      lambda a, b: ((_i24(a) * _i24(b)) >> np.int64(32)).astype(np.int32))
_valu("v_mad_u32_u24", "u32", "u32 u32 u32", lambda a, b, c: (_u24(a) * _u24(b) + c).astype(np.uint32))
_valu("v_mad_i32_i24", "i32", "i32 i32 i32", lambda a, b, c: (_i24(a) * _i24(b) + c).astype(np.int32))
_valu("v_mad_u64_u32", "u64 mask", "u32 u32 u64", lambda a, b, c: (
    a.astype(np.uint64) * b + c,
    (a.astype(np.uint64) * b + c) < c))
_valu("v_mad_i64_i32", "i64 mask", "i32 i32 i64", lambda a, b, c: _mad_i64_i32(a, b, c))


def _mad_i64_i32(a, b, c):
    product = a.astype(np.int64) * b
    total = (product.view(np.uint64) + c.view(np.uint64)).view(np.int64)
    overflow = ((product >= 0) == (c >= 0)) & ((total >= 0) != (c >= 0))
    return total, overflow


_valu("v_min_u32", "u32", "u32 u32", np.minimum)
_valu("v_max_u32", "u32", "u32 u32", np.maximum)
_valu("v_min_i32", "i32", "i32 i32", np.minimum)
_valu("v_max_i32", "i32", "i32 i32", np.maximum)
for _t in ("u32", "i32", "u16", "i16"):
    _valu(f"v_min3_{_t}", _t, f"{_t} {_t} {_t}", lambda a, b, c: np.minimum(np.minimum(a, b), c))
    _valu(f"v_max3_{_t}", _t, f"{_t} {_t} {_t}", lambda a, b, c: np.maximum(np.maximum(a, b), c))
    _valu(f"v_med3_{_t}", _t, f"{_t} {_t} {_t}",
          lambda a, b, c: np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c)))

_valu("v_and_b32", "b32", "b32 b32", lambda a, b: a & b)
_valu("v_or_b32", "b32", "b32 b32", lambda a, b: a | b)
_valu("v_xor_b32", "b32", "b32 b32", lambda a, b: a ^ b)
_valu("v_xnor_b32", "b32", "b32 b32", lambda a, b: ~(a ^ b))
_valu("v_not_b32", "b32", "b32", lambda a: ~a)
_valu("v_bfrev_b32", "b32", "b32", lambda a: _bitreverse(a, 32).astype(np.uint32))
_valu("v_mov_b32", "b32", "b32", lambda a: a.copy())
_valu("v_mov_b64", "b64", "b64", lambda a: a.copy())
# AGPR moves: the engine resolves aN to rows of the unified register file.
for _name in ("v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32"):
    _valu(_name, "b32", "b32", lambda a: a.copy())
_valu("v_lshlrev_b32", "b32", "u32 b32", lambda s, a: a << _sh5(s))
_valu("v_lshrrev_b32", "b32", "u32 b32", lambda s, a: a >> _sh5(s))
_valu("v_ashrrev_i32", "i32", "u32 i32", lambda s, a: a >> _sh5(s).astype(np.int32))
_valu("v_lshl_add_u32", "u32", "u32 u32 u32", lambda a, s, c: (a << _sh5(s)) + c)
_valu("v_add_lshl_u32", "u32", "u32 u32 u32", lambda a, b, s: (a + b) << _sh5(s))
_valu("v_lshl_or_b32", "b32", "b32 u32 b32", lambda a, s, c: (a << _sh5(s)) | c)
_valu("v_and_or_b32", "b32", "b32 b32 b32", lambda a, b, c: (a & b) | c)
_valu("v_or3_b32", "b32", "b32 b32 b32", lambda a, b, c: a | b | c)
_valu("v_xor3_b32", "b32", "b32 b32 b32", lambda a, b, c: a ^ b ^ c)
_valu("v_xad_u32", "u32", "u32 u32 u32", lambda a, b, c: (a ^ b) + c)
_valu("v_alignbit_b32", "b32", "b32 b32 u32", _alignbit)
_valu("v_alignbyte_b32", "b32", "b32 b32 u32", _alignbyte)
_valu("v_bfe_u32", "u32", "u32 u32 u32", _bfe_u32)
_valu("v_bfe_i32", "i32", "i32 u32 u32", _bfe_i32)
_valu("v_bfi_b32", "b32", "b32 b32 b32", lambda m, a, b: (m & a) | (~m & b))
_valu("v_bfm_b32", "b32", "u32 u32",
      lambda w, o: (((np.uint64(1) << _sh5(w).astype(np.uint64)) - np.uint64(1)).astype(np.uint32)) << _sh5(o))
_valu("v_perm_b32", "b32", "b32 b32 b32", _perm)
_valu("v_bcnt_u32_b32", "u32", "b32 u32", lambda a, b: _popcount(a) + b)
_valu("v_ffbh_u32", "u32", "b32", _ffbh_u32)
_valu("v_ffbl_b32", "u32", "b32", _ffbl_b32)
_valu("v_ffbh_i32", "i32", "i32", _ffbh_i32)
_valu("v_mbcnt_lo_u32_b32", "u32", "b32 u32", lambda m, b: _mbcnt(m, b, 0))
_valu("v_mbcnt_hi_u32_b32", "u32", "b32 u32", lambda m, b: _mbcnt(m, b, 32))
_valu("v_cndmask_b32", "b32", "b32 b32 mask", lambda a, b, m: np.where(m, b, a))
_valu("v_lshlrev_b64", "b64", "u32 b64", lambda s, a: a << (s & _U32(63)).astype(np.uint64))
_valu("v_lshrrev_b64", "b64", "u32 b64", lambda s, a: a >> (s & _U32(63)).astype(np.uint64))
_valu("v_ashrrev_i64", "i64", "u32 i64", lambda s, a: a >> (s & _U32(63)).astype(np.int64))
_valu("v_lshl_add_u64", "u64", "u64 u32 u64", lambda a, s, c: (a << (s & _U32(7)).astype(np.uint64)) + c)

# 16-bit integer ops
_valu("v_add_u16", "u16", "u16 u16", lambda a, b: a + b)
_valu("v_sub_u16", "u16", "u16 u16", lambda a, b: a - b)
_valu("v_subrev_u16", "u16", "u16 u16", lambda a, b: b - a)
_valu("v_mul_lo_u16", "u16", "u16 u16", lambda a, b: a * b)
_valu("v_mad_u16", "u16", "u16 u16 u16", lambda a, b, c: a * b + c)
_valu("v_mad_i16", "i16", "i16 i16 i16", lambda a, b, c: a * b + c)
_valu("v_add_i16", "i16", "i16 i16", lambda a, b: a + b)
_valu("v_sub_i16", "i16", "i16 i16", lambda a, b: a - b)
_valu("v_min_u16", "u16", "u16 u16", np.minimum)
_valu("v_max_u16", "u16", "u16 u16", np.maximum)
_valu("v_min_i16", "i16", "i16 i16", np.minimum)
_valu("v_max_i16", "i16", "i16 i16", np.maximum)
_valu("v_lshlrev_b16", "b16", "u16 b16", lambda s, a: a << (s & np.uint16(15)))
_valu("v_lshrrev_b16", "b16", "u16 b16", lambda s, a: a >> (s & np.uint16(15)))
_valu("v_ashrrev_i16", "i16", "u16 i16", lambda s, a: a >> (s & np.uint16(15)).astype(np.int16))

# ---------------------------------------------------------------------------------------
# Packed (VOP3P), mixed-precision and dot ops
# ---------------------------------------------------------------------------------------

for _name, _func in (("add", lambda a, b: a + b), ("mul", lambda a, b: a * b),
                     ("min", _fmin), ("max", _fmax)):
    _valu(f"v_pk_{_name}_f16", "pk_f16", "pk_f16 pk_f16", _func)
_valu("v_pk_fma_f16", "pk_f16", "pk_f16 pk_f16 pk_f16",
      lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float16))
_valu("v_pk_add_f32", "pk_f32", "pk_f32 pk_f32", lambda a, b: a + b)
_valu("v_pk_mul_f32", "pk_f32", "pk_f32 pk_f32", lambda a, b: a * b)
_valu("v_pk_fma_f32", "pk_f32", "pk_f32 pk_f32 pk_f32", _fma_f32)
# D.lo = src0 register op_sel[0], D.hi = src1 register op_sel[1]: element 0 of each source
# pair is the op_sel-selected register.
_valu("v_pk_mov_b32", "pk_f32", "pk_f32 pk_f32",
      lambda a, b: np.stack([a[..., 0], b[..., 0]], axis=-1), float_mods=False)
for _sign, _t in (("u", "pk_u16"), ("i", "pk_i16")):
    _valu(f"v_pk_add_{_sign}16", _t, f"{_t} {_t}", lambda a, b: a + b)
    _valu(f"v_pk_sub_{_sign}16", _t, f"{_t} {_t}", lambda a, b: a - b)
    _valu(f"v_pk_max_{_sign}16", _t, f"{_t} {_t}", np.maximum)
    _valu(f"v_pk_min_{_sign}16", _t, f"{_t} {_t}", np.minimum)
    _valu(f"v_pk_mad_{_sign}16", _t, f"{_t} {_t} {_t}", lambda a, b, c: a * b + c)
_valu("v_pk_mul_lo_u16", "pk_u16", "pk_u16 pk_u16", lambda a, b: a * b)
_valu("v_pk_lshlrev_b16", "pk_u16", "pk_u16 pk_u16", lambda s, a: a << (s & np.uint16(15)))
_valu("v_pk_lshrrev_b16", "pk_u16", "pk_u16 pk_u16", lambda s, a: a >> (s & np.uint16(15)))
_valu("v_pk_ashrrev_i16", "pk_i16", "pk_u16 pk_i16", lambda s, a: a >> (s & np.uint16(15)).astype(np.int16))

# fma_mix: the engine converts each source to f32 first (an f16 half when its op_sel_hi
# bit is set, the half chosen by op_sel). mixlo/mixhi write one f16 half of D and keep
# the other half, so they read D back (implicit "dst").
_valu("v_fma_mix_f32", "f32", "f32 f32 f32", _fma_f32)


def _mix_into_half(high):
    def mix(a, b, c, dst):
        half = _fma_f32(a, b, c).astype(np.float16).view(np.uint16).astype(np.uint32)
        if high:
            return (dst & _U32(0x0000FFFF)) | (half << _U32(16))
        return (dst & _U32(0xFFFF0000)) | half

    return mix


_valu("v_fma_mixlo_f16", "b32", "f32 f32 f32 b32", _mix_into_half(False), implicit=("dst",))
_valu("v_fma_mixhi_f16", "b32", "f32 f32 f32 b32", _mix_into_half(True), implicit=("dst",))


def _dot2_f32_f16(a, b, c):
    # f16 products are exact; the sum is formed in float64 and rounded once to f32.
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    return (wide_a[..., 0] * wide_b[..., 0] + wide_a[..., 1] * wide_b[..., 1] + c).astype(np.float32)


def _dot4(a, b, c, signed):
    dtype = np.int8 if signed else np.uint8
    total = c.astype(np.int64)
    for byte in range(4):
        total = total + (a[..., byte].astype(dtype).astype(np.int64) * b[..., byte].astype(dtype))
    return total.astype(np.int32 if signed else np.uint32)


_valu("v_dot2_f32_f16", "f32", "pk_f16 pk_f16 f32", _dot2_f32_f16)
_valu("v_dot2c_f32_f16", "f32", "pk_f16 pk_f16 f32", _dot2_f32_f16, implicit=("dst",))
_valu("v_dot4_i32_i8", "i32", "u8x4 u8x4 i32", lambda a, b, c: _dot4(a, b, c, True))
_valu("v_dot4c_i32_i8", "i32", "u8x4 u8x4 i32", lambda a, b, c: _dot4(a, b, c, True), implicit=("dst",))
_valu("v_dot4_u32_u8", "u32", "u8x4 u8x4 u32", lambda a, b, c: _dot4(a, b, c, False))

# ---------------------------------------------------------------------------------------
# SALU
# ---------------------------------------------------------------------------------------


def _nonzero(x):
    return np.asarray(x) != 0


def _with_nonzero_scc(func):
    def apply(*args):
        result = func(*args)
        return result, _nonzero(result)

    return apply


_salu("s_add_u32", "u32", "u32 u32", _add_co, writes_scc=True)
_salu("s_sub_u32", "u32", "u32 u32", _sub_co, writes_scc=True)
_salu("s_addc_u32", "u32", "u32 u32", _addc_co, reads_scc=True, writes_scc=True)
_salu("s_subb_u32", "u32", "u32 u32", _subb_co, reads_scc=True, writes_scc=True)


def _add_i32(a, b):
    total = (a.astype(np.int64) + b)
    return total.astype(np.int32), (total > np.iinfo(np.int32).max) | (total < np.iinfo(np.int32).min)


def _sub_i32(a, b):
    total = (a.astype(np.int64) - b)
    return total.astype(np.int32), (total > np.iinfo(np.int32).max) | (total < np.iinfo(np.int32).min)


_salu("s_add_i32", "i32", "i32 i32", _add_i32, writes_scc=True)
_salu("s_sub_i32", "i32", "i32 i32", _sub_i32, writes_scc=True)
_salu("s_addk_i32", "i32", "i16 i32", lambda k, d: _add_i32(d, k.astype(np.int32)),
      writes_scc=True, implicit=("dst",))
_salu("s_mulk_i32", "i32", "i16 i32", lambda k, d: d * k.astype(np.int32), implicit=("dst",))
_salu("s_mul_i32", "i32", "i32 i32", lambda a, b: a * b)
_salu("s_mul_hi_u32", "u32", "u32 u32", _mul_hi_u32)
_salu("s_mul_hi_i32", "i32", "i32 i32", _mul_hi_i32)
for _n in range(1, 5):
    _salu(f"s_lshl{_n}_add_u32", "u32", "u32 u32",
          lambda a, b, n=_n: _lshl_add_carry(a, b, n), writes_scc=True)


def _lshl_add_carry(a, b, n):
    total = (a.astype(np.uint64) << np.uint64(n)) + b
    return total.astype(np.uint32), total > 0xFFFFFFFF


_salu("s_lshl_b32", "b32", "b32 u32", _with_nonzero_scc(lambda a, s: a << _sh5(s)), writes_scc=True)
_salu("s_lshr_b32", "b32", "b32 u32", _with_nonzero_scc(lambda a, s: a >> _sh5(s)), writes_scc=True)
_salu("s_ashr_i32", "i32", "i32 u32",
      _with_nonzero_scc(lambda a, s: a >> _sh5(s).astype(np.int32)), writes_scc=True)
_salu("s_lshl_b64", "b64", "b64 u32",
      _with_nonzero_scc(lambda a, s: a << (s & _U32(63)).astype(np.uint64)), writes_scc=True)
_salu("s_lshr_b64", "b64", "b64 u32",
      _with_nonzero_scc(lambda a, s: a >> (s & _U32(63)).astype(np.uint64)), writes_scc=True)
_salu("s_ashr_i64", "i64", "i64 u32",
      _with_nonzero_scc(lambda a, s: a >> (s & _U32(63)).astype(np.int64)), writes_scc=True)

_BITWISE = {
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "andn2": lambda a, b: a & ~b, "orn2": lambda a, b: a | ~b, "nand": lambda a, b: ~(a & b),
    "nor": lambda a, b: ~(a | b), "xnor": lambda a, b: ~(a ^ b),
}
for _width in ("b32", "b64"):
    for _name, _func in _BITWISE.items():
        _salu(f"s_{_name}_{_width}", _width, f"{_width} {_width}", _with_nonzero_scc(_func), writes_scc=True)
    _salu(f"s_not_{_width}", _width, _width, _with_nonzero_scc(lambda a: ~a), writes_scc=True)
    _salu(f"s_mov_{_width}", _width, _width, lambda a: a.copy())
    _salu(f"s_cselect_{_width}", _width, f"{_width} {_width}", lambda a, b, scc: np.where(scc, a, b),
          reads_scc=True)
    _salu(f"s_cmov_{_width}", _width, f"{_width} {_width}", lambda a, d, scc: np.where(scc, a, d),
          reads_scc=True, implicit=("dst",))
    _salu(f"s_bcnt1_i32_{_width}", "i32", _width,
          _with_nonzero_scc(lambda a: _popcount(a).astype(np.int32)), writes_scc=True)
    _salu(f"s_bcnt0_i32_{_width}", "i32", _width,
          _with_nonzero_scc(lambda a, w=int(_width[1:]): (w - _popcount(a)).astype(np.int32)), writes_scc=True)

_salu("s_movk_i32", "i32", "i16", lambda k: k.astype(np.int32))
_salu("s_cmovk_i32", "i32", "i16 i32", lambda k, d, scc: np.where(scc, k.astype(np.int32), d),
      reads_scc=True, implicit=("dst",))
_salu("s_brev_b32", "b32", "b32", lambda a: _bitreverse(a, 32).astype(np.uint32))
_salu("s_brev_b64", "b64", "b64", lambda a: _bitreverse(a, 64))
_salu("s_ff1_i32_b32", "i32", "b32", lambda a: np.where(a == 0, -1, _trailing_zeros(a, 32)).astype(np.int32))
_salu("s_ff1_i32_b64", "i32", "b64", lambda a: np.where(a == 0, -1, _trailing_zeros(a, 64)).astype(np.int32))
_salu("s_flbit_i32_b32", "i32", "b32", lambda a: np.where(a == 0, -1, _leading_zeros(a, 32)).astype(np.int32))
_salu("s_flbit_i32_b64", "i32", "b64", lambda a: np.where(a == 0, -1, _leading_zeros(a, 64)).astype(np.int32))
_salu("s_flbit_i32", "i32", "i32", _ffbh_i32)
_salu("s_sext_i32_i8", "i32", "b32", lambda a: _sext(a, 8))
_salu("s_sext_i32_i16", "i32", "b32", lambda a: _sext(a, 16))
_salu("s_abs_i32", "i32", "i32", _with_nonzero_scc(lambda a: np.abs(a)), writes_scc=True)
_salu("s_absdiff_i32", "i32", "i32 i32",
      _with_nonzero_scc(lambda a, b: np.abs((a.astype(np.int64) - b)).astype(np.int32)), writes_scc=True)
_salu("s_min_i32", "i32", "i32 i32", lambda a, b: (np.minimum(a, b), a < b), writes_scc=True)
_salu("s_min_u32", "u32", "u32 u32", lambda a, b: (np.minimum(a, b), a < b), writes_scc=True)
_salu("s_max_i32", "i32", "i32 i32", lambda a, b: (np.maximum(a, b), a > b), writes_scc=True)
_salu("s_max_u32", "u32", "u32 u32", lambda a, b: (np.maximum(a, b), a > b), writes_scc=True)


def _s_bfe(width_bits, signed):
    """S_BFE_*: S1[5:0] (or [4:0]) = offset, S1[22:16] = width."""
    def bfe(value, packed):
        offset = (packed & _U32(width_bits - 1)).astype(np.uint64)
        width = ((packed >> _U32(16)) & _U32(0x7F)).astype(np.uint64)
        width = np.minimum(width, np.uint64(width_bits))
        raw = np.asarray(value).view(np.uint64 if width_bits == 64 else np.uint32).astype(np.uint64)
        mask = np.where(width >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                        (np.uint64(1) << np.minimum(width, np.uint64(63))) - np.uint64(1))
        field = (raw >> offset) & mask
        if signed:
            sign = (field >> np.maximum(width, np.uint64(1)) - np.uint64(1)) & np.uint64(1)
            field = np.where((sign == 1) & (width > 0) & (width < 64), field | ~mask, field)
        dtype = {(32, False): np.uint32, (32, True): np.int32,
                 (64, False): np.uint64, (64, True): np.int64}[(width_bits, signed)]
        result = field.astype(np.uint64).view(np.int64).astype(dtype) if signed else field.astype(dtype)
        return result, result != 0

    return bfe


_salu("s_bfe_u32", "u32", "u32 u32", _s_bfe(32, False), writes_scc=True)
_salu("s_bfe_i32", "i32", "i32 u32", _s_bfe(32, True), writes_scc=True)
_salu("s_bfe_u64", "u64", "u64 u32", _s_bfe(64, False), writes_scc=True)
_salu("s_bfe_i64", "i64", "i64 u32", _s_bfe(64, True), writes_scc=True)
_salu("s_bfm_b32", "b32", "u32 u32",
      lambda w, o: (((np.uint64(1) << _sh5(w).astype(np.uint64)) - np.uint64(1)).astype(np.uint32)) << _sh5(o))
_salu("s_bfm_b64", "b64", "u32 u32",
      lambda w, o: ((np.uint64(1) << (w & _U32(63)).astype(np.uint64)) - np.uint64(1))
      << (o & _U32(63)).astype(np.uint64))
_salu("s_pack_ll_b32_b16", "b32", "b32 b32", lambda a, b: (a & _U32(0xFFFF)) | (b << _U32(16)))
_salu("s_pack_lh_b32_b16", "b32", "b32 b32", lambda a, b: (a & _U32(0xFFFF)) | (b & _U32(0xFFFF0000)))
_salu("s_pack_hh_b32_b16", "b32", "b32 b32", lambda a, b: (a >> _U32(16)) | (b & _U32(0xFFFF0000)))
_salu("s_bitset0_b32", "b32", "u32 b32", lambda i, d: d & ~(_U32(1) << _sh5(i)), implicit=("dst",))
_salu("s_bitset1_b32", "b32", "u32 b32", lambda i, d: d | (_U32(1) << _sh5(i)), implicit=("dst",))
_salu("s_bitset0_b64", "b64", "u32 b64",
      lambda i, d: d & ~(np.uint64(1) << (i & _U32(63)).astype(np.uint64)), implicit=("dst",))
_salu("s_bitset1_b64", "b64", "u32 b64",
      lambda i, d: d | (np.uint64(1) << (i & _U32(63)).astype(np.uint64)), implicit=("dst",))

_SCALAR_COMPARES = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
                    "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}
for _cond, _func in _SCALAR_COMPARES.items():
    for _t in ("i32", "u32"):
        _salu(f"s_cmp_{_cond}_{_t}", "", f"{_t} {_t}", lambda a, b, f=_func: (f(a, b),), writes_scc=True)
        _salu(f"s_cmpk_{_cond}_{_t}", "", f"{_t} {'i16' if _t == 'i32' else 'u16'}",
              lambda a, k, f=_func: (f(a, k.astype(a.dtype)),), writes_scc=True)
for _cond in ("eq", "lg"):
    _salu(f"s_cmp_{_cond}_u64", "", "u64 u64", lambda a, b, f=_SCALAR_COMPARES[_cond]: (f(a, b),),
          writes_scc=True)
for _width, _t in ((32, "b32"), (64, "b64")):
    for _bit in (0, 1):
        _salu(f"s_bitcmp{_bit}_{_t}", "", f"{_t} u32",
              lambda a, i, w=_width, bit=_bit: ((((np.asarray(a).astype(np.uint64)
                                                  >> (i & _U32(w - 1)).astype(np.uint64)) & np.uint64(1))
                                                 == bit),),
              writes_scc=True)

# ---------------------------------------------------------------------------------------
# f64 range-reduction helper
# ---------------------------------------------------------------------------------------


def _two_over_pi_bits(bits: int) -> int:
    """floor(2/pi * 2^bits), from Machin's formula in integer fixed point (guard bits cover the
    truncation of each series)."""
    precision = bits + 64

    def arctan_inverse(x):   # atan(1/x) * 2^precision
        total, term, k, sign = 0, (1 << precision) // x, 1, 1
        while term:
            total += sign * (term // k)
            term //= x * x
            k += 2
            sign = -sign
        return total
    pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
    return (2 << (precision + bits)) // pi


# bits [1200:0] of 2/pi as the ISA's V_TRIG_PREOP_F64 table: bit 1200 has weight 2^-1
_TWO_OVER_PI_1201 = _two_over_pi_bits(1201)


def _trig_preop_scalar(x: float, segment: int) -> float:
    """V_TRIG_PREOP_F64: the 53-bit chunk of 2/pi starting `53 * segment` bits in (plus the
    excess of exponent(x) over 1077, so large arguments skip the bits that cannot matter),
    scaled to its place value (and by 2^128 for exponents >= 1968, which LLVM undoes)."""
    exponent = (int(np.float64(x).view(np.uint64)) >> 52) & 0x7FF
    shift = 53 * (segment & 31) + max(exponent - 1077, 0)
    low_bit = 1201 - 53 - shift
    chunk = (_TWO_OVER_PI_1201 >> low_bit if low_bit >= 0 else _TWO_OVER_PI_1201 << -low_bit)
    chunk &= (1 << 53) - 1
    scale = -53 - shift + (128 if exponent >= 1968 else 0)
    return math.ldexp(float(chunk), scale)


_valu("v_trig_preop_f64", "f64", "f64 u32",
      np.vectorize(_trig_preop_scalar, otypes=[np.float64]), float_mods=True)

# ---------------------------------------------------------------------------------------
# Integer clamp: VOP3's clamp bit on integer results saturates instead of wrapping
# ---------------------------------------------------------------------------------------

_INT_RANGE = {"u32": (0, 2**32 - 1), "i32": (-2**31, 2**31 - 1), "u16": (0, 2**16 - 1),
              "i16": (-2**15, 2**15 - 1), "pk_u16": (0, 2**16 - 1), "pk_i16": (-2**15, 2**15 - 1),
              "u64": (0, 2**64 - 1), "i64": (-2**63, 2**63 - 1)}
_INT_DTYPE = {"u32": np.uint32, "i32": np.int32, "u16": np.uint16, "i16": np.int16,
              "pk_u16": np.uint16, "pk_i16": np.int16, "u64": np.uint64, "i64": np.int64}


def _saturate(exact, typ):
    """Exact integers (object or int64 array) clipped to `typ`'s range."""
    low, high = _INT_RANGE[typ]
    exact = np.asarray(exact, dtype=object)
    clipped = np.minimum(np.maximum(exact, low), high)
    return clipped.astype(np.int64 if typ != "u64" else np.uint64).astype(_INT_DTYPE[typ])


def _wide(x):
    return np.asarray(x).astype(object)


def _clamped(name, dsts, srcs, exact_fn, *, implicit=(), mask_fn=None):
    """A saturating version of `name`: `exact_fn` gets the sources as Python-int arrays."""
    result_type = dsts.split()[0]

    def fn(*args):
        result = _saturate(exact_fn(*(_wide(a) if not np.asarray(a).dtype == bool else a
                                      for a in args)), result_type)
        return result if mask_fn is None else (result, mask_fn(*args))
    VALU_INT_CLAMP_OPS[name] = AluOp(tuple(dsts.split()), tuple(srcs.split()), _quiet(fn),
                                     float_mods=False, implicit_srcs=tuple(implicit))


VALU_INT_CLAMP_OPS: dict[str, AluOp] = {}
for _t in ("u32", "i32", "u16", "i16"):
    if f"v_add_{_t}" in VALU_OPS:
        _clamped(f"v_add_{_t}", _t, f"{_t} {_t}", lambda a, b: a + b)
        _clamped(f"v_sub_{_t}", _t, f"{_t} {_t}", lambda a, b: a - b)
    if f"v_subrev_{_t}" in VALU_OPS:
        _clamped(f"v_subrev_{_t}", _t, f"{_t} {_t}", lambda a, b: b - a)
_clamped("v_add3_u32", "u32", "u32 u32 u32", lambda a, b, c: a + b + c)
_clamped("v_mad_u16", "u16", "u16 u16 u16", lambda a, b, c: a * b + c)
_clamped("v_mad_i16", "i16", "i16 i16 i16", lambda a, b, c: a * b + c)
_clamped("v_mad_u32_u24", "u32", "u32 u32 u32", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c)
_clamped("v_mad_i32_i24", "i32", "i32 i32 i32",
         lambda a, b, c: _wide(_i24(a.astype(np.int64))) * _wide(_i24(b.astype(np.int64))) + c)
_clamped("v_mad_u64_u32", "u64 mask", "u32 u32 u64", lambda a, b, c: a * b + c,
         mask_fn=lambda a, b, c: VALU_OPS["v_mad_u64_u32"].fn(a, b, c)[1])
_clamped("v_mad_i64_i32", "i64 mask", "i32 i32 i64", lambda a, b, c: a * b + c,
         mask_fn=lambda a, b, c: VALU_OPS["v_mad_i64_i32"].fn(a, b, c)[1])
# carry-out ops: the carry is the unclamped one, the sum saturates
_clamped("v_add_co_u32", "u32 mask", "u32 u32", lambda a, b: a + b,
         mask_fn=lambda a, b: _add_co(a, b)[1])
_clamped("v_sub_co_u32", "u32 mask", "u32 u32", lambda a, b: a - b,
         mask_fn=lambda a, b: _sub_co(a, b)[1])
_clamped("v_subrev_co_u32", "u32 mask", "u32 u32", lambda a, b: b - a,
         mask_fn=lambda a, b: _sub_co(b, a)[1])
_clamped("v_addc_co_u32", "u32 mask", "u32 u32 mask", lambda a, b, c: a + b + c.astype(int),
         mask_fn=_addc_co)
_clamped("v_subb_co_u32", "u32 mask", "u32 u32 mask", lambda a, b, c: a - b - c.astype(int),
         mask_fn=_subb_co)
_clamped("v_subbrev_co_u32", "u32 mask", "u32 u32 mask", lambda a, b, c: b - a - c.astype(int),
         mask_fn=lambda a, b, c: _subb_co(b, a, c))
for _sign, _t in (("u", "pk_u16"), ("i", "pk_i16")):
    _clamped(f"v_pk_add_{_sign}16", _t, f"{_t} {_t}", lambda a, b: a + b)
    _clamped(f"v_pk_sub_{_sign}16", _t, f"{_t} {_t}", lambda a, b: a - b)
    _clamped(f"v_pk_mad_{_sign}16", _t, f"{_t} {_t} {_t}", lambda a, b, c: a * b + c)


def _dot4_exact(a, b, c, signed):
    total = _wide(c)
    for byte in range(4):
        x, y = (np.asarray(v[..., byte]).astype(np.int64) for v in (a, b))
        if signed:
            x, y = np.where(x >= 128, x - 256, x), np.where(y >= 128, y - 256, y)
        total = total + _wide(x) * _wide(y)
    return total


_clamped("v_dot4_i32_i8", "i32", "u8x4 u8x4 i32", lambda a, b, c: _dot4_exact(a, b, c, True))
_clamped("v_dot4c_i32_i8", "i32", "u8x4 u8x4 i32", lambda a, b, c: _dot4_exact(a, b, c, True),
         implicit=("dst",))
_clamped("v_dot4_u32_u8", "u32", "u8x4 u8x4 u32", lambda a, b, c: _dot4_exact(a, b, c, False))

# ---------------------------------------------------------------------------------------
# Directed rounding (MODE.FP_ROUND 1 = toward +inf, 2 = toward -inf, 3 = toward zero)
# ---------------------------------------------------------------------------------------


def _round_pair(hi, lo, dtype, mode, finite_exact=None):
    """The exact value hi + lo (float64 pair, |lo| small against hi) rounded to `dtype` in
    direction `mode`. Starts from the nearest value of hi and steps one ulp where it lies on
    the wrong side of the exact value."""
    hi = np.asarray(hi, np.float64)
    lo = np.broadcast_to(np.asarray(lo, np.float64), hi.shape)
    r = hi.astype(dtype)
    wide = r.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.where(np.isfinite(wide) & np.isfinite(hi), wide - hi, 0.0)  # exact: close values
        above = diff > lo   # r > hi + lo
        below = diff < lo
    overflowed = np.isinf(wide) & np.isfinite(hi)
    if finite_exact is not None:
        overflowed |= np.isinf(wide) & np.broadcast_to(finite_exact, hi.shape)
    above = np.where(overflowed, wide > 0, above)
    below = np.where(overflowed, wide < 0, below)
    nan = np.isnan(hi) | np.isnan(lo) & ~overflowed
    above &= ~nan
    below &= ~nan
    if mode == 1:
        step, toward = below, np.inf
    elif mode == 2:
        step, toward = above, -np.inf
    else:
        step, toward = (above & (wide > 0)) | (below & (wide < 0)), 0.0
    stepped = np.nextafter(r, np.asarray(toward, dtype)).astype(dtype)
    return np.where(step, stepped, r).astype(dtype)


def _two_product(a, b):
    """p + e == a * b exactly (float64, barring overflow/underflow): Veltkamp split."""
    def split(x):
        c = 134217729.0 * x
        high = c - (c - x)
        return high, x - high
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, np.where(np.isfinite(e), e, 0.0)


def _exact_fma_f64_directed(a: float, b: float, c: float, mode: int) -> float:
    if not all(math.isfinite(v) for v in (a, b, c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c
    try:
        r = exact.numerator / exact.denominator
    except OverflowError:
        r = math.inf if exact > 0 else -math.inf
    if math.isinf(r):
        above, below = r > 0, r < 0
    else:
        above, below = Fraction(r) > exact, Fraction(r) < exact
    if mode == 1 and below:
        return math.nextafter(r, math.inf)
    if mode == 2 and above:
        return math.nextafter(r, -math.inf)
    if mode == 3 and ((above and r > 0) or (below and r < 0)):
        return math.nextafter(r, 0.0)
    return r


_exact_fma_f64_directed_vector = np.vectorize(_exact_fma_f64_directed, otypes=[np.float64])


def _directed_sum(dtype, mode):
    def add(a, b):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        hi, lo = _two_sum(a64, b64)
        return _round_pair(hi, np.where(np.isfinite(lo), lo, 0.0), dtype, mode,
                           np.isfinite(a64) & np.isfinite(b64))
    return add


def _directed_product(dtype, mode):
    def mul(a, b):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if dtype == np.float64:
            hi, lo = _two_product(a64, b64)
        else:
            hi, lo = a64 * b64, 0.0   # f32/f16 products are exact in float64
        return _round_pair(hi, lo, dtype, mode, np.isfinite(a64) & np.isfinite(b64))
    return mul


def _directed_fma(dtype, mode):
    def fma(a, b, c):
        if dtype == np.float64:
            return _exact_fma_f64_directed_vector(a, b, c, mode)
        a64, b64, c64 = (np.asarray(x, np.float64) for x in (a, b, c))
        hi, lo = _two_sum(a64 * b64, c64)
        finite = np.isfinite(a64) & np.isfinite(b64) & np.isfinite(c64)
        return _round_pair(hi, np.where(np.isfinite(lo), lo, 0.0), dtype, mode, finite)
    return fma


def _directed_convert(dtype, mode):
    return lambda x: _round_pair(np.asarray(x).astype(np.float64), 0.0, dtype, mode)


def _directed_family(dtype, mode):
    """name suffix-free builders: {operation: fn} for one result type and rounding mode."""
    add, mul, fma = _directed_sum(dtype, mode), _directed_product(dtype, mode), _directed_fma(dtype, mode)
    return {
        "add": add, "sub": lambda a, b: add(a, -b), "subrev": lambda a, b: add(b, -a),
        "mul": mul, "fma": fma, "fmac": fma, "fmaak": fma, "fmamk": lambda a, k, b: fma(a, k, b),
        "mad": lambda a, b, c: add(mul(a, b), c), "mac": lambda a, b, c: add(mul(a, b), c),
        "madak": lambda a, b, k: add(mul(a, b), k), "madmk": lambda a, k, b: add(mul(a, k), b),
    }


def _pair_wise(fn):
    """Apply a per-element function to the (..., 2) halves of packed operands."""
    def apply(*args):
        halves = [fn(*(np.asarray(a)[..., h] for a in args)) for h in (0, 1)]
        return np.stack(halves, axis=-1)
    return apply


@functools.lru_cache(maxsize=None)
def rounded_op(name: str, mode: int) -> AluOp | None:
    """The version of VALU op `name` that rounds its result in direction `mode` (1..3), or None
    when the emulator has no directed-rounding form of it (the decoder then refuses the op).
    Mode 0 is the plain table entry."""
    if mode == 0:
        return VALU_OPS.get(name)
    base = VALU_OPS.get(name)
    if base is None:
        return None
    result = base.dsts[0] if base.dsts else ""
    parts = name.split("_")
    if name.startswith("v_pk_") and result in ("pk_f32", "pk_f16"):
        dtype = np.float32 if result == "pk_f32" else np.float16
        family = _directed_family(dtype, mode)
        operation = parts[2]
        if operation not in ("add", "mul", "fma"):
            return None
        fn = _pair_wise(family[operation])
        return dataclasses_replace(base, fn=_quiet(fn))
    if name in ("v_cvt_f32_f64", "v_cvt_f32_i32", "v_cvt_f32_u32"):
        return dataclasses_replace(base, fn=_quiet(_directed_convert(np.float32, mode)))
    if name in ("v_cvt_f16_f32", "v_cvt_f16_i16", "v_cvt_f16_u16"):
        return dataclasses_replace(base, fn=_quiet(_directed_convert(np.float16, mode)))
    if name == "v_fma_mix_f32":
        return dataclasses_replace(base, fn=_quiet(_directed_family(np.float32, mode)["fma"]))
    if len(parts) == 3 and parts[2] in ("f32", "f16", "f64") and result == parts[2]:
        dtype = {"f32": np.float32, "f16": np.float16, "f64": np.float64}[parts[2]]
        family = _directed_family(dtype, mode)
        if parts[1] in family:
            return dataclasses_replace(base, fn=_quiet(family[parts[1]]))
    if result in ("f32", "f16", "f64", "pk_f32", "pk_f16"):
        return None
    return base   # integer / bit results: the rounding mode does not apply


def rounding_is_exact(name: str) -> bool:
    """Float-result ops whose result is exact or defined without the rounding mode (moves,
    min/max, compares, classification, rounding-to-integer, widening conversions)."""
    exact_words = ("min", "max", "med3", "trunc", "ceil", "floor", "rndne", "fract", "frexp",
                   "mov", "cndmask", "class", "cvt_f32_f16", "cvt_f64_f32", "cvt_f64_i32",
                   "cvt_f64_u32", "cvt_f32_ubyte", "cvt_f32_fp8", "cvt_f32_bf8", "cvt_pk_f32_",
                   "cvt_pkrtz", "ldexp", "div_fixup", "accvgpr", "pk_mov", "trig_preop")
    return any(word in name for word in exact_words)


# ---------------------------------------------------------------------------------------
# MODE.FP16_OVFL: finite overflow saturates (f16 results; f32 -> fp8/bf8 conversions)
# ---------------------------------------------------------------------------------------

_FP8_OVERFLOW_SATURATES = {
    "v_cvt_pk_fp8_f32": "e4m3fnuz", "v_cvt_pk_bf8_f32": "e5m2fnuz",
}


def _pack_fp8_saturating_finite(fmt):
    """f32 pair -> two fp8 codes; a finite value beyond the format saturates to ±max, an
    infinite one stays non-finite (the NaN code: the format has no infinity)."""
    def pack(a, b):
        codes = []
        for x in (a, b):
            code = numerics.f32_to_fp8_bits(x, fmt, saturate=True)
            code = np.where(np.isinf(x), np.uint8(numerics.FP8_NAN_CODE), code)
            codes.append(code.astype(np.uint16))
        return (codes[0] | (codes[1] << np.uint16(8))).astype(np.uint16)
    return pack


def _saturating_f16(fn):
    """f16 results: an infinity produced from finite float sources becomes ±65504."""
    def apply(*args):
        result = np.asarray(fn(*args))
        finite = np.ones(result.shape, bool)
        for a in args:
            a = np.asarray(a)
            if a.dtype.kind != "f":
                continue
            ok = np.isfinite(a)
            while ok.ndim > result.ndim:    # packed sources of a per-lane result
                ok = ok.all(axis=-1)
            while ok.ndim < result.ndim:
                ok = ok[..., None]
            finite &= np.broadcast_to(ok, result.shape)
        overflowed = np.isinf(result) & finite
        return np.where(overflowed, np.copysign(np.float16(65504.0), result),
                        result).astype(result.dtype)
    return apply


def fp16_overflow_op(name: str, op: AluOp) -> AluOp:
    """`op` as MODE.FP16_OVFL=1 runs it."""
    if name in _FP8_OVERFLOW_SATURATES:
        return dataclasses_replace(op, fn=_quiet(_pack_fp8_saturating_finite(_FP8_OVERFLOW_SATURATES[name])))
    if op.dsts and op.dsts[0] in ("f16", "pk_f16"):
        return dataclasses_replace(op, fn=_quiet(_saturating_f16(op.fn)))
    return op


# gfx9 "legacy" 16-bit multiply-adds: the gfx8 forms LLVM still selects when op_sel is unused
VALU_OPS["v_mad_legacy_u16"] = VALU_OPS["v_mad_u16"]
VALU_OPS["v_mad_legacy_i16"] = VALU_OPS["v_mad_i16"]
VALU_OPS["v_mad_legacy_f16"] = VALU_OPS["v_mad_f16"]
VALU_OPS["v_fma_legacy_f16"] = VALU_OPS["v_fma_f16"]

# ---------------------------------------------------------------------------------------
# Less common VALU/SALU ops LLVM defines for gfx942 (CDNA3 ISA definitions)
# ---------------------------------------------------------------------------------------


def _bytes_of(x):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    return [(x >> (8 * k)) & 0xFF for k in range(4)]


def _halves_of(x, signed=False):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    lo, hi = x & 0xFFFF, x >> 16
    if signed:
        lo, hi = np.where(lo >= 0x8000, lo - 0x10000, lo), np.where(hi >= 0x8000, hi - 0x10000, hi)
    return lo, hi


def _nibbles_of(x, signed):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    out = []
    for k in range(8):
        n = (x >> (4 * k)) & 0xF
        out.append(np.where(n >= 8, n - 16, n) if signed else n)
    return out


def _wrap32(x, signed):
    x = np.asarray(x).astype(np.int64) & 0xFFFFFFFF
    return x.astype(np.uint32).view(np.int32) if signed else x.astype(np.uint32)


_valu("v_mad_u32_u16", "u32", "u16 u16 u32",
      lambda a, b, c: _wrap32(a.astype(np.int64) * b.astype(np.int64) + c, False))
_valu("v_mad_i32_i16", "i32", "i16 i16 i32",
      lambda a, b, c: _wrap32(a.astype(np.int64) * b.astype(np.int64) + c, True))
_valu("v_sad_u8", "u32", "b32 b32 u32",
      lambda a, b, c: _wrap32(sum(np.abs(x - y) for x, y in zip(_bytes_of(a), _bytes_of(b))) + c, False))
_valu("v_sad_hi_u8", "u32", "b32 b32 u32",
      lambda a, b, c: _wrap32((sum(np.abs(x - y) for x, y in zip(_bytes_of(a), _bytes_of(b))) << 16) + c, False))
_valu("v_sad_u16", "u32", "b32 b32 u32",
      lambda a, b, c: _wrap32(sum(np.abs(x - y) for x, y in zip(_halves_of(a), _halves_of(b))) + c, False))
# masked SAD: byte positions where the reference (S1) byte is 0 are skipped
_valu("v_msad_u8", "u32", "b32 b32 u32",
      lambda a, b, c: _wrap32(sum(np.where(y != 0, np.abs(x - y), 0)
                                  for x, y in zip(_bytes_of(a), _bytes_of(b))) + c, False))
_valu("v_lerp_u8", "b32", "b32 b32 b32",
      lambda a, b, c: _wrap32(sum(((x + y + (z & 1)) >> 1) << (8 * k) for k, (x, y, z)
                                  in enumerate(zip(_bytes_of(a), _bytes_of(b), _bytes_of(c)))), False))
_valu("v_sat_pk_u8_i16", "u16", "b32",
      lambda a: (np.clip(_halves_of(a, True)[0], 0, 255) | (np.clip(_halves_of(a, True)[1], 0, 255) << 8)).astype(np.uint16))
# the low nibble as a signed 4-bit integer, in sixteenths
_valu("v_cvt_off_f32_i4", "f32", "b32",
      lambda a: (_nibbles_of(a, True)[0] * 0.0625).astype(np.float32), float_mods=False)
_valu("v_madak_f16", "f16", "f16 f16 f16", lambda a, b, k: a * b + k)
_valu("v_madmk_f16", "f16", "f16 f16 f16", lambda a, k, b: a * k + b)
_valu("v_pk_fmac_f16", "pk_f16", "pk_f16 pk_f16 pk_f16",
      lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float16), implicit=("dst",))


def _dot2_16(a, b, c, signed):
    (a0, a1), (b0, b1) = _halves_of(a, signed), _halves_of(b, signed)
    return _wrap32(a0 * b0 + a1 * b1 + np.asarray(c).astype(np.int64), signed)


def _dot8_4(a, b, c, signed):
    total = np.asarray(c).astype(np.int64)
    for x, y in zip(_nibbles_of(a, signed), _nibbles_of(b, signed)):
        total = total + x * y
    return _wrap32(total, signed)


_valu("v_dot2_i32_i16", "i32", "b32 b32 i32", lambda a, b, c: _dot2_16(a, b, c, True))
_valu("v_dot2c_i32_i16", "i32", "b32 b32 i32", lambda a, b, c: _dot2_16(a, b, c, True), implicit=("dst",))
_valu("v_dot2_u32_u16", "u32", "b32 b32 u32", lambda a, b, c: _dot2_16(a, b, c, False))
_valu("v_dot8_i32_i4", "i32", "b32 b32 i32", lambda a, b, c: _dot8_4(a, b, c, True))
_valu("v_dot8c_i32_i4", "i32", "b32 b32 i32", lambda a, b, c: _dot8_4(a, b, c, True), implicit=("dst",))
_valu("v_dot8_u32_u4", "u32", "b32 b32 u32", lambda a, b, c: _dot8_4(a, b, c, False))


def _groups_any(x, width, group):
    """Bool per `group`-bit group of a `width`-bit value: any bit set."""
    x = np.asarray(x).astype(np.uint64)
    return [((x >> np.uint64(group * k)) & np.uint64((1 << group) - 1)) != 0 for k in range(width // group)]


def _wqm(width):
    def fn(a):
        out = np.zeros(np.shape(a), np.uint64)
        for k, hit in enumerate(_groups_any(a, width, 4)):
            out |= np.where(hit, np.uint64(0xF) << np.uint64(4 * k), np.uint64(0))
        out = out.astype(np.uint32 if width == 32 else np.uint64)
        return out, out != 0
    return fn


def _quadmask(width):
    def fn(a):
        out = np.zeros(np.shape(a), np.uint64)
        for k, hit in enumerate(_groups_any(a, width, 4)):
            out |= np.where(hit, np.uint64(1) << np.uint64(k), np.uint64(0))
        out = out.astype(np.uint32 if width == 32 else np.uint64)
        return out, out != 0
    return fn


def _bitreplicate(a):
    a = np.asarray(a).astype(np.uint64)
    out = np.zeros(a.shape, np.uint64)
    for k in range(32):
        bit = (a >> np.uint64(k)) & np.uint64(1)
        out |= (bit << np.uint64(2 * k)) | (bit << np.uint64(2 * k + 1))
    return out


_salu("s_ff0_i32_b32", "i32", "b32",
      lambda a: np.where(a == 0xFFFFFFFF, -1, _trailing_zeros(~np.asarray(a).astype(np.uint64) & np.uint64(0xFFFFFFFF), 32)).astype(np.int32))
_salu("s_ff0_i32_b64", "i32", "b64",
      lambda a: np.where(a == np.uint64(0xFFFFFFFFFFFFFFFF), -1, _trailing_zeros(~np.asarray(a).astype(np.uint64), 64)).astype(np.int32))
_salu("s_flbit_i32_i64", "i32", "i64",
      lambda a: np.where((a == 0) | (a == -1), -1,
                         _leading_zeros(np.where(a < 0, ~a, a).view(np.uint64), 64)).astype(np.int32))
_salu("s_wqm_b32", "b32", "b32", _wqm(32), writes_scc=True)
_salu("s_wqm_b64", "b64", "b64", _wqm(64), writes_scc=True)
_salu("s_quadmask_b32", "b32", "b32", _quadmask(32), writes_scc=True)
_salu("s_quadmask_b64", "b64", "b64", _quadmask(64), writes_scc=True)
_salu("s_bitreplicate_b64_b32", "b64", "b32", _bitreplicate)
