"""Decode VALU instructions (VOP1/VOP2/VOPC/VOP3/VOP3P, DPP, SDWA) into batched closures,
driving the per-opcode semantics of `rocke.emu.semantics`."""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .access import (LANES, U32, U64, sgpr_pair_to_mask, vector_raw_reader, write_mask)
from .errors import DecodeError
from .operands import EXEC_LO, VCC_LO, Operand, TYPE_BITS

FLOAT_TYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64}
INT_VIEW = {"b32": U32, "u32": U32, "i32": np.int32, "f32": np.float32,
            "b16": np.uint16, "u16": np.uint16, "i16": np.int16, "f16": np.float16, "bf16": np.uint16,
            "b64": U64, "u64": U64, "i64": np.int64, "f64": np.float64}
PACKED_ELEM = {"pk_f16": np.float16, "pk_i16": np.int16, "pk_u16": np.uint16, "pk_b16": np.uint16,
               "pk_bf16": np.uint16}
# gfx9 zeroes the high 16 bits of the destination for these 16-bit-result opcodes and preserves
# them for all others (LLVM GCNSubtarget::zeroesHigh16BitsOfDest, GFX9 column).
ZEROES_HIGH_16 = frozenset(
    f"v_{n}" for n in (
        "cvt_f16_f32 cvt_f16_u16 cvt_f16_i16 rcp_f16 rsq_f16 sqrt_f16 log_f16 exp_f16 sin_f16 "
        "cos_f16 floor_f16 ceil_f16 trunc_f16 rndne_f16 fract_f16 frexp_mant_f16 frexp_exp_i16_f16 "
        "ldexp_f16 lshlrev_b16 lshrrev_b16 ashrrev_i16 add_u16 sub_u16 subrev_u16 mul_lo_u16 "
        "add_f16 sub_f16 subrev_f16 mul_f16 max_f16 min_f16 max_u16 min_u16 max_i16 min_i16 "
        "mad_f16 mad_u16 mad_i16 fma_f16 div_fixup_f16 mad_legacy_f16 mad_legacy_u16 "
        "mad_legacy_i16 fma_legacy_f16").split())
SDWA_SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
            "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


@dataclass(frozen=True)
class _Form:
    """How one VALU instruction spells its operation: what the operand decoders need."""
    base: str                 # mnemonic without encoding suffix
    encoding: str             # "" | e32 | e64 | sdwa | dpp
    mods: dict
    op: object                # the semantics.AluOp in effect (clamp/rounding variants applied)
    packed: bool              # VOP3P packed operands
    op_sel: list | None
    op_sel_hi: list | None
    neg_lo: list | None
    neg_hi: list | None
    clamp: bool
    omod: float
    denorm32: int
    denorm16: int
    flush: dict
    is_cmpx: bool


def dpp_source_lanes(mods: dict) -> tuple[np.ndarray, np.ndarray, str]:
    """(source lane per lane, source-in-range per lane, control text) for a DPP control."""
    lane = LANES
    row_pos = lane % 16
    if "quad_perm" in mods:
        perm = mods["quad_perm"]
        return (lane & ~3) | np.array(perm)[lane & 3], np.ones(64, bool), "quad_perm"
    for key in ("row_shl", "row_shr", "row_ror"):
        if key in mods:
            k = int(mods[key])
            if key == "row_shl":
                return lane + k, row_pos + k < 16, key
            if key == "row_shr":
                return lane - k, row_pos - k >= 0, key
            return lane - row_pos + (row_pos - k) % 16, np.ones(64, bool), key
    if "wave_shl" in mods:
        return lane + 1, lane + 1 < 64, "wave_shl"
    if "wave_shr" in mods:
        return lane - 1, lane - 1 >= 0, "wave_shr"
    if "wave_rol" in mods:
        return (lane + 1) % 64, np.ones(64, bool), "wave_rol"
    if "wave_ror" in mods:
        return (lane - 1) % 64, np.ones(64, bool), "wave_ror"
    if "row_mirror" in mods:
        return lane - row_pos + 15 - row_pos, np.ones(64, bool), "row_mirror"
    if "row_half_mirror" in mods:
        return lane - lane % 8 + 7 - lane % 8, np.ones(64, bool), "row_half_mirror"
    if "row_newbcast" in mods:  # gfx90a+: lane k of each row to the whole row
        return lane - row_pos + int(mods["row_newbcast"]), np.ones(64, bool), "row_newbcast"
    if "row_bcast" in mods:
        k = int(mods["row_bcast"])
        if k == 15:
            return np.maximum(lane - row_pos - 1, 0), lane >= 16, "row_bcast:15"
        if k == 31:
            return np.full(64, 31), lane >= 32, "row_bcast:31"
    raise DecodeError("unsupported DPP control " + ", ".join(f"{k}:{v}" for k, v in mods.items()))


