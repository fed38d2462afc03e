"""Math on float and integer values.

Float functions accept f16 and f32 natively and bf16 through f32 (rounded back, RNE). The
``fast=True`` variants map straight to the hardware transcendental (``v_exp_f32``,
``v_log_f32``) without LLVM's denormal range reduction -- right for softmax, where the
exponent argument is <= 0 and a flushed tiny result is harmless.
"""

from __future__ import annotations

import llvmlite.ir as ir

from . import types as T
from .errors import dsl_type_error
from .values import Value, abs_, broadcast_pair, mangle as _mangle, select


def _float_unary(x: Value, name: str, intrinsic: str, *, f32_only: bool = False) -> Value:
    if not isinstance(x, Value):
        raise dsl_type_error(f"{name} expects a runtime Value, got {type(x).__name__}")
    if x.dtype.kind == "bf16" or (f32_only and x.dtype == T.f16):
        return _float_unary(x.to(T.f32), name, intrinsic, f32_only=f32_only).to(x.dtype)
    if x.dtype.kind != "float":
        raise dsl_type_error(f"{name} needs a float value, got {x.type_name}")
    k = x.kernel
    ty = x.dtype.vector_ir_type(x.lanes)
    if x.lanes > 1 and intrinsic.startswith("llvm.amdgcn."):  # target intrinsics are scalar-only
        out = ir.Constant(ty, ir.Undefined)
        for i in range(x.lanes):
            lane = k.builder.extract_element(k.ir_of(x), ir.Constant(ir.IntType(32), i))
            res = k.call(f"{intrinsic}.{_mangle(x.dtype, 1)}", x.dtype.ir_type, [lane])
            out = k.builder.insert_element(out, res, ir.Constant(ir.IntType(32), i))
        return k.wrap(out, x.dtype, x.lanes)
    return k.wrap(k.call(f"{intrinsic}.{_mangle(x.dtype, x.lanes)}", ty, [k.ir_of(x)]), x.dtype, x.lanes)


def exp2(x: Value, *, fast: bool = False) -> Value:
    """2**x. ``fast``: the bare hardware instruction (no denormal handling)."""
    return _float_unary(x, "exp2", "llvm.amdgcn.exp2" if fast else "llvm.exp2")


def log2(x: Value, *, fast: bool = False) -> Value:
    """log2(x). ``fast``: the bare hardware instruction (no denormal handling)."""
    return _float_unary(x, "log2", "llvm.amdgcn.log" if fast else "llvm.log2")


def rcp(x: Value) -> Value:
    """Hardware reciprocal ``v_rcp`` (about 1 ulp)."""
    return _float_unary(x, "rcp", "llvm.amdgcn.rcp")


def rsq(x: Value) -> Value:
    """Hardware reciprocal square root ``v_rsq``."""
    return _float_unary(x, "rsq", "llvm.amdgcn.rsq")


def sqrt(x: Value, *, fast: bool = False) -> Value:
    """Correctly rounded square root (``llvm.sqrt``). ``fast``: the bare hardware ``v_sqrt``
    (about 1 ulp, no denormal scaling or correction steps)."""
    return _float_unary(x, "sqrt", "llvm.amdgcn.sqrt" if fast else "llvm.sqrt")


def floor(x: Value) -> Value:
    return _float_unary(x, "floor", "llvm.floor")


def ceil(x: Value) -> Value:
    return _float_unary(x, "ceil", "llvm.ceil")


def _binary(a, b, symbol: str):
    like = a if isinstance(a, Value) else b
    if not isinstance(like, Value):
        raise dsl_type_error(f"{symbol} needs at least one runtime Value")
    k = like.kernel
    a = k.coerce(a, like.dtype, 1, symbol)
    b = k.coerce(b, like.dtype, 1, symbol)
    if a.dtype != b.dtype:
        raise dsl_type_error(f"operands of {symbol} have different types: {a.type_name} and {b.type_name}")
    return broadcast_pair(a, b, symbol)


