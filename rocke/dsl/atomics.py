"""Atomic read-modify-write on global memory, buffers and LDS.

Every atomic returns the value memory held before it (a ``Value`` of the element type); when
the result is not used LLVM selects the instruction's no-return form, so ``ptr.atomic_add(i, v)``
as a statement costs no returned data. Lanes (and waves, and workgroups) hitting one address are
serialized by the hardware: each sees the previous one's result.

Operations and element types (what gfx942 executes natively; the rest LLVM lowers to a
compare-and-swap loop, still atomic):

========== ==================================================== ==================================
op         types                                                native on gfx942
========== ==================================================== ==================================
add        i32 u32 i64 u64 f32 f64, f16x2 / bf16x2 (packed)     all (global_atomic_add_f32,
                                                                 global_atomic_pk_add_{f16,bf16},
                                                                 ds_add_f32, ds_pk_add_{f16,bf16});
                                                                 buffers: no bf16x2 (refused)
max / min  (buffers)                                            no f32 (refused; use the pointer)
sub        i32 u32 i64 u64                                      all
max / min  i32 u32 i64 u64 (signed by type) f32 f64             ints; f64 global; f32/f64 LDS
and/or/xor i32 u32 i64 u64                                      all
exchange   32/64-bit types                                      all
cas        32/64-bit types (compares bits)                      all
========== ==================================================== ==================================

Float max/min follow IEEE maxNum/minNum (a NaN operand loses). Scopes: global and buffer
atomics are device-wide (``agent``), LDS atomics workgroup-wide; ordering is ``monotonic``
(no fence: use ``k.barrier()`` to order them against other accesses). Global atomics are tagged
``!amdgpu.no.fine.grained.memory`` (rocke allocates coarse-grained device memory), which lets
LLVM select the hardware float atomics instead of a compare-and-swap loop.
"""

from __future__ import annotations

import llvmlite.ir as ir

from . import types as T
from .errors import dsl_type_error, dsl_value_error
from .values import Value

_I32 = ir.IntType(32)
OPS = ("add", "sub", "max", "min", "and", "or", "xor", "exchange")
# buffer intrinsic suffix per (op, kind); kind: "sint" | "uint" | "float"
_BUFFER_OP = {("add", "sint"): "add", ("add", "uint"): "add", ("add", "float"): "fadd",
              ("sub", "sint"): "sub", ("sub", "uint"): "sub",
              ("max", "sint"): "smax", ("max", "uint"): "umax", ("max", "float"): "fmax",
              ("min", "sint"): "smin", ("min", "uint"): "umin", ("min", "float"): "fmin",
              ("and", "sint"): "and", ("and", "uint"): "and", ("or", "sint"): "or",
              ("or", "uint"): "or", ("xor", "sint"): "xor", ("xor", "uint"): "xor",
              ("exchange", "sint"): "swap", ("exchange", "uint"): "swap", ("exchange", "float"): "swap"}


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has none); only used for packed bf16 atomic adds."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash("bfloat")


def _check_op(op: str):
    if op not in OPS:
        raise dsl_value_error(f"atomic op must be one of {', '.join(OPS)}, got {op!r}")


def _packed(dtype: T.DType, lanes: int) -> bool:
    return lanes == 2 and dtype.name in ("f16", "bf16")


def check_atomic_type(op: str, dtype: T.DType, lanes: int, where: str):
    """Raise at the author's line when ``op`` is not defined on ``lanes`` x ``dtype``."""
    name = T.type_name(dtype, lanes)
    if _packed(dtype, lanes):
        if op != "add":
            raise dsl_type_error(f"{where}: packed {name} atomics are adds only, not {op!r}")
        return
    if lanes != 1:
        raise dsl_type_error(f"{where}: atomics take a scalar (or packed f16x2/bf16x2 add), got {name}")
    if dtype.bits not in (32, 64) or dtype.kind not in ("sint", "uint", "float"):
        raise dsl_type_error(f"{where}: atomics work on 32/64-bit ints and f32/f64 "
                             f"(and packed f16x2/bf16x2 adds), not {name}")
    if dtype.kind == "float" and op in ("sub", "and", "or", "xor"):
        raise dsl_type_error(f"{where}: atomic {op!r} needs an integer type, got {name}")


