"""benchmarks/profile.py on rocke.tasks: one task a row (shape, dtype, head size, backend),
serially or side by side (--jobs N forked processes; --ray on a cluster, tests/test_cluster.py),
its printed rows, closing tables and JSON the serial run's (less the emulator's wall times)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import profile as bench  # noqa: E402

TINY = ["--shapes", "short_prefill", "--dtypes", "f16", "--head-sizes", "64",
        "--backends", "auto", "2d", "3d"]


def untimed_out(text: str) -> str:
    return re.sub(r" \(emulated in [0-9.]+ s\)", "", text)


def untimed_rows(path: Path) -> list:
    rows = json.loads(path.read_text())
    for r in rows:
        r.pop("emulator_wall_s", None)
    return rows


def test_forked_processes_give_the_serial_rows(tmp_path, capsys):
    runs = {}
    for how, extra in (("serial", []), ("jobs", ["--jobs", "2"])):
        assert bench.main([*TINY, "--json", str(tmp_path / f"{how}.json"), *extra]) == 0
        captured = capsys.readouterr()
        runs[how] = (untimed_out(captured.out), untimed_rows(tmp_path / f"{how}.json"),
                     captured.err)
    (out, rows, err), (jobs_out, jobs_rows, jobs_err) = runs["serial"], runs["jobs"]
    assert "(serial)" in err and "(2 processes)" in jobs_err
    assert out.count("short prefill f16 d64") == 3 and len(rows) == 4    # 3 rows + summary
    assert {r["backend"] for r in rows[:3]} == {"auto", "2d", "3d"}
    assert (jobs_out, jobs_rows) == (out, rows)


@pytest.mark.parametrize("extra, words", [(["--jobs", "0"], "--jobs must be at least 1"),
                                          (["--ray", "nowhere"], "--ray: want HOST:PORT")])
def test_a_bad_engine_is_refused_before_any_row(monkeypatch, capsys, extra, words):
    monkeypatch.setattr(bench, "run", lambda *a: pytest.fail("ran a row"))
    with pytest.raises(SystemExit):
        bench.main([*TINY, *extra])
    assert words in capsys.readouterr().err
