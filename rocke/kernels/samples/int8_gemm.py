"""int8 GEMM sample with per-row / per-column fp32 scales and bf16 output:
C[M, N] = bf16((A[M, K] @ B[K, N]) * row_scale[M, None] * col_scale[None, :]), A and B int8
row-major, exact int32 accumulation (``v_mfma_i32_16x16x32_i8`` / ``32x32x16_i8``).

The main loop is the f16 GEMM's (``gemm.accumulate_tiles``: A staged as is, B transposed, ragged
M, N, K read as 0); the epilogue converts each i32 accumulator to f32, multiplies it by its rows'
and columns' scales (``load_axis``: one load per distinct row / column a lane holds) and stores
bf16 with masks at the ragged edges. Address limits as in ``gemm`` (i32 indices). Written with
public DSL calls only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.arch.mfma import atom_for
from rocke.dsl.fragment import PER_COL, PER_ROW, load_axis, store_fragment_global
from rocke.kernels.common.checks import (check_choice, check_device, check_i32_value, check_multiple,
                                         check_positive_int, check_tensor)
from rocke.kernels.samples.gemm import STAGING_VECTOR, accumulate_tiles

ATOMS = ("16x16x32", "32x32x16")
ARGS = ("a", "b", "row_scale", "col_scale", "c", "M", "N", "K", "lda", "ldb", "ldc")


@dataclass(frozen=True)
class Int8GemmSpec:
    atom: str = "16x16x32"
    block_m: int = 64
    block_n: int = 64
    block_k: int = 64
    num_warps: int = 4
    lds_pad: int = 8           # elements (bytes) appended to each LDS row; keeps 8-byte operands aligned

    dtype = "i8"               # the operands, for gemm.accumulate_tiles

    def __post_init__(self):
        check_choice("atom", self.atom, ATOMS)
        for name in ("block_m", "block_n", "block_k"):
            check_positive_int(name, getattr(self, name))
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8))
        a = atom_for(self.atom, "i8")
        check_multiple("block_m", self.block_m, self.warps_m * a.m,
                       of=f"warps_m ({self.warps_m}) x the atom's M ({a.m})")
        check_multiple("block_n", self.block_n, self.warps_n * a.n,
                       of=f"warps_n ({self.warps_n}) x the atom's N ({a.n})")
        check_multiple("block_k", self.block_k, math.lcm(a.k, STAGING_VECTOR),
                       of=f"the atom's K ({a.k}) and of the staging vector ({STAGING_VECTOR})")
        check_multiple("block_n", self.block_n, STAGING_VECTOR, of=f"the staging vector ({STAGING_VECTOR})")
        check_multiple("lds_pad", self.lds_pad, 8, because="operands are read from LDS 8 bytes at a time")

    @property
    def warps_n(self) -> int:
        return 1 if self.num_warps == 1 else 2

    @property
    def warps_m(self) -> int:
        return self.num_warps // self.warps_n

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"int8_gemm_{self.atom.replace('x', '_')}_m{self.block_m}n{self.block_n}"
                f"k{self.block_k}_w{self.num_warps}")


VARIANTS: dict[str, Int8GemmSpec] = {
    "i8_16x16x32": Int8GemmSpec("16x16x32"),
    "i8_32x32x16": Int8GemmSpec("32x32x16"),
}
GOLDEN_PERTURBATION = ("block_k", {64: 32, 32: 64})     # see rocke.kernels.registry


def launch_geometry(spec: Int8GemmSpec, M: int, N: int):
    return (-(-N // spec.block_n), -(-M // spec.block_m), 1), (spec.workgroup_size, 1, 1)


def kernel_args(spec: Int8GemmSpec, a, b, row_scale, col_scale, c) -> list:
    """Ordered arguments for torch tensors a [M, K] int8, b [K, N] int8, row_scale [M] and
    col_scale [N] float32, c [M, N] bfloat16 (unit column strides)."""
    check_tensor("a", a, dtype="i8", dims=("M", "K"), contiguous=False, one_buffer=False)
    check_tensor("b", b, dtype="i8", dims=("K", "N"), contiguous=False, one_buffer=False)
    check_tensor("c", c, dtype="bf16", dims=("M", "N"), contiguous=False, one_buffer=False)
    check_tensor("row_scale", row_scale, dtype="f32", dims=("M",))
    check_tensor("col_scale", col_scale, dtype="f32", dims=("N",))
    M, K = a.shape
    N = b.shape[1]
    if b.shape[0] != K or c.shape != (M, N) or row_scale.shape != (M,) or col_scale.shape != (N,):
        raise ValueError(f"shapes: a {tuple(a.shape)} @ b {tuple(b.shape)} -> c {tuple(c.shape)} with "
                         f"row_scale {tuple(row_scale.shape)}, col_scale {tuple(col_scale.shape)} do not match")
    lda, ldb, ldc = a.stride(0), b.stride(0), c.stride(0)
    for name, rows, ld in (("a", M, lda), ("b", K, ldb), ("c", M, ldc)):
        check_i32_value(name, rows * ld, "its buffer extent rows * ld")
    check_device({"a": a, "b": b, "row_scale": row_scale, "col_scale": col_scale, "c": c})
    return [a, b, row_scale, col_scale, c, M, N, K, lda, ldb, ldc]


def build(spec: Int8GemmSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    a = k.arg_ptr("a", "i8", readonly=True, strided=True)
    b = k.arg_ptr("b", "i8", readonly=True, strided=True)
    row_scale = k.arg_ptr("row_scale", "f32", readonly=True)
    col_scale = k.arg_ptr("col_scale", "f32", readonly=True)
    c = k.arg_ptr("c", "bf16", strided=True)
    M, N, K, lda, ldb, ldc = (k.arg_i32(n) for n in ARGS[5:])
    tiles, (c_buf, rows_buf, cols_buf) = accumulate_tiles(
        k, spec, a, b, M, N, K, lda, ldb,
        lambda: [c.buffer((M - 1) * ldc + N), row_scale.buffer(M), col_scale.buffer(N)])
    for acc, origin in tiles:
        m0, n0 = origin()
        scaled = acc.to("f32") * load_axis(rows_buf, acc.layout, PER_ROW, origin=m0)
        scaled = scaled * load_axis(cols_buf, acc.layout, PER_COL, origin=n0)
        store_fragment_global(c_buf, scaled.to("bf16"), (m0, n0), ldc, bounds=(M, N))
    return k


# `rocke profile int8_gemm/... --shape M=..,N=..,K=..`: the problem this family declares
def profile_tensors(spec: Int8GemmSpec, M: int = 256, N: int = 256, K: int = 256):
    """What profile_problem allocates: (dtype, {tensor: elements or (elements, dtype)})."""
    return "i8", {"a": M * K, "b": K * N, "row_scale": (M, "f32"), "col_scale": (N, "f32"),
                  "c": (M * N, "bf16")}


def profile_problem(spec: Int8GemmSpec, M: int = 256, N: int = 256, K: int = 256):
    import torch
    from rocke.perf.problems import Problem
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (M, K), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), generator=gen, dtype=torch.int8)
    row_scale, col_scale = torch.rand(M, generator=gen), torch.rand(N, generator=gen)
    c = torch.zeros(M, N, dtype=torch.bfloat16)
    grid, block = launch_geometry(spec, M, N)
    return Problem(grid, block, kernel_args(spec, a, b, row_scale, col_scale, c),
                   read_bytes=M * K + K * N + 4 * (M + N), write_bytes=2 * M * N, flops=2 * M * N * K)
