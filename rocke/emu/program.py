"""Decode a kernel's instructions once into batched closures."""
from __future__ import annotations

import ast
import dataclasses
import operator
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .access import scalar_writer
from .asm import Instr, KernelSource, Program
from .errors import DecodeError, EmulatorError
from .operands import OperandError, parse_modifiers, parse_operand
from .mfma_decode import decode_mfma
from .valu import decode_valu
from . import cdna4, control, gfx950, memops, mxcvt, salu, smem

CLASSES = ("SALU", "VALU", "MFMA", "DS", "VMEM", "SMEM", "branch/other")
SALU, VALU, MFMA, DS, VMEM, SMEM, OTHER = range(7)
# Pseudo addresses for s_getpc/s_setpc: instruction i lives at CODE_BASE + 8 * i.
CODE_BASE = 0x7F0000000000

NO_OPS = {"s_nop", "s_setprio", "s_sleep", "s_dcache_inv", "s_dcache_wb", "s_icache_inv",
          "s_dcache_inv_vol", "s_dcache_wb_vol", "s_waitcnt_depctr", "s_sched_barrier",
          "s_ttracedata", "s_set_inst_prefetch_distance", "v_nop", "s_setkill", "s_sethalt_0"}
RUNTIME_STOPS = {"s_trap": "the kernel executed s_trap (a trap or failed device assert)",
                 "s_sendmsg": "s_sendmsg is not implemented"}
HWREG_INSTRUCTIONS = ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32")
SAVEEXEC = re.compile(r"^s_(and|or|xor|andn1|andn2|orn1|orn2|nand|nor|xnor)_saveexec_b64$|^s_andn[12]_wrexec_b64$")
BRANCHES = {"s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
            "s_cbranch_execz", "s_cbranch_execnz", "s_getpc_b64", "s_setpc_b64", "s_swappc_b64",
            "s_call_b64"}


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
    # wave-instructions per wave of the last launch (0: none yet): how launch() sizes the work
    # of the next one when deciding whether to run it in parallel
    issues_per_wave: float = 0.0


HW_REG_MODE = 1
_HWREG_IDS = {"HW_REG_MODE": HW_REG_MODE}
# MODE bits whose values the emulator models (CDNA3 ISA, MODE register): FP_ROUND [3:0],
# FP_DENORM [7:4], DX10_CLAMP [8], IEEE [9], FP16_OVFL [23] (finite overflow of f16 and f32->fp8
# results saturates). A write of any other bit stops the decode unless it leaves that bit at its
# reset value.
FP16_OVFL_BIT = 23
_MODELLED_MODE_BITS = 0x3FF | (1 << FP16_OVFL_BIT)
_MODE_NOT_MODELLED = {"IEEE=0 (non-IEEE min/max NaN rules)": (9, 1, 1),
                      "DX10_CLAMP=0 (clamp keeps NaN)": (8, 1, 1)}


