"""Out-of-tree kernel families: a package outside rocke/ (tests/out_of_tree) registered through
ROCKE_FAMILIES, an entry point or register_family() is listed, reported and golden-checked
through the CLI with its own golden table; a family that cannot be imported is a clear error."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocke.kernels import registry
from rocke.kernels.golden import current_hashes

ROOT = Path(__file__).resolve().parents[1]
OUT_OF_TREE = Path(__file__).resolve().parent / "out_of_tree"


def _rocke(*args, env_extra=None, pythonpath=(OUT_OF_TREE,)):
    env = dict(os.environ)
    env.pop("ROCKE_FAMILIES", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, pythonpath)])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "rocke.cli", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def test_rocke_families_lever_lists_reports_and_golden_checks(tmp_path):
    lever = {"ROCKE_FAMILIES": "oot_demo=rocke_oot_demo"}
    r = _rocke("list", env_extra=lever)
    assert r.returncode == 0, r.stderr
    assert "oot_demo/f32_v4" in r.stdout and "oot_demo/f16_v2" in r.stdout
    assert "gemm/f16_32x32x8" in r.stdout                     # rocke's own families stay
    r = _rocke("report", "oot_demo/f32_v4", env_extra=lever)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oot_demo/f32_v4" in r.stdout and "total spills: 0" in r.stdout
    table = tmp_path / "my_golden.json"                       # the user's own table
    r = _rocke("golden", "update", "--path", str(table), "--family", "oot_demo", env_extra=lever)
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(table.read_text())) == ["oot_demo/f16_v2", "oot_demo/f32_v4"]
    r = _rocke("golden", "check", "--path", str(table), "--family", "oot_demo", env_extra=lever)
    assert r.returncode == 0 and "matches" in r.stdout, r.stdout + r.stderr
    pinned = json.loads(table.read_text())
    pinned["oot_demo/f16_v2"] = "0" * 64
    table.write_text(json.dumps(pinned))
    r = _rocke("golden", "check", "--path", str(table), "--family", "oot_demo", env_extra=lever)
    assert r.returncode == 1 and "changed: oot_demo/f16_v2" in r.stdout
    # rocke's own hashes under the lever: a built-in family's still match (one family, gemm: the
    # whole table's check is test_golden.py's own, 40 s of IR builds, not run twice)
    from rocke.kernels.golden import GOLDEN_PATH
    own = tmp_path / "rocke_gemm.json"
    own.write_text(json.dumps({k: v for k, v in json.loads(Path(GOLDEN_PATH).read_text()).items()
                               if k.startswith("gemm/")}))
    r = _rocke("golden", "check", "--path", str(own), "--family", "gemm", env_extra=lever)
    assert r.returncode == 0 and "matches" in r.stdout, r.stdout + r.stderr


def test_golden_tests_cover_an_out_of_tree_family():
    env = dict(os.environ, ROCKE_FAMILIES="oot_demo=rocke_oot_demo",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(OUT_OF_TREE)]))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                        "tests/test_golden.py", "-k", "oot_demo or declares"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]
    # the whole table's check is test_golden.py's own (30 s of IR builds: not run twice)
    assert "2 passed" in r.stdout, r.stdout[-2000:]


def test_entry_point_registers_a_family(tmp_path):
    dist = tmp_path / "rocke_oot_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rocke-oot-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rocke.kernel_families]\noot_ep = rocke_oot_demo\n")
    r = _rocke("list", pythonpath=(OUT_OF_TREE, tmp_path))
    assert r.returncode == 0, r.stderr
    assert "oot_ep/f32_v4" in r.stdout


def test_missing_family_module_is_a_clear_error():
    r = _rocke("list", env_extra={"ROCKE_FAMILIES": "ghost=no_such_pkg.kernels"})
    assert r.returncode != 0
    assert "kernel family 'ghost'" in r.stderr and "'no_such_pkg.kernels'" in r.stderr
    assert "ROCKE_FAMILIES" in r.stderr and "Traceback" not in r.stderr
    r = _rocke("list", env_extra={"ROCKE_FAMILIES": "not a valid entry"})
    assert r.returncode != 0 and "ROCKE_FAMILIES entries must be name=python.module" in r.stderr


def test_register_family_and_its_declared_perturbation(monkeypatch):
    monkeypatch.syspath_prepend(str(OUT_OF_TREE))
    registry.register_family("oot_reg", "rocke_oot_demo")
    try:
        variants = registry.all_variants()
        assert {"oot_reg/f32_v4", "oot_reg/f16_v2"} <= set(variants)
        golden = current_hashes(["oot_reg"])
        assert sorted(golden) == ["oot_reg/f16_v2", "oot_reg/f32_v4"]
        # the golden tests' perturbation check, on the user's family with its own table
        from tests.test_golden import assert_perturbation_moves_only_its_hash
        assert_perturbation_moves_only_its_hash("oot_reg", golden)
        with pytest.raises(ValueError, match="already registered"):
            registry.register_family("gemm", "rocke_oot_demo")
        with pytest.raises(ValueError, match="unknown kernel families nope"):
            current_hashes(["nope"])
    finally:
        registry.unregister_family("oot_reg")
    assert "oot_reg/f32_v4" not in registry.all_variants()
