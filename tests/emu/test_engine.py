"""rocke.emu engine: small LLVM IR kernels compiled for gfx942 by llvmlite, run in the emulator,
checked against numpy/torch references computed here from the ISA's definitions."""
import re
import struct

import numpy as np
import pytest
import torch

import rocke.emu as emu
from rocke.arch import abi

from .asm_runner import emit_assembly



def compile_ir(body: str) -> str:
    return emit_assembly('target triple = "amdgcn-amd-amdhsa"\n' + DECLS + body, opt=3)


DECLS = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workitem.id.z()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare i32 @llvm.amdgcn.workgroup.id.z()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
declare void @llvm.amdgcn.s.barrier()
declare void @llvm.amdgcn.s.waitcnt(i32)
declare float @llvm.amdgcn.raw.buffer.load.f32(<4 x i32>, i32, i32, i32)
declare void @llvm.amdgcn.raw.buffer.store.f32(float, <4 x i32>, i32, i32, i32)
declare void @llvm.amdgcn.raw.buffer.load.lds(<4 x i32>, ptr addrspace(3), i32, i32, i32, i32, i32)
declare i32 @llvm.amdgcn.ds.swizzle(i32, i32)
declare i32 @llvm.amdgcn.ds.bpermute(i32, i32)
declare i32 @llvm.amdgcn.ds.permute(i32, i32)
declare i32 @llvm.amdgcn.update.dpp.i32(i32, i32, i32, i32, i32, i1)
"""

GLOBAL_ID = """
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, {block}
  %gid = add i32 %base, %tid