def _split_mnemonic(mnemonic: str) -> tuple[str, str]:
    for suffix in ("_e32", "_e64", "_sdwa", "_dpp"):
        if mnemonic.endswith(suffix):
            return mnemonic[: -len(suffix)], suffix[1:]
    return mnemonic, ""


def _to_typed(raw, typ):
    """Raw register bits -> the numpy representation of `typ` (semantics.py: operand types)."""
    if typ in ("f32", "b32", "u32", "i32"):
        return raw.view(INT_VIEW[typ]) if raw.dtype == U32 else raw.astype(U32).view(INT_VIEW[typ])
    if typ in ("f64", "b64", "u64", "i64"):
        return raw.view(INT_VIEW[typ])
    if TYPE_BITS[typ] == 16:
        return (raw & U32(0xFFFF)).astype(np.uint16).view(INT_VIEW[typ])
    if typ == "u8x4":
        return np.ascontiguousarray(raw, U32).view(np.uint8).reshape(raw.shape + (4,))
    raise DecodeError(f"no conversion for type {typ}")


def _from_typed(value, typ, shape):
    """Typed result -> raw bits (uint32, uint16 for 16-bit types, uint64 for 64-bit types)."""
    value = np.asarray(value)
    if typ in ("f32", "b32", "u32", "i32"):
        out = value.astype(INT_VIEW[typ], copy=False).view(U32)
    elif typ in ("f64", "b64", "u64", "i64"):
        out = value.astype(INT_VIEW[typ], copy=False).view(U64)
    elif TYPE_BITS[typ] == 16:
        out = value.astype(INT_VIEW[typ], copy=False).view(np.uint16)
    elif typ in PACKED_ELEM:
        pair = np.ascontiguousarray(value.astype(PACKED_ELEM[typ], copy=False)).view(np.uint16)
        out = pair.reshape(pair.shape[:-1] + (2,)).view(U32)[..., 0]
    elif typ == "pk_f32":
        pair = np.ascontiguousarray(value.astype(np.float32, copy=False)).view(U32)
        out = pair.view(U64)[..., 0]
    else:
        raise DecodeError(f"no conversion for result type {typ}")
    return out if out.shape == shape else np.broadcast_to(out, shape)


def _float_modifiers(x, typ, neg, absolute):
    if absolute:
        x = np.abs(x)
    if neg:
        x = -x
    return x


