"""Decode a kernel's instructions once into batched closures."""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .access import scratch
from .asm import Instr, KernelSource, Program
from .errors import EmulatorError
from .operands import OperandError, parse_modifiers, parse_operand
from .valu import DecodeError, decode_valu, write_rows
from . import salu, memops

CLASSES = ("SALU", "VALU", "MFMA", "DS", "VMEM", "SMEM", "branch/other")
SALU, VALU, MFMA, DS, VMEM, SMEM, OTHER = range(7)
# Pseudo addresses for s_getpc/s_setpc: instruction i lives at CODE_BASE + 8 * i.
CODE_BASE = 0x7F0000000000

NO_OPS = {"s_nop", "s_setprio", "s_sleep", "s_dcache_inv", "s_dcache_wb", "s_icache_inv",
          "s_dcache_inv_vol", "s_dcache_wb_vol", "s_waitcnt_depctr", "s_sched_barrier",
          "s_ttracedata", "s_set_inst_prefetch_distance", "v_nop", "s_setkill", "s_sethalt_0"}
RUNTIME_STOPS = {"s_trap": "the kernel executed s_trap (a trap or failed device assert)",
                 "s_sendmsg": "s_sendmsg is not implemented",
                 "s_getreg_b32": "s_getreg_b32 (hardware register read) is not implemented",
                 "s_setreg_b32": "s_setreg_b32 (hardware register write) is not implemented",
                 "s_setreg_imm32_b32": "s_setreg_imm32_b32 (hardware register write) is not implemented"}
SAVEEXEC = re.compile(r"^s_(and|or|xor|andn1|andn2|orn1|orn2|nand|nor|xnor)_saveexec_b64$|^s_andn[12]_wrexec_b64$")
BRANCHES = {"s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
            "s_cbranch_execz", "s_cbranch_execnz", "s_getpc_b64", "s_setpc_b64", "s_swappc_b64"}


@dataclass
class Decoded:
    run: Callable
    cls: int
    control: str | None   # None | "branch" | "barrier" | "end"
    instr: Instr
    writes_exec: bool = False


@dataclass
class DecodedKernel:
    source: KernelSource
    code: list[Decoded]          # indexed by program instruction index
    first: int                   # first instruction index of the kernel
    start: int                   # where waves start (after the preload prologue if any)
    is_target: np.ndarray        # bool per instruction: some branch may land here
    num_vector_regs: int
    accum_offset: int


class _Context:
    def __init__(self, descriptor):
        self.denorm_mode_32 = int(descriptor.get("amdhsa_float_denorm_mode_32", 3))
        self.denorm_mode_16_64 = int(descriptor.get("amdhsa_float_denorm_mode_16_64", 3))

    def flush_functions(self):
        if self.denorm_mode_32 == 3 and self.denorm_mode_16_64 == 3:
            return {}
        from . import numerics
        return {"f32": numerics.flush_f32_denormals, "f16": numerics.flush_f16_denormals,
                "f64": lambda x: x}


def _load_semantics():
    try:
        from . import semantics
    except ImportError as err:
        raise EmulatorError(f"rocke.emu.semantics is not available ({err})") from None
    return semantics.VALU_OPS, semantics.SALU_OPS


def _load_mfma():
    try:
        from . import mfma
    except ImportError as err:
        raise EmulatorError(f"rocke.emu.mfma is not available ({err})") from None
    return mfma.MFMA_OPS


def classify(mnemonic: str) -> int:
    if mnemonic.startswith(("v_mfma", "v_smfmac")):
        return MFMA
    if mnemonic.startswith("v_"):
        return VALU
    if mnemonic.startswith("ds_"):
        return DS
    if mnemonic.startswith(("global_", "flat_", "buffer_", "scratch_")):
        return VMEM
    if mnemonic.startswith(("s_load", "s_buffer_load", "s_store", "s_buffer_store")):
        return SMEM
    if mnemonic in BRANCHES or mnemonic in NO_OPS or mnemonic in (
            "s_endpgm", "s_barrier", "s_waitcnt", "s_memtime", "s_memrealtime"):
        return OTHER
    return SALU