class _Context:
    """Numeric state the decoder bakes into closures: the MODE register as it stands at each
    instruction in program order (from the descriptor, then every `s_setreg*` on MODE)."""

    def __init__(self, descriptor):
        mode = int(descriptor.get("amdhsa_float_round_mode_32", 0)) & 3
        mode |= (int(descriptor.get("amdhsa_float_round_mode_16_64", 0)) & 3) << 2
        mode |= (int(descriptor.get("amdhsa_float_denorm_mode_32", 3)) & 3) << 4
        mode |= (int(descriptor.get("amdhsa_float_denorm_mode_16_64", 3)) & 3) << 6
        mode |= (int(descriptor.get("amdhsa_dx10_clamp", 1)) & 1) << 8
        mode |= (int(descriptor.get("amdhsa_ieee_mode", 1)) & 1) << 9
        mode |= (int(descriptor.get("amdhsa_fp16_overflow", 0)) & 1) << FP16_OVFL_BIT
        self.mode = mode
        self.getreg_values: dict[int, int] = {}   # instruction index -> what s_getreg_b32 read

    @property
    def round_mode_32(self) -> int:
        """0 nearest even, 1 toward +inf, 2 toward -inf, 3 toward zero (f32 results)."""
        return self.mode & 3

    @property
    def round_mode_16_64(self) -> int:
        return (self.mode >> 2) & 3

    @property
    def fp16_overflow(self) -> bool:
        """MODE.FP16_OVFL: finite f16 / f32->fp8 results that overflow saturate to max."""
        return bool((self.mode >> FP16_OVFL_BIT) & 1)

    @property
    def denorm_mode_32(self) -> int:
        return (self.mode >> 4) & 3

    @property
    def denorm_mode_16_64(self) -> int:
        return (self.mode >> 6) & 3

    def write_mode(self, offset: int, size: int, value: int):
        field = ((1 << size) - 1) << offset
        new = (self.mode & ~field) | ((value << offset) & field)
        if new & ~_MODELLED_MODE_BITS:
            raise DecodeError(f"MODE bits {new & ~_MODELLED_MODE_BITS:#x} (exception enables, "
                              "GPR_IDX_EN, ...) are not emulated")
        for what, (bit, _, reset) in _MODE_NOT_MODELLED.items():
            if (new >> bit) & 1 != reset:
                raise DecodeError(f"MODE {what} is not emulated")
        self.mode = new

    def flush_functions(self):
        if self.denorm_mode_32 == 3 and self.denorm_mode_16_64 == 3:
            return {}
        from . import numerics
        return {"f32": numerics.flush_f32_denormals, "f16": numerics.flush_f16_denormals,
                "f64": lambda x: x}


def _load_semantics(target: str = "gfx942"):
    try:
        from . import semantics
    except ImportError as err:
        raise EmulatorError(f"rocke.emu.semantics is not available ({err})") from None
    if target == "gfx950":
        return _gfx950_valu_ops(semantics), semantics.SALU_OPS
    return semantics.VALU_OPS, semantics.SALU_OPS


def _load_mfma(target: str = "gfx942"):
    try:
        from . import mfma
    except ImportError as err:
        raise EmulatorError(f"rocke.emu.mfma is not available ({err})") from None
    if target == "gfx950":
        return _gfx950_mfma_ops(mfma)
    return mfma.MFMA_OPS


_TARGET_TABLES: dict = {}


def _gfx950_valu_ops(semantics):
    if "valu" not in _TARGET_TABLES:
        _TARGET_TABLES["valu"] = gfx950.build_valu_ops(semantics.VALU_OPS, semantics.AluOp)
    return _TARGET_TABLES["valu"]


def _gfx950_mfma_ops(mfma):
    if "mfma" not in _TARGET_TABLES:
        _TARGET_TABLES["mfma"] = gfx950.mfma_ops(mfma.MFMA_OPS, mfma.MfmaOp, mfma.IndexedMfmaOp)
    return _TARGET_TABLES["mfma"]



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


