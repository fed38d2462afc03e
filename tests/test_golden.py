"""Golden IR hashes: every shipped variant is pinned, and variants hash independently."""
import dataclasses
import hashlib
import json

import pytest
from click.testing import CliRunner

from rocke.cli import main as cli
from rocke.kernels import registry
from rocke.kernels.golden import current_hashes, diff_golden, load_golden

# one spec change per family, used to prove that a change moves exactly one hash
SPEC_CHANGE = {
    "vector_add": ("vector_width", {4: 2, 8: 4, 2: 4}),
    "softmax": ("num_warps", {4: 2, 2: 4, 1: 2}),
    "gemm": ("block_k", {32: 16, 16: 32, 64: 32}),
    "flash_attention": ("causal", {True: False, False: True}),
    "attention_2d": ("kv_cache_policy", {"normal": "stream", "stream": "normal"}),
    "attention_3d": ("kv_cache_policy", {"normal": "stream", "stream": "normal"}),
    "reduce_segments": ("vector_width", {4: 2, 2: 4, 1: 2}),
}


def test_golden_table_matches_current_ir():
    d = diff_golden(load_golden(), current_hashes())
    assert d == {"changed": [], "missing": [], "stale": []}, (
        f"IR hashes moved: {d}. If deliberate, run `rocke golden update` and say why in the commit.")


def test_every_family_can_be_perturbed():
    assert {v.family for v in registry.all_variants().values()} <= set(SPEC_CHANGE)


@pytest.mark.parametrize("family", sorted({v.family for v in registry.all_variants().values()}))
def test_changing_one_spec_changes_only_its_hash(family):
    golden = load_golden()
    variants = registry.all_variants()
    victim = next(v for v in variants.values() if v.family == family)
    field, change = SPEC_CHANGE[family]
    new_spec = dataclasses.replace(victim.spec, **{field: change[getattr(victim.spec, field)]})
    # rebuild every variant, the victim with its changed spec, in registry order
    hashes = {}
    for name, v in variants.items():
        spec = new_spec if name == victim.name else v.spec
        hashes[name] = hashlib.sha256(v.builder(spec).ir().encode()).hexdigest()
    assert hashes[victim.name] != golden[victim.name]
    assert {n: h for n, h in hashes.items() if n != victim.name} == {
        n: h for n, h in golden.items() if n != victim.name}


def test_cli_golden_check_and_update(tmp_path):
    table = tmp_path / "ir.json"
    r = CliRunner().invoke(cli, ["golden", "check", "--path", str(table)])
    assert r.exit_code != 0 and "rocke golden update" in r.output
    r = CliRunner().invoke(cli, ["golden", "update", "--path", str(table)])
    assert r.exit_code == 0, r.output
    assert json.loads(table.read_text()) == current_hashes()
    bad = json.loads(table.read_text())
    first = sorted(bad)[0]
    bad[first] = "0" * 64
    table.write_text(json.dumps(bad))
    r = CliRunner().invoke(cli, ["golden", "check", "--path", str(table)])
    assert r.exit_code == 1 and f"changed: {first}" in r.output
