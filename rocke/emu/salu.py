"""Decode SALU (SOP1/SOP2/SOPC/SOPK), saveexec and the VALU-SALU lane moves into batched closures."""
from __future__ import annotations

import numpy as np

from .access import U32, U64, scalar_raw_reader, scalar_writer, set_sgpr_pair, sgpr_column, sgpr_pair
from .operands import EXEC_LO, Operand, TYPE_BITS
from .errors import DecodeError

SCALAR_VIEW = {"b32": U32, "u32": U32, "i32": np.int32, "f32": np.float32, "b64": U64, "u64": U64,
               "i64": np.int64, "f64": np.float64, "b16": np.uint16, "u16": np.uint16,
               "i16": np.int16, "f16": np.float16}

_SAVEEXEC = {
    # new EXEC as a function of the source S0 and the old EXEC
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
    "andn1": lambda s, e: ~s & e, "andn2": lambda s, e: s & ~e, "orn1": lambda s, e: ~s | e,
    "orn2": lambda s, e: s | ~e, "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e),
    "xnor": lambda s, e: ~(s ^ e),
}


def _exec64(P, sel):
    return sgpr_pair(P, sel, EXEC_LO)


def _set_exec64(P, sel, value):
    set_sgpr_pair(P, sel, EXEC_LO, value.astype(U64, copy=False))


def decode_saveexec(ins, ops: list[Operand]):
    name = ins.mnemonic
    kind = name[2:].split("_")[0]
    if len(ops) != 2:
        raise DecodeError(f"{name} expects 2 operands")
    src = scalar_raw_reader(ops[1], "b64")
    write = scalar_writer(ops[0], "b64")
    if name.endswith("_saveexec_b64"):
        f = _SAVEEXEC[kind]

        def run(P, sel, n):
            s, e = src(P, sel, n), _exec64(P, sel)
            new = f(s, e)
            write(P, sel, e)
            _set_exec64(P, sel, new)
            P.scc[sel] = new != 0
            return 0
        return run
    if name in ("s_andn1_wrexec_b64", "s_andn2_wrexec_b64"):
        f = _SAVEEXEC["andn1" if "andn1" in name else "andn2"]

        def run_wrexec(P, sel, n):
            new = f(src(P, sel, n), _exec64(P, sel))
            _set_exec64(P, sel, new)
            write(P, sel, new)
            P.scc[sel] = new != 0
            return 0
        return run_wrexec
    raise DecodeError(f"opcode {name!r} is not implemented")


def decode_salu(ins, ops: list[Operand], op):
    nd, ns = len(op.dsts), len(op.srcs)
    dst_ops, src_ops = ops[:nd], ops[nd:]
    implicit = tuple(getattr(op, "implicit_srcs", ()))
    if len(dst_ops) != nd or len(src_ops) != ns - len(implicit):
        raise DecodeError(f"{ins.mnemonic} expects {nd} destination and {ns - len(implicit)} "
                          f"source operands, got {len(ops)}")
    for name in implicit:  # s_addk/s_cmovk/s_bitset-style: the destination is read too
        if name != "dst":
            raise DecodeError(f"unknown implicit source {name!r}")
        src_ops = src_ops + [dst_ops[0]]
    readers = []
    for src, typ in zip(src_ops, op.srcs):
        raw = scalar_raw_reader(src, typ)
        view = SCALAR_VIEW[typ]
        if TYPE_BITS[typ] == 16:
            readers.append(lambda P, sel, n, raw=raw, view=view: (raw(P, sel, n) & U32(0xFFFF)).astype(np.uint16).view(view))
        else:
            readers.append(lambda P, sel, n, raw=raw, view=view: raw(P, sel, n).view(view))
    writers = []
    for dst, typ in zip(dst_ops, op.dsts):
        w = scalar_writer(dst, typ)
        view = SCALAR_VIEW[typ]
        if TYPE_BITS[typ] == 64:
            writers.append(lambda P, sel, v, w=w, view=view: w(P, sel, np.asarray(v).astype(view, copy=False).view(U64)))
        elif TYPE_BITS[typ] == 16:
            writers.append(lambda P, sel, v, w=w, view=view: w(P, sel, np.asarray(v).astype(view, copy=False).view(np.uint16).astype(U32)))
        else:
            writers.append(lambda P, sel, v, w=w, view=view: w(P, sel, np.asarray(v).astype(view, copy=False).view(U32)))
    # Pool.run holds np.errstate(all="ignore") around every instruction: the unwrapped op
    fn = getattr(op.fn, "__wrapped__", op.fn)
    reads_scc, writes_scc = op.reads_scc, op.writes_scc

    def run(P, sel, n):
        args = [r(P, sel, n) for r in readers]
        if reads_scc:
            args.append(P.scc[sel])
        result = fn(*args)
        if not isinstance(result, tuple):
            result = (result,)
        if writes_scc:
            P.scc[sel] = np.asarray(result[-1], bool)   # a scalar broadcasts on assignment
            result = result[:-1]
        for w, v in zip(writers, result):
            w(P, sel, v if getattr(v, "shape", None) == (n,) else np.broadcast_to(v, (n,)))
        return 0
    return run


def decode_readlane(ins, ops):
    """v_readlane_b32 / v_writelane_b32 / v_readfirstlane_b32 (cross the scalar/vector boundary)."""
    name = ins.mnemonic.replace("_e32", "").replace("_e64", "")
    if name == "v_readfirstlane_b32":
        write = scalar_writer(ops[0], "b32")
        src = ops[1]

        def run_first(P, sel, n):
            active = P.exec_mask(sel)
            lane = np.where(active.any(1), active.argmax(1), 0)
            values = _vector_rows(P, sel, src, n)
            write(P, sel, values[np.arange(n), lane])
            return 0
        return run_first
    if name == "v_readlane_b32":
        write = scalar_writer(ops[0], "b32")
        lane_of = scalar_raw_reader(ops[2], "b32")
        src = ops[1]

        def run_read(P, sel, n):
            lane = (lane_of(P, sel, n) & U32(63)).astype(np.int64)
            write(P, sel, _vector_rows(P, sel, src, n)[np.arange(n), lane])
            return 0
        return run_read
    if name == "v_writelane_b32":
        if ops[0].kind != "v":
            raise DecodeError("v_writelane_b32 destination must be a VGPR")
        row = ops[0].index
        value_of = scalar_raw_reader(ops[1], "b32")
        lane_of = scalar_raw_reader(ops[2], "b32")

        def run_write(P, sel, n):
            lane = (lane_of(P, sel, n) & U32(63)).astype(np.int64)
            waves = np.arange(P.num_waves)[sel]
            P.vgpr[waves, row, lane] = value_of(P, sel, n)
            return 0
        return run_write
    raise DecodeError(f"opcode {name!r} is not implemented")


def _vector_rows(P, sel, op, n):
    if op.kind == "v":
        return P.vgpr[sel, op.index]
    if op.kind == "s":
        return np.broadcast_to(sgpr_column(P.sgpr, op.index)[sel][:, None], (n, 64))
    raise DecodeError(f"operand {op.text!r} must be a register")
