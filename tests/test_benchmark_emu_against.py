"""benchmarks/emu.py --against REV: a same-day A/B of the emulator's speed against an older
revision (the host's speed drifts between days, so a speed-up is only a ratio measured now)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "emu.py"


def _git_checkout() -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], cwd=ROOT,
                          capture_output=True).returncode == 0


def test_against_a_revision_prints_both_sides_and_their_ratio():
    assert _git_checkout(), "the project's tests run from its git checkout"
    before = _ab_worktrees()
    done = subprocess.run([sys.executable, str(SCRIPT), "--against", "HEAD", "--rounds", "1",
                           "--repeats", "1", "--workloads", "softmax"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NOT GPU time" in done.stdout
    row = re.search(r"^softmax\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", done.stdout, re.M)
    assert row, done.stdout
    a, b, ratio = map(float, row.groups())
    assert a > 0 and b > 0 and abs(ratio - b / a) < 0.01
    cpu = re.search(r"^softmax\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)  CPU$", done.stdout, re.M)
    assert cpu, done.stdout
    a, b, ratio = map(float, cpu.groups())
    assert a > 0 and b > 0 and abs(ratio - b / a) < 0.01
    # its temporary worktree is gone again (another A/B running meanwhile keeps its own)
    assert _ab_worktrees() <= before


def _ab_worktrees() -> set:
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if "rocke-emu-ab-" in line}


def test_against_an_unknown_revision_is_refused_by_name():
    done = subprocess.run([sys.executable, str(SCRIPT), "--against", "no-such-revision-xyz"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--against no-such-revision-xyz: not a commit" in done.stdout + done.stderr


def test_cpu_rates_read_the_old_and_the_new_printout():
    """The revision measured against may print its process CPU time without a rate (the
    2026-11-30 benchmark did): the rate is lane-instructions over that time either way."""
    old = ("[axpy] fixture axpy_f32\n  lane-instructions: 2,000,000  ->  100 lane-instructions/s"
           "\n  scheduler batches: 26; process CPU time (median): 0.020 s\n")
    new = ("[softmax] fixture softmax_rows_f32\n  lane-instructions: 3,000,000  ->  1 lane-"
           "instructions/s\n  scheduler batches: 8; processes: 2; process CPU time incl. "
           "workers (median): 0.030 s  ->  1 lane-instructions/CPU-s\n")
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import emu; "
            f"print(emu.cpu_rates({old + new!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "{'axpy': 100000000.0, 'softmax': 100000000.0}"
