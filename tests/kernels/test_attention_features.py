"""The score features of issue 8 (softcap, ALiBi, QQ-bias, sliding window, sinks; ALGORITHM.md
§12) through run_unified_attention_torch in the emulator (memcheck + racecheck on: runtime.launch's
default), against the fp32 reference ``ref_paged_attn``, each alone and in the combinations vLLM
uses, on both paths; plus the dispatcher's feature rules and the window's tile skipping."""
import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from tests.kernels.unified_inputs import make_inputs

MI300X_SMS = 304
# (query_len, kv_len): decode and prefill rows in one batch, KV lengths off the page size
MIXED = [(1, 37), (5, 21), (1, 1), (3, 50)]
LONG_DECODE = [(1, 600), (1, 530)]          # auto picks 3D (no window): many segments


def _features(names, hq, max_q, seed):
    """Feature arguments with values that move the output well past the tolerance."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    if "softcap" in names:
        out["softcap"] = 0.15            # the scores (|s| up to ~1) reach tanh's saturation
    if "alibi" in names:
        out["alibi_slopes"] = torch.rand(hq, generator=g) * 0.5 + 0.05
    if "qq_bias" in names:
        out["qq_bias"] = torch.randn(max_q + 1, max_q + 1, generator=g)
    if "window" in names:
        out["window_size"] = (5, 0)      # vLLM: (sliding_window - 1, 0)
    if "sinks" in names:
        out["sinks"] = torch.randn(hq, generator=g) + 4.0     # worth several hundred keys
    return out


def _run(names, seqs, backend, dtype, d, bs, hq, hk, seed=0):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=seed)
    feats = _features(names, hq, args["max_seqlen_q"], seed)
    args.update(feats)
    if "sinks" in names:    # values away from 0 so the sink's share of the denominator shows
        args["v"] = (args["v"].float() + 1.0).to(args["v"].dtype)
    record = au.run_unified_attention_torch(**args, backend=backend)
    ref_kw = {k: v for k, v in feats.items()}
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], **ref_kw)
    plain = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                           args["block_table"], args["softmax_scale"])
    err = (args["out"].float() - ref).abs().max().item()
    # the feature matters on these inputs: ignoring it would fail the tolerance
    assert (plain - ref).abs().max().item() > 3 * attention_atol(dtype), "feature has no effect"
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({record.plan.specs[0].kernel_name})"
    return record


@pytest.mark.parametrize("names, seqs, backend, dtype, d, bs, hq, hk, want", [
    # each feature alone
    (("softcap",), MIXED, "2d", "f16", 64, 16, 8, 2, "2d"),        # GQA 4:1, flash
    (("alibi",), MIXED, "3d", "bf16", 64, 32, 2, 2, "3d"),         # MHA, 3D narrow
    (("qq_bias",), MIXED, "auto", "f16", 128, 64, 8, 1, "2d"),     # GQA 8:1, fp16 but narrow
    (("window",), MIXED, "auto", "bf16", 128, 16, 10, 2, "2d"),    # GQA 5:1, narrow
    (("sinks",), MIXED, "3d", "f16", 128, 16, 8, 2, "3d"),         # 3D flash L4, GQA 4:1
    (("sinks",), LONG_DECODE, "auto", "bf16", 64, 16, 4, 1, "3d"),  # sink carried by segment 0 only
    # the combinations vLLM uses
    (("window", "softcap"), MIXED, "2d", "f16", 64, 32, 8, 1, "2d"),
    (("window", "softcap"), MIXED, "auto", "bf16", 64, 16, 4, 1, "2d"),
    (("sinks", "window"), MIXED, "3d", "bf16", 64, 64, 2, 2, "3d"),   # window split into segments
    (("sinks", "window"), MIXED, "auto", "f16", 128, 32, 10, 2, "2d"),
    (("alibi",), [(6, 6), (1, 19), (4, 40)], "auto", "f16", 64, 16, 10, 2, "2d"),  # ALiBi + causal varlen
    (("softcap", "alibi", "qq_bias", "window", "sinks"), MIXED, "2d", "bf16", 128, 32, 4, 1, "2d"),
    (("softcap", "alibi", "qq_bias", "window", "sinks"), MIXED, "3d", "f16", 64, 16, 8, 2, "3d"),
])
def test_feature_matches_reference(names, seqs, backend, dtype, d, bs, hq, hk, want):
    record = _run(names, seqs, backend, dtype, d, bs, hq, hk, seed=d + bs + hq)
    assert record.plan.path == want
    spec = record.plan.specs[0]
    expect = {"softcap", "alibi", "qq_bias", "sinks"} & set(names) | \
        ({"sliding_window"} if "window" in names else set())
    assert set(spec.features) == expect


def test_large_softcap_on_large_scores():
    """Gemma-style c = 30 with scores up to about +-60: the kernels' exp2/rcp form of c tanh
    (ALGORITHM.md §12.2) holds the fp16 tolerance where the cap bites hardest, on the flash path."""
    args = make_inputs(MIXED, hq=8, hk=2, d=64, bs=16, dtype="f16", seed=21)
    args.update(softcap=30.0, softmax_scale=8.0)
    record = au.run_unified_attention_torch(**args, backend="2d")
    assert record.plan.geometry.regime == "transposed_x8"
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], 8.0, softcap=30.0)
    plain = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                           args["block_table"], 8.0)
    assert (plain - ref).abs().max().item() > 0.1
    assert (args["out"].float() - ref).abs().max().item() <= attention_atol("f16")


def test_qq_bias_runs_narrow_on_both_paths():
    p = _problem(qq_bias=True)
    for path in ("2d", "3d"):
        geo = dispatch.geometry(p, path, sms=MI300X_SMS)
        assert geo.regime == "narrow" and "QQ-bias" in geo.reason
    assert dispatch.geometry(_problem(), "2d", sms=MI300X_SMS).regime == "transposed_x8"


def test_window_visits_only_the_tiles_inside_it():
    """One decode token over 2048 keys with a 128-key window: the kernel walks 2 of 32 KV tiles
    (T = 64), so its MFMA count drops 16x and its whole instruction count by most of that."""
    seqs = [(1, 2048)]
    counts = {}
    for window in ((-1, -1), (127, 0)):
        args = make_inputs(seqs, hq=4, hk=1, d=64, bs=64, dtype="f16", seed=7)
        args["window_size"] = window
        record = au.run_unified_attention_torch(**args, backend="2d")
        assert record.plan.geometry.tile_size == 64
        ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                             args["block_table"], args["softmax_scale"], window_size=window)
        assert (args["out"].float() - ref).abs().max().item() <= attention_atol("f16")
        counts[window] = record.reports[0]
    full, windowed = counts[(-1, -1)], counts[(127, 0)]
    mfma = [next(v for k, v in r.instructions.items() if "mfma" in k.lower()) for r in (full, windowed)]
    assert mfma[0] == 16 * mfma[1]                       # 32 tiles vs 2, same MFMAs per tile
    assert windowed.total_instructions * 6 < full.total_instructions


# ---- the dispatcher and the problem (pure: nothing launched) ----

def _problem(**kw):
    base = dict(dtype="f16", head_size=128, num_q_heads=32, num_kv_heads=8, block_size=64,
                num_seqs=1, total_q=1, max_seqlen_q=1, max_seqlen_k=32768, causal=True,
                num_blocks=4096, kv_cache_bytes=4096 * 64 * 8 * 128 * 2)
    base.update(kw)
    return au.UnifiedAttentionProblem(**base)


def test_sliding_window_goes_2d_even_for_long_decode():
    assert dispatch.select_path(_problem(), MI300X_SMS)[0] == "3d"
    path, reason = dispatch.select_path(_problem(window_left=4095), MI300X_SMS)
    assert path == "2d" and "sliding window" in reason


def test_other_features_keep_the_path_rule():
    assert dispatch.select_path(_problem(softcap=30.0, sinks=True, alibi=True), MI300X_SMS)[0] == "3d"


@pytest.mark.parametrize("field", [dict(softcap=50.0), dict(alibi=True), dict(qq_bias=True),
                                   dict(window_left=0), dict(sinks=True)])
def test_feature_flagged_problems_are_never_graph_replayed(field):
    assert dispatch.recommend_graph_replay(_problem(), capturing=False) is True
    p = _problem(**field)
    assert p.features and dispatch.recommend_graph_replay(p, capturing=False) is False


@pytest.mark.parametrize("field, pattern", [
    (dict(softcap=-1.0), "softcap"), (dict(softcap=float("inf")), "softcap"),
    (dict(window_left=-2), "window_left"), (dict(window_left=True), "window_left"),
    (dict(alibi=1), "alibi"), (dict(sinks=None), "sinks"),
    (dict(mm_ranges=1, causal=False, max_seqlen_q=4, total_q=4), "causal"),
])
def test_problem_validates_feature_fields(field, pattern):
    with pytest.raises(ValueError, match=pattern):
        _problem(**field)


def test_problem_features_reach_the_spec_and_its_name():
    p = _problem(dtype="bf16", softcap=30.0, window_left=127, sinks=True)
    assert p.features == {"softcap", "sliding_window", "sinks"}
    for path in ("2d", "3d"):
        spec = dispatch.make_specs(p, dispatch.geometry(p, path, sms=MI300X_SMS), au.AttentionKnobs())[0]
        assert spec.features == ("softcap", "sliding_window", "sinks")
        # a window with other features masks by row interval (dispatch.needs_interval_mask)
        assert spec.kernel_name.endswith("_softcap_swa_sinks_im") and spec.interval_mask


def test_featureless_spec_name_is_unchanged():
    spec = a2.UnifiedAttention2DSpec()
    assert spec.features == () and not any(t in spec.kernel_name for t in a2.FEATURES.values())


def test_kernel_args_refuse_a_feature_the_kernel_does_not_apply():
    args = make_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16")
    spec = a2.UnifiedAttention2DSpec(head_size=64, num_queries_per_kv=2, num_warps=4, block_m_per_warp=32)
    base = (spec, args["q"], args["k"], args["v"], args["out"], args["block_table"],
            args["cu_seqlens_q"], args["seqused_k"], 0.125)
    with pytest.raises(ValueError, match="sinks: the kernel .* does not apply it"):
        a2.kernel_args(*base, sinks=torch.zeros(4))
    windowed = a2.UnifiedAttention2DSpec(head_size=64, num_queries_per_kv=2, num_warps=4,
                                         block_m_per_warp=32, sliding_window=True)
    with pytest.raises(ValueError, match="sliding_window: the kernel .* applies it"):
        a2.kernel_args(windowed, *base[1:])
    assert a2.kernel_args(windowed, *base[1:], window_left=3)[-1] == 3


def test_parity_harness_feature_scenarios_pass(tmp_path):
    """Two of the harness's ``features`` shapes through all three tables (subprocess, emulator):
    exit 0 and every row PASS against the reference with the shape's features."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    report = tmp_path / "features.json"
    env = dict(os.environ, PYTHONPATH=str(root), ROCKE_DEVICE="emu")
    run = subprocess.run(
        [sys.executable, str(root / "examples" / "parity_unified_attention.py"),
         "--scenario", "features_qq_bias_fp16_h4kv1_d64",
         "--scenario", "features_sinks_window_fp16_h8kv8_d64", "--report", str(report)],
        capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = json.loads(report.read_text())["results"]
    assert len(rows) == 6 and all(r["status"] == "PASS" for r in rows)
    launched = " ".join(r["launched"] for r in rows)
    assert "_qqb" in launched and "_swa_sinks" in launched


@pytest.mark.parametrize("backend, names, dtype, d, hq, hk, want", [
    ("auto", ("window",), "f16", 64, 8, 2, "2d"),              # fp8 KV + sliding window (vLLM)
    ("3d", ("window", "sinks"), "bf16", 128, 10, 2, "3d"),
    ("2d", ("softcap", "alibi"), "f16", 128, 8, 1, "2d"),      # softcap on the k_descale'd scale
])
def test_fp8_kv_cache_with_features(backend, names, dtype, d, hq, hk, want):
    """The fp8 dequantizing copy (ALGORITHM.md §11.1) under the score features: k_descale folds
    into the score scale the softcap divides, so both must compose."""
    from tests.kernels.test_attention_fp8_d256 import _fp8_inputs
    args = _fp8_inputs(MIXED, hq=hq, hk=hk, d=d, bs=16, dtype=dtype, seed=d + hq, descale="per_head")
    feats = _features(names, hq, args["max_seqlen_q"], seed=3)
    if "softcap" in feats:
        feats["softcap"] = 1.0          # the fp8 tests' scores reach several units
    args.update(feats)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == want and record.plan.specs[0].kv_dtype == "fp8_e4m3fnuz"
    common = (args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
              args["block_table"], args["softmax_scale"])
    scales = dict(k_descale=args["k_descale"], v_descale=args["v_descale"])
    ref = ref_paged_attn(*common, **scales, **feats)
    assert (ref_paged_attn(*common, **scales) - ref).abs().max().item() > 3 * attention_atol(dtype)
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype, "fp8_e4m3fnuz"), err
