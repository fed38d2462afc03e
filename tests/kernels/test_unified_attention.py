"""run_unified_attention_torch: the dispatcher's rules (pure, nothing launched), and the whole entry
point in the emulator (memcheck + racecheck on) against ref_paged_attn."""
import pytest

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.knobs import AttentionKnobs, read_knobs

MI300X_SMS = 304


def _problem(**kw):
    base = dict(dtype="f16", head_size=128, num_q_heads=32, num_kv_heads=8, block_size=64,
                num_seqs=1, total_q=1, max_seqlen_q=1, max_seqlen_k=32768, causal=True,
                num_blocks=4096, kv_cache_bytes=4096 * 64 * 8 * 128 * 2)
    base.update(kw)
    return au.UnifiedAttentionProblem(**base)


# ---- select_path (seed 004 §6; ALGORITHM.md §11.1) ----

def test_num_sms_is_mi300x_without_a_device():
    assert au.num_sms() == MI300X_SMS


def test_long_kv_decode_goes_3d_and_fills_the_device():
    p = _problem()
    path, reason = p.select_path(MI300X_SMS)
    assert path == "3d" and "split" in reason
    geo = p.geometry("3d", sms=MI300X_SMS)
    # 1 q-block x 8 kv heads; 304*4 / 8 = 152 segments wanted, capped at MAX_SEGMENTS
    assert geo.num_segments == au.MAX_SEGMENTS == 64


def test_segments_never_outnumber_kv_tiles():
    p = _problem(max_seqlen_k=600)
    assert p.select_path(MI300X_SMS)[0] == "3d"
    assert p.geometry("3d", sms=MI300X_SMS).num_segments == 10      # cdiv(600, 64)