def maximum(a, b) -> Value:
    """Elementwise max: ``llvm.maxnum`` for floats (NaN-ignoring), smax/umax for ints."""
    return _minmax(a, b, "max")


def minimum(a, b) -> Value:
    """Elementwise min: ``llvm.minnum`` for floats (NaN-ignoring), smin/umin for ints."""
    return _minmax(a, b, "min")


def _minmax(a, b, which: str) -> Value:
    a, b = _binary(a, b, which + "imum")
    if a.dtype.kind == "bf16":
        return _minmax(a.to(T.f32), b.to(T.f32), which).to(a.dtype)
    k = a.kernel
    if a.dtype.kind == "float":
        name = f"llvm.{which}num"
    elif a.dtype.kind in ("sint", "uint"):
        name = f"llvm.{'s' if a.dtype.is_signed else 'u'}{which}"
    else:
        raise dsl_type_error(f"{which}imum is not defined for {a.type_name}")
    ty = a.dtype.vector_ir_type(a.lanes)
    return k.wrap(k.call(f"{name}.{_mangle(a.dtype, a.lanes)}", ty, [k.ir_of(a), k.ir_of(b)]), a.dtype, a.lanes)


def fma(a, b, c) -> Value:
    """a * b + c with a single rounding (``llvm.fma``)."""
    like = next((v for v in (a, b, c) if isinstance(v, Value)), None)
    if like is None:
        raise dsl_type_error("fma needs at least one runtime Value")
    k = like.kernel
    vals = [k.coerce(v, like.dtype, 1, "fma") for v in (a, b, c)]
    for v in vals:
        if v.dtype != like.dtype:
            raise dsl_type_error(f"fma operands have different types: {like.type_name} and {v.type_name}")
    lanes = max(v.lanes for v in vals)
    widest = next(v for v in vals if v.lanes == lanes)
    vals = [v if v.lanes == lanes else broadcast_pair(v, widest, "fma")[0] for v in vals]
    if like.dtype.kind == "bf16":
        return fma(*(v.to(T.f32) for v in vals)).to(like.dtype)
    if like.dtype.kind != "float":
        raise dsl_type_error(f"fma needs float values, got {like.type_name}")
    ty = like.dtype.vector_ir_type(lanes)
    out = k.call(f"llvm.fma.{_mangle(like.dtype, lanes)}", ty, [k.ir_of(v) for v in vals])
    return k.wrap(out, like.dtype, lanes)


# ---- transcendental functions built on the above ------------------------------------------------
# Precision: each function's error over the stated range is within max(abs bound, ulp bound x
# the f32 spacing of the exact result), measured in rocke's emulator against torch float64
# (tests/dsl/test_math_emu.py asserts these bounds; the measured maxima are about half of them). The emulator
# rounds v_exp_f32/v_log_f32/v_rcp_f32 correctly; silicon may differ by 1 ulp in those steps.
# Polynomial coefficients were fitted for rocke (least squares on relative error, float64).

_ERF_SMALL = (1.1283791664921252, -0.37612628788069147, 0.11283611964733048, -0.02685479213035527,
              0.0051900255352811675, -0.0008024124849375647, 7.897490617585212e-05)
_ERFC_TAIL = (-0.0001464801770818036, 0.2847958366350507, 0.2604403322595551, 0.3451236787993187,
              -0.09792991854969196, 0.5560921969445318, -0.4662030109116438, 0.1178695742453555)
_TANH_SMALL = (-0.33333331283384116, 0.13333225966500134, -0.0539493833111006, 0.02171547356527068,
               -0.008214761927134693, 0.0021778175550605326)
_SQRT1_2 = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


def _via_f32(x: Value, name: str, fn) -> Value:
    """Evaluate ``fn`` in f32 for f16/bf16/f32 inputs and round back (RNE)."""
    if not isinstance(x, Value):
        raise dsl_type_error(f"{name} expects a runtime Value, got {type(x).__name__}")
    if x.dtype not in (T.f16, T.bf16, T.f32):
        raise dsl_type_error(f"{name} needs an f16, bf16 or f32 value, got {x.type_name}")
    return fn(x) if x.dtype == T.f32 else fn(x.to(T.f32)).to(x.dtype)


