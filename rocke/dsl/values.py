"""Runtime values: a scalar or short vector of one DType, with Python operators.

Operands must have the same DType (mixing raises TypeError at the author's line); a scalar
operand broadcasts against a vector; Python numbers become constants of the other operand's type.
Integer ``//`` and ``%`` truncate toward zero (C / Triton semantics); ``>>`` is arithmetic for
signed and logical for unsigned types. bf16 arithmetic runs in f32 and rounds back (RNE).

A vector iterates over its lanes (``list(v)``, ``a, b = v2``), so Python's ``sum(v)`` adds the
lanes in order as a scalar (``0 + v[0] + v[1] + ...``; the 0 becomes a constant of v's dtype),
and ``max``-style folds can be written with ``functools.reduce(maximum, v)``. For a sum across
lanes of a wave use ``wave_sum``; across a fragment's rows or columns, ``Fragment.reduce``.
"""

from __future__ import annotations

import llvmlite.ir as ir

from . import types as T
from .errors import dsl_type_error, dsl_value_error

_I32 = ir.IntType(32)


class Value:
    """A runtime SSA value of ``dtype`` with ``lanes`` elements (1 = scalar)."""

    __slots__ = ("kernel", "ir", "dtype", "lanes", "scope")
    __hash__ = object.__hash__

    def __init__(self, kernel, ir_value, dtype: T.DType, lanes: int, scope):
        self.kernel = kernel
        self.ir = ir_value
        self.dtype = dtype
        self.lanes = lanes
        self.scope = scope

    @property
    def type_name(self) -> str:
        return T.type_name(self.dtype, self.lanes)

    def __repr__(self) -> str:
        return f"Value({self.type_name})"

    def __bool__(self):
        raise dsl_type_error(
            f"a runtime {self.type_name} value has no Python truth value; "
            "use k.if_/k.if_else for runtime branches or select() for values")

    def __iter__(self):
        if self.lanes == 1:
            raise dsl_type_error(f"cannot iterate over scalar {self.type_name}")
        return iter([self[i] for i in range(self.lanes)])

    # ---- arithmetic -------------------------------------------------------------------------
    def __add__(self, other): return _arith(self, other, "+", False)
    def __radd__(self, other): return _arith(self, other, "+", True)
    def __sub__(self, other): return _arith(self, other, "-", False)
    def __rsub__(self, other): return _arith(self, other, "-", True)
    def __mul__(self, other): return _arith(self, other, "*", False)
    def __rmul__(self, other): return _arith(self, other, "*", True)
    def __truediv__(self, other): return _arith(self, other, "/", False)
    def __rtruediv__(self, other): return _arith(self, other, "/", True)
    def __floordiv__(self, other): return _arith(self, other, "//", False)
    def __rfloordiv__(self, other): return _arith(self, other, "//", True)
    def __mod__(self, other): return _arith(self, other, "%", False)
    def __rmod__(self, other): return _arith(self, other, "%", True)
    def __and__(self, other): return _bitwise(self, other, "&", False)
    def __rand__(self, other): return _bitwise(self, other, "&", True)
    def __or__(self, other): return _bitwise(self, other, "|", False)
    def __ror__(self, other): return _bitwise(self, other, "|", True)
    def __xor__(self, other): return _bitwise(self, other, "^", False)
    def __rxor__(self, other): return _bitwise(self, other, "^", True)
    def __lshift__(self, other): return _bitwise(self, other, "<<", False)
    def __rlshift__(self, other): return _bitwise(self, other, "<<", True)
    def __rshift__(self, other): return _bitwise(self, other, ">>", False)
    def __rrshift__(self, other): return _bitwise(self, other, ">>", True)

    def __lt__(self, other): return _compare(self, other, "<")
    def __le__(self, other): return _compare(self, other, "<=")
    def __gt__(self, other): return _compare(self, other, ">")
    def __ge__(self, other): return _compare(self, other, ">=")
    def __eq__(self, other): return _compare(self, other, "==")
    def __ne__(self, other): return _compare(self, other, "!=")

    def __neg__(self):
        return _arith(self, 0, "-", True)

    def __invert__(self):
        if not (self.dtype.is_int or self.dtype.kind == "bool"):
            raise dsl_type_error(f"'~' needs an integer or i1 operand, got {self.type_name}")
        return _bitwise(self, -1 if self.dtype.kind != "bool" else True, "^", False)

    def __abs__(self):
        return abs_(self)

    # ---- conversions ------------------------------------------------------------------------
    def to(self, dtype, *, rounding: str = "rne", quiet_nans: bool = False,
           nan_check: bool = True) -> "Value":
        """Convert to ``dtype`` (numeric conversion). ``rounding="rtz"`` (toward zero) is
        accepted for f32->f16 (``v_cvt_pkrtz``) and f32->bf16, ``"rna"`` (to nearest, ties away
        from zero) for f32->bf16; everything else rounds to nearest even ("rne").
        ``quiet_nans``: the value holds no signaling NaN (true of every arithmetic result: the
        hardware quiets NaNs), so f32->bf16 toward zero is the bare truncation (a quiet NaN keeps
        its quiet bit) without the NaN select. ``nan_check=False``: the caller needs no NaN
        kept, so f32->bf16 drops the NaN select in every mode and a NaN converts to whatever the
        rounding's integer add gives (a NaN, an infinity or a zero) -- for values whose NaNs
        reach the result another way (attention's P: the row sum, taken from the unrounded P,
        turns the row's output into NaN)."""
        from .convert import convert
        return convert(self, T.dtype(dtype), rounding, quiet_nans=quiet_nans, nan_check=nan_check)

    def bitcast(self, dtype, lanes: int | None = None) -> "Value":
        """Reinterpret the bits as ``dtype``; the lane count follows from the total width."""
        dst = T.dtype(dtype)
        if self.dtype.kind == "ptr" or dst.kind == "ptr":
            raise dsl_type_error("bitcast does not apply to pointers or buffer resources")
        total = self.dtype.bits * self.lanes
        new_lanes = total // dst.bits if lanes is None else lanes
        if new_lanes * dst.bits != total:
            raise dsl_type_error(
                f"bitcast {self.type_name} ({total} bits) to {dst.name} x{new_lanes} changes the width")
        k = self.kernel
        src = k.ir_of(self)
        out_ty = dst.vector_ir_type(new_lanes)
        result = src if src.type == out_ty else k.builder.bitcast(src, out_ty)
        return k.wrap(result, dst, new_lanes)

    # ---- vectors ----------------------------------------------------------------------------
    def __getitem__(self, index):
        k = self.kernel
        if self.lanes == 1:
            raise dsl_type_error(f"cannot index scalar {self.type_name}")
        if isinstance(index, slice):
            picks = list(range(self.lanes))[index]
            if not picks:
                raise dsl_value_error(f"empty slice of {self.type_name}")
            return shuffle(self, picks)
        if isinstance(index, Value):
            if not index.dtype.is_int:
                raise dsl_type_error(f"vector index must be an integer, got {index.type_name}")
            idx = k.ir_of(index.to(T.i32))
        else:
            if not isinstance(index, int) or not -self.lanes <= index < self.lanes:
                raise dsl_value_error(f"index {index!r} out of range for {self.type_name}")
            idx = ir.Constant(_I32, index % self.lanes)
        return k.wrap(k.builder.extract_element(k.ir_of(self), idx), self.dtype, 1)

    def insert(self, index: int, element) -> "Value":
        """A copy of this vector with lane ``index`` replaced by ``element``."""
        k = self.kernel
        if self.lanes == 1 or not isinstance(index, int) or not 0 <= index < self.lanes:
            raise dsl_value_error(f"insert index {index!r} invalid for {self.type_name}")
        elem = k.coerce(element, self.dtype, 1, "insert")
        if elem.lanes != 1:
            raise dsl_type_error(f"insert expects a scalar {self.dtype}, got {elem.type_name}")
        out = k.builder.insert_element(k.ir_of(self), k.ir_of(elem), ir.Constant(_I32, index))
        return k.wrap(out, self.dtype, self.lanes)