def test_segments_fill_exactly_the_target_when_uncapped():
    # 8 decode tokens x 16 kv heads, 1 query head each (MHA): 8 * 16 = 128 workgroups per segment
    p = _problem(num_q_heads=16, num_kv_heads=16, num_seqs=8, total_q=8)
    assert p.select_path(MI300X_SMS)[0] == "3d"
    block_q = 16 // 1
    base = (8 // block_q + 8) * 16
    assert p.geometry("3d", sms=MI300X_SMS).num_segments == -(-MI300X_SMS * 4 // base) == 10


@pytest.mark.parametrize("kv, path", [(512, "2d"), (513, "3d")])
def test_short_context_boundary(kv, path):
    p = _problem(max_seqlen_k=kv)
    got, reason = p.select_path(MI300X_SMS)
    assert got == path
    if path == "2d":
        assert "short context" in reason


def test_large_decode_batch_fills_the_device_in_2d():
    # GQA 4: reference block of 16 rows = 4 tokens; 256 seqs -> (256 // 4 + 256) * 8 = 2560 >= 1216
    p = _problem(num_seqs=256, total_q=256)
    assert p.grid_2d_reference() == 2560
    path, reason = p.select_path(MI300X_SMS)
    assert path == "2d" and "num_sms * 4" in reason


def test_grid_rule_boundary_is_num_sms_times_4():
    # MHA (group 1, 16 tokens per reference block), 8 kv heads, one long sequence:
    # (total_q // 16 + 1) * 8 >= 1216  <=>  total_q // 16 >= 151
    below = _problem(num_q_heads=8, total_q=150 * 16, max_seqlen_q=150 * 16)
    at = _problem(num_q_heads=8, total_q=151 * 16, max_seqlen_q=151 * 16)
    assert below.grid_2d_reference() == 1208 and below.select_path(MI300X_SMS)[0] == "3d"
    assert at.grid_2d_reference() == 1216 and at.select_path(MI300X_SMS)[0] == "2d"


def test_a_smaller_device_is_filled_sooner():
    p = _problem(max_seqlen_k=4096, num_seqs=4, total_q=4)
    assert p.select_path(MI300X_SMS)[0] == "3d"
    assert p.select_path(8)[0] == "2d"


@pytest.mark.parametrize("group, block_q", [(1, 16), (4, 4), (5, 3), (8, 2), (16, 1), (20, 1)])
def test_reference_block_q_packs_the_gqa_group(group, block_q):
    assert au.reference_block_q(group) == block_q


# ---- the geometry tier (seeds 000 §6-7, 004 §6; ALGORITHM.md §11.2) ----

@pytest.mark.parametrize("flash_wide, name, warps, single", [
    (4, "wide4", 4, False), (2, "wide2", 2, True), (0, "L4", 1, True)])
def test_d128_fp16_is_flash_with_the_levers_geometry(flash_wide, name, warps, single):
    geo = _problem(max_seqlen_k=100).geometry("2d", AttentionKnobs(flash_wide=flash_wide))
    assert (geo.regime, geo.name, geo.num_warps, geo.k_single_buffer) == ("flash", name, warps, single)
    assert geo.block_m == 32 * warps and geo.tile_size == 64


def test_num_warps_lever_overrides_flash_width():
    geo = _problem().geometry("2d", AttentionKnobs(flash_wide=0, num_warps=2))
    assert (geo.regime, geo.num_warps, geo.k_single_buffer) == ("flash", 2, True)


def test_d128_bf16_is_narrow_two_warps_single_k():
    geo = _problem(dtype="bf16").geometry("2d")
    assert (geo.regime, geo.num_warps, geo.block_m_per_warp, geo.k_single_buffer) == ("narrow", 2, 32, True)
    assert "fp16-only" in geo.reason


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_d64_is_narrow_four_warps_double_k(dtype):
    geo = _problem(dtype=dtype, head_size=64).geometry("2d")
    assert (geo.regime, geo.num_warps, geo.block_m_per_warp, geo.k_single_buffer) == ("narrow", 4, 32, False)


def test_every_geometry_rule_has_a_reason():
    for path, _, _, reason in au.GEOMETRY_RULES:
        assert path in ("2d", "3d") and len(reason) > 30
    for _, path, reason in au.PATH_RULES:
        assert path in ("2d", "3d") and len(reason) > 30


def test_kv_addr_64_only_past_2_gib():
    assert not _problem(kv_cache_bytes=2 ** 31).kv_addr_64
    assert _problem(kv_cache_bytes=2 ** 31 + 1).kv_addr_64


def test_problem_rejects_gqa_that_does_not_divide():
    with pytest.raises(ValueError, match="num_q_heads: 10 is not a multiple of num_kv_heads 4"):
        _problem(num_q_heads=10, num_kv_heads=4)
    assert _problem(num_q_heads=40, num_kv_heads=8).num_queries_per_kv == 5


# ---- graph replay recommendation (seed 000 §9) ----

@pytest.mark.parametrize("max_q, total_q, kv, want", [
    (1, 1, 32768, True),          # decode
    (768, 768, 768, True),        # short prefill
    (769, 769, 769, False),       # long prefill: kernel-bound
])
def test_graph_replay_by_regime(max_q, total_q, kv, want):
    p = _problem(max_seqlen_q=max_q, total_q=total_q, max_seqlen_k=kv)
    assert au._recommend_graph_replay(p, capturing=False) is want


def test_no_graph_replay_when_the_caller_captures_or_the_lever_is_off():
    p = _problem()
    assert au._recommend_graph_replay(p, capturing=True) is False
    assert au._recommend_graph_replay(p, AttentionKnobs(graph_3d=False), path="3d", capturing=False) is False
    assert au._recommend_graph_replay(p, AttentionKnobs(graph_2d=False), path="3d", capturing=False) is True
    assert au._recommend_graph_replay(p, read_knobs({"HIPDNN_GFX942_2D_GRAPH": "0"}), path="2d",
                                      capturing=False) is False


def test_no_graph_replay_for_feature_flagged_problems():
    p = _problem()
    flagged = object.__new__(au.UnifiedAttentionProblem)      # features are refused at construction
    for f in p.__dataclass_fields__:
        object.__setattr__(flagged, f, getattr(p, f))
    object.__setattr__(flagged, "features", frozenset({"sinks"}))
    assert au._recommend_graph_replay(flagged, capturing=False) is False
    with pytest.raises(NotImplementedError, match="features"):
        _problem(features=frozenset({"sinks"}))
