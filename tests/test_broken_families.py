"""Issue 19: an out-of-tree kernel family whose module raises at import (through ROCKE_FAMILIES
or an entry point) is one line naming the family and its error, never a traceback, and does not
take rocke's own families down: `rocke emit` of a built-in variant and the golden hashes of
the built-in families still work; `rocke list` lists the rest, warns and exits 2; a command
that needs the broken family exits 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocke.kernels import registry
from rocke.kernels.golden import current_hashes

ROOT = Path(__file__).resolve().parents[1]
BROKEN_ERROR = "kernel family 'x' (registered by {source}): importing module 'broken_family' " \
               "raised RuntimeError: deliberately broken"


@pytest.fixture
def broken_module(tmp_path):
    (tmp_path / "broken_family.py").write_text(
        'raise RuntimeError("deliberately broken\\nsecond line of the message")\n')
    return tmp_path


def entry_point_dist(where: Path) -> Path:
    dist = where / "broken_family-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rocke.kernel_families]\nx = broken_family\n")
    return where


def rocke(*args, path: Path, families: str | None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(path)]))
    env.pop("ROCKE_FAMILIES", None)
    if families:
        env["ROCKE_FAMILIES"] = families
    return subprocess.run([sys.executable, "-m", "rocke.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("how", ["ROCKE_FAMILIES", "entry point"])
def test_a_family_that_raises_at_import_does_not_take_the_built_ins_down(broken_module, how):
    if how == "ROCKE_FAMILIES":
        families, source = "x=broken_family", "ROCKE_FAMILIES"
    else:
        entry_point_dist(broken_module)
        families, source = None, "entry point group 'rocke.kernel_families'"
    expected = BROKEN_ERROR.format(source=source)

    r = rocke("list", path=broken_module, families=families)
    assert "Traceback" not in r.stderr
    assert r.returncode == 2, r.stderr
    assert f"Warning: {expected}" in r.stderr.splitlines()
    assert "second line" not in r.stderr
    assert "gemm/f16_32x32x8" in r.stdout and "attention_2d/" in r.stdout

    r = rocke("emit", "gemm/f16_32x32x8", path=broken_module, families=families)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("; ModuleID") and "Traceback" not in r.stderr

    r = rocke("emit", "x/anything", path=broken_module, families=families)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"Error: {expected}"


def test_a_broken_family_in_a_users_table_is_named(broken_module, tmp_path):
    table = tmp_path / "mine.json"
    table.write_text(json.dumps({"x/a": "0" * 64}))
    r = rocke("golden", "check", "--path", str(table), "--family", "x", path=broken_module,
              families="x=broken_family")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "importing module 'broken_family' raised RuntimeError" in r.stderr
    # every family, as `--path` without `--family` means: refused rather than a partial table
    r = rocke("golden", "update", "--path", str(table), path=broken_module,
              families="x=broken_family")
    assert r.returncode == 2 and "kernel family 'x'" in r.stderr and "Traceback" not in r.stderr
    assert json.loads(table.read_text()) == {"x/a": "0" * 64}


def test_registry_keeps_the_loadable_families(broken_module, monkeypatch):
    monkeypatch.syspath_prepend(str(broken_module))
    registry.register_family("x", "broken_family")
    try:
        variants, broken = registry.loadable_variants()
        assert "gemm/f16_32x32x8" in variants and list(broken) == ["x"]
        assert broken["x"] == BROKEN_ERROR.format(source="register_family()")
        assert registry.get_variant("gemm/f16_32x32x8").family == "gemm"
        with pytest.raises(ValueError, match="raised RuntimeError: deliberately broken"):
            registry.get_variant("x/a")
        with pytest.raises(ValueError, match="kernel family 'x'"):
            registry.all_variants()                  # all of them: the broken one is an error
        assert "gemm/f16_32x32x8" in current_hashes(["gemm"])
        with pytest.raises(ValueError, match="kernel family 'x'"):
            current_hashes(["x"])
    finally:
        registry.unregister_family("x")
    assert "x" not in registry.loadable_variants()[1]


def test_a_name_taken_twice_keeps_the_first_and_says_so(monkeypatch):
    monkeypatch.setenv("ROCKE_FAMILIES", "gemm=no_such_module")
    registry.forget_loaded_families()
    try:
        variants, broken = registry.loadable_variants()
        assert "gemm/f16_32x32x8" in variants
        (message,) = broken.values()
        assert "kernel family 'gemm' is registered twice" in message
        assert "'no_such_module' (from ROCKE_FAMILIES); the second is ignored" in message
    finally:
        monkeypatch.delenv("ROCKE_FAMILIES")
        registry.forget_loaded_families()