def decode_kernel(program: Program, kernel: KernelSource) -> DecodedKernel:
    d = kernel.descriptor
    accum_offset = int(d.get("amdhsa_accum_offset", d.get("amdhsa_next_free_vgpr", 1)))
    agprs = int(kernel.metadata.get(".agpr_count", 0) or 0)
    num_vector_regs = max(int(d.get("amdhsa_next_free_vgpr", 1)), accum_offset + agprs, 1)
    entries = sorted(k.entry for k in program.kernels.values())
    end = next((e for e in entries if e > kernel.entry), len(program.instrs))
    ctx = _Context(d)
    valu_ops = salu_ops = mfma_ops = None
    labels = program.labels
    code: list[Decoded | None] = [None] * len(program.instrs)
    targets = np.zeros(len(program.instrs) + 1, bool)
    for index in range(kernel.entry, end):
        ins = program.instrs[index]
        try:
            cls = classify(ins.mnemonic)
            if cls in (VALU, SALU) and valu_ops is None:
                valu_ops, salu_ops = _load_semantics()
            if cls == MFMA and mfma_ops is None:
                mfma_ops = _load_mfma()
            decoded = _decode_one(ins, index, cls, kernel, accum_offset, num_vector_regs, ctx,
                                  valu_ops, salu_ops, mfma_ops, labels)
        except (DecodeError, OperandError, KeyError, IndexError, NotImplementedError) as err:
            raise EmulatorError(_where(ins, kernel.name) + f": {err}") from None
        decoded.writes_exec = _writes_exec(ins)
        code[index] = decoded
        if ins.mnemonic in BRANCHES:
            for token in ins.operands:
                if token in labels:
                    targets[labels[token]] = True
    for name, index in labels.items():
        if kernel.entry <= index < end and not name.startswith(".Lfunc_end"):
            targets[index] = True
    start = kernel.entry
    if int(d.get("amdhsa_user_sgpr_kernarg_preload_length", 0)) > 0:
        if kernel.preload_entry is None or kernel.preload_entry >= end:
            raise EmulatorError(f"kernel {kernel.name}: kernarg preloading is enabled but no "
                                "256-byte aligned entry (`.p2align 8`) follows the prologue")
        start = kernel.preload_entry
    return DecodedKernel(kernel, code, kernel.entry, start, targets, num_vector_regs, accum_offset)


def _writes_exec(ins: Instr) -> bool:
    name = ins.mnemonic
    return ("saveexec" in name or "wrexec" in name or name.startswith("v_cmpx")
            or bool(ins.operands) and ins.operands[0].startswith("exec"))


def _where(ins: Instr, kernel: str) -> str:
    return f"kernel {kernel}, line {ins.line_no} `{ins.text}`"


def _decode_one(ins, index, cls, kernel, accum_offset, num_vector_regs, ctx, valu_ops,
                salu_ops, mfma_ops, labels):
    name = ins.mnemonic
    if name in NO_OPS:
        return Decoded(lambda P, sel, n: 0, OTHER, None, ins)
    if name in ("s_waitcnt", "s_waitcnt_vmcnt"):
        vmcnt = _parse_vmcnt(ins)
        return Decoded(lambda P, sel, n: P.wait_vm(sel, vmcnt), OTHER, None, ins)
    if name in ("s_waitcnt_lgkmcnt", "s_waitcnt_expcnt"):
        return Decoded(lambda P, sel, n: 0, OTHER, None, ins)
    if name in RUNTIME_STOPS:
        # may sit on a path never taken (e.g. a failed-assert trap): stop only if executed
        def stop(P, sel, n, reason=RUNTIME_STOPS[name]):
            raise EmulatorError(f"{_where(ins, kernel.name)}: {reason} (executed by "
                                f"{P.wave_label(int(np.arange(P.num_waves)[sel][0]))})")
        return Decoded(stop, OTHER, None, ins)
    tokens = [_resolve_label_expression(t, labels) if name not in BRANCHES else t
              for t in ins.operands]
    ops = [parse_operand(t, accum_offset, num_vector_regs) for t in tokens]
    mods = parse_modifiers(ins.modifiers)
    if name == "s_endpgm":
        return Decoded(lambda P, sel, n, pc: P.end_waves(sel), OTHER, "end", ins)
    if name == "s_barrier":
        return Decoded(lambda P, sel, n, pc: P.arrive_barrier(sel, pc), OTHER, "barrier", ins)
    if name in BRANCHES:
        run = salu.decode_branch(ins, ops, labels, _index_of_address, _address_of_index)
        return Decoded(run, OTHER, "branch", ins)
    if name in ("s_memtime", "s_memrealtime"):
        return Decoded(salu.decode_misc_scalar(ins, ops, mods), OTHER, None, ins)
    if cls == SMEM:
        return Decoded(salu.decode_smem(ins, ops, mods, _smem_read), SMEM, None, ins)
    if cls == SALU:
        if SAVEEXEC.match(name):
            return Decoded(salu.decode_saveexec(ins, ops), SALU, None, ins)
        if name not in salu_ops:
            raise DecodeError(f"opcode {name!r} is not implemented")
        return Decoded(salu.decode_salu(ins, ops, salu_ops[name]), SALU, None, ins)
    if cls == VMEM:
        run = memops.decode_vmem(ins, ops, mods)
        if run is None:
            return Decoded(lambda P, sel, n: 0, OTHER, None, ins)
        return Decoded(run, VMEM, None, ins)
    if cls == DS:
        return Decoded(memops.decode_ds(ins, ops, mods), DS, None, ins)
    if cls == MFMA:
        return Decoded(_decode_mfma(ins, ops, mods, mfma_ops), MFMA, None, ins)
    base = re.sub(r"_(e32|e64|sdwa|dpp)$", "", name)
    if base in ("v_readlane_b32", "v_writelane_b32", "v_readfirstlane_b32"):
        return Decoded(salu.decode_readlane(ins, ops), VALU, None, ins)
    if base == "v_swap_b32":
        return Decoded(_decode_swap(ops), VALU, None, ins)
    return Decoded(decode_valu(ins, mods, ops, valu_ops, ctx), VALU, None, ins)


