"""gfx950's scaled (OCP MX) conversions ``v_cvt_scalef32_*`` between f32 / f16 / bf16 and the
small formats fp8 (E4M3), bf8 (E5M2), fp6 (E2M3), bf6 (E3M2) and fp4 (E2M1), round to nearest
even (the stochastic-rounding ``_sr_`` forms are refused, see rocke.emu.cdna4).

Semantics (AMD "CDNA4 Instruction Set Architecture" reference guide: §12.11's pseudocode of
each opcode, §7.3 "BF8 / FP8 and Smaller Formats and Conversions", Tables 30-32):

* The scale is ``exponent(S.f32)``: bits 30:23 of the scale operand, read as an E8M0 byte
  (bias 127); sign and mantissa are ignored, so any register or inline float works. Byte 0xFF
  is E8M0's NaN: a lane that uses it stops the run (the conversions' NaN-scale result is not
  pinned).
* From a small format (``fp8_to_f32_scale`` ...): the code's exact value times
  2^(scale - 127). The guide does not say how these round or overflow, so an exact result is
  written (subnormal ones too: "F4/F6/F8 allows denorms regardless of MODE") and any lane
  whose product the destination cannot hold exactly stops the run naming it. A NaN code gives a
  quiet NaN with the code's sign (the payload is not pinned); bf8's ±inf gives ±inf.
* To a small format (``f32_to_fp8_scale`` ...): the source divided by 2^(scale - 127) (the
  scale is a dequantisation factor: LLVM folds ``fdiv(x, scale)`` into these ops), rounded to
  nearest even. f32 sources honour MODE's f32 denormal flush on input; f16 / bf16 sources are
  decoded only when MODE keeps their denormals (a flush there is not pinned).
  - fp8 / bf8: Table 31's FP16_OVFL rule — NaN -> NaN; ±inf and magnitudes beyond the
    format's max give ±max with FP16_OVFL set, else NaN (fp8) / ±inf (bf8). "Greater than
    max" is read after rounding; a finite value in the window where the two readings differ
    (above max, rounding back to max) stops the run when FP16_OVFL is clear.
  - fp6 / bf6 / fp4: saturate to ±max after rounding (±inf too); tiny values round to a zero
    of the value's sign (IEEE rounding, which the OCP MX formats follow); no NaN code exists,
    so a NaN input stops the run.
  The NaN codes written are 0x7F / 0xFF (fp8) and 0x7E / 0xFE (bf8), the sign kept.
* Packing, byte / word selects and preserved destination bits follow each opcode's
  pseudocode; LLVM's gfx950 assembler prints OPSEL[0], OPSEL[1] (source byte / word) and
  OPSEL[3] (destination word) as ``op_sel:[x,y,z]`` on two-source ops and OPSEL[3:0] as four
  entries when a destination byte is selected (checked by compiling the intrinsics with LLVM
  for gfx950, tests/emu/test_mx_conversions.py). 6-bit values are packed densely, item i at
  bits 6i+5:6i of the six registers (the 2xpk16 forms interleave S0 and S1 items).
* clamp, input modifiers and op_sel bits an opcode does not use are refused at decode.
"""
from __future__ import annotations

import re

import numpy as np

from . import numerics
from .access import vector_raw_reader
from .errors import DecodeError, EmulatorError
from .valu import write_rows

U32 = np.uint32

# small format -> (exponent bits, mantissa bits, bias, width)
SMALL = {"fp8": (4, 3, 7, 8), "bf8": (5, 2, 15, 8), "fp6": (2, 3, 1, 6), "bf6": (3, 2, 3, 6),
         "fp4": (2, 1, 1, 4)}
WIDE = ("f32", "f16", "bf16")
_OCP8 = {"fp8": "e4m3fn", "bf8": "e5m2"}


def _small_values(fmt: str) -> np.ndarray:
    """float64 value of every code of `fmt` (numerics' tables)."""
    if fmt in _OCP8:
        return numerics.ocp_fp8_bits_to_f32(np.arange(256), _OCP8[fmt]).astype(np.float64)
    return {"fp6": numerics.E2M3_VALUES, "bf6": numerics.E3M2_VALUES,
            "fp4": numerics.E2M1_VALUES}[fmt]


VALUES = {fmt: _small_values(fmt) for fmt in SMALL}
MAX = {fmt: float(np.nanmax(np.where(np.isfinite(v), v, np.nan))) for fmt, v in VALUES.items()}


# ------------------------------------------------------------------------------ the ops

