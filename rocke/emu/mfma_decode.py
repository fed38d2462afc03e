"""Decode v_mfma_* instructions into batched closures over the register file (the operand
checks, C constants, and the write-back of D under EXEC); the arithmetic is rocke.emu.mfma."""
from __future__ import annotations

import numpy as np

from .access import scratch
from .errors import DecodeError, EmulatorError
from .valu import write_rows


def decode_mfma(ins, ops, mods, mfma_ops):
    name = ins.mnemonic.replace("_e64", "")
    if name not in mfma_ops:
        raise DecodeError(f"opcode {name!r} is not implemented (no entry in mfma.MFMA_OPS)")
    op = mfma_ops[name]
    unknown = set(mods) - {"cbsz", "abid", "blgp", "neg"}
    if unknown or mods.get("neg"):
        raise DecodeError(f"unsupported MFMA modifier(s) {sorted(unknown) or ['neg']}")
    if hasattr(op, "select"):   # gfx950 f8f6f4: CBSZ / BLGP pick the operand formats
        op = op.select(int(mods.get("cbsz", 0)), int(mods.get("blgp", 0)))
        mods = {k: v for k, v in mods.items() if k not in ("cbsz", "blgp")}
    dst, a, b, c = ops
    for operand, regs, what in ((a, op.a_regs, "A"), (b, op.b_regs, "B"), (dst, op.c_regs, "D")):
        if operand.kind != "v" or operand.count != regs:
            raise DecodeError(f"MFMA {what} operand {operand.text!r} must be {regs} vector registers")
    if c.kind == "v" and c.count != op.c_regs:
        raise DecodeError(f"MFMA C operand {c.text!r} must be {op.c_regs} vector registers")
    if c.kind not in ("v", "const", "float"):
        raise DecodeError(f"MFMA C operand {c.text!r} is not supported")
    if getattr(op, "raw_registers", False):
        return _decode_raw_mfma(ins, op, dst, a, b, c, mods)
    c_const = None
    if c.kind != "v":
        if c.kind == "const" and c.value != 0:
            raise DecodeError(f"MFMA C constant {c.text!r} is not supported (only 0)")
        c_const = 0.0 if c.kind == "const" else float(c.value)
    cbsz, abid, blgp = int(mods.get("cbsz", 0)), int(mods.get("abid", 0)), int(mods.get("blgp", 0))
    execute = op.execute
    arow, brow, crow, drow = a.index, b.index, c.index, dst.index
    na, nb, nc = op.a_regs, op.b_regs, op.c_regs

    def run(P, sel, n, block_scales=(None, None)):
        active, full, lanes = P.exec_state(sel)
        a_val = P.vgpr[sel, arow:arow + na]
        b_val = P.vgpr[sel, brow:brow + nb]
        if c_const is None:
            c_val = P.vgpr[sel, crow:crow + nc].view(np.float32)
        else:
            c_val = np.full((n, nc, 64), c_const, np.float32)
        # a contiguous batch with every lane on takes D straight into the register file
        direct = full and isinstance(sel, slice)
        out = (P.vgpr[sel, drow:drow + nc].view(np.float32) if direct
               else scratch(P.workspace, "D", (n, nc, 64), np.float32))
        try:
            d_val = execute(a_val, b_val, c_val, cbsz=cbsz, abid=abid, blgp=blgp, out=out,
                            workspace=P.workspace, a_block_scale=block_scales[0],
                            b_block_scale=block_scales[1])
        except NotImplementedError as err:
            raise EmulatorError(f"{ins.mnemonic} at {ins.at}: {err}") from None
        if not direct:
            write_rows(P, sel, drow, nc, d_val.view(np.uint32), active, full)
        return lanes
    return run


def _decode_raw_mfma(ins, op, dst, a, b, c, mods):
    """MFMA families (f32, i8, f64) whose op works on raw register words."""
    if c.kind == "v":
        c_const = None
    elif c.kind in ("const", "float"):
        c_const = c.value
    else:
        raise DecodeError(f"MFMA C operand {c.text!r} is not supported")
    cbsz, abid, blgp = int(mods.get("cbsz", 0)), int(mods.get("abid", 0)), int(mods.get("blgp", 0))
    arow, brow, crow, drow = a.index, b.index, c.index, dst.index
    na, nb, nc = op.a_regs, op.b_regs, op.c_regs

    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        c_val = c_const if c_const is not None else P.vgpr[sel, crow:crow + nc]
        try:
            d_val = op.execute(P.vgpr[sel, arow:arow + na], P.vgpr[sel, brow:brow + nb], c_val,
                               cbsz=cbsz, abid=abid, blgp=blgp)
        except NotImplementedError as err:
            raise EmulatorError(f"{ins.mnemonic} at {ins.at}: {err}") from None
        write_rows(P, sel, drow, nc, d_val, active, full)
        return lanes
    return run