def _horner(x: Value, coeffs) -> Value:
    acc = x.kernel.const(coeffs[-1], T.f32, x.lanes)
    for c in reversed(coeffs[:-1]):
        acc = fma(acc, x, c)
    return acc


def exp(x: Value, *, fast: bool = False) -> Value:
    """e**x. Default: ``llvm.exp`` (the backend's range-reduced expansion), max 1 ulp over
    [-87, 88] in f32. ``fast``: ``exp2(x * log2(e))`` with the bare instruction -- relative
    error grows with |x| (about |x| * 2^-23) and results below 2^-126 flush to 0."""
    if fast:
        return _via_f32(x, "exp", lambda v: exp2(v * 1.4426950408889634, fast=True))
    return _float_unary(x, "exp", "llvm.exp")


def log(x: Value, *, fast: bool = False) -> Value:
    """Natural log. Default: ``llvm.log``, max 2 ulp over [1e-30, 1e30]; 0 -> -inf,
    negative -> NaN. ``fast``: ``log2(x) * ln(2)`` with the bare instruction (about 2 ulp,
    denormal inputs not handled)."""
    if fast:
        return _via_f32(x, "log", lambda v: log2(v, fast=True) * 0.6931471805599453)
    return _float_unary(x, "log", "llvm.log")


def erf(x: Value) -> Value:
    """Error function in f32: an odd polynomial for |x| <= 1, ``1 - exp(-x^2) Q(1/(1+|x|/2))``
    above, exactly +-1 from |x| >= 4. Error within max(2e-7, 4 ulp) over [-6, 6]."""
    def body(v: Value) -> Value:
        a = abs_(v)
        small = v * _horner(v * v, _ERF_SMALL)
        t = 1.0 / fma(a, 0.5, 1.0)
        tail = 1.0 - exp(-(a * a)) * _horner(t, _ERFC_TAIL)
        tail = select(a >= 4.0, v.kernel.const(1.0, T.f32, v.lanes), tail)
        signed = select(v < 0.0, -tail, tail)
        return select(a <= 1.0, small, signed)
    return _via_f32(x, "erf", body)


def tanh(x: Value) -> Value:
    """Hyperbolic tangent in f32: ``x + x^3 P(x^2)`` for |x| <= 0.625, else
    ``sign(x) (1 - 2 / (exp(2|x|) + 1))`` (saturating to +-1). Error within max(2e-7, 4 ulp)
    over [-10, 10]."""
    def body(v: Value) -> Value:
        a = abs_(v)
        x2 = v * v
        small = fma(v * x2, _horner(x2, _TANH_SMALL), v)
        big = 1.0 - 2.0 / (exp(a + a) + 1.0)
        big = select(v < 0.0, -big, big)
        return select(a <= 0.625, small, big)
    return _via_f32(x, "tanh", body)


def sigmoid(x: Value) -> Value:
    """1 / (1 + e^-x) in f32 (correctly rounded division). Error within max(1.2e-7, 4 ulp)
    over [-30, 30]."""
    return _via_f32(x, "sigmoid", lambda v: 1.0 / (1.0 + exp(-v)))


def gelu(x: Value, *, approximate: str = "none") -> Value:
    """GELU: ``approximate="none"``: x/2 (1 + erf(x/sqrt(2))) (torch's default), ``"tanh"``:
    x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Both in f32; error within max(2e-7, 2 ulp)
    of torch's same form in float64 over [-8, 8]."""
    if approximate not in ("none", "tanh"):
        from .errors import dsl_value_error
        raise dsl_value_error(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")

    def body(v: Value) -> Value:
        if approximate == "none":
            inner = erf(v * _SQRT1_2)
        else:
            inner = tanh((v + 0.044715 * (v * v * v)) * _SQRT_2_OVER_PI)
        return (v * 0.5) * (inner + 1.0)
    return _via_f32(x, "gelu", body)
