"""GEMM with a bias + GELU epilogue: C = gelu(A @ B + bias), A [M, K], B [K, N] row-major,
bias [N] (one value per column), f16 / bf16 in and out, f32 accumulation and epilogue.

The main loop is the tiled GEMM sample's (``gemm.accumulate_tiles``). The epilogue adds the
bias as a per-column vector (``load_axis``: one entry per column of the accumulator, read once
and broadcast over the rows) and applies ``dsl.gelu`` (erf form, or the tanh approximation)
in registers before the masked store.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke import dsl
from rocke.dsl.fragment import PER_COL, load_axis, store_fragment_global
from rocke.kernels.common.checks import check_choice, check_tensor
from rocke.kernels.samples import gemm


@dataclass(frozen=True)
class GemmBiasGeluSpec:
    gemm: gemm.GemmSpec = gemm.GemmSpec()
    approximate: str = "none"       # GELU form: "none" (erf, torch's default) | "tanh"

    def __post_init__(self):
        if not isinstance(self.gemm, gemm.GemmSpec):
            raise ValueError(f"gemm: must be a GemmSpec, got {type(self.gemm).__name__}")
        check_choice("approximate", self.approximate, ("none", "tanh"))

    @property
    def workgroup_size(self) -> int:
        return self.gemm.workgroup_size

    @property
    def kernel_name(self) -> str:
        return f"{self.gemm.kernel_name.replace('gemm_', 'gemm_bias_gelu_', 1)}_{self.approximate}"


VARIANTS = {
    "f16_32x32x8_erf": GemmBiasGeluSpec(gemm.GemmSpec("f16", "32x32x8"), "none"),
    "bf16_16x16x16_tanh": GemmBiasGeluSpec(gemm.GemmSpec("bf16", "16x16x16"), "tanh"),
}
GOLDEN_PERTURBATION = ("approximate", {"none": "tanh", "tanh": "none"})     # see rocke.kernels.registry

ARGS = ("a", "b", "bias", "c", "M", "N", "K", "lda", "ldb", "ldc")


def launch_geometry(spec: GemmBiasGeluSpec, M: int, N: int, K: int):
    return gemm.launch_geometry(spec.gemm, M, N, K)


def kernel_args(spec: GemmBiasGeluSpec, a, b, bias, c) -> list:
    """Ordered kernel arguments for a [M, K], b [K, N], bias [N], c [M, N]."""
    args = gemm.kernel_args(spec.gemm, a, b, c)
    check_tensor("bias", bias, dtype=spec.gemm.dtype, dims=("N",))
    if bias.shape[0] != b.shape[1]:
        raise ValueError(f"bias: {bias.shape[0]} entries for N = {b.shape[1]} columns")
    return args[:2] + [bias] + args[2:]


def build(spec: GemmBiasGeluSpec) -> dsl.Kernel:
    g = spec.gemm
    k = dsl.Kernel(spec.kernel_name, workgroup_size=g.workgroup_size)
    a = k.arg_ptr("a", g.dtype, readonly=True, strided=True)    # leading dimensions lda/ldb/ldc
    b = k.arg_ptr("b", g.dtype, readonly=True, strided=True)
    bias = k.arg_ptr("bias", g.dtype, readonly=True)
    c = k.arg_ptr("c", g.dtype, strided=True)
    M, N, K, lda, ldb, ldc = (k.arg_i32(n) for n in ARGS[4:])
    tiles, (bias_buf, c_buf) = gemm.accumulate_tiles(k, g, a, b, M, N, K, lda, ldb,
                                                     lambda: [bias.buffer(N), c.buffer((M - 1) * ldc + N)])
    for acc, origin in tiles:
        row0, col0 = origin()
        per_column = load_axis(bias_buf, acc.layout, PER_COL, origin=col0)      # reads 0 past N
        out = (acc + per_column.map(lambda v: v.to(dsl.f32))).map(
            lambda v: dsl.gelu(v, approximate=spec.approximate))
        store_fragment_global(c_buf, out.to(g.dtype), (row0, col0), ldc, bounds=(M, N))
    return k
