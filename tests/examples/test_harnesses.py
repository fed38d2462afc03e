"""The two example harnesses: flags, shape sets and scaling, and real runs (subprocess, the
emulator) on tiny scenarios — exit codes, the JSON report, d256 run like the rest, and a deliberately
corrupted kernel output (the hidden, test-only ``--inject-error`` flag) failing the gate."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import attention_harness as H          # noqa: E402
import final_shapes                    # noqa: E402
import final_shapes_check              # noqa: E402
import parity_shapes                   # noqa: E402
import parity_unified_attention        # noqa: E402

PARITY = EXAMPLES / "parity_unified_attention.py"
FINAL = EXAMPLES / "final_shapes_check.py"
# tiny shapes of the sets (scaled by --max-kv 64): seconds on the emulator; plus a d256 shape,
# which runs on the tiled narrow d256 path and must PASS like the others
TINY_PARITY = ["fp16_h8kv2_b4_s3x3_d128", "decode_fp16_h8kv1_b2_q1k3000_d128"]
D256 = "fp16_h8kv8_b1_s512x512_d256"


def run(script, *argv, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROCKE_DEVICE="emu")
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


# --------------------------------------------------------------------------- shape sets

def all_parity_shapes():
    return [s for shapes in parity_shapes.GROUPS.values() for s in shapes]


def test_parity_groups_cover_the_seed_set():
    shapes = all_parity_shapes()
    names = [s.name for s in shapes]
    assert len(names) == len(set(names))
    assert {"decode_d128_q1k1024", "fp16_h32kv8_b1_s2048x2048_d128"} <= set(names)
    assert set(parity_shapes.GROUPS) == {"default", "fmha", "creative", "features"}
    for group in ("default", "fmha", "creative"):
        kinds = {s.kind for s in parity_shapes.GROUPS[group]}
        assert "decode" in kinds and kinds & {"prefill", "chunked"}, group
    assert {s.dtype for s in shapes} == {"f16", "bf16"}
    assert {64, 128, 256} <= {s.head_size for s in shapes}
    groups = {s.group for s in shapes}
    assert 1 in groups and {3, 5, 7} <= groups                       # MHA + odd GQA ratios
    fmha, creative = parity_shapes.GROUPS["fmha"], parity_shapes.GROUPS["creative"]
    assert any(s.head_size == 256 for s in fmha) and any(s.head_size == 256 for s in creative)
    assert any(s.max_k <= 8 for s in fmha)                           # tiny sequences
    assert any(s.kind == "decode" and s.batch >= 64 for s in fmha)    # large-batch decode
    assert any(s.kind == "chunked" for s in fmha)                     # asymmetric / cross
    assert any(s.kind == "decode" and s.max_k >= 65536 for s in creative)  # long-KV decode
    assert any(s.kind == "chunked" for s in creative)                 # chunked prefill
    assert any(s.kind == "mixed" for s in creative)


def test_final_groups_and_d256_runs():
    assert set(final_shapes.GROUPS) >= {"decode", "long_prefill", "d256_disabled", "d256"}
    assert final_shapes.DISABLED == ()                          # d256 runs by default now
    assert final_shapes.GROUPS["d256"] is final_shapes.GROUPS["d256_disabled"]     # alias
    for name, shapes in final_shapes.GROUPS.items():
        assert all(s.uniform for s in shapes), name            # each has a dense torch twin
        assert all((s.head_size == 256) == (name in ("d256_disabled", "d256")) for s in shapes)
        assert all(s.supported for s in shapes), name
    assert max(s.max_k for s in final_shapes.GROUPS["long_prefill"]) == 8192


def test_scaling_keeps_names_and_kinds():
    for shape in all_parity_shapes():
        small = H.scale_shape(shape, 256)
        assert small.name == shape.name and small.batch == shape.batch
        assert small.max_k <= 256
        assert (small.num_heads, small.num_kv_heads, small.dtype, small.head_size) == \
            (shape.num_heads, shape.num_kv_heads, shape.dtype, shape.head_size)
        for (q, k), (q2, k2) in zip(shape.seqlens, small.seqlens):
            assert (q == 1) == (q2 == 1)
            assert (q < k) == (q2 < k2) or k2 == 1
        assert (small.scaled_from is None) == (shape.max_k <= 256)
    assert H.scale_shape(all_parity_shapes()[0], None) is all_parity_shapes()[0]


def test_identical_scaled_problems_are_measured_once():
    long = [H.scale_shape(s, 1024) for s in final_shapes.GROUPS["long_prefill"]]
    first = H.first_of_each_problem(long)
    same = [s.name for s in long if first[s.name] == "fp16_h32kv8_b1_s2048x2048_d128"]
    assert same == ["fp16_h32kv8_b1_s2048x2048_d128", "fp16_h32kv8_b1_s4096x4096_d128",
                    "fp16_h32kv8_b1_s8192x8192_d128"]
    row = dict(H.shape_record(long[0], ["long_prefill"]), status="PASS")
    reused = H.reuse_row(row, long[1], ["long_prefill"])
    assert (reused["shape"], reused["reused_from"], reused["status"]) == \
        (long[1].name, long[0].name, "PASS")
    assert reused["scaled_from"] == [[4096, 4096]]


def test_reference_by_kv_head_group_matches_the_whole(monkeypatch):
    name = "bf16_h16kv2_varlen_s64x320_s200x999_d64"
    shape = next(s for s in all_parity_shapes() if s.name == name)
    inputs = H.make_inputs(shape, "cpu")
    whole = H.reference(shape, inputs)
    monkeypatch.setattr(H, "REFERENCE_CHUNK_BYTES", 0)
    chunked = H.reference(shape, inputs)
    assert torch.allclose(whole, chunked, atol=1e-6, rtol=0) and whole.abs().max() > 0


def test_selection():
    groups = parity_shapes.GROUPS
    both = H.select(groups, ["decode_d128_q1k1024", "default"], "all")
    assert [s.name for s in both] == [s.name for s in groups["default"]]   # union, no duplicates
    assert len(H.select(groups, ["all"], "all")) == len(all_parity_shapes())
    with pytest.raises(SystemExit, match="unknown group or shape 'nope'"):
        H.select(groups, ["nope"], "all")


def test_reductions_and_estimate():
    samples = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert H.reduce_times(samples, "median", 0.2) == 3.0
    assert H.reduce_times(samples, "mean", 0.2) == 22.0
    assert H.reduce_times(samples, "trimmed", 0.2) == 3.0          # drops 1.0 and 100.0
    assert H.reduce_times(samples, "trimmed", 0.0) == 22.0
    assert H.spread([1.0]) is None and H.spread([1.0, 1.2, 1.1]) == pytest.approx(0.2 / 1.1)
    # decode d128 GQA 4: 4 rows padded to 16, 1024 keys, 8 KV heads
    decode = parity_shapes.GROUPS["default"][0]
    assert H.kernel_flops(decode) == 4.0 * 128 * 8 * 16 * 1024
    rate = H.EmuRate(guess=1e9)
    assert rate.seconds_for(2e9, 3) == pytest.approx(2.0 + 3 * H.EMU_LAUNCH_OVERHEAD_S)
    rate.record(6e9, 2.0 + H.EMU_LAUNCH_OVERHEAD_S)
    assert rate.rate == pytest.approx(3e9)


# --------------------------------------------------------------------------- flags

@pytest.mark.parametrize("module, argv, message", [
    (final_shapes_check, ["--trim", "0.5"], "--trim must be in [0, 0.5)"),
    (final_shapes_check, ["--trim", "-0.1"], "--trim must be in [0, 0.5)"),
    (final_shapes_check, ["--reduce", "max"], "invalid choice"),
    (final_shapes_check, ["--iters", "0"], "--iters must be >= 1"),
    (parity_unified_attention, ["--attempts", "-1"], "--attempts must be >= 0"),
    (parity_unified_attention, ["--tol", "0"], "--tol must be > 0"),
    (parity_unified_attention, ["--max-kv", "0"], "--max-kv must be >= 1"),
])
def test_bad_flags_are_rejected_before_work(module, argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        module.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_flag_defaults_follow_the_seed():
    final = final_shapes_check.parse_args([])
    assert (final.reduce, final.trim, final.groups) == ("trimmed", 0.2, None)
    assert final_shapes_check.HIP_DEFAULTS == dict(warmup=10, iters=50, reps=10)
    parity = parity_unified_attention.parse_args(["--scenario", "default", "--scenario", "x"])
    assert parity.scenario == ["default", "x"] and parity.debug_mismatch == 0
    assert (parity_unified_attention.HIP_ATTEMPTS, parity_unified_attention.HIP_WARMUP) == (30, 10)
    assert parity_unified_attention.parse_args(["--quick"]).max_kv == H.QUICK_MAX_KV
    assert parity_unified_attention.parse_args(["--quick", "--max-kv", "9"]).max_kv == 9


def test_dry_run_lists_and_estimates_without_launching(monkeypatch, capsys):
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    assert parity_unified_attention.main(["--scenario", "all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimate:" in out and "WARNING: long run" in out       # the full set is hours here
    assert "emulate on a CUDA GPU (ROCKE_EMU_BACKEND=torch ROCKE_EMU_DEVICE=cuda" in out
    assert "decode_fp16_h8kv1_b1_q1k65536_d128" in out and "SKIP" not in out
    assert f"{D256} " in out
    assert final_shapes_check.main(["--quick", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fp16_h32kv8_b1_s8192x8192_d128" in out
    assert "= fp16_h32kv8_b1_s2048x2048_d128 after scaling" in out


def test_unknown_scenario_is_an_error_before_any_launch():
    proc = run(PARITY, "--scenario", "no_such_shape")
    assert proc.returncode != 0 and "unknown group or shape 'no_such_shape'" in proc.stderr


# --------------------------------------------------------------------------- real runs

def test_parity_tiny_scenario_passes_with_report(tmp_path):
    report = tmp_path / "parity.json"
    argv = [a for name in TINY_PARITY + [D256] for a in ("--scenario", name)]
    proc = run(PARITY, *argv, "--max-kv", "64", "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert "HIPDNN_GFX942_FLASH_WIDE=4 (wide4" in proc.stdout          # levers echoed
    assert "emulator wall time" in proc.stdout and "estimate:" in proc.stdout
    for table in ("table auto", "table 2d", "table 3d"):
        assert table in proc.stdout
    assert data["harness"] == "parity_unified_attention" and data["schema_version"] == 1
    assert data["device"] == "emu" and data["time_kind"] == "emulator wall time"
    assert data["tables"] == ["auto", "2d", "3d"] and data["exit_code"] == 0
    assert data["levers"]["flash_wide"] == 4 and data["max_kv"] == 64
    assert len(data["results"]) == 3 * (len(TINY_PARITY) + 1)
    for row in data["results"]:
        assert set(row) >= {"shape", "groups", "table", "status", "reason", "max_abs_err", "tol",
                            "time_s", "time_kind", "seqlens", "scaled_from", "launched"}
        assert row["status"] == "PASS", row           # d256 included
        assert 0 <= row["max_abs_err"] <= row["tol"] and row["time_s"] > 0
    decode = [r for r in data["results"] if r["shape"] == TINY_PARITY[1]]
    assert all(r["seqlens"] == [[1, 64], [1, 64]] for r in decode)
    assert decode[0]["scaled_from"] == [[1, 3000], [1, 3000]]
    flash = next(r for r in data["results"] if r["shape"] == TINY_PARITY[0] and r["table"] == "2d")
    assert flash["launched"].startswith("2d wide4")
    assert data["summary"] == {"PASS": 9, "FAIL": 0, "SKIP": 0, "ERROR": 0}


def test_parity_fails_on_a_corrupted_output(tmp_path, monkeypatch, capsys):
    """In-process (saves an interpreter start): the hidden --inject-error corrupts one output
    element after every launch; every launched table must FAIL and the exit status be 1."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    report = tmp_path / "parity.json"
    argv = ["--scenario", TINY_PARITY[0], "--report", str(report), "--inject-error",
            "--debug-mismatch", "3"]
    assert parity_unified_attention.main(argv) == 1
    data = json.loads(report.read_text())
    assert data["exit_code"] == 1 and data["injected_error"] is True
    assert [r["status"] for r in data["results"]] == ["FAIL"] * 3
    assert all(r["time_s"] is None and r["max_abs_err"] >= 0.9 for r in data["results"])
    assert "worst 3 mismatches" in capsys.readouterr().out