"""


def buffer_resource(tensor: torch.Tensor, num_records: int) -> int:
    """A raw (stride 0) gfx9 buffer resource over `tensor` as a 128-bit integer."""
    address = tensor.data_ptr()
    return (address & 0xFFFF_FFFF_FFFF) | (num_records << 64) | (0x00020000 << 96)


# ------------------------------------------------------------------------------ kernargs

VECTOR_ADD = """
define amdgpu_kernel void @vadd(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c,
                                i32 %n, float %scale) {
""" + GLOBAL_ID.format(block=256) + """
  %ok = icmp slt i32 %gid, %n
  br i1 %ok, label %body, label %end
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %gid
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %gid
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %gid
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %xs = fmul float %x, %scale
  %z = fadd float %xs, %y
  store float %z, ptr addrspace(1) %pc
  br label %end
end:
  ret void
}
"""


def test_vector_add_masked_tail_and_report():
    asm = compile_ir(VECTOR_ADD)
    n = 1000
    a, b = torch.randn(1024), torch.randn(1024)
    c = torch.full((1024,), 7.0)
    report = emu.launch(asm, "vadd", (4,), (256,), [a, b, c, n, 0.5])
    expected = (a[:n] * np.float32(0.5)) + b[:n]
    assert torch.equal(c[:n], expected)
    assert torch.all(c[n:] == 7.0)
    assert report.waves == 16 and report.workgroups == 4
    assert report.instructions["VMEM"] == 16 * 3   # wave 15 runs the body with 40 lanes
    assert report.lane_instructions >= 3 * n and report.emulator_wall_time_s > 0


def test_kernarg_segment_packing_matches_metadata():
    meta = {".args": [
        {".name": "p", ".offset": 0, ".size": 8, ".value_kind": "global_buffer"},
        {".name": "n", ".offset": 8, ".size": 4, ".value_kind": "by_value"},
        {".name": "f", ".offset": 12, ".size": 4, ".value_kind": "by_value"},
        {".name": "h", ".offset": 16, ".size": 2, ".value_kind": "by_value"},
        {".name": "d", ".offset": 24, ".size": 8, ".value_kind": "by_value"},
        {".offset": 32, ".size": 4, ".value_kind": "hidden_block_count_x"},
        {".offset": 36, ".size": 4, ".value_kind": "hidden_block_count_y"},
        {".offset": 44, ".size": 2, ".value_kind": "hidden_group_size_x"},
        {".offset": 46, ".size": 2, ".value_kind": "hidden_group_size_y"},
        {".offset": 50, ".size": 2, ".value_kind": "hidden_remainder_x"},
        {".offset": 56, ".size": 8, ".value_kind": "hidden_global_offset_x"},
        {".offset": 64, ".size": 2, ".value_kind": "hidden_grid_dims"},
        {".offset": 68, ".size": 4, ".value_kind": "hidden_dynamic_lds_size"},
    ]}
    args = abi.parse_kernel_args(meta)
    tensor = torch.zeros(4)
    seg = abi.pack_kernarg_segment(args, [tensor, -3, 1.5, np.float16(2.0), 2 ** 40], (5, 6), (64, 2),
                                   4096, lambda t: t.data_ptr())
    expected = bytearray(72)
    struct.pack_into("<Qif", expected, 0, tensor.data_ptr(), -3, 1.5)
    struct.pack_into("<e", expected, 16, 2.0)
    struct.pack_into("<q", expected, 24, 2 ** 40)
    struct.pack_into("<II", expected, 32, 5, 6)
    struct.pack_into("<HH", expected, 44, 64, 2)
    struct.pack_into("<H", expected, 64, 3)   # HIP launches are 3-D NDRanges
    struct.pack_into("<I", expected, 68, 4096)
    assert seg == bytes(expected)
    with pytest.raises(ValueError, match="n"):
        abi.pack_kernarg_segment(args, [tensor, tensor, 1.0, 1, 1], 1, 1, 0, lambda t: 0)
    with pytest.raises(ValueError, match="does not fit"):
        abi.pack_explicit_arg(args[1], 2 ** 40, lambda t: 0)


HIDDEN_ARGS = """
define amdgpu_kernel void @hidden(ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %end
write:
  %wgx = call i32 @llvm.amdgcn.workgroup.id.x()
  %wgy = call i32 @llvm.amdgcn.workgroup.id.y()
  %wgz = call i32 @llvm.amdgcn.workgroup.id.z()
  %row0 = mul i32 %wgz, 6
  %row1 = mul i32 %wgy, 3
  %row2 = add i32 %row0, %row1
  %row = add i32 %row2, %wgx
  %slot = mul i32 %row, 8
  %imp = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %bcx = load i32, ptr addrspace(4) %imp
  %pbcy = getelementptr i8, ptr addrspace(4) %imp, i64 4
  %bcy = load i32, ptr addrspace(4) %pbcy
  %pbcz = getelementptr i8, ptr addrspace(4) %imp, i64 8
  %bcz = load i32, ptr addrspace(4) %pbcz
  %pgsx = getelementptr i8, ptr addrspace(4) %imp, i64 12
  %gsx = load i16, ptr addrspace(4) %pgsx
  %gsx32 = zext i16 %gsx to i32
  %dp = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %pgrid = getelementptr i8, ptr addrspace(4) %dp, i64 12
  %gridx = load i32, ptr addrspace(4) %pgrid
  %vals = insertelement <8 x i32> poison, i32 %wgx, i32 0
  %v1 = insertelement <8 x i32> %vals, i32 %wgy, i32 1
  %v2 = insertelement <8 x i32> %v1, i32 %wgz, i32 2
  %v3 = insertelement <8 x i32> %v2, i32 %bcx, i32 3
  %v4 = insertelement <8 x i32> %v3, i32 %bcy, i32 4
  %v5 = insertelement <8 x i32> %v4, i32 %bcz, i32 5
  %v6 = insertelement <8 x i32> %v5, i32 %gsx32, i32 6
  %v7 = insertelement <8 x i32> %v6, i32 %gridx, i32 7
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %slot
  store <8 x i32> %v7, ptr addrspace(1) %p, align 4
  br label %end
end:
  ret void
}
"""


def test_hidden_arguments_workgroup_ids_and_dispatch_packet():
    asm = compile_ir(HIDDEN_ARGS)
    out = torch.zeros(3 * 2 * 2, 8, dtype=torch.int32)
    emu.launch(asm, "hidden", (3, 2, 2), (128, 1, 1), [out])
    for z in range(2):
        for y in range(2):
            for x in range(3):
                row = out[z * 6 + y * 3 + x].tolist()
                assert row == [x, y, z, 3, 2, 2, 128, 3 * 128]


PRELOAD = """
define amdgpu_kernel void @preload(ptr addrspace(1) inreg %out, i32 inreg %mul, i32 inreg %add) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %m = mul i32 %tid, %mul
  %v = add i32 %m, %add
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %p
  ret void
}
"""


def test_preloaded_kernargs_skip_the_compatibility_prologue():
    asm = compile_ir(PRELOAD)
    assert re.search(r"\.amdhsa_user_sgpr_kernarg_preload_length\s+[1-9]", asm)
    # Were the prologue executed, these loads would read the values the kernel needs anyway;
    # corrupt them so only truly preloaded SGPRs give the right answer.
    prologue = re.search(r"preload:\n(.*?)\.p2align\s+8", asm, re.S).group(1)
    assert "s_load" in prologue
    broken = asm.replace(prologue, prologue.replace("s_load", "s_bogus_load", 1))
    out = torch.zeros(64, dtype=torch.int32)
    with pytest.raises(emu.EmulatorError, match="s_bogus_load"):
        emu.launch(broken, "preload", 1, 64, [out, 3, -5])   # the decoder sees every line
    emu.launch(asm, "preload", 1, 64, [out, 3, -5])
    assert torch.equal(out, torch.arange(64, dtype=torch.int32) * 3 - 5)


# ------------------------------------------------------------------------------ work-items, control flow

WORKITEM_3D = """
define amdgpu_kernel void @ids(ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,64" {
  %x = call i32 @llvm.amdgcn.workitem.id.x()
  %y = call i32 @llvm.amdgcn.workitem.id.y()
  %z = call i32 @llvm.amdgcn.workitem.id.z()
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %yz = shl i32 %y, 8
  %zz = shl i32 %z, 16
  %gxs = shl i32 %gx, 24
  %gys = shl i32 %gy, 28
  %a = or i32 %x, %yz
  %b = or i32 %a, %zz
  %c = or i32 %b, %gxs
  %v = or i32 %c, %gys
  %lin0 = mul i32 %z, 15
  %lin1 = mul i32 %y, 5
  %lin2 = add i32 %lin0, %lin1
  %lin = add i32 %lin2, %x
  %wg = mul i32 %gy, 2
  %wgl = add i32 %wg, %gx
  %wgoff = mul i32 %wgl, 30
  %idx = add i32 %wgoff, %lin
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %idx
  store i32 %v, ptr addrspace(1) %p
  ret void
}
"""


def test_workitem_ids_3d():
    asm = compile_ir(WORKITEM_3D)
    out = torch.full((2 * 2 * 30,), -1, dtype=torch.int32)
    emu.launch(asm, "ids", (2, 2), (5, 3, 2), [out])
    expected = []
    for gy in range(2):
        for gx in range(2):
            for z in range(2):
                for y in range(3):
                    for x in range(5):
                        expected.append(x | y << 8 | z << 16 | gx << 24 | gy << 28)
    assert out.tolist() == expected


DIVERGENT = """
define amdgpu_kernel void @diverge(ptr addrspace(1) %x, ptr addrspace(1) %out) {
entry:
""" + GLOBAL_ID.format(block=128) + """
  %px = getelementptr i32, ptr addrspace(1) %x, i32 %gid
  %v = load i32, ptr addrspace(1) %px
  %trips = urem i32 %v, 7
  %odd = and i32 %v, 1
  %isodd = icmp ne i32 %odd, 0
  br i1 %isodd, label %then, label %else
then:
  %t = mul i32 %v, 3
  br label %loop
else:
  %e = sub i32 0, %v
  br label %loop
loop:
  %k = phi i32 [0, %then], [0, %else], [%k1, %body]
  %acc = phi i32 [%t, %then], [%e, %else], [%acc1, %body]
  %more = icmp ult i32 %k, %trips
  br i1 %more, label %body, label %done
body:
  %sq = mul i32 %k, %k
  %acc1 = add i32 %acc, %sq
  %k1 = add i32 %k, 1
  br label %loop
done:
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %gid
  store i32 %acc, ptr addrspace(1) %po
  ret void
}
"""


def test_divergent_if_else_and_loops():
    asm = compile_ir(DIVERGENT)
    x = torch.randint(0, 1000, (384,), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    out = torch.zeros(384, dtype=torch.int32)
    emu.launch(asm, "diverge", 3, 128, [x, out])
    v = x.numpy().astype(np.int64)
    start = np.where(v & 1, 3 * v, -v)
    trips = v % 7
    expected = start + np.array([sum(k * k for k in range(t)) for t in trips])
    assert out.numpy().tolist() == expected.tolist()


# ------------------------------------------------------------------------------ LDS and barriers

LDS_REVERSE = """
@tile = internal addrspace(3) global [256 x float] undef, align 16
define amdgpu_kernel void @reverse(ptr addrspace(1) %x, ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,256" {
""" + GLOBAL_ID.format(block=256) + """
  %px = getelementptr float, ptr addrspace(1) %x, i32 %gid
  %v = load float, ptr addrspace(1) %px
  %ps = getelementptr float, ptr addrspace(3) @tile, i32 %tid
  store float %v, ptr addrspace(3) %ps
  call void @llvm.amdgcn.s.barrier()
  %r = sub i32 255, %tid
  %pr = getelementptr float, ptr addrspace(3) @tile, i32 %r
  %w = load float, ptr addrspace(3) %pr
  %po = getelementptr float, ptr addrspace(1) %out, i32 %gid
  store float %w, ptr addrspace(1) %po
  ret void
}
"""


def test_barrier_and_lds_reverse_each_workgroup():
    asm = compile_ir(LDS_REVERSE)
    x = torch.randn(3 * 256)
    out = torch.zeros(3 * 256)
    emu.launch(asm, "reverse", 3, 256, [x, out])
    assert torch.equal(out, x.view(3, 256).flip(1).reshape(-1))


def test_race_checker_catches_missing_barrier():
    asm = compile_ir(LDS_REVERSE)
    assert asm.count("s_barrier") == 1
    racy = asm.replace("s_barrier", "s_nop 0")
    with pytest.raises(emu.LdsRace) as info:
        emu.launch(racy, "reverse", 1, 256, [torch.randn(256), torch.zeros(256)])
    message = str(info.value)
    assert "workgroup (0, 0, 0)" in message and "no s_barrier" in message
    assert "ds_write_b32" in message and "ds_read_b32" in message
    assert re.search(r"wave \d (writes|reads) it at line \d+ .* wave \d (write|read)s it at line \d+", message)
    # the same kernel passes without the checker (no data is corrupted in this emulator)
    emu.launch(racy, "reverse", 1, 256, [torch.randn(256), torch.zeros(256)], check=False)


def test_race_check_lever_turns_the_checker_off(monkeypatch):
    racy = compile_ir(LDS_REVERSE).replace("s_barrier", "s_nop 0")
    monkeypatch.setenv("ROCKE_EMU_RACE_CHECK", "0")
    emu.launch(racy, "reverse", 1, 256, [torch.randn(256), torch.zeros(256)])   # no LdsRace
    monkeypatch.setenv("ROCKE_EMU_RACE_CHECK", "off")
    with pytest.raises(ValueError, match="ROCKE_EMU_RACE_CHECK must be 0 or 1"):
        emu.launch(racy, "reverse", 1, 256, [torch.randn(256), torch.zeros(256)])
    monkeypatch.setenv("ROCKE_EMU_RACE_CHECK", "1")
    with pytest.raises(emu.LdsRace):
        emu.launch(racy, "reverse", 1, 256, [torch.randn(256), torch.zeros(256)])


DYNAMIC_LDS = """
@dyn = external addrspace(3) global [0 x i32], align 16
define amdgpu_kernel void @dynlds(ptr addrspace(1) %out, i32 %stride) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %slot = mul i32 %tid, %stride
  %p = getelementptr i32, ptr addrspace(3) @dyn, i32 %slot
  store i32 %tid, ptr addrspace(3) %p
  %v = load i32, ptr addrspace(3) %p
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %po
  ret void
}
"""


def test_dynamic_lds_and_lds_out_of_bounds():
    asm = compile_ir(DYNAMIC_LDS)
    out = torch.zeros(64, dtype=torch.int32)
    emu.launch(asm, "dynlds", 1, 64, [out, 2], shared_mem=64 * 2 * 4)
    assert torch.equal(out, torch.arange(64, dtype=torch.int32))
    with pytest.raises(emu.LdsFault) as info:
        emu.launch(asm, "dynlds", 1, 64, [out, 3], shared_mem=64 * 2 * 4)
    message = str(info.value)
    assert "ds_write_b32" in message and "lane 43" in message and "512 bytes" in message


# ------------------------------------------------------------------------------ buffers and LDS DMA

BUFFER_COPY = """
define amdgpu_kernel void @bufcopy(ptr addrspace(1) %memory, <4 x i32> %src, <4 x i32> %dst) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %off = shl i32 %tid, 2
  %v = call float @llvm.amdgcn.raw.buffer.load.f32(<4 x i32> %src, i32 %off, i32 0, i32 0)
  %w = fadd float %v, 1.0
  call void @llvm.amdgcn.raw.buffer.store.f32(float %w, <4 x i32> %dst, i32 %off, i32 0, i32 0)
  ret void
}
"""


def test_buffer_out_of_range_loads_zero_and_drops_stores():
    asm = compile_ir(BUFFER_COPY)
    storage = torch.full((256,), 5.0)
    src, dst = storage[:64], storage[128:192]
    src.copy_(torch.arange(64, dtype=torch.float32))
    # src has 40 valid floats, dst 50: lanes past them read 0 / write nothing
    # the buffers live in `storage`, which the launch must be given to make them addressable
    emu.launch(asm, "bufcopy", 1, 64,
               [storage, buffer_resource(src, 40 * 4), buffer_resource(dst, 50 * 4)])
    expected = np.concatenate([np.arange(40) + 1.0, np.ones(10)])
    assert storage[128:178].tolist() == expected.tolist()
    assert torch.all(storage[178:] == 5.0) and torch.all(storage[64:128] == 5.0)


LDS_DMA = """
@stage = internal addrspace(3) global [256 x float] undef, align 16
define amdgpu_kernel void @dma(<4 x i32> inreg %src, ptr addrspace(1) %out, ptr addrspace(1) %memory) "amdgpu-flat-work-group-size"="1,256" {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wave = lshr i32 %tid, 6
  %lane = and i32 %tid, 63
  %wave_base = shl i32 %wave, 8
  %voff = shl i32 %lane, 2
  %gofs = add i32 %wave_base, %voff
  %dst = getelementptr float, ptr addrspace(3) @stage, i32 %wave_base
  %dsti = getelementptr i8, ptr addrspace(3) @stage, i32 %wave_base
  call void @llvm.amdgcn.raw.buffer.load.lds(<4 x i32> %src, ptr addrspace(3) %dsti, i32 4, i32 %voff, i32 %wave_base, i32 0, i32 0)
  call void @llvm.amdgcn.s.waitcnt(i32 0)
  call void @llvm.amdgcn.s.barrier()
  %r = sub i32 255, %tid
  %pr = getelementptr float, ptr addrspace(3) @stage, i32 %r
  %v = load float, ptr addrspace(3) %pr
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %v, ptr addrspace(1) %po
  ret void
}
"""


def test_lds_dma_lands_at_m0_and_unwaited_dma_is_a_race():
    asm = compile_ir(LDS_DMA)
    assert re.search(r"buffer_load_dword .* lds", asm)
    src = torch.randn(256)
    out = torch.zeros(256)
    emu.launch(asm, "dma", 1, 256, [buffer_resource(src, 1024), out, src])
    assert torch.equal(out, src.flip(0))
    # drop the wait between the DMA and the barrier: the DMA may land after other waves read
    lines = asm.splitlines()
    dma_line = next(i for i, line in enumerate(lines) if re.search(r"buffer_load_dword .* lds", line))
    wait_line = next(i for i in range(dma_line, len(lines)) if "s_waitcnt" in lines[i])
    lines[wait_line] = "\ts_nop 0"
    racy = "\n".join(lines)
    with pytest.raises(emu.LdsRace, match=r"buffer_load_dword .* lds"):
        emu.launch(racy, "dma", 1, 256, [buffer_resource(src, 1024), out, src])


# ------------------------------------------------------------------------------ cross-lane ops

CROSS_LANE = """
define amdgpu_kernel void @xlane(ptr addrspace(1) %in, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %in, i32 %tid
  %v = load i32, ptr addrspace(1) %pi
  %s0 = call i32 @llvm.amdgcn.ds.swizzle(i32 %v, i32 {swz_bitmask})
  %s1 = call i32 @llvm.amdgcn.ds.swizzle(i32 %v, i32 {swz_quad})
  %rev = sub i32 63, %tid
  %addr = shl i32 %rev, 2
  %s2 = call i32 @llvm.amdgcn.ds.bpermute(i32 %addr, i32 %v)
  %fwd = mul i32 %tid, 5
  %fwdm = and i32 %fwd, 63
  %faddr = shl i32 %fwdm, 2
  %s3 = call i32 @llvm.amdgcn.ds.permute(i32 %faddr, i32 %v)
  %d0 = call i32 @llvm.amdgcn.update.dpp.i32(i32 -1, i32 %v, i32 {quad_perm}, i32 15, i32 15, i1 false)
  %d1 = call i32 @llvm.amdgcn.update.dpp.i32(i32 -1, i32 %v, i32 {row_shr3}, i32 15, i32 15, i1 true)
  %d2 = call i32 @llvm.amdgcn.update.dpp.i32(i32 -1, i32 %v, i32 {row_shl1}, i32 15, i32 15, i1 false)
  %d3 = call i32 @llvm.amdgcn.update.dpp.i32(i32 -1, i32 %v, i32 {row_bcast15}, i32 10, i32 15, i1 false)
  %d4 = call i32 @llvm.amdgcn.update.dpp.i32(i32 -1, i32 %v, i32 {row_mirror}, i32 15, i32 5, i1 false)
  %vals = insertelement <9 x i32> poison, i32 %s0, i32 0
  %v1 = insertelement <9 x i32> %vals, i32 %s1, i32 1
  %v2 = insertelement <9 x i32> %v1, i32 %s2, i32 2
  %v3 = insertelement <9 x i32> %v2, i32 %s3, i32 3
  %v4 = insertelement <9 x i32> %v3, i32 %d0, i32 4
  %v5 = insertelement <9 x i32> %v4, i32 %d1, i32 5
  %v6 = insertelement <9 x i32> %v5, i32 %d2, i32 6
  %v7 = insertelement <9 x i32> %v6, i32 %d3, i32 7
  %v8 = insertelement <9 x i32> %v7, i32 %d4, i32 8
  %row = mul i32 %tid, 9
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %row
  store <9 x i32> %v8, ptr addrspace(1) %po, align 4
  ret void
}
"""


def test_swizzle_permute_and_dpp():
    and_mask, or_mask, xor_mask = 0x1C, 0x01, 0x04
    swz_bitmask = and_mask | or_mask << 5 | xor_mask << 10
    quad = [2, 0, 3, 1]
    swz_quad = 0x8000 | sum(q << (2 * i) for i, q in enumerate(quad))
    quad_perm = sum(q << (2 * i) for i, q in enumerate([3, 2, 1, 0]))
    ir = CROSS_LANE
    for key, value in dict(swz_bitmask=swz_bitmask, swz_quad=swz_quad, quad_perm=quad_perm,
                           row_shr3=0x113, row_shl1=0x101, row_bcast15=0x142,
                           row_mirror=0x140).items():
        ir = ir.replace("{" + key + "}", str(value))
    asm = compile_ir(ir)
    values = torch.randint(0, 2 ** 30, (64,), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    out = torch.zeros(64, 9, dtype=torch.int32)
    emu.launch(asm, "xlane", 1, 64, [values, out])
    v = values.numpy()
    lane = np.arange(64)
    expected = np.zeros((64, 9), np.int64)
    # ds_swizzle bitmask mode works within groups of 32 lanes
    expected[:, 0] = v[(lane & 0x20) | (((lane & 0x1F) & and_mask) | or_mask) ^ xor_mask]
    expected[:, 1] = v[(lane & ~3) | np.array(quad)[lane & 3]]
    expected[:, 2] = v[63 - lane]
    permuted = np.zeros(64, np.int64)
    permuted[(lane * 5) & 63] = v      # lane*5 mod 64 is a bijection
    expected[:, 3] = permuted
    expected[:, 4] = v[(lane & ~3) | (3 - (lane & 3))]
    row_pos = lane % 16
    expected[:, 5] = np.where(row_pos >= 3, v[np.maximum(lane - 3, 0)], 0)   # bound_ctrl: 0
    expected[:, 6] = np.where(row_pos <= 14, v[np.minimum(lane + 1, 63)], -1)  # keep old
    bcast = v[np.maximum(lane - row_pos - 1, 0)]
    expected[:, 7] = np.where(np.isin(lane // 16, [1, 3]), bcast, -1)          # row_mask 0xa
    mirror = v[lane - row_pos + 15 - row_pos]
    expected[:, 8] = np.where(np.isin((lane >> 2) & 3, [0, 2]), mirror, -1)   # bank_mask 0x5
    assert out.numpy().tolist() == expected.astype(np.int32).tolist()


# ------------------------------------------------------------------------------ atomics

ATOMICS = """
define amdgpu_kernel void @atomics(ptr addrspace(1) %counters, ptr addrspace(1) %fsum,
                                   ptr addrspace(1) %maxv, ptr addrspace(1) %olds) {
""" + GLOBAL_ID.format(block=256) + """
  %bin = and i32 %gid, 3
  %pc = getelementptr i32, ptr addrspace(1) %counters, i32 %bin
  %old = atomicrmw add ptr addrspace(1) %pc, i32 1 monotonic
  %po = getelementptr i32, ptr addrspace(1) %olds, i32 %gid
  store i32 %old, ptr addrspace(1) %po
  %f = uitofp i32 %gid to float
  %fbin = and i32 %gid, 1
  %pf = getelementptr float, ptr addrspace(1) %fsum, i32 %fbin
  %unused = atomicrmw fadd ptr addrspace(1) %pf, float %f monotonic
  %h = mul i32 %gid, 2654435761
  %hs = lshr i32 %h, 8
  %unused2 = atomicrmw max ptr addrspace(1) %maxv, i32 %hs monotonic
  ret void
}
"""


def test_global_atomics_under_contention():
    asm = compile_ir(ATOMICS)
    counters = torch.zeros(4, dtype=torch.int32)
    fsum = torch.zeros(2)
    maxv = torch.zeros(1, dtype=torch.int32)
    olds = torch.full((1024,), -1, dtype=torch.int32)
    emu.launch(asm, "atomics", 4, 256, [counters, fsum, maxv, olds])
    assert counters.tolist() == [256] * 4
    # every lane saw a distinct previous value of its counter: a serialization exists
    for b in range(4):
        assert sorted(olds[b::4].tolist()) == list(range(256))
    gid = np.arange(1024)
    assert fsum.tolist() == [float(gid[0::2].sum()), float(gid[1::2].sum())]  # exact in fp32
    hashed = ((gid.astype(np.uint64) * 2654435761) & 0xFFFFFFFF) >> 8
    assert maxv.item() == int(hashed.max())


# ------------------------------------------------------------------------------ bad input

def test_bad_inputs_raise_value_errors_before_running():
    asm = compile_ir(VECTOR_ADD)
    a, b, c = torch.ones(256), torch.ones(256), torch.zeros(256)
    good = [a, b, c, 256, 1.0]
    cases = [
        (lambda: emu.launch("v_add_f32 v0, v1\n", "vadd", 1, 256, good), "amdgpu_metadata"),
        (lambda: emu.launch(asm.replace(".end_amdgpu_metadata", ""), "vadd", 1, 256, good), "not terminated"),
        (lambda: emu.launch(asm, "vsub", 1, 256, good), r"unknown kernel 'vsub'.*vadd"),
        (lambda: emu.launch(asm, "vadd", 1, 256, good[:4]), "5 explicit arguments"),
        (lambda: emu.launch(asm, "vadd", 1, 256, [a, 3, c, 256, 1.0]), r"argument 1 \(b, global_buffer\)"),
        (lambda: emu.launch(asm, "vadd", 1, 256, [a, b, c, a, 1.0]), r"argument 3 \(n, by_value\)"),
        (lambda: emu.launch(asm, "vadd", 1, 256, [a, b, c, 2 ** 40, 1.0]), "does not fit"),
        (lambda: emu.launch(asm, "vadd", (1, 0), 256, good), "grid"),
        (lambda: emu.launch(asm, "vadd", 1, (0, 1), good), "block"),
        (lambda: emu.launch(asm, "vadd", 1, (1, 2, 3, 4), good), "1-3 dimensions"),
        (lambda: emu.launch(asm, "vadd", 1, 2048, good), "max_flat_workgroup_size 1024"),
        (lambda: emu.launch(asm, "vadd", 1, 256, good, shared_mem=65537), "LDS request too large"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()
    assert torch.all(c == 0)


def test_unimplemented_opcode_is_reported_at_decode_time():
    asm = compile_ir(VECTOR_ADD)
    lines = asm.splitlines()
    store = next(i for i, line in enumerate(lines) if "global_store_dword" in line)
    lines.insert(store, "\tv_frobnicate_b32 v2, v2")
    broken = "\n".join(lines)
    c = torch.zeros(256)
    with pytest.raises(emu.EmulatorError) as info:
        emu.launch(broken, "vadd", 1, 256, [torch.ones(256), torch.ones(256), c, 256, 1.0])
    message = str(info.value)
    assert "v_frobnicate_b32" in message and f"line {store + 1}" in message and "vadd" in message
    assert torch.all(c == 0), "nothing may run when decoding fails"


def test_decode_is_cached_per_text():
    asm = compile_ir(VECTOR_ADD)
    args = [torch.ones(256), torch.ones(256), torch.zeros(256), 256, 1.0]
    emu.launch(asm, "vadd", 1, 256, args)
    import importlib
    launch_module = importlib.import_module("rocke.emu.launch")
    program, decoded = launch_module._program(asm)
    kernel = decoded["vadd"]
    emu.launch(asm, "vadd", 1, 256, args)
    assert launch_module._program(asm)[1]["vadd"] is kernel


MIXED_MEMORY = """
declare void @llvm.amdgcn.global.load.lds(ptr addrspace(1), ptr addrspace(3), i32, i32, i32)
declare i32 @llvm.amdgcn.s.buffer.load.i32(<4 x i32>, i32, i32)
@stage = internal addrspace(3) global [64 x i32] undef, align 16
define amdgpu_kernel void @mixed(ptr addrspace(1) %src, ptr addrspace(1) %out, ptr %generic, <4 x i32> %rsrc) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(1) %src, i32 %tid
  call void @llvm.amdgcn.global.load.lds(ptr addrspace(1) %p, ptr addrspace(3) @stage, i32 4, i32 0, i32 0)
  %s = call i32 @llvm.amdgcn.s.buffer.load.i32(<4 x i32> %rsrc, i32 8, i32 0)
  %g = getelementptr i32, ptr %generic, i32 %tid
  %gv = load i32, ptr %g
  %r = sub i32 63, %tid
  %q = getelementptr i32, ptr addrspace(3) @stage, i32 %r
  %v = load i32, ptr addrspace(3) %q
  %sum0 = add i32 %v, %s
  %sum = add i32 %sum0, %gv
  %h = trunc i32 %sum to i16
  %hf = bitcast i16 %h to half
  %hh = fadd half %hf, 0xH3C00
  %hi = bitcast half %hh to i16
  %hz = zext i16 %hi to i32
  %all = add i32 %sum, %hz
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %all, ptr addrspace(1) %po
  ret void
}
"""


def test_global_lds_dma_flat_scalar_buffer_and_f16_high_bits():
    asm = compile_ir(MIXED_MEMORY)
    # LLVM relies on gfx9's v_add_f16 zeroing the high half when it zero-extends the result
    assert "global_load_lds_dword" in asm and "flat_load_dword" in asm
    assert "s_buffer_load_dword" in asm and "v_add_f16" in asm
    rng = torch.Generator().manual_seed(3)
    src = torch.randint(0, 1000, (64,), dtype=torch.int32, generator=rng)
    memory = torch.randint(0, 1000, (68,), dtype=torch.int32, generator=rng)
    constants = memory[64:]
    constants.copy_(torch.tensor([5, 6, 77, 8]))
    out = torch.zeros(64, dtype=torch.int32)
    rsrc = constants.data_ptr() | (16 << 64) | (0x00020000 << 96)
    # the scalar buffer's bytes must be inside an argument's view: `generic` spans all of memory
    emu.launch(asm, "mixed", 1, 64, [src, out, memory, rsrc])
    total = src.numpy()[::-1].astype(np.int64) + 77 + memory.numpy()[:64]
    half = (total & 0xFFFF).astype(np.uint16).view(np.float16)
    bumped = (half + np.float16(1)).astype(np.float16).view(np.uint16).astype(np.int64)
    expected = ((total + bumped) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    assert out.numpy().tolist() == expected.tolist()


def test_long_branch_through_getpc_setpc():
    asm = compile_ir(VECTOR_ADD)
    branch = re.search(r"s_cbranch_execz (\.LBB0_\d+)", asm)
    target = branch.group(1)
    long_branch = (f"s_cbranch_execnz .Lcontinue\n\ts_getpc_b64 s[20:21]\n.Lpost_getpc0:\n"
                   f"\ts_add_u32 s20, s20, ({target}-.Lpost_getpc0)&4294967295\n"
                   f"\ts_addc_u32 s21, s21, ({target}-.Lpost_getpc0)>>32\n"
                   f"\ts_setpc_b64 s[20:21]\n.Lcontinue:")
    rewritten = asm.replace(branch.group(0), long_branch)
    a, b = torch.randn(256), torch.randn(256)
    c = torch.full((256,), 7.0)
    emu.launch(rewritten, "vadd", 2, 256, [a, b, c, 200, 2.0])
    assert torch.equal(c[:200], a[:200] * 2.0 + b[:200]) and torch.all(c[200:] == 7.0)


PACKED_MATH = """
declare float @llvm.amdgcn.fdot2(<2 x half>, <2 x half>, float, i1)
declare <2 x half> @llvm.fma.v2f16(<2 x half>, <2 x half>, <2 x half>)
define amdgpu_kernel void @packed(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %dot,
                                  ptr addrspace(1) %fma) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr <2 x half>, ptr addrspace(1) %a, i32 %tid
  %pb = getelementptr <2 x half>, ptr addrspace(1) %b, i32 %tid
  %x = load <2 x half>, ptr addrspace(1) %pa
  %y = load <2 x half>, ptr addrspace(1) %pb
  %d = call float @llvm.amdgcn.fdot2(<2 x half> %x, <2 x half> %y, float 1.0, i1 false)
  %swapped = shufflevector <2 x half> %y, <2 x half> poison, <2 x i32> <i32 1, i32 0>
  %negated = fneg <2 x half> %x
  %f = call <2 x half> @llvm.fma.v2f16(<2 x half> %negated, <2 x half> %swapped, <2 x half> %x)
  %po = getelementptr float, ptr addrspace(1) %dot, i32 %tid
  store float %d, ptr addrspace(1) %po
  %po2 = getelementptr <2 x half>, ptr addrspace(1) %fma, i32 %tid
  store <2 x half> %f, ptr addrspace(1) %po2
  ret void
}
"""


def test_vop3p_op_sel_and_negation_and_tied_dot():
    asm = compile_ir(PACKED_MATH)
    assert re.search(r"v_pk_fma_f16 .*op_sel:\[0,1,0\] op_sel_hi:\[1,0,1\] neg_lo:\[1,0,0\]", asm)
    rng = torch.Generator().manual_seed(4)
    a, b = torch.randn(64, 2, generator=rng).half(), torch.randn(64, 2, generator=rng).half()
    dot, fma = torch.zeros(64), torch.zeros(64, 2).half()
    emu.launch(asm, "packed", 1, 64, [a, b, dot, fma])
    x, y = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    assert dot.numpy().tolist() == ((x * y).sum(1) + 1.0).astype(np.float32).tolist()
    expected = (-x * y[:, ::-1] + x).astype(np.float16)   # f16 products are exact in f64
    assert fma.numpy().tolist() == expected.tolist()


LDS_ATOMICS = """
@counts = internal addrspace(3) global [8 x i32] undef, align 16
@total = internal addrspace(3) global float undef, align 4
define amdgpu_kernel void @ldsatomics(ptr addrspace(1) %olds, ptr addrspace(1) %result,
                                      ptr addrspace(1) %lock) "amdgpu-flat-work-group-size"="1,256" {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %first = icmp ult i32 %tid, 8
  br i1 %first, label %init, label %go
init:
  %pi = getelementptr i32, ptr addrspace(3) @counts, i32 %tid
  store i32 0, ptr addrspace(3) %pi
  store float 0.0, ptr addrspace(3) @total
  br label %go
go:
  call void @llvm.amdgcn.s.barrier()
  %bin = and i32 %tid, 7
  %pc = getelementptr i32, ptr addrspace(3) @counts, i32 %bin
  %old = atomicrmw add ptr addrspace(3) %pc, i32 1 monotonic
  %po = getelementptr i32, ptr addrspace(1) %olds, i32 %tid
  store i32 %old, ptr addrspace(1) %po
  %f = uitofp i32 %tid to float
  %unused = atomicrmw fadd ptr addrspace(3) @total, float %f monotonic
  %ticket = add i32 %tid, 1
  %swap = cmpxchg ptr addrspace(1) %lock, i32 0, i32 %ticket monotonic monotonic
  call void @llvm.amdgcn.s.barrier()
  br i1 %first, label %out, label %end
out:
  %c = load i32, ptr addrspace(3) %pc
  %pr = getelementptr i32, ptr addrspace(1) %result, i32 %tid
  store i32 %c, ptr addrspace(1) %pr
  %t = load float, ptr addrspace(3) @total
  %ti = bitcast float %t to i32
  %pt = getelementptr i32, ptr addrspace(1) %result, i32 8
  store i32 %ti, ptr addrspace(1) %pt
  br label %end
end:
  ret void
}
"""


def test_lds_atomics_and_global_cmpswap():
    asm = compile_ir(LDS_ATOMICS)
    assert "ds_add_rtn_u32" in asm and "ds_add_f32" in asm and "global_atomic_cmpswap" in asm
    olds = torch.full((256,), -1, dtype=torch.int32)
    result = torch.zeros(9, dtype=torch.int32)
    lock = torch.zeros(1, dtype=torch.int32)
    emu.launch(asm, "ldsatomics", 1, 256, [olds, result, lock])
    assert result[:8].tolist() == [32] * 8
    assert result[8:].view(torch.float32).item() == float(sum(range(256)))
    for b in range(8):
        assert sorted(olds[b::8].tolist()) == list(range(32))
    assert 1 <= lock.item() <= 256   # exactly one lane's swap succeeded: the first to arrive


FLOAT_MODIFIERS = """
declare float @llvm.amdgcn.fmed3.f32(float, float, float)
declare float @llvm.fabs.f32(float)
define amdgpu_kernel void @modifiers(ptr addrspace(1) %a, ptr addrspace(1) %out) #0 {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %tid
  %x = load float, ptr addrspace(1) %pa
  %ab = call float @llvm.fabs.f32(float %x)
  %n = fneg float %ab
  %m = fmul float %n, %x
  %c = call float @llvm.amdgcn.fmed3.f32(float %m, float 0.0, float 1.0)
  %m2 = fmul float %x, 2.0
  %sum = fadd float %c, %m2
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %sum, ptr addrspace(1) %po
  ret void
}
attributes #0 = { "amdgpu-ieee"="false" "denormal-fp-math-f32"="preserve-sign,preserve-sign" }
"""


def test_abs_neg_clamp_and_flushed_denormals():
    asm = compile_ir(FLOAT_MODIFIERS)
    assert re.search(r"v_mul_f32_e64 v\d+, -\|v\d+\|, v\d+ clamp", asm)
    assert re.search(r"amdhsa_float_denorm_mode_32 0", asm)
    x = torch.tensor([0.5, -0.5, 3.0, -3.0, 1e-39, -1e-39, 2e-38, -0.75] * 8)
    out = torch.zeros(64)
    emu.launch(asm, "modifiers", 1, 64, [x, out])
    xs = x.numpy()
    tiny = np.float32(2.0 ** -126)
    flushed = np.where(np.abs(xs) < tiny, np.float32(0), xs)
    clamped = np.clip(-np.abs(flushed) * flushed, 0, 1).astype(np.float32)
    total = (clamped + flushed * np.float32(2)).astype(np.float32)
    total = np.where(np.abs(total) < tiny, np.float32(0), total)
    assert out.numpy().tolist() == total.tolist()


STRUCT_BUFFER = """
declare float @llvm.amdgcn.struct.buffer.load.f32(<4 x i32>, i32, i32, i32, i32)
define amdgpu_kernel void @structured(ptr addrspace(1) %memory, <4 x i32> %rsrc, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %v = call float @llvm.amdgcn.struct.buffer.load.f32(<4 x i32> %rsrc, i32 %tid, i32 4, i32 0, i32 0)
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %v, ptr addrspace(1) %po
  ret void
}
"""


def test_structured_buffer_index_range_check():
    asm = compile_ir(STRUCT_BUFFER)
    assert re.search(r"buffer_load_dword v\d+, v(\[\d+:\d+\]|\d+), s\[\d+:\d+\], 0 (idxen|idxen offen)", asm)
    records = torch.arange(64 * 4, dtype=torch.float32)     # 64 records of 16 bytes
    out = torch.full((64,), -1.0)
    stride = 16
    rsrc = (records.data_ptr() & 0xFFFF_FFFF_FFFF) | (stride << 48) | (40 << 64) | (0x00020000 << 96)
    emu.launch(asm, "structured", 1, 64, [records, rsrc, out])
    expected = np.where(np.arange(64) < 40, np.arange(64) * 4 + 1, 0)   # field at byte 4
    assert out.numpy().tolist() == expected.astype(np.float32).tolist()


DPP64 = """
declare i64 @llvm.amdgcn.update.dpp.i64(i64, i64, i32, i32, i32, i1)
define amdgpu_kernel void @dpp64(ptr addrspace(1) %a, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pa = getelementptr i64, ptr addrspace(1) %a, i32 %tid
  %x = load i64, ptr addrspace(1) %pa
  %d = call i64 @llvm.amdgcn.update.dpp.i64(i64 0, i64 %x, i32 337, i32 15, i32 15, i1 false)
  %po = getelementptr i64, ptr addrspace(1) %out, i32 %tid
  store i64 %d, ptr addrspace(1) %po
  ret void
}
"""


def test_64bit_dpp_row_newbcast():
    asm = compile_ir(DPP64)
    assert "v_mov_b64_dpp" in asm and "row_newbcast:1" in asm
    a = torch.randint(-2 ** 62, 2 ** 62, (64,), dtype=torch.int64, generator=torch.Generator().manual_seed(5))
    out = torch.zeros(64, dtype=torch.int64)
    emu.launch(asm, "dpp64", 1, 64, [a, out])
    lane = np.arange(64)
    assert out.numpy().tolist() == a.numpy()[lane - lane % 16 + 1].tolist()


MFMA_ONES = """
declare <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half>, <4 x half>, <16 x float>, i32, i32, i32)
define amdgpu_kernel void @mfma_ones(ptr addrspace(1) %c, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %row = mul i32 %tid, 16
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %row
  %acc = load <16 x float>, ptr addrspace(1) %pc, align 4
  %ones = insertelement <4 x half> poison, half 1.0, i32 0
  %a = shufflevector <4 x half> %ones, <4 x half> poison, <4 x i32> zeroinitializer
  %d = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half> %a, <4 x half> %a, <16 x float> %acc, i32 0, i32 0, i32 0)
  %d2 = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half> %a, <4 x half> %a, <16 x float> %d, i32 0, i32 0, i32 0)
  %po = getelementptr float, ptr addrspace(1) %out, i32 %row
  store <16 x float> %d2, ptr addrspace(1) %po, align 4
  ret void
}
"""


def test_mfma_operand_plumbing_with_all_ones_inputs():
    # With A = B = 1, every D element is C + K whatever the lane layout (K = 8, applied twice,
    # each MFMA rounding once to fp32); AGPRs hold C/D and are loaded/stored directly
    asm = compile_ir(MFMA_ONES)
    assert asm.count("v_mfma_f32_32x32x8_f16") == 2
    c = torch.randn(64, 16, generator=torch.Generator().manual_seed(6))
    out = torch.zeros(64, 16)
    report = emu.launch(asm, "mfma_ones", 1, 64, [c, out])
    assert torch.equal(out, (c + 8.0) + 8.0)
    assert report.instructions["MFMA"] == 2


# ------------------------------------------------------------------------------ pool splitting

def test_splitting_the_grid_into_pools_changes_nothing(monkeypatch):
    """A grid larger than MAX_POOL_WAVES runs as consecutive pools; results, workgroup ids and
    instruction counts are the same whatever the pool size (down to one workgroup a pool)."""
    import importlib
    launch_module = importlib.import_module("rocke.emu.launch")
    kernels = [(compile_ir(HIDDEN_ARGS), "hidden", (3, 2, 2), 128,
                lambda: [torch.zeros(12, 8, dtype=torch.int32)]),
               (compile_ir(LDS_REVERSE), "reverse", 5, 256,
                lambda: [torch.arange(5 * 256, dtype=torch.float32), torch.zeros(5 * 256)]),
               (compile_ir(ATOMICS), "atomics", 4, 256,
                lambda: [torch.zeros(4, dtype=torch.int32), torch.zeros(2),
                         torch.zeros(1, dtype=torch.int32), torch.zeros(1024, dtype=torch.int32)])]
    runs = {}
    for pool_waves in (launch_module.MAX_POOL_WAVES, 8, 4, 1):
        monkeypatch.setattr(launch_module, "MAX_POOL_WAVES", pool_waves)
        for asm, name, grid, block, make_args in kernels:
            args = make_args()
            report = emu.launch(asm, name, grid, block, args)
            runs.setdefault(name, []).append(([a.tolist() for a in args], report.instructions,
                                              report.lane_instructions, report.batches))
    for name, results in runs.items():
        outputs, instructions, lanes, batches = zip(*results)
        assert all(o == outputs[0] for o in outputs), name
        if name == "atomics":
            continue   # its compare-and-swap loop retries more when more waves contend at once
        assert all(i == instructions[0] for i in instructions), name
        assert all(n == lanes[0] for n in lanes), name
        assert batches[-1] > batches[0], name     # the small pools really did split the grid
    assert runs["hidden"][0][0][0][11] == [2, 1, 1, 3, 2, 2, 128, 384]


@pytest.mark.parametrize("memory_mib, vgprs, lds_bytes, waves", [
    (140 << 10, 256, 0, 1 << 16),     # an H200: the widest pool
    (24 << 10, 512, 0, 6144),         # 768 MiB for 128 KiB of VGPRs a wave
    (24 << 10, 512, 65536, 5461),     # and 16 KiB of LDS a wave (4 waves a workgroup)
    (8, 512, 0, 4)])                  # never below one workgroup
def test_cuda_pools_fit_the_gpus_memory(monkeypatch, memory_mib, vgprs, lds_bytes, waves):
    """A torch pool on CUDA is as wide as TORCH_CUDA_POOL_WAVES, narrower where its VGPR file
    and LDS would take more than TORCH_CUDA_POOL_MEMORY_SHARE (1/32) of the GPU's memory."""
    import importlib
    import types
    launch_module = importlib.import_module("rocke.emu.launch")
    torch_exec = importlib.import_module("rocke.emu.torch_exec")
    monkeypatch.setattr(torch_exec, "device_memory_bytes", lambda device: memory_mib << 20)
    kernel = types.SimpleNamespace(num_vector_regs=vgprs)
    assert launch_module._cuda_pool_waves(kernel, lds_bytes, 4) == waves


