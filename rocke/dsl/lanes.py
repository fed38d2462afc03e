"""Cross-lane operations and wave reductions built from them.

Data-movement ops work on any value whose total width is a multiple of 32 bits (each dword is
moved independently) and on 16-bit scalars (zero-extended). ``ds_swizzle`` and DPP move data
within 32-lane halves / 16-lane rows; ``ds_bpermute`` reaches any lane.
"""

from __future__ import annotations

import llvmlite.ir as ir

from . import types as T
from ..arch.targets import DEFAULT_TARGET
from .errors import dsl_type_error, dsl_value_error
from .values import Value

_I1 = ir.IntType(1)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_WAVE = DEFAULT_TARGET.wave_size


class DppCtrl:
    """``dpp_ctrl`` encodings for ``llvm.amdgcn.update.dpp`` (gfx9)."""

    row_mirror = 0x140
    row_half_mirror = 0x141
    row_bcast15 = 0x142
    row_bcast31 = 0x143
    wave_shl1 = 0x130
    wave_rol1 = 0x134
    wave_shr1 = 0x138
    wave_ror1 = 0x13C

    @staticmethod
    def quad_perm(a: int, b: int, c: int, d: int) -> int:
        """Lane ``i`` of each quad reads quad lane ``(a, b, c, d)[i]``."""
        if any(not 0 <= x <= 3 for x in (a, b, c, d)):
            raise dsl_value_error(f"quad_perm selectors must be in 0..3, got {(a, b, c, d)}")
        return a | (b << 2) | (c << 4) | (d << 6)

    @staticmethod
    def row_shl(n: int) -> int:
        return 0x100 + _row_amount(n)

    @staticmethod
    def row_shr(n: int) -> int:
        return 0x110 + _row_amount(n)

    @staticmethod
    def row_ror(n: int) -> int:
        return 0x120 + _row_amount(n)


def _row_amount(n: int) -> int:
    if not isinstance(n, int) or not 1 <= n <= 15:
        raise dsl_value_error(f"DPP row shift amount must be in 1..15, got {n!r}")
    return n


def swizzle_bitmask(and_mask: int = 0x1F, or_mask: int = 0, xor_mask: int = 0) -> int:
    """ds_swizzle offset (bit-mask mode, within 32 lanes): reads lane ((l & and) | or) ^ xor."""
    for name, m in (("and_mask", and_mask), ("or_mask", or_mask), ("xor_mask", xor_mask)):
        if not isinstance(m, int) or not 0 <= m <= 0x1F:
            raise dsl_value_error(f"swizzle {name} must be in 0..31, got {m!r}")
    return and_mask | (or_mask << 5) | (xor_mask << 10)


def swizzle_quad_perm(a: int, b: int, c: int, d: int) -> int:
    """ds_swizzle offset (quad-permute mode): lane ``i`` of each quad reads ``(a, b, c, d)[i]``."""
    return 0x8000 | DppCtrl.quad_perm(a, b, c, d)


def _map_dwords(value: Value, op):
    """Apply ``op(kernel, i32_ir) -> i32_ir`` to every dword of ``value``."""
    k = value.kernel
    b = k.builder
    bits = value.dtype.bits * value.lanes
    x = k.ir_of(value)
    if bits == 16 and value.lanes == 1:
        narrow = x if value.dtype.kind != "float" else b.bitcast(x, ir.IntType(16))
        out = b.trunc(op(k, b.zext(narrow, _I32)), ir.IntType(16))
        if value.dtype.kind == "float":
            out = b.bitcast(out, x.type)
        return k.wrap(out, value.dtype, 1)
    if bits % 32 or value.dtype.kind in ("ptr", "bool"):
        raise dsl_type_error(f"cross-lane ops move whole dwords; {value.type_name} is {bits} bits")
    words = bits // 32
    as_words = x if x.type == _I32 else b.bitcast(x, _I32 if words == 1 else ir.VectorType(_I32, words))
    if words == 1:
        moved = op(k, as_words)
    else:
        moved = ir.Constant(as_words.type, ir.Undefined)
        for w in range(words):
            word = b.extract_element(as_words, ir.Constant(_I32, w))
            moved = b.insert_element(moved, op(k, word), ir.Constant(_I32, w))
    out = moved if moved.type == x.type else b.bitcast(moved, x.type)
    return k.wrap(out, value.dtype, value.lanes)


