"""Numeric conversions between DTypes (``Value.to``).

- f32 -> bf16 is emitted as the round-to-nearest-even bit sequence (NaN stays a quiet NaN), so
  the rounding is explicit integer code rather than a backend lowering choice; ``rounding="rna"``
  (to nearest, ties away from zero) and ``"rtz"`` (toward zero) are the same kind of sequence,
  NaN quieted alike (AITER's fwd v3 bf16_cvt modes).
- f32 -> f16 is ``fptrunc`` (RNE); ``rounding="rtz"`` uses ``v_cvt_pkrtz_f16_f32``.
- fp8 conversions use ``v_cvt_pk_{fp8,bf8}_f32`` and ``v_cvt_f32_{fp8,bf8}`` through their LLVM
  intrinsics: the same opcodes read and write gfx942's fnuz codes (e4m3fnuz / e5m2fnuz) and
  gfx950's OCP codes (e4m3fn / e5m2), so each format converts only on its target
  (``types.FP8_FORMATS``); other types go through f32.
"""

from __future__ import annotations

import llvmlite.ir as ir

from . import types as T
from ..arch.targets import get_target
from .errors import dsl_type_error, dsl_value_error

_I1 = ir.IntType(1)
_I32 = ir.IntType(32)
_F32 = ir.FloatType()
_FP8_KIND = {"fp8_e4m3fnuz": "fp8", "fp8_e5m2fnuz": "bf8", "fp8_e4m3fn": "fp8", "fp8_e5m2": "bf8"}


def _check_fnuz_target(k, dt: T.DType):
    # one opcode, two formats: fnuz codes on gfx942, OCP codes on gfx950 (a wrong one is 2x off)
    formats = T.FP8_FORMATS.get(k.target, ())
    if dt.name not in formats:
        kind = "fnuz" if dt.name.endswith("fnuz") else "OCP"
        raise dsl_type_error(f"{dt.name} conversions: {k.target} has no {kind} fp8 (its fp8 "
                             f"conversions read and write {' / '.join(formats) or 'nothing'})")


ROUNDINGS = ("rne", "rna", "rtz")     # to nearest even, to nearest ties away, toward zero


def convert(v, dst: T.DType, rounding: str, *, quiet_nans: bool = False, nan_check: bool = True):
    src = v.dtype
    if not isinstance(quiet_nans, bool):
        raise dsl_value_error(f"quiet_nans must be a bool, got {quiet_nans!r}")
    if not isinstance(nan_check, bool):
        raise dsl_value_error(f"nan_check must be a bool, got {nan_check!r}")
    if rounding not in ROUNDINGS:
        raise dsl_value_error(f"rounding must be one of {', '.join(map(repr, ROUNDINGS))}, got {rounding!r}")
    if rounding == "rtz" and not (src == T.f32 and dst in (T.f16, T.bf16)):
        raise dsl_value_error(f"rounding='rtz' is only available for f32 -> f16 / bf16, not {src} -> {dst}")
    if rounding == "rna" and not (src == T.f32 and dst == T.bf16):
        raise dsl_value_error(f"rounding='rna' is only available for f32 -> bf16, not {src} -> {dst}")
    if "ptr" in (src.kind, dst.kind):
        raise dsl_type_error(f"cannot convert {v.type_name} to {dst.name}")
    if src == dst:
        return v
    # Formats without direct LLVM casts go through f32, which holds all of them exactly.
    if src.kind in ("bf16", "fp8"):
        as_f32 = _bf16_to_f32(v) if src.kind == "bf16" else _fp8_to_f32(v)
        return as_f32 if dst == T.f32 else convert(as_f32, dst, "rne")
    if dst.kind in ("bf16", "fp8"):
        as_f32 = convert(v, T.f32, "rne")
        return (_f32_to_bf16(as_f32, rounding, quiet_nans, nan_check) if dst.kind == "bf16"
                else _f32_to_fp8(as_f32, dst))
    if rounding == "rtz":
        return _f32_to_f16_rtz(v)
    return _llvm_cast(v, dst)


