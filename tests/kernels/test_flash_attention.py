"""The dense flash-attention sample in the gfx942 emulator against a torch fp32 reference."""

import math

import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.samples import flash_attention as fa
from rocke.runtime import launch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
# the parity gate (ALGORITHM.md) halved: P is rounded to the input type for PV
ATOL = {"f16": 1e-2, "bf16": 2e-2}


def reference(q, k, v, causal: bool, scale: float):
    """softmax(Q K^T * scale + mask) V in fp32, bottom-right-aligned causal mask."""
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    sq, sk = q.shape[2], k.shape[2]
    if causal:
        future = torch.triu(torch.ones(sq, sk, dtype=torch.bool), diagonal=sk - sq + 1)
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, dim=-1) @ v.float()


_COMPILED = {}


def _compiled(name):
    if name not in _COMPILED:
        k = fa.build(fa.VARIANTS[name])
        _COMPILED[name] = compile_ir(k.ir(), name=k.name)
    return _COMPILED[name]


@pytest.mark.parametrize("name", sorted(fa.VARIANTS))
@pytest.mark.parametrize("S", [1, 37, 100, 130])
def test_flash_attention_matches_reference(name, S):
    spec = fa.VARIANTS[name]
    dt = TORCH[spec.dtype]
    B, H, D = 2, 1, spec.head_dim
    gen = torch.Generator().manual_seed(S * D)
    q, k, v = (torch.randn(B, H, S, D, generator=gen).to(dt) for _ in range(3))
    o = torch.full((B, H, S, D), 9.0, dtype=dt)
    scale = 0.3 if S == 37 else None
    grid, block = fa.launch_geometry(spec, B, H, S)
    launch(_compiled(name), grid, block, fa.kernel_args(spec, q, k, v, o, scale))
    ref = reference(q, k, v, spec.causal, scale if scale is not None else 1 / math.sqrt(D))
    err = (o.float() - ref).abs().max().item()
    assert err <= ATOL[spec.dtype], f"max abs error {err}"


@pytest.mark.parametrize("spec", [
    fa.FlashAttentionSpec("bf16", 128, True, block_m=64, block_n=32, num_warps=2, atom="32x32x8"),
    fa.FlashAttentionSpec("f16", 64, False, block_m=128, block_n=64, num_warps=4),   # 2 query fragments/warp
], ids=["bf16_32x32x8_w2", "f16_two_query_fragments"])
def test_non_default_geometries(spec):
    S, D = 77, spec.head_dim
    dt = TORCH[spec.dtype]
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, S, D, generator=gen).to(dt) for _ in range(3))
    o = torch.zeros_like(q)
    kern = fa.build(spec)
    grid, block = fa.launch_geometry(spec, 1, 2, S)
    launch(compile_ir(kern.ir(), name=kern.name), grid, block, fa.kernel_args(spec, q, k, v, o))
    err = (o.float() - reference(q, k, v, spec.causal, 1 / math.sqrt(D))).abs().max().item()
    assert err <= ATOL[spec.dtype], f"max abs error {err}"


def test_flash_attention_leaves_memory_past_the_output_untouched():
    spec = fa.VARIANTS["f16_d64_causal"]
    B, H, S, D = 1, 2, 20, 64
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, S, D, generator=gen).half() for _ in range(3))
    storage = torch.full((B * H * S * D + 4096,), 9.0, dtype=torch.float16)
    o = storage[:B * H * S * D].view(B, H, S, D)
    grid, block = fa.launch_geometry(spec, B, H, S)
    launch(_compiled("f16_d64_causal"), grid, block, fa.kernel_args(spec, q, k, v, o))
    assert torch.equal(storage[B * H * S * D:], torch.full((4096,), 9.0, dtype=torch.float16))
    assert (o.float() - reference(q, k, v, True, 1 / 8)).abs().max().item() <= ATOL["f16"]


def test_causal_skips_future_kv_tiles():
    """S = 2 * block_m = 2 * block_n: the causal kernel runs QK/PV MFMAs for 3 of the 4
    (query block, KV tile) pairs, the full one for all 4."""
    mfmas = {}
    for name in ("f16_d64_causal", "f16_d64_full"):
        spec = fa.VARIANTS[name]
        S = 2 * spec.block_m
        assert spec.block_n == spec.block_m
        q, k, v, o = (torch.zeros(1, 1, S, 64, dtype=torch.float16) for _ in range(4))
        grid, block = fa.launch_geometry(spec, 1, 1, S)
        report = launch(_compiled(name), grid, block, fa.kernel_args(spec, q, k, v, o))
        mfmas[name] = report.instructions["MFMA"]
    assert mfmas["f16_d64_causal"] * 4 == mfmas["f16_d64_full"] * 3


@pytest.mark.parametrize("name", sorted(fa.VARIANTS))
def test_flash_attention_variants_compile_without_spills(name):
    info = _compiled(name).info
    assert info.vgpr_spills == 0 and info.sgpr_spills == 0
    assert info.vgprs + info.agprs <= 256


@pytest.mark.parametrize("fields, message", [
    (dict(dtype="f32"), "dtype: must be one of"),
    (dict(head_dim=96), "head_dim: must be one of"),
    (dict(causal=1), "causal: must be a bool"),
    (dict(atom="4x4x4"), "atom: must be one of"),
    (dict(block_m=48), "block_m: 48 must be a multiple of num_warps"),
    (dict(atom="32x32x8", block_m=64), "block_m: 64 must be a multiple of num_warps"),
    (dict(atom="32x32x8", block_m=128, block_n=48), "block_n: 48 must be a multiple of the atom's M"),
    (dict(num_warps=5), "num_warps: must be one of 1, 2, 4, 8, got 5"),
    (dict(lds_pad=3), "lds_pad: 3 must be a multiple of 4"),
    (dict(block_n=256), "K and V\\^T tiles need"),
])
def test_flash_attention_spec_validation(fields, message):
    with pytest.raises(ValueError, match=message):
        fa.FlashAttentionSpec(**fields)


def test_flash_attention_args_validation():
    spec = fa.VARIANTS["f16_d64_full"]
    t = torch.zeros(1, 1, 4, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="k: dtype must be"):
        fa.kernel_args(spec, t, t.float(), t, t)
    with pytest.raises(ValueError, match="head dim 128"):
        z = torch.zeros(1, 1, 4, 128, dtype=torch.float16)
        fa.kernel_args(spec, z, z, z, z)
    with pytest.raises(ValueError, match="v: must be contiguous"):
        fa.kernel_args(spec, t, t, torch.zeros(1, 1, 64, 4, dtype=torch.float16).transpose(2, 3), t)
    with pytest.raises(ValueError, match="S: must be an int"):
        fa.launch_geometry(spec, 1, 1, 0)
