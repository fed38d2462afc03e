"""run_unified_attention_torch: the dispatcher's rules (pure, nothing launched), and the whole entry
point in the emulator (memcheck + racecheck on) against ref_paged_attn."""
from dataclasses import replace

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.common.knobs import AttentionKnobs, read_knobs

MI300X_SMS = 304


def _problem(**kw):
    base = dict(dtype="f16", head_size=128, num_q_heads=32, num_kv_heads=8, block_size=64,
                num_seqs=1, total_q=1, max_seqlen_q=1, max_seqlen_k=32768, causal=True,
                num_blocks=4096, kv_cache_bytes=4096 * 64 * 8 * 128 * 2)
    base.update(kw)
    return au.UnifiedAttentionProblem(**base)


# ---- select_path (ALGORITHM.md §10.1) ----

def test_num_sms_is_mi300x_without_a_device():
    assert au.num_sms() == MI300X_SMS


class _GpuProperties:
    def __init__(self, count, arch):
        self.multi_processor_count, self.gcnArchName = count, arch


@pytest.mark.parametrize("arch, count, want", [
    ("gfx942:sramecc+:xnack-", 80, 80),       # the target itself: its own count (a partitioned GPU)
    ("gfx90a:sramecc+:xnack-", 110, None),    # a GPU that is not the target: the target's count
], ids=["target", "other"])
def test_a_call_plans_for_the_compute_units_of_its_own_gpu(monkeypatch, arch, count, want):
    """The dispatcher's count is the target's (304 for MI300X) and never reads a visible GPU (an
    NVIDIA GPU's SMs under the emulator, or device 0 for tensors on device 1); a call on a GPU
    of the target's processor passes that GPU's own count (``attention_device.compute_units``)."""
    import types
    from rocke.kernels.common.attention_device import compute_units
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: pytest.fail("the dispatcher read a GPU's properties"))
    assert au.num_sms() == MI300X_SMS
    gpu = types.SimpleNamespace(kind="hip", arch=arch, compute_units=count)
    assert compute_units(gpu, "gfx942") == want
    assert compute_units(types.SimpleNamespace(kind="emu", arch="gfx942"), "gfx942") is None


def test_long_kv_decode_goes_3d_with_the_segment_cap():
    p = _problem()
    path, reason = dispatch.select_path(p, MI300X_SMS)
    assert path == "3d" and "split" in reason
    geo = dispatch.geometry(p, "3d", sms=MI300X_SMS)
    # 32768 / T = 32 -> 1024 tiles, 2 * sqrt(1024) = 64 = MAX_SEGMENTS; the grid, 1 q-block x 8 kv
    # heads x 64 = 512 workgroups, stays below one round of 304 * 4
    assert geo.num_segments == dispatch.MAX_SEGMENTS == 64


@pytest.mark.parametrize("kv, segments", [(1024, 10), (600, 8), (32, 1), (64, 2)])
def test_segments_are_twice_the_square_root_of_the_kv_tiles(kv, segments):
    # 12 decode tokens, GQA 4, 8 kv heads: (12 // 4 + 12) * 8 = 120 workgroups per segment, so
    # 304 CUs x 3 resident d128 workgroups hold only 912 // 120 = 7 segments (< 8: no fill), and
    # the tiles decide: T = 32 -> 1024: 32 tiles, 2 * 5 = 10 (1200 < 1216, one round); 600: 19
    # tiles, 2 * 4; 32: 1 tile (2 * 1 capped at the 1 tile); 64: 2 tiles, 2 * 1
    p = _problem(max_seqlen_k=kv, num_seqs=12, total_q=12)
    assert dispatch.geometry(p, "3d", sms=MI300X_SMS).num_segments == segments


@pytest.mark.parametrize("head_size, lds, resident", [(128, 20224, 3), (64, 11008, 5)])
def test_resident_3d_workgroups_are_bound_by_lds(head_size, lds, resident):
    # narrow 3D at block 64, T = 32: K 32 x (D + pad), V^T D x (32 + pad), P 16 x (32 + pad);
    # LDS allocated in 512-byte granules of 64 KiB: 20480 -> 3, 11264 -> 5
    p = _problem(head_size=head_size, kv_cache_bytes=4096 * 64 * 8 * head_size * 2)
    geo = dispatch.geometry(p, "3d", sms=MI300X_SMS)
    spec = dispatch.make_specs(p, geo, AttentionKnobs())[0]
    assert sum(policy.lds_plan(spec).footprint().values()) == lds
    assert dispatch.resident_3d_workgroups(p, geo) == resident


@pytest.mark.parametrize("seqs, kv, head_size, segments", [
    (1, 1024, 128, 32), (1, 2048, 128, 64), (1, 8192, 128, 64), (2, 2048, 128, 32),
    (2, 4096, 128, 43), (4, 2048, 128, 22), (8, 8192, 128, 11), (2, 2048, 64, 64),
    (4, 8192, 64, 37)])
