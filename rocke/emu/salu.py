"""Decode SALU, SMEM and program-control instructions into batched closures."""
from __future__ import annotations

import time

import numpy as np

from .access import U32, U64, scalar_raw_reader, scalar_writer
from .operands import EXEC_LO, VCC_LO, Operand, TYPE_BITS
from .valu import DecodeError

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
    return P.sgpr[sel, EXEC_LO].astype(U64) | (P.sgpr[sel, EXEC_LO + 1].astype(U64) << U64(32))


def _set_exec64(P, sel, value):
    P.sgpr[sel, EXEC_LO] = (value & U64(0xFFFFFFFF)).astype(U32)
    P.sgpr[sel, EXEC_LO + 1] = (value >> U64(32)).astype(U32)


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
    fn, reads_scc, writes_scc = op.fn, op.reads_scc, op.writes_scc

    def run(P, sel, n):
        args = [r(P, sel, n) for r in readers]
        if reads_scc:
            args.append(P.scc[sel])
        result = fn(*args)
        if not isinstance(result, tuple):
            result = (result,)
        if writes_scc:
            P.scc[sel] = np.broadcast_to(np.asarray(result[-1], bool), (n,))
            result = result[:-1]
        for w, v in zip(writers, result):
            w(P, sel, np.broadcast_to(v, (n,)))
        return 0
    return run


def decode_branch(ins, ops, labels, index_of_label, pc_address):
    """Returns (run(P, sel, n, pc)) for control-flow instructions; they set P.pc themselves."""
    name = ins.mnemonic

    def target_of(op):
        if op.kind != "label" or op.value not in labels:
            raise DecodeError(f"branch target {op.text!r} is not a label of this program")
        return labels[op.value]

    if name == "s_branch":
        target = target_of(ops[0])

        def run_branch(P, sel, n, pc):
            P.pc[sel] = target
        return run_branch
    conditions = {
        "s_cbranch_scc0": lambda P, sel: ~P.scc[sel],
        "s_cbranch_scc1": lambda P, sel: P.scc[sel],
        "s_cbranch_vccz": lambda P, sel: (P.sgpr[sel, VCC_LO] | P.sgpr[sel, VCC_LO + 1]) == 0,
        "s_cbranch_vccnz": lambda P, sel: (P.sgpr[sel, VCC_LO] | P.sgpr[sel, VCC_LO + 1]) != 0,
        "s_cbranch_execz": lambda P, sel: (P.sgpr[sel, EXEC_LO] | P.sgpr[sel, EXEC_LO + 1]) == 0,
        "s_cbranch_execnz": lambda P, sel: (P.sgpr[sel, EXEC_LO] | P.sgpr[sel, EXEC_LO + 1]) != 0,
    }
    if name in conditions:
        target = target_of(ops[0])
        cond = conditions[name]

        def run_cbranch(P, sel, n, pc):
            P.pc[sel] = np.where(cond(P, sel), target, pc + 1)
        return run_cbranch
    if name == "s_getpc_b64":
        write = scalar_writer(ops[0], "b64")

        def run_getpc(P, sel, n, pc):
            write(P, sel, np.full(n, pc_address(pc + 1), U64))
            P.pc[sel] = pc + 1
        return run_getpc
    if name == "s_call_b64":   # SOPK: the return address goes to sdst, then jump to the label
        write = scalar_writer(ops[0], "b64")
        target = target_of(ops[1])

        def run_call(P, sel, n, pc):
            write(P, sel, np.full(n, pc_address(pc + 1), U64))
            P.pc[sel] = target
        return run_call
    if name in ("s_setpc_b64", "s_swappc_b64"):
        src = scalar_raw_reader(ops[-1], "b64")
        write = scalar_writer(ops[0], "b64") if name == "s_swappc_b64" else None

        def run_setpc(P, sel, n, pc):
            targets = index_of_label(src(P, sel, n))
            if write is not None:
                write(P, sel, np.full(n, pc_address(pc + 1), U64))
            P.pc[sel] = targets
        return run_setpc
    raise DecodeError(f"opcode {name!r} is not implemented")


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
        return np.broadcast_to(P.sgpr[sel, op.index][:, None], (n, 64))
    raise DecodeError(f"operand {op.text!r} must be a register")


def decode_smem(ins, ops, mods, P_memory_read):
    """s_load_dword{,x2,x4,x8,x16} and s_buffer_load_* (scalar loads through the launch memory)."""
    name = ins.mnemonic
    widths = {"dword": 1, "dwordx2": 2, "dwordx4": 4, "dwordx8": 8, "dwordx16": 16}
    kind = name.split("_")[-1]
    if kind not in widths or not (name.startswith("s_load_") or name.startswith("s_buffer_load_")):
        raise DecodeError(f"opcode {name!r} is not implemented")
    count = widths[kind]
    dst = ops[0]
    if dst.kind != "s" or dst.count != count:
        raise DecodeError(f"{name} destination must be {count} SGPRs")
    buffered = name.startswith("s_buffer_load_")
    base_op = ops[1]
    if base_op.kind != "s" or base_op.count != (4 if buffered else 2):
        raise DecodeError(f"{name} base must be an SGPR {'quad' if buffered else 'pair'}")
    offset_reader = scalar_raw_reader(ops[2], "b32") if len(ops) > 2 else None
    imm = int(mods.get("offset", 0))
    b = base_op.index
    d = dst.index

    def run(P, sel, n):
        lo, hi = P.sgpr[sel, b].astype(U64), P.sgpr[sel, b + 1].astype(U64)
        offset = np.full(n, imm, np.int64)
        if offset_reader is not None:
            offset = offset + offset_reader(P, sel, n).astype(np.int64)
        if buffered:
            base = lo | ((hi & U64(0xFFFF)) << U64(32))
            num_records = P.sgpr[sel, b + 2].astype(np.int64)
            offset = offset & ~3
            dword_offsets = offset[:, None] + 4 * np.arange(count)
            in_range = dword_offsets + 4 <= num_records[:, None]
            addresses = (base[:, None] + dword_offsets.astype(U64))
            values = np.zeros((n, count), U32)
            flat = addresses[in_range]
            if flat.size:
                values[in_range] = P_memory_read(P, sel, ins, flat, 4, in_range).view(U32)[:, 0]
        else:
            base = lo | (hi << U64(32))
            addresses = (base.astype(np.int64) + (offset & ~3)).astype(U64)
            values = P_memory_read(P, sel, ins, addresses, 4 * count, None).view(U32).reshape(n, count)
        P.sgpr[sel, d:d + count] = values
        return 0
    return run


def decode_misc_scalar(ins, ops, mods):
    """s_memtime/s_memrealtime/s_getreg_b32 read-outs."""
    name = ins.mnemonic
    if name in ("s_memtime", "s_memrealtime"):
        write = scalar_writer(ops[0], "b64")

        def run(P, sel, n):
            # a 100 MHz-style counter from host time: monotonic, not cycle-accurate
            write(P, sel, np.full(n, time.perf_counter_ns() // 10, U64))
            return 0
        return run
    raise DecodeError(f"opcode {name!r} is not implemented")
