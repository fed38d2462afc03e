"""gfx950 (CDNA4, MI350X / MI355X): what the emulator adds to its gfx942 model for this target.

A launch with ``target="gfx950"`` decodes with the tables here layered over the gfx942 ones;
a gfx942 launch refuses every opcode in ``GFX950_ONLY`` (and a gfx950 launch those in
``GFX942_ONLY``) with a one-line error, so code built for one target never runs silently on
the other. The opcode lists are LLVM's: each name assembles with LLVM for gfx950 and is
refused for gfx942 (tools/gfx950_opcodes.py checks this with Triton's bundled LLVM), see
LLVM's AMDGPUAsmGFX950 instruction-syntax page.

Semantics (AMD "AMD Instinct CDNA4 Instruction Set Architecture" reference guide, and LLVM's
AMDGPUUsage / IntrinsicsAMDGPU.td descriptions of the matching intrinsics):

* fp8 / bf8 are the OCP formats E4M3 / E5M2 on CDNA4 (numerics.ocp_*), for the MFMAs and the
  VALU conversions alike; CDNA3's FNUZ formats do not exist there.
* ``v_mfma_f32_{16x16x32,32x32x16}_{f16,bf16}``: the doubled-K 16-bit atoms; 8 elements per
  lane (4 registers), the same lane-group split of K as the gfx942 atoms.
* ``v_mfma_f32_{16x16x128,32x32x64}_f8f6f4``: CBSZ selects A's format and BLGP B's
  (0 fp8 E4M3, 1 bf8 E5M2, 2 fp6 E2M3, 3 bf6 E3M2, 4 fp4 E2M1), all modelled (fp4: 4
  registers a lane, 32 codes low nibble first, K = 32 * lane group + position: the layout
  Triton's gfx950 tl.dot_scaled fixtures pin; fp6 / bf6: 6 registers a lane, 32 codes packed
  densely, the same K order, the guide's §7.1.4 packing and §7.1.5.1 FP6 tables).
* ``ds_read_b64_tr_b{16,8}``: each 16-lane row reads 64 bits per lane (n = 64/bits elements) and
  transposes them within the row: lane j of the row receives element r (r < n) from lane
  (16/n)*r + j//n, element j % n — a 4x16 (b16) or two interleaved 8x8 (b8) transposes.
* ``v_permlane16_swap_b32 vdst, vsrc``: odd 16-lane rows of vdst swap with even rows of vsrc;
  ``v_permlane32_swap_b32``: lanes 32-63 of vdst swap with lanes 0-31 of vsrc.
* ``global_load_lds_dwordx3/x4`` (and buffer ... lds): LDS DMA of 12/16 bytes per lane to
  M0 + offset + 12/16 * lane (rocke.emu.memops).
* ``v_bitop3_b32/b16``: bit i of D = TTBL[S0[i]*4 + S1[i]*2 + S2[i]] (``bitop3:`` immediate).
* ``v_cvt_pk_f16_f32`` / ``v_cvt_pk_bf16_f32``: D[15:0] = cvt(S0), D[31:16] = cvt(S1), round
  to nearest even.
* ``v_mfma_i32_16x16x64_i8`` / ``32x32x32_i8``: the doubled-K i8 atoms (16 int8 per lane).
* ``v_cvt_scalef32_*`` (the scaled MX conversions): rocke.emu.mxcvt.
"""
from __future__ import annotations

import re

import numpy as np

from . import cdna4, numerics
from .errors import DecodeError, EmulatorError

TARGETS = ("gfx942", "gfx950")
DEFAULT_TARGET = "gfx942"

