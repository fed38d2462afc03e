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
from .values import Value, broadcast_pair

_SUFFIX = {"f16": "f16", "f32": "f32", "f64": "f64"}


def _mangle(dt: T.DType, lanes: int) -> str:
    base = _SUFFIX.get(dt.name) or f"i{dt.bits}"
    return base if lanes == 1 else f"v{lanes}{base}"


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
            lane = k._b.extract_element(k._use(x), ir.Constant(ir.IntType(32), i))
            res = k._call(f"{intrinsic}.{_mangle(x.dtype, 1)}", x.dtype.ir_type, [lane])
            out = k._b.insert_element(out, res, ir.Constant(ir.IntType(32), i))
        return k._wrap(out, x.dtype, x.lanes)
    return k._wrap(k._call(f"{intrinsic}.{_mangle(x.dtype, x.lanes)}", ty, [k._use(x)]), x.dtype, x.lanes)


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


def sqrt(x: Value) -> Value:
    """Correctly rounded square root (``llvm.sqrt``)."""
    return _float_unary(x, "sqrt", "llvm.sqrt")


def floor(x: Value) -> Value:
    return _float_unary(x, "floor", "llvm.floor")


def ceil(x: Value) -> Value:
    return _float_unary(x, "ceil", "llvm.ceil")


def _binary(a, b, symbol: str):
    like = a if isinstance(a, Value) else b
    if not isinstance(like, Value):
        raise dsl_type_error(f"{symbol} needs at least one runtime Value")
    k = like.kernel
    a = k._coerce(a, like.dtype, 1, symbol)
    b = k._coerce(b, like.dtype, 1, symbol)
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
    return k._wrap(k._call(f"{name}.{_mangle(a.dtype, a.lanes)}", ty, [k._use(a), k._use(b)]), a.dtype, a.lanes)


def fma(a, b, c) -> Value:
    """a * b + c with a single rounding (``llvm.fma``)."""
    like = next((v for v in (a, b, c) if isinstance(v, Value)), None)
    if like is None:
        raise dsl_type_error("fma needs at least one runtime Value")
    k = like.kernel
    vals = [k._coerce(v, like.dtype, 1, "fma") for v in (a, b, c)]
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
    out = k._call(f"llvm.fma.{_mangle(like.dtype, lanes)}", ty, [k._use(v) for v in vals])
    return k._wrap(out, like.dtype, lanes)


def abs_(x: Value) -> Value:
    """|x|: ``llvm.fabs`` for floats, ``llvm.abs`` for signed ints."""
    if x.dtype.kind == "bf16":
        return (x.bitcast(T.i16) & 0x7FFF).bitcast(T.bf16)
    k = x.kernel
    ty = x.dtype.vector_ir_type(x.lanes)
    if x.dtype.kind == "float":
        return k._wrap(k._call(f"llvm.fabs.{_mangle(x.dtype, x.lanes)}", ty, [k._use(x)]), x.dtype, x.lanes)
    if x.dtype.kind == "sint":
        out = k._call(f"llvm.abs.{_mangle(x.dtype, x.lanes)}", ty, [k._use(x), ir.Constant(ir.IntType(1), 0)])
        return k._wrap(out, x.dtype, x.lanes)
    if x.dtype.kind == "uint":
        return x
    raise dsl_type_error(f"abs is not defined for {x.type_name}")
