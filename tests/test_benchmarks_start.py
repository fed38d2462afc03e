"""Every benchmark script starts as the README runs it (`python benchmarks/NAME.py`): a script
directory on sys.path once shadowed the standard library (benchmarks/profile.py vs `profile`,
which cProfile imports), and `launch.py` died at import."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found():
    assert {"launch.py", "profile.py", "emu.py", "compile.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_starts(script):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()