# (dst, src) pairs of each packing form, as the guide lists them (§12.11, opcodes 565-618)
_UP_PK = [(d, s) for s in ("fp8", "bf8") for d in WIDE]          # pk_{wide}_{fp8,bf8}
_UP_ONE = [("f32", "fp8"), ("f32", "bf8"), ("f16", "fp8"), ("f16", "bf8")]
_UP_FP4 = [(d, "fp4") for d in WIDE]
_UP_PK32 = [(d, s) for s in ("fp6", "bf6") for d in WIDE]
_DOWN_PK = [(d, s) for d in ("fp8", "bf8", "fp4") for s in WIDE]
_DOWN_PK32 = [(d, s) for d in ("fp6", "bf6") for s in ("f16", "bf16")]
_DOWN_2X = [(d, "f32") for d in ("fp6", "bf6")]

OPS: dict[str, tuple[str, str, str]] = {}
OPS.update({f"v_cvt_scalef32_pk_{d}_{s}": ("up_pk", d, s) for d, s in _UP_PK + _UP_FP4})
OPS.update({f"v_cvt_scalef32_{d}_{s}": ("up_one", d, s) for d, s in _UP_ONE})
OPS.update({f"v_cvt_scalef32_pk32_{d}_{s}": ("up_pk32", d, s) for d, s in _UP_PK32})
OPS.update({f"v_cvt_scalef32_pk_{d}_{s}": ("down_pk", d, s) for d, s in _DOWN_PK})
OPS.update({f"v_cvt_scalef32_pk32_{d}_{s}": ("down_pk32", d, s) for d, s in _DOWN_PK32})
OPS.update({f"v_cvt_scalef32_2xpk16_{d}_{s}": ("down_2x", d, s) for d, s in _DOWN_2X})

_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp)$")


