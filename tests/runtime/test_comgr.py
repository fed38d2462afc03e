"""The optional comgr link route (rocke/compiler/comgr.py). No ROCm comgr exists here, so the
real link is not run: these tests pin the routing, the errors, and the calls made on the
bindings' documented Action / Data / DataSet classes (through a recording stand-in module)."""
from __future__ import annotations

import sys
import types

import pytest

from rocke.compiler import ToolchainError, comgr
from rocke.compiler.pipeline import link_code_object


@pytest.fixture
def no_bindings(monkeypatch):
    monkeypatch.setitem(sys.modules, "rocm", None)       # import rocm... raises ImportError


def test_without_bindings_comgr_is_unavailable_and_says_what_to_install(no_bindings):
    ok, why = comgr.availability()
    assert not ok and "comgr bindings" in why and "rocm-llvm-python" in why
    with pytest.raises(ToolchainError, match="comgr bindings"):
        comgr.link(b"", "k", "gfx942:sramecc+:xnack-", linker="comgr")


def test_ld_lld_is_the_default_route(vector_add, monkeypatch):
    _variant, ck = vector_add
    monkeypatch.delenv("ROCKE_LINKER", raising=False)
    code_object, linker = comgr.link(ck.object, ck.name, ck.target)
    assert linker == "ld.lld" and code_object == link_code_object(ck.object, ck.name)


def test_rocke_linker_lever_routes_and_is_validated(no_bindings, monkeypatch):
    monkeypatch.setenv("ROCKE_LINKER", "comgr")
    with pytest.raises(ToolchainError, match="comgr bindings"):
        comgr.link(b"", "k", "gfx942:sramecc+:xnack-")
    monkeypatch.setenv("ROCKE_LINKER", "gold")
    with pytest.raises(ValueError, match="ROCKE_LINKER must be 'ld.lld' or 'comgr'"):
        comgr.link(b"", "k", "gfx942:sramecc+:xnack-")


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
    code_object, linker = comgr.link(b"\x7fELF reloc", "k", "gfx942:sramecc+:xnack-",
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
        comgr.link(b"\x7fELF", "k", "gfx942:sramecc+:xnack-", linker="comgr")