# ---- helpers shared by the operators ----------------------------------------------------------

def _operands(a: Value, other, symbol: str, reflected: bool):
    k = a.kernel
    b = k.coerce(other, a.dtype, 1, symbol)
    if b.dtype != a.dtype:
        left, right = (b, a) if reflected else (a, b)
        raise dsl_type_error(
            f"operands of '{symbol}' have different types: {left.type_name} and {right.type_name}; "
            "convert one explicitly with .to(dtype)")
    a, b = broadcast_pair(a, b, symbol)
    return (b, a) if reflected else (a, b)


def broadcast_pair(a: Value, b: Value, symbol: str):
    """Broadcast a scalar against a vector; vectors of different lengths are a TypeError."""
    if a.lanes == b.lanes:
        return a, b
    if a.lanes == 1:
        return splat(a, b.lanes), b
    if b.lanes == 1:
        return a, splat(b, a.lanes)
    raise dsl_type_error(
        f"operands of '{symbol}' are vectors of different lengths: {a.type_name} and {b.type_name}")


def _via_f32(a: Value, b: Value, fn):
    return fn(a.to(T.f32), b.to(T.f32)).to(a.dtype)


def _arith(self: Value, other, symbol: str, reflected: bool) -> Value:
    a, b = _operands(self, other, symbol, reflected)
    kind = a.dtype.kind
    if kind == "bf16":
        return _via_f32(a, b, lambda x, y: _arith(x, y, symbol, False))
    if kind not in ("sint", "uint", "float"):
        raise dsl_type_error(f"'{symbol}' is not defined for {a.type_name}"
                             + ("; convert fp8 to f32 first" if kind == "fp8" else ""))
    k = a.kernel
    x, y = k.ir_of(a), k.ir_of(b)
    bld = k.builder
    if kind == "float":
        if symbol == "//":
            quotient = _arith(a, b, "/", False)
            floor = f"llvm.floor.{mangle(a.dtype, a.lanes)}"
            return k.wrap(k.call(floor, a.dtype.vector_ir_type(a.lanes), [k.ir_of(quotient)]), a.dtype, a.lanes)
        op = {"+": bld.fadd, "-": bld.fsub, "*": bld.fmul, "/": bld.fdiv, "%": bld.frem}[symbol]
    else:
        if symbol == "/":
            raise dsl_type_error(f"'/' is float division; use '//' for integer division of {a.type_name}")
        signed = kind == "sint"
        op = {"+": bld.add, "-": bld.sub, "*": bld.mul,
              "//": bld.sdiv if signed else bld.udiv, "%": bld.srem if signed else bld.urem}[symbol]
    return k.wrap(op(x, y), a.dtype, a.lanes)


