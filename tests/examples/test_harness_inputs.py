"""Issue 19, the harnesses' hostile inputs: an unwritable ``--report`` is refused before any
work (exit 2); a report that still cannot be written at the end does not lose the finished
run's results; ``ROCKE_DEVICE=garbage`` is one line naming the allowed values (exit 2)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import attention_harness as H          # noqa: E402
import final_shapes_check              # noqa: E402
import parity_unified_attention        # noqa: E402

SCRIPTS = [final_shapes_check, parity_unified_attention]
TINY = "fp16_h8kv2_b4_s3x3_d128"       # a parity shape that runs in seconds on the emulator


@pytest.mark.parametrize("module", SCRIPTS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("where, words", [
    ("no/such/dir/r.json", "does not exist"),
    (".", "it is a directory"),
])
def test_an_unwritable_report_path_is_refused_with_the_flags(module, where, words, tmp_path,
                                                               capsys):
    path = tmp_path / where
    with pytest.raises(SystemExit) as exc:
        module.parse_args(["--report", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--report {path}: cannot write: " in err and words in err


def test_a_bad_report_path_stops_the_run_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    with pytest.raises(SystemExit) as exc:
        parity_unified_attention.main(["--scenario", TINY, "--report",
                                       str(tmp_path / "missing" / "r.json")])
    assert exc.value.code == 2
    out = capsys.readouterr().out
    assert "estimate:" not in out and TINY not in out        # nothing was run
    assert not (tmp_path / "missing").exists()


def test_a_report_that_fails_at_the_end_keeps_the_results(tmp_path, monkeypatch, capsys):
    """The report's directory exists when the run starts and is gone when it ends: the run's
    results go to a fallback file, named on stderr, and the exit status says so (2)."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "fallback"))
    (tmp_path / "fallback").mkdir()
    reports = tmp_path / "reports"
    reports.mkdir()
    run_shapes = H.run_shapes

    def run_then_lose_the_directory(*args, **kwargs):
        rows = run_shapes(*args, **kwargs)
        shutil.rmtree(reports)          # with the partial report written after each shape
        return rows
    monkeypatch.setattr(H, "run_shapes", run_then_lose_the_directory)
    assert parity_unified_attention.main(["--scenario", TINY, "--report",
                                          str(reports / "r.json")]) == 2
    err = capsys.readouterr().err
    (fallback,) = (tmp_path / "fallback").iterdir()
    assert f"cannot write the report to {reports / 'r.json'}" in err and str(fallback) in err
    data = json.loads(fallback.read_text())
    assert data["harness"] == "parity_unified_attention" and data["exit_code"] == 0
    assert [r["status"] for r in data["results"]] == ["PASS"] * 3


def test_without_any_writable_place_the_report_goes_to_stderr(tmp_path, monkeypatch, capsys):
    def no_temporary(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tempfile, "mkstemp", no_temporary)
    payload = {"harness": "h", "results": [{"shape": "s", "status": "PASS"}]}
    assert H.write_report(str(tmp_path / "gone" / "r.json"), payload) is False
    err = capsys.readouterr().err
    assert "nor a fallback file (No space left on device)" in err
    assert json.loads(err[err.index("{"):]) == dict(payload, complete=True)
    assert H.final_exit_code(0, False) == 2 and H.final_exit_code(1, False) == 1
    assert H.final_exit_code(0, True) == 0


@pytest.mark.parametrize("module", SCRIPTS, ids=lambda m: m.__name__)
def test_a_bad_rocke_device_is_one_line_naming_the_choices(module, monkeypatch, capsys):
    monkeypatch.setenv("ROCKE_DEVICE", "garbage")
    with pytest.raises(SystemExit) as exc:
        module.main(["--dry-run"])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.err == "error: ROCKE_DEVICE must be 'emu' or 'hip' (or emu:gfx942 / emu:gfx950), got 'garbage'\n"
    assert "estimate:" not in captured.out


