"""Golden IR hashes: every shipped variant is pinned, and variants hash independently."""
import json

import pytest
from click.testing import CliRunner

from rocke.cli import golden_perturbation_problems, main as cli
from rocke.kernels import registry
from rocke.kernels.golden import current_hashes, diff_golden, load_golden



def test_golden_table_pins_exactly_rockes_shipped_variants():
    shipped = {name for name, v in registry.all_variants().items() if v.family in registry.FAMILIES}
    golden = load_golden()
    assert {"missing": sorted(shipped - golden.keys()), "stale": sorted(golden.keys() - shipped)} \
        == {"missing": [], "stale": []}, "run `rocke golden update` and say why in the commit"


def test_every_family_declares_a_perturbation_for_each_variant():
    for v in registry.all_variants().values():
        field, change = registry.golden_perturbation(v.family)
        assert getattr(v.spec, field) in change, (v.name, field)


@pytest.mark.parametrize("family", sorted({v.family for v in registry.all_variants().values()}))
def test_every_variant_keeps_its_pinned_hash_and_a_perturbation_moves_only_its_own(family):
    """The golden table, family by family: each variant's IR hashes as pinned -- its first
    variant built as shipped, the others built after that one was rebuilt with the family's
    GOLDEN_PERTURBATION (whose hash must move), so one build of each variant checks both the
    table and that builds do not leak state into each other. An out-of-tree family (registered
    by entry point / ROCKE_FAMILIES) is pinned in its own table, not rocke's: its perturbation
    is checked against its current hashes."""
    golden = load_golden() if family in registry.FAMILIES else current_hashes([family])
    first = next(v for v in registry.all_variants().values() if v.family == family)
    assert first.ir_hash() == golden.get(first.name), (
        f"{first.name}'s IR hash moved. If deliberate, run `rocke golden update` and say why in "
        "the commit.")
    assert_perturbation_moves_only_its_hash(family, golden)


def assert_perturbation_moves_only_its_hash(family, golden):
    """Rebuild the family's first variant with its declared GOLDEN_PERTURBATION: its hash moves,
    and every other variant of the family, rebuilt after it in the same process, keeps its pinned
    hash (also used for out-of-tree families; `rocke golden perturb` runs the same contract).
    Variants of other families are independent builders, pinned by their own family's run."""
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
