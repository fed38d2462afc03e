"""The CLI never shows a traceback for a user error (issue 10 catalog 10): one line, a documented
exit code (1 check failed, 2 usage/user error, 3 toolchain/compile error), atomic writes that
leave nothing behind on failure."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocke.cli import EXIT_CHECK_FAILED, EXIT_TOOLCHAIN_ERROR, EXIT_USER_ERROR, main as cli
from rocke.compiler import toolchain

from . import _host_helpers as fakes

VARIANT = "vector_add/f32_v4"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """A private cache and no prebuilt bundle: every compile here builds and links."""
    monkeypatch.setenv("ROCKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ROCKE_PREBUILT", "off")
    toolchain.find_linker.cache_clear()
    yield
    toolchain.find_linker.cache_clear()


def run(*args, env=None):
    if env:
        toolchain.find_linker.cache_clear()
    r = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception   # no traceback
    assert "Traceback" not in r.output
    return r


def error_line(r) -> str:
    lines = [l for l in r.output.splitlines() if l.startswith("Error:")]
    assert len(lines) == 1, r.output
    return lines[0]


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp") or p.name.startswith("."))


def test_output_into_a_missing_directory(tmp_path):
    r = run("emit", VARIANT, "-o", tmp_path / "missing" / "k.ll")
    assert r.exit_code == EXIT_USER_ERROR
    assert "directory" in error_line(r) and "does not exist" in error_line(r)
    assert not (tmp_path / "missing").exists()


def test_output_onto_a_directory(tmp_path):
    r = run("emit", VARIANT, "-o", tmp_path)
    assert r.exit_code == EXIT_USER_ERROR and "is a directory" in error_line(r)


def test_emit_writes_atomically_and_leaves_no_temporaries(tmp_path):
    out = tmp_path / "k.ll"
    r = run("emit", VARIANT, "-o", out)
    assert r.exit_code == 0 and out.read_text().startswith("; ModuleID")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("make,words", [
    (lambda d: str(d / "nope"), "does not exist"),
    (lambda d: str(d), "is a directory"),
    (fakes.junk_linker, "not a valid code object"),
    (fakes.failing_linker, "pretend failure"),
    (fakes.silent_linker, "wrote no output"),
])
def test_broken_linker_is_exit_3_and_the_old_output_survives(tmp_path, make, words):
    out = tmp_path / "k.hsaco"
    out.write_bytes(b"previous build")
    r = run("emit", VARIANT, "--format", "co", "-o", out, env={"ROCKE_LD_LLD": make(tmp_path)})
    assert r.exit_code == EXIT_TOOLCHAIN_ERROR, r.output
    assert words in error_line(r)
    assert out.read_bytes() == b"previous build" and leftovers(tmp_path) == []


def test_report_with_missing_linker_is_exit_3(tmp_path):
    r = run("report", "softmax/f32_wave", env={"ROCKE_LD_LLD": str(tmp_path / "ld")})
    assert r.exit_code == EXIT_TOOLCHAIN_ERROR and "ROCKE_LD_LLD=" in error_line(r)


def test_sleeping_linker_is_exit_3(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.3)
    r = run("emit", VARIANT, "--format", "asm", env={"ROCKE_LD_LLD": fakes.sleeping_linker(tmp_path)})
    assert r.exit_code == EXIT_TOOLCHAIN_ERROR and "did not finish" in error_line(r)


@pytest.mark.parametrize("content,words", [
    ("{broken", "is not valid JSON"),
    ("", "is not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"vector_add/f32_v4": 5}', "must be a JSON object of variant name -> hash string"),
    ("null", "must be a JSON object"),
])
def test_bad_golden_json_is_a_message(tmp_path, content, words):
    table = tmp_path / "golden.json"
    table.write_text(content)
    r = run("golden", "check", "--path", table)
    assert r.exit_code == EXIT_USER_ERROR and words in error_line(r)


def test_golden_binary_file_is_a_message(tmp_path):
    table = tmp_path / "golden.json"
    table.write_bytes(b"\xff\xfe\x00\x01")
    r = run("golden", "check", "--path", table)
    assert r.exit_code == EXIT_USER_ERROR and "golden table" in error_line(r)


def test_golden_missing_table(tmp_path):
    r = run("golden", "check", "--path", tmp_path / "none.json")
    assert r.exit_code == EXIT_USER_ERROR and "no golden table" in error_line(r)


def test_golden_check_failure_is_exit_1(tmp_path):
    table = tmp_path / "golden.json"
    table.write_text(json.dumps({VARIANT: "0" * 64}))
    r = run("golden", "check", "--path", table, "--family", VARIANT.split("/")[0])
    assert r.exit_code == EXIT_CHECK_FAILED and f"changed: {VARIANT}" in r.output


def test_failed_golden_update_leaves_no_tmp_and_the_table_intact(tmp_path, monkeypatch):
    """Catalog 10: a failed `golden update` left ir_hashes.tmp behind."""
    table = tmp_path / "ir_hashes.json"
    table.write_text('{"old": "table"}')

    def fail(self, target):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Path, "replace", fail)
    r = run("golden", "update", "--path", table, "--family", VARIANT.split("/")[0])
    assert r.exit_code == EXIT_USER_ERROR and "No space left on device" in error_line(r)
    assert table.read_text() == '{"old": "table"}'
    assert not list(tmp_path.glob("*.tmp")) and leftovers(tmp_path) == []


def test_golden_update_onto_a_directory(tmp_path):
    target = tmp_path / "ir_hashes.json"
    target.mkdir()
    r = run("golden", "update", "--path", target, "--family", VARIANT.split("/")[0])
    assert r.exit_code == EXIT_USER_ERROR and "is a directory" in error_line(r)
    assert not (tmp_path / "ir_hashes.tmp").exists()


def test_golden_update_replaces_an_unreadable_table(tmp_path):
    table = tmp_path / "ir_hashes.json"
    table.write_text("{broken")
    r = run("golden", "update", "--path", table, "--family", VARIANT.split("/")[0])
    assert r.exit_code == 0 and "replacing" in r.output
    assert VARIANT in json.loads(table.read_text())


@pytest.mark.parametrize("args,words", [
    (("emit", "vector_add/f64"), "unknown kernel variant"),
    (("emit", VARIANT, "--format", "elf"), "Invalid value for '--format'"),
    (("emit", VARIANT, "--format", "co"), "-o FILE"),
    (("report", "nothing/here"), "unknown kernel variant"),
    (("frobnicate",), "No such command"),
])
def test_usage_errors_are_exit_2(args, words):
    r = run(*args)
    assert r.exit_code == EXIT_USER_ERROR and words in r.output


def test_bad_rocke_cache_dir_only_costs_a_rebuild(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run("emit", VARIANT, "--format", "asm", env={"ROCKE_CACHE_DIR": str(blocker)})
    assert r.exit_code == 0 and ".amdhsa_kernel" in r.output and blocker.read_text() == "x"


def test_a_reader_that_stops_early_is_not_an_error():
    """`rocke list | head`: a closed pipe ends the command quietly with exit 0, not with
    'Error: [Errno 32] Broken pipe' and exit 2. The reader is gone before the first write, so
    the command meets the closed pipe deterministically."""
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "rocke.cli", "list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"Broken pipe" not in err and b"Traceback" not in err