def _registers(fmt: str, count: int) -> int:
    """32-bit registers holding `count` values of `fmt`."""
    bits = {"f32": 32, "f16": 16, "bf16": 16}.get(fmt) or SMALL[fmt][3]
    return max(1, count * bits // 32)


def decode(ins, ops, mods, ctx):
    """The run function of one v_cvt_scalef32_* op in OPS (see the module docstring)."""
    base = _SUFFIX.sub("", ins.mnemonic)
    kind, dst_fmt, src_fmt = OPS[base]
    op_sel = list(mods.pop("op_sel", None) or [])
    unknown = {k for k, v in mods.items() if v}
    if unknown:
        raise DecodeError(f"{base} with {sorted(unknown)} (clamp / output modifiers) is not "
                          "emulated")
    if any(op.neg or op.abs for op in ops):
        raise DecodeError(f"{base} with neg / abs on a source is not emulated")
    up = kind.startswith("up")
    n_src = 3 if kind in ("down_2x",) or (kind == "down_pk" and src_fmt == "f32") else 2
    if len(ops) != 1 + n_src:
        raise DecodeError(f"{base} takes a destination and {n_src} sources, got {len(ops) - 1}")
    dst, sources, scale_op = ops[0], ops[1:-1], ops[-1]
    bit = lambda i: op_sel[i] if i < len(op_sel) else 0   # noqa: E731
    # which OPSEL bits each form reads (positions of LLVM's op_sel list, see the docstring)
    if kind == "up_pk" and src_fmt != "fp4":
        used, src_shift = {0}, 16 * bit(0)
    elif kind in ("up_pk", "up_one"):
        used, src_shift = {0, 1}, 8 * (bit(0) + 2 * bit(1))
    else:
        used, src_shift = set(), 0
    dst_shift = 0
    if kind == "up_one" and dst_fmt == "f16":
        used.add(2)
        dst_shift = 16 * bit(2)
    elif kind == "down_pk" and dst_fmt == "fp4":
        used |= {2, 3}
        dst_shift = 8 * (bit(2) + 2 * bit(3))
    elif kind == "down_pk":
        word_bit = 3 if n_src == 3 else 2
        used.add(word_bit)
        dst_shift = 16 * bit(word_bit)
    stray = [i for i, b in enumerate(op_sel) if b and i not in used]
    if stray:
        raise DecodeError(f"{base} with op_sel {op_sel}: bit(s) {stray} are not read by this "
                          "opcode's pseudocode and are not emulated")
    if up:
        count = {"up_pk": 2, "up_one": 1, "up_pk32": 32}[kind]
    else:
        count = {"down_pk": 2, "down_pk32": 32, "down_2x": 32}[kind]
    src_regs = _registers(src_fmt, count if kind != "down_2x" else 16)
    if kind in ("up_pk", "up_one"):
        src_regs = 1
    if kind == "down_pk" and src_fmt == "f32":
        src_regs = 1   # S0 and S1 hold one f32 each
    dst_regs = _registers(dst_fmt, count)
    if kind == "down_pk" or (kind == "up_one" and dst_fmt == "f16"):
        dst_regs = 1
    if dst.kind != "v" or dst.count != dst_regs:
        raise DecodeError(f"{base}: destination {dst.text!r} must be {dst_regs} VGPR(s)")
    readers = []
    for op in sources:
        if src_regs > 1:
            if op.kind != "v" or op.count != src_regs:
                raise DecodeError(f"{base}: source {op.text!r} must be {src_regs} VGPRs")
            readers.append(lambda P, sel, n, r=op.index: P.vgpr[sel, r:r + src_regs])
        else:
            if op.kind not in ("v", "s", "const", "float"):
                raise DecodeError(f"{base}: unsupported source {op.text!r}")
            raw = vector_raw_reader(op, "f32")
            readers.append(lambda P, sel, n, raw=raw: raw(P, sel, n)[:, None])
    scale_reader = vector_raw_reader(scale_op, "f32")
    where = f"{base} at line {ins.line_no}"
    if not up:
        _check_source_denormals(base, src_fmt, ctx)
    flush_f32 = not up and src_fmt == "f32" and ctx.denorm_mode_32 in (0, 2)
    saturate = bool(ctx.fp16_overflow)
    row = dst.index

    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        scale = (np.asarray(scale_reader(P, sel, n)).astype(U32) >> U32(23)) & U32(0xFF)
        if np.any((scale == 0xFF) & active):
            raise EmulatorError(f"{where}: scale exponent 0xFF (E8M0 NaN) is not emulated")
        factor = np.ldexp(1.0, scale.astype(np.int64) - 127)[..., None]     # (n, 64, 1)
        words = [np.asarray(r(P, sel, n)).astype(U32) for r in readers]     # (n, regs, 64)
        if up:
            codes = _unpack_small(words[0], src_fmt, src_shift, count)       # (n, 64, count)
            values = VALUES[src_fmt][codes] * factor
            bad = ~_exact_in(values, dst_fmt) & active[..., None]
            if bad.any():
                raise EmulatorError(f"{where}: a scaled value {dst_fmt} cannot hold exactly "
                                    "(its rounding / overflow is not pinned by the guide) is "
                                    "not emulated")
            out = _pack_wide(values, dst_fmt, codes, src_fmt)               # (n, regs, 64)
        else:
            if kind == "down_pk" and src_fmt == "f32":
                x = np.stack([_wide_values(w[:, 0], "f32", flush_f32) for w in words], -1)
            elif kind == "down_2x":
                a, b = (_wide_values(w, "f32", flush_f32).transpose(0, 2, 1) for w in words)
                x = np.stack([a, b], -1).reshape(n, 64, 32)                  # S0, S1 interleaved
            else:
                x = _wide_halves(words[0], src_fmt)                          # (n, 64, count)
            codes = _round_small(x / factor, dst_fmt, saturate, active[..., None], where)
            out = _pack_small(codes, dst_fmt)                                # (n, regs, 64)
        if kind == "down_pk" or (kind == "up_one" and dst_fmt == "f16"):
            width = 8 if dst_fmt == "fp4" else 16
            mask = U32(((1 << width) - 1) << dst_shift)
            out = (P.vgpr[sel, row][:, None] & ~mask) | ((out << U32(dst_shift)) & mask)
        write_rows(P, sel, row, dst_regs, np.ascontiguousarray(out, U32), active, full)
        return lanes
    return run


def _check_source_denormals(base, src_fmt, ctx):
    mode = {"f16": ctx.denorm_mode_16_64, "bf16": ctx.denorm_mode_32}.get(src_fmt)
    if mode is not None and mode in (0, 2):
        raise DecodeError(f"{base} under a MODE that flushes {src_fmt} input denormals is not "
                          "emulated (the guide pins MODE's denormal control for f32 sources only)")


# ------------------------------------------------------------------------------ unpack / pack

def _unpack_small(words, fmt, shift, count):
    """(n, regs, 64) uint32 -> (n, 64, count) codes: fp8 / fp4 from the selected word / byte,
    6-bit ones densely from the six registers."""
    width = SMALL[fmt][3]
    if width == 6:
        codes = np.empty((words.shape[0], 64, count), np.int64)
        for i in range(count):
            bit = 6 * i
            lo = words[:, bit // 32].astype(np.uint64) >> np.uint64(bit % 32)
            if bit % 32 > 26:   # the item crosses into the next register
                lo |= words[:, bit // 32 + 1].astype(np.uint64) << np.uint64(32 - bit % 32)
            codes[..., i] = (lo & np.uint64(0x3F)).astype(np.int64)
        return codes
    word = words[:, 0] >> U32(shift)
    return np.stack([(word >> U32(width * i)) & U32((1 << width) - 1) for i in range(count)],
                    -1).astype(np.int64)


def _exact_in(values, fmt):
    """Which finite float64 values `fmt` holds exactly (NaN / inf always pass)."""
    finite = np.isfinite(values)
    safe = np.where(finite, values, 0.0)
    if fmt == "f16":
        back = safe.astype(np.float16).astype(np.float64)
    else:
        f32 = safe.astype(np.float32)
        back = f32.astype(np.float64)
        if fmt == "bf16":
            back = np.where((f32.view(U32) & U32(0xFFFF)) == 0, back, np.nan)
    return ~finite | (back == safe)


_NAN = {"f32": 0x7FC00000, "f16": 0x7E00, "bf16": 0x7FC0}


def _wide_bits(values, fmt, codes, src_fmt):
    """Exact float64 values -> uint32 bits of `fmt` (NaN: quiet, with the code's sign)."""
    if fmt == "f32":
        bits = values.astype(np.float32).view(U32)
    elif fmt == "f16":
        bits = values.astype(np.float16).view(np.uint16).astype(U32)
    else:
        bits = values.astype(np.float32).view(U32) >> U32(16)
    sign = (codes >> (SMALL[src_fmt][3] - 1)).astype(U32) & U32(1)
    top = 31 if fmt == "f32" else 15
    return np.where(np.isnan(values), U32(_NAN[fmt]) | (sign << U32(top)), bits).astype(U32)


def _pack_wide(values, fmt, codes, src_fmt):
    bits = _wide_bits(values, fmt, codes, src_fmt)                   # (n, 64, count)
    if fmt != "f32":
        count = bits.shape[-1]
        if count > 1:
            bits = bits[..., 0::2] | (bits[..., 1::2] << U32(16))
    return bits.transpose(0, 2, 1)                                   # (n, regs, 64)


def _wide_values(words, fmt, flush):
    """uint32 f32 bits -> float64 (input denormals flushed to ±0 when MODE says so)."""
    x = words.astype(U32).view(np.float32).astype(np.float64)
    if flush:
        x = np.where(np.abs(x) < 2.0 ** -126, np.copysign(0.0, x), x)
    return x


def _wide_halves(words, fmt):
    """(n, regs, 64) packed 16-bit registers -> (n, 64, 2 * regs) float64, low half first."""
    halves = np.stack([words & U32(0xFFFF), words >> U32(16)], -1)    # (n, regs, 64, 2)
    halves = halves.transpose(0, 2, 1, 3).reshape(words.shape[0], 64, -1)
    if fmt == "f16":
        return halves.astype(np.uint16).view(np.float16).astype(np.float64)
    return (halves.astype(U32) << U32(16)).view(np.float32).astype(np.float64)


def _round_small(v, fmt, saturate, active, where):
    """float64 -> codes of `fmt`, round to nearest even, with the overflow rules above."""
    exp_bits, man_bits, bias, width = SMALL[fmt]
    magnitude = np.abs(v)
    finite = np.isfinite(magnitude)
    safe = np.where(finite, magnitude, 0.0)
    _, e = np.frexp(safe)
    quantum = np.ldexp(1.0, np.maximum(e - 1, 1 - bias) - man_bits)
    rounded = np.rint(safe / quantum) * quantum
    fmax = MAX[fmt]
    nan = np.isnan(v)
    over = (~finite & ~nan) | (rounded > fmax)
    if fmt in _OCP8:
        if not saturate and np.any(active & finite & (magnitude > fmax) & (rounded <= fmax)):
            raise EmulatorError(f"{where}: a value above {fmt}'s max that rounds back to it, "
                                "with FP16_OVFL clear (whether 'greater than max' is judged "
                                "before rounding is not pinned), is not emulated")
    elif np.any(nan & active):
        raise EmulatorError(f"{where}: NaN has no {fmt} code (not emulated)")
    rounded = np.where(over, fmax, rounded)
    positive = VALUES[fmt][:1 << (width - 1)]
    finite_codes = np.nonzero(np.isfinite(positive))[0]
    code = finite_codes[np.searchsorted(positive[finite_codes], rounded)]
    sign = np.signbit(v).astype(np.int64) << (width - 1)
    code = code | sign
    if fmt in _OCP8:
        if not saturate:
            over_code = 0x7F if fmt == "fp8" else 0x7C     # NaN / inf
            code = np.where(over, over_code | sign, code)
        code = np.where(nan, (0x7F if fmt == "fp8" else 0x7E) | sign, code)
    return code.astype(np.int64)


def _pack_small(codes, fmt):
    """(n, 64, count) codes -> (n, regs, 64) uint32, item i at bits width*i (dense)."""
    width = SMALL[fmt][3]
    n, _, count = codes.shape
    regs = max(1, count * width // 32)
    out = np.zeros((n, regs, 64), np.uint64)
    for i in range(count):
        bit = width * i
        word, offset = bit // 32, bit % 32
        c = codes[..., i].astype(np.uint64)
        out[:, word] |= (c << np.uint64(offset)) & np.uint64(0xFFFFFFFF)
        if offset + width > 32:
            out[:, word + 1] |= c >> np.uint64(32 - offset)
    return out.astype(U32)