@pytest.mark.parametrize("lds_bytes", [100, 4096])
def test_race_tracker_budget_counts_what_the_tracker_allocates(monkeypatch, lds_bytes):
    """Pool sizes under the race checker come from `RaceTracker.bytes_per_workgroup`: it must
    be what a tracker really holds per workgroup (else a pool outgrows RACE_TRACKER_BUDGET)."""
    from rocke.emu import machine
    from .asm_runner import run_asm
    made = []
    real = machine.RaceTracker.__init__

    def spy(self, pool, waves_per_wg):
        real(self, pool, waves_per_wg)
        made.append((self, pool.num_wgs, waves_per_wg))
    monkeypatch.setattr(machine.RaceTracker, "__init__", spy)
    run_asm("  v_mov_b32_e32 v1, 0\n  ds_write_b32 v1, v0\n  s_waitcnt lgkmcnt(0)",
            vgprs=np.zeros((3, 1, 64), np.uint32), lds_bytes=lds_bytes)
    assert made
    for tracker, wgs, waves in made:
        held = sum(a.nbytes for a in (tracker.writer, tracker.writer_pc, tracker.readers,
                                      tracker.reader_pc, tracker.initialised))
        assert held == wgs * machine.RaceTracker.bytes_per_workgroup(lds_bytes, waves)


