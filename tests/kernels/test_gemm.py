"""The GEMM sample in the gfx942 emulator against torch fp32, ragged M/N/K and leading dims."""

import numpy as np
import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.samples import gemm
from rocke.runtime import launch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
# relative half-ulp of the output rounding (x2) plus fp32 accumulation-order slack
REL = {"f16": 2 ** -10, "bf16": 2 ** -7}


def _run_gemm(spec, A, B, C):
    k = gemm.build(spec)
    ck = compile_ir(k.ir(), name=k.name)
    M, K = A.shape
    grid, block = gemm.launch_geometry(spec, M, B.shape[1], K)
    launch(ck, grid, block, gemm.kernel_args(spec, A, B, C))


@pytest.mark.parametrize("name", sorted(gemm.VARIANTS))
@pytest.mark.parametrize("M, N, K", [(70, 50, 40), (5, 130, 7)])
def test_gemm_matches_torch(name, M, N, K):
    spec = gemm.VARIANTS[name]
    dt = TORCH[spec.dtype]
    gen = torch.Generator().manual_seed(M * N + K)
    A = torch.randn(M, K, generator=gen).to(dt)
    B = torch.randn(K, N, generator=gen).to(dt)
    C = torch.zeros(M, N, dtype=dt)
    _run_gemm(spec, A, B, C)
    ref = A.float() @ B.float()
    err = (C.float() - ref).abs()
    assert (err <= ref.abs() * REL[spec.dtype] + 1e-3).all(), f"max error {err.max().item()}"


@pytest.mark.parametrize("spec", [gemm.GemmSpec("bf16", "32x32x8", 128, 128, 32, 8),
                                  gemm.GemmSpec("f16", "16x16x16", 32, 32, 16, 1, lds_pad=0)],
                         ids=["bf16_8_warps", "f16_1_warp_unpadded"])
def test_gemm_non_default_geometries(spec):
    M, N, K = 150, 140, 100
    dt = TORCH[spec.dtype]
    gen = torch.Generator().manual_seed(4)
    A, B = torch.randn(M, K, generator=gen).to(dt), torch.randn(K, N, generator=gen).to(dt)
    C = torch.zeros(M, N, dtype=dt)
    _run_gemm(spec, A, B, C)
    ref = A.float() @ B.float()
    err = (C.float() - ref).abs()
    assert (err <= ref.abs() * REL[spec.dtype] + 1e-3).all(), f"max error {err.max().item()}"


def test_gemm_leading_dims_and_untouched_padding():
    """Operands are column slices of wider matrices; C's padding columns keep their sentinel."""
    spec = gemm.VARIANTS["f16_16x16x16"]
    M, N, K = 33, 20, 24
    gen = torch.Generator().manual_seed(3)
    A = torch.randn(M, K + 5, generator=gen).half()[:, :K]
    B = torch.randn(K, N + 3, generator=gen).half()[:, :N]
    C_full = torch.full((M, N + 11), -7.0, dtype=torch.float16)
    C = C_full[:, :N]
    _run_gemm(spec, A, B, C)
    ref = A.float() @ B.float()
    np.testing.assert_allclose(C.float().numpy(), ref.numpy(), rtol=2 ** -10, atol=1e-3)
    assert torch.equal(C_full[:, N:], torch.full((M, 11), -7.0, dtype=torch.float16))


@pytest.mark.parametrize("name", sorted(gemm.VARIANTS))
def test_gemm_variants_compile_without_spills(name):
    k = gemm.build(gemm.VARIANTS[name])
    info = compile_ir(k.ir(), name=k.name).info
    assert info.vgpr_spills == 0 and info.sgpr_spills == 0
    assert info.vgprs + info.agprs <= 128


@pytest.mark.parametrize("fields, message", [
    (dict(dtype="f32"), "dtype: must be one of f16, bf16"),
    (dict(atom="4x4x4"), "atom: must be one of"),
    (dict(block_m=48), "block_m: 48 must be a multiple of warps_m"),
    (dict(block_n=32, atom="32x32x8"), "block_n: 32 must be a multiple of warps_n"),
    (dict(block_k=12), "block_k: 12 must be a multiple"),
    (dict(num_warps=3), "num_warps: must be one of 1, 2, 4, 8, got 3"),
    (dict(lds_pad=2), "lds_pad: 2 must be a multiple of 4"),
    (dict(block_m=0), "block_m: must be a positive int"),
    (dict(block_m=512, block_n=512, block_k=64), r"A and B\^T tiles need \d+ bytes of LDS"),
])
def test_gemm_spec_validation(fields, message):
    with pytest.raises(ValueError, match=message):
        gemm.GemmSpec(**fields)


def test_gemm_args_validation():
    spec = gemm.VARIANTS["f16_32x32x8"]
    a, b = torch.zeros(4, 8, dtype=torch.float16), torch.zeros(8, 3, dtype=torch.float16)
    with pytest.raises(ValueError, match="c: dtype must be"):
        gemm.kernel_args(spec, a, b, torch.zeros(4, 3))
    with pytest.raises(ValueError, match="shapes"):
        gemm.kernel_args(spec, a, b, torch.zeros(4, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="unit column stride"):
        gemm.kernel_args(spec, a.t(), b, torch.zeros(8, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match="M: must be an int"):
        gemm.launch_geometry(spec, 0, 4, 4)
