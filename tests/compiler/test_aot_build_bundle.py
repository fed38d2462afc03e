"""`rocke aot build` over what is already at --out, and whose entry a bundle serves: a directory
that is not a bundle is refused untouched (before any compile), files the bundle's index does not
name survive, named variants are added to a bundle (--replace, or a build of every variant, writes
only the new ones), an interrupted write leaves the old bundle whole, and an entry is served by
spec only when it is the one written for that spec."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from rocke import cli
from rocke.cli import main
from rocke.compiler import DEFAULT_TARGET, prebuilt
from rocke.kernels import golden as golden_mod
from rocke.kernels.registry import all_variants

A = "vector_add/f32_v4"
B = "vector_add/f16_v8"


def _build(out, *args):
    return CliRunner().invoke(main, ["aot", "build", "--quiet", "-j", "1", "--out", str(out),
                                     *args])


def _entries(out) -> dict:
    return json.loads((out / "index.json").read_text())["entries"]


def _variants_in(out) -> list[str]:
    return sorted(e["variant"] for e in _entries(out).values())


def _listing(root) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A bundle of A and B, built once (tests copy it before changing it)."""
    out = tmp_path_factory.mktemp("pair") / "gfx942"
    result = _build(out, A, B)
    assert result.exit_code == 0, result.output
    return out


def _copy(bundle, to):
    shutil.copytree(bundle, to)
    return to


def _no_compile(monkeypatch):
    def refuse(*_args):
        raise AssertionError("a variant was compiled")
    monkeypatch.setattr(cli, "_aot_one", refuse)


# -- 1. never delete what rocke did not write ----------------------------------------------------

@pytest.mark.parametrize("index", [None, '{"title": "my thesis"}', "not json"],
                         ids=["no index", "another program's index.json", "index.json not JSON"])
def test_a_directory_that_is_not_a_bundle_is_refused_untouched_before_any_compile(
        tmp_path, monkeypatch, index):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "thesis.tex").write_text("\\chapter{Four years}\n")
    (out / "figures").mkdir()
    (out / "figures" / "plot.pdf").write_bytes(b"%PDF")
    if index is not None:
        (out / "index.json").write_text(index)
    before = _listing(out)
    _no_compile(monkeypatch)
    result = _build(out, A)
    assert result.exit_code == cli.EXIT_USER_ERROR, result.output
    assert f"cannot write the bundle: {out} is not a rocke bundle" in result.output
    assert "Traceback" not in result.output
    assert _listing(out) == before


def test_an_empty_or_new_directory_is_written(tmp_path):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "gfx942"):
        result = _build(out, A)
        assert result.exit_code == 0, result.output
        assert _variants_in(out) == [A]


def test_files_the_index_does_not_name_survive_a_rebuild(tmp_path, pair):
    out = _copy(pair, tmp_path / "gfx942")
    (out / "NOTES.txt").write_text("built for the March run\n")
    (out / "extra").mkdir()
    (out / "extra" / "mine.hsaco").write_bytes(b"mine")
    result = _build(out, A)
    assert result.exit_code == 0, result.output
    assert (out / "NOTES.txt").read_text() == "built for the March run\n"
    assert (out / "extra" / "mine.hsaco").read_bytes() == b"mine"
    result = _build(out, "--replace", B)          # drops A: only A's own files go
    assert result.exit_code == 0, result.output
    files = {e["file"] for e in _entries(out).values()}
    assert {p.name for p in out.iterdir()} == \
        {"index.json", "NOTES.txt", "extra"} | {f + s for f in files for s in (".hsaco", ".o", ".s")}
    assert (out / "extra" / "mine.hsaco").read_bytes() == b"mine"


def test_an_index_naming_files_outside_the_bundle_never_reaches_them(tmp_path, pair):
    out = _copy(pair, tmp_path / "gfx942")
    victim = tmp_path / "victim.hsaco"
    victim.write_bytes(b"not rocke's")
    index = json.loads((out / "index.json").read_text())
    index["entries"]["0" * 64] = {"variant": "gone/v", "file": "../victim"}
    (out / "index.json").write_text(json.dumps(index))
    result = _build(out, "--replace", A)
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == b"not rocke's"


def test_a_bundle_from_before_content_named_files_is_replaced_file_by_file(tmp_path, pair):
    """A bundle whose files are named by variant only (as written before): its files are the
    index's, so a --replace build removes them -- and nothing else."""
    out = _copy(pair, tmp_path / "gfx942")
    index = json.loads((out / "index.json").read_text())
    for entry in index["entries"].values():
        stem = entry["variant"].replace("/", "__")
        for suffix in (".hsaco", ".o", ".s"):
            os.rename(out / (entry["file"] + suffix), out / (stem + suffix))
        entry["file"] = stem
        del entry["spec_key"]
    (out / "index.json").write_text(json.dumps(index))
    (out / "README").write_text("mine")
    result = _build(out, "--replace", A)
    assert result.exit_code == 0, result.output
    (entry,) = _entries(out).values()
    assert {p.name for p in out.iterdir()} == \
        {"index.json", "README"} | {entry["file"] + s for s in (".hsaco", ".o", ".s")}


