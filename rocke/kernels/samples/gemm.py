"""Tiled GEMM sample: C[M, N] = A[M, K] @ B[K, N], row-major, f16/bf16 in and out, f32 accumulation.

Each workgroup computes a ``block_m x block_n`` tile of C; its warps tile that block as a
``warps_m x warps_n`` grid, each warp holding ``(block_m / warps_m) x (block_n / warps_n)`` of C as
MFMA accumulator fragments carried through a runtime K loop. Per K step the A tile is staged
global -> LDS as is, the B tile transposed (``B^T``, so each lane's B operand is contiguous in
LDS); buffer loads read 0 past the matrices' ends and columns past K / N are zeroed, so ragged
M, N, K need no special cases. The epilogue stores C with per-element masks for ragged edges.

Address width (``check_problem``): each buffer's extent is ``rows * ld`` elements computed in
i32 (``M * lda``, ``K * ldb``, ``M * ldc`` <= 2**31 - 1, hence < 2**32 bytes of num_records for
16-bit elements), and every element index ``row * ld + col`` is i32. The staging of B^T reads
rows up to K rounded up to block_k with no row mask: those reads must land past the extent
(reading 0, which the zeroed A columns multiply), not wrap back into B, so
``(K rounded up - 1) * ldb + N - 1`` must stay <= 2**31 - 1. (A's rows past M only feed C rows
that are never stored, A's columns past K and C's ragged edges are masked.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.arch.mfma import atom_for
from rocke.dsl.fragment import copy_tile_to_lds, load_fragment, store_fragment_global
from rocke.kernels.common.checks import (check_choice, check_device, check_extent, check_i32_value,
                                         check_lds_budget, check_multiple, check_positive_int,
                                         check_register_budget, check_tensor, round_up)

DTYPES = ("f16", "bf16")
ATOMS = ("32x32x8", "16x16x16")
STAGING_VECTOR = 8          # elements per global load of a staging copy (16 bytes)


@dataclass(frozen=True)
class GemmSpec:
    dtype: str = "f16"
    atom: str = "32x32x8"
    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    num_warps: int = 4
    lds_pad: int = 8           # elements appended to each LDS row (bank spreading; keeps 16 B rows)

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("atom", self.atom, ATOMS)
        for name in ("block_m", "block_n", "block_k"):
            check_positive_int(name, getattr(self, name))
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8))
        check_positive_int("lds_pad", self.lds_pad, allow_zero=True)
        a = atom_for(self.atom, self.dtype)
        check_multiple("block_m", self.block_m, self.warps_m * a.m,
                       of=f"warps_m ({self.warps_m}) x the atom's M ({a.m})")
        check_multiple("block_n", self.block_n, self.warps_n * a.n,
                       of=f"warps_n ({self.warps_n}) x the atom's N ({a.n})")
        check_multiple("block_k", self.block_k, math.lcm(a.k, STAGING_VECTOR),
                       of=f"the atom's K ({a.k}) and of the staging vector ({STAGING_VECTOR})")
        check_multiple("block_n", self.block_n, STAGING_VECTOR, of=f"the staging vector ({STAGING_VECTOR})")
        check_multiple("lds_pad", self.lds_pad, 4, because="operands are read from LDS 8 bytes at a time")
        lds = 2 * (self.block_m * (self.block_k + self.lds_pad) + self.block_n * (self.block_k + self.lds_pad))
        check_lds_budget("block_m/block_n/block_k", lds, "the A and B^T tiles")
        accumulators = (self.block_m // self.warps_m) * (self.block_n // self.warps_n) // 64
        check_register_budget("block_m/block_n", accumulators, "each warp's fp32 C accumulators")

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
        return (f"gemm_{self.dtype}_{self.atom.replace('x', '_')}_m{self.block_m}n{self.block_n}"
                f"k{self.block_k}_w{self.num_warps}")


VARIANTS: dict[str, GemmSpec] = {
    "f16_32x32x8": GemmSpec("f16", "32x32x8"),
    "f16_16x16x16": GemmSpec("f16", "16x16x16"),
    "bf16_32x32x8": GemmSpec("bf16", "32x32x8"),
    "bf16_16x16x16": GemmSpec("bf16", "16x16x16"),
}
GOLDEN_PERTURBATION = ("block_k", {32: 16, 16: 32, 64: 32})     # see rocke.kernels.registry

ARGS = ("a", "b", "c", "M", "N", "K", "lda", "ldb", "ldc")


def launch_geometry(spec: GemmSpec, M: int, N: int, K: int):
    """(grid in workgroups, block in threads) for C[M, N] = A[M, K] @ B[K, N]."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        check_extent(name, v)
    return (-(-N // spec.block_n), -(-M // spec.block_m), 1), (spec.workgroup_size, 1, 1)


def check_problem(spec: GemmSpec, *, M: int, N: int, K: int, lda: int, ldb: int, ldc: int) -> None:
    """Sizes and leading dimensions fit the kernel's address arithmetic (module docstring)."""
    for name, v in (("M", M), ("N", N), ("K", K), ("lda", lda), ("ldb", ldb), ("ldc", ldc)):
        check_extent(name, v)
    for name, rows, ld, what in (("a", M, lda, "M * lda"), ("b", K, ldb, "K * ldb"), ("c", M, ldc, "M * ldc")):
        check_i32_value(name, rows * ld, f"its buffer extent {what}")
    check_i32_value("b", (round_up(K, spec.block_k) - 1) * ldb + N - 1,
                    f"the largest staged B index (K rounded up to {spec.block_k} - 1) * ldb + N - 1")


def kernel_args(spec: GemmSpec, a, b, c) -> list:
    """The kernel's ordered arguments for torch tensors a [M, K], b [K, N], c [M, N] (row-major
    with unit column stride; leading dims may exceed the row length)."""
    for name, t, dims in (("a", a, ("M", "K")), ("b", b, ("K", "N")), ("c", c, ("M", "N"))):
        check_tensor(name, t, dtype=spec.dtype, dims=dims, contiguous=False, one_buffer=False)
    M, K = a.shape
    if b.shape[0] != K or c.shape != (M, b.shape[1]):
        raise ValueError(f"shapes: a {tuple(a.shape)} @ b {tuple(b.shape)} -> c {tuple(c.shape)} do not match")
    N = b.shape[1]
    lda, ldb, ldc = a.stride(0), b.stride(0), c.stride(0)
    check_problem(spec, M=M, N=N, K=K, lda=lda, ldb=ldb, ldc=ldc)
    check_device({"a": a, "b": b, "c": c})
    return [a, b, c, M, N, K, lda, ldb, ldc]


def build(spec: GemmSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    # row-major with leading dimensions lda/ldb/ldc: views with padded rows are accepted
    a = k.arg_ptr("a", spec.dtype, readonly=True, strided=True)
    b = k.arg_ptr("b", spec.dtype, readonly=True, strided=True)
    c = k.arg_ptr("c", spec.dtype, strided=True)
    M, N, K, lda, ldb, ldc = (k.arg_i32(n) for n in ARGS[3:])
    tiles, (c_buf,) = accumulate_tiles(k, spec, a, b, M, N, K, lda, ldb, lambda: [c.buffer((M - 1) * ldc + N)])
    for acc, origin in tiles:
        at = origin()
        store_fragment_global(c_buf, acc.to(spec.dtype), at, ldc, bounds=(M, N))
    return k


def accumulate_tiles(k, spec: GemmSpec, a, b, M, N, K, lda, ldb, epilogue_buffers=lambda: []):
    """The workgroup's main loop: ``[(accumulator fragment, origin)]`` for this wave (f32, after
    the whole K reduction; ``origin()`` emits the (row, col) of the fragment's tile in C), and the buffers ``epilogue_buffers()`` makes
    (called next to the A/B buffers, so the IR keeps one order). Epilogues: see gemm_bias_gelu."""
    mma = k.mfma(spec.atom, spec.dtype)
    am, an, ak = mma.atom.m, mma.atom.n, mma.atom.k
    warp_m, warp_n = spec.block_m // spec.warps_m, spec.block_n // spec.warps_n
    frags_m, frags_n = warp_m // am, warp_n // an

    a_tile = k.lds("a_tile", (spec.block_m, spec.block_k), spec.dtype, pad=spec.lds_pad)
    bt_tile = k.lds("bt_tile", (spec.block_n, spec.block_k), spec.dtype, pad=spec.lds_pad)
    # each extent ends at the view's last element: the rows' padding past it is not the kernel's
    a_buf, b_buf = a.buffer((M - 1) * lda + K), b.buffer((K - 1) * ldb + N)
    extra = epilogue_buffers()
    m0 = k.block_id(1) * spec.block_m
    n0 = k.block_id(0) * spec.block_n
    wave = k.wave_id()
    warp_row = (wave // spec.warps_n) * warp_m
    warp_col = (wave % spec.warps_n) * warp_n
    tid = k.thread_id(0)

    with k.for_range(0, K, spec.block_k, carry=[mma.zeros() for _ in range(frags_m * frags_n)]) as loop:
        k0 = loop.index
        acc = list(loop.carry)
        copy_tile_to_lds(a_buf, a_tile, (m0, k0), lda, thread_index=tid, threads=spec.workgroup_size,
                         vector=STAGING_VECTOR, cols_limit=K)
        copy_tile_to_lds(b_buf, bt_tile, (k0, n0), ldb, thread_index=tid, threads=spec.workgroup_size,
                         vector=STAGING_VECTOR, cols_limit=N, transpose=True)
        k.barrier()
        for ks in range(0, spec.block_k, ak):
            a_ops = [load_fragment(a_tile, mma.A, (warp_row + i * am, ks)) for i in range(frags_m)]
            b_ops = [load_fragment(bt_tile, mma.B, (ks, warp_col + j * an), transposed=True)
                     for j in range(frags_n)]
            acc = [mma(a_ops[i], b_ops[j], acc[i * frags_n + j])
                   for i in range(frags_m) for j in range(frags_n)]
        k.barrier()     # the next step overwrites the tiles
        loop.yield_(*acc)
    acc = loop.results
    return [(acc[i * frags_n + j], lambda i=i, j=j: (m0 + warp_row + i * am, n0 + warp_col + j * an))
            for i in range(frags_m) for j in range(frags_n)], extra