_LABEL_NAME = re.compile(r"[.A-Za-z_$][\w.$]*")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.BitAnd: operator.and_,
               ast.BitOr: operator.or_, ast.RShift: operator.rshift, ast.LShift: operator.lshift,
               ast.Mult: operator.mul}


def _resolve_label_expression(token: str, labels: dict) -> str:
    """`(.LBB0_2-.Lpost_getpc0)&4294967295` (long branches) -> its value in pseudo addresses."""
    names = [m for m in _LABEL_NAME.findall(token) if m in labels]
    if not names or not any(op in token for op in "+-&|()<>*"):
        return token
    expression = _LABEL_NAME.sub(lambda m: str(_address_of_index(labels[m.group(0)]))
                                 if m.group(0) in labels else m.group(0), token)

    def evaluate(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        raise DecodeError(f"unsupported expression operand {token!r}")
    try:
        value = evaluate(ast.parse(expression, mode="eval").body)
    except SyntaxError:
        raise DecodeError(f"unsupported expression operand {token!r}") from None
    return str(value & 0xFFFFFFFF)


def _parse_vmcnt(ins) -> int | None:
    text = " ".join(ins.operands + ins.modifiers)
    m = re.search(r"vmcnt\((\d+)\)", text)
    if m:
        return int(m.group(1))
    if ins.operands and re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", ins.operands[0]):
        raw = int(ins.operands[0], 0)
        return (raw & 0xF) | (((raw >> 14) & 3) << 4)
    return None


def _address_of_index(index: int) -> int:
    return CODE_BASE + 8 * index


def _index_of_address(addresses: np.ndarray) -> np.ndarray:
    offsets = addresses.astype(np.int64) - CODE_BASE
    if (offsets < 0).any() or (offsets % 8).any():
        raise EmulatorError("s_setpc/s_swappc to an address that is not an instruction")
    return offsets // 8


def _smem_read(P, sel, ins, addresses, nbytes, where):
    return P.global_load(ins, sel, addresses, nbytes, where, None, scalar=True)


def _decode_swap(ops):
    a, b = ops[0].index, ops[1].index

    def run(P, sel, n):
        active = P.exec_mask(sel)
        va, vb = P.vgpr[sel, a].copy(), P.vgpr[sel, b].copy()
        P.vgpr[sel, a] = np.where(active, vb, va)
        P.vgpr[sel, b] = np.where(active, va, vb)
        return int(np.count_nonzero(active))
    return run


def _decode_mfma(ins, ops, mods, mfma_ops):
    name = ins.mnemonic.replace("_e64", "")
    if name not in mfma_ops:
        raise DecodeError(f"opcode {name!r} is not implemented (no entry in mfma.MFMA_OPS)")
    op = mfma_ops[name]
    unknown = set(mods) - {"cbsz", "abid", "blgp", "neg"}
    if unknown or mods.get("neg"):
        raise DecodeError(f"unsupported MFMA modifier(s) {sorted(unknown) or ['neg']}")
    dst, a, b, c = ops
    for operand, regs, what in ((a, op.a_regs, "A"), (b, op.b_regs, "B"), (dst, op.c_regs, "D")):
        if operand.kind != "v" or operand.count != regs:
            raise DecodeError(f"MFMA {what} operand {operand.text!r} must be {regs} vector registers")
    if c.kind == "v" and c.count != op.c_regs:
        raise DecodeError(f"MFMA C operand {c.text!r} must be {op.c_regs} vector registers")
    if c.kind not in ("v", "const", "float"):
        raise DecodeError(f"MFMA C operand {c.text!r} is not supported")
    c_const = None
    if c.kind != "v":
        if c.kind == "const" and c.value != 0:
            raise DecodeError(f"MFMA C constant {c.text!r} is not supported (only 0)")
        c_const = 0.0 if c.kind == "const" else float(c.value)
    cbsz, abid, blgp = int(mods.get("cbsz", 0)), int(mods.get("abid", 0)), int(mods.get("blgp", 0))
    execute = op.execute
    arow, brow, crow, drow = a.index, b.index, c.index, dst.index
    na, nb, nc = op.a_regs, op.b_regs, op.c_regs

    def run(P, sel, n):
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
                            workspace=P.workspace)
        except NotImplementedError as err:
            raise EmulatorError(f"{ins.mnemonic} at line {ins.line_no} `{ins.text}`: {err}") from None
        if not direct:
            write_rows(P, sel, drow, nc, d_val.view(np.uint32), active, full)
        return lanes
    return run
