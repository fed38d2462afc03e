"""Issue 19: an output path that is not a regular file (a character device, a FIFO, a symlink to
one) is written through, never replaced by a regular file; its errors are one line (exit 2).
The real /dev nodes are only reached through symlinks made in a temporary directory, so a
regression replaces the symlink there, never the system's node."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocke.cli import EXIT_USER_ERROR, main as cli
from rocke.fileio import check_writable, renames_over, write_output
from rocke.kernels.golden import write_golden

ROOT = Path(__file__).resolve().parents[2]
VARIANT = "vector_add/f32_v4"


def emit(*args):
    r = CliRunner().invoke(cli, ["emit", VARIANT, *map(str, args)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    return r


def read_fifo_in_background(fifo: Path):
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["data"] = f.read()
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread, got


def test_emit_into_a_symlink_to_dev_null_keeps_the_device(tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    r = emit("-o", link)
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat(link).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]     # no temporary left


def test_emit_into_dev_full_is_a_one_line_no_space_error(tmp_path):
    link = tmp_path / "full"
    link.symlink_to("/dev/full")
    r = emit("-o", link)
    assert r.exit_code == EXIT_USER_ERROR, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], r.output
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]


def test_emit_into_a_fifo_writes_through_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, got = read_fifo_in_background(fifo)
    r = emit("-o", fifo)
    thread.join(timeout=30)
    assert not thread.is_alive(), "nothing was written into the FIFO"
    assert r.exit_code == 0, r.output
    assert got["data"].startswith(b"; ModuleID")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_emit_into_a_symlink_to_dev_stdout_reaches_stdout(tmp_path):
    link = tmp_path / "out"
    link.symlink_to("/dev/stdout")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "rocke.cli", "emit", VARIANT, "-o", str(link)],
                          capture_output=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"; ModuleID")          # through the pipe, not into a file
    assert link.is_symlink() and os.readlink(link) == "/dev/stdout"


def test_golden_update_into_a_device_keeps_it(tmp_path):
    link = tmp_path / "full"
    link.symlink_to("/dev/full")
    with pytest.raises(OSError) as exc:
        write_golden({VARIANT: "0" * 64}, link)
    assert exc.value.errno == 28                         # ENOSPC, reported, not swallowed
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]


def test_a_symlink_to_a_file_stays_a_link_and_modes_survive(tmp_path):
    real = tmp_path / "real.ll"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.ll"
    link.symlink_to("real.ll")
    assert renames_over(link)
    assert emit("-o", link).exit_code == 0
    assert link.is_symlink() and real.read_text().startswith("; ModuleID")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640     # the replaced file keeps its mode
    fresh = tmp_path / "fresh.ll"
    old_mask = os.umask(0o022)
    try:
        assert emit("-o", fresh).exit_code == 0
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644    # as open() would create it


def test_rule_and_up_front_checks(tmp_path):
    assert renames_over(tmp_path / "absent") and renames_over(Path("/dev/null")) is False
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert renames_over(fifo) is False
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_writable(tmp_path / "no" / "such.json")
    failing = tmp_path / "kept.json"
    failing.write_bytes(b"old")
    with pytest.raises(TypeError):      # the write itself fails, after the temporary exists
        write_output(failing, "not bytes")
    assert failing.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "kept.json"]


def test_an_unwritable_output_is_refused_before_the_compile(tmp_path, monkeypatch):
    from rocke.kernels.registry import Variant

    def no_compile(self, **kw):
        raise AssertionError("compiled although the output cannot be written")
    monkeypatch.setattr(Variant, "compile", no_compile)
    r = emit("--format", "co", "-o", tmp_path / "missing" / "k.hsaco")
    assert r.exit_code == EXIT_USER_ERROR and "does not exist" in r.output
