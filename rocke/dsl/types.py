"""Element types of the DSL and how each is represented in LLVM IR.

bf16 is carried as ``i16`` and the fp8 formats as ``i8``: gfx942's bf16 MFMAs take ``<N x i16>``
operands and its fp8 conversions work on packed integers, so integer carriers need no bitcasts at
those boundaries, and every rounding step is explicit DSL code the emulator can execute.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

# kind: "bool" | "sint" | "uint" | "float" | "bf16" | "fp8" | "ptr"
_FLOAT_IR = {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}
_PTR_ADDRSPACE = {"ptr_global": 1, "ptr_lds": 3, "buffer_rsrc": 8}


@dataclass(frozen=True)
class DType:
    """A scalar element type: ``name`` (as users spell it), width in bits and semantic kind."""

    name: str
    bits: int
    kind: str

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (not i1)."""
        return self.kind in ("sint", "uint")

    @property
    def is_float(self) -> bool:
        """Any floating-point format, including bf16 and fp8."""
        return self.kind in ("float", "bf16", "fp8")

    @property
    def is_signed(self) -> bool:
        return self.kind == "sint"

    @property
    def ir_type(self) -> ir.Type:
        if self.kind == "float":
            return _FLOAT_IR[self.bits]
        if self.kind == "ptr":
            return ir.PointerType(addrspace=_PTR_ADDRSPACE[self.name])
        return ir.IntType(self.bits)  # ints, i1, and the bf16 / fp8 carriers

    def vector_ir_type(self, lanes: int) -> ir.Type:
        return self.ir_type if lanes == 1 else ir.VectorType(self.ir_type, lanes)


i1 = DType("i1", 1, "bool")
i8 = DType("i8", 8, "sint")
i16 = DType("i16", 16, "sint")
i32 = DType("i32", 32, "sint")
i64 = DType("i64", 64, "sint")
u8 = DType("u8", 8, "uint")
u16 = DType("u16", 16, "uint")
u32 = DType("u32", 32, "uint")
u64 = DType("u64", 64, "uint")
f16 = DType("f16", 16, "float")
f32 = DType("f32", 32, "float")
f64 = DType("f64", 64, "float")
bf16 = DType("bf16", 16, "bf16")
fp8_e4m3fnuz = DType("fp8_e4m3fnuz", 8, "fp8")
fp8_e5m2fnuz = DType("fp8_e5m2fnuz", 8, "fp8")
# the OCP fp8 formats (OFP8 E4M3 / E5M2), gfx950's: bias 7 / 15, NaN S.1111.111 / IEEE-like
fp8_e4m3fn = DType("fp8_e4m3fn", 8, "fp8")
fp8_e5m2 = DType("fp8_e5m2", 8, "fp8")
# largest finite value of the fp8 formats (e4m3fnuz: 1.875 * 2^7; e5m2fnuz: 1.75 * 2^15;
# e4m3fn: 1.75 * 2^8, its top binade minus the NaN code; e5m2: 1.75 * 2^15)
FINITE_MAX = {"fp8_e4m3fnuz": 240.0, "fp8_e5m2fnuz": 57344.0, "fp8_e4m3fn": 448.0, "fp8_e5m2": 57344.0}
# the fp8 formats whose conversions a target has (the same v_cvt_* opcodes read fnuz codes on
# gfx942 and OCP codes on gfx950): (e4m3, e5m2) per target
FP8_FORMATS = {"gfx942": ("fp8_e4m3fnuz", "fp8_e5m2fnuz"), "gfx950": ("fp8_e4m3fn", "fp8_e5m2")}


class BFloatIR(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no such type); the DSL holds bf16 in i16 carriers and
    bitcasts to it where an instruction wants it (gfx950's wide-K MFMAs, native conversions)."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, BFloatIR)

    def __hash__(self):
        return hash("bfloat")


def bfloat_vector_ir_type(lanes: int) -> ir.Type:
    return BFloatIR() if lanes == 1 else ir.VectorType(BFloatIR(), lanes)


ptr_global = DType("ptr_global", 64, "ptr")
ptr_lds = DType("ptr_lds", 32, "ptr")
buffer_rsrc = DType("buffer_rsrc", 128, "ptr")

_BY_NAME = {
    t.name: t
    for t in (i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, f32, f64, bf16, fp8_e4m3fnuz, fp8_e5m2fnuz,
              fp8_e4m3fn, fp8_e5m2)
}
_ALIASES = {
    "bool": i1, "int8": i8, "int16": i16, "int32": i32, "int64": i64,
    "uint8": u8, "uint16": u16, "uint32": u32, "uint64": u64,
    "float16": f16, "half": f16, "float32": f32, "float": f32, "float64": f64,
    "bfloat16": bf16, "fp8e4m3": fp8_e4m3fnuz, "fp8e5m2": fp8_e5m2fnuz,
}

DTYPE_NAMES = tuple(_BY_NAME)


def dtype(spec: "DType | str") -> DType:
    """Resolve a DType or its name (``"f16"``, ``"bfloat16"``, ...) to a DType."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = _BY_NAME.get(spec) or _ALIASES.get(spec)
        if found is not None:
            return found
        raise ValueError(f"unknown dtype {spec!r}; known: {', '.join(DTYPE_NAMES)}")
    raise TypeError(f"expected a DType or dtype name, got {type(spec).__name__}")


def type_name(dt: DType, lanes: int) -> str:
    """``f32`` for scalars, ``f32x4`` for vectors: how errors name a value's type."""
    return dt.name if lanes == 1 else f"{dt.name}x{lanes}"
