"""The emulator's array backends, and the bit-level definitions every backend shares.

Two array libraries can carry the emulator's state and semantics: numpy (the default, every
instruction) and torch (CPU or CUDA; the instructions rocke/emu/torch_exec.py has ported).
``ROCKE_EMU_BACKEND`` / ``ROCKE_EMU_DEVICE`` (rocke/env.py) pick one.

Libraries agree bit for bit on IEEE-754's correctly rounded operations (+, -, *, /, sqrt,
conversions, rint, floor) but not elsewhere: measured on torch 2.11 against numpy 2, CUDA
canonicalises NaN payloads, exp2/log2/sin differ in the last bit on up to 9 % of inputs, and
torch's CPU f32 sqrt differs on denormals. So the ops where libraries differ are defined here
ONCE, as straight-line code over the correctly rounded operations only, written against a small
primitive namespace (`NumpyPrims`, `TorchPrims`): the numpy semantics (rocke/emu/semantics.py)
and the torch executor call the same function and so compute the same bits.

The NaN rule (`nan_rule`) is x86 SSE's, which the numpy backend has always shown on x86 hosts:
a NaN input yields the first NaN input made quiet (payload kept); a NaN made from non-NaN inputs
is the default NaN 0xFFC00000.
"""
from __future__ import annotations

import math

import numpy as np

F32_DEFAULT_NAN = 0xFFC00000
F32_QUIET_BIT = 0x00400000


class NumpyPrims:
    """numpy as the primitive namespace of the shared definitions."""
    name = "numpy"
    device = "cpu"

    @staticmethod
    def f64(x):
        return np.asarray(x).astype(np.float64)

    @staticmethod
    def f32(x):
        return np.asarray(x).astype(np.float32)

    @staticmethod
    def f32_bits(x):
        """int64 array of the 32 bits of float32 `x` (0 .. 2**32 - 1)."""
        return np.asarray(x, np.float32).view(np.uint32).astype(np.int64)

    @staticmethod
    def f32_from_bits(bits):
        return np.asarray(bits).astype(np.uint32).view(np.float32)

    @staticmethod
    def f64_from_bits(bits):
        return np.asarray(bits, np.int64).view(np.float64)

    @staticmethod
    def f64_bits(x):
        return np.asarray(x, np.float64).view(np.int64)

    where = staticmethod(np.where)
    isnan = staticmethod(np.isnan)
    isinf = staticmethod(np.isinf)
    rint = staticmethod(np.rint)
    abs = staticmethod(np.abs)
    sqrt = staticmethod(np.sqrt)

    @staticmethod
    def clip(x, low, high):
        return np.clip(x, low, high)

    @staticmethod
    def full_like(x, value):
        return np.full_like(x, value)


class TorchPrims:
    """torch (one device) as the primitive namespace of the shared definitions."""
    name = "torch"

    def __init__(self, device: str = "cpu"):
        import torch
        self.torch = torch
        self.device = device

    def f64(self, x):
        return x.to(self.torch.float64)

    def f32(self, x):
        return x.to(self.torch.float32)

    def f32_bits(self, x):
        return x.to(self.torch.float32).view(self.torch.int32).to(self.torch.int64) & 0xFFFFFFFF

    def f32_from_bits(self, bits):
        signed = self.torch.where(bits >= 1 << 31, bits - (1 << 32), bits)
        return signed.to(self.torch.int32).view(self.torch.float32)

    def f64_from_bits(self, bits):
        return bits.view(self.torch.float64)

    def f64_bits(self, x):
        return x.view(self.torch.int64)

    def where(self, c, a, b):
        return self.torch.where(c, a, b)

    def isnan(self, x):
        return self.torch.isnan(x)

    def isinf(self, x):
        return self.torch.isinf(x)

    def rint(self, x):
        return self.torch.round(x)      # half to even, as IEEE roundToIntegralTiesToEven

    def abs(self, x):
        return self.torch.abs(x)

    def sqrt(self, x):
        return self.torch.sqrt(x)

    def clip(self, x, low, high):
        return self.torch.clamp(x, low, high)

    def full_like(self, x, value):
        return self.torch.full_like(x, value)


NUMPY = NumpyPrims()


# ---------------------------------------------------------------------------------------
# The shared bit-level definitions. `xp` is a primitive namespace; `x` float32 arrays.
# Only correctly rounded operations appear below (no library transcendental), so every
# backend computes them identically.
# ---------------------------------------------------------------------------------------

def nan_rule_f32(xp, result, *inputs):
    """`result` (float32) with NaN lanes per the x86 rule: where an input is NaN, the first NaN
    input made quiet; where only the result is NaN, the default NaN."""
    nan_out = xp.isnan(result)
    if xp is NUMPY and not (nan_out.any() or any(np.isnan(x).any() for x in inputs)):
        return np.asarray(result, np.float32)   # no NaN anywhere: the rule changes no bit
    fix = xp.full_like(xp.f32_bits(result), F32_DEFAULT_NAN)
    for x in reversed(inputs):   # the first NaN input wins: applied last
        nan_in = xp.isnan(x)
        nan_out = nan_out | nan_in
        fix = xp.where(nan_in, xp.f32_bits(x) | F32_QUIET_BIT, fix)
    return xp.f32_from_bits(xp.where(nan_out, fix, xp.f32_bits(result)))