def readfirstlane(value: Value) -> Value:
    """The value of the first active lane, as a wave-uniform (SGPR) value."""
    return _map_dwords(value, lambda k, w: k.call("llvm.amdgcn.readfirstlane.i32", _I32, [w]))


def ballot(pred: Value) -> Value:
    """i64 mask with bit ``l`` set where lane ``l`` is active and ``pred`` holds."""
    if not isinstance(pred, Value) or pred.dtype != T.i1 or pred.lanes != 1:
        raise dsl_type_error("ballot needs a scalar i1 predicate")
    k = pred.kernel
    return k.wrap(k.call("llvm.amdgcn.ballot.i64", _I64, [k.ir_of(pred)]), T.i64, 1)


def ds_swizzle(value: Value, offset: int) -> Value:
    """``ds_swizzle_b32`` with a pattern from swizzle_bitmask / swizzle_quad_perm."""
    if not isinstance(offset, int) or not 0 <= offset <= 0xFFFF:
        raise dsl_value_error(f"ds_swizzle offset must be a 16-bit int, got {offset!r}")
    return _map_dwords(value, lambda k, w: k.call("llvm.amdgcn.ds.swizzle", _I32, [w, ir.Constant(_I32, offset)]))


def ds_bpermute(lane_byte_address: Value, value: Value) -> Value:
    """Each lane reads ``value`` from lane ``lane_byte_address / 4`` (``ds_bpermute_b32``)."""
    k = value.kernel
    if not isinstance(lane_byte_address, Value) or lane_byte_address.dtype not in (T.i32, T.u32):
        raise dsl_type_error("ds_bpermute address must be an i32 byte address (4 * source lane)")
    addr = k.ir_of(lane_byte_address)
    return _map_dwords(value, lambda kk, w: kk.call("llvm.amdgcn.ds.bpermute", _I32, [addr, w]))


def dpp(value: Value, control: int, *, row_mask: int = 0xF, bank_mask: int = 0xF,
        bound_ctrl: bool = True, old: Value | None = None) -> Value:
    """``llvm.amdgcn.update.dpp`` (a ``v_mov_b32_dpp``) with a DppCtrl ``control``. Lanes
    without a valid source read 0 when ``bound_ctrl`` (else keep ``old``)."""
    if not isinstance(control, int) or not 0 <= control <= 0x1FF:
        raise dsl_value_error(f"DPP control must be a DppCtrl encoding, got {control!r}")
    old_words = None
    if old is not None:
        if old.dtype != value.dtype or old.lanes != value.lanes:
            raise dsl_type_error(f"dpp old value {old.type_name} does not match {value.type_name}")
        old_words = iter(_dwords_ir(old))

    def op(kk, word):
        previous = next(old_words) if old_words is not None else ir.Constant(_I32, 0)
        return kk.call("llvm.amdgcn.update.dpp.i32", _I32,
                        [previous, word, ir.Constant(_I32, control), ir.Constant(_I32, row_mask),
                         ir.Constant(_I32, bank_mask), ir.Constant(_I1, int(bound_ctrl))])
    return _map_dwords(value, op)


def _dwords_ir(value: Value):
    k = value.kernel
    b = k.builder
    x = k.ir_of(value)
    words = value.dtype.bits * value.lanes // 32
    if words == 1:
        return [x if x.type == _I32 else b.bitcast(x, _I32)]
    vec = b.bitcast(x, ir.VectorType(_I32, words))
    return [b.extract_element(vec, ir.Constant(_I32, w)) for w in range(words)]


def shuffle_xor(value: Value, mask: int) -> Value:
    """Each lane reads ``value`` from lane ``lane ^ mask``: ds_swizzle for masks < 32,
    ds_bpermute otherwise."""
    if not isinstance(mask, int) or not 1 <= mask <= 63:
        raise dsl_value_error(f"shuffle_xor mask must be in 1..63, got {mask!r}")
    if mask < 32:
        return ds_swizzle(value, swizzle_bitmask(0x1F, 0, mask))
    k = value.kernel
    return ds_bpermute((k.lane_id() ^ mask) * 4, value)


# DPP partners for the first four butterfly steps inside a 16-lane row: xor 1 and xor 2 are
# exact quad permutes; row_half_mirror (lane i reads 7 - i) and row_mirror (15 - i) differ from
# xor 4 / xor 8 only in the lower lane bits, so they pair the right halves once those bits have
# been reduced (AMD CDNA3 ISA guide, DPP_CTRL enumeration)
_DPP_BUTTERFLY = {1: DppCtrl.quad_perm(1, 0, 3, 2), 2: DppCtrl.quad_perm(2, 3, 0, 1),
                  4: DppCtrl.row_half_mirror, 8: DppCtrl.row_mirror}