# Opcodes LLVM accepts for gfx950 and refuses for gfx942 (encoding suffixes stripped).
GFX950_ONLY = frozenset({
    "v_mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x32_bf16",
    "v_mfma_f32_32x32x16_f16", "v_mfma_f32_32x32x16_bf16",
    "v_mfma_f32_16x16x128_f8f6f4", "v_mfma_f32_32x32x64_f8f6f4",
    "v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4",
    "v_mfma_i32_16x16x64_i8", "v_mfma_i32_32x32x32_i8",
    "ds_read_b64_tr_b16", "ds_read_b64_tr_b8", "ds_read_b64_tr_b4", "ds_read_b96_tr_b6",
    "global_load_lds_dwordx3", "global_load_lds_dwordx4",
    "buffer_load_dwordx3 lds", "buffer_load_dwordx4 lds",
    "v_permlane16_swap_b32", "v_permlane32_swap_b32",
    "v_bitop3_b32", "v_bitop3_b16",
    "v_cvt_pk_f16_f32", "v_cvt_pk_bf16_f32",
    "v_cvt_sr_bf16_f32", "v_cvt_sr_f16_f32",
    "v_prng_b32", "v_ashr_pk_i8_i32", "v_ashr_pk_u8_i32",
    "v_minimum3_f32", "v_maximum3_f32",
    "v_dot2_f32_bf16",
}) | cdna4.NEW_MNEMONICS
# gfx942 opcodes gfx950 dropped: the xf32 MFMAs (LLVM's FeatureXF32Insts is gfx940-only).
GFX942_ONLY = frozenset({"v_mfma_f32_16x16x8_xf32", "v_mfma_f32_32x32x4_xf32"})

_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp)$")


def check_target(target: str) -> str:
    base = str(target).split(":", 1)[0]
    if base not in TARGETS:
        raise ValueError(f"unknown emulator target {target!r}; the emulator runs {', '.join(TARGETS)}")
    return base


def gate(mnemonic: str, modifiers, target: str) -> None:
    """Refuse an opcode the target does not have (before any decoding)."""
    base = _SUFFIX.sub("", mnemonic)
    if base.startswith("buffer_load_dwordx") and "lds" in modifiers:
        base = f"{base} lds"
    if target == "gfx942" and base in GFX950_ONLY:
        raise DecodeError(f"{base} is a gfx950 (CDNA4) instruction that gfx942 does not have; "
                          "launch with target='gfx950'")
    if target == "gfx950" and base in GFX942_ONLY:
        raise DecodeError(f"{base} is a gfx942 instruction that gfx950 does not have")


# ------------------------------------------------------------------------------ VALU table

_FP8_OCP = {"fp8": "e4m3fn", "bf8": "e5m2"}


def _ocp_pack(fmt):
    def pack(a, b):
        lo, lo_over = numerics.f32_to_ocp_fp8_bits(a, fmt, saturate=False)
        hi, hi_over = numerics.f32_to_ocp_fp8_bits(b, fmt, saturate=False)
        if lo_over.any() or hi_over.any():
            # the non-saturating overflow code is not pinned by the ISA text: refuse, never guess
            raise EmulatorError(f"f32 -> {fmt} overflow without clamp is not modelled on gfx950")
        return (lo.astype(np.uint16) | (hi.astype(np.uint16) << np.uint16(8))).astype(np.uint16)
    return pack


def _bits_pair_f16(a, b):
    lo = numerics.f32_to_f16_bits(a).astype(np.uint32)
    hi = numerics.f32_to_f16_bits(b).astype(np.uint32)
    return (lo | (hi << np.uint32(16))).astype(np.uint32)


def _bits_pair_bf16(a, b):
    lo = numerics.f32_to_bf16_bits(a).astype(np.uint32)
    hi = numerics.f32_to_bf16_bits(b).astype(np.uint32)
    return (lo | (hi << np.uint32(16))).astype(np.uint32)


# Ops whose gfx942 meaning (FNUZ) is wrong on gfx950: clamp / FP16_OVFL forms of them are
# refused there (see program._decode_one).
FP8_CONVERSIONS = ("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32", "v_cvt_f32_fp8", "v_cvt_f32_bf8",
                   "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")


