"""Every benchmark script starts as docs/benchmarks.md runs it (`python benchmarks/NAME.py`): a script
directory on sys.path once shadowed the standard library (benchmarks/profile.py vs `profile`,
which cProfile imports), and `launch.py` died at import."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# modules the scripts import, not scripts themselves (each still imports cleanly, below)
LIBRARIES = {"engine.py", "vllm_peer.py"}
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name not in LIBRARIES)


@pytest.mark.parametrize("module", sorted(LIBRARIES))
def test_benchmark_libraries_import(module):
    r = subprocess.run([sys.executable, "-c", f"import benchmarks.{module[:-3]}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_benchmarks_are_found():
    assert {"launch.py", "profile.py", "emu.py", "compile.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_starts(script):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()


@pytest.mark.parametrize("argv, words", [
    (["--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["--flash-batch-heads", "0"], "--flash-batch-heads must be >= 1, got 0"),
    (["--backend", "torch", "--device", "cuda"], "--device cuda: torch"),
    (["--torch-profile", "5"], "--torch-profile profiles the torch backend: add --backend torch"),
    (["--backend", "torch", "--torch-profile", "-1"], "--torch-profile must be >= 0 (0: off), got -1"),
])
def test_emu_benchmark_refuses_bad_input_in_one_line(argv, words):
    """benchmarks/emu.py: a bad flag, or --device cuda where torch sees no GPU, is one line and
    exit 2 before any workload runs (the last case only where there is no CUDA GPU)."""
    import torch
    if "cuda" in argv and torch.cuda.is_available():
        argv = ["--repeats", "-1"]
        words = "--repeats must be >= 1, got -1"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "emu.py"), *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and words in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "lane-instructions" not in r.stdout


@pytest.mark.parametrize("argv, words", [
    (["--resident-gib", "-1"], "--resident-gib must be between 0 and 3/4 of this machine's memory"),
    (["--resident-gib", "1e6"], "got 1e+06"),
    (["--repeats", "0"], "--repeats must be >= 1"),
])
def test_compile_benchmark_refuses_bad_input_before_any_build(argv, words):
    """benchmarks/compile.py: a bad flag is one line and exit 2 before anything is held or built."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile.py"), *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and words in r.stderr, r.stderr[-2000:]
    assert "machine:" not in r.stdout and "Traceback" not in r.stderr


@pytest.fixture
def benchmarks_on_path(monkeypatch):
    """benchmarks/ first on sys.path for one test, as its scripts see it, and none of its modules
    left behind: benchmarks/profile.py would otherwise stand in sys.modules for the standard
    library's `profile`, and the worker's next first import of cProfile (torch._dynamo's, say)
    failed in whichever test came later."""
    import cProfile  # noqa: F401  (the standard library's profile and cProfile, imported first)
    import profile as stdlib_profile
    bench_dir = str(ROOT / "benchmarks")
    before = set(sys.modules)
    monkeypatch.syspath_prepend(bench_dir)
    yield
    for name in set(sys.modules) - before:
        if (getattr(sys.modules[name], "__file__", None) or "").startswith(bench_dir):
            del sys.modules[name]
    sys.modules["profile"] = stdlib_profile


def test_emu_benchmark_fails_a_wrong_output(benchmarks_on_path, monkeypatch, capsys):
    """benchmarks/emu.py holds each workload's output to its fp32 reference: a wrong output
    (here: a reference the kernel does not compute) prints its figures, says WRONG and exits 1;
    the right one exits 0."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("emu_benchmark", ROOT / "benchmarks" / "emu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--workloads", "axpy", "--repeats", "1"]
    assert bench.main(argv) == 0
    assert "(bound " in capsys.readouterr().out
    real = bench.WORKLOADS["axpy"]

    def off_by_one():
        fixture, grid, args, out, reference = real()
        return fixture, grid, args, out, lambda: reference() + 1.0
    monkeypatch.setitem(bench.WORKLOADS, "axpy", off_by_one)
    assert bench.main(argv) == 1
    captured = capsys.readouterr()
    assert "lane-instructions/s" in captured.out and "WRONG" in captured.out
    assert "wrong output" in captured.err and "axpy" in captured.err


def test_emu_benchmark_torch_profile_names_the_emulators_own_work(benchmarks_on_path, monkeypatch,
                                                                   capsys):
    """--torch-profile: one more launch of each torch workload under torch's profiler, its top
    rows printed as the emulator's own work, never as gfx942 time."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("emu_benchmark", ROOT / "benchmarks" / "emu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--workloads", "axpy", "--repeats", "1", "--backend", "torch", "--torch-profile", "3"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if "torch profile of one more launch" in line)
    assert "not gfx942 time" in head and "top 3:" in head, head
    rows = out.split(head, 1)[1].splitlines()[1:4]
    assert all(" ms " in row and "aten::" in row for row in rows), rows