def _llvm_cast(v, dst: T.DType):
    k = v.kernel
    b = k.builder
    x = k.ir_of(v)
    src = v.dtype
    out_ty = dst.vector_ir_type(v.lanes)
    if dst.kind == "bool":
        zero = ir.Constant(x.type, None)
        out = b.fcmp_unordered("!=", x, zero) if src.kind == "float" else b.icmp_unsigned("!=", x, zero)
    elif src.kind == "float" and dst.kind == "float":
        out = b.fpext(x, out_ty) if dst.bits > src.bits else b.fptrunc(x, out_ty)
    elif src.kind == "float":
        out = b.fptosi(x, out_ty) if dst.kind == "sint" else b.fptoui(x, out_ty)
    elif dst.kind == "float":
        out = b.sitofp(x, out_ty) if src.kind == "sint" else b.uitofp(x, out_ty)
    elif dst.bits < src.bits:
        out = b.trunc(x, out_ty)
    elif dst.bits > src.bits:
        out = b.sext(x, out_ty) if src.kind == "sint" else b.zext(x, out_ty)
    else:
        out = x  # same width, other signedness: a reinterpretation
    return k.wrap(out, dst, v.lanes)


def _const_like(v, value: int, bits: int = 32):
    ty = ir.IntType(bits)
    return ir.Constant(ty if v.lanes == 1 else ir.VectorType(ty, v.lanes),
                       value if v.lanes == 1 else [value] * v.lanes)


def _bf16_to_f32(v):
    k = v.kernel
    b = k.builder
    wide = b.zext(k.ir_of(v), T.i32.vector_ir_type(v.lanes))
    bits = b.shl(wide, _const_like(v, 16))
    return k.wrap(b.bitcast(bits, T.f32.vector_ir_type(v.lanes)), T.f32, v.lanes)


def _f32_to_bf16(v, rounding: str = "rne", quiet_nans: bool = False, nan_check: bool = True):
    """Round to nearest even: add 0x7FFF plus the lsb of the kept half; "rna" (ties away from
    zero): add 0x8000; "rtz": keep the high half. NaN -> quiet NaN in every mode (``quiet_nans``
    with "rtz": no NaN select -- the high half of a quiet NaN is one; a signaling NaN whose
    payload lies only in the low half would become an infinity). ``nan_check=False``: no NaN
    select in any mode; a NaN converts to what the rounding's integer arithmetic gives (a NaN,
    an infinity or a zero). On a target
    with a native conversion (gfx950's v_cvt_pk_bf16_f32, RNE, NaN quieted) LLVM's ``fptrunc`` to
    ``bfloat`` selects it for "rne": one instruction per two values, no compare."""
    k = v.kernel
    b = k.builder
    x = k.ir_of(v)
    if rounding == "rne" and get_target(k.target).native_bf16_conversion:
        narrow = b.fptrunc(x, T.bfloat_vector_ir_type(v.lanes))
        return k.wrap(b.bitcast(narrow, T.i16.vector_ir_type(v.lanes)), T.bf16, v.lanes)
    bits = b.bitcast(x, T.i32.vector_ir_type(v.lanes))
    high = b.lshr(bits, _const_like(v, 16))
    if rounding == "rtz":
        rounded = high
        # a quiet NaN's quiet bit is in the high half: the truncation keeps it a NaN
        nan_check = nan_check and not quiet_nans
    elif rounding == "rna":
        rounded = b.lshr(b.add(bits, _const_like(v, 0x8000)), _const_like(v, 16))
    else:
        lsb = b.and_(high, _const_like(v, 1))
        rounded = b.lshr(b.add(b.add(bits, _const_like(v, 0x7FFF)), lsb), _const_like(v, 16))
    if not nan_check:
        return k.wrap(b.trunc(rounded, T.i16.vector_ir_type(v.lanes)), T.bf16, v.lanes)
    quiet_nan = b.or_(high, _const_like(v, 0x40))
    is_nan = b.fcmp_unordered("uno", x, x)
    chosen = b.select(is_nan, quiet_nan, rounded)
    return k.wrap(b.trunc(chosen, T.i16.vector_ir_type(v.lanes)), T.bf16, v.lanes)


