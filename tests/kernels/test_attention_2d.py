"""gfx942 paged attention, 2D kernel, in the emulator (memcheck + racecheck on) against the fp32
``ref_paged_attn`` with the family's tolerance."""

import dataclasses
import math

import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.runtime import launch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
FLASH = dict(regime="transposed_x8", block_m_per_warp=32, dtype="f16")

_COMPILED = {}


def compiled(spec, build=a2.build):
    if spec not in _COMPILED:
        kern = build(spec)
        _COMPILED[spec] = compile_ir(kern.ir(), name=kern.name)
    return _COMPILED[spec]


def make_problem(dtype, head_size, block_size, group, q_lens, kv_lens, *, num_kv_heads=2, seed=0,
                 spare_blocks=3, spare_columns=1):
    """vLLM-layout inputs: a shuffled, non-contiguous block table, pages of several sequences
    interleaved in the cache, uniform(-0.5, 0.5) data."""
    gen = torch.Generator().manual_seed(seed)
    dt = TORCH[dtype]
    hq = num_kv_heads * group
    pages = [-(-kv // block_size) for kv in kv_lens]
    num_blocks = sum(pages) + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.full((len(q_lens), max(pages) + spare_columns), 2 ** 30, dtype=torch.int32)
    used = 0
    for s, p in enumerate(pages):
        table[s, :p] = perm[used:used + p]
        used += p
    q = (torch.rand(sum(q_lens), hq, head_size, generator=gen) - 0.5).to(dt)
    k_cache = (torch.rand(num_blocks, block_size, num_kv_heads, head_size, generator=gen) - 0.5).to(dt)
    v_cache = (torch.rand(num_blocks, block_size, num_kv_heads, head_size, generator=gen) - 0.5).to(dt)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    seqused = torch.tensor(kv_lens, dtype=torch.int32)
    return q, k_cache, v_cache, table, cu, seqused


def run_2d(spec, q_lens, kv_lens, *, num_kv_heads=2, seed=0, scale=None, spare_columns=1):
    q, kc, vc, table, cu, seqused = make_problem(spec.dtype, spec.head_size, spec.block_size,
                                                 spec.num_queries_per_kv, q_lens, kv_lens,
                                                 num_kv_heads=num_kv_heads, seed=seed,
                                                 spare_columns=spare_columns)
    out = torch.full_like(q, 7.0)
    scale = 1 / math.sqrt(spec.head_size) if scale is None else scale
    grid, block = a2.launch_geometry(spec, len(q_lens), q.shape[0], num_kv_heads)
    report = launch(compiled(spec), grid, block,
                    a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused, scale))
    ref = ref_paged_attn(q, kc, vc, cu, seqused, table, scale)
    return out, ref, report


def assert_close(spec, out, ref):
    err = (out.float() - ref).abs().max().item()
    assert err <= attention_atol(spec.dtype), f"{spec.kernel_name}: max abs error {err}"


# varlen mixes: decode rows (q = 1) and prefill rows in one batch, KV lengths not multiples of
# the block size; the prefill rows have q < kv (chunked prefill) and q == kv
MIX = ([1, 19, 1, 7], [37, 19, 1, 50])
MIX_LONG = ([1, 40, 3], [70, 40, 129])

NARROW = [
    dict(dtype="f16", head_size=64, block_size=16, num_queries_per_kv=1, num_warps=4),
    dict(dtype="bf16", head_size=64, block_size=32, num_queries_per_kv=4, num_warps=4, block_m_per_warp=32),
    dict(dtype="f16", head_size=128, block_size=64, num_queries_per_kv=8, num_warps=2),
    dict(dtype="bf16", head_size=128, block_size=16, num_queries_per_kv=5, num_warps=2),
    dict(dtype="f16", head_size=128, block_size=32, num_queries_per_kv=4, num_warps=1, tile_size=64),
    dict(dtype="bf16", head_size=64, block_size=64, num_queries_per_kv=1, num_warps=1, tile_size=32),
]


@pytest.mark.parametrize("fields", NARROW, ids=lambda f: a2.UnifiedAttention2DSpec(**f).kernel_name)
def test_narrow_matches_reference(fields):
    spec = a2.UnifiedAttention2DSpec(**fields)
    out, ref, _ = run_2d(spec, *MIX)
    assert_close(spec, out, ref)


GEOMETRIES = {
    "wide4": dict(FLASH, num_warps=4, tile_size=32),
    "wide4_t64": dict(FLASH, num_warps=4, tile_size=64),
    "wide2": dict(FLASH, num_warps=2),
    "L4": dict(FLASH, num_warps=1),
}


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("head_size, block_size, group", [(128, 64, 1), (64, 16, 5)])
def test_flash_geometries_match_reference(geometry, head_size, block_size, group):
    spec = a2.UnifiedAttention2DSpec(**GEOMETRIES[geometry], head_size=head_size, block_size=block_size,
                                     num_queries_per_kv=group)
    out, ref, _ = run_2d(spec, *MIX_LONG, num_kv_heads=1)
    assert_close(spec, out, ref)


@pytest.mark.parametrize("geometry", ["wide4", "L4"])
@pytest.mark.parametrize("head_size, block_size, group", [(128, 64, 1), (64, 16, 5)])
def test_bf16_flash_geometries_match_reference(geometry, head_size, block_size, group):
    """gfx942's 32x32x8 atom has bf16 (v_mfma_f32_32x32x8_bf16): the transposed-x8 regime in
    bf16, P rounded to nearest even without its NaN select (the row sum carries a NaN)."""
    spec = a2.UnifiedAttention2DSpec(**dict(GEOMETRIES[geometry], dtype="bf16"), head_size=head_size,
                                     block_size=block_size, num_queries_per_kv=group)
    assert "mfma.f32.32x32x8bf16" in a2.build(spec).ir()
    out, ref, _ = run_2d(spec, *MIX_LONG, num_kv_heads=1)
    assert_close(spec, out, ref)


def test_bf16_flash_with_window_and_softcap_matches_reference():
    spec = a2.UnifiedAttention2DSpec(**dict(GEOMETRIES["wide4"], dtype="bf16"), head_size=64,
                                     block_size=16, num_queries_per_kv=4, softcap=True,
                                     sliding_window=True, interval_mask=True)
    q, kc, vc, table, cu, seqused = make_problem("bf16", 64, 16, 4, *MIX_LONG, num_kv_heads=1)
    out = torch.full_like(q, 7.0)
    scale = 1 / math.sqrt(64)
    grid, block = a2.launch_geometry(spec, 3, q.shape[0], 1)
    launch(compiled(spec), grid, block, a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused, scale,
                                                       softcap=5.0, window_left=23))
    ref = ref_paged_attn(q, kc, vc, cu, seqused, table, scale, softcap=5.0, window_size=(23, 0))
    plain = ref_paged_attn(q, kc, vc, cu, seqused, table, scale)
    assert (plain - ref).abs().max().item() > 3 * attention_atol("bf16")    # the features bite
    assert_close(spec, out, ref)