def test_an_interrupted_write_leaves_the_old_bundle_whole(tmp_path, pair, monkeypatch):
    out = _copy(pair, tmp_path / "gfx942")
    before = _listing(out)
    real = prebuilt._write_synced

    def full_disk(path, data):
        if path.name == "index.json":           # every new file written, the index not yet
            raise OSError(28, "No space left on device", str(path))
        real(path, data)
    monkeypatch.setattr(prebuilt, "_write_synced", full_disk)
    result = _build(out, "--replace", "softmax/f16_wave")
    assert result.exit_code == cli.EXIT_USER_ERROR
    assert "No space left on device" in result.output
    assert _listing(out) == before                # no new file, no temporary directory left
    monkeypatch.setenv("ROCKE_PREBUILT", str(out))
    spec = all_variants()[A].spec
    assert prebuilt.lookup_spec(spec, golden_mod.load_golden(), DEFAULT_TARGET) is not None


# -- 2. named variants are added; --replace and a build of everything write only theirs -----------

def test_named_variants_are_added_to_the_bundle(tmp_path, pair, monkeypatch):
    out = _copy(pair, tmp_path / "gfx942")
    result = _build(out, "softmax/f16_wave")
    assert result.exit_code == 0, result.output
    assert f"prebuilt 1 variants into {out} (3 entries; 1 added/updated, 2 kept)" in result.output
    assert _variants_in(out) == sorted([A, B, "softmax/f16_wave"])
    result = _build(out, A)                      # its own entry replaced, no second one
    assert result.exit_code == 0, result.output
    assert f"prebuilt 1 variants into {out} (3 entries; 1 added/updated, 2 kept)" in result.output
    assert _variants_in(out) == sorted([A, B, "softmax/f16_wave"])
    monkeypatch.setenv("ROCKE_PREBUILT", str(out))
    for name in (A, B, "softmax/f16_wave"):
        spec = all_variants()[name].spec
        ck = prebuilt.lookup_spec(spec, golden_mod.load_golden(), DEFAULT_TARGET)
        assert ck is not None and ck.name == spec.kernel_name


def test_replace_writes_only_the_named_variants(tmp_path, pair):
    out = _copy(pair, tmp_path / "gfx942")
    old_b = [e["file"] for e in _entries(out).values() if e["variant"] == B]
    result = _build(out, "--replace", A)
    assert result.exit_code == 0, result.output
    assert f"prebuilt 1 variants into {out} (1 entries; 1 added/updated, 1 removed)" \
        in result.output
    assert _variants_in(out) == [A]
    assert not any((out / (f + s)).exists() for f in old_b for s in (".hsaco", ".o", ".s"))


def test_a_build_of_every_variant_replaces_the_bundle(tmp_path, pair, monkeypatch):
    """`rocke aot build` with no names (scripts/setup.sh) builds every shipped variant and drops
    the entries of variants no longer shipped (here "every variant" is A alone)."""
    out = _copy(pair, tmp_path / "gfx942")
    real = cli._variants
    monkeypatch.setattr(cli, "_variants", lambda names: real(names or (A,)))
    result = _build(out)
    assert result.exit_code == 0, result.output
    assert "(1 entries; 1 added/updated, 1 removed)" in result.output
    assert _variants_in(out) == [A]


# -- 3. an entry is served by spec only when it is the one written for that spec ----------------

def _swap(fields_kept):
    def damage(root):
        index = json.loads((root / "index.json").read_text())
        (ka, ea), (kb, eb) = index["entries"].items()
        index["entries"][ka] = {**eb, **{f: ea[f] for f in fields_kept}}
        index["entries"][kb] = {**ea, **{f: eb[f] for f in fields_kept}}
        (root / "index.json").write_text(json.dumps(index))
    return damage


@pytest.mark.parametrize("damage", [_swap(()), _swap(("spec_key",))],
                         ids=["entries swapped", "all but their spec keys swapped"])
def test_an_entry_filed_under_another_spec_is_never_served(tmp_path, pair, monkeypatch, damage):
    out = _copy(pair, tmp_path / "gfx942")
    damage(out)
    monkeypatch.setenv("ROCKE_PREBUILT", str(out))
    golden = golden_mod.load_golden()
    for name in (A, B):
        variant = all_variants()[name]
        assert prebuilt.lookup_spec(variant.spec, golden, DEFAULT_TARGET) is None
        ck = variant.compile()                   # built instead: the spec's own kernel
        assert ck.name == variant.spec.kernel_name


def test_an_entry_without_its_spec_key_is_served_by_ir_only(tmp_path, pair, monkeypatch):
    out = _copy(pair, tmp_path / "gfx942")
    index = json.loads((out / "index.json").read_text())
    for entry in index["entries"].values():
        del entry["spec_key"]
    (out / "index.json").write_text(json.dumps(index))
    monkeypatch.setenv("ROCKE_PREBUILT", str(out))
    variant = all_variants()[A]
    assert prebuilt.lookup_spec(variant.spec, golden_mod.load_golden(), DEFAULT_TARGET) is None
    kern = variant.kernel()
    ck = prebuilt.lookup_ir(kern.ir(), kern.name, DEFAULT_TARGET, 3)
    assert ck is not None and ck.prebuilt and ck.name == variant.spec.kernel_name
