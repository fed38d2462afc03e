"""Cache integrity (issue 10 catalog 7): the key names the linker, code objects are validated
before they are stored and when they are served, and any unreadable or wrong-shaped entry is
rebuilt -- never an exception, never a poisoned result."""
from __future__ import annotations

import hashlib
import json

import pytest

from rocke.compiler import CompileCache, ToolchainError, compile_ir, toolchain
from rocke.compiler.cache import _FILES
from tests.compiler.test_compiler import SAXPY_IR

from . import _host_helpers as fakes


@pytest.fixture
def linker(monkeypatch):
    def use(path):
        monkeypatch.setenv("ROCKE_LD_LLD", path)
        toolchain.find_linker.cache_clear()
    yield use
    toolchain.find_linker.cache_clear()


@pytest.fixture
def warm(tmp_path):
    """A cache holding saxpy, and the cold build it came from."""
    store = CompileCache(tmp_path / "cache")
    cold = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    (entry,) = [p.parent for p in (tmp_path / "cache").rglob("entry.json")]
    return store, cold, entry


def _rebuilt(store, cold):
    again = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not again.cache_hit and again.code_object == cold.code_object
    assert compile_ir(SAXPY_IR, name="saxpy", cache=store).cache_hit      # and stored again
    return again


def test_junk_linker_poisons_nothing_and_the_fixed_linker_builds(tmp_path, linker):
    """Catalog 7: a linker exiting 0 with junk had a 4-byte 'code object' cached and served."""
    store = CompileCache(tmp_path / "cache")
    real = fakes.real_linker()
    linker(fakes.junk_linker(tmp_path))
    with pytest.raises(ToolchainError, match="not a valid code object"):
        compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not list((tmp_path / "cache").rglob("kernel.hsaco"))
    linker(real)
    fixed = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not fixed.cache_hit and fixed.code_object[:4] == b"\x7fELF" and len(fixed.code_object) > 1000


def test_key_includes_the_linker(tmp_path, linker, warm):
    store, cold, _ = warm
    linker(fakes.wrapper_linker(tmp_path, fakes.real_linker()))
    other = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not other.cache_hit                    # another linker: not served the first's output
    assert len(list((tmp_path / "cache").rglob("entry.json"))) == 2


def test_replaced_linker_at_the_same_path_misses(tmp_path, linker):
    store = CompileCache(tmp_path / "cache")
    path = fakes.wrapper_linker(tmp_path, fakes.real_linker())
    linker(path)
    compile_ir(SAXPY_IR, name="saxpy", cache=store)
    fakes.wrapper_linker(tmp_path, fakes.real_linker())       # rewritten: new mtime
    with open(path, "a") as f:
        f.write("# upgraded\n")                                 # and size
    assert not compile_ir(SAXPY_IR, name="saxpy", cache=store).cache_hit


@pytest.mark.parametrize("content", ["[]", "null", '"text"', "42", '{"key": 5}', "{}", "{not json", ""],
                         ids=["list", "null", "string", "number", "wrong-key-type", "empty-object",
                              "invalid-json", "empty-file"])
def test_wrong_shaped_entry_json_is_rebuilt(warm, content):
    store, cold, entry = warm
    (entry / "entry.json").write_text(content)
    _rebuilt(store, cold)


def test_entry_json_is_binary_garbage(warm):
    store, cold, entry = warm
    (entry / "entry.json").write_bytes(b"\xff\xfe\x00garbage")
    _rebuilt(store, cold)


@pytest.mark.parametrize("victim", _FILES)
def test_missing_file_in_entry_is_rebuilt(warm, victim):
    store, cold, entry = warm
    (entry / victim).unlink()
    _rebuilt(store, cold)


def _forge(entry, **blobs):
    """Replace entry blobs and re-sign the digest, as a bug or a tool writing the cache might."""
    for f, b in blobs.items():
        (entry / f).write_bytes(b)
    meta = json.loads((entry / "entry.json").read_text())
    meta["digest"] = hashlib.sha256(b"".join((entry / f).read_bytes() for f in _FILES)).hexdigest()
    (entry / "entry.json").write_text(json.dumps(meta))


def test_consistent_but_junk_code_object_is_not_served(warm):
    """Validation at serve time: a digest-consistent entry whose code object is junk."""
    store, cold, entry = warm
    _forge(entry, **{"kernel.hsaco": b"junk"})
    _rebuilt(store, cold)


def test_code_object_of_another_kernel_is_not_served(warm):
    store, cold, entry = warm
    other = compile_ir(SAXPY_IR.replace("@saxpy", "@other"), name="other", cache=False)
    _forge(entry, **{"kernel.hsaco": other.code_object})
    _rebuilt(store, cold)


def test_asm_without_metadata_is_not_served(warm):
    store, cold, entry = warm
    _forge(entry, **{"kernel.s": b"\t.text\n"})
    _rebuilt(store, cold)


def test_asm_not_utf8_is_not_served(warm):
    store, cold, entry = warm
    _forge(entry, **{"kernel.s": b"\xff\xfe\xfd"})
    _rebuilt(store, cold)


def test_entry_path_taken_by_a_file_is_rebuilt(warm):
    store, cold, entry = warm
    import shutil
    shutil.rmtree(entry)
    entry.write_bytes(b"not a directory")
    _rebuilt(store, cold)


def test_cache_root_that_is_a_file_only_costs_rebuilds(tmp_path):
    root = tmp_path / "cache"
    root.write_text("a file, not a directory")
    store = CompileCache(root)
    first = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    second = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not first.cache_hit and not second.cache_hit
    assert root.read_text() == "a file, not a directory"


def test_truncated_code_object_with_matching_digest(warm):
    store, cold, entry = warm
    _forge(entry, **{"kernel.hsaco": cold.code_object[:200]})
    _rebuilt(store, cold)