def flush_f32(xp, x):
    """float32 with subnormals replaced by a zero of the same sign."""
    if xp is NUMPY:   # one float32 test first: most arrays hold no subnormal
        x = np.asarray(x, np.float32)
        if not ((np.abs(x) < np.float32(2.0 ** -126)) & (x != 0)).any():
            return x
    bits = xp.f32_bits(x)
    subnormal = ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
    return xp.f32_from_bits(xp.where(subnormal, bits & 0x80000000, bits))


def _pow2_f64(xp, k):
    """2.0 ** k (float64) for integer-valued float64 k in [-1022, 1023]."""
    return xp.f64_from_bits(_to_int64(xp, k + 1023.0) << 52)


def _to_int64(xp, x):
    if xp.name == "numpy":
        return np.asarray(x).astype(np.int64)
    return x.to(xp.torch.int64)


LN2 = 0.6931471805599453                  # ln 2 rounded to float64
EXP_TERMS = [1.0 / math.factorial(i) for i in range(16)]


def exp2_f64(xp, x):
    """2**x in float64 for float64 x holding float32 values, to a few float64 ulps: x = k + f
    (k = rint(x), exact), e**(f ln 2) by its Taylor series (|f ln 2| <= 0.35, 16 terms), times
    2**k. Inputs outside [-1000, 1000] give 0 / inf; NaN stays NaN."""
    if xp is NUMPY:
        return _exp2_f64_numpy(x)
    clipped = xp.clip(xp.where(xp.isnan(x), 0.0, x), -1000.0, 1000.0)
    k = xp.rint(clipped)
    t = (clipped - k) * LN2
    poly = t * 0.0 + EXP_TERMS[15]
    for c in reversed(EXP_TERMS[:15]):
        poly = poly * t + c
    # 2**k in two steps so each factor is a normal float64 (k may be -1000)
    half = xp.rint(k * 0.5)
    scaled = poly * _pow2_f64(xp, half) * _pow2_f64(xp, k - half)
    return xp.where(xp.isnan(x), x, scaled)


def _exp2_f64_numpy(x):
    """exp2_f64's operations in the same order, on numpy arrays updated in place (no
    temporary per step of the 16-term polynomial)."""
    nan = np.isnan(x)
    clipped = np.where(nan, 0.0, x)
    np.clip(clipped, -1000.0, 1000.0, out=clipped)
    k = np.rint(clipped)
    t = np.subtract(clipped, k, out=clipped)
    t *= LN2
    poly = t * 0.0
    poly += EXP_TERMS[15]
    for c in reversed(EXP_TERMS[:15]):
        poly *= t
        poly += c
    half = k * 0.5
    np.rint(half, out=half)
    poly *= _pow2_f64(NUMPY, half)
    poly *= _pow2_f64(NUMPY, k - half)
    return np.where(nan, x, poly)


def exp2_f32(xp, x):
    """V_EXP_F32: 2**x, a subnormal result flushed to +0."""
    x64 = xp.f64(x)
    result = flush_f32(xp, xp.f32(exp2_f64(xp, x64)))
    return nan_rule_f32(xp, result, x)


_LOG_TERMS = [1.0 / (2 * i + 1) for i in range(14)]
_TWO_OVER_LN2 = 2.0 / LN2
_SQRT2 = 1.4142135623730951


def log2_f64(xp, x):
    """log2 of positive normal float64 x to a few float64 ulps: x = m * 2**e, m in
    [sqrt(1/2), sqrt(2)); log2(m) = 2 atanh(s) / ln 2 with s = (m - 1) / (m + 1), |s| <= 0.172
    (14 odd terms). Other inputs give garbage: callers select."""
    bits = xp.f64_bits(x)
    exponent = ((bits >> 52) & 0x7FF) - 1023
    mantissa = xp.f64_from_bits((bits & 0x000FFFFFFFFFFFFF) | (1023 << 52))
    high = mantissa > _SQRT2
    mantissa = xp.where(high, mantissa * 0.5, mantissa)
    e = xp.f64(exponent) + xp.where(high, 1.0, 0.0)
    s = (mantissa - 1.0) / (mantissa + 1.0)
    s2 = s * s
    poly = s2 * 0.0 + _LOG_TERMS[13]
    for c in reversed(_LOG_TERMS[:13]):
        poly = poly * s2 + c
    return e + (s * poly) * _TWO_OVER_LN2


def log2_f32(xp, x):
    """V_LOG_F32: log2(x) of x with a subnormal flushed to zero: +-0 -> -inf, negative -> the
    default NaN, +inf -> +inf."""
    flushed = flush_f32(xp, x)
    x64 = xp.f64(flushed)
    positive = x64 > 0.0
    safe = xp.where(positive & ~xp.isinf(x64), x64, 1.0)
    value = xp.f32(log2_f64(xp, safe))
    value = xp.where(x64 == 0.0, -math.inf, value)
    value = xp.where(x64 == math.inf, math.inf, value)
    value = xp.where(x64 < 0.0, math.nan, value)
    return nan_rule_f32(xp, xp.f32(value), x)


