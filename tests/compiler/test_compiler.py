import struct

import pytest

from rocke import llvm_tools
from rocke.compiler import (CompileCache, CompileError, ToolchainError, assemble_ir, compile_ir,
                            find_linker)
from rocke.compiler import toolchain

SAXPY_IR = """
target triple = "amdgcn-amd-amdhsa"
define amdgpu_kernel void @saxpy(ptr addrspace(1) noalias %y, ptr addrspace(1) noalias %x, float %a) #0 {
  %id = call i32 @llvm.amdgcn.workitem.id.x()
  %px = getelementptr float, ptr addrspace(1) %x, i32 %id
  %py = getelementptr float, ptr addrspace(1) %y, i32 %id
  %vx = load float, ptr addrspace(1) %px
  %vy = load float, ptr addrspace(1) %py
  %r = call float @llvm.fma.f32(float %a, float %vx, float %vy)
  store float %r, ptr addrspace(1) %py
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare float @llvm.fma.f32(float, float, float)
attributes #0 = { "amdgpu-flat-work-group-size"="1,128" }
!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}
"""


def test_compile_produces_code_object_and_info(tmp_path):
    ck = compile_ir(SAXPY_IR, name="saxpy", cache=CompileCache(tmp_path))
    assert ck.code_object[:4] == b"\x7fELF"
    e_type, e_machine = struct.unpack_from("<HH", ck.code_object, 16)
    assert e_type == 3 and e_machine == 224          # ET_DYN, EM_AMDGPU
    assert "v_fma_f32" in ck.asm or "v_fmac_f32" in ck.asm
    assert ".amdhsa_code_object_version 5" in ck.asm
    i = ck.info
    assert [a.name for a in i.explicit_args] == ["y", "x", "a"]
    assert [a.size for a in i.explicit_args] == [8, 8, 4]
    assert i.max_workgroup_size == 128 and i.spills == 0 and 1 <= i.vgprs <= 8


def test_cache_hit_and_corrupt_entry_rebuilt(tmp_path):
    store = CompileCache(tmp_path)
    cold = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    warm = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not cold.cache_hit and warm.cache_hit and warm.code_object == cold.code_object
    for f in tmp_path.rglob("kernel.hsaco"):
        f.write_bytes(b"garbage")
    again = compile_ir(SAXPY_IR, name="saxpy", cache=store)
    assert not again.cache_hit and again.code_object == cold.code_object
    assert compile_ir(SAXPY_IR, name="saxpy", cache=store).cache_hit


def test_codegen_in_process_builds_the_same_kernel():
    """isolate_codegen=False (benchmarks/compile.py's in-process column) changes where LLVM runs,
    not what it builds; a non-bool is refused before any work."""
    forked = compile_ir(SAXPY_IR, name="saxpy", cache=False)
    inline = compile_ir(SAXPY_IR, name="saxpy", cache=False, isolate_codegen=False)
    assert (inline.asm, inline.object, inline.code_object) == \
        (forked.asm, forked.object, forked.code_object)
    with pytest.raises(ValueError, match="isolate_codegen must be True or False, got 0"):
        compile_ir(SAXPY_IR, name="saxpy", cache=False, isolate_codegen=0)


def test_verifier_error_names_variant():
    bad = SAXPY_IR.replace("ret void", "ret i32 0")
    with pytest.raises(CompileError, match=r"saxpy\(f32, wide\)"):
        compile_ir(bad, name="saxpy", variant="saxpy(f32, wide)", cache=False)


def test_missing_linker_says_what_to_install(monkeypatch):
    toolchain.find_linker.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ROCM_PATH", "/nonexistent")
    monkeypatch.delenv("ROCKE_LD_LLD", raising=False)
    monkeypatch.setattr(llvm_tools, "INSTALL_DIR_PATTERNS", ())
    try:
        with pytest.raises(ToolchainError, match="apt-get install lld-19"):
            find_linker()
    finally:
        toolchain.find_linker.cache_clear()


def test_assemble_ir_needs_no_linker_and_reads_the_same_listing(tmp_path, monkeypatch):
    """assemble_ir: the listing and KernelInfo compile_ir builds, with no object and no link (a
    machine without ld.lld); cached under its own key; bad IR refused as compile_ir does."""
    linked = compile_ir(SAXPY_IR, name="saxpy", cache=False)
    toolchain.find_linker.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("ROCKE_LD_LLD", str(tmp_path / "no" / "ld.lld"))
    try:
        with pytest.raises(ToolchainError):          # the premise: nothing here can link
            compile_ir(SAXPY_IR, name="saxpy", cache=False)
        store = CompileCache(tmp_path / "cache")
        asm, info = assemble_ir(SAXPY_IR, name="saxpy", cache=store)
        assert asm == linked.asm and info == linked.info
        assert any((tmp_path / "cache").rglob("kernel.s"))
        assert assemble_ir(SAXPY_IR, name="saxpy", cache=store) == (asm, info)     # served
        with pytest.raises(CompileError, match="defines no function 'nope'"):
            assemble_ir(SAXPY_IR, name="nope", cache=False)
    finally:
        toolchain.find_linker.cache_clear()


DIVERGENT_IR = """
target triple = "amdgcn-amd-amdhsa"
define amdgpu_kernel void @clamp_store(ptr addrspace(1) %p, i32 %n) {
  %id = call i32 @llvm.amdgcn.workitem.id.x()
  %in = icmp slt i32 %id, %n
  br i1 %in, label %then, label %done
then:
  %g = getelementptr i32, ptr addrspace(1) %p, i32 %id
  store i32 %id, ptr addrspace(1) %g
  br label %done
done:
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""


def test_divergent_branch_compiles_to_asm_and_object():
    # codegen mutates the module (structurizer intrinsics); asm and object must not share it
    ck = compile_ir(DIVERGENT_IR, name="clamp_store", cache=False)
    assert "s_and_saveexec_b64" in ck.asm and ck.code_object[:4] == b"\x7fELF"


def test_llvm_without_amdgpu_says_what_to_install(monkeypatch):
    def no_amdgpu(triple):
        raise RuntimeError(f"No available targets are compatible with triple {triple!r}")
    toolchain.target_machine.cache_clear()
    monkeypatch.setattr(toolchain.llvm.Target, "from_triple", staticmethod(no_amdgpu))
    try:
        with pytest.raises(ToolchainError, match=r"llvmlite>=0.50"):
            compile_ir(SAXPY_IR, name="saxpy", cache=False)
    finally:
        toolchain.target_machine.cache_clear()