def _bitwise(self: Value, other, symbol: str, reflected: bool) -> Value:
    a, b = _operands(self, other, symbol, reflected)
    kind = a.dtype.kind
    shifts = symbol in ("<<", ">>")
    if not (kind in ("sint", "uint") or (kind == "bool" and not shifts)):
        raise dsl_type_error(f"'{symbol}' needs integer operands, got {a.type_name}")
    k = a.kernel
    bld = k.builder
    op = {"&": bld.and_, "|": bld.or_, "^": bld.xor, "<<": bld.shl,
          ">>": bld.ashr if kind == "sint" else bld.lshr}[symbol]
    return k.wrap(op(k.ir_of(a), k.ir_of(b)), a.dtype, a.lanes)


def _compare(self: Value, other, symbol: str) -> Value:
    a, b = _operands(self, other, symbol, False)
    kind = a.dtype.kind
    if kind == "bf16":
        return _compare(a.to(T.f32), b.to(T.f32), symbol)
    if kind in ("fp8", "ptr"):
        raise dsl_type_error(f"'{symbol}' is not defined for {a.type_name}")
    k = a.kernel
    bld = k.builder
    x, y = k.ir_of(a), k.ir_of(b)
    if kind == "float":
        # Python semantics: every comparison with NaN is False except '!='.
        result = bld.fcmp_unordered(symbol, x, y) if symbol == "!=" else bld.fcmp_ordered(symbol, x, y)
    elif kind == "sint":
        result = bld.icmp_signed(symbol, x, y)
    else:
        result = bld.icmp_unsigned(symbol, x, y)
    return k.wrap(result, T.i1, a.lanes)


# ---- free functions on values ----------------------------------------------------------------

def splat(value: Value, lanes: int) -> Value:
    """Broadcast a scalar to a ``lanes``-wide vector."""
    k = value.kernel
    if value.lanes != 1:
        raise dsl_type_error(f"splat expects a scalar, got {value.type_name}")
    if lanes == 1:
        return value
    vec_ty = value.dtype.vector_ir_type(lanes)
    one = k.builder.insert_element(ir.Constant(vec_ty, ir.Undefined), k.ir_of(value), ir.Constant(_I32, 0))
    zeros = ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
    return k.wrap(k.builder.shuffle_vector(one, ir.Constant(vec_ty, ir.Undefined), zeros), value.dtype, lanes)


def shuffle(value: Value, picks, other: Value | None = None) -> Value:
    """LLVM shufflevector: lanes ``picks`` of ``value`` (then of ``other``), in order."""
    k = value.kernel
    picks = [int(p) for p in picks]
    if other is not None and (other.dtype != value.dtype or other.lanes != value.lanes):
        raise dsl_type_error(f"shuffle operands differ: {value.type_name} and {other.type_name}")
    limit = value.lanes * (2 if other is not None else 1)
    if not picks or any(not 0 <= p < limit for p in picks):
        raise dsl_value_error(f"shuffle picks {picks} out of range for {value.type_name}")
    first = _as_ir_vector(value)
    second = _as_ir_vector(other) if other is not None else ir.Constant(first.type, ir.Undefined)
    mask = ir.Constant(ir.VectorType(_I32, len(picks)), picks)
    out = k.builder.shuffle_vector(first, second, mask)
    if len(picks) == 1:
        out = k.builder.extract_element(out, ir.Constant(_I32, 0))
    return k.wrap(out, value.dtype, len(picks))