def decode_kernel(program: Program, kernel: KernelSource, target: str = "gfx942") -> DecodedKernel:
    """Decode `kernel` for `target` ('gfx942' or 'gfx950'): opcodes the target lacks are refused."""
    target = gfx950.check_target(target)
    d = kernel.descriptor
    accum_offset = int(d.get("amdhsa_accum_offset", d.get("amdhsa_next_free_vgpr", 1)))
    agprs = int(kernel.metadata.get(".agpr_count", 0) or 0)
    num_vector_regs = max(int(d.get("amdhsa_next_free_vgpr", 1)), accum_offset + agprs, 1)
    entries = sorted(k.entry for k in program.kernels.values())
    # a kernel's code ends where the next function or kernel symbol begins
    starts = sorted(set(entries) | {program.labels[f] for f in program.functions if f in program.labels})
    end = next((e for e in starts if e > kernel.entry), len(program.instrs))
    ctx = _Context(d)
    addressing = _code_addressing(program)
    ctx.index_of_address, ctx.address_of_index = addressing
    valu_ops = salu_ops = mfma_ops = None
    labels = program.labels
    code: list[Decoded | None] = [None] * len(program.instrs)
    targets = np.zeros(len(program.instrs) + 1, bool)
    own = range(kernel.entry, end)
    # code outside every kernel (device functions reached by s_swappc_b64) is decoded too; an
    # instruction there that cannot be decoded stops the launch only if a wave executes it
    ranges = [(e, next((f for f in starts if f > e), len(program.instrs))) for e in entries]
    shared = [i for i in range(len(program.instrs)) if not any(a <= i < b for a, b in ranges)]
    for region, strict in ((own, True), (shared, False)):
        if not strict:
            ctx = _Context(d)
            ctx.index_of_address, ctx.address_of_index = addressing
        for index in region:
            ins = program.instrs[index]
            try:
                if any("@" in t for t in ins.operands):
                    ins = dataclasses.replace(ins, operands=[_resolve_relocation(t, program, index)
                                                             for t in ins.operands])
                if ins.mnemonic in HWREG_INSTRUCTIONS:
                    code[index] = _decode_hwreg(ins, index, program, kernel, ctx)
                    continue
                cls = classify(ins.mnemonic)
                if cls in (VALU, SALU) and valu_ops is None:
                    valu_ops, salu_ops = _load_semantics(target)
                if cls == MFMA and mfma_ops is None:
                    mfma_ops = _load_mfma(target)
                gfx950.gate(ins.mnemonic, ins.modifiers, target)
                decoded = _decode_one(ins, index, cls, kernel, accum_offset, num_vector_regs, ctx,
                                      valu_ops, salu_ops, mfma_ops, labels, target)
            except (DecodeError, OperandError, KeyError, IndexError, NotImplementedError,
                    ValueError) as err:
                if target == "gfx950":   # a gfx950 opcode refused by name says why
                    err = cdna4.refusal(ins.mnemonic) or err
                message = _where(ins, kernel.name) + f": {err}"
                if strict:
                    raise EmulatorError(message) from None

                def stop(P, sel, n, message=message):
                    raise EmulatorError(message)
                decoded = Decoded(stop, OTHER, None, ins)
            decoded.writes_exec = _writes_exec(ins)
            code[index] = decoded
            if ins.mnemonic in BRANCHES:
                for token in ins.operands:
                    if token in labels:
                        targets[labels[token]] = True
    shared_set = set(shared)
    for name, index in labels.items():
        if (kernel.entry <= index < end or index in shared_set) and not name.startswith(".Lfunc_end"):
            targets[index] = True
    start = kernel.entry
    if int(d.get("amdhsa_user_sgpr_kernarg_preload_length", 0)) > 0:
        if kernel.preload_entry is None or kernel.preload_entry >= end:
            raise EmulatorError(f"kernel {kernel.name}: kernarg preloading is enabled but no "
                                "256-byte aligned entry (`.p2align 8`) follows the prologue")
        start = kernel.preload_entry
    return DecodedKernel(kernel, code, kernel.entry, start, targets, num_vector_regs, accum_offset)


_RELOCATION = re.compile(r"^([.A-Za-z_$][\w.$]*)@(rel32|abs32)@(lo|hi)([-+]\d+)?$")


def _resolve_relocation(token: str, program: Program, index: int) -> str:
    """`f@rel32@lo+4` / `f@rel32@hi+12` (a call target made pc-relative to the preceding
    s_getpc_b64) and `f@abs32@lo/hi` -> the value in the emulator's pseudo code addresses. The
    addends only correct for real instruction sizes, so the pc-relative value is taken against
    the address s_getpc_b64 returned, which is what the hardware sum amounts to."""
    m = _RELOCATION.match(token)
    if not m:
        if "@" in token:
            raise DecodeError(f"unsupported relocation operand {token!r}")
        return token
    name, kind, half = m.group(1), m.group(2), m.group(3)
    if name not in program.labels:
        raise DecodeError(f"relocation {token!r}: {name!r} is not defined in this assembly "
                          "(external device-library symbols are not linked)")
    value = _address_of_index(program.labels[name])
    if kind == "rel32":
        getpc = next((i for i in range(index - 1, max(-1, index - 16), -1)
                      if program.instrs[i].mnemonic == "s_getpc_b64"), None)
        if getpc is None:
            raise DecodeError(f"relocation {token!r} has no s_getpc_b64 shortly before it")
        value -= _address_of_index(getpc + 1)
    value &= 0xFFFFFFFFFFFFFFFF
    return str(value & 0xFFFFFFFF if half == "lo" else value >> 32)