_SIN_TERMS = [(-1.0) ** i / math.factorial(2 * i + 1) for i in range(13)]
_TWO_PI = 6.283185307179586


def _sin_quarter_turns(xp, a):
    """sin(2 pi a) for float64 a in [-1/4, 1/4] (Taylor, 13 odd terms)."""
    theta = a * _TWO_PI
    t2 = theta * theta
    poly = t2 * 0.0 + _SIN_TERMS[12]
    for c in reversed(_SIN_TERMS[:12]):
        poly = poly * t2 + c
    return theta * poly


def sin_rev_f32(xp, x):
    """V_SIN_F32: sin(2 pi x), x in revolutions. The whole turns are removed exactly first
    (r = x - rint(x)), as the hardware's revolution input allows; sin(pi - t) = sin t folds r
    into [-1/4, 1/4]. +-inf -> the default NaN."""
    x64 = xp.f64(xp.where(xp.isinf(x), 0.0, x))
    r = x64 - xp.rint(x64)
    a = xp.abs(r)
    folded = xp.where(a > 0.25, 0.5 - a, a)
    value = _sin_quarter_turns(xp, folded)
    value = xp.where(r < 0.0, -value, value)
    value = xp.where(x64 == 0.0, x64, value)          # keeps the sign of a zero input
    value = xp.f32(value)
    value = xp.where(xp.isinf(x), math.nan, value)
    return nan_rule_f32(xp, xp.f32(value), x)


def cos_rev_f32(xp, x):
    """V_COS_F32: cos(2 pi x) = sin(2 pi (1/4 - |r|)), r = x - rint(x). +-inf -> default NaN."""
    x64 = xp.f64(xp.where(xp.isinf(x), 0.0, x))
    r = x64 - xp.rint(x64)
    value = xp.f32(_sin_quarter_turns(xp, 0.25 - xp.abs(r)))
    value = xp.where(xp.isinf(x), math.nan, value)
    return nan_rule_f32(xp, xp.f32(value), x)


def sqrt_f32(xp, x):
    """V_SQRT_F32 of x with a subnormal flushed: float64 sqrt rounded to float32 (correctly
    rounded: float64 carries more than 2 * 24 + 2 bits)."""
    value = xp.f32(xp.sqrt(xp.f64(flush_f32(xp, x))))
    return nan_rule_f32(xp, value, x)


def _ieee_min_max_f32(xp, a, b, pick):
    """IEEE-mode NaN rules of V_MIN/V_MAX: a signaling NaN operand gives that NaN made quiet,
    otherwise a quiet NaN operand yields the other operand (semantics._ieee_min_max)."""
    a_bits, b_bits = xp.f32_bits(a), xp.f32_bits(b)
    a_nan, b_nan = xp.isnan(a), xp.isnan(b)
    bits = xp.f32_bits(pick)
    bits = xp.where(b_nan, a_bits, bits)
    bits = xp.where(a_nan, b_bits, bits)
    bits = xp.where(b_nan & ((b_bits & F32_QUIET_BIT) == 0), b_bits | F32_QUIET_BIT, bits)
    bits = xp.where(a_nan & ((a_bits & F32_QUIET_BIT) == 0), a_bits | F32_QUIET_BIT, bits)
    return xp.f32_from_bits(bits)


def max_f32(xp, a, b):
    """V_MAX_F32: +0 > -0, the NaN rules of _ieee_min_max_f32."""
    a_neg = (xp.f32_bits(a) >> 31) == 1
    greater = (a > b) | ((a == b) & ~a_neg)
    return _ieee_min_max_f32(xp, a, b, xp.where(greater, a, b))


def min_f32(xp, a, b):
    """V_MIN_F32: -0 < +0, the NaN rules of _ieee_min_max_f32."""
    a_neg = (xp.f32_bits(a) >> 31) == 1
    less = (a < b) | ((a == b) & a_neg)
    return _ieee_min_max_f32(xp, a, b, xp.where(less, a, b))


def f32_to_bf16_bits(xp, x):
    """bfloat16 bits (int64, 0 .. 0xFFFF) of float32 x: round to nearest even; NaN -> its top
    half made quiet (numerics.f32_to_bf16_bits)."""
    bits = xp.f32_bits(x)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return xp.where(is_nan, (bits >> 16) | 0x0040, rounded)


# ---------------------------------------------------------------------------------------
# Selecting the backend
# ---------------------------------------------------------------------------------------

def selected() -> tuple[str, str]:
    """(backend, device) from ROCKE_EMU_BACKEND / ROCKE_EMU_DEVICE, validated; a CUDA device
    that is not there is refused here, before any work."""
    from rocke import env
    backend, device = env.emu_backend(), env.emu_device()
    if backend == "torch":
        try:
            import torch
        except ImportError:
            raise ValueError("ROCKE_EMU_BACKEND=torch but torch is not installed") from None
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("ROCKE_EMU_DEVICE=cuda but torch sees no CUDA GPU "
                             f"(torch {torch.__version__})")
    return backend, device
