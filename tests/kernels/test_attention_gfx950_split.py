"""gfx950's 3D split-KV rule (rocke/kernels/gfx950/attention_split.py, ALGORITHM.md §14.2): the
path and segment count gfx950's dispatcher plans, worked out by hand from the rule, and what
stays as before (gfx942's rule, batch invariance, the caller's segment count, forced paths)."""
from dataclasses import replace

import pytest

from rocke.kernels.common import attention_unified as au
from rocke.kernels.gfx942 import attention_dispatch as gfx942
from rocke.kernels.gfx950 import attention_dispatch as dispatch
from rocke.kernels.gfx950 import attention_split as split


def _problem(seqs, kv, q_len=1, **kw):
    """fp16 d128, 32 query / 8 KV heads (GQA 4), block 64: the sweep's configuration."""
    base = dict(dtype="f16", head_size=128, num_q_heads=32, num_kv_heads=8, block_size=64,
                num_seqs=seqs, total_q=seqs * q_len, max_seqlen_q=q_len, max_seqlen_k=kv,
                causal=True, num_blocks=4096, kv_cache_bytes=4096 * 64 * 8 * 128 * 2)
    base.update(kw)
    return au.UnifiedAttentionProblem(**base)


# One segment's 3D grid for b decode sequences: the narrow 3D workgroup holds 16 rows = 4 tokens
# of the GQA-4 group, a sequence starts a new q block: (b // 4 + b) q blocks x 8 KV heads.
# Segments = the power of two nearest 256 CUs x 8 resident / that grid, at most 64 and at most
# a power of two of half the 32-key tiles.
@pytest.mark.parametrize("seqs, kv, segments", [
    (1, 2048, 32),      # grid 8: 2048 / 8 = 256 -> 64 cap; 64 tiles -> 32 (two tiles a segment)
    (1, 8192, 64),      # 256 tiles -> 128; cap 64
    (4, 8192, 64),      # grid 40: 51.2 -> 64
    (8, 2048, 32),      # grid 80: 25.6 -> 32 (gfx942's rule at 256 CUs: 12)
    (16, 2048, 16),     # grid 160: 12.8 -> 16
    (32, 8192, 8),      # grid 320: 6.4 -> 8
    (64, 2048, 4),      # grid 640: 3.2 -> 4
    (128, 2048, 2),     # grid 1280: 1.6 -> 2
    (512, 2048, 1),     # grid 5120: 0.4 -> 1
])
def test_decode_segments_fill_the_resident_slots_once(seqs, kv, segments):
    the_plan = dispatch.plan(_problem(seqs, kv), with_specs=False)
    assert the_plan.path == "3d"
    assert the_plan.geometry.num_segments == segments


def test_the_old_rule_would_have_split_8_sequences_into_12():
    """The rule this replaces (gfx942's, over 256 CUs): 2 sqrt(64 tiles) = 16 wanted, 16 x 80 =
    1280 workgroups pass a round of 1024, cut to 1024 // 80 = 12 segments. Modelled MI355X
    (2000-cycle round trip): 12 segments 34.5 us, 32 segments 28.4."""
    p = _problem(8, 2048)
    # gfx942's rule has since changed (ALGORITHM.md §10.1): 256 x 3 resident d128 slots / 80
    # workgroups = 9 segments fill them once, 8 with the same 8-tile walk
    assert gfx942.plan(p, "3d", with_specs=False, sms=256).geometry.num_segments == 8
    assert dispatch.plan(p, "3d", with_specs=False).geometry.num_segments == 32


@pytest.mark.parametrize("seqs", [128, 256, 512])
def test_decode_batches_split_past_the_2d_grid_threshold(seqs):
    """(seqs // 4 + seqs) x 8 = 1280 / 2560 / 5120 2D workgroups reach 256 x 4: gfx942's rule
    takes 2D, gfx950's splits decode (modelled 1.2-1.6x faster)."""
    p = _problem(seqs, 2048)
    assert gfx942.AITER_GRID_RULES[0][0](p, 256)     # AITER's grid row would take 2D
    path, reason = dispatch.select_path(p)
    assert path == "3d" and reason.startswith("decode")
    the_plan = dispatch.plan(p, with_specs=False)
    assert the_plan.path == "3d" and the_plan.reason == reason


@pytest.mark.parametrize("problem, path", [
    # 12 sequences of [96, 32, 1] query tokens (516), KV up to 1024: 2D grid 1128 >= 1024
    (_problem(12, 1024, total_q=516, max_seqlen_q=96), "2d"),
    # the same mix x 2 (258 tokens): grid 560 < 1024 -> 3D, 4 segments (560 x 4 = 2240)
    (_problem(6, 1024, total_q=258, max_seqlen_q=96), "3d"),
    (_problem(1, 640, q_len=640), "2d"),                     # a long prefill: grid 1288
    (_problem(8, 512), "2d"),                                # short context
    (_problem(8, 4096, window_left=127), "2d"),        # a sliding window
])
def test_other_problems_keep_gfx942s_rows(problem, path):
    """gfx942's window and short-context rows, then AITER's grid rows (gfx942 itself now runs a
    prefill 2D from num_sms workgroups, ALGORITHM.md §10.1; gfx950 keeps num_sms * 4)."""
    aiter = next(p for applies, p, _ in gfx942.PATH_RULES[:2] + gfx942.AITER_GRID_RULES
                 if applies(problem, 256))
    assert dispatch.select_path(problem)[0] == path == aiter


def test_mixed_batch_segments():
    """The x 2 prefill mix: grid (258 // 4 + 6) x 8 = 560 -> 2048 / 560 = 3.7 -> 4 segments."""
    p = _problem(6, 1024, total_q=258, max_seqlen_q=96)
    assert dispatch.plan(p, with_specs=False).geometry.num_segments == 4


def test_batch_invariance_the_callers_count_and_forced_paths_are_kept():
    p = _problem(128, 2048)
    assert dispatch.plan(replace(p, batch_invariant=True), with_specs=False).path == "2d"
    assert dispatch.plan(p, "3d", with_specs=False, num_segments=5).geometry.num_segments == 5
    assert dispatch.plan(p, "2d", with_specs=False).path == "2d"


def test_gfx950_rules_are_gfx942s_with_the_decode_row_before_the_grid_rule():
    assert split.PATH_RULES[:2] == gfx942.PATH_RULES[:2]
    assert split.PATH_RULES[2] is split.DECODE_SPLITS
    assert split.PATH_RULES[3:] == gfx942.AITER_GRID_RULES


def test_gfx942_keeps_its_rule():
    """gfx942's own rule (ALGORITHM.md §10.1), not gfx950's: 8 decode sequences x 2048 KV on 304
    CUs fill 304 x 3 resident slots with 80 workgroups a segment: 11 segments (gfx950: 32).
    gfx942's plan for this swept problem follows the model's table (§10.0): 13 segments,
    modelled MI300X 40.8 us against the rule's 11 at 43.1 (2000 cycles,
    tools/dispatch_tables.py)."""
    assert gfx942.geometry(_problem(8, 2048), "3d", sms=304).num_segments == 11
    assert gfx942.plan(_problem(8, 2048), with_specs=False, sms=304).geometry.num_segments == 13