@pytest.mark.parametrize("regime", ["narrow", "flash"])
def test_bf16_nan_in_a_query_row_reaches_only_its_output_row(regime):
    """A NaN in one query element: that token-head's output row is all NaN, every other row
    matches the reference -- also in the transposed-x8 regime, whose P conversion drops the NaN
    select (the row's sum l, taken from the unrounded P, carries the NaN)."""
    fields = dict(GEOMETRIES["wide4"], dtype="bf16") if regime == "flash" else \
        dict(dtype="bf16", num_warps=2)
    spec = a2.UnifiedAttention2DSpec(**fields, head_size=64, block_size=16, num_queries_per_kv=2)
    q, kc, vc, table, cu, seqused = make_problem("bf16", 64, 16, 2, *MIX_LONG, num_kv_heads=1)
    q[5, 1, 7] = float("nan")
    out = torch.full_like(q, 7.0)
    grid, block = a2.launch_geometry(spec, 3, q.shape[0], 1)
    launch(compiled(spec), grid, block, a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused, 0.125))
    ref = ref_paged_attn(q, kc, vc, cu, seqused, table, 0.125)
    nan = torch.zeros(q.shape, dtype=torch.bool)
    nan[5, 1] = True
    assert torch.equal(out.isnan(), nan) and torch.equal(ref.isnan(), nan)
    assert_close(spec, out[~nan], ref[~nan])


def test_k_buffering_follows_the_seed_rule():
    """use_k_single_buffer defaults to num_warps * 32 <= T on the flash path (ALGORITHM.md §9)."""
    assert not a2.UnifiedAttention2DSpec(**GEOMETRIES["wide4"]).use_k_single_buffer
    assert a2.UnifiedAttention2DSpec(**GEOMETRIES["wide2"]).use_k_single_buffer
    assert a2.UnifiedAttention2DSpec(**GEOMETRIES["L4"]).use_k_single_buffer


