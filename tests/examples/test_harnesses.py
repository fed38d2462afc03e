"""The two example harnesses: flags, shape sets and scaling, and real runs (subprocess, the
emulator) on tiny scenarios — exit codes, the JSON report, d256 as SKIP, and a deliberately
corrupted kernel output (the hidden, test-only ``--inject-error`` flag) failing the gate."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import attention_harness as H          # noqa: E402
import final_shapes                    # noqa: E402
import parity_shapes                   # noqa: E402

PARITY = EXAMPLES / "parity_unified_attention.py"
FINAL = EXAMPLES / "final_shapes_check.py"
# tiny shapes of the sets, scaled by --max-kv where needed: seconds on the emulator
TINY_PARITY = ["fp16_h8kv2_b4_s3x3_d128", "decode_bf16_h8kv8_b64_q1k256_d64"]


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
    assert set(parity_shapes.GROUPS) == {"default", "fmha", "creative"}
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


def test_final_groups_and_d256_disabled():
    assert set(final_shapes.GROUPS) >= {"decode", "long_prefill", "d256_disabled"}
    assert final_shapes.DISABLED == ("d256_disabled",)
    for name, shapes in final_shapes.GROUPS.items():
        assert all(s.uniform for s in shapes), name            # each has a dense torch twin
        assert all((s.head_size == 256) == (name == "d256_disabled") for s in shapes)
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
    assert rate.seconds_for(2e9) == 2.0
    rate.record(6e9, 2.0)
    assert rate.rate == 3e9


# --------------------------------------------------------------------------- flags

@pytest.mark.parametrize("script, argv, message", [
    (FINAL, ["--trim", "0.5"], "--trim must be in [0, 0.5)"),
    (FINAL, ["--trim", "-0.1"], "--trim must be in [0, 0.5)"),
    (FINAL, ["--reduce", "max"], "invalid choice"),
    (FINAL, ["--iters", "0"], "--iters must be >= 1"),
    (PARITY, ["--attempts", "-1"], "--attempts must be >= 0"),
    (PARITY, ["--tol", "0"], "--tol must be > 0"),
    (PARITY, ["--max-kv", "0"], "--max-kv must be >= 1"),
])
def test_bad_flags_are_rejected_before_work(script, argv, message):
    proc = run(script, *argv)
    assert proc.returncode == 2 and message in proc.stderr


def test_unknown_scenario_is_an_error():
    proc = run(PARITY, "--scenario", "no_such_shape")
    assert proc.returncode != 0 and "unknown group or shape 'no_such_shape'" in proc.stderr


# --------------------------------------------------------------------------- real runs

def parity_run(tmp_path, *extra):
    report = tmp_path / "parity.json"
    argv = [a for name in TINY_PARITY for a in ("--scenario", name)]
    proc = run(PARITY, *argv, "--max-kv", "64", "--report", str(report), *extra)
    data = json.loads(report.read_text()) if report.exists() else None
    return proc, data


def test_parity_tiny_scenario_passes_with_report(tmp_path):
    proc, data = parity_run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HIPDNN_GFX942" in proc.stdout                         # levers echoed
    assert "emulator wall time" in proc.stdout and "estimate:" in proc.stdout
    for table in ("table auto", "table 2d", "table 3d"):
        assert table in proc.stdout
    assert data["harness"] == "parity_unified_attention" and data["schema_version"] == 1
    assert data["device"] == "emu" and data["time_kind"] == "emulator wall time"
    assert data["tables"] == ["auto", "2d", "3d"] and data["exit_code"] == 0
    assert len(data["results"]) == 3 * len(TINY_PARITY)
    for row in data["results"]:
        assert set(row) >= {"shape", "groups", "table", "status", "reason", "max_abs_err", "tol",
                            "time_s", "time_kind", "seqlens", "scaled_from", "launched"}
        assert row["status"] in ("PASS", "SKIP"), row
        if row["status"] == "PASS":
            assert 0 <= row["max_abs_err"] <= row["tol"] and row["time_s"] > 0
    assert sum(r["status"] == "PASS" for r in data["results"]) >= 2 * len(TINY_PARITY)
    assert data["summary"]["PASS"] + data["summary"]["SKIP"] == len(data["results"])


def test_parity_fails_on_a_corrupted_output(tmp_path):
    proc, data = parity_run(tmp_path, "--inject-error", "--debug-mismatch", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert data["exit_code"] == 1 and data["injected_error"] is True
    launched = [r for r in data["results"] if r["status"] != "SKIP"]
    assert launched and all(r["status"] == "FAIL" and r["time_s"] is None for r in launched)
    assert all(r["max_abs_err"] >= 0.9 for r in launched)           # the injected +1.0
    assert "worst 3 mismatches" in proc.stdout


def test_parity_d256_is_skip_never_pass(tmp_path):
    report = tmp_path / "d256.json"
    proc = run(PARITY, "--scenario", "fp16_h8kv8_b1_s512x512_d256", "--report", str(report))
    data = json.loads(report.read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["status"] for r in data["results"]] == ["SKIP"] * 3
    assert all("head_size 256" in r["reason"] for r in data["results"])


def final_run(tmp_path, *extra):
    report = tmp_path / "final.json"
    proc = run(FINAL, "--groups", "decode_d128_q1k1024", "d256_disabled", "--max-kv", "64",
               "--reps", "2", "--reduce", "median", "--report", str(report), *extra)
    data = json.loads(report.read_text()) if report.exists() else None
    return proc, data


def test_final_shapes_tiny_run(tmp_path):
    proc, data = final_run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data["harness"] == "final_shapes_check" and data["exit_code"] == 0
    assert (data["reps"], data["iters"], data["reduce"]) == (2, 1, "median")
    rows = {r["shape"]: r for r in data["results"]}
    decode = rows["decode_d128_q1k1024"]
    assert decode["status"] == "PASS" and decode["seqlens"] == [[1, 64]]
    assert decode["scaled_from"] == [[1, 1024]]
    assert 0 <= decode["max_abs_err_eager"] <= decode["tol"]
    assert decode["torch_backend"] == "default"          # decode is not flash-eligible
    assert {"rocke_eager", "torch_eager"} <= set(decode["cells"])
    assert len(decode["cells"]["rocke_eager"]["samples"]) == 2
    if data["graph_available"]:
        assert "rocke_graph" in decode["cells"]
        assert 0 <= decode["max_abs_err_graph"] <= decode["tol"]
    else:
        assert "n/a (Graph not available)" in proc.stdout
    assert all(rows[s.name]["status"] == "SKIP" for s in final_shapes.GROUPS["d256_disabled"])
    assert "emu wall ms" in proc.stdout


def test_final_shapes_fails_on_a_corrupted_output(tmp_path):
    proc, data = final_run(tmp_path, "--inject-error")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    decode = next(r for r in data["results"] if r["shape"] == "decode_d128_q1k1024")
    assert decode["status"] == "FAIL" and decode["cells"] == {}
