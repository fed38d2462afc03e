"""The int8 GEMM sample (per-row / per-column fp32 scales, bf16 out) in the emulator against torch:
an exact int64 matmul, scaled in float64, rounded once to bf16 -- the kernel's only rounding
besides the f32 products of the scales."""

import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.samples import int8_gemm
from rocke.runtime import launch


@pytest.mark.parametrize("spec, shape", [
    (int8_gemm.Int8GemmSpec(), (70, 45, 100)),                                  # ragged M, N, K
    (int8_gemm.Int8GemmSpec("32x32x16", block_m=32, block_n=64, block_k=32, num_warps=2), (40, 64, 64)),
])
def test_int8_gemm_matches_torch(spec, shape):
    M, N, K = shape
    gen = torch.Generator().manual_seed(M + N + K)
    a = torch.randint(-128, 128, (M, K), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), generator=gen, dtype=torch.int8)
    row_scale = torch.rand(M, generator=gen) * 1e-3
    col_scale = torch.rand(N, generator=gen) + 0.5
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    ck = compile_ir(int8_gemm.build(spec), cache=False)
    assert f"v_mfma_i32_{spec.atom}_i8" in ck.asm
    grid, block = int8_gemm.launch_geometry(spec, M, N)
    launch(ck, grid, block, int8_gemm.kernel_args(spec, a, b, row_scale, col_scale, c))

    exact = (a.long() @ b.long()).double()
    ref = exact * row_scale.double()[:, None] * col_scale.double()[None, :]
    # f32 products of the scales (two roundings) before the one bf16 rounding
    torch.testing.assert_close(c.double(), ref.to(torch.bfloat16).double(), rtol=2 ** -8, atol=0)
    assert not c.isnan().any()


def test_int8_gemm_spec_refuses_bad_tiles():
    with pytest.raises(ValueError, match="block_k"):
        int8_gemm.Int8GemmSpec(block_k=48)
    with pytest.raises(ValueError, match="atom"):
        int8_gemm.Int8GemmSpec(atom="16x16x16")
