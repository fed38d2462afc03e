"""gfx950's new instructions, from AMD's CDNA4 ISA reference guide, and what the emulator does
with each: executes it, or refuses it by name with the reason.

``NEW_OPCODES`` is every instruction the "AMD Instinct CDNA4 Instruction Set Architecture"
reference guide lists (chapter 12, one section per microcode format, "NAME OPCODE" per
instruction; §7.2.1 for the 4-dword block-scaled MFMAs) whose mnemonic gfx942 lacks (LLVM's
gfx942 opcode list, tests/fixtures/gfx942_opcodes.txt, with LLVM's names for the guide's
V_ACCVGPR_READ/WRITE and V_MAD_MIX*). Facts only: format, opcode number, mnemonic. AMD's
machine-readable CDNA4 XML was not reachable here; the guide's own tables are the source.
``tests/emu/test_cdna4_census.py`` fails if one of them neither decodes for gfx950 nor is in
``REFUSED``, and if a ``REFUSED`` one decodes.

Semantics of the handlers below follow the guide's pseudocode for each opcode:

* ``v_cvt_f32_bf16``: ``D.f32 = {S0.b16, 16'0}`` (exact; SDWA word select as for any VOP1).
* ``v_dot2_f32_bf16`` / ``v_dot2c_f32_bf16``: ``S2`` (or D) plus the two bf16 products; the
  products are exact in f32 and the sum is rounded once, as the gfx942 model reads the same
  pseudocode of ``v_dot2_f32_f16`` (rocke.emu.semantics).
* ``v_pk_minimum3_f16`` / ``v_pk_maximum3_f16``: per half, IEEE 754-2019 minimum / maximum
  of three (NaN propagates, -0 < +0).
* ``v_ashr_pk_i8_i32`` / ``v_ashr_pk_u8_i32``: ``SAT8(S0.i32 >> S2[4:0])`` in bits 7:0 and
  ``SAT8(S1.i32 >> S2[4:0])`` in 15:8, saturated to [-128, 127] / [0, 255]; D[31:16] kept.
* ``v_prng_b32``: ``D = (S0 << 1) ^ (S0[31] ? 197 : 0)``.
* ``v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4 D, A, B, C, SA, SB`` (§7.2.1): the f8f6f4 MFMA
  with every 32 consecutive K values of a row of A (column of B) multiplied by 2^(s - 127),
  s an E8M0 byte (0xFF: NaN) of SA (SB); lane l holds the scale of row (column) l % M and K
  block l // M; {op_sel_hi[i], op_sel[i]} picks the byte of SA (i = 0) / SB (i = 1). fp8 / bf8
  and fp4 (E2M1) operands, like the unscaled op.
* ``v_cvt_scalef32_*`` (all but the stochastic-rounding ``_sr_`` forms): rocke.emu.mxcvt.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .errors import DecodeError

# (microcode format, opcode, mnemonic): the guide's chapter 12 section names (VOP3A for
# "VOP3A & VOP3B", DS for "LDS", GLOBAL for "FLAT, Scratch and Global"); VOP3PX2 is §7.2.1's
# two-VOP3P form whose first dword is v_mfma_ld_scale_b32 (bits 31:16 = 0xD3AC: VOP3P, op 44).
NEW_OPCODES = (
    ("VOP1", 88, "v_prng_b32"),
    ("VOP1", 89, "v_permlane16_swap_b32"),
    ("VOP1", 90, "v_permlane32_swap_b32"),
    ("VOP1", 91, "v_cvt_f32_bf16"),
    ("VOP2", 22, "v_dot2c_f32_bf16"),
    ("VOP3A", 563, "v_bitop3_b16"),
    ("VOP3A", 564, "v_bitop3_b32"),
    ("VOP3A", 565, "v_cvt_scalef32_pk_fp8_f32"),
    ("VOP3A", 566, "v_cvt_scalef32_pk_bf8_f32"),
    ("VOP3A", 567, "v_cvt_scalef32_sr_fp8_f32"),
    ("VOP3A", 568, "v_cvt_scalef32_sr_bf8_f32"),
    ("VOP3A", 569, "v_cvt_scalef32_pk_f32_fp8"),
    ("VOP3A", 570, "v_cvt_scalef32_pk_f32_bf8"),
    ("VOP3A", 571, "v_cvt_scalef32_f32_fp8"),
    ("VOP3A", 572, "v_cvt_scalef32_f32_bf8"),
    ("VOP3A", 573, "v_cvt_scalef32_pk_fp4_f32"),
    ("VOP3A", 574, "v_cvt_scalef32_sr_pk_fp4_f32"),
    ("VOP3A", 575, "v_cvt_scalef32_pk_f32_fp4"),
    ("VOP3A", 576, "v_cvt_scalef32_pk_fp8_f16"),
    ("VOP3A", 577, "v_cvt_scalef32_pk_bf8_f16"),
    ("VOP3A", 578, "v_cvt_scalef32_sr_fp8_f16"),
    ("VOP3A", 579, "v_cvt_scalef32_sr_bf8_f16"),
    ("VOP3A", 580, "v_cvt_scalef32_pk_fp8_bf16"),
    ("VOP3A", 581, "v_cvt_scalef32_pk_bf8_bf16"),
    ("VOP3A", 582, "v_cvt_scalef32_sr_fp8_bf16"),
    ("VOP3A", 583, "v_cvt_scalef32_sr_bf8_bf16"),
    ("VOP3A", 584, "v_cvt_scalef32_pk_f16_fp8"),
    ("VOP3A", 585, "v_cvt_scalef32_pk_f16_bf8"),
    ("VOP3A", 586, "v_cvt_scalef32_f16_fp8"),
    ("VOP3A", 587, "v_cvt_scalef32_f16_bf8"),
    ("VOP3A", 588, "v_cvt_scalef32_pk_fp4_f16"),
    ("VOP3A", 589, "v_cvt_scalef32_pk_fp4_bf16"),
    ("VOP3A", 590, "v_cvt_scalef32_sr_pk_fp4_f16"),
    ("VOP3A", 591, "v_cvt_scalef32_sr_pk_fp4_bf16"),
    ("VOP3A", 592, "v_cvt_scalef32_pk_f16_fp4"),
    ("VOP3A", 593, "v_cvt_scalef32_pk_bf16_fp4"),
    ("VOP3A", 594, "v_cvt_scalef32_2xpk16_fp6_f32"),
    ("VOP3A", 595, "v_cvt_scalef32_2xpk16_bf6_f32"),
    ("VOP3A", 596, "v_cvt_scalef32_sr_pk32_fp6_f32"),
    ("VOP3A", 597, "v_cvt_scalef32_sr_pk32_bf6_f32"),
    ("VOP3A", 598, "v_cvt_scalef32_pk32_f32_fp6"),
    ("VOP3A", 599, "v_cvt_scalef32_pk32_f32_bf6"),
    ("VOP3A", 600, "v_cvt_scalef32_pk32_fp6_f16"),
    ("VOP3A", 601, "v_cvt_scalef32_pk32_fp6_bf16"),
    ("VOP3A", 602, "v_cvt_scalef32_pk32_bf6_f16"),
    ("VOP3A", 603, "v_cvt_scalef32_pk32_bf6_bf16"),
    ("VOP3A", 604, "v_cvt_scalef32_sr_pk32_fp6_f16"),
    ("VOP3A", 605, "v_cvt_scalef32_sr_pk32_fp6_bf16"),
    ("VOP3A", 606, "v_cvt_scalef32_sr_pk32_bf6_f16"),
    ("VOP3A", 607, "v_cvt_scalef32_sr_pk32_bf6_bf16"),
    ("VOP3A", 608, "v_cvt_scalef32_pk32_f16_fp6"),
    ("VOP3A", 609, "v_cvt_scalef32_pk32_bf16_fp6"),
    ("VOP3A", 610, "v_cvt_scalef32_pk32_f16_bf6"),
    ("VOP3A", 611, "v_cvt_scalef32_pk32_bf16_bf6"),
    ("VOP3A", 613, "v_ashr_pk_i8_i32"),
    ("VOP3A", 614, "v_ashr_pk_u8_i32"),
    ("VOP3A", 615, "v_cvt_pk_f16_f32"),
    ("VOP3A", 616, "v_cvt_pk_bf16_f32"),
    ("VOP3A", 617, "v_cvt_scalef32_pk_bf16_fp8"),
    ("VOP3A", 618, "v_cvt_scalef32_pk_bf16_bf8"),
    ("VOP3A", 678, "v_cvt_sr_f16_f32"),
    ("VOP3A", 679, "v_cvt_sr_bf16_f32"),
    ("VOP3A", 680, "v_minimum3_f32"),
    ("VOP3A", 681, "v_maximum3_f32"),
    ("VOP3P", 26, "v_dot2_f32_bf16"),
    ("VOP3P", 27, "v_pk_minimum3_f16"),
    ("VOP3P", 28, "v_pk_maximum3_f16"),
    ("VOP3P", 44, "v_mfma_ld_scale_b32"),
    ("VOP3P", 45, "v_mfma_f32_16x16x128_f8f6f4"),
    ("VOP3P", 46, "v_mfma_f32_32x32x64_f8f6f4"),
    ("VOP3P", 53, "v_mfma_f32_16x16x32_bf16"),
    ("VOP3P", 54, "v_mfma_i32_16x16x64_i8"),
    ("VOP3P", 55, "v_mfma_f32_32x32x16_bf16"),
    ("VOP3P", 56, "v_mfma_i32_32x32x32_i8"),
    ("VOP3P", 57, "v_smfmac_f32_16x16x64_bf16"),
    ("VOP3P", 58, "v_smfmac_i32_16x16x128_i8"),
    ("VOP3P", 59, "v_smfmac_f32_16x16x128_bf8_bf8"),
    ("VOP3P", 60, "v_smfmac_f32_16x16x128_bf8_fp8"),
    ("VOP3P", 61, "v_smfmac_f32_16x16x128_fp8_bf8"),
    ("VOP3P", 67, "v_smfmac_f32_16x16x128_fp8_fp8"),
    ("VOP3P", 70, "v_smfmac_f32_32x32x32_bf16"),
    ("VOP3P", 71, "v_smfmac_i32_32x32x64_i8"),
    ("VOP3P", 75, "v_smfmac_f32_32x32x64_bf8_bf8"),
    ("VOP3P", 78, "v_smfmac_f32_32x32x64_bf8_fp8"),
    ("VOP3P", 79, "v_smfmac_f32_32x32x64_fp8_bf8"),
    ("VOP3P", 83, "v_smfmac_f32_32x32x64_fp8_fp8"),
    ("VOP3P", 84, "v_mfma_f32_16x16x32_f16"),
    ("VOP3P", 85, "v_mfma_f32_32x32x16_f16"),
    ("VOP3P", 90, "v_smfmac_f32_16x16x64_f16"),
    ("VOP3P", 91, "v_smfmac_f32_32x32x32_f16"),
    ("VOP3PX2", 45, "v_mfma_scale_f32_16x16x128_f8f6f4"),
    ("VOP3PX2", 46, "v_mfma_scale_f32_32x32x64_f8f6f4"),
    ("DS", 224, "ds_read_b64_tr_b4"),
    ("DS", 225, "ds_read_b96_tr_b6"),
    ("DS", 226, "ds_read_b64_tr_b8"),
    ("DS", 227, "ds_read_b64_tr_b16"),
    ("MUBUF", 82, "buffer_atomic_pk_add_bf16"),
    ("GLOBAL", 125, "global_load_lds_dwordx4"),
    ("GLOBAL", 126, "global_load_lds_dwordx3"),
)

NEW_MNEMONICS = frozenset(name for _, _, name in NEW_OPCODES)

# The guide (§7.5) gives B's layout and the index bits, but not which dense K a compressed A
# element of a lane group holds (its "packed as A[16][32]" would put lane group g on K 16g..16g+15,
# while B's group g holds 8g..8g+7 and 32+8g..32+8g+7), and nothing here can referee it.
_SPARSE = ("sparse MFMA (smfmac) is not emulated on either target: the guide does not pin the "
           "sparse A's K layout")
_LOAD_SCALE = ("v_mfma_ld_scale_b32 alone: it exists as the first half of the block-scaled "
               "MFMAs, which are emulated as one instruction")
# the guide's pseudocode calls helpers (f32_to_fp8_sr_scale, f32_to_f16_SR, ...) that it never
# defines; only gfx942's unscaled v_cvt_sr_fp8_f32 spells out which seed bits enter the mantissa
_STOCHASTIC = "stochastic rounding: the guide never defines its *_sr helpers (how the seed enters)"
# (nothing here emits them either: Triton 3.9 moves packed fp4 through ds_read_b64_tr_b8)
_TRANSPOSE_4_6 = ("the guide gives no lane map for the 4- and 6-bit LDS transposes (the 8- and "
                  "16-bit ones are emulated)")


def _refusals() -> dict[str, str]:
    out = {}
    for name in NEW_MNEMONICS:
        if name in ("ds_read_b64_tr_b4", "ds_read_b96_tr_b6"):
            out[name] = _TRANSPOSE_4_6
        elif name.startswith("v_smfmac_"):
            out[name] = _SPARSE
        elif name == "v_mfma_ld_scale_b32":
            out[name] = _LOAD_SCALE
        elif name.startswith("v_cvt_sr_") or name.startswith("v_cvt_scalef32_sr_"):
            out[name] = _STOCHASTIC
    return out


# gfx950-new opcodes the emulator refuses, each with why (a decode names it and the reason)
REFUSED: dict[str, str] = _refusals()


def refusal(mnemonic: str) -> DecodeError | None:
    """The named refusal of `mnemonic` (encoding suffix ignored), or None."""
    base = mnemonic
    for suffix in ("_e32", "_e64", "_sdwa", "_dpp"):
        base = base.removesuffix(suffix)
    reason = REFUSED.get(base)
    return None if reason is None else DecodeError(f"{base} is not emulated on gfx950: {reason}")


# ------------------------------------------------------------------------------ VALU handlers

_U32 = np.uint32


def _bf16_to_f32(bits):
    return (np.asarray(bits).astype(_U32) << _U32(16)).view(np.float32)


def _dot2_bf16(a, b, c):
    """Two bf16 products (exact in f32) plus c, summed exactly and rounded once to f32."""
    a, b = np.asarray(a).astype(_U32), np.asarray(b).astype(_U32)
    lo = _bf16_to_f32(a & _U32(0xFFFF)).astype(np.float64) * _bf16_to_f32(b & _U32(0xFFFF))
    hi = _bf16_to_f32(a >> _U32(16)).astype(np.float64) * _bf16_to_f32(b >> _U32(16))
    return (lo + hi + np.asarray(c, np.float64)).astype(np.float32)


def _ieee(pick_lower: bool):
    """IEEE 754-2019 minimum (or maximum) of two arrays of one float dtype: NaN propagates,
    -0 < +0."""
    def two(a, b):
        out = np.minimum(a, b) if pick_lower else np.maximum(a, b)   # numpy propagates NaN
        zeros = (a == 0) & (b == 0)
        signs = (np.signbit(a) | np.signbit(b)) if pick_lower else (np.signbit(a) & np.signbit(b))
        signed_zero = np.where(signs, -np.zeros_like(a), np.zeros_like(a))
        return np.where(zeros, signed_zero, out).astype(a.dtype)
    return lambda a, b, c: two(two(a, b), c)


def _ashr_pack(low: int, high: int):
    def pack(a, b, shift):
        s = (np.asarray(shift).astype(_U32) & _U32(31)).astype(np.int64)
        out = []
        for x in (a, b):
            v = np.clip(np.asarray(x).astype(np.int64) >> s, low, high)
            out.append((v & 0xFF).astype(np.uint16))
        return (out[0] | (out[1] << np.uint16(8))).astype(np.uint16)
    return pack


def _prng(x):
    x = np.asarray(x).astype(_U32)
    return ((x << _U32(1)) ^ np.where(x >> _U32(31) != 0, _U32(197), _U32(0))).astype(_U32)


def valu_ops(alu_op_type) -> dict:
    """The VALU handlers above, as rocke.emu.semantics.AluOp entries."""
    def entry(dsts, srcs, fn, float_mods=True):
        return alu_op_type(tuple(dsts.split()), tuple(srcs.split()), fn, float_mods=float_mods)

    return {
        "v_cvt_f32_bf16": entry("f32", "b16", _bf16_to_f32, float_mods=False),
        "v_dot2_f32_bf16": entry("f32", "b32 b32 f32", _dot2_bf16, float_mods=False),
        "v_dot2c_f32_bf16": alu_op_type(("f32",), ("b32", "b32", "f32"), _dot2_bf16,
                                        float_mods=False, implicit_srcs=("dst",)),
        "v_pk_minimum3_f16": entry("pk_f16", "pk_f16 pk_f16 pk_f16", _ieee(True)),
        "v_pk_maximum3_f16": entry("pk_f16", "pk_f16 pk_f16 pk_f16", _ieee(False)),
        "v_ashr_pk_i8_i32": entry("b16", "i32 i32 u32", _ashr_pack(-128, 127), float_mods=False),
        "v_ashr_pk_u8_i32": entry("b16", "i32 i32 u32", _ashr_pack(0, 255), float_mods=False),
        "v_prng_b32": entry("u32", "u32", _prng, float_mods=False),
    }


# modifiers these handlers' bit-typed sources would otherwise ignore
_BF16_SOURCES = ("v_cvt_f32_bf16", "v_dot2_f32_bf16", "v_dot2c_f32_bf16")


def check_modifiers(base: str, ops, mods, mode: int) -> None:
    """Refuse input modifiers on the bf16 sources (read as raw bits here): neg / abs, and the
    VOP3P lane selects, whose bf16 meaning is not modelled; and a MODE other than round to
    nearest even with f32 denormals kept (the only one these handlers model)."""
    if base not in _BF16_SOURCES:
        return
    if mode & 3 != 0 or (mode >> 4) & 3 != 3:
        raise DecodeError(f"{base} under MODE round {mode & 3} / f32 denorm {(mode >> 4) & 3} is "
                          "not emulated (round to nearest even with denormals kept is)")
    if any(op.neg or op.abs for op in ops[1:3]):
        raise DecodeError(f"{base} with neg / abs on a bf16 source is not emulated")
    if any(mods.get(k) for k in ("neg_lo", "neg_hi")) or any(mods.get("op_sel") or []) or \
            not all(mods.get("op_sel_hi") or [1]):
        raise DecodeError(f"{base} with op_sel / neg_lo / neg_hi is not emulated")


# ------------------------------------------------------------------------------ scaled MFMA

SCALED_MFMAS = ("v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4")


def _e8m0(byte):
    """E8M0 scale bytes -> float64 factors 2^(byte - 127); 0xFF is NaN."""
    byte = np.asarray(byte).astype(np.int64)
    return np.where(byte == 0xFF, np.nan, np.ldexp(1.0, byte - 127))


def decode_scaled_mfma(ins, ops, mods, mfma_ops):
    """D = (SA-scaled A) * (SB-scaled B) + C, on the unscaled op's layouts and arithmetic."""
    from .mfma_decode import decode_mfma
    name = ins.mnemonic.replace("_e64", "")
    if len(ops) != 6:
        raise DecodeError(f"{name} takes D, A, B, C and the two scale operands")
    scales = ops[4:]
    if any(op.kind != "v" or op.count != 1 or op.neg or op.abs for op in scales):
        raise DecodeError(f"{name}: scale operands other than plain VGPRs are not emulated")
    op_sel = list(mods.pop("op_sel", None) or [0, 0, 0])
    op_sel_hi = list(mods.pop("op_sel_hi", None) or [0, 0, 0])
    if len(op_sel) != 3 or len(op_sel_hi) != 3 or op_sel[2] or op_sel_hi[2]:
        raise DecodeError(f"{name}: op_sel {op_sel} / op_sel_hi {op_sel_hi}: only the scale "
                          "operands' byte selects are emulated")
    shifts = [8 * (2 * op_sel_hi[i] + op_sel[i]) for i in range(2)]
    unscaled = name.replace("v_mfma_scale_", "v_mfma_")
    inner = decode_mfma(dataclasses.replace(ins, mnemonic=unscaled), ops[:4], mods,
                        {unscaled: mfma_ops[unscaled]})
    rows = [op.index for op in scales]
    extent = int(name.split("_")[4].split("x")[0])           # M = N of the atom

    def run(P, sel, n):
        # lane l: row (column) l % M, K block l // M -> [n, M, K / 32]
        factors = [_e8m0((P.vgpr[sel, row] >> np.uint32(shift)) & np.uint32(0xFF))
                   .reshape(-1, 64 // extent, extent).transpose(0, 2, 1)
                   for row, shift in zip(rows, shifts)]
        return inner(P, sel, n, block_scales=factors)
    return run
