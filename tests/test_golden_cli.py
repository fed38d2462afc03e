"""`rocke golden check/update --path` without --family work on the families the table names,
and `rocke golden perturb` runs the GOLDEN_PERTURBATION contract on a user's families. This
module is also a tiny kernel family whose declared perturbation does not reach the IR."""
import json
from dataclasses import dataclass

from click.testing import CliRunner

from rocke.cli import main as cli
from rocke.dsl import Kernel, f32
from rocke.kernels.golden import current_hashes
from rocke.kernels.registry import register_family, unregister_family


@dataclass(frozen=True)
class InertSpec:
    block: int = 64
    label: str = "a"          # never used by build(): perturbing it cannot move the IR


VARIANTS = {"a": InertSpec(64, "a"), "b": InertSpec(128, "b")}
GOLDEN_PERTURBATION = ("label", {"a": "z", "b": "y"})


def build(spec: InertSpec):
    k = Kernel(f"inert_{spec.block}", workgroup_size=spec.block)
    x = k.arg_ptr("x", f32)
    t = k.thread_id(0)
    x.store(t, x.load(t) + 1.0)
    return k


def _rocke(*args):
    return CliRunner().invoke(cli, list(args))


def test_check_with_only_a_path_checks_the_families_the_table_names(tmp_path):
    table = tmp_path / "mine.json"
    table.write_text(json.dumps(current_hashes(["vector_add"])))
    r = _rocke("golden", "check", "--path", str(table))
    assert r.exit_code == 0, r.output
    assert "missing:" not in r.output and "golden IR table matches" in r.output
    pinned = json.loads(table.read_text())
    first = sorted(pinned)[0]
    del pinned[first]
    table.write_text(json.dumps(pinned))
    r = _rocke("golden", "check", "--path", str(table))
    assert r.exit_code == 1 and r.output.splitlines() == [f"missing: {first}"], r.output


def test_a_table_naming_an_unknown_family_or_none_is_a_one_line_error(tmp_path):
    table = tmp_path / "mine.json"
    table.write_text(json.dumps({"no_such_family/x": "0" * 64}))
    r = _rocke("golden", "check", "--path", str(table))
    assert r.exit_code == 2 and "no_such_family" in r.output and str(table) in r.output
    table.write_text("{}")
    r = _rocke("golden", "check", "--path", str(table))
    assert r.exit_code == 2 and "--family" in r.output


def test_update_with_only_a_path_keeps_the_tables_families(tmp_path):
    table = tmp_path / "mine.json"
    r = _rocke("golden", "update", "--path", str(table))          # nothing to go by yet
    assert r.exit_code == 2 and "--family" in r.output and not table.exists()
    stale = dict(current_hashes(["vector_add"]))
    first = sorted(stale)[0]
    stale[first] = "0" * 64
    table.write_text(json.dumps(stale))
    r = _rocke("golden", "update", "--path", str(table))
    assert r.exit_code == 0, r.output
    assert json.loads(table.read_text()) == current_hashes(["vector_add"])


def test_perturb_runs_the_contract_on_the_tables_families_and_flags_an_inert_field(tmp_path):
    register_family("inert_demo", __name__)
    try:
        table = tmp_path / "mine.json"
        table.write_text(json.dumps({**current_hashes(["vector_add"]), **current_hashes(["inert_demo"])}))
        r = _rocke("golden", "perturb", "--path", str(table))
        assert r.exit_code == 1, r.output
        assert "ok: vector_add (against its pinned hashes)" in r.output
        assert "FAILED: inert_demo: inert_demo/a with label='z' (was 'a') emits the same IR" in r.output
        r = _rocke("golden", "perturb", "--family", "vector_add")      # rocke's own table
        assert r.exit_code == 0 and r.output.strip() == "ok: vector_add (against its pinned hashes)"
        r = _rocke("golden", "perturb", "--family", "inert_demo")      # not pinned there: current IR
        assert r.exit_code == 1 and "FAILED: inert_demo" in r.output
    finally:
        unregister_family("inert_demo")


def test_perturb_flags_a_variant_whose_pinned_hash_moves(tmp_path):
    table = tmp_path / "mine.json"
    pinned = current_hashes(["vector_add"])
    second = sorted(pinned)[1]
    pinned[second] = "f" * 64
    table.write_text(json.dumps(pinned))
    r = _rocke("golden", "perturb", "--path", str(table))
    assert r.exit_code == 1 and f"{second} changed after" in r.output, r.output


def test_update_family_by_family_builds_one_table(tmp_path):
    """Updating per family merges: the other families' entries stay (it used to keep only the
    last family: run on rocke's own table, `--family reduce_segments` dropped 196 entries)."""
    table = tmp_path / "mine.json"
    r = _rocke("golden", "update", "--family", "vector_add", "--path", str(table))
    assert r.exit_code == 0, r.output
    assert "creating" in r.output and "create it with" not in r.output
    r = _rocke("golden", "update", "--family", "softmax", "--path", str(table))
    assert r.exit_code == 0, r.output
    both = {**current_hashes(["vector_add"]), **current_hashes(["softmax"])}
    assert json.loads(table.read_text()) == both
    stale = dict(both, **{"softmax/no_longer_shipped": "0" * 64})
    table.write_text(json.dumps(stale))
    r = _rocke("golden", "update", "--family", "softmax", "--path", str(table))
    assert r.exit_code == 0, r.output
    assert json.loads(table.read_text()) == both      # the family's stale entry is dropped
    assert "kept" in r.output.splitlines()[-1]