def test_small_decode_batches_fill_the_resident_slots_once(seqs, kv, head_size, segments):
    # one segment's grid: (seqs // 4 + seqs) * 8 = 8 / 16 / 40 / 80 workgroups; the slots:
    # 304 x 3 (d128) = 912, 304 x 5 (d64) = 1520 -> 114 / 57 / 22 / 11 (d128), 95 / 38 (d64)
    # segments, at most the tiles (T = 32) and 64, then the fewest with the same longest walk:
    # 1 x 1024: 32 tiles -> 32; 1 x 2048 / 8192: 64; 2 x 2048: 57 -> 2 tiles a segment -> 32;
    # 2 x 4096: 128 tiles, 57 -> 3 -> 43; 4 x 2048: 22 -> 3 -> 22; 8 x 8192: 11 -> 24 -> 11;
    # d64 2 x 2048: 64; d64 4 x 8192: 256 tiles, 38 -> 7 -> 37
    p = _problem(num_seqs=seqs, total_q=seqs, max_seqlen_k=kv, head_size=head_size,
                 kv_cache_bytes=4096 * 64 * 8 * head_size * 2)
    assert dispatch.geometry(p, "3d", sms=MI300X_SMS).num_segments == segments


@pytest.mark.parametrize("seqs, kv, segments", [(16, 2048, 15), (16, 8192, 30), (32, 4096, 19)])
def test_segments_stop_at_whole_rounds_of_the_device(seqs, kv, segments):
    # GQA 4, narrow 16 rows -> 4 tokens per q-block; base = (seqs // 4 + seqs) * 8 kv heads;
    # round = 304 * 4 = 1216 workgroups; 912 resident slots hold fewer than 8 segments (no fill).
    # 16 seqs: base 160, wanted 16 (2048 KV) -> 2560 = 2 rounds + 128 -> 2432 // 160 = 15
    # 16 seqs: base 160, wanted 32 (8192 KV) -> 5120 = 4 rounds + 256 -> 4864 // 160 = 30 (4800)
    # 32 seqs: base 320, wanted 22 (4096 KV) -> 7040 = 5 rounds + 960 -> 6080 // 320 = 19
    p = _problem(num_seqs=seqs, total_q=seqs, max_seqlen_k=kv)
    assert dispatch.geometry(p, "3d", sms=MI300X_SMS).num_segments == segments


def test_segments_of_an_mha_batch_fill_whole_rounds():
    # 8 decode tokens x 16 kv heads, 1 query head each (MHA): (8 // 16 + 8) * 16 = 128
    # workgroups per segment; 32768 KV wants 64 -> 8192 = 6 rounds + 896 -> 7296 // 128 = 57
    p = _problem(num_q_heads=16, num_kv_heads=16, num_seqs=8, total_q=8)
    assert dispatch.select_path(p, MI300X_SMS)[0] == "3d"
    assert dispatch.geometry(p, "3d", sms=MI300X_SMS).num_segments == 57


@pytest.mark.parametrize("kv, path", [(512, "2d"), (513, "3d")])
def test_short_context_boundary(kv, path):
    p = _problem(max_seqlen_k=kv)
    got, reason = dispatch.select_path(p, MI300X_SMS)
    assert got == path
    if path == "2d":
        assert "short context" in reason


def test_large_decode_batch_splits_whatever_the_2d_grid():
    # GQA 4: reference block of 16 rows = 4 tokens; 256 seqs -> (256 // 4 + 256) * 8 = 2560 >= 1216,
    # AITER's grid row would take 2D; a decode batch splits (modelled 1.2-1.7x faster, §10.1)
    p = _problem(num_seqs=256, total_q=256)
    assert dispatch.grid_2d_reference(p) == 2560
    assert dispatch.AITER_GRID_RULES[0][0](p, MI300X_SMS)
    path, reason = dispatch.select_path(p, MI300X_SMS)
    assert path == "3d" and reason.startswith("decode")


def test_prefill_grid_rule_boundary_is_num_sms_up_to_2048_keys():
    # MHA (group 1, 16 tokens per reference block), 8 kv heads, one prefill over 2048 keys:
    # (total_q // 16 + 1) * 8 >= 304  <=>  total_q // 16 >= 37
    below = _problem(num_q_heads=8, total_q=36 * 16, max_seqlen_q=36 * 16, max_seqlen_k=2048)
    at = _problem(num_q_heads=8, total_q=37 * 16, max_seqlen_q=37 * 16, max_seqlen_k=2048)
    assert dispatch.grid_2d_reference(below) == 296 and dispatch.select_path(below, MI300X_SMS)[0] == "3d"
    assert dispatch.grid_2d_reference(at) == 304
    path, reason = dispatch.select_path(at, MI300X_SMS)
    assert path == "2d" and reason.startswith("a prefill")
    # a longer walk (a 2049-key row): AITER's grid row, 304 < 1216 -> 3D
    assert dispatch.select_path(replace(at, max_seqlen_k=2049), MI300X_SMS)[0] == "3d"