def _f32_to_f16_rtz(v):
    k = v.kernel
    b = k.builder
    pkrtz = k.intrinsic("llvm.amdgcn.cvt.pkrtz", ir.VectorType(ir.HalfType(), 2), [_F32, _F32])
    elems = _scalars(v)
    halves = []
    for i in range(0, len(elems), 2):
        lo = elems[i]
        hi = elems[i + 1] if i + 1 < len(elems) else lo
        pair = b.call(pkrtz, [lo, hi])
        halves.append(b.extract_element(pair, ir.Constant(_I32, 0)))
        if i + 1 < len(elems):
            halves.append(b.extract_element(pair, ir.Constant(_I32, 1)))
    return k.wrap(_pack(k, halves, ir.HalfType()), T.f16, v.lanes)


def _f32_to_fp8(v, dst: T.DType):
    """Pairs of f32 go through one ``cvt.pk.{fp8,bf8}.f32``; four results fill one dword."""
    k = v.kernel
    b = k.builder
    _check_fnuz_target(k, dst)
    cvt = k.intrinsic(f"llvm.amdgcn.cvt.pk.{_FP8_KIND[dst.name]}.f32", _I32, [_F32, _F32, _I32, _I1])
    elems = _scalars(v)
    words = []
    for base in range(0, len(elems), 4):
        word = ir.Constant(_I32, 0)
        for half, i in enumerate(range(base, min(base + 4, len(elems)), 2)):
            lo = elems[i]
            hi = elems[i + 1] if i + 1 < len(elems) else ir.Constant(_F32, 0.0)
            word = b.call(cvt, [lo, hi, word, ir.Constant(_I1, half)])
        words.append(word)
    i8 = ir.IntType(8)
    if len(elems) == 1:
        return k.wrap(b.trunc(words[0], i8), dst, 1)
    packed = _pack(k, words, _I32) if len(words) > 1 else words[0]
    as_bytes = b.bitcast(packed, ir.VectorType(i8, 4 * len(words)))
    if 4 * len(words) != len(elems):
        mask = ir.Constant(ir.VectorType(_I32, len(elems)), list(range(len(elems))))
        as_bytes = b.shuffle_vector(as_bytes, ir.Constant(as_bytes.type, ir.Undefined), mask)
    return k.wrap(as_bytes, dst, v.lanes)


def _fp8_to_f32(v):
    k = v.kernel
    b = k.builder
    _check_fnuz_target(k, v.dtype)
    cvt = k.intrinsic(f"llvm.amdgcn.cvt.f32.{_FP8_KIND[v.dtype.name]}", _F32, [_I32, _I32])
    x = k.ir_of(v)
    if v.lanes % 4 == 0:  # whole dwords: select each byte with the intrinsic's byte_sel
        words = b.bitcast(x, ir.VectorType(_I32, v.lanes // 4)) if v.lanes > 4 else b.bitcast(x, _I32)
        outs = []
        for w in range(v.lanes // 4):
            word = b.extract_element(words, ir.Constant(_I32, w)) if v.lanes > 4 else words
            outs += [b.call(cvt, [word, ir.Constant(_I32, sel)]) for sel in range(4)]
    else:
        outs = [b.call(cvt, [b.zext(e, _I32), ir.Constant(_I32, 0)]) for e in _scalars(v)]
    return k.wrap(_pack(k, outs, _F32) if len(outs) > 1 else outs[0], T.f32, v.lanes)


def _scalars(v):
    """The IR scalars of ``v``, lane by lane."""
    k = v.kernel
    x = k.ir_of(v)
    if v.lanes == 1:
        return [x]
    return [k.builder.extract_element(x, ir.Constant(_I32, i)) for i in range(v.lanes)]


def _pack(k, scalars, elem_ty):
    if len(scalars) == 1:
        return scalars[0]
    out = ir.Constant(ir.VectorType(elem_ty, len(scalars)), ir.Undefined)
    for i, s in enumerate(scalars):
        out = k.builder.insert_element(out, s, ir.Constant(_I32, i))
    return out