def _operand(k, value, dtype: T.DType, where: str) -> Value:
    v = k.coerce(value, dtype, 1, where)
    if v.dtype != dtype:
        raise dsl_type_error(f"{where}: {v.type_name} operand for memory of {dtype.name}; convert with .to()")
    return v


def _rmw_name(op: str, dtype: T.DType, packed: bool) -> str:
    if op == "exchange":
        return "xchg"
    if dtype.kind == "float" or packed:
        return {"add": "fadd", "max": "fmax", "min": "fmin"}[op]
    if op in ("max", "min"):
        return ("" if dtype.is_signed else "u") + op
    return op


def atomic_rmw(k, address_ir, op: str, value, dtype: T.DType, scope: str, where: str,
               coarse_grained: bool) -> Value:
    """``atomicrmw`` of ``op`` at a pointer (global or LDS); returns the old value."""
    _check_op(op)
    lanes = value.lanes if isinstance(value, Value) else 1
    check_atomic_type(op, dtype, lanes, where)
    packed = _packed(dtype, lanes)
    v = k.coerce(value, dtype, lanes, where)
    if v.dtype != dtype or v.lanes != lanes:
        raise dsl_type_error(f"{where}: {v.type_name} operand for memory of {dtype.name}; convert with .to()")
    b = k.builder
    data = k.ir_of(v)
    if packed and dtype.kind == "bf16":   # the carrier is <2 x i16>; the add needs <2 x bfloat>
        data = b.bitcast(data, ir.VectorType(_BFloat(), 2))
    inst = b.atomic_rmw(_rmw_name(op, dtype, packed), address_ir, data,
                        f'syncscope("{scope}") monotonic')
    if coarse_grained:
        inst.set_metadata("amdgpu.no.fine.grained.memory", k.module.add_metadata([]))
    if dtype.kind == "float" or packed:
        # LLVM may otherwise expand float atomics to a CAS loop to honour the denormal mode
        inst.set_metadata("amdgpu.ignore.denormal.mode", k.module.add_metadata([]))
    out = inst if not (packed and dtype.kind == "bf16") else b.bitcast(inst, dtype.vector_ir_type(2))
    return k.wrap(out, dtype, lanes)


def atomic_cas(k, address_ir, compare, value, dtype: T.DType, scope: str, where: str) -> Value:
    """``cmpxchg``: store ``value`` where memory equals ``compare`` (bitwise); returns the old value."""
    if dtype.bits not in (32, 64) or dtype.kind not in ("sint", "uint", "float"):
        raise dsl_type_error(f"{where}: compare-and-swap works on 32/64-bit types, not {dtype.name}")
    c = _operand(k, compare, dtype, where)
    v = _operand(k, value, dtype, where)
    b = k.builder
    carrier = ir.IntType(dtype.bits)
    cmp_ir, new_ir = k.ir_of(c), k.ir_of(v)
    if dtype.kind == "float":      # cmpxchg takes integers: compare the bits
        cmp_ir, new_ir = b.bitcast(cmp_ir, carrier), b.bitcast(new_ir, carrier)
    pair = b.cmpxchg(address_ir, cmp_ir, new_ir, f'syncscope("{scope}") monotonic', "monotonic")
    old = b.extract_value(pair, 0)
    if dtype.kind == "float":
        old = b.bitcast(old, dtype.ir_type)
    return k.wrap(old, dtype, 1)