def test_a_smaller_device_is_filled_sooner():
    # one 64-token prefill: (64 // 4 + 1) * 8 = 136 workgroups: below 304, at least 8
    p = _problem(max_seqlen_k=4096, total_q=64, max_seqlen_q=64)
    assert dispatch.select_path(p, MI300X_SMS)[0] == "3d"
    assert dispatch.select_path(p, 8)[0] == "2d"


@pytest.mark.parametrize("group, block_q", [(1, 16), (4, 4), (5, 3), (8, 2), (16, 1), (20, 1)])
def test_reference_block_q_packs_the_gqa_group(group, block_q):
    assert dispatch.reference_block_q(group) == block_q


# ---- the geometry tier (ALGORITHM.md §10.2) ----

def _filling(**kw):
    """A problem whose 2D grid needs more than one round on MI300X (1024 KV heads: at least
    1024 workgroups > 304 CUs), so the table's geometry runs (a one-round grid grows its KV
    tile, below)."""
    return _problem(**{"num_q_heads": 4 * 1024, "num_kv_heads": 1024, **kw})


@pytest.mark.parametrize("flash_wide, name, warps, single", [
    (4, "wide4", 4, False), (2, "wide2", 2, False), (0, "L4", 1, True)])
def test_d128_fp16_is_flash_with_the_levers_geometry(flash_wide, name, warps, single):
    geo = dispatch.geometry(_filling(max_seqlen_k=100), "2d", AttentionKnobs(flash_wide=flash_wide),
                            sms=MI300X_SMS)
    assert (geo.regime, geo.name, geo.num_warps, geo.k_single_buffer) == ("transposed_x8", name, warps, single)
    # d128 walks 32-key tiles: K single-buffers only when the warps' 32 columns each fit one tile
    assert geo.block_m == 32 * warps and geo.tile_size == 32


def test_d64_fp16_is_flash_too():
    geo = dispatch.geometry(_problem(head_size=64), "2d")
    assert (geo.regime, geo.name, geo.tile_size, geo.k_single_buffer) == ("transposed_x8", "wide4", 64, False)


def test_num_warps_lever_overrides_flash_width():
    geo = dispatch.geometry(_problem(), "2d", AttentionKnobs(flash_wide=0, num_warps=2))
    assert (geo.regime, geo.name, geo.num_warps, geo.k_single_buffer) == ("transposed_x8", "wide2", 2, False)


@pytest.mark.parametrize("d, warps, rows, bs, tile, single", [
    (128, 2, 16, 64, 32, True), (128, 2, 16, 16, 16, False), (64, 4, 32, 32, 32, False)])
def test_bf16_is_narrow_by_the_rules(d, warps, rows, bs, tile, single):
    """The rules keep bf16 narrow; transposed-x8 (32x32x8 has bf16) comes from the model's table
    (attention_dispatch.regime_geometry)."""
    geo = dispatch.geometry(_filling(dtype="bf16", head_size=d, block_size=bs), "2d", sms=MI300X_SMS)
    assert (geo.regime, geo.num_warps, geo.block_m_per_warp, geo.tile_size, geo.k_single_buffer) == \
        ("narrow", warps, rows, tile, single)
    assert "model's dispatch table picks transposed-x8" in geo.reason


@pytest.mark.parametrize("dtype, d, regime, block_m", [
    ("f16", 128, "narrow", 16), ("f16", 64, "narrow", 16), ("bf16", 128, "narrow", 16)])
def test_3d_geometry_is_one_warp(dtype, d, regime, block_m):
    geo = dispatch.geometry(_problem(dtype=dtype, head_size=d), "3d", sms=MI300X_SMS)
    assert (geo.regime, geo.num_warps, geo.block_m, geo.k_single_buffer) == (regime, 1, block_m, True)


def _knobs_for(name):
    return AttentionKnobs(flash_wide={"wide4": 4, "wide2": 2, "L4": 0}[name]) if name != "narrow" \
        else AttentionKnobs()