@pytest.mark.parametrize("module", SCRIPTS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("backend, device, words", [
    ("torch", "cuda", "ROCKE_EMU_DEVICE=cuda runs the emulator on a CUDA GPU, but torch sees none"),
    ("torch", "gpu", "ROCKE_EMU_DEVICE must be 'cpu' or 'cuda', got 'gpu'"),
    ("numpy", "cuda", "ROCKE_EMU_DEVICE=cuda needs ROCKE_EMU_BACKEND=torch"),
])
def test_an_emulator_device_that_cannot_run_is_refused_before_any_work(module, backend, device,
                                                                      words, monkeypatch, capsys):
    """The emulator asked to run on CUDA where torch sees no GPU (or a bad setting): one line,
    exit 2, before the estimate -- not a traceback from the first tensor copy."""
    import torch
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    monkeypatch.setenv("ROCKE_EMU_BACKEND", backend)
    monkeypatch.setenv("ROCKE_EMU_DEVICE", device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        module.main(["--device", "emu", "--dry-run"])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and words in captured.err
    assert captured.err.count("\n") == 1 and "estimate:" not in captured.out


def test_bad_input_exits_2_without_a_traceback():
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROCKE_DEVICE="garbage")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "final_shapes_check.py"), "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: ROCKE_DEVICE must be 'emu' or 'hip' (or emu:gfx942 / emu:gfx950), got 'garbage'"


def test_an_unknown_shape_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    with pytest.raises(SystemExit) as exc:
        parity_unified_attention.main(["--scenario", "no_such_shape"])
    assert exc.value.code == 2
    assert "error: unknown group or shape 'no_such_shape'" in capsys.readouterr().err


def test_the_emulator_time_label_and_estimate_follow_where_it_runs(monkeypatch):
    """Emulator wall time is labelled by where it was spent -- this CPU, or the CUDA GPU of the
    torch backend -- and never as gfx942 GPU time."""
    import torch
    monkeypatch.delenv("ROCKE_EMU_BACKEND", raising=False)
    monkeypatch.delenv("ROCKE_EMU_DEVICE", raising=False)
    assert H.emulator_site("emu") == " on this CPU, NOT GPU time"
    assert H.torch_device("emu") == "cpu"
    assert H.EmuRate(device="emu").rate == H.EMU_FLOPS_PER_S_GUESS
    monkeypatch.setenv("ROCKE_EMU_BACKEND", "torch")
    monkeypatch.setenv("ROCKE_EMU_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    site = H.emulator_site("emu")
    assert "this CPU" not in site and "NVIDIA H200" in site and "NOT gfx942 GPU time" in site
    assert H.torch_device("emu") == "cuda"
    # the run-time estimate starts from the rate measured on a GPU, not the CPU's (40x slower)
    assert H.EmuRate(device="emu").rate == H.EMU_CUDA_FLOPS_PER_S_GUESS > 10 * H.EMU_FLOPS_PER_S_GUESS
    assert H.emulator_site("hip") == ""


def test_the_harnesses_relax_the_collector_only_when_they_emulate():
    """Both harnesses call H.relax_gc_when_emulating with their resolved device: on the emulator
    the collector runs less often (rocke.emu.RELAXED_GC_THRESHOLDS), on a GPU it is left alone."""
    import gc
    from rocke.emu.launch import RELAXED_GC_THRESHOLDS
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        H.relax_gc_when_emulating("hip")
        assert gc.get_threshold() == (700, 10, 10)
        H.relax_gc_when_emulating("emu")
        assert gc.get_threshold() == RELAXED_GC_THRESHOLDS
    finally:
        gc.set_threshold(*saved)
    for script in ("parity_unified_attention.py", "final_shapes_check.py"):
        assert "H.relax_gc_when_emulating(device)" in (H.REPO_ROOT / "examples" / script).read_text()