def buffer_atomic(buf, op: str, index, value, *, mask=None, compare=None, where: str) -> Value:
    """``llvm.amdgcn.raw.ptr.buffer.atomic.*`` at element ``index`` of a BufferResource: lanes
    past the extent (or where ``mask`` is false) change nothing and return 0."""
    k = buf.kernel
    dtype = buf.dtype
    if op == "cas":
        if dtype.bits not in (32, 64) or dtype.kind not in ("sint", "uint", "float"):
            raise dsl_type_error(f"{where}: compare-and-swap works on 32/64-bit types, not {dtype.name}")
        c, v = _operand(k, compare, dtype, where), _operand(k, value, dtype, where)
        carrier = ir.IntType(dtype.bits)
        b = k.builder
        data, cmp_ir = k.ir_of(v), k.ir_of(c)
        if dtype.kind == "float":
            data, cmp_ir = b.bitcast(data, carrier), b.bitcast(cmp_ir, carrier)
        old = k.call(f"llvm.amdgcn.raw.ptr.buffer.atomic.cmpswap.i{dtype.bits}", carrier,
                     [data, cmp_ir, k.ir_of(buf.value), buf.voffset_ir(buf.masked(index, mask)),
                      ir.Constant(_I32, 0), ir.Constant(_I32, 0)])
        return k.wrap(old if dtype.kind != "float" else b.bitcast(old, dtype.ir_type), dtype, 1)
    _check_op(op)
    lanes = value.lanes if isinstance(value, Value) else 1
    check_atomic_type(op, dtype, lanes, where)
    v = k.coerce(value, dtype, lanes, where)
    if v.dtype != dtype or v.lanes != lanes:
        raise dsl_type_error(f"{where}: {v.type_name} operand for memory of {dtype.name}; convert with .to()")
    b = k.builder
    data = k.ir_of(v)
    if _packed(dtype, lanes):
        if dtype.kind == "bf16":
            raise dsl_type_error(f"{where}: gfx942 has no buffer_atomic_pk_add_bf16; add bf16x2 "
                                 "through the global pointer (global_atomic_pk_add_bf16)")
        ty = ir.VectorType(ir.HalfType() if dtype.kind == "float" else _BFloat(), 2)
        mangled = "v2f16" if dtype.kind == "float" else "v2bf16"
        suffix = "fadd"
    else:
        kind = "float" if dtype.kind == "float" else dtype.kind
        if (op, kind) not in _BUFFER_OP:
            raise dsl_type_error(f"{where}: buffer atomic {op!r} is not defined on {dtype.name}")
        suffix = _BUFFER_OP[(op, kind)]
        if dtype == T.f32 and op in ("max", "min"):
            raise dsl_type_error(f"{where}: gfx942 has no f32 buffer atomic {op}; use the global "
                                 "pointer (LLVM emits a compare-and-swap loop there)")
        if dtype.kind == "float" and op != "exchange":
            ty, mangled = dtype.ir_type, f"f{dtype.bits}"
        else:                 # the swap is selected on integer data only: exchange the bits
            ty, mangled = ir.IntType(dtype.bits), f"i{dtype.bits}"
    if data.type != ty:
        data = b.bitcast(data, ty)
    old = k.call(f"llvm.amdgcn.raw.ptr.buffer.atomic.{suffix}.{mangled}", ty,
                 [data, k.ir_of(buf.value), buf.voffset_ir(buf.masked(index, mask)),
                  ir.Constant(_I32, 0), ir.Constant(_I32, 0)])
    out_ty = dtype.vector_ir_type(lanes)
    return k.wrap(old if old.type == out_ty else b.bitcast(old, out_ty), dtype, lanes)


def atomic_methods(cls, doc_target: str):
    """Add ``atomic_<op>`` convenience methods (add, sub, max, ...) to ``cls``, each calling
    ``cls.atomic(op, index, value, **kw)``."""
    for op in OPS:
        def method(self, index, value, _op=op, **kw):
            return self.atomic(_op, index, value, **kw)
        method.__name__ = f"atomic_{op}"
        method.__qualname__ = f"{cls.__name__}.atomic_{op}"
        method.__doc__ = (f"Atomic {op} of ``value`` into the element at ``index`` of {doc_target}; "
                          "returns the old value (see rocke.dsl.atomics).")
        setattr(cls, method.__name__, method)
    return cls
