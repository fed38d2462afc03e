"""The content-addressed result store (rocke.compiler.results) and ``report --reachable`` on it:
keyed by the IR's sha256 and the toolchain, written atomically, a corrupt entry detected and
recomputed, and a re-run after a kernel change compiling only the specs whose IR moved."""
import json

import pytest
from click.testing import CliRunner

from rocke.compiler import results
from rocke.compiler.results import ResultStore, result_key


def test_a_value_round_trips_and_the_key_follows_ir_kind_target_and_toolchain(tmp_path,
                                                                             monkeypatch):
    store = ResultStore(tmp_path)
    key = result_key("asm-resources", "define void @k() { ret void }", "amdgcn-amd-amdhsa--gfx942")
    assert store.get(key) is None and store.misses == 1
    store.put(key, {"vgprs": 12, "error": None})
    assert store.get(key) == {"vgprs": 12, "error": None} and store.hits == 1
    assert len(store) == 1
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".json"]  # no temp
    others = {result_key("asm-resources", "define void @k() { ret void } ", "amdgcn-amd-amdhsa--gfx942"),
              result_key("other-kind", "define void @k() { ret void }", "amdgcn-amd-amdhsa--gfx942"),
              result_key("asm-resources", "define void @k() { ret void }", "amdgcn-amd-amdhsa--gfx950"),
              result_key("asm-resources", "define void @k() { ret void }", "amdgcn-amd-amdhsa--gfx942",
                         {"opt": 2})}
    from rocke.compiler import toolchain
    monkeypatch.setattr(toolchain, "toolchain_fingerprint", lambda: "llvmlite-0/llvm-0")
    others.add(result_key("asm-resources", "define void @k() { ret void }", "amdgcn-amd-amdhsa--gfx942"))
    assert key not in others and len(others) == 5
    with pytest.raises(ValueError, match="64 lowercase hex"):
        store.get("../../etc/passwd")


@pytest.mark.parametrize("damage", ["truncated", "not json", "checksum", "other key", "not utf-8",
                                    "a directory"])
def test_a_corrupt_entry_is_detected_deleted_and_answered_as_a_miss(tmp_path, damage):
    store = ResultStore(tmp_path)
    key = result_key("k", "ir", "t")
    store.put(key, {"vgpr_spills": 0, "sgpr_spills": 3})
    path = store.path(key)
    entry = json.loads(path.read_text())
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:20])
    elif damage == "not json":
        path.write_text("{]")
    elif damage == "checksum":
        entry["value"]["sgpr_spills"] = 0          # the value moved, its checksum did not
        path.write_text(json.dumps(entry))
    elif damage == "other key":
        entry["key"] = result_key("k", "other ir", "t")
        path.write_text(json.dumps(entry))
    elif damage == "not utf-8":
        path.write_bytes(b"\xff\xfe" + path.read_bytes())
    else:
        path.unlink()
        path.mkdir()
    assert store.get(key) is None
    assert store.corrupt == 1
    assert not path.exists()                       # gone: the next put writes a good one
    store.put(key, {"vgpr_spills": 0, "sgpr_spills": 3})
    assert store.get(key) == {"vgpr_spills": 0, "sgpr_spills": 3}


def test_an_unwritable_store_costs_only_recomputation(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = ResultStore(blocker / "results")        # under a file: no directory can be made
    key = result_key("k", "ir", "t")
    store.put(key, 1)
    assert store.get(key) is None


def _report(monkeypatch, tmp_path, specs, *extra):
    from rocke import cli
    from rocke.kernels.gfx942 import attention_reachable as reach
    monkeypatch.setattr(reach, "reachable_specs", lambda target="gfx942": dict(specs))
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--json", str(out), *extra])
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text())


def test_a_rerun_compiles_only_the_specs_whose_ir_moved(tmp_path, monkeypatch):
    """Three real specs (reduce_segments: small): the first run compiles all three, a re-run
    none (nothing is compiled: LLVM is not reached; each spec's report is found by the spec
    under this code, no IR built), a corrupt entry is recomputed to the same counts, and after an
    edit (another code fingerprint) that moves one kernel's IR only that one is compiled again,
    the others answered by their IR."""
    from rocke.compiler import pipeline
    from rocke.kernels.gfx942 import attention_reachable as reach
    from rocke.kernels.gfx942 import reduce_segments as rs
    monkeypatch.setenv("ROCKE_RESULTS_DIR", str(tmp_path / "store"))
    specs = {s.kernel_name: s for s in list(rs.VARIANTS.values())[:3]}
    first, record = _report(monkeypatch, tmp_path, specs)
    assert "0 of 3 specs answered by the result store" in first and record["from_store"] == 0
    store = ResultStore(tmp_path / "store")
    assert len(store) == 6          # each spec's compile, by its IR, and its report, by the spec
    index = {store.path(reach.report_key(s)) for s in specs.values()}

    compiled = []
    real = pipeline._codegen_isolated

    def counting(mod, tm, opt, variant, emit_object=True):
        compiled.append(variant)
        return real(mod, tm, opt, variant, emit_object)
    monkeypatch.setattr(pipeline, "_codegen_isolated", counting)
    real_counts = reach.spill_counts
    monkeypatch.setattr(reach, "spill_counts", lambda spec: pytest.fail("an IR was built"))
    again, record2 = _report(monkeypatch, tmp_path, specs)
    monkeypatch.setattr(reach, "spill_counts", real_counts)
    assert "3 of 3 specs answered by the result store" in again and compiled == []
    assert again.strip().splitlines()[-1] == first.strip().splitlines()[-1]
    # --no-cache: every spec compiled again, the same answer
    fresh, _ = _report(monkeypatch, tmp_path, specs, "--no-cache")
    assert "0 of 3 specs answered" in fresh and len(compiled) == 3
    compiled.clear()

    # a corrupt entry: detected, recomputed (one compile), the same report (every report entry
    # corrupt too, so the compile entries are asked)
    victim = next(p for p in (tmp_path / "store").rglob("*.json") if p not in index)
    for path in (victim, *index):
        path.write_text(path.read_text()[:-30])
    healed, record3 = _report(monkeypatch, tmp_path, specs)
    assert "2 of 3 specs answered by the result store" in healed and len(compiled) == 1
    for r in (record2, record3):
        assert {k: v for k, v in r.items() if k not in ("seconds", "from_store")} == \
            {k: v for k, v in record.items() if k not in ("seconds", "from_store")}
    compiled.clear()

    # one kernel's IR moves (a builder edit, so another code fingerprint): only it is compiled
    monkeypatch.setattr(reach, "_worker_code", lambda: "edited")
    monkeypatch.setattr(reach, "code_fingerprint", lambda: "edited")
    touched = sorted(specs)[1]
    real_build = rs.build

    class Touched:
        def __init__(self, kern):
            self._k = kern

        def __getattr__(self, name):
            return getattr(self._k, name)

        def ir(self):
            return self._k.ir() + "\n; touched\n"
    monkeypatch.setattr(rs, "build", lambda spec: Touched(real_build(spec))
                        if spec.kernel_name == touched else real_build(spec))
    moved, _ = _report(monkeypatch, tmp_path, specs)
    assert "2 of 3 specs answered by the result store" in moved and ", 1 compiled;" in moved
    assert compiled == [touched]
    assert reach.result_store() is not None


def test_the_store_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")
    assert results.default_store() is None
    monkeypatch.setenv("ROCKE_RESULTS_DIR", str(tmp_path))
    assert results.default_store().root == tmp_path