def check_fp8_op_sel(base, mods, encodes: bool) -> None:
    """VOP3 op_sel on the unscaled fp8 conversions: on f32 -> fp8 packs its last bit picks the
    destination word (LLVM packs four codes so; modelled), a source bit is refused; on fp8 -> f32
    gfx950 reads op_sel as a byte / word select (LLVM's gfx950 syntax) that the 32-bit source
    path would ignore, so any set bit is refused (LLVM emits SDWA ``src0_sel`` there,
    which is modelled)."""
    if base not in FP8_CONVERSIONS:
        return
    op_sel = list(mods.get("op_sel") or [])
    sources = op_sel[:-1] if encodes else op_sel
    if any(sources):
        raise DecodeError(f"{base} with op_sel {op_sel} (a source byte / word select) is not "
                          "emulated on gfx950; the SDWA src0_sel form is")


def build_valu_ops(gfx942_ops: dict, alu_op_type) -> dict:
    """The gfx950 VALU table: gfx942's, fp8 conversions re-pointed at the OCP formats, and the
    gfx950-only ops."""
    ops = dict(gfx942_ops)

    def entry(dsts, srcs, fn, float_mods=True):
        return alu_op_type(tuple(dsts.split()), tuple(srcs.split()), fn, float_mods=float_mods)

    for short, fmt in _FP8_OCP.items():
        ops[f"v_cvt_pk_{short}_f32"] = entry("b16", "f32 f32", _ocp_pack(fmt))
        ops[f"v_cvt_f32_{short}"] = entry("f32", "b32",
                                          lambda x, fmt=fmt: numerics.ocp_fp8_bits_to_f32(x, fmt))
        ops[f"v_cvt_pk_f32_{short}"] = entry(
            "pk_f32", "b32", lambda x, fmt=fmt: np.stack(
                [numerics.ocp_fp8_bits_to_f32(x, fmt), numerics.ocp_fp8_bits_to_f32(x >> 8, fmt)],
                axis=-1))
    ops["v_cvt_pk_f16_f32"] = entry("b32", "f32 f32", _bits_pair_f16)
    ops["v_cvt_pk_bf16_f32"] = entry("b32", "f32 f32", _bits_pair_bf16)
    ops["v_minimum3_f32"] = entry("f32", "f32 f32 f32", _minimum3)
    ops["v_maximum3_f32"] = entry("f32", "f32 f32 f32", _maximum3)
    ops.update(cdna4.valu_ops(alu_op_type))
    return ops


def _minimum3(a, b, c):
    # IEEE 754-2019 minimum: NaN propagates, -0 < +0
    return _ieee_min(_ieee_min(a, b), c)


def _maximum3(a, b, c):
    return _ieee_max(_ieee_max(a, b), c)


def _ieee_min(a, b):
    out = np.minimum(a, b)   # numpy minimum propagates NaN
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) | np.signbit(b), np.float32(-0.0), np.float32(0.0)), out).astype(np.float32)


def _ieee_max(a, b):
    out = np.maximum(a, b)
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), np.float32(-0.0), np.float32(0.0)), out).astype(np.float32)


def bitop3_op(ttbl: int, width: int, alu_op_type):
    """v_bitop3_b{32,16}: every result bit looks its three source bits up in the truth table,
    indexed S0*4 + S1*2 + S2 (LLVM's AMDGPU selector builds the table from 0xf0 / 0xcc / 0xaa
    for S0 / S1 / S2)."""
    if not 0 <= ttbl <= 0xFF:
        raise DecodeError(f"bitop3:{ttbl:#x} is not an 8-bit truth table")
    typ = "b32" if width == 32 else "b16"
    dtype = np.uint32 if width == 32 else np.uint16

    def fn(a, b, c):
        a, b, c = (np.asarray(v).astype(dtype) for v in (a, b, c))
        out = np.zeros(np.broadcast(a, b, c).shape, dtype)
        for index in range(8):
            if ttbl >> index & 1:
                sa = a if index & 4 else ~a
                sb = b if index & 2 else ~b
                sc = c if index & 1 else ~c
                out |= sa & sb & sc
        return out
    return alu_op_type((typ,), (typ, typ, typ), fn, float_mods=False)


