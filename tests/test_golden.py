"""Golden IR hashes: every shipped variant is pinned, and variants hash independently."""
import json

import pytest
from click.testing import CliRunner

from rocke.cli import golden_perturbation_problems, main as cli
from rocke.kernels import registry
from rocke.kernels.golden import current_hashes, diff_golden, load_golden



def test_golden_table_matches_current_ir():
    d = diff_golden(load_golden(), current_hashes(list(registry.FAMILIES)))   # rocke's own families
    assert d == {"changed": [], "missing": [], "stale": []}, (
        f"IR hashes moved: {d}. If deliberate, run `rocke golden update` and say why in the commit.")


def test_every_family_declares_a_perturbation_for_each_variant():
    for v in registry.all_variants().values():
        field, change = registry.golden_perturbation(v.family)
        assert getattr(v.spec, field) in change, (v.name, field)


@pytest.mark.parametrize("family", sorted({v.family for v in registry.all_variants().values()}))
def test_changing_one_spec_changes_only_its_hash(family):
    # an out-of-tree family (registered by entry point / ROCKE_FAMILIES) is pinned in its own
    # table, not rocke's: check its perturbation against its current hashes
    golden = load_golden() if family in registry.FAMILIES else current_hashes([family])
    assert_perturbation_moves_only_its_hash(family, golden)


def assert_perturbation_moves_only_its_hash(family, golden):
    """Rebuild the family's first variant with its declared GOLDEN_PERTURBATION: its hash moves,
    and every other variant of the family, rebuilt after it in the same process, keeps its pinned
    hash (also used for out-of-tree families; `rocke golden perturb` runs the same contract).
    Variants of other families are independent builders; test_golden_table_matches_current_ir
    pins them."""
    assert golden_perturbation_problems(family, golden) == []


def test_cli_golden_check_and_update(tmp_path):
    # one small family keeps this CLI round trip cheap; the whole table is checked above
    table = tmp_path / "ir.json"
    family = ["--family", "vector_add"]
    r = CliRunner().invoke(cli, ["golden", "check", "--path", str(table), *family])
    assert r.exit_code != 0 and "rocke golden update" in r.output
    r = CliRunner().invoke(cli, ["golden", "update", "--path", str(table), *family])
    assert r.exit_code == 0, r.output
    assert json.loads(table.read_text()) == current_hashes(["vector_add"])
    bad = json.loads(table.read_text())
    first = sorted(bad)[0]
    bad[first] = "0" * 64
    table.write_text(json.dumps(bad))
    r = CliRunner().invoke(cli, ["golden", "check", "--path", str(table), *family])
    assert r.exit_code == 1 and f"changed: {first}" in r.output


def test_golden_table_is_package_data():
    """The table is the product's data (the prebuilt bundle and `rocke golden` read it), so an
    installed rocke must carry it: it lives in the package and pyproject.toml ships it."""
    import fnmatch
    import tomllib
    from pathlib import Path

    import rocke
    from rocke.kernels.golden import GOLDEN_PATH

    package = Path(rocke.__file__).resolve().parent
    assert GOLDEN_PATH.is_file() and GOLDEN_PATH.is_relative_to(package), GOLDEN_PATH
    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["rocke"]
    relative = GOLDEN_PATH.relative_to(package).as_posix()
    assert any(fnmatch.fnmatch(relative, p) for p in patterns), (relative, patterns)