def _as_ir_vector(value: Value):
    """The IR of ``value`` as a vector (a scalar becomes a 1-lane vector)."""
    k = value.kernel
    src = k.ir_of(value)
    if value.lanes > 1:
        return src
    one_ty = ir.VectorType(value.dtype.ir_type, 1)
    return k.builder.insert_element(ir.Constant(one_ty, ir.Undefined), src, ir.Constant(_I32, 0))


def vector(elements) -> Value:
    """Pack scalars of one dtype (Python numbers adapt to it) into a vector."""
    elements = list(elements)
    first = next((e for e in elements if isinstance(e, Value)), None)
    if first is None:
        raise dsl_type_error("vector() needs at least one runtime Value to know the dtype")
    k = first.kernel
    elems = [k.coerce(e, first.dtype, 1, "vector") for e in elements]
    for e in elems:
        if e.dtype != first.dtype or e.lanes != 1:
            raise dsl_type_error(
                f"vector() elements must all be scalar {first.dtype}, got {e.type_name}")
    if len(elems) == 1:
        return elems[0]
    vec_ty = first.dtype.vector_ir_type(len(elems))
    out = ir.Constant(vec_ty, ir.Undefined)
    for i, e in enumerate(elems):
        out = k.builder.insert_element(out, k.ir_of(e), ir.Constant(_I32, i))
    return k.wrap(out, first.dtype, len(elems))


def concat(*parts: Value) -> Value:
    """Concatenate scalars/vectors of one dtype into one vector."""
    if not parts:
        raise dsl_value_error("concat() needs at least one value")
    return vector([e for p in parts for e in ([p] if p.lanes == 1 else list(p))])


def select(cond: Value, if_true, if_false) -> Value:
    """``cond ? if_true : if_false`` per lane; ``cond`` is i1 (scalar or matching vector)."""
    if not isinstance(cond, Value) or cond.dtype != T.i1:
        got = cond.type_name if isinstance(cond, Value) else type(cond).__name__
        raise dsl_type_error(f"select condition must be an i1 value, got {got}")
    k = cond.kernel
    like = if_true if isinstance(if_true, Value) else if_false
    if not isinstance(like, Value):
        raise dsl_type_error("select needs at least one runtime Value among its two choices")
    a = k.coerce(if_true, like.dtype, 1, "select")
    b = k.coerce(if_false, like.dtype, 1, "select")
    if a.dtype != b.dtype:
        raise dsl_type_error(f"select choices have different types: {a.type_name} and {b.type_name}")
    a, b = broadcast_pair(a, b, "select")
    if cond.lanes not in (1, a.lanes):
        raise dsl_type_error(f"select condition {cond.type_name} does not match {a.type_name}")
    return k.wrap(k.builder.select(k.ir_of(cond), k.ir_of(a), k.ir_of(b)), a.dtype, a.lanes)


_SUFFIX = {"f16": "f16", "f32": "f32", "f64": "f64"}


def mangle(dt: T.DType, lanes: int) -> str:
    """The type suffix of an overloaded LLVM intrinsic (``f32``, ``v4f16``, ``i32``)."""
    base = _SUFFIX.get(dt.name) or f"i{dt.bits}"
    return base if lanes == 1 else f"v{lanes}{base}"


def abs_(x: Value) -> Value:
    """|x|: ``llvm.fabs`` for floats, ``llvm.abs`` for signed ints."""
    if x.dtype.kind == "bf16":
        return (x.bitcast(T.i16) & 0x7FFF).bitcast(T.bf16)
    k = x.kernel
    ty = x.dtype.vector_ir_type(x.lanes)
    if x.dtype.kind == "float":
        return k.wrap(k.call(f"llvm.fabs.{mangle(x.dtype, x.lanes)}", ty, [k.ir_of(x)]), x.dtype, x.lanes)
    if x.dtype.kind == "sint":
        out = k.call(f"llvm.abs.{mangle(x.dtype, x.lanes)}", ty, [k.ir_of(x), ir.Constant(ir.IntType(1), 0)])
        return k.wrap(out, x.dtype, x.lanes)
    if x.dtype.kind == "uint":
        return x
    raise dsl_type_error(f"abs is not defined for {x.type_name}")