def decode_valu(ins, mods: dict, ops: list[Operand], alu_ops: dict, ctx):
    base, encoding = _split_mnemonic(ins.mnemonic)
    if base not in alu_ops:
        raise DecodeError(f"opcode {base!r} is not implemented (no entry in semantics.VALU_OPS)")
    op = alu_ops[base]
    clamp = bool(mods.get("clamp"))
    op, clamp = _numeric_variant(base, op, clamp, ctx)
    nd, ns = len(op.dsts), len(op.srcs)
    dst_ops, src_ops = ops[:nd], ops[nd:]
    is_cmpx = base.startswith("v_cmpx_")
    implicit = tuple(getattr(op, "implicit_srcs", ()))
    if len(dst_ops) != nd or len(src_ops) != ns - len(implicit):
        raise DecodeError(f"{base} expects {nd} destination and {ns - len(implicit)} source "
                          f"operands, got {len(ops)}")
    for name in implicit:  # sources the asm does not print: the tied destination, VCC
        if name == "dst":
            src_ops = src_ops + [dst_ops[0]]
        elif name == "vcc":
            src_ops = src_ops + [Operand("s", VCC_LO, 2, text="vcc")]
        else:
            raise DecodeError(f"unknown implicit source {name!r}")
    mix = base.startswith(("v_fma_mix", "v_mad_mix"))
    packed = any(t.startswith("pk_") for t in op.srcs + op.dsts)
    op_sel = mods.get("op_sel")
    op_sel_hi = mods.get("op_sel_hi")
    neg_lo, neg_hi = mods.get("neg_lo"), mods.get("neg_hi")
    omod = 1.0
    if "mul" in mods:
        omod = float(mods["mul"])
    if "div" in mods:
        omod = 1.0 / float(mods["div"])
    known = {"op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp", "mul", "div", "quad_perm",
             "row_shl", "row_shr", "row_ror", "wave_shl", "wave_shr", "wave_rol", "wave_ror",
             "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast", "row_mask", "bank_mask", "bound_ctrl",
             "dst_sel", "dst_unused", "src0_sel", "src1_sel", "fi"}
    unknown = set(mods) - known
    if unknown:
        raise DecodeError(f"unsupported modifier(s) {sorted(unknown)}")
    if "fi" in mods and mods["fi"]:
        raise DecodeError("DPP fetch-inactive (fi:1) is not supported")
    form = _Form(base, encoding, mods, op, packed, op_sel, op_sel_hi, neg_lo, neg_hi, clamp, omod,
                 ctx.denorm_mode_32, ctx.denorm_mode_16_64, ctx.flush_functions(), is_cmpx)

    # ---- sources
    src_fns = []
    for i, (src, typ) in enumerate(zip(src_ops, op.srcs)):
        if mix and i < 3:
            src_fns.append(_mix_source(i, src, form))
            continue
        src_fns.append(_source(i, src, typ, form))

    # ---- DPP lane plumbing (src0 only)
    dpp = None
    if encoding == "dpp":
        src_lane, in_range, _ = dpp_source_lanes(mods)
        src_lane = np.clip(src_lane, 0, 63)
        row_mask, bank_mask = int(mods.get("row_mask", 0xF)), int(mods.get("bank_mask", 0xF))
        lane_enabled = (((row_mask >> (LANES // 16)) & 1) & ((bank_mask >> ((LANES >> 2) & 3)) & 1)).astype(bool)
        bound_ctrl = "bound_ctrl" in mods
        # under a full EXEC every source lane is on: validity and written lanes are fixed
        full_writes = lane_enabled & (in_range | bound_ctrl)
        dpp = (src_lane, in_range, lane_enabled, bound_ctrl, np.flatnonzero(~in_range),
               full_writes, bool(full_writes.all()), int(np.count_nonzero(full_writes)))
        if src_ops[0].kind != "v":
            raise DecodeError("DPP src0 must be a VGPR")

    # ---- destinations
    dst_fns = []
    for j, (dst, typ) in enumerate(zip(dst_ops, op.dsts)):
        dst_fns.append(_destination(j, dst, typ, form))
    # Pool.run holds np.errstate(all="ignore") around every instruction: the unwrapped op
    fn = getattr(op.fn, "__wrapped__", op.fn)
    if dpp is None and not mix and not packed:
        plain = _plain_run(form, fn, src_ops, op.srcs, dst_ops, op.dsts)
        if plain is not None:
            return plain

    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        if dpp is not None:
            src_lane, in_range, lane_enabled, bound_ctrl, out_of_range, full_writes, \
                writes_all, writes_per_wave = dpp
            if full:
                # valid None: every lane whose source lies in range reads it, the others 0
                extra = {"dpp": (src_lane, None, bound_ctrl), "dpp_zero": out_of_range}
                write_lanes = np.broadcast_to(full_writes, active.shape)
                full, lanes = writes_all, n * writes_per_wave
            else:
                valid = in_range & active[:, src_lane]
                extra = {"dpp": (src_lane, valid, bound_ctrl)}
                write_lanes = active & lane_enabled & (valid | bound_ctrl)
                full = bool(write_lanes.all())
                lanes = int(np.count_nonzero(write_lanes))
        else:
            extra = None
            write_lanes = active
        args = [f(P, sel, n, extra) for f in src_fns]
        result = fn(*args)
        if nd == 1:
            result = (result,)
        for f, value in zip(dst_fns, result):
            f(P, sel, n, value, write_lanes, full)
        return lanes
    return run


_PLAIN_TYPES = ("b32", "u32", "i32", "f32")


def _plain_run(form, fn, src_ops, src_types, dst_ops, dst_types):
    """The instruction's closure without the general one's per-operand branches, when it has
    none of them: 32-bit register or constant sources without modifiers or denormal flushing,
    one 32-bit VGPR (no clamp, omod or flushing) or lane-mask destination, no DPP/SDWA/VOPX
    (the general closure gives the same bits; this one spends fewer Python steps per issue,
    which is most of a small batch's cost). None when it does not apply."""
    if form.encoding not in ("", "e32", "e64") or form.is_cmpx or len(dst_ops) != 1:
        return None
    readers = []
    for src, typ in zip(src_ops, src_types):
        if typ not in _PLAIN_TYPES or src.kind not in ("v", "s", "const", "float") or \
                src.neg or src.abs or src.sext or (typ == "f32" and form.denorm32 in (0, 2)):
            return None
        raw = vector_raw_reader(src, typ if src.kind in ("const", "float") else "b32")
        readers.append((raw, INT_VIEW[typ]))
    dst, typ = dst_ops[0], dst_types[0]
    if typ == "mask":
        if dst.kind != "s" or dst.count != 2:
            return None
        index = dst.index

        def run_to_mask(P, sel, n):
            active, full, lanes = P.exec_state(sel)
            value = fn(*[raw(P, sel, n).view(view) for raw, view in readers])
            write_mask(P, sel, index, np.broadcast_to(value, (n, 64)) & active)
            return lanes
        return run_to_mask
    if typ not in _PLAIN_TYPES or dst.kind != "v" or form.clamp or form.omod != 1.0 or \
            (typ == "f32" and form.denorm32 in (0, 1)):
        return None
    row, view_out = dst.index, INT_VIEW[typ]

    def run_to_vgpr(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        value = fn(*[raw(P, sel, n).view(view) for raw, view in readers])
        bits = np.asarray(value).astype(view_out, copy=False).view(U32)
        if full:
            P.vgpr[sel, row] = bits
        else:
            write_rows(P, sel, row, 1, np.broadcast_to(bits, (n, 64))[:, None], active, full)
        return lanes
    return run_to_vgpr


def _dpp_source(x, extra, dtype):
    """DPP src0: each lane's source lane value, 0 where the source is invalid (a fresh
    C-ordered array; under a full EXEC the invalid lanes are the decode's, zeroed in place:
    np.where with a scalar costs several gathers)."""
    src_lane, valid, bound_ctrl = extra["dpp"]
    # np.take, not x[:, src_lane]: numpy's fancy gather along the lanes returns a Fortran-ordered
    # array, slow to make and to use (twice the time of the gather for the next copy)
    gathered = np.take(x, src_lane, axis=1)
    if valid is not None:
        return np.where(valid, gathered, dtype(0)).astype(dtype, copy=False)
    if len(extra["dpp_zero"]):
        gathered[:, extra["dpp_zero"]] = 0
    return gathered


def _numeric_variant(base, op, clamp, ctx):
    """The table entry that carries the instruction's numerics: the saturating form when `clamp`
    is an integer/fp8 saturation (then the clamp is consumed); else the directed-rounding form
    when MODE.FP_ROUND is not round-to-nearest-even for the result type, and the saturating-
    overflow form when MODE.FP16_OVFL is set."""
    from . import semantics
    if clamp and base in semantics.VALU_CLAMP_OPS:
        return semantics.VALU_CLAMP_OPS[base], False
    if clamp and base in semantics.VALU_INT_CLAMP_OPS:
        return semantics.VALU_INT_CLAMP_OPS[base], False
    result = op.dsts[0] if op.dsts else ""
    if result in ("f32", "pk_f32"):
        mode = ctx.round_mode_32
    elif result in ("f16", "f64", "pk_f16"):
        mode = ctx.round_mode_16_64
    else:
        mode = 0
    if mode:
        directed = semantics.rounded_op(base, mode)
        if directed is None and not semantics.rounding_is_exact(base):
            raise DecodeError(f"{base} under MODE.FP_ROUND={mode} (not round-to-nearest-even) "
                              "is not emulated")
        op = directed or op
    if ctx.fp16_overflow:
        op = semantics.fp16_overflow_op(base, op)
    return op, clamp


def _mix_source(i, src, form):
    """fma_mix operand: an f16 half (op_sel_hi set; op_sel picks the half) or an f32, as f32."""
    op_sel, op_sel_hi = form.op_sel, form.op_sel_hi
    raw = vector_raw_reader(src, "f32") if src.kind != "float" else None
    is_f16 = bool(op_sel_hi and i < len(op_sel_hi) and op_sel_hi[i])
    if src.kind == "float":
        raw = vector_raw_reader(src, "f16" if is_f16 else "f32")
    high = bool(op_sel and i < len(op_sel) and op_sel[i])

    def read(P, sel, n, extra):
        x = raw(P, sel, n)
        if is_f16:
            x = ((x >> U32(16)) if high else x) & U32(0xFFFF)
            v = x.astype(np.uint16).view(np.float16).astype(np.float32)
        else:
            v = x.view(np.float32) if x.dtype == U32 else x.astype(U32).view(np.float32)
        return _float_modifiers(v, "f32", src.neg, src.abs)
    return read


def _source(i, src, typ, form):
    op, encoding, mods, packed = form.op, form.encoding, form.mods, form.packed
    op_sel, op_sel_hi, neg_lo, neg_hi = form.op_sel, form.op_sel_hi, form.neg_lo, form.neg_hi
    denorm32, denorm16, flush = form.denorm32, form.denorm16, form.flush
    if typ == "mask":
        if src.kind != "s" or src.count != 2:
            raise DecodeError(f"mask operand {src.text!r} must be an SGPR pair or vcc")
        index = src.index
        return lambda P, sel, n, extra: sgpr_pair_to_mask(P, sel, index)
    if src.kind not in ("v", "s", "const", "float"):
        raise DecodeError(f"unsupported source operand {src.text!r}")
    if typ in ("pk_f32", "pk_b32"):
        raw64 = vector_raw_reader(src, typ)
        sel_lo = (op_sel or [0] * 3)[i] if op_sel else 0
        sel_hi = (op_sel_hi or [1] * 3)[i] if op_sel_hi else 1
        nl = bool(neg_lo and neg_lo[i])
        nh = bool(neg_hi and neg_hi[i])

        def read_pk32(P, sel, n, extra):
            if src.kind == "v":   # the register pair itself: no 64-bit detour
                pair = P.vgpr[sel, src.index:src.index + 2]
                out = np.stack([pair[:, sel_lo], pair[:, sel_hi]], -1)
            else:
                halves = np.ascontiguousarray(raw64(P, sel, n)).view(U32).reshape(n, 64, 2)
                out = np.stack([halves[..., sel_lo], halves[..., sel_hi]], -1)
            if typ == "pk_f32":
                out = out.view(np.float32)   # a fresh array: safe to negate in place
                if nl:
                    out[..., 0] = -out[..., 0]
                if nh:
                    out[..., 1] = -out[..., 1]
            return out
        return read_pk32
    if TYPE_BITS[typ] == 64:
        raw64 = vector_raw_reader(src, typ)
        if encoding == "sdwa":
            raise DecodeError("64-bit operands with SDWA are not supported")
        ftype = FLOAT_TYPES.get(typ)

        def read64(P, sel, n, extra):
            x = raw64(P, sel, n)
            if extra is not None and i == 0:
                x = _dpp_source(x, extra, U64)
            x = x.view(INT_VIEW[typ])
            if ftype is not None and op.float_mods:
                x = _float_modifiers(x, typ, src.neg, src.abs)
            return x
        return read64
    raw = vector_raw_reader(src, "b32" if TYPE_BITS[typ] != 16 else "b16")
    if src.kind in ("const", "float"):
        raw = vector_raw_reader(src, typ)
    sdwa_shift = sdwa_width = None
    if encoding == "sdwa":
        key = f"src{i}_sel"
        if key in mods:
            sdwa_shift, sdwa_width = SDWA_SEL[mods[key]]
    if packed and typ in PACKED_ELEM:
        elem = PACKED_ELEM[typ]
        sel_lo = op_sel[i] if op_sel and i < len(op_sel) else 0
        sel_hi = op_sel_hi[i] if op_sel_hi and i < len(op_sel_hi) else 1
        nl = bool(neg_lo and i < len(neg_lo) and neg_lo[i])
        nh = bool(neg_hi and i < len(neg_hi) and neg_hi[i])
        is_float = typ in ("pk_f16",)
        flush16 = is_float and denorm16 in (0, 2)

        def read_packed(P, sel, n, extra):
            words = np.ascontiguousarray(raw(P, sel, n), dtype=U32)
            halves = words.view(np.uint16).reshape(n, 64, 2)
            out = np.stack([halves[..., sel_lo], halves[..., sel_hi]], -1).view(elem)
            if is_float and (nl or nh):
                out = out.copy()
                if nl:
                    out[..., 0] = -out[..., 0]
                if nh:
                    out[..., 1] = -out[..., 1]
            if flush16:
                out = flush["f16"](out)
            return out
        return read_packed
    half_select = 0
    if TYPE_BITS[typ] == 16 and op_sel and i < len(op_sel) - 1:
        half_select = op_sel[i]
    is_float = typ in FLOAT_TYPES and op.float_mods
    if packed and neg_lo and i < len(neg_lo) and neg_lo[i]:
        src = Operand(src.kind, src.index, src.count, src.value, src.text, True, src.abs, src.sext)
    flush_in = (typ == "f32" and denorm32 in (0, 2)) or (typ == "f16" and denorm16 in (0, 2))
    bit_mods = (src.neg or src.abs) and not is_float and TYPE_BITS[typ] == 32
    sext = src.sext

    def read(P, sel, n, extra):
        x = raw(P, sel, n)
        if extra is not None and i == 0:
            x = _dpp_source(x, extra, U32)
        if sdwa_shift is not None:
            x = (x >> U32(sdwa_shift)) & U32((1 << sdwa_width) - 1) if sdwa_width < 32 else x
            if sext and sdwa_width < 32:
                sign = U32(1 << (sdwa_width - 1))
                x = ((x ^ sign) - sign).astype(U32)
        if half_select:
            x = x >> U32(16)
        if bit_mods:
            x = x.astype(U32)
            if src.abs:
                x = x & U32(0x7FFFFFFF)
            if src.neg:
                x = x ^ U32(0x80000000)
        v = _to_typed(x, typ)
        if is_float:
            if src.abs or src.neg:
                v = _float_modifiers(v, typ, src.neg, src.abs)
            if flush_in:
                v = flush[typ](v)
        return v
    return read


def _destination(j, dst, typ, form):
    base, encoding, mods, op_sel, packed = form.base, form.encoding, form.mods, form.op_sel, form.packed
    clamp, omod, float_mods = form.clamp, form.omod, form.op.float_mods
    denorm32, denorm16, flush, is_cmpx = form.denorm32, form.denorm16, form.flush, form.is_cmpx
    if typ == "mask":
        if dst.kind != "s" or dst.count != 2:
            raise DecodeError(f"mask destination {dst.text!r} must be an SGPR pair or vcc")
        index = dst.index

        def write_mask_dst(P, sel, n, value, lanes, full):
            bits = np.broadcast_to(value, (n, 64)) & lanes
            if is_cmpx:
                write_mask(P, sel, EXEC_LO, bits)
            write_mask(P, sel, index, bits)
        return write_mask_dst
    if dst.kind != "v":
        raise DecodeError(f"VALU destination {dst.text!r} must be a VGPR/AGPR")
    row = dst.index
    is_float = typ in FLOAT_TYPES and float_mods
    packed_float = {"pk_f16": np.float16, "pk_f32": np.float32}.get(typ) if float_mods else None
    post = None
    if (is_float or packed_float) and (clamp or omod != 1.0):
        post = _output_modifier(FLOAT_TYPES[typ] if is_float else packed_float, omod, clamp)
    elif clamp:
        raise DecodeError(f"clamp on result type {typ} of {base} is not supported")
    flush_out = (typ == "f32" and denorm32 in (0, 1)) or (typ == "f16" and denorm16 in (0, 1))
    bits = TYPE_BITS[typ]
    if bits == 64:
        def write64(P, sel, n, value, lanes, full):
            if post:
                value = post(value)
            if typ == "pk_f32":   # (n, 64, 2) float32 halves -> the register pair directly
                halves = np.broadcast_to(np.asarray(value).astype(np.float32, copy=False),
                                         (n, 64, 2)).view(U32)
                write_rows(P, sel, row, 2, halves.transpose(0, 2, 1), lanes, full)
                return
            raw = _from_typed(value, typ, (n, 64))
            if sys.byteorder == "little":   # the words of each lane's value, low first
                pair = np.ascontiguousarray(raw).view(U32).reshape(n, 64, 2).transpose(0, 2, 1)
            else:
                pair = np.stack([(raw & U64(0xFFFFFFFF)).astype(U32),
                                 (raw >> U64(32)).astype(U32)], 1)
            write_rows(P, sel, row, 2, pair, lanes, full)
        return write64
    if packed and typ in PACKED_ELEM:
        def write_packed(P, sel, n, value, lanes, full):
            if post:
                value = post(value)
            write_rows(P, sel, row, 1, _from_typed(value, typ, (n, 64))[:, None], lanes, full)
        return write_packed
    dst_hi = bits == 16 and not base.startswith(("v_fma_mix", "v_mad_mix")) and op_sel is not None and len(op_sel) >= 1 and op_sel[-1] == 1 and encoding != "sdwa"
    zero_high = base in ZEROES_HIGH_16
    sdwa_dst = None
    if encoding == "sdwa":
        shift, width = SDWA_SEL[mods.get("dst_sel", "DWORD")]
        sdwa_dst = (shift, width, mods.get("dst_unused", "UNUSED_PAD"))

    def write(P, sel, n, value, lanes, full):
        if post:
            value = post(value)
        if flush_out:
            value = flush[typ](value)
        raw = _from_typed(value, typ, (n, 64))
        if bits == 16:
            raw = raw.astype(U32)
            if dst_hi:
                raw = (P.vgpr[sel, row] & U32(0xFFFF)) | (raw << U32(16))
            elif not zero_high and sdwa_dst is None:
                raw = (P.vgpr[sel, row] & U32(0xFFFF0000)) | raw
        if sdwa_dst is not None:
            shift, width, unused = sdwa_dst
            if width < 32:
                field_mask = U32(((1 << width) - 1) << shift)
                placed = (raw.astype(U32) << U32(shift)) & field_mask
                if unused == "UNUSED_PRESERVE":
                    raw = (P.vgpr[sel, row] & ~field_mask) | placed
                elif unused == "UNUSED_SEXT":
                    sign = (placed >> U32(shift + width - 1)) & U32(1)
                    high = U32((0xFFFFFFFF << (shift + width)) & 0xFFFFFFFF)
                    raw = placed | np.where(sign == 1, high, U32(0))
                else:
                    raw = placed
        write_rows(P, sel, row, 1, np.asarray(raw, U32)[:, None], lanes, full)
    return write


def _output_modifier(ftype, omod, clamp):
    """The VOP3 output modifier (omod scale, then clamp to [0, 1] with NaN -> 0) as a function."""
    def post(v):
        if omod != 1.0:
            v = (v * ftype(omod)).astype(ftype)
        if clamp:
            v = np.where(np.isnan(v), ftype(0), np.clip(v, ftype(0), ftype(1))).astype(ftype)
        return v
    return post


def write_rows(P, sel, row, count, values, lanes, full):
    """Write (n, count, 64) `values` into rows row..row+count-1 of the lanes set in `lanes`."""
    if full:
        if count == 2 and not isinstance(sel, slice) and values.strides[-1] != values.itemsize:
            # a lane-interleaved register pair (64-bit / packed results): scattered one register
            # at a time, which beats numpy's scatter of a transposed block about twice over
            P.vgpr[sel, row] = values[:, 0]
            P.vgpr[sel, row + 1] = values[:, 1]
            return
        P.vgpr[sel, row:row + count] = values
    elif isinstance(sel, slice):
        np.copyto(P.vgpr[sel, row:row + count], values, where=lanes[:, None, :])
    else:
        old = P.vgpr[sel, row:row + count]
        P.vgpr[sel, row:row + count] = np.where(lanes[:, None, :], values, old)
