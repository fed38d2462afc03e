"""rocke.emu checkers: global out-of-bounds accesses, LDS bounds and cross-wave LDS races are
stopped with the pc/line, wave, lane and address of the offending access."""
import re

import pytest
import torch

import rocke.emu as emu
from tests.emu.test_engine import LDS_REVERSE, compile_ir

GATHER = """
define amdgpu_kernel void @gather(ptr addrspace(1) %table, ptr addrspace(1) %idx, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %tid
  %i = load i32, ptr addrspace(1) %pi
  %pt = getelementptr float, ptr addrspace(1) %table, i32 %i
  %v = load float, ptr addrspace(1) %pt
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %v, ptr addrspace(1) %po
  ret void
}
"""


def test_global_out_of_bounds_names_argument_lane_and_distance():
    asm = compile_ir(GATHER)
    table = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(64)
    idx = torch.arange(64, dtype=torch.int32)
    emu.launch(asm, "gather", 1, 64, [table, idx, out])
    assert torch.equal(out, table[:64])
    # one element past the end of `table`: malloc headers keep any other tensor at least 16 bytes
    # away, so the address is in no buffer and `table` is the nearest (a far address could land
    # inside another test tensor, depending on the allocator)
    idx[37] = 101
    with pytest.raises(emu.MemoryFault) as info:
        emu.launch(asm, "gather", 1, 64, [table, idx, out])
    message = str(info.value)
    assert "global_load_dword" in message and re.search(r"line \d+", message)
    assert "wave 0, lane 37" in message
    assert "argument 0 (table" in message
    assert re.search(r"\b4 bytes past its end", message), message


def test_race_report_names_both_accesses():
    racy = compile_ir(LDS_REVERSE).replace("s_barrier", "s_nop 0")
    with pytest.raises(emu.LdsRace) as info:
        emu.launch(racy, "reverse", 2, 256, [torch.randn(512), torch.zeros(512)])
    message = str(info.value)
    lines = [int(n) for n in re.findall(r"at line (\d+)", message)]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert re.search(r"LDS byte \d+ \(0x[0-9a-f]+\)", message)


def test_identical_rewrites_and_barrier_separated_accesses_are_not_races():
    # every wave writes the same value to one LDS word: benign (Triton's layout conversions)
    ir = """
@flag = internal addrspace(3) global i32 undef, align 4
define amdgpu_kernel void @same(ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,256" {
  store volatile i32 42, ptr addrspace(3) @flag
  call void @llvm.amdgcn.s.barrier()
  %v = load volatile i32, ptr addrspace(3) @flag
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %po
  ret void
}
"""
    out = torch.zeros(256, dtype=torch.int32)
    emu.launch(compile_ir(ir), "same", 1, 256, [out])
    assert torch.all(out == 42)


def test_two_waves_of_one_batch_writing_one_word_differently_is_a_race():
    # every wave of a workgroup stores its own index into one LDS word in the same batch: the
    # first wave's bytes are overwritten with different ones (a race); the rewrite of the same
    # value by the other lanes of a wave is not
    ir = """
@flag = internal addrspace(3) global i32 undef, align 4
define amdgpu_kernel void @each_wave(ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,256" {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wave = lshr i32 %tid, 6
  store volatile i32 %wave, ptr addrspace(3) @flag
  call void @llvm.amdgcn.s.barrier()
  %v = load volatile i32, ptr addrspace(3) @flag
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %po
  ret void
}
"""
    asm = compile_ir(ir)
    out = torch.zeros(256, dtype=torch.int32)
    emu.launch(asm, "each_wave", 1, 64, [out])   # one wave: no race
    assert torch.all(out[:64] == 0)
    with pytest.raises(emu.LdsRace) as info:
        emu.launch(asm, "each_wave", 1, 256, [out])
    message = str(info.value)
    assert "LDS byte 0 (0x0)" in message and "writes it" in message
    assert re.search(r"wave 0 writes it at .*line (\d+).* and wave [123] writes it at .*line \1",
                     message), message


ROTATE_IN_PLACE = """
@tile = internal addrspace(3) global [256 x float] undef, align 16
define amdgpu_kernel void @rotate(ptr addrspace(1) %x, ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,256" {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %px = getelementptr float, ptr addrspace(1) %x, i32 %tid
  %v = load float, ptr addrspace(1) %px
  %ps = getelementptr float, ptr addrspace(3) @tile, i32 %tid
  store volatile float %v, ptr addrspace(3) %ps
  call void @llvm.amdgcn.s.barrier()
  %next = add i32 %tid, 64
  %wrapped = and i32 %next, 255
  %pn = getelementptr float, ptr addrspace(3) @tile, i32 %wrapped
  %w = load volatile float, ptr addrspace(3) %pn
  call void @llvm.amdgcn.s.barrier()
  %w1 = fadd float %w, 1.0
  store volatile float %w1, ptr addrspace(3) %ps
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %w1, ptr addrspace(1) %po
  ret void
}
"""


def test_write_after_another_waves_read_is_a_race():
    asm = compile_ir(ROTATE_IN_PLACE)
    assert asm.count("s_barrier") == 2
    x = torch.randn(256)
    out = torch.zeros(256)
    emu.launch(asm, "rotate", 1, 256, [x, out])   # barrier between the read and the write
    assert torch.equal(out, torch.roll(x, -64) + 1)
    # without it, wave w+1 overwrites words wave w still reads in the same barrier epoch
    racy = asm[::-1].replace("s_barrier"[::-1], "s_nop 0"[::-1], 1)[::-1]
    with pytest.raises(emu.LdsRace) as info:
        emu.launch(racy, "rotate", 1, 256, [x, torch.zeros(256)])
    message = str(info.value)
    assert re.search(r"wave \d writes it at line \d+ `ds_write", message)
    assert re.search(r"and wave \d reads it at line \d+ `ds_read", message)