def test_final_shapes_tiny_run(tmp_path):
    report = tmp_path / "final.json"
    proc = run(FINAL, "--groups", "decode_d128_q1k1024", "d256_disabled", "--max-kv", "64",
               "--reps", "2", "--reduce", "median", "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["harness"] == "final_shapes_check" and data["exit_code"] == 0
    assert (data["reps"], data["iters"], data["reduce"]) == (2, 1, "median")
    rows = {r["shape"]: r for r in data["results"]}
    decode = rows["decode_d128_q1k1024"]
    assert decode["status"] == "PASS" and decode["seqlens"] == [[1, 64]]
    assert decode["scaled_from"] == [[1, 1024]]
    assert 0 <= decode["max_abs_err_eager"] <= decode["tol"]
    assert decode["torch_backend"] == "default"          # decode is not flash-eligible
    assert decode["torch_backend_resolved"] in ("math", "flash_attention", "efficient_attention")
    assert {"rocke_eager", "torch_eager"} <= set(decode["cells"])
    assert len(decode["cells"]["rocke_eager"]["samples"]) == 2
    assert "rocke_graph" in decode["cells"]                # replayed from a rocke.runtime.Graph
    assert 0 <= decode["max_abs_err_graph"] <= decode["tol"]
    for s in final_shapes.GROUPS["d256_disabled"]:          # d256 runs on the narrow path
        assert rows[s.name]["status"] == "PASS", rows[s.name]
        assert 0 <= rows[s.name]["max_abs_err_eager"] <= rows[s.name]["tol"]
    assert "emu wall ms" in proc.stdout


def test_final_shapes_fails_on_a_corrupted_output(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    report = tmp_path / "final.json"
    argv = ["--groups", "decode_d128_q1k1024", "--max-kv", "64", "--report", str(report),
            "--inject-error"]
    assert final_shapes_check.main(argv) == 1
    (decode,) = json.loads(report.read_text())["results"]
    assert decode["status"] == "FAIL" and decode["cells"] == {}
    assert decode["max_abs_err_eager"] >= 0.9


def test_a_stopped_run_keeps_the_report_of_the_shapes_it_finished(tmp_path, monkeypatch,
                                                                   capsys):
    """The report is rewritten after every shape: a run stopped in its second shape (here a
    KeyboardInterrupt, as Ctrl-C or a timeout's signal would be) leaves the first shape's row,
    marked incomplete; a finished run's report says complete. Each progress line says how long
    its shape took."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    report = tmp_path / "final.json"
    real, calls = final_shapes_check.check_shape, []

    def check_shape(shape, *args):
        calls.append(shape.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(shape, *args)
    monkeypatch.setattr(final_shapes_check, "check_shape", check_shape)
    argv = ["--groups", "decode_d128_q1k1024", "decode_bf16_h16kv16_b4_q1k2048_d64",
            "--max-kv", "64", "--report", str(report)]
    with pytest.raises(KeyboardInterrupt):
        final_shapes_check.main(argv)
    data = json.loads(report.read_text())
    assert data["complete"] is False and (data["shapes_done"], data["shapes_planned"]) == (1, 2)
    assert [(r["shape"], r["status"]) for r in data["results"]] == [("decode_d128_q1k1024",
                                                                       "PASS")]
    assert data["summary"]["PASS"] == 1 and data["exit_code"] == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("[1/2]"))
    assert " PASS in " in line and line.split(" PASS in ")[1].split()[1] in ("s", "min", "h")
    monkeypatch.setattr(final_shapes_check, "check_shape", real)
    assert final_shapes_check.main(argv[:2] + argv[3:]) == 0
    data = json.loads(report.read_text())
    assert data["complete"] is True and "shapes_done" not in data
    assert [r["shape"] for r in data["results"]] == ["decode_d128_q1k1024"]


def test_flash_wide_lever_picks_the_explicit_geometry(tmp_path, monkeypatch):
    """HIPDNN_GFX942_FLASH_WIDE=0 makes the hand-built 2D spec L4 (1 warp, WG 64) and is
    echoed; the dispatcher follows the same lever."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    monkeypatch.setenv("HIPDNN_GFX942_FLASH_WIDE", "0")
    report = tmp_path / "l4.json"
    assert parity_unified_attention.main(["--scenario", TINY_PARITY[0], "--report",
                                          str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["levers"]["flash_wide"] == 0
    rows = {r["table"]: r for r in data["results"]}
    assert rows["2d"]["launched"].startswith("2d L4") and "_w1m32_" in rows["2d"]["launched"]
    assert all(r["status"] == "PASS" for r in rows.values())


def test_a_bad_lever_stops_the_run_before_any_work(monkeypatch, capsys):
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    monkeypatch.setenv("HIPDNN_GFX942_FLASH_WIDE", "3")
    with pytest.raises(SystemExit, match="HIPDNN_GFX942_FLASH_WIDE"):
        parity_unified_attention.main(["--scenario", TINY_PARITY[0]])
    assert "estimate:" not in capsys.readouterr().out


def test_narrow_gate_skips_and_flash_bypasses_it(monkeypatch):
    """The narrow-gate rule: a narrow-path spec failing supports_tiled_2d is a SKIP naming the
    gate; the flash configs do not consult the gate (their own spec rules arbitrate)."""
    from rocke.kernels.common.knobs import AttentionKnobs
    from rocke.kernels.gfx942 import attention_tiled_2d as k2d
    monkeypatch.setattr(k2d, "supports_tiled_2d", lambda spec=None, **fields: False)
    by_name = {s.name: s for s in all_parity_shapes()}
    narrow = H.scale_shape(by_name["bf16_h16kv4_b4_s256x256_d64"], 64)
    with pytest.raises(parity_unified_attention.Skip, match="supports_tiled_2d"):
        parity_unified_attention.build_2d_spec(narrow, H.make_inputs(narrow, "cpu"),
                                               AttentionKnobs())
    flash = by_name[TINY_PARITY[0]]
    spec, geometry = parity_unified_attention.build_2d_spec(flash, H.make_inputs(flash, "cpu"),
                                                            AttentionKnobs(flash_wide=2))
    assert geometry == "wide2" and spec.num_warps == 2 and spec.transposed_x8
    assert spec.use_k_single_buffer is True             # 2 warps x 32 rows <= T = 64


def test_hip_without_a_gpu_torch_is_refused_up_front(monkeypatch):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU torch is present: --device hip is legitimate here")
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    with pytest.raises(SystemExit, match="--device hip needs a ROCm torch"):
        parity_unified_attention.main(["--device", "hip", "--scenario", TINY_PARITY[0]])


def test_parity_features_rows_for_fp8_output_and_per_token_head_caches(tmp_path, monkeypatch):
    """The features group's §13 rows run on all three tables (scaled to 64 keys): an fp8 output
    compared dequantized within tolerances.fp8_output_bound, an int8 per-token-head cache; a
    corrupted fp8 output fails the gate."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    names = ["features_out_fp8_fp16_h8kv2_d128", "features_int8_tok_fp16_h8kv1_d64"]
    report = tmp_path / "parity.json"
    argv = [a for n in names for a in ("--scenario", n)] + ["--max-kv", "64", "--report", str(report)]
    assert parity_unified_attention.main(argv) == 0
    rows = json.loads(report.read_text())["results"]
    assert [r["status"] for r in rows] == ["PASS"] * 6
    assert all("ofp8" in r["launched"] for r in rows if r["shape"] == names[0] and r["table"] == "2d")
    assert all("kvi8tok" in r["launched"] for r in rows if r["shape"] == names[1])
    assert parity_unified_attention.main(argv[:2] + ["--max-kv", "64", "--report", str(report),
                                                     "--inject-error"]) == 1
    assert [r["status"] for r in json.loads(report.read_text())["results"]] == ["FAIL"] * 3


# --------------------------------------------------------------------------- --target gfx950

def test_parity_runs_gfx950_kernels_on_the_emulator(tmp_path, monkeypatch, capsys):
    """In-process: --target gfx950 runs every table on the gfx950 builds (ROCKE_DEVICE=emu:gfx950)."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    report = tmp_path / "parity.json"
    argv = ["--target", "gfx950", "--scenario", TINY_PARITY[1], "--max-kv", "64",
            "--report", str(report)]
    assert parity_unified_attention.main(argv) == 0
    assert "rocke gfx950 unified attention parity harness" in capsys.readouterr().out
    data = json.loads(report.read_text())
    assert data["target"] == "gfx950" and data["summary"]["PASS"] == 3
    for row in data["results"]:
        assert row["status"] == "PASS" and row["launched"].endswith("_gfx950)"), row


def test_parity_fp8_scenario_takes_gfx950s_ocp_fp8(tmp_path, monkeypatch):
    """--target gfx950 quantizes the per-token-head caches and the fp8 output to OCP e4m3fn
    (gfx950's fp8; e4m3fnuz is refused there), every table passing against the reference."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    report = tmp_path / "parity.json"
    argv = ["--target", "gfx950", "--scenario", "features_fp8_tok_out_fp8_bf16_h16kv4_d128",
            "--max-kv", "64", "--report", str(report)]
    assert parity_unified_attention.main(argv) == 0
    rows = json.loads(report.read_text())["results"]
    assert rows and all(r["status"] == "PASS" for r in rows), rows
    assert all("kvfp8tok" in r["launched"] and r["launched"].endswith("_gfx950)") for r in rows
               if r["table"] != "3d")


def test_final_shapes_runs_gfx950_kernels_on_the_emulator(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    report = tmp_path / "final.json"
    argv = ["--target", "gfx950", "--groups", "decode_d128_q1k1024", "--max-kv", "64",
            "--reps", "1", "--report", str(report)]
    assert final_shapes_check.main(argv) == 0
    data = json.loads(report.read_text())
    (decode,) = data["results"]
    assert data["target"] == "gfx950" and decode["status"] == "PASS"
    assert 0 <= decode["max_abs_err_eager"] <= decode["tol"]
    assert 0 <= decode["max_abs_err_graph"] <= decode["tol"]      # the graph replays gfx950 kernels too


def test_gfx950_on_hip_without_a_rocm_torch_is_refused_up_front(monkeypatch, capsys):
    """(With a GPU, --target must be its processor: tests/runtime/test_hip_gfx950.py.)"""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    for module in (parity_unified_attention, final_shapes_check):
        with pytest.raises(SystemExit) as exc:
            module.main(["--device", "hip", "--target", "gfx950"])
        assert exc.value.code == 2
        assert "--device hip needs a ROCm torch" in capsys.readouterr().err


def test_final_shapes_compile_only_builds_each_plan_and_launches_nothing(monkeypatch, capsys,
                                                                          tmp_path):
    """--compile-only: the selected shapes' kernels, as the run plans them, into the compile
    cache, for a machine without LLVM's tools; nothing launched."""
    from tests.kernels.unified_inputs import compile_only_setting
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    compile_only_setting(monkeypatch, tmp_path)
    assert final_shapes_check.main(["--groups", "decode_d128_q1k1024", "--compile-only"]) == 0
    out = capsys.readouterr().out
    assert "decode_d128_q1k1024" in out and "attention_3d_f16_d128" in out
    assert "reduce_segments_f16_d128" in out and "compiled: every shape" in out
    assert any(tmp_path.iterdir()), "nothing in the compile cache"


def test_parity_compile_only_builds_every_table_and_launches_nothing(monkeypatch, capsys,
                                                                     tmp_path):
    """--compile-only on the parity harness: the auto and 3d tables' plans and the 2d table's
    hand-built spec, features included (an fp8 output, per-token KV scales), launched never."""
    from rocke import runtime
    from tests.kernels.unified_inputs import compile_only_setting
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    compile_only_setting(monkeypatch, tmp_path)

    def no_launch(*args, **kwargs):
        raise AssertionError("--compile-only launched the 2d table")
    monkeypatch.setattr(runtime, "launch", no_launch)
    shape = "features_fp8_tok_out_fp8_bf16_h16kv4_d128"
    assert parity_unified_attention.main(["--scenario", shape, "--compile-only"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if shape in x)
    assert "auto -> attention_" in line and "2d -> attention_2d_" in line
    assert "3d -> attention_3d_" in line and "reduce_segments_bf16_d128_v4_ofp8" in line
    assert "compiled: every shape" in out and any(tmp_path.iterdir())


# --------------------------------------------------------------------------- --jobs / --ray

#: tiny grids of each harness (at --max-kv 64): two shapes run side by side; the final grid's
#: S4096 reuses S2048's result after scaling
GRIDS = {
    "parity_unified_attention": ["--scenario", TINY_PARITY[0], "--scenario", TINY_PARITY[1],
                                 "--max-kv", "64"],
    "final_shapes_check": ["--groups", "decode_d128_q1k1024", "fp16_h32kv8_b1_s2048x2048_d128",
                           "fp16_h32kv8_b1_s4096x4096_d128", "--max-kv", "64"],
}


def printed_results(out: str) -> tuple[list[str], list[str]]:
    """(every printed line but the per-shape progress lines, the progress lines sorted), the
    times masked -- the ms columns, a shape's seconds, the emulated rate -- and the columns'
    padding collapsed (a time's width sets its column's): what a rerun may change."""
    lines, progress = [], []
    for line in out.splitlines():
        if line.startswith("report written to "):
            continue
        line = re.sub(r"\d+\.\d{3}", "T", line)
        line = re.sub(r" in \d+(\.\d)? (s|min|h) ", " in N s ", line)
        line = re.sub(r"emulated at [\d.]+ GFLOP/s", "emulated at R GFLOP/s", line)
        (progress if line.startswith("[") else lines).append(" ".join(line.split()))
    return lines, sorted(progress)


def untimed(report: dict) -> dict:
    """A JSON report less what a rerun changes: each row's times (parity: ``time_s``; final:
    each timing cell's seconds, spread and samples)."""
    rows = [dict(r, time_s=None, cells=sorted(r["cells"]) if "cells" in r else None)
            for r in report["results"]]
    return dict(report, results=rows)


def grid_runs(module, argv, engines, tmp_path, capsys) -> dict:
    """``module.main(argv)`` in-process once per engine (extra flags), each with a --report:
    engine -> (stdout, stderr, report)."""
    runs = {}
    for how, extra in engines.items():
        report = tmp_path / f"{how}.json"
        assert module.main(argv + ["--report", str(report)] + extra) == 0
        captured = capsys.readouterr()
        runs[how] = (captured.out, captured.err, json.loads(report.read_text()))
    return runs


@pytest.mark.parametrize("module", [parity_unified_attention, final_shapes_check],
                         ids=lambda m: m.__name__)
def test_jobs_2_prints_and_reports_the_serial_runs_results(module, tmp_path, monkeypatch,
                                                           capsys):
    """--jobs 2: one task per shape in two forked processes, the results gathered back in the
    grid's order -- the same tables, summary line and JSON report as the serial run (less the
    times), the same progress lines (in any order); the engine said on stderr."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    runs = grid_runs(module, GRIDS[module.__name__], {"serial": [], "jobs": ["--jobs", "2"]},
                     tmp_path, capsys)
    (out, err, report), (jobs_out, jobs_err, jobs_report) = runs["serial"], runs["jobs"]
    assert printed_results(jobs_out) == printed_results(out)
    assert "\nsummary: PASS " in jobs_out
    assert untimed(jobs_report) == untimed(report) and report["summary"]["FAIL"] == 0
    assert [r["shape"] for r in jobs_report["results"]] == [r["shape"] for r in report["results"]]
    assert "shapes run as tasks on 2 processes" in jobs_err and "run as tasks" not in err


def test_bad_engine_flags_are_one_line_before_any_work(monkeypatch, capsys):
    """--jobs 0, --ray without Ray, a bad --ray address, --jobs with --compile-only, and
    --jobs on a GPU (the shapes would share it): each one line on stderr, exit 2, nothing run."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    cases = [(["--jobs", "0"], "error: --jobs must be at least 1, got 0"),
             (["--ray", "no address"], "error: --ray: want HOST:PORT"),
             (["--jobs", "2", "--compile-only"], "error: --jobs / --ray run the shapes' "
                                                 "launches; --compile-only builds serially")]
    for module in (parity_unified_attention, final_shapes_check):
        for argv, words in cases:
            with pytest.raises(SystemExit) as exc:
                module.main(argv)
            captured = capsys.readouterr()
            assert exc.value.code == 2 and captured.err.startswith(words), (argv, captured.err)
            assert captured.err.count("\n") == 1 and captured.out == "", argv
    monkeypatch.setitem(sys.modules, "ray", None)            # Ray not installed
    with pytest.raises(SystemExit):
        final_shapes_check.main(["--ray"])
    assert capsys.readouterr().err == "error: Ray is not installed: pip install 'rocke[cluster]'\n"
    monkeypatch.setattr(H, "torch_device", lambda device: "cuda")      # the emulator on CUDA
    with pytest.raises(SystemExit):
        H.choose_engine(parity_unified_attention.parse_args(["--jobs", "2"]), "emu")
    assert "share the CUDA GPU the emulator runs on" in capsys.readouterr().err


def test_final_shapes_dense_kernel_row_against_sdpa(tmp_path, monkeypatch):
    """The dense_kernel group runs rocke.dense_attention (gfx942's dense family) on the dense
    twin, eager and from a captured graph, gated against the fp32 reference; a corrupted output
    fails it."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    (shape,) = final_shapes.GROUPS["dense_kernel"]
    assert shape.kernel == "dense" and H.scale_shape(shape, 128).kernel == "dense"
    report = tmp_path / "final.json"
    argv = ["--groups", "dense_kernel", "--max-kv", "128", "--report", str(report)]
    assert final_shapes_check.main(argv) == 0
    (row,) = json.loads(report.read_text())["results"]
    assert row["status"] == "PASS" and row["kernel"] == "dense" and row["seqlens"] == [[128, 128]]
    assert row["path"].startswith("dense dense_prefill_gfx942_bf16_d128_s128_h8kv2_causal")
    assert 0 <= row["max_abs_err_eager"] <= row["tol"] and 0 <= row["max_abs_err_graph"] <= row["tol"]
    assert "torch_eager" in row["cells"]
    assert final_shapes_check.main(argv + ["--inject-error"]) == 1
    (row,) = json.loads(report.read_text())["results"]
    assert row["status"] == "FAIL"
    with pytest.raises(ValueError, match="the dense kernel takes a uniform square batch"):
        H.dense("bf16", 8, 2, 1, 64, 128, 128, kernel="dense")
