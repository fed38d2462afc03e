"""Compiler reliability (issue 10 catalog 5, 8 and the linker parts of 7): an LLVM abort, a
broken or hung linker and bad compile_ir inputs are clear errors, never a dead process or a hang."""
from __future__ import annotations

import time

import pytest

from rocke.compiler import CompileCache, CompileError, ToolchainError, compile_ir, toolchain
from rocke.dsl import Kernel, i1, i32
from tests.compiler.test_compiler import SAXPY_IR

from . import _host_helpers as fakes


@pytest.fixture
def linker(monkeypatch):
    """Set ROCKE_LD_LLD for one test (find_linker's memo is keyed on it)."""
    def use(path):
        if path is None:
            monkeypatch.delenv("ROCKE_LD_LLD", raising=False)
        else:
            monkeypatch.setenv("ROCKE_LD_LLD", path)
        toolchain.find_linker.cache_clear()
    yield use
    toolchain.find_linker.cache_clear()


def _permlane_kernel():
    k = Kernel("perm16", workgroup_size=64)
    y = k.arg_ptr("y", i32)
    t = k.thread_id(0)
    r = k.call_intrinsic("llvm.amdgcn.permlane16.i32",
                         [t, t, 0, 0, k.const(False, i1), k.const(False, i1)], result=(i32, 1))
    y.buffer(64).store(t, r)
    return k


def test_llvm_cannot_select_is_a_compile_error_and_the_process_lives():
    """Catalog 5: permlane16 (gfx10+) on gfx942 made LLVM abort the whole Python process."""
    k = _permlane_kernel()
    ir = k.ir()
    with pytest.raises(CompileError, match=r"'my/perm16'.*SIGABRT.*Cannot select: intrinsic %llvm\.amdgcn\.permlane16"):
        compile_ir(ir, name=k.name, variant="my/perm16", cache=False)
    assert compile_ir(SAXPY_IR, name="saxpy", cache=False).code_object[:4] == b"\x7fELF"


def test_cannot_select_is_not_cached(tmp_path):
    k = _permlane_kernel()
    with pytest.raises(CompileError):
        compile_ir(k.ir(), name=k.name, cache=CompileCache(tmp_path))
    assert not list(tmp_path.rglob("entry.json"))


@pytest.mark.parametrize("make,words", [
    (lambda d: str(d / "missing-ld"), "does not exist"),
    (lambda d: str(d), "is a directory"),
    (lambda d: fakes.script(d, "noexec-ld", "exit 0\n") and str(_noexec(d / "noexec-ld")), "is not executable"),
])
def test_misconfigured_rocke_ld_lld_names_the_path(tmp_path, linker, make, words):
    path = make(tmp_path)
    linker(path)
    with pytest.raises(ToolchainError, match=rf"ROCKE_LD_LLD='{path}' {words}"):
        compile_ir(SAXPY_IR, name="saxpy", cache=False)


def _noexec(path):
    path.chmod(0o644)
    return path


@pytest.mark.parametrize("fake,words", [
    (fakes.junk_linker, "exited 0 linking saxpy but its output is not a valid code object: not an ELF"),
    (fakes.silent_linker, "exited 0 linking saxpy but wrote no output"),
    (fakes.failing_linker, "failed linking saxpy (exit 1): ld.lld: error: pretend failure"),
])
def test_broken_linker_is_a_toolchain_error_and_nothing_is_cached(tmp_path, linker, fake, words):
    linker(fake(tmp_path))
    cache = tmp_path / "cache"
    with pytest.raises(ToolchainError) as e:
        compile_ir(SAXPY_IR, name="saxpy", cache=CompileCache(cache))
    assert words in str(e.value)
    assert not list(cache.rglob("kernel.hsaco"))


def test_linker_writing_another_kernels_code_object_is_refused(tmp_path, linker):
    other = compile_ir(SAXPY_IR.replace("@saxpy", "@other"), name="other", cache=False)
    blob = tmp_path / "other.hsaco"
    blob.write_bytes(other.code_object)
    linker(fakes.copying_linker(tmp_path, blob))
    with pytest.raises(ToolchainError, match="no symbol for kernel 'saxpy'"):
        compile_ir(SAXPY_IR, name="saxpy", cache=False)


def test_sleeping_linker_times_out(tmp_path, linker, monkeypatch):
    """Catalog 8: a linker that sleeps blocked forever (no subprocess timeout)."""
    linker(fakes.sleeping_linker(tmp_path))
    monkeypatch.setattr(toolchain, "LINK_TIMEOUT_S", 0.5)
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.5)
    t0 = time.perf_counter()
    with pytest.raises(ToolchainError, match=r"did not finish .* within 0.5 s"):
        compile_ir(SAXPY_IR, name="saxpy", cache=False)
    assert time.perf_counter() - t0 < 10


def test_sleeping_linker_version_probe_times_out(tmp_path, linker, monkeypatch):
    linker(fakes.sleeping_linker(tmp_path))
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT_S", 0.3)
    with pytest.raises(ToolchainError, match="did not finish reporting its version within 0.3 s"):
        compile_ir(SAXPY_IR, name="saxpy", cache=CompileCache(tmp_path / "c"))


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(ir=b"not text"), TypeError, "ir must be LLVM IR text"),
    (dict(ir=SAXPY_IR.replace("ret void", "ret vod")), CompileError, "LLVM rejected the IR of kernel variant 'saxpy'"),
    (dict(ir=""), CompileError, "defines no function 'saxpy'"),
    (dict(name="saxpy2"), CompileError, "defines no function 'saxpy2'; it defines ['saxpy']"),
    (dict(name=""), ValueError, "name must be the kernel's symbol name"),
    (dict(opt=7), ValueError, "opt must be 0, 1, 2 or 3"),
    (dict(opt=True), ValueError, "opt must be 0, 1, 2 or 3"),
    (dict(target="gfx900"), ValueError, "unknown target 'gfx900'"),
    (dict(target="gfx942:sramecc"), ValueError, "bad target feature 'sramecc'"),
    (dict(ir=SAXPY_IR.replace("define amdgpu_kernel void @saxpy", "define void @saxpy")),
     CompileError, "is not an amdgpu_kernel"),
])
def test_bad_compile_inputs(kwargs, error, words):
    args = dict(ir=SAXPY_IR, name="saxpy", cache=False)
    args.update(kwargs)
    ir = args.pop("ir")
    with pytest.raises(error) as e:
        compile_ir(ir, **args)
    assert words in str(e.value)
