"""The attention kernels never read outside the cache when the block table lies: a page id
outside ``[0, num_blocks)`` (negative or too large) reads as an empty page. In the emulator with
the memory checker on (the default: a load outside a tensor argument stops the launch), on the
32-bit buffer path and the ``kv_addr_64`` path, 2D and 3D: no fault, the lying sequence's output
is exactly that of an honest table naming an all-zero page in the lying entry's place, and the
honest sequences' rows are unchanged."""
from __future__ import annotations

import math

import pytest
import torch

from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.runtime import launch
from tests.kernels.test_attention_2d import compiled, make_problem

D, BS = 64, 16
Q_LENS, KV_LENS = [1, 3, 1], [40, 20, 33]      # sequence 1 is the liar
# negative, just past the cache, far past it (a 32-bit page * stride that wraps), INT32_MIN
LIES = [-1, "num_blocks", 1 << 28, -(1 << 31)]


def _inputs(lie):
    """(q, k, v, honest table with an empty page in the lie's place, lying table, cu, seqused)."""
    q, kc, vc, table, cu, seqused = make_problem("f16", D, BS, 1, Q_LENS, KV_LENS, num_kv_heads=1,
                                                 seed=3)
    used = {int(b) for s, kv in enumerate(KV_LENS) for b in table[s, :-(-kv // BS)]}
    empty = max(set(range(1, kc.shape[0])) - used)     # a spare page, not page 0 (a wrap's target)
    kc[empty] = 0
    vc[empty] = 0
    lying, zeroed = table.clone(), table.clone()
    lying[1, 0] = kc.shape[0] if lie == "num_blocks" else lie
    zeroed[1, 0] = empty
    return q, kc, vc, zeroed, lying, cu, seqused


def _run_2d(spec, q, kc, vc, table, cu, seqused):
    out = torch.full_like(q, 7.0)
    grid, block = a2.launch_geometry(spec, len(Q_LENS), q.shape[0], 1)
    launch(compiled(spec), grid, block,
           a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused, 1 / math.sqrt(D)))
    return out


def _run_3d(spec, q, kc, vc, table, cu, seqused, segments=2):
    total_q, hq, d = q.shape
    ws = [torch.full(shape, math.nan) for shape in
          ((total_q, hq, segments, d), (total_q, hq, segments), (total_q, hq, segments))]
    grid, block = a3.launch_geometry(spec, len(Q_LENS), total_q, 1, segments)
    launch(compiled(spec, a3.build), grid, block,
           a3.kernel_args(spec, q, kc, vc, *ws, table, cu, seqused, 1 / math.sqrt(D), segments))
    return ws


@pytest.mark.parametrize("one_page", [False, True], ids=["per_step", "one_page"])
@pytest.mark.parametrize("lie", LIES, ids=str)
@pytest.mark.parametrize("addr_64", [False, True], ids=["buffer32", "addr64"])
def test_2d_lying_page_ids_read_nothing_outside_the_cache(addr_64, lie, one_page):
    # one_page: one page lookup per K/V tile (the 16-key tile in a 16-token page)
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=D, block_size=BS, num_warps=2,
                                     kv_addr_64=addr_64, one_page_tile=one_page)
    q, kc, vc, table, lying, cu, seqused = _inputs(lie)
    expected = _run_2d(spec, q, kc, vc, table, cu, seqused)
    got = _run_2d(spec, q, kc, vc, lying, cu, seqused)        # memcheck: no fault
    assert torch.isfinite(got.float()).all()
    assert torch.equal(got, expected)


@pytest.mark.parametrize("lie", [-1, "num_blocks"], ids=str)
@pytest.mark.parametrize("addr_64", [False, True], ids=["buffer32", "addr64"])
def test_3d_lying_page_ids_read_nothing_outside_the_cache(addr_64, lie):
    # with the K tile by LDS DMA too (the other load of copy_paged_tile)
    spec = a3.UnifiedAttention3DSpec(dtype="f16", head_size=D, block_size=BS, num_warps=1,
                                     kv_addr_64=addr_64, global_load_lds_k=True)
    q, kc, vc, table, lying, cu, seqused = _inputs(lie)
    expected = _run_3d(spec, q, kc, vc, table, cu, seqused)
    got = _run_3d(spec, q, kc, vc, lying, cu, seqused)
    for e, g in zip(expected, got):
        assert not torch.isnan(g).any()
        assert torch.equal(g, e)


@pytest.mark.parametrize("one_page", [False, True], ids=["per_step", "one_page"])
@pytest.mark.parametrize("addr_64", [False, True], ids=["buffer32", "addr64"])
def test_a_lying_kv_length_never_reads_past_the_block_table(addr_64, one_page):
    """The last sequence claims 2 pages more than its table row holds: its page reads stay
    inside the table (entries past it read 0), so no fault; the other rows are unchanged."""
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=D, block_size=BS, num_warps=2,
                                     kv_addr_64=addr_64, one_page_tile=one_page)
    q, kc, vc, table, _, cu, seqused = _inputs(-1)
    table = table[:, :-(-max(KV_LENS) // BS)].contiguous()     # no spare column
    honest = _run_2d(spec, q, kc, vc, table, cu, seqused)
    lying = seqused.clone()
    lying[-1] = table.shape[1] * BS + 2 * BS
    got = _run_2d(spec, q, kc, vc, table, cu, lying)
    assert torch.isfinite(got.float()).all()
    assert torch.equal(got[:4], honest[:4])
