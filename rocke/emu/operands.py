"""Operand syntax of LLVM's gfx942 assembly: registers, inline constants, literals, modifiers."""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

VCC_LO, VCC_HI, M0, EXEC_LO, EXEC_HI = 106, 107, 124, 126, 127
# Fake flat apertures (high 32 bits of 64-bit flat addresses); no launch buffer lives there.
SHARED_APERTURE_HI = 0x10000
PRIVATE_APERTURE_HI = 0x20000

_SPECIAL_SGPRS = {"vcc": (VCC_LO, 2), "vcc_lo": (VCC_LO, 1), "vcc_hi": (VCC_HI, 1),
                  "exec": (EXEC_LO, 2), "exec_lo": (EXEC_LO, 1), "exec_hi": (EXEC_HI, 1),
                  "m0": (M0, 1)}
_APERTURE_CONSTS = {"src_shared_base": SHARED_APERTURE_HI, "src_private_base": PRIVATE_APERTURE_HI,
                    "src_shared_limit": SHARED_APERTURE_HI, "src_private_limit": PRIVATE_APERTURE_HI}
_REG_SINGLE = re.compile(r"^([vsa])(\d+)$")
_REG_RANGE = re.compile(r"^([vsa])\[(\d+)(?::(\d+))?\]$")
_INT = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
_FLOAT = re.compile(r"^-?\d+\.\d*(e[-+]?\d+)?$")
INV_2PI = 0.15915494309189535


class OperandError(ValueError):
    pass


@dataclass
class Operand:
    kind: str            # v | s | const | float | off | scc | label
    index: int = 0       # v: row in the unified vector file; s: SGPR encoding
    count: int = 1       # registers
    value: int | float | None = None
    text: str = ""
    neg: bool = False
    abs: bool = False
    sext: bool = False

    @property
    def is_reg(self) -> bool:
        return self.kind in ("v", "s")


def parse_operand(token: str, accum_offset: int, num_vector_regs: int) -> Operand:
    text = token
    neg = absolute = sext = False
    if token.startswith("neg(") and token.endswith(")"):
        neg, token = True, token[4:-1]
    if token.startswith("-") and not _INT.match(token) and not _FLOAT.match(token):
        neg, token = True, token[1:]
    if token.startswith("|") and token.endswith("|"):
        absolute, token = True, token[1:-1]
    elif token.startswith("abs(") and token.endswith(")"):
        absolute, token = True, token[4:-1]
    if token.startswith("sext(") and token.endswith(")"):
        sext, token = True, token[5:-1]
    op = _parse_plain(token, accum_offset, num_vector_regs)
    op.text, op.neg, op.abs, op.sext = text, neg, absolute, sext
    return op


def _parse_plain(token: str, accum_offset: int, num_vector_regs: int) -> Operand:
    if token in _SPECIAL_SGPRS:
        index, count = _SPECIAL_SGPRS[token]
        return Operand("s", index, count)
    if token in _APERTURE_CONSTS:
        return Operand("const", value=_APERTURE_CONSTS[token])
    if token == "off":
        return Operand("off")
    if token in ("scc", "src_scc"):
        return Operand("scc")
    m = _REG_SINGLE.match(token) or _REG_RANGE.match(token)
    if m:
        file, first = m.group(1), int(m.group(2))
        last = int(m.group(3)) if m.lastindex and m.lastindex >= 3 and m.group(3) else first
        count = last - first + 1
        if count <= 0:
            raise OperandError(f"bad register range {token!r}")
        if file == "s":
            if last > 105:
                raise OperandError(f"SGPR {token!r} beyond s105")
            return Operand("s", first, count)
        row = first + (accum_offset if file == "a" else 0)
        if row + count > num_vector_regs:
            raise OperandError(f"register {token!r} beyond the kernel's vector register file "
                               f"({num_vector_regs} rows, accum_offset {accum_offset})")
        return Operand("v", row, count)
    if _INT.match(token):
        return Operand("const", value=int(token, 0))
    if _FLOAT.match(token):
        return Operand("float", value=float(token))
    if re.match(r"^[.A-Za-z_$][\w.$]*$", token):
        return Operand("label", value=token)
    raise OperandError(f"unsupported operand {token!r}")