# ------------------------------------------------------------------------------ MFMA table

def mfma_ops(gfx942_ops: dict, op_type, indexed_type=None) -> dict:
    """gfx950's dense MFMAs: gfx942's 16-bit atoms, the doubled-K 16-bit atoms, the fp8/bf8
    atoms in the OCP formats, the f8f6f4 atoms (fp8/bf8/fp4 operands), less the xf32 ones."""
    ops = {k: v for k, v in gfx942_ops.items() if k not in GFX942_ONLY}
    for t in ("f16", "bf16"):
        ops[f"v_mfma_f32_16x16x32_{t}"] = op_type(f"v_mfma_f32_16x16x32_{t}", 16, 16, 32, 1, t, t)
        ops[f"v_mfma_f32_32x32x16_{t}"] = op_type(f"v_mfma_f32_32x32x16_{t}", 32, 32, 16, 1, t, t)
    for a_name, a_fmt in _FP8_OCP.items():
        for b_name, b_fmt in _FP8_OCP.items():
            for m, k in ((16, 32), (32, 16)):
                name = f"v_mfma_f32_{m}x{m}x{k}_{a_name}_{b_name}"
                ops[name] = op_type(name, m, m, k, 1, a_fmt, b_fmt)
    if indexed_type is not None:   # doubled-K i8 atoms (16 / 32 int8 per lane pair of regs)
        ops["v_mfma_i32_16x16x64_i8"] = indexed_type("v_mfma_i32_16x16x64_i8", 16, 16, 64, 1, "i8", "i32")
        ops["v_mfma_i32_32x32x32_i8"] = indexed_type("v_mfma_i32_32x32x32_i8", 32, 32, 32, 1, "i8", "i32")
    for m, k in ((16, 128), (32, 64)):
        name = f"v_mfma_f32_{m}x{m}x{k}_f8f6f4"
        ops[name] = F8F6F4({(ca, cb): op_type(name, m, m, k, 1, fa, fb)
                            for ca, fa in _F8F6F4_EMULATED.items()
                            for cb, fb in _F8F6F4_EMULATED.items()}, name)
    return ops


_F8F6F4_FORMATS = ("fp8 E4M3", "bf8 E5M2", "fp6 E2M3", "bf6 E3M2", "fp4 E2M1")
# CBSZ / BLGP code -> operand format (the guide's §7.1.5 table)
_F8F6F4_EMULATED = {0: "e4m3fn", 1: "e5m2", 2: "e2m3", 3: "e3m2", 4: "e2m1"}


class F8F6F4:
    """An f8f6f4 MFMA: CBSZ / BLGP name the A / B element formats instead of broadcasts."""

    def __init__(self, by_formats: dict, name: str):
        self.by_formats, self.name = by_formats, name

    def select(self, cbsz: int, blgp: int):
        op = self.by_formats.get((cbsz, blgp))
        if op is None:
            names = [(_F8F6F4_FORMATS[i] if 0 <= i < len(_F8F6F4_FORMATS) else f"code {i}")
                     for i in (cbsz, blgp)]
            raise DecodeError(f"{self.name} with A {names[0]} / B {names[1]} operands is not "
                              "emulated (codes 0-4: fp8, bf8, fp6, bf6, fp4 are)")
        return op


# ------------------------------------------------------------------------------ DS transposes

_TR_BITS = {"ds_read_b64_tr_b16": 16, "ds_read_b64_tr_b8": 8}


