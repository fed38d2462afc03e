"""The samples written with the DSL's newer pieces (views, axis vectors, structured carries,
math, paged copies, the cross-wave merge) run in the emulator and match torch, with 0 spills."""

import numpy as np
import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.samples import gemm_bias_gelu, paged_decode, rmsnorm_residual
from rocke.runtime import launch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def _run(kernel, grid, block, args):
    ck = compile_ir(kernel.ir(), name=kernel.name)
    assert ck.info.vgpr_spills == 0 and ck.info.sgpr_spills == 0
    launch(ck, grid, block, args)


@pytest.mark.parametrize("name", sorted(rmsnorm_residual.VARIANTS))
def test_rmsnorm_residual_matches_torch(name):
    spec = rmsnorm_residual.VARIANTS[name]
    dt = TORCH[spec.dtype]
    rows, cols = 5, 3 * 64 * spec.vector_width + spec.vector_width * 5    # a ragged last chunk
    gen = torch.Generator().manual_seed(7)
    x, res = torch.randn(rows, cols, generator=gen).to(dt), torch.randn(rows, cols, generator=gen).to(dt)
    w = (torch.rand(cols, generator=gen) + 0.5).to(dt)
    y = torch.zeros(rows + 1, cols, dtype=dt)
    residual = res.clone()
    grid, block = rmsnorm_residual.launch_geometry(spec, rows=rows, cols=cols)
    _run(rmsnorm_residual.build(spec), grid, block,
         rmsnorm_residual.kernel_args(spec, x, residual, w, y[:rows], eps=1e-5))
    h = (x.float() + res.float()).to(dt)
    assert torch.equal(residual, h)
    hf = h.float()
    ref = hf * torch.rsqrt(hf.pow(2).mean(dim=1, keepdim=True) + 1e-5) * w.float()
    atol = {"f16": 4e-3, "bf16": 3e-2}[spec.dtype]      # one rounding of |y| <= ~4 to the output type
    np.testing.assert_allclose(y[:rows].float().numpy(), ref.numpy(), atol=atol, rtol=0)
    assert torch.equal(y[rows], torch.zeros(cols, dtype=dt))


def test_rmsnorm_residual_rejects_ragged_vector():
    spec = rmsnorm_residual.VARIANTS["f16_v8"]
    with pytest.raises(ValueError, match="cols: 1001 must be a multiple of the spec's vector_width"):
        rmsnorm_residual.launch_geometry(spec, rows=2, cols=1001)


@pytest.mark.parametrize("name", sorted(gemm_bias_gelu.VARIANTS))
def test_gemm_bias_gelu_matches_torch(name):
    spec = gemm_bias_gelu.VARIANTS[name]
    dt = TORCH[spec.gemm.dtype]
    M, N, K = 70, 75, 40                                   # ragged in every dimension
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(M, K, generator=gen).to(dt), (torch.randn(K, N, generator=gen) * 0.3).to(dt)
    bias = torch.randn(N, generator=gen).to(dt)
    c = torch.full((M + 2, N), 9.0, dtype=dt)
    grid, block = gemm_bias_gelu.launch_geometry(spec, M, N, K)
    _run(gemm_bias_gelu.build(spec), grid, block, gemm_bias_gelu.kernel_args(spec, a, b, bias, c[:M]))
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate=spec.approximate)
    atol = {"f16": 6e-3, "bf16": 4e-2}[spec.gemm.dtype]  # one rounding of |c| < ~5 plus f32 sums
    np.testing.assert_allclose(c[:M].double().numpy(), ref.numpy(), atol=atol, rtol=0)
    assert torch.equal(c[M:], torch.full((2, N), 9.0, dtype=dt))


@pytest.mark.parametrize("name", sorted(paged_decode.VARIANTS))
def test_paged_decode_matches_reference(name):
    spec = paged_decode.VARIANTS[name]
    dt = TORCH[spec.dtype]
    kv_heads, D, page = 2, spec.head_dim, spec.page_size
    seq_lens = torch.tensor([1, 37, spec.tile_tokens * 2 + 5], dtype=torch.int32)   # ragged tiles
    max_blocks = -(-int(seq_lens.max()) // page)
    num_blocks = len(seq_lens) * max_blocks + 3
    gen = torch.Generator().manual_seed(9)
    perm = torch.randperm(num_blocks, generator=gen)[:len(seq_lens) * max_blocks].int()
    block_tables = perm.reshape(len(seq_lens), max_blocks).contiguous()
    q = torch.randn(len(seq_lens), kv_heads * spec.gqa_group, D, generator=gen).to(dt)
    k_cache = torch.randn(num_blocks, page, kv_heads, D, generator=gen).to(dt)
    v_cache = torch.randn(num_blocks, page, kv_heads, D, generator=gen).to(dt)
    out = torch.full_like(q, 5.0)
    grid, block = paged_decode.launch_geometry(spec, num_seqs=len(seq_lens), num_kv_heads=kv_heads)
    _run(paged_decode.build(spec), grid, block,
         paged_decode.kernel_args(spec, q, k_cache, v_cache, out, block_tables, seq_lens))
    cu = torch.arange(len(seq_lens) + 1, dtype=torch.int32)
    ref = ref_paged_attn(q, k_cache, v_cache, cu, seq_lens, block_tables, 1.0 / D ** 0.5, causal=True)
    np.testing.assert_allclose(out.float().numpy(), ref.numpy(), atol=attention_atol(spec.dtype), rtol=0)


def test_paged_decode_rejects_bad_inputs_before_launch():
    spec = paged_decode.VARIANTS["f16_d128_g8"]
    q = torch.zeros(1, 16, 128, dtype=torch.float16)
    cache = torch.zeros(4, 16, 2, 128, dtype=torch.float16)
    table = torch.zeros(1, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="seq_lens: must be in"):
        paged_decode.kernel_args(spec, q, cache, cache, q.clone(), table, torch.tensor([0], dtype=torch.int32))
    with pytest.raises(ValueError, match="block_tables: entries"):
        paged_decode.kernel_args(spec, q, cache, cache, q.clone(), table + 7, torch.tensor([3], dtype=torch.int32))
    with pytest.raises(ValueError, match="gqa_group"):
        paged_decode.kernel_args(spec, q[:, :8], cache, cache, q[:, :8].clone(), table, torch.tensor([3], dtype=torch.int32))