LEVERS = {
    "waves_per_eu": dict(waves_per_eu=2),
    "iglp": dict(iglp=True),
    "kv_cache_policy": dict(kv_cache_policy="stream"),
    "q_direct": dict(q_direct=True),
    "global_load_lds_k": dict(global_load_lds_k=True),
    "q_major_grid": dict(q_major_grid=True),
    "cfv_store": dict(cfv_store=True),
    "kv_addr_64": dict(kv_addr_64=True),
    "k_single_buffer_forced": dict(use_k_single_buffer=True),
    "one_page_tile": dict(one_page_tile=True),
    "early_v": dict(early_v=True),
}


@pytest.mark.parametrize("lever", sorted(LEVERS))
@pytest.mark.parametrize("path", ["narrow", "flash"])
def test_every_lever_matches_reference(lever, path):
    base = dict(GEOMETRIES["wide4"], head_size=64, block_size=32) if path == "flash" else \
        dict(dtype="bf16", head_size=64, block_size=16, num_warps=2, num_queries_per_kv=4)
    spec = a2.UnifiedAttention2DSpec(**base, **LEVERS[lever])
    out, ref, _ = run_2d(spec, [1, 21, 6], [45, 21, 70], num_kv_heads=1)
    assert_close(spec, out, ref)


def test_one_page_tile_needs_the_tile_in_one_page():
    """one_page_tile (one page lookup per K/V tile) is accepted exactly where the page holds the
    tile, and named in the kernel; it emits fewer block-table loads than the per-step lookups."""
    base = dict(dtype="f16", head_size=256, num_queries_per_kv=4, num_warps=4, tile_size=32,
                use_k_single_buffer=False)
    with pytest.raises(ValueError, match="one_page_tile: a 32-key tile spans 2 pages of 16"):
        a2.UnifiedAttention2DSpec(**base, block_size=16, one_page_tile=True)
    assert not a2.supports_tiled_2d(**base, block_size=16, one_page_tile=True)
    assert a2.supports_tiled_2d(**base, block_size=32, one_page_tile=True)
    spec = a2.UnifiedAttention2DSpec(**base, block_size=64, one_page_tile=True)
    per_step = a2.UnifiedAttention2DSpec(**base, block_size=64)
    assert spec.kernel_name == per_step.kernel_name + "_op"
    loads = [compiled(s).asm.count("s_load_dword s") for s in (spec, per_step)]
    assert loads[0] < loads[1], loads


@pytest.mark.parametrize("fields", [
    dict(dtype="f16", head_size=256, block_size=64, num_queries_per_kv=4, num_warps=4,
         tile_size=32, use_k_single_buffer=False),            # the one-round d256 body
    dict(dtype="bf16", head_size=128, block_size=64, num_queries_per_kv=4, num_warps=2,
         tile_size=64, use_k_single_buffer=False),
    dict(GEOMETRIES["wide4_t64"], head_size=128, block_size=64, num_queries_per_kv=4),
], ids=lambda f: a2.UnifiedAttention2DSpec(**f, one_page_tile=True).kernel_name)
def test_one_page_tile_matches_reference(fields):
    """The plain one-round prefills' specs (attention_dispatch.one_round_body) against
    ref_paged_attn, KV lengths ending inside a tile and a page (the copy's row mask)."""
    spec = a2.UnifiedAttention2DSpec(**fields, one_page_tile=True)
    out, ref, _ = run_2d(spec, [1, 40, 3], [70, 40, 129], num_kv_heads=1)
    assert_close(spec, out, ref)


D256_ONE_ROUND = dict(dtype="f16", head_size=256, block_size=64, num_queries_per_kv=4,
                     num_warps=4, tile_size=32, use_k_single_buffer=False)


@pytest.mark.parametrize("fields", [
    dict(D256_ONE_ROUND, one_page_tile=True),                   # the dispatcher's f16 d256 body
    dict(D256_ONE_ROUND, dtype="bf16", block_size=16),          # per-step page lookups
    dict(D256_ONE_ROUND, num_warps=2, tile_size=16),            # the table's d256 geometry
], ids=lambda f: a2.UnifiedAttention2DSpec(**f, early_v=True).kernel_name)
def test_early_v_matches_reference(fields):
    """early_v (V_{j+1} loaded a step ahead, carried through the tile loop) against
    ref_paged_attn: decode rows, walks of 1-5 tiles, KV lengths ending inside a tile and a page,
    a sequence with more than one phase (unmasked tiles, then the diagonal)."""
    spec = a2.UnifiedAttention2DSpec(**fields, early_v=True)
    assert spec.kernel_name.endswith("_ev")
    out, ref, _ = run_2d(spec, [1, 40, 3, 17], [70, 40, 129, 150], num_kv_heads=1)
    assert_close(spec, out, ref)


