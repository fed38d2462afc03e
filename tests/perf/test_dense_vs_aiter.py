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