def decode_ds_transpose(ins, ops, mods):
    bits = _TR_BITS.get(ins.mnemonic)
    if bits is None:
        raise DecodeError(f"opcode {ins.mnemonic!r} is not implemented")
    unknown = set(mods) - {"offset"}
    if unknown:
        raise DecodeError(f"unsupported modifier(s) {sorted(unknown)}")
    dst, addr = ops[0], ops[1]
    if dst.kind != "v" or dst.count != 2 or addr.kind != "v":
        raise DecodeError(f"{ins.mnemonic} expects a 64-bit VGPR destination and a VGPR address")
    offset = int(mods.get("offset", 0))
    per_lane = 64 // bits
    lanes_per_row = 16 // per_lane
    j = np.arange(16)
    r = np.arange(per_lane)
    src_lane = lanes_per_row * r[None, :] + j[:, None] // per_lane   # [16 dst lanes, n elems]
    src_elem = np.broadcast_to(j[:, None] % per_lane, src_lane.shape)
    elem_dtype = np.uint16 if bits == 16 else np.uint8

    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        rows = active.reshape(-1, 4, 16)
        if not full and (rows.any(axis=2) != rows.all(axis=2)).any():
            raise EmulatorError(f"{ins.mnemonic} at line {ins.line_no}: a 16-lane row with only "
                                "some lanes active (the transpose's partial-EXEC behaviour is not "
                                "modelled)")
        base = P.vgpr[sel, addr.index].astype(np.int64)
        address = base + offset & 0xFFFFFFFF if offset else base
        data = P.lds_read(ins, sel, address, 8, active)                # (active lanes, 8) bytes
        loaded = np.zeros((active.size, 8), np.uint8)
        loaded[active.reshape(-1)] = data
        elems = loaded.view(elem_dtype).reshape(-1, 4, 16, per_lane)   # (waves, row, lane, elem)
        out = elems[:, :, src_lane, src_elem]                         # (waves, row, 16, n)
        words = np.ascontiguousarray(out).view(np.uint8).reshape(-1, 64, 8).view(np.uint32)
        from .memops import write_loaded
        write_loaded(P, sel, dst.index, active, words.reshape(-1, 2)[active.reshape(-1)])
        return lanes
    return run


# ------------------------------------------------------------------------------ permlane swaps

def decode_permlane_swap(ins, ops, mods):
    base = _SUFFIX.sub("", ins.mnemonic)
    unknown = {k for k, v in mods.items() if v} - {"fi", "bound_ctrl"}
    if unknown:
        raise DecodeError(f"unsupported modifier(s) {sorted(unknown)}")
    if mods.get("fi") or mods.get("bound_ctrl"):
        raise DecodeError(f"{base} with fi/bound_ctrl set is not emulated")
    a, b = ops[0], ops[1]
    if a.kind != "v" or b.kind != "v":
        raise DecodeError(f"{base} takes two VGPRs")
    lane = np.arange(64)
    if base == "v_permlane16_swap_b32":
        upper = (lane // 16) % 2 == 1            # odd rows of vdst ...
        partner = lane - 16                       # ... swap with the even row below (in vsrc)
    else:
        upper = lane >= 32
        partner = lane - 32
    dst_lanes, src_lanes = lane[upper], partner[upper]

    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        if not full:
            pair_on = active[:, dst_lanes] & active[:, src_lanes]
            if (pair_on != (active[:, dst_lanes] | active[:, src_lanes])).any():
                raise EmulatorError(f"{ins.mnemonic} at line {ins.line_no}: a swapped lane pair "
                                    "with one lane inactive (not modelled)")
        va = P.vgpr[sel, a.index].copy()
        vb = P.vgpr[sel, b.index].copy()
        on = active[:, dst_lanes]
        new_a, new_b = va.copy(), vb.copy()
        new_a[:, dst_lanes] = np.where(on, vb[:, src_lanes], va[:, dst_lanes])
        new_b[:, src_lanes] = np.where(on, va[:, dst_lanes], vb[:, src_lanes])
        P.vgpr[sel, a.index] = new_a
        P.vgpr[sel, b.index] = new_b
        return lanes
    return run