def _f16_bits(x: float) -> int:
    if abs(x - INV_2PI) < 1e-6:
        return 0x3118
    if abs(x + INV_2PI) < 1e-6:
        return 0xB118
    return int(np.array(x, np.float16).view(np.uint16))


def _f32_bits(x: float) -> int:
    if abs(x - INV_2PI) < 1e-6:
        return 0x3E22F983
    if abs(x + INV_2PI) < 1e-6:
        return 0xBE22F983
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f64_bits(x: float) -> int:
    if abs(x - INV_2PI) < 1e-6:
        return 0x3FC45F306DC9C882
    if abs(x + INV_2PI) < 1e-6:
        return 0xBFC45F306DC9C882
    return struct.unpack("<Q", struct.pack("<d", x))[0]


TYPE_BITS = {"f32": 32, "b32": 32, "u32": 32, "i32": 32, "f16": 16, "b16": 16, "u16": 16,
             "i16": 16, "bf16": 16, "f64": 64, "b64": 64, "u64": 64, "i64": 64, "pk_f16": 32,
             "pk_i16": 32, "pk_u16": 32, "pk_b16": 32, "pk_bf16": 32, "u8x4": 32, "mask": 64,
             "pk_f32": 64, "pk_b32": 64}


def constant_bits(op: Operand, typ: str) -> int:
    """Raw bits an inline constant / literal supplies to an operand of type `typ`."""
    bits = TYPE_BITS[typ]
    value = op.value
    # A packed 16-bit operand's inline constant is one 32-bit value, not a splat (LLVM
    # AMDGPUBaseInfo getInlineEncodingV216, "the actual HW behavior", llvm-project PR 76522):
    # an integer is sign-extended to 32 bits, a float is the f16 value in the low half with 0
    # above for f16 ops and the f32 value for integer ops; op_sel_hi:0 reads the low half into
    # both lanes, which is how compilers splat a constant.
    if op.kind == "float":
        if typ in ("f64", "b64", "u64", "i64", "mask"):
            raw = _f64_bits(value)
        elif bits == 16 or typ in ("pk_f16", "pk_bf16"):
            raw = _f16_bits(value)
        else:
            raw = _f32_bits(value)
        if typ in ("pk_f32", "pk_b32"):   # not confirmed: compilers pair it with op_sel_hi:0
            raw = _f32_bits(value) | (_f32_bits(value) << 32)
        return raw
    value = int(value)
    if bits == 64 and op.text in ("src_shared_base", "src_private_base"):
        return value << 32   # 64-bit read: the aperture's base address (32-bit: its high half)
    if bits == 64:
        if typ == "f64" and not -16 <= value <= 64:
            return (value & 0xFFFFFFFF) << 32  # a 32-bit literal supplies the high half of a double
        if typ in ("pk_f32", "pk_b32"):
            return (value & 0xFFFFFFFF) | ((value & 0xFFFFFFFF) << 32)
        return value & 0xFFFFFFFFFFFFFFFF
    if bits == 16:
        return value & 0xFFFF
    return value & 0xFFFFFFFF


def parse_modifiers(tokens: list[str]) -> dict[str, object]:
    """`offset:16 glc op_sel:[0,1] quad_perm:[3,2,1,0]` -> dict (flags map to True)."""
    out: dict[str, object] = {}
    for tok in tokens:
        if ":" in tok:
            key, _, value = tok.partition(":")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                out[key] = [int(v, 0) for v in value[1:-1].split(",")]
            else:
                try:
                    out[key] = int(value, 0)
                except ValueError:
                    out[key] = value
        else:
            out[tok] = True
    return out