@pytest.mark.parametrize("family, path", [("attention_2d", "2d"), ("attention_3d", "3d")])
def test_dispatcher_picks_exactly_the_shipped_variants(family, path):
    """A shipped variant of the regime the dispatcher picks for its (dtype, head size, block size,
    GQA group) is exactly the dispatcher's spec under the lever that selects its geometry, and
    every geometry the dispatcher can build for a shipped (dtype, head size, block size) is
    shipped (up to the GQA group, a compile-time constant): `rocke list` shows what it runs."""
    from rocke.kernels import registry
    shipped = {n: v.spec for n, v in registry.all_variants().items() if v.family == family}
    assert shipped

    def spec_for(spec, knobs):      # the table's geometry: a grid of more than one round
        p = _problem(dtype=spec.dtype, head_size=spec.head_size, block_size=spec.block_size,
                     num_q_heads=1024 * spec.num_queries_per_kv, num_kv_heads=1024,
                     softcap=30.0 if spec.softcap else 0.0, alibi=spec.alibi, qq_bias=spec.qq_bias,
                     window_left=127 if spec.sliding_window else -1, sinks=spec.sinks,
                     kv_dtype=spec.kv_dtype)
        return dispatch.make_specs(p, dispatch.geometry(p, path, knobs, sms=MI300X_SMS), knobs)[0]

    agreed = 0
    for name, spec in shipped.items():
        picked = spec_for(spec, _knobs_for(name.split("/")[1].split("_")[0]))
        if picked.regime == spec.regime:
            assert picked == spec, name       # same regime: the very same kernel
            agreed += 1
    # (narrow fp16 variants ship for coverage of the narrow path; the dispatcher sends fp16 to flash)
    assert agreed >= len(shipped) // 2

    def key(s):
        return tuple((f, getattr(s, f)) for f in s.__dataclass_fields__ if f != "num_queries_per_kv")
    shipped_keys = {key(s) for s in shipped.values()}
    for spec in shipped.values():
        if spec.features:       # feature variants ship for the default geometry only
            continue
        names = ["narrow"] if path == "3d" else ["wide4", "wide2", "L4"]
        for geometry in names:
            picked = spec_for(spec, _knobs_for(geometry))
            assert key(picked) in shipped_keys, picked.kernel_name


# a single 128-token prefill, 32 query / 8 KV heads (GQA 4)
SHORT_PREFILL = dict(num_seqs=1, total_q=128, max_seqlen_q=128, max_seqlen_k=128)


@pytest.mark.parametrize("dtype, d, name, table_tile, tile, workgroups", [
    # f16 d128 wide4: 128 rows = 32 tokens -> 128 // 32 + 1 = 5 q blocks x 8 KV heads = 40
    ("f16", 128, "wide4", 32, 64, 40),
    # bf16 d128 narrow 2 x 16 rows = 8 tokens -> 17 q blocks x 8 = 136
    ("bf16", 128, "narrow_w2m16", 32, 64, 136),
    # bf16 d64 narrow 4 x 32 rows = 32 tokens -> 5 x 8 = 40
    ("bf16", 64, "narrow_w4m32", 32, 64, 40),
    # d256 narrow: a 64-key tile needs K 64 x 264 x 2 + V^T 256 x 72 x 2 + P 32 x 72 x 2 =
    # 75264 B > 64 KiB of LDS, so the 32-key tile (K 32 x 264 x 2 + V^T 256 x 40 x 2 + P 32 x 40 x 2 = 39936 B);
    # a plain one-round d256 prefill then takes 4 warps x 16 rows = 16 tokens: 128 // 16 + 1 =
    # 9 q blocks x 8 = 72 (one_round_body)
    ("f16", 256, "narrow_w2m16", 16, 32, 72),
])
def test_one_round_grid_grows_the_kv_tile(dtype, d, name, table_tile, tile, workgroups):
    """A 2D grid of at most num_sms workgroups runs in one round, one workgroup per CU: the
    dispatcher takes the largest KV tile (64, else 32) the spec accepts (ALGORITHM.md §10.2)."""
    p = _problem(dtype=dtype, head_size=d, **SHORT_PREFILL)
    table = dispatch.geometry(_filling(dtype=dtype, head_size=d, **SHORT_PREFILL), "2d",
                              sms=MI300X_SMS)
    geo = dispatch.geometry(p, "2d", sms=MI300X_SMS)
    assert dispatch.grid_2d(p, geo) == workgroups
    assert (table.name, table.tile_size) == (name, table_tile)
    body = "narrow_w4m16" if d == 256 else name
    assert (geo.name, geo.tile_size) == (body, tile) and "one round" in geo.reason
    spec = dispatch.make_specs(p, geo, AttentionKnobs())[0]
    assert spec.tile_size == tile and spec.num_warps == (4 if d == 256 else table.num_warps)


@pytest.mark.parametrize("dtype, d, block_size, kw, one_page, warps", [
    ("f16", 128, 64, {}, True, 4),                  # wide4, 64-key tile in a 64-token page
    ("bf16", 128, 64, {}, True, 2),                 # narrow, 64-key tile
    ("bf16", 128, 32, {}, False, 2),                # a 64-key tile spans two 32-token pages
    ("f16", 256, 64, {}, True, 4),                  # d256: 32-key tile, 4 warps x 16 rows
    ("bf16", 256, 16, {}, False, 4),                # d256 over 16-token pages: 4 warps, no lookup rule
    ("f16", 256, 64, dict(softcap=30.0), False, 2),  # a score feature: the table's body
    ("bf16", 128, 64, dict(kv_dtype="fp8_e4m3fnuz"), False, 2),   # fp8 cache: the table's body
])
def test_one_round_body_of_a_plain_prefill(dtype, d, block_size, kw, one_page, warps, monkeypatch):
    """A plain one-round prefill (no score feature, cache and output in the Q dtype) looks its
    page up once per tile where the page holds the tile (spec one_page_tile, "_op" in its name),
    and d256 takes 4 warps x 16 rows (ALGORITHM.md §10.2, one_round_body). The rules' regime:
    the model's table names narrow for the fp16 d128 class of this shape (§10.0)."""
    monkeypatch.setattr(dispatch, "_MODEL_TABLE", {})
    p = _problem(dtype=dtype, head_size=d, block_size=block_size, **SHORT_PREFILL, **kw)
    the_plan = dispatch.plan(p, "auto", AttentionKnobs(), sms=MI300X_SMS)
    (spec,) = the_plan.specs
    assert "one round" in the_plan.geometry.reason
    assert spec.one_page_tile is one_page and ("_op" in spec.kernel_name) is one_page
    assert spec.num_warps == warps, spec.kernel_name
    # d256 with two K buffers loads V a step ahead (early_v_body); a feature keeps the table's
    assert spec.early_v is (d == 256 and not kw), spec.kernel_name
    assert spec.kernel_name.endswith("_ev") is spec.early_v


