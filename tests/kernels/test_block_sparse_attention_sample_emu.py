"""The block-sparse attention sample (f16/bf16, D=64, a runtime [q_blocks, k_blocks] mask) in the
emulator against torch: a dense float64 softmax over the keys the block mask keeps (and keys < S),
rows with no kept key giving 0."""

import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.samples import block_sparse_attention as bsa
from rocke.runtime import launch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def reference(q, k, v, block_mask, spec, scale):
    S = q.shape[2]
    keep = block_mask.bool().repeat_interleave(spec.block_m, 0).repeat_interleave(spec.block_n, 1)[:S, :S]
    scores = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double()) * scale
    scores = scores.masked_fill(~keep, float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)        # a row with no kept key: all 0
    return torch.einsum("bhqk,bhkd->bhqd", p, v.double())


@pytest.mark.parametrize("variant, B, H, S", [("f16_d64", 1, 2, 200), ("bf16_d64", 2, 1, 128)])
def test_block_sparse_attention_matches_torch(variant, B, H, S):
    spec = bsa.VARIANTS[variant]
    dt = TORCH[spec.dtype]
    gen = torch.Generator().manual_seed(S + B)
    q, k, v = (torch.randn(B, H, S, 64, generator=gen).to(dt) for _ in range(3))
    qb, kb = bsa.mask_shape(spec, S)
    block_mask = (torch.rand(qb, kb, generator=gen) < 0.5).to(torch.int32)
    block_mask[0] = 0                                    # a query block with no keys at all
    block_mask[1, -1] = 1                                # a kept ragged last key block (S=200)
    block_mask[1, 0] = 0
    o = torch.full_like(q, float("nan"))
    ck = compile_ir(bsa.build(spec), cache=False)
    grid, block = bsa.launch_geometry(spec, B, H, S)
    launch(ck, grid, block, bsa.kernel_args(spec, q, k, v, o, block_mask))
    ref = reference(q, k, v, block_mask, spec, 64 ** -0.5)
    tol = 2e-2 if spec.dtype == "bf16" else 4e-3
    torch.testing.assert_close(o.double(), ref, atol=tol, rtol=tol)
    assert torch.equal(o[:, :, :spec.block_m], torch.zeros_like(o[:, :, :spec.block_m]))


def test_block_sparse_attention_refuses_a_wrong_mask():
    spec = bsa.VARIANTS["f16_d64"]
    q = torch.zeros(1, 1, 100, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"block_mask: shape \(2, 1\), expected \(2, 2\)"):
        bsa.kernel_args(spec, q, q, q, q, torch.ones(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="block_mask: dtype must be torch.int32"):
        bsa.kernel_args(spec, q, q, q, q, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="head dim 128"):
        big = torch.zeros(1, 1, 100, 128, dtype=torch.float16)
        bsa.kernel_args(spec, big, big, big, big, torch.ones(2, 2, dtype=torch.int32))