@pytest.mark.parametrize("fields, message", [
    (dict(use_k_single_buffer=True), "early_v: needs two K buffers"),
    (dict(global_load_lds_k=True, head_size=128), "early_v: needs two K buffers"),
    (dict(kv_dtype="fp8_e4m3fnuz"), "early_v: an fp8 / int8 cache"),
    (dict(head_size=64, tile_size=16), "early_v: a 16-key tile is not whole copy steps"),
])
def test_early_v_gate(fields, message):
    """early_v is refused (one named reason) where the late-V loop or whole carried copy steps
    do not exist, and supports_tiled_2d agrees with the constructor."""
    kw = {**D256_ONE_ROUND, **fields, "early_v": True}
    with pytest.raises(ValueError, match=message):
        a2.UnifiedAttention2DSpec(**kw)
    assert not a2.supports_tiled_2d(**kw)
    assert a2.supports_tiled_2d(**D256_ONE_ROUND, early_v=True)


def test_d256_vt_stores_are_8_way_not_16_way():
    """The d256 V^T pitch of early_v (attention_policy.vt_tile_pad, 18 dwords at T = 32): a paired store's
    32 lanes of a phase write one dword column of rows 4 apart, rows 4k x 18 dwords = 72k mod
    32 = 8k: 4 banks, so 8 lanes a bank, 8 cycles a phase; a ds_write2_b32 is 2 addresses x 2
    phases = 32 cycles (64 with the old 20-dword pitch: 2 banks). The operand reads of 16
    consecutive V^T rows (18n mod 32 distinct for n < 16, 2 dwords each) have no conflict."""
    from rocke.kernels.gfx942 import attention_policy as policy
    spec = a2.UnifiedAttention2DSpec(**D256_ONE_ROUND, one_page_tile=True, early_v=True)
    assert policy.lds_plan(spec).region("vt_tile").pad == 4
    # the pad comes with early_v only: every other d256 spec keeps the 20-dword pitch
    assert policy.lds_plan(dataclasses.replace(spec, early_v=False)).region("vt_tile").pad == 8
    q, kc, vc, table, cu, seqused = make_problem("f16", 256, 64, 4, [32], [64], num_kv_heads=1)
    out = torch.zeros_like(q)
    grid, block = a2.launch_geometry(spec, 1, q.shape[0], 1)
    report = launch(compiled(spec), grid, block,
                    a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused, 0.0625), profile=True)
    lines = [l for l in report.profile.lines if l.executions]
    # the V^T pair stores: rows r and r + 1 (offset1:18, the pitch), or r + 2 and r + 3
    stores = [l for l in lines if l.text.startswith("ds_write2_b32")
              and ("offset1:18" in l.text or "offset0:36" in l.text)]
    assert len(stores) >= 8 and {l.lds_cycles // l.executions for l in stores} == {32}, \
        [(l.text, l.lds_cycles / l.executions) for l in stores]
    # P V_j's B operands: one ds_read2_b64 (keys n0 and n0 + 16) per 16 head-dim columns, 16 of
    # them a step; every one of them was 2-way (16 cycles) with the 20-dword pitch
    reads = [l for l in lines if l.text.startswith("ds_read2_b64") and l.lds_conflicts == 0]
    assert len(reads) >= 16 and {l.lds_cycles // l.executions for l in reads} == {8}, len(reads)


def test_q_and_out_may_be_strided_views():
    """q/out token and head strides are kernel arguments (vLLM passes q as a view)."""
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, block_size=16, num_queries_per_kv=2,
                                     num_warps=2)
    q, kc, vc, table, cu, seqused = make_problem("f16", 64, 16, 2, [3, 9], [20, 9], num_kv_heads=1)
    wide_q = torch.zeros(q.shape[0], 3 * q.shape[1], 64, dtype=q.dtype)
    wide_q[:, ::3] = q
    q_view = wide_q[:, ::3]
    out_store = torch.full((q.shape[0], q.shape[1] + 1, 64), 5.0, dtype=q.dtype)
    out = out_store[:, :q.shape[1]]
    grid, block = a2.launch_geometry(spec, 2, q.shape[0], 1)
    launch(compiled(spec), grid, block, a2.kernel_args(spec, q_view, kc, vc, out, table, cu, seqused, 0.125))
    assert_close(spec, out, ref_paged_attn(q, kc, vc, cu, seqused, table, 0.125))
    assert torch.equal(out_store[:, -1], torch.full_like(out_store[:, -1], 5.0))


def test_causal_early_exit_skips_future_tiles():
    """One sequence, q = kv = 4 tiles of 16 with BLOCK_Q = T = 16: query block b visits tiles
    0..b only, 1 + 2 + 3 + 4 = 10 tile steps of the one-tile problem's MFMAs (not 16)."""
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, block_size=16, num_warps=1)
    _, _, report_4 = run_2d(spec, [64], [64], num_kv_heads=1)
    _, _, report_1 = run_2d(spec, [16], [16], num_kv_heads=1)
    assert report_4.instructions["MFMA"] == 10 * report_1.instructions["MFMA"]