@pytest.mark.parametrize("block_size, tile, one_page", [(64, 64, True), (32, 32, False),
                                                        (16, 32, False)])
def test_one_round_window_alone_on_x8_grows_to_the_pages_tile(block_size, tile, one_page):
    """A window alone on fp16 wide4 (interval-masked) in one round: the 64-key tile, looked up
    once per tile, where a page holds it (block 64); over smaller pages the table's 32-key tile
    (benchmarks/profile.py "window 128": modelled MI300X 16.08 -> 15.33 us)."""
    p = _problem(block_size=block_size, window_left=127, num_seqs=1, total_q=512,
                 max_seqlen_q=512, max_seqlen_k=512)
    (spec,) = dispatch.plan(p, "auto", AttentionKnobs(), sms=MI300X_SMS).specs
    assert spec.transposed_x8 and spec.interval_mask and spec.sliding_window
    assert (spec.tile_size, spec.one_page_tile) == (tile, one_page), spec.kernel_name


@pytest.mark.parametrize("total_q, grows", [(32 * 37, True), (32 * 38, False)])
def test_one_round_boundary_is_num_sms(total_q, grows):
    """f16 d128 wide4 (32 tokens a q block): 1184 tokens -> 1184 // 32 + 1 = 38 blocks x 8 KV
    heads = 304 workgroups = num_sms (one round); 1216 tokens -> 39 x 8 = 312 (two rounds)."""
    p = _problem(num_seqs=1, total_q=total_q, max_seqlen_q=total_q, max_seqlen_k=total_q)
    geo = dispatch.geometry(p, "2d", sms=MI300X_SMS)
    assert dispatch.grid_2d(p, geo) == (304 if grows else 312)
    assert geo.tile_size == (64 if grows else 32)


@pytest.mark.parametrize("kw, knobs", [
    (dict(batch_invariant=True), AttentionKnobs()),       # the tile must not follow the batch
    ({}, AttentionKnobs(num_warps=4)),                    # an explicit geometry lever
    ({}, AttentionKnobs(flash_wide=0)),                   # FLASH_WIDE=0: L4
    (dict(dtype="bf16", qq_bias=True), AttentionKnobs()),  # 64-key tiles spill with the gather
])
def test_one_round_tile_is_not_taken(kw, knobs):
    geo = dispatch.geometry(_problem(**SHORT_PREFILL, **kw), "2d", knobs, sms=MI300X_SMS)
    assert geo.tile_size == 32 and "one round" not in geo.reason


def test_every_geometry_rule_has_a_reason():
    for path, _, _, reason in dispatch.GEOMETRY_RULES:
        assert path in ("2d", "3d") and len(reason) > 30
    for _, path, reason in dispatch.PATH_RULES:
        assert path in ("2d", "3d") and len(reason) > 30


# vLLM's grid: 64-token pages x 4 KV heads x d128 fp16 = 65536 bytes a page, so 32768 pages are
# exactly 2**31 bytes. Shapes and strides only: meta tensors allocate nothing.
PAGE_BYTES = 64 * 4 * 128 * 2


