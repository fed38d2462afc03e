"""The optional comgr link route (rocke/compiler/comgr.py). No ROCm comgr exists here, so the
real link is not run: these tests pin the routing, the errors, and the calls made on the
bindings' documented Action / Data / DataSet classes (through a recording stand-in module)."""
from __future__ import annotations

import sys
import types

import pytest

from rocke.compiler import ToolchainError, comgr, linker as linkers
from rocke.compiler.linker import link_code_object


@pytest.fixture
def no_bindings(monkeypatch):
    monkeypatch.setitem(sys.modules, "rocm", None)       # import rocm... raises ImportError


def test_without_bindings_comgr_is_unavailable_and_says_what_to_install(no_bindings):
    ok, why = comgr.availability()
    assert not ok and "comgr bindings" in why and "rocm-llvm-python" in why
    with pytest.raises(ToolchainError, match="comgr bindings"):
        linkers.link(b"", "k", "gfx942:sramecc+:xnack-", linker="comgr")


def test_ld_lld_is_the_default_route(vector_add, monkeypatch):
    _variant, ck = vector_add
    monkeypatch.delenv("ROCKE_LINKER", raising=False)
    code_object, linker = linkers.link(ck.object, ck.name, ck.target)
    assert linker == "ld.lld" and code_object == link_code_object(ck.object, ck.name)


def test_rocke_linker_lever_routes_and_is_validated(no_bindings, monkeypatch):
    monkeypatch.setenv("ROCKE_LINKER", "comgr")
    with pytest.raises(ToolchainError, match="comgr bindings"):
        linkers.link(b"", "k", "gfx942:sramecc+:xnack-")
    monkeypatch.setenv("ROCKE_LINKER", "gold")
    with pytest.raises(ValueError, match="ROCKE_LINKER must be 'ld.lld' or 'comgr'"):
        linkers.link(b"", "k", "gfx942:sramecc+:xnack-")


def _recording_bindings(status: int, executable: bytes | None, log: bytes = b""):
    seen = {}

    class Data:
        def __init__(self, name, kind, buffer=None):
            self.name, self.kind, self.buffer = name, kind, buffer

        def get_data_bytes(self):
            return self.buffer

    class DataSet:
        def __init__(self, *datas):
            self.datas = list(datas)

        def count_data(self, kind):
            return sum(d.kind == kind for d in self.datas)

        def get_data(self, kind, index):
            return [d for d in self.datas if d.kind == kind][index]

    class Action:
        def __init__(self, action_kind_str, isa_name=None, logging=False, **_):
            seen.update(action=action_kind_str, isa=isa_name)
            self.result_data_set = DataSet()

        def do_action(self, inputs, check=True):
            seen["inputs"] = [(d.name, d.kind, d.buffer) for d in inputs.datas]
            if executable is not None:
                self.result_data_set.datas.append(Data("a.out", "EXECUTABLE", executable))
            self.result_data_set.datas.append(Data("log", "LOG", log))
            return types.SimpleNamespace(value=status, name=f"STATUS_{status}")

    module = types.SimpleNamespace(Action=Action, Data=Data, DataSet=DataSet,
                                   get_isa_names=lambda: ["amdgcn-amd-amdhsa--gfx942"])
    return module, seen


def test_link_with_comgr_makes_one_link_action(monkeypatch):
    module, seen = _recording_bindings(0, b"\x7fELF linked")
    monkeypatch.setitem(sys.modules, "rocm", types.SimpleNamespace(comgr=module))
    monkeypatch.setitem(sys.modules, "rocm.comgr", module)
    assert comgr.availability() == (True, "")
    code_object, linker = linkers.link(b"\x7fELF reloc", "k", "gfx942:sramecc+:xnack-",
                                     linker="comgr")
    assert (code_object, linker) == (b"\x7fELF linked", "comgr")
    assert seen == {"action": "LINK_RELOCATABLE_TO_EXECUTABLE",
                    "isa": "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
                    "inputs": [("k.o", "RELOCATABLE", b"\x7fELF reloc")]}


def test_a_failed_comgr_link_reports_status_and_log(monkeypatch):
    module, _seen = _recording_bindings(1, None, b"ld.lld: error: undefined symbol: foo")
    monkeypatch.setitem(sys.modules, "rocm", types.SimpleNamespace(comgr=module))
    monkeypatch.setitem(sys.modules, "rocm.comgr", module)
    with pytest.raises(ToolchainError, match=r"(?s)comgr failed linking k for gfx942.*"
                                             "undefined symbol: foo"):
        linkers.link(b"\x7fELF", "k", "gfx942:sramecc+:xnack-", linker="comgr")


def test_rocke_linker_comgr_routes_compile_ir_and_is_recorded(monkeypatch, tmp_path):
    """ROCKE_LINKER=comgr makes compile_ir link through comgr (here: recording bindings that
    return what ld.lld would), CompiledKernel.linker says so, an ld.lld cache entry is never
    served for it, and junk from comgr is a ToolchainError, not a cached code object."""
    from rocke.compiler import CompileCache, compile_ir
    from rocke.kernels.registry import get_variant
    k = get_variant("vector_add/f32_v4").kernel()
    store = CompileCache(tmp_path)
    by_lld = compile_ir(k.ir(), name=k.name, cache=store)
    assert by_lld.linker == "ld.lld"
    module, seen = _recording_bindings(0, link_code_object(by_lld.object, k.name))
    monkeypatch.setitem(sys.modules, "rocm", types.SimpleNamespace(comgr=module))
    monkeypatch.setitem(sys.modules, "rocm.comgr", module)
    monkeypatch.setenv("ROCKE_LINKER", "comgr")
    by_comgr = compile_ir(k.ir(), name=k.name, cache=store)
    assert by_comgr.linker == "comgr" and not by_comgr.cache_hit
    assert seen["action"] == "LINK_RELOCATABLE_TO_EXECUTABLE"
    assert compile_ir(k.ir(), name=k.name, cache=store).cache_hit       # its own entry
    junk, _ = _recording_bindings(0, b"\x7fELF but not a code object")
    monkeypatch.setitem(sys.modules, "rocm.comgr", junk)
    monkeypatch.setattr(sys.modules["rocm"], "comgr", junk)
    with pytest.raises(ToolchainError, match="comgr linked .* not a valid code object"):
        compile_ir(k.ir(), name=k.name, cache=False)
