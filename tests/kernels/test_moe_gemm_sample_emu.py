"""The fused MoE expert GEMM sample (top-2 of 8 experts, bf16, atomic accumulation) in the
emulator against torch: each route's product in float64, scaled by its router weight and rounded
to bf16 as the kernel's epilogue does, then the token's two routes summed and rounded once more
(the second packed bf16 atomic add)."""

import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.samples import moe_gemm
from rocke.runtime import launch

E, TOP_K = 8, 2


def _routing(T, gen):
    logits = torch.randn(T, E, generator=gen)
    logits[:, 0] += 4.0          # expert 0 busy (more than one block of routes)
    logits[:, 3] -= 100.0        # expert 3 never chosen: its workgroups must do nothing
    weights, experts = torch.softmax(logits, -1).topk(TOP_K, dim=-1)
    return experts, weights


@pytest.mark.parametrize("variant, shape", [("bf16_16x16x16", (40, 70, 72)),    # ragged N (odd pairs), K
                                            ("bf16_32x32x8", (72, 64, 64))])
def test_moe_gemm_matches_torch(variant, shape):
    spec = moe_gemm.VARIANTS[variant]
    T, N, K = shape
    gen = torch.Generator().manual_seed(T + N + K)
    x = torch.randn(T, K, generator=gen).bfloat16()
    w = (torch.randn(E, K, N, generator=gen) / K ** 0.5).bfloat16()
    experts, weights = _routing(T, gen)
    rows, route_w, offsets = moe_gemm.sort_routes(experts, weights, E)
    assert int(offsets[1] - offsets[0]) > spec.block_m and int(offsets[4] - offsets[3]) == 0
    out = torch.zeros(T, N, dtype=torch.bfloat16)
    ck = compile_ir(moe_gemm.build(spec), cache=False)
    assert "global_atomic_pk_add_bf16" in ck.asm
    grid, block = moe_gemm.launch_geometry(spec, N, offsets)
    launch(ck, grid, block, moe_gemm.kernel_args(spec, x, w, rows, route_w, offsets, out))

    per_route = torch.einsum("tk,tjkn->tjn", x.double(), w.double()[experts])    # [T, top_k, N]
    rounded = (per_route * weights.double()[..., None].float().double()).to(torch.bfloat16)
    ref = (rounded[:, 0].float() + rounded[:, 1].float()).to(torch.bfloat16)
    # the f32 accumulation order differs from float64: one bf16 step at most
    torch.testing.assert_close(out.float(), ref.float(), rtol=2 ** -7, atol=1e-3)
    dense = sum(weights[:, j, None].double() * per_route[:, j] for j in range(TOP_K))
    torch.testing.assert_close(out.double(), dense, rtol=2 ** -6, atol=2e-2)


def test_moe_gemm_refuses_bad_routes():
    spec = moe_gemm.VARIANTS["bf16_16x16x16"]
    x, w = torch.zeros(4, 32, dtype=torch.bfloat16), torch.zeros(E, 32, 64, dtype=torch.bfloat16)
    out = torch.zeros(4, 64, dtype=torch.bfloat16)
    rows, route_w, offsets = moe_gemm.sort_routes(torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 2), E)
    bad = rows.clone()
    bad[0] = 9
    with pytest.raises(ValueError, match=r"route_rows must name tokens in \[0, 4\)"):
        moe_gemm.kernel_args(spec, x, w, bad, route_w, offsets, out)
    with pytest.raises(ValueError, match="expert_offsets must rise"):
        moe_gemm.kernel_args(spec, x, w, rows, route_w, offsets.flip(0).contiguous(), out)
    with pytest.raises(ValueError, match=r"expert_ids must lie in \[0, 8\)"):
        moe_gemm.sort_routes(torch.full((4, 2), 8), torch.ones(4, 2), E)
    with pytest.raises(ValueError, match="block_k"):
        moe_gemm.MoeGemmSpec(block_k=24)
