"""The MFMA catalog: every dense matrix-core atom rocke can emit (f16, bf16, fp8/bf8, i8, f32,
xf32, f64), with its LLVM intrinsic, operand types, shape, cost and lane <-> (block, row, col)
layout.

Layout convention (AMD's matrix instruction calculator, restated as formulas):
- A is M x K per block, B is K x N per block, C/D is M x N per block, `blocks` independent blocks.
- An A operand lane holds `k_per_lane` consecutive K elements of one row:
  lane = row + M * (block + blocks * (k // k_per_lane)), item = k % k_per_lane.
  B is the same with the column in place of the row.
- A C/D lane holds 4 consecutive rows per group of 4 registers:
  row_group = lane // N + (64 // N) * (reg // 4); global_row = 4 * row_group + reg % 4;
  block = global_row // M, row = global_row % M, col = lane % N.
  f64 accumulators (one double per register pair) differ (CDNA3 ISA): 16x16x4 value v of lane l
  is row 4 v + l // 16, col l % 16; 4x4x4_4b lane l is block (l // 4) % 4, row l // 16, col l % 4.
- gfx950's f8f6f4 atoms with 8-bit operands (32 a lane) hold K in runs of 16 (CDNA4 guide
  §7.1.5.1): item i of lane group g is k = 16 * G * (i // 16) + 16 * g + i % 16, G = 64 // M;
  their block scales (one E8M0 byte a lane: row or column l % M, K block l // M) count K so.

Costs: `passes` (4 cycles each) derive from MI300X's dense peak rate (512 f16 flop/clk/SIMD, fp8
twice that) for the K-reduction atoms; the multi-block atoms run at half that rate. The gfx950-only
atoms derive from MI355X's (2.5 PFLOPS f16 over 256 CUs at 2.4 GHz = 1024 f16 flop/clk/SIMD, fp8
twice that); atoms gfx950 shares with gfx942 keep gfx942's figure.

gfx950 (CDNA4) adds the doubled-K 16-bit atoms 16x16x32 / 32x32x16 (8 elements per lane, LLVM
intrinsics llvm.amdgcn.mfma.f32.16x16x32.f16 etc. on <8 x half> / <8 x bfloat>), and its fp8 is
the OCP E4M3 / E5M2 format (dtypes fp8_e4m3fn / fp8_e5m2, operand types fp8_ocp / bf8_ocp): the
16x16x32 / 32x32x16 fp8 intrinsics read OCP codes there, and the f8f6f4 atoms 16x16x128 / 32x32x64
(32 fp8 per lane, reached through llvm.amdgcn.mfma.scale.f32.*.f8f6f4 whose trailing arguments
after C are A format, B format, opsel A, scale A, opsel B, scale B; formats 0 = E4M3, 1 = E5M2).
Each was checked to select the named instruction with LLVM 22 for gfx950.
The emulator does NOT use this module (it derives MFMA semantics from the ISA independently).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .targets import DEFAULT_TARGET

WAVE = DEFAULT_TARGET.wave_size     # every CDNA MFMA layout is a wave64 layout

# operand element type -> (LLVM IR type of one lane's operand for 4 / 8 elements)
_IR_OPERAND = {
    ("f16", 4): "<4 x half>",
    ("bf16", 4): "<4 x i16>",
    ("fp8", 8): "i64",
    ("bf8", 8): "i64",
    ("f16", 8): "<8 x half>",
    ("bf16", 8): "<8 x bfloat>",
    ("fp8_ocp", 8): "i64",
    ("bf8_ocp", 8): "i64",
    ("fp8_ocp", 32): "<8 x i32>",
    ("bf8_ocp", 32): "<8 x i32>",
    ("i8", 4): "i32",
    ("i8", 8): "i64",
    ("i8", 16): "<4 x i32>",
    ("f32", 1): "float",
    ("xf32", 2): "<2 x float>",
    ("f64", 1): "double",
}
_IR_SCALAR = {"f32": "float", "i32": "i32", "f64": "double"}


@dataclass(frozen=True)
class MfmaAtom:
    key: str                 # catalog key, e.g. "32x32x8_f16"
    mnemonic: str            # as LLVM prints it for gfx942
    intrinsic: str           # llvm.amdgcn.* name
    a_type: str              # f16 | bf16 | fp8 | bf8 | fp8_ocp | bf8_ocp | i8 | f32 | xf32 | f64
    b_type: str
    m: int
    n: int
    k: int
    blocks: int
    passes: int
    targets: tuple[str, ...] = ("gfx942", "gfx950")
    acc_type: str = "f32"    # f32 | i32 (i8 atoms) | f64

    # -- sizes ---------------------------------------------------------------------------
    @property
    def cycles(self) -> int:
        return 4 * self.passes

    @property
    def k_per_lane(self) -> int:
        return self.m * self.k * self.blocks // WAVE

    @property
    def acc_regs(self) -> int:
        return self.m * self.n * self.blocks // WAVE

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.blocks

    @property
    def ir_operand_type(self) -> str:
        return _IR_OPERAND[(self.a_type, self.k_per_lane)]

    @property
    def ir_acc_type(self) -> str:
        scalar = _IR_SCALAR[self.acc_type]
        return scalar if self.acc_regs == 1 else f"<{self.acc_regs} x {scalar}>"

    @property
    def scaled(self) -> bool:
        """Whether the atom takes block scales (gfx950's f8f6f4 atoms, LLVM's mfma.scale)."""
        return self.intrinsic.startswith("llvm.amdgcn.mfma.scale.")

    @property
    def k_run(self) -> int:
        """How many consecutive K one lane holds in a run (see the module docstring)."""
        return 16 if self.scaled else self.k_per_lane

    # -- layouts --------------------------------------------------------------------------
    def a_coord(self, lane: int, item: int) -> tuple[int, int, int]:
        """(block, row, k) of A held by `lane` at operand element `item`."""
        return self._operand_coord(self.m, lane, item)

    def b_coord(self, lane: int, item: int) -> tuple[int, int, int]:
        """(block, k, col) of B held by `lane` at operand element `item`."""
        block, col, k = self._operand_coord(self.n, lane, item)
        return block, k, col

    def c_coord(self, lane: int, reg: int) -> tuple[int, int, int]:
        """(block, row, col) of C/D held by `lane` in accumulator register `reg` (for f64, the
        register pair `reg`)."""
        if self.acc_type == "f64":
            if self.blocks == 1:
                return 0, 4 * reg + lane // 16, lane % 16
            return (lane // 4) % self.blocks, lane // 16, lane % 4
        row_group = lane // self.n + (WAVE // self.n) * (reg // 4)
        global_row = 4 * row_group + reg % 4
        return global_row // self.m, global_row % self.m, lane % self.n

    def _operand_coord(self, extent: int, lane: int, item: int) -> tuple[int, int, int]:
        if not (0 <= lane < WAVE and 0 <= item < self.k_per_lane):
            raise ValueError(f"{self.key}: lane {lane} / item {item} out of range")
        q = lane // extent
        run, k_groups = self.k_run, WAVE // extent // self.blocks
        k = (item // run) * run * k_groups + (q // self.blocks) * run + item % run
        return q % self.blocks, lane % extent, k

    @cached_property
    def a_table(self) -> np.ndarray:
        """int array [64, k_per_lane, 3]: (block, row, k) per lane and item."""
        return np.array([[self.a_coord(l, i) for i in range(self.k_per_lane)] for l in range(WAVE)])

    @cached_property
    def b_table(self) -> np.ndarray:
        """int array [64, k_per_lane, 3]: (block, k, col) per lane and item."""
        return np.array([[self.b_coord(l, i) for i in range(self.k_per_lane)] for l in range(WAVE)])

    @cached_property
    def c_table(self) -> np.ndarray:
        """int array [64, acc_regs, 3]: (block, row, col) per lane and register."""
        return np.array([[self.c_coord(l, r) for r in range(self.acc_regs)] for l in range(WAVE)])


def _atoms() -> list[MfmaAtom]:
    out = []
    # (m, n, k, blocks, passes) for the 16-bit families; intrinsic suffix spelled per LLVM.
    shapes16 = [(32, 32, 8, 1, 8), (16, 16, 16, 1, 4), (32, 32, 4, 2, 16), (16, 16, 4, 4, 8),
                (4, 4, 4, 16, 2)]
    for m, n, k, b, passes in shapes16:
        blk = f"_{b}b" if b > 1 else ""
        shape = f"{m}x{n}x{k}"
        out.append(MfmaAtom(f"{shape}{blk}_f16", f"v_mfma_f32_{shape}{blk}_f16",
                            f"llvm.amdgcn.mfma.f32.{shape}f16", "f16", "f16", m, n, k, b, passes))
        out.append(MfmaAtom(f"{shape}{blk}_bf16", f"v_mfma_f32_{shape}{blk}_bf16",
                            f"llvm.amdgcn.mfma.f32.{shape}bf16.1k", "bf16", "bf16", m, n, k, b, passes))
    for m, n, k, passes in [(16, 16, 32, 4), (32, 32, 16, 8)]:
        shape = f"{m}x{n}x{k}"
        for a in ("fp8", "bf8"):
            for bt in ("fp8", "bf8"):
                out.append(MfmaAtom(f"{shape}_{a}_{bt}", f"v_mfma_f32_{shape}_{a}_{bt}",
                                    f"llvm.amdgcn.mfma.f32.{shape}.{a}.{bt}", a, bt, m, n, k, 1, passes,
                                    targets=("gfx942",)))
    # gfx950 only: doubled-K 16-bit atoms
    for m, n, k, passes in [(16, 16, 32, 4), (32, 32, 16, 8)]:
        shape = f"{m}x{n}x{k}"
        for t in ("f16", "bf16"):
            out.append(MfmaAtom(f"{shape}_{t}", f"v_mfma_f32_{shape}_{t}",
                                f"llvm.amdgcn.mfma.f32.{shape}.{t}", t, t, m, n, k, 1, passes,
                                targets=("gfx950",)))
    # gfx950 fp8 (OCP): the gfx942-shaped atoms (gfx942's cost) and the f8f6f4 atoms
    for m, n, k, passes, mnemonic, intrinsic in [
            (16, 16, 32, 4, None, None), (32, 32, 16, 8, None, None),
            (16, 16, 128, 8, "v_mfma_f32_16x16x128_f8f6f4",
             "llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4"),
            (32, 32, 64, 16, "v_mfma_f32_32x32x64_f8f6f4",
             "llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4")]:
        shape = f"{m}x{n}x{k}"
        for a in ("fp8", "bf8"):
            for bt in ("fp8", "bf8"):
                out.append(MfmaAtom(f"{shape}_{a}_{bt}_ocp", mnemonic or f"v_mfma_f32_{shape}_{a}_{bt}",
                                    intrinsic or f"llvm.amdgcn.mfma.f32.{shape}.{a}.{bt}",
                                    f"{a}_ocp", f"{bt}_ocp", m, n, k, 1, passes,
                                    targets=("gfx950",)))
    # i8 (i32 accumulators), f32, xf32 (gfx942 only) and f64: (key shape, m, n, k, blocks,
    # passes, LLVM intrinsic suffix, targets)
    both, g942, g950 = ("gfx942", "gfx950"), ("gfx942",), ("gfx950",)
    for a, acc, rows in [
            ("i8", "i32", [("32x32x4_2b", 32, 32, 4, 2, 16, "32x32x4i8", both),
                           ("16x16x4_4b", 16, 16, 4, 4, 8, "16x16x4i8", both),
                           ("4x4x4_16b", 4, 4, 4, 16, 2, "4x4x4i8", both),
                           ("32x32x16", 32, 32, 16, 1, 8, "32x32x16.i8", both),
                           ("16x16x32", 16, 16, 32, 1, 4, "16x16x32.i8", both),
                           ("32x32x32", 32, 32, 32, 1, 8, "32x32x32.i8", g950),
                           ("16x16x64", 16, 16, 64, 1, 4, "16x16x64.i8", g950)]),
            ("f32", "f32", [("32x32x1_2b", 32, 32, 1, 2, 16, "32x32x1f32", both),
                            ("16x16x1_4b", 16, 16, 1, 4, 8, "16x16x1f32", both),
                            ("4x4x1_16b", 4, 4, 1, 16, 2, "4x4x1f32", both),
                            ("32x32x2", 32, 32, 2, 1, 16, "32x32x2f32", both),
                            ("16x16x4", 16, 16, 4, 1, 8, "16x16x4f32", both)]),
            ("xf32", "f32", [("32x32x4", 32, 32, 4, 1, 8, "32x32x4.xf32", g942),
                             ("16x16x8", 16, 16, 8, 1, 4, "16x16x8.xf32", g942)]),
            ("f64", "f64", [("16x16x4", 16, 16, 4, 1, 8, "16x16x4f64", both),
                            ("4x4x4_4b", 4, 4, 4, 4, 4, "4x4x4f64", both)])]:
        for shape, m, n, k, b, passes, suffix, targets in rows:
            out.append(MfmaAtom(f"{shape}_{a}", f"v_mfma_{acc}_{shape}_{a}",
                                f"llvm.amdgcn.mfma.{acc}.{suffix}", a, a, m, n, k, b, passes,
                                targets=targets, acc_type=acc))
    return out


MFMA_CATALOG: dict[str, MfmaAtom] = {a.key: a for a in _atoms()}

# element dtype names the DSL uses -> MFMA operand type names
_DTYPE_TO_OPERAND = {"f16": "f16", "bf16": "bf16", "fp8_e4m3fnuz": "fp8", "fp8_e5m2fnuz": "bf8",
                     "fp8_e4m3fn": "fp8_ocp", "fp8_e5m2": "bf8_ocp", "i8": "i8", "f32": "f32",
                     "f64": "f64"}
# operand types whose atoms share one element dtype: xf32 atoms read f32 registers
_SAME_DTYPE = {"xf32": "f32"}


def operand_type(dtype: str) -> str | None:
    """The MFMA operand type name ('f16', 'bf16', 'fp8', 'bf8', 'i8', 'f32', ...) of an element
    dtype, else None."""
    return _DTYPE_TO_OPERAND.get(dtype)


def takes_dtype(operand: str, dtype: str) -> bool:
    """Whether an atom operand of type `operand` ('xf32', 'fp8', ...) is fed `dtype` fragments."""
    return operand_type(dtype) == _SAME_DTYPE.get(operand, operand)


def get_atom(key: str, target: str = "gfx942") -> MfmaAtom:
    """Look up an atom by catalog key ('32x32x8_f16'); error names the valid keys for `target`."""
    atom = MFMA_CATALOG.get(key)
    base = target.split(":", 1)[0]
    if atom is None or base not in atom.targets:
        valid = sorted(k for k, a in MFMA_CATALOG.items() if base in a.targets)
        raise ValueError(f"no MFMA atom {key!r} on {base}; valid atoms: {', '.join(valid)}")
    return atom


def atom_for(shape: str, a_dtype: str, b_dtype: str | None = None, target: str = "gfx942") -> MfmaAtom:
    """Atom for a shape ('32x32x8') and element dtypes ('f16', 'bf16', 'fp8_e4m3fnuz', ...)."""
    try:
        a = _DTYPE_TO_OPERAND[a_dtype]
        b = _DTYPE_TO_OPERAND[b_dtype or a_dtype]
    except KeyError as e:
        raise ValueError(f"no MFMA operand type for dtype {e.args[0]!r}; "
                         f"supported: {sorted(_DTYPE_TO_OPERAND)}") from None
    if a.endswith("_ocp") and b.endswith("_ocp"):
        key = f"{shape}_{a[:-4]}_{b[:-4]}_ocp"
    elif a in ("fp8", "bf8") and b in ("fp8", "bf8"):
        key = f"{shape}_{a}_{b}"
    elif a != b:
        raise ValueError(f"no MFMA multiplies {a_dtype} by {b_dtype}; only fp8/bf8 operands "
                         f"mix (both fnuz on gfx942, both OCP on gfx950)")
    elif a == "f32" and f"{shape}_f32" not in MFMA_CATALOG and f"{shape}_xf32" in MFMA_CATALOG:
        key = f"{shape}_xf32"       # the xf32 shapes are f32 fragments too
    else:
        key = f"{shape}_{a}"
    return get_atom(key, target)