def exchange_pair_halves(even: Value, own: Value, give: Value) -> tuple[Value, Value]:
    """2x2 transpose of 16-bit halves across lanes ``l`` (``even``) and ``l ^ 1``: each lane
    keeps the 32-bit word ``own`` and hands ``give`` to its partner (one DPP quad permute,
    quad_perm 1,0,3,2). With ``lo`` the even lane's word and ``hi`` the odd lane's, returns the
    words ``[lo.low | hi.low]`` and ``[lo.high | hi.high]``: how the narrow P tile and the
    transposed V tile become 32-bit LDS stores instead of 16-bit ones (ALGORITHM.md §8)."""
    from .values import select
    other = dpp(give, DppCtrl.quad_perm(1, 0, 3, 2))
    lo, hi = select(even, own, other), select(even, other, own)
    return (lo & 0xFFFF) | (hi << 16), (lo >> 16) | (hi & 0xFFFF0000)


def butterfly(op: str, value: Value, masks, *, via: str = "swizzle") -> Value:
    """All-reduce ``op`` of ``value`` over the lanes that differ in the bits of ``masks`` (xor
    steps, applied in order). ``via="dpp"`` takes a DPP row op (a VALU move, no LDS pipe issue)
    for a step of 1, 2, 4 or 8 whose lower bits are already reduced, ``shuffle_xor`` otherwise."""
    if via not in ("swizzle", "dpp"):
        raise dsl_value_error(f"butterfly via must be 'swizzle' or 'dpp', got {via!r}")
    acc, reduced = value, 0
    for mask in masks:
        if via == "dpp" and mask in _DPP_BUTTERFLY and reduced & (mask - 1) == mask - 1:
            partner = dpp(acc, _DPP_BUTTERFLY[mask])
        else:
            partner = shuffle_xor(acc, mask)
        acc = _combine(op, acc, partner)
        reduced |= mask
    return acc


def _combine(op: str, a: Value, b: Value) -> Value:
    from .math import maximum, minimum
    if op == "sum":
        return a + b
    if op == "max":
        return maximum(a, b)
    return minimum(a, b)


def wave_reduce(value: Value, op: str = "sum", *, width: int = _WAVE, via: str = "swizzle") -> Value:
    """All-reduce ``op`` ("sum" | "max" | "min") over aligned groups of ``width`` lanes
    (2..64, a power of two); every lane of a group gets the group's result.

    ``via="swizzle"``: xor butterfly with ds_swizzle (and ds_bpermute for the 32-lane step).
    ``via="dpp"``: DPP quad_perm / row_half_mirror / row_mirror for the first 16 lanes (each
    step pairs every lane with one in the other, already-reduced half), then as above.
    """
    if op not in ("sum", "max", "min"):
        raise dsl_value_error(f"wave_reduce op must be 'sum', 'max' or 'min', got {op!r}")
    if not isinstance(width, int) or width < 2 or width > _WAVE or width & (width - 1):
        raise dsl_value_error(f"wave_reduce width must be a power of two in 2..{_WAVE}, got {width!r}")
    if via not in ("swizzle", "dpp"):
        raise dsl_value_error(f"wave_reduce via must be 'swizzle' or 'dpp', got {via!r}")
    dpp_steps = {1: DppCtrl.quad_perm(1, 0, 3, 2), 2: DppCtrl.quad_perm(2, 3, 0, 1),
                 4: DppCtrl.row_half_mirror, 8: DppCtrl.row_mirror}
    acc = value
    step = 1
    while step < width:
        if via == "dpp" and step in dpp_steps:
            partner = dpp(acc, dpp_steps[step])
        else:
            partner = shuffle_xor(acc, step)
        acc = _combine(op, acc, partner)
        step *= 2
    return acc


def wave_sum(value: Value, *, width: int = _WAVE, via: str = "swizzle") -> Value:
    return wave_reduce(value, "sum", width=width, via=via)


def wave_max(value: Value, *, width: int = _WAVE, via: str = "swizzle") -> Value:
    return wave_reduce(value, "max", width=width, via=via)


def wave_min(value: Value, *, width: int = _WAVE, via: str = "swizzle") -> Value:
    return wave_reduce(value, "min", width=width, via=via)