_HWREG = re.compile(r"^hwreg\(\s*(\w+)\s*(?:,\s*(\d+)\s*,\s*(\d+)\s*)?\)$")


def _hwreg_field(token: str) -> tuple[int, int, int]:
    """`hwreg(HW_REG_MODE, 4, 2)` / `hwreg(1)` / a raw simm16 -> (register id, offset, size)."""
    m = _HWREG.match(token.replace(" ", "") if token.startswith("hwreg") else token)
    if m:
        name = m.group(1)
        reg = _HWREG_IDS.get(name, int(name, 0) if name.isdigit() else -1)
        if reg < 0:
            raise DecodeError(f"hardware register {name} is not emulated")
        offset = int(m.group(2)) if m.group(2) else 0
        size = int(m.group(3)) if m.group(3) else 32
        return reg, offset, size
    if re.fullmatch(r"(0x[0-9a-fA-F]+|\d+)", token):
        raw = int(token, 0)
        return raw & 0x3F, (raw >> 6) & 0x1F, ((raw >> 11) & 0x1F) + 1
    raise DecodeError(f"unsupported hardware-register operand {token!r}")


def _static_sgpr_value(program: Program, index: int, register: str, ctx=None) -> int:
    """The constant an SGPR holds at `index`, when straight-line code just before set it with
    s_mov_b32 / s_movk_i32 (how compilers materialise a MODE value for s_setreg_b32) or saved it
    with s_getreg_b32 (the save/restore pattern around a temporary mode switch)."""
    entry_points = set(program.labels.values())
    for i in range(index - 1, max(-1, index - 32), -1):
        ins = program.instrs[i]
        if i + 1 in entry_points or ins.mnemonic in BRANCHES:
            break
        if ins.operands and ins.operands[0] == register:
            if ins.mnemonic in ("s_mov_b32", "s_movk_i32") and re.fullmatch(
                    r"-?(0x[0-9a-fA-F]+|\d+)", ins.operands[1]):
                return int(ins.operands[1], 0) & 0xFFFFFFFF
            if ins.mnemonic == "s_getreg_b32" and ctx is not None and i in ctx.getreg_values:
                return ctx.getreg_values[i]
            break
    raise DecodeError(f"s_setreg_b32 from {register}, whose value is not a constant set just "
                      "before: run-time MODE writes are not emulated")


def _decode_hwreg(ins, index, program, kernel, ctx) -> Decoded:
    """s_setreg* on MODE change the numerics of every instruction decoded after them (program
    order); s_getreg_b32 of MODE reads that state. Both are resolved while decoding."""
    name = ins.mnemonic
    if len(ins.operands) != 2:
        raise DecodeError(f"{name} expects 2 operands")
    if name == "s_getreg_b32":
        reg, offset, size = _hwreg_field(ins.operands[1])
        if reg != HW_REG_MODE:
            raise DecodeError(f"s_getreg_b32 of hardware register {reg} is not emulated")
        value = (ctx.mode >> offset) & ((1 << size) - 1)
        ctx.getreg_values[index] = value
        write = scalar_writer(parse_operand(ins.operands[0], 0, 1), "b32")
        return Decoded(lambda P, sel, n: write(P, sel, np.full(n, value, np.uint32)) or 0,
                       SALU, None, ins)
    reg, offset, size = _hwreg_field(ins.operands[0])
    if reg != HW_REG_MODE:
        raise DecodeError(f"{name} to hardware register {reg} is not emulated")
    token = ins.operands[1]
    if name == "s_setreg_imm32_b32":
        value = int(token, 0) & 0xFFFFFFFF
    else:
        value = _static_sgpr_value(program, index, token, ctx)
    ctx.write_mode(offset, size, value)
    return Decoded(lambda P, sel, n: 0, SALU, None, ins)