BEHIND = """
define amdgpu_kernel void @behind(ptr addrspace(1) %p, ptr addrspace(1) %out, i32 %back) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %i = sub i32 %tid, %back
  %pi = getelementptr float, ptr addrspace(1) %p, i32 %i
  %v = load float, ptr addrspace(1) %pi
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %v, ptr addrspace(1) %po
  %w = fadd float %v, 1.0
  store float %w, ptr addrspace(1) %pi
  ret void
}
"""


def test_memcheck_scope_view_or_allocation():
    """A pointer into the middle of a tensor's storage indexed backwards (a common Triton/HIP
    idiom): outside the view, so a fault under the default view scope whose message says so and
    names memcheck="allocation"; right under allocation scope (reads and writes land in the
    storage); an access before the storage still faults under allocation scope."""
    asm = compile_ir(BEHIND)
    base = torch.arange(128, dtype=torch.float32)
    p, out = base[64:], torch.zeros(64)
    with pytest.raises(emu.MemoryFault) as info:
        emu.launch(asm, "behind", 1, 64, [p, out, 64])
    message = str(info.value)
    assert "memcheck scope: view" in message and 'memcheck="allocation"' in message, message
    assert "inside the allocation of argument 0 (p" in message, message
    assert torch.equal(base, torch.arange(128, dtype=torch.float32)) and not out.any()

    emu.launch(asm, "behind", 1, 64, [p, out, 64], memcheck="allocation")
    assert torch.equal(out, torch.arange(64, dtype=torch.float32))
    assert torch.equal(base[:64], torch.arange(64, dtype=torch.float32) + 1)
    assert torch.equal(base[64:], torch.arange(64, 128, dtype=torch.float32))

    before = base.clone()
    with pytest.raises(emu.MemoryFault) as info:   # lane 0 reads base[-1]: before the storage
        emu.launch(asm, "behind", 1, 64, [p, out, 65], memcheck="allocation")
    message = str(info.value)
    assert "memcheck scope: allocation" in message and "lane 0" in message, message
    assert re.search(r"\b4 bytes before its start", message), message
    assert torch.equal(base, before)

    with pytest.raises(ValueError, match="memcheck must be one of 'view', 'allocation'"):
        emu.launch(asm, "behind", 1, 64, [p, out, 64], memcheck="storage")


def test_read_only_arguments_are_mapped_read_only_and_not_copied_for_rollback():
    """A pointer LLVM marks read_only costs no rollback copy (the copy scaled with every argument,
    gigabytes for a paged cache); a write through it would fault instead of going unnoticed."""
    from rocke.compiler import compile_ir as compile_kernel
    from rocke.dsl import Kernel, f32

    k = Kernel("copy_ro", workgroup_size=64)
    src, dst = k.arg_ptr("src", f32, readonly=True), k.arg_ptr("dst", f32)
    i = k.thread_id(0)
    dst.store(i, src.load(i) * 2.0)
    ck = compile_kernel(k.ir(), name=k.name)
    big = torch.arange(1 << 16, dtype=torch.float32)          # 256 KiB, only 64 elements read
    out = torch.zeros(64)
    report = emu.launch(ck.asm, ck.name, (1,), (64,), [big, out])
    assert torch.equal(out, big[:64] * 2)
    assert report.shadow_bytes == out.numel() * 4

    # metadata that calls the written pointer read-only: the store faults, nothing changes
    lying = ck.asm.replace(".actual_access:  write_only", ".actual_access:  read_only")
    assert lying != ck.asm
    out.zero_()
    with pytest.raises(emu.MemoryFault, match="read-only"):
        emu.launch(lying, ck.name, (1,), (64,), [big, out])
    assert not out.any()


TWO_STORES = """
@tile = internal addrspace(3) global [256 x float] undef, align 16
define amdgpu_kernel void @two_stores(ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,256" {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %ps = getelementptr float, ptr addrspace(3) @tile, i32 %tid
  store volatile float 1.0, ptr addrspace(3) %ps
  %next = add i32 %tid, 64
  %wrapped = and i32 %next, 255
  %pn = getelementptr float, ptr addrspace(3) @tile, i32 %wrapped
  store volatile float 2.0, ptr addrspace(3) %pn
  ret void
}
"""


@pytest.mark.parametrize("log_rows", [None, 1])
def test_write_after_another_waves_write_names_the_earlier_store(monkeypatch, log_rows):
    """The earlier writer's pc comes from the race checker's write log, or from its replay into
    `writer_pc` once the log is long (log_rows=1: every write is replayed)."""
    from rocke.emu import machine
    if log_rows is not None:
        monkeypatch.setattr(machine, "READ_LOG_ROWS", log_rows)
    asm = compile_ir(TWO_STORES)
    stores = [n for n, line in enumerate(asm.splitlines(), 1) if "ds_write" in line]
    assert len(stores) == 2
    with pytest.raises(emu.LdsRace) as info:
        emu.launch(asm, "two_stores", 1, 256, [torch.zeros(1)])
    message = str(info.value)
    assert re.search(rf"wave 0 writes it at line {stores[1]} .* and wave 1 writes it at "
                     rf"line {stores[0]} ", message), message