def test_out_of_range_blocks_are_never_read():
    """A 64-token tile over 16-token pages runs past the last sequence's 3 pages; the table is
    exactly 3 columns wide, so reading its entry for the 4th page would read past the table
    (memcheck stops the launch). The copy clamps the index and the tokens read zeros instead."""
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, block_size=16, num_warps=4, tile_size=64,
                                     kv_addr_64=True)
    out, ref, _ = run_2d(spec, [5, 1], [17, 33], spare_columns=0)
    assert_close(spec, out, ref)


def test_cache_past_4gib_needs_kv_addr_64():
    """A K/V cache of 4.5 GiB whose pages in use sit past 4 GiB (ALGORITHM.md §10.2). ``torch.empty``
    only reserves address space: just the touched pages (a few KiB) become memory. The 64-bit
    page base reads them; the 32-bit path refuses the cache in ``kernel_args``, and launched
    anyway (same arguments) its wrapped offsets read the wrong pages."""
    D, bs, dtype = 64, 16, "f16"
    block_bytes = bs * D * 2
    num_blocks = (9 << 29) // block_bytes                     # 4.5 GiB per cache
    gen = torch.Generator().manual_seed(11)
    k_cache = torch.empty(num_blocks, bs, 1, D, dtype=torch.float16)
    v_cache = torch.empty(num_blocks, bs, 1, D, dtype=torch.float16)
    pages = torch.tensor([num_blocks - 1, num_blocks - 7, num_blocks - 3, (1 << 32) // block_bytes + 5])
    for t in (k_cache, v_cache):
        t[pages] = (torch.rand(len(pages), bs, 1, D, generator=gen) - 0.5).half()
    table = pages.to(torch.int32).view(1, -1)
    q_len, kv_len = 3, 4 * bs - 5
    q = (torch.rand(q_len, 1, D, generator=gen) - 0.5).half()
    cu = torch.tensor([0, q_len], dtype=torch.int32)
    seqused = torch.tensor([kv_len], dtype=torch.int32)
    ref = ref_paged_attn(q, k_cache, v_cache, cu, seqused, table, 0.125)

    wide = a2.UnifiedAttention2DSpec(dtype=dtype, head_size=D, block_size=bs, num_warps=1, kv_addr_64=True)
    narrow = a2.UnifiedAttention2DSpec(dtype=dtype, head_size=D, block_size=bs, num_warps=1)
    grid, block = a2.launch_geometry(wide, 1, q_len, 1)
    out = torch.zeros_like(q)
    args = a2.kernel_args(wide, q, k_cache, v_cache, out, table, cu, seqused, 0.125)
    launch(compiled(wide), grid, block, args)
    assert_close(wide, out, ref)

    with pytest.raises(ValueError, match="k_cache: the cache \\(use kv_addr_64 for caches past 2 GiB\\)"):
        a2.kernel_args(narrow, q, k_cache, v_cache, out, table, cu, seqused, 0.125)
    wrong = torch.zeros_like(q)
    args[3] = wrong
    launch(compiled(narrow), grid, block, args)
    assert (wrong.float() - ref).abs().max().item() > 3 * attention_atol(dtype)


MEDIUM = {
    "wide4_d128_b16_g4": (a2.VARIANTS["wide4_f16_d128_b16_g4"], [130, 1, 64], [200, 300, 64]),
    "narrow_bf16_d128_b64_g1": (a2.VARIANTS["narrow_bf16_d128_b64_g1"], [96, 1], [250, 333]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MEDIUM))
def test_medium_prefill(name):
    spec, q_lens, kv_lens = MEDIUM[name]
    out, ref, _ = run_2d(spec, q_lens, kv_lens, num_kv_heads=1)
    assert_close(spec, out, ref)


def test_sequences_without_queries_are_skipped():
    """Empty query rows (q_len 0, even kv_len 0) own q blocks that exit at once; their
    neighbours' blocks are still found by the q-block search."""
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, block_size=16, num_warps=1, num_queries_per_kv=4)
    out, ref, _ = run_2d(spec, [0, 5, 0, 1, 6], [0, 9, 4, 3, 30], num_kv_heads=1)
    assert_close(spec, out, ref)