def _writes_exec(ins: Instr) -> bool:
    name = ins.mnemonic
    return ("saveexec" in name or "wrexec" in name or name.startswith("v_cmpx")
            or bool(ins.operands) and ins.operands[0].startswith("exec"))


def _where(ins: Instr, kernel: str) -> str:
    return f"kernel {kernel}, {ins.at}"


def _decode_one(ins, index, cls, kernel, accum_offset, num_vector_regs, ctx, valu_ops,
                salu_ops, mfma_ops, labels, target="gfx942"):
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
        run = control.decode_branch(ins, ops, labels, ctx.index_of_address, ctx.address_of_index)
        return Decoded(run, OTHER, "branch", ins)
    if name in ("s_memtime", "s_memrealtime"):
        return Decoded(control.decode_misc_scalar(ins, ops, mods), OTHER, None, ins)
    if cls == SMEM:
        return Decoded(smem.decode_smem(ins, ops, mods, _smem_read), SMEM, None, ins)
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
        if target == "gfx950" and "_tr_b" in name:
            return Decoded(gfx950.decode_ds_transpose(ins, ops, mods), DS, None, ins)
        return Decoded(memops.decode_ds(ins, ops, mods), DS, None, ins)
    if cls == MFMA:
        if target == "gfx950" and name in cdna4.SCALED_MFMAS:
            return Decoded(cdna4.decode_scaled_mfma(ins, ops, mods, mfma_ops), MFMA, None, ins)
        return Decoded(decode_mfma(ins, ops, mods, mfma_ops), MFMA, None, ins)
    base = re.sub(r"_(e32|e64|sdwa|dpp)$", "", name)
    if target == "gfx950":
        cdna4.check_modifiers(base, ops, mods, ctx.mode)
        if base in ("v_permlane16_swap_b32", "v_permlane32_swap_b32"):
            return Decoded(gfx950.decode_permlane_swap(ins, ops, mods), VALU, None, ins)
        if base in ("v_bitop3_b32", "v_bitop3_b16"):
            table = int(mods.pop("bitop3", 0))
            from .semantics import AluOp
            op = gfx950.bitop3_op(table, 32 if base.endswith("32") else 16, AluOp)
            return Decoded(decode_valu(ins, mods, ops, {base: op}, ctx), VALU, None, ins)
        if base in mxcvt.OPS:
            return Decoded(mxcvt.decode(ins, ops, mods, ctx), VALU, None, ins)
        encodes = base.endswith("_f32")   # f32 -> fp8: FP16_OVFL changes its overflow result
        gfx950.check_fp8_op_sel(base, mods, encodes)
        if base in gfx950.FP8_CONVERSIONS and (
                mods.get("clamp") or (encodes and ctx.fp16_overflow)):
            raise DecodeError(f"{base} with clamp / FP16_OVFL (saturating OCP fp8) is not "
                              "emulated on gfx950")
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


def _code_addressing(program: Program):
    """(index_of_address, address_of_index) for s_getpc/s_setpc/s_swappc: the code object's own
    byte addresses when the program came from one, else 8 bytes per instruction."""
    if not program.has_addresses:
        return _index_of_address, _address_of_index
    byte_address = np.array([ins.address for ins in program.instrs], np.int64)
    order = np.argsort(byte_address)
    sorted_addresses = byte_address[order]

    def address_of_index(index: int) -> int:
        return CODE_BASE + int(byte_address[index])

    def index_of_address(addresses: np.ndarray) -> np.ndarray:
        offsets = addresses.astype(np.int64) - CODE_BASE
        position = np.clip(np.searchsorted(sorted_addresses, offsets), 0, len(order) - 1)
        if (sorted_addresses[position] != offsets).any():
            raise EmulatorError("s_setpc/s_swappc to an address that is not an instruction")
        return order[position]
    return index_of_address, address_of_index


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
