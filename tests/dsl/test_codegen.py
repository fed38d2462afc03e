"""IR verifies, compiles for gfx942, and the expected machine instructions appear in the asm."""

import re

import pytest

from rocke import dsl
from rocke.kernels.samples import softmax, vector_add

from .asm_helper import compile_to_asm, directive
from .zoo import build_zoo


@pytest.fixture(scope="module")
def zoo():
    kernel = build_zoo()
    return kernel, compile_to_asm(kernel.ir())


def test_module_header_and_attributes(zoo):
    kernel, _ = zoo
    text = kernel.ir()
    assert 'target triple = "amdgcn-amd-amdhsa"' in text
    assert dsl.DATA_LAYOUT in text
    assert '!{ i32 1, !"amdhsa_code_object_version", i32 500 }' in text
    assert '"amdgpu-flat-work-group-size"="256,256"' in text
    assert '"amdgpu-waves-per-eu"="2"' in text
    assert 'ptr addrspace(1) noalias readonly %"src"' in text
    assert '@"rocke_lds" = internal addrspace(3) global [2112 x i8] undef, align 16' in text
    # 4 rows x (64 + 4 pad) f32 = 1088 bytes, then a 16-byte aligned 1 KiB region
    assert kernel.lds_bytes == 1088 + 1024


@pytest.mark.parametrize("pattern", [
    r"buffer_load_dword \S+, s\[\d+:\d+\], 0 offen lds",      # LDS DMA
    r"s_waitcnt vmcnt\(0\)",
    r"s_barrier",
    r"ds_swizzle_b32 .*swizzle\(SWAP,1\)",
    r"_dpp .*row_shr:1",
    r"_dpp .*quad_perm:\[1,0,3,2\]",
    r"_dpp .*row_half_mirror",
    r"ds_bpermute_b32",
    r"v_readfirstlane_b32",
    r"v_mul_hi_u32",
    r"s_setprio 2",
    r"v_exp_f32",
    r"v_rcp_f32",
    r"v_rsq_f32",
    r"v_cvt_pk_fp8_f32",
    r"v_cvt_f32_fp8",
    r"v_cvt_pkrtz_f16_f32",
    r"v_cvt_f16_f32",
    r"global_load_dwordx4",
    r"ds_read_b32",
    r"ds_write_b32",
])
def test_zoo_asm_contains(zoo, pattern):
    _, asm = zoo
    assert re.search(pattern, asm), pattern


def test_zoo_resources(zoo):
    _, asm = zoo
    assert directive(asm, "amdhsa_group_segment_fixed_size") == 2112
    assert directive(asm, "amdhsa_private_segment_fixed_size") == 0  # no spills to scratch
    assert directive(asm, "amdhsa_kernarg_size") == 48  # 5 pointers + i32 + f32


def test_barrier_fences_and_waitcnt_encoding():
    k = dsl.Kernel("sync", workgroup_size=128)
    k.arg_i32("n")
    k.barrier()
    k.wait_vmcnt(5)
    k.s_setprio(1)  # keeps LLVM from merging the two waits
    k.waitcnt(vmcnt=40, lgkmcnt=2)
    text = k.ir()
    assert re.search(r'fence syncscope\("workgroup"\) release\s+call void @"llvm.amdgcn.s.barrier"\(\)\s+'
                     r'fence syncscope\("workgroup"\) acquire', text)
    # gfx9: vmcnt[3:0] | expcnt << 4 | lgkmcnt << 8 | vmcnt[5:4] << 14
    assert f"i32 {5 | 7 << 4 | 15 << 8}" in text
    assert f"i32 {(40 & 15) | 7 << 4 | 2 << 8 | (40 >> 4) << 14}" in text
    asm = compile_to_asm(text)
    assert "s_waitcnt vmcnt(5)" in asm and "s_waitcnt vmcnt(40) lgkmcnt(2)" in asm


@pytest.mark.parametrize("name", sorted(vector_add.VARIANTS))
def test_vector_add_variants_compile(name):
    spec = vector_add.VARIANTS[name]
    asm = compile_to_asm(vector_add.build(spec).ir())
    width_bytes = spec.vector_width * dsl.dtype(spec.dtype).nbytes
    wide = {4: "buffer_load_dword ", 8: "buffer_load_dwordx2", 16: "buffer_load_dwordx4"}[width_bytes]
    assert wide in asm
    assert "buffer_store" in asm and directive(asm, "amdhsa_private_segment_fixed_size") == 0


@pytest.mark.parametrize("name", sorted(softmax.VARIANTS))
def test_softmax_variants_compile(name):
    spec = softmax.VARIANTS[name]
    asm = compile_to_asm(softmax.build(spec).ir())
    assert "v_exp_f32" in asm and "v_rcp_f32" in asm
    if spec.reduce_via == "dpp":
        assert "row_mirror" in asm
    else:
        assert "ds_swizzle_b32" in asm
    assert ("s_barrier" in asm) == (spec.rows_per == "workgroup")
    lds = 8 * spec.num_warps if spec.rows_per == "workgroup" else 0
    assert directive(asm, "amdhsa_group_segment_fixed_size") == lds


def test_bf16_rounding_is_explicit_rne():
    k = dsl.Kernel("to_bf16", workgroup_size=64)
    src = k.arg_ptr("src", dsl.f32)
    dst = k.arg_ptr("dst", dsl.bf16)
    i = k.thread_id(0)
    dst.store(i, src.load(i).to(dsl.bf16))
    text = k.ir()
    assert "add i32" in text and "32767" in text and "fcmp uno" in text and "bfloat" not in text
    assert "v_add3_u32" in compile_to_asm(text)


def test_call_intrinsic_reaches_mfma():
    k = dsl.Kernel("mfma_probe", workgroup_size=64)
    a = k.arg_ptr("a", dsl.f16, readonly=True)
    c = k.arg_ptr("c", dsl.f32)
    lane = k.lane_id()
    frag = a.load(lane * 4, width=4)
    acc = k.zeros(dsl.f32, 16)
    acc = k.call_intrinsic("llvm.amdgcn.mfma.f32.32x32x8f16", [frag, frag, acc, 0, 0, 0], result=(dsl.f32, 16))
    c.store(lane * 16, acc)
    asm = compile_to_asm(k.ir())
    assert re.search(r"v_mfma_f32_32x32x8_?f16", asm)
    with pytest.raises(ValueError, match="llvm."):
        k2 = dsl.Kernel("bad_intrinsic", workgroup_size=64)
        k2.call_intrinsic("mfma", [])


def test_kernarg_preload_marks_leading_dword_args_inreg():
    k = dsl.Kernel("preload", workgroup_size=64, kernarg_preload=True)
    ptrs = [k.arg_ptr(f"p{i}", dsl.f32) for i in range(6)]   # 12 SGPRs
    n = k.arg_i32("n")                                        # 13
    small = k.arg("small", dsl.f16)                           # not a whole dword: preloading stops
    k.arg_i32("late")
    ptrs[0].store(n, small.to(dsl.f32))
    text = k.ir()
    assert text.count(" inreg ") == 7
    assert '%"small"' in text and "half inreg" not in text
    asm = compile_to_asm(text)
    assert directive(asm, "amdhsa_user_sgpr_kernarg_preload_length") == 13