def _pair_major(regs):
    """The pair-major SGPR file (64 pairs, waves, 2 words) holding (waves, 128) `regs`, written
    one register at a time (the layout as access.py documents it)."""
    file = np.zeros((64, regs.shape[0], 2), np.uint32)
    for i in range(128):
        file[i // 2, :, i % 2] = regs[:, i]
    return file


def _registers(file):
    return np.stack([file[i // 2, :, i % 2] for i in range(128)], axis=1)


@pytest.mark.parametrize("sel", [slice(3, 40), np.array([0, 5, 6, 31, 77, 99]), np.array([], np.int64)],
                         ids=["slice", "index array", "empty"])
@pytest.mark.parametrize("index", [106, 7])
def test_sgpr_helpers_read_and_write_what_2d_indexing_does(sel, index):
    """access's readers and writers of the pair-major SGPR file (one register, an even or odd
    pair, k dwords) against numpy's own 2-D indexing of a (waves, registers) model."""
    from types import SimpleNamespace
    from rocke.emu import access
    rng = np.random.default_rng(3)
    want = rng.integers(0, 2 ** 32, (100, 128), dtype=np.uint64).astype(np.uint32)
    sgpr = _pair_major(want)
    P = SimpleNamespace(sgpr=sgpr, sgpr64=access.pair_view(sgpr))
    assert access.sgpr_file_shape(100) == sgpr.shape
    assert np.array_equal(access.sgpr_column(sgpr, index)[sel], want[sel, index])
    assert np.array_equal(access.pair_words(sgpr, P.sgpr64, sel, index), want[sel, index:index + 2])
    value = want[sel, index].astype(np.uint64) | (want[sel, index + 1].astype(np.uint64) << np.uint64(32))
    assert np.array_equal(access.sgpr_pair(P, sel, index), value)
    assert np.array_equal(access.pair_value(sgpr, P.sgpr64, sel, index), value)
    count = len(want[sel])
    words = rng.integers(0, 2 ** 32, (count, 2), dtype=np.uint64).astype(np.uint32)
    access.put_pair_words(sgpr, P.sgpr64, sel, index, words)
    want[sel, index:index + 2] = words
    assert np.array_equal(_registers(sgpr), want)
    value = rng.integers(0, 2 ** 63, count, dtype=np.uint64) * np.uint64(3)
    access.set_sgpr_pair(P, sel, index, value)
    want[sel, index] = (value & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    want[sel, index + 1] = (value >> np.uint64(32)).astype(np.uint32)
    assert np.array_equal(_registers(sgpr), want)
    access.put_pair_value(sgpr, None, sel, index, value ^ np.uint64(0x0123456789ABCDEF))
    want[sel, index] ^= np.uint32(0x89ABCDEF)
    want[sel, index + 1] ^= np.uint32(0x01234567)
    assert np.array_equal(_registers(sgpr), want)
    loaded = rng.integers(0, 2 ** 32, (count, 5), dtype=np.uint64).astype(np.uint32)
    access.put_sgpr_words(sgpr, sel, index - 5, loaded)
    want[sel, index - 5:index] = loaded
    assert np.array_equal(_registers(sgpr), want)
    # without the 64-bit view (a byte order that puts the high word first) the same bits
    P.sgpr64 = None
    assert np.array_equal(access.pair_words(sgpr, None, sel, index), want[sel, index:index + 2])
    value = want[sel, index].astype(np.uint64) | (want[sel, index + 1].astype(np.uint64) << np.uint64(32))
    assert np.array_equal(access.sgpr_pair(P, sel, index), value)