@pytest.mark.parametrize("num_blocks, wide", [(2 ** 31 // PAGE_BYTES - 1, False),
                                              (2 ** 31 // PAGE_BYTES, True),
                                              (2 ** 31 // PAGE_BYTES + 1, True)])
def test_2_gib_boundary_dispatcher_and_kernel_check_agree(num_blocks, wide):
    """The page-base width the dispatcher picks is one the kernel's own argument check accepts,
    at 2**31 - page, exactly 2**31 and 2**31 + page bytes; the 32-bit kernel refuses 2**31."""
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    cache_bytes = num_blocks * PAGE_BYTES
    problem = _problem(num_q_heads=4, num_kv_heads=4, num_blocks=num_blocks,
                       kv_cache_bytes=cache_bytes, max_seqlen_k=64)
    assert problem.kv_addr_64 is wide
    (spec,) = au.plan(problem, "2d", AttentionKnobs()).specs
    assert spec.kv_addr_64 is wide
    meta = dict(device="meta", dtype=torch.float16)
    k = torch.empty(num_blocks, 64, 4, 128, **meta)
    assert k.stride(0) * k.shape[0] * k.element_size() == cache_bytes
    q = torch.empty(1, 4, 128, **meta)
    ints = [torch.zeros(1, 1, dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([64], dtype=torch.int32)]
    a2.check_common_args(spec, q, k, k, *ints)          # accepted with the dispatcher's choice
    narrow = a2.UnifiedAttention2DSpec(**{**{f: getattr(spec, f) for f in ("dtype", "head_size",
                                          "block_size", "num_queries_per_kv", "num_warps",
                                          "block_m_per_warp")}, "kv_addr_64": False})
    if wide:
        with pytest.raises(ValueError, match="k_cache: the cache .* spans"):
            a2.check_common_args(narrow, q, k, k, *ints)
    else:
        a2.check_common_args(narrow, q, k, k, *ints)


def test_problem_rejects_gqa_that_does_not_divide():
    with pytest.raises(ValueError, match="num_q_heads: 10 is not a multiple of num_kv_heads 4"):
        _problem(num_q_heads=10, num_kv_heads=4)
    assert _problem(num_q_heads=40, num_kv_heads=8).num_queries_per_kv == 5


# ---- graph replay recommendation (ALGORITHM.md §10.3) ----

@pytest.mark.parametrize("max_q, total_q, kv, want", [
    (1, 1, 32768, True),          # decode
    (768, 768, 768, True),        # short prefill
    (769, 769, 769, False),       # long prefill: kernel-bound
])
def test_graph_replay_by_regime(max_q, total_q, kv, want):
    p = _problem(max_seqlen_q=max_q, total_q=total_q, max_seqlen_k=kv)
    assert dispatch.recommend_graph_replay(p, capturing=False) is want


def test_no_graph_replay_when_the_caller_captures_or_the_lever_is_off():
    p = _problem()
    assert dispatch.recommend_graph_replay(p, capturing=True) is False
    assert dispatch.recommend_graph_replay(p, AttentionKnobs(graph_3d=False), path="3d", capturing=False) is False
    assert dispatch.recommend_graph_replay(p, AttentionKnobs(graph_2d=False), path="3d", capturing=False) is True
    assert dispatch.recommend_graph_replay(p, read_knobs({"HIPDNN_GFX942_2D_GRAPH": "0"}), path="2d",
                                      capturing=False) is False


def test_no_graph_replay_for_feature_flagged_problems():
    assert dispatch.recommend_graph_replay(_problem(), capturing=False) is True
    assert dispatch.recommend_graph_replay(_problem(sinks=True), capturing=False) is False


# ---- the entry point in the emulator (memcheck + racecheck on: runtime.launch's default) ----

from rocke.kernels.common.attention_reference import ref_paged_attn  # noqa: E402
from rocke.kernels.common.tolerances import attention_atol  # noqa: E402
from tests.kernels.unified_inputs import make_inputs  # noqa: E402

# (query_len, kv_len): decode rows and prefill rows in one batch, KV lengths off the page size
MIXED = [(1, 37), (5, 21), (1, 1), (3, 50)]
LONG_DECODE = [(1, 600), (1, 530)]          # > 512 keys, few workgroups: auto picks 3D


def _check(args, record, dtype):
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"])
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({record.plan.specs})"
    return err


@pytest.mark.parametrize("backend, seqs, dtype, d, bs, hq, hk, want_path", [
    ("2d", MIXED, "f16", 64, 16, 8, 2, "2d"),            # GQA 4:1, narrow
    ("auto", MIXED, "bf16", 128, 32, 10, 2, "2d"),       # GQA 5:1, short context -> 2D narrow
    ("auto", MIXED, "f16", 128, 64, 8, 1, "2d"),         # GQA 8:1, flash wide4
    ("3d", MIXED, "f16", 64, 32, 2, 2, "3d"),            # MHA 1:1, prefill rows through 3D
    ("auto", LONG_DECODE, "bf16", 128, 16, 8, 2, "3d"),  # long decode -> 3D + reduce_segments
    ("3d", MIXED, "f16", 128, 16, 10, 2, "3d"),          # GQA 5:1 flash-sized head, 3D
])
def test_entry_point_matches_reference(backend, seqs, dtype, d, bs, hq, hk, want_path):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=d + bs + hq,
                       q_view=(hq == 8))
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == want_path
    _check(args, record, dtype)


def test_second_same_geometry_call_builds_nothing():
    first = make_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=11)
    au.run_unified_attention_torch(**first, backend="2d")
    stats = au.compiled_cache_stats()
    builds, hits = stats.builds, stats.hits
    # different lengths and contents, same geometry (dtype, head size, block size, GQA group)
    second = make_inputs([(2, 9), (1, 70)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=12)
    record = au.run_unified_attention_torch(**second, backend="2d")
    assert stats.builds == builds and stats.hits == hits + 1
    _check(second, record, "f16")


def test_the_emulator_never_captures_a_graph_of_its_own(monkeypatch):
    """Graph replay saves a GPU's launch overhead; on the emulator a repeated call hits the call
    cache and runs its launches again, re-packed from the call's own tensors (no capture)."""
    from rocke.runtime import Graph
    args = make_inputs(LONG_DECODE, hq=8, hk=2, d=128, bs=16, dtype="bf16", seed=3)
    args.update(k_descale=None, v_descale=None)     # host descales keep a call out of the cache
    monkeypatch.setattr(Graph, "capture", lambda self: pytest.fail("captured"))
    for _ in range(4):
        record = au.run_unified_attention_torch(**args)
        assert record.plan.graph_replay and not record.replayed
    _check(args, record, "bf16")


@pytest.mark.parametrize("env, geometry, warps", [
    ({"HIPDNN_GFX942_FLASH_WIDE": "0"}, "L4", 1),
    ({"HIPDNN_GFX942_FLASH_WIDE": "2", "HIPDNN_GFX942_Q_MAJOR_GRID": "1"}, "wide2", 2),
])
def test_levers_reach_the_kernel(monkeypatch, env, geometry, warps):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = make_inputs(MIXED, hq=4, hk=2, d=128, bs=32, dtype="f16", seed=5)
    record = au.run_unified_attention_torch(**args)
    (spec,) = record.plan.specs
    assert (record.plan.geometry.name, spec.num_warps, spec.transposed_x8) == \
        (geometry, warps, True)
    assert spec.q_major_grid == ("HIPDNN_GFX942_Q_MAJOR_GRID" in env)
    assert spec.kv_cache_policy == "normal"
    _check(args, record, "f16")


def test_empty_batch_launches_nothing(monkeypatch):
    import rocke.runtime
    monkeypatch.setattr(rocke.runtime, "launch", lambda *a, **k: pytest.fail("launched"))
    args = make_inputs([(1, 5)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=1)
    args.update(q=args["q"][:0], out=args["out"][:0], cu_seqlens_q=torch.zeros(2, dtype=torch.int32),
                max_seqlen_q=0)
    assert au.run_unified_attention_torch(**args) is None


def test_size_one_dimensions_with_odd_strides_are_accepted():
    """torch may give a size-1 dimension any stride; only real overlap is an error."""
    args = make_inputs([(2, 5)], hq=2, hk=1, d=64, bs=16, dtype="f16", seed=2)
    k = args["k"]
    args["k"] = k.as_strided(k.shape, (k.stride(0), k.stride(1), 10 ** 6, 1))   # Hk = 1
    args["v"] = args["v"].as_strided(k.shape, (k.stride(0), k.stride(1), 7, 1))
    assert au.describe_problem(**args).num_kv_heads == 1


@pytest.mark.parametrize("backend, seqs", [("2d", MIXED), ("3d", LONG_DECODE)])
def test_a_repeated_call_reads_new_contents(backend, seqs):
    """A cached call (same tensors) reads the tensors' current contents: new q, new cache values,
    a new page order."""
    args = make_inputs(seqs, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=21)
    args.update(k_descale=None, v_descale=None)
    first = au.run_unified_attention_torch(**args, backend=backend)
    _check(args, first, "f16")
    g = torch.Generator().manual_seed(5)
    args["q"].copy_(torch.rand(args["q"].shape, generator=g) * 2 - 1)
    args["k"].copy_(torch.rand(args["k"].shape, generator=g) * 2 - 1)
    table = args["block_table"]
    table[0, :2] = table[0, :2].flip(0).clone()       # same pages, another order
    args["out"].fill_(7.0)
    again = au.run_unified_attention_torch(**args, backend=backend)
    assert len(again.reports) == len(first.plan.specs)             # every kernel ran again
    _check(args, again, "f16")


def test_graph_replay_stays_off_when_the_lever_says_so_or_the_caller_captures(monkeypatch):
    from rocke.runtime import Graph
    args = make_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=22)
    monkeypatch.setenv("HIPDNN_GFX942_2D_GRAPH", "0")
    record = au.run_unified_attention_torch(**args, backend="2d")
    assert not record.plan.graph_replay and not record.replayed
    _check(args, record, "f16")
    monkeypatch.delenv("HIPDNN_GFX942_2D_GRAPH")
    args["out"].fill_(7.0)
    outer = Graph()
    with outer.capture():                  # the caller's graph takes precedence: no nesting
        record = au.run_unified_attention_torch(**args, backend="2d")
    assert not record.plan.graph_replay and outer.num_launches == 1
    outer.replay()
    _check(args, record, "f16")


def _transposed_out(a):
    total_q, hq, d = a["out"].shape
    a["out"] = torch.empty(hq, total_q, d, dtype=a["out"].dtype).transpose(0, 1)
    return "out", Q_LAYOUT


Q_LAYOUT = r"\[total_q, num_q_heads, head_size\]"


# a permuted cache (vLLM's HND memory viewed as NHD) runs: tests/kernels/test_attention_hnd_cache.py
@pytest.mark.parametrize("mutate", [_transposed_out])
def test_non_row_major_tensor_is_named_as_such(mutate):
    """Nothing overlaps in a transposed out: the error says the tensor is not row-major and
    which layout the kernels read."""
    from tests.kernels.unified_inputs import make_inputs
    args = make_inputs([(3, 20), (1, 33)], hq=4, hk=2, d=64, bs=16)
    name, layout = mutate(args)
    with pytest.raises(ValueError, match=rf"^{name}: not row-major: .*row-major {layout} layout") as e:
        au.run_unified_attention_torch(**args)
    assert "overlap" not in str(e.value)


@pytest.mark.parametrize("backend, d", [("2d", 64), ("2d", 128), ("3d", 64)])
def test_empty_softmax_outputs_zero_on_every_path(backend, d):
    """causal=False decode with seqused_k = 0 for one sequence: the row sees no key and its
    output is 0 (ALGORITHM.md §2.1) on the 2D narrow and flash paths, the 3D path and the
    reference alike; the other rows still match the reference."""
    args = make_inputs([(1, 20), (1, 0), (1, 33)], hq=4, hk=2, d=d, bs=16, dtype="f16", seed=9,
                       causal=False)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == backend
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"])
    assert torch.equal(ref[1], torch.zeros_like(ref[1]))
    assert torch.equal(args["out"][1], torch.zeros_like(args["out"][1]))
    _check(args, record, "f16")


def test_batch_of_no_sequences_returns_none(monkeypatch):
    """num_seqs = 0 (cu_seqlens_q = [0], no table rows): the docstring's empty batch, None."""
    import rocke.runtime
    monkeypatch.setattr(rocke.runtime, "launch", lambda *a, **k: pytest.fail("launched"))
    args = make_inputs([(1, 5)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=1)
    out_before = args["out"][:0].clone()
    args.update(q=args["q"][:0], out=args["out"][:0], cu_seqlens_q=torch.zeros(1, dtype=torch.int32),
                seqused_k=torch.zeros(0, dtype=torch.int32), block_table=args["block_table"][:0],
                k_descale=None, v_descale=None, max_seqlen_q=0, max_seqlen_k=0)
    assert au.run_unified_attention_torch(**args) is None
    assert torch.equal(args["out"], out_before)


def test_an_empty_batch_still_checks_its_inputs():
    args = make_inputs([(1, 5)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=1)
    args.update(q=args["q"][:0], out=args["out"][:0], cu_seqlens_q=torch.zeros(2, dtype=torch.int32),
                seqused_k=torch.zeros(0, dtype=torch.int32), block_table=args["block_table"][:0])
    with pytest.raises(ValueError, match=r"cu_seqlens_q: must have num_seqs \+ 1 = 1 entries"):
        au.run_unified_attention_torch(**args)


def test_problem_of_no_sequences_has_no_tokens():
    assert _problem(num_seqs=0, total_q=0).num_seqs == 0
    with pytest.raises(ValueError, match="total_q: an empty batch"):
        _problem(num_seqs=0, total_q=1)


def test_compile_only_builds_the_plans_kernels_and_launches_nothing(monkeypatch, tmp_path):
    """compile_only: the call's checks, plan and kernel builds (into the compile cache), no
    launch, `out` untouched; a bad input is still refused first."""
    from tests.kernels.unified_inputs import compile_only_setting
    compile_only_setting(monkeypatch, tmp_path)
    inputs = make_inputs([(5, 40), (1, 70)])
    inputs["out"].fill_(7.0)
    record = au.run_unified_attention_torch(*inputs.values(), compile_only=True)
    assert record.reports == [] and record.kernels
    assert len(record.kernels) == len(record.plan.specs)
    assert all(k.startswith(("attention_2d", "attention_3d", "reduce_segments"))
               for k in record.kernels)
    assert bool((inputs["out"] == 7.0).all())
    assert any(tmp_path.iterdir()), "nothing in the compile cache"
    bad = dict(inputs, block_table=inputs["block_table"].long())
    with pytest.raises(ValueError, match="block_table: dtype must be torch.int32"):
        au.run_unified_attention_torch(*bad.values(), compile_only=True)


def test_built_spec_builds_each_distinct_spec_once_and_a_refusal_every_time():
    """make_specs' specs come from built_spec: one instance per distinct field set (its checks
    run once), while a field set the spec refuses raises on every call, never a cached spec."""
    from rocke.kernels.gfx942 import reduce_segments as rs
    fields = dict(dtype="f16", head_size=128, vector_width=4)
    first = dispatch.built_spec(rs.ReduceSegmentsSpec, fields)
    assert dispatch.built_spec(rs.ReduceSegmentsSpec, dict(reversed(fields.items()))) is first
    assert first == rs.ReduceSegmentsSpec("f16", 128, 4)
    other = dispatch.built_spec(rs.ReduceSegmentsSpec, dict(fields, early_loads=True))
    assert other is not first and other.early_loads
    for _ in range(2):
        with pytest.raises(ValueError):
            dispatch.built_spec(rs.ReduceSegmentsSpec, dict(fields, head_size=100))
