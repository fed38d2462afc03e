"""gfx942 paged attention, 3D split-KV kernel, in the emulator: the fp32 partials, merged here in
torch with the exact rule of ALGORITHM.md §5, against ``ref_paged_attn``."""

import math

import pytest
import torch

from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.runtime import launch
from tests.kernels.test_attention_2d import FLASH, assert_close, compiled, make_problem


def merge_segments(segm_output, segm_max, segm_expsum):
    """ALGORITHM.md §5 in the log2 domain: m = max_s m_s, w_s = 2^(m_s - m), O = Σ w_s o_s / Σ w_s l_s."""
    m = segm_max.max(dim=-1, keepdim=True).values
    w = torch.exp2(segm_max - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    l = (w * segm_expsum).sum(-1)
    o = (w[..., None] * segm_output).sum(-2)
    return o / l[..., None]


def run_3d(spec, q_lens, kv_lens, num_segments, *, num_kv_heads=2, seed=0):
    q, kc, vc, table, cu, seqused = make_problem(spec.dtype, spec.head_size, spec.block_size,
                                                 spec.num_queries_per_kv, q_lens, kv_lens,
                                                 num_kv_heads=num_kv_heads, seed=seed)
    total_q, hq, d = q.shape
    segm_output = torch.full((total_q, hq, num_segments, d), math.nan)
    segm_max = torch.full((total_q, hq, num_segments), math.nan)
    segm_expsum = torch.full((total_q, hq, num_segments), math.nan)
    scale = 1 / math.sqrt(d)
    grid, block = a3.launch_geometry(spec, len(q_lens), total_q, num_kv_heads, num_segments)
    launch(compiled(spec, a3.build), grid, block,
           a3.kernel_args(spec, q, kc, vc, segm_output, segm_max, segm_expsum, table, cu, seqused,
                          scale, num_segments))
    ref = ref_paged_attn(q, kc, vc, cu, seqused, table, scale)
    return (segm_output, segm_max, segm_expsum), ref, (cu, seqused)


SPECS = {
    "narrow_f16_d64_b16_g1": dict(dtype="f16", head_size=64, block_size=16, num_warps=1),
    "narrow_bf16_d128_b32_g5": dict(dtype="bf16", head_size=128, block_size=32, num_warps=2,
                                    num_queries_per_kv=5),
    "narrow_f16_d128_b64_g8": dict(dtype="f16", head_size=128, block_size=64, num_warps=2,
                                   num_queries_per_kv=8),
    "flash_L4_d128_b16_g4": dict(FLASH, head_size=128, block_size=16, num_warps=1, num_queries_per_kv=4),
}


@pytest.mark.parametrize("num_segments", [1, 3, 8])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_split_kv_partials_merge_to_reference(name, num_segments):
    spec = a3.UnifiedAttention3DSpec(**SPECS[name])
    # decode rows over long-ish KV, one short chunked-prefill row; 8 segments leave some empty
    partials, ref, _ = run_3d(spec, [1, 1, 5], [150, 7, 90], num_segments)
    for t in partials:
        assert not torch.isnan(t).any(), "an entry of the workspace was left unwritten"
    assert_close(spec, merge_segments(*partials), ref)


@pytest.mark.parametrize("levers", [
    dict(kv_addr_64=True, global_load_lds_k=True, cfv_store=True),
    dict(q_direct=True, kv_cache_policy="stream", use_k_single_buffer=False, waves_per_eu=4),
], ids=["a64_kdma_cfv", "qdirect_stream_k2_wpe"])
def test_levers_on_the_split_kernel(levers):
    spec = a3.UnifiedAttention3DSpec(dtype="bf16", head_size=64, block_size=16, num_warps=1,
                                     num_queries_per_kv=8, **levers)
    partials, ref, _ = run_3d(spec, [1, 1, 4], [90, 33, 40], 3)
    assert_close(spec, merge_segments(*partials), ref)


def test_empty_segments_write_the_neutral_partial():
    """kv = 20 with T = 16: 2 tiles over 4 segments -> segments 2, 3 see no key."""
    spec = a3.UnifiedAttention3DSpec(dtype="f16", head_size=64, block_size=16, num_warps=1)
    (o, m, l), _, _ = run_3d(spec, [1], [20], 4, num_kv_heads=1)
    assert torch.isneginf(m[:, :, 2:]).all()
    assert (l[:, :, 2:] == 0).all() and (o[:, :, 2:] == 0).all()
    assert torch.isfinite(m[:, :, :2]).all() and (l[:, :, :2] > 0).all()


def test_empty_segments_load_no_q():
    """kv = 20, T = 16, 4 segments: the workgroups of segments 2 and 3 (grid (1, 1, 4), so
    workgroup i is segment i) move exactly their neutral partial -- one row's o (64 fp32) plus m
    and l, 264 bytes -- and read nothing: no Q row, no K/V (exact emulator counters)."""
    spec = a3.UnifiedAttention3DSpec(dtype="f16", head_size=64, block_size=16, num_warps=1)
    q, kc, vc, table, cu, seqused = make_problem("f16", 64, 16, 1, [1], [20], num_kv_heads=1)
    o, m, l = (torch.full(s, math.nan) for s in ((1, 1, 4, 64), (1, 1, 4), (1, 1, 4)))
    grid, block = a3.launch_geometry(spec, 1, 1, 1, 4)
    assert grid == (1, 1, 4)
    report = launch(compiled(spec, a3.build), grid, block,
                    a3.kernel_args(spec, q, kc, vc, o, m, l, table, cu, seqused, 0.125, 4),
                    profile=True)
    moved = report.profile.wg_global_bytes.tolist()
    assert moved[2:] == [64 * 4 + 4 + 4] * 2
    assert min(moved[:2]) > 264 + 64 * 2          # the live segments read their Q row and K/V
    assert torch.isneginf(m[0, 0, 2:]).all() and (l[0, 0, 2:] == 0).all() and (o[0, 0, 2:] == 0).all()


def test_q_major_grid_is_rejected():
    with pytest.raises(ValueError, match="q_major_grid: the 3D grid"):
        a3.UnifiedAttention3DSpec(q_major_grid=True)
    assert not a3.supports_tiled_3d(q_major_grid=True)


def test_workspace_shape_is_checked():
    spec = a3.UnifiedAttention3DSpec(dtype="f16", head_size=64, block_size=16, num_warps=1)
    q, kc, vc, table, cu, seqused = make_problem("f16", 64, 16, 1, [1], [20], num_kv_heads=1)
    o = torch.zeros(1, 1, 2, 64)
    m = torch.zeros(1, 1, 3)
    with pytest.raises(ValueError, match="segm_max: shape"):
        a3.kernel_args(spec, q, kc, vc, o, m, torch.zeros(1, 1, 2), table, cu, seqused, 0.1, 2)
    with pytest.raises(ValueError, match="num_segments: must be an int"):
        a3.kernel_args(spec, q, kc, vc, o, m, m, table, cu, seqused, 0.1, 0)


@pytest.mark.slow
def test_medium_long_decode():
    spec = a3.VARIANTS["narrow_bf16_d128_b16_g5"]
    partials, ref, _ = run_3d(spec, [1, 1], [700, 1000], 16, num_kv_heads=1)
    assert_close(spec, merge_segments(*partials), ref)
