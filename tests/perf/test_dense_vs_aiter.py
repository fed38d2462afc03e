"""benchmarks/dense_vs_aiter.py's parts that need no AITER checkout: the ulp measure worked by
hand, the row sample, and its refusals before any emulation (the run itself needs AITER's code
objects, which CI does not have; the closing note of issue 42 quotes it)."""
import pytest
import torch

from benchmarks import dense_vs_aiter as bench


def test_ulps_are_counted_at_the_larger_magnitude_or_the_given_scale():
    one = torch.tensor([1.0, -3.0], dtype=torch.bfloat16)
    up = torch.tensor([1.0078125, -3.0], dtype=torch.bfloat16)       # 1 + 2^-7: one ulp at 1
    assert bench.bf16_ulps(one, up) == 1.0
    tiny = torch.tensor([1e-6], dtype=torch.bfloat16)
    # +x against -x near zero: many of x's own ulps, almost none of a row whose scale is 1
    assert bench.bf16_ulps(tiny, -tiny) > 100
    assert bench.bf16_ulps(tiny, -tiny, torch.tensor([1.0])) < 0.01


def test_rows_sample_evenly_and_keep_the_ends():
    rows = bench.rows()
    assert len(rows) == 94 and rows[0] == (1, 32, 8, 1024, False)
    picked = bench.sample(rows, 3)
    assert picked == [rows[0], rows[46], rows[93]] and bench.sample(rows, None) == rows


@pytest.mark.parametrize("args, words", [
    (["--rows", "0"], "--rows: at least 1"),
    ([], "no hsa/gfx942/fmha_v3_fwd/MI300 there"),
])
def test_bad_arguments_are_refused_before_any_emulation(tmp_path, capsys, args, words):
    with pytest.raises(SystemExit) as e:
        bench.main(["--aiter-dir", str(tmp_path), *args])
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_missing_modes_are_named(tmp_path, capsys):
    fwd = tmp_path / "hsa/gfx942/fmha_v3_fwd/MI300"
    fwd.mkdir(parents=True)
    for name in ("fwd_hd128_bf16_rtz.co", "fwd_hd128_bf16_causal_rtz.co"):
        (fwd / name).write_bytes(b"")
    with pytest.raises(SystemExit) as e:
        bench.main(["--aiter-dir", str(tmp_path), "--modes", "rtz", "rtne"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "fwd_hd128_bf16_rtne.co" in err and "_rtz.co" not in err


def test_rockes_sample_launch_runs_a_whole_item_and_a_split_one():
    """run_rocke's sample of a split launch: workgroup 0 runs item 0 whole, workgroups 1-2 run
    item 1 (query block 1 of head 0) as two pieces, the second merging; both items' rows match
    SDPA and the profile holds the three workgroups the model repeats (model_row's order)."""
    import torch
    from benchmarks.dense_vs_aiter import ATOL, ref_head, run_rocke, split_chunks
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 512, 2, 128, generator=gen).bfloat16()
    k, v = (torch.randn(1, 512, 1, 128, generator=gen).bfloat16() for _ in range(2))
    o, report, _ = run_rocke(q, k, v, False, "rtne", profile=True, chunks=2)
    assert report.profile.wg_issues.shape[0] == 3
    ref = ref_head(q, k, v, False, 0)
    assert float((o[:, :512, 0].float() - ref).abs().max()) <= ATOL       # blocks 0 and 1
    assert split_chunks((8, 32, 8, 1024, False)) == 2 and split_chunks((1, 32, 8, 1024, False)) == 1


def test_each_rows_ceiling_is_aiters_time_over_its_flops_at_the_max_matrix_rate():
    """model_row's ceiling for B1 H32/8 S1024 (not causal: 4 x 32 x 1024^2 x 128 = 17.18
    GFLOP): AITER's modelled time over 17.18 GFLOP at 708 TFLOPS (24.26 us) plus the 4 us
    launch, at each latency. A synthetic profile stands in for both kernels: each of the
    launch's 128 workgroups (4 query blocks of 256 x 32 heads) does its share of the row's
    work, 256 x 1024 x 128 x 4 FLOP = 8192 v_mfma_f32_32x32x8 (16384 FLOP each), so the
    speedup (1.0) cannot pass the ceiling."""
    import numpy as np
    from rocke.arch.costs import costs_for
    from rocke.emu.profile import LaunchProfile
    p = LaunchProfile(
        "synthetic", (1, 1, 1), (512, 1, 1), 1, 8,
        {"vgprs": 256, "agprs": 0, "sgprs": 64, "lds_bytes": 32768}, [], {}, {}, {},
        buckets=("v_mfma_f32_32x32x8_f16",), bucket_classes=("mfma",),
        wg_issues=np.array([[8192]], np.int64), wg_lds_cycles=np.zeros(1, np.int64),
        wg_global_bytes=np.zeros(1, np.int64))
    row = (1, 32, 8, 1024, False)
    assert bench.split_chunks(row) == 1
    out = bench.model_row(row, {"rocke": {"rtne": {1: p}}, "aiter": {"rtne": p}}, "rtne",
                          costs_for("gfx942"))
    ceiling_us = 4 * 32 * 1024 ** 2 * 128 / 708e12 * 1e6 + 4.0
    for c in bench.LATENCIES:
        aiter_us = out["aiter"]["latency"][c]["us"]
        assert out["ceiling"][c] == pytest.approx(aiter_us / ceiling_us, rel=1e-4)
        assert out["ceiling"][c] >= out["speedup"][c]
