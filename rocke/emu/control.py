"""Decode program-control instructions (branches, calls, s_getpc/s_setpc/s_swappc/s_call) and
the scalar time counters into batched closures; control closures set ``P.pc`` themselves."""
from __future__ import annotations

import time

import numpy as np

from .access import U64, scalar_raw_reader, scalar_writer, sgpr_pair
from .operands import EXEC_LO, VCC_LO
from .errors import DecodeError


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
        "s_cbranch_vccz": lambda P, sel: sgpr_pair(P, sel, VCC_LO) == 0,
        "s_cbranch_vccnz": lambda P, sel: sgpr_pair(P, sel, VCC_LO) != 0,
        "s_cbranch_execz": lambda P, sel: sgpr_pair(P, sel, EXEC_LO) == 0,
        "s_cbranch_execnz": lambda P, sel: sgpr_pair(P, sel, EXEC_LO) != 0,
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
